"""The fast progressive filling (``filling.fill``: batch freezing, column generation) against an independent
leximin by the textbook definition (scipy LPs, one class tested at a time) on small random instances with
demands and per-type caps, and the shared cvxpy loop (``leximin``) against the fast form."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

from slurm_fair.policies import filling, gavel, oef_noncoop
from slurm_fair.policies.filling import columns


def leximin_reference(speed, ref, capacity, demand, type_cap):
    """Levels u_l / ref_l of the leximin point: raise one common level t (max t, scipy); every class that
    cannot get above t while the other rising classes keep t and the frozen ones their levels (one LP per
    class: max its own level) freezes at t; repeat. x is flattened row-major, then t."""
    n, k = speed.shape
    nv = n * k + 1
    live = (ref > 0) & (demand > 0) & ((speed > 0) & (type_cap > 0) & (capacity > 0)).any(axis=1)
    bounds = [(0, 0) if speed[i, j] <= 0 else (0, min(type_cap[i, j], capacity[j]))
              for i in range(n) for j in range(k)] + [(0, None)]
    cap_a = np.zeros((k, nv))
    for j in range(k):
        cap_a[j, j:n * k:k] = 1.0
    dem_rows = [i for i in range(n) if np.isfinite(demand[i])]
    dem_a = np.zeros((len(dem_rows), nv))
    for r, i in enumerate(dem_rows):
        dem_a[r, i * k:(i + 1) * k] = 1.0
    base_a = np.vstack([cap_a, dem_a])
    base_b = np.concatenate([capacity, demand[dem_rows]])

    def level_rows(active, frozen, with_t, level=0.0, skip=-1):
        a, b = [], []
        for i in range(n):
            if i == skip or not live[i]:
                continue
            row = np.zeros(nv)
            row[i * k:(i + 1) * k] = -speed[i] / ref[i]
            if active[i]:
                row[-1] = 1.0 if with_t else 0.0
                b.append(0.0 if with_t else -level * (1 - 1e-9))
            else:
                b.append(-frozen[i] * (1 - 1e-9))
            a.append(row)
        return np.array(a).reshape(-1, nv), np.array(b)

    active = live.copy()
    frozen = np.zeros(n)
    while active.any():
        a, b = level_rows(active, frozen, True)
        c = np.zeros(nv)
        c[-1] = -1.0
        res = linprog(c, A_ub=np.vstack([base_a, a]), b_ub=np.concatenate([base_b, b]), bounds=bounds, method="highs")
        assert res.status == 0, res.message
        t = -res.fun
        stuck = []
        for i in np.flatnonzero(active):
            a, b = level_rows(active, frozen, False, level=t, skip=i)
            c = np.zeros(nv)
            c[i * k:(i + 1) * k] = -speed[i] / ref[i]
            res = linprog(c, A_ub=np.vstack([base_a, a]), b_ub=np.concatenate([base_b, b]),
                          bounds=bounds[:-1] + [(0, 0)], method="highs")
            assert res.status == 0, res.message
            if -res.fun <= t * (1 + 1e-7) + 1e-12:
                stuck.append(i)
        assert stuck, "no class stuck at the level"
        for i in stuck:
            active[i] = False
            frozen[i] = t
    return np.where(live, frozen, 0.0)


def random_instance(rng, n, k, caps: bool):
    speed = np.cumprod(rng.uniform(1.0, 2.5, (n, k)), axis=1)  # slow -> fast types, different ratios
    speed *= rng.random((n, k)) < 0.85  # some types unusable
    speed[:, 0] = np.maximum(speed[:, 0], 1.0)
    ref = rng.choice([1.0, 2.0], n)
    capacity = rng.integers(1, 6, k).astype(float)
    demand = rng.choice([1.0, 2.0, 4.0, 8.0, np.inf], n, p=[0.35, 0.25, 0.2, 0.1, 0.1])
    type_cap = np.full((n, k), np.inf)
    if caps:
        some = rng.random((n, k)) < 0.3
        type_cap[some] = rng.integers(0, 3, some.sum()).astype(float)
    type_cap = np.where(speed > 0, type_cap, 0.0)
    return speed, ref, capacity, demand, type_cap


@pytest.mark.parametrize("seed", range(12))
def test_fill_is_the_leximin_of_the_definition(seed):
    rng = np.random.default_rng([22, seed])
    n, k = int(rng.integers(5, 13)), int(rng.integers(2, 7))
    speed, ref, capacity, demand, type_cap = random_instance(rng, n, k, caps=seed % 2 == 1)
    want = leximin_reference(speed, ref, capacity, demand, type_cap)
    res = filling.fill(speed, ref, capacity, demand, type_cap)
    got = (res.x * speed).sum(axis=1) / ref
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    # and it holds: capacity, demands, per-type caps
    assert (res.x.sum(axis=0) <= capacity + 1e-7).all()
    assert (res.x.sum(axis=1) <= demand + 1e-7).all()
    assert (res.x <= type_cap + 1e-7).all()


@pytest.mark.parametrize("seed", range(6))
def test_column_generation_path_is_exact(seed):
    """Many usable types per class, so the model starts with a subset of the pairs (checked) and prices
    the rest in: the levels still equal the reference leximin."""
    rng = np.random.default_rng([23, seed])
    n, k = 14, 8
    speed, ref, capacity, demand, type_cap = random_instance(rng, n, k, caps=False)
    speed = np.cumprod(rng.uniform(1.0, 2.5, (n, k)), axis=1)  # every type usable
    type_cap = np.full((n, k), np.inf)
    s = capacity.sum() / n
    usable = (speed > 0) & (type_cap > 0)
    assert usable.sum() > columns.CG_MIN * n
    first = columns.first_columns(speed * s / ref[:, None], demand / s, type_cap / s, usable)
    assert first.sum() < usable.sum()
    want = leximin_reference(speed, ref, capacity, demand, type_cap)
    res = filling.fill(speed, ref, capacity, demand, type_cap)
    np.testing.assert_allclose((res.x * speed).sum(axis=1) / ref, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("seed", range(4))
def test_noncoop_fast_equals_cvxpy_loop_without_type_caps(seed):
    """eq. 9 with demands: the fast form and the shared cvxpy loop (``leximin.fill_cvxpy``) agree."""
    rng = np.random.default_rng([24, seed])
    speed, ref, capacity, demand, type_cap = random_instance(rng, 9, 4, caps=False)
    x_fast, capped_fast = oef_noncoop.solve_arrays(speed, ref, capacity, demand, type_cap=type_cap)
    x_ref, _ = oef_noncoop.solve_arrays(speed, ref, capacity, demand, "HIGHS", type_cap=type_cap)
    np.testing.assert_allclose((x_fast * speed).sum(axis=1), (x_ref * speed).sum(axis=1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_gavel_fast_equals_cvxpy_loop(seed):
    from benchmarks.philly import instance

    p = instance(6, 4, seed, type_demand=seed == 2)
    fast, plain = gavel.solve(p), gavel.solve(p, "HIGHS")
    np.testing.assert_allclose(fast.user_throughput(), plain.user_throughput(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("demands", [False, True])
def test_column_generation_with_sampled_prices_equals_the_full_model(monkeypatch, demands):
    """Big enough for the first pairs to come from sampled prices (checked): the levels equal those of the
    model with every pair from the start (column generation off)."""
    from benchmarks.philly import instance

    vu = instance(120, 10, 3).virtual_users()
    s = vu.capacity.sum() / vu.n
    usable = (vu.speed > 0) & (vu.type_cap > 0)
    assert columns.sample_prices(vu.speed * s / vu.weight[:, None], usable, vu.capacity / s) is not None
    demand = vu.demand if demands else np.full(vu.n, np.inf)
    cg = filling.fill(vu.speed, vu.weight, vu.capacity, demand, vu.type_cap)
    monkeypatch.setattr(columns, "CG_MIN", np.inf)
    full = filling.fill(vu.speed, vu.weight, vu.capacity, demand, vu.type_cap)
    np.testing.assert_allclose((cg.x * vu.speed).sum(axis=1), (full.x * vu.speed).sum(axis=1), rtol=1e-6, atol=1e-7)
