"""The slurm-fair daemon loop (``slurm-fair daemon``).

* One instance per database: an exclusive ``fcntl.flock`` on ``<database>.lock`` (a second daemon exits 1
  with a message naming the lock file), and one per cluster: before every round the daemon takes or renews
  the database's leader lock (``daemon/leader.py``; its log lines and messages call it the lease), and between
  rounds every period / 4 (a heartbeat; a lease found in another's hands stops the polls that publish); each
  write into Slurm is fenced by it (the round's cluster is a ``leader.FencedCluster``). A live lock held by a
  daemon on another host makes ``daemon --once`` exit 1 with a message naming the holder and when the lock
  expires; the loop logs it once, holds neither the flock nor the database, and tries again when the lock
  expires (or every period / 4). SIGTERM/SIGINT give the lock up.
* ``daemon.only_on_primary``: a lock file held by another daemon when this host's slurmctld serves is waited for
  (logged as ``standby``, asked again like a lease) instead of exit 1: it may be the other controller's daemon,
  the lock file being on the storage both share.
* ``daemon.only_on_primary``: before every round, ``scontrol ping`` (``cluster/ping.py``); unless this host is
  the slurmctld that serves (the first one UP), the round is skipped: one ``standby`` log line (when the reason
  changes), nothing written to Slurm, no type map or status refresh, the leader lock given up, the database closed
  and the flock dropped (both may be on storage the other controller shares); they are taken again, and
  metrics served, from the first round this host serves. A daemon standing by asks again every 30 s
  (``STANDBY_POLL``, or every period / 4 if shorter); one that serves asks before each round.
* A round every ``daemon.period`` seconds; one log line per round on stderr (status, policy, accounts,
  changes, seconds).
* SIGTERM/SIGINT: the current round finishes, then the daemon exits 0. SIGHUP: the config file is read again
  at the next wake-up; an invalid file is logged and the old config kept. (The database path and the
  cluster backend are read once at start.)
* Early rounds: every few seconds the daemon looks at the cluster (one snapshot, or less often when
  snapshots are slow: at most a third of the time is spent polling); a round runs ``daemon.early_round_after``
  seconds after it first sees (debounce), unless the periodic round comes first: an account that had no GPU
  jobs in the last round with pending GPU jobs now (it gets its guarantee), or a job held back by its
  account's limit while GPUs it could use stand idle (a claim whose jobs started elsewhere or went away; each
  such job triggers once) — ``plan.early_triggers``, the same rule the simulator runs.
* Type map: each poll publishes the GPU type map again from its snapshot under the last ok round's decisions
  (the rooms follow GPUs freed and jobs submitted since the round; guarantees and limits stay the round's).
* Status file (``daemon.publish_status``): each poll writes the public status file again from its snapshot (GPUs
  in use, idle, pending, limits in Slurm now; guarantees and claims stay the round's), for ``slurm-fair why``.
* Preemption: when a signalled job's grace ends before the next periodic round, the round runs 1 s after it
  (so the requeue is not delayed by up to a period).
* Metrics: unless ``--once``, the daemon serves Prometheus metrics on ``metrics.listen`` (``daemon/metrics.py``),
  refreshed from the store at start and after every round. An address that cannot be bound (taken,
  unresolvable) is logged and recorded as a ``metrics`` event, and the daemon runs on without metrics; a
  failed refresh keeps the previous values.
* ``--once`` (``serve(once=True)``) returns ``ONCE_FAILED`` (3) when the round it ran failed: recorded ``error``
  or ``solver-failed``, or failed before it could be recorded; 0 otherwise (``ok``, ``dry-run``, ``unreachable``:
  recorded, nothing changed; or no round because this host stands by). Another host's live leader lock raises
  LeaderHeld (exit 1), as without ``--once``.
* Cluster errors never stop the daemon: rounds are recorded as ``unreachable``/``error`` and retried. No
  other failure does either: run_round records any exception on its round; one that happens before the
  round could be recorded (the database locked past every retry) is logged and the next round runs.
"""

from __future__ import annotations

import fcntl
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

from ..config import Config
from .. import config as config_mod
from .. import statefiles
from ..cluster import ping as ping_mod
from ..cluster.errors import ClusterError
from ..errors import SlurmFairError
from ..store import Store
from . import leader as leader_mod
from . import plan as P
from .plan.binding import settle
from . import status_file, type_map_file
from .preemption import wanted as preemption_wanted
from .preemption.store import PreemptionStore
from .preemption import unrequeueable
from .metrics import Exporter
from .round import RoundResult, cause, run_round

MIN_POLL = 5.0
STANDBY_POLL = 30.0  # a daemon standing by asks scontrol ping again this often (or every period / 4, if shorter)


class AlreadyRunning(SlurmFairError):
    pass


def log(msg: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} slurm-fair: {msg}", file=sys.stderr, flush=True)


def lock(db_path: Path) -> Any:
    """Take the single-instance lock; returns the open lock file (keep it open). The lock file is private
    (0600) and opened without following symlinks (:func:`statefiles.open_lock_file`)."""
    path = Path(str(db_path) + ".lock")
    statefiles.make_dirs(path.parent)
    f = statefiles.open_lock_file(path)  # 0600, no symlink followed, nothing truncated before the flock
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise AlreadyRunning(f"another slurm-fair daemon holds {path}") from None
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


class _Seat:
    """What a daemon holds while it may run rounds: the local flock and the open database. A daemon that stands
    by (``daemon.only_on_primary``) holds neither, so that the other controller's daemon can take both (the
    database and its lock file may be on storage both hosts share, docs/daemon.md "High availability")."""

    def __init__(self, db_path: Path):
        self.db_path = db_path
        self.lockf: Any = None
        self.store: Store | None = None

    def take(self) -> Store:
        if self.store is None:
            self.lockf = lock(self.db_path)
            try:
                self.store = Store(self.db_path)
            except BaseException:
                self.lockf.close()
                self.lockf = None
                raise
        return self.store

    def leave(self, me: leader_mod.Me | None) -> bool:
        """Close the database and drop the flock; with ``me``, first give its leader lock up. True if given up."""
        given = False
        try:
            if self.store is not None and me is not None:
                given = leader_mod.release(self.store, me, time.time())
        finally:
            if self.store is not None:
                self.store.close()
                self.store = None
            if self.lockf is not None:
                self.lockf.close()
                self.lockf = None
        return given


def _reloaded(cfg: Config, cfg_path: str | None) -> Config:
    """The config file read again (SIGHUP); an invalid one is logged and ``cfg`` kept."""
    try:
        new = config_mod.load(cfg_path)
    except SlurmFairError as e:
        log(f"config reload failed, keeping the old one: {e}")
        return cfg
    if new.metrics.listen != cfg.metrics.listen:
        log(f"metrics.listen changed to {new.metrics.listen!r}: takes effect when the daemon restarts")
    log(f"config reloaded from {new.source} (policy {new.policy.name}, period {new.daemon.period:g} s)")
    return new


def _sleep_until(deadline: float, state: dict) -> None:
    """Sleep until ``deadline`` (monotonic) or a stop or reload signal."""
    while time.monotonic() < deadline and not state["stop"] and not state["reload"]:
        time.sleep(0.2)


def connect_cluster(cfg: Config) -> Any:
    from ..cluster import connect  # the backend factory

    return connect(backend=cfg.cluster.backend, timeout=float(cfg.cluster.timeout))


def refresh_type_map(res: RoundResult | None, snapshot: Any, cfg: Config, dry_run: bool = False) -> bool:
    """Publish the type map again from a poll's snapshot under the last ok round's decisions (``plan.type_map``):
    rooms follow the GPUs that free up and the jobs that arrive between rounds. True if the file changed;
    a failure is logged, never raised."""
    if (res is None or res.status != "ok" or res.decisions is None or cfg.type_map_path is None
            or dry_run or cfg.daemon.dry_run):
        return False
    try:
        view = P.PartitionView.of(snapshot, cfg.cluster.partitions)
        return type_map_file.publish_type_map(cfg, P.type_map(res.decisions, view, cfg), view)
    except Exception as e:  # noqa: BLE001 - the round's map stays; the next poll tries again
        log(f"type map refresh failed: {cause(e)}")
        return False


def refresh_status(res: RoundResult | None, snapshot: Any, cfg: Config) -> bool:
    """Write the public status file again from a poll's snapshot (GPUs in use, idle, pending and limits now; the
    round's guarantees and claims): ``slurm-fair why`` sees what changed since the round. True if written; a
    failure is logged, never raised."""
    if res is None or res.public is None or res.decisions is None or cfg.status_path is None:
        return False
    try:
        res.public = status_file.refreshed(res.public, snapshot, res.decisions, cfg)
        status_file.write_status(cfg.status_path, res.public)
        return True
    except Exception as e:  # noqa: BLE001 - the round's file stays; the next poll tries again
        log(f"status file refresh failed: {cause(e)}")
        return False


def standby_reason(cfg: Config, host: str) -> str | None:
    """None when this daemon may run a round (``daemon.only_on_primary`` off, or ``host`` is the slurmctld that
    serves); else why it stands by (``scontrol ping`` failing included: it cannot tell)."""
    if not cfg.daemon.only_on_primary:
        return None
    try:
        return ping_mod.standby_reason(ping_mod.ping(timeout=float(cfg.cluster.timeout)), host)
    except ClusterError as e:
        return f"cannot tell which slurmctld serves: {e}"


def preemption_wakeup(store: Store, cfg: Config, now: float, since: float | None = None) -> float | None:
    """Seconds until the round that requeues the first signalled job whose grace ends (1 s after it), or None
    (preemption and upgrade moves off, or nothing waiting). The loop wakes up then instead of after a whole period.
    ``since``: when the round just run started — a preemption already due then was that round's to act on, and
    one it left open (its claim's other victims still in their grace, say) does not bring the next round
    forward: waking up for it again at once would run rounds in a loop."""
    if not preemption_wanted(cfg):  # no snapshot here: the Slurm version is not checked (as before)
        return None
    rule = cfg.preemption.unrequeueable  # held-back jobs are cancelled in time under "cancel" and a bounded "hold-back"
    due = PreemptionStore(store).next_due(held_back=unrequeueable.ends(rule, unrequeueable.end_after(cfg.preemption)))
    if due is None or (since is not None and due + 1.0 <= since):
        return None
    return max(due + 1.0 - now, 0.0)


def _url(host: str, port: int) -> str:
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}/metrics"


def start_metrics(cfg: Config, store: Store, port: int | None = None) -> Exporter | None:
    """Serve ``/metrics`` on ``metrics.listen`` (``port`` overrides its port; 0 = any free one, for tests);
    None when off or when it cannot be served. Never raises: a bind failure is logged and recorded as a
    ``metrics`` event, and the daemon goes on without metrics."""
    address = cfg.metrics.address
    if address is None:
        log('metrics: off (metrics.listen = "")')
        return None
    host = address[0]
    port = address[1] if port is None else port
    exporter = Exporter()
    try:
        exporter.refresh(store, cfg)
    except Exception as e:  # noqa: BLE001 - served empty until the next round's refresh
        log(f"metrics: reading the last round failed: {cause(e)}")
    try:
        bound = exporter.serve(host, port)
    except Exception as e:  # noqa: BLE001 - OSError (address in use, not resolvable, not local), UnicodeError
        why = (e.strerror if isinstance(e, OSError) and e.strerror else None) or str(e) or type(e).__name__
        msg = (f"cannot serve metrics on {cfg.metrics.listen} (port {port}): {why}; "
               "running without metrics")
        log(msg)
        try:
            store.event("metrics", msg, data={"listen": cfg.metrics.listen, "port": port, "error": why})
        except Exception as e2:  # noqa: BLE001 - the log line says it
            log(f"metrics: recording the failure failed too: {cause(e2)}")
        return None
    log(f"metrics: serving {_url(host, bound)}")
    return exporter


def refresh_metrics(exporter: Exporter | None, store: Store, cfg: Config | None = None) -> None:
    """New values after a round; a failure keeps the previous ones (logged)."""
    if exporter is None:
        return
    try:
        exporter.refresh(store, cfg)
    except Exception as e:  # noqa: BLE001 - metrics never stop the daemon
        log(f"metrics: refresh failed, serving the previous values: {cause(e)}")


def _lease_length(cfg: Config) -> float:
    return leader_mod.lease_length(float(cfg.daemon.period), float(cfg.cluster.timeout))


def _standby_poll(cfg: Config) -> float:
    return min(float(cfg.daemon.period) / leader_mod.HEARTBEATS, STANDBY_POLL)


def _fenced(cluster: Any, store: Store, me: leader_mod.Me, cfg: Config) -> Any:
    """The round's cluster: each write into Slurm fenced by the lease (None stays None: no connection)."""
    if cluster is None:
        return None
    return leader_mod.FencedCluster(cluster, store, me, _lease_length(cfg),
                                    leader_mod.fence_margin(float(cfg.cluster.timeout)))


def _heartbeat(store: Store, me: leader_mod.Me, cfg: Config) -> bool:
    """Between rounds: renew the lease when due (:func:`leader.renewal_due`). False when another daemon holds it
    now (this one stops acting: logged); a failure to read or write the database is logged and tried again."""
    try:
        now = time.time()
        if leader_mod.renewal_due(store.leader(), me, now, _lease_length(cfg), float(cfg.daemon.period)):
            leader_mod.acquire(store, me, now, _lease_length(cfg))
        return True
    except leader_mod.LeaderHeld as e:
        log(f"lease lost: {e}; no more writes here")
        return False
    except Exception as e:  # noqa: BLE001 - the fence still guards every write
        log(f"cannot renew the lease: {cause(e)}")
        return True


def _hold_lock(seat: _Seat, store: Store | None, me: leader_mod.Me, cfg: Config, why: str | None,
               last_standby: str | None) -> str | None:
    """Before a round: stand by (give the leader lock up, close the database: ``why`` says why), or take or
    renew the leader lock. Returns why no round runs now (None: it runs). Raises LeaderHeld (another host's
    daemon holds a live lock)."""
    try:
        if why is not None:
            if seat.leave(me):
                log(f"lease given up (host {me.host})")
            if why != last_standby:
                log(f"standby: {why}; no round here (nothing written to Slurm; database and lock left alone)")
        else:
            held, how = leader_mod.acquire(store, me, time.time(), _lease_length(cfg))
            if how != "mine":
                log(f"lease taken ({how}): {leader_mod.describe(held, time.time())}")
    except leader_mod.LeaderHeld:
        raise
    except Exception as e:  # noqa: BLE001 - e.g. the database locked past every retry: no round now
        why = f"cannot read or renew the lease: {cause(e)}"
        log(f"{why}; no round")
    return why


#: ``daemon --once``'s exit status when its round failed (1: refused to start or run; 2: bad input)
ONCE_FAILED = 3
#: round statuses that mean the round failed (``unreachable`` does not: recorded, nothing changed)
FAILED_STATUSES = ("error", "solver-failed")


def _one_round(cluster: Any, store: Store, cfg: Config, dry_run: bool) -> tuple[RoundResult | None, bool]:
    """Run a round (logged), or record an ``unreachable`` one when there is no cluster connection (None); None
    too when nothing could be recorded (logged: the next round runs). The flag: whether the round failed (a
    status in FAILED_STATUSES, or nothing recorded)."""
    res = None
    try:
        if cluster is not None:
            res = run_round(cluster, store, cfg, dry_run=dry_run)
            log(res.log_line())
        else:
            store.finish_round(store.begin_round(cfg.policy.name, cfg.policy.solver), "unreachable",
                               message="cannot connect to the cluster")
    except Exception as e:  # noqa: BLE001 - e.g. the database locked past every retry: next round
        log(f"round failed before it could be recorded: {cause(e)}")
        return res, True
    return res, res is not None and res.status in FAILED_STATUSES


def _next_round_at(store: Store, cfg: Config, cluster: Any, res: RoundResult | None, round_began: float) -> float:
    """When the next round runs (monotonic): a period on, or 1 s after a signalled job's grace ends."""
    next_round = time.monotonic() + float(cfg.daemon.period)
    # only after a round that could preempt: a failed round retries at the normal pace, not in a loop
    try:
        due = (preemption_wakeup(store, cfg, time.time(), since=round_began)
               if cluster is not None and res is not None and res.status == "ok" else None)
    except Exception as e:  # noqa: BLE001
        log(f"reading the preemption state failed: {cause(e)}")
        due = None
    if due is not None:
        next_round = min(next_round, time.monotonic() + due)
        log(f"preemption: a grace period ends in {due:.0f} s; next round then")
    return next_round


def _poll(cluster: Any, res: RoundResult | None, cfg: Config, dry_run: bool, last_demand: dict[str, int],
          triggered: set[int], early_at: float | None) -> tuple[float | None, set[int]]:
    """One look at the cluster between rounds: the type map and the status file refreshed from its snapshot,
    the early-round triggers checked. Returns when the early round runs (None: none yet) and the jobs that
    triggered one (a job triggers once while it stays blocked)."""
    try:
        snap = cluster.snapshot()
        # demand as the round settles it: a begin time due within a period counts (plan/binding.py)
        snap = settle(snap, snap.taken_at + float(cfg.daemon.period), {})
        refresh_type_map(res, snap, cfg, dry_run)
        refresh_status(res, snap, cfg)
        trig = P.early_triggers(snap, last_demand, cfg)
        blocked = trig.blocked - triggered
        triggered = set(trig.blocked)  # a job triggers once while it stays blocked
        if early_at is None and (trig.newcomers or blocked):
            early_at = time.monotonic() + float(cfg.daemon.early_round_after)
            what = (f"pending GPU jobs of {', '.join(sorted(trig.newcomers))} (no share yet)"
                    if trig.newcomers else
                    f"job(s) {', '.join(map(str, sorted(blocked)[:5]))} held back by a limit "
                    "while GPUs they can use are idle")
            log(f"{what}: early round in {cfg.daemon.early_round_after:g} s")
    except ClusterError:
        pass  # the next round records it
    return early_at, triggered


def _between_rounds(cluster: Any, res: RoundResult | None, cfg: Config, cfg_path: str | None, dry_run: bool,
                    state: dict, next_round: float, last_demand: dict[str, int],
                    triggered: set[int], store: Store, me: leader_mod.Me) -> tuple[Config, set[int]]:
    """Wait for the next round (``next_round``, monotonic, or an early round), renewing the lease when due (a
    lease lost ends the wait: the next round's lease check waits for it), polling the cluster every
    max(MIN_POLL, 3 x the last poll's time) s and reloading the config on SIGHUP. Returns the config and the
    jobs that triggered an early round."""
    early_at: float | None = None
    poll_every = MIN_POLL
    last_poll = 0.0
    next_beat = 0.0  # the lease row is read every period / 8 (not at every tick: it may be on NFS)
    while time.monotonic() < min(next_round, early_at or next_round) and not state["stop"]:
        if time.monotonic() >= next_beat:
            if not _heartbeat(store, me, cfg):
                break
            next_beat = time.monotonic() + float(cfg.daemon.period) / (2 * leader_mod.HEARTBEATS)
        if state["reload"]:
            state["reload"] = False
            cfg = _reloaded(cfg, cfg_path)
            next_round = min(next_round, time.monotonic() + float(cfg.daemon.period))
        if cluster is not None and time.monotonic() - last_poll >= poll_every:
            t = time.monotonic()
            early_at, triggered = _poll(cluster, res, cfg, dry_run, last_demand, triggered, early_at)
            took = time.monotonic() - t
            last_poll = time.monotonic()
            poll_every = max(MIN_POLL, 3 * took)
        time.sleep(0.2)
    return cfg, triggered


def serve(cfg_path: str | None, once: bool = False, dry_run: bool = False,
          cluster_factory: Callable[[Any], Any] = connect_cluster,
          standby: Callable[[Config, str], str | None] = standby_reason) -> int:
    """Run the daemon; returns the exit status: 0, or with ``once`` ONCE_FAILED when its round failed. Raises
    LeaderHeld (exit 1) when another host's daemon holds the database's leader lock."""
    cfg = config_mod.load(cfg_path)
    me = leader_mod.whoami(cfg.daemon.host_id)
    seat = _Seat(cfg.database_path)
    state = {"stop": False, "reload": False}
    last_standby: str | None = None
    last_holder: str | None = None
    metrics_tried = False
    failed = False

    def on_term(signum: int, _frame: Any) -> None:
        state["stop"] = True

    def on_hup(signum: int, _frame: Any) -> None:
        state["reload"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, on_hup)
    log(f"started (pid {os.getpid()}, host {me.host}, config {cfg.source}, database {cfg.database_path}, policy {cfg.policy.name}, "
        f"period {cfg.daemon.period:g} s{', dry run' if dry_run or cfg.daemon.dry_run else ''})")
    cluster = None
    store: Store | None = None
    last_demand: dict[str, int] = {}
    triggered: set[int] = set()
    exporter: Exporter | None = None
    try:
        while True:
            why = standby(cfg, me.host)
            if why is None:
                opened = seat.store is None
                try:
                    store = seat.take()  # AlreadyRunning, StoreError: exit 1, as when the daemon starts
                except AlreadyRunning as e:
                    if once or not cfg.daemon.only_on_primary:
                        raise
                    # HA: the lock file is on the shared storage; the other host's daemon holds it (it stalled
                    # and has not gone standby yet, or a dead host's lock not yet dropped): wait, as for the lease
                    why = f"{e} (the other controller's daemon, through the shared storage?)"
                else:
                    if opened and not metrics_tried and not once:  # once: a daemon waiting reopens every few s
                        metrics_tried = True
                        exporter = start_metrics(cfg, store)
            wait = _standby_poll(cfg)
            try:
                why = last_standby = _hold_lock(seat, store, me, cfg, why, last_standby)
            except leader_mod.LeaderHeld as e:
                if once:
                    raise
                seat.leave(None)  # the holder's host may need the lock file and the database: hold neither
                held = e.lock
                if held is None or held.token != last_holder:
                    log(f"{e}; waiting here (no round) until it expires")
                last_holder = held.token if held is not None else None
                why = last_standby = "lease held by another host"
                if held is not None:
                    wait = min(wait, max(held.expires - time.time(), 0.0) + 0.2)
            if why is not None:
                if once or state["stop"]:
                    break
                _sleep_until(time.monotonic() + wait, state)
                if state["reload"]:
                    state["reload"] = False
                    cfg = _reloaded(cfg, cfg_path)
                if state["stop"]:
                    break
                continue
            if cluster is None:
                try:
                    cluster = cluster_factory(cfg)
                except ClusterError as e:
                    log(f"cannot connect to the cluster: {e}")
            round_began = time.time()
            last_holder = None
            res, failed = _one_round(_fenced(cluster, store, me, cfg), store, cfg, dry_run)
            if res is not None and res.plan is not None:
                last_demand = dict(res.plan.demand)
            refresh_metrics(exporter, store, cfg)
            if once or state["stop"]:
                break
            next_round = _next_round_at(store, cfg, cluster, res, round_began)
            cfg, triggered = _between_rounds(cluster, res, cfg, cfg_path, dry_run, state, next_round, last_demand,
                                             triggered, store, me)
            if state["stop"]:
                break
    finally:
        log("stopping")
        if exporter is not None:
            exporter.close()
        try:  # a clean stop gives the leader lock up: the other host may take over at once
            if seat.leave(me if state["stop"] else None):
                log("lease given up")
        except Exception as e:  # noqa: BLE001 - it expires on its own
            log(f"giving the lease up failed (it expires on its own): {cause(e)}")
    return ONCE_FAILED if once and failed else 0
