"""The hook shim refuses a Python older than 3.9 loudly (issue 29 item 8): jobrecord.py needs 3.9, and RHEL 8's
python3 is 3.6. The check is the first two lines of the Python the shim runs (they parse on any Python): with
a fake version they exit 3 before importing jobrecord; the shim then says so on stderr and in the hook log,
and still exits 0 (a hook never fails a job)."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHIM = REPO / "slurm_fair" / "share" / "slurm-fair-hook"
SNIPPET = re.search(r"python3 -I -S -c '([^']*)'", SHIM.read_text()).group(1)


def _run_snippet(tmp_path: Path, version: tuple) -> tuple[int, bool]:
    """The shim's Python, run with ``sys.version_info`` replaced by ``version`` and a stub jobrecord.py that
    notes it was called; returns (exit status, whether jobrecord.hook ran)."""
    d = tmp_path / f"v{'.'.join(map(str, version))}"
    d.mkdir()
    called = d / "called"
    (d / "jobrecord.py").write_text(f"def hook(conf):\n    open({str(called)!r}, 'w').write(conf)\n")
    fake = (*version, "final", 0)
    code = (f"import sys; sys.version_info = {fake!r}; sys.argv = ['-c', {str(d)!r}, {str(d / 'hooks.conf')!r}]; "
            f"exec(compile({SNIPPET!r}, 'shim', 'exec'))")
    r = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=30)
    return r.returncode, called.exists()


@pytest.mark.parametrize("version", [(2, 7, 18), (3, 6, 15), (3, 8, 18)])
def test_a_python_before_3_9_exits_3_without_importing_jobrecord(tmp_path, version):
    assert _run_snippet(tmp_path, version) == (3, False)


@pytest.mark.parametrize("version", [(3, 9, 0), (3, 11, 7), (3, 13, 0), (4, 0, 0)])
def test_python_3_9_and_later_record(tmp_path, version):
    assert _run_snippet(tmp_path, version) == (0, True)


def _pythons(minors: tuple[int, ...]) -> list[str]:
    """Real interpreters 3.<minor> found on this machine (PATH, pyenv)."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = []
    for m in minors:
        for exe in [*sorted(glob.glob(f"{root}/versions/3.{m}.*/bin/python3")), shutil.which(f"python3.{m}")]:
            if not exe:
                continue
            try:  # what it is, not what its name says (pyenv's shims run whichever version is selected)
                r = subprocess.run([exe, "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                   capture_output=True, text=True, timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if r.returncode == 0 and r.stdout.strip() == f"3.{m}":
                found.append(exe)
                break
    return found


def _shim_with(tmp_path: Path, python: str) -> tuple[Path, Path]:
    """The shim and jobrecord.py installed in a folder, the shim's PATH line prefixed with a folder whose python3
    is ``python`` (the only change to the shim's text); returns (shim, spool)."""
    d, bin_, spool = tmp_path / "hooks", tmp_path / "bin", tmp_path / "spool"
    for p in (d, bin_, spool):
        p.mkdir()
    (bin_ / "python3").symlink_to(python)
    text = SHIM.read_text()
    assert text.count("\nPATH=") == 1
    (d / "slurm-fair-hook").write_text(text.replace("\nPATH=", f"\nPATH={bin_}:"))
    (d / "slurm-fair-hook").chmod(0o755)
    shutil.copy2(REPO / "slurm_fair" / "jobrecord.py", d / "jobrecord.py")
    (d / "hooks.conf").write_text(f"spool = {spool}\n")
    return d / "slurm-fair-hook", spool


OLD = _pythons((6, 7, 8))


@pytest.mark.skipif(not OLD, reason="no Python 3.6-3.8 on this machine")
@pytest.mark.parametrize("python", OLD)
def test_the_shim_under_an_old_python_says_so_and_exits_0(tmp_path, python):
    shim, spool = _shim_with(tmp_path, python)
    env = {"SLURM_JOB_ID": "41", "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld"}
    r = subprocess.run([str(shim)], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0
    assert re.search(r"job 41 epilog_slurmctld: python3 is 3\.[678]\.\d+, older than 3\.9: no record written",
                     r.stderr), r.stderr
    log = Path(f"{spool}.log").read_text()
    assert "older than 3.9: no record written" in log and log.count("\n") == 1
    assert list(spool.iterdir()) == []


@pytest.mark.skipif(not _pythons((9,)), reason="no Python 3.9 on this machine")
def test_the_shim_under_python_3_9_records(tmp_path):
    shim, spool = _shim_with(tmp_path, _pythons((9,))[0])
    r = subprocess.run([str(shim)], env={"SLURM_JOB_ID": "42", "SLURM_SCRIPT_CONTEXT": "epilog_slurmd"},
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stderr == ""
    assert [p.name for p in spool.iterdir()] == ["42.0.end.epilog_slurmd.json"]
