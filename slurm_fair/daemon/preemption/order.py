"""Who takes the GPUs a requeue frees, in Slurm's order. Pure.

A reclaim frees GPUs for one waiting job, but Slurm does not know that: it starts pending jobs in priority order,
each where it fits within its account's ``GrpTRES`` — a typed request against its type's limit and the total
``gres/gpu``, an **untyped** one against the total only, on the first node (Slurm's node order: lowest
``Weight``, then slurm.conf's; the snapshot's node order here) with a free GPU. On the 22.05 testbed (issue 39)
the V100s freed for one account went to another account's untyped jobs of higher priority, and the A100s freed
for the second to the first's. :func:`first_taker` plays that order over the idle GPUs plus the freed ones and
names the first job of another account that would take a freed GPU (:func:`.victims.due` then does not requeue).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ...cluster.base import ANY_GPU, Job
from ..plan.demand import place_gpus, startable


def _untyped_place(room: Mapping[str, Mapping[str, int]], size: Mapping[str, Mapping[str, int]],
                   n: int) -> tuple[str, dict[str, int]] | None:
    """(type, {node: GPUs}) where an untyped job of ``n`` GPUs starts: the first node in order with ``n`` free of
    one type; else whole free nodes of a type (:func:`.demand.place_gpus`, types in node order)."""
    for x, row in room.items():
        for t, c in row.items():
            if c >= n and size.get(x, {}).get(t, 0) >= n:
                return t, {x: n}
    for t in dict.fromkeys(t for row in size.values() for t in row):
        where = place_gpus(room, size, t, n)
        if where is not None:
            return t, where
    return None


def first_taker(claimant: Job, freed: Mapping[str, Mapping[str, int]], idle: Mapping[str, Mapping[str, int]],
                size: Mapping[str, Mapping[str, int]], pending: Sequence[Job],
                limits: Mapping[str, Mapping[str, int]] | None,
                use: Mapping[str, Mapping[str, int]]) -> Job | None:
    """The first pending job of another account than ``claimant``'s that would start on a freed GPU (``freed``:
    node -> type -> GPUs the requeue frees; ``idle``: free now) before the claimant's account's jobs have taken
    them, in Slurm's order (module docstring); None when the freed GPUs reach the claimant's account.
    ``limits``: the accounts' GPU limits as the round writes them (type or ``ANY_GPU`` -> GPUs; a key left out:
    no limit; None: no limits at all); ``use``: account -> type -> GPUs its running jobs hold."""
    room = {x: {t: int(c) for t, c in row.items()} for x, row in idle.items()}
    for x, row in freed.items():
        for t, c in row.items():
            room.setdefault(x, {})[t] = room.get(x, {}).get(t, 0) + int(c)
    left = {x: {t: int(c) for t, c in row.items()} for x, row in freed.items()}  # freed GPUs not yet taken
    held = {a: dict(row) for a, row in use.items()}
    for j in sorted((j for j in pending if j.pending and startable(j) and j.gpus > 0),
                    key=lambda j: (-int(j.priority), j.submit_time, j.job_id)):
        lim = (limits or {}).get(j.account, {})
        mine = held.setdefault(j.account, {})
        if ANY_GPU in lim and sum(mine.values()) + j.gpus > int(lim[ANY_GPU]):
            continue
        if j.gpu_type is not None:
            if j.gpu_type in lim and mine.get(j.gpu_type, 0) + j.gpus > int(lim[j.gpu_type]):
                continue
            where = place_gpus(room, size, j.gpu_type, j.gpus)
            got = None if where is None else (j.gpu_type, where)
        else:
            got = _untyped_place(room, size, j.gpus)
        if got is None:
            continue
        t, where = got
        took_freed = False
        for x, k in where.items():
            room[x][t] -= k
            if x in left and left[x].get(t, 0) > room[x][t]:  # idle GPUs go first; below that, freed ones
                took_freed = True
                left[x][t] = room[x][t]
        mine[t] = mine.get(t, 0) + j.gpus
        if took_freed and j.account != claimant.account:
            return j
        if j.job_id == claimant.job_id:
            return None
    return None
