"""The CLI starts at once (issue 31): ``slurm-fair --help`` and the commands users run most (``why``, ``status``
--help …) import no solver or database library — cvxpy alone cost 2.1 s of a 2.6 s start. Checked by what gets
imported (a fresh interpreter each), not by timing; the times are benchmarks/cli_start.py's."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("cvxpy", "numpy", "scipy", "sqlite_utils")


@pytest.mark.parametrize("modules", [
    "slurm_fair.cli",  # every command registered: what --help needs
    "slurm_fair.cli, slurm_fair.cluster, slurm_fair.daemon.public, slurm_fair.views.why",  # what `why JOBID` needs
])
def test_the_cli_and_why_import_no_solver_or_database_library(modules):
    code = (f"import sys; import {modules}; "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "", f"imported at start: {r.stdout.strip()}"
