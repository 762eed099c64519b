"""Stable optima: among a policy's optimal allocations, the one nearest to last round's (issue 28, item 1).

The policies' LPs are degenerate: cooperative OEF (eq. 10) has many allocations with the same total throughput
(users of equal speeds can swap GPUs of two types, a group can take its share on either of two types...), and
the vertex a simplex returns depends on the order of the rows, on the rows constraint generation happened to
add, on the warm start. Nothing made the solver prefer last round's allocation, so a guarantee could move
from round to round while nothing it depends on moved (the issue: 925e2b's V100 guarantee 4 -> 3 -> 4 -> 2 ->
6 -> 0).

Second stage (lexicographic optimum): keep the first objective at its optimum value and minimize the L1
distance to the previous allocation::

    minimize    sum_{l, j known} t_lj
    subject to  t_lj >= x_lj - p_lj,  t_lj >= p_lj - x_lj        (L1 distance to the previous allocation p)
                sum_l S_l . x_l >= opt * (1 - REL)                 (the first stage's optimum, kept)
                capacity and every envy row of eq. 10               (constraint generation, as in the first stage)

Only rows (tenant, class) that the previous allocation knows get a distance term; a new class is free (its
``t`` has no column), a vanished one is simply absent. The result is optimal for eq. 10 up to ``REL`` in the
objective (1e-12 relative plus the solver's 1e-9 feasibility tolerance; the tests check 1e-7) and, among those, nearest to ``p`` in L1. With ``p`` itself an
optimum of the same problem, the result is ``p``.

:class:`Previous` is the typed form of last round's allocation, kept in the policy's warm start as entries
``("x", tenant, class, gpu_type, gpus)`` (JSON-able; readers of the other warm entries skip them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..errors import SolverError
from ..model import Allocation, VirtualUsers
from ..stdio import new_highs

REL = 1e-12  # relative slack of the first objective in the second stage (HiGHS tolerances are 1e-9 absolute)
_TOL = 1e-9  # envy violation (scaled units) accepted as satisfied in the second stage
_MAX_ROUNDS = 10_000
TAG = "x"


@dataclass(frozen=True)
class Previous:
    """Last round's fractional GPUs per (tenant, class) and GPU type."""

    x: Mapping[tuple[str, str], Mapping[str, float]]

    @classmethod
    def of(cls, alloc: Allocation) -> "Previous":
        vu = alloc.vu
        return cls({(t, c): {g: float(alloc.x[i, j]) for j, g in enumerate(vu.gpu_types)}
                    for i, (t, c) in enumerate(zip(vu.tenant, vu.cls))})

    def entries(self) -> tuple[tuple[str, str, str, str, float], ...]:
        """The warm-start entries ``("x", tenant, class, type, gpus)`` (zeros left out)."""
        return tuple((TAG, t, c, g, round(v, 12)) for (t, c), row in sorted(self.x.items())
                     for g, v in sorted(row.items()) if v > 0) + tuple(
            (TAG, t, c, "", 0.0) for (t, c), row in sorted(self.x.items()) if not any(v > 0 for v in row.values()))

    @classmethod
    def from_warm(cls, warm: Any) -> "Previous | None":
        """The ``("x", ...)`` entries of a warm start (None: it has none). Malformed entries are skipped."""
        out: dict[tuple[str, str], dict[str, float]] = {}
        for e in warm or ():
            if not (isinstance(e, (list, tuple)) and len(e) == 5 and e[0] == TAG):
                continue
            _, t, c, g, v = e
            if not (isinstance(t, str) and isinstance(c, str) and isinstance(g, str)):
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                continue
            row = out.setdefault((t, c), {})
            if g:
                row[g] = float(v)
        return cls(out) if out else None

    def array(self, vu: VirtualUsers) -> np.ndarray:
        """(n, k) previous GPUs of ``vu``'s rows; NaN on the rows of classes it does not know (new ones). A known
        class has 0 on a type it did not hold (or a type that is new)."""
        p = np.full((vu.n, vu.k), np.nan)
        for i, key in enumerate(zip(vu.tenant, vu.cls)):
            row = self.x.get(key)
            if row is not None:
                p[i] = [float(row.get(g, 0.0)) for g in vu.gpu_types]
        return p


def is_entry(e: Any) -> bool:
    """Whether a warm-start entry is one of :class:`Previous`'s."""
    return isinstance(e, (list, tuple)) and len(e) == 5 and e[0] == TAG


def nearest_coop(S: np.ndarray, w: np.ndarray, c: np.ndarray, x_opt: np.ndarray, prev: np.ndarray,
                 rows: tuple[np.ndarray, np.ndarray] | None = None, cuts_per_user: int = 2) -> tuple[np.ndarray, int]:
    """Second stage for cooperative OEF (eq. 10 on ``S``, ``w``, ``c``): of the allocations with total
    throughput >= (1 - REL) * S.x_opt that are envy-free, the one with the least L1 distance to ``prev``
    (NaN rows: no distance term). ``rows``: envy pairs (l, i) to start from (e.g. the first stage's final
    model). Returns (x, LP rounds). Raises SolverError if HiGHS fails."""
    import highspy

    from ._coop_fast import _add_envy_rows, envy_matrix

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
    h.addRows(1, np.array([opt - REL * max(1.0, abs(opt))]), np.array([inf]), nv, np.zeros(1, dtype=np.int32),
              np.arange(nv, dtype=np.int32), S[vl, vj].astype(float))
    # t - x >= -p and t + x >= p
    p = prev[vl[dv], vj[dv]]
    idx = np.empty(2 * nd, dtype=np.int32)
    idx[0::2] = nv + np.arange(nd)
    idx[1::2] = dv
    st = (2 * np.arange(nd)).astype(np.int32)
    h.addRows(nd, -p, np.full(nd, inf), 2 * nd, st, idx, np.tile([1.0, -1.0], nd))
    h.addRows(nd, p, np.full(nd, inf), 2 * nd, st, idx, np.tile([1.0, 1.0], nd))
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
        bad = (V[li, ii] > _TOL) & ~inmodel[li, ii]
        li, ii = li[bad], ii[bad]
        if li.size == 0:
            li, ii = np.nonzero((V > _TOL) & ~inmodel)
            if li.size == 0:
                break
        if rounds >= _MAX_ROUNDS:
            raise SolverError(f"stable optimum: no convergence after {rounds} rounds")
        inmodel[li, ii] = True
        _add_envy_rows(h, S, ws, var, li, ii, inf)
        if rounds == 1:
            h.setOptionValue("presolve", "off")
    return X, rounds
