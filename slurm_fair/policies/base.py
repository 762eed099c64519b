"""What every policy is to the rest of slurm-fair: a :class:`Policy` — its name, its ``solve``, the knobs it takes,
whether it takes a warm start, and what it guarantees — declared once at the end of its module (``POLICY``).
``policies.solve`` routes options and warm starts by this declaration (not by inspecting signatures), and the
property tests check every declared guarantee on random problems without demand caps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..model import Allocation, Problem

#: the properties a policy may declare (names of ``fairness.check``'s results)
PROPERTIES = ("sharing_incentive", "envy_free", "pareto_efficient", "equal_throughput", "strategy_proof_probe")


@dataclass(frozen=True)
class Policy:
    """``solve(problem, solver=None, **options)`` -> Allocation.

    ``options``: the knob names ``solve`` takes as keywords (of those in ``config.PolicyConfig.options()``);
    ``warm``: ``solve`` takes ``warm=`` (an earlier allocation's ``warm``: a warm start or the policy's state);
    ``guarantees``: the properties every allocation it returns has when no class is capped by its demand (the
    names of ``fairness.check``), ``claim``: the same in words, with what the paper proves."""

    name: str
    solve: Callable[..., Allocation]
    guarantees: tuple[str, ...] = ()
    claim: str = ""
    options: tuple[str, ...] = ()
    warm: bool = False

    def __post_init__(self) -> None:
        unknown = [g for g in self.guarantees if g not in PROPERTIES]
        if unknown:
            raise ValueError(f"{self.name}: unknown property {unknown[0]!r} (known: {', '.join(PROPERTIES)})")

    def __call__(self, problem: Problem, solver: str | None = None, warm: Any = None,
                 options: Mapping[str, Any] | None = None) -> Allocation:
        """Solve ``problem``; of ``options`` only this policy's knobs are passed, ``warm`` only if it takes one."""
        kw = {k: v for k, v in (options or {}).items() if k in self.options}
        if warm is not None and self.warm:
            kw["warm"] = warm
        return self.solve(problem, solver=solver, **kw)
