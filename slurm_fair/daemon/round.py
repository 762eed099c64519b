"""One allocation round: observe Slurm, solve, round, apply, record (what it records, and the transaction that
writes it: ``daemon/round_record.py``).

Crash safety (a daemon killed at any point converges on restart without double effects):

* The round row is created first with status ``running`` (its own tiny transaction); everything else the
  round decides (shares, placements, the carried deviations and deficits, what was applied, the managed
  accounts, events) is written in ONE transaction after Slurm was changed. A round that was interrupted
  stays ``running`` until the next round marks it ``error`` ("interrupted").
* Applying is idempotent: limits and SiteFactors are absolute values and only those that differ from what
  the snapshot of *this* round shows are written. A round repeated after a crash (same carried deviations,
  since they are committed only with the round that applied them) computes the same plan and writes only
  what is still missing.
* Fault injection for the crash test: ``SLURM_FAIR_PAUSE_BEFORE_APPLY=<seconds>`` makes the round sleep
  between solving and applying (it prints ``pausing N s before apply`` on stderr first). Never set it in
  production.

Failure handling: an unreachable cluster gives a round with status ``unreachable`` and changes nothing
more (the carried state is not advanced, so the next round retries); a failed solve gives ``solver-failed``
and leaves the last applied limits in Slurm. One bad record never stops the others: a limit batch that
fails (a Slurm error, or the backend refusing an account name) is retried account by account, and a
SiteFactor call that fails value by value, so only the accounts/jobs that really fail are left out; each
failure is recorded on the round (``details.apply_failures``, an ``apply-failed`` event, the message) and
the round stays ``ok``; a failed account keeps its carried deviation. Recording the round retries a few
times when the database is locked by another process. Any other exception is recorded on the round as
``error`` with its cause (type, message, file:line): no exception leaves :func:`run_round` once the round
row exists.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..config import Config
from .. import policies
from ..profiling import shipped as shipped_profiles
from ..cluster.base import CLEAR, Cluster, Snapshot
from ..cluster.errors import ClusterError, ClusterUnreachable
from ..model import Allocation
from ..records import RoundDetails
from ..rounding import LastRound
from ..store import Store
from ..store.jobs import class_run_times
from . import plan as P
from . import ownership, preemption, type_map_file
from .plan import binding
from .preemption import carry
from .preemption.unrequeueable import without_hold_back
from . import status_file
from . import bounded
from .harvest import harvest
from .ingest import IngestResult, ingest_round
from .plan.classcap import Folded
from .apply import Applied, apply_factors, apply_limits
from .round_record import RoundResult, cause, finished, record_pending, record_round, round_details, with_retry

PAUSE_ENV = "SLURM_FAIR_PAUSE_BEFORE_APPLY"


def _empty_alloc(built: P.Built, policy: str) -> Allocation:
    vu = built.problem.virtual_users()
    return Allocation(built.problem, policy, np.zeros((vu.n, vu.k)))


def _last_ok_started(store: Store, exclude: int | None) -> float | None:
    for r in store.rounds(limit=50, details=False):
        if r.status == "ok" and r.id != exclude:
            return r.started
    return None


def mark_interrupted(store: Store) -> int:
    """Mark rounds left ``running`` by a killed daemon as ``error``; returns how many."""
    n = 0
    for r in store.rounds(limit=50, details=False):
        if r.status == "running":
            store.finish_round(r.id, "error", message="interrupted (the daemon stopped during this round)")
            n += 1
    return n


# the type map's run-time estimate reads the job runs of the last two weeks only (bounded per round; the store
# may hold years of hook records)
RUN_TIMES_WINDOW_S = 14 * 86400.0


def compute(snapshot: Snapshot | P.PartitionView, store: Store, cfg: Config, policy: str, now: float,
            owned: Mapping[str, Mapping[str, int]] | None = None) -> P.Decisions:
    """Everything a round decides (``plan.decide``, pure) from the snapshot (or its partition view, made once by
    the round) and the state in the store (what
    slurm-fair wrote: the store's over the ownership file's record ``owned``, ``daemon/ownership.py``). A
    policy that takes a warm start (``policies.takes_warm``) gets the one the last round saved; with
    ``[policy] stable`` the rounding gets the last ok round's ideal and guarantees (:func:`_last_round`)."""
    view = P.PartitionView.of(snapshot, cfg.cluster.partitions)
    warm = _warm(store, policy, now)
    solver = cfg.policy.solver or None
    opts = cfg.policy.options()
    moving = carry.moving(store, now, cfg) if cfg.preemption.moves else []
    return P.decide(view, cfg, lambda problem: policies.solve(policy, problem, solver=solver, warm=warm,
                                                                  options=opts),
                    profiles=bounded.round_profiles(store, cfg), shipped=shipped_profiles.load_shipped(), deviations=store.deviations(),
                    deficits=store.deficits(), managed_before=store.managed(), last_ok_started=_last_ok_started(store, None),
                    now=now, empty_alloc=lambda built: _empty_alloc(built, policy), moving=moving,
                    requeuing=bool(cfg.preemption.enabled) and carry.requeuing(store, now, cfg),
                    site=store.site_limits(), held_back=carry.held_back(store, now, cfg, view.whole),
                    last=_last_round(store) if cfg.policy.stable else None,
                    written=ownership.merged(owned or {}, store.written()),
                    run_times=class_run_times(store.job_runs(since=now - RUN_TIMES_WINDOW_S)))


def settled(snapshot: Snapshot, store: Store, cfg: Config, owned: Mapping[str, Mapping[str, int]]) -> Snapshot:
    """The snapshot with its demand settled (``plan.binding.settle``): a begin time counts when due before the
    next round; a job an association limit holds counts only while that limit is slurm-fair's (what it wrote:
    the store's over the ownership file's record ``owned``), not the site's nor a parent's."""
    return binding.settle_round(snapshot, float(cfg.daemon.period), ownership.merged(owned or {}, store.written()),
                                store.site_limits())


def _last_round(store: Store) -> LastRound | None:
    """The last ok round's ideal and guarantees (the rounding holds an account whose ideal did not move)."""
    try:  # a hint: without it the rounding carries the deviation as before; it never fails a round
        r = next((r for r in store.rounds(limit=20, details=False) if r.status == "ok"), None)
        d = RoundDetails.of_round(store.round(r.id)) if r else None
        return LastRound(ideal=d.ideal, real=d.real) if d else None
    except Exception:  # noqa: BLE001
        return None


def _warm(store: Store, policy: str, now: float | None = None) -> Any:
    """The saved warm start / state of ``policy`` (None if it takes none, none is saved, or reading it fails:
    it never fails a round). A state that is a JSON object gets ``dt``: seconds since it was saved (themis
    ages its lease and its apps' elapsed time with it)."""
    try:
        if not policies.takes_warm(policy):
            return None
        data, saved = store.warm_start(policy, with_time=True)
        if isinstance(data, dict):
            data = {**data, "dt": max(0.0, (time.time() if now is None else now) - saved)}
        return data
    except Exception:  # noqa: BLE001 - a hint; the solve starts cold
        return None


def _retype(cluster: Cluster, moves: list[P.Retype]) -> list[dict[str, Any]]:
    """Apply the planned retypes; a failed one is reported (``error``) and the others still go."""
    out = []
    for m in moves:
        row: dict[str, Any] = {"job_id": m.job_id, "account": m.account, "old_type": m.old_type,
                               "new_type": m.new_type, "gpus_per_node": m.gpus_per_node}
        try:
            cluster.set_job_gpu_type(m.job_id, m.new_type, m.gpus_per_node)
        except ClusterError as e:
            row["error"] = str(e)
        out.append(row)
    return out

def run_round(cluster: Cluster, store: Store, cfg: Config, policy: str | None = None, dry_run: bool = False,
              now: float | None = None, record: bool = True) -> RoundResult:
    """Run one round (see the module docstring). ``record=False`` (``apply --dry-run``) writes nothing to
    the store and nothing to Slurm. ``now`` (the simulator's clock): the round runs and is recorded at that
    time (rounds.started = now, finished = now + the seconds it ran), so the time between rounds that the
    deficits accumulate over is on the same clock; None: the wall clock. Once the round row exists no exception escapes: a failure is recorded
    on the round (status ``error``, its cause in the message)."""
    with _collection_paused():
        return _guarded_round(cluster, store, cfg, policy, dry_run, now, record)


@contextlib.contextmanager
def _collection_paused():
    """Python's cyclic garbage collector paused for the round, run once at its end (generations 0 and 1). A
    round allocates objects in proportion to the jobs (a snapshot, folded copies, plans) and keeps most of them
    to its end, so automatic collections traverse them again and again: under issue 30's rename flood (10 000
    pending jobs renamed before each round) they were 55 ms of the 0.4 s round (CPU time, 2-core machine) —
    most of the flood's extra cost. Memory freed by reference counting is unaffected."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
            gc.collect(1)


def _guarded_round(cluster: Cluster, store: Store, cfg: Config, policy: str | None, dry_run: bool,
                   now: float | None, record: bool) -> RoundResult:
    t0 = time.monotonic()
    policy = policy or cfg.policy.name
    round_id = None
    if record:
        with_retry(lambda: mark_interrupted(store))
        round_id = with_retry(lambda: store.begin_round(policy, cfg.policy.solver, now=now))
    try:
        return _run_round(cluster, store, cfg, policy, dry_run, now, record, round_id, t0)
    except Exception as e:  # noqa: BLE001 - one bad round must not stop the daemon: record why
        res = RoundResult(round_id, "error", policy, message=f"round failed: {cause(e)}")
        res.seconds = time.monotonic() - t0
        if record:
            try:
                with_retry(lambda: store.finish_round(round_id, "error", message=res.message,
                                                       **finished(now, t0)))
            except Exception as e2:  # noqa: BLE001 - the next round marks it interrupted
                res.message += f"; recording the failure failed too: {cause(e2)}"
        return res


@dataclass
class _Observed:
    """What a recording round took in before it decides: the snapshot (classes beyond
    ``[profiling] max_classes_per_account`` folded to the default), the job reports harvested and what was pruned."""

    snapshot: Snapshot
    folded: Folded | None = None  # bounded.fold_round's result (None: a round that records nothing)
    harvested: dict | None = None  # harvest's counts
    pruned: dict[str, Any] | None = None  # bounded.maybe_prune's, when it pruned


def _observe(store: Store, snapshot: Snapshot, cfg: Config, round_id: int | None, now: float,
             record: bool) -> _Observed:
    """Fold, harvest and prune (a recording round only; ``apply --dry-run`` takes the snapshot as it is)."""
    if not record:
        return _Observed(snapshot)
    folded = bounded.fold_round(store, snapshot, cfg, round_id, now)
    if folded is not None:
        snapshot = folded.snapshot  # an account's classes beyond [profiling] max_classes_per_account: default
    # reports in job comments first: this round's shares use them
    harvested = harvest(store, snapshot, cfg, round_id, now)
    pruned = bounded.maybe_prune(store, cfg, now, {j.job_id for j in snapshot.jobs}, round_id)
    return _Observed(snapshot, folded, harvested, pruned)


def _note_inputs(details: RoundDetails, ingested: IngestResult | None, seen: _Observed, ownership_error: str | None) -> None:
    """The round's details of what it took in: hook records, job reports, folded classes, pruning, and an
    unreadable ownership file (the round went on as with no record)."""
    if ingested is not None:
        details.hook_records = ingested.as_dict()
    if seen.harvested is not None:
        details.profile_reports = seen.harvested
    folded = seen.folded
    if folded is not None and folded.folded:
        # the first FOLD_NAMES names per account, and the count where there were more (issue 30: a rename
        # flood of 10 000 jobs put 110 kB of names in every round's details)
        details.classes_folded = {a: list(cs[:bounded.FOLD_NAMES]) for a, cs in folded.folded.items()}
        more = {a: len(cs) for a, cs in folded.folded.items() if len(cs) > bounded.FOLD_NAMES}
        if more:
            details.classes_folded_count = more
    if seen.pruned is not None:
        details.pruned = seen.pruned
    details.ownership_error = ownership_error  # unreadable: the round went on as with no record (named)


def _enforced(c: P.Decisions) -> dict[str, dict[str, int]]:
    """What preemption enforces: the guarantees when limits lend (borrowed GPUs come back), else the limits."""
    plan = c.plan
    return ({a: g for a, g in plan.real.items() if a in c.planned} if plan.lend
            else without_hold_back(c.planned, c.held_back))  # a held-back job is not taken twice


def _add_message(res: RoundResult, msg: str) -> None:
    res.message = (res.message + "; " if res.message else "") + msg


def site_weights(cluster: Cluster) -> int | None:
    """The sum of the site's ``PriorityWeight*`` (``Cluster.priority_weights``); None where it cannot be read
    (``priority.site_factor_max = "auto"`` then takes its fallback, :data:`.plan.priority.AUTO_RANGE`)."""
    try:
        return cluster.priority_weights()
    except ClusterError:
        return None


def _run_round(cluster: Cluster, store: Store, cfg: Config, policy: str, dry_run: bool, now: float | None,
               record: bool, round_id: int | None, t0: float) -> RoundResult:
    """Observe, decide, apply (unless a dry run), publish and record (see the module docstring)."""
    dry_run = dry_run or bool(cfg.daemon.dry_run) or not record
    stamp = now  # preemption steps: the given time, else the wall clock at each step
    now = time.time() if now is None else now
    ingested = None
    if record:
        ingested = ingest_round(store, cfg, round_id, cluster)  # hook records first; never raises (events)

    def finish(res: RoundResult, **fields: Any) -> RoundResult:
        res.seconds = time.monotonic() - t0
        if record:
            with_retry(lambda: store.finish_round(
                round_id, res.status, solve_seconds=res.solve_seconds, n_accounts=res.n_accounts,
                n_changes=res.n_changes, message=res.message, **finished(stamp, t0), **fields))
        return res

    try:
        snapshot = cluster.snapshot()
    except ClusterError as e:
        status = "unreachable" if isinstance(e, ClusterUnreachable) else "error"
        return finish(RoundResult(round_id, status, policy, message=f"observe: {e}"))
    cfg = P.with_weights(cfg, site_weights(cluster))  # priority.site_factor_max = "auto": the site's weights
    seen = _observe(store, snapshot, cfg, round_id, now, record)
    owned, cluster_key = ownership.load_for(cluster, cfg.ownership_path)  # never raises
    # demand is what can start (issue 41): begin times due within a round, association limits slurm-fair's own
    snapshot = settled(seen.snapshot, store, cfg, owned.of(cluster_key or ""))
    pending_error = record_pending(store, snapshot, cfg, now, round_id) if record else None
    view = P.PartitionView.of(snapshot, cfg.cluster.partitions)  # the partition view: made once per snapshot
    try:
        c = compute(view, store, cfg, policy, now, owned.of(cluster_key or ""))
    except Exception as e:  # noqa: BLE001 - a solver/policy failure must not take the daemon down
        return finish(RoundResult(round_id, "solver-failed", policy, message=cause(e)))
    plan: P.Plan = c.plan
    res = RoundResult(round_id, "dry-run" if dry_run else "ok", policy, solve_seconds=float(c.alloc.solve_seconds),
                      n_accounts=len(plan.accounts), limit_changes=c.changes, factor_changes=c.factor_changes,
                      plan=plan, decisions=c)
    res.details = round_details(snapshot, c, policy)
    _note_inputs(res.details, ingested, seen, owned.error)
    if pending_error:
        _add_message(res, pending_error)

    applied_rows: list[dict[str, Any]] = []
    applied = Applied(ok={a: dict(ch) for a, ch in c.changes.items()})
    factor_failed: dict[str, str] = {}
    enforced = _enforced(c)
    if dry_run and preemption.wanted(cfg, snapshot):
        res.details.preemption = carry.run(None, store, cfg, snapshot, enforced, round_id, now, act=False,
                                       decisions=c)
    if not dry_run:
        done = _apply(cluster, store, cfg, res, c, round_id, now, cluster_key)
        if done is None:  # the cluster went away while applying
            return finish(res, details=res.details.to_json(), total_throughput=plan.total_throughput)
        applied, factor_failed = done
        _retype_and_publish(cluster, cfg, res, c, view)
        _preempt(cluster, store, cfg, res, c, snapshot, enforced, round_id, now, stamp)
        applied_rows = _applied_rows(cfg, res, c, applied, round_id, cluster_key)

    if res.details.ownership_error:
        _add_message(res, res.details.ownership_error)
    if record and cfg.status_path is not None:
        _publish_status(res, snapshot, c, cfg, dry_run, now, applied.ok if not dry_run else {})
    if not record:
        res.seconds = time.monotonic() - t0
        return res
    record_round(store, res, c, snapshot, cfg, policy, applied=applied, factor_failed=factor_failed,
                 applied_rows=applied_rows, dry_run=dry_run, now=now, stamp=stamp, t0=t0)
    return res


def _apply(cluster: Cluster, store: Store, cfg: Config, res: RoundResult, c: P.Decisions, round_id: int | None,
           now: float, cluster_key: str | None) -> tuple[Applied, dict[str, str]] | None:
    """Write the round's limits and SiteFactors into Slurm (after the fault-injection pause, and after the
    accounts' limits before slurm-fair first manages them are recorded), and what slurm-fair wrote into the
    ownership file. Failures are recorded on ``res``; None when the cluster became unreachable (``res`` says
    so: the round ends there)."""
    pause = os.environ.get(PAUSE_ENV)
    if pause:
        print(f"slurm-fair: pausing {float(pause):g} s before apply (round {round_id})", file=sys.stderr, flush=True)
        time.sleep(float(pause))
    try:
        lease_check = getattr(cluster, "check_lease", None)  # the daemon's lease fence (daemon/leader.py)
        if lease_check is not None:
            lease_check()  # LeaseLost: another daemon may act now, this one records and writes nothing
        # what each account's limits were before slurm-fair first manages it — every account the round plans, left
        # alone or not, changed or not (issue 40: one left alone in round N and not recorded was managed, its own
        # limit overwritten, in round N+1): what the next rounds honour and rollback restores. Not in a round that
        # faces limits no record explains (``unrecorded``): they may be an earlier install's (limits adopt | clear).
        with_retry(lambda: store.record_site_limits(site_to_record(c) if cfg.limits.manage else {}, now=now))
        applied = apply_limits(cluster, c.changes)
        factors_set, factor_failed = apply_factors(cluster, c.factor_changes)
    except ClusterUnreachable as e:
        res.status = "unreachable"
        res.message = f"apply: {e}"
        res.details.apply_error = str(e)
        return None
    res.limit_changes = applied.ok
    # what slurm-fair wrote, kept outside the database too (before the database records it: a crash between
    # leaves the file ahead, never behind); the store's record seeds a file that lacks it
    if cluster_key is not None:
        res.details.ownership_error = ownership.record(cfg.ownership_path, cluster_key,
                                                       ownership.merged(store.written(), applied.ok))
    res.factor_changes = factors_set
    problems = []
    if applied.failed:
        res.details.apply_failures = dict(applied.failed)
        problems.append(f"{len(applied.failed)} of {len(c.changes)} account(s) failed: "
                        + "; ".join(f"{a}: {m}" for a, m in sorted(applied.failed.items())))
    if applied.batch_errors:
        res.details.apply_batch_errors = list(applied.batch_errors)
    if factor_failed:
        res.details.site_factor_failures = factor_failed
        problems.append(f"SiteFactor failed for {len(factor_failed)} job(s)/group(s)")
    if problems:
        res.message = "apply: " + "; ".join(problems)
    return applied, factor_failed


def site_to_record(c: P.Decisions) -> dict[str, dict[str, int]]:
    """account -> its site limits (its GPU limits now less what slurm-fair wrote as it wrote it), for every account
    the round changes or plans; none in a round with unrecorded limits (it writes none and manages none). The
    store keeps an account's first record only."""
    if c.unrecorded:
        return {}
    return {a: dict(c.site_now.get(a, {})) for a in sorted(set(c.changes) | set(c.planned))}


def _retype_and_publish(cluster: Cluster, cfg: Config, res: RoundResult, c: P.Decisions,
                        view: P.PartitionView) -> None:
    """Move the planned pending jobs to their new GPU type, then publish the type map (``submit.type_map``);
    a failure of either is recorded on the round, never raised."""
    try:
        res.details.retyped = _retype(cluster, c.retypes)
    except Exception as e:  # noqa: BLE001 - recorded on the round
        res.details.retype_error = cause(e)
    if cfg.type_map_path is not None:
        try:
            res.details.type_map_written = type_map_file.publish_type_map(cfg, c.targets, view)
        except OSError as e:  # recorded on the round; never stops it
            res.details.type_map_error = f"{cfg.type_map_path}: {e.strerror or e}"


def _preempt(cluster: Cluster, store: Store, cfg: Config, res: RoundResult, c: P.Decisions, snapshot: Snapshot,
             enforced: Mapping[str, Mapping[str, int]], round_id: int | None, now: float,
             stamp: float | None) -> None:
    """Preemption's steps and upgrade moves for this round (``daemon/preemption/carry.py``), when they run; a
    failure is recorded on the round (the limits are applied: the rest of the round is recorded)."""
    if preemption.wanted(cfg, snapshot):  # moves need no reclaim (daemon/preemption/upgrade.py)
        try:
            res.details.preemption = pre = carry.run(cluster, store, cfg, snapshot, enforced, round_id,
                                                     now, stamp=stamp, decisions=c)
            if pre.failed:
                _add_message(res, f"preemption: {len(pre.failed)} failed")
        except Exception as e:  # noqa: BLE001 - the limits are applied: record the rest of the round
            res.details.preemption_error = cause(e)
            _add_message(res, f"preemption: {cause(e)}")


def _applied_rows(cfg: Config, res: RoundResult, c: P.Decisions, applied: Applied, round_id: int | None,
                  cluster_key: str | None) -> list[dict[str, Any]]:
    """The ``applied`` table's rows of this round: the plan's limits written, then the limits preemption lowered
    at once for jobs held back in this round (also recorded in the ownership file)."""
    rows = []
    t = time.time()
    for a, ch in applied.ok.items():
        for k, v in ch.items():
            rows.append({"round_id": round_id, "account": a, "key": k,
                         "old": c.current.get(a, {}).get(k), "new": v, "time": t})
    # limits preemption lowered at once for jobs held back in this round: written by slurm-fair too (recorded
    # after the plan's, so `written` has them: the next round must not take them for a limit someone else set
    # and keep it for ever once the hold-back ends)
    held = res.details.preemption.held_back_limits if res.details.preemption is not None else None
    if isinstance(held, dict) and not held.get("error"):
        for a, ch in (held.get("accounts") or {}).items():
            for k, v in ch.items():
                old = applied.ok.get(a, {}).get(k, c.current.get(a, {}).get(k))
                rows.append({"round_id": round_id, "account": a, "key": k, "old": old, "new": v, "time": t})
        if cluster_key is not None and held.get("accounts"):  # ... and in the ownership file
            res.details.ownership_error = ownership.record(
                cfg.ownership_path, cluster_key, held["accounts"]) or res.details.ownership_error
    return rows


def limits_after(current: Mapping[str, Mapping[str, int]], applied: Mapping[str, Mapping[str, int]]
                 ) -> dict[str, dict[str, int]]:
    """The accounts' GPU limits once ``applied`` is written over ``current`` (CLEAR removes a key)."""
    out = {a: dict(v) for a, v in current.items()}
    for a, ch in applied.items():
        row = out.setdefault(a, {})
        for k, v in ch.items():
            if v == CLEAR:
                row.pop(k, None)
            else:
                row[k] = v
    return out


def _publish_status(res: RoundResult, snapshot: Snapshot, c: P.Decisions, cfg: Config, dry_run: bool, now: float,
                    applied: Mapping[str, Mapping[str, int]]) -> None:
    """Write the public status file (``daemon/status_file.py``) of this round; a failure is recorded on the round
    (``status_file_error``), never raised."""
    try:
        st = status_file.build_status(snapshot, c, cfg, round_id=res.round_id, round_time=now,
                                     round_status=res.status, dry_run=dry_run,
                                     limits=limits_after(c.current, applied))
        status_file.write_status(cfg.status_path, st)
        res.public = st
        res.details.status_file = str(cfg.status_path)
        private = status_file.world_readable(cfg.status_path)
        if private:
            res.details.status_file_private = private + ": users cannot run slurm-fair why"
    except Exception as e:  # noqa: BLE001 - the status file never stops a round
        res.details.status_file_error = f"{cfg.status_path}: {cause(e)}"


def summary(result: RoundResult) -> Mapping[str, Any]:
    return {"round": result.round_id, "status": result.status, "policy": result.policy,
            "seconds": result.seconds, "limit_changes": result.limit_changes,
            "site_factor_changes": len(result.factor_changes), "message": result.message}
