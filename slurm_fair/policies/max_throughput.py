"""Maximum total throughput, no fairness (OEF paper eq. 4): the efficiency upper bound.

    maximize Σ_l Σ_j w_l^j x_l^j   subject to   Σ_l x_l^j <= m_j,   Σ_j x_l^j <= d_l,   0 <= x_l^j <= c_l^j

Demands and per-type caps are plain constraints of the LP. Guarantees under caps: no user exceeds its demand
or a type cap and the total normalized throughput is the largest any allocation meeting capacity and caps
can reach (an upper bound for every other policy on the same problem); hence work-conserving (an idle GPU
some user below its caps could use would raise the total). Nothing else: users with slow speedups may get nothing (§3.1.1)
and the optimum is often not unique (which user gets the slow GPUs is up to the solver).

``stable`` (config ``[policy] stable``) with last round's allocation in ``warm`` (:class:`.Previous`,
saved by every solve): of the allocations within 1e-7 (relative) of the optimum's total, the one nearest to it
(:func:`.nearest_levels` with ``total``; 1e-7 because the default solver, ECOS, reaches the optimum to
about 1e-8 only).
"""

from __future__ import annotations

import dataclasses

import cvxpy as cp
import numpy as np

from .. import lp
from ..errors import SolverError
from ..model import Allocation, Problem
from .common import allocation_variable, capacity_constraint, at_caps, capped_note, clean, finish, throughput_expr
from .stable import Previous, nearest_levels
from .base import Policy

NAME = "max-throughput"


TOTAL_REL = 1e-7  # the second stage keeps the total throughput to this (relative)


def solve(problem: Problem, solver: str | None = None, warm=None, stable: bool = True) -> Allocation:
    lp.pick_solver(solver)
    vu = problem.virtual_users()
    timer = lp.Timer()
    x, cons = allocation_variable(vu.speed, vu.type_cap)
    cons.append(capacity_constraint(x, vu.capacity))
    fin = np.flatnonzero(np.isfinite(vu.demand))
    if fin.size:
        cons.append(cp.sum(x[fin], axis=1) <= vu.demand[fin])
    prob = cp.Problem(cp.Maximize(cp.sum(throughput_expr(x, vu.speed))), cons)
    with timer.measure():
        lp.solve(prob, solver, what="max-throughput (eq. 4)")
    xv = clean(x.value, vu.speed, vu.capacity, vu.demand, vu.type_cap)
    prev = Previous.from_warm(warm) if stable else None
    notes: list[str] = []
    if prev is not None:
        try:
            with timer.measure():
                near = nearest_levels(vu.speed, vu.capacity, vu.demand, vu.type_cap, xv, prev.array(vu),
                                              total=True, rel=TOTAL_REL)
            xv = clean(near, vu.speed, vu.capacity, vu.demand, vu.type_cap)
            notes.append("stable: of the optima, the one nearest to the previous allocation")
        except SolverError as e:
            notes.append(f"stable: second stage not used ({e})")
    # capped: the optimum gives it its whole demand or a whole type cap (the constraint is tight)
    capped = at_caps(vu, xv)
    alloc = finish(problem, NAME, xv, timer, solver, capped_note(vu, capped) + tuple(notes))
    return dataclasses.replace(alloc, warm=Previous.of(alloc).entries())


POLICY = Policy(NAME, solve, guarantees=("pareto_efficient",),
                claim=("eq. 4: the most total throughput, no fairness; an upper bound for the others"),
                options=("stable",), warm=True)
