"""Column generation in :func:`~slurm_fair.policies.filling.fill`: when classes can use more than ``CG_MIN`` types on
average the model starts with a few (class, type) pairs per class (:func:`first_columns`) and the missing ones are
priced in after each exact solve (``CG_ROUNDS`` rounds, then all the rest)."""

from __future__ import annotations

import numpy as np

from ...stdio import new_highs

CG_MIN = 5.0  # column generation when classes can use more than this many types on average
CG_ROUNDS = 3  # pricing rounds before every missing pair is added (later solves are small warm ones)
CG_FIRST = 2  # pairs per class in the first model besides its fastest type (best by comparative advantage)


def sample_prices(a: np.ndarray, usable: np.ndarray, capacity: np.ndarray) -> np.ndarray | None:
    """Capacity prices of max t s.t. every class of a random 1/8 sample (at least 40) gets level t, with
    1/8 of each type's GPUs (no demands, so capacity binds): a guess of what each type is worth, for
    choosing the first pairs. None when the instance is too small to sample."""
    import highspy

    live = np.flatnonzero(usable.any(axis=1))
    m = max(40, live.size // 8)
    if live.size < 2 * m:
        return None
    pick = np.sort(np.random.default_rng(0).choice(live, m, replace=False))
    r, c = np.nonzero(usable[pick])
    nv = r.size
    h = new_highs()
    inf = highspy.kHighsInf
    h.addVars(nv + 1, np.zeros(nv + 1), np.full(nv + 1, inf))
    h.changeColCost(nv, 1.0)
    h.changeObjectiveSense(highspy.ObjSense.kMaximize)
    for j in range(a.shape[1]):  # capacity rows
        cs = np.flatnonzero(c == j).astype(np.int32)
        h.addRow(-inf, float(capacity[j]) * m / live.size, cs.size, cs, np.ones(cs.size))
    for q in range(m):  # level rows: a·x - t >= 0
        cs = np.flatnonzero(r == q)
        h.addRow(0.0, inf, cs.size + 1, np.append(cs, nv).astype(np.int32), np.append(a[pick[q], c[cs]], -1.0))
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    return np.abs(np.asarray(h.getSolution().row_dual)[:a.shape[1]])


def first_columns(a: np.ndarray, dem: np.ndarray, cap: np.ndarray, usable: np.ndarray,
                   capacity: np.ndarray | None = None) -> np.ndarray:
    """(n, k) bool: the pairs the model starts with. Per class its fastest type, every type its own best
    uses (fastest first within its caps), and the CG_FIRST types with the most level per unit of price
    (prices from :func:`sample_prices` when ``capacity`` is given and the instance is big enough, else each
    type's median level per GPU: comparative advantage, where a class's GPUs go at a max-min optimum)."""
    n, k = a.shape
    out = np.zeros((n, k), dtype=bool)
    live = usable.any(axis=1)
    out[np.arange(n), np.argmax(a, axis=1)] = True
    price = sample_prices(a, usable, capacity) if capacity is not None else None
    with np.errstate(invalid="ignore", divide="ignore"):
        if price is None or not (price > 0).any():
            price = np.array([np.median(a[usable[:, j], j]) if usable[:, j].any() else 1.0 for j in range(k)])
        price = np.maximum(price, 1e-9 * price.max())
        rel = np.where(usable, a / price[None, :], -np.inf)
    top = np.argsort(-rel, axis=1, kind="stable")[:, :CG_FIRST]
    out[np.arange(n)[:, None], top] = True
    # own best: fastest types first, each up to its cap, until the demand is covered
    order = np.argsort(-a, axis=1, kind="stable")
    left = np.where(np.isfinite(dem), dem, np.inf)
    for c in range(k):
        j = order[:, c]
        take = usable[np.arange(n), j] & (left > 1e-12)
        out[np.arange(n)[take], j[take]] = True
        with np.errstate(invalid="ignore"):
            left = np.where(take, left - np.minimum(cap[np.arange(n), j], left), left)
    return out & usable & live[:, None]
