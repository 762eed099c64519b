"""Upper bounds on each class's final level in :func:`~slurm_fair.policies.filling.fill` (its module docstring
says why they hold): its own best within its caps, and the price bound from a stage LP's capacity duals (each other
class spends at least the cheapest cost of its current level, the class gets what its remaining budget buys).
Pure numpy, closed forms."""

from __future__ import annotations

import numpy as np


def own_best(speed: np.ndarray, demand: np.ndarray, type_cap: np.ndarray) -> np.ndarray:
    """(n,) the most throughput each class can get within its own caps (fastest types first); inf when
    it has no finite cap on a usable type and no finite demand."""
    n, k = speed.shape
    out = np.zeros(n)
    order = np.argsort(-speed, axis=1, kind="stable")
    left = np.array(demand, dtype=float)
    for c in range(k):
        j = order[:, c]
        s = speed[np.arange(n), j]
        cap = type_cap[np.arange(n), j]
        take = np.where(s > 0, np.minimum(cap, left), 0.0)
        with np.errstate(invalid="ignore"):
            out += np.where(take > 0, s * take, 0.0)
        with np.errstate(invalid="ignore"):  # inf - inf for a class with no finite demand: stays unlimited
            left = left - np.where(s > 0, take, 0.0)
    return out


def min_spend(a: np.ndarray, p: np.ndarray, need: np.ndarray, dem: np.ndarray) -> np.ndarray:
    """(n,) the least each class must spend at prices ``p`` to reach level ``need`` with at most ``dem`` GPUs
    (per-type caps relaxed, so it is a lower bound): min p·x s.t. a·x >= need, Σx <= dem, x >= 0. A
    two-row LP, so an optimum uses one type or two with both rows tight (closed forms, vectorized)."""
    n, k = a.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        per = np.where(a > 0, need[:, None] / a, np.inf)  # GPUs of type j alone
        single = np.where(per <= dem[:, None] * (1 + 1e-12), p[None, :] * per, np.inf)
        best = single.min(axis=1)
        fin = np.isfinite(dem)
        if fin.any():
            for i in range(k):
                for j in range(k):
                    if i == j:
                        continue
                    ai, aj = a[:, i], a[:, j]
                    xi = (need - aj * dem) / (ai - aj)  # both rows tight
                    ok = fin & (ai > aj) & (aj > 0) & (xi >= 0) & (xi <= dem)
                    cost = p[i] * xi + p[j] * (dem - xi)
                    best = np.where(ok, np.minimum(best, cost), best)
    best = np.where(need > 0, best, 0.0)
    # unreachable within the demand (cannot happen for a level a class holds; be safe): the cheapest unit price
    unit = np.where(a > 0, p[None, :] / np.where(a > 0, a, 1.0), np.inf).min(axis=1)
    return np.where(np.isfinite(best), best, np.where(np.isfinite(unit), need * unit, 0.0))


def price_bounds(a: np.ndarray, p: np.ndarray, budget: float, need: np.ndarray, dem: np.ndarray) -> np.ndarray:
    """Upper bound on each class's level from prices ``p`` (see the module docstring); ``a`` (n, k) level
    per GPU of each type (0 = unusable), ``need`` each class's current level, ``dem`` demands (scaled)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        spend = min_spend(a, p, need, dem)
        bud = budget - (spend.sum() - spend)  # what is left for each class
        bud = np.maximum(bud, 0.0)
        best = np.zeros(a.shape[0])
        pj = np.broadcast_to(p, a.shape)
        # single types: min(budget / p_j, demand) GPUs of type j
        gpus = np.where(pj > 0, bud[:, None] / pj, np.inf)
        gpus = np.minimum(gpus, dem[:, None])
        single = np.where(a > 0, a * gpus, 0.0)
        best = np.nanmax(np.where(np.isnan(single), 0.0, single), axis=1)
        # pairs with both the budget and the demand tight
        fin = np.isfinite(dem)
        if fin.any():
            k = a.shape[1]
            for i in range(k):
                for j in range(k):
                    if p[i] <= p[j]:
                        continue
                    xi = (bud - p[j] * dem) / (p[i] - p[j])
                    ok = fin & (xi >= 0) & (xi <= dem) & (a[:, i] > 0) & (a[:, j] > 0)
                    val = a[:, i] * xi + a[:, j] * (dem - xi)
                    best = np.where(ok, np.maximum(best, val), best)
    return best
