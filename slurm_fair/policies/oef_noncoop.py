"""Non-cooperative OEF (OEF paper §4.2.1, eq. 9), weighted (§4.2.3) over virtual users (§4.2.4).

    maximize   Σ_l Σ_j w_l^j x_l^j                      (total normalized throughput)
    subject to Σ_l x_l^j <= m_j                 ∀ j      (capacity)
               u_l(x_l) / π_l  equal for every l         (u_l(x) = Σ_j w_l^j x^j, π_l = weight)
               x >= 0

Because every user's throughput is π_l·t for a common level t, maximizing the total is maximizing t. The
per-user throughputs are unique even when the LP has several optimal vertices, and this gives
strategy-proofness against inflated speedups (Thm 5.4's lie model: every reported speedup >= the truth): a
user who reports larger speedups can only move the level t, and its true throughput never exceeds π_l·t* of
the honest solve (checked by tests/policies/test_properties.py). Not against sandbagging: over-reporting the slowest
type lowers the normalized speedups of the others and can pay (tests/fairness/test_fairness_check.py, worked by hand).

Caps (total demand d_l and per-type caps c_l^j, ``common``), by *progressive filling* of the level t, not
by freezing a solver vertex:

1. Solve ``max t`` with u_l = π_l·t for the active users, u_l = f_l for the frozen ones, every finite
   demand as a constraint Σ_j x_l^j <= d_l, every finite per-type cap as x_l^j <= c_l^j, and capacity.
2. An active user l with some finite cap is *capped* at this level when it cannot go above π_l·t* with
   its caps in force, while it could without its own caps (total and per-type; the others keeping at
   least their level). Capped users are frozen at throughput f_l = π_l·t*; the others go on to a higher
   level (back to 1). A user stopped by its per-type caps is frozen exactly like one stopped by its total.
3. Stop when no active user is capped: the rest share the final level exactly.

The tests of step 2 are LPs too: only users with a cap tight in the level solution are candidates; joint
"lift" LPs (``leximin._blocked``) drop those that can still rise; each remaining one gets one LP without
its own caps. They run on HiGHS (``leximin.TEST_SOLVER``), see there why.

The outcome depends only on the throughput levels, never on which optimal vertex a solver returns.
Guarantees under caps: no user gets more GPUs than its demand or more of a type than its cap there; all
uncapped users have exactly equal weighted throughput, and a capped user's weighted throughput is at most
theirs (it froze at a lower level); the final level is the largest the uncapped users can reach together
with the capped ones kept at theirs; GPUs a capped user cannot use stay available to the others in every
later level; capacity is respected; with no finite cap the result is exactly eq. 9 (and strategy-proof against inflating fast types).
Not work-conserving: eq. 9's equality can leave GPUs idle that only some uncapped users could use (they are
named in ``Allocation.notes``). Strategy-proofness is *not* claimed when caps bind (a capped user's level
depends on its speedups).

How it is computed by default (no ``solver`` named): ``filling.fill`` runs the progressive filling as max-min
levels on one live HiGHS model (upper bounds per class, the batch-freezing lemma, warm re-solves), verifies
the result against the definition above, and the common level T is then the lowest level of a class below its
caps (classes above T are cut back to T; those frozen below T sit at their caps). Naming a cvxpy solver
(``--solver ECOS|HIGHS|CLARABEL|SCIPY``) runs the LPs described above through cvxpy instead (the loop shared
with gavel, ``leximin.fill_cvxpy``).

Early stop (``filling.fill(common_stop=True)``, issue 31). Eq. 9 needs the leximin levels L only below T: every
class above T is cut back to it. So the filling stops at the first point x it reaches (a stage LP's optimum or a
successful batch try's) where some *frozen* class is below its caps, and T is the least level of such a class
in x; the result is built from x exactly as from the full filling's last point. Proof that it is eq. 9's answer:
(a) in x every frozen class l sits at L_l (a stage froze it because no point holding the others' levels can
raise it, a batch try at its bound, an upper bound on its level at any such point; every later point holds
them), every active class at least the current level t, and every frozen level is <= t; so every class below T
is frozen, and it is at its caps in x (T is the least level of a frozen class below them): capped.
(b) After the cut the other classes share T exactly; the capped ones are below it.
(c) T cannot be raised: a feasible y with every class below T kept at its level and every other class above T
would be leximin-greater than L (equal below T, above T where L has the class that defined T exactly at T).
So the later stages of the full filling only fix levels above T, which the cut removes. The full filling takes
T from its last point instead of x; the two agree unless a class at a level <= T sits at its caps in one of the
two points and below them in the other (a choice between two optimal vertices, degenerate; both answers then
satisfy (a)-(c)). Not seen on the test and benchmark instances: per-class throughputs equal to 1e-9 relative
(``tests/policies/test_noncoop_stop.py``; Philly-like 30-2 000 tenants).
"""

from __future__ import annotations

import dataclasses

import cvxpy as cp
import numpy as np

from .. import lp
from . import filling, leximin
from .stable import Previous, nearest_levels
from ..errors import SolverError
from ..model import Allocation, Problem
from .common import TOL, allocation_variable, type_caps, capacity_constraint, capped_note, clean, finish, throughput_expr
from .leximin import level_program
from .base import Policy

NAME = "oef-noncoop"


def _program(speed, weight, capacity, demand, active, frozen, *, level=None, lift=(), free_demand_of=None, type_cap=None):
    """Build one LP of the progressive filling.

    ``level`` None: max t with u_l = π_l t (active l), u_l = f_l (frozen l).  Otherwise the lift test:
    max Σ z_i with u_i >= π_i (level + z_i), 0 <= z_i <= max(level, 1) for i in ``lift``, and
    u_l >= π_l level for the other active users; ``free_demand_of`` drops that user's own caps (demand and
    per-type). A user with z_i > 0 in a solution can rise above the level (with the constraints in force).
    """
    n = len(weight)
    x, cons = allocation_variable(speed, type_caps(speed, type_cap, free_demand_of))
    cons.append(capacity_constraint(x, capacity))
    u = throughput_expr(x, speed)
    fin = [i for i in range(n) if np.isfinite(demand[i]) and i != free_demand_of]
    if fin:
        cons.append(cp.sum(x[fin], axis=1) <= demand[fin])
    fz = sorted(frozen)
    if fz:  # frozen at f, within a band of solver precision (an exact equality to a solver's own
        # earlier output can be infeasible by 1e-9 and makes interior-point solvers report "inaccurate")
        f = np.array([frozen[i] for i in fz])
        band = 1e-7 * np.maximum(f, 1.0)
        cons += [u[fz] >= f - band, u[fz] <= f + band]
    prob, var = level_program(u, weight, active, cons, level, lift, equal=True)
    return prob, x, var


FAST_SOLVER = "HIGHS (live progressive filling)"


def solve_arrays(
    speed: np.ndarray,
    weight: np.ndarray,
    capacity: np.ndarray,
    demand: np.ndarray | None = None,
    solver: str | None = None,
    timer: lp.Timer | None = None,
    type_cap: np.ndarray | None = None,
    previous: np.ndarray | None = None,
    notes: list[str] | None = None,
) -> tuple[np.ndarray, list[int]]:
    """Eq. 9 with caps by progressive filling; returns (x, indices of capped rows). ``previous`` ((n, k),
    NaN rows unknown; the fast form only): of the allocations with the same throughput per class, the one
    nearest to it (:func:`.nearest_levels`); ``notes`` receives what that did.

    With no solver named, the exact filling on one live HiGHS model (``filling``), verified against the
    definition before it is returned; a named solver runs the cvxpy form (:func:`solve_arrays_cvxpy`)."""
    if solver is None or not str(solver).strip():
        timer = timer or lp.Timer()
        with timer.measure():
            return _fast(speed, weight, capacity, demand, type_cap, previous, notes)
    return solve_arrays_cvxpy(speed, weight, capacity, demand, solver, timer, type_cap)


def _fast(speed, weight, capacity, demand, type_cap, previous=None, notes=None, *,
          common_stop: bool = True) -> tuple[np.ndarray, list[int]]:
    speed = np.asarray(speed, dtype=float)
    n, k = speed.shape
    weight = np.asarray(weight, dtype=float)
    capacity = np.asarray(capacity, dtype=float)
    demand = np.full(n, np.inf) if demand is None else np.asarray(demand, dtype=float)
    type_cap = np.full((n, k), np.inf) if type_cap is None else np.asarray(type_cap, dtype=float)
    type_cap = np.where(speed > 0, type_cap, 0.0)
    # Leximin filling of u_l / π_l, then eq. 9's rule: the common level T is the lowest level at which a
    # class below its caps stopped (it cannot rise: nobody still rising can); every class above T is cut
    # back to exactly T, every class frozen below T sits at its caps (cutting x only frees GPUs).
    res = filling.fill(speed, weight, capacity, demand, type_cap, what="oef-noncoop", common_stop=common_stop)
    x = clean(res.x, speed, capacity, demand, type_cap)
    u = (x * speed).sum(axis=1)
    live = (demand > TOL) & (weight > 0) & ((speed > 0) & (type_cap > 0) & (capacity > 0)).any(axis=1)
    lv = np.where(live, u / np.where(weight > 0, weight, 1.0), 0.0)
    below = live & filling.below_caps(x, speed, demand, type_cap)
    top = float(lv[below].min()) if below.any() else float(lv[live].max(initial=0.0))
    zero = ~live  # nothing to fill (demand 0 or no usable GPU): capped at 0, as in the cvxpy form
    capped = zero | (lv < top * (1 - 1e-9))
    target = np.where(capped, u, weight * top)
    shrink = np.where(u > target, target / np.where(u > 0, u, 1.0), 1.0)
    x = clean(x * shrink[:, None], speed, capacity, demand, type_cap)
    if previous is not None:
        try:
            near = clean(nearest_levels(speed, capacity, demand, type_cap, x, previous, exact=True),
                         speed, capacity, demand, type_cap)
            filling.verify(speed, weight, capacity, demand, type_cap, near, capped, equal_level=True,
                            work_conserving=False, what="oef-noncoop")
            x = near
            if notes is not None:
                notes.append("stable: of the allocations with these throughputs, the one nearest to the previous")
        except SolverError as e:
            if notes is not None:
                notes.append(f"stable: second stage not used ({e})")
    filling.verify(speed, weight, capacity, demand, type_cap, x, capped, equal_level=True,
                    work_conserving=False, what="oef-noncoop")
    # reported as capped too: a class at the common level whose own cap bound the level it froze at
    capped |= live & res.cap_binding & filling.at_caps(x, speed, demand, type_cap)
    return x, [int(i) for i in np.flatnonzero(capped)]


def solve_arrays_cvxpy(speed, weight, capacity, demand, solver, timer, type_cap) -> tuple[np.ndarray, list[int]]:
    """Eq. 9 with caps by progressive filling, one cvxpy LP per level and test (the reference form): what
    :func:`solve_arrays` runs when a solver is named, on its arguments."""
    n, _ = speed.shape
    demand = np.full(n, np.inf) if demand is None else np.asarray(demand, dtype=float)
    has_tcap = np.zeros(n, dtype=bool) if type_cap is None else (np.isfinite(type_cap) & (speed > 0)).any(axis=1)
    active = demand > TOL  # zero demand: nothing to fill
    frozen: dict[int, float] = {int(i): 0.0 for i in np.flatnonzero(~active)}
    zero = sorted(frozen)

    def build(act, fz, level=None, lift=(), free=None):
        return _program(speed, weight, capacity, demand, act, fz, level=level, lift=lift, free_demand_of=free,
                        type_cap=type_cap)

    def candidates(x_val, level, act):
        # Only a user with one of its caps tight in this solution can be capped: if all have slack, mixing
        # this solution with one where it rises (caps dropped) lifts it while keeping its caps.
        def tight(i: int) -> bool:
            if np.isfinite(demand[i]) and x_val[i].sum() >= demand[i] - 1e-6:
                return True
            return bool(has_tcap[i] and (x_val[i] >= type_cap[i] - 1e-6).any())

        return [int(i) for i in np.flatnonzero(act & (np.isfinite(demand) | has_tcap)) if tight(int(i))]

    # frozen at the HiGHS (simplex) level: ECOS may overshoot a cap by its tolerance
    res = leximin.fill_cvxpy(build, np.zeros_like(speed), active, frozen, solver=solver, timer=timer or lp.Timer(),
                              name="oef-noncoop", candidates=candidates,
                              freeze_at=lambda i, level, lv: weight[i] * min(level, lv), own_caps=True)
    return clean(res.x, speed, capacity, demand, type_cap), sorted(zero + res.newly)


def solve(problem: Problem, solver: str | None = None, warm=None, stable: bool = True) -> Allocation:
    """Eq. 9 (see the module docstring). ``stable`` (config ``[policy] stable``) with a previous allocation in
    ``warm`` (:class:`.Previous` entries, saved by every solve): the same throughput per class, on the
    GPUs nearest to the previous allocation (fast form only)."""
    lp.pick_solver(solver)
    vu = problem.virtual_users()
    timer = lp.Timer()
    # A class that can run on no GPU type present would hold everybody's equal level at 0: it gets
    # nothing and is left out of the equality (as if its demand were 0), with a note.
    stranded = [i for i in range(vu.n) if not ((vu.speed[i] > 0) & (vu.capacity > 0)).any()]
    demand = vu.demand.copy()
    demand[stranded] = 0.0
    prev = Previous.from_warm(warm) if stable else None
    stable_notes: list[str] = []
    x, capped = solve_arrays(vu.speed, vu.weight, vu.capacity, demand, solver, timer, vu.type_cap,
                             None if prev is None else prev.array(vu), stable_notes)
    capped = [i for i in capped if i not in stranded]
    notes = list(capped_note(vu, capped)) + stable_notes
    if stranded:
        names = ", ".join(f"{vu.tenant[i]}/{vu.cls[i]}" for i in stranded)
        notes.append(f"no GPU type present can run: {names} (left out of the equal-throughput constraint)")
    idle = vu.capacity - x.sum(axis=0)
    free = [i for i in range(vu.n) if i not in capped and i not in stranded]
    for j, g in enumerate(vu.gpu_types):
        if idle[j] > 1e-6 and any(vu.speed[i, j] > 0 for i in free):
            notes.append(f"{idle[j]:.3g} {g} GPU(s) left idle: equal weighted throughput (eq. 9) binds")
    alloc = finish(problem, NAME, x, timer, solver, notes)
    if solver is None or not str(solver).strip():
        alloc = dataclasses.replace(alloc, solver=FAST_SOLVER)
    return dataclasses.replace(alloc, warm=Previous.of(alloc).entries())


POLICY = Policy(NAME, solve, guarantees=("equal_throughput",),
                claim=("OEF eq. 9: equal weighted normalized throughput, the most total throughput with it; strategy-"
                       "proof (Thm 5.4) against the lies its lie model covers (docs/policies.md)"),
                options=("stable",), warm=True)
