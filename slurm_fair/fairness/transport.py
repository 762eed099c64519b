"""The value of a bundle of GPUs to a set of jobs, each at its own speeds and up to its own GPUs: the small transport
LP realized fairness values an account's entitled bundle with (``realized.py``, ``docs/realized-fairness.md``).
Pure.

    max Σ_k,g x_k,g v_k,g   s.t.   Σ_g x_k,g ≤ n_k (each job group k),   Σ_k x_k,g ≤ c_g (each type g),   x ≥ 0,

with x_k,g = 0 where v_k,g ≤ 0 (the group does not run, or may not be counted, on g). Jobs of one class that may
use the same types are one group (n_k their GPUs together): splitting a group's x in proportion to its jobs' GPUs
is feasible for each job, so the value is the same as job by job.

:func:`transport_value` solves it exactly by successive most-profitable augmenting paths (a min-cost flow from the
groups to the types, Bellman-Ford over the residual graph with its reverse edges): a flow built from shortest
paths is the most valuable one of its size, each further path is worth no more than the one before, so it stops
at the first path worth ≤ 0 with the optimum. A greedy (the most valuable pair first) is not exact: a group with
v = (3.1, 2.9) and one with v = (3, 0.1) on one GPU of each type give 3.2 greedily and 5.9 at the optimum. With
one group the LP is that greedy, fastest type first (taken without the path search).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog

EPS = 1e-9


def transport_value(value: np.ndarray, supply: np.ndarray, cap: np.ndarray) -> float:
    """The LP's optimum (module docstring): ``value`` (K, G) per GPU of group k on type g (≤ 0: not allowed),
    ``supply`` (K,) each group's GPUs, ``cap`` (G,) each type's GPUs."""
    v = np.asarray(value, dtype=float)
    left = np.asarray(supply, dtype=float).copy()
    room = np.asarray(cap, dtype=float).copy()
    ok = v > 0
    if v.shape[0] == 1:  # one group: fastest allowed type first
        total, n = 0.0, float(left[0])
        for g in np.argsort(-v[0], kind="stable"):
            if n <= EPS or not ok[0, g]:
                break
            take = min(n, float(room[g]))
            total += take * float(v[0, g])
            n -= take
        return total
    return _paths(v, ok, left, room)


def _paths(v: np.ndarray, ok: np.ndarray, supply: np.ndarray, cap: np.ndarray) -> float:
    K, G = v.shape
    left, room = supply.copy(), cap.copy()
    x = np.zeros((K, G))
    inf = np.inf
    fwd_cost = np.where(ok, -v, inf)  # cost of group k -> type g (maximizing: the value, negated)
    for _ in range(64 * (K + G) + 64):
        # distances from the source: a group with GPUs left starts at 0; group -> type by a forward edge; type ->
        # group back along a reverse edge (x > 0), earning the value back. No negative cycle: the flow is optimal
        # for its size, so at most K + G rounds settle them.
        dk = np.where(left > EPS, 0.0, inf)
        pk = np.full(K, -1)
        dg = np.full(G, inf)
        pg = np.full(G, -1)
        for _round in range(2 * (K + G) + 2):  # a label changes only when it improves: the predecessors stay a tree
            cand = dk[:, None] + fwd_cost
            bk = np.argmin(cand, axis=0)
            nd = cand[bk, np.arange(G)]
            up_g = nd < dg - EPS
            dg = np.where(up_g, nd, dg)
            pg = np.where(up_g, bk, pg)
            back = np.where(x > EPS, dg[None, :] + v, inf)
            bg = np.argmin(back, axis=1)
            nk = back[np.arange(K), bg]
            up_k = nk < dk - EPS
            if not up_g.any() and not up_k.any():
                break
            dk = np.where(up_k, nk, dk)
            pk = np.where(up_k, bg, pk)
        else:
            return _lp(v, ok, supply, cap)
        ends = np.where(room > EPS, dg, inf)
        g = int(np.argmin(ends))
        if not ends[g] < -EPS:
            break
        path, seen = [], set()  # (k, g) forward edges and (k, g) reverse edges, from the sink back
        delta = float(room[g])
        while True:
            k = int(pg[g])
            path.append((k, g, 1))
            if pk[k] < 0:
                delta = min(delta, float(left[k]))
                break
            g = int(pk[k])
            if (k, g) in seen:
                return _lp(v, ok, supply, cap)
            seen.add((k, g))
            path.append((k, g, -1))
            delta = min(delta, float(x[k, g]))
        for k, g, sign in path:
            x[k, g] += sign * delta
        left[path[-1][0]] -= delta
        room[path[0][1]] -= delta
    else:
        return _lp(v, ok, supply, cap)
    return float((x * np.where(ok, v, 0.0)).sum())


def _lp(v: np.ndarray, ok: np.ndarray, left: np.ndarray, room: np.ndarray) -> float:  # pragma: no cover - guard
    """The same LP by HiGHS, from scratch (only if the path search did not settle: it always has in the tests)."""
    K, G = v.shape
    c = -np.where(ok, v, 0.0).ravel()
    a_rows = np.zeros((K + G, K * G))
    for k in range(K):
        a_rows[k, k * G:(k + 1) * G] = 1.0
    for g in range(G):
        a_rows[K + g, g::G] = 1.0
    bounds = [(0.0, None if ok.ravel()[i] else 0.0) for i in range(K * G)]
    res = linprog(c, A_ub=a_rows, b_ub=np.concatenate([left, room]), bounds=bounds, method="highs")
    return float(-res.fun)
