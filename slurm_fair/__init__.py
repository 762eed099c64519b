"""slurm-fair: heterogeneity-aware, provably fair GPU sharing for Slurm (OEF).

``slurm_fair.report(steps=..., seconds=...)`` (or ``throughput=...``) reports a running job's throughput to
slurm-fair (see :mod:`slurm_fair.profiling.client`); it is loaded on first use and imports only the standard
library, so ``import slurm_fair`` stays cheap inside jobs. ``slurm_fair.__version__`` (also computed on first use)
is :func:`installed_version`.
"""

from pathlib import Path
from typing import Any

DIST_NAME = "slurm-fair"
# What `__version__` says when neither installed metadata nor git can tell (a copy of the files without .git and
# without setuptools-scm): PEP 440's "unknown", lower than every real version.
UNKNOWN_VERSION = "0+unknown"


def installed_version(dist: Any = None, root: Path | None = None) -> str:
    """The version ``slurm-fair --version`` prints and ``slurm_fair.__version__`` holds. Wheels take theirs from
    git when they are built (setuptools-scm, ``[tool.setuptools_scm]`` in pyproject.toml: ``0.2.1.devN+g<commit>``
    with N commits and no tag). Run from a source tree (a checkout on PYTHONPATH, an editable install), the
    tree's own version now (:func:`source_tree_version`: its metadata was written at install time, commits ago);
    else the installed distribution's (importlib.metadata) when its files are this very package;
    :data:`UNKNOWN_VERSION` when neither tells. ``dist``, ``root``: a distribution and a tree to check instead (tests)."""
    here = source_tree_version(root)
    if here != UNKNOWN_VERSION:
        return here
    if dist is None:
        import importlib.metadata

        try:
            dist = importlib.metadata.distribution(DIST_NAME)
        except importlib.metadata.PackageNotFoundError:
            return UNKNOWN_VERSION
    try:
        ours = Path(__file__).resolve()
        theirs = Path(str(dist.locate_file("slurm_fair/__init__.py"))).resolve()
    except (OSError, ValueError):
        return UNKNOWN_VERSION
    return str(dist.version) if theirs == ours else UNKNOWN_VERSION


def source_tree_version(root: Path | None = None) -> str:
    """The version a wheel built from the source tree at ``root`` (default: the folder above this package, when it
    holds slurm-fair's pyproject.toml) would have, asked of setuptools-scm with pyproject.toml's settings;
    :data:`UNKNOWN_VERSION` where there is no such tree, setuptools-scm is not installed or cannot tell."""
    root = Path(__file__).resolve().parent.parent if root is None else root
    try:
        import tomllib

        pyproject = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
        if pyproject.get("project", {}).get("name") != DIST_NAME:
            return UNKNOWN_VERSION
        import warnings

        from setuptools_scm import get_version

        settings = pyproject.get("tool", {}).get("setuptools_scm", {})
        with warnings.catch_warnings():  # e.g. "shallow clone": --version prints the version only
            warnings.simplefilter("ignore")
            return str(get_version(root=str(root), fallback_version=settings.get("fallback_version")))
    except Exception:  # noqa: BLE001 - no tree, no setuptools-scm, no git: the version is unknown, never fatal
        return UNKNOWN_VERSION


def __getattr__(name: str) -> Any:
    if name == "__version__":  # computed on first use: `import slurm_fair` inside jobs stays cheap
        version = globals()["__version__"] = installed_version()
        return version
    if name == "report":
        from .profiling.client import report

        return report
    raise AttributeError(f"module 'slurm_fair' has no attribute {name!r}")
