"""Build small Problems from speedup matrices (test helper shared by the policy tests)."""

from __future__ import annotations

from typing import Sequence

from slurm_fair.model import JobClass, Problem, Tenant


def matrix_problem(
    rows: Sequence[Sequence[float]],
    capacity: Sequence[int] = (1, 1),
    weights: Sequence[float] | None = None,
    demands: Sequence[float | None] | None = None,
) -> Problem:
    """One tenant ``u1..un`` with one class ``c`` per row; GPU types ``g1..gk`` with ``capacity``."""
    types = [f"g{j + 1}" for j in range(len(capacity))]
    tenants = []
    for i, row in enumerate(rows):
        demand = None if demands is None else demands[i]
        cls = JobClass("c", {g: float(v) for g, v in zip(types, row)}, demand)
        tenants.append(Tenant(f"u{i + 1}", (cls,), 1.0 if weights is None else float(weights[i])))
    return Problem(dict(zip(types, capacity)), tuple(tenants))


def classes_problem(
    tenants: Sequence[tuple[str, float, Sequence[Sequence[float]]]],
    capacity: Sequence[int] = (1, 1),
) -> Problem:
    """Tenants given as (name, weight, [speed row per class]); classes are named ``c1..``."""
    types = [f"g{j + 1}" for j in range(len(capacity))]
    out = []
    for name, weight, rows in tenants:
        classes = tuple(
            JobClass(f"c{m + 1}", {g: float(v) for g, v in zip(types, row)}) for m, row in enumerate(rows)
        )
        out.append(Tenant(name, classes, float(weight)))
    return Problem(dict(zip(types, capacity)), tuple(out))
