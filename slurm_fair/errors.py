"""Errors shared by the whole package."""

from __future__ import annotations


class SlurmFairError(Exception):
    """Base class of every error slurm-fair raises on purpose."""


MAX_VALUE_REPR = 300


def short_repr(value: object, limit: int = MAX_VALUE_REPR) -> str:
    """``repr(value)``, at most ``limit`` characters (then ``…``); a value too deeply nested to print says so."""
    try:
        r = repr(value)
    except RecursionError:
        return "<a value nested too deeply to print>"
    return r if len(r) <= limit else r[:limit] + "…"


class InputError(SlurmFairError, ValueError):
    """Bad input: names the field (a JSON path or config key) and the offending value (its repr, bounded)."""

    def __init__(self, field: str, value: object, problem: str):
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(f"{field}: {problem} (got {short_repr(value)})")


class SolverError(SlurmFairError):
    """The LP solver failed or reported the problem infeasible/unbounded."""
