"""simulate(dry_run=True): the daemon's rounds run but change nothing in the simulated Slurm (no limit, no
SiteFactor, no type map), so Slurm's own scheduling decides: first come first served, each untyped job on its
fastest type that fits, later jobs backfilling past a blocked one."""

from __future__ import annotations

import pytest

from slurm_fair.sim.cluster import cluster_spec
from slurm_fair.sim.engine import simulate
from slurm_fair.sim.traces import Trace, TraceJob

THR = {"c": {"k80": 1.0, "v100": 4.0}, "c-x2": {"k80": 2.0, "v100": 8.0}}


def trace() -> Trace:
    # 2 V100 + 2 K80; at t=0 three 1-GPU jobs of 3600 steps (15 min on a V100, 1 h on a K80) from one account,
    # at t=60 a 2-GPU job of 7200 steps (15 min on V100s) from another
    jobs = [TraceJob(f"j{i}", 0.0, "a", "c", 1, 3600.0) for i in range(3)]
    jobs.append(TraceJob("big", 60.0, "b", "c-x2", 2, 7200.0))
    return Trace(tuple(jobs), THR, "hand-made")


def test_dry_run_leaves_scheduling_to_slurm_first_come_fastest_type_first():
    r = simulate(trace(), cluster_spec("k80=2,v100=2", node_size=2), "gavel", round_s=300, dry_run=True)
    assert r.finished == 4 and not r.round_errors
    rows = {row["id"]: row for row in r.job_rows}
    # j0, j1 take the V100s at 0, j2 the first K80; big cannot fit until the V100s free up at 900 s
    assert rows["j0"]["types"] == rows["j1"]["types"] == ["v100"] and rows["j2"]["types"] == ["k80"]
    assert rows["j0"]["jct"] == pytest.approx(900) and rows["j2"]["jct"] == pytest.approx(3600)
    assert rows["big"]["start"] == pytest.approx(900) and rows["big"]["types"] == ["v100"]
    assert rows["big"]["jct"] == pytest.approx(900 + 900 - 60)


def test_lending_leaves_slurm_alone_schedule_where_nobody_is_owed_gpus():
    # a runs one job from t=0 and floods three more at t=100, as b submits its 2-GPU job. In Slurm alone a's
    # flood takes every free GPU at once and b waits for both V100s (j1 ends at 1000 s). With slurm-fair's
    # limits lending every GPU no waiting guarantee holds, a's flood starts just as early (before lending,
    # the round at t=0 capped a at the 1 GPU it then used, and its flood waited for a round).
    jobs = [TraceJob("j0", 0.0, "a", "c", 1, 3600.0)] + [TraceJob(f"j{i}", 100.0, "a", "c", 1, 3600.0) for i in (1, 2, 3)]
    jobs.append(TraceJob("zbig", 100.0, "b", "c-x2", 2, 7200.0))
    tr = Trace(tuple(jobs), THR, "hand-made")
    plain = simulate(tr, cluster_spec("k80=2,v100=2", node_size=2), "gavel", round_s=300, dry_run=True)
    fair = simulate(tr, cluster_spec("k80=2,v100=2", node_size=2), "gavel", round_s=300)
    assert plain.finished == fair.finished == 5 and not plain.round_errors and not fair.round_errors
    start = {row["id"]: row["start"] for row in plain.job_rows}
    assert start["j1"] == start["j2"] == start["j3"] == pytest.approx(100) and start["zbig"] == pytest.approx(1000)
    fair_start = {row["id"]: row["start"] for row in fair.job_rows}
    assert fair_start["j1"] == fair_start["j2"] == fair_start["j3"] == pytest.approx(100)
    # zbig is left untyped at submission (a's flood, submitted just before it, took the idle GPUs of the map's
    # shared free pool, #@free; b's untyped room holds it): it starts on the V100s as they free up at 1000 s,
    # as in Slurm alone (typed K80 by the map, it used to wait for a retype at the early round 30 s later)
    assert fair_start["zbig"] == pytest.approx(1000)
    assert {row["id"]: row["types"] for row in fair.job_rows}["zbig"] == ["v100"]


def test_the_command_passes_dry_run_through():
    import json

    from click.testing import CliRunner

    from slurm_fair.cli import main
    from slurm_fair.sim.synthetic_trace import generate

    args = ["simulate", "--generate", "12", "--seed", "3", "--gen-accounts", "3", "--rate", "4", "--mean-duration", "3600",
            "--cluster", "k80=8,v100=8", "--policy", "gavel", "--json"]
    out = CliRunner().invoke(main, args + ["--dry-run"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.stdout)["policies"]["gavel"]
    tr = generate(seed=3, jobs=12, accounts=3, rate=4.0, mean_duration=3600.0)
    want = simulate(tr, cluster_spec("k80=8,v100=8"), "gavel", dry_run=True)
    assert got["mean_jct"] == pytest.approx(want.mean_jct) and got["makespan"] == pytest.approx(want.makespan)
    # --upgrade runs the daemon with upgrade moves (no reclaim): the same as simulate(upgrade=True)
    up = CliRunner().invoke(main, args + ["--upgrade"])
    assert up.exit_code == 0, up.output
    got = json.loads(up.stdout)["policies"]["gavel"]
    want = simulate(tr, cluster_spec("k80=8,v100=8"), "gavel", upgrade=True)
    assert got["mean_jct"] == pytest.approx(want.mean_jct) and got["preemptions"] == want.preemptions
