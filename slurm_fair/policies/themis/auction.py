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

**Cost.** 1 + B exponential-cone solves for B bidders (CLARABEL), each on the (bidder, type) cells that matter
(column generation checked with the duals: the optimal value over all cells, see ``auction``). The B
leave-one-out solves are independent: they run in chunks of ``CHUNK`` bidders, each chunk on its own program, on
up to ``THREADS`` threads, and give the same answer on any number of threads. On CLARABEL a program is written
straight in its conic form and kept in one persistent solver (``conic.Direct``: a leave-one-out solve is
a data update, and only CLARABEL's solve, outside Python's GIL, runs long); cvxpy's program (``Cells``, whose
building and compiling is serialized, see ``_CVXPY``) is the fallback and the path for other solvers.
Issue 31, 1 000 tenants × 10 types (301 bidders): 503-599 of 3 010 cells, ~15 ms a program instead of ~45-70 ms,
5-6 s an auction instead of 21 s, and none of the stalls (CLARABEL "InsufficientProgress" at gap ~1e-2 on 9-35
of the 301 dense leave-one-out programs without demands; the round was recorded solver-failed). Tried and not
kept: an outer approximation of g by tangents on one live HiGHS LP (Kelley's cutting planes): about 35 rounds
to a gap of 1e-10, the LP held rows only to HiGHS's 1e-10, 101 s for the auction, and its c_i differed from the
conic answer by 1e-4 (the LP's vertex moves the utilities by about the square root of the gap).
A batched primal-dual interior-point method on all B + 1 programs at once was tried (Woodbury eliminations
of the per-user rank-2 and per-type rank-1 terms): it lost the digits c_i needs (its certified error stayed
at 1e-5..1e-3 of the objective where c_i needs 1e-9) and was not kept; see docs/_incoming/b22-themis.md.
"""

from __future__ import annotations

import contextlib
import copy
import os
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import cvxpy as cp
import numpy as np

from ... import lp
from ...errors import SolverError
from .conic import Direct

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

    def without(self, i: int) -> "Market":
        """The same auction without bidder i (weights not renormalized: the leave-one-out program's terms)."""
        out = copy.copy(self)
        keep = np.delete(np.arange(self.n), i)
        for a in ("A", "ub", "v", "u0", "ah", "w", "K"):
            setattr(out, a, getattr(self, a)[keep])
        out.n = self.n - 1
        return out

    def g(self, ut):
        """g̃ per user (the objective's terms) of scaled utilities ``ut`` (any shape ending in n)."""
        return np.log(ut) - np.log1p(self.ah * ut)

    def utilities(self, y):
        return self.u0 + (self.A * y).sum(axis=-1)

    def answer(self, r, c, y_cells, on):
        """(y (n, k), objective Σ w g̃ over the bidders ``on``) from a program's values ``y_cells`` on the cells
        (r, c): clipped to [0, ub], nothing for a bidder left out."""
        y = np.zeros((self.n, self.k))
        y[r, c] = np.clip(np.asarray(y_cells, dtype=float), 0.0, None)
        y = np.minimum(y, self.ub) * on[:, None]
        return y, float((self.w * on) @ np.where(on, self.g(np.where(on, self.utilities(y), 1.0)), 0.0))


class Program:
    """The program of one auction over every cell (the reference form: ``conic``, the tests; ``auction`` uses
    :class:`Cells`), built once with cvxpy parameters (DPP) so that every leave-one-out solve reuses the same
    canonicalization: a user outside a program gets weight 0, no utility from its GPUs and a utility shift of
    1 (its GPUs then neither help nor count: the program's optimal value is that of the program without it)."""

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
        return m.answer(*np.nonzero(np.ones((m.n, m.k), bool)), np.asarray(self.y.value).reshape(-1), on)


def conic(m: Market, present=None, solver: str | None = None):
    """The program on CLARABEL (exponential cone) among the ``present`` users: (y (n, k), objective Σ w g̃)."""
    return Program(m, solver).solve(present)


#: cvxpy numbers every expression from one counter (``lin_ops.lin_utils.get_id``: read, then add 1) that threads
#: may not share: a program is built and compiled (its first solve) under this lock; its later solves only set
#: parameters and run the solver (CLARABEL, outside the GIL), in parallel
_CVXPY = threading.Lock()


def _cvxpy_lock(needed: bool):
    return _CVXPY if needed else contextlib.nullcontext()


class Cells:
    """The program over a set of (bidder, type) cells only (the others held at 0), built once with cvxpy
    parameters like :class:`Program`; ``solve`` also returns the capacity and demand rows' duals, with which
    :func:`outside` checks that no cell left out would enter (then the answer is the program's over all cells)."""

    def __init__(self, m: Market, cells: np.ndarray, solver: str | None = None, threaded: bool = False):
        self.m, self.solver, self.threaded = m, solver, threaded  # threaded: built and solved in a worker thread
        self.compiled: set[str] = set()  # solvers this program was compiled for
        self.optimal = False  # the last solve's status was optimal
        with _cvxpy_lock(threaded):
            self._build(m, cells)

    def _build(self, m: Market, cells: np.ndarray) -> None:
        import scipy.sparse as sp

        n, k = m.n, m.k
        self.cells = cells.copy()
        r, c = np.nonzero(cells)
        self.r, self.c = r, c
        nv = r.size
        self.Ap = cp.Parameter(nv, nonneg=True)
        self.u0p = cp.Parameter(n, nonneg=True)
        self.wp = cp.Parameter(n, nonneg=True)
        self.y = y = cp.Variable(nv, nonneg=True)
        s = cp.Variable(n)
        col = np.arange(nv)
        rows = sp.csr_matrix((np.ones(nv), (r, col)), shape=(n, nv))
        self.cap = cp.Constant(sp.csr_matrix((np.ones(nv), (c, col)), shape=(k, nv))) @ y <= 1.0
        cons = [self.cap, s <= cp.log(self.u0p + rows @ cp.multiply(self.Ap, y))]
        fc = np.flatnonzero(m.ub[r, c] < 1.0 - 1e-12)
        if fc.size:
            cons.append(y[fc] <= m.ub[r, c][fc])
        self.fin = np.flatnonzero(m.v.any(axis=1))
        self.dem = None
        if self.fin.size:
            vm = sp.csr_matrix((m.v[r, c], (r, col)), shape=(n, nv))[self.fin]
            self.dem = cp.Constant(vm) @ y <= 1.0
            cons.append(self.dem)
        pos, zero = np.flatnonzero(m.ah > 0), np.flatnonzero(m.ah <= 0)
        terms = []
        if zero.size:
            terms.append(self.wp[zero] @ s[zero])
        if pos.size:
            terms.append(-(self.wp[pos] @ cp.logistic(-s[pos] - np.log(m.ah[pos]))))
        self.prob = cp.Problem(cp.Maximize(sum(terms)), cons)

    def solve(self, present=None, solver: str | None = None):
        """(y (n, k), objective Σ w g̃ over the ``present`` users, capacity duals (k,), demand duals (n,))."""
        m = self.m
        on = np.ones(m.n, bool) if present is None else np.asarray(present, bool)
        self.Ap.value = m.A[self.r, self.c] * on[self.r]
        self.u0p.value = np.where(on, m.u0, 1.0)
        self.wp.value = m.w * on
        name = solver or self.solver or "CLARABEL"
        with _cvxpy_lock(self.threaded and name not in self.compiled):  # a first solve compiles (new cvxpy ids)
            lp.solve(self.prob, name, what="themis auction (partial allocation)", options=CONIC_OPTIONS,
                     inaccurate_ok=True, filter_warnings=not self.threaded)
        self.compiled.add(name)
        self.optimal = self.prob.status == cp.OPTIMAL
        yv, val = m.answer(self.r, self.c, self.y.value, on)
        p = np.abs(np.asarray(self.cap.dual_value, dtype=float)).reshape(m.k)
        q = np.zeros(m.n)
        if self.dem is not None:
            q[self.fin] = np.abs(np.asarray(self.dem.dual_value, dtype=float)).reshape(-1)
        return yv, val, p, q


#: the leave-one-out programs are solved in chunks of this many bidders, each chunk on its own program (the
#: answer does not depend on the number of threads), on up to ``THREADS`` threads (CLARABEL solves outside
#: Python's GIL)
CHUNK = 32
THREADS = 4

OUT_TOL = 1e-9  # relative to the bidder's w g̃'(ũ) ũ: a better response by less is not counted


def _best_response(m: Market, profit: np.ndarray) -> np.ndarray:
    """(n, k) each bidder's best y at the linear ``profit`` per cell within its own constraints (cell bounds,
    demand row): a fractional knapsack, greedy by profit per unit of the demand row."""
    n, k = profit.shape
    good = (profit > 0) & (m.ub > 0)
    take = np.where(good, m.ub, 0.0)
    out = np.zeros((n, k))
    free = ~m.v.any(axis=1)
    out[free] = take[free]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(good, profit / np.where(m.v > 0, m.v, 1.0), -np.inf)
    order = np.argsort(-ratio, axis=1, kind="stable")
    left = np.where(free, 0.0, 1.0)
    rows = np.arange(n)
    for c in range(k):
        j = order[:, c]
        ok = good[rows, j] & (left > 0)
        vj = m.v[rows, j]
        amount = np.where(ok, np.minimum(take[rows, j], np.where(vj > 0, left / np.where(vj > 0, vj, 1.0), np.inf)), 0.0)
        out[rows[ok & ~free], j[ok & ~free]] = amount[ok & ~free]
        left = left - np.where(free, 0.0, amount * vj)
    return out


def outside(m: Market, cells: np.ndarray, y: np.ndarray, present: np.ndarray, p: np.ndarray) -> np.ndarray:
    """(n, k) bool: cells left out that would enter. The program with the capacity rows priced at ``p`` (their
    duals) splits into one problem per bidder, max w g̃(ũ(y_l)) − p·y_l over its own cells, bounds and demand
    row; ``y`` is optimal over all cells iff no bidder's linearized response at ũ, profit w g̃'(ũ) A − p per cell
    (a fractional knapsack), beats what its ``y_l`` earns (first-order condition of a concave problem on a
    convex set). The cells of a better response are returned (none: the optimum over every cell)."""
    ut = np.maximum(m.utilities(y), 1e-300)
    mv = m.w / (ut * (1.0 + m.ah * ut))  # w g̃'(ũ)
    profit = mv[:, None] * m.A - p[None, :]
    usable = (m.ub > 0) & (m.A > 0)
    profit = np.where(usable, profit, 0.0)
    best = _best_response(m, profit)
    gain = (profit * best).sum(axis=1) - (profit * y).sum(axis=1)
    worse = present & (gain > OUT_TOL * mv * ut + 1e-15)
    return worse[:, None] & (best > 0) & ~cells


@dataclass(frozen=True)
class Auction:
    g_pf: np.ndarray  # (n, k) GPUs of the proportional-fair allocation G_pf
    c: np.ndarray  # (n,) the fraction of G_pf each bidder keeps
    rebuilt: int  # leave-one-out programs that needed a fallback (see ``auction``)
    cells: int  # cells in the program the leave-one-out programs were solved on (of n·k)


def _on_clarabel(solver) -> bool:
    return (solver or "CLARABEL").upper() == "CLARABEL"


def _program(m: Market, cells: np.ndarray, solver, threaded: bool):
    """The program over ``cells``: on CLARABEL (the default) written in its conic form and kept in one persistent
    solver (:class:`.conic.Direct`: no cvxpy work per solve, nothing held under the GIL but the data
    update); on any other solver the cvxpy program (:class:`Cells`)."""
    if _on_clarabel(solver):
        return Direct(m, cells, CONIC_OPTIONS["CLARABEL"])
    return Cells(m, cells, solver, threaded)


def _fallbacks(m: Market, cells: np.ndarray, solver, threaded: bool):
    """The programs to try, in turn, after one that failed or was not optimal: on CLARABEL the conic form built
    afresh without equilibration (it solved each of the 11 programs of a 1 000-tenant auction that came back
    "AlmostSolved"), then cvxpy's program (a different conic form), then cvxpy's on ECOS."""
    if _on_clarabel(solver):
        yield Direct(m, cells, {**CONIC_OPTIONS["CLARABEL"], "equilibrate_enable": False})
    yield Cells(m, cells, solver, threaded)
    yield Cells(m, cells, "ECOS", threaded)


def _exact(m: Market, cells: np.ndarray, present: np.ndarray, solver, prog: "Cells | Direct | None" = None,
           threaded: bool = False):
    """The program among ``present`` over all cells, solved on a subset grown until no cell left out would
    enter (column generation; the last answer is optimal over every cell). (y, value, p, q, program).
    ``threaded``: called in a worker thread (:class:`Cells` serializes cvxpy's work)."""
    for _ in range(m.k + 2):
        prog = prog if prog is not None and np.array_equal(prog.cells, cells) else _program(m, cells, solver, threaded)
        try:
            y, val, p, q = prog.solve(present)
            solved = prog.optimal
        except SolverError:
            solved = False
        if not solved:
            # CLARABEL "AlmostSolved" (gap ~1e-11 against the 1e-12 asked for: 8-12 of ~300 programs of the
            # conic form at 1 000 tenants; 19 of 307 of cvxpy's with per-type demands), or failed outright
            # (CLARABEL raised on a warm 2 000-tenant round's first program when tried without iterative
            # refinement): the fallbacks in turn, the last one's answer kept (ECOS's failure is the auction's)
            for prog in _fallbacks(m, cells, solver, threaded):
                try:
                    y, val, p, q = prog.solve(present)
                except SolverError:
                    if prog.solver == "ECOS":
                        raise
                    continue
                if prog.optimal:
                    break
        add = outside(m, cells, y, present, p)
        if not add.any():
            return y, val, p, q, prog
        cells = cells | add
    raise SolverError("themis auction: column generation did not settle")


def _cpus() -> int:
    """CPUs this process may run on (its affinity mask where the system has one, as under systemd's
    ``CPUAffinity=``), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _without_each(m: Market, cells: np.ndarray, idx: np.ndarray, solver, threaded: bool) -> tuple[np.ndarray, int]:
    """The optimal values of the leave-one-out programs of the bidders ``idx`` (one program over ``cells``,
    built here: a chunk's answers do not depend on which thread or in which order the chunks run), and how many
    needed the fallback (see :func:`auction`)."""
    n = m.n
    full = np.ones(n, dtype=bool)
    prog = _program(m, cells, solver, threaded)
    out = np.empty(idx.size)
    rebuilt = 0
    for at, i in enumerate(idx):
        pres = full.copy()
        pres[i] = False
        try:
            out[at] = _exact(m, cells, pres, solver, prog, threaded)[1]
        except SolverError:
            rebuilt += 1  # built without the bidder (_exact's own fallback: built afresh, then ECOS)
            out[at] = _exact(m.without(int(i)), np.delete(cells, i, axis=0), np.ones(n - 1, dtype=bool), solver,
                             None, threaded)[1]
    return out, rebuilt


def auction(m: Market, solver: str | None = None) -> Auction:
    """G_pf and c of the PA mechanism among all users of ``m``: 1 + n conic solves, each on the cells that matter.

    Every program is solved over a subset of the (bidder, type) cells and checked against the rest with its
    duals (:func:`outside`: a cell left out enters only if its marginal value beats its price); cells that
    would enter are added and the program re-solved, so each optimal value is that of the program over all
    cells (issue 31: at 1 000 tenants ~500 of 3 010 cells, 2-3x faster per program, and CLARABEL no longer
    stalls on columns that are 0 with near-zero reduced cost). The leave-one-out programs are over G_pf's
    support and the cells within 10 % of entering at G_pf's prices, one program a chunk of ``CHUNK`` bidders,
    the chunks on up to ``THREADS`` threads (:func:`_without_each`). Fallbacks, each the same
    program: a program that fails or is not optimal is built afresh (:func:`_fallbacks`), then solved by ECOS; a
    leave-one-out program that still fails is solved once more built without the bidder (:meth:`Market.without`),
    with the same fallbacks; ``rebuilt`` counts them."""
    n = m.n
    full = np.ones(n, dtype=bool)
    usable = (m.ub > 0) & (m.A > 0)
    first = usable & (m.A >= 0.5 * m.A.max(axis=1, keepdims=True))  # each bidder's fastest types to start
    y, opt, p, q, _ = _exact(m, first, full, solver)
    if n == 1:
        return Auction(y * m.c[None, :], np.ones(1), 0, int(first.sum()))
    # G_pf's support and, per bidder, the cells within 10 % of its best at G_pf's prices (they may enter once a
    # bidder leaves); _exact adds any other that would
    ut = m.utilities(y)
    val = (m.w / (ut * (1.0 + m.ah * ut)))[:, None] * m.A
    price = p[None, :] + q[:, None] * m.v
    cells = (y > 1e-9) | (usable & (val >= 0.9 * price))
    opt_minus = np.empty(n)
    chunks = [np.arange(a, min(a + CHUNK, n)) for a in range(0, n, CHUNK)]
    workers = min(len(chunks), max(1, int(THREADS)), _cpus())
    if workers > 1:
        with warnings.catch_warnings(), ThreadPoolExecutor(workers, thread_name_prefix="themis-pa") as pool:
            warnings.simplefilter("ignore", UserWarning)  # for the threads' solves (lp.solve, filter_warnings)
            done = list(pool.map(lambda idx: _without_each(m, cells, idx, solver, True), chunks))
    else:
        done = [_without_each(m, cells, idx, solver, False) for idx in chunks]
    rebuilt = 0
    for idx, (vals, r) in zip(chunks, done):
        opt_minus[idx] = vals
        rebuilt += r
    gi = m.w * m.g(m.utilities(y))
    # Π_{j≠i} V_j(G_pf)^{w_j} / Π_{j≠i} V_j(G^{-i})^{w_j} <= 1 (G_pf restricted is feasible without i)
    c = np.exp(np.minimum((opt - gi - opt_minus) / m.w, 0.0))
    return Auction(y * m.c[None, :], c, rebuilt, int(cells.sum()))
