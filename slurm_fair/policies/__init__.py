"""Allocation policies, one module each. Every module exposes ``solve(problem, solver=None) -> Allocation``."""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable

from ..catalog import POLICIES
from ..errors import InputError
from ..model import Allocation, Problem

_MODULES = POLICIES  # name -> module, declared once in catalog.py (the config validates against it too)

Policy = Callable[..., Allocation]


def names() -> list[str]:
    return list(_MODULES)


def get(name: str) -> Policy:
    """The ``solve`` function of policy ``name``."""
    if name not in _MODULES:
        raise InputError("policy", name, f"unknown policy (known: {', '.join(_MODULES)})")
    return importlib.import_module(f"{__name__}.{_MODULES[name]}").solve


def takes_warm(name: str) -> bool:
    """Whether policy ``name`` can start from an earlier allocation's ``warm`` (``solve(..., warm=)``)."""
    return "warm" in inspect.signature(get(name)).parameters


def solve(name: str, problem: Problem, solver: str | None = None, warm: Any = None,
          options: dict[str, Any] | None = None) -> Allocation:
    """Policy ``name`` on ``problem``; ``warm`` (an earlier ``Allocation.warm``) only where it is taken, and
    of ``options`` (policy knobs, e.g. themis' ``f`` and ``lease_s``) those its ``solve`` takes."""
    fn = get(name)
    params = inspect.signature(fn).parameters
    kw = {k: v for k, v in (options or {}).items() if k in params}
    if warm is not None and "warm" in params:
        kw["warm"] = warm
    return fn(problem, solver=solver, **kw)
