"""The simulated Slurm's two passes (slurm_fair/sim/cluster.py ``schedule``, slurm_fair/daemon/plan/backfill.py): the strict
main loop, reservations by expected ends (start + time limit), what may backfill, limit-blocked and untyped jobs,
a requeued job's expected end, the per-run records — each a hand-worked case."""

from __future__ import annotations

import math

import pytest

from slurm_fair.cluster.base import ANY_GPU
from slurm_fair.errors import InputError
from slurm_fair.daemon.plan.backfill import Plan
from slurm_fair.sim.cluster import SimCluster, cluster_spec
from slurm_fair.sim.jobs import Run
from slurm_fair.sim.traces import TraceJob

# steps/s of a whole job: "fast" does 10 steps/s on a V100 and 1 on a K80, so work = 10 x seconds on a V100
THR = {"fast": {"k80": 1.0, "v100": 10.0}}
H = 3600.0


def tj(i, submit=0.0, account="a", gpus=1, secs=100.0, gpu_type="v100", limit=H):
    """A job that runs ``secs`` seconds on a V100 (10x that on a K80), with a time limit of ``limit`` s."""
    return TraceJob(id=str(i), submit=submit, account=account, cls="fast", gpus=gpus, work=10.0 * secs,
                    gpu_type=gpu_type, time_limit=limit)


def sim(jobs, nodes="v100=8", **kw):
    return SimCluster(cluster_spec(nodes), {"a": 1, "b": 1}, THR, jobs, **kw)


def starts(c):
    """trace id -> first start, for the jobs that started."""
    return {j.trace_id: j.first_start for j in c.jobs.values() if j.first_start is not None}


def job(c, tid):
    return next(j for j in c.jobs.values() if j.trace_id == tid)


def test_a_large_top_job_keeps_its_reservation_and_a_short_job_backfills():
    # two V100 nodes of 4. R1 (4 GPUs) on v100-000 and R2 (2 GPUs) on v100-001, both with a 1-h limit: the
    # 8-GPU job B (whole nodes) is expected to start at 3600 s, when both are expected to end.
    # S (1 GPU, 2-h limit) would fit on v100-001 now but is expected to run past 3600 s: it waits.
    # S2 (1 GPU, 30-min limit) ends before 3600 s: it backfills at once.
    jobs = [tj("R1", gpus=4, secs=1000.0), tj("R2", gpus=2, secs=1500.0), tj("B", 1.0, gpus=8, secs=600.0),
            tj("S", 2.0, secs=100.0, limit=2 * H), tj("S2", 3.0, secs=400.0, limit=1800.0)]
    c = sim(jobs)
    c.advance(3.0)
    assert starts(c) == {"R1": 0.0, "R2": 0.0, "S2": 3.0}
    assert job(c, "S2").nodes == {"v100-001": 1}
    assert (job(c, "B").reason, job(c, "S").reason) == ("Resources", "Priority")
    # R1 ends at 1000 s: B still needs v100-001 whole (R2 runs until 1500 s); S may not take the 4 GPUs of
    # v100-000, which B needs from 1500 s on (R2's real end) -- nor before: B's expected start is R2's
    # expected end, 3600 s, and S would run until 1000 + 7200 s
    c.advance(1400.0)
    assert "B" not in starts(c) and "S" not in starts(c)
    c.advance(1500.0)
    assert starts(c)["B"] == 1500.0  # R2 and S2 are done: both nodes whole
    c.advance(3000.0)
    assert starts(c)["S"] == 2100.0  # after B (600 s)


def test_without_reservations_the_same_trace_would_starve_the_large_job():
    # the same jobs without time limits (the testbed's partition: no DefaultTime, MaxTime=INFINITE): B's
    # expected start is "never", so it gets no reservation, and S starts at once on the GPUs B waits for
    jobs = [tj("R1", gpus=4, secs=1000.0, limit=None), tj("R2", gpus=2, secs=1500.0, limit=None),
            tj("B", 1.0, gpus=8, secs=600.0, limit=None), tj("S", 2.0, secs=2000.0, limit=None)]
    c = sim(jobs)
    c.advance(2.0)
    assert starts(c) == {"R1": 0.0, "R2": 0.0, "S": 2.0}
    c.advance(3000.0)
    assert starts(c)["B"] == 2002.0  # S held v100-001 until it ended
    # with a DefaultTime of 1 h the partition plans again: S (expected to run past B's start) waits
    c = sim(jobs, default_time=H)
    c.advance(3000.0)
    assert starts(c)["B"] == 1500.0 and starts(c)["S"] == 2100.0


def test_main_loop_stops_at_the_first_job_left_pending_for_resources():
    # B (4 GPUs) waits for R; the main loop starts nothing behind it, and the backfill pass starts only what
    # ends before B's expected start (R's expected end, 1 h): T (1 GPU, 2-h limit) waits although a GPU is free
    c = sim([tj("R", gpus=3, secs=1000.0), tj("B", 1.0, gpus=4), tj("T", 2.0, limit=2 * H)], nodes="v100=4")
    c.advance(2.0)
    assert starts(c) == {"R": 0.0}
    assert job(c, "T").reason == "Priority"
    c.advance(1000.0)
    assert starts(c) == {"R": 0.0, "B": 1000.0}


def test_a_job_held_back_by_its_limit_blocks_nobody_and_gets_no_reservation():
    # account a may hold 2 GPUs: its second job A2 (4 GPUs, top priority) is held on AssocGrpGRES, so it neither
    # stops the main loop nor reserves the free node: b's job, behind it and expected to run 2 h, starts at once
    c = sim([tj("A1", gpus=2, secs=5000.0), tj("A2", 1.0, gpus=4), tj("B1", 2.0, account="b", gpus=4, limit=2 * H)])
    c.set_accounts_gpu_limits({"a": {ANY_GPU: 2}})
    c.advance(2.0)
    assert starts(c) == {"A1": 0.0, "B1": 2.0}
    assert job(c, "A2").reason == "AssocGrpGRES"
    assert job(c, "B1").nodes == {"v100-001": 4}


def test_untyped_jobs_reserve_on_the_type_where_they_start_earliest():
    # one K80 node and one V100 node of 4. X holds 2 V100s until 1 h (expected), Y all 4 K80s until 2 h.
    # U (untyped, 4 GPUs) starts earliest on the V100s (1 h < 2 h): it reserves them, so V (a typed 1-V100 job
    # expected to run 2 h) may not start on the 2 free V100s, and W (untyped, 1 GPU, 30 min) may.
    jobs = [tj("X", gpus=2, secs=3500.0), tj("Y", gpus=4, secs=300.0, gpu_type="k80", limit=2 * H),
            tj("U", 1.0, gpus=4, gpu_type=None), tj("V", 2.0, limit=2 * H), tj("W", 3.0, gpu_type=None, limit=1800.0)]
    c = sim(jobs, nodes="k80=4,v100=4")
    c.advance(3.0)
    assert starts(c) == {"X": 0.0, "Y": 0.0, "W": 3.0}
    assert job(c, "W").run_type == "v100"
    # the other way round: the K80s are expected back first (30 min), so U reserves them and V starts
    jobs[1] = tj("Y", gpus=4, secs=300.0, gpu_type="k80", limit=1800.0)
    c = sim(jobs, nodes="k80=4,v100=4")
    c.advance(3.0)
    assert starts(c) == {"X": 0.0, "Y": 0.0, "V": 2.0, "W": 3.0}
    # Y ends (3000 s on a K80): U takes the K80s, its earliest type, now free
    c.advance(3000.0)
    assert starts(c)["U"] == 3000.0 and job(c, "U").run_type == "k80"


def test_a_reservation_holds_its_whole_node_for_every_gpu_type():
    # one node with 2 V100s and 2 K80s (the testbed's mixed-1). R holds both V100s until 1 h (expected); B (2 V100s)
    # reserves the node from then on, K80s included: K (1 K80, 2 h) may not start on the free K80s, K2 (30 min) may
    nodes = {"m": {"v100": 2, "k80": 2}}
    jobs = [tj("R", gpus=2, secs=2000.0), tj("B", 1.0, gpus=2), tj("K", 2.0, gpu_type="k80", limit=2 * H),
            tj("K2", 3.0, gpu_type="k80", limit=1800.0)]
    c = SimCluster(nodes, {"a": 1}, THR, jobs)
    c.advance(3.0)
    assert starts(c) == {"R": 0.0, "K2": 3.0}
    c.advance(2000.0)
    assert starts(c)["B"] == 2000.0


def test_untyped_job_starting_now_takes_its_fastest_type_that_fits():
    c = sim([tj("U", gpu_type=None), tj("K", gpus=4, gpu_type="k80")], nodes="k80=4,v100=4")
    c.advance(0.0)
    assert job(c, "U").run_type == "v100" and job(c, "K").run_type == "k80"


def test_a_requeued_jobs_expected_end_counts_from_its_latest_start():
    # R (2 of 4 V100s, 1-h limit) starts at 0, is requeued at 1000 s and restarts at 1060 s: expected to end at
    # 1060 + 3600 = 4660 s, not 3600 s. B (4 GPUs) reserves the node from 4660 s, widened to the 60-s grid: 4620 s.
    # S (59-min limit, submitted at 1080 s: expected to end at 4620 s) backfills; S2 (60 min, at 1081 s) does not.
    jobs = [tj("R", gpus=2, secs=9000.0), tj("B", 1070.0, gpus=4), tj("S", 1080.0, limit=3500.0),
            tj("S2", 1081.0, limit=H)]
    c = sim(jobs, nodes="v100=4", restart_s=60.0)
    c.advance(1000.0)
    c.requeue_job(job(c, "R").job_id)
    c.advance(1081.0)
    r = job(c, "R")
    assert r.started == 1060.0 and r.expected_end(c.now) == 4660.0
    assert job(c, "S").time_limit == 3540.0  # Slurm keeps whole minutes: 3500 s asks for 59 min
    assert starts(c) == {"R": 0.0, "S": 1080.0}
    assert r.runs == [Run(0.0, 1000.0, "v100", {"v100-000": 2}, "requeue"), Run(1060.0, None, "v100", {"v100-000": 2})]
    c.advance(20000.0)  # R had 9000 - 1000 s of work left: it ends at 1060 + 8000 s
    assert r.runs[-1] == Run(1060.0, 9060.0, "v100", {"v100-000": 2}, "done")


def test_a_job_past_its_expected_end_is_expected_to_end_soon():
    # a job whose limit (per the cluster's DefaultTime) is shorter than its run: the simulator does not kill it;
    # the plan expects it to end one bf_resolution (60 s) from now
    c = sim([tj("R", gpus=4, secs=7200.0, limit=None)], nodes="v100=4", default_time=H)
    c.advance(5000.0)
    assert job(c, "R").expected_end(c.now) == 5060.0


def test_snapshot_reports_time_limits_in_minutes():
    c = sim([tj("A", limit=5400.0), tj("B", limit=None), tj("C", limit=None, gpus=7)], default_time=2 * H)
    c.advance(0.0)
    by = {j.job_id: j.time_limit for j in c.snapshot().jobs}
    assert by == {1: 90, 2: 120, 3: 120}
    assert {j.job_id: j.time_limit for j in sim([tj("A", limit=None)]).snapshot().jobs} == {}
    c = sim([tj("A", limit=None)])
    c.advance(0.0)
    assert [j.time_limit for j in c.snapshot().jobs] == [None]  # unlimited


def test_a_job_without_a_limit_that_backfill_starts_gets_a_year_and_the_daemon_reads_it_as_none():
    """As on the 22.05 testbed (issue 39): the main loop starts a job without a limit UNLIMITED, the backfill
    pass gives it TimeLimit=365-00:00:00."""
    from slurm_fair.sim.scheduler import BACKFILL_NO_LIMIT

    # R holds 3 of 4 V100s; B (4 V100s) waits for it and stops the main loop; U (no limit, a K80) starts in the
    # backfill pass, on a node no reservation needs
    c = sim([tj("R", gpus=3, secs=1000.0), tj("B", 1.0, gpus=4), tj("U", 2.0, limit=None, gpu_type="k80")],
            nodes="v100=4,k80=1")
    c.advance(2.0)
    u = job(c, "U")
    assert (u.state, u.run_type, job(c, "B").state) == ("RUNNING", "k80", "PENDING")
    assert u.time_limit == BACKFILL_NO_LIMIT == 365 * 86400.0
    snap_u = next(j for j in c.snapshot().jobs if j.job_id == u.job_id)
    assert snap_u.time_limit is None  # the daemon reads 365 days as no limit, as it reads UNLIMITED
    # the main loop leaves it unlimited
    c = sim([tj("M", limit=None)])
    c.advance(0.0)
    assert job(c, "M").state == "RUNNING" and job(c, "M").time_limit is None


def test_backfill_considers_at_most_bf_max_job_test_jobs():
    # R holds 3 of 4 GPUs; B waits for all 4; S1 and S2 could each backfill (short), but only the first job
    # behind the main loop's stop is tested: with bf_max_job_test=2 (B, S1) S2 waits
    jobs = [tj("R", gpus=3, secs=5000.0), tj("B", 1.0, gpus=4), tj("S1", 2.0, limit=600.0),
            tj("S2", 3.0, limit=600.0, secs=50.0)]
    c = sim(jobs, nodes="v100=4", bf_max_job_test=2)
    c.advance(3.0)
    assert starts(c) == {"R": 0.0, "S1": 2.0}
    c = sim(jobs, nodes="v100=5", bf_max_job_test=3)
    c.advance(3.0)
    assert starts(c) == {"R": 0.0, "S1": 2.0, "S2": 3.0}


@pytest.mark.parametrize("kw, field", [({"default_time": 0}, "default_time"), ({"bf_window": -1}, "bf_window"),
                                       ({"bf_max_job_test": 0}, "bf_max_job_test"),
                                       ({"default_time": "soon"}, "default_time"),
                                       ({"bf_window": "a day"}, "bf_window")])
def test_bad_scheduler_settings(kw, field):
    with pytest.raises(InputError) as e:
        sim([tj("A")], **kw)
    assert e.value.field == field


def test_bf_window_bounds_how_far_ahead_reservations_go():
    # B's expected start (R's expected end, 2 h) is beyond a 1-h window: no reservation, so S (3-h limit) starts
    jobs = [tj("R", gpus=3, secs=5000.0, limit=2 * H), tj("B", 1.0, gpus=4), tj("S", 2.0, limit=3 * H)]
    c = sim(jobs, nodes="v100=4", bf_window=H)
    c.advance(2.0)
    assert starts(c) == {"R": 0.0, "S": 2.0}
    c = sim(jobs, nodes="v100=4")
    c.advance(2.0)
    assert starts(c) == {"R": 0.0}


# ------------------------------------------------------------------------------------------ the plan itself


def test_plan_earliest_start_one_node_and_whole_nodes():
    size = {"n1": {"v100": 4}, "n2": {"v100": 4}, "m": {"v100": 2, "k80": 2}}
    free = {"n1": {"v100": 1}, "n2": {"v100": 0}, "m": {"v100": 0, "k80": 2}}
    # n1: 3 GPUs held until 100; n2: 2 until 50, 2 until 200; m: its 2 V100s until 400
    p = Plan(0.0, free, size, [(100.0, "n1", "v100", 3), (50.0, "n2", "v100", 2), (200.0, "n2", "v100", 2),
                               (400.0, "m", "v100", 2)], resolution=10.0)
    assert p.free_now("v100") == 1 and p.free_now("k80") == 2 and p.free_now("a100") == 0
    assert p.fits_now("v100", 1, 10.0) == {"n1": 1}
    assert p.earliest("v100", 2, 10.0) == (50.0, {"n2": 2})  # n2 has 2 from 50 on, n1 only from 100
    assert p.earliest("v100", 3, 10.0) == (100.0, {"n1": 3})
    assert p.earliest("v100", 8, 10.0) == (200.0, {"n1": 4, "n2": 4})  # whole nodes, largest first
    assert p.earliest("v100", 10, 10.0) == (400.0, {"n1": 4, "n2": 4, "m": 2})
    assert p.earliest("v100", 3, 10.0, before=100.0) is None
    assert p.earliest("v100", 11, 10.0) is None  # more than the type has
    assert p.earliest("a100", 1, 10.0) is None
    # a reservation holds a whole node: 1 V100 reserved on m from 400 for 100 s also takes m's free K80s then
    p.reserve(["m"], 405.0, 100.0)
    assert p.reserved["m"] == [(400.0, 510.0)]  # widened to the 10-s grid
    assert p.fits_now("k80", 2, 400.0) == {"m": 2} and p.fits_now("k80", 2, 401.0) is None
    assert p.earliest("k80", 1, 401.0) == (510.0, {"m": 1})
    # n1 reserved from 100 to 300: a 3-GPU job finds n2 from 200 on, a 1-GPU one for 100 s n1 now
    p.reserve(["n1"], 100.0, 200.0)
    assert p.earliest("v100", 3, 10.0) == (200.0, {"n2": 3})
    assert p.earliest("v100", 3, 150.0) == (200.0, {"n2": 3})
    assert p.fits_now("v100", 1, 100.0) == {"n1": 1} and p.fits_now("v100", 1, 101.0) is None
    assert p.earliest("v100", 8, 10.0) == (300.0, {"n1": 4, "n2": 4})
    # unlimited: not on n1 (reserved from 100), but on n2 from 50 on, where nothing is reserved
    assert p.fits_now("v100", 1, math.inf) is None and p.earliest("v100", 1, math.inf) == (50.0, {"n2": 1})
    # a job started now holds its GPUs until its expected end
    p.start("v100", {"n1": 1}, 100.0)
    assert p.free_now("v100") == 0 and p.free_at("n1", "v100", 100.0) == 4
    assert p.idle_now(["v100"])  # m's free K80s: a V100 reservation on m could stop a K80 job from starting
    assert not Plan(0.0, {"n": {"v100": 0}}, {"n": {"v100": 4}}).idle_now(["v100"])


def _naive_earliest(now, free, size, holds, taken, t, n, d):
    """Earliest start by brute force: every 5 s (every time that matters is a multiple of 10), free GPUs and
    whole-node reservations counted from scratch."""
    from slurm_fair.daemon.plan import place_gpus

    for at in range(int(now), 2000, 5):
        masked = {}
        for x in size:
            if t not in size[x]:
                continue
            busy = any(s < at + d and at < e for y, s, e in taken if y == x)
            back = sum(g for e, y, tt, g in holds if y == x and tt == t and e <= at)
            masked[x] = {t: 0 if busy else free[x][t] + back}
        where = place_gpus(masked, {x: {t: size[x][t]} for x in masked}, t, n)
        if where is not None:
            return float(at), where
    return None


def test_plan_agrees_with_a_brute_force_search():
    import random

    rng = random.Random(7)
    for _case in range(150):
        size = {f"n{i}": {"v100": rng.choice((2, 4))} for i in range(rng.randint(1, 4))}
        free = {x: {"v100": 0} for x in size}
        holds = []
        for x, row in size.items():
            left = row["v100"]
            while left:
                g = rng.randint(1, left)
                if rng.random() < 0.3:
                    free[x]["v100"] += g
                else:
                    holds.append((float(rng.randint(1, 20) * 10), x, "v100", g))
                left -= g
        p = Plan(0.0, free, size, holds, resolution=10.0)
        taken = []
        for _step in range(rng.randint(1, 6)):
            n = rng.randint(1, sum(r["v100"] for r in size.values()))
            d = rng.choice((5.0, 30.0, 100.0, math.inf))
            got = p.earliest("v100", n, d)
            assert got == _naive_earliest(0.0, free, size, holds, taken, "v100", n, d), (size, free, holds, taken, n, d)
            assert p.fits_now("v100", n, d) == (got[1] if got is not None and got[0] == 0.0 else None)
            if got is not None:
                p.reserve(got[1], got[0], d)
                e = math.ceil((got[0] + d) / 10.0) * 10.0 if d < math.inf else math.inf
                taken += [(x, math.floor(got[0] / 10.0) * 10.0, e) for x in got[1]]
