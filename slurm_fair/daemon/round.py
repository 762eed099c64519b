"""One allocation round: observe Slurm, solve, round, apply, record.

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
import sqlite3
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ..config import Config
from .. import policies
from ..profiling import shipped as shipped_profiles
from ..cluster.base import ANY_GPU, CLEAR, Cluster, Snapshot, supports_pending_retype
from ..cluster.errors import ClusterError, ClusterUnreachable
from ..model import Allocation
from ..fairness.stability import fingerprint as problem_fingerprint
from ..records import RoundDetails
from ..rounding import LastRound
from ..store import Store
from . import plan as P
from . import ownership, preemption, publish
from .unrequeueable import without_hold_back
from . import public as public_mod
from . import bounded
from .harvest import harvest
from .ingest import ingest_round
from .apply import Applied, apply_factors, apply_limits

PAUSE_ENV = "SLURM_FAIR_PAUSE_BEFORE_APPLY"
# Recording a round: attempts when the database stays locked past its busy timeout, and the pause between.
RECORD_ATTEMPTS = 3
RECORD_BACKOFF_S = 0.5


@dataclass
class RoundResult:
    round_id: int | None
    status: str  # ok | dry-run | unreachable | solver-failed | error
    policy: str
    seconds: float = 0.0
    solve_seconds: float = 0.0
    n_accounts: int = 0
    limit_changes: dict[str, dict[str, int]] = field(default_factory=dict)
    factor_changes: dict[int, int] = field(default_factory=dict)
    message: str = ""
    plan: P.Plan | None = None
    details: RoundDetails | None = None  # None: the round failed before it decided anything
    decisions: P.Decisions | None = None  # what the round decided (the daemon refreshes the type map from it)
    public: public_mod.PublicStatus | None = None  # the status file it wrote (the daemon refreshes it from polls)

    @property
    def n_changes(self) -> int:
        return sum(len(v) for v in self.limit_changes.values()) + len(self.factor_changes)

    def log_line(self) -> str:
        return (f"round {self.round_id if self.round_id is not None else '-'}: status={self.status} "
                f"policy={self.policy} accounts={self.n_accounts} limit_changes="
                f"{sum(len(v) for v in self.limit_changes.values())} site_factor_changes={len(self.factor_changes)} "
                f"seconds={self.seconds:.2f}" + (f" message={self.message!r}" if self.message else ""))


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


def compute(snapshot: Snapshot, store: Store, cfg: Config, policy: str, now: float,
            owned: Mapping[str, Mapping[str, int]] | None = None) -> P.Decisions:
    """Everything a round decides (``plan.decide``, pure) from the snapshot and the state in the store (what
    slurm-fair wrote: the store's over the ownership file's record ``owned``, ``daemon/ownership.py``). A
    policy that takes a warm start (``policies.takes_warm``) gets the one the last round saved; with
    ``[policy] stable`` the rounding gets the last ok round's ideal and guarantees (:func:`_last_round`)."""
    warm = _warm(store, policy, now)
    solver = cfg.policy.solver or None
    opts = cfg.policy.options()
    moving = preemption.moving(store, now, cfg) if cfg.preemption.moves else []
    return P.decide(snapshot, cfg, lambda problem: policies.solve(policy, problem, solver=solver, warm=warm,
                                                                  options=opts),
                    profiles=bounded.round_profiles(store, cfg), shipped=shipped_profiles.load_shipped(), deviations=store.deviations(),
                    deficits=store.deficits(), managed_before=store.managed(), last_ok_started=_last_ok_started(store, None),
                    now=now, empty_alloc=lambda built: _empty_alloc(built, policy), moving=moving,
                    site=store.site_limits(), held_back=preemption.held_back(store, now, cfg, snapshot),
                    last=_last_round(store) if cfg.policy.stable else None,
                    written=ownership.merged(owned or {}, store.written()))


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


def _details(snapshot: Snapshot, c: P.Decisions, policy: str) -> RoundDetails:
    plan, built = c.plan, c.built
    pending: dict[str, int] = {}
    pending_jobs: dict[str, int] = {}
    classes: dict[str, dict[str, Any]] = {}
    for (a, cls), d in c.demand.items():
        pending[a] = pending.get(a, 0) + d.pending_gpus
        pending_jobs[a] = pending_jobs.get(a, 0) + d.pending_jobs
        classes.setdefault(a, {})[cls] = {
            "gpus": d.gpus, "pending_gpus": d.pending_gpus, "running_gpus": d.running_gpus,
            "min_pending": d.min_pending, "types": None if d.types is None else sorted(d.types),
            "throughput": built.throughput.get(a, {}).get(cls, {}),
            "source": built.sources.get(a, {}).get(cls, {}),
            "ideal": plan.ideal_class.get(a, {}).get(cls, {}),
        }
    return RoundDetails(
        policy=policy,
        slurm_version=snapshot.slurm_version,
        capacity=plan.capacity,
        accounts=list(plan.accounts),
        tenants=built.tenant_of,
        weights=built.weights,
        ideal=plan.ideal,
        real=plan.real,
        extra=plan.extra,
        limits=plan.limits,
        lend=plan.lend,
        claims=plan.claims,
        lendable=plan.lendable(),
        deviation_before=plan.deviation_before,
        deviations=plan.deviations,
        min_gpus=plan.min_gpus,
        demand=plan.demand,
        pending_gpus=pending,
        pending_jobs=pending_jobs,
        held_back=c.held_back,  # account -> type -> GPUs its limits are lowered by (daemon/unrequeueable.py)
        held_at=c.held_at, held_why=c.held_why,  # accounts held back across all their jobs, and what for
        drift=c.drift,  # account -> key -> a limit someone else set since slurm-fair wrote it: kept (issue 29)
        unrecorded=c.unrecorded,  # limits a store with no record faced: none written until adopted or cleared
        not_demand=c.not_demand,  # account -> why -> GPUs of pending jobs that could not start (plan.eligible)
        in_use=P.gpus_in_use(snapshot),
        classes=classes,
        deficits=c.deficits,
        limits_before={a: c.current.get(a, {}) for a in plan.accounts},
        limit_changes=c.changes,
        left_alone=list(c.left_alone),  # accounts whose own GPU limits are respected (limits.site_limits)
        site_factor_changes=len(c.factor_changes),
        site_factors_set=len(c.factors),
        site_factor_changes_deferred=c.factors_deferred,
        dt=c.dt,
        untyped_targets={a: v.as_json() for a, v in c.targets.items()},
        # GPU types per partition (the map's #@partition lines: of these, a partition pilot's own only)
        partition_types={p.name: list(p.types) for p in P.partition_types(snapshot)},
        explore_moves=c.explored,  # profiling.explore: one GPU of a limit moved to an unprofiled type
        retype_supported=supports_pending_retype(snapshot.slurm_version),
        # market policies (bud): the price of one GPU of each type, in budget units
        prices=dict(c.alloc.prices) if c.alloc.prices is not None else None,
        # oef-coop's warm start: what seeded this solve (None: none taken) and the binding rows kept
        warm_start={"seeded": next((n for n in c.alloc.notes if n.startswith("warm start:")), None),
                    "pairs_saved": sum(1 for w in c.alloc.warm if not (isinstance(w, tuple) and w[:1] in (("fp",), ("x",))))},
        fingerprint=problem_fingerprint(built.problem, built.rows).as_json(),  # guarantee flips (issue 28)
        **_fairness(c),
    )


def _fairness(c: P.Decisions) -> dict[str, Any]:
    """``fairness``: envy and sharing-incentive violations of the round (``plan.round_fairness``) and the
    seconds they took, ``throughput``: normalized throughput per account of the ideal and the placed
    allocation. A failure is recorded as ``fairness: {"error": cause}`` and never fails the round."""
    t = time.perf_counter()
    try:
        out = P.round_fairness(c.built, c.alloc, c.plan)
    except Exception as e:  # noqa: BLE001 - statistics; the round goes on
        return {"fairness": {"error": cause(e)}}
    thr = out.pop("throughput")
    out["seconds"] = time.perf_counter() - t
    return {"fairness": out, "throughput": thr}


def cause(e: BaseException) -> str:
    """``Type: message (file.py:line)`` of an exception, for the round's message."""
    tb = traceback.extract_tb(e.__traceback__)
    where = f" ({os.path.basename(tb[-1].filename)}:{tb[-1].lineno})" if tb else ""
    return f"{type(e).__name__}: {e}{where}"


def _locked(e: BaseException) -> bool:
    return isinstance(e, sqlite3.OperationalError) and "locked" in str(e).lower()


def _with_retry(fn: Any, attempts: int = RECORD_ATTEMPTS) -> Any:
    """``fn()``, tried again (after a short pause) when the database is still locked after its busy timeout."""
    for i in range(attempts):
        try:
            return fn()
        except sqlite3.OperationalError as e:
            if not _locked(e) or i == attempts - 1:
                raise
            time.sleep(RECORD_BACKOFF_S * (i + 1))
    raise AssertionError("unreachable")


def _finished(now: float | None, t0: float) -> dict[str, float]:
    """The round's end on its own clock: ``now`` (the time the round was given) plus the seconds it ran;
    nothing (the store's wall clock) when the round runs on the wall clock."""
    return {} if now is None else {"finished": now + (time.monotonic() - t0)}


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
        _with_retry(lambda: mark_interrupted(store))
        round_id = _with_retry(lambda: store.begin_round(policy, cfg.policy.solver, now=now))
    try:
        return _run_round(cluster, store, cfg, policy, dry_run, now, record, round_id, t0)
    except Exception as e:  # noqa: BLE001 - one bad round must not stop the daemon: record why
        res = RoundResult(round_id, "error", policy, message=f"round failed: {cause(e)}")
        res.seconds = time.monotonic() - t0
        if record:
            try:
                _with_retry(lambda: store.finish_round(round_id, "error", message=res.message,
                                                       **_finished(now, t0)))
            except Exception as e2:  # noqa: BLE001 - the next round marks it interrupted
                res.message += f"; recording the failure failed too: {cause(e2)}"
        return res


def _run_round(cluster: Cluster, store: Store, cfg: Config, policy: str, dry_run: bool, now: float | None,
               record: bool, round_id: int | None, t0: float) -> RoundResult:
    dry_run = dry_run or bool(cfg.daemon.dry_run) or not record
    stamp = now  # preemption steps: the given time, else the wall clock at each step
    now = time.time() if now is None else now
    ingested = None
    if record:
        ingested = ingest_round(store, cfg, round_id)  # hook records first; never raises (errors are events)

    def finish(res: RoundResult, **fields: Any) -> RoundResult:
        res.seconds = time.monotonic() - t0
        if record:
            _with_retry(lambda: store.finish_round(
                round_id, res.status, solve_seconds=res.solve_seconds, n_accounts=res.n_accounts,
                n_changes=res.n_changes, message=res.message, **_finished(stamp, t0), **fields))
        return res

    try:
        snapshot = cluster.snapshot()
    except ClusterError as e:
        status = "unreachable" if isinstance(e, ClusterUnreachable) else "error"
        return finish(RoundResult(round_id, status, policy, message=f"observe: {e}"))
    harvested = pruned = None
    folded = bounded.fold_round(store, snapshot, cfg, round_id, now) if record else None
    if folded is not None:
        snapshot = folded.snapshot  # an account's classes beyond [profiling] max_classes_per_account: default
    if record:  # reports in job comments first: this round's shares use them
        harvested = harvest(store, snapshot, cfg, round_id, now, kept=folded.kept if folded else None)
        pruned = bounded.maybe_prune(store, cfg, now, {j.job_id for j in snapshot.jobs}, round_id)
    try:
        owned, cluster_key = ownership.load_for(cluster, cfg.ownership_path)
        c = compute(snapshot, store, cfg, policy, now, owned.of(cluster_key or ""))
    except Exception as e:  # noqa: BLE001 - a solver/policy failure must not take the daemon down
        return finish(RoundResult(round_id, "solver-failed", policy, message=cause(e)))
    plan: P.Plan = c.plan
    alloc: Allocation = c.alloc
    res = RoundResult(round_id, "dry-run" if dry_run else "ok", policy, solve_seconds=float(alloc.solve_seconds),
                      n_accounts=len(plan.accounts), limit_changes=c.changes, factor_changes=c.factor_changes,
                      plan=plan, decisions=c)
    res.details = _details(snapshot, c, policy)
    if ingested is not None:
        res.details.hook_records = ingested.as_dict()
    if harvested is not None:
        res.details.profile_reports = harvested
    if folded is not None and folded.folded:
        # the first FOLD_NAMES names per account, and the count where there were more (issue 30: a rename
        # flood of 10 000 jobs put 110 kB of names in every round's details)
        res.details.classes_folded = {a: list(cs[:bounded.FOLD_NAMES]) for a, cs in folded.folded.items()}
        more = {a: len(cs) for a, cs in folded.folded.items() if len(cs) > bounded.FOLD_NAMES}
        if more:
            res.details.classes_folded_count = more
    if pruned is not None:
        res.details.pruned = pruned
    res.details.ownership_error = owned.error  # unreadable: the round went on as with no record (named)

    applied_rows = []
    applied = Applied(ok={a: dict(ch) for a, ch in c.changes.items()})
    factor_failed: dict[str, str] = {}
    # what preemption enforces: the guarantees when limits lend (borrowed GPUs come back), else the limits
    enforced = ({a: g for a, g in plan.real.items() if a in c.planned} if plan.lend
                else without_hold_back(c.planned, c.held_back))  # a held-back job is not taken twice
    if dry_run and preemption.wanted(cfg, snapshot):
        res.details.preemption = preemption.run(None, store, cfg, snapshot, enforced, round_id, now, act=False,
                                            decisions=c)
    if not dry_run:
        pause = os.environ.get(PAUSE_ENV)
        if pause:
            print(f"slurm-fair: pausing {float(pause):g} s before apply (round {round_id})", file=sys.stderr, flush=True)
            time.sleep(float(pause))
        # what each account's limits were before slurm-fair first changes them: what rollback restores
        _with_retry(lambda: store.record_site_limits({a: c.site_now.get(a, {}) for a in c.changes}, now=now))
        try:
            applied = apply_limits(cluster, c.changes)
            factors_set, factor_failed = apply_factors(cluster, c.factor_changes)
        except ClusterUnreachable as e:
            res.status = "unreachable"
            res.message = f"apply: {e}"
            res.details.apply_error = str(e)
            return finish(res, details=res.details.to_json(), total_throughput=plan.total_throughput)
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
        try:
            res.details.retyped = _retype(cluster, c.retypes)
        except Exception as e:  # noqa: BLE001 - recorded on the round
            res.details.retype_error = cause(e)
        if cfg.type_map_path is not None:
            try:
                parts = P.partition_types(P.partition_view(snapshot, cfg.cluster.partitions))
                res.details.type_map_written = publish.publish(
                    cfg.type_map_path, c.targets, cfg.classes.order, parts, bool(cfg.limits.accounts),
                    taken_at=snapshot.taken_at, max_age=publish.max_age(cfg))
            except OSError as e:  # recorded on the round; never stops it
                res.details.type_map_error = f"{cfg.type_map_path}: {e.strerror or e}"
        if preemption.wanted(cfg, snapshot):  # moves need no reclaim (daemon/upgrade.py)
            try:
                res.details.preemption = pre = preemption.run(cluster, store, cfg, snapshot, enforced, round_id,
                                                          now, stamp=stamp, decisions=c)
                if pre.failed:
                    res.message = (res.message + "; " if res.message else "") + f"preemption: {len(pre.failed)} failed"
            except Exception as e:  # noqa: BLE001 - the limits are applied: record the rest of the round
                res.details.preemption_error = cause(e)
                res.message = (res.message + "; " if res.message else "") + f"preemption: {cause(e)}"
        t = time.time()
        for a, ch in applied.ok.items():
            for k, v in ch.items():
                applied_rows.append({"round_id": round_id, "account": a, "key": k,
                                     "old": c.current.get(a, {}).get(k), "new": v, "time": t})
        # limits preemption lowered at once for jobs held back in this round: written by slurm-fair too (recorded
        # after the plan's, so `written` has them: the next round must not take them for a limit someone else set
        # and keep it for ever once the hold-back ends)
        held = res.details.preemption.held_back_limits if res.details.preemption is not None else None
        if isinstance(held, dict) and not held.get("error"):
            for a, ch in (held.get("accounts") or {}).items():
                for k, v in ch.items():
                    old = applied.ok.get(a, {}).get(k, c.current.get(a, {}).get(k))
                    applied_rows.append({"round_id": round_id, "account": a, "key": k, "old": old, "new": v, "time": t})
            if cluster_key is not None and held.get("accounts"):  # ... and in the ownership file
                res.details.ownership_error = ownership.record(
                    cfg.ownership_path, cluster_key, held["accounts"]) or res.details.ownership_error

    if res.details.ownership_error:
        res.message = (res.message + "; " if res.message else "") + res.details.ownership_error
    if record and cfg.status_path is not None:
        _publish_status(res, snapshot, c, cfg, dry_run, now, applied.ok if not dry_run else {})
    if not record:
        res.seconds = time.monotonic() - t0
        return res
    share_rows = [
        {"account": a, "class": cls, "gpu_type": g, "ideal": v, "real": None}
        for a, classes in plan.ideal_class.items() for cls, x in classes.items() for g, v in x.items()
    ]
    place_rows = [
        {"account": a, "gpu_type": g, "ideal": plan.ideal[a][g], "deviation_before": plan.deviation_before[a][g],
         "real": plan.real[a][g], "limit": plan.limit(a, g)}
        for a in plan.accounts for g in plan.capacity
    ]
    deviations = dict(plan.deviations)
    if applied.failed:  # an account whose limits did not change keeps the deviation it had
        before = store.deviations()
        for a in applied.failed:
            if a in before:
                deviations[a] = before[a]
            else:
                deviations.pop(a, None)

    def write() -> None:
        with store.transaction():
            if alloc.warm and not dry_run:  # a dry run changes nothing in Slurm: no lease, no state
                store.save_warm_start(policy, alloc.warm, round_id, now=now)
            store.record_shares(round_id, share_rows)
            store.record_placements(round_id, place_rows)
            if not dry_run:
                store.save_deviations(round_id, deviations)
                store.save_deficits(c.deficits)
                if applied_rows:
                    store.record_applied(round_id, applied_rows)
                if cfg.limits.manage:
                    store.set_managed(c.planned)
                store.record_factors(res.factor_changes, {j.job_id: j.site_factor for j in snapshot.jobs},
                                     [j.job_id for j in snapshot.jobs if j.pending], now=now)
                for r in res.details.retyped or []:
                    store.event("retype", f"gres/gpu:{r['old_type']} -> gres/gpu:{r['new_type']}"
                                + (f" failed: {r['error']}" if r.get("error") else ""),
                                round_id=round_id, job_id=r["job_id"], account=r["account"], data=r)
                if res.details.type_map_error is not None:
                    store.event("type-map", f"publishing the GPU type map failed: {res.details.type_map_error}",
                                round_id=round_id)
                for a, ch in applied.ok.items():
                    store.event("limits", ", ".join(f"{'gres/gpu' if k == ANY_GPU else 'gres/gpu:' + k}={v}"
                                                    for k, v in ch.items()), round_id=round_id, account=a, data=ch)
                for a, msg in sorted(applied.failed.items()):
                    store.event("apply-failed", f"setting the limits failed: {msg}", round_id=round_id,
                                account=a, data=c.changes.get(a))
                for key, msg in sorted(factor_failed.items()):
                    store.event("apply-failed", f"SiteFactor {key}: {msg}", round_id=round_id,
                                job_id=int(key) if key.isdigit() else None)
            if res.details.ownership_error is not None:
                store.event("ownership", res.details.ownership_error, round_id=round_id)
            if res.details.status_file_error is not None:
                store.event("status-file", f"writing the status file failed: {res.details.status_file_error}",
                            round_id=round_id)
            res.seconds = time.monotonic() - t0
            store.finish_round(round_id, res.status, solve_seconds=res.solve_seconds, n_accounts=res.n_accounts,
                               n_changes=res.n_changes, message=res.message, details=res.details.to_json(),
                               total_throughput=plan.total_throughput, **_finished(stamp, t0))

    _with_retry(write)
    return res


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
    """Write the public status file (``daemon/public.py``) of this round; a failure is recorded on the round
    (``status_file_error``), never raised."""
    try:
        st = public_mod.build_status(snapshot, c, cfg, round_id=res.round_id, round_time=now,
                                     round_status=res.status, dry_run=dry_run,
                                     limits=limits_after(c.current, applied))
        public_mod.write_status(cfg.status_path, st)
        res.public = st
        res.details.status_file = str(cfg.status_path)
        private = public_mod.world_readable(cfg.status_path)
        if private:
            res.details.status_file_private = private + ": users cannot run slurm-fair why"
    except Exception as e:  # noqa: BLE001 - the status file never stops a round
        res.details.status_file_error = f"{cfg.status_path}: {cause(e)}"


def summary(result: RoundResult) -> Mapping[str, Any]:
    return {"round": result.round_id, "status": result.status, "policy": result.policy,
            "seconds": result.seconds, "limit_changes": result.limit_changes,
            "site_factor_changes": len(result.factor_changes), "message": result.message}
