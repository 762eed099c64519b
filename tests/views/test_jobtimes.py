"""Queue wait and JCT per account and GPU type (slurm_fair/views/jobtimes.py; percentile from
slurm_fair/stats.py): hand-computed numbers."""

from __future__ import annotations

import pytest

from slurm_fair.stats import percentile
from slurm_fair.store import JobRun
from slurm_fair.views.jobtimes import NO_GPU, UNKNOWN_TYPE, FinishedJob, finished_jobs, gpu_type_of, wait_stats


def run(job, start, end, submit=None, account="a", gpus=None, restart=0, info="scontrol TRES"):
    return JobRun(job, restart, account, "default", start, submit, end, {"v100": 1} if gpus is None else gpus, info)


def test_wait_and_jct_of_a_job_with_a_requeue():
    runs = [run(1, 100.0, 150.0, submit=40.0), run(1, 170.0, 260.0, submit=160.0, restart=1)]
    (j,) = finished_jobs(runs, None, None)
    assert j == FinishedJob(job_id=1, account="a", gpu_type="v100", submit=40.0, start=100.0, end=260.0, runs=2)
    assert (j.wait, j.jct, j.seconds) == (60.0, 220.0, 160.0)


def test_open_jobs_and_the_window():
    runs = [run(1, 10.0, 20.0, 0.0), run(2, 10.0, None, 0.0), run(3, 10.0, 50.0, 0.0)]
    assert [j.job_id for j in finished_jobs(runs, None, None)] == [1, 3]  # job 2 still runs
    assert [j.job_id for j in finished_jobs(runs, 30.0, None)] == [3]
    assert [j.job_id for j in finished_jobs(runs, None, 30.0)] == [1]


def test_gpu_type_of_a_run():
    assert gpu_type_of(run(1, 0.0, 1.0, gpus={"a100": 2})) == "a100"
    assert gpu_type_of(run(1, 0.0, 1.0, gpus={"v100": 1, "a100": 1, "k80": 0}, info=None)) == "a100+v100"
    assert gpu_type_of(run(1, 0.0, 1.0, gpus={"untyped": 1}, info=None)) == "untyped"
    assert gpu_type_of(run(1, 0.0, 1.0, gpus={}, info="scontrol AllocTRES")) == NO_GPU  # Slurm said: no GPU
    assert gpu_type_of(run(1, 0.0, 1.0, gpus={}, info="none: scontrol timed out")) == UNKNOWN_TYPE
    assert gpu_type_of(run(1, 0.0, 1.0, gpus={}, info=None)) == UNKNOWN_TYPE


def test_wait_stats_per_account_and_type():
    runs = [run(1, 10.0, 110.0, submit=0.0),  # wait 10, jct 110
            run(2, 30.0, 60.0, submit=0.0),  # wait 30, jct 60
            run(3, 5.0, 105.0, submit=10.0),  # Slurm's second resolution vs the hook: wait clamps to 0
            run(4, 50.0, 90.0, submit=None),  # no submit time: counted, not in the numbers
            run(5, 0.0, 10.0, submit=0.0, gpus={"a100": 4}),
            run(6, 0.0, 10.0, submit=0.0, account="b"),
            run(7, 0.0, 10.0, submit=0.0, gpus={}, info="scontrol TRES")]  # no GPU: no wait row
    st = wait_stats(finished_jobs(runs, None, None))
    assert sorted((a, t) for a, row in st.items() for t in row) == [("a", "a100"), ("a", "v100"), ("b", "v100")]
    w = st["a"]["v100"]
    assert (w.jobs, w.with_submit) == (4, 3)
    assert w.wait_mean_s == pytest.approx(40 / 3) and w.wait_p50_s == 10.0 and w.wait_max_s == 30.0
    assert w.wait_p95_s == pytest.approx(percentile([0.0, 10.0, 30.0], 0.95)) == pytest.approx(28.0)
    assert w.jct_mean_s == pytest.approx((110 + 60 + 95) / 3)
    assert w.run_mean_s == pytest.approx((100 + 30 + 100 + 40) / 4)
    assert st["a"]["a100"].as_dict() == {"jobs": 1, "with_submit": 1, "wait_mean_s": 0.0, "wait_p50_s": 0.0,
                                         "wait_p95_s": 0.0, "wait_max_s": 0.0, "jct_mean_s": 10.0, "run_mean_s": 10.0}
    only_old = wait_stats(finished_jobs([run(8, 0.0, 5.0)], None, None))["a"]["v100"]
    assert (only_old.jobs, only_old.with_submit, only_old.wait_mean_s, only_old.jct_mean_s) == (1, 0, None, None)


def test_percentile_matches_numpy_linear():
    assert percentile([], 0.5) is None and percentile([3.0], 0.95) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5 and percentile([0.0, 10.0], 0.95) == pytest.approx(9.5)
