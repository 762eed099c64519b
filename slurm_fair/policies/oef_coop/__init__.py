"""Cooperative OEF (OEF paper §4.2.2, eq. 10), weighted (§4.2.3) over virtual users (§4.2.4).

    maximize   Σ_l Σ_j w_l^j x_l^j                                  (total normalized throughput)
    subject to Σ_l x_l^j <= m_j                         ∀ j          (capacity)
               u_l(x_l) / π_l >= u_l(x_i) / π_i         ∀ l, i       (weighted envy-freeness)
               x >= 0

Thm 5.1: the optimum is envy-free and sharing-incentive (u_l(x_l) >= u_l(π_l/Σπ · m)): summing the
envy-freeness constraints of l over i gives Σπ·u_l(x_l)/π_l >= u_l(Σ_i x_i) = u_l(m), as the optimum leaves
no GPU that some user could use idle. For integer weights it equals the replication of §4.2.3.

Caps (total demand and per-type caps) by water-filling (``common.waterfill``): solve eq. 10 for the
active users on the GPUs left; users given more GPUs than their demand, or more of a type than their cap
there, are frozen at the usable part of that solve (their own fastest GPUs of it, at most their cap per type
and their demand in all): a class stopped by a per-type cap is frozen exactly like one stopped by its total
demand. Their GPUs leave the capacity; solve again for the others; repeat. Then capped users move from slower
GPUs they hold to faster GPUs left idle, within their type caps (``upgrade_idle``: a Pareto improvement — on a
lightly loaded cluster a class frozen at its demand would otherwise keep the slow GPUs of its eq. 10 share
while faster ones stay idle; found by the simulator). Finally GPUs still idle (only capped users could use
them) go to capped users below their caps, by weight (``fill_idle``).
Guarantees under caps: no user exceeds its demand or a type cap; a user capped by its total demand gets
exactly its demand; a user capped by a type cap gets the usable part of its eq. 10 share, which can be
worth less to it than its weight share (it is compared with nobody: its own caps decide its share); among
the uncapped users the allocation is eq. 10 on the GPUs left over, so envy-freeness holds among uncapped
users and sharing incentive holds for them relative to their weight share of the *remaining* GPUs;
work-conserving: no GPU is idle while a user below its caps could use it (eq. 10 leaves none of the
remaining GPUs an uncapped user can use idle, Thm 5.1, and ``fill_idle`` hands out the rest). The per-step
solvers (``fast``, :func:`plain_step`) solve eq. 10 without caps; the caps live only in the
water-filling around them.

Rejected alternative (measured): keeping a class capped on one type active for its other types, with that
type's cap fixed, lets it take its capped GPUs *and* a full weight share of the rest. On the demo's jobs
(rl: 4 k80 jobs, 1.1x speedup) that gave acct_b 6.7 GPUs and the 10x-speedup acct_a 2.7 at equal weights.

The per-step LP is :func:`_solve_step` (numpy in, numpy out), so that a faster exact solver with the same
signature can replace it; :func:`solve_plain` keeps the plain cvxpy formulation reachable.

Warm start (``solve(problem, warm=...)``, the daemon's rounds): the allocation carries in ``warm`` the envy
rows with a nonzero dual at the end of every water-filling step, as pairs of (tenant, class) keys, and one
``("fp", tenant, class, hash)`` entry per class (a hash of its speeds, weight, demand and type caps); given
back to the next solve, the pairs naming a class whose hash changed are dropped, and every step starts its
constraint generation from the other pairs among its users plus the similarity rows of every user (a
superset of the cold start; a save without hashes keeps all its pairs). Every later step, warm or cold, starts
from the binding rows of the step before it (plus the similarity rows). The optimum does not depend on the
seed; pairs naming unknown classes are ignored.

Partitioned mode (``partition_above`` > 0 and more classes than that; config ``[policy]``): POP-style groups
(:mod:`.partition`), each solved as above on its weight share of every GPU type, then ``upgrade_idle`` and
``fill_idle`` over the whole cluster. Faster, not exact: envy-freeness only within a group (the notes say
so; loss measured in ``benchmarks/coop_scale.py``).

Beneath this package: ``fast`` (the exact solver: row generation on a live HiGHS model), ``classes`` (envy
rows shared by users of one speed direction), ``fallback`` (the exact full LP a failed step falls back to, with
the root cause of such failures: nearly proportional speeds), ``nearest`` (the second stage: of the optima, the nearest to
last round's allocation), ``partition`` (the partitioned mode's groups).
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from ... import lp
from ...errors import InputError
from ...model import Allocation, Problem, VirtualUsers
from ..stable import Previous
from . import fast, partition
from ..common import capped_note, clean, fill_idle, finish, upgrade_idle, waterfill
from ..base import Policy

NAME = "oef-coop"


def plain_step(speed: np.ndarray, weight: np.ndarray, capacity: np.ndarray, solver: str | None = None) -> np.ndarray:
    """Eq. 10 (no demands) as one cvxpy LP with the n² envy-freeness constraints; returns x (n, k)."""
    return clean(fast.plain_lp(speed, weight, capacity, solver), np.asarray(speed, dtype=float),
                 np.asarray(capacity, dtype=float))


FAST_SOLVER = "HIGHS (constraint generation)"


def _solve_step(speed: np.ndarray, weight: np.ndarray, capacity: np.ndarray, solver: str | None = None) -> np.ndarray:
    """One water-filling step: eq. 10 for these rows and this capacity.

    With no solver named, the exact constraint-generation solver on a live HiGHS model
    (:mod:`.fast`, same optimum, tested against this module's plain form); a named cvxpy solver
    (ECOS, CLARABEL, ...) solves the plain form with all n(n-1) envy constraints."""
    if solver is None or not str(solver).strip():
        return fast.solve(speed, weight, capacity)
    return plain_step(speed, weight, capacity, solver)


def _solve(problem: Problem, solver: str | None, step) -> Allocation:
    lp.pick_solver(solver)
    vu = problem.virtual_users()
    timer = lp.Timer()

    def timed_step(speed, weight, capacity):
        with timer.measure():
            return step(speed, weight, capacity, solver)

    x, capped = waterfill(vu, timed_step)
    x = clean(fill_idle(vu, upgrade_idle(vu, x, capped)), vu.speed, vu.capacity, vu.demand, vu.type_cap)
    alloc = finish(problem, NAME, x, timer, solver, capped_note(vu, capped))
    if step is _solve_step and (solver is None or not str(solver).strip()):
        alloc = dataclasses.replace(alloc, solver=FAST_SOLVER)
    return alloc


def solve_plain(problem: Problem, solver: str | None = None) -> Allocation:
    """Cooperative OEF with the plain cvxpy LP at every step (reference for faster solvers)."""
    return _solve(problem, solver, plain_step)


def _fingerprints(vu: VirtualUsers) -> list[str]:
    """Per class, a short hash of what the solve sees of it (speeds, weight, demand, type caps): a saved
    envy row of a class whose fingerprint changed is stale."""
    out = []
    for i in range(vu.n):
        h = hashlib.blake2b(digest_size=8)
        for arr in (vu.speed[i], vu.weight[i:i + 1], vu.demand[i:i + 1], vu.type_cap[i]):
            h.update(np.round(np.asarray(arr, dtype=float), 12).tobytes())
        out.append(h.hexdigest())
    return out


def _warm_fingerprints(warm) -> dict[tuple[str, str], str] | None:
    """The ``("fp", tenant, class, hash)`` entries of ``warm`` (None: it has none, e.g. an older save)."""
    out = {}
    for e in warm or ():
        if isinstance(e, (list, tuple)) and len(e) == 4 and e[0] == "fp" and all(isinstance(v, str) for v in e):
            out[(e[1], e[2])] = e[3]
    return out or None


def _usable_pairs(pairs, allowed: set) -> list:
    """The saved ``pairs`` between classes ``allowed`` (unchanged since the save, in the group solved)."""
    return [(a, b) for a, b in pairs if a in allowed and b in allowed]


def _warm_pairs(warm) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    """``warm`` as pairs of (tenant, class) keys; anything else in it is skipped (a seed is only a hint)."""
    out = []
    for p in warm or ():
        try:
            (a, b), (c, d) = p
        except (TypeError, ValueError):
            continue
        if all(isinstance(v, str) for v in (a, b, c, d)):
            out.append(((a, b), (c, d)))
    return out


def _exact_vu(vu: VirtualUsers, warm_keys, previous: Previous | None = None
              ) -> tuple[np.ndarray, list[int], list, float, tuple[int, int], list]:
    """Water-filling with the fast exact step on ``vu``. ``warm_keys``: pairs of (tenant, class) keys (an
    earlier solve's binding rows; None: cold) that seed every step, among its users. Each step after the
    first also starts from the envy rows that bound the step before it (its users less the frozen ones).
    Seeded steps also get the similarity rows of every user (``seed_all``): the start is a superset of the
    cold start, so a class whose speeds changed since the seed (its old rows are stale) is seeded as in a
    cold start. Measured in LP rounds at 300 tenants (philly, seed 0): seeding without the similarity rows
    made warm rounds with 2 % of the tenants changed cost more than cold ones (171 vs 160 rounds before).
    The last value returned: per step, its rows' allocation ({(tenant, class): {type: GPUs}}).
    ``previous``: every step returns, of its optima, the one nearest to the previous solve's same step
    (:mod:`..stable`). Returns the allocation (before ``upgrade_idle``), the capped rows, the binding rows as key pairs, LP
    seconds, (steps seeded, rows seeded), the steps' records and the steps that fell back (module ``fallback``)."""
    key_of = list(zip(vu.tenant, vu.cls))
    index = {kk: i for i, kk in enumerate(key_of)}
    timer = lp.Timer()
    binding: set[tuple[int, int]] = set()
    seeded = [0, 0]  # steps seeded, rows seeded
    first = [(index[a], index[b]) for a, b in warm_keys or () if a in index and b in index]
    prev: list[list[tuple[int, int]]] = [[]]  # binding rows of the step before
    nstep = [0]
    steps: list[dict] = []
    fell: list[str] = []

    def step(speed, weight, capacity, rows):
        pos = {int(r): p for p, r in enumerate(rows)}
        local = [(pos[a], pos[b]) for a, b in first + prev[0] if a in pos and b in pos]
        cold = nstep[0] == 0 and warm_keys is None
        with timer.measure():
            xa, info = fast.solve_with_info(speed, weight, capacity, seed=None if cold else local,
                                                  seed_all=True,
                                                  previous=None if previous is None else previous.array(vu, nstep[0])[rows])
        if info.fallback:
            fell.append(f"step {nstep[0] + 1}: {info.fallback}")
        found = [(int(rows[a]), int(rows[b])) for a, b in info.binding]
        binding.update(found)
        if warm_keys is not None and first:
            seeded[0] += 1
            seeded[1] += sum(1 for a, b in first if a in pos and b in pos)
        nstep[0] += 1
        prev[0] = found
        steps.append({key_of[int(r)]: {g: float(v) for g, v in zip(vu.gpu_types, xa[p])} for p, r in enumerate(rows)})
        return xa

    x, capped = waterfill(vu, step, step_takes_rows=True)
    pairs = sorted((key_of[a], key_of[b]) for a, b in binding)
    return x, capped, pairs, timer.seconds, (seeded[0], seeded[1]), steps, fell


def _group_solver(warm_keys, same, prev: Previous | None = None):
    def solve_group(sub: VirtualUsers):
        keys = None
        if warm_keys is not None:
            mine = set(zip(sub.tenant, sub.cls))
            keys = _usable_pairs(warm_keys, mine & same) if same is not None else \
                [(a, b) for a, b in warm_keys if a in mine and b in mine]
        return _exact_vu(sub, keys, prev)
    return solve_group


def solve(problem: Problem, solver: str | None = None, warm=None, partition_above: int = 0,
          partition_parts: int = 4, partition_seed: int = 0, processes: int = 0,
          partition_split: str = "stratified", stable: bool = True) -> Allocation:
    """Eq. 10 with caps by water-filling. ``warm``: the ``warm`` of an earlier allocation (see the module
    docstring); only the fast solver uses it.

    ``partition_above`` > 0: with more classes than that, solve POP-style in ``partition_parts`` random groups
    (:mod:`.partition`, seed ``partition_seed``; ``processes`` > 1: in parallel), each exact on its weight
    share of every GPU type, then ``upgrade_idle`` and ``fill_idle`` over the whole cluster. Not the exact
    optimum: envy-freeness holds inside each group only (the loss is measured in benchmarks/coop_scale.py);
    the notes say so.

    ``stable`` (config ``[policy] stable``): of each step's optima, the one nearest to the previous solve's
    allocation (kept in ``warm`` as :class:`.Previous` entries; :mod:`..stable`), so that a class's
    GPUs move only when the problem moved; the total throughput stays at the optimum (to the solver's tolerance).
    The previous allocation is saved in ``warm`` either way."""
    if solver is not None and str(solver).strip():
        return _solve(problem, solver, _solve_step)
    above = int(partition_above or 0)
    if above < 0:
        raise InputError("partition_above", partition_above, "must be an integer >= 0 (0 = never partition)")
    parts = partition.check_parts(partition_parts)
    lp.pick_solver(solver)
    vu = problem.virtual_users()
    warm_keys = _warm_pairs(warm) if warm is not None else None
    fps = _fingerprints(vu)
    saved = _warm_fingerprints(warm)
    same = None  # the classes unchanged since the save (None: unknown)
    if warm_keys is not None and saved is not None:
        same = {kk for kk, f in zip(zip(vu.tenant, vu.cls), fps) if saved.get(kk) == f}
    prev = Previous.from_warm(warm) if stable else None
    notes: list[str] = []
    timer = lp.Timer()
    if above and vu.n > above:
        sp = partition.split(vu, parts, partition_seed, partition_split)
        out = partition.solve_groups(vu, sp, _group_solver(warm_keys, same, prev), processes)
        x = np.zeros((vu.n, vu.k))
        capped: list[int] = []
        pairs: list = []
        seeded = [0, 0]
        steps: list[dict] = []
        for p, (xg, cg, pg, sec, sd, st, fb) in enumerate(out):
            notes.extend(f"group {p}, {f}" for f in fb)
            for n, rows_n in enumerate(st):  # step n of every group: one record (keys are distinct)
                if n == len(steps):
                    steps.append({})
                steps[n].update(rows_n)
            rows = sp.rows(p)
            x[rows] = xg
            capped.extend(int(rows[i]) for i in cg)
            pairs.extend(pg)
            timer.laps.append(sec)
            timer.seconds += sec
            seeded[0] += sd[0]
            seeded[1] += sd[1]
        capped.sort()
        notes.append(f"partitioned (POP-style): {vu.n} classes > partition_above {above}, {parts} groups "
                     f"({partition_split} split, seed {int(partition_seed)}) of sizes {np.bincount(sp.group, minlength=parts).tolist()}, each "
                     "solved exactly on its weight share of every GPU type; envy-freeness holds within a group only")
    else:
        x, capped, pairs, seconds, seeded, steps, fb = _exact_vu(
            vu, _usable_pairs(warm_keys, same) if same is not None else warm_keys, prev)
        notes.extend(fb)
        timer.laps.append(seconds)
        timer.seconds += seconds
    x = clean(fill_idle(vu, upgrade_idle(vu, x, capped)), vu.speed, vu.capacity, vu.demand, vu.type_cap)
    notes[:0] = capped_note(vu, capped)
    if warm is not None:
        notes.append(f"warm start: {seeded[1]} envy row(s) of the previous solve seeded {seeded[0]} step(s)"
                     if seeded[1] else "warm start: no envy row of the previous solve applied (cold start)")
    if prev is not None:
        notes.append(f"stable: of the optima, the one nearest to the previous allocation ({len(prev.x)} class(es) known)")
    alloc = finish(problem, NAME, x, timer, solver, tuple(notes))
    marks = tuple(("fp", t, c, f) for t, c, f in zip(vu.tenant, vu.cls, fps))
    return dataclasses.replace(alloc, solver=FAST_SOLVER,
                               warm=tuple(sorted(pairs)) + marks + Previous.of(alloc, tuple(steps)).entries())


POLICY = Policy(NAME, solve, guarantees=("envy_free", "sharing_incentive"),
                claim=("OEF eq. 10: the most total throughput among weighted envy-free allocations; envy-free and "
                       "sharing-incentive (Thm 5.1)"),
                options=("partition_above", "partition_parts", "stable"), warm=True)
