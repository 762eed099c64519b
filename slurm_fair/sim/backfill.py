"""Slurm's backfill plan in simulated time (pure data, no I/O): which GPUs are free on which node, from now on.

``sched/backfill`` plans with each running job's *expected* end (its start plus its time limit, not its real
end) and reserves GPUs for pending jobs in priority order; a lower-priority job may start now only where no
reservation needs its GPUs before its own expected end. :class:`Plan` is that node-space map for GPUs: per GPU
type, the free GPUs of every node of that type as a step function of time, starting now. It knows the GPUs
free now, releases a running job's GPUs at its expected end (:meth:`Plan.__init__`'s ``holds``), and takes GPUs
for a job started now or reserved later (:meth:`Plan.take`). :meth:`Plan.earliest` is the earliest time a job of
``n`` GPUs of one type and ``d`` seconds fits, and where: GPUs of one type are independent of another type's
(a job holds one type), and a job goes where ``plan.place_gpus`` would put it, applied to the GPUs that stay
free over the whole window ``[start, start + d)`` — one node when a node of the type is large enough, else
whole nodes of the type.

The earliest start is always a time where free GPUs change (now, an expected end, a reservation's start or
end), so only those are tried; after the last of them the free GPUs stay as they are.
"""

from __future__ import annotations

import bisect
import math
from typing import Iterable, Mapping

from ..daemon.plan import place_gpus

INF = math.inf


class _TypeLine:
    """Free GPUs of one type on each node that has it: ``free[k][i]`` during ``[times[k], times[k+1])``
    (the last row holds until forever)."""

    __slots__ = ("nodes", "size", "times", "free")

    def __init__(self, nodes: list[str], size: list[int], now: float, free_now: list[int]):
        self.nodes = nodes
        self.size = size
        self.times = [now]
        self.free = [list(free_now)]

    def split(self, at: float) -> int:
        """The index of the row that begins at ``at`` (made by copying the row that holds then)."""
        k = bisect.bisect_left(self.times, at)
        if k < len(self.times) and self.times[k] == at:
            return k
        self.times.insert(k, at)
        self.free.insert(k, list(self.free[k - 1]))
        return k

    def add(self, i: int, gpus: int, start: float, end: float) -> None:
        """``gpus`` more free on node ``i`` during ``[start, end)`` (negative: taken)."""
        a = self.split(start)
        b = self.split(end) if end < INF else len(self.times)
        for k in range(a, b):
            self.free[k][i] += gpus

    def window_min(self, k: int, d: float) -> list[int]:
        """Per node, the fewest GPUs free during ``[times[k], times[k] + d)``."""
        end = self.times[k] + d
        low = list(self.free[k])
        for m in range(k + 1, len(self.times)):
            if self.times[m] >= end:
                break
            row = self.free[m]
            for i, c in enumerate(row):
                if c < low[i]:
                    low[i] = c
        return low

    def earliest_one_node(self, n: int, d: float, before: float) -> int | None:
        """Index of the earliest row at which some node has ``n`` GPUs free for ``d`` seconds, starting
        before ``before``; None if none."""
        times, free = self.times, self.free
        last = len(times) - 1
        best = None
        for i, s in enumerate(self.size):
            if s < n:
                continue
            run = None
            for k in range(len(times)):
                if free[k][i] >= n:
                    if run is None:
                        if times[k] >= before or (best is not None and k >= best):
                            break  # a run starting here is no earlier than one found
                        run = k
                    if (times[k + 1] if k < last else INF) >= times[run] + d:
                        best = run
                        break
                else:
                    run = None
        return best

    def earliest_whole_nodes(self, n: int, d: float, before: float) -> int | None:
        """Index of the earliest row at which whole nodes with ``n`` GPUs in all stay free for ``d``
        seconds, starting before ``before``; None if none."""
        times, free, size = self.times, self.free, self.size
        K = len(times)
        # ends[k][i]: until when node i stays wholly free from row k on (times[k] itself if it is not free then)
        ends = [[0.0] * len(size) for _ in range(K)]
        for k in range(K - 1, -1, -1):
            nxt = times[k + 1] if k + 1 < K else INF
            for i, s in enumerate(size):
                if free[k][i] == s:
                    ends[k][i] = ends[k + 1][i] if k + 1 < K and free[k + 1][i] == s else nxt
                else:
                    ends[k][i] = times[k]
        for k in range(K):
            if times[k] >= before:
                return None
            need = times[k] + d
            if sum(s for i, s in enumerate(size) if ends[k][i] >= need and ends[k][i] > times[k]) >= n:
                return k
        return None


class Plan:
    """The backfill plan at ``now`` (module docstring). ``free``/``size``: node -> GPU type -> GPUs free now /
    configured; ``holds``: ``(expected end, node, type, GPUs)`` of the running jobs' GPUs (an end at or before
    ``now`` should already be moved past it by the caller: held GPUs are never free now)."""

    def __init__(self, now: float, free: Mapping[str, Mapping[str, int]], size: Mapping[str, Mapping[str, int]],
                 holds: Iterable[tuple[float, str, str, int]] = ()):
        self.now = float(now)
        self.size = size
        self.lines: dict[str, _TypeLine] = {}
        index: dict[str, dict[str, int]] = {}
        for node in sorted(size):
            for t, c in size[node].items():
                if c <= 0:
                    continue
                line = self.lines.get(t)
                if line is None:
                    line = self.lines[t] = _TypeLine([], [], self.now, [])
                index.setdefault(t, {})[node] = len(line.nodes)
                line.nodes.append(node)
                line.size.append(int(c))
                line.free[0].append(int(free.get(node, {}).get(t, 0)))
        self.index = index
        for end, node, t, c in sorted(holds):
            if end < INF:
                self.lines[t].add(index[t][node], int(c), max(float(end), self.now), INF)

    def free_now(self, t: str) -> int:
        """GPUs of type ``t`` free now and not reserved from now on."""
        line = self.lines.get(t)
        return sum(line.free[0]) if line else 0

    def _placement(self, line: _TypeLine, t: str, k: int, n: int, d: float) -> dict[str, int] | None:
        low = line.window_min(k, d)
        return place_gpus({x: {t: c} for x, c in zip(line.nodes, low)},
                          {x: {t: s} for x, s in zip(line.nodes, line.size)}, t, n)

    def fits_now(self, t: str, n: int, d: float) -> dict[str, int] | None:
        """Where a job of ``n`` GPUs of type ``t`` and ``d`` seconds goes if it starts now without taking GPUs
        a reservation needs before it ends; None if it cannot."""
        line = self.lines.get(t)
        if line is None or n <= 0 or sum(line.free[0]) < n:
            return None
        return self._placement(line, t, 0, n, d)

    def earliest(self, t: str, n: int, d: float, before: float = INF) -> tuple[float, dict[str, int]] | None:
        """``(start, {node: GPUs})``: the earliest start before ``before`` of a job of ``n`` GPUs of type ``t``
        and ``d`` seconds, and where it goes then; None if there is none."""
        line = self.lines.get(t)
        if line is None or n <= 0:
            return None
        if n <= max(line.size):
            k = line.earliest_one_node(n, d, before)
        else:
            k = line.earliest_whole_nodes(n, d, before)
        if k is None:
            return None
        where = self._placement(line, t, k, n, d)
        return None if where is None else (line.times[k], where)

    def take(self, t: str, where: Mapping[str, int], start: float, end: float) -> None:
        """The GPUs ``where`` ({node: GPUs} of type ``t``) taken during ``[start, end)``."""
        line = self.lines[t]
        for node, c in where.items():
            line.add(self.index[t][node], -int(c), start, end)
