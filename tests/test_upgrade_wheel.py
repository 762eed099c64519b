"""An upgrade installs (issue 29 item 4, issue 40 item 3): every commit's wheel is newer than the last, so
`pip install -U` of it replaces the installed files, as the README's "Upgrade" section does.

The version comes from git (setuptools-scm, `[tool.setuptools_scm]` in pyproject.toml): with no tag,
0.2.1.devN+g<commit>, N the number of commits. Before, `slurm_fair.__version__` was set by hand and stayed 0.2.0
for 151 commits: `pip install -U` of a newer commit's wheel answered "already installed" and kept the old
job_submit.lua.

Offline: a clone of this repository in tmp_path gets the working tree as one commit (A) and a change to the shipped
job_submit.lua as the next (B); a copy of A's files without .git stands for an older wheel that says 0.2.0 (what
every commit before this change said, and what a tarball without git builds as). The wheels are built with the
test environment's setuptools and setuptools-scm (`pip wheel --no-build-isolation --no-deps`, the `test` extra
installs both); the venv reads the test environment's packages through a folder of links that leaves slurm-fair
itself out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
OLD = Version("0.2.0")  # pyproject.toml's fallback_version: the hand-set version of every commit before this
OLD_ONLY = "slurm_fair/share/only-in-the-previous-release.txt"
LUA = "slurm_fair/share/job_submit.lua"
LUA_MARK = "-- a line only commit B's job_submit.lua has\n"


def _env() -> dict[str, str]:
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items()
           if k not in drop and not k.startswith(("SETUPTOOLS_SCM", "VCS_VERSIONING", "GIT_"))}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INDEX="1", GIT_CONFIG_NOSYSTEM="1",
               GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid")
    return env


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "commit.gpgsign=false", *args], check=True,
                          capture_output=True, text=True, env=_env(), timeout=120).stdout.strip()


def _working_tree_files() -> list[str]:
    """This checkout's files (tracked and untracked, not ignored), as a commit of them would hold."""
    names = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "-co", "--exclude-standard"], check=True,
                           capture_output=True, timeout=60).stdout.decode().split("\0")
    return [n for n in names if n and (REPO / n).is_file() and not (REPO / n).is_symlink()]


def _build_tools_missing() -> str | None:
    try:
        import setuptools
        import setuptools_scm  # noqa: F401
    except ImportError as e:
        return f"{e.name} is not installed"
    if Version(setuptools.__version__) < Version("77"):
        return f"setuptools {setuptools.__version__} < 77"
    return None


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


def _build(tree: Path, dist: Path) -> Path:
    """The wheel of ``tree`` (its build folders removed first), built offline into ``dist``."""
    before = set(dist.glob("*.whl"))
    for leftover in ("build", "slurm_fair.egg-info"):
        shutil.rmtree(tree / leftover, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist),
                    str(tree)], check=True, env=_env(), cwd=tree.parent, timeout=300)
    (wheel,) = set(dist.glob("*.whl")) - before
    return wheel


def test_every_commit_upgrades_the_last_and_replaces_the_shipped_files(tmp_path):
    missing = _build_tools_missing()
    assert missing is None, f"{missing}: install the test extra (pip install -c constraints.txt -e '.[test]')"
    src, old, dist = tmp_path / "src", tmp_path / "old", tmp_path / "dist"
    dist.mkdir()
    subprocess.run(["git", "clone", "-q", "--no-local", str(REPO), str(src)], check=True, env=_env(),
                   capture_output=True, timeout=300)
    # commit A: this working tree as it is (committed or not)
    _git(src, "rm", "-rq", "--ignore-unmatch", ".")
    for name in _working_tree_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, src / name)
    _git(src, "add", "-A")
    _git(src, "commit", "-q", "--allow-empty", "-m", "A: the working tree")
    commit_a, count_a = _git(src, "rev-parse", "--short=9", "HEAD"), int(_git(src, "rev-list", "--count", "HEAD"))
    # an older wheel: A's files without .git build as fallback_version (0.2.0), plus a file only it ships
    shutil.copytree(src, old, ignore=shutil.ignore_patterns(".git"))
    (old / OLD_ONLY).write_text("a file the newer commits no longer ship\n")
    wheel_old = _build(old, dist)
    wheel_a = _build(src, dist)
    # commit B: the shipped job_submit.lua changes
    lua_a = (src / LUA).read_bytes()
    with (src / LUA).open("a") as f:
        f.write(LUA_MARK)
    _git(src, "commit", "-q", "-am", "B: job_submit.lua changed")
    commit_b = _git(src, "rev-parse", "--short=9", "HEAD")
    wheel_b = _build(src, dist)

    # the versions, worked out from git by hand: 0.2.1.dev<commits>+g<commit>, each newer than the one before
    versions = [Version(w.name.split("-")[1]) for w in (wheel_old, wheel_a, wheel_b)]
    assert versions == [OLD, Version(f"0.2.1.dev{count_a}+g{commit_a}"), Version(f"0.2.1.dev{count_a + 1}+g{commit_b}")]
    assert versions[0] < versions[1] < versions[2]

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, env=_env(), timeout=120)
    vpy = venv / "bin" / "python"
    site = Path(subprocess.run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True, env=_env()).stdout.strip())
    (site / "test-deps.pth").write_text(f"{_deps_folder(tmp_path / 'deps')}\n")  # pip and the dependencies

    def pip(*args: str) -> str:
        r = subprocess.run([str(vpy), "-m", "pip", *args], capture_output=True, text=True, env=_env(),
                           cwd=tmp_path, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    def installed() -> tuple[str, str, str, Path]:
        """(slurm-fair --version, slurm_fair.__version__, the metadata's version, the installed package)"""
        r = subprocess.run([str(venv / "bin" / "slurm-fair"), "--version"], capture_output=True, text=True,
                           env=_env(), cwd=tmp_path, timeout=120)
        assert r.returncode == 0, r.stderr
        meta = subprocess.run([str(vpy), "-c", "import importlib.metadata as m, slurm_fair; "
                               "print(slurm_fair.__version__); print(m.version('slurm-fair')); "
                               "print(slurm_fair.__file__)"],
                              capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=120, check=True)
        attr, version, where = meta.stdout.split()
        pkg = Path(where).parent
        assert pkg.is_relative_to(venv), pkg
        return r.stdout.strip(), attr, version, pkg

    pip("install", "--no-deps", str(wheel_old))
    shown, attr, meta, pkg = installed()
    assert (shown, attr, meta) == (f"slurm-fair {OLD}", str(OLD), str(OLD))
    assert (pkg.parent / OLD_ONLY).is_file()

    # the README's upgrade step, twice: pip install -U of the next commit's wheel
    for wheel, version, lua in ((wheel_a, versions[1], lua_a), (wheel_b, versions[2], lua_a + LUA_MARK.encode())):
        out = pip("install", "-U", "--no-deps", str(wheel))
        assert "already satisfied" not in out.lower()
        shown, attr, meta = installed()[:3]
        assert (shown, attr, meta) == (f"slurm-fair {version}", str(version), str(version))
        assert (pkg / "share" / "job_submit.lua").read_bytes() == lua
        assert not (pkg.parent / OLD_ONLY).exists()  # the older wheel's own file is gone
    for name in ("__init__.py", "cli/__init__.py", "share/slurm-fair.service", "share/slurm-fair-hook"):
        assert (pkg / name).read_bytes() == (REPO / "slurm_fair" / name).read_bytes(), name
    assert LUA_MARK.encode() not in (REPO / LUA).read_bytes()  # the mark is B's alone
