"""The simulated Slurm cluster (slurm_fair/sim/cluster.py): the scheduler's rules (priority, typed and total
GrpTRES, whole GPUs on nodes), exact completion times, requeue with kept work and restart delay, typing of
untyped jobs by the published map, and the Cluster interface the daemon uses."""

from __future__ import annotations

import pytest

from slurm_fair.cluster.base import ANY_GPU, CLEAR
from slurm_fair.cluster.errors import CommandFailed
from slurm_fair.errors import InputError
from slurm_fair.sim.cluster import SimCluster, cluster_spec
from slurm_fair.sim.traces import TraceJob

THR = {"fast": {"k80": 1.0, "v100": 10.0}, "flat": {"k80": 1.0, "v100": 1.25}}


def tj(i, submit=0.0, account="a", cls="fast", gpus=1, work=100.0, gpu_type=None):
    return TraceJob(id=str(i), submit=submit, account=account, cls=cls, gpus=gpus, work=work, gpu_type=gpu_type)


def sim(jobs, nodes="k80=4,v100=4", **kw):
    return SimCluster(cluster_spec(nodes), {"a": 1, "b": 1}, THR, jobs, **kw)


def running(c):
    return {c.jobs[i].trace_id: c.jobs[i].run_type for i in c.jobs if c.jobs[i].state == "RUNNING"}


def test_cluster_spec_nodes_of_four():
    assert cluster_spec("k80=6,v100=4") == {"k80-000": {"k80": 4}, "k80-001": {"k80": 2}, "v100-000": {"v100": 4}}
    for bad in ("k80", "k80=0", "k80=x", ""):
        with pytest.raises(InputError):
            cluster_spec(bad)


def test_untyped_jobs_take_their_fastest_type_and_finish_exactly():
    c = sim([tj(1, work=1000.0), tj(2, cls="flat", work=50.0, gpu_type="k80")])
    c.advance(0.0)
    assert running(c) == {"1": "v100", "2": "k80"}
    c.advance(60.0)
    assert c.jobs[2].state == "DONE" and c.jobs[2].end == pytest.approx(50.0)  # 50 steps at 1 step/s
    assert c.jobs[1].state == "DONE" and c.jobs[1].end == pytest.approx(100.0) or c.jobs[1].state == "RUNNING"
    c.advance(1000.0)
    assert c.jobs[1].end == pytest.approx(100.0)  # 1000 steps at 10 steps/s on a V100


def test_typed_limit_binds_typed_jobs_only_and_the_total_binds_all():
    jobs = [tj(1, gpu_type="v100"), tj(2, gpu_type="v100"), tj(3), tj(4, gpu_type="k80")]
    c = sim(jobs)
    c.set_accounts_gpu_limits({"a": {"v100": 1, ANY_GPU: 3}})
    c.advance(0.0)
    run = running(c)
    assert list(run.values()).count("v100") == 2  # typed job 1 within v100=1, untyped job 3 ignores the typed limit
    assert run.get("2") is None and run.get("4") == "k80"  # 2 is over v100=1; 4 is within the total of 3
    c.set_accounts_gpu_limits({"a": {"v100": CLEAR, ANY_GPU: 3}})
    assert "2" not in running(c)  # the total (3) is reached
    c.set_accounts_gpu_limits({"a": {ANY_GPU: CLEAR}})
    assert running(c).get("2") == "v100"


def test_priority_by_site_factor_then_submit_and_backfill():
    jobs = [tj(1, gpus=4, gpu_type="v100", work=1e6), tj(2, gpus=4, gpu_type="v100", submit=1.0),
            tj(3, gpus=1, gpu_type="v100", submit=2.0), tj(4, gpus=1, gpu_type="k80", submit=3.0)]
    c = sim(jobs)
    c.advance(5.0)
    assert running(c) == {"1": "v100", "4": "k80"}  # 2 and 3 wait for V100s; 4 backfills on a K80
    c.set_site_factors({3: 100})
    c.requeue_job(1)  # frees the 4 V100s; 3 (SiteFactor 100) goes before 2 (older)
    assert running(c)["3"] == "v100" and "2" not in running(c)


def test_multi_gpu_jobs_on_one_node_when_they_can_else_whole_nodes():
    c = sim([tj(1, gpus=3, gpu_type="v100", work=1e6), tj(2, gpus=2, gpu_type="v100", work=1e6),
             tj(3, gpus=6, gpu_type="k80", work=1e6)], nodes="k80=8,v100=5")
    c.advance(0.0)
    assert c.jobs[1].nodes == {"v100-000": 3}
    assert c.jobs[2].state == "PENDING"  # 1 V100 free on each node: a 2-GPU job needs one node with 2
    c.advance(1.0)
    assert c.jobs[3].nodes == {"k80-000": 4, "k80-001": 2}


def test_requeue_keeps_work_and_waits_the_restart_delay():
    c = sim([tj(1, gpu_type="v100", work=1000.0)], restart_s=30.0)
    c.advance(50.0)  # 500 steps done
    c.signal_job(1, "USR1")
    c.requeue_job(1)
    j = c.jobs[1]
    assert j.state == "PENDING" and j.done == pytest.approx(500.0) and j.restarts == 1 and c.preemptions == 1
    c.advance(79.0)
    assert j.state == "PENDING"
    c.advance(200.0)
    assert j.state == "DONE" and j.end == pytest.approx(80.0 + 50.0)  # restarts at 80 s, 500 steps left at 10/s
    with pytest.raises(CommandFailed):
        c.requeue_job(1)


def test_untyped_jobs_are_typed_by_the_published_map():
    c = sim([tj(1, account="a", submit=10.0), tj(2, account="b", submit=10.0)])
    c.set_type_map({"a": ("k80", "share"), "*": ("v100", "default")})
    c.advance(10.0)
    assert (c.jobs[1].requested, c.jobs[1].flex, c.jobs[2].requested) == ("k80", True, "v100")
    snap = c.snapshot()
    assert {j.job_id: j.gpu_type for j in snap.jobs} == {1: "k80", 2: "v100"}
    assert all("fair:flex" in j.comment and "class=fast" in j.comment for j in snap.jobs)


def test_snapshot_is_what_the_daemon_reads():
    c = sim([tj(1, gpu_type="v100", gpus=2), tj(2, account="b", gpus=8, gpu_type="v100", submit=5.0)])
    c.set_accounts_gpu_limits({"b": {"v100": 3}})
    c.advance(5.0)
    s = c.snapshot()
    assert s.capacity() == {"k80": 4, "v100": 4} and s.taken_at == 5.0
    assert {a.name: dict(a.limits) for a in s.accounts} == {"a": {}, "b": {"v100": 3}}
    by = {j.job_id: j for j in s.jobs}
    assert by[1].running and by[1].gpus_allocated == {"v100": 2} and by[2].pending
    c.set_job_gpu_type(2, "k80", 8)
    assert c.jobs[2].requested == "k80"
    with pytest.raises(CommandFailed):
        c.set_job_gpu_type(1, "k80", 2)


def test_the_simulated_job_submit_types_by_completion_as_the_script_does():
    """The simulator's copy of ``SF.by_completion`` (the Lua case '#@soon/#@speed' has the same numbers): with a
    time limit, the type expected to finish the job sooner; without one, only a faster type that can start it now
    (Philly windows: 1-GPU jobs without time limits typed k80 by room while p100 idled ran 3-7x longer)."""
    from slurm_fair.sim.submit import SubmitMap

    m = SubmitMap()
    m.soon = {"k80": [(4, 1000.0), (16, 9000.0)], "p100": [(4, 1200.0), (16, 9000.0)],
              "v100": [(1, 1000.0), (4, 50000.0)]}
    speeds = {"v100": 1000, "p100": 600, "k80": 178}
    assert m.by_completion(speeds, "k80", 4, 36000.0, 1000.0) == "p100"  # 10 h on k80 vs 200 s + 6 h on p100
    assert m.by_completion(speeds, "k80", 4, 60.0, 1000.0) is None  # a 1-minute job: starting now wins
    assert m.by_completion(speeds, "k80", 4, None, 1000.0) is None  # no limit, p100 starts in 200 s: keep k80
    m.soon["p100"] = [(4, 900.0), (16, 9000.0)]  # p100 can start 4 now
    assert m.by_completion(speeds, "k80", 4, None, 1000.0) is None  # ... by #@soon, but nothing says it is idle
    assert m.by_completion(speeds, "k80", 4, None, 1000.0, lambda t: t == "p100") == "p100"
    assert m.by_completion(speeds, "k80", 4, None, 1000.0, lambda t: False) is None  # handed out already
    assert m.by_completion(speeds, "p100", 4, None, 1000.0, lambda t: True) is None  # p100 is not slow (600 >= 500)
