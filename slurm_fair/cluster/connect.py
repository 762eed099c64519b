"""``connect()``: pick and build a Cluster backend."""

from __future__ import annotations

from typing import Mapping

from ..errors import InputError
from .base import Cluster
from .errors import Unsupported

BACKENDS = ("auto", "cli", "pyslurm")


def connect(backend: str = "auto", timeout: float = 30.0, env: Mapping[str, str] | None = None) -> Cluster:
    """A Cluster for the Slurm cluster that ``env`` (default: this process's environment, i.e. its
    SLURM_CONF) points at.

    ``cli`` runs the Slurm clients (always available).  ``pyslurm`` is the in-process backend; it is not
    shipped yet, so asking for it raises Unsupported with the reason.  ``auto`` = the CLI backend.
    ``timeout`` bounds every Slurm call in seconds."""
    if backend not in BACKENDS:
        raise InputError("backend", backend, f"must be one of {', '.join(BACKENDS)}")
    if backend == "pyslurm":
        raise Unsupported(pyslurm_unavailable_reason())
    from .cli import CliCluster

    return CliCluster(timeout=timeout, env=env)


def pyslurm_unavailable_reason() -> str:
    """Why the pyslurm backend cannot be used here."""
    try:
        import pyslurm  # noqa: F401
    except ImportError as e:
        why = f"'import pyslurm' fails ({e}); PyPI only has pyslurm 25.11, which builds only against Slurm 25.11"
    else:
        why = f"pyslurm {getattr(pyslurm, '__version__', '?')} is importable, but slurm-fair has no pyslurm backend yet"
    return f"pyslurm backend unavailable: {why}; use backend='cli'"
