"""Equal (weighted) share: every tenant gets its weight share of every GPU type, split among its classes.

This is the *sharing-incentive* reference of the OEF paper (§2.3.1 (3)) and the starting point of
Gandiva_fair's trading. Each virtual user gets weight/Σweight of each type, where the sum runs over the
virtual users that can run on that type (a class never receives a type it cannot use; with every class
able to use every type this is exactly the weight share). No LP is solved.

Demand caps by water-filling: a virtual user whose share exceeds its demand keeps its demand (its own
fastest GPUs of the share) and the rest of its share is split again, per type and by weight, among the
users not yet capped; repeat until nobody exceeds its demand. Guarantees under caps: no user exceeds its
demand; capped users get exactly their demand; every uncapped user gets at least its plain weight share of
each type it can use (leftovers only add to it).
"""

from __future__ import annotations

import numpy as np

from .. import lp
from ..model import Allocation, Problem, VirtualUsers
from ._common import capped_note, clean, finish, waterfill

NAME = "equal-share"


def _weight_share(speed: np.ndarray, weight: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Each user's weight share of every type it can use (the sum runs over the users that can use it)."""
    w = weight[:, None] * (speed > 0)
    tot = w.sum(axis=0)
    return np.where(tot > 0, w / np.where(tot > 0, tot, 1.0), 0.0) * capacity[None, :]


def share_arrays(vu: VirtualUsers) -> tuple[np.ndarray, list[int]]:
    """(x, capped rows) of the demand-capped equal share: the shared water-filling around the weight share."""
    x, capped = waterfill(vu, _weight_share)
    return clean(x, vu.speed, vu.capacity, vu.demand), capped


def solve(problem: Problem, solver: str | None = None) -> Allocation:
    lp.pick_solver(solver)  # validated for a uniform interface; no LP is solved
    vu = problem.virtual_users()
    timer = lp.Timer()
    with timer.measure():
        x, capped = share_arrays(vu)
    return finish(problem, NAME, x, timer, solver, capped_note(vu, capped), uses_lp=False)
