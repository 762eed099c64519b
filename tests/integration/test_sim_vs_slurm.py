"""The simulated Slurm against the real one (issue 28 item 7): the same small trace with time limits starts in the
same order on the testbed (sched/backfill, bf_interval=1) and in ``SimCluster`` built from the testbed's nodes.

Seven ``sleep`` jobs of acct_a, explicit priorities (``--nice``: the higher the nice, the lower the priority; all
of one account, so fair-share and QOS are equal), all made eligible at one instant (one ``--begin`` time):

=====  ======  =====  =====  =================================================================================
job    GPUs    limit  sleep  what Slurm's backfill does with it
=====  ======  =====  =====  =================================================================================
A      3 a100  4 min  20 s   starts at once (the a100 node has 4 GPUs)
B      4 a100  2 min  10 s   needs the whole node: reserved from A's expected end (4 min), starts when A ends
C      1 a100  5 min  10 s   fits now, but would run past B's expected start: it waits (without reservations
                             it would start at once and B would wait for it)
D      1 a100  1 min  5 s    ends before B's expected start: backfills at once
K      1 k80   5 min  5 s    another node: backfills at once
E      1 a100  1 min  5 s    no GPU free until D ends; then backfills (ends before B's expected start)
F      1 v100  5 min  5 s    another node: backfills at once
=====  ======  =====  =====  =================================================================================

Every margin is wider than Slurm's ``bf_resolution`` (60 s): the backfill rounds the times of its reservations to
it, so a job ending 55 s before a reservation may be seen to overlap it (with A's limit at 2 min, E once waited
for B in CI, depending on where the begin time fell in the minute).

The test submits them, waits until all are done, reads each job's StartTime, and runs the same trace through
``SimCluster`` (nodes read from the testbed's snapshot). Start order: by start time, then priority (Slurm's
times have one-second resolution, and the main loop and the backfill pass of one instant may be a second apart).
It also checks that the old model (no time limits: no reservations) would have given another order.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from slurm_fair.cluster import connect
from slurm_fair.sim.cluster import SimCluster
from slurm_fair.sim.traces import TraceJob

# name, GPUs, type, limit (minutes), sleep (s); listed by priority, highest first
JOBS = (("A", 3, "a100", 4, 20), ("B", 4, "a100", 2, 10), ("C", 1, "a100", 5, 10), ("D", 1, "a100", 1, 5),
        ("K", 1, "k80", 5, 5), ("E", 1, "a100", 1, 5), ("F", 1, "v100", 5, 5))
NICE_STEP = 100
LEAD_S = 12  # seconds from the first submission to the common begin time


def _epoch(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S").timestamp()


def _order(starts: dict[str, float]) -> list[str]:
    rank = {name: i for i, (name, *_rest) in enumerate(JOBS)}
    return sorted(starts, key=lambda n: (round(starts[n]), rank[n]))


def _simulated(nodes: dict[str, dict[str, int]], limits: bool) -> dict[str, float]:
    types = sorted({t for g in nodes.values() for t in g})
    # a job's work is its sleep in seconds at 1 step/s on every type; submitted 1 ms apart in priority order (the
    # simulated scheduler breaks ties by submit time), so each job is scheduled with the ones above it present
    trace = [TraceJob(name, i * 1e-3, "acct_a", "sleep", gpus, float(secs), gpu_type,
                      minutes * 60.0 if limits else None)
             for i, (name, gpus, gpu_type, minutes, secs) in enumerate(JOBS)]
    sim = SimCluster(nodes, {"acct_a": 1}, {"sleep": dict.fromkeys(types, 1.0)}, trace)
    sim.advance(600.0)
    assert all(j.state == "DONE" for j in sim.jobs.values())
    return {j.trace_id: j.first_start for j in sim.jobs.values()}


def test_simulated_slurm_starts_jobs_in_the_testbeds_order(testbed):
    testbed.cancel_all()
    snap = connect(backend="cli", timeout=30, env=testbed.env).snapshot()
    nodes = {n.name: dict(n.gpus) for n in snap.nodes if n.gpus}
    for _name, gpus, gpu_type, *_rest in JOBS:
        assert any(g.get(gpu_type, 0) >= gpus for g in nodes.values()), (gpu_type, nodes)

    tag = uuid.uuid4().hex[:8]
    begin = (datetime.now() + timedelta(seconds=LEAD_S)).replace(microsecond=0)
    ids = {}
    for i, (name, gpus, gpu_type, minutes, secs) in enumerate(JOBS):
        ids[name] = testbed.sbatch("acct_a", gpus=gpus, gpu_type=gpu_type, name=f"simvs-{tag}-{name}",
                                   time=str(minutes), command=f"sleep {secs}",
                                   extra=[f"--nice={i * NICE_STEP}", f"--begin={begin:%Y-%m-%dT%H:%M:%S}"])
    assert datetime.now() < begin - timedelta(seconds=2), "submitting took too long for one common begin time"
    assert all(testbed.job_state(j) == ("PENDING", "BeginTime") for j in ids.values())
    prio = {n: int(testbed.job(j)["Priority"]) for n, j in ids.items()}
    assert sorted(prio, key=lambda n: -prio[n]) == [n for n, *_r in JOBS], prio

    deadline = (begin - datetime.now()).total_seconds() + 120
    testbed.wait_for(lambda: all(testbed.job_state(j)[0] == "COMPLETED" for j in ids.values()), deadline,
                     interval=1.0, what="all the trace's jobs completed")
    t0 = begin.timestamp()
    real = {n: _epoch(testbed.job(j)["StartTime"]) - t0 for n, j in ids.items()}

    sim = _simulated(nodes, limits=True)
    print(f"starts, s after the begin time: testbed {real}; simulated {sim}")  # shown with -s or on failure
    assert _order(real) == _order(sim), f"testbed starts (s after the begin time) {real}, simulated {sim}"
    assert real["B"] < real["C"] and sim["B"] < sim["C"]  # the large job is not starved
    assert real["C"] >= real["B"] + 10 - 1  # C waited for B to end (10 s)
    # without time limits the simulated Slurm cannot reserve: C starts at once and B waits for it
    greedy = _simulated(nodes, limits=False)
    assert greedy["C"] < greedy["B"] and _order(greedy) != _order(real)
