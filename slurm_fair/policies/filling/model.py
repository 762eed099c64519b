"""The live HiGHS model of :func:`~slurm_fair.policies.filling.fill` (its module docstring has the algorithm).

A column per (class, type) pair in the model (bounds 0..c_l^j), a level column t (column 0), capacity rows,
demand rows and one level row per class, ``u_l / r_l - t >= 0`` while active, turned into ``u_l / r_l >= f_l``
(t's coefficient set to 0) when frozen. The filling freezes and unfreezes classes in place and re-solves warm;
every solve with pricing adds the missing pairs with a positive reduced cost (column generation, ``columns``)
until none would enter. Scaled units: GPUs in units of ``s``, levels as the caller scaled ``A``.
"""

from __future__ import annotations

import numpy as np

from ...errors import SolverError
from ...stdio import new_highs
from . import columns

PTOL = 1e-9  # HiGHS primal/dual feasibility tolerance (scaled units)
TCOL = 0  # the level column t


class Model:
    """The filling's LP on one HiGHS instance ``h``: which classes are still rising (``active``), the levels the
    frozen ones hold (``flevel``), the pairs in the model (``rows``, ``cols``: pair c is column c + 1) and the
    LP solves so far (``lps``)."""

    def __init__(self, A: np.ndarray, usable: np.ndarray, inset: np.ndarray, type_cap: np.ndarray,
                 capacity: np.ndarray, demand: np.ndarray, dem_s: np.ndarray, idx: np.ndarray, act0: np.ndarray,
                 s: float, what: str) -> None:
        import highspy

        n, k = A.shape
        self.A, self.usable, self.inset, self.type_cap, self.capacity = A, usable, inset, type_cap, capacity
        self.idx, self.act0, self.s, self.what, self.n, self.k = idx, act0, s, what, n, k
        self.rows, self.cols = np.nonzero(inset)  # pair c = (rows[c], cols[c]) is HiGHS column c + 1; t is column 0
        self.nv = self.rows.size
        self.inf = inf = highspy.kHighsInf
        self.h = h = new_highs()
        for opt, val in (("primal_feasibility_tolerance", PTOL), ("dual_feasibility_tolerance", PTOL),
                         ("simplex_strategy", 4)):
            h.setOptionValue(opt, val)
        nv, rows, cols = self.nv, self.rows, self.cols
        self.ub = self.ub_of(rows, cols)
        h.addCols(1, np.array([1.0]), np.array([0.0]), np.array([inf]), 0, np.array([], dtype=np.int32),
                  np.array([], dtype=np.int32), np.array([], dtype=float))
        h.addCols(nv, np.zeros(nv), np.zeros(nv), self.ub, 0, np.array([], dtype=np.int32),
                  np.array([], dtype=np.int32), np.array([], dtype=float))
        h.changeObjectiveSense(highspy.ObjSense.kMaximize)

        col_of_type = [np.flatnonzero(cols == j) + 1 for j in range(k)]
        col_of_row = {int(i): np.flatnonzero(rows == i) + 1 for i in idx}
        types = [j for j in range(k) if usable[:, j].any()]
        self._add_rows(types, np.full(len(types), -inf), capacity[types] / s,
                       lambda j: (col_of_type[j], np.ones(col_of_type[j].size)))
        self.cap_row = {j: r for r, j in enumerate(types)}
        fin = [int(i) for i in idx if np.isfinite(demand[i])]
        self._add_rows(fin, np.full(len(fin), -inf), dem_s[fin], lambda i: (col_of_row[i], np.ones(col_of_row[i].size)))
        self.dem_row = {i: len(types) + r for r, i in enumerate(fin)}
        self.base = len(types) + len(fin)
        self.lev_row = {int(i): self.base + r for r, i in enumerate(idx)}
        self._add_rows([int(i) for i in idx], np.zeros(idx.size), np.full(idx.size, inf),
                       lambda i: (np.append(col_of_row[i], TCOL), np.append(A[i, cols[col_of_row[i] - 1]], -1.0)))
        self.types_a = np.array(types, dtype=int)
        self.fin_a = np.array(fin, dtype=int)
        self.cost = np.zeros((n, k))  # objective coefficient of each pair (the final solve's weights)
        self.priced = 0  # pricing rounds that added pairs

        self.active = act0.copy()
        self.flevel = np.zeros(n)  # frozen levels (scaled)
        self.lps = 0

    def ub_of(self, r, c):
        u = np.minimum(self.type_cap[r, c], self.capacity[c]) / self.s
        return np.where(np.isfinite(u), u, self.inf)

    def _add_rows(self, groups, lower, upper, vals_of):
        starts, index, values = [], [], []
        for g in groups:
            starts.append(len(index))
            cs, vs = vals_of(g)
            index.extend(cs)
            values.extend(vs)
        self.h.addRows(len(groups), np.asarray(lower, dtype=float), np.asarray(upper, dtype=float), len(index),
                       np.asarray(starts, dtype=np.int32), np.asarray(index, dtype=np.int32),
                       np.asarray(values, dtype=float))

    def set_t_bound(self, bound: np.ndarray) -> None:
        b = bound[self.active]
        self.h.changeColBounds(TCOL, 0.0, (float(b.max()) if np.isfinite(b).all() else self.inf) if b.size else 0.0)

    def add_missing(self) -> bool:
        """Price the pairs not in the model with the last solve's duals (reduced cost c - a·y, entering
        at its lower bound 0 when positive in this max problem); add those that would enter."""
        h, n, k, inset, usable, A = self.h, self.n, self.k, self.inset, self.usable, self.A
        if inset.sum() == usable.sum():
            return False
        y = np.asarray(h.getSolution().row_dual)
        yc = np.zeros(k)
        yc[self.types_a] = y[:self.types_a.size]
        yd = np.zeros(n)
        yd[self.fin_a] = y[self.types_a.size:self.types_a.size + self.fin_a.size]
        yl = np.zeros(n)
        yl[self.idx] = y[self.base:self.base + self.idx.size]
        rc = self.cost - yc[None, :] - yd[:, None] - A * yl[:, None]
        r, c = np.nonzero(usable & ~inset & ((rc > PTOL) | (self.priced >= columns.CG_ROUNDS)))
        if r.size == 0:
            return False
        self.priced += 1
        inset[r, c] = True
        u = self.ub_of(r, c)
        starts, index, values = [], [], []
        for ri, ci in zip(r.tolist(), c.tolist()):
            starts.append(len(index))
            index.append(self.cap_row[ci])
            values.append(1.0)
            if ri in self.dem_row:
                index.append(self.dem_row[ri])
                values.append(1.0)
            index.append(self.lev_row[ri])
            values.append(float(A[ri, ci]))
        h.addCols(r.size, self.cost[r, c], np.zeros(r.size), u, len(index), np.asarray(starts, dtype=np.int32),
                  np.asarray(index, dtype=np.int32), np.asarray(values, dtype=float))
        self.rows, self.cols = np.concatenate([self.rows, r]), np.concatenate([self.cols, c])
        self.ub = np.concatenate([self.ub, u])
        self.nv = self.rows.size
        return True

    def run(self, limit: int | None = None, price: bool = True):
        """Solve; with ``price``, until no missing pair would enter (optimal over all pairs). A batch try
        runs without: its restricted optimum is feasible for the full LP, so a success there is one."""
        import highspy

        while True:
            self.lps += 1
            self.h.setOptionValue("simplex_iteration_limit", limit if limit else 2**31 - 1)
            self.h.run()
            status = self.h.getModelStatus()
            if not price or status != highspy.HighsModelStatus.kOptimal or not self.add_missing():
                return status

    def freeze(self, i: int, f: float) -> None:
        self.h.changeCoeff(self.lev_row[i], TCOL, 0.0)
        self.h.changeRowBounds(self.lev_row[i], f, self.inf)  # exact; solve_exact() relaxes it if HiGHS cannot hold it
        self.active[i] = False
        self.flevel[i] = f

    def unfreeze(self, i: int) -> None:
        self.h.changeCoeff(self.lev_row[i], TCOL, -1.0)
        self.h.changeRowBounds(self.lev_row[i], 0.0, self.inf)
        self.active[i] = True

    def x_now(self) -> np.ndarray:
        v = np.asarray(self.h.getSolution().col_value)
        x = np.zeros((self.n, self.k))
        x[self.rows, self.cols] = np.maximum(v[1:self.nv + 1], 0.0) * self.s
        return x

    def solve_exact(self, where: str) -> None:
        """Solve; on a non-optimal status a second exact try: from scratch, then with the frozen levels
        held to 1e-7 / 1e-6 relative (each comes from an earlier solve, feasible only to the solver's
        tolerance; the caller's verify() checks the result). Otherwise SolverError with the numbers."""
        import highspy

        h = self.h
        status = self.run()
        for eps in (0.0, 1e-7, 1e-6):
            if status == highspy.HighsModelStatus.kOptimal:
                return
            for i in np.flatnonzero(~self.active & self.act0) if eps else ():
                h.changeRowBounds(self.lev_row[int(i)], self.flevel[i] * (1 - eps) - 2 * PTOL, self.inf)
            h.clearSolver()
            status = self.run()
        if status != highspy.HighsModelStatus.kOptimal:
            raise SolverError(f"{self.what}: HiGHS returned status {h.modelStatusToString(status)!r} at {where}")
