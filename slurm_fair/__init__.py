"""slurm-fair: heterogeneity-aware, provably fair GPU sharing for Slurm (OEF).

``slurm_fair.report(steps=..., seconds=...)`` (or ``throughput=...``) reports a running job's throughput to
slurm-fair (see :mod:`slurm_fair.profiling.client`); it is loaded on first use and imports only the standard
library, so ``import slurm_fair`` stays cheap inside jobs.
"""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "report":
        from .profiling.client import report

        return report
    raise AttributeError(f"module 'slurm_fair' has no attribute {name!r}")
