"""A cheap certificate that an allocation is NOT Pareto-efficient, so that large checks need no LP when one
exists (:func:`slurm_fair.fairness.pareto_efficient` uses it above ``EXACT_VARS`` variables). Pure, numpy only.

Two improvements that hurt nobody, each checked within every class's demand and per-type caps:

* **idle GPUs**: a type with GPUs left over and a class that can use it (speed > 0, below its demand and its
  cap of that type): give it the spare GPUs;
* **a trade** between two classes: l holds type b and values a relatively more than i, who holds a
  (s_l^a / s_l^b > s_i^a / s_i^b); l gives e of b for r*e of a with r between the two ratios, so both gain. r = 1
  (no change in GPU counts) when that lies between them, else the class that ends with more GPUs must be below
  its demand. For each pair of types only the most eager giver and taker are tried.

The gain of the improvement found is a lower bound of what the exact LP would find.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model import VirtualUsers

EXACT_VARS = 5000  # virtual users x types up to which the exact LP alone decides (its gain is exact)
TRIES = 4  # per pair of types, the most eager givers x takers tried
HOLD = 1e-6  # GPUs: smaller holdings and cap slacks are not traded (solver noise)


def _who(vu: VirtualUsers, i: int) -> str:
    return vu.tenant[i] if vu.tenant.count(vu.tenant[i]) == 1 else f"{vu.tenant[i]}/{vu.cls[i]}"


def _trade(s, x, cslack, dslack, l: int, i: int, a: int, b: int) -> tuple[float, float, float, float] | None:
    """(l's gain, i's gain, e, r) of l giving e of type b for r*e of type a from i, or None if no such trade
    gains for both (module docstring)."""
    q = s[l, a] / s[l, b] if s[l, b] > 0 else np.inf
    p = s[i, a] / s[i, b]
    if not q > p:
        return None
    lo, hi = 1.0 / q, 1.0 / p if p > 0 else np.inf  # r in (lo, hi): both gain
    r = 1.0 if lo < 1.0 < hi else (lo + hi) / 2 if np.isfinite(hi) else 2.0 * lo
    if r > 1 and not dslack[l] > 0 or r < 1 and not dslack[i] > 0:
        return None
    e = min(x[l, b], x[i, a] / r, cslack[l, a] / r, cslack[i, b])
    if r > 1:
        e = min(e, dslack[l] / (r - 1))
    elif r < 1:
        e = min(e, dslack[i] / (1 - r))
    gl, gi = e * (s[l, a] * r - s[l, b]), e * (s[i, b] - s[i, a] * r)
    if not (gl > 0 and gi > 0):
        return None
    return float(gl), float(gi), float(e), float(r)


@dataclass(frozen=True)
class Improvement:
    gain: float  # total throughput gained, nobody losing
    who: int  # a virtual user that gains
    who_gain: float
    how: str  # what the improvement is


def improvement(vu: VirtualUsers, x: np.ndarray, tol: float) -> Improvement | None:
    """The better of the two improvements above (the larger gain) if one gains more than ``tol``, else None."""
    s = vu.speed
    n, k = x.shape
    if n == 0:
        return None
    total = x.sum(axis=1)
    dslack = np.where(np.isfinite(vu.demand), vu.demand - total, np.inf)
    cap = np.where(s > 0, vu.type_cap, 0.0)
    cslack = cap - x  # inf where uncapped
    best: Improvement | None = None
    # idle GPUs
    idle = vu.capacity - x.sum(axis=0)
    amount = np.minimum(np.minimum(idle[None, :], dslack[:, None]), cslack)
    amount = np.where((s > 0) & (idle[None, :] > 0), np.clip(amount, 0.0, None), 0.0)
    g = s * amount
    if g.size and g.max() > tol:
        i, j = np.unravel_index(int(np.argmax(g)), g.shape)
        best = Improvement(float(g[i, j]), int(i), float(g[i, j]), f"{amount[i, j]:.6g} idle {vu.gpu_types[j]} GPUs")
    # trades: l gives b for a, i gives a for b
    for a in range(k):
        for b in range(k):
            if a == b:
                continue
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(s[:, b] > 0, s[:, a] / s[:, b], np.inf)  # s^a / s^b
            giver = (x[:, b] > HOLD) & (cslack[:, a] > HOLD) & (s[:, a] > 0) & ((ratio > 1) | (dslack > 0))
            taker = (x[:, a] > HOLD) & (cslack[:, b] > HOLD) & (s[:, b] > 0) & ((ratio < 1) | (dslack > 0))
            if not giver.any() or not taker.any():
                continue
            gl_idx, tk_idx = np.flatnonzero(giver), np.flatnonzero(taker)
            gl_idx = gl_idx[np.argsort(-ratio[gl_idx], kind="stable")[:TRIES]]  # the most eager first
            tk_idx = tk_idx[np.argsort(ratio[tk_idx], kind="stable")[:TRIES]]
            for l in gl_idx:
                for i in tk_idx:
                    t = _trade(s, x, cslack, dslack, int(l), int(i), a, b)
                    if t is not None and t[0] + t[1] > tol and (best is None or t[0] + t[1] > best.gain):
                        gl, gi, e, r = t
                        best = Improvement(gl + gi, int(l), gl, f"a trade of {e:.6g} {vu.gpu_types[b]} for "
                                           f"{r * e:.6g} {vu.gpu_types[a]} with {_who(vu, int(i))}")
    return best
