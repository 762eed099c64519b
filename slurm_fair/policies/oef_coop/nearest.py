"""Second stage of cooperative OEF (eq. 10): of the optima, the one nearest in L1 to a previous allocation.

Module ``.stable`` explains why; the first stage is :mod:`.fast`. Envy rows are in the aggregated form of
:mod:`.classes` (one variable t per speed direction shared by two users or more; the same feasible set).
"""

from __future__ import annotations

import numpy as np

from ...errors import SolverError
from ...stdio import new_highs
from . import classes as _cc

STABLE_REL = 1e-12  # second stage: relative slack of the first objective (HiGHS tolerances are 1e-9 absolute)
_STABLE_TOL = 1e-9  # second stage: envy violation (scaled units) accepted as satisfied


def nearest(S: np.ndarray, w: np.ndarray, c: np.ndarray, x_opt: np.ndarray, prev: np.ndarray,
            rows: _cc.EnvyModel | None = None, cuts_per_user: int = 2, max_rounds: int = 10_000,
            aggregate: bool = True) -> tuple[np.ndarray, int]:
    """Second stage for cooperative OEF (eq. 10 on ``S``, ``w``, ``c``): of the allocations with total
    throughput >= (1 - STABLE_REL) * S.x_opt that are envy-free, the one with the least L1 distance to ``prev``
    (NaN rows: no distance term). ``rows``: the first stage's final model (its directions and envy rows, to start
    from). Envy rows are aggregated over users of one speed direction as in the first stage (module
    ``classes``). Returns (x, LP rounds). Raises SolverError if HiGHS fails."""
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
    h, inf, dirs, dv, nd, pk, nt = _model(S, c, x_opt, prev, known, ws, usable, vl, vj, var, rows, aggregate)
    m_env = dirs.m
    inmodel = np.zeros((m_env, n), dtype=bool)
    ie, ii0 = _cc.intra_pairs(dirs)
    codes = [ie * n + ii0]
    if rows is not None and len(rows.pe):
        codes.append(np.asarray(rows.pe, dtype=np.int64) * n + np.asarray(rows.pi, dtype=np.int64))
    code = np.unique(np.concatenate(codes))
    if code.size:
        li, ii = code // n, code % n
        inmodel[li, ii] = True
        _cc.add_rows(h, dirs, ws, var, li, ii, inf)
    h.setOptionValue("solver", "simplex")
    # No presolve: with the objective kept to 1e-12 relative, HiGHS' presolve declared a feasible model of this
    # form infeasible (the simulator's first try, 12 users; the model solves without it)
    h.setOptionValue("presolve", "off")
    X = np.zeros((n, k))
    m = max(1, min(int(cuts_per_user), n - 1))
    rounds = 0
    while True:
        rounds += 1
        colv = np.asarray(_cc.solved(h, "stable optimum", rounds).col_value)
        xv = colv[:nv].copy()
        xv[dv] += pk[dv] - colv[nv:nv + nd]  # x = p + u - v
        X[vl, vj] = xv
        np.maximum(X, 0.0, out=X)
        if n == 1:
            break
        V = _cc.violations(dirs, ws, X, colv[nv + nd:nv + nd + nt])
        top = np.argpartition(-V, m - 1, axis=1)[:, :m]
        li = np.repeat(np.arange(m_env), m)
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
        _cc.add_rows(h, dirs, ws, var, li, ii, inf)
    return X, rounds


def _model(S, c, x_opt, prev, known, ws, usable, vl, vj, var, rows, aggregate):
    """The second stage's model before any envy row: the distance columns, the t columns of the directions
    (``rows``' or found again), capacity rows, the first objective kept at its optimum and the membership rows.
    Returns (model, HiGHS' infinity, the directions with their t columns where they are in this model, the
    known variables, their number, their previous values, t columns)."""
    import highspy

    n, k = S.shape
    nv = int(vl.size)
    inf = highspy.kHighsInf
    # distance columns t for the variables of known rows; a known row's previous GPUs on a type it cannot use
    # now (no variable) are a constant of the distance and left out
    dv = np.nonzero(known[vl])[0]
    nd = int(dv.size)
    dirs = rows.dirs if rows is not None and rows.dirs is not None else None
    if dirs is None:
        dirs = _cc.directions(np.where(usable, S, 0.0), usable.any(axis=1), nv, aggregate)
    # the t columns of the directions come after x and the distance columns here
    dirs = _cc.Directions(dirs.cls, dirs.D, dirs.first, dirs.size,
                          np.where(dirs.tcol >= 0, dirs.tcol + nd, -1), dirs.order, dirs.start)
    # The distance without rows: a known variable is x = p + u - v with u >= 0 and 0 <= v <= p (so x >= 0),
    # and the objective is sum u + v (= |x - p| at an optimum: lowering both u and v keeps every row and lowers
    # the cost). The same LP as t >= x - p, t >= p - x with 2 rows per variable, with as many rows as the first
    # stage instead (measured: 36 000 -> 6 000 rows, 1 000 tenants); column j holds u_j (or x_j for a variable of
    # an unknown row), column nv + pos holds v_j. Rows written in x go through _Split, which rewrites them.
    h0 = new_highs()
    h0.setOptionValue("primal_feasibility_tolerance", 1e-9)
    h0.setOptionValue("dual_feasibility_tolerance", 1e-9)
    isk = known[vl]
    h0.addCols(nv, isk.astype(float), np.zeros(nv), np.full(nv, inf), 0, np.zeros(nv, dtype=np.int32),
               np.zeros(0, dtype=np.int32), np.zeros(0))
    pk = np.where(isk, np.nan_to_num(prev[vl, vj]), 0.0)
    h0.addCols(nd, np.ones(nd), np.zeros(nd), np.maximum(pk[dv], 0.0), 0, np.zeros(nd, dtype=np.int32),
               np.zeros(0, dtype=np.int32), np.zeros(0))
    h = _Split(h0, nv, dv, pk)
    nt = _cc.add_t_columns(h, dirs, inf)
    h.changeObjectiveSense(highspy.ObjSense.kMinimize)
    # capacity
    order = np.argsort(vj, kind="stable").astype(np.int32)
    starts = np.searchsorted(vj[order], np.arange(k)).astype(np.int32)
    h.addRows(k, np.full(k, -inf), c.astype(float), nv, starts, order, np.ones(nv))
    # the first objective kept at its optimum
    opt = float(np.sum(S * x_opt))
    h.addRows(1, np.array([opt - STABLE_REL * max(1.0, abs(opt))]), np.array([inf]), nv, np.zeros(1, dtype=np.int32),
              np.arange(nv, dtype=np.int32), S[vl, vj].astype(float))
    _cc.add_member_rows(h, dirs, ws, var, inf)
    return h, inf, dirs, dv, nd, pk, nt


def nearest_merged(S: np.ndarray, w: np.ndarray, c: np.ndarray, x_opt: np.ndarray, prev: np.ndarray,
                   cuts_per_user: int = 2, rows: _cc.EnvyModel | None = None) -> tuple[np.ndarray, int]:
    """:func:`nearest`, with the users that share a speed direction *and* a previous bundle per weight (or that
    are all unknown: NaN rows) merged into one user, and the result split by weight (issue 31).

    Exact. Let g be such a group: S_l = a_l D for l in g, and p_l = w_l b (or no distance term for any l in g).
    For any allocation x that is envy-free with total throughput >= the bound, its symmetrization
    x'_l = (w_l / W_g) sum_{l' in g} x_l' (W_g = sum w_l) is envy-free with the same total (the merge proof of
    ``fast._merged_generation`` holds for any set of users of one direction) and no farther from p:
    sum_l |x'_l - p_l| = |y_g - W_g b| <= sum_l |x_l - p_l| (triangle inequality on sum_l (x_l - w_l b) =
    y_g - W_g b, y_g = sum x_l). So some nearest optimum is symmetric in every group, and the symmetric
    allocations are exactly the splits of the merged problem's allocations y, at distance sum_g |y_g - W_g b_g|:
    the merged problem's nearest point, split, is a nearest point of eq. 10's optima. Previous bundles per
    weight are compared rounded to 1e-9 GPUs (a difference below that moves the distance by less than HiGHS'
    tolerance). Users with no usable type get nothing and are left out. With nothing to merge, :func:`nearest`
    itself, started from ``rows`` (the first stage's final model)."""
    n, k = S.shape
    usable = (S > 0) & (c > 0)[None, :]
    has = usable.any(axis=1)
    users = np.nonzero(has)[0]
    if users.size == 0:
        return x_opt, 0
    dirs = _cc.directions(np.where(usable, S, 0.0), has, 0)
    known = ~np.isnan(prev).any(axis=1)
    per = np.where(known[:, None] & usable, np.nan_to_num(prev) / w[:, None], 0.0)
    key = np.c_[dirs.cls[users], known[users], np.round(per[users], 9)]
    _, g = np.unique(key, axis=0, return_inverse=True)
    g = np.asarray(g).reshape(-1)
    m = int(g.max()) + 1
    if m == users.size:  # nothing to merge
        return nearest(S, w, c, x_opt, prev, rows, cuts_per_user)
    Wg = np.bincount(g, weights=w[users], minlength=m)
    Sg = np.zeros((m, k))
    Xg = np.zeros((m, k))
    Pg = np.zeros((m, k))
    np.add.at(Sg, g, S[users] * w[users][:, None])
    Sg /= Wg[:, None]
    np.add.at(Xg, g, x_opt[users])
    np.add.at(Pg, g, np.where(known[users][:, None], np.nan_to_num(prev[users]), 0.0))
    gk = np.bincount(g, weights=known[users].astype(float), minlength=m) > 0
    Pg[~gk] = np.nan
    y, rounds = nearest(Sg, Wg, c, Xg, Pg, None, cuts_per_user)
    x = np.zeros((n, k))
    x[users] = y[g] * (w[users] / Wg[g])[:, None]
    return x, rounds


class _Split:
    """A HiGHS model seen in the variables x of the first stage while it holds x = p + u - v for the variables
    ``dv`` (u in column j, v in column nv + position in dv): ``addRows`` rewrites every row given in x (an entry
    a on x_j becomes a on u_j and -a on v_j, and a * p_j leaves the row's bounds); anything else is the model's."""

    def __init__(self, h, nv: int, dv: np.ndarray, p: np.ndarray):
        self._h, self._nv, self._p = h, nv, p
        self._vcol = np.full(nv, -1, dtype=np.int64)
        self._vcol[dv] = nv + np.arange(dv.size)

    def __getattr__(self, name):
        return getattr(self._h, name)

    def addRows(self, num, lower, upper, nnz, starts, idx, val):
        idx = np.asarray(idx, dtype=np.int64)[:nnz]
        val = np.asarray(val, dtype=float)[:nnz]
        row = np.repeat(np.arange(num), np.diff(np.r_[np.asarray(starts, dtype=np.int64), nnz]))
        xs = idx < self._nv
        vc = np.full(idx.size, -1, dtype=np.int64)
        vc[xs] = self._vcol[idx[xs]]
        split = vc >= 0
        shift = np.zeros(num)
        np.add.at(shift, row[split], val[split] * self._p[idx[split]])
        lower = np.asarray(lower, dtype=float) - shift
        upper = np.asarray(upper, dtype=float) - shift
        r2 = np.concatenate([row, row[split]])
        i2 = np.concatenate([idx, vc[split]])
        v2 = np.concatenate([val, -val[split]])
        o = np.argsort(r2, kind="stable")
        st = np.searchsorted(r2[o], np.arange(num)).astype(np.int32)
        return self._h.addRows(num, lower, upper, int(o.size), st, i2[o].astype(np.int32), v2[o])
