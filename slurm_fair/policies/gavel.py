"""Gavel-style heterogeneity-aware max-min fairness (OEF paper §2.4, eq. 3; Gavel OSDI'20 §4.1).

Every virtual user's normalized throughput is compared with what it gets from its equal (weighted) share
(``equal_share``: the weight share of every type it can use, demand-capped): e_l = u_l(x_l^equal). Gavel
maximizes the smallest ratio u_l(x_l) / e_l, and (water-filling, as Gavel's ``max_min_fairness_water_filling``)
then raises the others:

1. max t  s.t.  u_l >= t·e_l (active l),  u_l >= f_l (frozen l),  Σ_j x_l^j <= d_l,  capacity.
2. An active user that cannot get above t*·e_l while the other active users keep t*·e and the frozen
   ones keep f is a bottleneck: freeze it at f_l = t*·e_l.  Repeat until every user is frozen.

Demands and per-type caps (x_l^j <= c_l^j) are constraints of every LP, and the equal share e_l is the
capped one (``equal_share``). In Gavel's own model a single-GPU job gets at most one GPU-time (row sum <= 1);
the paper's eq. 3 numbers are reproduced with demand 1 per user. A user that cannot rise, for whatever
reason (its own caps included), is a bottleneck and is frozen at its level: a class stopped by its per-type
caps is treated exactly like one stopped by its total demand. After the last level, GPUs still idle go to
users below their caps that can use them (``common.fill_idle``; it only adds, so every level still holds).
Guarantees under caps: no user exceeds its demand or a type cap; every user gets at least its capped equal
share's throughput (t* >= 1, since the capped equal share is feasible); the smallest ratio is as large as
possible, then the next, and so on (max-min levels); work-conserving: no GPU is idle while a user below its
caps could use it. Not envy-free, not strategy-proof and not throughput-optimal (OEF §2.4, Table 1).

How it is computed by default (no ``solver`` named): ``filling.fill`` runs these levels on one live HiGHS
model (upper bounds per class, the batch-freezing lemma, warm re-solves) and verifies the result (capacity,
caps, no idle GPU a user below its caps could use, at least the capped equal share) before returning it;
naming a cvxpy solver runs the LPs above through cvxpy instead (the loop shared with oef-noncoop,
``leximin.fill_cvxpy``).
"""

from __future__ import annotations

import dataclasses

import cvxpy as cp
import numpy as np

from .. import lp
from ..errors import SolverError
from . import filling, leximin
from .stable import Previous, nearest_levels
from ..model import Allocation, Problem
from .common import TOL, allocation_variable, fill_idle, capacity_constraint, at_caps, capped_note, clean, finish, throughput_expr
from .leximin import level_program
from .equal_share import share_arrays
from .base import Policy

NAME = "gavel"


def _program(speed, capacity, demand, ref, active, frozen, level=None, lift=(), type_cap=None):
    """max t (``level`` None), or the bottleneck test: max Σ z_i with u_i >= e_i (level + z_i) for i in
    ``lift`` (0 <= z_i <= max(level, 1)) while the other active users keep e_l·level."""
    x, cons = allocation_variable(speed, type_cap)
    cons.append(capacity_constraint(x, capacity))
    fin = np.flatnonzero(np.isfinite(demand))
    if fin.size:
        cons.append(cp.sum(x[fin], axis=1) <= demand[fin])
    u = throughput_expr(x, speed)
    fz = sorted(frozen)
    if fz:
        cons.append(u[fz] >= np.array([frozen[i] for i in fz]))
    prob, var = level_program(u, ref, active, cons, level, lift)
    return prob, x, var


FAST_SOLVER = "HIGHS (live progressive filling)"


def solve(problem: Problem, solver: str | None = None, warm=None, stable: bool = True) -> Allocation:
    """With no solver named, the exact filling on one live HiGHS model (``filling``, verified against the
    definition before it is returned); a named solver runs the cvxpy form (:func:`solve_cvxpy`).

    ``stable`` (config ``[policy] stable``) with a previous allocation in ``warm`` (:class:`.Previous`
    entries, saved by every solve): the levels are kept and, of the allocations with those levels, the one
    nearest to the previous allocation is taken (:func:`.nearest_levels`); if that one fails the
    verification, the filling's own allocation is (a note says so)."""
    if solver is not None and str(solver).strip():
        return solve_cvxpy(problem, solver)
    vu = problem.virtual_users()
    timer = lp.Timer()
    notes: list[str] = []
    with timer.measure():
        eq, _ = share_arrays(vu)
        ref = (eq * vu.speed).sum(axis=1)
        active = ref > TOL
        res = filling.fill(vu.speed, np.where(active, ref, 0.0), vu.capacity, vu.demand, vu.type_cap,
                            what="gavel")
        prev = Previous.from_warm(warm) if stable else None
        tries = [res.x]
        if prev is not None:
            try:
                tries.insert(0, nearest_levels(vu.speed, vu.capacity, vu.demand, vu.type_cap, res.x,
                                                       prev.array(vu)))
            except SolverError as e:
                notes.append(f"stable: second stage failed ({e}); the filling's own allocation")
        for i, x in enumerate(tries):
            x_val = fill_idle(vu, clean(x, vu.speed, vu.capacity, vu.demand, vu.type_cap))
            x_val = clean(x_val, vu.speed, vu.capacity, vu.demand, vu.type_cap)
            try:
                filling.verify(vu.speed, ref, vu.capacity, vu.demand, vu.type_cap, x_val, np.zeros(vu.n, dtype=bool),
                                equal_level=False, work_conserving=True, floor=ref, what="gavel")
            except SolverError as e:
                if i == len(tries) - 1:
                    raise
                notes.append(f"stable: the nearest allocation failed the check ({e}); the filling's own allocation")
                continue
            if i == 0 and len(tries) > 1:
                notes.append(f"stable: of the allocations with these levels, the one nearest to the previous "
                             f"({len(prev.x)} class(es) known)")
            break
    capped = at_caps(vu, x_val)
    alloc = finish(problem, NAME, x_val, timer, None, capped_note(vu, capped) + tuple(notes), uses_lp=False)
    return dataclasses.replace(alloc, solver=FAST_SOLVER, warm=Previous.of(alloc).entries())


def solve_cvxpy(problem: Problem, solver: str | None = None) -> Allocation:
    """Gavel's water-filling with one cvxpy LP per level and bottleneck test (the reference form)."""
    lp.pick_solver(solver)
    vu = problem.virtual_users()
    timer = lp.Timer()
    eq, _ = share_arrays(vu)
    ref = (eq * vu.speed).sum(axis=1)
    active = ref > TOL  # a user whose equal share is nothing (demand 0) keeps nothing to compare with
    frozen: dict[int, float] = {int(i): 0.0 for i in np.flatnonzero(~active)}

    def build(act, fz, level=None, lift=(), free=None):
        return _program(vu.speed, vu.capacity, vu.demand, ref, act, fz, level=level, lift=lift, type_cap=vu.type_cap)

    def candidates(x_val, level, act):
        # a user above the level in this solution is no bottleneck; the joint lift LPs weed out most others
        u_val = (x_val * vu.speed).sum(axis=1)
        return [int(i) for i in np.flatnonzero(act) if u_val[i] <= ref[i] * level * (1 + 1e-6) + 1e-9]

    # a blocked user (a bottleneck) is frozen at its level, with a hair of slack for the next solves
    res = leximin.fill_cvxpy(build, np.zeros((vu.n, vu.k)), active, frozen, solver=solver, timer=timer,
                              name="gavel", candidates=candidates,
                              freeze_at=lambda i, level, lv: ref[i] * level * (1 - 1e-8), own_caps=False)
    x_val = res.x
    x_val = fill_idle(vu, clean(x_val, vu.speed, vu.capacity, vu.demand, vu.type_cap))
    capped = at_caps(vu, x_val)
    return finish(problem, NAME, x_val, timer, solver, capped_note(vu, capped))


POLICY = Policy(NAME, solve, guarantees=("sharing_incentive",),
                claim=("Gavel: max-min of throughput relative to the equal share, water-filled; sharing incentive"),
                options=("stable",), warm=True)
