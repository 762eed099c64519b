"""Errors shared by the whole package."""

from __future__ import annotations


class SlurmFairError(Exception):
    """Base class of every error slurm-fair raises on purpose."""


class InputError(SlurmFairError, ValueError):
    """Bad input: names the field (a JSON path or config key) and the offending value."""

    def __init__(self, field: str, value: object, problem: str):
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(f"{field}: {problem} (got {value!r})")


class SolverError(SlurmFairError):
    """The LP solver failed or reported the problem infeasible/unbounded."""
