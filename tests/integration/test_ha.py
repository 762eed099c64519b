"""High availability on the real testbed: ``scontrol ping`` as this Slurm prints it, and ``daemon.only_on_primary``
deciding from it (the testbed has one SlurmctldHost; a backup controller is not tested here, docs/daemon.md)."""

from __future__ import annotations

import sys

from slurm_fair.cluster import ping as P
from slurm_fair.store import Store

PY = [sys.executable, "-c", "from slurm_fair.cli import main; main()"]


def _cfg(tmp_path, host: str) -> str:
    p = tmp_path / f"{host}.toml"
    p.write_text(f'[daemon]\nperiod = 60\ndatabase = "{host}.sqlite"\nhost_id = "{host}"\nonly_on_primary = true\n'
                 '[cluster]\nbackend = "cli"\ntimeout = 15\n[metrics]\nlisten = ""\n')
    return str(p)


def test_scontrol_ping_parses_and_names_the_serving_controller(testbed):
    controllers = P.ping(timeout=15, env=testbed.env)
    assert controllers[0].role == "primary" and controllers[0].up, controllers
    assert P.standby_reason(controllers, controllers[0].host) is None


def test_only_on_primary_runs_on_the_serving_host_and_stands_by_elsewhere(testbed, tmp_path):
    serving = P.serving(P.ping(timeout=15, env=testbed.env))
    here = testbed.run(PY + ["daemon", "--once", "--dry-run", "--config", _cfg(tmp_path, serving.host)],
                       check=False, capture_output=True, timeout=300)
    assert here.returncode == 0, here.stderr
    with Store(tmp_path / f"{serving.host}.sqlite") as st:
        assert [r.status for r in st.rounds(details=False)] == ["dry-run"]
        assert st.leader().host == serving.host
    other = testbed.run(PY + ["daemon", "--once", "--config", _cfg(tmp_path, "not-a-controller")],
                        check=False, capture_output=True, timeout=120)
    assert other.returncode == 0, other.stderr
    assert (f"standby: slurmctld primary at {serving.host} serves the cluster; this host (not-a-controller) is no "
            "SlurmctldHost; no round here") in other.stderr
    assert not (tmp_path / "not-a-controller.sqlite").exists()  # standing by, it never opened the database
