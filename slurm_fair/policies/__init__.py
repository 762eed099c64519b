"""Allocation policies, one module each. Every module exposes ``solve(problem, solver=None) -> Allocation``."""

from __future__ import annotations

import importlib
from typing import Callable

from ..errors import InputError
from ..model import Allocation, Problem

_MODULES = {
    "oef-noncoop": "oef_noncoop",
    "oef-coop": "oef_coop",
    "max-throughput": "max_throughput",
    "equal-share": "equal_share",
    "gavel": "gavel",
    "gandiva-fair": "gandiva_fair",
}

Policy = Callable[..., Allocation]


def names() -> list[str]:
    return list(_MODULES)


def get(name: str) -> Policy:
    """The ``solve`` function of policy ``name``."""
    if name not in _MODULES:
        raise InputError("policy", name, f"unknown policy (known: {', '.join(_MODULES)})")
    return importlib.import_module(f"{__name__}.{_MODULES[name]}").solve


def solve(name: str, problem: Problem, solver: str | None = None) -> Allocation:
    return get(name)(problem, solver=solver)
