"""The live-HiGHS progressive filling (default for oef-noncoop and gavel) on Philly-like instances with
binding demands (issue 9): sizes on which the cvxpy form failed ("infeasible"), each result checked against
the definition with independent scipy LPs, and the cvxpy form as a reference on small instances."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog
from scipy.sparse import lil_matrix

from benchmarks.philly import instance
from slurm_fair.policies import equal_share, gavel, oef_noncoop

CASES = [(t, s, td) for t in (20, 40, 60) for s in (0, 1, 2) for td in (False, True)]


def at_caps(vu, x, tol=1e-6):
    fin = np.isfinite(vu.type_cap) & (vu.speed > 0)
    return (x.sum(axis=1) >= vu.demand - tol) | (fin & (x >= vu.type_cap - tol)).any(axis=1)


def check_feasible(vu, x):
    assert (x >= -1e-12).all() and (x[vu.speed <= 0] == 0).all()
    assert (x.sum(axis=0) <= vu.capacity + 1e-9).all(), "capacity"
    assert (x <= vu.type_cap + 1e-9).all(), "per-type cap"
    assert (x.sum(axis=1) <= vu.demand + 1e-9).all(), "demand"


def max_common_level(vu, ref, raise_these, floor):
    """Independent LP: max t with u_l >= ref_l t for l in ``raise_these``, u_i >= floor_i for the others,
    capacity, demands and per-type caps (x flattened row-major, then t)."""
    n, k = vu.speed.shape
    nv = n * k + 1
    a = lil_matrix((k + 2 * n, nv))
    b = []
    for j in range(k):
        a[j, [i * k + j for i in range(n)]] = 1.0
        b.append(vu.capacity[j])
    r = k
    for i in range(n):
        if np.isfinite(vu.demand[i]):
            a[r, i * k:(i + 1) * k] = 1.0
            b.append(vu.demand[i])
            r += 1
    for i in range(n):
        a[r, i * k:(i + 1) * k] = -vu.speed[i]
        if raise_these[i]:
            a[r, nv - 1] = ref[i]
            b.append(0.0)
        else:
            b.append(-floor[i] * (1 - 1e-9))
        r += 1
    bounds = [(0, 0) if s <= 0 else (0, None if not np.isfinite(c) else c)
              for s, c in zip(vu.speed.ravel(), vu.type_cap.ravel())] + [(0, None)]
    c = np.zeros(nv)
    c[-1] = -1.0
    res = linprog(c, A_ub=a[:r].tocsr(), b_ub=np.array(b), bounds=bounds, method="highs")
    assert res.status == 0, res.message
    return -res.fun


@pytest.mark.parametrize("tenants,seed,type_demand", CASES)
def test_noncoop_philly_like_meets_its_definition(tenants, seed, type_demand):
    p = instance(tenants, 10, seed, type_demand=type_demand)
    vu = p.virtual_users()
    a = oef_noncoop.solve(p)
    check_feasible(vu, a.x)
    level = a.user_throughput() / vu.weight
    usable = ((vu.speed > 0) & (vu.capacity > 0)).any(axis=1) & (vu.demand > 0)
    free = usable & ~at_caps(vu, a.x)
    assert free.any()  # total demand is twice the capacity: somebody is below its caps
    top = level[free].max()
    np.testing.assert_allclose(level[free], top, rtol=1e-6)  # one common weighted level
    assert (level[usable] <= top * (1 + 1e-6)).all()  # capped classes at or below it
    capped = usable & ~free
    best = max_common_level(vu, vu.weight, free, a.user_throughput() * capped)
    assert best <= top * (1 + 1e-5) + 1e-7  # and it is the largest such level


@pytest.mark.parametrize("tenants,seed,type_demand", CASES)
def test_gavel_philly_like_meets_its_definition(tenants, seed, type_demand):
    p = instance(tenants, 10, seed, type_demand=type_demand)
    vu = p.virtual_users()
    a = gavel.solve(p)
    check_feasible(vu, a.x)
    e = equal_share.solve(p).user_throughput()
    u = a.user_throughput()
    assert (u >= e * (1 - 1e-6) - 1e-9).all()  # sharing incentive w.r.t. the capped equal share
    idle = vu.capacity - a.x.sum(axis=0)
    room = (vu.demand - a.x.sum(axis=1) > 1e-6)[:, None] & (a.x < vu.type_cap - 1e-6) & (vu.speed > 0)
    assert not (room & (idle > 1e-6)[None, :]).any()  # work-conserving
    has = e > 1e-7
    first = max_common_level(vu, e, has, np.zeros(vu.n))  # max-min: the smallest ratio is the largest possible
    np.testing.assert_allclose((u[has] / e[has]).min(), first, rtol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("type_demand", [False, True])
def test_fast_filling_agrees_with_the_cvxpy_form(seed, type_demand):
    p = instance(8, 10, seed, type_demand=type_demand)
    pairs = [(gavel.solve(p), gavel.solve(p, "HIGHS"))]
    if not type_demand:
        # With per-type caps the cvxpy form stops too early on these instances: all classes at level 1,
        # while the 11 below their caps can reach 2.0 together with the one at its caps kept at its level
        # (seed 0; checked with max_common_level), so it fails its own stated guarantee there; the fast
        # answer is checked against the definition by the tests above instead.
        pairs.append((oef_noncoop.solve(p), oef_noncoop.solve(p, "HIGHS")))
    for fast, plain in pairs:
        np.testing.assert_allclose(fast.user_throughput(), plain.user_throughput(), rtol=1e-5, atol=1e-5)
        assert fast.solver.startswith("HIGHS (live")


@pytest.mark.parametrize("seed", range(8))
def test_min_spend_is_the_two_row_lp_optimum(seed):
    """The closed form the price bounds rest on: the least cost at prices p of reaching a level within a
    demand equals the LP min p·x s.t. a·x >= need, Σx <= dem, x >= 0 (scipy), for every class."""
    from slurm_fair.policies.filling.bounds import min_spend

    rng = np.random.default_rng(seed)
    n, k = 12, 5
    a = rng.uniform(0.2, 3.0, (n, k)) * (rng.random((n, k)) < 0.8)
    a[:, 0] = np.maximum(a[:, 0], 0.1)  # every class can use some type
    p = rng.uniform(0.0, 2.0, k)
    dem = rng.choice([1.0, 2.0, 4.0, np.inf], n)
    best_level = np.where(np.isfinite(dem), a.max(axis=1) * np.where(np.isfinite(dem), dem, 0.0), np.inf)
    need = np.minimum(rng.uniform(0.0, 4.0, n), best_level * rng.uniform(0.2, 1.0, n))
    got = min_spend(a, p, need, dem)
    for i in range(n):
        rows, rhs = [-a[i]], [-need[i]]
        if np.isfinite(dem[i]):
            rows.append(np.ones(k))
            rhs.append(dem[i])
        res = linprog(p, A_ub=np.array(rows), b_ub=np.array(rhs), bounds=[(0, None)] * k, method="highs")
        assert res.status == 0
        assert got[i] == pytest.approx(res.fun, rel=1e-9, abs=1e-9), (i, got[i], res.fun)
