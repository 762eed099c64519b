"""Fair-share preemption decisions: which running jobs get a checkpoint signal, which are requeued. Pure.

Slurm cannot move a running job to a preemptable QOS, so slurm-fair preempts itself, in two steps across
rounds: *signal* (the job checkpoints), then, once ``preemption.grace`` seconds have passed, *requeue* (the job
goes back to pending and resumes from its checkpoint when it runs again). :func:`decide` turns the round's
plan and the snapshot's jobs into those steps; ``daemon/round.py`` performs and records them.

With lending limits the daemon passes the plan's reclaims (``reclaims``): new signals then go only to the
victims that complete a waiting job's placement, all of a claim's or none, and a reclaim is requeued only when
the job it was freed for would then start (:mod:`.victims`). Without them (hard caps), the older rule by GPUs
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
    (``daemon/unrequeueable.py``: its account is held back by its GPUs, or it is cancelled later, or it is only
    listed), as is a signalled job found non-requeue-able when its grace ends;
(e) its lease is over: ``min_runtime`` after its start, its last requeue and its last signal by slurm-fair
    (so a job is never preempted twice within a lease and never re-signalled while it waits its grace);
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
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from ..config import PreemptionConfig
from ..cluster.base import Job
from .. import preemptions as _states
from ..preemptions import SIGNALLED, PreemptionRecord
from . import unrequeueable as UR
from .plan.demand import FreeGPUs, startable
from .plan.reclaim import Borrowed, Reclaim
from . import victims as V

STATES = _states.STATES  # every state a preemption can be in
OPEN = SIGNALLED  # state of a preemption waiting for its grace to end (the states: slurm_fair/preemptions.py)
Record = PreemptionRecord  # what decisions read of a preemption: the typed record of the store


@dataclass(frozen=True)
class Action:
    kind: str  # signal | requeue | resolve | gone | hold-back | cancel
    job_id: int
    account: str
    gpu_type: str
    gpus: int
    reason: str
    signal: str = ""  # for kind == "signal"
    record_id: int | None = None  # the preemption this step belongs to (requeue/resolve/gone)
    target_type: str | None = None  # an upgrade move: the type the job gets with its requeue
    due: float | None = None  # hold-back: when the job is cancelled (preemption.unrequeueable = cancel), else None
    for_job: int | None = None  # a reclaim: the waiting job whose placement the freed GPUs complete


@dataclass(frozen=True)
class Skip:
    """A running job of an over-share account that was considered and not signalled, and why."""

    job_id: int
    account: str
    gpu_type: str
    reason: str


@dataclass(frozen=True)
class Decision:
    actions: tuple[Action, ...]
    skipped: tuple[Skip, ...]
    over: dict[str, dict[str, int]]  # account -> type -> GPUs in use above the limit (before this decision)
    waiting: dict[str, int]  # type -> GPUs that waiting accounts could use there (before this decision)

    def of(self, kind: str) -> list[Action]:
        return [a for a in self.actions if a.kind == kind]


def in_use(jobs: Iterable[Job]) -> dict[str, dict[str, int]]:
    """account -> type -> GPUs held by running jobs (real allocated types)."""
    out: dict[str, dict[str, int]] = {}
    for j in jobs:
        if j.running:
            row = out.setdefault(j.account, {})
            for t, n in j.gpus_allocated.items():
                row[t] = row.get(t, 0) + int(n)
    return out


def _types_of(job: Job) -> set[str] | None:
    """GPU types a pending job can run on; None = any (untyped request)."""
    if job.gpu_type is None:
        return None
    return {t for t in job.gpu_type.split(",") if t}


class _Waiting:
    """GPUs that accounts under their share could start on each type: pending GPUs, bounded by limit room.
    Taking GPUs on a type consumes typed demand first, then the account's untyped demand (shared by types).
    Every account's contribution only shrinks, so availability is kept up to date incrementally."""

    def __init__(self, room: dict[str, dict[str, int]], typed: dict[str, dict[str, int]], untyped: dict[str, int]):
        self.room, self.typed, self.untyped = room, typed, untyped
        self.contrib: dict[str, dict[str, int]] = {a: {t: self._usable(a, t) for t in r} for a, r in room.items()}
        self.avail: dict[str, int] = {}
        self.order: dict[str, list[str]] = {}  # type -> accounts that can use it (name order)
        self.first: dict[str, int] = {}  # type -> index of the first account in order that may still use it
        for a in sorted(self.contrib):
            for t, c in self.contrib[a].items():
                if c > 0:
                    self.avail[t] = self.avail.get(t, 0) + c
                    self.order.setdefault(t, []).append(a)

    def _usable(self, a: str, t: str) -> int:
        return min(self.room[a].get(t, 0), self.typed.get(a, {}).get(t, 0) + self.untyped.get(a, 0))

    def _refresh(self, a: str) -> None:
        for t, old in self.contrib[a].items():
            new = self._usable(a, t)
            if new != old:
                self.avail[t] = self.avail.get(t, 0) + new - old
                self.contrib[a][t] = new

    def available(self, t: str) -> int:
        return self.avail.get(t, 0)

    def take(self, t: str, n: int) -> None:
        order = self.order.get(t, [])
        i = self.first.get(t, 0)
        while n > 0 and i < len(order):
            a = order[i]
            k = min(n, self.contrib[a][t])
            if k <= 0:  # used up (contributions never grow back)
                i += 1
                continue
            n -= k
            self.room[a][t] -= k
            from_typed = min(k, self.typed.get(a, {}).get(t, 0))
            if from_typed:
                self.typed[a][t] -= from_typed
            if k - from_typed:
                self.untyped[a] = self.untyped.get(a, 0) - (k - from_typed)
            self._refresh(a)
        self.first[t] = i


def _waiting(limits: Mapping[str, Mapping[str, int]], use: Mapping[str, Mapping[str, int]],
             jobs: Iterable[Job]) -> _Waiting:
    room_all: dict[str, dict[str, int]] = {}
    for a, lim in limits.items():
        room = {t: int(n) - use.get(a, {}).get(t, 0) for t, n in lim.items() if t != "*"}
        room = {t: r for t, r in room.items() if r > 0}
        if room:
            room_all[a] = room
    typed: dict[str, dict[str, int]] = {}
    untyped: dict[str, int] = {}
    for j in jobs:
        if not startable(j) or j.account not in room_all or j.gpus <= 0:
            continue
        types = _types_of(j)
        if types is None:
            untyped[j.account] = untyped.get(j.account, 0) + j.gpus
        else:
            row = typed.setdefault(j.account, {})
            for t in types:  # a job asking for "a100,v100" can use either
                row[t] = row.get(t, 0) + j.gpus
    return _Waiting(room_all, typed, untyped)


def _lease_end(job: Job, history: Sequence[Record], min_runtime: float) -> tuple[float, str]:
    """When the job may be preempted again, and what started its current lease (``history``: the job's)."""
    start, what = float(job.start_time or 0), "start"
    for r in history:
        for t, w in ((r.signalled_at, "checkpoint signal"), (r.requeued_at, "requeue")):
            if t is not None and t > start:
                start, what = float(t), w
    return start + float(min_runtime), what


def decide(limits: Mapping[str, Mapping[str, int]], jobs: Sequence[Job], history: Sequence[Record],
           now: float, cfg: PreemptionConfig, idle: Mapping[str, int] | None = None, word: str = "limit",
           upgrade_ok: Any = None, reclaims: Sequence[Reclaim] | None = None,
           free: FreeGPUs | None = None) -> Decision:
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
    now, node by node); None: the older rule by GPUs per type (hard caps)."""
    use = in_use(jobs)
    running = {j.job_id: j for j in jobs if j.running}
    known = {j.job_id: j for j in jobs}
    waiting = _waiting(limits, use, jobs)
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
    cancel_grace = float(getattr(cfg, "cancel_grace", 0.0))
    # 0. jobs held back because they cannot be requeued (daemon/unrequeueable.py): gone, cancelled or resolved
    actions.extend(_held_back(history, running, known, excess, waiting, idle or {}, now, rule, limits, use, word))

    # 1. open preemptions: they free GPUs first (in grace), or are requeued / resolved / gone now
    by_claim = V.due([r for r in history if r.state == OPEN], running, known, free, now) if reclaims is not None else {}
    for r in sorted((r for r in history if r.state == OPEN), key=lambda r: (r.signalled_at or 0, r.id)):
        job = running.get(r.job_id)
        if job is None:
            other = known.get(r.job_id)
            why = ("no longer running: it ended before its grace was over" if other is None else
                   f"no longer running ({other.state}, restarts {other.restart_count}): it requeued itself or "
                   "was requeued by someone else")
            actions.append(Action("gone", r.job_id, r.account, r.gpu_type, r.gpus, why, record_id=r.id))
            continue
        if r.signalled_at is not None and job.start_time is not None and job.start_time > r.signalled_at:
            actions.append(Action("gone", r.job_id, r.account, r.gpu_type, r.gpus,
                                  f"restarted since the signal (restarts {job.restart_count}): not requeued again",
                                  record_id=r.id))
            continue
        g = int(job.gpus_allocated.get(r.gpu_type, r.gpus))
        if reclaims is not None and r.for_job is not None and not r.target_type and (
                r.id not in by_claim or UR.why_not_requeueable(job) is None):
            if r.id not in by_claim:  # its claim still has a member in its grace
                continue
            why_not = by_claim[r.id]
            if why_not is None:
                actions.append(Action("requeue", r.job_id, r.account, r.gpu_type, g,
                                      f"grace over; the job it was freed for ({r.for_job}) starts on what it frees",
                                      record_id=r.id, for_job=r.for_job))
            else:
                actions.append(Action("resolve", r.job_id, r.account, r.gpu_type, g,
                                      f"resolved, not requeued: {why_not}", record_id=r.id, for_job=r.for_job))
            continue
        if r.target_type:  # an upgrade move: requeued onto the faster type while that still has room for it
            if r.requeue_at is not None and now < r.requeue_at:
                continue
            why_not = "no check given" if upgrade_ok is None else upgrade_ok(r)
            if why_not is None:
                actions.append(Action("requeue", r.job_id, r.account, r.gpu_type, g,
                                      f"grace over; upgrade move {r.gpu_type} -> {r.target_type}",
                                      record_id=r.id, target_type=r.target_type))
            else:
                actions.append(Action("resolve", r.job_id, r.account, r.gpu_type, g,
                                      f"resolved, not requeued: upgrade to {r.target_type} no longer possible "
                                      f"({why_not})", record_id=r.id))
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

    # 2. new signals: most over-share account first, its newest job first
    cap = int(cfg.max_jobs_per_round)
    taken: set[int] = ({r.job_id for r in history if r.state in (OPEN, UR.HELD_BACK)}
                       | {x.job_id for x in actions if x.kind == "cancel"})
    if reclaims is not None:  # by claims: the victims that complete a waiting job's placement
        _by_claims(reclaims, running, history, now, cfg, taken, rule, cancel_grace, actions, skipped, limits, use,
                   free, word)
        return Decision(tuple(actions), tuple(skipped), over, waiting_before)
    by_job: dict[int, list[Record]] = {}
    for r in history:
        by_job.setdefault(r.job_id, []).append(r)
    by_account: dict[str, list[Job]] = {}
    for j in running.values():
        if j.account in over:
            by_account.setdefault(j.account, []).append(j)
    candidates: dict[tuple[str, str], list[Job]] = {}
    for a, per in over.items():
        for t in per:
            js = [j for j in by_account.get(a, ()) if j.gpus_allocated.get(t, 0) > 0]
            candidates[(a, t)] = sorted(js, key=lambda j: (-(j.start_time or 0), -j.job_id), reverse=True)
    considered: set[tuple[int, str]] = set()
    n_signals = 0
    # GPUs preemption would take from each (account, type) that non-requeue-able jobs may still stand for: a
    # hold-back replaces a preemption, so at most the excess is held back (GPUs already held back count first)
    dodge = {(a, t): n for a, per in over.items() for t, n in per.items()}
    for x in actions:
        if x.kind == UR.HOLD_BACK:
            dodge[(x.account, x.gpu_type)] = dodge.get((x.account, x.gpu_type), 0) - x.gpus
    for r in history:
        if r.state == UR.HELD_BACK and r.job_id in running:
            dodge[(r.account, r.gpu_type)] = dodge.get((r.account, r.gpu_type), 0) - r.gpus

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
    return Decision(tuple(actions), tuple(skipped), over, waiting_before)


def _by_claims(reclaims: Sequence[Reclaim], running: Mapping[int, Job], history: Sequence[Record], now: float,
               cfg: PreemptionConfig, taken: set[int], rule: str, cancel_grace: float, actions: list[Action],
               skipped: list[Skip], limits: Mapping[str, Mapping[str, int]], use: Mapping[str, Mapping[str, int]],
               free: FreeGPUs | None, word: str) -> None:
    """New signals for the plan's claims served by reclaim (:mod:`.victims`): all of a claim's victims or none.
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
        block = V.blockers(new, history, now, cfg, _lease_end)
        if block:
            for v in new:
                skipped.append(Skip(v.job_id, v.account, t, f"{tag}: " + block.get(
                    v.job_id, "another victim of the same claim cannot be signalled now: none is")))
            continue
        ok, why = V.pays(rc.gpus, new, now, cfg)
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


def _held_back(history: Sequence[Record], running: Mapping[int, Job], known: Mapping[int, Job],
               excess: dict[str, dict[str, int]], waiting: _Waiting, idle: Mapping[str, int], now: float, rule: str,
               limits: Mapping[str, Mapping[str, int]], use: Mapping[str, Mapping[str, int]], word: str
               ) -> list[Action]:
    """Held-back jobs (:mod:`.unrequeueable`): the hold-back ends once the demand it was for no longer waits (the
    job it was for started, ended or cannot start; without one, nobody under its share waits for the type):
    ``resolve``, or ``gone`` when the held-back job has ended too. A held-back job that ended while that demand
    still waits keeps its record open: its account stays held, and the GPUs it freed are the owed account's. With
    ``unrequeueable = "cancel"``, once their cancel time passed, ``cancel`` while their account is still over on
    that type and someone waits (the GPUs count as freed) — and the account's other non-requeue-able jobs there,
    newest first, as many GPUs as the owed job still needs — else ``resolve`` (the hold-back ends)."""
    out: list[Action] = []
    taken: set[int] = set()
    for r in sorted((r for r in history if r.state == UR.HELD_BACK), key=lambda r: r.id):
        job = running.get(r.job_id)
        waits, what = UR.owed_waits(r, known)
        if waits and r.for_job is None and waiting.available(r.gpu_type) <= 0:
            waits, what = False, f"no account under its share waits for {r.gpu_type} any more"
        if not waits:
            kind, ran = ("gone", "it has ended and ") if job is None else ("resolve", "")
            out.append(Action(kind, r.job_id, r.account, r.gpu_type, r.gpus,
                              f"{ran}{what}: the hold-back on its account ends", record_id=r.id, for_job=r.for_job))
            continue
        if job is None or rule != UR.CANCEL or r.requeue_at is None or now < r.requeue_at:  # salloc/srun too
            continue
        g = int(job.gpus_allocated.get(r.gpu_type, r.gpus))
        ex, avail = excess.get(r.account, {}).get(r.gpu_type, 0), waiting.available(r.gpu_type)
        if ex > 0 and avail > 0:
            owed = known.get(r.for_job) if r.for_job is not None else None
            need = (max(0, owed.gpus - int(idle.get(r.gpu_type, 0))) if owed is not None else min(ex, avail))
            taken.add(r.job_id)
            more = UR.also_cancelled(r.account, r.gpu_type, g, need, ex, running.values(),
                                     taken | {x.job_id for x in history if x.state == UR.HELD_BACK})
            out.append(Action("cancel", r.job_id, r.account, r.gpu_type, g,
                              f"cancel_grace over; {r.account} still uses {use[r.account][r.gpu_type]} {r.gpu_type} GPUs "
                              f"with a {word} of {int(limits[r.account][r.gpu_type])} and accounts under their share "
                              f"can start {avail} there; it cannot be requeued (preemption.unrequeueable = cancel)",
                              record_id=r.id, for_job=r.for_job))
            for m in more:
                mg = int(m.gpus_allocated.get(r.gpu_type, 0))
                out.append(Action("cancel", m.job_id, m.account, r.gpu_type, mg,
                                  f"cancelled with held-back job {r.job_id}: {r.account}'s other job on {r.gpu_type} "
                                  f"is {UR.why_not_requeueable(m)}, and {what} needing {need} GPUs "
                                  "(newest first; preemption.unrequeueable = cancel)", for_job=r.for_job))
                taken.add(m.job_id)
            freed = g + sum(int(m.gpus_allocated.get(r.gpu_type, 0)) for m in more)
            excess[r.account][r.gpu_type] = ex - freed
            waiting.take(r.gpu_type, freed)
        else:
            why = (f"{r.account} is no longer above its {r.gpu_type} {word}" if ex <= 0 else
                   f"no account under its share waits for {r.gpu_type} any more")
            out.append(Action("resolve", r.job_id, r.account, r.gpu_type, g,
                              f"resolved, not cancelled: {why}; the hold-back ends", record_id=r.id,
                              for_job=r.for_job))
    return out


def _ineligible(job: Job, g: int, avail: int, t: str, history: Sequence[Record], now: float, cfg: PreemptionConfig) -> str | None:
    ran = now - float(job.start_time or now)
    if ran < float(cfg.min_runtime):
        return f"ran {ran:.0f} s < preemption.min_runtime {float(cfg.min_runtime):g} s"
    end, what = _lease_end(job, history, float(cfg.min_runtime))
    if now < end:
        return f"lease: its last {what} was {now - (end - float(cfg.min_runtime)):.0f} s ago (< min_runtime)"
    if g > avail:
        return f"holds {g} {t} GPUs; accounts under their share can use only {avail} there"
    return V.blockers([job], history, now, cfg, _lease_end).get(job.job_id)  # requeues per day
