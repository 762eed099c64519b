"""The entitled bundle's transport LP (``slurm_fair.fairness.transport``): exact where a greedy is not, and equal to
HiGHS on random instances."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

from slurm_fair.fairness import transport
from slurm_fair.fairness.transport import transport_value


def highs(v, supply, cap):
    K, G = v.shape
    a = np.zeros((K + G, K * G))
    for k in range(K):
        a[k, k * G:(k + 1) * G] = 1.0
    for g in range(G):
        a[K + g, g::G] = 1.0
    bounds = [(0.0, None if x > 0 else 0.0) for x in v.ravel()]
    res = linprog(-np.where(v > 0, v, 0.0).ravel(), A_ub=a, b_ub=np.concatenate([supply, cap]), bounds=bounds,
                  method="highs")
    return -res.fun


def test_exact_where_the_most_valuable_pair_first_is_not():
    # group 0: 3.1 on type 0, 2.9 on type 1; group 1: 3 and 0.1; one GPU each, one GPU of each type.
    # greedy: 3.1 (0 on type 0) + 0.1 (1 on type 1) = 3.2; optimum: 1 on type 0 (3) + 0 on type 1 (2.9) = 5.9
    v = np.array([[3.1, 2.9], [3.0, 0.1]])
    assert transport_value(v, np.array([1.0, 1.0]), np.array([1.0, 1.0])) == pytest.approx(5.9)


def test_caps_and_types_a_group_may_not_use():
    # one group of 3 GPUs, values 2 and 1, 2.5 + 2.5 GPUs: 2.5 x 2 + 0.5 x 1
    assert transport_value(np.array([[2.0, 1.0]]), np.array([3.0]), np.array([2.5, 2.5])) == pytest.approx(5.5)
    # the fast type not allowed (0): only the slow one, 2.5 GPUs
    assert transport_value(np.array([[0.0, 1.0]]), np.array([3.0]), np.array([2.5, 2.5])) == pytest.approx(2.5)
    # two groups, one type: the more valuable group first
    v = np.array([[2.0], [5.0]])
    assert transport_value(v, np.array([2.0, 1.0]), np.array([2.0])) == pytest.approx(7.0)


def test_equal_to_highs_on_random_instances(monkeypatch):
    def no_fallback(*_a):
        raise AssertionError("the path search fell back to HiGHS")
    monkeypatch.setattr(transport, "_lp", no_fallback)
    rng = np.random.default_rng(7)
    for _ in range(300):
        k, g = int(rng.integers(1, 7)), int(rng.integers(1, 5))
        v = rng.uniform(0, 5, (k, g)) * (rng.random((k, g)) < 0.8)
        if rng.random() < 0.3:
            v = np.round(v)  # ties
        if rng.random() < 0.2:
            v = (v > 0).astype(float)  # every speed 1 (unprofiled classes): ties everywhere
        supply, cap = rng.integers(1, 9, k).astype(float), rng.uniform(0, 6, g)
        assert transport_value(v, supply, cap) == pytest.approx(highs(v, supply, cap), abs=1e-9)
