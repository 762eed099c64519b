"""Progressive filling through cvxpy, one LP per level and test: the reference form shared by
``oef-noncoop`` (:func:`oef_noncoop.solve_arrays_cvxpy`) and ``gavel`` (:func:`gavel.solve_cvxpy`), run when a
cvxpy solver is named (``--solver``); the default is the live-HiGHS filling of ``filling``.

Each round: solve ``max t`` (every active class at ``ref_l · t``, the frozen ones at their throughput f_l)
with the named solver; the candidates (``candidates``) are re-checked against HiGHS's own value of the level
(the lift tests have feasible sets without interior, which interior-point solvers cannot solve accurately),
and the joint lift LPs of :func:`_blocked` keep those that cannot rise. With ``own_caps`` (oef-noncoop)
a blocked class is frozen only when one more lift LP without its own caps shows that they are what stops it
(otherwise the round ends the filling: the rest share the level); without it (gavel) every blocked class is
frozen. The loop ends when no class is frozen in a round or none is active.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import cvxpy as cp
import numpy as np

from .. import lp
from ..errors import SolverError


# --------------------------------------------------------------------------- progressive filling tests

# "Can user i rise above the maximal level while the others keep it?" has a feasible set without interior,
# which interior-point solvers (ECOS) report as "optimal_inaccurate": these tests run on HiGHS (simplex),
# against HiGHS's own value of the level so that both agree to its tolerance.
TEST_SOLVER = "HIGHS"


def level_program(u, ref, active, cons, level=None, lift=(), equal=False):
    """The two LPs of progressive filling over throughputs ``u`` (used by oef-noncoop and gavel).

    ``level`` None: max t with u_l = ref_l t (``equal``) or u_l >= ref_l t for the active users l.
    Otherwise the lift test: max Σ z_i with u_i >= ref_i (level + z_i), 0 <= z_i <= max(level, 1) for i in
    ``lift``, while the other active users keep u_l >= ref_l level. Returns (problem, t or z).
    """
    act = [i for i in range(len(ref)) if active[i]]
    if level is None:
        t = cp.Variable(nonneg=True)
        cons.append(u[act] == ref[act] * t if equal else u[act] >= ref[act] * t)
        return cp.Problem(cp.Maximize(t), cons), t
    lift = list(lift)
    z = cp.Variable(len(lift), nonneg=True)
    cons += [z <= max(level, 1.0), u[lift] >= cp.multiply(ref[lift], level + z)]
    others = [i for i in act if i not in set(lift)]
    if others:
        cons.append(u[others] >= ref[others] * level)
    return cp.Problem(cp.Maximize(cp.sum(z)), cons), z


def _rises(z_value, level) -> np.ndarray:
    return np.asarray(z_value, dtype=float).reshape(-1) > 1e-6 * max(1.0, level)


def lift_test(build, lift, level, run) -> np.ndarray:
    """Solve the lift LP ``build(lift, level)``; returns which users of ``lift`` can rise above ``level``.

    The level comes from an LP solved to HiGHS's feasibility tolerance (1e-7), so the lift LP at exactly
    that level can be infeasible by that much; it is then retried a hair lower (1e-9 ... 1e-6 relative).
    A user counts as rising when its lift exceeds 1e-6 relative, or 100 times the shave if larger, so that
    the room made by shaving the others' level is never mistaken for a rise.
    """
    err: Exception | None = None
    for shave in (0.0, 1e-9, 1e-8, 1e-7, 1e-6):
        lv = level * (1 - shave)
        prob, _, z = build(list(lift), lv)
        try:
            run(prob, "lift test", TEST_SOLVER)
        except SolverError as exc:
            if "infeasible" not in str(exc):
                raise
            err = exc
            continue
        return np.asarray(z.value, dtype=float).reshape(-1) > max(1e-6, 100 * shave) * max(1.0, level)
    assert err is not None
    raise err


def _blocked(build, cand, level, run):
    """The users of ``cand`` that cannot rise above the level (the others keeping theirs).

    Joint lift LPs: whoever gets z > 0 can rise and leaves the set; when an LP over the remaining set has
    no z > 0, none of them can rise even alone (a lone rise would be a feasible point with Σz > 0).
    """
    cand = list(cand)
    while cand:
        up = lift_test(build, cand, level, run)
        if not up.any():
            return cand
        cand = [i for i, u in zip(cand, up) if not u]
    return cand


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
