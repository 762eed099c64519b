"""Slurm's backfill plan (pure data, no I/O): which GPUs a job could have, where and from when. The simulated
Slurm schedules with it (slurm_fair/sim/cluster.py); the daemon estimates with it when a job of each size could
start on each GPU type (:func:`expected_starts`, published in the type map as ``#@soon``).

``sched/backfill`` (Slurm's Scheduling Configuration Guide and slurm.conf(5), in our words) plans with each
running job's *expected* end — its start plus its time limit, not its real end — and walks the pending jobs in
priority order: a job that can start now without delaying the expected start of a higher-priority job starts;
otherwise the resources it needs are reserved for its expected run. "For performance reasons, the backfill
scheduler reserves whole nodes for jobs, even if jobs don't require whole nodes": a reservation takes every GPU
of its nodes for its window, and is widened to ``bf_resolution`` (start rounded down, end rounded up).

:class:`Plan` is that map for GPUs. Per node, the GPUs of each type free now and when running jobs' GPUs come back
(their expected ends: GPUs only come back over time, as every future start in the plan is a whole-node
reservation); per node, the reserved windows. A job of ``n`` GPUs of type ``t`` and ``d`` seconds fits at time
``c`` where ``plan.place_gpus`` (the simulator's placement: one node when a node of the type is large enough, else
whole nodes of the type) places it on the GPUs free at ``c`` of the nodes no reservation holds during
``[c, c + d)``. :meth:`Plan.earliest` tries the times where that can change — now, a running job's expected end,
a reservation's end — in order.
"""

from __future__ import annotations

import bisect
import heapq
import math
from typing import Callable, Iterable, Mapping, Sequence

from ...cluster.base import Job, Snapshot
from .demand import FreeGPUs, place_gpus, startable

INF = math.inf
PAST_LIMIT_S = 60.0  # a running job past its time limit is expected to end this much later (bf_resolution)


class Plan:
    """The backfill plan at ``now`` (module docstring). ``free``/``size``: node -> GPU type -> GPUs free now /
    configured; ``holds``: ``(expected end, node, type, GPUs)`` of the running jobs (an end at or before ``now``
    must already be moved past it by the caller: held GPUs are not free now); ``resolution``: bf_resolution."""

    def __init__(self, now: float, free: Mapping[str, Mapping[str, int]], size: Mapping[str, Mapping[str, int]],
                 holds: Iterable[tuple[float, str, str, int]] = (), resolution: float = 60.0):
        self.now = float(now)
        self.resolution = float(resolution)
        self.size = {x: {t: int(c) for t, c in row.items() if c > 0} for x, row in size.items()}
        self.free = {x: {t: int(free.get(x, {}).get(t, 0)) for t in row} for x, row in self.size.items()}
        self.nodes_of: dict[str, list[str]] = {}
        for x in sorted(self.size):
            for t in self.size[x]:
                self.nodes_of.setdefault(t, []).append(x)
        self.back: dict[tuple[str, str], list[tuple[float, int]]] = {}  # (node, type) -> sorted (end, GPUs)
        for end, x, t, c in holds:
            if end < INF:
                bisect.insort(self.back.setdefault((x, t), []), (max(float(end), self.now), int(c)))
        self.reserved: dict[str, list[tuple[float, float]]] = {x: [] for x in self.size}

    # -------------------------------------------------------------- reading

    def free_at(self, x: str, t: str, at: float) -> int:
        """GPUs of type ``t`` free on node ``x`` at ``at`` (reservations aside)."""
        return self.free[x].get(t, 0) + sum(c for end, c in self.back.get((x, t), ()) if end <= at)

    def free_now(self, t: str) -> int:
        """GPUs of type ``t`` free now (reservations aside)."""
        return sum(self.free[x][t] for x in self.nodes_of.get(t, ()))

    def held(self, x: str, start: float, end: float) -> bool:
        """A reservation holds node ``x`` during part of ``[start, end)``."""
        return any(s < end and start < e for s, e in self.reserved[x])

    def idle_now(self, types: Iterable[str]) -> bool:
        """Some node with GPUs of one of ``types`` has a GPU (of any type) free now: the only nodes where a
        reservation can stop a job from starting now."""
        return any(any(self.free[x].values()) for t in types for x in self.nodes_of.get(t, ()))

    def place_at(self, t: str, n: int, at: float, d: float) -> dict[str, int] | None:
        """Where a job of ``n`` GPUs of type ``t`` and ``d`` seconds goes if it starts at ``at``, None if it does
        not fit then."""
        nodes = self.nodes_of.get(t)
        if not nodes or n <= 0:
            return None
        free = {x: {t: 0 if self.held(x, at, at + d) else self.free_at(x, t, at)} for x in nodes}
        return place_gpus(free, {x: {t: self.size[x][t]} for x in nodes}, t, n)

    def fits_now(self, t: str, n: int, d: float) -> dict[str, int] | None:
        """Where the job goes if it starts now without delaying a reservation; None if it cannot."""
        return self.place_at(t, n, self.now, d)

    def earliest(self, t: str, n: int, d: float, before: float = INF) -> tuple[float, dict[str, int]] | None:
        """``(start, {node: GPUs})``: the earliest start before ``before`` of a job of ``n`` GPUs of type ``t`` and
        ``d`` seconds, and where it goes then; None if there is none."""
        nodes = self.nodes_of.get(t, ())
        times = {self.now}
        for x in nodes:
            times.update(end for end, _c in self.back.get((x, t), ()))
            times.update(e for _s, e in self.reserved[x])
        for at in sorted(c for c in times if c < before and c < INF):
            where = self.place_at(t, n, at, d)
            if where is not None:
                return at, where
        return None

    # -------------------------------------------------------------- changing

    def start(self, t: str, where: Mapping[str, int], d: float) -> None:
        """A job started now on ``where`` ({node: GPUs of type ``t``}) for ``d`` seconds: it holds them until
        its expected end."""
        for x, c in where.items():
            self.free[x][t] -= int(c)
            if self.now + d < INF:
                bisect.insort(self.back.setdefault((x, t), []), (self.now + d, int(c)))

    def reserve(self, where: Iterable[str], start: float, d: float) -> None:
        """A reservation of the whole nodes ``where`` from ``start`` for ``d`` seconds (widened to the
        resolution)."""
        r = self.resolution
        s = math.floor(start / r) * r
        e = math.ceil((start + d) / r) * r if start + d < INF else INF
        for x in where:
            bisect.insort(self.reserved[x], (s, e))


RunFor = Callable[[Job], "float | None"]  # a job without a time limit -> its expected run seconds (None: unknown)


def snapshot_plan(snapshot: Snapshot, partitions: Sequence[str] = ()) -> Plan:
    """The backfill plan of a snapshot: GPUs free now per node, and the running jobs' GPUs coming back on their
    nodes at their expected ends (start + time limit; past it: in ``PAST_LIMIT_S``). A job without a time limit,
    or whose GPUs per node the snapshot does not give, holds its GPUs for ever."""
    free = FreeGPUs.of(snapshot, partitions)
    return Plan(float(snapshot.taken_at), free.free, free.size, _holds(snapshot, free))


def _expected_run(j: Job, run_for: RunFor | None) -> float | None:
    """Seconds job ``j`` is expected to run in all: ``run_for``'s estimate (its class's recorded run time) where
    it is shorter than its time limit, else the limit (None: neither known). Time limits are upper bounds, often
    far above the run (a limit asked for the slowest type, the job on the fastest): planned from limits alone,
    the fast types look busy long after they free."""
    run = run_for(j) if run_for is not None else None
    if j.time_limit is not None:
        limit = 60.0 * float(j.time_limit)
        return limit if run is None or not run < limit else float(run)
    return run


def _holds(snapshot: Snapshot, free: FreeGPUs, run_for: RunFor | None = None) -> Iterable[tuple[float, str, str, int]]:
    """``(expected end, node, type, GPUs)`` of the running jobs whose end and GPUs per node are known."""
    now = float(snapshot.taken_at)
    for j in snapshot.jobs:
        if not j.running or not j.node_gpus or len(j.gpus_allocated) != 1 or j.start_time is None:
            continue
        run = _expected_run(j, run_for)
        if run is None or not run < INF:
            continue
        t = next(iter(j.gpus_allocated))
        end = float(j.start_time) + float(run)
        for x, c in j.node_gpus.items():
            if x in free.size:
                yield end if end > now else now + PAST_LIMIT_S, x, t, int(c)


def queue_starts(plan: Plan, queue: Iterable[tuple[int, str, int, float]], limit: int = 500) -> dict[int, float]:
    """Job id -> seconds from ``plan.now`` until it could start, for the pending jobs of ``queue`` — ``(job id,
    type, GPUs, run seconds)`` in priority order, each typed — as backfill plans them: each starts now where it
    delays no reservation of a job ahead of it, else reserves its earliest window on its type (run seconds
    ``inf``: held for ever); ``inf`` where no known end frees enough. At most ``limit`` jobs (Slurm's
    ``bf_max_job_test``); the rest are left out. ``plan`` is changed."""
    out: dict[int, float] = {}
    for job_id, t, n, d in list(queue)[:limit]:
        where = plan.fits_now(t, n, d) if plan.free_now(t) >= n else None
        if where is not None:
            plan.start(t, where, d)
            out[job_id] = 0.0
            continue
        r = plan.earliest(t, n, d)
        if r is None:
            out[job_id] = INF
            continue
        plan.reserve(r[1], r[0], d)
        out[job_id] = r[0] - plan.now
    return out


def sizes_for(capacity: int) -> tuple[int, ...]:
    """The job sizes (GPUs) :func:`expected_starts` estimates for a type of ``capacity`` GPUs: 1, 2, 4, … up to
    the capacity (and the capacity itself); a job of another size reads the next larger one."""
    out, n = [], 1
    while n < capacity:
        out.append(n)
        n *= 2
    if capacity > 0:
        out.append(int(capacity))
    return tuple(out)


def expected_starts(snapshot: Snapshot, types: Sequence[str], partitions: Sequence[str] = (),
                    run_for: RunFor | None = None) -> dict[str, dict[int, int]]:
    """type -> job size -> the unix time at which a job of that many GPUs of the type could start (rounded
    up), as Slurm's backfill plans it: the GPUs idle now and the running jobs' GPUs coming back at their
    expected ends (start + ``run_for``'s estimate, at most the time limit; past it: in ``PAST_LIMIT_S``) on
    their nodes, placed as :func:`.demand.place_gpus` places (one node with that many free, when a node of the
    type is that large; else whole free nodes). Left out: sizes that no known end frees (the GPUs are held by jobs
    without a time limit, or by jobs on several nodes, whose GPUs per node the snapshot does not give) and the
    pending jobs ahead (no reservations: an estimate, not a promise). Per type one pass over its nodes' release
    times, so a round at a big site pays O(running jobs · log) for it, not a placement per time and size."""
    now = float(snapshot.taken_at)
    free = FreeGPUs.of(snapshot, partitions)
    back: dict[tuple[str, str], list[tuple[float, int]]] = {}  # (node, type) -> (time GPUs come back, GPUs)
    for end, x, t, c in _holds(snapshot, free, run_for):
        back.setdefault((x, t), []).append((end, c))
    out: dict[str, dict[int, int]] = {}
    for t in types:
        nodes = [x for x in sorted(free.size) if free.size[x].get(t, 0) > 0]
        if not nodes:
            continue
        most = max(free.size[x][t] for x in nodes)
        # per node: when it has k GPUs free (k = 1..size), and when it is whole
        reach: dict[int, float] = {}  # k -> the earliest time some node has k free
        whole: list[tuple[float, int]] = []  # (time the node is whole, its size)
        for x in nodes:
            size, have = free.size[x][t], free.free[x].get(t, 0)
            timeline = [(now, have)] + sorted(back.get((x, t), ()))
            count = 0
            for at, c in timeline:
                before = count
                count = min(size, count + c)
                for k in range(before + 1, count + 1):
                    reach[k] = min(reach.get(k, INF), at)
            if count >= size:
                whole.append((next(at for at, _c in _running_sum(timeline) if _c >= size), size))
        row: dict[int, int] = {}
        got, acc, order = 0, 0, sorted(whole)
        for n in sizes_for(sum(free.size[x][t] for x in nodes)):
            if n <= most:
                at = reach.get(n, INF)
            else:
                while got < len(order) and acc < n:
                    acc += order[got][1]
                    got += 1
                at = order[got - 1][0] if acc >= n else INF
            if at < INF:
                row[n] = int(math.ceil(at))
        if row:
            out[t] = row
    return out


def first_starts(snapshot: Snapshot, types: Sequence[str], run_for: RunFor | None = None,
                 partitions: Sequence[str] = ()) -> dict[str, dict[int, int]]:
    """type -> job size -> the unix time (rounded up) at which a job of that many GPUs of the type, submitted now
    behind the queue, could start: the later of :func:`expected_starts` (the GPUs idle now and the running jobs'
    GPUs back at their expected ends, node by node) and the queue's turn — the startable pending jobs typed for
    the type, by priority (SiteFactor, submit time, id), each taking the type's GPUs as they free up in all (a
    strict first-come plan of GPU counts, no backfill around a job that waits) and giving them back after its
    run. Running and pending jobs end at ``run_for``'s estimate (the class's recorded run times) where it is
    shorter than their time limit, else at the limit (neither: held for ever); a job larger than the type is
    left out of its queue, pending untyped jobs too (they take whichever type frees first). A size no known end
    frees, or that waits behind a job that never starts, is left out; a type with none too. ``#@soon`` in the map.
    Per type one pass over its running and pending jobs (a heap of release times), so a site with thousands of
    pending jobs pays O(jobs · log) for it: node by node with reservations (:func:`queue_starts`) it took 36 s for 2
    400 GPUs and 5 000 pending jobs."""
    now = float(snapshot.taken_at)
    base = expected_starts(snapshot, types, partitions, run_for)
    free = FreeGPUs.of(snapshot, partitions)
    releases: dict[str, list[tuple[float, int]]] = {}
    for end, _x, t, c in _holds(snapshot, free, run_for):
        releases.setdefault(t, []).append((end, c))
    wanted = set(types)
    queue = sorted((j for j in snapshot.jobs if startable(j) and j.gpu_type in wanted and j.gpus > 0),
                   key=lambda j: (-j.site_factor, j.submit_time, j.job_id))
    out: dict[str, dict[int, int]] = {}
    for t in types:
        cap = sum(row.get(t, 0) for row in free.size.values())
        heap = list(releases.get(t, ()))
        heapq.heapify(heap)
        avail, at = sum(row.get(t, 0) for row in free.free.values()), now
        for j in queue:
            if j.gpu_type != t or j.gpus > cap:
                continue
            while avail < j.gpus and heap:
                end, c = heapq.heappop(heap)
                at, avail = max(at, end), avail + c
            if avail < j.gpus:
                at = INF
                break
            avail -= j.gpus
            run = _run_or_inf(j, run_for)
            if run < INF:
                heapq.heappush(heap, (at + run, j.gpus))
        if at >= INF:
            continue
        row: dict[int, int] = {}
        for n, earliest in sorted(base.get(t, {}).items()):
            h, a, turn = list(heap), avail, at
            while a < n and h:
                end, c = heapq.heappop(h)
                turn, a = max(turn, end), a + c
            if a >= n:
                row[n] = max(int(earliest), int(math.ceil(turn)))
        if row:
            out[t] = row
    return out


def _run_or_inf(j: Job, run_for: RunFor | None) -> float:
    run = _expected_run(j, run_for)
    return INF if run is None else float(run)


def _running_sum(timeline: list[tuple[float, int]]):
    total = 0
    for at, c in timeline:
        total += c
        yield at, total
