"""The daemon's leader lock: one daemon runs rounds on a database, whichever host it is on.

The local ``flock`` (service.lock) stops a second daemon on the same host. Two controller hosts that share the
database (docs/daemon.md, "High availability": on the StateSaveLocation's shared storage) cannot see each
other's flock, so the database holds a leader lock with an expiry (a :class:`~slurm_fair.store.Leader` row; the
store table is still called ``lease``, as are the words of the log lines and messages): the holder (host =
``daemon.host_id`` or the host name, pid, a random token per process) and when it expires. A daemon takes or
renews it before every round, for ``LOCK_PERIODS`` × ``daemon.period``; it refuses to run rounds
(:class:`LeaderHeld`, exit 1) while a live lock is held by another host. It takes the lock over when it has
expired, or when its holder is on the same host (the flock this daemon holds shows that holder is gone). A daemon
stopped by SIGTERM/SIGINT gives the lock up (the other host may take over at once), and so does one that stands
by (``daemon.only_on_primary``); a crash, a kill or ``daemon --once`` leaves it to expire.

:func:`may_hold` and :func:`renewed` are pure; :func:`acquire`, :func:`release` and :func:`check_free` are the
thin store I/O (a compare-and-swap of the row, so two daemons deciding at once cannot both win).
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from dataclasses import dataclass

from ..errors import SlurmFairError
from ..store import Leader, Store

LOCK_PERIODS = 3  # the leader lock lasts this many daemon periods after its last renewal


class LeaderHeld(SlurmFairError):
    """A live leader lock is held by a daemon on another host."""


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


def describe(lock: Leader, now: float) -> str:
    """``host (pid P, id T) until HH:MM:SS UTC (in N s)``."""
    until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(lock.expires))
    return f"{lock.host} (pid {lock.pid}, id {lock.token}) until {until} (in {max(lock.expires - now, 0):.0f} s)"


def _refusal(lock: Leader, now: float, what: str) -> LeaderHeld:
    return LeaderHeld(f"{what}: the database's lease is held by the slurm-fair daemon on {describe(lock, now)}; "
                      "one daemon per cluster (docs/daemon.md, 'High availability'): stop that daemon "
                      "(SIGTERM gives the lease up) or wait until the lease expires")


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
