"""What a round records: its result (:class:`RoundResult`), its details (:func:`round_details`, the
``rounds.details`` JSON) and the one transaction that writes the rest of the round (:func:`record_round`: shares,
placements, carried deviations and deficits, applied limits, managed accounts, SiteFactors, events), retried
while the database stays locked (:func:`with_retry`), and the pending GPU jobs the round saw
(:func:`record_pending`, before the round decides, dry runs too: realized fairness's backlog). The round
itself (observe, decide, apply) is ``daemon/round.py``."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..cluster.base import ANY_GPU, Snapshot, supports_pending_retype
from ..config import Config
from ..fairness.stability import fingerprint as problem_fingerprint
from ..records import RoundDetails
from ..store import PendingJob, Store
from . import plan as P
from . import status_file
from .apply import Applied

# Recording a round: attempts when the database stays locked past its busy timeout, and the pause between.
RECORD_ATTEMPTS = 3
RECORD_BACKOFF_S = 0.5


@dataclass
class RoundResult:
    """What one round did: its status and counts, what it decided, and the details it records."""

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
    public: status_file.PublicStatus | None = None  # the status file it wrote (the daemon refreshes it from polls)

    @property
    def n_changes(self) -> int:
        return sum(len(v) for v in self.limit_changes.values()) + len(self.factor_changes)

    def log_line(self) -> str:
        return (f"round {self.round_id if self.round_id is not None else '-'}: status={self.status} "
                f"policy={self.policy} accounts={self.n_accounts} limit_changes="
                f"{sum(len(v) for v in self.limit_changes.values())} site_factor_changes={len(self.factor_changes)} "
                f"seconds={self.seconds:.2f}" + (f" message={self.message!r}" if self.message else ""))


def round_details(snapshot: Snapshot, c: P.Decisions, policy: str) -> RoundDetails:
    """The round's details (``rounds.details``) from what it observed and decided; applying adds to them."""
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
        held_back=c.held_back,  # account -> type -> GPUs its limits are lowered by (daemon/preemption/unrequeueable.py)
        held_at=c.held_at, held_why=c.held_why,  # accounts held back across all their jobs, and what for
        drift=c.drift,  # account -> key -> a limit someone else set (over what slurm-fair wrote, or a key it never wrote): kept
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


PENDING_ERROR = "pending-jobs-error"  # the event of a round that could not record its pending jobs


def pending_seen(snapshot: Snapshot, cfg: Config, now: float) -> list[PendingJob]:
    """The pending GPU jobs of the managed partitions (and accounts, if ``limits.accounts`` names them) as the
    round sees them at ``now``: what :func:`record_pending` stores."""
    return [PendingJob(j.job_id, j.account, P.job_class(j, cfg.classes.order), j.gpus, j.gpu_type,
                       float(j.submit_time), j.blocked or "", now, now)
            for j in P.gpu_jobs(snapshot, cfg.cluster.partitions, cfg.limits.accounts) if j.pending]


def record_pending(store: Store, snapshot: Snapshot, cfg: Config, now: float, round_id: int | None) -> str | None:
    """Upsert the round's pending GPU jobs (:func:`pending_seen`, one statement). Never raises: a failure is a
    ``pending-jobs-error`` event and the message returned (the round goes on; realized fairness then misses
    this round's sightings)."""
    try:
        with_retry(lambda: store.record_pending(pending_seen(snapshot, cfg, now)))
        return None
    except Exception as e:  # noqa: BLE001 - an optional record never stops a round
        msg = f"recording the pending jobs failed: {cause(e)}"
        with contextlib.suppress(Exception):
            store.event(PENDING_ERROR, msg, round_id=round_id, at=now)
        return msg


def with_retry(fn: Any, attempts: int = RECORD_ATTEMPTS) -> Any:
    """``fn()``, tried again (after a short pause) when the database is still locked after its busy timeout."""
    for i in range(attempts):
        try:
            return fn()
        except sqlite3.OperationalError as e:
            if not _locked(e) or i == attempts - 1:
                raise
            time.sleep(RECORD_BACKOFF_S * (i + 1))
    raise AssertionError("unreachable")


def finished(now: float | None, t0: float) -> dict[str, float]:
    """The round's end on its own clock: ``now`` (the time the round was given) plus the seconds it ran;
    nothing (the store's wall clock) when the round runs on the wall clock."""
    return {} if now is None else {"finished": now + (time.monotonic() - t0)}

def record_round(store: Store, res: RoundResult, c: P.Decisions, snapshot: Snapshot, cfg: Config, policy: str, *,
                 applied: Applied, factor_failed: Mapping[str, str], applied_rows: list[dict[str, Any]],
                 dry_run: bool, now: float, stamp: float | None, t0: float) -> None:
    """Write the round in one transaction (module docstring) and finish its row; a dry run records its shares
    and placements only. An account whose limits failed keeps the deviation it had."""
    plan, alloc, round_id = c.plan, c.alloc, res.round_id
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
                _record_applied(store, res, c, snapshot, cfg, deviations, applied, factor_failed, applied_rows, now)
            if res.details.ownership_error is not None:
                store.event("ownership", res.details.ownership_error, round_id=round_id)
            if res.details.status_file_error is not None:
                store.event("status-file", f"writing the status file failed: {res.details.status_file_error}",
                            round_id=round_id)
            res.seconds = time.monotonic() - t0
            store.finish_round(round_id, res.status, solve_seconds=res.solve_seconds, n_accounts=res.n_accounts,
                               n_changes=res.n_changes, message=res.message, details=res.details.to_json(),
                               total_throughput=plan.total_throughput, **finished(stamp, t0))

    with_retry(write)


def _record_applied(store: Store, res: RoundResult, c: P.Decisions, snapshot: Snapshot, cfg: Config,
                    deviations: Mapping[str, Any], applied: Applied, factor_failed: Mapping[str, str], applied_rows: list[dict[str, Any]],
                    now: float) -> None:
    """What a round that applied records (inside :func:`record_round`'s transaction): the carried state, the
    limits applied, the managed accounts, SiteFactors, and one event per retype, failure and limit change."""
    round_id = res.round_id
    store.save_deviations(round_id, deviations)
    store.save_deficits(c.deficits)
    if applied_rows:
        store.record_applied(round_id, applied_rows)
    if cfg.limits.manage and not c.unrecorded:  # a round facing unrecorded limits manages none (limits adopt | clear)
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
