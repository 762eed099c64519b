"""The fairness properties of one allocation, each a :class:`PropertyResult` (see the package docstring), and
:func:`violations`, the per-round counts. Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model import Allocation, VirtualUsers
from .pareto import EXACT_VARS, improvement
from .values import TOL, PropertyResult, _among, _fmt, _label, _tol, bundle_values, capped_mask, row_values


# --------------------------------------------------------------------------- feasibility


def capacity(alloc: Allocation) -> PropertyResult:
    """No GPU type is over-allocated and no share is negative."""
    vu, x = alloc.vu, np.asarray(alloc.x, dtype=float)
    over = x.sum(axis=0) - vu.capacity
    neg = -x.min() if x.size else 0.0
    j = int(np.argmax(over))
    worst = max(float(over[j]), float(neg), 0.0)
    if over[j] > _tol(vu.capacity[j]):
        return PropertyResult("capacity", False, f"{vu.gpu_types[j]}: {_fmt(x[:, j].sum())} allocated > capacity {_fmt(vu.capacity[j])}", worst)
    if neg > TOL:
        i, jj = np.unravel_index(int(np.argmin(x)), x.shape)
        return PropertyResult("capacity", False, f"negative share {_fmt(x[i, jj])} for {_label(vu, i)} on {vu.gpu_types[jj]}", worst)
    return PropertyResult("capacity", True, "every type within capacity", worst)


def demand(alloc: Allocation) -> PropertyResult:
    """No virtual user gets more GPUs than its demand, nor more of a type than its per-type cap there."""
    vu, x = alloc.vu, np.asarray(alloc.x, dtype=float)
    finite = np.isfinite(vu.demand)
    typed = np.isfinite(vu.type_cap) & (vu.speed > 0)
    # a type a class cannot use (no throughput, or type_demand 0) must get nothing: its cap there is 0
    zero = (vu.speed <= 0)
    over = np.where(finite, x.sum(axis=1) - np.where(finite, vu.demand, 0.0), -np.inf)
    i = int(np.argmax(over)) if vu.n else 0
    worst = max(float(over[i]), 0.0) if vu.n else 0.0
    if vu.n and over[i] > _tol(vu.demand[i]):
        return PropertyResult("demand", False, f"{_label(vu, i)}: {_fmt(x[i].sum())} GPUs > demand {_fmt(vu.demand[i])}", worst)
    cap = np.where(typed, vu.type_cap, np.where(zero, 0.0, np.inf))
    tover = np.where(np.isfinite(cap), x - np.where(np.isfinite(cap), cap, 0.0), -np.inf)
    if tover.size:
        l, j = np.unravel_index(int(np.argmax(tover)), tover.shape)
        worst = max(worst, float(tover[l, j]), 0.0)
        if tover[l, j] > _tol(cap[l, j]):
            what = f"cap {_fmt(cap[l, j])}" if typed[l, j] else "a type it cannot use"
            return PropertyResult("demand", False, f"{_label(vu, l)}: {_fmt(x[l, j])} {vu.gpu_types[j]} GPUs > {what}", worst)
    if typed.any():
        return PropertyResult("demand", True, "every class within its demand and its per-type caps", worst)
    if not finite.any():
        return PropertyResult("demand", True, "no demand limits in the problem", worst)
    return PropertyResult("demand", True, "every class within its demand", worst)


# --------------------------------------------------------------------------- fairness


def _si_base(vu: VirtualUsers) -> np.ndarray:
    """(n,) each virtual user's throughput from its weight share w_l/sum(w) of every GPU type (within its
    demand and per-type caps)."""
    if vu.n == 0:
        return np.zeros(0)
    share = vu.weight[:, None] / vu.weight.sum() * vu.capacity[None, :]
    return row_values(vu.speed, share, vu.demand, vu.type_cap)


def sharing_incentive(alloc: Allocation) -> PropertyResult:
    """Each virtual user gets at least the throughput of its weight share w_l/sum(w) of every GPU type."""
    vu, x = alloc.vu, np.asarray(alloc.x, dtype=float)
    u = (x * vu.speed).sum(axis=1)
    base = _si_base(vu)
    free, note = _among(alloc)
    worst, who = 0.0, None
    for i in free:
        gap = base[i] - u[i]
        if gap > _tol(base[i]) and gap > worst:
            worst, who = gap, (i, base[i])
    if who is None:
        return PropertyResult("sharing_incentive", True, "every class gets at least its weight share's throughput" + note, 0.0)
    i, base_i = who
    return PropertyResult("sharing_incentive", False, f"{_label(vu, i)}: throughput {_fmt(u[i])} < {_fmt(base_i)} from its weight share" + note, worst)


@dataclass(frozen=True)
class Envy:
    """The envious pairs of virtual users: ``envier[p]`` would have throughput ``value[p]`` with ``envied[p]``'s
    allocation scaled by pi_envier / pi_envied (within its demand and caps), ``gap[p]`` above its own."""

    envier: np.ndarray
    envied: np.ndarray
    value: np.ndarray
    gap: np.ndarray


def _envy(vu: VirtualUsers, x: np.ndarray, u: np.ndarray, free: np.ndarray) -> Envy:
    """Every pair of different ``free`` (uncapped) virtual users where one envies the other beyond the
    tolerance.

    Cheap: the linear value (no caps) bounds the capped one from above and equals it when the scaled bundle
    fits within the envier's caps, so only the pairs where it exceeds the envier's throughput are looked at,
    and of those only the ones whose bundle does not fit are valued again within the caps (row by row)."""
    idx = np.flatnonzero(free)
    none = np.zeros(0, dtype=int)
    if len(idx) < 2:
        return Envy(none, none, np.zeros(0), np.zeros(0))
    s, xs, w, uu = vu.speed[idx], x[idx], vu.weight[idx], u[idx]
    value = s @ xs.T
    equal = bool(np.all(w == w[0]))
    if not equal:
        value *= w[:, None] / w[None, :]
    cand = value > uu[:, None]
    np.fill_diagonal(cand, False)
    ls, is_ = np.nonzero(cand)  # sorted by row
    v = value[ls, is_]
    ratio = np.ones(len(ls)) if equal else w[ls] / w[is_]
    # a scaled bundle with no more usable GPUs than the envier's demand and smallest usable per-type cap
    # binds no cap: its linear value is exact
    usable = s > 0
    bound = np.minimum(vu.demand[idx], np.where(usable, vu.type_cap[idx], np.inf).min(axis=1, initial=np.inf))
    need = np.flatnonzero((usable[ls] * xs[is_]).sum(axis=1) * ratio > bound[ls])
    if len(need):
        rows, starts = np.unique(ls[need], return_index=True)
        for a, pos in zip(rows, np.split(need, starts[1:])):
            v[pos] = bundle_values(s[a], xs[is_[pos]] * ratio[pos][:, None], vu.demand[idx[a]], vu.type_cap[idx[a]])
    g = v - uu[ls]
    keep = g > TOL * np.maximum(1.0, np.abs(v))
    return Envy(idx[ls[keep]], idx[is_[keep]], v[keep], g[keep])


def envy_free(alloc: Allocation) -> PropertyResult:
    """Weighted envy-freeness: u_l(x_l)/pi_l >= u_l(x_i)/pi_i for every pair of uncapped virtual users."""
    vu, x = alloc.vu, np.asarray(alloc.x, dtype=float)
    u = (x * vu.speed).sum(axis=1)
    free, note = _among(alloc)
    mask = np.zeros(vu.n, dtype=bool)
    mask[free] = True  # capped classes are compared with nobody, and nobody with them
    e = _envy(vu, x, u, mask)
    worst, who = 0.0, None
    if len(e.gap):
        p = int(np.argmax(e.gap))
        worst, who = float(e.gap[p]), (int(e.envier[p]), int(e.envied[p]), float(e.value[p]))
    if who is None:
        return PropertyResult("envy_free", True, "no class prefers another's weight-scaled allocation" + note, 0.0)
    l, i, other = who
    return PropertyResult(
        "envy_free", False, f"{_label(vu, l)} envies {_label(vu, i)}: {_fmt(other)} from its share > own {_fmt(u[l])}" + note, worst
    )


def pareto_efficient(alloc: Allocation, exact_vars: int | None = EXACT_VARS) -> PropertyResult:
    """No feasible allocation makes a virtual user better off while nobody is worse off (an LP, HiGHS).

    Above ``exact_vars`` variables (virtual users x types; None: never) a cheap certificate of an improvement
    (idle GPUs someone can use, or a trade two classes both gain from: :mod:`.pareto`) answers first, its gain
    a lower bound ("at least"); the LP runs only when it finds none.

    max sum_l u_l(y_l)  s.t.  u_l(y_l) >= u_l(x_l), sum_l y_l^j <= m_j, sum_j y_l^j <= d_l, 0 <= y_l^j <= c_l^j;
    Pareto-efficient iff the optimum does not exceed the current total throughput.
    """
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix

    cap_r = capacity(alloc)
    if cap_r.value is False:
        return PropertyResult("pareto_efficient", None, f"allocation is infeasible ({cap_r.detail})")
    vu, x = alloc.vu, np.asarray(alloc.x, dtype=float)
    n, k = vu.n, vu.k
    s = vu.speed
    u = (x * s).sum(axis=1)
    tol = TOL * np.maximum(1.0, np.abs(u))  # _tol of each u_l
    # each user's floor was relaxed by its tolerance; what that frees can be worth up to the fastest speed
    slack = float(tol.sum()) * float(s.max(initial=1.0)) + _tol(u.sum())
    if exact_vars is not None and n * k > exact_vars:
        imp = improvement(vu, x, slack)  # a cheap certificate first; the LP only when none is found
        if imp is not None:
            return PropertyResult(
                "pareto_efficient", False, f"throughput can rise by at least {_fmt(imp.gain)} without anyone losing "
                f"(e.g. {_label(vu, imp.who)} +{_fmt(imp.who_gain)}: {imp.how})", imp.gain)
    # one sparse matrix, built at once (column i*k + j is y_i^j): capacity rows, then one row per finite
    # demand, then one floor row per user
    finite = np.flatnonzero(np.isfinite(vu.demand))
    nf = len(finite)
    users, types = np.arange(n), np.arange(k)
    rows = np.concatenate([np.repeat(types, n), k + np.repeat(np.arange(nf), k), k + nf + np.repeat(users, k)])
    cols = np.concatenate([(users[None, :] * k + types[:, None]).reshape(-1),
                           (finite[:, None] * k + types[None, :]).reshape(-1), np.arange(n * k)])
    vals = np.concatenate([np.ones(n * k), np.ones(nf * k), -s.reshape(-1)])
    a = csr_matrix((vals, (rows, cols)), shape=(k + nf + n, n * k))
    a.eliminate_zeros()  # unusable types: no entry, as before
    d = vu.demand[finite]
    b = np.concatenate([np.maximum(vu.capacity, x.sum(axis=0)),
                        np.maximum(d, x[finite].sum(axis=1)) + TOL * np.maximum(1.0, np.abs(d)),
                        -(u - tol)])
    c = vu.type_cap
    fin_c = np.isfinite(c)
    c0 = np.where(fin_c, c, 0.0)
    upper = np.where(s <= 0, 0.0, np.where(fin_c, np.maximum(c0, x) + TOL * np.maximum(1.0, np.abs(c0)), np.inf))
    bounds = np.column_stack([np.zeros(n * k), upper.reshape(-1)])
    res = linprog(-s.reshape(-1), A_ub=a, b_ub=b, bounds=bounds, method="highs")
    if res.status != 0:
        return PropertyResult("pareto_efficient", None, f"LP not solved: {res.message}")
    y = res.x.reshape(n, k)
    gains = (y * s).sum(axis=1) - u
    gain = float(-res.fun - u.sum())
    if gain > slack:
        i = int(np.argmax(gains))
        return PropertyResult(
            "pareto_efficient", False, f"throughput can rise by {_fmt(gain)} without anyone losing (e.g. {_label(vu, i)} +{_fmt(gains[i])})", gain
        )
    return PropertyResult("pareto_efficient", True, "no user can gain without another losing", max(gain, 0.0))


def equal_throughput(alloc: Allocation) -> PropertyResult:
    """Every uncapped virtual user (not at its demand nor at a per-type cap) has the same weighted
    throughput u_l/pi_l (OEF eq. 9c)."""
    vu, x = alloc.vu, np.asarray(alloc.x, dtype=float)
    r = (x * vu.speed).sum(axis=1) / vu.weight
    free, note = _among(alloc)
    if len(free) < 2:
        return PropertyResult("equal_throughput", True, "fewer than two classes to compare" + note, 0.0)
    hi = max(free, key=lambda i: r[i])
    lo = min(free, key=lambda i: r[i])
    spread = float(r[hi] - r[lo])
    if spread > _tol(r[hi]):
        return PropertyResult(
            "equal_throughput", False, f"throughput/weight ranges from {_fmt(r[lo])} ({_label(vu, lo)}) to {_fmt(r[hi])} ({_label(vu, hi)})" + note, spread
        )
    return PropertyResult("equal_throughput", True, f"every class gets {_fmt(r[hi])} per unit of weight" + note, spread)


def _common_order(vu: VirtualUsers) -> list[int] | None:
    """GPU types from slowest to fastest if every class ranks them the same way (ties allowed), else None."""
    s = vu.speed
    for a in range(vu.k):
        for b in range(a + 1, vu.k):
            d = s[:, a] - s[:, b]
            if (d > TOL).any() and (d < -TOL).any():
                return None
    return sorted(range(vu.k), key=lambda j: (float(s[:, j].mean()), j))


def adjacent_types(alloc: Allocation) -> PropertyResult:
    """Theorem 5.2: each virtual user gets GPU types that are adjacent in the common speed order.

    Only meaningful when every class ranks the GPU types in the same order of speedup (types a class cannot
    use rank lowest); otherwise the value is None. Checked per virtual user (the users of OEF's LP): two
    classes of one tenant may legitimately sit on distant types.
    """
    vu, x = alloc.vu, np.asarray(alloc.x, dtype=float)
    order = _common_order(vu)
    if order is None:
        return PropertyResult("adjacent_types", None, "classes rank the GPU types in different speed orders (Thm 5.2 does not apply)")
    worst, bad = 0, None
    for i in range(vu.n):
        used = [p for p, j in enumerate(order) if x[i, j] > _tol(vu.capacity[j])]
        if not used:
            continue
        gaps = [order[p] for p in range(used[0], used[-1] + 1) if p not in used]
        if len(gaps) > worst:
            worst, bad = len(gaps), (i, used, gaps)
    names = " < ".join(vu.gpu_types[j] for j in order)
    if bad is None:
        return PropertyResult("adjacent_types", True, f"every class uses adjacent types of {names}", 0.0)
    i, used, gaps = bad
    return PropertyResult(
        "adjacent_types",
        False,
        f"{_label(vu, i)} uses {', '.join(vu.gpu_types[order[p]] for p in used)} but not {', '.join(vu.gpu_types[j] for j in gaps)} in between ({names})",
        float(worst),
    )


# --------------------------------------------------------------------------- counts (one daemon round)


def violations(vu: VirtualUsers, x: np.ndarray) -> dict[str, Any]:
    """Envy and sharing-incentive violations of the allocation ``x`` (n, k) of ``vu``'s virtual users, counted
    per tenant (the daemon records them every round: ``details["fairness"]``). Cheap and pure.

    The comparisons are :func:`envy_free`'s and :func:`sharing_incentive`'s, on the same virtual users
    (one per tenant class, an equal part of the tenant's weight), the same values (throughput of the best
    GPUs within the class's demand and per-type caps) and the same tolerance; virtual users at their demand
    or a per-type cap (:func:`capped_mask`) are compared with nobody and nobody with them. Returned:

    * ``envy_pairs``: ordered pairs of different tenants (A, B) where some class of A values a class of B's
      GPUs, scaled by pi_A/pi_B (class weights), above its own throughput; envy between two classes of one
      tenant is not counted;
    * ``max_envy``: the largest such excess (normalized throughput of the envious class: GPUs of its slowest
      type), 0 when none;
    * ``si_violations``: tenants with a class whose throughput is below what its weight share of every GPU
      type would give it;
    * ``min_si_ratio``: the smallest throughput / weight-share throughput over the compared classes (None
      when none is compared);
    * ``tenants``, ``classes``, ``compared``: tenants, virtual users, and virtual users compared.
    """
    n = vu.n
    x = np.clip(np.asarray(x, dtype=float).reshape(n, vu.k), 0.0, None)
    tid = np.unique(np.asarray(vu.tenant, dtype=object), return_inverse=True)[1].reshape(-1) if n else np.zeros(0, int)
    out: dict[str, Any] = {"tenants": len(set(vu.tenant)), "classes": n, "compared": 0, "envy_pairs": 0,
                           "max_envy": 0.0, "si_violations": 0, "min_si_ratio": None}
    if n == 0:
        return out
    u = (x * vu.speed).sum(axis=1)
    free = ~capped_mask(vu, x)
    out["compared"] = int(free.sum())
    base = _si_base(vu)
    short = free & (base - u > TOL * np.maximum(1.0, np.abs(base)))
    out["si_violations"] = int(len(np.unique(tid[short])))
    pos = free & (base > TOL)
    if pos.any():
        out["min_si_ratio"] = float((u[pos] / base[pos]).min())
    e = _envy(vu, x, u, free)
    other = tid[e.envier] != tid[e.envied]  # classes of one tenant: not a pair of tenants
    if other.any():
        pairs = np.zeros((out["tenants"], out["tenants"]), dtype=bool)
        pairs[tid[e.envier[other]], tid[e.envied[other]]] = True
        out["envy_pairs"] = int(pairs.sum())
        out["max_envy"] = float(e.gap[other].max())
    return out


def largest_envy_ratio(vu: VirtualUsers, x: np.ndarray) -> float:
    """The largest envy between two uncapped classes of different tenants, as a fraction of the envier's own
    throughput (0 when none envies): what a partitioned solve's loss is measured by (benchmarks/policy_table.py)."""
    n = vu.n
    if n == 0:
        return 0.0
    x = np.clip(np.asarray(x, dtype=float).reshape(n, vu.k), 0.0, None)
    tid = np.unique(np.asarray(vu.tenant, dtype=object), return_inverse=True)[1].reshape(-1)
    u = (x * vu.speed).sum(axis=1)
    e = _envy(vu, x, u, ~capped_mask(vu, x))
    other = tid[e.envier] != tid[e.envied]
    if not other.any():
        return 0.0
    return float((e.gap[other] / np.maximum(u[e.envier[other]], 1e-12)).max())
