"""The CLI starts at once (issue 31): ``slurm-fair --help`` and the commands users run most (``why``, ``status``,
``history``, ``explain`` --help …) import no solver or database library — cvxpy alone cost 2.1 s of a 2.6 s start.
Checked by what gets imported (a fresh interpreter each), not by timing; the times are benchmarks/cli_start.py's."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("cvxpy", "numpy", "scipy", "sqlite_utils")


@pytest.mark.parametrize("modules", [
    "slurm_fair.cli",  # every command registered: what --help needs
    "slurm_fair.cli, slurm_fair.cluster, slurm_fair.daemon.status_file, slurm_fair.views.why",  # what `why JOBID` needs
])
def test_the_cli_and_why_import_no_solver_or_database_library(modules):
    code = (f"import sys; import {modules}; "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "", f"imported at start: {r.stdout.strip()}"


@pytest.mark.parametrize("command", [[], ["why"], ["status"], ["history"], ["explain"]],
                         ids=["main", "why", "status", "history", "explain"])
def test_help_of_the_commands_users_run_imports_no_solver_or_database_library(command):
    # the command's own --help, run as the console script runs it; what was imported is printed at exit
    code = ("import atexit, sys\n"
            f"atexit.register(lambda: print('HEAVY=' + ','.join(m for m in {HEAVY!r} if m in sys.modules), "
            "file=sys.stderr))\n"
            "from slurm_fair.cli import main\nmain()\n")
    r = subprocess.run([sys.executable, "-c", code, *command, "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "Usage:" in r.stdout
    heavy = [line for line in r.stderr.splitlines() if line.startswith("HEAVY=")]
    assert heavy == ["HEAVY="], f"imported by {' '.join(command + ['--help'])}: {heavy}"
