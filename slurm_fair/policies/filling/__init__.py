"""Exact progressive filling on one live HiGHS model (used by ``oef-noncoop`` and ``gavel`` by default).

Problem, on arrays: classes l with normalized speed S_l (0 = unusable), reference r_l > 0 (the weight π_l
for non-cooperative OEF, the capped equal share's throughput e_l for Gavel), total demand d_l and per-type
caps c_l^j; capacity m_j. The *level* of l is u_l / r_l with u_l = Σ_j S_l^j x_l^j. Progressive filling
raises one common level; a class that cannot rise any more (the others keeping theirs) freezes; repeat.

One HiGHS model holds it all: a column per usable (class, type) pair (bounds 0..c_l^j), a level column t,
capacity rows, demand rows and one level row per class, ``u_l / r_l - t >= 0`` while active, turned into
``u_l / r_l >= f_l`` (t's coefficient set to 0) when frozen. Every stage changes bounds and coefficients in
place and re-solves warm from the previous basis. Scaled: GPUs in units of the mean capacity per class, levels
in units of a typical level, so coefficients are O(1).

Few stages (notes/progressive-filling.md):

* Every class has a valid upper bound b_l on its final level: first its own best within its caps (fastest
  types first, at most c_l^j each and d_l in all); after each stage LP also the *price bound*: with any
  prices p >= 0 on the GPU types, Σ_j p_j x^j summed over all classes is at most p·m, every other class w must
  spend at least the cheapest cost at prices p of its current level L_w within its demand (its final level is at least
  that), and l gets the most level its remaining budget buys within its demand (best single type or pair,
  closed form). Relaxing caps in both only loosens the bound, so it stays valid; the stage LP's capacity
  duals make it tight.
* Batch lemma: if "frozen classes at their levels, every active class at least min(t', b_l)" is feasible,
  every active class with b_l <= t' ends exactly at b_l (max-min fairness on a convex set). Tried with the
  m smallest bounds frozen at b, m doubling, each try one warm LP.
  A try that falls short (its level t below the last pinned bound) still proves the lemma for t' = t: its
  point holds every pinned class at its bound and the others at t or more, so the pinned classes with bound
  <= t stay frozen. The cold first solve is a stage, not a try (a pinned class makes it much harder).
* In each stage LP (max t), a class whose level row has a positive dual is blocked (complementary
  slackness: its row is tight in every optimum), and at least one has (the duals of the active level rows
  sum to 1).
* Column generation (when classes can use more than ``columns.CG_MIN`` types on average): the model starts with a
  few (class, type) pairs per class (``columns.first_columns``); after each exact solve the missing pairs are priced
  with its duals and those with a positive reduced cost are added (warm re-solve), and after ``columns.CG_ROUNDS``
  such rounds all the rest, so every stage, successful try and final solve is optimal over all pairs. A batch
  try is priced only when it falls short (a success over some pairs is one over all).

The result is the leximin (max-min fair) vector of levels; ``oef-noncoop`` derives eq. 9's common level
from it, ``gavel`` hands out idle GPUs after it. The callers verify their result against the definition
(:func:`.check.verify`) before using it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import SolverError
from ...stdio import new_highs
from . import columns
from .bounds import own_best, price_bounds
from .check import at_caps, below_caps, verify  # noqa: F401  (the callers' check, with the filling)

_PTOL = 1e-9  # HiGHS primal/dual feasibility tolerance (scaled units)
_TRY_ITERS = 3000  # simplex iterations a batch try may take before it counts as "too far"


@dataclass(frozen=True)
class Filled:
    x: np.ndarray  # (n, k) GPUs
    frozen: np.ndarray  # (n,) bool: frozen before the last level (capped / bottleneck)
    cap_binding: np.ndarray  # (n,) bool: one of its caps had a positive dual in the stage LP it froze in
    level: float  # the last common level (u_l / r_l of the classes never frozen), unscaled; stopped early: the highest frozen level
    stages: int  # stage LPs
    lps: int  # LP solves in all (stages, batch tries, final)


def fill(speed: np.ndarray, ref: np.ndarray, capacity: np.ndarray, demand: np.ndarray, type_cap: np.ndarray,
         what: str = "progressive filling", common_stop: bool = False) -> Filled:
    """Progressive filling of u_l / ref_l (see the module docstring). Rows with ref <= 0 or demand <= 0 get
    nothing and count as frozen. ``common_stop`` (oef-noncoop): stop as soon as eq. 9's common level is
    decided (:func:`_common_decided`); the result then holds the leximin levels below that level only."""
    import highspy

    speed = np.asarray(speed, dtype=float)
    n, k = speed.shape
    ref = np.asarray(ref, dtype=float)
    capacity = np.asarray(capacity, dtype=float)
    demand = np.asarray(demand, dtype=float)
    type_cap = np.asarray(type_cap, dtype=float)
    usable = (speed > 0) & (type_cap > 0) & (capacity[None, :] > 0)
    act0 = (ref > 0) & (demand > 1e-9) & usable.any(axis=1)
    usable &= act0[:, None]
    x_out = np.zeros((n, k))
    frozen_out = ~act0
    idx = np.flatnonzero(act0)
    if idx.size == 0:
        return Filled(x_out, frozen_out, np.zeros(n, dtype=bool), 0.0, 0, 0)

    # ---- scaling: GPUs in units of s, levels in units of T0
    s = max(float(capacity.sum()) / idx.size, 1e-9)
    own = own_best(speed, np.where(np.isfinite(demand), demand, np.inf), np.where(usable, type_cap, 0.0))
    with np.errstate(invalid="ignore", divide="ignore"):  # classes with ref 0 have no usable type: A = 0
        typical = s * speed[idx].max(axis=1) / ref[idx]
        T0 = float(np.median(typical))
        A = np.where(usable, speed * s / (ref[:, None] * T0), 0.0)  # scaled level per scaled GPU
    bound = np.full(n, np.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        bound[idx] = own[idx] / (ref[idx] * T0)
    dem_s = demand / s

    # Column generation: the model starts with a few (class, type) pairs per class (``columns.first_columns``);
    # after every optimal solve the missing pairs are priced with its duals and those with a positive reduced
    # cost are added, so each answer used is optimal over all pairs (the full LP's optimum).
    inset = columns.first_columns(A, dem_s, type_cap / s, usable, capacity / s) if usable.sum() > columns.CG_MIN * idx.size else usable.copy()
    rows, cols = np.nonzero(inset)  # pair c = (rows[c], cols[c]) is HiGHS column c + 1; t is column 0
    nv = rows.size
    tcol = 0
    inf = highspy.kHighsInf
    h = new_highs()
    for opt, val in (("primal_feasibility_tolerance", _PTOL), ("dual_feasibility_tolerance", _PTOL),
                     ("simplex_strategy", 4)):
        h.setOptionValue(opt, val)

    def ub_of(r, c):
        u = np.minimum(type_cap[r, c], capacity[c]) / s
        return np.where(np.isfinite(u), u, inf)

    ub = ub_of(rows, cols)
    h.addCols(1, np.array([1.0]), np.array([0.0]), np.array([inf]), 0, np.array([], dtype=np.int32),
              np.array([], dtype=np.int32), np.array([], dtype=float))
    h.addCols(nv, np.zeros(nv), np.zeros(nv), ub, 0, np.array([], dtype=np.int32), np.array([], dtype=np.int32),
              np.array([], dtype=float))
    h.changeObjectiveSense(highspy.ObjSense.kMaximize)

    def add_rows(groups, lower, upper, vals_of):
        starts, index, values = [], [], []
        for g in groups:
            starts.append(len(index))
            cs, vs = vals_of(g)
            index.extend(cs)
            values.extend(vs)
        h.addRows(len(groups), np.asarray(lower, dtype=float), np.asarray(upper, dtype=float), len(index),
                  np.asarray(starts, dtype=np.int32), np.asarray(index, dtype=np.int32), np.asarray(values, dtype=float))

    col_of_type = [np.flatnonzero(cols == j) + 1 for j in range(k)]
    col_of_row = {int(i): np.flatnonzero(rows == i) + 1 for i in idx}
    types = [j for j in range(k) if usable[:, j].any()]
    add_rows(types, np.full(len(types), -inf), capacity[types] / s, lambda j: (col_of_type[j], np.ones(col_of_type[j].size)))
    cap_row = {j: r for r, j in enumerate(types)}
    fin = [int(i) for i in idx if np.isfinite(demand[i])]
    add_rows(fin, np.full(len(fin), -inf), dem_s[fin], lambda i: (col_of_row[i], np.ones(col_of_row[i].size)))
    dem_row = {i: len(types) + r for r, i in enumerate(fin)}
    base = len(types) + len(fin)
    lev_row = {int(i): base + r for r, i in enumerate(idx)}
    add_rows([int(i) for i in idx], np.zeros(idx.size), np.full(idx.size, inf),
             lambda i: (np.append(col_of_row[i], tcol), np.append(A[i, cols[col_of_row[i] - 1]], -1.0)))
    types_a = np.array(types, dtype=int)
    fin_a = np.array(fin, dtype=int)
    cost = np.zeros((n, k))  # objective coefficient of each pair (the final solve's weights)
    priced = [0]  # pricing rounds that added pairs

    active = act0.copy()
    capfz = np.zeros(n, dtype=bool)
    flevel = np.zeros(n)  # frozen levels (scaled)
    lps = 0
    stages = 0

    def set_t_bound():
        b = bound[active]
        h.changeColBounds(tcol, 0.0, (float(b.max()) if np.isfinite(b).all() else inf) if b.size else 0.0)

    def add_missing() -> bool:
        """Price the pairs not in the model with the last solve's duals (reduced cost c - a·y, entering
        at its lower bound 0 when positive in this max problem); add those that would enter."""
        nonlocal rows, cols, ub, nv
        if inset.sum() == usable.sum():
            return False
        y = np.asarray(h.getSolution().row_dual)
        yc = np.zeros(k)
        yc[types_a] = y[:types_a.size]
        yd = np.zeros(n)
        yd[fin_a] = y[types_a.size:types_a.size + fin_a.size]
        yl = np.zeros(n)
        yl[idx] = y[base:base + idx.size]
        rc = cost - yc[None, :] - yd[:, None] - A * yl[:, None]
        r, c = np.nonzero(usable & ~inset & ((rc > _PTOL) | (priced[0] >= columns.CG_ROUNDS)))
        if r.size == 0:
            return False
        priced[0] += 1
        inset[r, c] = True
        u = ub_of(r, c)
        starts, index, values = [], [], []
        for ri, ci in zip(r.tolist(), c.tolist()):
            starts.append(len(index))
            index.append(cap_row[ci])
            values.append(1.0)
            if ri in dem_row:
                index.append(dem_row[ri])
                values.append(1.0)
            index.append(lev_row[ri])
            values.append(float(A[ri, ci]))
        h.addCols(r.size, cost[r, c], np.zeros(r.size), u, len(index), np.asarray(starts, dtype=np.int32),
                  np.asarray(index, dtype=np.int32), np.asarray(values, dtype=float))
        rows, cols, ub = np.concatenate([rows, r]), np.concatenate([cols, c]), np.concatenate([ub, u])
        nv = rows.size
        return True

    def run(limit: int | None = None, price: bool = True):
        """Solve; with ``price``, until no missing pair would enter (optimal over all pairs). A batch try
        runs without: its restricted optimum is feasible for the full LP, so a success there is one."""
        nonlocal lps
        while True:
            lps += 1
            h.setOptionValue("simplex_iteration_limit", limit if limit else 2**31 - 1)
            h.run()
            status = h.getModelStatus()
            if not price or status != highspy.HighsModelStatus.kOptimal or not add_missing():
                return status

    def freeze(i: int, f: float):
        h.changeCoeff(lev_row[i], tcol, 0.0)
        h.changeRowBounds(lev_row[i], f, inf)  # exact; solve_exact() relaxes it if HiGHS cannot hold it
        active[i] = False
        flevel[i] = f

    def unfreeze(i: int):
        h.changeCoeff(lev_row[i], tcol, -1.0)
        h.changeRowBounds(lev_row[i], 0.0, inf)
        active[i] = True

    def x_now() -> np.ndarray:
        v = np.asarray(h.getSolution().col_value)
        x = np.zeros((n, k))
        x[rows, cols] = np.maximum(v[1:nv + 1], 0.0) * s
        return x

    def batch() -> None:
        """Freeze every active class the batch lemma pins to its bound (doubling m, bounded tries)."""
        m, tries = 1, 0
        while tries < 12:
            cand = np.flatnonzero(active & np.isfinite(bound))
            if cand.size == 0:
                return
            cand = cand[np.argsort(bound[cand], kind="stable")][:m]
            for i in cand:
                freeze(int(i), float(bound[i]))
            set_t_bound()
            tries += 1
            status = run(_TRY_ITERS, price=False)
            ok = status == highspy.HighsModelStatus.kOptimal
            t = float(h.getSolution().col_value[tcol]) if ok else -1.0
            need = float(bound[cand[-1]])
            if ok and active.any() and t < need - 1e-9 * max(1.0, need) and add_missing():
                # too far over the pairs in the model: make it exact over all of them (a success in the
                # model is one in the full LP, its point being feasible there)
                status = run(_TRY_ITERS)
                ok = status == highspy.HighsModelStatus.kOptimal
                t = float(h.getSolution().col_value[tcol]) if ok else -1.0
            if ok and (not active.any() or t >= need - 1e-9 * max(1.0, need)):
                x_last[...] = x_now()  # holds every frozen level, also those frozen just below
                for i in np.flatnonzero(active & (bound <= t)):
                    freeze(int(i), float(bound[i]))
                if decided():
                    return
                m *= 2
            else:
                # too far. An optimal try still proves the lemma for t' = t (its point holds every
                # pinned class at its bound, the others at t or more): the pinned ones with bound <= t stay.
                keep = cand[bound[cand] <= t] if ok else cand[:0]
                for i in cand[bound[cand] > t] if ok else cand:
                    unfreeze(int(i))
                if keep.size:
                    x_last[...] = x_now()
                    if decided():
                        return
                if m == 1:
                    set_t_bound()
                    return
                m = max(1, (m - keep.size) // 4)
        set_t_bound()

    def solve_exact(where: str) -> None:
        """Solve; on a non-optimal status a second exact try: from scratch, then with the frozen levels
        held to 1e-7 / 1e-6 relative (each comes from an earlier solve, feasible only to the solver's
        tolerance; the caller's verify() checks the result). Otherwise SolverError with the numbers."""
        status = run()
        for eps in (0.0, 1e-7, 1e-6):
            if status == highspy.HighsModelStatus.kOptimal:
                return
            for i in np.flatnonzero(~active & act0) if eps else ():
                h.changeRowBounds(lev_row[int(i)], flevel[i] * (1 - eps) - 2 * _PTOL, inf)
            h.clearSolver()
            status = run()
        if status != highspy.HighsModelStatus.kOptimal:
            raise SolverError(f"{what}: HiGHS returned status {h.modelStatusToString(status)!r} at {where}")

    x_last = np.zeros((n, k))  # the point of the last solve after which nothing was frozen or unfrozen

    def _final_ok(x: np.ndarray) -> bool:
        """The last stage's point already sits every class frozen below the top level at one of its caps
        (what the final solve would prefer), so that solve is not needed."""
        top = float(flevel[act0].max(initial=0.0))
        low = act0 & (flevel < top * (1 - 1e-9))
        return bool(at_caps(x, speed, demand, type_cap)[low].all())

    def decided() -> bool:
        return common_stop and _common_decided(x_last, speed, demand, type_cap, ~active & act0)

    level = 0.0
    stopped = False
    budget_cap = capacity / s
    while active.any():
        if lps and np.isfinite(bound[active]).any():  # the cold first solve is a stage: a pinned class makes it harder
            batch()
            if not active.any():
                break
            if decided():
                stopped = True
                break
        set_t_bound()
        stages += 1
        solve_exact(f"stage {stages} ({int(active.sum())} of {idx.size} classes still rising, "
                    f"last level {level * T0:.6g})")
        sol = h.getSolution()
        t = float(sol.col_value[tcol])
        level = t
        x_last[...] = x_now()
        ai = np.flatnonzero(active)
        y = np.abs(np.asarray(sol.row_dual)[[lev_row[int(i)] for i in ai]])
        blocked = ai[(y > 1e-7 * max(float(y.max()), 1e-300)) | (bound[ai] <= t * (1 + 1e-9) + 1e-12)]
        if blocked.size == 0:  # cannot happen (the duals sum to 1); refuse rather than loop
            raise SolverError(f"{what}: no blocked class at level {t * T0:.6g} (duals {y.max():.3g})")
        rd_all = np.abs(np.asarray(sol.row_dual))
        cd_all = np.abs(np.asarray(sol.col_dual))
        cv_all = np.asarray(sol.col_value)
        # per class, the largest dual of a pair column at its upper bound (a per-type cap that binds)
        hit = cv_all[1:nv + 1] >= ub - 1e-9
        cap_dual = np.zeros(n)
        np.maximum.at(cap_dual, rows[hit], cd_all[1:nv + 1][hit])
        for i in blocked:
            i = int(i)
            # relaxing a cap with a positive dual raises the common level: this class could rise without it
            dual = rd_all[dem_row[i]] if i in dem_row else 0.0
            capfz[i] = max(dual, float(cap_dual[i])) > 1e-9
            freeze(i, t)
        if not active.any():
            break
        if decided():
            stopped = True
            break
        # price bounds from the capacity duals
        p = np.zeros(k)
        rd = np.asarray(sol.row_dual)
        for j, r in cap_row.items():
            p[j] = abs(rd[r])
        need = np.where(active, t, flevel)
        need[~act0] = 0.0
        pb = price_bounds(A, p, float(p @ budget_cap), need, np.where(np.isfinite(dem_s), dem_s, np.inf))
        nb = np.maximum(pb, t)
        bound = np.where(active, np.minimum(bound, nb), bound)
    if not stopped and not active.any() and not _final_ok(x_last):  # everybody froze; the last stage's point holds every level
        set_t_bound()
        # The levels are now fixed (the leximin vector is unique); among the points that hold them, prefer
        # classes at their caps: maximize GPUs used, relative to each class's demand and per-type caps.
        with np.errstate(divide="ignore"):
            cost[...] = np.where(np.isfinite(demand) & (demand > 0), s / demand, 0.0)[:, None]
            cost[...] += np.where(np.isfinite(type_cap) & (type_cap > 0), s / type_cap, 0.0)
        cost[~usable] = 0.0
        h.changeColsCost(nv, np.arange(1, nv + 1, dtype=np.int32), cost[rows, cols])
        solve_exact("the final solve")
        x_last[...] = x_now()
    if not active.any():
        level = float(flevel[act0].max())
    if stopped:
        level = float(flevel[~active & act0].max())
    x_out = x_last
    frozen_out = ~active | ~act0
    return Filled(x_out, frozen_out, capfz, level * T0, stages, lps)


def _common_decided(x: np.ndarray, speed: np.ndarray, demand: np.ndarray, type_cap: np.ndarray,
                    frozen: np.ndarray) -> bool:
    """Eq. 9's common level is decided at the point ``x`` of the filling: some frozen class is below its caps
    in ``x``. (See :func:`fill`'s ``common_stop``; the proof is in ``oef_noncoop``'s module docstring.)"""
    return bool((frozen & below_caps(x, speed, demand, type_cap)).any())
