"""Gavel-style heterogeneity-aware max-min fairness (OEF paper §2.4, eq. 3; Gavel OSDI'20 §4.1).

Every virtual user's normalized throughput is compared with what it gets from its equal (weighted) share
(``equal_share``: the weight share of every type it can use, demand-capped): e_l = u_l(x_l^equal). Gavel
maximizes the smallest ratio u_l(x_l) / e_l, and (water-filling, as Gavel's ``max_min_fairness_water_filling``)
then raises the others:

1. max t  s.t.  u_l >= t·e_l (active l),  u_l >= f_l (frozen l),  Σ_j x_l^j <= d_l,  capacity.
2. An active user that cannot get above t*·e_l while the other active users keep t*·e and the frozen
   ones keep f is a bottleneck: freeze it at f_l = t*·e_l.  Repeat until every user is frozen.

Demands are constraints of every LP. In Gavel's own model a single-GPU job gets at most one GPU-time
(row sum <= 1); the paper's eq. 3 numbers are reproduced with demand 1 per user. Guarantees under caps: no
user exceeds its demand; every user gets at least its equal share's throughput (t* >= 1, sharing
incentive, since the equal share is feasible); the smallest ratio is as large as possible. Not envy-free,
not strategy-proof and not throughput-optimal (OEF §2.4, Table 1).
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np

from .. import lp
from ..model import Allocation, Problem
from ._common import TEST_SOLVER, TOL, _blocked, allocation_variable, level_program, capacity_constraint, capped_note, clean, finish, throughput_expr
from .equal_share import share_arrays

NAME = "gavel"


def _program(speed, capacity, demand, ref, active, frozen, level=None, lift=()):
    """max t (``level`` None), or the bottleneck test: max Σ z_i with u_i >= e_i (level + z_i) for i in
    ``lift`` (0 <= z_i <= max(level, 1)) while the other active users keep e_l·level."""
    x, cons = allocation_variable(speed)
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


def solve(problem: Problem, solver: str | None = None) -> Allocation:
    lp.pick_solver(solver)
    vu = problem.virtual_users()
    timer = lp.Timer()
    eq, _ = share_arrays(vu)
    ref = (eq * vu.speed).sum(axis=1)
    n = vu.n
    active = ref > TOL  # a user whose equal share is nothing (demand 0) keeps nothing to compare with
    frozen: dict[int, float] = {int(i): 0.0 for i in np.flatnonzero(~active)}
    x_val = np.zeros((n, vu.k))
    while active.any():
        prob, x, t = _program(vu.speed, vu.capacity, vu.demand, ref, active, frozen)
        with timer.measure():
            lp.solve(prob, solver, what="gavel max-min level")
        level = float(t.value)
        x_val = np.asarray(x.value)
        u_val = (x_val * vu.speed).sum(axis=1)
        # a user above the level in this solution is no bottleneck; one joint LP weeds out most others
        cand = [int(i) for i in np.flatnonzero(active) if u_val[i] <= ref[i] * level * (1 + 1e-6) + 1e-9]
        blocked = []
        if cand:
            # bottleneck tests have feasible sets without interior: HiGHS against its own level value
            p, _, t = _program(vu.speed, vu.capacity, vu.demand, ref, active, frozen)
            with timer.measure():
                lp.solve(p, TEST_SOLVER, what="gavel max-min level (HiGHS)")
            lv = float(t.value)

            def run(prob, what, use):
                with timer.measure():
                    lp.solve(prob, use, what=f"gavel {what}")

            blocked = _blocked(
                lambda c, v: _program(vu.speed, vu.capacity, vu.demand, ref, active, frozen, level=v, lift=c), cand, lv, run
            )
        if not blocked:  # numerical corner: cannot identify a bottleneck, keep the max-min solution
            break
        for i in blocked:
            active[i] = False
            frozen[i] = ref[i] * level * (1 - 1e-8)  # a hair of slack for the next solves
    x_val = clean(x_val, vu.speed, vu.capacity, vu.demand)
    capped = [i for i in range(n) if np.isfinite(vu.demand[i]) and x_val[i].sum() >= vu.demand[i] - 1e-6]
    return finish(problem, NAME, x_val, timer, solver, capped_note(vu, capped))
