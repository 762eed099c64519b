"""Typing by expected completion (issue 28): when a job of each size could start on each GPU type
(plan/backfill.py ``expected_starts``, published as ``#@soon``), the class lines' speeds (``#@speed``), and the
simulated job_submit.lua's rule (sim/submit.py, the same as tests/lua/test_job_submit.lua's case)."""

from __future__ import annotations

from slurm_fair.cluster.base import Account, Job, Node, Snapshot
from slurm_fair.daemon.plan import Target
from slurm_fair.daemon.plan.backfill import expected_starts, sizes_for
from slurm_fair.daemon.type_map_file import render_map
from slurm_fair.sim.submit import SubmitMap

NOW = 1_000_000


def running(jid, node, gpus, gtype="v100", started=NOW - 600, limit=20, where=None):
    return Job(job_id=jid, name="j", account="a", user="u", partition="gpu", state="RUNNING", reason="None",
               priority=1, submit_time=started, start_time=started, gpus_per_node=gpus, nodes=1, gpu_type=gtype,
               gpus_allocated={gtype: gpus}, time_limit=limit, node_gpus=where if where is not None else {node: gpus})


def snapshot(*jobs, nodes=None):
    nodes = nodes or (Node("v1", ("MIXED",), ("gpu",), {"v100": 4}, {"v100": 2}),
                      Node("v2", ("ALLOCATED",), ("gpu",), {"v100": 4}, {"v100": 4}),
                      Node("k1", ("IDLE",), ("gpu",), {"k80": 4}, {}))
    return Snapshot("22.05.8", float(NOW), nodes, tuple(jobs), (Account("a", 1, {}),), ("gpu",))


def test_sizes_are_powers_of_two_and_the_capacity():
    assert sizes_for(8) == (1, 2, 4, 8) and sizes_for(12) == (1, 2, 4, 8, 12) and sizes_for(1) == (1,)
    assert sizes_for(0) == ()


def test_starts_come_from_idle_gpus_and_running_jobs_time_limits_as_backfill_plans():
    # v1: 2 of 4 busy until NOW + 600 (started 10 min ago, 20-min limit); v2: all 4 busy by a job without a limit
    s = snapshot(running(1, "v1", 2), running(2, "v2", 4, limit=None))
    got = expected_starts(s, ["v100", "k80"])
    assert got["v100"] == {1: NOW, 2: NOW, 4: NOW + 600}  # 8 (both nodes): v2 never frees, left out
    assert got["k80"] == {1: NOW, 2: NOW, 4: NOW}


def test_a_job_past_its_limit_is_expected_to_end_shortly_and_multi_node_jobs_are_not_counted():
    s = snapshot(running(1, "v1", 2, started=NOW - 7200, limit=60),
                 running(2, "", 4, limit=30, where={}))  # GPUs per node not known: never comes back here
    got = expected_starts(s, ["v100"])
    assert got["v100"] == {1: NOW, 2: NOW, 4: NOW + 60}


def test_the_map_carries_soon_and_speed_lines():
    soon = {"v100": {1: NOW, 4: NOW + 600}, "k80": {1: NOW, 4: NOW}}
    text = render_map({"a": Target((("v100", 2), ("k80", 4)), "room", soon=soon),
                       "a/cnn": Target((("v100", 0), ("k80", 0)), "class order", slow=frozenset({"k80"}),
                                       speeds={"v100": 1000, "k80": 178}),
                       "*": Target((("k80", 4),), "free", soon=soon)})
    assert f"#@soon k80 1:{NOW},4:{NOW}" in text.splitlines()
    assert f"#@soon v100 1:{NOW},4:{NOW + 600}" in text.splitlines()
    assert "#@speed a/cnn v100:1000,k80:178" in text.splitlines()


def test_the_simulated_script_types_by_expected_completion_as_the_lua_script_does():
    m = SubmitMap()
    soon = {"k80": {1: 1000, 2: 1000, 4: 1000, 16: 9000}, "p100": {1: 1000, 2: 1000, 4: 1200, 16: 9000},
            "v100": {1: 1000, 4: 50000, 16: 90000}}
    m.set({"a": Target((("v100", 3), ("p100", 3), ("k80", 4)), "room", {"v100": 3, "p100": 3, "k80": 4}, soon=soon),
           "a/rec": Target((("v100", 0), ("p100", 0), ("k80", 0)), "class order", slow=frozenset({"k80"}),
                           speeds={"v100": 1000, "p100": 600, "k80": 178}),
           "a/lm": Target((("v100", 0), ("p100", 0), ("k80", 0)), "class order")})
    speed = {"v100": 5.6, "p100": 3.4, "k80": 1.0}

    def typ(cls, gpus, limit):
        m.spent = {}
        return m.choose("a", gpus, cls, speed, limit, now=1000.0)

    assert typ("rec", 4, 36000) == "p100"  # 10 h on k80 against a p100 node in 200 s and 6 h there
    assert typ("rec", 4, None) == "k80"  # no time limit: typed by room
    assert typ("rec", 4, 60) == "k80"  # a 1-minute job: starting now beats waiting 200 s
    assert typ("lm", 4, 36000) == "k80"  # no speeds for the class: by room
    # no type has room for 16: the type #@soon starts 16 on first (p100 and k80 at 9000, v100 at 90000; p100 first
    # in the class's order), as the Lua case
    assert typ("rec", 16, 36000) == "p100"
    assert typ("rec", 1, 36000) == "v100"  # v100 has room: kept


def test_a_job_no_type_has_room_for_is_typed_to_the_type_that_starts_it_first_as_the_lua_script_does():
    """The Lua case '#@soon: a job no type has room for ...' (issue 39), the same numbers: an 8-GPU job is typed
    to the type of its line whose #@soon row starts 8 GPUs first, not pinned to the line's first type; with no
    row for its size on any type of its line, the first type as before."""
    m = SubmitMap()
    soon = {"k80": {1: 1000, 8: 5000, 16: 9000}, "p100": {1: 1000, 8: 2000, 16: 9000}, "v100": {1: 1000, 2: 1000}}
    m.set({"acct_a": Target((("v100", 2), ("p100", 2), ("k80", 2)), "room", soon=soon),
           "acct_b": Target((("v100", 2), ("k80", 2)), "room", soon=soon),
           "acct_c": Target((("v100", 2),), "room", soon=soon)})
    speed = {"v100": 5.6, "p100": 3.4, "k80": 1.0}

    def typ(acct, gpus):
        m.spent = {}
        return m.choose(acct, gpus, "cls", speed, None, now=1000.0)

    assert typ("acct_a", 8) == "p100"  # p100 starts 8 in 1000 s, k80 in 4000 s, v100 has no row for 8
    assert typ("acct_b", 8) == "k80"  # p100 is not on acct_b's line: k80, not v100
    assert typ("acct_c", 8) == "v100"  # no row for 8 on its line: the first type
    assert typ("acct_a", 2) == "v100"  # room on v100: typed by room
    # a class slow on k80 (its class line's k80:0) waits for p100 rather than start first on k80, as the Lua case;
    # with no start known on a fast type, k80 still beats the line's first type
    m.soon["p100"] = [(1, 1000.0), (8, 6000.0), (16, 9000.0)]
    assert m.first_start([("v100", 2), ("p100", 2), ("k80", 2)], 8, 1000.0) == "k80"
    assert m.first_start([("v100", 2), ("p100", 2), ("k80", 2)], 8, 1000.0, slow={"k80"}) == "p100"
    m.set({"acct_a": Target((("v100", 2), ("p100", 2), ("k80", 2)), "room", soon=soon),
           "acct_a/lm": Target((("v100", 0), ("p100", 0), ("k80", 0)), "class order", slow=frozenset({"k80"}))})
    assert m.choose("acct_a", 8, "lm", speed, None, now=1000.0) == "p100"  # p100 at 2000 s anyway
    m.soon["p100"] = [(1, 1000.0), (8, 6000.0), (16, 9000.0)]
    m.spent = {}
    assert m.choose("acct_a", 8, "lm", speed, None, now=1000.0) == "p100"  # k80 (4000 s) is slow for lm
    m.soon["p100"] = [(1, 1000.0)]
    m.spent = {}
    assert m.choose("acct_a", 8, "lm", speed, None, now=1000.0) == "k80"  # no start of 8 known on a fast type
    m.soon["p100"] = [(1, 1000.0), (8, 2000.0), (16, 9000.0)]
    line = [("v100", 2), ("p100", 2), ("k80", 2)]
    # at 6000 both would start 8 now by #@soon, but nothing says their GPUs are still idle (no #@free room left)
    assert m.first_start(line, 8, 6000.0) is None
    assert m.first_start(line, 8, 6000.0, lambda t: t == "k80") == "k80"
    assert m.first_start(line, 8, 6000.0, lambda t: True) == "p100"  # both idle: the line's order


def _by_the_backfill_plan(s, types):
    """The reference: Plan.earliest (the simulated Slurm's backfill plan) for each size, no reservations."""
    import math

    from slurm_fair.daemon.plan import FreeGPUs
    from slurm_fair.daemon.plan.backfill import PAST_LIMIT_S, Plan

    free = FreeGPUs.of(s)
    holds = []
    for j in s.jobs:
        if j.running and j.node_gpus and len(j.gpus_allocated) == 1 and j.time_limit is not None:
            end = j.start_time + 60.0 * j.time_limit
            holds += [(end if end > s.taken_at else s.taken_at + PAST_LIMIT_S, x, next(iter(j.gpus_allocated)), c)
                      for x, c in j.node_gpus.items()]
    plan = Plan(s.taken_at, free.free, free.size, holds)
    out = {}
    for t in types:
        cap = sum(r.get(t, 0) for r in free.size.values())
        row = {n: int(math.ceil(r[0])) for n in sizes_for(cap) if (r := plan.earliest(t, n, 1.0)) is not None}
        if row:
            out[t] = row
    return out


def test_the_one_pass_estimate_equals_the_backfill_plan_on_random_clusters():
    import random

    for seed in range(300):
        rng = random.Random(seed)
        nodes, jobs, jid = [], [], 1
        for i in range(rng.randint(1, 6)):
            t, size = rng.choice(["v100", "k80"]), rng.choice([1, 2, 4, 8])
            used = 0
            while used < size and rng.random() < 0.7:
                g = rng.randint(1, size - used)
                limit = rng.choice([None, 1, 5, 30, 120])
                jobs.append(running(jid, f"n{i}", g, gtype=t, started=NOW - rng.randint(0, 3600), limit=limit))
                jid, used = jid + 1, used + g
            nodes.append(Node(f"n{i}", ("MIXED",), ("gpu",), {t: size}, {t: used}))
        s = snapshot(*jobs, nodes=tuple(nodes))
        assert expected_starts(s, ["v100", "k80"]) == _by_the_backfill_plan(s, ["v100", "k80"]), seed


def pending(jid, gpus, gtype, submit, limit=None, name="j"):
    return Job(job_id=jid, name=name, account="a", user="u", partition="gpu", state="PENDING", reason="Resources",
               priority=1, submit_time=submit, start_time=None, gpus_per_node=gpus, nodes=1, gpu_type=gtype,
               gpus_allocated={}, time_limit=limit)


def test_first_starts_plan_the_queue_ahead_and_estimate_jobs_without_a_limit_by_their_recorded_run_times():
    """Issue 39 (``#@soon``): a job submitted now starts behind the queue — a 4-GPU v100 job waiting for v1's 2 busy
    GPUs (back at NOW + 600) takes the 4 GPUs then, for its 20 minutes, so a new job of up to 4 GPUs starts at
    NOW + 1800; v2's job has no time limit: held for ever (no 8), unless its class has a recorded run time (1 h:
    it started 10 min ago, so it ends at NOW + 3000)."""
    from slurm_fair.daemon.plan.backfill import first_starts
    from slurm_fair.daemon.plan.typemap import run_estimate

    s = snapshot(running(1, "v1", 2), running(2, "v2", 4, limit=None), pending(3, 4, "v100", NOW - 100, limit=20))
    assert expected_starts(s, ["v100"])["v100"] == {1: NOW, 2: NOW, 4: NOW + 600}  # the queue not seen
    got = first_starts(s, ["v100", "k80"])
    assert got["v100"] == {1: NOW + 1800, 2: NOW + 1800, 4: NOW + 1800}
    assert got["k80"] == {1: NOW, 2: NOW, 4: NOW}  # nothing queued there
    est = run_estimate({"j": 3600.0}, NOW)
    got = first_starts(s, ["v100"], est)
    assert got["v100"] == {1: NOW + 1800, 2: NOW + 1800, 4: NOW + 1800, 8: NOW + 3000}  # v1 and v2 at 3000
    # the queued job without a limit but with a record runs its class's hour: its GPUs come back at NOW + 4200
    s2 = snapshot(running(1, "v1", 2), running(2, "v2", 4, limit=None), pending(3, 4, "v100", NOW - 100))
    assert first_starts(s2, ["v100"], est)["v100"] == {1: NOW + 3000, 2: NOW + 3000, 4: NOW + 3000, 8: NOW + 4200}
    assert "v100" not in first_starts(s2, ["v100"])  # no record: the queued job never ends, nothing after it
    # the queue's turn and the nodes: 3 idle K80s (1 on k1, whose other GPU is back at +3000; 2 on k2), a 2-GPU job
    # queued (1 h) takes 2 of them now: a new 1-GPU job starts now, a 2-GPU one at +3000, a 4-GPU one when the
    # queued job's GPUs are back (+3600) — the later of the queue's turn and the nodes' (both nodes whole: +3000)
    k = snapshot(running(5, "k1", 1, gtype="k80", limit=60), pending(6, 2, "k80", NOW - 50, limit=60),
                 nodes=(Node("k1", ("MIXED",), ("gpu",), {"k80": 2}, {"k80": 1}),
                        Node("k2", ("IDLE",), ("gpu",), {"k80": 2}, {})))
    assert expected_starts(k, ["k80"])["k80"] == {1: NOW, 2: NOW, 4: NOW + 3000}
    assert first_starts(k, ["k80"])["k80"] == {1: NOW, 2: NOW + 3000, 4: NOW + 3600}
    # a job that has run longer than its class's record is expected to run as long again: ran 2 h -> ends at +2 h
    long = snapshot(running(2, "v2", 4, started=NOW - 7200, limit=None), nodes=(
        Node("v2", ("ALLOCATED",), ("gpu",), {"v100": 4}, {"v100": 4}),))
    assert first_starts(long, ["v100"], est)["v100"] == {1: NOW + 7200, 2: NOW + 7200, 4: NOW + 7200}
    assert run_estimate({"other": 60.0}, NOW)(long.jobs[0]) is None  # no record for its class, none for all
    assert run_estimate({"other": 60.0, "*": 9000.0}, NOW)(long.jobs[0]) == 14400.0  # every class's: 9000 < 2 x 7200


def test_first_starts_end_jobs_by_their_class_record_where_it_is_shorter_than_their_time_limit():
    """Issue 39 (the 90 % regression of first-start typing): a time limit is an upper bound — asked for the
    slowest type, a job on V100 ends hours before it. v2's job (4 GPUs, started 10 min ago) has a 4-h limit but its
    class records 1 h: it ends at NOW + 3000, not NOW + 13800; the queued 4-GPU job (4-h limit) takes v1's GPUs
    at NOW + 600 and gives them back after its class's hour (NOW + 4200), not after 4 h (NOW + 15000). A job that
    has run longer than its record keeps the rule "as long again", but never past its limit."""
    from slurm_fair.daemon.plan.backfill import first_starts
    from slurm_fair.daemon.plan.typemap import run_estimate

    est = run_estimate({"j": 3600.0}, NOW)
    s = snapshot(running(1, "v1", 2), running(2, "v2", 4, limit=240), pending(3, 4, "v100", NOW - 100, limit=240))
    assert first_starts(s, ["v100"])["v100"] == {1: NOW + 13800, 2: NOW + 13800, 4: NOW + 13800, 8: NOW + 15000}
    assert first_starts(s, ["v100"], est)["v100"] == {1: NOW + 3000, 2: NOW + 3000, 4: NOW + 3000, 8: NOW + 4200}
    # v1's job: 20-min limit, shorter than the record: its limit still holds (back at NOW + 600)
    assert expected_starts(s, ["v100"], run_for=est)["v100"] == {1: NOW, 2: NOW, 4: NOW + 600, 8: NOW + 3000}
    # ran 2 h of a 3-h limit: "as long again" (4 h) is past the limit, so the limit: back at NOW + 3600
    late = snapshot(running(4, "v2", 4, started=NOW - 7200, limit=180),
                    nodes=(Node("v2", ("ALLOCATED",), ("gpu",), {"v100": 4}, {"v100": 4}),))
    assert first_starts(late, ["v100"], est)["v100"] == {1: NOW + 3600, 2: NOW + 3600, 4: NOW + 3600}
    # what it changes for typing: a 1-GPU job of a class 4x slower on K80, typed K80 by room with a 4-h limit,
    # goes to V100 when V100 frees at NOW + 3000 (3000 + 1 h < 4 h); from the limits (NOW + 13800) it stays on K80
    for run_for, want in ((None, "k80"), (est, "v100")):
        soon = first_starts(s, ["v100", "k80"], run_for)
        m = SubmitMap()
        m.set({"a": Target((("k80", 4),), "room", {"k80": 4}, soon=soon),
               "a/j": Target((("v100", 0), ("k80", 0)), "class order", slow=frozenset({"k80"}),
                             speeds={"v100": 1000, "k80": 250})})
        assert m.choose("a", 1, "j", {"v100": 4.0, "k80": 1.0}, 14400, now=float(NOW)) == want


def test_class_run_times_are_the_median_of_finished_jobs_summed_over_their_runs():
    from slurm_fair.store.jobs import JobRun, class_run_times

    def run(job, restart, cls, start, end):
        return JobRun(job, restart, "a", cls, start, None, end, {"v100": 1}, None)

    runs = [run(1, 0, "cnn", 0, 100), run(1, 1, "cnn", 200, 500),  # requeued once: 100 + 300 s
            run(2, 0, "cnn", 0, 1000), run(3, 0, "cnn", 0, 50),
            run(4, 0, "rl", 0, 30), run(4, 1, "rl", 40, None),  # still running: not counted
            run(5, 0, "rl", 0, 70), run(6, 0, "rl", 0, 90)]
    # every class: the median of 400, 1000, 50, 70, 90 -> 90
    assert class_run_times(runs) == {"cnn": 400.0, "rl": 80.0, "*": 90.0}
    assert class_run_times([]) == {}
