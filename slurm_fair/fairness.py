"""Fairness properties of an allocation (OEF §2.3.1, §5), checked numerically. Pure: no I/O.

Every check works on the *virtual users* of the allocation's problem (one per tenant class, carrying an
equal part of its tenant's weight, OEF §4.2.4) and on normalized throughput ``u_l(x) = sum_j speed_l^j x^j``.
A virtual user with a demand can use at most that many GPUs in all, and at most its per-type cap of each
type (``type_demand``), so the value of a bundle of GPUs to it is the throughput of its best GPUs in the
bundle within those caps.

*Capped* classes: a class whose allocation reaches its total demand or one of its per-type caps. Its own
caps, not the fairness rule, decide its share, so the properties that the policies promise only among
uncapped classes (sharing incentive, envy-freeness, equal throughput) are evaluated on the uncapped classes
when some class is capped, and the detail says so ("among the 3 uncapped class(es); 1 at their demand or
type caps not compared").

:func:`violations` counts envy pairs and sharing-incentive shortfalls per tenant with the same comparisons,
cheaply enough for every daemon round (``details["fairness"]``).

Each check returns a :class:`PropertyResult`: ``value`` True (holds), False (violated) or None (not
applicable, the detail says why), a short ``detail`` and ``worst``, the largest violation found (0 when none).
Tolerance: 1e-6, relative to the size of the compared numbers when they exceed 1.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .model import Allocation, Problem, Tenant, VirtualUsers

TOL = 1e-6

Solve = Callable[[Problem], Allocation]


@dataclass(frozen=True)
class PropertyResult:
    name: str
    value: bool | None
    detail: str
    worst: float | None = None

    def __post_init__(self) -> None:
        if self.worst is not None:
            object.__setattr__(self, "worst", float(self.worst))
        if self.value is not None:
            object.__setattr__(self, "value", bool(self.value))

    def as_dict(self) -> dict:
        return {"value": self.value, "detail": self.detail, "worst": self.worst}


def _tol(*scale: float) -> float:
    return TOL * max([1.0, *[abs(float(s)) for s in scale]])


def _label(vu: VirtualUsers, i: int) -> str:
    # a tenant with one class is named by the tenant alone
    if vu.tenant.count(vu.tenant[i]) == 1:
        return vu.tenant[i]
    return f"{vu.tenant[i]}/{vu.cls[i]}"


def bundle_value(speed: np.ndarray, bundle: np.ndarray, demand: float = np.inf, type_cap: np.ndarray | None = None) -> float:
    """Throughput a user with ``speed`` gets from ``bundle`` (GPUs per type) using at most ``demand`` GPUs in
    all and at most ``type_cap[j]`` of type j (greedy fastest first, optimal for these caps)."""
    if type_cap is not None:
        bundle = np.minimum(bundle, type_cap)
    if not np.isfinite(demand):
        return float(np.dot(speed, np.where(speed > 0, bundle, 0.0)))
    left, value = float(demand), 0.0
    for j in np.argsort(-speed, kind="stable"):
        if left <= 0 or speed[j] <= 0:
            break
        take = min(float(bundle[j]), left)
        if take > 0:
            value += take * float(speed[j])
            left -= take
    return value


def bundle_values(speed: np.ndarray, bundles: np.ndarray, demand: float = np.inf, type_cap: np.ndarray | None = None) -> np.ndarray:
    """:func:`bundle_value` of one user for many bundles at once: ``bundles`` (m, k) -> (m,) (vectorized:
    types sorted fastest first, each bundle's GPUs taken in that order until ``demand`` is used up)."""
    b = np.asarray(bundles, dtype=float)
    if type_cap is not None:
        b = np.minimum(b, type_cap[None, :])
    b = np.where(speed[None, :] > 0, b, 0.0)
    if not np.isfinite(demand):
        return b @ np.where(speed > 0, speed, 0.0)
    order = np.argsort(-speed, kind="stable")
    bo, so = b[:, order], np.where(speed[order] > 0, speed[order], 0.0)
    before = np.cumsum(bo, axis=1) - bo
    take = np.clip(np.minimum(bo, float(demand) - before), 0.0, None)
    return take @ so


def row_values(speed: np.ndarray, bundles: np.ndarray, demand: np.ndarray, type_cap: np.ndarray | None = None) -> np.ndarray:
    """Row by row, :func:`bundle_value` of user ``speed[r]`` (demand ``demand[r]``, caps ``type_cap[r]``) for
    bundle ``bundles[r]``: (m, k), (m, k), (m,), (m, k) -> (m,), all rows at once."""
    b = np.asarray(bundles, dtype=float)
    s = np.where(speed > 0, speed, 0.0)
    if type_cap is not None:
        b = np.minimum(b, type_cap)
    b = np.where(s > 0, b, 0.0)
    d = np.asarray(demand, dtype=float)
    if not np.isfinite(d).any():
        return (b * s).sum(axis=1)
    order = np.argsort(-s, axis=1, kind="stable")
    bo, so = np.take_along_axis(b, order, axis=1), np.take_along_axis(s, order, axis=1)
    before = np.cumsum(bo, axis=1) - bo
    take = np.clip(np.minimum(bo, d[:, None] - before), 0.0, None)
    return (take * so).sum(axis=1)


def _fmt(v: float) -> str:
    return f"{v:.6g}"


def capped_mask(vu: VirtualUsers, x: np.ndarray) -> np.ndarray:
    """(n,) True for the virtual users whose allocation ``x`` reaches their total demand or one of their
    finite per-type caps (within the tolerance)."""
    x = np.asarray(x, dtype=float)
    fin_d = np.isfinite(vu.demand)
    d = np.where(fin_d, vu.demand, 0.0)
    at_total = fin_d & (x.sum(axis=1) >= d - TOL * np.maximum(1.0, np.abs(d)))
    fin = np.isfinite(vu.type_cap) & (vu.speed > 0)
    c = np.where(fin, vu.type_cap, 0.0)
    at_type = (fin & (x >= c - TOL * np.maximum(1.0, np.abs(c)))).any(axis=1)
    return at_total | at_type


def capped_classes(alloc: Allocation) -> list[int]:
    """Virtual users whose allocation reaches their total demand or one of their finite per-type caps."""
    return [int(i) for i in np.flatnonzero(capped_mask(alloc.vu, alloc.x))]


def _among(alloc: Allocation) -> tuple[list[int], str]:
    """(uncapped virtual users, detail suffix saying the comparison is restricted to them, "" if nobody is capped)."""
    capped = set(capped_classes(alloc))
    free = [i for i in range(alloc.vu.n) if i not in capped]
    if not capped:
        return free, ""
    return free, f" (among the {len(free)} uncapped class(es); {len(capped)} at their demand or type caps not compared)"


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


def pareto_efficient(alloc: Allocation) -> PropertyResult:
    """No feasible allocation makes a virtual user better off while nobody is worse off (an LP, HiGHS).

    max sum_l u_l(y_l)  s.t.  u_l(y_l) >= u_l(x_l), sum_l y_l^j <= m_j, sum_j y_l^j <= d_l, 0 <= y_l^j <= c_l^j;
    Pareto-efficient iff the optimum does not exceed the current total throughput.
    """
    from scipy.optimize import linprog
    from scipy.sparse import lil_matrix

    cap_r = capacity(alloc)
    if cap_r.value is False:
        return PropertyResult("pareto_efficient", None, f"allocation is infeasible ({cap_r.detail})")
    vu, x = alloc.vu, np.asarray(alloc.x, dtype=float)
    n, k = vu.n, vu.k
    s = vu.speed
    u = (x * s).sum(axis=1)
    finite = [i for i in range(n) if np.isfinite(vu.demand[i])]
    a = lil_matrix((k + len(finite) + n, n * k))
    b = np.zeros(k + len(finite) + n)
    for j in range(k):
        for i in range(n):
            a[j, i * k + j] = 1.0
        b[j] = max(vu.capacity[j], x[:, j].sum())
    for r, i in enumerate(finite):
        for j in range(k):
            a[k + r, i * k + j] = 1.0
        b[k + r] = max(vu.demand[i], x[i].sum()) + _tol(vu.demand[i])
    for i in range(n):
        row = k + len(finite) + i
        for j in range(k):
            a[row, i * k + j] = -s[i, j]
        b[row] = -(u[i] - _tol(u[i]))
    def upper(i: int, j: int) -> float | None:
        if s[i, j] <= 0:
            return 0.0
        c = vu.type_cap[i, j]
        return None if not np.isfinite(c) else max(float(c), float(x[i, j])) + _tol(c)

    bounds = [(0.0, upper(i, j)) for i in range(n) for j in range(k)]
    res = linprog(-s.reshape(-1), A_ub=a.tocsr(), b_ub=b, bounds=bounds, method="highs")
    if res.status != 0:
        return PropertyResult("pareto_efficient", None, f"LP not solved: {res.message}")
    y = res.x.reshape(n, k)
    gains = (y * s).sum(axis=1) - u
    gain = float(-res.fun - u.sum())
    # each user's floor was relaxed by its tolerance; what that frees can be worth up to the fastest speed
    slack = sum(_tol(v) for v in u) * float(s.max(initial=1.0)) + _tol(u.sum())
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


# --------------------------------------------------------------------------- strategy-proofness


def _lie(problem: Problem, tenant: str, cls: str, factors: dict[str, float]) -> Problem:
    """``problem`` with the raw throughput of one class multiplied by ``factors`` per GPU type."""
    tenants = []
    for t in problem.tenants:
        if t.name == tenant:
            classes = tuple(
                dataclasses.replace(c, throughput={g: v * factors.get(g, 1.0) for g, v in c.throughput.items()}) if c.name == cls else c
                for c in t.classes
            )
            t = Tenant(t.name, classes, t.weight)
        tenants.append(t)
    return dataclasses.replace(problem, tenants=tuple(tenants))


def lies(problem: Problem, factors: Sequence[float] = (1.25, 1.5, 2.0), tenants: Sequence[str] | None = None,
         few: bool = False):
    """Yield (tenant, class, description, lying problem) for over-reported *speedups* (OEF §2.3.1: every
    element of the reported speedup vector >= the truth): each class inflates its throughput on one usable
    type other than its slowest, and on all of those at once, by each factor. (Inflating the slowest type
    would lower the normalized speedups of the others, an under-report the property does not cover.)
    ``tenants``: only these; ``few``: one type only, its fastest (with all of them at once, two lies per factor)."""
    only = None if tenants is None else set(tenants)
    for t in problem.tenants:
        if only is not None and t.name not in only:
            continue
        for c in t.classes:
            usable = [g for g in problem.gpu_types if (c.throughput.get(g) or 0) > 0 and c.type_cap(g) > 0]
            if not usable:
                continue
            slowest = min(usable, key=lambda g: (c.throughput[g], list(problem.gpu_types).index(g)))
            rest = [g for g in usable if g != slowest]
            if few and len(rest) > 1:
                fastest = max(rest, key=lambda g: (c.throughput[g], -list(problem.gpu_types).index(g)))
                for f in factors:
                    yield t.name, c.name, f"x{f:g} on {fastest}", _lie(problem, t.name, c.name, {fastest: f})
                    yield t.name, c.name, f"x{f:g} on all but {slowest}", _lie(problem, t.name, c.name, {g: f for g in rest})
                continue
            for f in factors:
                for g in rest:
                    yield t.name, c.name, f"x{f:g} on {g}", _lie(problem, t.name, c.name, {g: f})
                if len(rest) > 1:
                    yield t.name, c.name, f"x{f:g} on all but {slowest}", _lie(problem, t.name, c.name, {g: f for g in rest})


SAMPLE = 24  # tenants the strategy-proofness probe tries by default (``solve --check-sample``)


def sample_tenants(problem: Problem, sample: int | None, seed: int = 0) -> list[str] | None:
    """The tenants the probe tries: all (None) when ``sample`` is None or covers them, else ``sample`` of
    them drawn with a fixed seed (the same problem always gets the same sample), in problem order."""
    names = [t.name for t in problem.tenants]
    if sample is None or sample >= len(names):
        return None
    pick = set(np.random.default_rng(seed).choice(len(names), size=sample, replace=False).tolist())
    return [n for i, n in enumerate(names) if i in pick]


def strategy_proof_probe(alloc: Allocation, solve: Solve | None, factors: Sequence[float] = (1.25, 1.5, 2.0),
                         sample: int | None = None) -> PropertyResult:
    """Re-solve with each tenant over-reporting its speedups; its TRUE throughput must not rise.

    ``solve(problem) -> Allocation`` is the mechanism under test (e.g. ``lambda p: policies.solve(name, p)``).
    The honest baseline is ``solve(problem)`` itself, so the comparison uses one code path. A probe, not a
    proof: it tries ``lies()`` only. Each false report is one re-solve, so with more tenants than ``sample``
    it tries ``sample`` tenants (seeded, :func:`sample_tenants`) and, for each class of theirs, only the
    inflation of its fastest type and of all its types at once (``lies(few=True)``); the detail says so.
    ``sample`` 0: the probe does not run (value None).
    """
    if solve is None:
        return PropertyResult("strategy_proof_probe", None, "no solver given to re-solve with false reports")
    if sample == 0:
        return PropertyResult("strategy_proof_probe", None, "not run (--check-sample 0)")
    problem = alloc.problem
    chosen = sample_tenants(problem, sample)
    scope = "" if chosen is None else f" (sampled {len(chosen)} of {len(problem.tenants)} tenants, seed 0; fastest type and all types)"
    speed = problem.virtual_users().speed  # true normalized speeds
    vu = problem.virtual_users()

    def tenant_true(a: Allocation) -> dict[str, float]:
        u = (np.asarray(a.x, dtype=float) * speed).sum(axis=1)
        out: dict[str, float] = {}
        for i, t in enumerate(vu.tenant):
            out[t] = out.get(t, 0.0) + float(u[i])
        return out

    honest = tenant_true(solve(problem))
    worst, bad, tried = 0.0, None, 0
    for tname, cname, what, lying in lies(problem, factors, chosen, few=chosen is not None):
        tried += 1
        got = tenant_true(solve(lying))[tname]
        gain = got - honest[tname]
        if gain > _tol(honest[tname]) and gain > worst:
            worst, bad = gain, (tname, cname, what, got)
    if bad is None:
        return PropertyResult("strategy_proof_probe", True, f"no gain from {tried} false reports{scope}", 0.0)
    tname, cname, what, got = bad
    cls = f" class {cname}" if len(problem.tenant(tname).classes) > 1 else ""
    return PropertyResult(
        "strategy_proof_probe",
        False,
        f"{tname} gains by reporting{cls} {what}: true throughput {_fmt(honest[tname])} -> {_fmt(got)}{scope}",
        worst,
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


# --------------------------------------------------------------------------- all


KEYS = ("sharing_incentive", "envy_free", "pareto_efficient", "equal_throughput", "strategy_proof_probe", "adjacent_types", "capacity", "demand")


def check(alloc: Allocation, solve: Solve | None = None, sample: int | None = SAMPLE) -> dict[str, PropertyResult]:
    """All properties of ``alloc``; ``solve`` (the policy that produced it) enables the strategy-proofness probe
    (on ``sample`` tenants, None = all, 0 = not run)."""
    return {
        "sharing_incentive": sharing_incentive(alloc),
        "envy_free": envy_free(alloc),
        "pareto_efficient": pareto_efficient(alloc),
        "equal_throughput": equal_throughput(alloc),
        "strategy_proof_probe": strategy_proof_probe(alloc, solve, sample=sample),
        "adjacent_types": adjacent_types(alloc),
        "capacity": capacity(alloc),
        "demand": demand(alloc),
    }
