"""The themis auction's program over a set of (bidder, type) cells, written straight in CLARABEL's conic form and
kept in one persistent solver: a leave-one-out solve changes only numbers (the bidder's utility coefficients,
its utility shift and its weight), so it is an in-place data update and a solve — no cvxpy canonicalization
per program. The same program as :class:`.auction.Cells` (which stays the fallback, and the path for any
other solver); issue 31 measured cvxpy's work at ~26 % of the auction's time on one thread, and it held
Python's GIL while the other threads' CLARABEL solves could have run.

Variables x = [y (cells) | s (n) | t, a, b (one each per bidder with â > 0)]; CLARABEL minimizes qᵀx subject to
b − A x ∈ K, K = nonnegative rows then exponential cones K_exp = cl{(x1, x2, x3) : x2 e^{x1/x2} ≤ x3, x2 > 0}:

* nonnegative: Σ_{cells of type j} y ≤ 1 (capacity), y ≤ ub (cells bounded below the whole type), Σ_l v y ≤ 1
  (demand rows), y ≥ 0, a_i + b_i ≤ 1;
* (s_i, 1, u0_i + Σ A y) ∈ K_exp — s_i ≤ log ũ_i;
* for â_i > 0: (−s_i − log â_i − t_i, 1, a_i) ∈ K_exp and (−t_i, 1, b_i) ∈ K_exp, i.e. e^{−s−log â−t} + e^{−t} ≤ 1:
  t_i ≥ logistic(−s_i − log â_i), and g̃_i = −log â_i − logistic(−s_i − log â_i);
* q: −w_i on s_i (â_i = 0: g̃ = log ũ) and w_i on t_i (â_i > 0: g̃ = −log â_i − logistic(−s_i − log â_i)).

A bidder left out keeps its place with zero utility coefficients, a utility shift of 1 and weight 0 (as in
``Cells``): the program's optimal value is then that of the program without it."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ...errors import SolverError


def _settings(options: dict):
    import clarabel

    st = clarabel.DefaultSettings()
    st.verbose = False
    st.presolve_enable = False  # data updates need the rows as given
    st.input_sparse_dropzeros = False  # a left-out bidder's coefficients are explicit zeros
    for key, value in options.items():
        setattr(st, key, value)
    return st


class Direct:
    """The program over ``cells`` (n, k bool) of market ``m`` (:class:`.auction.Market`); ``solve(present)``
    returns (y (n, k), objective Σ w g̃ over the present bidders, capacity duals (k,), demand duals (n,)), like
    ``Cells.solve``; ``optimal``: the last solve's status was CLARABEL's Solved."""

    def __init__(self, m, cells: np.ndarray, options: dict):
        self.m, self.cells, self.options = m, cells.copy(), options
        self.solver = "CLARABEL"
        self.optimal = False
        self._solver = None
        n, k = m.n, m.k
        r, c = np.nonzero(cells)
        self.r, self.c = r, c
        nv = r.size
        pos = np.flatnonzero(m.ah > 0)
        npos = pos.size
        iy, i_s = np.arange(nv), nv + np.arange(n)
        it, ia, ib = nv + n + np.arange(npos), nv + n + npos + np.arange(npos), nv + n + 2 * npos + np.arange(npos)
        self.nx = nv + n + 3 * npos
        rows, cols, vals, b = [], [], [], []
        at = 0

        def add(rr, cc, vv):
            rows.append(np.asarray(rr, dtype=np.int64))
            cols.append(np.asarray(cc, dtype=np.int64))
            vals.append(np.asarray(vv, dtype=float))

        add(at + c, iy, np.ones(nv))  # capacity
        b.append(np.ones(k))
        self.cap_rows = at + np.arange(k)
        at += k
        fc = np.flatnonzero(m.ub[r, c] < 1.0 - 1e-12)  # a cell bound at the whole type repeats the type's row
        add(at + np.arange(fc.size), iy[fc], np.ones(fc.size))
        b.append(m.ub[r, c][fc])
        at += fc.size
        self.fin = np.flatnonzero(m.v.any(axis=1))
        if self.fin.size:
            drow = np.full(n, -1)
            drow[self.fin] = np.arange(self.fin.size)
            sel = drow[r] >= 0
            add(at + drow[r][sel], iy[sel], m.v[r, c][sel])
            b.append(np.ones(self.fin.size))
            self.dem_rows = at + np.arange(self.fin.size)
            at += self.fin.size
        add(at + np.arange(nv), iy, -np.ones(nv))  # y >= 0
        b.append(np.zeros(nv))
        at += nv
        add(at + np.arange(npos), ia, np.ones(npos))  # a + b <= 1
        add(at + np.arange(npos), ib, np.ones(npos))
        b.append(np.ones(npos))
        at += npos
        self.n_nonneg = at
        # s_i <= log(u0_i + Σ A y): cone rows (s_i, 1, ũ_i)
        cone0 = at + 3 * np.arange(n)
        add(cone0, i_s, -np.ones(n))
        self.util_rows = cone0 + 2
        self.coef_entry = sum(len(v) for v in vals)  # the utility coefficients' entries come next, in cell order
        add(self.util_rows[r], iy, -m.A[r, c])
        bl = np.zeros(3 * n)
        bl[1::3] = 1.0
        bl[2::3] = m.u0
        b.append(bl)
        at += 3 * n
        if npos:
            cone1 = at + 6 * np.arange(npos)  # (−s − log â − t, 1, a), then (−t, 1, b)
            add(cone1, i_s[pos], np.ones(npos))
            add(cone1, it, np.ones(npos))
            add(cone1 + 2, ia, -np.ones(npos))
            add(cone1 + 3, it, np.ones(npos))
            add(cone1 + 5, ib, -np.ones(npos))
            bp = np.zeros(6 * npos)
            bp[0::6] = -np.log(m.ah[pos])
            bp[1::6] = 1.0
            bp[4::6] = 1.0
            b.append(bp)
            at += 6 * npos
        self.n_cones = n + 2 * npos
        R, C, V = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
        # the CSC order of every entry, so that a solve can rewrite the utility coefficients in place
        order = sp.csc_matrix((np.arange(1, R.size + 1, dtype=float), (R, C)), shape=(at, self.nx))
        perm = order.data.astype(np.int64) - 1
        if perm.size != R.size:
            raise SolverError("themis auction: the conic form has a repeated entry")  # a bug, never input
        self.A = sp.csc_matrix((V[perm], order.indices.copy(), order.indptr.copy()), shape=(at, self.nx))
        where = np.empty(R.size, dtype=np.int64)
        where[perm] = np.arange(R.size)
        self.coef_pos = where[self.coef_entry + np.arange(nv)]  # A.data index of cell l's utility coefficient
        self.b0 = np.concatenate(b)
        self.q_s, self.q_t, self.pos = i_s, it, pos
        self.zero = np.flatnonzero(m.ah <= 0)

    def _data(self, on: np.ndarray):
        m = self.m
        Ad = self.A.data.copy()
        Ad[self.coef_pos] = -m.A[self.r, self.c] * on[self.r]
        b = self.b0.copy()
        b[self.util_rows] = np.where(on, m.u0, 1.0)
        q = np.zeros(self.nx)
        w = m.w * on
        q[self.q_s[self.zero]] = -w[self.zero]
        q[self.q_t] = w[self.pos]
        return Ad, b, q

    def solve(self, present=None, solver: str | None = None):
        import clarabel

        m = self.m
        on = np.ones(m.n, bool) if present is None else np.asarray(present, bool)
        Ad, b, q = self._data(on)
        self.optimal = False
        try:
            if self._solver is not None:
                self._solver.update(q=q, b=b, A=Ad)
            else:
                A = sp.csc_matrix((Ad, self.A.indices, self.A.indptr), shape=self.A.shape)
                cones = [clarabel.NonnegativeConeT(self.n_nonneg)] + [clarabel.ExponentialConeT()] * self.n_cones
                self._solver = clarabel.DefaultSolver(sp.csc_matrix((self.nx, self.nx)), q, A, b, cones,
                                                      _settings(self.options))
            sol = self._solver.solve()
        except Exception as exc:  # noqa: BLE001 — the caller falls back to cvxpy's program, then ECOS
            self._solver = None
            raise SolverError(f"themis auction (partial allocation): solver CLARABEL failed: {exc}") from exc
        status = sol.status
        if status not in (clarabel.SolverStatus.Solved, clarabel.SolverStatus.AlmostSolved):
            raise SolverError(f"themis auction (partial allocation): solver CLARABEL returned status {status}")
        self.optimal = status == clarabel.SolverStatus.Solved
        x, z = np.asarray(sol.x), np.asarray(sol.z)
        yv, val = m.answer(self.r, self.c, x[: self.r.size], on)
        p = np.abs(z[self.cap_rows])
        qd = np.zeros(m.n)
        if self.fin.size:
            qd[self.fin] = np.abs(z[self.dem_rows])
        return yv, val, p, qd
