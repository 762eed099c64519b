"""Deviation-carrying rounding of fractional GPU shares to whole GPUs (OEF §4.3). Pure: no I/O.

A policy gives every tenant a fractional *ideal* number of GPUs of each type. Slurm hands out whole GPUs, so
every scheduling round the placer turns ideal shares into integers and remembers what it still owes (or was
overpaid) in a per (tenant, type) *deviation*:

    real = round(ideal + dev)        dev <- dev + ideal - real

so that, with a constant ideal, every tenant's average allocation tends to its ideal (the deviation stays
bounded, hence ``|mean(real) - ideal| <= bound / rounds``). ``round`` is half-up. With ``current`` (the GPUs
each tenant holds now) it is *sticky*: of the two roundings ``floor(ideal + dev)`` and ``ceil(ideal + dev)``,
the one closest to what the tenant holds, so rounding alone never takes a GPU from a running job only to give
it back next round (with preemption on, that would requeue jobs for nothing). Either choice keeps the
deviation in (-1, 1), so the averages still converge.

Refinements, applied in this order, each deterministic (ties broken by tenant name, then GPU type order):

1. **Demand.** A tenant never gets more GPUs in total than its ``demand``. An ideal above the demand is not
   owed (it is scaled down to the demand before the deviation is carried) so the deviation cannot grow
   without bound for a tenant that cannot use its share. Excess rounding is taken back from the type with
   the smallest residual claim ``ideal + dev - real``.
   A held whole-job window (below) is trimmed last.
1b. **One type for a job.** A tenant whose GPUs reach ``min_gpus`` only summed over types (2 + 2 for a 4-GPU
   job) gets them on one type now, before the capacity step: the one it has the largest claim on among those
   with ``min_gpus`` GPUs (tenants moved here do not land on each other). There they compete by claim with the
   others' GPUs in step 2, where a tenant that would fall below ``min_gpus`` gives back last — placed only into
   room nobody held (after step 2), an owed 4-GPU job waited forever behind a flood that held every type. Work
   conservation (4) gives such a tenant no GPUs of its other types unless it is owed GPUs in total.
2. **Capacity.** When rounding up overshoots a type's capacity, GPUs are taken back one at a time from the
   tenant with the smallest residual claim on that type (the largest would-be negative deviation); tenants
   that would then fall below their ``min_gpus`` give back last, so a starved tenant whose claim has finally
   grown large enough is not cut again; among those, one already below it gives back first (it gets nothing
   this round anyway): two starved tenants whose claims grow alike no longer cut each other below their
   minimum round after round — one starts a job (found by the simulator: two 8-GPU jobs on 8 GPUs waited
   forever).
3. **Minimum job size** (OEF §4.3). A tenant whose rounded total is below ``min_gpus`` (the fewest GPUs any of
   its jobs needs) gets 0 GPUs of every type this round and keeps accumulating its deviation, so its claim
   grows until it is large enough to start a job. A job runs on GPUs of one type, so a tenant whose GPUs
   reach ``min_gpus`` only summed over types (3 + 3 + 2 for an 8-GPU job) after step 2 gets them on one type
   instead: the one it has the largest claim on among those with room for ``min_gpus`` (then the most room, then
   type order), as many as it had in total as fit there; with room nowhere it gets 0 this round, as above. The
   deviations record what it got, so the other types owe it back later.
4. **Work conservation.** GPUs still free after 1-3 go, one at a time, to the tenant with the largest positive
   residual claim on that type (it is owed GPUs), as long as demand and ``min_gpus`` allow it.

**Holding still** (``last``, :class:`LastRound`: last round's ideal and whole GPUs; config ``[policy] stable``).
Deviation carrying alone flips a guarantee whose ideal does not move: an ideal of 3.5 rounds to 4, 3, 4, 3...
(the deviation swings between -0.5 and 0), 5.33 to 5, 6, 5, 5, 6... — by design, so that the average converges;
and an ideal that moves a little (another account's demand moved) flips it just as often. With ``last``, per
tenant and type:

a. an ideal unchanged since last round (within ``HOLD_TOL`` GPUs) keeps last round's whole GPUs, and its
   deviation is carried unchanged (it neither grows nor shrinks while it holds; it stays in (-1, 1)) — if they
   are a rounding of the ideal (floor or ceil): GPUs that refinement 3 (``min_gpus``: the smallest waiting job
   must fit) or the capacity took from it last round are not held, so the deviation grows until the job fits
   (a guarantee of 0 against an ideal of 2 for an account whose one job needs 4 would otherwise last forever);
   and once that job's **window** came (whole GPUs ≥ ``min_gpus`` on a type, more than the ideal rounds to),
   it is held while the tenant's smallest waiting job still needs it or its jobs run on it (``current``) — in
   (a) and (b) alike — so the GPUs reclaimed for it are not handed back to the others a round later, nor is
   the job that runs on them made a borrower to reclaim from; the deviation (which may then pass -1) is paid
   back once the window is let go;
b. otherwise, last round's whole GPUs are kept if they are still one of the two roundings ``floor(ideal + dev)``
   and ``ceil(ideal + dev)`` (before what the tenant holds now: ``current`` decides only between two roundings
   that are both new — a guarantee that follows the running jobs up and down is one that flips, and what a
   tenant held above its guarantee last round it held then too); the deviation is carried as always, so it
   stays in (-1, 1) and the averages still converge. Measured in the simulator (benchmarks/flip_rate.py),
   keeping them while within 2 GPUs (deviation in (-2, 2)) flipped more, not less: the larger snap back;
c. otherwise it is rounded as without ``last``.

Refinements 1-4 still apply (a held tenant whose demand fell gets no more than its demand). The price of (a):
while nothing moves, the fractional remainder is not rotated between tenants (two tenants at 3.5 on 7 GPUs keep
4 and 3); the rotation resumes, from the carried deviation, as soon as an ideal moves. Under ``limits.lend`` a
guarantee is not a cap (GPUs nobody claims are lent), so what the remainder costs is a claim of one GPU less.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from .errors import InputError

_EPS = 1e-9
HOLD_TOL = 1e-6  # GPUs: an ideal that moved less than this is unchanged (solver noise)


@dataclass(frozen=True)
class LastRound:
    """Last round's fractional ideal and whole GPUs per tenant and type (what :func:`place` holds to)."""

    ideal: Mapping[str, Mapping[str, float]]
    real: Mapping[str, Mapping[str, int]]

    def of(self, tenant: str, gpu_type: str) -> tuple[float, int] | None:
        """Last round's (ideal, whole GPUs) of ``tenant`` on ``gpu_type``; None where it has none, or not as
        numbers (a type it had no row for counts as 0 GPUs of an ideal 0)."""
        before, real = self.ideal.get(tenant), self.real.get(tenant)
        if not isinstance(before, Mapping) or not isinstance(real, Mapping):
            return None
        b, r = before.get(gpu_type, 0.0), real.get(gpu_type, 0)
        for v in (b, r):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                return None
        if r != int(r):
            return None
        return float(b), int(r)


@dataclass(frozen=True)
class Placement:
    """Whole GPUs per tenant and type for this round, and the deviations to carry into the next one."""

    real: dict[str, dict[str, int]]
    deviations: dict[str, dict[str, float]]

    def total(self, tenant: str) -> int:
        return sum(self.real[tenant].values())


def _finite(field: str, value: object, *, nonneg: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(field, value, "must be a finite number")
    if nonneg and value < 0:
        raise InputError(field, value, "must be >= 0")
    return float(value)


def _whole(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(field, value, "must be a whole number >= 0")
    if value < 0 or value != int(value):
        raise InputError(field, value, "must be a whole number >= 0")
    return int(value)


def _round_half_up(v: float) -> int:
    # Python's round() rounds half to even; the placer rounds half up (with a tolerance for float noise).
    return int(math.floor(v + 0.5 + _EPS))


def _round(v: float, held: int | None) -> int:
    """Half-up; or, given the GPUs held now, the rounding (floor or ceil of ``v``) closest to them."""
    if held is None:
        return _round_half_up(v)
    lo, hi = math.floor(v + _EPS), math.ceil(v - _EPS)
    return min(max(held, lo), hi)


def _check_keys(field: str, given: Mapping, known: Mapping | list, what: str) -> None:
    unknown = [k for k in given if k not in known]
    if unknown:
        raise InputError(field, sorted(map(str, unknown)), f"unknown {what} (known: {', '.join(map(str, known))})")


def place(
    ideal: Mapping[str, Mapping[str, float]],
    capacity: Mapping[str, int],
    deviations: Mapping[str, Mapping[str, float]] | None = None,
    min_gpus: Mapping[str, int] | None = None,
    demand: Mapping[str, int] | None = None,
    current: Mapping[str, Mapping[str, int]] | None = None,
    last: LastRound | None = None,
    running_jobs: Mapping[str, int] | None = None,
) -> Placement:
    """Round ``ideal`` {tenant: {type: fractional GPUs}} to whole GPUs; see the module docstring.

    ``capacity`` {type: GPUs} lists every GPU type (a type missing from a tenant's ideal counts as 0).
    ``deviations`` are the ones returned by the previous round (missing = 0). ``min_gpus`` and ``demand`` are
    per tenant (missing = no constraint). ``current`` {tenant: {type: GPUs held now}} makes the rounding sticky
    (module docstring; missing tenants and types round half-up). ``last``: hold still (module docstring); ``running_jobs``: each tenant's
    largest running job (GPUs): a window is held while a job larger than the ideal rounds to runs on it. Raises InputError for unknown tenants/types, negative or
    non-finite numbers, and a type whose ideal shares add up to more than its capacity.
    """
    types, cap, tenants, want, dev, mins, dem = _checked(ideal, capacity, deviations or {}, min_gpus or {},
                                                         demand or {})
    ideal_in = {t: dict(want[t]) for t in tenants}  # as given (``last`` compares it with last round's)
    _owed_up_to_demand(want, dem)
    held = _held_now(current or {}, ideal, tenants, cap)
    target = {t: {g: want[t][g] + dev[t][g] for g in types} for t in tenants}
    real = {t: {g: max(0, min(cap[g], _round(target[t][g], held[t].get(g)))) for g in types} for t in tenants}
    holding: set[tuple[str, str]] = set()  # (tenant, type) whose ideal did not move: deviation frozen
    windows: set[tuple[str, str]] = set()  # (tenant, type) holding a whole-job window: the capacity takes it last
    if last is not None:
        holding, windows = _hold_still(last, ideal_in, target, real, held, mins, cap, running_jobs or {})
    r = _Rounding(types, cap, tenants, target, real, mins, dem, windows)
    _trim_to_demand(r)  # 1.
    moved = _one_type_first(r)  # 1b.
    _fit_capacity(r)  # 2.
    blocked = _min_job_size(r)  # 3.
    _hand_out_free(r, blocked, moved)  # 4.
    new_dev = {t: {g: (dev[t][g] if (t, g) in holding else target[t][g] - real[t][g]) for g in types}
               for t in tenants}
    return Placement(real=real, deviations=new_dev)


def _checked(ideal: Mapping[str, Mapping[str, float]], capacity: Mapping[str, int],
             deviations: Mapping[str, Mapping[str, float]], min_gpus: Mapping[str, int], demand: Mapping[str, int]
             ) -> tuple[list[str], dict[str, int], list[str], dict[str, dict[str, float]],
                        dict[str, dict[str, float]], dict[str, int], dict[str, float]]:
    """:func:`place`'s inputs checked: (GPU types, capacity, tenants, ideal, deviations, min_gpus, demand), every
    tenant with every type (0 where missing), a demand of inf where none; InputError as :func:`place` says."""
    if not isinstance(ideal, Mapping):
        raise InputError("ideal", ideal, "must be a mapping {tenant: {gpu_type: gpus}}")
    if not isinstance(capacity, Mapping):
        raise InputError("capacity", capacity, "must be a mapping {gpu_type: gpus}")
    types = list(capacity)
    cap = {g: _whole(f"capacity.{g}", capacity[g]) for g in types}
    tenants = list(ideal)
    _check_keys("deviations", deviations, ideal, "tenant")
    _check_keys("min_gpus", min_gpus, ideal, "tenant")
    _check_keys("demand", demand, ideal, "tenant")

    want: dict[str, dict[str, float]] = {}
    dev: dict[str, dict[str, float]] = {}
    for t in tenants:
        row = ideal[t]
        if not isinstance(row, Mapping):
            raise InputError(f"ideal.{t}", row, "must be a mapping {gpu_type: gpus}")
        _check_keys(f"ideal.{t}", row, cap, "GPU type")
        want[t] = {g: _finite(f"ideal.{t}.{g}", row.get(g, 0.0), nonneg=True) for g in types}
        drow = deviations.get(t, {})
        if not isinstance(drow, Mapping):
            raise InputError(f"deviations.{t}", drow, "must be a mapping {gpu_type: deviation}")
        _check_keys(f"deviations.{t}", drow, cap, "GPU type")
        dev[t] = {g: _finite(f"deviations.{t}.{g}", drow.get(g, 0.0)) for g in types}
    mins = {t: _whole(f"min_gpus.{t}", min_gpus.get(t, 0)) for t in tenants}
    dem = {t: (math.inf if demand.get(t) is None else _finite(f"demand.{t}", demand[t], nonneg=True)) for t in tenants}
    for g in types:
        total = sum(want[t][g] for t in tenants)
        if total > cap[g] + 1e-6 * max(1.0, cap[g]):
            raise InputError(f"ideal.*.{g}", round(total, 9), f"ideal shares exceed the capacity of {cap[g]} GPUs")
    return types, cap, tenants, want, dev, mins, dem


def _owed_up_to_demand(want: dict[str, dict[str, float]], dem: Mapping[str, float]) -> None:
    """An ideal above the demand is not owed: scale it down (in place) so the deviation stays bounded."""
    for t in want:
        tot = sum(want[t].values())
        if tot > dem[t] + _EPS:
            f = dem[t] / tot
            want[t] = {g: v * f for g, v in want[t].items()}


def _held_now(current: Mapping[str, Mapping[str, int]], ideal: Mapping, tenants: list[str], cap: Mapping[str, int]
              ) -> dict[str, dict[str, int]]:
    """``current`` checked: {tenant: {type: GPUs held now}} for every tenant (empty where none)."""
    _check_keys("current", current, ideal, "tenant")
    held = {t: {g: _whole(f"current.{t}.{g}", n) for g, n in current.get(t, {}).items()} for t in tenants}
    for t in tenants:
        _check_keys(f"current.{t}", held[t], cap, "GPU type")
    return held


def _hold_still(last: LastRound, ideal_in: Mapping[str, Mapping[str, float]],
                target: Mapping[str, Mapping[str, float]], real: dict[str, dict[str, int]],
                held: Mapping[str, Mapping[str, int]], mins: Mapping[str, int], cap: Mapping[str, int],
                running_jobs: Mapping[str, int]) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """Holding still (module docstring, a-c): ``real`` keeps last round's whole GPUs where they hold (changed in
    place). Returns (the (tenant, type) pairs whose deviation is frozen, the whole-job windows held)."""
    holding: set[tuple[str, str]] = set()
    windows: set[tuple[str, str]] = set()
    for t in real:
        for g in cap:
            prior = last.of(t, g)
            if prior is None:
                continue
            lo, hi = math.floor(target[t][g] + _EPS), math.ceil(target[t][g] - _EPS)
            # a window: last round gave the tenant's smallest waiting job the GPUs it needs on this type,
            # more than its ideal rounds to; it keeps them while it still waits for them (or runs on them)
            waits = 0 < mins[t] <= prior[1] <= max(mins[t], hi) and mins[t] > math.ceil(ideal_in[t][g] - _EPS)
            runs = (held[t].get(g, 0) >= prior[1] > math.ceil(ideal_in[t][g] - _EPS)  # a job too large for
                    and running_jobs.get(t, 0) > math.ceil(ideal_in[t][g] - _EPS))  # the ideal runs on it
            window = ideal_in[t][g] > _EPS and (waits or runs)
            if window:
                windows.add((t, g))
            near = math.floor(ideal_in[t][g] + _EPS) <= prior[1] <= math.ceil(ideal_in[t][g] - _EPS)
            if abs(prior[0] - ideal_in[t][g]) <= HOLD_TOL and (near or window):
                real[t][g] = min(cap[g], prior[1])
                holding.add((t, g))
            elif lo <= prior[1] <= hi or window:
                real[t][g] = min(cap[g], prior[1])
    return holding, windows


@dataclass
class _Rounding:
    """The refinements' working state (module docstring, 1-4): the GPU types in order, the capacity, the tenants,
    each one's target (ideal + deviation), whole GPUs so far and their total (``tot``, kept up to date by
    :meth:`take` and :meth:`give`), ``min_gpus`` and demand, and the whole-job windows held."""

    types: list[str]
    cap: dict[str, int]
    tenants: list[str]
    target: dict[str, dict[str, float]]
    real: dict[str, dict[str, int]]
    mins: dict[str, int]
    dem: dict[str, float]
    windows: set[tuple[str, str]]
    tot: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.tot = {t: sum(self.real[t].values()) for t in self.tenants}

    def resid(self, t: str, g: str) -> float:
        """What ``t`` is still owed on ``g`` (its residual claim)."""
        return self.target[t][g] - self.real[t][g]

    def take(self, t: str, g: str) -> None:
        self.real[t][g] -= 1
        self.tot[t] -= 1

    def give(self, t: str, g: str) -> None:
        self.real[t][g] += 1
        self.tot[t] += 1


def _trim_to_demand(r: _Rounding) -> None:
    """1. Demand: no tenant gets more than its demand (a held window is trimmed last: it is the one type the
    tenant's job fits on)."""
    real, tot, types = r.real, r.tot, r.types
    for t in r.tenants:
        while tot[t] > r.dem[t] + _EPS:
            r.take(t, min((g for g in types if real[t][g] > 0),
                          key=lambda g: ((t, g) in r.windows, r.resid(t, g), types.index(g))))


def _one_type_first(r: _Rounding) -> list[str]:
    """1b. One type for a job: GPUs that reach min_gpus only summed over types (2 + 2 for a 4-GPU job) go on one
    type now, before the capacity step, so that they compete there with the others' GPUs by claim (and give
    back last, refinement 2); consolidated after it, they found no room where others already sat, and the
    tenant got nothing round after round while its deviation grew (seen on the testbed: a 4-GPU job owed
    2 k80 + 2 v100 waited behind a flood that held both types whole). Tenants moved here do not land on each
    other: each takes a type with room beside the ones moved before it. Returns the tenants moved."""
    real, tot, types, cap, mins, target = r.real, r.tot, r.types, r.cap, r.mins, r.target
    moved: list[str] = []
    for t in sorted(r.tenants):
        if 0 < mins[t] <= tot[t] and max(real[t].values()) < mins[t]:
            room = {g: cap[g] - sum(real[u][g] for u in moved) for g in types}
            fits = [g for g in types if room[g] >= mins[t]]
            if not fits:
                continue  # refinement 3 places it if it can, else blocks it
            g = max(fits, key=lambda g: (target[t][g], room[g], -types.index(g)))
            real[t] = {x: 0 for x in types}
            real[t][g] = min(tot[t], room[g])
            tot[t] = real[t][g]
            moved.append(t)
    return moved


def _fit_capacity(r: _Rounding) -> None:
    """2. Capacity: GPUs over a type's capacity are taken back one at a time (module docstring)."""
    real, tot, mins = r.real, r.tot, r.mins
    for g in r.types:
        used = sum(real[t][g] for t in r.tenants)
        while used > r.cap[g]:
            # a tenant that would fall below its min_gpus (and so lose all its GPUs) gives back last; among those,
            # one already below it (it gets nothing this round anyway) first — so when two starved tenants
            # compete for the same GPUs one of them keeps enough to start a job instead of both ending just
            # below their minimum round after round; then the smallest claim first; on a tie the name sorting
            # last gives one back (deterministic)
            r.take(
                max(
                    (t for t in r.tenants if real[t][g] > 0),
                    key=lambda t: ((t, g) not in r.windows, not 0 < tot[t] - 1 < mins[t], 0 < tot[t] < mins[t],
                                   -r.resid(t, g), t),
                ),
                g,
            )
            used -= 1


def _min_job_size(r: _Rounding) -> set[str]:
    """3. Minimum job size: a tenant below its min_gpus gets nothing this round; one whose GPUs reach it only
    summed over types gets them on one type where they fit, else nothing. Returns the tenants blocked."""
    real, tot, types, cap, mins, target, tenants = r.real, r.tot, r.types, r.cap, r.mins, r.target, r.tenants
    blocked = set()
    split = []
    for t in tenants:
        if 0 < tot[t] < mins[t]:
            blocked.add(t)
            real[t] = {g: 0 for g in types}
            tot[t] = 0
        elif 0 < mins[t] <= tot[t] and max(real[t].values()) < mins[t]:
            split.append(t)
    # ... on one GPU type: a job runs on GPUs of one type, so GPUs that reach the minimum only summed over types
    # start nothing (the simulator found four 8-GPU jobs, 8 GPUs each as 3+3+2 over three types, waiting forever
    # on an idle cluster); such a tenant gets its GPUs on one type where they fit, else nothing this round
    held_split = {t: tot[t] for t in split}
    for t in split:
        real[t] = {g: 0 for g in types}
        tot[t] = 0
    for t in sorted(split):
        room = {g: cap[g] - sum(real[u][g] for u in tenants) for g in types}
        fits = [g for g in types if room[g] >= mins[t]]
        if not fits:
            blocked.add(t)
            continue
        # the type it has the largest claim on (what the policy meant it to have), then the one with most room
        g = max(fits, key=lambda g: (target[t][g], room[g], -types.index(g)))
        real[t][g] = min(held_split[t], room[g])
        tot[t] = real[t][g]
    return blocked


def _hand_out_free(r: _Rounding, blocked: set[str], moved: list[str]) -> None:
    """4. Work conservation: GPUs left free go to tenants still owed some, as demand and min_gpus allow."""
    real, tot, types, mins, dem, tenants = r.real, r.tot, r.types, r.mins, r.dem, r.tenants
    for g in types:
        free = r.cap[g] - sum(real[t][g] for t in tenants)
        if free <= 0:
            continue
        # a tenant moved to one type (1b) is owed the rest on the others only in the deviation: what it got
        # there already pays for it, so free GPUs elsewhere go to tenants owed GPUs in total
        owed = [t for t in tenants if t not in blocked and r.resid(t, g) > _EPS
                and not (t in moved and real[t][g] == 0 and sum(r.resid(t, x) for x in types) <= _EPS)]
        while free > 0:
            cands = [t for t in owed if r.resid(t, g) > _EPS and mins[t] <= tot[t] + 1 <= dem[t] + _EPS]
            if not cands:
                break
            t = min(cands, key=lambda t: (-r.resid(t, g), t))
            r.give(t, g)
            free -= 1
