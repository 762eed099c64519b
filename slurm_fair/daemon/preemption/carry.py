"""Preemption steps carried out and recorded: what :func:`.decide.decide` (reclaims) and
:func:`.upgrade.move_signals` (upgrade moves) decide for a round is signalled, requeued (and retyped for a
move), resolved or found gone here, each step recorded in the store's preemptions table (:mod:`.store`) and as
an event. A failure on one job is recorded (state ``failed``) and never stops the others."""

from __future__ import annotations

from typing import Any, Mapping

from ...cluster.base import Cluster, Job, Snapshot, supports_pending_retype
from ...cluster.errors import ClusterError
from ...config import Config
from ...errors import InputError
from ...records import PreemptionSummary
from ...store import Store
from .. import plan as P
from . import unrequeueable as UR
from . import upgrade as U
from . import victims as V
from .decide import decide
from .record import SIGNALLED, PreemptionRecord
from .steps import Action, Decision
from .store import PreemptionStore

# what each step is called in the records, and the state it leaves the preemption in (when it does not fail)
DONE = {"signal": "signalled", "requeue": "requeued", "resolve": "resolved", "gone": "gone",
        UR.HOLD_BACK: UR.HELD_BACK, "cancel": "cancelled"}


def history(store: Store, now: float, cfg: Config) -> list[PreemptionRecord]:
    """The preemptions that matter now: open ones, and those whose minimum run (``min_runtime``) is not over or that
    were requeued in the last 24 h (``max_requeues_per_day``)."""
    return PreemptionStore(store).history(since=now - max(float(cfg.preemption.min_runtime), V.DAY) - 1.0)


def held_back(store: Store, now: float, cfg: Config, snapshot: Snapshot) -> UR.HoldBack:
    """What the open held-back records do to the round's limits (:mod:`.unrequeueable`): per account, the
    GPUs of its running held-back jobs (its limits are lowered by them) and, while the demand they were held
    back for still waits, the most it may hold on every type (what it runs now, minus those). Empty when
    preemption is off or ``preemption.unrequeueable = "ignore"``."""
    if not cfg.preemption.enabled or not UR.acts(cfg.preemption.unrequeueable):
        return UR.HoldBack()
    return UR.penalties([r for r in history(store, now, cfg) if r.state == UR.HELD_BACK], snapshot.jobs)


def moving(store: Store, now: float, cfg: Config) -> list[tuple[str, str, int]]:
    """(account, target type, GPUs) of the upgrade moves in flight (their target GPUs are held for them)."""
    return U.in_flight(history(store, now, cfg))


def requeuing(store: Store, now: float, cfg: Config) -> bool:
    """A reclaim's grace is over and its victims may be requeued this round (an open record for a waiting job
    whose ``requeue_at`` has passed): the GPUs it frees appear now, so the plan holds accounts with untyped jobs
    pending to what they hold plus their claims (:func:`.plan.limits.lend_limits`)."""
    return any(r.state == SIGNALLED and r.for_job is not None and not r.target_type and r.requeue_at is not None
               and r.requeue_at <= now for r in history(store, now, cfg))


def run(cluster: Cluster | None, store: Store, cfg: Config, snapshot: Snapshot, limits: Mapping[str, Mapping[str, int]],
        round_id: int | None, now: float, act: bool = True, stamp: float | None = None,
        decisions: P.Decisions | None = None) -> PreemptionSummary:
    """Decide this round's preemption steps (:func:`.decide.decide` on ``limits``: the guarantees when limits
    lend, the applied limits when they are hard caps) and, with ``act``,
    perform and record them: every step goes into the store's preemptions table and the events. A failure
    on one job is recorded (state ``failed``) and never stops the others. Returns the summary kept in the
    round's details; without ``act`` the steps are only listed under ``would``. Steps are time-stamped with
    ``stamp`` (None: the wall clock when each happens, so the grace starts when the signal was sent).
    With ``preemption.upgrade`` on and the round's ``decisions``, upgrade moves (:func:`.upgrade.move_signals`)
    use the signals the reclaims left of the per-round budget; their requeue gives the job its new type. With
    ``preemption.enabled = false`` (moves only) no reclaim is started: only the moves and the steps of
    preemptions already open are carried out."""
    # a pending flexible job can still be moved where Slurm retypes pending jobs: it waits for any type
    retype_ok = supports_pending_retype(snapshot.slurm_version)
    seen = P.flexible_as_untyped(snapshot) if retype_ok else snapshot
    jobs = P.gpu_jobs(seen, cfg.cluster.partitions, cfg.limits.accounts)
    past = history(store, now, cfg)
    plan = decisions.plan if decisions is not None else None

    def upgrade_ok(r: PreemptionRecord) -> str | None:
        if plan is None or not retype_ok:
            return "the round has no plan" if plan is None else f"Slurm {snapshot.slurm_version} cannot retype"
        return U.still_possible(r, snapshot, plan, cfg.cluster.partitions)

    # limits lend: reclaim by the plan's claims (victims that complete a waiting job's placement, plan/reclaim.py)
    reclaims = plan.reclaims if plan is not None and plan.lend else None
    free = P.FreeGPUs.of(snapshot, cfg.cluster.partitions)
    d = decide(limits, jobs, past, now, cfg.preemption, idle=free.totals(),
               word="guarantee" if cfg.limits.lend else "limit", upgrade_ok=upgrade_ok, reclaims=reclaims,
               free=free, slurm_limits=plan.limits if plan is not None else None)
    reclaim = bool(cfg.preemption.enabled)
    # moves only: no new reclaim (a signal or hold-back without a record); open preemptions go on to their end
    actions = [a for a in d.actions if reclaim or a.record_id is not None]
    if cfg.preemption.moves and retype_ok and decisions is not None:
        actions += U.move_signals(snapshot, cfg, decisions, past, now, actions)
    out = _summary(d, actions, reclaim)
    if not act or cluster is None:
        out["would"] = [{"step": a.kind, "job_id": a.job_id, "account": a.account, "gpu_type": a.gpu_type,
                         "gpus": a.gpus, "reason": a.reason, "target_type": a.target_type,
                         **({"for_job": a.for_job} if a.for_job is not None else {})} for a in actions]
        return PreemptionSummary.from_json(out)
    _carry_out(cluster, store, cfg, snapshot, jobs, actions, out, round_id, now, stamp, retype_ok)
    new = [x for x in out[UR.HELD_BACK]]
    if new and decisions is not None:
        out["held_back_limits"] = _lower_now(cluster, decisions, new, store, round_id, snapshot)
    return PreemptionSummary.from_json(out)


def _summary(d: Decision, actions: list[Action], reclaim: bool) -> dict[str, Any]:
    """The round's preemption summary before anything is carried out (what the decision saw, its skipped
    candidates; none of them with reclaim off) with an empty list per state the steps reach."""
    return {"over": d.over if reclaim else {}, "waiting": d.waiting if reclaim else {}, "upgrades": sum(
                a.kind == "signal" and a.target_type is not None for a in actions),
            "skipped": [{"job_id": s.job_id, "account": s.account, "gpu_type": s.gpu_type,
                         "reason": s.reason} for s in d.skipped] if reclaim else [],
            "signalled": [], "requeued": [], "resolved": [], "gone": [], "failed": []}


def _carry_out(cluster: Cluster, store: Store, cfg: Config, snapshot: Snapshot, jobs: list[Job], actions: list[Action],
               out: dict[str, Any], round_id: int | None, now: float, stamp: float | None, retype_ok: bool) -> None:
    """Perform the steps in order (:func:`_perform`), record each (:func:`_record`) and as an event, and list it in
    ``out`` under the state it reached."""
    ps = PreemptionStore(store)
    users = {j.job_id: j.user for j in jobs}
    for k in (UR.HELD_BACK, "cancelled"):
        out[k] = []
    by_id = {j.job_id: j for j in snapshot.jobs}
    retyped: set[int] = set()  # claimants moved to the type their victims free, this round
    for a in actions:
        item = {"job_id": a.job_id, "account": a.account, "gpu_type": a.gpu_type, "gpus": a.gpus, "reason": a.reason}
        if a.for_job is not None:
            item["for_job"] = a.for_job
        if a.target_type:
            item["target_type"] = a.target_type
        a, step, state, msg, due = _perform(cluster, cfg, a, by_id, retyped, retype_ok, item, now, stamp)
        pid = _record(ps, cfg, a, step, state, msg, due, users.get(a.job_id, ""), round_id, stamp)
        item["preemption_id"] = pid
        out[state].append(item)
        store.event("preemption", f"job {a.job_id} ({a.account}, {a.gpus} {a.gpu_type}): {step}: {msg}",
                    round_id=round_id, job_id=a.job_id, account=a.account,
                    data={"step": step, "preemption_id": pid, "gpu_type": a.gpu_type, "gpus": a.gpus})


def _perform(cluster: Cluster, cfg: Config, a: Action, by_id: Mapping[int, Job], retyped: set[int], retype_ok: bool,
             item: dict[str, Any], now: float, stamp: float | None) -> tuple[Action, str, str, str, float | None]:
    """One step on Slurm: signal, requeue (and retype: a move's job, or the claimant of a reclaim) or cancel.
    Returns the step (a hold-back when Slurm refused a reclaim's requeue and the rule acts), what it is called,
    the state it leaves the preemption in (``failed`` on an error: ``item`` gets it), its message and due time."""
    step, state, msg, due = DONE[a.kind], DONE[a.kind], a.reason, a.due
    rule = cfg.preemption.unrequeueable
    try:
        if a.kind == "signal":
            cluster.signal_job(a.job_id, a.signal)
        elif a.kind == "requeue":
            cluster.requeue_job(a.job_id)
            if a.for_job is not None and not a.target_type and retype_ok:
                msg = _claimant_to(cluster, by_id.get(a.for_job), a.gpu_type, retyped, msg)
            if a.target_type:  # an upgrade move: the requeued (pending) job gets the faster type
                job = by_id.get(a.job_id)
                try:
                    cluster.set_job_gpu_type(a.job_id, a.target_type, job.gpus_per_node if job else a.gpus)
                    msg = f"{a.reason}; requeued as gres/gpu:{a.target_type}"
                except (ClusterError, InputError) as e:
                    msg = f"{a.reason}; requeued, but retyping it failed (it waits for {a.gpu_type}): {e}"
        elif a.kind == "cancel":
            cluster.cancel_job(a.job_id)
    except (ClusterError, InputError) as e:
        step, state, msg = f"{a.kind}-failed", "failed", f"{a.kind} failed: {e}"
        item["error"] = str(e)
        job = by_id.get(a.job_id)
        if a.kind == "requeue" and not a.target_type and UR.acts(rule) and job is not None:
            # Slurm refused the requeue (requeue=0 set since the snapshot, an salloc): the rule holds it back
            state = UR.HELD_BACK
            msg = (f"requeue failed: {e}; {a.account}'s {a.gpu_type} limits are lowered by its {a.gpus} GPUs "
                   f"and it starts no GPU job on any type until the demand it owes runs (preemption.unrequeueable = {rule})")
            due = UR.cancel_due(rule, job, stamp if stamp is not None else now, UR.end_after(cfg.preemption))
            a = Action(UR.HOLD_BACK, a.job_id, a.account, a.gpu_type, a.gpus, msg, record_id=a.record_id,
                       due=due, for_job=a.for_job)
    return a, step, state, msg, due


def _record(ps: PreemptionStore, cfg: Config, a: Action, step: str, state: str, msg: str, due: float | None,
            user: str, round_id: int | None, stamp: float | None) -> int:
    """Record the step performed: a new preemption (a signal, a hold-back, a job cancelled with a held-back one)
    or one more step of an open one. Returns the preemption's id."""
    if a.kind == UR.HOLD_BACK and a.record_id is None:
        return ps.add(job_id=a.job_id, account=a.account, user=user, gpu_type=a.gpu_type, gpus=a.gpus, signal="",
                      reason=a.reason, grace=0.0, round_id=round_id, message=msg, now=stamp, held_back=True, due=due,
                      for_job=a.for_job)
    if a.kind == UR.HOLD_BACK:
        ps.step(a.record_id, step, msg, state=state, round_id=round_id, now=stamp, due=due)
        return a.record_id
    if a.kind == "signal":
        return ps.add(job_id=a.job_id, account=a.account, user=user, gpu_type=a.gpu_type, gpus=a.gpus,
                      signal=a.signal, reason=a.reason, grace=float(cfg.preemption.grace), round_id=round_id,
                      ok=state != "failed", message="" if state != "failed" else msg, now=stamp,
                      target_type=a.target_type, for_job=a.for_job)
    pid = a.record_id
    if pid is None:  # cancelled with a held-back job (unrequeueable = cancel): recorded from here on
        pid = ps.add(job_id=a.job_id, account=a.account, user=user, gpu_type=a.gpu_type, gpus=a.gpus, signal="",
                     reason=a.reason, grace=0.0, round_id=round_id, message=a.reason, now=stamp, held_back=True,
                     for_job=a.for_job)
    ps.step(pid, step, msg, state=state, round_id=round_id, now=stamp)
    return pid


def _claimant_to(cluster: Cluster, claimant: Job | None, gpu_type: str, retyped: set[int], msg: str) -> str:
    """A reclaim's victims were requeued for ``claimant``: a pending flexible (``fair:flex``) job that
    ``job_submit.lua`` typed for another type waits for *that* type in Slurm, so the GPUs freed on ``gpu_type``
    would go to the next job there (the victim itself, once its restart delay is over: issue 28 saw victims restart
    on their own GPUs a minute later while the job they were freed for waited on). Its claim counted it for any
    type (its demand is untyped where Slurm retypes pending jobs), so it is moved to ``gpu_type`` with the requeue
    (once per round). Returns ``msg`` with what was done; a failed retype is said, never raised."""
    if claimant is None or not claimant.pending or not claimant.flexible or not claimant.gpu_type \
            or claimant.gpu_type == gpu_type or claimant.job_id in retyped:
        return msg
    try:
        cluster.set_job_gpu_type(claimant.job_id, gpu_type, claimant.gpus_per_node)
    except (ClusterError, InputError) as e:
        return f"{msg}; retyping job {claimant.job_id} to {gpu_type} failed (it waits for {claimant.gpu_type}): {e}"
    retyped.add(claimant.job_id)
    return f"{msg}; job {claimant.job_id} moved gres/gpu:{claimant.gpu_type} -> gres/gpu:{gpu_type} to start there"


def _lower_now(cluster: Cluster, decisions: P.Decisions, marked: list[dict[str, Any]], store: Store,
               round_id: int | None, snapshot: Snapshot) -> dict[str, Any]:
    """Lower the limits of the accounts whose jobs were held back in this round at once (the round's limits,
    already applied, do not have them yet; the next round's do: ``held_back``). Returns what was written (or the
    error); a failure is recorded, never raised."""
    pen: dict[str, dict[str, int]] = {}
    for m in marked:
        row = pen.setdefault(m["account"], {})
        row[m["gpu_type"]] = row.get(m["gpu_type"], 0) + int(m["gpus"])
    why = {m["account"]: f"held back in this round (job {m['job_id']})" for m in marked}
    lowered = UR.hold_back(decisions.planned, UR.freeze(pen, snapshot.jobs, why), decisions.plan.capacity)
    changes = {a: {k: v for k, v in lowered[a].items() if decisions.planned[a].get(k) != v}
               for a in pen if a in lowered}
    changes = {a: ch for a, ch in changes.items() if ch}
    if not changes:
        return {"accounts": {}, "note": "no managed account to lower"}
    try:
        cluster.set_accounts_gpu_limits(changes)
    except ClusterError as e:
        store.event("preemption", f"lowering held-back limits failed: {e}", round_id=round_id)
        return {"accounts": changes, "error": str(e)}
    return {"accounts": changes}
