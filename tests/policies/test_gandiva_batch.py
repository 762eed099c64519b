"""Gandiva_fair's trades: the heap-driven ``trade`` against the one-trade-at-a-time scan it replaced (kept
here as the reference, with the §3.4 second price), and the second price on hand-worked instances."""

from __future__ import annotations

import math

import numpy as np
import pytest

from slurm_fair.model import JobClass, Problem, Tenant
from slurm_fair.policies import equal_share, gandiva_fair
from slurm_fair.policies.gandiva_fair import EPS, MAX_TRADES, second_price
from tests.conftest import matrix_problem


def reference_trade(vu, x):
    """The scan over all users per trade (the code before the heaps), with the §3.4 price."""
    x = x.copy()
    speed = vu.speed
    used = speed > 0
    mean = np.array([speed[used[:, j], j].mean() if used[:, j].any() else 0.0 for j in range(vu.k)])
    order = sorted(range(vu.k), key=lambda j: (mean[j], j))
    pairs = [(order[p], order[q]) for p in range(vu.k) for q in range(p + 1, vu.k)]
    pairs.sort(key=lambda ab: (-(mean[ab[1]] / max(mean[ab[0]], EPS)), ab))
    trades, progress = 0, True
    while progress and trades < MAX_TRADES:
        progress = False
        for a, b in pairs:
            both = (speed[:, a] > 0) & (speed[:, b] > 0)
            r = np.where(speed[:, a] > 0, speed[:, b] / np.where(speed[:, a] > 0, speed[:, a], 1), 0.0)
            bids = np.sort(r[both])
            free = np.ones(vu.n, dtype=bool)
            while trades < MAX_TRADES:
                holds_a = both & (x[:, a] > EPS)
                sellers = np.flatnonzero(holds_a & free)
                if sellers.size == 0:
                    break
                seller = int(sellers[np.argmax(r[sellers])])
                ok_b = both & (x[:, b] > EPS) & free
                ok_b[seller] = False
                buyers = np.flatnonzero(ok_b)
                if buyers.size == 0:
                    break
                buyer = int(buyers[np.argmin(r[buyers])])
                if r[seller] <= r[buyer] * (1 + 1e-9):
                    break
                p = second_price(bids.tolist(), float(r[seller]), float(r[buyer]))
                s = min(x[seller, a], x[buyer, b] * p)
                limit = {seller: math.inf, buyer: math.inf}
                for who, d in ((seller, 1 / p - 1), (buyer, 1 - 1 / p)):
                    if d > 0 and math.isfinite(vu.demand[who]):
                        limit[who] = min(limit[who], max(vu.demand[who] - x[who].sum(), 0.0) / d)
                if math.isfinite(vu.type_cap[seller, b]):
                    limit[seller] = min(limit[seller], max(vu.type_cap[seller, b] - x[seller, b], 0.0) * p)
                if math.isfinite(vu.type_cap[buyer, a]):
                    limit[buyer] = min(limit[buyer], max(vu.type_cap[buyer, a] - x[buyer, a], 0.0))
                s = min(s, limit[seller], limit[buyer])
                if s <= EPS:
                    free[buyer if limit[buyer] <= limit[seller] else seller] = False
                    continue
                x[seller, a] -= s
                x[seller, b] += s / p
                x[buyer, b] -= s / p
                x[buyer, a] += s
                trades += 1
                progress = True
    return x


def random_problem(rng, n, k):
    types = [f"g{j}" for j in range(k)]
    tenants = []
    for i in range(n):
        thr = {g: float(rng.choice([0.0, 1.0, 1.0, 1.0]) * rng.uniform(0.5, 8)) for g in types}
        if not any(thr.values()):
            thr[types[0]] = 1.0
        demand = None if rng.random() < 0.4 else float(rng.integers(1, 9))
        td = None
        if rng.random() < 0.3:
            td = {g: float(rng.integers(0, 5)) for g in types if rng.random() < 0.7}
            if not any(thr.get(g, 0) > 0 and v > 0 for g, v in td.items()):
                td = None
        w = float(rng.choice([1.0, 2.0, 0.5]))
        tenants.append(Tenant(f"t{i}", (JobClass("c", thr, demand, td),), w))
    return Problem({g: int(rng.integers(1, 3 * n)) for g in types}, tuple(tenants))


@pytest.mark.parametrize("seed", range(40))
def test_trades_equal_the_scan(seed):
    rng = np.random.default_rng(seed)
    p = random_problem(rng, int(rng.integers(2, 40)), int(rng.integers(2, 6)))
    vu = p.virtual_users()
    x0 = equal_share.share_arrays(vu)[0]
    np.testing.assert_allclose(gandiva_fair.trade(vu, x0, tol=0), reference_trade(vu, x0), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("n, k, seed", [(60, 4, 3), (120, 10, 1)])
def test_trades_equal_the_scan_on_philly_instances(n, k, seed):
    # binding demands: many buyers at (or within float leftovers of) their demand, refused in batches
    from benchmarks.philly import instance

    for mode in (False, True):
        p = instance(n, k, seed, type_demand=mode)
        vu = p.virtual_users()
        x0 = equal_share.share_arrays(vu)[0]
        np.testing.assert_allclose(gandiva_fair.trade(vu, x0, tol=0), reference_trade(vu, x0), rtol=1e-9, atol=1e-9)


def test_second_price_is_a_bid_between_the_traders_or_the_split():
    bids = [1.5, 2.0, 3.5, 4.0, 7.0]
    assert second_price(bids, 4.0, 2.0) == 3.5  # 3.5 lies strictly between; 7 (above the seller) is not a price
    assert second_price(bids, 3.5, 2.0) == 2.75  # nothing strictly between 2 and 3.5: split
    assert second_price(bids, 4.0, 3.5) == 3.75


def _traded(rows, x0, capacity):
    p = matrix_problem(rows, capacity=capacity)
    vu = p.virtual_users()
    log: list[str] = []
    return gandiva_fair.trade(vu, np.array(x0, dtype=float), log), log


def test_buyer_gains_when_the_only_other_bid_is_below_it():
    """u1 r=2 holds 1 fast GPU; u2 r=4 holds 2 slow; u3 r=1.5 holds 1 slow (and no fast GPU).
    The old rule priced at the other holders of slow GPUs (u3's 1.5) clamped up to r_buyer = 2: u1 gave its
    fast GPU for 2 slow ones, 2 -> 2, no gain. §3.4: no bid lies strictly between 2 and 4, so the surplus is
    split, p = 3: u2 gives its 2 slow GPUs for 2/3 fast (2 -> 4*2/3 = 8/3); u1 gives 2/3 fast for 2 slow and
    keeps 1/3 fast (2 -> 2 + 2/3 = 8/3). Then u1 (r=2) is the only seller left and u2 (r=4) the buyer: stop."""
    x, log = _traded([[1, 2], [1, 4], [1, 1.5]], [[0, 1], [2, 0], [1, 0]], (3, 1))
    np.testing.assert_allclose(x, [[2, 1 / 3], [0, 2 / 3], [1, 0]], atol=1e-12)
    assert len(log) == 1 and log[0].endswith("price 3")
    thr = (np.array([[1, 2], [1, 4], [1, 1.5]]) * x).sum(axis=1)
    np.testing.assert_allclose(thr, [8 / 3, 8 / 3, 1], atol=1e-12)  # before: 2, 2, 1 -- both traders gain


def test_second_price_comes_from_a_bidder_that_holds_no_slow_gpu():
    """u1 r=2 holds 1 fast; u2 r=4 holds 2 slow; u3 r=3.5 holds 1 fast and no slow. The old rule looked only
    at holders of slow GPUs (none besides the traders) and split at 3; §3.4 takes the second-highest bid of
    all users wanting the fast GPU: u3's 3.5. u2 gives 2 slow for 2/3.5 = 4/7 fast (2 -> 16/7); u1 gives 4/7
    fast for 2 slow (2 -> 2 + 2*3/7 = 20/7). Then the seller is u1 (r=2), the cheapest other holder of fast
    GPUs u3 (3.5 > 2): stop."""
    x, log = _traded([[1, 2], [1, 4], [1, 3.5]], [[0, 1], [2, 0], [0, 1]], (2, 2))
    np.testing.assert_allclose(x, [[2, 3 / 7], [0, 4 / 7], [0, 1]], atol=1e-12)
    assert len(log) == 1 and log[0].endswith("price 3.5")
    thr = (np.array([[1, 2], [1, 4], [1, 3.5]]) * x).sum(axis=1)
    np.testing.assert_allclose(thr, [20 / 7, 16 / 7, 3.5], atol=1e-12)


@pytest.mark.parametrize("n,k", [(120, 10), (200, 6)])
def test_the_pass_tolerance_stops_within_it_of_trading_to_the_end_and_keeps_the_equal_share(n, k):
    from benchmarks.philly import instance

    p = instance(n, k, 3)
    vu = p.virtual_users()
    x0, _ = equal_share.share_arrays(vu)
    exact = gandiva_fair.trade(vu, x0, tol=0)
    fast = gandiva_fair.trade(vu, x0)
    total = lambda x: float((x * vu.speed).sum())  # noqa: E731
    assert total(exact) * (1 - 1e-7) <= total(fast) <= total(exact) * (1 + 1e-9)
    u0, u = (x0 * vu.speed).sum(axis=1), (fast * vu.speed).sum(axis=1)
    assert (u >= u0 * (1 - 1e-12) - 1e-12).all()  # every trade helped both sides: nobody below its equal share
