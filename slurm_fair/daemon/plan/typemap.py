"""Untyped GPU requests: the type map ``etc/job_submit.lua`` reads, exploration, retyping pending jobs. Pure.

etc/job_submit.lua types untyped GPU requests from a map the daemon publishes each round (daemon/type_map_file.py);
jobs it typed carry ``fair:flex`` in their comment (Job.flexible).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping

from ...cluster.base import ANY_GPU, Job, Snapshot, supports_pending_retype
from ...store.jobs import EVERY_CLASS
from .backfill import INF, first_starts, queue_starts, snapshot_plan
from .demand import FreeGPUs, gpus_in_use, job_class, pending_typed, startable
from .limits import Plan
from .problem import SRC_ASSUMED

SLOW_CLASS = 2.0  # a type where a class runs SLOW_CLASS times slower than on its best is slow for it (``TYPE:0``)
DEFAULT_TARGET = "*"  # key of the map's default line (accounts without a line of their own)
CLASS_NAME = re.compile(r"[A-Za-z0-9_.\-]+")  # a class the map can name (job_submit.lua's rule for names)


@dataclass(frozen=True)
class Target:
    """One line of the type map: the types an account's untyped jobs get, in order, each with its room (the
    GPUs job_submit.lua may hand out there until the next map), and why."""

    types: tuple[tuple[str, int], ...]
    reason: str
    blocks: Mapping[str, int] = field(default_factory=dict)  # type -> largest job that fits now (none: no bound)
    tiers: tuple[int, ...] = ()  # per entry of types: class lines reorder within a tier only (none: one tier)
    untyped: int = 0  # GPUs the account's jobs may be left untyped when no type has room (:func:`untyped_room`)
    pool: Mapping[str, int] = field(default_factory=dict)  # type -> GPUs idle for everyone now (``#@free``)
    slow: frozenset[str] = frozenset()  # class lines: types the class runs on at under 1/SLOW_CLASS of its best
    # type -> job size -> unix time a job of that size could start there (``#@soon``, shared by every line)
    soon: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    speeds: Mapping[str, int] = field(default_factory=dict)  # class lines: type -> per mille of its best speed

    @property
    def first(self) -> str:
        return self.types[0][0]

    def as_json(self) -> dict[str, Any]:
        return {"types": [[t, n] for t, n in self.types], "reason": self.reason, "blocks": dict(self.blocks),
                "untyped": self.untyped, "slow": sorted(self.slow)}


@dataclass(frozen=True)
class PartitionTypes:
    """One ``#@partition`` line of the type map: the GPU types configured on a partition's nodes. job_submit.lua
    types a job only among the types of the partitions it is submitted to."""

    name: str
    types: tuple[str, ...]


def partition_types(snapshot: Snapshot) -> tuple[PartitionTypes, ...]:
    """Per partition with GPU nodes, the GPU types configured on them (sorted; partitions by name). Down and
    drained nodes count: Slurm accepts a typed request for any type a partition's nodes have (the job waits).
    A partition without GPU nodes is not listed (the script leaves untyped requests there unchanged)."""
    types: dict[str, set[str]] = {}
    for n in snapshot.nodes:
        for p in n.partitions:
            types.setdefault(p, set()).update(g for g, c in n.gpus.items() if int(c) > 0)
    return tuple(PartitionTypes(p, tuple(sorted(ts))) for p, ts in sorted(types.items()) if ts)


def share_room(plan: Plan, in_use: Mapping[str, Mapping[str, int]],
               pending: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """account -> type -> room under its limit: limit − GPUs in use − GPUs of pending jobs typed for it."""
    return {a: {g: plan.limit(a, g) - int(in_use.get(a, {}).get(g, 0)) - int(pending.get(a, {}).get(g, 0))
                for g in plan.capacity}
            for a in plan.accounts}


def _speed(throughput: Mapping[str, Mapping[str, Mapping[str, float]]] | None, account: str, g: str) -> float:
    """Sum over the account's classes of their throughput on ``g`` relative to the class's slowest type (0 when
    unknown)."""
    out = 0.0
    for x in (throughput or {}).get(account, {}).values():
        vals = [float(v) for v in x.values() if float(v) > 0]
        if vals and float(x.get(g, 0.0)) > 0:
            out += float(x[g]) / min(vals)
    return out


def _tier(g_room: int, f_room: int, reclaim: bool) -> int:
    """Which group of a line a type with these rooms belongs to (lower first; class lines reorder within a
    group): 0 — free GPUs now; 1 — only guaranteed room on busy GPUs (the job waits for a job's end, or for
    preemption to reclaim them). With ``reclaim`` (preemption on) one group: a job may wait for its guarantee
    rather than take a slower free type."""
    if reclaim:
        return 0
    return 0 if f_room > 0 else 1


def _usable_by_all(throughput: Mapping[str, Mapping[str, Mapping[str, float]]] | None, account: str,
                   types: list[str]) -> list[str]:
    """The types every class of the account can run on (a throughput > 0 there, where its profile names the
    type): the map is per account, so an untyped job of any of its classes may get them. None in common:
    every type some class can run on."""
    classes = [x for x in (throughput or {}).get(account, {}).values() if any(float(v) > 0 for v in x.values())]
    common = [g for g in types if all(float(x.get(g, 0.0)) > 0 for x in classes)]
    if common:
        return common
    return [g for g in types if any(float(x.get(g, 0.0)) > 0 for x in classes)] or list(types)


def untyped_room(plan: Plan, account: str, types: Iterable[str], used: Mapping[str, int],
                 typed: Mapping[str, int], untyped: int, every_type: bool) -> int:
    """GPUs of untyped requests the account may hold pending untyped (``#@untyped``), so that a job no type of
    its line has room for waits for whichever type frees first instead of being pinned to one (on Slurm 22.05 a
    pending job cannot be retyped). Slurm does not count an untyped request against typed ``GrpTRES``
    limits, only against the total ``gres/gpu`` (``ANY_GPU``): an untyped job may start on *any* type. On a
    type whose limit is at least its capacity that cannot exceed the limit (no more GPUs exist there); on a
    type whose limit is below its capacity (another account's claim, or a hard cap) every untyped GPU might
    land there, so the room is at most that limit − in use − typed pending GPUs. At most the total limit's
    room too, less the GPUs of the account's untyped pending jobs. 0 when some class of the account cannot run
    on every type (``every_type`` False: Slurm might place it where it cannot run)."""
    types = list(types)
    if not every_type or not types:
        return 0
    total_limit = plan.limits.get(account, {}).get(ANY_GPU)
    room = (int(total_limit) if total_limit is not None else sum(int(plan.capacity[g]) for g in types)) \
        - sum(int(n) for n in used.values()) - sum(int(n) for n in typed.values())
    for g in types:
        if plan.limit(account, g) < int(plan.capacity[g]):
            room = min(room, plan.limit(account, g) - int(used.get(g, 0)) - int(typed.get(g, 0)))
    return max(0, room - int(untyped))


def untyped_targets(plan: Plan, snapshot: Snapshot,
                    throughput: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
                    reclaim: bool = False, site_speed: Mapping[str, float] | None = None,
                    class_speed: Mapping[str, Mapping[str, float]] | None = None,
                    run_times: Mapping[str, float] | None = None,
                    class_order: Iterable[str] = ("comment", "wckey", "name")) -> dict[str, Target]:
    """The type map: account -> :class:`Target` for its untyped GPU requests, ``"*"`` for accounts without a
    line, and class lines. Pure: the map file is written by ``daemon/type_map_file.py``.

    * **Rooms** per account and type: *free* room — GPUs idle now, less what startable pending jobs typed for
      the type will take there (placed node by node, by priority), within the account's limit; *guaranteed*
      room — its guarantee less what it uses and what its typed pending jobs hold (GPUs that may be busy:
      the job waits for reclaim or for a job's end). A type's room is the larger of the two; for free room
      its BLOCK is the largest job that fits the idle GPUs now.
    * **Account lines**: the types with room that every class of the account can run on
      (:func:`_usable_by_all`), in tiers (:func:`_tier`: free GPUs before guaranteed-but-busy ones, unless
      ``reclaim``), within a tier fastest first for the account's classes (:func:`_speed`; ties: the site's
      speed ``site_speed``, more room, name). With room nowhere: the type of its largest guarantee (then its
      fastest), room 0 — its jobs wait there. Each account line carries its :func:`untyped_room`
      (``#@untyped``): a job that fits no type's room is left untyped within it rather than pinned to the
      line's first type.
    * **Pool** (every line's ``pool``, written once as ``#@free``): the idle GPUs per type less what startable
      typed pending jobs will take — shared by every line, so the script hands out free room on a type to all
      accounts together at most that many times (two accounts' free rooms on the same idle GPUs do not add up).
    * **Class lines**: ``account/class`` for each class of the account with jobs — the types its share in the
      policy's allocation uses first, then by its speed; ``*/class`` for every class with site-wide or
      shipped profiles (``class_speed``), by speed. job_submit.lua reorders the account line's types by the
      job's class line within each tier (the rooms stay the account's). A class line marks the types the class
      runs on at under 1/``SLOW_CLASS`` of its best speed (``slow``, written ``TYPE:0``): a job of the class is
      not left untyped (``#@untyped``) where Slurm could start it on such a type.
    * ``"*"``: free room under the capacity less every claim, fastest first by ``site_speed``.
    * **First starts** (every line's ``soon``, written once as ``#@soon``): per type and job size, when a job
      submitted now could start there behind the queue (:func:`.backfill.first_starts`), with jobs ending by
      their class's recorded run times (``run_times``: class -> seconds, from the store's job runs;
      :func:`run_estimate`), at most their time limits (a limit is an upper bound: asked for the slowest type,
      a job on a fast type ends long before it, and planned from limits alone the fast types looked busy long
      after they freed: 90 % load lost against FIFO for it). job_submit.lua types a job no type has room for
      (and not left untyped) to the type of its line that starts it first, and by expected completion
      (``#@speed``).
    """
    in_use = gpus_in_use(snapshot)
    typed = pending_typed(snapshot, startable_only=True)
    held = pending_typed(snapshot)  # typed pending jobs, held ones too: they count against the limits later
    untyped_pending: dict[str, int] = {}
    for j in snapshot.jobs:
        if j.pending and j.gpu_type is None and j.gpus > 0:
            untyped_pending[j.account] = untyped_pending.get(j.account, 0) + j.gpus
    types = [t for t in plan.capacity if plan.capacity[t] > 0] or list(plan.capacity)
    free, block = _pool(plan, snapshot, types)
    out: dict[str, Target] = {}
    if not types:
        return out
    soon = first_starts(snapshot, types, run_estimate(run_times or {}, snapshot.taken_at, class_order))
    site = site_speed or {}
    for a in plan.accounts:
        used, mine = in_use.get(a, {}), typed.get(a, {})
        ok = _usable_by_all(throughput, a, types)
        loose = untyped_room(plan, a, types, used, held.get(a, {}), untyped_pending.get(a, 0), len(ok) == len(types))
        out[a] = _account_line(plan, a, types, ok, used, mine, free, block, soon, throughput, site, reclaim, loose)
        out.update(_class_lines(plan, a, types, throughput, site))
    for cls, rel in sorted((class_speed or {}).items()):
        order = sorted((g for g in types if float(rel.get(g, 0.0)) > 0),
                       key=lambda g: (-float(rel[g]), -site.get(g, 0.0), g))
        if order and CLASS_NAME.fullmatch(cls):
            top = max(float(rel[g]) for g in order)
            out[f"{DEFAULT_TARGET}/{cls}"] = Target(tuple((g, 0) for g in order), "class order",
                                                    slow=frozenset(g for g in order if float(rel[g]) * SLOW_CLASS < top),
                                                    speeds=_per_mille(rel, order, top))
    out[DEFAULT_TARGET] = _default_line(plan, types, free, block, soon, site)
    return out


def run_estimate(run_times: Mapping[str, float], now: float,
                 class_order: Iterable[str] = ("comment", "wckey", "name")) -> Callable[[Job], float | None]:
    """Seconds a job is expected to run in all (for :func:`.backfill.first_starts`, which keeps a time limit
    where it is shorter): its class's recorded run time (``run_times``, class -> seconds,
    ``store.jobs.class_run_times``), else that of every class (its ``"*"`` entry: a class seen for the first time,
    or one whose jobs have not ended yet); a running job that has already run longer is expected to run as long
    again (the rule of upgrade moves' ``time_left``). None: nothing recorded."""
    order = tuple(class_order)

    def run_for(j: Job) -> float | None:
        rec = run_times.get(job_class(j, order), run_times.get(EVERY_CLASS))
        if rec is None or not rec > 0:
            return None
        ran = max(0.0, float(now) - float(j.start_time)) if j.running and j.start_time is not None else 0.0
        return max(float(rec), 2.0 * ran)

    return run_for


def _pool(plan: Plan, snapshot: Snapshot, types: list[str]) -> tuple[dict[str, int], dict[str, int]]:
    """Per type the idle GPUs less those pending typed jobs will take at the next scheduling pass (those that
    fit, by priority), and the largest job that still fits on one node."""
    nodes = FreeGPUs.of(snapshot)
    for j in sorted((j for j in snapshot.jobs if startable(j) and j.gpu_type in plan.capacity and j.gpus > 0),
                    key=lambda j: (-j.site_factor, j.submit_time, j.job_id)):
        nodes.take(j.gpu_type, j.gpus)
    idle = nodes.totals()
    return {g: int(idle.get(g, 0)) for g in types}, {g: nodes.block(g) for g in types}


def _account_line(plan: Plan, a: str, types: list[str], ok: list[str], used: Mapping[str, int],
                  mine: Mapping[str, int], free: dict[str, int], block: Mapping[str, int], soon: Any,
                  throughput: Mapping[str, Mapping[str, Mapping[str, float]]] | None, site: Mapping[str, float],
                  reclaim: bool, loose: int) -> Target:
    """Account ``a``'s line (:func:`untyped_targets`, "Account lines"): of the types every class of it can run
    on (``ok``), those with room in tiers, or the type it waits for when it has room nowhere; ``loose``: its
    :func:`untyped_room`."""
    speed = {g: _speed(throughput, a, g) for g in types}
    g_room = {g: max(0, int(plan.real.get(a, {}).get(g, 0)) - int(used.get(g, 0)) - int(mine.get(g, 0)))
              for g in types}
    f_room = {g: max(0, min(plan.limit(a, g) - int(used.get(g, 0)) - int(mine.get(g, 0)), free[g]))
              for g in types}
    room = {g: max(g_room[g], f_room[g]) for g in types}
    tier = {g: _tier(g_room[g], f_room[g], reclaim) for g in types}
    key = (lambda g: (tier[g], -speed[g], -site.get(g, 0.0), -room[g], g))
    listed = tuple((g, room[g]) for g in sorted((g for g in ok if room[g] > 0), key=key))
    if listed:
        why = ", ".join(f"{g} {n} ({'free' if f_room[g] >= g_room[g] else 'guaranteed'})" for g, n in listed)
        return Target(listed, f"room: {why}", {g: block[g] for g, _n in listed if f_room[g] >= g_room[g]},
                      tuple(tier[g] for g, _n in listed), loose, free, soon=soon)
    g = min(ok, key=lambda g: (-int(plan.real.get(a, {}).get(g, 0)), -speed[g], g))
    return Target(((g, 0),), f"no room on any type now; waits for {g} "
                  f"(guarantee {int(plan.real.get(a, {}).get(g, 0))})", untyped=loose, pool=free, soon=soon)


def _class_lines(plan: Plan, a: str, types: list[str],
                 throughput: Mapping[str, Mapping[str, Mapping[str, float]]] | None,
                 site: Mapping[str, float]) -> dict[str, Target]:
    """``account/class`` lines of account ``a`` (:func:`untyped_targets`, "Class lines"), by class name."""
    out: dict[str, Target] = {}
    for cls, thr in sorted((throughput or {}).get(a, {}).items()):
        vals = [float(v) for g, v in thr.items() if g in types and float(v) > 0]
        if not vals or not CLASS_NAME.fullmatch(cls):
            continue
        slow = min(vals)
        rel = {g: float(thr.get(g, 0.0)) / slow for g in types}
        share = plan.ideal_class.get(a, {}).get(cls, {})
        order = sorted((g for g in types if rel[g] > 0),
                       key=lambda g: (float(share.get(g, 0.0)) < 0.5, -rel[g], -site.get(g, 0.0), g))
        if order:
            top = max(rel[g] for g in order)
            out[f"{a}/{cls}"] = Target(tuple((g, 0) for g in order), "class order",
                                       slow=frozenset(g for g in order if rel[g] * SLOW_CLASS < top),
                                       speeds=_per_mille(rel, order, top))
    return out


def _default_line(plan: Plan, types: list[str], free: dict[str, int], block: Mapping[str, int], soon: Any,
                  site: Mapping[str, float]) -> Target:
    """The ``*`` line: free room under the capacity less every claim, fastest first by the site's speed."""
    claimed = {g: sum(int(c.get(g, 0)) for c in plan.claims.values()) for g in types}
    avg = {g: float(site.get(g, 0.0)) for g in types}
    open_room = {g: max(0, min(int(plan.capacity[g]) - claimed[g], free[g])) for g in types}
    listed = tuple((g, open_room[g]) for g in sorted((g for g in types if open_room[g] > 0),
                                                    key=lambda g: (-avg[g], -open_room[g], g)))
    if listed:
        return Target(listed, "free GPUs no waiting account's guarantee holds",
                      {g: block[g] for g, _n in listed}, pool=free, soon=soon)
    g = min(types, key=lambda g: (-(plan.capacity[g] - claimed[g]), -avg[g], g))
    return Target(((g, 0),), f"no free GPU now; fewest claimed: {g}", pool=free, soon=soon)


def _per_mille(rel: Mapping[str, float], order: Iterable[str], top: float) -> dict[str, int]:
    """A class line's speeds for ``#@speed``: per type, its speed in thousandths of the class's best (1..1000)."""
    return {g: max(1, min(1000, round(1000.0 * float(rel[g]) / top))) for g in order} if top > 0 else {}


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
    unchanged and nobody else's limit moves. One GPU per account per round. Returns (plan, moves). Nothing to
    move when limits lend (``plan.lend``): every GPU nobody claims is within every account's limit already."""
    if plan.lend:
        return plan, []
    rep = set(reporting)
    room = share_room(plan, gpus_in_use(snapshot), pending_typed(snapshot))
    held = {g: sum(plan.limit(a, g) for a in plan.accounts) for g in plan.capacity}
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


def explore_targets(targets: Mapping[str, Target], plan: Plan, snapshot: Snapshot,
                    sources: Mapping[str, Mapping[str, Mapping[str, str]]],
                    reporting: Iterable[tuple[str, str]]) -> dict[str, Target]:
    """``targets`` with exploration (``profiling.explore``, Gandiva_fair's opportunistic profiling): an account
    with a class that reports its throughput (``reporting``: (account, class) with a measured or harvested
    value) but has no profile on some GPU type (source ``assumed``) gets such a type first on its line (and on
    that class's own line), if its line has room there (so exploring never takes more than the account may use; see :func:`explore_plan`
    for how hard caps make that room); among several, the type with the most room, then the name. Pure; the
    result is what the type map publishes (per account: job_submit.lua sees no class), so the account's
    untyped submissions go there first until the next round."""
    rep = set(reporting)
    out = dict(targets)
    for a, tg in targets.items():
        if a == DEFAULT_TARGET:
            continue
        gaps = _gaps(a, sources, rep, plan.capacity)
        room = {g: n for g, n in tg.types if n > 0}
        cands = [g for g in sorted(gaps) if room.get(g, 0) > 0]
        if not cands:
            continue
        g = max(cands, key=lambda t: (room[t], -cands.index(t)))
        rest = tuple((t, n) for t, n in tg.types if t != g)
        out[a] = Target(((g, room[g]),) + rest,
                        f"explore: class {gaps[g]} has no profile on {g} (room {room[g]}); {tg.reason}",
                        tg.blocks, (min(tg.tiers),) + tuple(k for (t, _n), k in zip(tg.types, tg.tiers) if t != g)
                        if tg.tiers else (), tg.untyped, tg.pool, soon=tg.soon)
        cls_key = f"{a}/{gaps[g]}"  # the class's own line must not put its measured types back in front
        if cls_key in out:
            line = out[cls_key]
            out[cls_key] = Target(((g, 0),) + tuple((t, n) for t, n in line.types if t != g), line.reason,
                                  slow=line.slow)  # no speeds: exploring, the class is not moved by completion
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


MOVE_MARGIN = 1.2  # a move to a slower type must beat waiting for the job's own type by this factor
BLIND_MAX_LOSS = 1.5  # without a time limit (no horizon): move only to a type at most this much slower


def _class_speed(throughput: Mapping[str, Mapping[str, Mapping[str, float]]] | None, job: Job,
                 class_order: Iterable[str]) -> Mapping[str, float]:
    """The job's own class's throughput per type (empty when unknown)."""
    return (throughput or {}).get(job.account, {}).get(job_class(job, class_order), {})


def _loss(speed: Mapping[str, float], own: str, g: str) -> float:
    """How many times slower the job runs on ``g`` than on its own type ``own`` (1.0 when unknown)."""
    a, b = float(speed.get(own, 0.0)), float(speed.get(g, 0.0))
    return a / b if a > 0 and b > 0 else 1.0


def frees_in(snapshot: Snapshot, gpu_type: str, needed: int, account: str | None = None) -> float:
    """Seconds from ``snapshot.taken_at`` until running jobs on ``gpu_type`` (of ``account`` only, if given) have
    freed ``needed`` GPUs, from their start and time limit (``Job.time_limit``, minutes); ``inf`` when the jobs
    that end in time do not free enough — a running job without a known limit is never assumed to end soon.
    0 when nothing is needed."""
    if needed <= 0:
        return 0.0
    ends: list[tuple[float, int]] = []
    for j in snapshot.jobs:
        if not j.running or (account is not None and j.account != account):
            continue
        n = int(j.gpus_allocated.get(gpu_type, 0)) if j.gpus_allocated else (j.gpus if j.gpu_type == gpu_type else 0)
        if n <= 0:
            continue
        end = (float(j.start_time) + 60.0 * j.time_limit if j.start_time is not None and j.time_limit is not None
               else float("inf"))
        ends.append((end, n))
    got = 0
    for end, n in sorted(ends):
        got += n
        if got >= needed:
            return max(0.0, end - float(snapshot.taken_at))
    return float("inf")


def worth_moving(loss: float, wait_own: float, limit_min: int | None, margin: float = MOVE_MARGIN) -> bool:
    """Whether a job waiting for its own type should move to a type ``loss`` times slower: never-slower types
    always; otherwise, with the job's time limit as the horizon of its run on its own type (``limit_min``
    minutes), only if waiting for its own type and running there takes longer than running on the slow type by
    ``margin`` (wait + T > margin × loss × T). Without a limit: only a loss of at most ``BLIND_MAX_LOSS``."""
    if loss <= 1.0:
        return True
    if limit_min is None:
        return loss <= BLIND_MAX_LOSS
    run = 60.0 * float(limit_min)
    return wait_own + run > margin * loss * run


def _own_wait(plan: Plan, snapshot: Snapshot, job: Job, g: str, queued: float | None, short: int, own_need: int,
              room: int) -> float:
    """Seconds until ``job`` could start on its own type ``g``: when backfill's plan of the queue on ``g`` would
    start it (``queued``, :func:`.backfill.queue_starts`: the running jobs' expected ends and the reservations of
    the jobs ahead of it; None or ``inf`` — beyond the jobs planned, or jobs whose GPUs per node the snapshot does
    not give — then the GPUs of ``g`` freed for the ``short`` GPUs the jobs ahead and it lack), and its account's
    limit room there (``own_need``: its GPUs and its account's jobs ahead; ``room``: limit − in use) freed by the
    account's own jobs ending. Where the limit itself is below
    ``own_need`` and limits lend, the shortfall is GPUs lent to other accounts' claims, which end as their
    waiting jobs start on the type: the wait is the type's; with hard caps (no lending) such a job never starts
    there (``inf``). Measured (issue 28, 90 % seed 1): the GPUs freed by running jobs alone (``frees_in``) said
    ``inf`` for an 8-GPU job behind 9 GPUs of jobs on a 16-GPU type, and it was moved to K80, 5.3× slower,
    where Slurm alone started it on P100 18 s after submission."""
    wait = queued if queued is not None and queued < INF else frees_in(snapshot, g, short)
    if plan.limit(job.account, g) < own_need:
        return wait if plan.lend else float("inf")
    return max(wait, frees_in(snapshot, g, own_need - max(0, room), job.account))


def retype_moves(plan: Plan, snapshot: Snapshot, max_moves: int = 10,
                 throughput: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
                 runs_on: Callable[[Job], Iterable[str]] | None = None,
                 class_order: Iterable[str] = ("comment", "wckey", "name")) -> list[Retype]:
    """Pending flexible jobs to move to a type where they can start now (apply only where Slurm supports
    retyping).

    Per type, the GPUs idle now are handed to the pending startable jobs typed for it, highest priority first
    (SiteFactor, then submit time, then id), each within its account's limit room there (limit − in use); a
    flexible job that gets none may move to a type where it fits whole in both (idle GPUs left and its
    account's limit room), which then holds those GPUs. Idle GPUs are placed node by node
    (:class:`.demand.FreeGPUs`). ``runs_on(job)``: the types the job may be moved to (where its class is known
    to run; None: every type). At most ``max_moves`` jobs.

    Who gets a freed type (issue 39): of the jobs a move pays for (:func:`worth_moving`: the job's own type
    frees — :func:`_own_wait`, enough GPUs on it for the jobs ahead of it and itself, and within its account's
    limit there — later than the difference its slower run costs), the one that has waited longest first
    (earliest submit time, then id); each to the type its *own class* loses least on (:func:`_loss`, its speed on
    its own type over its speed there; ``throughput`` per account and class, the class by ``class_order``), then
    the type fastest for its account. Ranked by the class's loss first (issue 28), 8 freed P100 went to an 8-GPU
    job submitted 4.3 ks earlier ahead of three that had waited ~30 ks.
    """
    in_use = gpus_in_use(snapshot)
    nodes = FreeGPUs.of(snapshot)
    order = tuple(class_order)
    room = {a: {g: plan.limit(a, g) - int(in_use.get(a, {}).get(g, 0)) for g in plan.capacity}
            for a in plan.accounts}
    waiting = sorted((j for j in snapshot.jobs
                      if startable(j) and j.gpu_type in plan.capacity and j.gpus > 0 and j.account in room),
                     key=lambda j: (-j.site_factor, j.submit_time, j.job_id))
    can = {j.job_id: set(runs_on(j)) if runs_on else set(plan.capacity) for j in waiting}
    misfits: list[tuple[Job, float]] = []  # with the seconds until its own type could start it
    ahead: dict[str, int] = {}  # GPUs of higher-priority jobs still waiting for a type
    ahead_acct: dict[tuple[str, str], int] = {}
    queued: dict[int, float] | None = None  # backfill's plan of the queue (built at the first misfit)
    for j in waiting:
        r = room[j.account]
        g = str(j.gpu_type)
        if r[g] >= j.gpus and nodes.take(g, j.gpus):
            r[g] -= j.gpus
            continue
        if j.flexible:
            if queued is None:
                queued = queue_starts(snapshot_plan(snapshot), ((x.job_id, str(x.gpu_type), x.gpus,
                                                                 INF if x.time_limit is None else 60.0 * x.time_limit)
                                                                for x in waiting))
            misfits.append((j, _own_wait(plan, snapshot, j, g, queued.get(j.job_id),
                                         ahead.get(g, 0) + j.gpus - int(nodes.totals().get(g, 0)),
                                         ahead_acct.get((j.account, g), 0) + j.gpus, r[g])))
        ahead[g] = ahead.get(g, 0) + j.gpus
        ahead_acct[(j.account, g)] = ahead_acct.get((j.account, g), 0) + j.gpus
    cands: list[tuple[float, int, float, float, str, Job]] = []
    for j, wait in misfits:
        speed = _class_speed(throughput, j, order)
        for g in sorted(plan.capacity):
            if g == j.gpu_type or g not in can[j.job_id]:
                continue
            loss = _loss(speed, str(j.gpu_type), g)
            if worth_moving(loss, wait, j.time_limit):
                cands.append((float(j.submit_time), j.job_id, loss, -_speed(throughput, j.account, g), g, j))
    moves: list[Retype] = []
    moved: set[int] = set()
    for _submit, _id, _loss_g, _acct_speed, g, j in sorted(cands, key=lambda c: c[:5]):
        if len(moves) >= max_moves:
            break
        r = room[j.account]
        if j.job_id in moved or r[g] < j.gpus or not nodes.fits(g, j.gpus):
            continue
        nodes.take(g, j.gpus)
        r[g] -= j.gpus
        moved.add(j.job_id)
        moves.append(Retype(j.job_id, j.account, str(j.gpu_type), g, j.gpus_per_node))
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


