"""Small helpers over cvxpy: solver choice, solving with a clear error, timing.

The OEF paper (§4.5) solves its programs with cvxpy and ECOS, so ECOS is the default. Every policy in
``slurm_fair.policies`` goes through :func:`solve` so that a failed or non-optimal solve always surfaces
as :class:`~slurm_fair.errors.SolverError` naming the status, never as a silently wrong allocation.
"""

from __future__ import annotations

import functools
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import cvxpy as cp

from .catalog import SOLVERS
from .errors import InputError, SolverError
from .stdio import prime_highs

DEFAULT_SOLVER = "ECOS"

# Public names accepted by ``--solver``, the config's ``policy.solver`` and the policies (one list, in
# ``catalog.SOLVERS``), mapped to cvxpy's solver constants.
KNOWN_SOLVERS = {name: getattr(cp, name, name) for name in SOLVERS}


@functools.cache
def _installed() -> frozenset[str]:
    """cvxpy's installed solvers, asked once per process: each call of ``cp.installed_solvers()`` probes every
    solver's module (~6 ms; it was a fifth of a simulated round)."""
    return frozenset(cp.installed_solvers())


def available_solvers() -> list[str]:
    """Known solvers that cvxpy can actually use on this machine, default first."""
    installed = _installed()
    return [name for name, const in KNOWN_SOLVERS.items() if const in installed]


def pick_solver(name: str | None) -> str:
    """Normalize a user-given solver name (``None``/"" = ECOS); raise InputError if unknown or missing."""
    if name is None or not str(name).strip():
        name = DEFAULT_SOLVER
    key = str(name).strip().upper()
    if key not in KNOWN_SOLVERS:
        raise InputError("solver", name, f"unknown LP solver (known: {', '.join(KNOWN_SOLVERS)})")
    if KNOWN_SOLVERS[key] not in _installed():
        raise InputError(
            "solver", name, f"solver is not installed (installed: {', '.join(available_solvers()) or 'none'})"
        )
    return key


def solve(problem: cp.Problem, solver: str | None = None, what: str = "LP", options: dict | None = None,
          inaccurate_ok: bool = False, filter_warnings: bool = True) -> float:
    """Solve ``problem`` with the chosen solver; return the optimal value or raise SolverError naming the
    status. OPTIMAL_INACCURATE is refused too: a policy must not hand out GPUs from a wrong answer.
    ``options``: per solver name, keyword options passed to that solver (others get none).
    ``inaccurate_ok``: accept OPTIMAL_INACCURATE too — only for a caller that verifies the answer itself.
    ``filter_warnings=False``: leave the warning filters alone — for a solve in a worker thread, whose caller
    filters around the whole pool (``warnings.catch_warnings`` changes process-wide state and is not safe to
    enter from several threads)."""
    key = pick_solver(solver)
    if key == "HIGHS":
        prime_highs()  # cvxpy builds highspy.Highs() itself: keep its C banner off stdout
    try:
        if filter_warnings:
            with warnings.catch_warnings():  # cvxpy warns on inaccurate solutions; the status is checked below
                warnings.simplefilter("ignore", UserWarning)
                value = problem.solve(solver=KNOWN_SOLVERS[key], **(options or {}).get(key, {}))
        else:
            value = problem.solve(solver=KNOWN_SOLVERS[key], **(options or {}).get(key, {}))
    except cp.error.SolverError as exc:  # the solver crashed or gave up
        raise SolverError(f"{what}: solver {key} failed: {exc}") from exc
    if problem.status != cp.OPTIMAL and not (inaccurate_ok and problem.status == cp.OPTIMAL_INACCURATE):
        raise SolverError(f"{what}: solver {key} returned status {problem.status!r}")
    return float(value)


@dataclass
class Timer:
    """Wall-clock seconds spent inside :meth:`measure` blocks (several LPs of one policy add up)."""

    seconds: float = 0.0
    laps: list[float] = field(default_factory=list)

    @contextmanager
    def measure(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            lap = time.perf_counter() - start
            self.laps.append(lap)
            self.seconds += lap
