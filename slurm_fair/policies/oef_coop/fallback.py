"""The exact path cooperative OEF (eq. 10) falls back to when the row generation of :mod:`.fast` fails (issue 41).

**Root cause of the failures** (measured, ``tests/policies/test_coop_near_proportional.py``): speed vectors
proportional up to a relative noise of about 1e-9 … 1e-6 (classes whose speeds are scaled copies of one
profile). Two such users l, l' are nearly indifferent between their bundles, so their envy rows
``S_l.(x_l/w_l - x_l'/w_l') >= 0`` and ``S_l'.(x_l'/w_l' - x_l/w_l) >= 0`` are nearly parallel (the angle between
them is the noise) and both tight at the optimum: the vertex lies where two nearly parallel hyperplanes meet and
the simplex basis there has a condition number of about 1/noise. With exactly proportional vectors the two rows
are exactly opposite (an equality, harmless); with noise above ~1e-5 the basis is well conditioned. In between,
the live model of :mod:`.fast` — feasibility tolerance 1e-9, rows deleted and added, dual simplex restarted from
the last basis, presolve off — ends a round with HiGHS status "Not Set", "Solve error" or "Unknown" (16 of 100
seeded 40-user instances with noise 1e-13 … 1e-3; 18 of 90 at 86 … 240 users).

**The fallback**: the same LP written once with *every* envy row (n(n-1) of them, no generation, no deletion, no
warm basis), solved from scratch with presolve and HiGHS' own feasibility tolerance (1e-7), dual simplex first
and the interior-point method with crossover if that fails. It solved every failing instance measured. Its
answer is accepted only when it is exact to :data:`ACCEPT` (the largest envy, relative to the envier's own
throughput, and the capacity excess) — ten times tighter than the fairness checker's 1e-6
(:mod:`slurm_fair.fairness.values`) — else SolverError. Above :data:`MAX_USERS` users (n(n-1) rows would take
minutes) there is no fallback and the first error stands.
"""

from __future__ import annotations

import numpy as np

from ...errors import SolverError
from ...stdio import new_highs

ACCEPT = 1e-7  # relative envy / capacity excess the fallback's answer may have (the checker allows 1e-6)
MAX_USERS = 400  # users above which the n(n-1)-row LP is not tried (160 000 rows; 3-9 s at 240 users, loaded)


def relative_envy(S: np.ndarray, w: np.ndarray, x: np.ndarray) -> float:
    """max over l != i of (S_l.x_i/w_i - S_l.x_l/w_l) / max(1, S_l.x_i/w_i): the fairness checker's measure
    (``fairness.properties._envy``: a gap counts beyond TOL * max(1, value of the other bundle))."""
    n = S.shape[0]
    if n < 2:
        return 0.0
    U = S @ x.T
    V = U / w[None, :]
    own = (np.diag(U) / w)[:, None]
    R = (V - own) / np.maximum(1.0, np.abs(V))
    np.fill_diagonal(R, -np.inf)
    return float(R.max())


def full_lp(S: np.ndarray, w: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Eq. 10 with all n(n-1) envy rows as one HiGHS model, solved cold (see the module docstring); x (n x k).
    Raises SolverError if both methods fail or the answer is not exact to :data:`ACCEPT`."""
    import highspy

    S, w, c = (np.asarray(v, dtype=float) for v in (S, w, c))
    n, k = S.shape
    if n > MAX_USERS:
        raise SolverError(f"cooperative OEF fallback: {n} users > {MAX_USERS}, the full LP is not tried")
    x = np.zeros((n, k))
    usable = (S > 0) & (c > 0)[None, :]
    vl, vj = np.nonzero(usable)
    nv = int(vl.size)
    if nv == 0:
        return x
    ws = w / w.max()
    var = np.full((n, k), -1, dtype=np.int64)
    var[vl, vj] = np.arange(nv)
    inf = highspy.kHighsInf
    h = new_highs()
    h.addCols(nv, S[vl, vj], np.zeros(nv), np.full(nv, inf), 0, np.zeros(nv, dtype=np.int32),
              np.zeros(0, dtype=np.int32), np.zeros(0))
    h.changeObjectiveSense(highspy.ObjSense.kMaximize)
    order = np.argsort(vj, kind="stable").astype(np.int32)
    h.addRows(k, np.full(k, -inf), c, nv, np.searchsorted(vj[order], np.arange(k)).astype(np.int32), order, np.ones(nv))
    # envy rows S_l.x_l - (w_l/w_i) S_l.x_i >= 0 for every l with a usable type and every i != l
    has = np.nonzero(usable.any(axis=1))[0]
    li = np.repeat(has, n)
    ii = np.tile(np.arange(n), has.size)
    keep = li != ii
    li, ii = li[keep], ii[keep]
    idx = np.concatenate([var[li], var[ii]], axis=1)
    val = np.concatenate([np.where(var[li] >= 0, S[li], 0.0), -(ws[li] / ws[ii])[:, None] * S[li]], axis=1)
    ok = (idx >= 0) & (val != 0)
    counts = ok.sum(axis=1)
    starts = np.zeros(li.size, dtype=np.int32)
    np.cumsum(counts[:-1], out=starts[1:])
    h.addRows(li.size, np.zeros(li.size), np.full(li.size, inf), int(counts.sum()), starts,
              idx[ok].astype(np.int32), val[ok])
    tried = []
    for method in ("simplex", "ipm"):
        h.clearSolver()
        h.setOptionValue("solver", method)
        h.run()
        status = h.getModelStatus()
        if status == highspy.HighsModelStatus.kOptimal:
            x[vl, vj] = np.maximum(np.asarray(h.getSolution().col_value)[:nv], 0.0)
            envy = relative_envy(S, w, x)
            over = float(np.max((x.sum(axis=0) - c) / np.maximum(1.0, c)))
            if envy <= ACCEPT and over <= ACCEPT:
                return x
            tried.append(f"{method}: envy {envy:.3g}, capacity excess {over:.3g} (> {ACCEPT:g})")
            x[:] = 0.0
        else:
            tried.append(f"{method}: {h.modelStatusToString(status)}")
    raise SolverError("cooperative OEF fallback (full LP) failed: " + "; ".join(tried))
