"""The daemon's /metrics on the real testbed: a running daemon serves, over plain HTTP on a loopback port, the
shares and limits its round recorded, equal to the store, to `slurm-fair status --json` and to the GrpTRES
limits Slurm holds; the round status is ok."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from slurm_fair.store import Store

from tests.daemon.test_metrics import at, free_port, scrape
from .test_daemon import CLASS_OF, PROFILES, TYPES, submit_mix

PY = [sys.executable, "-c", "from slurm_fair.cli import main; main()"]



def test_running_daemon_serves_the_recorded_shares_and_limits(testbed, tmp_path):
    port = free_port()
    cfg = tmp_path / "slurm-fair.toml"
    # one round in the test's window: the period is long, and after it every account has a share (no early round)
    cfg.write_text('[daemon]\nperiod = 600\ndatabase = "sf.sqlite"\ndry_run = false\n[policy]\nname = "oef-coop"\n'
                   f'[cluster]\nbackend = "cli"\ntimeout = 15\n[metrics]\nlisten = "127.0.0.1:{port}"\n')
    with Store(tmp_path / "sf.sqlite") as st:
        for cls, thr in PROFILES.items():
            for g, v in thr.items():
                st.set_profile(cls, g, v)
    submit_mix(testbed, {"a100": 2, "v100": 3, "k80": 2})
    testbed.wait_scheduled()  # 16 running, 5 pending: the round's snapshot must not race Slurm's scheduler
    proc = subprocess.Popen([*PY, "daemon", "--config", str(cfg)], env=testbed.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)

    def after_a_round():
        if proc.poll() is not None:
            raise AssertionError(f"the daemon exited {proc.returncode}: {proc.stderr.read()}")
        try:
            v = scrape(port)
        except OSError:
            return None  # not listening yet
        return v if sum(at(v, "slurm_fair_rounds_total", status=s) for s in ("ok", "error", "unreachable",
                                                                             "solver-failed")) >= 1 else None

    try:
        v = testbed.wait_for(after_a_round, timeout=90, what="/metrics after the daemon's first round")
        status = json.loads(subprocess.run([*PY, "status", "--json", "--config", str(cfg)], env=testbed.env,
                                           capture_output=True, text=True, timeout=120, check=True).stdout)
        limits_in_slurm = testbed.gpu_limits(tuple(CLASS_OF))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert proc.returncode == 0, err
    assert f"metrics: serving http://127.0.0.1:{port}/metrics" in err

    with Store(tmp_path / "sf.sqlite") as st:
        rnd = st.round()
        assert rnd is not None and rnd.status == "ok", st.rounds(limit=3, details=False)
        assert st.round_counts() == {"ok": 1}
        placements = {(p.account, p.gpu_type): p for p in st.placements(rnd.id)}
    assert at(v, "slurm_fair_round_status", status="ok") == 1
    assert at(v, "slurm_fair_rounds_total", status="ok") == 1
    assert at(v, "slurm_fair_last_round_timestamp_seconds") == rnd.finished
    assert at(v, "slurm_fair_shares_round_timestamp_seconds") == rnd.finished
    assert at(v, "slurm_fair_solve_seconds") == pytest.approx(rnd.solve_seconds)
    assert at(v, "slurm_fair_round_seconds") == pytest.approx(rnd.finished - rnd.started)
    assert status["round"] == rnd.id and status["round_status"] == "ok"

    d = rnd.details
    for a in CLASS_OF:
        acct = status["accounts"][a]
        for g in TYPES:
            share = at(v, "slurm_fair_share_gpus", account=a, gpu_type=g)
            limit = at(v, "slurm_fair_limit_gpus", account=a, gpu_type=g)
            assert share == pytest.approx(placements[(a, g)].ideal) == pytest.approx(acct["ideal"].get(g, 0.0))
            cap = at(v, "slurm_fair_capacity_gpus", gpu_type=g)  # a type without a limit: its capacity
            assert limit == placements[(a, g)].limit == acct["planned_limits"].get(g, cap) == \
                limits_in_slurm[a].get(g, cap)
            assert at(v, "slurm_fair_rounded_share_gpus", account=a, gpu_type=g) == placements[(a, g)].real
            assert at(v, "slurm_fair_deviation_gpus", account=a, gpu_type=g) == pytest.approx(
                d["deviations"][a][g])
            assert at(v, "slurm_fair_usage_gpus", account=a, gpu_type=g) == d["in_use"].get(a, {}).get(g, 0)
        assert at(v, "slurm_fair_pending_gpus", account=a) == d["pending_gpus"].get(a, 0)
    # the 21 one-GPU jobs were pending or running when the round observed them; the guarantees (rounded shares)
    # hand out every GPU
    assert sum(at(v, "slurm_fair_pending_gpus", account=a) for a in CLASS_OF) + sum(
        at(v, "slurm_fair_usage_gpus", account=a, gpu_type=g) for a in CLASS_OF for g in TYPES) == 21
    for g in TYPES:
        assert sum(at(v, "slurm_fair_rounded_share_gpus", account=a, gpu_type=g) for a in CLASS_OF) == \
            at(v, "slurm_fair_capacity_gpus", gpu_type=g)
