"""Upgrade moves (``preemption.upgrade``): a running job on a slow GPU type moves to a faster one that stands idle.
Pure.

A Slurm job keeps the GPUs it started on; a job that started on K80s because the V100s were busy runs there to
the end even when V100s free up an hour later. Gavel's simulator moves jobs between types every round for free;
here a move costs a checkpoint and a restart, so it is made only where it pays. A running job is moved when:

(a) slurm-fair chose its type (``fair:flex``: the user asked for no type) or it runs untyped (job_submit.lua left
    it untyped and Slurm started it on whichever type freed first), Slurm can retype a pending job
    (>= 23.02.6: the job is requeued and given the new type while pending), Slurm may requeue it, it may be
    moved (:func:`movable`: under ``preemption.upgrade = "checkpointing"``, the default, only a job that declares
    it checkpoints — the comment token ``fair:checkpoint`` — or that a ``preemption.checkpointing`` rule names),
    and its minimum run is over (``preemption.min_runtime`` since its start, last requeue and last signal, as for
    reclaims);
(b) its class runs faster per GPU on the target type, by a known profile there (measured, set or shipped: a type
    the class was never profiled on is not a target);
(c) the time it saves pays for the restart: with ``left`` its expected time still to run on its current type —
    its time limit minus its run time when Slurm knows a limit, else its run time so far (a job that has run
    long is likely to run long) — ``left · (1 − speed_now / speed_target) > preemption.upgrade_cost``;
(d) its GPUs fit the target's idle GPUs, node by node, after every startable pending job that could use them
    (pending jobs come first: starting a waiting job beats moving a running one) and after the moves already
    in flight, and within its account's limit there.

Who moves first: the job that has waited longest (earliest submit time), each to the type that saves it most
(issue 39: ranked by saving alone, the freed GPUs went to the job that saves most, not to the one kept waiting
longest); at most the per-round signal budget left after reclaims. Moves need no reclaim: with
``preemption.enabled = false`` the round still makes them (and only them). The move then follows the
reclaim's steps (:mod:`.decide`, :mod:`.carry`): checkpoint signal, grace, requeue — with the new type — or, when the
target's GPUs were taken in the meantime, resolved without a requeue. While a move is in flight its GPUs on
the target are held for it: the round's claims include them (``plan.make_plan(moving=)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from ...cluster.base import Job, Snapshot
from ...config import Config, PreemptionConfig
from ..plan import UNKNOWN_SOURCES, Decisions, FreeGPUs, Plan, gpus_in_use, job_class, known_types, startable
from .record import SIGNALLED, PreemptionRecord
from .steps import Action
from .victims import min_run_end


@dataclass(frozen=True)
class Upgrade:
    job_id: int
    account: str
    from_type: str
    to_type: str
    gpus: int
    saving: float  # seconds the job is expected to finish sooner, restart cost deducted

    @property
    def reason(self) -> str:
        return (f"upgrade move {self.from_type} -> {self.to_type}: {self.gpus} idle {self.to_type} GPU(s), "
                f"expected to finish {self.saving:.0f} s sooner after the restart")


def declares_checkpoint(job: Job, rules: Sequence[str], job_class: Callable[[Job], str]) -> bool:
    """The job checkpoints, by its own word or the site's: Slurm may requeue it and its comment has the token
    ``fair:checkpoint`` (:attr:`Job.checkpoints`), or a rule of ``preemption.checkpointing`` (``account:NAME``,
    ``partition:NAME``, ``class:NAME``) names its account, partition or class."""
    if not job.requeue:
        return False
    if job.checkpoints:
        return True
    for r in rules:
        kind, _sep, name = r.partition(":")
        if ((kind == "account" and job.account == name) or (kind == "partition" and name in job.partition.split(","))
                or (kind == "class" and job_class(job) == name)):
            return True
    return False


def movable(cfg: PreemptionConfig, job_class: Callable[[Job], str]) -> Callable[[Job], bool]:
    """Which jobs ``preemption.upgrade`` lets moves take: "all" every one, "checkpointing" those that declare
    they checkpoint (:func:`declares_checkpoint`), "off" none (Slurm's own rule — may it requeue the job — is
    checked by :func:`upgrade_moves` for every mode)."""
    mode = str(cfg.upgrade)
    if mode == "all":
        return lambda j: True
    if mode == "checkpointing":
        rules = tuple(cfg.checkpointing)
        return lambda j: declares_checkpoint(j, rules, job_class)
    return lambda j: False


def time_left(job: Job, now: float) -> float:
    """Seconds the running job is expected to run still (rule (c) of the module docstring)."""
    ran = max(0.0, now - float(job.start_time or now))
    if job.time_limit is not None:
        return max(0.0, float(job.time_limit) * 60.0 - ran)
    return ran


def free_for_moves(snapshot: Snapshot, moving: Iterable[tuple[str, str, int]], can_use: Callable[[Job, str], bool],
                   partitions: Sequence[str] = ()) -> FreeGPUs:
    """The idle GPUs upgrade moves may take: what is idle now, less the moves in flight (``(account, type,
    gpus)``) and less, type by type, what startable pending jobs that can use the type would take there
    (highest priority first)."""
    free = FreeGPUs.of(snapshot, partitions)
    for _a, t, g in moving:
        free.take(t, g)
    pending = sorted((j for j in snapshot.jobs if startable(j) and j.gpus > 0),
                     key=lambda j: (-j.site_factor, j.submit_time, j.job_id))
    for t, left in sorted(free.totals().items()):
        for j in pending:
            if left <= 0:  # nothing left to take there (10 000 pending jobs cost a placement each before)
                break
            if (j.gpu_type == t or (j.gpu_type is None or j.flexible)) and can_use(j, t) and free.take(t, j.gpus):
                left -= j.gpus
    return free


def upgrade_moves(snapshot: Snapshot, plan: Plan, speed: Callable[[Job, str], float | None],
                  history: Sequence[PreemptionRecord], now: float, cfg: PreemptionConfig, free: FreeGPUs,
                  exclude: Iterable[int] = (), max_moves: int = 10,
                  may_move: Callable[[Job], bool] | None = None) -> list[Upgrade]:
    """The moves of this round (module docstring). ``speed(job, type)``: the job's class's throughput per GPU
    there by a known profile (None: unknown). ``cfg``: the ``[preemption]`` section. ``exclude``: jobs already
    being preempted or moved. ``may_move``: which jobs may be moved (:func:`movable`; None: every one)."""
    if max_moves <= 0:
        return []
    skip = set(exclude)
    by_job: dict[int, list[PreemptionRecord]] = {}
    for r in history:
        by_job.setdefault(r.job_id, []).append(r)
    in_use = gpus_in_use(snapshot)
    cands: list[tuple[float, Job, str, str]] = []
    for j in snapshot.jobs:
        if not j.running or not (j.flexible or j.gpu_type is None) or not j.requeue or j.job_id in skip \
                or len(j.gpus_allocated) != 1:
            continue
        if may_move is not None and not may_move(j):
            continue
        if now < min_run_end(j, by_job.get(j.job_id, ()), float(cfg.min_runtime))[0]:
            continue
        s = next(iter(j.gpus_allocated))
        now_speed = speed(j, s)
        if not now_speed:
            continue
        left = time_left(j, now)
        for t in plan.capacity:
            v = speed(j, t)
            if t == s or not v or v <= now_speed:
                continue
            saving = left * (1.0 - now_speed / v) - float(cfg.upgrade_cost)
            if saving > 0:
                cands.append((saving, j, s, t))
    moves: list[Upgrade] = []
    room: dict[str, dict[str, int]] = {}
    moved: set[int] = set()
    for saving, j, s, t in sorted(cands, key=lambda c: (c[1].submit_time, c[1].job_id, -c[0], c[3])):
        if len(moves) >= max_moves:
            break
        if j.job_id in moved:
            continue
        r = room.setdefault(j.account, {g: plan.limit(j.account, g) - int(in_use.get(j.account, {}).get(g, 0))
                                        for g in plan.capacity})
        g = int(j.gpus_allocated[s])
        if r.get(t, 0) < g or not free.take(t, g):
            continue
        r[t] -= g
        moved.add(j.job_id)
        moves.append(Upgrade(j.job_id, j.account, s, t, g, saving))
    return moves


def move_signals(snapshot: Snapshot, cfg: Config, decisions: Decisions, history: Sequence[PreemptionRecord],
                 now: float, actions: Sequence[Action]) -> list[Action]:
    """This round's upgrade moves (:func:`upgrade_moves` on the round's plan and profiles) as checkpoint signals
    that requeue the job onto the faster type: with the per-round signal budget the reclaims' ``actions`` left,
    never for a job they take or an open preemption waits on, onto GPUs no startable pending job could use."""
    built, plan = decisions.built, decisions.plan
    busy = {r.job_id for r in history if r.state == SIGNALLED} | {a.job_id for a in actions}
    budget = int(cfg.preemption.max_jobs_per_round) - sum(a.kind == "signal" for a in actions)
    free = free_for_moves(snapshot, in_flight(history), lambda j, t: t in known_types(built, cfg, j),
                          cfg.cluster.partitions)
    speed = speeds_of(built.throughput, built.sources, lambda j: job_class(j, cfg.classes.order), UNKNOWN_SOURCES)
    may_move = movable(cfg.preemption, lambda j: job_class(j, cfg.classes.order))
    return [Action("signal", m.job_id, m.account, m.from_type, m.gpus, m.reason, signal=cfg.preemption.signal,
                   target_type=m.to_type)
            for m in upgrade_moves(snapshot, plan, speed, history, now, cfg.preemption, free, busy, budget, may_move)]


def still_possible(record: PreemptionRecord, snapshot: Snapshot, plan: Plan,
                   partitions: Sequence[str] = ()) -> str | None:
    """For an upgrade move whose grace is over: None when its GPUs still fit the target's idle GPUs (the GPUs
    held for it: the round's claims kept others off them) and its account's limit there, else why not."""
    t = record.target_type or ""
    free = FreeGPUs.of(snapshot, partitions)
    if not free.fits(t, record.gpus):
        return f"{record.gpus} {t} GPU(s) are not free any more"
    used = int(gpus_in_use(snapshot).get(record.account, {}).get(t, 0))
    if plan.limit(record.account, t) - used < record.gpus:
        return f"{record.account}'s {t} limit has no room for them"
    return None


def in_flight(history: Iterable[PreemptionRecord]) -> list[tuple[str, str, int]]:
    """(account, target type, GPUs) of the upgrade moves signalled and not yet requeued or resolved."""
    return [(r.account, r.target_type, int(r.gpus)) for r in history if r.state == "signalled" and r.target_type]


def speeds_of(throughput: Mapping[str, Mapping[str, Mapping[str, float]]],
              sources: Mapping[str, Mapping[str, Mapping[str, str]]], job_class: Callable[[Job], str],
              unknown: Iterable[str]) -> Callable[[Job, str], float | None]:
    """``speed(job, type)`` for :func:`upgrade_moves` from a round's profile lookup: the class's throughput on the
    type where its source is not one of ``unknown`` (the 'assumed' fill-in, 'unprofiled')."""
    bad = set(unknown)

    def speed(job: Job, t: str) -> float | None:
        cls = job_class(job)
        src = sources.get(job.account, {}).get(cls, {}).get(t)
        if src is None or src in bad:
            return None
        v = throughput.get(job.account, {}).get(cls, {}).get(t)
        return float(v) if v else None

    return speed
