"""The GPUs accounts under their share could start on each type, and the GPUs accounts hold: what preemption
frees GPUs for (:func:`.decide.decide`, :func:`.unrequeueable.held_back_steps`). Pure."""

from __future__ import annotations

from typing import Iterable, Mapping

from ...cluster.base import Job
from ..plan.demand import startable


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


class WaitingGPUs:
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


def waiting_for(limits: Mapping[str, Mapping[str, int]], use: Mapping[str, Mapping[str, int]],
                jobs: Iterable[Job]) -> WaitingGPUs:
    """What the accounts under their share (``limits`` above ``use``, GPUs in use per account and type) could
    start of their startable pending ``jobs``, type by type (:class:`WaitingGPUs`)."""
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
    return WaitingGPUs(room_all, typed, untyped)

