"""Non-cooperative OEF (OEF paper §4.2.1, eq. 9), weighted (§4.2.3) over virtual users (§4.2.4).

    maximize   Σ_l Σ_j w_l^j x_l^j                      (total normalized throughput)
    subject to Σ_l x_l^j <= m_j                 ∀ j      (capacity)
               u_l(x_l) / π_l  equal for every l         (u_l(x) = Σ_j w_l^j x^j, π_l = weight)
               x >= 0

Because every user's throughput is π_l·t for a common level t, maximizing the total is maximizing t. The
per-user throughputs are unique even when the LP has several optimal vertices, and this gives
strategy-proofness (Thm 5.4): a user who reports larger speedups can only move the level t, and its true
throughput never exceeds π_l·t* of the honest solve (checked by tests/test_properties.py).

Demand caps, by *progressive filling* of the level t, not by freezing a solver vertex:

1. Solve ``max t`` with u_l = π_l·t for the active users, u_l = f_l for the frozen ones, every finite
   demand as a constraint Σ_j x_l^j <= d_l, and capacity.
2. An active user l with a finite demand is *capped* at this level when it cannot go above π_l·t* with
   its demand in force, while it could without it (the others keeping at least their level). Capped users
   are frozen at throughput f_l = π_l·t*; the others go on to a higher level (back to 1).
3. Stop when no active user is capped: the rest share the final level exactly.

The outcome depends only on the throughput levels, never on which optimal vertex a solver returns.
Guarantees under caps: no user gets more GPUs than its demand; all uncapped users have exactly equal
weighted throughput, and a capped user's weighted throughput is at most theirs (it froze at a lower
level); capacity is respected; with no finite demand the result is exactly eq. 9 (and strategy-proof).
Strategy-proofness is *not* claimed when demands bind (a capped user's level depends on its speedups).
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np

from .. import lp
from ..model import Allocation, Problem
from ._common import TOL, allocation_variable, capacity_constraint, capped_note, clean, finish, throughput_expr

NAME = "oef-noncoop"


def _program(speed, weight, capacity, demand, active, frozen, *, free_demand_of=None, lift=None, level=None):
    """Build one LP of the progressive filling.

    Default: max t with u_l = π_l t (active l) and u_l = f_l (frozen).  With ``lift=i`` and ``level``:
    max u_i with u_l >= π_l level for the other active users (the capped-user test); ``free_demand_of``
    drops that user's demand constraint.
    """
    x, cons = allocation_variable(speed)
    cons.append(capacity_constraint(x, capacity))
    u = throughput_expr(x, speed)
    for i in range(len(weight)):
        if np.isfinite(demand[i]) and i != free_demand_of:
            cons.append(cp.sum(x[i]) <= demand[i])
    for i, f in frozen.items():
        cons.append(u[i] == f)
    act = [i for i in range(len(weight)) if active[i]]
    if lift is None:
        t = cp.Variable(nonneg=True)
        cons.append(u[act] == weight[act] * t)
        return cp.Problem(cp.Maximize(t), cons), x, t
    others = [i for i in act if i != lift]
    if others:
        cons.append(u[others] >= weight[others] * level)
    return cp.Problem(cp.Maximize(u[lift]), cons), x, None


def solve_arrays(
    speed: np.ndarray,
    weight: np.ndarray,
    capacity: np.ndarray,
    demand: np.ndarray | None = None,
    solver: str | None = None,
    timer: lp.Timer | None = None,
) -> tuple[np.ndarray, list[int]]:
    """Eq. 9 with demand caps by progressive filling; returns (x, indices of capped rows)."""
    n, _ = speed.shape
    demand = np.full(n, np.inf) if demand is None else np.asarray(demand, dtype=float)
    timer = timer or lp.Timer()
    active = np.ones(n, dtype=bool)
    frozen: dict[int, float] = {}
    capped: list[int] = []
    for i in range(n):  # zero demand: nothing to fill
        if demand[i] <= TOL:
            active[i] = False
            frozen[i] = 0.0
            capped.append(i)
    x_val = np.zeros_like(speed)
    while True:
        if not active.any():
            break  # x_val (zeros, or the last solve) already meets every frozen level
        prob, x, t = _program(speed, weight, capacity, demand, active, frozen)
        with timer.measure():
            lp.solve(prob, solver, what="oef-noncoop level")
        level = float(t.value)
        x_val = x.value
        newly = []
        for i in np.flatnonzero(active & np.isfinite(demand)):
            mine = weight[i] * level
            slack = 1e-6 * max(1.0, mine)
            p_with, _, _ = _program(speed, weight, capacity, demand, active, frozen, lift=i, level=level)
            with timer.measure():
                best_with = lp.solve(p_with, solver, what="oef-noncoop cap test")
            if best_with > mine + slack:
                continue  # its demand leaves room above the level: not capped yet
            p_free, _, _ = _program(speed, weight, capacity, demand, active, frozen, lift=i, level=level, free_demand_of=i)
            with timer.measure():
                best_free = lp.solve(p_free, solver, what="oef-noncoop cap test")
            if best_free > mine + slack:
                newly.append(i)  # blocked by its own demand, not by the others
        if not newly:
            break
        for i in newly:
            active[i] = False
            frozen[i] = weight[i] * level
            capped.append(int(i))
    return clean(x_val, speed, capacity, demand), sorted(capped)


def solve(problem: Problem, solver: str | None = None) -> Allocation:
    lp.pick_solver(solver)
    vu = problem.virtual_users()
    timer = lp.Timer()
    x, capped = solve_arrays(vu.speed, vu.weight, vu.capacity, vu.demand, solver, timer)
    return finish(problem, NAME, x, timer, solver, capped_note(vu, capped))
