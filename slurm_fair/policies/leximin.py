"""Progressive filling through cvxpy, one LP per level and test: the reference form shared by
``oef-noncoop`` (:func:`oef_noncoop.solve_arrays_cvxpy`) and ``gavel`` (:func:`gavel.solve_cvxpy`), run when a
cvxpy solver is named (``--solver``); the default is the live-HiGHS filling of ``filling``.

Each round: solve ``max t`` (every active class at ``ref_l · t``, the frozen ones at their throughput f_l)
with the named solver; the candidates (``candidates``) are re-checked against HiGHS's own value of the level
(the lift tests have feasible sets without interior, which interior-point solvers cannot solve accurately),
and the joint lift LPs of ``common._blocked`` keep those that cannot rise. With ``own_caps`` (oef-noncoop)
a blocked class is frozen only when one more lift LP without its own caps shows that they are what stops it
(otherwise the round ends the filling: the rest share the level); without it (gavel) every blocked class is
frozen. The loop ends when no class is frozen in a round or none is active.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from .. import lp
from .common import TEST_SOLVER, _blocked, lift_test


class Build(Protocol):
    """``build(active, frozen, level=None, lift=(), free=None) -> (problem, x, t or z)``: the max-t LP
    (``level`` None) or the lift LP at ``level`` for the classes ``lift`` (``free``: drop that class's own
    caps), with ``frozen`` {class: throughput} held."""

    def __call__(self, active: np.ndarray, frozen: dict[int, float], level: float | None = None, lift=(),
                 free: int | None = None): ...


@dataclass(frozen=True)
class Filled:
    x: np.ndarray  # (n, k) the last max-t solution (as the solver returned it)
    frozen: dict[int, float]  # class -> throughput it froze at
    newly: list[int]  # classes frozen by the loop, in order


def fill_cvxpy(build: Build, x0: np.ndarray, active: np.ndarray, frozen: dict[int, float], *,
               solver: str | None, timer: lp.Timer, name: str,
               candidates: Callable[[np.ndarray, float, np.ndarray], list[int]],
               freeze_at: Callable[[int, float, float], float], own_caps: bool) -> Filled:
    """Run the rounds above from ``x0`` (returned when nobody is active). ``active`` (bool, changed in place) and ``frozen`` (changed in place) are the
    start; ``candidates(x, level, active)`` the classes that may be blocked at this solution;
    ``freeze_at(i, level, highs_level)`` the throughput a frozen class keeps."""

    def run(prob, what: str, use: str | None = None) -> None:
        with timer.measure():
            lp.solve(prob, use or solver, what=f"{name} {what}")

    x_val = x0
    newly: list[int] = []
    while active.any():
        prob, x, t = build(active, frozen)
        run(prob, "level")
        level = float(t.value)
        x_val = np.asarray(x.value)
        cand = candidates(x_val, level, active)
        lv = level
        if cand:
            prob, _, t = build(active, frozen)
            run(prob, "level (HiGHS)", TEST_SOLVER)
            lv = float(t.value)
            cand = _blocked(lambda c, v: build(active, frozen, level=v, lift=c), cand, lv, run)
        if own_caps:  # blocked with its caps in force: is it its own caps that block it?
            cand = [i for i in cand if lift_test(lambda c, v, i=i: build(active, frozen, level=v, lift=c, free=i),
                                                 [i], lv, run)[0]]
        if not cand:
            break
        for i in cand:
            active[i] = False
            frozen[i] = freeze_at(i, level, lv)
            newly.append(i)
    return Filled(x_val, frozen, newly)
