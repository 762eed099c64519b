"""Untyped GPU requests: the type map ``etc/job_submit.lua`` reads, exploration, retyping pending jobs. Pure.

etc/job_submit.lua types untyped GPU requests from a map the daemon publishes each round (daemon/publish.py);
jobs it typed carry ``fair:flex`` in their comment (Job.flexible).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from ...cluster.base import Job, Snapshot, supports_pending_retype
from .demand import gpus_in_use, pending_typed, typed_claims
from .limits import Plan
from .problem import SRC_ASSUMED

DEFAULT_TARGET = "*"  # key of the map's default line (accounts without a line of their own)


def share_room(plan: Plan, in_use: Mapping[str, Mapping[str, int]],
               pending: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """account -> type -> room in its share: limit − GPUs in use − GPUs of pending jobs typed for it."""
    return {a: {g: int(plan.limits[a].get(g, 0)) - int(in_use.get(a, {}).get(g, 0)) - int(pending.get(a, {}).get(g, 0))
                for g in plan.capacity}
            for a in plan.accounts}


def _speed(throughput: Mapping[str, Mapping[str, Mapping[str, float]]] | None, account: str, g: str) -> float:
    """Sum over the account's classes of their throughput on ``g`` (0 when unknown)."""
    classes = (throughput or {}).get(account, {})
    return float(sum(float(x.get(g, 0.0)) for x in classes.values()))


def default_target(plan: Plan, idle: Mapping[str, int] | None = None,
                   claims: Mapping[str, int] | None = None) -> tuple[str, str] | None:
    """The map's ``*`` line: the type with the most capacity no account's limit holds (capacity − Σ limits);
    ties: the most idle GPUs now (``idle``), then the most GPUs no typed job asks for (capacity − ``claims``,
    :func:`typed_claims`: where typed demand contends least, an account's first untyped jobs are most likely
    to fit its coming share), then the name. None when the cluster has no GPU type."""
    if not plan.capacity:
        return None
    free = {g: int(c) - sum(int(plan.limits[a].get(g, 0)) for a in plan.accounts) for g, c in plan.capacity.items()}
    idle = idle or {}
    unclaimed = {g: int(c) - int((claims or {}).get(g, 0)) for g, c in plan.capacity.items()}
    g = min(plan.capacity, key=lambda g: (-free[g], -int(idle.get(g, 0)), -unclaimed[g], g))
    if free[g] > 0:
        return g, f"most GPUs not held by any account's limit ({free[g]} of {plan.capacity[g]})"
    if int(idle.get(g, 0)) > 0:
        return g, f"most idle GPUs now ({int(idle.get(g, 0))} of {plan.capacity[g]})"
    return g, f"fewest GPUs asked for by typed jobs ({plan.capacity[g] - unclaimed[g]} of {plan.capacity[g]})"


def untyped_targets(plan: Plan, snapshot: Snapshot,
                    throughput: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None
                    ) -> dict[str, tuple[str, str]]:
    """account -> (GPU type, reason) for untyped GPU requests, plus ``"*"`` (:func:`default_target`).

    Rules: an account gets the type where its share has the most room (:func:`share_room`: limit minus GPUs
    in use minus GPUs of its pending jobs already typed for that type); ties go to the type its classes run
    fastest on (sum of ``throughput[account][class][type]``, when known), then to the name. An account with
    no room on any type gets the ``*`` type (its jobs wait for the next round's limits there). Accounts of
    the plan only; others use ``*``. Pure: the map file is written by ``daemon/publish.py``.
    """
    in_use = gpus_in_use(snapshot)
    room = share_room(plan, in_use, pending_typed(snapshot))
    usage = snapshot.gpu_types()
    idle = {g: max(u.total - u.unusable - u.allocated, 0) for g, u in usage.items()}
    dflt = default_target(plan, idle, typed_claims(snapshot))
    out: dict[str, tuple[str, str]] = {}
    if dflt is None:
        return out
    types = sorted(t for t in plan.capacity if plan.capacity[t] > 0) or sorted(plan.capacity)
    for a in plan.accounts:
        g = min(types, key=lambda g: (-room[a][g], -_speed(throughput, a, g), g))
        if room[a][g] > 0:
            lim = int(plan.limits[a].get(g, 0))
            used = int(in_use.get(a, {}).get(g, 0))
            out[a] = (g, f"most room in its share: limit {lim}, in use {used}, pending {lim - used - room[a][g]}")
        else:
            out[a] = (dflt[0], f"no room in its share now; {dflt[1]}")
    out[DEFAULT_TARGET] = dflt
    return out


def _gaps(account: str, sources: Mapping[str, Mapping[str, Mapping[str, str]]], rep: set[tuple[str, str]],
          capacity: Mapping[str, int]) -> dict[str, str]:
    """type -> a class of ``account`` that reports its throughput but has no profile on that type."""
    gaps: dict[str, str] = {}
    for cls, src in sorted(sources.get(account, {}).items()):
        if (account, cls) in rep:
            for g, s in sorted(src.items()):
                if s == SRC_ASSUMED and capacity.get(g, 0) > 0:
                    gaps.setdefault(g, cls)
    return gaps


def explore_plan(plan: Plan, snapshot: Snapshot, sources: Mapping[str, Mapping[str, Mapping[str, str]]],
                 reporting: Iterable[tuple[str, str]]) -> tuple[Plan, list[dict[str, Any]]]:
    """Exploration, part 1 (``profiling.explore``): an account with a reporting class (see
    :func:`explore_targets`) that has no room in its share on any type the class has no profile on, but has
    room (limit not used by running or typed pending jobs) on another type, moves one GPU of its limit from
    there to such a type, if that type has a GPU no account's limit holds. Its total (``ANY_GPU``) is
    unchanged and nobody else's limit moves. One GPU per account per round. Returns (plan, moves)."""
    rep = set(reporting)
    room = share_room(plan, gpus_in_use(snapshot), pending_typed(snapshot))
    held = {g: sum(int(plan.limits[a].get(g, 0)) for a in plan.accounts) for g in plan.capacity}
    limits = {a: dict(v) for a, v in plan.limits.items()}
    moves: list[dict[str, Any]] = []
    for a in plan.accounts:
        gaps = _gaps(a, sources, rep, plan.capacity)
        if not gaps or any(room[a].get(g, 0) > 0 for g in gaps):
            continue
        free = [g for g in sorted(gaps) if plan.capacity[g] - held[g] >= 1]
        src = [f for f in sorted(plan.capacity) if f not in gaps and room[a].get(f, 0) >= 1]
        if not free or not src:
            continue
        f = max(src, key=lambda t: (room[a][t], -src.index(t)))
        g = free[0]
        limits[a][f] -= 1
        limits[a][g] = limits[a].get(g, 0) + 1
        held[f] -= 1
        held[g] += 1
        moves.append({"account": a, "class": gaps[g], "from": f, "to": g})
    return (replace(plan, limits=limits) if moves else plan), moves


def explore_targets(targets: Mapping[str, tuple[str, str]], plan: Plan, snapshot: Snapshot,
                    sources: Mapping[str, Mapping[str, Mapping[str, str]]],
                    reporting: Iterable[tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """``targets`` with exploration (``profiling.explore``, Gandiva_fair's opportunistic profiling): an account
    with a class that reports its throughput (``reporting``: (account, class) with a measured or harvested
    value) but has no profile on some GPU type (source ``assumed``) gets its untyped submissions steered to
    such a type, if its share has room there (so exploring never takes more than its share; see
    :func:`explore_plan` for how that room is made); among several, the type with the most room, then the
    name. An account whose target is already such a type, with room, keeps it (the reason says so). Pure; the result is what the type map publishes (per account: job_submit.lua sees no
    class), so all of that account's untyped submissions go there until the next round."""
    rep = set(reporting)
    room = share_room(plan, gpus_in_use(snapshot), pending_typed(snapshot))
    out = dict(targets)
    for a, (g0, why) in targets.items():
        if a == DEFAULT_TARGET or a not in room:
            continue
        gaps = _gaps(a, sources, rep, plan.capacity)
        if not gaps:
            continue
        if g0 in gaps:
            if room[a].get(g0, 0) > 0:
                out[a] = (g0, f"explore: class {gaps[g0]} has no profile on {g0}; {why}")
            continue
        cands = [g for g in sorted(gaps) if room[a].get(g, 0) > 0]
        if cands:
            g = max(cands, key=lambda t: (room[a][t], -cands.index(t)))
            out[a] = (g, f"explore: class {gaps[g]} has no profile on {g} (room in its share: {room[a][g]})")
    return out


@dataclass(frozen=True)
class Retype:
    """Move one pending flexible job to another GPU type."""

    job_id: int
    account: str
    old_type: str
    new_type: str
    gpus_per_node: int


def with_retypes(snapshot: Snapshot, moves: Iterable[Retype]) -> Snapshot:
    """The snapshot as it will be once ``moves`` are applied (their jobs request the new type)."""

    moved = {m.job_id: m.new_type for m in moves}
    if not moved:
        return snapshot
    return replace(snapshot, jobs=tuple(replace(j, gpu_type=moved[j.job_id]) if j.job_id in moved else j
                                        for j in snapshot.jobs))


def retype_moves(plan: Plan, snapshot: Snapshot, max_moves: int = 10,
                 throughput: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None) -> list[Retype]:
    """Pending flexible jobs to move to a type with room (apply only where Slurm supports retyping).

    Per account and type, the room left after running jobs (limit − in use) is handed to its pending jobs
    of that type oldest first (held jobs skipped); a flexible job that no longer fits moves to the type with
    the most room left that fits it whole (ties: faster for the account's classes, then name), which
    then holds those GPUs. At most ``max_moves`` jobs, oldest first.
    """
    in_use = gpus_in_use(snapshot)
    free = {a: {g: int(plan.limits[a].get(g, 0)) - int(in_use.get(a, {}).get(g, 0)) for g in plan.capacity}
            for a in plan.accounts}
    waiting = sorted((j for j in snapshot.jobs
                      if j.pending and j.gpu_type and j.gpus > 0 and j.account in free
                      and not j.reason.startswith("JobHeld")),
                     key=lambda j: (j.submit_time, j.job_id))
    misfits: list[Job] = []
    for j in waiting:
        row = free[j.account]
        if row.get(j.gpu_type, 0) >= j.gpus:
            row[j.gpu_type] -= j.gpus
        elif j.flexible:
            misfits.append(j)
    moves: list[Retype] = []
    for j in misfits:
        if len(moves) >= max_moves:
            break
        row = free[j.account]
        fits = [g for g in row if g != j.gpu_type and row[g] >= j.gpus]
        if not fits:
            continue
        g = min(fits, key=lambda g: (-row[g], -_speed(throughput, j.account, g), g))
        row[g] -= j.gpus
        moves.append(Retype(j.job_id, j.account, j.gpu_type, g, j.gpus_per_node))
    return moves


def flexible_note(snapshot: Snapshot | None, account: str) -> str | None:
    """What ``slurm-fair explain`` says about the account's pending flexible (``fair:flex``) jobs: on a
    Slurm that cannot retype pending jobs (< 23.02.6) they keep the type they were given at submission."""
    if snapshot is None:
        return None
    ids = sorted(j.job_id for j in snapshot.jobs if j.account == account and j.pending and j.flexible)
    if not ids:
        return None
    shown = ", ".join(map(str, ids[:10])) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
    if supports_pending_retype(snapshot.slurm_version):
        return (f"pending flexible jobs (fair:flex) {shown}: typed at submission; slurm-fair moves them to "
                "another GPU type when theirs has no room left in the account's share and another has")
    return (f"pending flexible jobs (fair:flex) {shown}: typed at submission; Slurm {snapshot.slurm_version} "
            "cannot change a pending job's GPU type (needs >= 23.02.6, SchedMD bug 17184), so they wait for "
            "the type they were given")


