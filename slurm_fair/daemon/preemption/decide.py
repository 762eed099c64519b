"""Fair-share preemption decisions: which running jobs get a checkpoint signal, which are requeued. Pure.

Slurm cannot move a running job to a preemptable QOS, so slurm-fair preempts itself, in two steps across
rounds: *signal* (the job checkpoints), then, once ``preemption.grace`` seconds have passed, *requeue* (the job
goes back to pending and resumes from its checkpoint when it runs again). :func:`decide` turns the round's
plan and the snapshot's jobs into those steps (typed: :mod:`.steps`); :mod:`.carry` performs and records them.

With lending limits the daemon passes the plan's reclaims (``reclaims``): new signals then go only to the
victims that complete a waiting job's placement, all of a claim's or none, and a reclaim is requeued only when
the job it was freed for would then start (:func:`.victims.signals`, :func:`.victims.due`). Without them (hard caps), the older rule by GPUs
per type below applies.

Rules for a new signal (all must hold):

(a) the job's account runs above its limit on that GPU type: GPUs in use of the type (``gpus_allocated`` of
    its running jobs, the real type also for untyped requests) > the planned limit;
(b) another account is under its share on that type (limit > in use) and has pending jobs that can run on it
    (typed for it, or untyped); the GPUs preempted on a type never exceed what those accounts can use there:
    their pending GPUs, each bounded by its limit room (an untyped pending GPU counts once, on one type);
    GPUs already being freed (signalled jobs waiting their grace) count first;
(c) the job has run at least ``preemption.min_runtime`` seconds;
(d) Slurm may requeue it (``Job.requeue``, and a batch job: an ``salloc`` allocation is never signalled); a job
    that meets every other condition but cannot be requeued is handled by ``preemption.unrequeueable``
    (:mod:`.unrequeueable`: its account is held back by its GPUs, or it is cancelled later, or it is only
    listed), as is a signalled job found non-requeue-able when its grace ends;
(e) its minimum run is over (:func:`.victims.min_run_end`): ``min_runtime`` after its start, its last requeue
    and its last signal by slurm-fair (so a job is never preempted twice within one minimum run and never
    re-signalled while it waits its grace);
(f) slurm-fair requeued it fewer than ``preemption.max_requeues_per_day`` times in the last 24 h.

Order: the account with the most GPUs above its limit (on any type, re-evaluated after every pick; ties: the
account name) first, and within it the newest job (latest start, then highest id). At most ``preemption.max_jobs_per_round`` signals.

A signalled job whose grace has passed is requeued if it still runs and its account is still over its limit
on that type while someone still waits for the type; otherwise the preemption is *resolved* (recorded, not
requeued). A signalled job that no longer runs (it ended, or requeued itself after checkpointing), or that
runs again after a restart since the signal, is *gone*.
"""


from __future__ import annotations

import heapq
from typing import Any, Mapping, Sequence

from ...cluster.base import Job
from ...config import PreemptionConfig
from ..plan.demand import FreeGPUs
from ..plan.reclaim import Reclaim
from . import record as _states
from . import unrequeueable as UR
from . import victims as V
from .record import SIGNALLED, PreemptionRecord
from .steps import Action, Decision, Skip
from .waiting import WaitingGPUs, in_use, waiting_for

STATES = _states.STATES  # every state a preemption can be in
OPEN = SIGNALLED  # state of a preemption waiting for its grace to end (the states: record.py)
Record = PreemptionRecord  # what decisions read of a preemption: the typed record of the store


def decide(limits: Mapping[str, Mapping[str, int]], jobs: Sequence[Job], history: Sequence[Record],
           now: float, cfg: PreemptionConfig, idle: Mapping[str, int] | None = None, word: str = "limit",
           upgrade_ok: Any = None, reclaims: Sequence[Reclaim] | None = None,
           free: FreeGPUs | None = None, slurm_limits: Mapping[str, Mapping[str, int]] | None = None) -> Decision:
    """The preemption steps of this round (see the module docstring).

    ``limits``: what each account is entitled to per type — its guarantee when limits lend (the daemon's
    default), its limit when limits are hard caps (the untyped total ``"*"`` is ignored; accounts not listed
    are never preempted and never count as waiting). ``jobs``: the managed GPU jobs of the snapshot.
    ``history``: every preemption the store knows for these jobs (open ones included). ``cfg``: the
    ``[preemption]`` section (grace, min_runtime, signal, max_jobs_per_round). ``idle``: GPUs free now per type:
    waiting accounts are served from them first, so nothing is preempted for GPUs that stand idle. ``word``: what
    ``limits`` are called in the reasons ("guarantee" or "limit"). ``upgrade_ok(record)``: for an open upgrade
    move whose grace is over, None when its job can still start on the target type, else why not (then it is
    resolved, not requeued); None: every such move is resolved. ``reclaims`` (limits lend): the plan's claims
    served by reclaim — new signals go to their victims only, all of a claim's or none, and a reclaim recorded
    for a waiting job is requeued only when that job would then start (:mod:`.victims`; ``free``: the GPUs idle
    now, node by node); None: the older rule by GPUs per type (hard caps). ``slurm_limits``: the limits the round
    writes (type or ``"*"`` -> GPUs): a reclaim is requeued only when what it frees reaches its claimant's account
    in Slurm's order under them (:func:`.victims.due`)."""
    use = in_use(jobs)
    running = {j.job_id: j for j in jobs if j.running}
    known = {j.job_id: j for j in jobs}
    waiting = waiting_for(limits, use, jobs)
    for t, n in sorted((idle or {}).items()):
        if n > 0:
            waiting.take(t, int(n))
    over = {a: {t: n - int(limits[a][t]) for t, n in per.items() if t in limits[a] and n > int(limits[a][t])}
            for a, per in use.items() if a in limits}
    over = {a: per for a, per in over.items() if per}
    waiting_before = {t: waiting.available(t) for t in sorted({t for per in limits.values() for t in per if t != "*"})}
    excess = {a: dict(per) for a, per in over.items()}
    actions: list[Action] = []
    skipped: list[Skip] = []

    rule = str(getattr(cfg, "unrequeueable", UR.IGNORE))
    cancel_grace = UR.end_after(cfg)  # cancel_grace under "cancel", hold_back_max under "hold-back" (issue 41)
    # 0. jobs held back because they cannot be requeued (unrequeueable.py): gone, cancelled or resolved
    actions.extend(UR.held_back_steps(history, running, known, excess, waiting, idle or {}, now, rule, limits, use,
                                      word, grace=cancel_grace))
    # 1. open preemptions: they free GPUs first (in grace), or are requeued / resolved / gone now
    actions.extend(_open_steps(history, running, known, excess, waiting, now, rule, cancel_grace, limits, use, word,
                               upgrade_ok, reclaims, free, slurm_limits))
    # 2. new signals: most over-share account first, its newest job first
    taken: set[int] = ({r.job_id for r in history if r.state in (OPEN, UR.HELD_BACK)}
                       | {x.job_id for x in actions if x.kind == "cancel"})
    if reclaims is not None:  # by claims: the victims that complete a waiting job's placement
        V.signals(reclaims, running, history, now, cfg, taken, rule, cancel_grace, actions, skipped, limits, use,
                  free, word)
    else:  # by GPUs per type (hard caps)
        _by_gpus(over, excess, waiting, running, history, now, cfg, taken, rule, cancel_grace, actions, skipped,
                 limits, use, word)
    return Decision(tuple(actions), tuple(skipped), over, waiting_before)


def _open_steps(history: Sequence[Record], running: Mapping[int, Job], known: Mapping[int, Job],
                excess: dict[str, dict[str, int]], waiting: WaitingGPUs, now: float, rule: str, cancel_grace: float,
                limits: Mapping[str, Mapping[str, int]], use: Mapping[str, Mapping[str, int]], word: str,
                upgrade_ok: Any, reclaims: Sequence[Reclaim] | None, free: FreeGPUs | None,
                slurm_limits: Mapping[str, Mapping[str, int]] | None = None) -> list[Action]:
    """What becomes of the open (signalled) preemptions, oldest signal first: ``gone`` (the job no longer runs,
    or restarted), nothing yet (in its grace: its GPUs count as being freed), or ``requeue`` / ``resolve`` — a
    reclaim for a waiting job by its claim (:func:`.victims.due`), an upgrade move by ``upgrade_ok``, any other
    while its account is still over and someone waits — or held back when it was made non-requeue-able."""
    actions: list[Action] = []
    by_claim = (V.due([r for r in history if r.state == OPEN], running, known, free, now, slurm_limits, use)
                if reclaims is not None else {})
    for r in sorted((r for r in history if r.state == OPEN), key=lambda r: (r.signalled_at or 0, r.id)):
        job = running.get(r.job_id)
        gone = _gone(r, job, known)
        if gone is not None:
            actions.append(gone)
            continue
        assert job is not None  # (_gone says so when it is not running)
        g = int(job.gpus_allocated.get(r.gpu_type, r.gpus))
        if reclaims is not None and r.for_job is not None and not r.target_type and (
                r.id not in by_claim or UR.why_not_requeueable(job) is None):
            if r.id not in by_claim:  # its claim still has a member in its grace
                continue
            why_not = by_claim[r.id]
            actions.append(_requeue_or_resolve(
                r, g, why_not, f"grace over; the job it was freed for ({r.for_job}) starts on what it frees",
                f"{why_not}", for_job=r.for_job))
            continue
        if r.target_type:  # an upgrade move: requeued onto the faster type while that still has room for it
            if r.requeue_at is not None and now < r.requeue_at:
                continue
            why_not = "no check given" if upgrade_ok is None else upgrade_ok(r)
            actions.append(_requeue_or_resolve(
                r, g, why_not, f"grace over; upgrade move {r.gpu_type} -> {r.target_type}",
                f"upgrade to {r.target_type} no longer possible ({why_not})", target_type=r.target_type))
            continue
        ex = excess.get(r.account, {}).get(r.gpu_type, 0)
        avail = waiting.available(r.gpu_type)
        if r.requeue_at is not None and now < r.requeue_at:  # still in its grace: counts as being freed
            excess.setdefault(r.account, {})[r.gpu_type] = ex - g
            waiting.take(r.gpu_type, g)
            continue
        nr = UR.why_not_requeueable(job)
        if ex > 0 and avail > 0 and nr is not None:  # made non-requeue-able during its grace: nothing is freed
            if UR.acts(rule):
                actions.append(Action(
                    UR.HOLD_BACK, r.job_id, r.account, r.gpu_type, g,
                    f"grace over, but it is {nr}: {r.account}'s {r.gpu_type} limits are lowered by its {g} GPUs until "
                    f"it ends (preemption.unrequeueable = {rule})", record_id=r.id,
                    due=UR.cancel_due(rule, job, now, cancel_grace)))
            else:
                actions.append(Action("resolve", r.job_id, r.account, r.gpu_type, g,
                                      f"resolved, not requeued: it is {nr} (preemption.unrequeueable = ignore)",
                                      record_id=r.id))
            continue
        if ex > 0 and avail > 0:
            lim = int(limits[r.account][r.gpu_type])
            actions.append(Action(
                "requeue", r.job_id, r.account, r.gpu_type, g,
                f"grace over; {r.account} still uses {use[r.account][r.gpu_type]} {r.gpu_type} GPUs with a {word} of "
                f"{lim}, and accounts under their share can start {avail} {r.gpu_type} GPUs", record_id=r.id))
            excess[r.account][r.gpu_type] = ex - g
            waiting.take(r.gpu_type, g)
        else:
            why = (f"{r.account} is no longer above its {r.gpu_type} {word}" if ex <= 0 else
                   f"no account under its share waits for {r.gpu_type} any more")
            actions.append(Action("resolve", r.job_id, r.account, r.gpu_type, g, f"resolved, not requeued: {why}",
                                  record_id=r.id))
    return actions


def _gone(r: Record, job: Job | None, known: Mapping[int, Job]) -> Action | None:
    """``gone`` for a signalled job that no longer runs (ended, or requeued itself) or restarted since the
    signal (``job``: it, running; None: not running); None while it still runs as signalled."""
    if job is None:
        other = known.get(r.job_id)
        why = ("no longer running: it ended before its grace was over" if other is None else
               f"no longer running ({other.state}, restarts {other.restart_count}): it requeued itself or "
               "was requeued by someone else")
        return Action("gone", r.job_id, r.account, r.gpu_type, r.gpus, why, record_id=r.id)
    if r.signalled_at is not None and job.start_time is not None and job.start_time > r.signalled_at:
        return Action("gone", r.job_id, r.account, r.gpu_type, r.gpus,
                      f"restarted since the signal (restarts {job.restart_count}): not requeued again",
                      record_id=r.id)
    return None


def _requeue_or_resolve(r: Record, g: int, why_not: str | None, requeue: str, resolve: str,
                        for_job: int | None = None, target_type: str | None = None) -> Action:
    """The step of an open preemption whose grace is over: ``requeue`` it (``why_not`` None; the reason
    ``requeue``), else ``resolve`` it without a requeue (the reason: ``resolve``)."""
    if why_not is None:
        return Action("requeue", r.job_id, r.account, r.gpu_type, g, requeue, record_id=r.id,
                      target_type=target_type, for_job=for_job)
    return Action("resolve", r.job_id, r.account, r.gpu_type, g, f"resolved, not requeued: {resolve}",
                  record_id=r.id, for_job=for_job)


def _by_gpus(over: dict[str, dict[str, int]], excess: dict[str, dict[str, int]], waiting: WaitingGPUs,
             running: Mapping[int, Job], history: Sequence[Record], now: float, cfg: PreemptionConfig,
             taken: set[int], rule: str, cancel_grace: float, actions: list[Action], skipped: list[Skip],
             limits: Mapping[str, Mapping[str, int]], use: Mapping[str, Mapping[str, int]], word: str) -> None:
    """New signals by GPUs per type (hard caps; rules (a)-(f) and the order of the module docstring): the most
    over-share account first, its newest job first, at most ``max_jobs_per_round``; a job Slurm cannot requeue
    is held back (at most the account's excess) or skipped."""
    cap = int(cfg.max_jobs_per_round)
    by_job: dict[int, list[Record]] = {}
    for r in history:
        by_job.setdefault(r.job_id, []).append(r)
    candidates = _candidates(over, running)
    considered: set[tuple[int, str]] = set()
    n_signals = 0
    dodge = _dodge(over, actions, history, running)

    def key(a: str, t: str) -> tuple[int, int, str, str]:
        return (-sum(max(v, 0) for v in excess[a].values()), -excess[a][t], a, t)

    # a lazy heap of (account, type) pairs: priorities only fall (excess and waiting GPUs only shrink), so a
    # popped entry whose priority changed is pushed back with the current one
    heap = [key(a, t) for (a, t) in candidates]
    heapq.heapify(heap)
    while heap:
        k = heapq.heappop(heap)
        a, t = k[2], k[3]
        if excess[a][t] <= 0 or not candidates[(a, t)] or waiting.available(t) <= 0:
            continue  # none of these comes back
        if key(a, t) != k:
            heapq.heappush(heap, key(a, t))
            continue
        heapq.heappush(heap, k)  # stays in play; re-checked when popped next
        job = candidates[(a, t)].pop()  # newest first (the list is sorted oldest first)
        if job.job_id in taken:
            continue
        g = int(job.gpus_allocated[t])
        avail = waiting.available(t)
        why = _ineligible(job, g, avail, t, by_job.get(job.job_id, ()), now, cfg)
        nr = UR.why_not_requeueable(job) if why is None else None
        if nr is not None:  # preemption would take it, but Slurm cannot requeue it: the rule, not the cap
            if UR.acts(rule) and dodge.get((a, t), 0) > 0:
                dodge[(a, t)] -= g
                actions.append(Action(
                    UR.HOLD_BACK, job.job_id, a, t, g,
                    f"{a} uses {use[a][t]} {t} GPUs with a {word} of {int(limits[a][t])} and accounts under their "
                    f"share can start {avail} {t} GPUs, but the job is {nr}: {a}'s {t} limits are lowered by its "
                    f"{g} GPUs and it starts no GPU job on any type until the accounts it owes run (preemption.unrequeueable = {rule})",
                    due=UR.cancel_due(rule, job, now, cancel_grace)))
                taken.add(job.job_id)
            elif (job.job_id, t) not in considered:
                skipped.append(Skip(job.job_id, a, t, nr if not UR.acts(rule) else UR.ACROSS.format(nr=nr, a=a)))
                considered.add((job.job_id, t))
            continue
        if why is None and n_signals >= cap:  # would be signalled: listed, and its GPUs counted as handled
            skipped.append(Skip(job.job_id, a, t, f"per-round cap reached (preemption.max_jobs_per_round = {cap})"))
            excess[a][t] -= g
            waiting.take(t, g)
            continue
        if why is not None:
            if (job.job_id, t) not in considered:
                skipped.append(Skip(job.job_id, a, t, why))
                considered.add((job.job_id, t))
            continue
        lim = int(limits[a][t])
        actions.append(Action(
            "signal", job.job_id, a, t, g,
            f"{a} uses {use[a][t]} {t} GPUs with a {word} of {lim} ({over[a][t]} over); accounts under their "
            f"share can start {avail} {t} GPUs; newest job of the most over-share account",
            signal=cfg.signal))
        taken.add(job.job_id)
        n_signals += 1
        excess[a][t] -= g
        waiting.take(t, g)


def _candidates(over: Mapping[str, Mapping[str, int]], running: Mapping[int, Job]) -> dict[tuple[str, str], list[Job]]:
    """(account, type) -> the account's running jobs holding GPUs of the type, for every type it is over on,
    oldest first (the newest is taken first, from the end)."""
    by_account: dict[str, list[Job]] = {}
    for j in running.values():
        if j.account in over:
            by_account.setdefault(j.account, []).append(j)
    candidates: dict[tuple[str, str], list[Job]] = {}
    for a, per in over.items():
        for t in per:
            js = [j for j in by_account.get(a, ()) if j.gpus_allocated.get(t, 0) > 0]
            candidates[(a, t)] = sorted(js, key=lambda j: (-(j.start_time or 0), -j.job_id), reverse=True)
    return candidates


def _dodge(over: Mapping[str, Mapping[str, int]], actions: Sequence[Action], history: Sequence[Record],
           running: Mapping[int, Job]) -> dict[tuple[str, str], int]:
    """GPUs preemption would take from each (account, type) that non-requeue-able jobs may still stand for: a
    hold-back replaces a preemption, so at most the excess is held back (GPUs already held back count first)."""
    dodge = {(a, t): n for a, per in over.items() for t, n in per.items()}
    for x in actions:
        if x.kind == UR.HOLD_BACK:
            dodge[(x.account, x.gpu_type)] = dodge.get((x.account, x.gpu_type), 0) - x.gpus
    for r in history:
        if r.state == UR.HELD_BACK and r.job_id in running:
            dodge[(r.account, r.gpu_type)] = dodge.get((r.account, r.gpu_type), 0) - r.gpus
    return dodge


def _ineligible(job: Job, g: int, avail: int, t: str, history: Sequence[Record], now: float,
                cfg: PreemptionConfig) -> str | None:
    """Why the job is no candidate for a new signal (rules (c), (e), (f) and (b)'s bound), None if it is."""
    ran = now - float(job.start_time or now)
    if ran < float(cfg.min_runtime):
        return f"ran {ran:.0f} s < preemption.min_runtime {float(cfg.min_runtime):g} s"
    end, what = V.min_run_end(job, history, float(cfg.min_runtime))
    if now < end:
        return f"lease: its last {what} was {now - (end - float(cfg.min_runtime)):.0f} s ago (< min_runtime)"
    if g > avail:
        return f"holds {g} {t} GPUs; accounts under their share can use only {avail} there"
    return V.blockers([job], history, now, cfg).get(job.job_id)  # requeues per day
