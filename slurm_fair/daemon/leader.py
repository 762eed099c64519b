"""The daemon's leader lock: one daemon runs rounds on a database, whichever host it is on.

The local ``flock`` (service.lock) stops a second daemon on the same host. Two controller hosts that share the
database (docs/daemon.md, "High availability": on the StateSaveLocation's shared storage) cannot see each
other's flock, so the database holds a leader lock with an expiry (a :class:`~slurm_fair.store.Leader` row; the
store table is still called ``lease``, as are the words of the log lines and messages): the holder (host =
``daemon.host_id`` or the host name, pid, a random token per process) and when it expires. A daemon takes or
renews it before every round and between rounds every ``period`` / ``HEARTBEATS`` (:func:`renewal_due`, looked
at every period / 8), for
:func:`lease_length` = max(``LEASE_PERIODS`` × ``daemon.period``, 2 × (``cluster.timeout`` + ``MAX_SKEW``)); while
a live lock is held by another host it runs no round (:class:`LeaderHeld`: ``daemon --once`` exits 1, the loop
waits for the lock to expire). It takes the lock over when it has expired, or when its holder is on the same host
(the flock this daemon holds shows that holder is gone). A daemon stopped by SIGTERM/SIGINT gives the lock up
(the other host may take over at once), and so does one that stands by (``daemon.only_on_primary``); a crash, a
kill or ``daemon --once`` leaves it to expire: the other host takes over at most one lease length after the last
renewal, so within 2 periods of the holder's death (1.5 periods + its wait step) when the period is at least
(4/3) × (``cluster.timeout`` + ``MAX_SKEW``).

**Fencing** (:func:`fence`): before each write batch (the site limits recorded, every limit, SiteFactor, retype,
signal, requeue or cancel call into Slurm) the holder checks in the database that the row is still its own —
compare and swap: nobody else can have acted since its last renewal — and renews it when less than
:func:`fence_margin` (``cluster.timeout`` + ``MAX_SKEW``) is left. A write therefore starts only with at least
that margin left on the lease and ends (its timeout) before another host may take it, whatever the clocks differ by
up to ``MAX_SKEW``; a daemon whose row changed hands raises :class:`LeaseLost` and writes nothing more.

:func:`may_hold`, :func:`renewed`, :func:`lease_length`, :func:`renewal_due` and :func:`fence_needs` are pure;
:func:`acquire`, :func:`release`, :func:`fence` and :func:`check_free` are the thin store I/O (a compare-and-swap
of the row, so two daemons deciding at once cannot both win).
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..cluster.errors import ClusterUnreachable
from ..errors import SlurmFairError
from ..store import Leader, Store

LEASE_PERIODS = 1.5  # the leader lock lasts this many daemon periods after its last renewal (at least)
HEARTBEATS = 4  # renewals per period between rounds
MAX_SKEW = 5.0  # seconds two controllers' clocks may differ by (NTP keeps them far closer)


class LeaderHeld(SlurmFairError):
    """A live leader lock is held by a daemon on another host (``lock``: that row)."""

    def __init__(self, msg: str, lock: Leader | None = None):
        super().__init__(msg)
        self.lock = lock


class LeaseLost(ClusterUnreachable):
    """The lease changed hands since this daemon last renewed it: it writes nothing more (to Slurm or the store)
    in this round. A ClusterUnreachable, so the round stops at once and is recorded ``unreachable``."""


@dataclass(frozen=True)
class Me:
    """This process as a leader lock holder."""

    host: str
    pid: int
    token: str


@dataclass(frozen=True)
class Verdict:
    ok: bool
    why: str  # free | mine | expired | same host | held


def whoami(host_id: str = "") -> Me:
    """This process: ``host_id`` ("" = this machine's host name), its pid and a new random token."""
    return Me(host_id or socket.gethostname(), os.getpid(), secrets.token_hex(6))


def holds(lock: Leader | None, me: Me) -> bool:
    return lock is not None and (lock.host, lock.pid, lock.token) == (me.host, me.pid, me.token)


def may_hold(lock: Leader | None, me: Me, now: float) -> Verdict:
    """May ``me`` take or renew ``lock`` at ``now``? The caller holds the local flock on the database."""
    if lock is None:
        return Verdict(True, "free")
    if holds(lock, me):
        return Verdict(True, "mine")
    if lock.expires <= now:
        return Verdict(True, "expired")
    if lock.host == me.host:  # same host: our flock shows its holder has stopped
        return Verdict(True, "same host")
    return Verdict(False, "held")


def renewed(lock: Leader | None, me: Me, now: float, ttl: float) -> Leader:
    """The leader lock ``me`` writes at ``now``: ``acquired`` kept when it was already ``me``'s."""
    acquired = lock.acquired if holds(lock, me) and lock is not None else now
    return Leader(me.host, me.pid, me.token, acquired, now + ttl)


def lease_length(period: float, timeout: float) -> float:
    """Seconds a lease lasts after each renewal: ``LEASE_PERIODS`` periods, and at least twice the fencing
    margin (so that a renewal at a write leaves the margin and more)."""
    return max(LEASE_PERIODS * period, 2 * fence_margin(timeout))


def fence_margin(timeout: float) -> float:
    """A write into Slurm starts only with this much of the lease left: its timeout plus the clocks' skew."""
    return timeout + MAX_SKEW


def renewal_due(lock: Leader | None, me: Me, now: float, length: float, period: float) -> bool:
    """Between rounds: renew ``me``'s lease (heartbeat) once ``period`` / ``HEARTBEATS`` has passed since its last
    renewal (``expires`` − ``length``); a lease that is not ``me``'s is due at once (the renewal then says who
    holds it)."""
    if not holds(lock, me) or lock is None:
        return True
    return now >= lock.expires - length + period / HEARTBEATS


def fence_needs(lock: Leader | None, me: Me, now: float, margin: float) -> str:
    """Before a write: ``ok`` (``me``'s lease has ``margin`` left), ``renew`` (``me``'s row, unchanged since its
    last renewal, with less left or even expired: nobody else can have acted, a compare-and-swap renews it) or
    ``lost`` (another process's row, or none)."""
    if not holds(lock, me) or lock is None:
        return "lost"
    return "ok" if lock.expires - now >= margin else "renew"


def describe(lock: Leader, now: float) -> str:
    """``host (pid P, id T) until HH:MM:SS UTC (in N s)``."""
    until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(lock.expires))
    return f"{lock.host} (pid {lock.pid}, id {lock.token}) until {until} (in {max(lock.expires - now, 0):.0f} s)"


def _refusal(lock: Leader, now: float, what: str) -> LeaderHeld:
    return LeaderHeld(f"{what}: the database's lease is held by the slurm-fair daemon on {describe(lock, now)}; "
                      "one daemon per cluster (docs/daemon.md, 'High availability'): stop that daemon "
                      "(SIGTERM gives the lease up) or wait until the lease expires", lock)


def acquire(store: Store, me: Me, now: float, ttl: float) -> tuple[Leader, str]:
    """Take or renew the leader lock for ``ttl`` seconds; returns it and the verdict's reason. Raises LeaderHeld
    naming the holder and the expiry."""
    for _ in range(3):  # another daemon may write between our read and our swap: read and decide again
        cur = store.leader()
        v = may_hold(cur, me, now)
        if not v.ok:
            assert cur is not None
            raise _refusal(cur, now, "refusing to run rounds")
        new = renewed(cur, me, now, ttl)
        if store.swap_leader(cur, new):
            return new, v.why
    raise LeaderHeld("refusing to run rounds: the database's lease changed hands three times in a row")


def fence(store: Store, me: Me, now: float, length: float, margin: float) -> Leader:
    """Before a write batch: ``me``'s lease with at least ``margin`` left, renewed for ``length`` when needed
    (:func:`fence_needs`); raises LeaseLost when the row is no longer ``me``'s, or changed between the read and
    the swap."""
    cur = store.leader()
    need = fence_needs(cur, me, now, margin)
    if need == "ok":
        assert cur is not None
        return cur
    if need == "renew":
        new = renewed(cur, me, now, length)
        if store.swap_leader(cur, new):
            return new
        cur = store.leader()
    holder = "nobody" if cur is None else describe(cur, now)
    raise LeaseLost(f"the lease was lost (now held by {holder}): this daemon writes nothing more this round")


def release(store: Store, me: Me, now: float) -> bool:
    """Give a live leader lock up if ``me`` holds it, or an earlier process on this host did (the flock shows it has
    stopped): it expires now; the row keeps who held it last. True if given up."""
    cur = store.leader()
    if cur is None or cur.expires <= now or may_hold(cur, me, now).why not in ("mine", "same host"):
        return False
    return store.swap_leader(cur, Leader(cur.host, cur.pid, cur.token, cur.acquired, min(cur.expires, now)))


def check_free(store: Store, me: Me, now: float, what: str) -> None:
    """Raise LeaderHeld when a live lock is held by a daemon on another host (``rollback``: that daemon would
    put its limits back). The caller holds the local flock."""
    cur = store.leader()
    if not may_hold(cur, me, now).ok:
        assert cur is not None
        raise _refusal(cur, now, what)


#: the Cluster methods that write into Slurm: each is fenced by the lease (:class:`FencedCluster`)
WRITES = frozenset({"set_accounts_gpu_limits", "set_site_factors", "set_job_gpu_type", "signal_job",
                    "requeue_job", "cancel_job"})


class FencedCluster:
    """The round's cluster with each write into Slurm (:data:`WRITES`) fenced by the lease (:func:`fence`), and
    :meth:`check_lease` for the round's own fenced store writes; reads pass through."""

    def __init__(self, cluster: Any, store: Store, me: Me, length: float, margin: float,
                 clock: Callable[[], float] = time.time):
        self._cluster, self._store, self._me = cluster, store, me
        self._length, self._margin, self._clock = length, margin, clock

    def check_lease(self) -> None:
        fence(self._store, self._me, self._clock(), self._length, self._margin)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._cluster, name)
        if name not in WRITES:
            return attr

        def fenced(*args: Any, **kwargs: Any) -> Any:
            self.check_lease()
            return attr(*args, **kwargs)

        return fenced
