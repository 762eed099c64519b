"""An upgrade installs (issue 29 item 4): the previous release's wheel installed into a fresh venv, then this
checkout's wheel with `pip install -U`, as the README's "Upgrade" section does. Before releases had versions both
wheels were 0.1.0 and pip answered "Requirement already satisfied", keeping the old files.

Offline: the wheels are built with pip from copies of this checkout (the "previous release" is this tree with
its version set to PREVIOUS and one file only it has), without dependencies (`--no-deps`; the venv reads the
test environment's packages through a folder of links that leaves slurm-fair itself out). The build backend
(setuptools) comes from the test environment when it is recent enough (`--no-build-isolation`), else from
pip's index once (a build-isolation environment per wheel, the second from pip's cache).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import slurm_fair

REPO = Path(__file__).resolve().parents[1]
PREVIOUS = "0.1.0"  # the release before this one (the version of every commit before releases were numbered)
OLD_ONLY = "slurm_fair/share/only-in-the-previous-release.txt"


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def _copy_tree(dest: Path) -> None:
    """The checkout's files (tracked and untracked, not ignored) copied to ``dest``."""
    names = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "-co", "--exclude-standard"], check=True,
                           capture_output=True, timeout=60).stdout.decode().split("\0")
    for name in filter(None, names):
        src = REPO / name
        if src.is_file() and not src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def _setuptools_recent() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    return _version_tuple(".".join(setuptools.__version__.split(".")[:2])) >= (77, 0)


def _deps_folder(dest: Path) -> Path:
    """Links to every package of the test environment except slurm-fair (and its editable-install hooks)."""
    dest.mkdir()
    seen: set[str] = set()
    for key in ("purelib", "platlib"):
        site = Path(sysconfig.get_paths()[key])
        for entry in sorted(site.iterdir()) if site.is_dir() else ():
            low = entry.name.lower()
            if low in seen or low.startswith(("slurm_fair", "slurm-fair", "__editable__")) or low.endswith(".pth"):
                continue
            seen.add(low)
            (dest / entry.name).symlink_to(entry)
    return dest


def test_pip_install_upgrade_replaces_the_previous_release(tmp_path):
    assert _version_tuple(slurm_fair.__version__) > _version_tuple(PREVIOUS), \
        "raise slurm_fair.__version__ above the previous release, or pip -U keeps the old files"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    old, new, dist = tmp_path / "old", tmp_path / "new", tmp_path / "dist"
    _copy_tree(old)
    _copy_tree(new)
    init = old / "slurm_fair" / "__init__.py"
    text = init.read_text()
    assert f'__version__ = "{slurm_fair.__version__}"' in text
    init.write_text(text.replace(f'__version__ = "{slurm_fair.__version__}"', f'__version__ = "{PREVIOUS}"'))
    (old / OLD_ONLY).write_text("a file the new release no longer ships\n")
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist)]
    if _setuptools_recent():
        build.append("--no-build-isolation")
    for tree in (old, new):  # one at a time: pip resolves the trees of one call together
        subprocess.run([*build, str(tree)], check=True, env=env, cwd=tmp_path, timeout=300)
    wheels = {p.name for p in dist.glob("slurm_fair-*.whl")}
    assert wheels == {f"slurm_fair-{PREVIOUS}-py3-none-any.whl",
                      f"slurm_fair-{slurm_fair.__version__}-py3-none-any.whl"}, wheels

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, env=env, timeout=120)
    vpy = venv / "bin" / "python"
    site = Path(subprocess.run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True, env=env).stdout.strip())
    (site / "test-deps.pth").write_text(f"{_deps_folder(tmp_path / 'deps')}\n")  # pip and the dependencies

    def pip(*args: str) -> str:
        r = subprocess.run([str(vpy), "-m", "pip", *args], capture_output=True, text=True, env=env, cwd=tmp_path,
                           timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    def installed() -> tuple[str, str, Path]:
        """(slurm-fair --version, the metadata's version, the installed package's folder)"""
        r = subprocess.run([str(venv / "bin" / "slurm-fair"), "--version"], capture_output=True, text=True,
                           env=env, cwd=tmp_path, timeout=120)
        assert r.returncode == 0, r.stderr
        meta = subprocess.run([str(vpy), "-c", "import importlib.metadata as m, slurm_fair; "
                               "print(m.version('slurm-fair')); print(slurm_fair.__file__)"],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=True)
        version, where = meta.stdout.split()
        return r.stdout.strip(), version, Path(where).parent

    pip("install", "--no-deps", "--no-index", str(dist / f"slurm_fair-{PREVIOUS}-py3-none-any.whl"))
    shown, meta, pkg = installed()
    assert (shown, meta) == (f"slurm-fair {PREVIOUS}", PREVIOUS)
    assert pkg.is_relative_to(venv) and (pkg.parent / OLD_ONLY).is_file()

    # the README's upgrade step: pip install -U of the new wheel
    out = pip("install", "-U", "--no-deps", "--no-index", str(dist / f"slurm_fair-{slurm_fair.__version__}-py3-none-any.whl"))
    assert "already satisfied" not in out.lower()
    shown, meta, pkg = installed()
    assert (shown, meta) == (f"slurm-fair {slurm_fair.__version__}", slurm_fair.__version__)
    assert pkg.is_relative_to(venv)
    assert not (pkg.parent / OLD_ONLY).exists()  # the previous release's files are gone
    for name in ("__init__.py", "cli/__init__.py", "share/slurm-fair.service", "share/slurm-fair-hook"):
        assert (pkg / name).read_bytes() == (REPO / "slurm_fair" / name).read_bytes(), name
