"""The simulator's runs and their realized fairness (``slurm_fair.sim.runs``, issue 39 item 1): one row per run of
a job in ``SimResult.runs``, ``simulate --runs-csv`` and ``simulate --json``'s ``realized`` section."""

from __future__ import annotations

import csv
import json

import pytest
from click.testing import CliRunner

from slurm_fair.cli import main
from slurm_fair.fairness.realized import Run
from slurm_fair.sim.cluster import cluster_spec
from slurm_fair.sim.engine import simulate
from slurm_fair.sim.runs import RUNS_CSV_COLUMNS, realized_of, runs_csv_rows, weights
from slurm_fair.sim.traces import Trace, TraceJob

THR = {"fast": {"k80": 1.0, "v100": 10.0}, "flat": {"k80": 1.0, "v100": 1.25}}


def test_one_row_per_run_and_the_realized_numbers_of_a_schedule_worked_by_hand():
    # one account, 2 K80 + 2 V100, three 1-GPU jobs of 36 000 steps at t=0 (tests/sim/test_engine.py's hand-worked
    # run): two run 3 600 s on the V100s, the third 36 000 s on a K80, all from 0, one run each.
    jobs = tuple(TraceJob(f"j{i}", 0.0, "a", "fast", 1, 36000.0) for i in range(3))
    r = simulate(Trace(jobs, {"fast": {"k80": 1.0, "v100": 10.0}}, "by hand"), cluster_spec("k80=2,v100=2", node_size=2),
                 "oef-coop", round_s=300)
    assert sorted((x.gpu_type, x.start, x.end, x.ended) for x in r.runs) == [
        ("k80", 0.0, pytest.approx(36000.0), True), ("v100", 0.0, pytest.approx(3600.0), True),
        ("v100", 0.0, pytest.approx(3600.0), True)]
    # nothing ever waits: no backlog episode; the only account has all the throughput; mean JCT 14 400 s
    (acct,) = r.realized.accounts
    assert (r.realized.episodes, acct.ratio, acct.jobs_ended) == (0, None, 3)
    assert (acct.mean_jct, acct.throughput_share) == (pytest.approx(14400.0), pytest.approx(1.0))
    # 10 x 3600 x 2 + 36000 speed-weighted GPU-seconds
    assert acct.throughput == pytest.approx(108000.0)


def test_requeued_jobs_have_several_runs_and_the_summary_is_the_one_function():
    # b floods all 8 GPUs at 0 with jobs of 10 h on a K80; a arrives at 600 s; preemption requeues some of b's
    jobs = [TraceJob(f"b{i}", 0.0, "b", "flat", 1, 36000.0) for i in range(8)]
    jobs += [TraceJob(f"a{i}", 600.0, "a", "fast", 1, 3600.0) for i in range(4)]
    r = simulate(Trace(tuple(jobs), THR, "flood"), cluster_spec("k80=4,v100=4"), "oef-coop", round_s=300,
                 preemption=True, restart_s=60)
    assert r.preemptions > 0
    # every job ended, each requeue was followed by a restart: one run per job plus one per requeue
    assert len(r.runs) == r.jobs + r.preemptions
    assert sum(x.ended for x in r.runs) == r.finished == 12
    per_job: dict[str, list[Run]] = {}
    for x in r.runs:
        per_job.setdefault(x.job, []).append(x)
    assert all([x.ended for x in rs] == [False] * (len(rs) - 1) + [True] for rs in per_job.values())
    # a waits from 600 s (its jobs fit its share: 2 of each type): one episode at least, starting at 600
    assert min(e.start for e in _realized(r).episodes if e.account == "a") == pytest.approx(600.0)
    # the JSON's section is realized_of over the same runs
    again = realized_of(r.runs, {"a": 1, "b": 1}, {"k80": 4, "v100": 4}, THR, r.sim_seconds)
    assert again == r.realized and r.summary()["realized"] == again.as_json()


def _realized(r):
    from slurm_fair.fairness.realized import realized, speeds_from_throughput

    caps = {"k80": 4, "v100": 4}
    return realized(r.runs, {"a": 1, "b": 1}, caps, speeds_from_throughput(THR, caps), 0.0, r.sim_seconds)


def test_weights_are_shares_with_0_as_1_and_runs_csv_rows_of_a_job_that_never_started():
    runs = (Run("j1", "c", "fast", 2, 5.0, None, None, None, False),
            Run("j2", "a", "fast", 1, 0.0, "v100", 1.0, 9.0, True))
    assert weights({"a": 3, "b": 0}, runs) == {"a": 3.0, "b": 1.0, "c": 1.0}
    assert runs_csv_rows("gavel", runs) == [["gavel", "j1", "c", "fast", 2, 5.0, "", "", "", 0],
                                            ["gavel", "j2", "a", "fast", 1, 0.0, "v100", 1.0, 9.0, 1]]
    assert realized_of(runs, {"a": 1}, {"k80": 1, "v100": 1}, THR, 0.0) is None  # nothing simulated


def test_simulate_runs_csv_and_json_realized(tmp_path):
    out = tmp_path / "runs.csv"
    res = CliRunner().invoke(main, ["simulate", "--generate", "20", "--seed", "2", "--gen-accounts", "3", "--cluster",
                                    "k80=4,v100=4", "--compare", "gavel,oef-coop", "--json", "--runs-csv", str(out)])
    assert res.exit_code == 0, res.output
    rows = list(csv.reader(out.open()))
    assert tuple(rows[0]) == RUNS_CSV_COLUMNS
    assert {r[0] for r in rows[1:]} == {"gavel", "oef-coop"}
    body = json.loads(res.output)["policies"]
    for name, s in body.items():
        mine = [r for r in rows[1:] if r[0] == name]
        assert sum(r[9] == "1" for r in mine) == s["finished"] == 20
        real = s["realized"]
        assert set(real) == {"accounts", "episodes", "long_episodes", "time_to_fair_share", "envy"}
        assert sum(a["jobs_ended"] for a in real["accounts"].values()) == 20
        assert sum(a["throughput_share"] for a in real["accounts"].values()) == pytest.approx(1.0)
