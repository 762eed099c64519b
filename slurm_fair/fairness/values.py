"""Shared pieces of the fairness checks: the tolerance, :class:`PropertyResult`, the value of a bundle of GPUs to a
virtual user within its demand and per-type caps, and which virtual users are capped. Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model import Allocation, VirtualUsers

TOL = 1e-6


@dataclass(frozen=True)
class PropertyResult:
    name: str
    value: bool | None
    detail: str
    worst: float | None = None

    def __post_init__(self) -> None:
        if self.worst is not None:
            object.__setattr__(self, "worst", float(self.worst))
        if self.value is not None:
            object.__setattr__(self, "value", bool(self.value))

    def as_dict(self) -> dict:
        return {"value": self.value, "detail": self.detail, "worst": self.worst}


def _tol(*scale: float) -> float:
    return TOL * max([1.0, *[abs(float(s)) for s in scale]])


def _label(vu: VirtualUsers, i: int) -> str:
    # a tenant with one class is named by the tenant alone
    if vu.tenant.count(vu.tenant[i]) == 1:
        return vu.tenant[i]
    return f"{vu.tenant[i]}/{vu.cls[i]}"


def bundle_value(speed: np.ndarray, bundle: np.ndarray, demand: float = np.inf, type_cap: np.ndarray | None = None) -> float:
    """Throughput a user with ``speed`` gets from ``bundle`` (GPUs per type) using at most ``demand`` GPUs in
    all and at most ``type_cap[j]`` of type j (greedy fastest first, optimal for these caps)."""
    if type_cap is not None:
        bundle = np.minimum(bundle, type_cap)
    if not np.isfinite(demand):
        return float(np.dot(speed, np.where(speed > 0, bundle, 0.0)))
    left, value = float(demand), 0.0
    for j in np.argsort(-speed, kind="stable"):
        if left <= 0 or speed[j] <= 0:
            break
        take = min(float(bundle[j]), left)
        if take > 0:
            value += take * float(speed[j])
            left -= take
    return value


def bundle_values(speed: np.ndarray, bundles: np.ndarray, demand: float = np.inf, type_cap: np.ndarray | None = None) -> np.ndarray:
    """:func:`bundle_value` of one user for many bundles at once: ``bundles`` (m, k) -> (m,) (vectorized:
    types sorted fastest first, each bundle's GPUs taken in that order until ``demand`` is used up)."""
    b = np.asarray(bundles, dtype=float)
    if type_cap is not None:
        b = np.minimum(b, type_cap[None, :])
    b = np.where(speed[None, :] > 0, b, 0.0)
    if not np.isfinite(demand):
        return b @ np.where(speed > 0, speed, 0.0)
    order = np.argsort(-speed, kind="stable")
    bo, so = b[:, order], np.where(speed[order] > 0, speed[order], 0.0)
    before = np.cumsum(bo, axis=1) - bo
    take = np.clip(np.minimum(bo, float(demand) - before), 0.0, None)
    return take @ so


def row_values(speed: np.ndarray, bundles: np.ndarray, demand: np.ndarray, type_cap: np.ndarray | None = None) -> np.ndarray:
    """Row by row, :func:`bundle_value` of user ``speed[r]`` (demand ``demand[r]``, caps ``type_cap[r]``) for
    bundle ``bundles[r]``: (m, k), (m, k), (m,), (m, k) -> (m,), all rows at once."""
    b = np.asarray(bundles, dtype=float)
    s = np.where(speed > 0, speed, 0.0)
    if type_cap is not None:
        b = np.minimum(b, type_cap)
    b = np.where(s > 0, b, 0.0)
    d = np.asarray(demand, dtype=float)
    if not np.isfinite(d).any():
        return (b * s).sum(axis=1)
    order = np.argsort(-s, axis=1, kind="stable")
    bo, so = np.take_along_axis(b, order, axis=1), np.take_along_axis(s, order, axis=1)
    before = np.cumsum(bo, axis=1) - bo
    take = np.clip(np.minimum(bo, d[:, None] - before), 0.0, None)
    return (take * so).sum(axis=1)


def _fmt(v: float) -> str:
    return f"{v:.6g}"


def capped_mask(vu: VirtualUsers, x: np.ndarray) -> np.ndarray:
    """(n,) True for the virtual users whose allocation ``x`` reaches their total demand or one of their
    finite per-type caps (within the tolerance)."""
    x = np.asarray(x, dtype=float)
    fin_d = np.isfinite(vu.demand)
    d = np.where(fin_d, vu.demand, 0.0)
    at_total = fin_d & (x.sum(axis=1) >= d - TOL * np.maximum(1.0, np.abs(d)))
    fin = np.isfinite(vu.type_cap) & (vu.speed > 0)
    c = np.where(fin, vu.type_cap, 0.0)
    at_type = (fin & (x >= c - TOL * np.maximum(1.0, np.abs(c)))).any(axis=1)
    return at_total | at_type


def capped_classes(alloc: Allocation) -> list[int]:
    """Virtual users whose allocation reaches their total demand or one of their finite per-type caps."""
    return [int(i) for i in np.flatnonzero(capped_mask(alloc.vu, alloc.x))]


def _among(alloc: Allocation) -> tuple[list[int], str]:
    """(uncapped virtual users, detail suffix saying the comparison is restricted to them, "" if nobody is capped)."""
    capped = set(capped_classes(alloc))
    free = [i for i in range(alloc.vu.n) if i not in capped]
    if not capped:
        return free, ""
    return free, f" (among the {len(free)} uncapped class(es); {len(capped)} at their demand or type caps not compared)"
