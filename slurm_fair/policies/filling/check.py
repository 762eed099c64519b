"""The filling's result checked against its definition (:func:`verify`, run by its callers before they use it),
and whether a class sits at its caps."""

from __future__ import annotations

import numpy as np

from ...errors import SolverError

CAP_TOL = 1e-6  # GPUs: a class this close to its demand or a type cap is at its caps


def at_caps(x: np.ndarray, speed: np.ndarray, demand: np.ndarray, type_cap: np.ndarray, tol: float = CAP_TOL) -> np.ndarray:
    """(n,) bool: the class is at its demand or at one of its finite per-type caps in ``x``."""
    fin = np.isfinite(type_cap) & (speed > 0)
    return (np.isfinite(demand) & (x.sum(axis=1) >= demand - tol) & (demand > 0)) | (fin & (x >= type_cap - tol) & (type_cap > 0)).any(axis=1)


def below_caps(x: np.ndarray, speed: np.ndarray, demand: np.ndarray, type_cap: np.ndarray,
               tol: float = CAP_TOL) -> np.ndarray:
    """(n,) bool: the class is below its demand and below every finite per-type cap in ``x``."""
    return ~at_caps(x, speed, demand, type_cap, tol)


def verify(speed: np.ndarray, ref: np.ndarray, capacity: np.ndarray, demand: np.ndarray, type_cap: np.ndarray,
           x: np.ndarray, capped: np.ndarray, *, equal_level: bool, work_conserving: bool, floor: np.ndarray | None = None,
           what: str = "progressive filling", rel: float = 1e-6) -> None:
    """Check ``x`` against the definition; raise SolverError naming the numbers when it does not hold.

    Always: x >= 0, nothing on unusable types, capacity, per-type caps and demands; every ``capped`` class
    sits at its demand or a per-type cap. ``equal_level`` (oef-noncoop): the other classes share one level
    u_l / ref_l (to ``rel``) and the capped ones are at or below it. ``work_conserving`` (gavel): no GPU idle
    while a class below its caps can use it. ``floor``: u_l >= floor_l (Gavel's capped equal share)."""
    n, k = speed.shape
    scale = max(1.0, float(capacity.max(initial=1.0)))
    tol = rel * scale
    bad = []
    if (x < -1e-12).any() or (x[speed <= 0] > 1e-12).any():
        bad.append("negative GPUs or GPUs on an unusable type")
    over = x.sum(axis=0) - capacity
    if (over > tol).any():
        j = int(over.argmax())
        bad.append(f"type {j}: {x[:, j].sum():.9g} GPUs > capacity {capacity[j]:g}")
    tc = x - type_cap
    if (tc > tol).any():
        i, j = np.unravel_index(int(tc.argmax()), tc.shape)
        bad.append(f"class {i} type {j}: {x[i, j]:.9g} GPUs > type cap {type_cap[i, j]:g}")
    od = x.sum(axis=1) - demand
    if (od > tol).any():
        i = int(od.argmax())
        bad.append(f"class {i}: {x[i].sum():.9g} GPUs > demand {demand[i]:g}")
    finite_tc = np.isfinite(type_cap) & (speed > 0)
    at = (np.isfinite(demand) & (x.sum(axis=1) >= demand - tol)) | (finite_tc & (x >= type_cap - tol)).any(axis=1)
    live = (demand > 0) & (ref > 0) & ((speed > 0) & (type_cap > 0) & (capacity[None, :] > 0)).any(axis=1)
    for i in np.flatnonzero(capped & ~at & live):
        bad.append(f"class {i} counted as capped but below its caps ({x[i].sum():.9g} GPUs, demand {demand[i]:g})")
        break
    u = (x * speed).sum(axis=1)
    lv = np.where(ref > 0, u / np.where(ref > 0, ref, 1.0), 0.0)
    if equal_level:
        free = np.flatnonzero(~capped & live)
        if free.size:
            hi, lo = float(lv[free].max()), float(lv[free].min())
            if hi - lo > rel * max(1.0, hi):
                bad.append(f"uncapped classes at different levels: {lo:.9g} (class {int(free[lv[free].argmin()])}) "
                           f"to {hi:.9g} (class {int(free[lv[free].argmax()])})")
            cl = np.flatnonzero(capped & (lv > hi + rel * max(1.0, hi)))
            if cl.size:
                bad.append(f"capped class {int(cl[0])} at level {lv[cl[0]]:.9g} above the common level {hi:.9g}")
    if work_conserving:
        idle = capacity - x.sum(axis=0)
        room_d = demand - x.sum(axis=1)
        for j in np.flatnonzero(idle > tol):
            can = (speed[:, j] > 0) & (room_d > tol) & (x[:, j] < type_cap[:, j] - tol)
            if can.any():
                bad.append(f"{idle[j]:.9g} GPUs of type {j} idle while class {int(np.flatnonzero(can)[0])} can use them")
                break
    if floor is not None:
        short = floor - u
        if (short > rel * np.maximum(1.0, floor)).any():
            i = int(short.argmax())
            bad.append(f"class {i}: throughput {u[i]:.9g} below its floor {floor[i]:.9g}")
    if bad:
        raise SolverError(f"{what}: the result fails its definition: " + "; ".join(bad))
