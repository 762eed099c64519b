"""Fast exact solver for cooperative OEF (paper eq. 10, weighted form).

Problem, on arrays (no demands; the caller does any water-filling)::

    maximize    sum_l S_l . x_l
    subject to  sum_l x_lj <= c_j                          for every GPU type j
                x >= 0
                S_l . x_l / w_l >= S_l . x_i / w_i          for every ordered pair (l, i)   (envy-freeness)

``S`` (n x k) is the normalized throughput (0 = the user cannot run on that type), ``w`` (n,) the weights,
``c`` (k,) the GPU counts. The plain form has n(n-1) envy rows; only a few per user bind at the optimum
(about two per user with a nonzero dual in our instances). We do NOT rely on OEF's Thm 5.2 (users hold
adjacent types, envy only between "neighbours" in speed order): the optimum this solver returns need not
have that structure (the LP is degenerate and the paper's theorem is about a particular optimum), so every
one of the n(n-1) rows is checked at the end. We solve it by **constraint generation on one live HiGHS
model**:

1. Reductions that keep the optimum (proofs in the comments below): a user gets nothing on a type it
   cannot use (no column for S_lj = 0); some optimum uses all capacity of every usable type, and there
   the sum of l's envy rows is the weighted sharing-incentive row ``S_l . x_l >= (w_l / W) S_l . c``
   (Thm 5.1): a valid row with k non-zeros that we add from the start.
2. Seed the model with the envy rows between each user and its 8 most similar users (cosine of the
   speed vectors): they compete for the same types and are the ones left indifferent at the optimum. With
   ``seed=`` (warm start: the ``binding`` rows of an earlier solve of a similar problem, e.g. the daemon's
   previous round) those rows instead, and the similarity rows only for users the seed does not mention.
3. Solve; compute all n^2 values S_l . x_i with one matrix product; for each user add the 2 most violated
   envy rows not yet in the model, plus a *cycle* of envy rows through every group of users that hold
   one and the same single type (such rows imply all g(g-1) rows of the group: they value each other's
   bundles through that type only); take out rows whose slack is basic (the basis stays valid; a row
   comes out at most twice, so the loop is finite); re-solve the SAME model with dual simplex from the
   previous basis (no rebuild, presolve off after the first solve). Stop when no envy row is violated
   (> 1e-12). The result is then feasible for the full problem and optimal for a relaxation of it, hence
   optimal for the full problem.

Why it is still not instant at n = 1000: the optimum is very degenerate. Most users hold one type, and
the users holding the same type get equal shares per weight, so every envy row inside such a group is
tight (tens of thousands of tight rows at n = 500); the cycles and the deletion of basic rows keep the
model at a few rows per user, but dual simplex still needs tens of rounds of a few hundred pivots.

HiGHS runs with primal feasibility tolerance 1e-9 (weights scaled to <= 1, capacities as given), so envy
rows hold to ~1e-9 / w_l in the caller's units (a checker with tolerance 1e-6 never sees a violation). No
margin is added: identical users must get exactly equal value, and a margin would make that infeasible.

``solver``: ``None`` or ``"HIGHS"`` use the method above. The name of another cvxpy solver (``"ECOS"``,
``"CLARABEL"``, ``"SCS"``, ...) solves the plain form with all n(n-1) rows through cvxpy instead (slow;
for comparison and reporting only).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..catalog import SOLVERS
from ..errors import InputError, SolverError
from ..stdio import new_highs
from ._stable import add_distance_rows

#: cvxpy solvers accepted by name (plain form); HIGHS means the fast method of this module.
CVXPY_SOLVERS = tuple(n for n in SOLVERS if n != "HIGHS")  # the plain form through cvxpy (one list: catalog.SOLVERS)

_TOL = 1e-12  # envy violation (in units of S.x/w on the scaled problem) still accepted as satisfied
_SLACK = 1e-6  # an envy row this slack (times w_l) may be taken out of the model
_MAX_DROPS = 2  # times an envy row may be taken out of the model (finite loop)
_INMODEL_TOL = 1e-8  # violation of a row already in the model accepted as the solver's tolerance
STABLE_REL = 1e-12  # second stage: relative slack of the first objective (HiGHS tolerances are 1e-9 absolute)
_STABLE_TOL = 1e-9  # second stage: envy violation (scaled units) accepted as satisfied


@dataclass(frozen=True)
class SolveInfo:
    solver: str  # "HIGHS" (constraint generation) or the cvxpy solver name (plain form)
    method: str
    rounds: int  # LP solves
    envy_rows: int  # envy rows in the final model (plain form: n(n-1))
    seconds: float
    objective: float
    max_envy: float  # largest S_l.x_i/w_i - S_l.x_l/w_l over l != i (<= 0: envy-free)
    # envy rows (l, i) of the final model with a nonzero dual: the rows that pin the optimum down; a later
    # solve of a similar problem seeded with them (``seed=``) starts near the end (empty for the plain form)
    binding: tuple[tuple[int, int], ...] = ()
    seeded: int = 0  # envy rows taken from ``seed`` (0: cold start, similarity seeding only)
    # second stage (``previous=``, :mod:`._stable`): LP rounds it took (0: not run) and the L1 distance to the
    # previous allocation before and after it (on the rows the previous allocation knows)
    stable_rounds: int = 0
    moved_before: float = 0.0
    moved_after: float = 0.0


def _check(speed, weight, capacity) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    try:
        S = np.asarray(speed, dtype=float)
    except (TypeError, ValueError):
        raise InputError("speed", speed, "must be an n x k array of numbers") from None
    if S.ndim != 2:
        raise InputError("speed", getattr(S, "shape", speed), "must be a 2-D array (users x GPU types)")
    n, k = S.shape
    if not np.all(np.isfinite(S)) or np.any(S < 0):
        raise InputError("speed", S[~(np.isfinite(S) & (S >= 0))][:3].tolist(), "entries must be finite and >= 0")
    try:
        w = np.asarray(weight, dtype=float).reshape(-1)
        c = np.asarray(capacity, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        raise InputError("weight/capacity", (weight, capacity), "must be arrays of numbers") from None
    if w.shape != (n,):
        raise InputError("weight", w.shape, f"must have one entry per user (n = {n})")
    if not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise InputError("weight", w[~(np.isfinite(w) & (w > 0))][:3].tolist(), "weights must be finite and > 0")
    if c.shape != (k,):
        raise InputError("capacity", c.shape, f"must have one entry per GPU type (k = {k})")
    if not np.all(np.isfinite(c)) or np.any(c < 0):
        raise InputError("capacity", c[~(np.isfinite(c) & (c >= 0))][:3].tolist(), "must be finite and >= 0")
    return S, w, c


def envy_matrix(speed: np.ndarray, weight: np.ndarray, x: np.ndarray) -> np.ndarray:
    """V[l, i] = S_l.x_i / w_i - S_l.x_l / w_l (diagonal set to -inf); envy-free iff V <= 0."""
    U = speed @ x.T
    V = U / weight[None, :] - (np.diag(U) / weight)[:, None]
    np.fill_diagonal(V, -np.inf)
    return V


def solve(speed, weight, capacity, solver: str | None = None) -> np.ndarray:
    """Optimal cooperative-OEF allocation x (n x k fractional GPUs)."""
    return solve_with_info(speed, weight, capacity, solver)[0]


def solve_with_info(
    speed, weight, capacity, solver: str | None = None, *, cuts_per_user: int = 2, max_rounds: int = 10_000, drop_slack: bool = True, neighbours: int = 8,
    first: str = "simplex", cycles: bool = True, drop_basic: bool = True, seed=None, seed_all: bool = False,
    previous: np.ndarray | None = None,
) -> tuple[np.ndarray, SolveInfo]:
    """``seed``: envy rows (l, i) to start from (pairs of user indices, e.g. the ``binding`` rows of an
    earlier solve of a similar problem); users in no seeded pair get the similarity seeding. Pairs out of
    range or with l == i are ignored. ``seed_all``: every user also gets the similarity seeding (the start is
    a superset of the cold start). The optimum does not depend on the seed, only the work to reach it.

    ``previous`` (n x k, NaN rows = unknown users; HIGHS only): a second stage returns, among the optima,
    the one nearest in L1 to it (:func:`nearest`): a stable tie-break toward last round."""
    S, w, c = _check(speed, weight, capacity)
    name = "HIGHS" if solver is None else str(solver).upper()
    t0 = time.perf_counter()
    binding: tuple = ()
    seeded = 0
    stable = (0, 0.0, 0.0)
    if name == "HIGHS":
        x, rounds, rows, binding, seeded, model, unique = _highs_generation(
            S, w, c, cuts_per_user, max_rounds, drop_slack, neighbours, first, cycles, drop_basic,
            _seed_pairs(seed, S.shape[0]), seed_all)
        method = "constraint generation, live HiGHS model, dual simplex warm start"
        if previous is not None:
            p = np.asarray(previous, dtype=float).reshape(S.shape)
            known = ~np.isnan(p).any(axis=1)
            before = float(np.abs(x - np.nan_to_num(p))[known].sum())
            srounds = 0
            # skipped where the first stage returned the previous allocation, or its optimum is the only one
            if before > 1e-9 * max(1, int(known.sum()) * S.shape[1]) and not unique:
                x, srounds = nearest(S, w, c, x, p, model, cuts_per_user)
            stable = (srounds, before, float(np.abs(x - np.nan_to_num(p))[known].sum()))
    elif name in CVXPY_SOLVERS:
        x = plain_lp(S, w, c, name)
        rounds, rows = 1, S.shape[0] * (S.shape[0] - 1)
        method = "plain form, all n(n-1) envy rows, cvxpy"
    else:
        raise InputError("solver", solver, f"unknown solver (use HIGHS or one of {', '.join(CVXPY_SOLVERS)})")
    seconds = time.perf_counter() - t0
    n = S.shape[0]
    viol = float(envy_matrix(S, w, x).max()) if n > 1 else 0.0
    info = SolveInfo(name, method, rounds, rows, seconds, float(np.sum(S * x)), viol, binding, seeded, *stable)
    return x, info


def _seed_pairs(seed, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``seed`` as two index arrays (valid, distinct, deduplicated pairs), or None without a seed."""
    if seed is None:
        return None
    a = np.asarray(list(seed), dtype=np.int64).reshape(-1, 2) if len(seed) else np.zeros((0, 2), dtype=np.int64)
    ok = (a[:, 0] >= 0) & (a[:, 0] < n) & (a[:, 1] >= 0) & (a[:, 1] < n) & (a[:, 0] != a[:, 1])
    code = np.unique(a[ok, 0] * n + a[ok, 1])
    return code // n, code % n


# --------------------------------------------------------------------------------------------------
# Constraint generation on a live HiGHS model
# --------------------------------------------------------------------------------------------------


def _highs_generation(S, w, c, cuts_per_user, max_rounds, drop_slack, neighbours, first, cycles, drop_basic, seed=None,
                      seed_all=False):
    import highspy

    basic = highspy.HighsBasisStatus.kBasic
    n, k = S.shape
    x_out = np.zeros((n, k))
    cmax = float(c.max()) if k else 0.0
    none = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    if n == 0 or k == 0 or cmax <= 0:
        return x_out, 0, 0, (), 0, none, True
    # Weights scaled to <= 1 (only ratios matter for envy). Capacities are NOT scaled: HiGHS' feasibility
    # tolerance then bounds the envy violation in the caller's units (scaling c down to 1 multiplied the
    # final violation by max c, ~1e-6 at 2000 GPUs).
    cs = c
    ws = w / w.max()
    # Columns only where the user can use the type and the type exists. Dropping x_lj with S_lj = 0 keeps
    # the optimum: it gives l nothing and can only make others envy l.
    usable = (S > 0) & (cs > 0)[None, :]
    vl, vj = np.nonzero(usable)  # row-major: grouped by user
    nv = int(vl.size)
    if nv == 0:
        return x_out, 0, 0, (), 0, none, True
    var = np.full((n, k), -1, dtype=np.int32)
    var[vl, vj] = np.arange(nv, dtype=np.int32)
    has = usable.any(axis=1)

    h = new_highs()
    h.setOptionValue("primal_feasibility_tolerance", 1e-9)
    h.setOptionValue("dual_feasibility_tolerance", 1e-9)
    inf = highspy.kHighsInf
    h.addCols(
        nv, S[vl, vj].astype(float), np.zeros(nv), np.full(nv, inf), 0,
        np.zeros(nv, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0),
    )
    h.changeObjectiveSense(highspy.ObjSense.kMaximize)

    # Capacity rows.
    order = np.argsort(vj, kind="stable").astype(np.int32)
    starts = np.searchsorted(vj[order], np.arange(k)).astype(np.int32)
    h.addRows(k, np.full(k, -inf), cs.astype(float), nv, starts, order, np.ones(nv))

    # Weighted sharing-incentive rows S_l.x_l >= (w_l/W) S_l.c. Valid at an optimum: leftover capacity of a
    # type can be handed to the users able to use it in proportion to their weights without creating envy
    # (both sides of every envy row involving two such users rise by the same amount), so some optimum
    # uses all capacity of every usable type; summing l's envy rows over all i (weighted by w_i/w_l) then
    # gives this row. Relaxed by 1e-9 relative so rounding never makes it bind harder than it should.
    W = float(ws.sum())
    users = np.nonzero(has)[0]
    si_rhs = (ws[users] / W) * (S[users] @ cs) * (1.0 - 1e-9)
    ustarts = np.searchsorted(vl, users).astype(np.int32)
    h.addRows(users.size, si_rhs, np.full(users.size, inf), nv, ustarts, np.arange(nv, dtype=np.int32), S[vl, vj])

    first_envy_row = k + users.size
    rowof = np.full((n, n), -1, dtype=np.int32)  # model row of the envy row (l, i), -1 = not in the model
    dropped = np.zeros((n, n), dtype=np.uint8)  # times the row (l, i) was taken out again
    pl = np.zeros(0, dtype=np.int64)  # pairs of the envy rows in model order
    pi = np.zeros(0, dtype=np.int64)
    seeded = 0
    q = min(int(neighbours), n - 1)
    sl = si = np.zeros(0, dtype=np.int64)
    fresh = has.copy()  # users that get the similarity seeding
    if seed is not None:
        sl, si = seed
        keep = has[sl] & has[si]
        sl, si = sl[keep], si[keep]
        seeded = int(sl.size)
        if not seed_all:
            fresh[sl] = False
            fresh[si] = False
    if q > 0 and fresh.any():
        # Seed: envy rows between users with similar speed profiles (they compete for the same types, and
        # at the optimum they are the ones left indifferent between their bundles). With a seed, only for
        # the users it does not mention (new users, or everyone when too much changed to keep any pair).
        P = S / np.maximum(np.linalg.norm(S, axis=1, keepdims=True), 1e-300)
        fu = np.nonzero(fresh)[0]
        sim = P[fu] @ P.T
        sim[np.arange(fu.size), fu] = -np.inf
        nb = np.argpartition(-sim, q - 1, axis=1)[:, :q]
        li = np.repeat(fu, q)
        ii = nb.ravel()
        ok = has[ii]
        li, ii = li[ok], ii[ok]
        code = np.unique(np.concatenate([sl * n + si, li * n + ii]))
        sl, si = code // n, code % n
    if sl.size:
        rowof[sl, si] = first_envy_row + np.arange(sl.size, dtype=np.int32)
        pl, pi = sl.astype(np.int64), si.astype(np.int64)
        _add_envy_rows(h, S, ws, var, pl, pi, inf)
    X = np.zeros((n, k))
    rows = 0
    rounds = 0
    h.setOptionValue("solver", first)  # "ipm" (with crossover, so a basis exists) or "simplex"
    m = max(1, min(int(cuts_per_user), n - 1))
    while True:
        rounds += 1
        h.run()
        status = h.getModelStatus()
        if status != highspy.HighsModelStatus.kOptimal:
            raise SolverError(f"cooperative OEF: HiGHS ended with {h.modelStatusToString(status)} in round {rounds}")
        sol = h.getSolution()
        X[vl, vj] = np.asarray(sol.col_value)
        np.maximum(X, 0.0, out=X)
        if n == 1:
            break
        V = envy_matrix(S, ws, X)
        # candidates: the m most violated envy rows of every user
        if m == 1:
            li = np.arange(n)
            ii = V.argmax(axis=1)
        else:
            top = np.argpartition(-V, m - 1, axis=1)[:, :m]
            li = np.repeat(np.arange(n), m)
            ii = top.ravel()
        viol = V[li, ii] > _TOL
        li, ii = li[viol], ii[viol]
        if cycles and li.size:
            # Users holding one and the same single type envy each other only through that type, so a
            # cycle of g envy rows through such a group implies all g(g-1) of its rows (and at the optimum
            # they are all tight: the group shares the type equally per weight). Add the cycle rows.
            held = X > 0
            single = held.sum(axis=1) == 1
            su = np.nonzero(single)[0]
            if su.size > 1:
                st = held[su].argmax(axis=1)
                o = np.lexsort((su, st))
                su, st = su[o], st[o]
                nxt = np.empty_like(su)
                nxt[:-1] = su[1:]
                first = np.r_[0, np.nonzero(np.diff(st))[0] + 1]
                last = np.r_[first[1:] - 1, su.size - 1]
                nxt[last] = su[first]  # close each group's cycle
                cyc = nxt != su
                li = np.concatenate([li, su[cyc]])
                ii = np.concatenate([ii, nxt[cyc]])
                pair = np.unique(li * n + ii)
                li, ii = pair // n, pair % n
        new = rowof[li, ii] < 0
        li, ii = li[new], ii[new]
        if li.size == 0:
            li, ii = np.nonzero((V > _TOL) & (rowof < 0))  # violated rows outside the top m of their user
            if li.size == 0:
                # only rows of the model can be violated, within the solver's feasibility tolerance
                if V.max() > _INMODEL_TOL:
                    raise SolverError(f"cooperative OEF: HiGHS left an envy row violated by {V.max():.3g}")
                break
        if rounds >= max_rounds:
            raise SolverError(f"cooperative OEF: no convergence after {rounds} rounds")
        if drop_slack and pl.size:
            # Take out envy rows whose slack is basic (tight but redundant ones included: deleting them keeps
            # the basis valid and optimal), so that the model stays near the rows that bind. A row comes out
            # at most twice, which rules out cycling.
            if drop_basic:
                st = h.getBasis().row_status
                out = np.fromiter((b == basic for b in st[first_envy_row:]), dtype=bool, count=pl.size)
            else:
                act = np.asarray(sol.row_value)[first_envy_row:]
                out = act > _SLACK * ws[pl]
            out &= dropped[pl, pi] < _MAX_DROPS
            if out.any():
                idx = (first_envy_row + np.nonzero(out)[0]).astype(np.int32)
                h.deleteRows(idx.size, idx)
                dropped[pl[out], pi[out]] += 1
                rowof[pl[out], pi[out]] = -1
                pl, pi = pl[~out], pi[~out]
                rowof[pl, pi] = first_envy_row + np.arange(pl.size, dtype=np.int32)
        rowof[li, ii] = first_envy_row + pl.size + np.arange(li.size, dtype=np.int32)
        pl, pi = np.concatenate([pl, li]), np.concatenate([pi, ii])
        _add_envy_rows(h, S, ws, var, li, ii, inf)
        rows += li.size
        if rounds == 1:
            h.setOptionValue("presolve", "off")
            h.setOptionValue("solver", "simplex")
    rows = int(pl.size)
    x_out = X.copy()
    binding: tuple = ()
    if pl.size:
        dual = np.asarray(h.getSolution().row_dual)[first_envy_row:first_envy_row + pl.size]
        nz = np.abs(dual) > 1e-12
        binding = tuple(zip(pl[nz].tolist(), pi[nz].tolist()))
    return x_out, rounds, rows, binding, seeded, (pl, pi), _unique(h)


def _unique(h) -> bool:
    """Whether the model's optimum is certainly its only one: dual nondegenerate (every nonbasic column and
    every nonbasic row has a nonzero reduced cost / dual; sufficient, not necessary). The model is a relaxation
    of eq. 10 (some envy rows), so its only optimum is eq. 10's only one too (any other optimum of eq. 10 would be
    one of the relaxation: feasible there with the same objective)."""
    import highspy

    basic = highspy.HighsBasisStatus.kBasic
    b, sol = h.getBasis(), h.getSolution()
    cb = np.fromiter((v == basic for v in b.col_status), dtype=bool)
    rb = np.fromiter((v == basic for v in b.row_status), dtype=bool)
    cd, rd = np.abs(np.asarray(sol.col_dual)), np.abs(np.asarray(sol.row_dual))
    return bool(np.all(cd[~cb] > 1e-9) and np.all(rd[~rb] > 1e-9))


def _add_envy_rows(h, S, ws, var, li, ii, inf):
    """Rows S_l.x_l - (w_l/w_i) S_l.x_i >= 0 for the pairs (li, ii)."""
    p = li.size
    k = S.shape[1]
    ratio = ws[li] / ws[ii]
    idx = np.concatenate([var[li], var[ii]], axis=1)  # p x 2k
    val = np.concatenate([S[li], -ratio[:, None] * S[li]], axis=1)
    ok = (idx >= 0) & (val != 0)
    counts = ok.sum(axis=1)
    starts = np.zeros(p, dtype=np.int32)
    np.cumsum(counts[:-1], out=starts[1:])
    h.addRows(
        p, np.zeros(p), np.full(p, inf), int(counts.sum()), starts,
        idx[ok].astype(np.int32), val[ok].astype(float),
    )
    del k


# --------------------------------------------------------------------------------------------------
# Plain form through cvxpy (for comparison / reporting)
# --------------------------------------------------------------------------------------------------


def plain_lp(S, w, c, solver: str | None = None) -> np.ndarray:
    """Eq. 10 without caps as ONE cvxpy LP with every one of the n(n-1) envy rows (the textbook form, the
    reference for the constraint generation above; ``oef-coop --solver NAME`` runs it). Solved through
    :func:`slurm_fair.lp.solve`: any status but optimal is a SolverError."""
    import cvxpy as cp

    from .. import lp

    S, w, c = (np.asarray(v, dtype=float) for v in (S, w, c))
    n, k = S.shape
    x = cp.Variable((n, k), nonneg=True)
    cons = [cp.sum(x, axis=0) <= c]
    if n > 1:
        U = S @ x.T  # U[l, i] = S_l . x_i
        li, ii = np.nonzero(~np.eye(n, dtype=bool))
        own = cp.diag(U)
        cons.append(cp.multiply(own[li], 1.0 / w[li]) >= cp.multiply(U[li, ii], 1.0 / w[ii]))
    prob = cp.Problem(cp.Maximize(cp.sum(cp.multiply(S, x))), cons)
    lp.solve(prob, solver, what="cooperative OEF (eq. 10, plain form)")
    return np.maximum(np.asarray(x.value, dtype=float), 0.0)


# --------------------------------------------------------------------------------------------------
# Second stage: of the optima, the one nearest to a previous allocation (module ._stable explains why)
# --------------------------------------------------------------------------------------------------


def nearest(S: np.ndarray, w: np.ndarray, c: np.ndarray, x_opt: np.ndarray, prev: np.ndarray,
                 rows: tuple[np.ndarray, np.ndarray] | None = None, cuts_per_user: int = 2,
            max_rounds: int = 10_000) -> tuple[np.ndarray, int]:
    """Second stage for cooperative OEF (eq. 10 on ``S``, ``w``, ``c``): of the allocations with total
    throughput >= (1 - STABLE_REL) * S.x_opt that are envy-free, the one with the least L1 distance to ``prev``
    (NaN rows: no distance term). ``rows``: envy pairs (l, i) to start from (e.g. the first stage's final
    model). Returns (x, LP rounds). Raises SolverError if HiGHS fails."""
    import highspy

    n, k = S.shape
    known = ~np.isnan(prev).any(axis=1)
    if n == 0 or k == 0 or not known.any():
        return x_opt, 0
    ws = w / w.max()
    usable = (S > 0) & (c > 0)[None, :]
    vl, vj = np.nonzero(usable)
    nv = int(vl.size)
    if nv == 0:
        return x_opt, 0
    var = np.full((n, k), -1, dtype=np.int32)
    var[vl, vj] = np.arange(nv, dtype=np.int32)
    inf = highspy.kHighsInf
    h = new_highs()
    h.setOptionValue("primal_feasibility_tolerance", 1e-9)
    h.setOptionValue("dual_feasibility_tolerance", 1e-9)
    h.addCols(nv, np.zeros(nv), np.zeros(nv), np.full(nv, inf), 0, np.zeros(nv, dtype=np.int32),
              np.zeros(0, dtype=np.int32), np.zeros(0))
    # distance columns t for the variables of known rows; a known row's previous GPUs on a type it cannot use
    # now (no variable) are a constant of the distance and left out
    dv = np.nonzero(known[vl])[0]
    nd = int(dv.size)
    h.addCols(nd, np.ones(nd), np.zeros(nd), np.full(nd, inf), 0, np.zeros(nd, dtype=np.int32),
              np.zeros(0, dtype=np.int32), np.zeros(0))
    h.changeObjectiveSense(highspy.ObjSense.kMinimize)
    # capacity
    order = np.argsort(vj, kind="stable").astype(np.int32)
    starts = np.searchsorted(vj[order], np.arange(k)).astype(np.int32)
    h.addRows(k, np.full(k, -inf), c.astype(float), nv, starts, order, np.ones(nv))
    # the first objective kept at its optimum
    opt = float(np.sum(S * x_opt))
    h.addRows(1, np.array([opt - STABLE_REL * max(1.0, abs(opt))]), np.array([inf]), nv, np.zeros(1, dtype=np.int32),
              np.arange(nv, dtype=np.int32), S[vl, vj].astype(float))
    # t - x >= -p and t + x >= p
    p = prev[vl[dv], vj[dv]]
    add_distance_rows(h, p, dv, nv)
    inmodel = np.zeros((n, n), dtype=bool)
    if rows is not None and len(rows[0]):
        li, ii = (np.asarray(r, dtype=np.int64) for r in rows)
        code = np.unique(li * n + ii)
        li, ii = code // n, code % n
        inmodel[li, ii] = True
        _add_envy_rows(h, S, ws, var, li, ii, inf)
    h.setOptionValue("solver", "simplex")
    X = np.zeros((n, k))
    m = max(1, min(int(cuts_per_user), n - 1))
    rounds = 0
    while True:
        rounds += 1
        h.run()
        status = h.getModelStatus()
        if status != highspy.HighsModelStatus.kOptimal:
            raise SolverError(f"stable optimum: HiGHS ended with {h.modelStatusToString(status)} in round {rounds}")
        X[vl, vj] = np.asarray(h.getSolution().col_value)[:nv]
        np.maximum(X, 0.0, out=X)
        if n == 1:
            break
        V = envy_matrix(S, ws, X)
        top = np.argpartition(-V, m - 1, axis=1)[:, :m]
        li = np.repeat(np.arange(n), m)
        ii = top.ravel()
        bad = (V[li, ii] > _STABLE_TOL) & ~inmodel[li, ii]
        li, ii = li[bad], ii[bad]
        if li.size == 0:
            li, ii = np.nonzero((V > _STABLE_TOL) & ~inmodel)
            if li.size == 0:
                break
        if rounds >= max_rounds:
            raise SolverError(f"stable optimum: no convergence after {rounds} rounds")
        inmodel[li, ii] = True
        _add_envy_rows(h, S, ws, var, li, ii, inf)
        if rounds == 1:
            h.setOptionValue("presolve", "off")
    return X, rounds
