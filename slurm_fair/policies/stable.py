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
                sum_l S_l . x_l >= opt * (1 - STABLE_REL)          (the first stage's optimum, kept)
                capacity and every envy row of eq. 10               (constraint generation, as in the first stage)

Only rows (tenant, class) that the previous allocation knows get a distance term; a new class is free (its
``t`` has no column), a vanished one is simply absent. The result is optimal for eq. 10 up to ``STABLE_REL`` in the
objective (1e-12 relative plus the solver's 1e-9 feasibility tolerance; the tests check 1e-7) and, among those, nearest to ``p`` in L1. With ``p`` itself an
optimum of the same problem, the result is ``p``.

:class:`Previous` is the typed form of last round's allocation, kept in the policy's warm start as entries
``("x", tenant, class, gpu_type, gpus)`` and, per water-filling step, ``("x", tenant, class, gpu_type, gpus, step)``
(JSON-able; readers of the other warm entries skip them). Why the steps: oef-coop solves eq. 10 once per
water-filling step, and last round's *final* allocation is not an optimum of a step (a class frozen at its caps
holds less than its step gave it), so with only the final allocation an unchanged problem could still land on
another optimum (measured in the simulator: 6 of 216 account-type-rounds of unchanged problems). The second
stage of cooperative OEF is :func:`.nearest.nearest` (on arrays, beside the solver).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..model import Allocation, VirtualUsers

TAG = "x"


Row = Mapping[tuple[str, str], Mapping[str, float]]  # (tenant, class) -> type -> GPUs


def _entries(rows: Row, tail: tuple = ()) -> tuple[tuple, ...]:
    """``("x", tenant, class, type, gpus, *tail)`` per nonzero value, ``type`` "" for a row of zeros."""
    out = []
    for (t, c), row in sorted(rows.items()):
        vals = [(g, v) for g, v in sorted(row.items()) if v > 0]
        out.extend((TAG, t, c, g, round(float(v), 12)) + tail for g, v in vals)
        if not vals:
            out.append((TAG, t, c, "", 0.0) + tail)
    return tuple(out)


@dataclass(frozen=True)
class Previous:
    """Last round's fractional GPUs per (tenant, class) and GPU type (``x``), and for a water-filling policy
    the allocation of every step (``steps[s]``: the rows active in step ``s`` and what that step gave them),
    so that a step of an unchanged problem gets exactly its own last optimum as the point to stay near."""

    x: Row
    steps: tuple[Row, ...] = ()

    @classmethod
    def of(cls, alloc: Allocation, steps: tuple[Row, ...] = ()) -> "Previous":
        vu = alloc.vu
        return cls({(t, c): {g: float(alloc.x[i, j]) for j, g in enumerate(vu.gpu_types)}
                    for i, (t, c) in enumerate(zip(vu.tenant, vu.cls))}, steps)

    def entries(self) -> tuple[tuple, ...]:
        """The warm-start entries: ``("x", tenant, class, type, gpus)`` for ``x`` and ``("x", tenant, class,
        type, gpus, step)`` for the steps (zeros left out; a row of zeros as type "")."""
        out = _entries(self.x)
        for n, rows in enumerate(self.steps):
            out += _entries(rows, (n,))
        return out

    @classmethod
    def from_warm(cls, warm: Any) -> "Previous | None":
        """The ``("x", ...)`` entries of a warm start (None: it has none). Malformed entries are skipped."""
        out: dict[tuple[str, str], dict[str, float]] = {}
        steps: dict[int, dict[tuple[str, str], dict[str, float]]] = {}
        for e in warm or ():
            if not is_entry(e):
                continue
            t, c, g, v = e[1:5]
            if not (isinstance(t, str) and isinstance(c, str) and isinstance(g, str)):
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                continue
            if len(e) == 6:
                n = e[5]
                if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < 10_000:
                    continue
                row = steps.setdefault(n, {}).setdefault((t, c), {})
            else:
                row = out.setdefault((t, c), {})
            if g:
                row[g] = float(v)
        if not out:
            return None
        return cls(out, tuple(steps.get(n, {}) for n in range(max(steps) + 1)) if steps else ())

    def array(self, vu: VirtualUsers, step: int | None = None) -> np.ndarray:
        """(n, k) previous GPUs of ``vu``'s rows; NaN on the rows of classes it does not know (new ones). A known
        class has 0 on a type it did not hold (or a type that is new). ``step``: the rows step ``step`` had last
        round, the others (or all, without a record of that step) from ``x``."""
        p = np.full((vu.n, vu.k), np.nan)
        at = self.steps[step] if step is not None and 0 <= step < len(self.steps) else {}
        for i, key in enumerate(zip(vu.tenant, vu.cls)):
            row = at.get(key, self.x.get(key))
            if row is not None:
                p[i] = [float(row.get(g, 0.0)) for g in vu.gpu_types]
        return p


def is_entry(e: Any) -> bool:
    """Whether a warm-start entry is one of :class:`Previous`'s."""
    return isinstance(e, (list, tuple)) and len(e) in (5, 6) and e[0] == TAG


LEVEL_REL = 1e-9  # second stage of the filling policies: relative slack of every class's throughput


def nearest_levels(speed: np.ndarray, capacity: np.ndarray, demand: np.ndarray, type_cap: np.ndarray,
                   x_opt: np.ndarray, prev: np.ndarray, exact: bool = False, total: bool = False,
                   rel: float = LEVEL_REL) -> np.ndarray:
    """Second stage for the progressive-filling policies (gavel, oef-noncoop): every class keeps at least its
    throughput in ``x_opt`` (to ``LEVEL_REL``), within capacity, demands and type caps, and of those
    allocations the one nearest in L1 to ``prev`` (NaN rows: no distance term) is returned.

    Max-min fairness on a convex set has one leximin vector of levels; an allocation whose levels are all at
    least those of the leximin one has exactly those levels (a larger one would be lexicographically larger),
    so the result is another allocation of the same levels: only the GPUs behind them move. ``exact``: every
    class's throughput is also held at most its throughput in ``x_opt`` (oef-noncoop: eq. 9's equal levels,
    not only the leximin floor). ``total`` (max-throughput): only the total throughput is kept (at least
    ``(1 - rel)`` times that of ``x_opt``), not each class's. Returns ``x_opt``
    when no row is known. Raises SolverError if HiGHS does not solve it (the caller keeps ``x_opt``)."""
    import highspy

    from ..errors import SolverError
    from ..stdio import new_highs

    S = np.asarray(speed, dtype=float)
    n, k = S.shape
    known = ~np.isnan(prev).any(axis=1)
    if n == 0 or k == 0 or not known.any():
        return x_opt
    cap = np.asarray(capacity, dtype=float)
    ub = np.where((S > 0) & (cap > 0)[None, :], np.minimum(type_cap, cap[None, :]), 0.0)
    vl, vj = np.nonzero(ub > 0)
    nv = int(vl.size)
    if nv == 0:
        return x_opt
    inf = highspy.kHighsInf
    h = new_highs()
    h.setOptionValue("primal_feasibility_tolerance", 1e-9)
    h.setOptionValue("dual_feasibility_tolerance", 1e-9)
    h.addCols(nv, np.zeros(nv), np.zeros(nv), ub[vl, vj], 0, np.zeros(nv, dtype=np.int32),
              np.zeros(0, dtype=np.int32), np.zeros(0))
    dv = np.nonzero(known[vl])[0]
    nd = int(dv.size)
    h.addCols(nd, np.ones(nd), np.zeros(nd), np.full(nd, inf), 0, np.zeros(nd, dtype=np.int32),
              np.zeros(0, dtype=np.int32), np.zeros(0))
    order = np.argsort(vj, kind="stable").astype(np.int32)
    starts = np.searchsorted(vj[order], np.arange(k)).astype(np.int32)
    h.addRows(k, np.full(k, -inf), cap, nv, starts, order, np.ones(nv))
    ustarts = np.searchsorted(vl, np.arange(n)).astype(np.int32)
    dem = np.where(np.isfinite(demand), demand, inf)
    h.addRows(n, np.full(n, -inf), dem.astype(float), nv, ustarts, np.arange(nv, dtype=np.int32), np.ones(nv))
    u = (S * x_opt).sum(axis=1)
    if total:
        tot = float(u.sum())
        h.addRows(1, np.array([tot - rel * max(1.0, tot)]), np.array([inf]), nv, np.zeros(1, dtype=np.int32),
                  np.arange(nv, dtype=np.int32), S[vl, vj])
    else:
        lo = np.maximum(u - rel * np.maximum(1.0, u), 0.0)
        hi = u + rel * np.maximum(1.0, u) if exact else np.full(n, inf)
        h.addRows(n, lo, hi, nv, ustarts, np.arange(nv, dtype=np.int32), S[vl, vj])
    p = prev[vl[dv], vj[dv]]
    add_distance_rows(h, p, dv, nv)
    h.changeObjectiveSense(highspy.ObjSense.kMinimize)
    h.run()
    status = h.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise SolverError(f"stable optimum (levels): HiGHS ended with {h.modelStatusToString(status)}")
    x = np.zeros((n, k))
    x[vl, vj] = np.asarray(h.getSolution().col_value)[:nv]
    return np.clip(x, 0.0, ub)


def add_distance_rows(h: Any, p: np.ndarray, dv: np.ndarray, nv: int) -> None:
    """The L1 distance rows of a second stage on a HiGHS model: for each variable ``dv[k]`` with last round's
    value ``p[k]``, its distance column ``nv + k`` satisfies ``t - x >= -p`` and ``t + x >= p``."""
    inf = float("inf")
    nd = len(dv)
    idx = np.empty(2 * nd, dtype=np.int32)
    idx[0::2] = nv + np.arange(nd)
    idx[1::2] = dv
    st = (2 * np.arange(nd)).astype(np.int32)
    h.addRows(nd, -p, np.full(nd, inf), 2 * nd, st, idx, np.tile([1.0, -1.0], nd))
    h.addRows(nd, p, np.full(nd, inf), 2 * nd, st, idx, np.tile([1.0, 1.0], nd))
