"""Exact progressive filling on one live HiGHS model (used by ``oef-noncoop`` and ``gavel`` by default).

Problem, on arrays: classes l with normalized speed S_l (0 = unusable), reference r_l > 0 (the weight π_l
for non-cooperative OEF, the capped equal share's throughput e_l for Gavel), total demand d_l and per-type
caps c_l^j; capacity m_j. The *level* of l is u_l / r_l with u_l = Σ_j S_l^j x_l^j. Progressive filling
raises one common level; a class that cannot rise any more (the others keeping theirs) freezes; repeat.

One HiGHS model (:class:`.model.Model`) holds it all: a column per usable (class, type) pair (bounds 0..c_l^j), a level column t,
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
from . import columns
from .bounds import own_best, price_bounds
from .check import at_caps, below_caps, verify  # noqa: F401  (the callers' check, with the filling)
from .model import TCOL, Model

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
    m = Model(A, usable, inset, type_cap, capacity, demand, dem_s, idx, act0, s, what)
    capfz = np.zeros(n, dtype=bool)
    stages = 0
    x_last = np.zeros((n, k))  # the point of the last solve after which nothing was frozen or unfrozen

    def decided() -> bool:
        return common_stop and _common_decided(x_last, speed, demand, type_cap, ~m.active & act0)

    level = 0.0
    stopped = False
    budget_cap = capacity / s
    while m.active.any():
        if m.lps and np.isfinite(bound[m.active]).any():  # the cold first solve is a stage: a pinned class makes it harder
            _batch(m, bound, x_last, decided)
            if not m.active.any():
                break
            if decided():
                stopped = True
                break
        m.set_t_bound(bound)
        stages += 1
        m.solve_exact(f"stage {stages} ({int(m.active.sum())} of {idx.size} classes still rising, "
                      f"last level {level * T0:.6g})")
        sol = m.h.getSolution()
        t = float(sol.col_value[TCOL])
        level = t
        x_last[...] = m.x_now()
        _freeze_blocked(m, sol, t, bound, capfz, T0)
        if not m.active.any():
            break
        if decided():
            stopped = True
            break
        # price bounds from the capacity duals
        p = np.zeros(k)
        rd = np.asarray(sol.row_dual)
        for j, r in m.cap_row.items():
            p[j] = abs(rd[r])
        need = np.where(m.active, t, m.flevel)
        need[~act0] = 0.0
        pb = price_bounds(A, p, float(p @ budget_cap), need, np.where(np.isfinite(dem_s), dem_s, np.inf))
        nb = np.maximum(pb, t)
        bound = np.where(m.active, np.minimum(bound, nb), bound)
    if not stopped and not m.active.any() and not _final_ok(m, x_last, speed, demand, type_cap):
        # everybody froze; the last stage's point holds every level
        _final_solve(m, bound, demand, type_cap)
        x_last[...] = m.x_now()
    if not m.active.any():
        level = float(m.flevel[act0].max())
    if stopped:
        level = float(m.flevel[~m.active & act0].max())
    x_out = x_last
    frozen_out = ~m.active | ~act0
    return Filled(x_out, frozen_out, capfz, level * T0, stages, m.lps)


def _batch(m: Model, bound: np.ndarray, x_last: np.ndarray, decided) -> None:
    """Freeze every active class the batch lemma pins to its bound (doubling m, bounded tries); ``x_last``
    (in place): the point of the last try after which nothing was frozen or unfrozen."""
    import highspy

    active, h = m.active, m.h
    mm, tries = 1, 0
    while tries < 12:
        cand = np.flatnonzero(active & np.isfinite(bound))
        if cand.size == 0:
            return
        cand = cand[np.argsort(bound[cand], kind="stable")][:mm]
        for i in cand:
            m.freeze(int(i), float(bound[i]))
        m.set_t_bound(bound)
        tries += 1
        status = m.run(_TRY_ITERS, price=False)
        ok = status == highspy.HighsModelStatus.kOptimal
        t = float(h.getSolution().col_value[TCOL]) if ok else -1.0
        need = float(bound[cand[-1]])
        if ok and active.any() and t < need - 1e-9 * max(1.0, need) and m.add_missing():
            # too far over the pairs in the model: make it exact over all of them (a success in the
            # model is one in the full LP, its point being feasible there)
            status = m.run(_TRY_ITERS)
            ok = status == highspy.HighsModelStatus.kOptimal
            t = float(h.getSolution().col_value[TCOL]) if ok else -1.0
        if ok and (not active.any() or t >= need - 1e-9 * max(1.0, need)):
            x_last[...] = m.x_now()  # holds every frozen level, also those frozen just below
            for i in np.flatnonzero(active & (bound <= t)):
                m.freeze(int(i), float(bound[i]))
            if decided():
                return
            mm *= 2
        else:
            # too far. An optimal try still proves the lemma for t' = t (its point holds every
            # pinned class at its bound, the others at t or more): the pinned ones with bound <= t stay.
            keep = cand[bound[cand] <= t] if ok else cand[:0]
            for i in cand[bound[cand] > t] if ok else cand:
                m.unfreeze(int(i))
            if keep.size:
                x_last[...] = m.x_now()
                if decided():
                    return
            if mm == 1:
                m.set_t_bound(bound)
                return
            mm = max(1, (mm - keep.size) // 4)
    m.set_t_bound(bound)


def _freeze_blocked(m: Model, sol, t: float, bound: np.ndarray, capfz: np.ndarray, T0: float) -> None:
    """After a stage LP at level ``t``: freeze every class it shows blocked (a positive dual on its level row,
    or its bound reached); ``capfz`` (in place): those blocked by one of their own caps (a positive dual)."""
    ai = np.flatnonzero(m.active)
    y = np.abs(np.asarray(sol.row_dual)[[m.lev_row[int(i)] for i in ai]])
    blocked = ai[(y > 1e-7 * max(float(y.max()), 1e-300)) | (bound[ai] <= t * (1 + 1e-9) + 1e-12)]
    if blocked.size == 0:  # cannot happen (the duals sum to 1); refuse rather than loop
        raise SolverError(f"{m.what}: no blocked class at level {t * T0:.6g} (duals {y.max():.3g})")
    rd_all = np.abs(np.asarray(sol.row_dual))
    cd_all = np.abs(np.asarray(sol.col_dual))
    cv_all = np.asarray(sol.col_value)
    # per class, the largest dual of a pair column at its upper bound (a per-type cap that binds)
    hit = cv_all[1:m.nv + 1] >= m.ub - 1e-9
    cap_dual = np.zeros(m.n)
    np.maximum.at(cap_dual, m.rows[hit], cd_all[1:m.nv + 1][hit])
    for i in blocked:
        i = int(i)
        # relaxing a cap with a positive dual raises the common level: this class could rise without it
        dual = rd_all[m.dem_row[i]] if i in m.dem_row else 0.0
        capfz[i] = max(dual, float(cap_dual[i])) > 1e-9
        m.freeze(i, t)


def _final_ok(m: Model, x: np.ndarray, speed: np.ndarray, demand: np.ndarray, type_cap: np.ndarray) -> bool:
    """The last stage's point already sits every class frozen below the top level at one of its caps
    (what the final solve would prefer), so that solve is not needed."""
    top = float(m.flevel[m.act0].max(initial=0.0))
    low = m.act0 & (m.flevel < top * (1 - 1e-9))
    return bool(at_caps(x, speed, demand, type_cap)[low].all())


def _final_solve(m: Model, bound: np.ndarray, demand: np.ndarray, type_cap: np.ndarray) -> None:
    """The levels are now fixed (the leximin vector is unique); among the points that hold them, prefer
    classes at their caps: maximize GPUs used, relative to each class's demand and per-type caps."""
    m.set_t_bound(bound)
    s, cost = m.s, m.cost
    with np.errstate(divide="ignore"):
        cost[...] = np.where(np.isfinite(demand) & (demand > 0), s / demand, 0.0)[:, None]
        cost[...] += np.where(np.isfinite(type_cap) & (type_cap > 0), s / type_cap, 0.0)
    cost[~m.usable] = 0.0
    m.h.changeColsCost(m.nv, np.arange(1, m.nv + 1, dtype=np.int32), cost[m.rows, m.cols])
    m.solve_exact("the final solve")


def _common_decided(x: np.ndarray, speed: np.ndarray, demand: np.ndarray, type_cap: np.ndarray,
                    frozen: np.ndarray) -> bool:
    """Eq. 9's common level is decided at the point ``x`` of the filling: some frozen class is below its caps
    in ``x``. (See :func:`fill`'s ``common_stop``; the proof is in ``oef_noncoop``'s module docstring.)"""
    return bool((frozen & below_caps(x, speed, demand, type_cap)).any())
