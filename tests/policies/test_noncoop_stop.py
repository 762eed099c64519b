"""oef-noncoop's early stop of the progressive filling at eq. 9's common level (``filling.fill(common_stop=True)``,
the proof in ``oef_noncoop``'s module docstring) against the full filling it replaces: the same per-class
throughputs and the same capped classes, on many random instances (demands, weights, per-type caps, zero speeds)
and Philly-like ones."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_fair.policies import filling, oef_noncoop

from .test_filling_exact import random_instance


def both(speed, ref, capacity, demand, type_cap):
    full = oef_noncoop._fast(speed, ref, capacity, demand, type_cap, common_stop=False)
    stop = oef_noncoop._fast(speed, ref, capacity, demand, type_cap, common_stop=True)
    return full, stop


def same(speed, ref, full, stop, rtol=1e-9):
    (x_full, capped_full), (x_stop, capped_stop) = full, stop
    u_full, u_stop = (x_full * speed).sum(axis=1), (x_stop * speed).sum(axis=1)
    np.testing.assert_allclose(u_stop, u_full, rtol=rtol, atol=rtol * max(1.0, float(u_full.max(initial=0.0))))
    assert capped_stop == capped_full


@pytest.mark.parametrize("seed", range(40))
def test_stop_equals_full_filling_on_random_instances(seed):
    rng = np.random.default_rng([31, seed])
    n, k = int(rng.integers(4, 25)), int(rng.integers(1, 7))
    speed, ref, capacity, demand, type_cap = random_instance(rng, n, k, caps=seed % 2 == 1)
    if seed % 5 == 0:  # whole zero-speed rows (a class no type can run) and a zero demand
        speed[rng.integers(n)] = 0.0
        demand[rng.integers(n)] = 0.0
        type_cap = np.where(speed > 0, type_cap, 0.0)
    if seed % 3 == 0:  # weights beyond 1 and 2
        ref = rng.uniform(0.5, 4.0, n)
    same(speed, ref, *both(speed, ref, capacity, demand, type_cap))


@pytest.mark.parametrize("tenants,k,per_type", [(40, 10, True), (60, 4, True), (80, 10, False), (120, 10, True)])
def test_stop_equals_full_filling_on_philly_instances(tenants, k, per_type):
    from benchmarks.philly import instance

    for seed in range(2):
        vu = instance(tenants, k, seed, type_demand=per_type).virtual_users()
        same(vu.speed, vu.weight, *both(vu.speed, vu.weight, vu.capacity, vu.demand, vu.type_cap))


def test_stop_saves_stages_where_the_filling_went_on_above_the_common_level():
    """With per-type demands most classes end far above the common level (they are cut back to it): the
    stopped filling solves fewer LPs, and its answer is the full one (checked above)."""
    from benchmarks.philly import instance

    vu = instance(120, 10, 0, type_demand=True).virtual_users()
    args = (vu.speed, vu.weight, vu.capacity, vu.demand, vu.type_cap)
    full, stop = filling.fill(*args), filling.fill(*args, common_stop=True)
    assert stop.lps < full.lps
    assert stop.level < full.level


def test_no_demand_means_no_early_stop_needed():
    """Without caps every class is below its caps at the first stage: that is the common level."""
    rng = np.random.default_rng(5)
    speed = np.cumprod(rng.uniform(1.0, 2.5, (12, 4)), axis=1)
    ref, capacity = np.ones(12), np.full(4, 3.0)
    inf = np.full(12, np.inf)
    res = filling.fill(speed, ref, capacity, inf, np.full((12, 4), np.inf), common_stop=True)
    assert res.stages == 1
    same(speed, ref, *both(speed, ref, capacity, inf, np.full((12, 4), np.inf)))
