"""The README's two commands in either order, repeatedly, on one checkout (issue "Hardening", item 1).

demo → tests → demo → tests: ``contrib/demo.sh`` (its own testbed, left running with its jobs and limits, as
a newcomer leaves it), then the integration tests that once failed after the demo ("nodes not idle",
``limits == {}``), then the demo again on the same, still busy demo testbed, then those tests again. The demo
here runs under its own name and ports (``demo-order``, 20817/27306; the suite uses 16817 and 17817, the README demo 15817) so that a demo a developer left running is
never touched; this test stops and purges only its own.

Runs against the bookworm testbed (Slurm 22.05) only: the demo is a host script (the trixie chroot runs the
integration tests, not the demo).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO_ROOT, TESTBED_SH, in_chroot

DEMO_ENV = {"TESTBED_NAME": "demo-order", "TESTBED_PORT_BASE": "20817", "TESTBED_MYSQL_PORT": "27306",
            "DEMO_ROUNDS": "2", "DEMO_PERIOD": "3"}
# the tests that failed after the demo before the suite owned its state (jobs, limits, type map)
AFTER_DEMO = ["tests/integration/test_cli_cluster_live.py", "tests/integration/test_scenario_shares.py"]

pytestmark = pytest.mark.skipif(in_chroot(), reason="the demo is a host script; the chroot runs only the tests")


def _demo_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TESTBED_"))}
    env.update(DEMO_ENV)
    env["SLURM_FAIR"] = str(REPO_ROOT / ".venv" / "bin" / "slurm-fair") if (REPO_ROOT / ".venv" / "bin" / "slurm-fair").exists() \
        else os.environ.get("SLURM_FAIR", "slurm-fair")
    return env


def _run(argv, env, timeout):
    p = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def test_demo_then_tests_twice_on_one_checkout(testbed):
    if testbed.release != "bookworm":
        pytest.skip("the demo runs on the host's bookworm testbed")
    demo_env = _demo_env()
    tests_env = dict(testbed.env)
    tests_env["SLURM_FAIR_TESTBED"] = str(testbed.state_dir)
    tests_env["SLURM_FAIR_TESTBED_KEEP"] = "1"
    try:
        for turn in (1, 2):
            rc, out = _run(["bash", "contrib/demo.sh"], demo_env, 600)
            assert rc == 0, f"demo run {turn} failed (rc {rc}):\n{out[-4000:]}"
            assert "Stop it:" in out, out[-2000:]  # the demo ran to its end and says how to stop it
            rc, out = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *AFTER_DEMO], tests_env, 900)
            assert rc == 0, f"tests after demo run {turn} failed (rc {rc}):\n{out[-4000:]}"
            assert " passed" in out and " failed" not in out, out[-2000:]
            # the demo's testbed is still up, with its own limits: the tests neither needed nor removed them
            rc, out = _run(["bash", str(TESTBED_SH), "status"], demo_env, 60)
            assert rc == 0, f"demo testbed not running after the tests:\n{out[-2000:]}"
    finally:
        _keep_logs(demo_env)
        _run(["bash", str(TESTBED_SH), "down", "--purge"], demo_env, 300)


def _keep_logs(env) -> None:
    """Copy the demo testbed's daemon logs to ``.testbed/logs/either-order/`` before its state is purged, so a
    failure here can be read afterwards (CI keeps ``.testbed/logs``)."""
    rc, out = _run(["bash", str(TESTBED_SH), "env"], env, 60)
    state = next((line.split("=", 1)[1] for line in out.splitlines() if line.startswith("export SLURM_FAIR_TESTBED=")), "")
    src = Path(state.strip("'\"")) / "log"
    if rc != 0 or not src.is_dir():
        return
    dst = REPO_ROOT / ".testbed" / "logs" / "either-order"
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, dirs_exist_ok=True)
