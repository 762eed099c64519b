"""Reclaim by claims: which borrowers' jobs are signalled for which waiting job, and when they are requeued. Pure.

The round's plan names every claim served by reclaim (:class:`.plan.reclaim.Reclaim`: a waiting job, the nodes
Slurm would place it on, the borrowers' running jobs whose GPUs complete that placement). For each, in the
plan's order (accounts furthest below their guarantee first), :func:`signals` signals **all of its victims or
none**: a part of them would free GPUs the waiting job still could not start on. None when a victim

* is in its minimum run (``preemption.min_runtime`` since its start, last requeue or last signal: :func:`min_run_end`),
* was requeued ``preemption.max_requeues_per_day`` times in the last 24 h (a sliding window),
* is a job GPUs were reclaimed for in the last 24 h (:func:`reclaimed_for`: reclaim converges — what a reclaim
  freed for a job is not reclaimed from it for another account's job that day),
* cannot be requeued (``preemption.unrequeueable``: hold-back / cancel hold it back instead; the others wait),
* or the requeue does not pay (:func:`pays`), or it would pass ``max_jobs_per_round``.

Each signal records the job it is for (``for_job``). When the grace is over, :func:`due` requeues a claim's
victims together only if the job they were freed for still waits and would start on what they free (the idle
GPUs plus theirs, placed as Slurm would): never is a job requeued to restart on the same type while the job it
was freed for still cannot start; otherwise they are resolved, not requeued.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from ...cluster.base import Job
from ...config import PreemptionConfig
from ..plan.demand import FreeGPUs, place_gpus, startable
from ..plan.reclaim import Borrowed, Reclaim
from . import unrequeueable as UR
from .order import first_taker
from .record import REQUEUED, SIGNALLED, PreemptionRecord
from .steps import Action, Skip

DAY = 86400.0


def _requeued_in_day(r: PreemptionRecord, now: float) -> bool:
    """The record is a requeue in the 24 h before ``now``."""
    return r.state == REQUEUED and r.requeued_at is not None and r.requeued_at >= now - DAY


def requeues_in_day(history: Iterable[PreemptionRecord], job_id: int, now: float) -> int:
    """Requeues of the job by slurm-fair in the 24 h before ``now``, plus its open signals (about to be)."""
    n = 0
    for r in history:
        if r.job_id != job_id:
            continue
        if r.state == SIGNALLED or _requeued_in_day(r, now):
            n += 1
    return n


def expected_left(job: Job, now: float) -> float:
    """Seconds the running job is expected to run on: its time limit less what it ran, where it has one; else as
    long again as it has run (nothing better is known). ``UNLIMITED`` (a job the main scheduler started) and
    backfill's ``365-00:00:00`` (one the backfill scheduler started) are both "none" (``Job.time_limit`` None), so
    the gain of a requeue does not depend on which scheduler started the victim."""
    ran = max(0.0, now - float(job.start_time or now))
    if job.time_limit is not None:  # a year or more (backfill's "no limit") reads as none: cluster.base.known_limit
        return max(0.0, float(job.time_limit) * 60.0 - ran)
    return ran


def min_run_end(job: Job, history: Sequence[PreemptionRecord], min_runtime: float) -> tuple[float, str]:
    """When the job's minimum run (``preemption.min_runtime``) is over, so that it may be preempted again, and what
    started that run: its start, its last requeue or its last checkpoint signal by slurm-fair (``history``: the
    job's records)."""
    start, what = float(job.start_time or 0), "start"
    for r in history:
        for t, w in ((r.signalled_at, "checkpoint signal"), (r.requeued_at, "requeue")):
            if t is not None and t > start:
                start, what = float(t), w
    return start + float(min_runtime), what


def pays(gpus: int, victims: Sequence[Job], now: float, cfg: PreemptionConfig) -> tuple[bool, str]:
    """Does freeing ``victims`` for a waiting job of ``gpus`` GPUs pay (gain >= cost)? Gain: its GPUs × the time it would
    otherwise wait for them (the longest victim's expected rest, :func:`expected_left`) less the grace; cost:
    each victim's GPUs × ``preemption.upgrade_cost`` (restart, reload, the work since its last checkpoint)."""
    wait = max(expected_left(v, now) for v in victims)
    gain = gpus * max(0.0, wait - float(cfg.grace))
    cost = sum(v.gpus for v in victims) * float(cfg.upgrade_cost)
    why = (f"gain {gain:.0f} GPU-s ({gpus} GPUs x {wait:.0f} s expected wait - {float(cfg.grace):g} s grace) vs cost "
           f"{cost:.0f} GPU-s ({sum(v.gpus for v in victims)} GPUs x upgrade_cost {float(cfg.upgrade_cost):g} s)")
    return gain >= cost, why


def blockers(victims: Sequence[Job], history: Sequence[PreemptionRecord], now: float,
             cfg: PreemptionConfig) -> dict[int, str]:
    """victim id -> why it cannot be signalled now (minimum run, daily bound); not listed: it can."""
    out: dict[int, str] = {}
    limit = int(cfg.max_requeues_per_day)
    for v in victims:
        mine = [r for r in history if r.job_id == v.job_id]
        ran = now - float(v.start_time or now)
        end, what = min_run_end(v, mine, float(cfg.min_runtime))
        if ran < float(cfg.min_runtime):
            out[v.job_id] = f"ran {ran:.0f} s < preemption.min_runtime {float(cfg.min_runtime):g} s"
        elif now < end:
            out[v.job_id] = f"lease: its last {what} was {now - (end - float(cfg.min_runtime)):.0f} s ago (< min_runtime)"
        elif requeues_in_day(mine, v.job_id, now) >= limit:
            out[v.job_id] = (f"requeued {requeues_in_day(mine, v.job_id, now)} times in the last 24 h "
                             f"(preemption.max_requeues_per_day = {limit})")
        elif (at := reclaimed_for(history, v.job_id, now, set(v.gpus_allocated))) is not None:
            out[v.job_id] = (f"GPUs were reclaimed for it {now - at:.0f} s ago: a reclaim's job keeps them for 24 h "
                             "(no reclaim takes them back for another account's job)")
    return out


def reclaimed_for(history: Iterable[PreemptionRecord], job_id: int, now: float,
                  on: set[str] | None = None) -> float | None:
    """When a reclaim last requeued jobs for ``job_id`` (it was their ``for_job``) within the 24 h before ``now``;
    None if none did. ``on``: the types the job holds now — only a reclaim of one of them counts: protection
    follows what was reclaimed, so an untyped job that started on another type than the one freed for it (Slurm
    placed it where a GPU was free first) is not protected there (issue 39); None: any type. Such a job is no reclaim's victim for that day (:func:`blockers`): measured in the simulator
    (issue 28, 90 % load, seed 0), two accounts' 8-GPU jobs took the P100s from each other by reclaim every
    ~1 000 s — each starved account's claim grew until its job got a window, and the reclaim for it requeued the
    job the last reclaim had been for."""
    times = [float(r.requeued_at) for r in history if r.for_job == job_id and _requeued_in_day(r, now)
             and (on is None or r.gpu_type in on)]
    return max(times) if times else None


def due(records: Sequence[PreemptionRecord], running: Mapping[int, Job], known: Mapping[int, Job],
        free: FreeGPUs | None, now: float, slurm_limits: Mapping[str, Mapping[str, int]] | None = None,
        use: Mapping[str, Mapping[str, int]] | None = None) -> dict[int, str | None]:
    """For the open reclaims (``for_job`` set) whose grace is over, grouped by the job they were freed for:
    record id -> None (requeue it) or why it is resolved instead. A group with a member still in its grace
    waits (not listed). Members no longer running are left to the caller (``gone``).

    Groups go in Slurm's order of their claimants (priority, then submit time, job id), each on the idle GPUs
    plus what the groups before it free: a group is requeued only when its claimant would start there and the
    GPUs it frees reach the claimant's account in Slurm's order (:func:`.order.first_taker`, with
    ``slurm_limits``, the limits the round writes, and ``use``, GPUs held per account and type): when a job of
    another account would take them first, the group waits a round if another group is requeued now (what that
    one frees changes the order: the claims are served one after another), else it is resolved, naming that job."""
    groups: dict[int, list[PreemptionRecord]] = {}
    for r in records:
        if r.for_job is not None and r.target_type is None:
            groups.setdefault(int(r.for_job), []).append(r)

    def rank(fj: int) -> tuple[int, int, int]:
        c = known.get(fj)
        return (0, 0, fj) if c is None else (-int(c.priority), int(c.submit_time), fj)

    pending = [j for j in known.values() if j.pending]
    freed: dict[str, dict[str, int]] = {}
    out: dict[int, str | None] = {}
    later: dict[int, str] = {}
    for fj in sorted(groups, key=rank):
        rs = groups[fj]
        live = [r for r in rs if r.job_id in running]
        if any(r.requeue_at is not None and now < r.requeue_at for r in live):
            continue
        claimant = known.get(fj)
        why = None
        mine: dict[str, dict[str, int]] = {}
        if claimant is None:
            why = f"the job it was freed for ({fj}) is gone"
        elif claimant.running:
            why = f"the job it was freed for ({fj}) has started"
        elif not startable(claimant):
            why = f"the job it was freed for ({fj}) cannot start now ({claimant.reason})"
        elif free is not None:
            t = rs[0].gpu_type
            idle = {x: dict(row) for x, row in free.free.items()}  # idle now, and what the groups before free
            for x, row in freed.items():
                for g, k in row.items():
                    idle[x][g] = idle[x].get(g, 0) + k
            for r in live:
                for x, k in running[r.job_id].node_gpus.items():
                    if x in free.free:
                        mine.setdefault(x, {})[t] = mine.get(x, {}).get(t, 0) + int(k)
            room = {x: dict(row) for x, row in idle.items()}
            for x, row in mine.items():
                room[x][t] = room[x].get(t, 0) + row[t]
            if place_gpus(room, free.size, t, claimant.gpus) is None:
                why = (f"the job it was freed for ({fj}, {claimant.gpus} {t} GPUs) would still not start on what "
                       "the requeue frees: not requeued to restart on the same type")
            elif (other := first_taker(claimant, mine, idle, free.size, pending, slurm_limits,
                                       use or {})) is not None:
                later[fj] = (f"job {other.job_id} of {other.account} (priority {other.priority}) would take the GPUs "
                             f"it frees before the job it was freed for ({fj}, {claimant.account}): Slurm starts "
                             "pending jobs in priority order and an untyped request is bound by the total only")
                continue
        if why is None:
            for x, row in mine.items():
                for g, k in row.items():
                    freed.setdefault(x, {})[g] = freed.get(x, {}).get(g, 0) + k
        for r in live:
            out[int(r.id)] = why
    for fj, why in later.items():  # the order changes with what is requeued now: wait a round for it
        if not any(v is None for v in out.values()):
            for r in groups[fj]:
                if r.job_id in running:
                    out[int(r.id)] = why
    return out


def signals(reclaims: Sequence[Reclaim], running: Mapping[int, Job], history: Sequence[PreemptionRecord], now: float,
            cfg: PreemptionConfig, taken: set[int], rule: str, cancel_grace: float, actions: list[Action],
            skipped: list[Skip], limits: Mapping[str, Mapping[str, int]], use: Mapping[str, Mapping[str, int]],
            free: FreeGPUs | None, word: str) -> None:
    """New signals for the plan's claims served by reclaim (module docstring): all of a claim's victims or none.
    A victim Slurm cannot requeue is held back (``preemption.unrequeueable``, at most its account's excess) or
    skipped, and the claim is placed again without it (:meth:`.plan.reclaim.Borrowed.place`): others go in its
    place, as many as the account still holds above its guarantee."""
    cap = int(cfg.max_jobs_per_round)
    n = sum(a.kind == "signal" for a in actions)
    gone = {r.job_id for r in history if r.state == UR.HELD_BACK} | {a.job_id for a in actions if a.kind == UR.HOLD_BACK}
    held: dict[tuple[str, str], int] = {}
    for r in history:
        if r.state == UR.HELD_BACK and r.job_id in running:
            held[(r.account, r.gpu_type)] = held.get((r.account, r.gpu_type), 0) + r.gpus
    for x in actions:
        if x.kind == UR.HOLD_BACK:
            held[(x.account, x.gpu_type)] = held.get((x.account, x.gpu_type), 0) + x.gpus
    for rc in reclaims:
        t = rc.gpu_type
        tag = f"for job {rc.job_id} of {rc.account} ({rc.gpus} {t} GPUs on {', '.join(sorted(rc.where))})"
        victims: tuple[int, ...] | None = rc.victims
        for _ in range(2 * len(running) + 2):  # every other pass takes one more job out: bounded
            if victims is None or any(v not in running for v in victims):
                break
            if any(v in gone for v in victims):  # place it again without the jobs held back or skipped
                got = None if free is None else Borrowed([h for h in free.holders if h.job_id not in gone],
                                                         limits, use).place(free.free, free.size, t, rc.gpus)
                victims = None if got is None else tuple(h.job_id for h in got[1])
                continue
            stuck = {v: UR.why_not_requeueable(running[v]) for v in victims if v not in taken}
            stuck = {v: w for v, w in stuck.items() if w is not None}
            if not stuck:
                break
            for v, w in stuck.items():
                j = running[v]
                g = int(j.gpus_allocated.get(t, j.gpus))
                over = use.get(j.account, {}).get(t, 0) - int(limits.get(j.account, {}).get(t, 0))
                if UR.acts(rule) and held.get((j.account, t), 0) < over:
                    held[(j.account, t)] = held.get((j.account, t), 0) + g
                    actions.append(Action(
                        UR.HOLD_BACK, v, j.account, t, g,
                        f"{tag}: the job is {w}: {j.account}'s {t} limits are lowered by its {g} GPUs and it starts no GPU "
                        f"job on any type until job {rc.job_id} runs (preemption.unrequeueable = {rule})",
                        due=UR.cancel_due(rule, j, now, cancel_grace), for_job=rc.job_id))
                    taken.add(v)
                else:
                    skipped.append(Skip(v, j.account, t, f"{tag}: " + (
                        w if not UR.acts(rule) else UR.ACROSS.format(nr=w, a=j.account))))
                gone.add(v)
        new = [running[v] for v in (victims or ()) if v in running and v not in taken]
        if (victims is None or any(v in gone for v in victims)
                or len(new) + sum(v in taken for v in victims) < len(victims) or not new):
            continue  # no placement left, a victim has gone (its GPUs come back anyway), or all are being freed
        block = blockers(new, history, now, cfg)
        if block:
            for v in new:
                skipped.append(Skip(v.job_id, v.account, t, f"{tag}: " + block.get(
                    v.job_id, "another victim of the same claim cannot be signalled now: none is")))
            continue
        ok, why = pays(rc.gpus, new, now, cfg)
        if not ok:
            for v in new:
                skipped.append(Skip(v.job_id, v.account, t, f"{tag}: the requeue does not pay: {why}"))
            continue
        if n + len(new) > cap:
            for v in new:
                skipped.append(Skip(v.job_id, v.account, t,
                                    f"{tag}: per-round cap reached (preemption.max_jobs_per_round = {cap})"))
            continue
        for v in new:
            g = int(v.gpus_allocated.get(t, v.gpus))
            actions.append(Action(
                "signal", v.job_id, v.account, t, g,
                f"{v.account} uses {use.get(v.account, {}).get(t, 0)} {t} GPUs with a {word} of "
                f"{int(limits.get(v.account, {}).get(t, 0))}; {tag}: its GPUs complete that job's placement; {why}",
                signal=cfg.signal, for_job=rc.job_id))
            taken.add(v.job_id)
            n += 1

