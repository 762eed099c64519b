"""The partial-allocation (PA) auction of Themis (paper 003, Pseudocode 1 lines 5-11; Cole, Gkatzelis and Goel's
mechanism, the paper's [5]) on bids 1/ρ: the proportional-fair allocation G_pf, every leave-one-out
allocation G^{-i}, and the fraction c_i each bidder keeps.

**Valuation.** Bidder i holds throughput u0_i already (GPUs still under lease) and has waited ``elapsed_i`` = a_i
seconds with W_i GPU-seconds of work left; with throughput u its finish-time fairness is ρ_i(u) = (a_i + W_i/u) / T_id,i,
so its bid (valuation) is 1/ρ_i(u) = T_id,i · u / (a_i u + W_i): concave and increasing in u. The PA program
(line 6) maximizes Π_i (1/ρ_i)^{w_i}, i.e. Σ_i w_i g_i(u_i) with g_i(u) = log u − log(a_i u + W_i) (constants
dropped). With s_i ≤ log u_i, g_i = −log(a_i + W_i e^{−s_i}) is a concave (−log-sum-exp) function of s_i, so the
program is convex and conic-representable (exponential cone): that is the reference solve (``conic``). With
a_i = 0 it is W-shifted log u_i: the Eisenberg–Gale program (``bud``) on throughput.

Each user's utility is scaled to its throughput on all the auctioned GPUs, K_i = Σ_j S_ij c_j, and GPUs to
fractions of each type, so the solver sees O(1) numbers: ũ = u/K, g̃(ũ) = log ũ − log(1 + â ũ) with â = a K / W.

**Payments** (line 8, weighted as in [5]): c_i = (Π_{j≠i} V_j(G_pf)^{w_j} / Π_{j≠i} V_j(G^{−i}_pf)^{w_j})^{1/w_i}
= exp((OPT − w_i g_i(u_i) − OPT_{−i}) / w_i), where OPT and OPT_{−i} are the optimal values of the program with
and without i. Optimal values are what an interior-point method gets most accurately (the duality gap), so
c_i is computed from them.

**Cost.** 1 + B exponential-cone solves for B bidders (each leave-one-out program is a full solve; CLARABEL).
A batched primal-dual interior-point method on all B + 1 programs at once was tried (Woodbury eliminations
of the per-user rank-2 and per-type rank-1 terms): it lost the digits c_i needs (its certified error stayed
at 1e-5..1e-3 of the objective where c_i needs 1e-9) and was not kept; see docs/_incoming/b22-themis.md.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np

from .. import lp
from ..errors import SolverError

CONIC_OPTIONS = {"CLARABEL": {"tol_gap_abs": 1e-12, "tol_gap_rel": 1e-12, "tol_feas": 1e-12, "tol_ktratio": 1e-10,
                              "max_iter": 500},
                 "ECOS": {"abstol": 1e-11, "reltol": 1e-11, "feastol": 1e-11, "max_iters": 500}}


class Market:
    """One auction's data, scaled: A (n, k) utility per fraction of each type (rows sum to 1 on usable types),
    ub (n, k) cell bounds in fractions of the type (0: unusable), v (n, k) GPUs per fraction over the demand
    room (demand row Σ_j v_ij y_ij ≤ 1; 0 where the demand is unlimited), u0 (n,) held throughput / K, ah (n,)
    â = elapsed K / W, w (n,) weights (sum 1), K (n,), c (k,) GPUs auctioned."""

    def __init__(self, speed, weight, free, room_d, room_t, u0, elapsed, work):
        S = np.asarray(speed, dtype=float)
        self.n, self.k = S.shape
        c = np.asarray(free, dtype=float)
        self.c = c
        usable = (S > 0) & (np.asarray(room_t, dtype=float) > 1e-12) & (c[None, :] > 1e-12)
        Kv = (S * usable * c[None, :]).sum(axis=1)
        if (Kv <= 0).any():
            raise SolverError("themis auction: a bidder can use none of the GPUs auctioned")
        self.K = Kv
        cs = np.where(c > 0, c, 1.0)
        self.A = S * usable * c[None, :] / Kv[:, None]
        self.ub = np.where(usable, np.minimum(1.0, np.asarray(room_t, dtype=float) / cs[None, :]), 0.0)
        d = np.asarray(room_d, dtype=float)
        fin = np.isfinite(d)
        self.v = np.where(fin[:, None] & usable, c[None, :] / np.where(fin, d, 1.0)[:, None], 0.0)
        self.u0 = np.asarray(u0, dtype=float) / Kv
        W = np.asarray(work, dtype=float)
        self.ah = np.asarray(elapsed, dtype=float) * Kv / W
        w = np.asarray(weight, dtype=float)
        self.w = w / w.sum()

    def g(self, ut):
        """g̃ per user (the objective's terms) of scaled utilities ``ut`` (any shape ending in n)."""
        return np.log(ut) - np.log1p(self.ah * ut)

    def utilities(self, y):
        return self.u0 + (self.A * y).sum(axis=-1)


class Program:
    """The program of one auction, built once with cvxpy parameters (DPP) so that every leave-one-out solve
    reuses the same canonicalization: a user outside a program gets weight 0, no utility from its GPUs and
    a utility shift of 1 (its GPUs then neither help nor count: the program's optimal value is that of the
    program without it)."""

    def __init__(self, m: Market, solver: str | None = None):
        self.m, self.solver = m, solver
        n, k = m.n, m.k
        self.Ap = cp.Parameter((n, k), nonneg=True)
        self.u0p = cp.Parameter(n, nonneg=True)
        self.wp = cp.Parameter(n, nonneg=True)
        self.y = cp.Variable((n, k), nonneg=True)
        s = cp.Variable(n)
        y = self.y
        cons = [cp.sum(y, axis=0) <= 1.0, s <= cp.log(self.u0p + cp.sum(cp.multiply(self.Ap, y), axis=1))]
        fc = m.ub < 1.0 - 1e-12  # a cell bound at the whole type repeats the type's row
        if fc.any():
            cons.append(y[fc] <= m.ub[fc])
        fin = np.flatnonzero(m.v.any(axis=1))
        if fin.size:
            cons.append(cp.sum(cp.multiply(m.v[fin], y[fin]), axis=1) <= 1.0)
        pos = np.flatnonzero(m.ah > 0)
        zero = np.flatnonzero(m.ah <= 0)
        terms = []
        if zero.size:
            terms.append(self.wp[zero] @ s[zero])
        if pos.size:  # g̃ = -log(e^-s + â) = -log â - logistic(-s - log â)
            terms.append(-(self.wp[pos] @ cp.logistic(-s[pos] - np.log(m.ah[pos]))))
        self.prob = cp.Problem(cp.Maximize(sum(terms)), cons)

    def solve(self, present=None):
        """(y (n, k), objective Σ w g̃ over the ``present`` users)."""
        m = self.m
        on = np.ones(m.n, bool) if present is None else np.asarray(present, bool)
        self.Ap.value = m.A * on[:, None]
        self.u0p.value = np.where(on, m.u0, 1.0)
        self.wp.value = m.w * on
        lp.solve(self.prob, self.solver or "CLARABEL", what="themis auction (partial allocation)",
                 options=CONIC_OPTIONS, inaccurate_ok=True)
        yv = np.minimum(np.clip(np.asarray(self.y.value, dtype=float), 0.0, None), m.ub) * on[:, None]
        ut = m.utilities(yv)
        return yv, float((m.w * on) @ np.where(on, m.g(np.where(on, ut, 1.0)), 0.0))


def conic(m: Market, present=None, solver: str | None = None):
    """The program on CLARABEL (exponential cone) among the ``present`` users: (y (n, k), objective Σ w g̃)."""
    return Program(m, solver).solve(present)


def auction(m: Market, solver: str | None = None):
    """G_pf (n, k GPUs) and c (n,) of the PA mechanism among all users of ``m``: 1 + n conic solves."""
    n = m.n
    full = np.ones(n, dtype=bool)
    prog = Program(m, solver)
    y, opt = prog.solve(full)
    if n == 1:
        return y * m.c[None, :], np.ones(1)
    opt_minus = np.empty(n)
    for i in range(n):
        pres = full.copy()
        pres[i] = False
        opt_minus[i] = prog.solve(pres)[1]
    gi = m.w * m.g(m.utilities(y))
    # Π_{j≠i} V_j(G_pf)^{w_j} / Π_{j≠i} V_j(G^{-i})^{w_j} <= 1 (G_pf restricted is feasible without i)
    c = np.exp(np.minimum((opt - gi - opt_minus) / m.w, 0.0))
    return y * m.c[None, :], c
