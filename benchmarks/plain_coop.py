"""Reference formulations of cooperative OEF (paper eq. 10, weighted) used to check the fast solver.

``plain``: the textbook cvxpy model with every one of the n(n-1) envy constraints, solved by ECOS (or any
cvxpy solver named) — the package's own ``coop_fast.plain_lp``, written once. ``full_lp``: the same LP written as one sparse matrix and solved by
``scipy.optimize.linprog(method="highs")``. Both are deliberately straightforward (no structure
exploited) and only meant for tests and the solver benchmark.

Problem: maximize sum_l S_l . x_l  s.t.  sum_l x_lj <= c_j,  x >= 0,
and for every ordered pair l != i:  S_l . x_l / w_l >= S_l . x_i / w_i.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog


def plain(speed, weight, capacity, solver: str = "ECOS") -> np.ndarray:
    """The plain cvxpy form, the one in the package (``coop_fast.plain_lp``)."""
    from slurm_fair.policies.oef_coop.fast import plain_lp

    return plain_lp(speed, weight, capacity, solver)


def full_lp(speed, weight, capacity) -> np.ndarray:
    """All n(n-1) envy rows in one sparse LP, scipy linprog with HiGHS."""
    S = np.asarray(speed, dtype=float)
    w = np.asarray(weight, dtype=float)
    c = np.asarray(capacity, dtype=float)
    n, k = S.shape
    nv = n * k  # variable (l, j) -> l*k + j
    li, ii = np.nonzero(~np.eye(n, dtype=bool))
    m = li.size
    rows = np.repeat(np.arange(m), 2 * k)
    cols = np.concatenate([li[:, None] * k + np.arange(k), ii[:, None] * k + np.arange(k)], axis=1).ravel()
    # -S_l.x_l / w_l + S_l.x_i / w_i <= 0
    vals = np.concatenate([-S[li] / w[li, None], S[li] / w[ii, None]], axis=1).ravel()
    A_envy = sp.csr_matrix((vals, (rows, cols)), shape=(m, nv))
    A_cap = sp.csr_matrix((np.ones(nv), (np.tile(np.arange(k), n), np.arange(nv))), shape=(k, nv))
    A = sp.vstack([A_cap, A_envy]).tocsr()
    b = np.concatenate([c, np.zeros(m)])
    res = linprog(-S.ravel(), A_ub=A, b_ub=b, bounds=(0, None), method="highs")
    if res.status != 0:
        raise RuntimeError(f"full LP cooperative OEF: {res.message}")
    return np.maximum(res.x.reshape(n, k), 0.0)


def envy_violation(speed, weight, x) -> float:
    """Largest S_l.x_i/w_i - S_l.x_l/w_l over ordered pairs (<= 0 means envy-free)."""
    S = np.asarray(speed, dtype=float)
    w = np.asarray(weight, dtype=float)
    U = S @ np.asarray(x, dtype=float).T
    V = U / w[None, :] - (np.diag(U) / w)[:, None]
    np.fill_diagonal(V, -np.inf)
    return float(V.max()) if S.shape[0] > 1 else 0.0
