"""Fairness properties of an allocation (OEF §2.3.1, §5), checked numerically. Pure: no I/O.

Every check works on the *virtual users* of the allocation's problem (one per tenant class, carrying an
equal part of its tenant's weight, OEF §4.2.4) and on normalized throughput ``u_l(x) = sum_j speed_l^j x^j``.
A virtual user with a demand can use at most that many GPUs in all, and at most its per-type cap of each
type (``type_demand``), so the value of a bundle of GPUs to it is the throughput of its best GPUs in the
bundle within those caps.

*Capped* classes: a class whose allocation reaches its total demand or one of its per-type caps. Its own
caps, not the fairness rule, decide its share, so the properties that the policies promise only among
uncapped classes (sharing incentive, envy-freeness, equal throughput) are evaluated on the uncapped classes
when some class is capped, and the detail says so ("among the 3 uncapped class(es); 1 at their demand or
type caps not compared").

:func:`violations` counts envy pairs and sharing-incentive shortfalls per tenant with the same comparisons,
cheaply enough for every daemon round (``details["fairness"]``).

Each check returns a :class:`PropertyResult`: ``value`` True (holds), False (violated) or None (not
applicable, the detail says why), a short ``detail`` and ``worst``, the largest violation found (0 when none).
Tolerance: 1e-6, relative to the size of the compared numbers when they exceed 1.

Cost (``solve --check``): every property but two is a few matrix operations on the (virtual users x types)
allocation; Pareto efficiency is one LP (HiGHS); the strategy-proofness probe re-solves the policy once per
false report it tries, at most ``sample`` of them (:mod:`.probe`: by default ``max(2, 600 // classes)``: 2 from 300 classes on),
and within a time budget when one is given (``solve --check-budget``; the detail says when it stopped).

Modules: :mod:`.values` (tolerance, bundle values, capped classes), :mod:`.properties` (each property and the
per-round :func:`violations`), :mod:`.probe` (strategy-proofness). Every public name is importable from here,
but those of :mod:`.realized` (realized fairness: what accounts received, from the runs of their jobs, not from an
allocation), which are imported from that module.
"""

from __future__ import annotations

from ..model import Allocation
from .values import (TOL, PropertyResult, bundle_value, bundle_values, capped_classes, capped_mask,
                      row_values)
from .probe import (CLAIMS, FACTORS, KINDS, SAMPLE, Lie, Solve, budget, class_lies, lies, sample_tenants,
                    schedule, strategy_proof_probe)
from .properties import (Envy, adjacent_types, capacity, demand, envy_free, equal_throughput, largest_envy_ratio,
                         pareto_efficient, sharing_incentive, violations)

__all__ = ["TOL", "PropertyResult", "bundle_value", "bundle_values", "capped_classes", "capped_mask", "row_values",
           "CLAIMS", "FACTORS", "KINDS", "SAMPLE", "Lie", "Solve", "budget", "class_lies", "lies", "sample_tenants",
           "schedule", "strategy_proof_probe", "Envy", "adjacent_types", "capacity", "demand", "envy_free",
           "equal_throughput", "largest_envy_ratio", "pareto_efficient", "sharing_incentive", "violations", "KEYS",
           "check"]

KEYS = ("sharing_incentive", "envy_free", "pareto_efficient", "equal_throughput", "strategy_proof_probe", "adjacent_types", "capacity", "demand")


def check(alloc: Allocation, solve: Solve | None = None, sample: int | None = SAMPLE,
          budget_s: float | None = None) -> dict[str, PropertyResult]:
    """All properties of ``alloc``; ``solve`` (the policy that produced it) enables the strategy-proofness probe
    (at most ``sample`` false reports, each one re-solve; None = :func:`budget`, 0 = not run; within
    ``budget_s`` seconds, None = no limit)."""
    return {
        "sharing_incentive": sharing_incentive(alloc),
        "envy_free": envy_free(alloc),
        "pareto_efficient": pareto_efficient(alloc),
        "equal_throughput": equal_throughput(alloc),
        "strategy_proof_probe": strategy_proof_probe(alloc, solve, sample=sample, budget_s=budget_s),
        "adjacent_types": adjacent_types(alloc),
        "capacity": capacity(alloc),
        "demand": demand(alloc),
    }
