"""Where a waiting job could start if borrowed GPUs came back: whole-job placement with reclaim. Pure.

A **borrower** is an account that runs more GPUs of a type than its guarantee there (``Plan.real``); its running
jobs of that type are **holders** (:class:`Holder`: where each job's GPUs are, node by node). A waiting job of
``n`` GPUs of type ``t`` that does not fit on the idle GPUs may still claim them where preemption could free
enough of the borrowers' GPUs to **complete its placement as Slurm would place it** (:func:`.demand.place_gpus`):
on one node when ``n`` fits in a node of that type — the node that needs the fewest GPUs freed — else on whole
nodes, those needing the fewest GPUs freed first, every GPU busy on them held by borrowers. The borrowers' jobs
whose GPUs do that are the claim's **victims** (:class:`Reclaim`); an account gives back at most what it holds
above its guarantee (a job counts whole: its last job may take it below). A job that fits nowhere this way
claims nothing and frees nothing: GPUs are never freed for a job that still could not start on them.

Victims on one node, of the accounts most above their guarantee first, the newest job first, as few GPUs as
complete the placement (a single job that does it alone is preferred to several).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence


@dataclass(frozen=True)
class Holder:
    """A running GPU job: its account, type, GPUs, where they are (node -> GPUs; {} = not known) and start."""

    job_id: int
    account: str
    gpu_type: str
    gpus: int
    nodes: Mapping[str, int] = field(default_factory=dict)
    start: float = 0.0


@dataclass(frozen=True)
class Reclaim:
    """A claim served by reclaim: ``job_id`` of ``account`` (``gpus`` of ``gpu_type``) goes on ``where`` (node ->
    GPUs) once ``victims`` (running job ids of borrowers) free their GPUs there."""

    account: str
    job_id: int
    gpu_type: str
    gpus: int
    where: Mapping[str, int]
    victims: tuple[int, ...]

    def as_dict(self) -> dict:
        return {"account": self.account, "job_id": self.job_id, "gpu_type": self.gpu_type, "gpus": self.gpus,
                "where": dict(self.where), "victims": list(self.victims)}


class Borrowed:
    """The borrowers' jobs that preemption could free, by type and node, and what each account may still give
    back per type (GPUs in use above its guarantee). ``take`` removes a placement's victims."""

    def __init__(self, holders: Iterable[Holder], real: Mapping[str, Mapping[str, int]],
                 used: Mapping[str, Mapping[str, int]]):
        self.excess = {a: {t: int(n) - int(real.get(a, {}).get(t, 0)) for t, n in row.items()}
                       for a, row in used.items() if a in real}
        self.excess = {a: {t: n for t, n in row.items() if n > 0} for a, row in self.excess.items()}
        self.jobs: dict[str, dict[str, list[Holder]]] = {}  # type -> node -> holders (borrowers only)
        for h in holders:
            if self.excess.get(h.account, {}).get(h.gpu_type, 0) > 0:
                for x in h.nodes:
                    self.jobs.setdefault(h.gpu_type, {}).setdefault(x, []).append(h)
        self.gone: set[int] = set()

    def _on(self, t: str, x: str) -> list[Holder]:
        return [h for h in self.jobs.get(t, {}).get(x, ()) if h.job_id not in self.gone]

    def _pick(self, t: str, x: str, need: int, excess: dict[str, int]) -> list[Holder] | None:
        """Victims on node ``x`` freeing at least ``need`` GPUs of ``t`` there (within ``excess``, updated)."""
        cands = sorted(self._on(t, x), key=lambda h: (-excess.get(h.account, 0), -h.start, -h.job_id))
        alone = [h for h in cands if h.nodes.get(x, 0) >= need and excess.get(h.account, 0) > 0]
        if alone:  # one job does it: the one freeing fewest GPUs (then the order above)
            h = min(alone, key=lambda h: (h.nodes[x], cands.index(h)))
            excess[h.account] -= h.gpus
            return [h]
        out, got = [], 0
        for h in cands:
            if got >= need:
                break
            if excess.get(h.account, 0) <= 0:
                continue
            out.append(h)
            excess[h.account] -= h.gpus
            got += h.nodes.get(x, 0)
        return out if got >= need else None

    def place(self, free: Mapping[str, Mapping[str, int]], size: Mapping[str, Mapping[str, int]], t: str,
              n: int) -> tuple[dict[str, int], list[Holder]] | None:
        """Where a job of ``n`` GPUs of ``t`` goes once victims free their GPUs, and the victims (module
        docstring); None when no set of borrowers' jobs completes a placement. Nothing is changed."""
        nodes = [x for x in size if size[x].get(t, 0) > 0]
        if not nodes or n <= 0:
            return None
        base = {a: row.get(t, 0) for a, row in self.excess.items()}
        if n <= max(size[x][t] for x in nodes):
            best = None
            for x in sorted(nodes):
                need = n - free[x].get(t, 0)
                if size[x][t] < n or need <= 0:
                    continue
                got = self._pick(t, x, need, dict(base))
                if got is None:
                    continue
                k = (sum(h.nodes[x] for h in got), len(got), x)
                if best is None or k < best[0]:
                    best = (k, {x: n}, got)
            return None if best is None else (best[1], best[2])
        excess = dict(base)
        scored = []
        for x in nodes:
            busy = size[x][t] - free[x].get(t, 0)
            held = sum(h.nodes.get(x, 0) for h in self._on(t, x))
            if held >= busy:
                scored.append((busy, -size[x][t], x))
        where, victims, left = {}, [], n
        for busy, _s, x in sorted(scored):
            if left <= 0:
                break
            trial = dict(excess)
            got = self._pick(t, x, busy, trial) if busy > 0 else []
            if got is None:
                continue
            excess = trial
            victims.extend(h for h in got if h not in victims)
            where[x] = min(size[x][t], left)
            left -= where[x]
        return (where, victims) if left <= 0 else None

    def take(self, victims: Sequence[Holder]) -> None:
        for h in victims:
            if h.job_id not in self.gone:
                self.gone.add(h.job_id)
                row = self.excess.get(h.account, {})
                row[h.gpu_type] = row.get(h.gpu_type, 0) - h.gpus


def holders_of(jobs: Iterable) -> list[Holder]:
    """:class:`Holder` of every running GPU job (``cluster.base.Job``) of one known type."""
    out = []
    for j in jobs:
        if not j.running or not j.gpus_allocated:
            continue
        t, n = max(j.gpus_allocated.items(), key=lambda kv: (kv[1], kv[0]))
        out.append(Holder(j.job_id, j.account, t, int(sum(j.gpus_allocated.values())), dict(j.node_gpus),
                          float(j.start_time or 0)))
    return out
