"""Equal (weighted) share: every tenant gets its weight share of every GPU type, split among its classes.

This is the *sharing-incentive* reference of the OEF paper (§2.3.1 (3)) and the starting point of
Gandiva_fair's trading. Each virtual user gets weight/Σweight of each type, where the sum runs over the
virtual users that can run on that type (a class never receives a type it cannot use; with every class
able to use every type this is exactly the weight share). No LP is solved.

Per-type caps by water-filling *within each type*: each type is split by weight among the users that can
use it; a user whose split exceeds its cap on that type keeps its cap and the rest is split again among
the others on that type (repeat until nobody on the type exceeds its cap). Then total demand caps by
water-filling over users (``common.waterfill``): a virtual user whose share exceeds its demand keeps its
demand (its own fastest GPUs of the share) and the rest of its share is split again, per type and by
weight, among the users not yet capped; repeat until nobody exceeds its demand. Guarantees under caps: no
user exceeds its demand or a type cap; users capped by their total demand get exactly their demand; every
other user gets, of each type it can use, at least the smaller of its plain weight share and its cap on
that type (leftovers only add to it); a type's GPUs are idle only when every user able to use it is at a
cap (work-conserving).
"""

from __future__ import annotations

import numpy as np

from .. import lp
from ..model import Allocation, Problem, VirtualUsers
from .common import at_caps, capped_note, clean, finish, waterfill
from .base import Policy

NAME = "equal-share"


def _weight_share(speed: np.ndarray, weight: np.ndarray, capacity: np.ndarray, type_cap: np.ndarray | None = None) -> np.ndarray:
    """Each user's weight share of every type it can use (the sum runs over the users that can use it),
    water-filled per type under ``type_cap`` (a user at its cap keeps it, the rest is split again)."""
    n, k = speed.shape
    x = np.zeros((n, k))
    for j in range(k):
        left = float(capacity[j])
        on = speed[:, j] > 0
        while left > 1e-12 and on.any():
            w = np.where(on, weight, 0.0)
            share = left * w / w.sum()
            cap_j = np.inf if type_cap is None else type_cap[:, j] - x[:, j]
            full = on & (share >= cap_j)
            if not full.any():
                x[:, j] += share
                break
            x[full, j] += np.asarray(cap_j if np.ndim(cap_j) else np.full(n, cap_j))[full]
            left = float(capacity[j] - x[:, j].sum())
            on &= ~full
    return x


def share_arrays(vu: VirtualUsers) -> tuple[np.ndarray, list[int]]:
    """(x, capped rows) of the capped equal share: the shared water-filling around the weight share."""
    x, capped = waterfill(vu, _weight_share, step_takes_type_caps=True)
    x = clean(x, vu.speed, vu.capacity, vu.demand, vu.type_cap)
    return x, sorted(set(capped) | set(at_caps(vu, x)))


def solve(problem: Problem, solver: str | None = None) -> Allocation:
    lp.pick_solver(solver)  # validated for a uniform interface; no LP is solved
    vu = problem.virtual_users()
    timer = lp.Timer()
    with timer.measure():
        x, capped = share_arrays(vu)
    return finish(problem, NAME, x, timer, solver, capped_note(vu, capped), uses_lp=False)


POLICY = Policy(NAME, solve, guarantees=("sharing_incentive",),
                claim=("each class its weight share of every type it can use: the sharing-incentive reference"),
                options=(), warm=False)
