"""Allocation policies, one module each (a package where the policy has helpers of its own: ``oef_coop/``,
``themis/``, ``hadar/``, the helpers beneath it). Every policy module declares its :class:`~.base.Policy` as ``POLICY``
(name, ``solve(problem, solver=None, **options) -> Allocation``, knobs, warm start, guarantees). Shared by several
policies: ``base`` (the Policy record), ``common`` (LP variables, caps, water-filling, finishing an Allocation),
``stable`` (the nearest-to-last-round tie-break), ``filling/`` (the live-HiGHS progressive filling of oef-noncoop
and gavel) and ``leximin`` (its cvxpy reference form)."""

from __future__ import annotations

import importlib
from typing import Any, Callable

from ..catalog import POLICIES
from ..errors import InputError
from ..model import Allocation, Problem
from .base import Policy

_MODULES = POLICIES  # name -> module, declared once in catalog.py (the config validates against it too)


def names() -> list[str]:
    return list(_MODULES)


def policy(name: str) -> Policy:
    """The :class:`~.base.Policy` declared by policy ``name``'s module (``POLICY``)."""
    if name not in _MODULES:
        raise InputError("policy", name, f"unknown policy (known: {', '.join(_MODULES)})")
    return importlib.import_module(f"{__name__}.{_MODULES[name]}").POLICY


def get(name: str) -> Callable[..., Allocation]:
    """The ``solve`` function of policy ``name``."""
    return policy(name).solve


def takes_warm(name: str) -> bool:
    """Whether policy ``name`` can start from an earlier allocation's ``warm`` (``solve(..., warm=)``)."""
    return policy(name).warm


def solve(name: str, problem: Problem, solver: str | None = None, warm: Any = None,
          options: dict[str, Any] | None = None) -> Allocation:
    """Policy ``name`` on ``problem``; ``warm`` (an earlier ``Allocation.warm``) only where it is taken, and
    of ``options`` (policy knobs, e.g. themis' ``f`` and ``lease_s``) those it declares."""
    return policy(name)(problem, solver=solver, warm=warm, options=options)
