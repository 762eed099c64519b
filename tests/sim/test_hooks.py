"""The simulated controller hooks (``slurm_fair.sim.hooks``, issue 39): each run's start and end record goes into
the daemon's spool as slurm-fair's PrologSlurmctld/EpilogSlurmctld would write it, the round ingests it, and the
store's job runs are the simulated jobs' runs (so the classes' recorded run times are what a real cluster's
would be)."""

from __future__ import annotations

import pytest

from slurm_fair.daemon.ingest import check_record
from slurm_fair.sim.cluster import cluster_spec
from slurm_fair.sim.engine import EPOCH, simulate
from slurm_fair.sim.hooks import run_records
from slurm_fair.sim.jobs import Run, SimJob
from slurm_fair.sim.traces import Trace, TraceJob
from slurm_fair.store import Store
from slurm_fair.store.jobs import class_run_times


def test_records_of_a_requeued_job_are_valid_hook_records_one_per_run_start_and_end():
    j = SimJob(7, "t7", "a", "cnn", 2, 100.0, 5.0, None)
    j.runs = [Run(10.0, 50.0, "k80", {"k1": 2}, "requeue"), Run(120.0, None, "v100", {"v1": 2})]
    written: set = set()
    recs = run_records(j, 1000.0, written)
    assert [(r["event"], r["restart_count"], r["gpus"], r["start_time"], r["end_time"], r["requeued"])
            for r in recs] == [("start", 0, {"k80": 2}, 1010.0, None, False), ("end", 0, {"k80": 2}, 1010.0, 1050.0, True),
                               ("start", 1, {"v100": 2}, 1120.0, None, False)]
    assert all(check_record(r) == "" for r in recs) and {r["submit_time"] for r in recs} == {1005.0}
    assert run_records(j, 1000.0, written) == []  # each record once
    j.runs[1].end = 400.0
    assert [(r["event"], r["restart_count"], r["end_time"]) for r in run_records(j, 1000.0, written)] == [
        ("end", 1, 1400.0)]


def test_the_store_of_a_simulation_holds_the_runs_the_hooks_recorded(tmp_path):
    # 2 K80 + 2 V100; three 1-GPU jobs of class fast at 0 (two on V100 for 3600 s, one on K80 for 36 000 s), then
    # one more at 40 000 s (on a V100, 3600 s) so that rounds run after they ended and ingest their end records
    jobs = tuple(TraceJob(f"j{i}", 0.0, "a", "fast", 1, 36000.0) for i in range(3))
    jobs += (TraceJob("late", 40000.0, "a", "fast", 1, 36000.0),)
    path = tmp_path / "s.sqlite"
    simulate(Trace(jobs, {"fast": {"k80": 1.0, "v100": 10.0}}, "by hand"), cluster_spec("k80=2,v100=2", node_size=2),
             "oef-coop", round_s=300, store_path=path)
    runs = Store(path).job_runs()
    ended = sorted((*r.gpus.items(), r.start - EPOCH, r.end - EPOCH) for r in runs if r.end is not None)
    assert ended == [(("k80", 1), 0.0, pytest.approx(36000.0)), (("v100", 1), 0.0, pytest.approx(3600.0)),
                     (("v100", 1), 0.0, pytest.approx(3600.0)), (("v100", 1), 40000.0, pytest.approx(43600.0))]
    # the median of 3600 x 3 and 36 000 (one class: every class's too)
    assert class_run_times(runs) == {"fast": pytest.approx(3600.0), "*": pytest.approx(3600.0)}
