"""slurm-fair: heterogeneity-aware, provably fair GPU sharing for Slurm (OEF).

``slurm_fair.report(steps=..., seconds=...)`` (or ``throughput=...``) reports a running job's throughput to
slurm-fair (see :mod:`slurm_fair.profiling.client`); it is loaded on first use and imports only the standard
library, so ``import slurm_fair`` stays cheap inside jobs.
"""

from typing import Any

# The one place of truth for the version: pyproject.toml reads it (setuptools dynamic version), so a wheel's
# metadata says the same. Raise it with every release, or `pip install -U` of the new wheel keeps the old files.
__version__ = "0.2.0"

DIST_NAME = "slurm-fair"


def installed_version(dist: Any = None) -> str:
    """The version ``slurm-fair --version`` prints: the installed distribution's (importlib.metadata) when its
    files are this very package, else :data:`__version__` (a source tree on PYTHONPATH, an editable install,
    or another copy earlier on the path). ``dist``: a distribution to check instead of looking it up (tests)."""
    from pathlib import Path

    if dist is None:
        import importlib.metadata

        try:
            dist = importlib.metadata.distribution(DIST_NAME)
        except importlib.metadata.PackageNotFoundError:
            return __version__
    try:
        ours = Path(__file__).resolve()
        theirs = Path(str(dist.locate_file("slurm_fair/__init__.py"))).resolve()
    except (OSError, ValueError):
        return __version__
    return str(dist.version) if theirs == ours else __version__


def __getattr__(name: str) -> Any:
    if name == "report":
        from .profiling.client import report

        return report
    raise AttributeError(f"module 'slurm_fair' has no attribute {name!r}")
