"""BUD (Sun, Le, Chowdhury, Liu, SIGMETRICS '19 poster; paper 001): budget-based allocation of
interchangeable resources.

Every tenant gets the same virtual budget (here: weighted — tenant t has budget π_t = w_t / Σw, split evenly
among its classes, the virtual users of OEF §4.2.4); the operator sets one tag price p_j per GPU of type j,
the same for everyone, and every virtual user buys the bundle that maximizes its normalized throughput
u_l(x_l) = Σ_j S_lj x_lj within its budget. The paper's Algorithm 1 finds those prices for two
interchangeable resources (CPU and GPU) by moving the GPU price along the users' sorted speed-ups until
the loads of both equalize. With k GPU types, one pool and linear utilities, prices under which every
budget buys its best bundle and every GPU is sold are the **competitive equilibrium from equal incomes**
(CEEI, Fisher market), and that equilibrium is the optimum of the **Eisenberg–Gale program**::

    maximize    Σ_l π_l log u_l(x_l)
    subject to  Σ_l x_lj <= c_j          (price p_j = its dual)
                Σ_j x_lj <= d_l,  x_lj <= cap_lj,  x >= 0     (demands, per-type caps)

KKT: p_j >= π_l S_lj / u_l with equality where l buys type j, so p · x_l = π_l for every user whose demand
does not bind (it spends its budget exactly on its cheapest throughput per price) — the prices
reported are those duals (``Allocation.prices``). Properties without binding demands (the paper's
Lemma 3.1 for two types; Eisenberg–Gale in general): Pareto-efficient (a strictly concave sum of
increasing utilities), envy-free weighted by budget (every user can afford any other's bundle scaled to its
own budget), sharing-incentive (the weight share of the cluster costs exactly the user's budget); not
strategy-proof (the paper's Lemma 2.2: no PE + SI allocation can be). Demands are caps on the program: a
class capped by its demand spends less than its budget (the dual of its demand row takes the rest).

Solved with cvxpy (exponential cone) on CLARABEL (installed with cvxpy) or the named conic solver; the
problem is scaled (GPUs as fractions of each type, each user's utility as a fraction of its throughput on
the whole cluster, which shifts each log by a constant) so the solver sees O(1) numbers. Not ECOS by
default: on Philly-like instances of 1000 tenants x 10 types ECOS stops with "Solver 'ECOS' failed" where
CLARABEL solves in about 1 s (``--solver ECOS`` still runs it). The answer is then checked as an
equilibrium (:func:`check_equilibrium`: every GPU a user below its caps could use is sold, every such user
spends its budget, and nobody can buy more throughput per unit of budget than it holds, all to 1e-4
relative: an interior-point answer, not an exact vertex) before it is returned. GPUs left idle (only users at their caps could use them) are handed out by ``fill_idle``.
"""

from __future__ import annotations

import dataclasses

import cvxpy as cp
import numpy as np

from .. import lp
from ..errors import SolverError
from ..model import Allocation, Problem
from .common import TOL, at_caps, capped_note, clean, fill_idle, finish, room
from .base import Policy

NAME = "bud"
DEFAULT_SOLVER = "CLARABEL"
# relative tolerance of the equilibrium check: an interior-point answer, not a vertex; measured errors up to
# 4e-5 at 2000 tenants (1e-4 of a budget buys at most 1e-4 of a user's GPUs: far below one GPU)
EQ_TOL = 1e-4
CONIC = ("CLARABEL", "ECOS", "SCS")  # solvers with the exponential cone; another name runs the default
STRICT = 1e-7  # an equilibrium this close is kept without trying another solver (the checkers use 1e-6)
STRICT_USERS = 200  # up to this many classes a second solver is tried for a STRICT answer
DUAL_SHARE = 1e-6  # a demand or type-cap row binds when its dual exceeds this share of the user's marginal value
# Interior-point tolerances: with the solvers' defaults (~1e-8 gaps) a class at its demand ends ~1e-5 below
# it and the prices are off by up to 1e-3; with these, 1e-8 (measured at 1000 tenants x 10 types, same time).
OPTIONS = {"CLARABEL": {"tol_gap_abs": 1e-12, "tol_gap_rel": 1e-12, "tol_feas": 1e-12, "tol_ktratio": 1e-10,
                        "max_iter": 500},
           "ECOS": {"abstol": 1e-11, "reltol": 1e-11, "feastol": 1e-11, "max_iters": 500}}


def budgets(problem: Problem) -> np.ndarray:
    """Every virtual user's budget: its tenant's weight share of 1, split evenly among the tenant's classes."""
    vu = problem.virtual_users()
    total = float(vu.weight.sum())
    return vu.weight / total if total > 0 else vu.weight


def eisenberg_gale(speed, budget, capacity, demand, type_cap, solver: str | None = None):
    """The Eisenberg–Gale program on arrays; returns (x (n, k), prices (k,), stopped (n, k) bool: user l
    cannot take more of type j because its demand or its cap there binds — read off the duals of those rows,
    as an interior-point answer never sits exactly on a bound). Users with no budget, no demand or no usable
    type get nothing and take no part (stopped everywhere)."""
    S = np.asarray(speed, dtype=float)
    n, k = S.shape
    c = np.asarray(capacity, dtype=float)
    x = np.zeros((n, k))
    prices = np.zeros(k)
    stopped = np.ones((n, k), dtype=bool)
    types = np.flatnonzero(c > TOL)
    usable = (S[:, types] > 0) & (np.asarray(type_cap, dtype=float)[:, types] > TOL)
    users = np.flatnonzero((np.asarray(budget) > 0) & (np.asarray(demand) > TOL) & usable.any(axis=1))
    if users.size == 0 or types.size == 0:
        return x, prices, stopped
    us = usable[users]
    cu = c[types]
    # y_lj = x_lj / c_j in [0, 1]; u_l / K_l with K_l = S_l . c (its throughput on the whole cluster)
    A = S[np.ix_(users, types)] * us * cu[None, :]
    A = A / A.sum(axis=1, keepdims=True)
    y = cp.Variable((users.size, types.size), nonneg=True)
    cap_row = cp.sum(y, axis=0) <= 1.0
    cons = [cap_row, y[~us] == 0] if (~us).any() else [cap_row]
    dem = np.asarray(demand, dtype=float)[users]
    fin = np.flatnonzero(np.isfinite(dem))
    dem_row = None
    if fin.size:
        dem_row = y[fin] @ cu <= dem[fin]
        cons.append(dem_row)
    tcap = np.asarray(type_cap, dtype=float)[np.ix_(users, types)] / cu[None, :]
    fc = np.isfinite(tcap) & us & (tcap < 1.0)
    tcap_row = None
    if fc.any():
        tcap_row = y[fc] <= tcap[fc]
        cons.append(tcap_row)
    pi = np.asarray(budget, dtype=float)[users]
    prob = cp.Problem(cp.Maximize(pi @ cp.log(cp.sum(cp.multiply(A, y), axis=1))), cons)
    # tolerances tighter than the solver may reach: "optimal_inaccurate" is accepted here because solve()
    # checks the answer as an equilibrium (to EQ_TOL) before it is used
    lp.solve(prob, solver or DEFAULT_SOLVER, what="bud (Eisenberg-Gale)", options=OPTIONS, inaccurate_ok=True)
    yv = np.clip(np.asarray(y.value, dtype=float), 0.0, None)
    x[np.ix_(users, types)] = yv * cu[None, :]
    q = np.asarray(cap_row.dual_value, dtype=float).reshape(-1)
    if not np.all(np.isfinite(q)):
        raise SolverError(f"bud (Eisenberg-Gale): the solver gave no prices ({q.tolist()})")
    prices[types] = np.maximum(q, 0.0) / cu  # the dual of sum_l y_lj <= 1 is c_j times the price of one GPU
    # marginal value of y_lj: pi_l A_lj / (A_l . y_l); a cap row binds when its dual is a visible part of it
    marg = pi * (A.max(axis=1) / np.maximum((A * yv).sum(axis=1), 1e-300))
    st = ~us
    if dem_row is not None:
        mu = np.asarray(dem_row.dual_value, dtype=float).reshape(-1) * cu.max()
        st[fin[mu > DUAL_SHARE * marg[fin]]] = True
    if tcap_row is not None:
        nu = np.zeros_like(tcap)
        nu[fc] = np.asarray(tcap_row.dual_value, dtype=float).reshape(-1)
        st |= nu > DUAL_SHARE * marg[:, None]
    stopped[np.ix_(users, types)] = st
    return x, prices, stopped


def check_equilibrium(speed, budget, x, prices, room, what: str = "bud", tol: float | None = None,
                      spends=None) -> None:
    """Raise SolverError unless (x, prices) is a market equilibrium: every user with room left on a type
    (``room`` (n, k): below its demand and its cap there) has a bang per buck u_l / π_l at least S_lj / p_j on
    every such type (it buys where throughput is cheapest), and every user of ``spends`` (default: those with
    room somewhere; a user stopped by a cap on one of its types pays less, the cap's dual taking the rest)
    spends its budget, both to relative ``tol`` (default ``EQ_TOL``)."""
    tol = EQ_TOL if tol is None else tol
    S = np.asarray(speed, dtype=float)
    u = (S * x).sum(axis=1)
    free = np.asarray(room, dtype=bool)  # (n, k): l could take more of type j
    below = free.any(axis=1) & (np.asarray(budget) > 0)
    full = below if spends is None else (np.asarray(spends, dtype=bool) & below)
    spend = x @ prices
    bad = full & (np.abs(spend - budget) > tol * np.maximum(budget, 1e-12))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise SolverError(f"{what}: not an equilibrium: user {i} spends {spend[i]:.6g} of its budget {budget[i]:.6g}")
    with np.errstate(divide="ignore", invalid="ignore"):
        bang = np.where(free & (S > 0), S / np.where(prices > 0, prices, np.nan)[None, :], 0.0)
    if np.isnan(bang).any():  # a type with price 0 that someone below its caps could use: not sold out
        i, j = (int(v[0]) for v in np.nonzero(np.isnan(bang)))
        raise SolverError(f"{what}: not an equilibrium: type {j} has price 0 and user {i} could use more of it")
    have = np.where(below, u / np.where(budget > 0, budget, 1.0), np.inf)
    over = bang.max(axis=1) > have * (1 + tol)
    if over.any():
        i = int(np.flatnonzero(over)[0])
        raise SolverError(f"{what}: not an equilibrium: user {i} could buy {bang[i].max():.6g} throughput per "
                          f"budget unit, it holds {have[i]:.6g}")


def _attempt(vu, pi, solver, tol):
    x, prices, stopped = eisenberg_gale(vu.speed, pi, vu.capacity, vu.demand, vu.type_cap, solver)
    x = clean(x, vu.speed, vu.capacity, vu.demand, vu.type_cap)
    left = room(vu, x) > 0
    usable = vu.speed > 0
    check_equilibrium(vu.speed, pi, x, prices, left & ~stopped, tol=tol,
                      spends=~(usable & (stopped | ~left)).any(axis=1))
    return x, prices


def solve(problem: Problem, solver: str | None = None) -> Allocation:
    """Competitive equilibrium from (weighted) equal incomes; prices in ``Allocation.prices``.

    With no solver named: CLARABEL (ECOS where CLARABEL's answer is not an equilibrium even to 1e-4: a property
    test found one); where its answer is an equilibrium to 1e-4 but not to ``STRICT`` and the
    problem is small (at most ``STRICT_USERS`` classes, where a user may read ``--check`` at 1e-6), ECOS is
    tried too and its answer kept if it meets ``STRICT`` (CLARABEL stops ~1e-6 short on some tight
    instances where ECOS reaches 1e-12; ECOS fails outright on some large ones). A named LP-only solver
    (HIGHS, SCIPY: e.g. the daemon's ``policy.solver`` set for another policy) runs this default too, and a
    note says so."""
    named = solver is not None and str(solver).strip()
    lp.pick_solver(solver if named else DEFAULT_SOLVER)  # an unknown name is still an error
    swapped = None
    if named and lp.pick_solver(solver) not in CONIC:  # an LP solver (HIGHS, SCIPY): the daemon's setting
        swapped, solver, named = lp.pick_solver(solver), None, False
    vu = problem.virtual_users()
    pi = budgets(problem)
    timer = lp.Timer()
    used = solver if named else DEFAULT_SOLVER
    with timer.measure():
        if named:
            x, prices = _attempt(vu, pi, solver, EQ_TOL)
        else:
            try:
                x, prices = _attempt(vu, pi, DEFAULT_SOLVER, STRICT)
            except SolverError:
                try:
                    x, prices = _attempt(vu, pi, DEFAULT_SOLVER, EQ_TOL)
                except SolverError as first:  # CLARABEL stopped short even of EQ_TOL (seen: 1.2e-4 on 7 users
                    try:                      # x 2 types): ECOS, then the error of the default if not even that
                        x, prices = _attempt(vu, pi, "ECOS", EQ_TOL)
                        used = "ECOS"
                    except SolverError:
                        raise first from None
                if vu.n <= STRICT_USERS and used != "ECOS":
                    try:
                        x, prices = _attempt(vu, pi, "ECOS", STRICT)
                        used = "ECOS"
                    except SolverError:
                        pass  # keep CLARABEL's answer (an equilibrium to EQ_TOL)
    x = clean(fill_idle(vu, x), vu.speed, vu.capacity, vu.demand, vu.type_cap)
    notes = list(capped_note(vu, at_caps(vu, x)))
    if swapped:
        notes.append(f"{swapped} solves LPs only; the Eisenberg-Gale program (exponential cone) ran on {used}")
    notes.append("prices per GPU in budget units (budgets: tenant weight share of 1, split among its classes); "
                 "every class below its demand spends its budget: "
                 + ", ".join(f"{g}={p:.4g}" for g, p in zip(vu.gpu_types, prices)))
    alloc = finish(problem, NAME, x, timer, used, notes)
    return dataclasses.replace(alloc, prices={g: float(p) for g, p in zip(vu.gpu_types, prices)})


POLICY = Policy(NAME, solve, guarantees=("envy_free", "sharing_incentive", "pareto_efficient"),
                claim=("BUD: the competitive equilibrium from equal incomes (Eisenberg-Gale); envy-free, Pareto-"
                       "efficient, sharing incentive (Lemma 3.1)"),
                options=(), warm=False)
