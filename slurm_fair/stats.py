"""Statistics shared by the read side (:mod:`slurm_fair.views`) and the simulator (:mod:`slurm_fair.sim`): pure,
no I/O. :func:`percentile` of a list of numbers; :func:`fairness_summary` of the envy and sharing-incentive counts
that rounds record in ``details["fairness"]``."""

from __future__ import annotations

import math
import statistics
from typing import Any, Iterable, Mapping

SIDES = ("ideal", "real")


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values``, linear between order statistics (numpy's default); None if empty."""
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def fairness_summary(series: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """Over rounds' ``details["fairness"]`` (None or ``{"error": ...}``: not counted), for the ideal and the
    real allocation: ``rounds`` counted, ``rounds_with_envy`` (envy_pairs > 0), ``max_envy_pairs``,
    ``mean_envy_pairs``, ``max_envy``, ``rounds_with_si_violation`` (si_violations > 0),
    ``max_si_violations``, ``min_si_ratio`` (None when never compared); and ``errors``: rounds whose
    counts failed."""
    out: dict[str, Any] = {}
    items = list(series)
    good = [f for f in items if f and "error" not in f]
    for side in SIDES:
        rows = [f[side] for f in good if side in f]
        ratios = [r["min_si_ratio"] for r in rows if r.get("min_si_ratio") is not None]
        out[side] = {
            "rounds": len(rows),
            "rounds_with_envy": sum(r["envy_pairs"] > 0 for r in rows),
            "max_envy_pairs": max((r["envy_pairs"] for r in rows), default=0),
            "mean_envy_pairs": statistics.fmean(r["envy_pairs"] for r in rows) if rows else 0.0,
            "max_envy": max((r["max_envy"] for r in rows), default=0.0),
            "rounds_with_si_violation": sum(r["si_violations"] > 0 for r in rows),
            "max_si_violations": max((r["si_violations"] for r in rows), default=0),
            "min_si_ratio": min(ratios) if ratios else None,
        }
    out["errors"] = sum(1 for f in items if f and "error" in f)
    return out
