"""``connect()``: pick and build a Cluster backend."""

from __future__ import annotations

from typing import Mapping

from ..errors import InputError
from .base import Cluster
from .errors import ClusterError

BACKENDS = ("auto", "cli", "pyslurm")


def connect(backend: str = "auto", timeout: float = 30.0, env: Mapping[str, str] | None = None) -> Cluster:
    """A Cluster for the Slurm cluster that ``env`` (default: this process's environment, i.e. its
    SLURM_CONF) points at.

    ``cli`` runs the Slurm clients (always available).  ``pyslurm`` reads jobs and nodes in-process
    (optional; raises Unsupported with the reason when pyslurm is missing or built for another Slurm
    release).  ``auto`` = pyslurm when it can serve this cluster, else cli (also when probing fails).
    ``timeout`` bounds every Slurm call in seconds."""
    if backend not in BACKENDS:
        raise InputError("backend", backend, f"must be one of {', '.join(BACKENDS)}")
    from .cli import CliCluster

    if backend == "cli":
        return CliCluster(timeout=timeout, env=env)
    import importlib.util

    if backend == "auto" and importlib.util.find_spec("pyslurm") is None:
        return CliCluster(timeout=timeout, env=env)  # the usual case: skip the version probe
    from .pyslurm_backend import PyslurmCluster

    try:
        return PyslurmCluster(timeout=timeout, env=env)
    except ClusterError:  # Unsupported, or the version probe failed: auto falls back to the CLI
        if backend == "pyslurm":
            raise
        return CliCluster(timeout=timeout, env=env)


def pyslurm_unavailable_reason(timeout: float = 30.0, env: Mapping[str, str] | None = None) -> str | None:
    """Why the pyslurm backend cannot be used for this cluster, or None if it can (runs
    ``scontrol --version`` when pyslurm is installed; does not import it)."""
    from .cli import CliCluster
    from .pyslurm_backend import unavailable_reason

    return unavailable_reason(CliCluster(timeout=timeout, env=env))
