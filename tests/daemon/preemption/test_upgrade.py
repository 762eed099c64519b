"""Upgrade moves (daemon/preemption/upgrade.py): which running jobs move to a faster idle GPU type, the preemption steps
that carry a move out (daemon/preemption/decide.py, carry.py), and the simulator running them end to end."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from slurm_fair.cluster.base import Job, Node, Snapshot
from slurm_fair.config import PreemptionConfig
from slurm_fair.daemon import plan as P
from slurm_fair.daemon.preemption import decide as PR
from slurm_fair.daemon.preemption import upgrade as U
from slurm_fair.sim.cluster import cluster_spec
from slurm_fair.sim.engine import simulate
from slurm_fair.sim.traces import Trace, TraceJob
from slurm_fair.daemon.preemption.store import PreemptionStore

CFG = SimpleNamespace(min_runtime=600.0, upgrade_cost=300.0, grace=60.0, signal="USR1", max_jobs_per_round=10)
NOW = 100_000.0
SPEED = {"cnn": {"k80": 1.0, "v100": 10.0}, "rl": {"k80": 1.0, "v100": 1.1}}


def job(jid, account="a", gpus=1, gpu_type="k80", state="RUNNING", cls="cnn", ran=3600.0, flex=True, requeue=True,
        limit=None, site_factor=0, comment="", partition="gpu"):
    running = state == "RUNNING"
    return Job(job_id=jid, name=cls, account=account, user="u", partition=partition, state=state, reason="",
               priority=1, submit_time=int(NOW - ran - 10), start_time=int(NOW - ran) if running else None,
               gpus_per_node=gpus, nodes=1, gpu_type=gpu_type, gpus_allocated={gpu_type: gpus} if running else {},
               comment=" ".join(x for x in (comment, "fair:flex" if flex else "") if x), requeue=requeue,
               time_limit=limit, site_factor=site_factor)


def snap(jobs, v100_free=4):
    nodes = (Node("v100-1", ("MIXED",), ("gpu",), {"v100": 4}, {"v100": 4 - v100_free}),
             Node("k80-1", ("MIXED",), ("gpu",), {"k80": 4}, {"k80": sum(j.gpus for j in jobs if j.running)}))
    return Snapshot("24.11.5", NOW, nodes, tuple(jobs), (), ("gpu",))


def plan(limits=None):
    cap = {"k80": 4, "v100": 4}
    accts = ("a", "b")
    z = {a: {g: 0 for g in cap} for a in accts}
    return P.Plan(capacity=cap, accounts=accts, ideal_class={}, ideal=z, deviation_before=z, real=z, deviations=z,
                  extra=z, limits=limits or {a: {} for a in accts}, min_gpus={a: 0 for a in accts},
                  demand={a: 0 for a in accts})


def speed(j, t):
    return SPEED[j.name].get(t)


def moves(jobs, v100_free=4, limits=None, history=(), exclude=(), max_moves=10, may_move=None):
    s = snap(jobs, v100_free)
    free = U.free_for_moves(s, U.in_flight(history), lambda j, t: speed(j, t) is not None)
    return U.upgrade_moves(s, plan(limits), speed, history, NOW, CFG, free, exclude, max_moves, may_move)


def by_name(j):
    return j.name


def test_a_job_declares_it_checkpoints_by_its_comment_token_or_a_site_rule_and_must_be_requeueable():
    assert job(1, comment="fair:checkpoint").checkpoints
    assert job(1, comment="class=cnn,fair:checkpoint;x").checkpoints  # separated as fair:flex may be
    assert not job(1, comment="fair:checkpointing").checkpoints  # the whole token only
    assert not job(1, comment="fair:checkpoint", requeue=False).checkpoints  # Slurm may not requeue it
    assert not job(1).checkpoints
    assert U.declares_checkpoint(job(1, comment="fair:checkpoint"), (), by_name)
    assert U.declares_checkpoint(job(1, account="physics"), ("account:physics",), by_name)
    assert U.declares_checkpoint(job(1, partition="gpu,ckpt"), ("partition:ckpt",), by_name)
    assert U.declares_checkpoint(job(1, cls="cnn"), ("class:cnn",), by_name)
    assert not U.declares_checkpoint(job(1, cls="rl"), ("class:cnn", "account:b", "partition:ckpt"), by_name)
    assert not U.declares_checkpoint(job(1, account="physics", requeue=False), ("account:physics",), by_name)


def test_upgrade_modes_choose_which_jobs_moves_may_take():
    says, rule, silent = job(1, comment="fair:checkpoint"), job(2, account="b"), job(3)
    pick = {mode: [j.job_id for j in (says, rule, silent)
                   if U.movable(PreemptionConfig(upgrade=mode, checkpointing=("account:b",)), by_name)(j)]
            for mode in ("checkpointing", "all", "off")}
    assert pick == {"checkpointing": [1, 2], "all": [1, 2, 3], "off": []}
    assert PreemptionConfig().upgrade == "checkpointing" and PreemptionConfig().moves  # the default
    assert not PreemptionConfig(upgrade="off").moves


def test_under_the_default_mode_only_the_jobs_that_checkpoint_are_moved():
    jobs = [job(1, ran=9000.0), job(2, ran=5000.0, comment="fair:checkpoint")]
    ck = U.movable(PreemptionConfig(), by_name)
    assert [x.job_id for x in moves(jobs, may_move=ck)] == [2]  # job 1 saves more but never said it checkpoints
    assert [x.job_id for x in moves(jobs)] == [1, 2]  # no rule given: every requeue-able fair:flex job


def test_a_long_running_job_moves_to_the_faster_idle_type_when_the_saving_pays_the_restart():
    m = moves([job(1, ran=3600.0)])
    assert [(x.job_id, x.from_type, x.to_type, x.gpus) for x in m] == [(1, "k80", "v100", 1)]
    assert m[0].saving == pytest.approx(3600 * 0.9 - 300)
    assert "expected to finish 2940 s sooner" in m[0].reason
    # 1.1x: 3600 s left saves 327 s, just over the cost; after 1800 s only 164 s: not worth a restart
    assert [x.job_id for x in moves([job(2, cls="rl", ran=3600.0)])] == [2]
    assert moves([job(2, cls="rl", ran=1800.0)]) == []


def test_only_flexible_requeueable_jobs_past_their_lease_and_with_a_known_faster_type():
    assert moves([job(1, flex=False)]) == []  # the user chose the type
    assert moves([job(1, requeue=False)]) == []
    assert moves([job(1, ran=500.0)]) == []  # lease (min_runtime 600 s) not over
    assert moves([job(1, gpu_type="v100")]) == []  # already on the fastest type
    assert moves([job(1)], exclude=[1]) == []  # being preempted already
    # a time limit tells how long it runs still: 10 more minutes save 540 s - 300 s
    assert moves([job(1, ran=3600.0, limit=70)])[0].saving == pytest.approx(600 * 0.9 - 300)
    assert moves([job(1, ran=3600.0, limit=65)]) == []


def test_an_untyped_job_slurm_started_on_a_slow_type_is_moved_when_it_checkpoints_like_a_flexible_one():
    """Issue 39: job_submit.lua left it untyped (no fair:flex), Slurm started it on the K80 that freed first; when
    V100s stand idle it moves like a fair:flex job — under the default mode only if it checkpoints."""
    untyped = replace(job(1, ran=3600.0, flex=False, comment="fair:checkpoint"), gpu_type=None)
    assert untyped.gpu_type is None and untyped.gpus_allocated == {"k80": 1} and not untyped.flexible
    ck = U.movable(PreemptionConfig(), by_name)
    m = moves([untyped], may_move=ck)
    assert [(x.job_id, x.from_type, x.to_type) for x in m] == [(1, "k80", "v100")]
    assert m[0].saving == pytest.approx(3600 * 0.9 - 300)
    silent = replace(job(2, ran=3600.0, flex=False), gpu_type=None)
    assert moves([silent], may_move=ck) == []  # it never said it checkpoints
    assert moves([job(3, ran=3600.0, flex=False, comment="fair:checkpoint")], may_move=ck) == []  # typed by its user


def test_the_job_that_has_waited_longest_moves_first_not_the_one_that_saves_most():
    """Issue 39: one idle V100, two K80 jobs that gain from it: the one submitted earlier gets it though the other
    saves more (it has run longer since a later submission: it started at once)."""
    early = replace(job(1, ran=2000.0), submit_time=int(NOW - 30_000))  # waited 28 ks, then ran 2000 s
    late = replace(job(2, ran=9000.0), submit_time=int(NOW - 9010))  # saves 7800 s against early's 1500 s
    assert [x.job_id for x in moves([early, late], v100_free=1)] == [1]
    assert [x.job_id for x in moves([early, late], v100_free=2)] == [1, 2]


def test_longest_waiting_first_within_idle_gpus_pending_jobs_first_and_the_limit():
    jobs = [job(1, ran=1000.0), job(2, ran=9000.0), job(3, gpus=2, ran=5000.0)]  # submitted 2, 3, 1
    assert [x.job_id for x in moves(jobs, v100_free=3)] == [2, 3]  # job 1 waited least: no V100 left for it
    assert [x.job_id for x in moves(jobs, v100_free=2)] == [2, 1]  # job 3's 2 GPUs no longer fit, job 1's do
    pending = jobs + [job(9, account="b", gpu_type="v100", state="PENDING")]
    assert [x.job_id for x in moves(pending, v100_free=2)] == [2]  # the waiting job takes one V100 first
    assert [x.job_id for x in moves(pending, v100_free=1)] == []
    assert [x.job_id for x in moves(jobs, limits={"a": {"v100": 1}, "b": {}})] == [2]  # a may use 1 more V100
    assert [x.job_id for x in moves(jobs, max_moves=1)] == [2]
    # a move in flight holds its target GPUs
    flight = [PR.Record(7, 7, "a", "k80", 2, "signalled", NOW - 10, NOW + 50, target_type="v100")]
    assert [x.job_id for x in moves(jobs, v100_free=3, history=flight)] == [2]


def test_an_open_move_is_requeued_onto_its_target_or_resolved_when_the_gpus_are_gone():
    j = job(1, ran=4000.0)
    rec = PR.Record(5, 1, "a", "k80", 1, "signalled", NOW - 100, NOW - 40, target_type="v100")
    d = PR.decide({}, [j], [rec], NOW, CFG, upgrade_ok=lambda r: None)
    assert [(a.kind, a.target_type, a.record_id) for a in d.actions] == [("requeue", "v100", 5)]
    d = PR.decide({}, [j], [rec], NOW, CFG, upgrade_ok=lambda r: "1 v100 GPU(s) are not free any more")
    assert d.actions[0].kind == "resolve" and "no longer possible (1 v100 GPU(s) are not free" in d.actions[0].reason
    early = PR.Record(5, 1, "a", "k80", 1, "signalled", NOW - 10, NOW + 50, target_type="v100")
    assert PR.decide({}, [j], [early], NOW, CFG, upgrade_ok=lambda r: None).actions == ()  # still in its grace
    assert U.still_possible(rec, snap([j], v100_free=0), plan()) == "1 v100 GPU(s) are not free any more"
    assert U.still_possible(rec, snap([j]), plan({"a": {"v100": 0}, "b": {}})) == "a's v100 limit has no room for them"
    assert U.still_possible(rec, snap([j]), plan()) is None


def test_the_simulator_moves_a_long_k80_job_to_the_v100s_when_they_free_up():
    thr = {"cnn": {"k80": 1.0, "v100": 10.0}}
    # four short V100 jobs first; the fifth job starts on a K80 and runs 4 h there unless moved
    jobs = [TraceJob(f"s{i}", 0.0, "a", "cnn", 1, 1800.0 * 10) for i in range(4)]
    jobs.append(TraceJob("long", 10.0, "b", "cnn", 1, 4 * 3600.0))
    tr = Trace(tuple(jobs), thr, "hand-made")
    nodes = cluster_spec("k80=4,v100=4")
    plain = simulate(tr, nodes, "oef-coop", round_s=300)
    moved = simulate(tr, nodes, "oef-coop", round_s=300, upgrade=True, restart_s=60)
    row = {r["id"]: r for r in moved.job_rows}["long"]
    before = {r["id"]: r for r in plain.job_rows}["long"]
    assert before["types"] == ["k80"] and before["jct"] == pytest.approx(4 * 3600.0 - 0.0, rel=0.01)
    assert row["types"] == ["k80", "v100"] and row["restarts"] == 1 and moved.preemptions == 1
    assert row["jct"] < before["jct"] / 2
    assert not moved.round_errors


def test_with_reclaim_off_the_round_starts_no_reclaim_but_finishes_open_moves():
    """preemption.enabled = false with moves on (the default): an over-share account is not signalled; an open
    move's grace ending is still carried out (here resolved: the round has no plan to requeue it onto)."""
    from slurm_fair import config
    from slurm_fair.daemon import preemption
    from slurm_fair.daemon.preemption import carry
    from slurm_fair.store import Store

    over = [job(1, account="a", gpu_type="v100", flex=False, ran=9000.0),
            job(2, account="a", gpu_type="v100", flex=False, ran=9000.0),
            job(3, account="b", gpu_type="v100", state="PENDING", flex=False)]
    s = snap(over, v100_free=2)
    s = replace(s, nodes=(Node("v100-1", ("MIXED",), ("gpu",), {"v100": 2}, {"v100": 2}),))
    guarantees = {"a": {"v100": 1}, "b": {"v100": 1}}
    on = config.from_dict({"preemption": {"enabled": True}})
    off = config.from_dict({})
    assert preemption.wanted(off, s) and not preemption.wanted(
        config.from_dict({"preemption": {"upgrade": "off"}}), s)
    assert not preemption.wanted(off, replace(s, slurm_version="22.05.8"))  # 22.05 cannot retype: no moves
    with Store(":memory:") as store:
        would = carry.run(None, store, on, s, guarantees, None, NOW, act=False).to_json()["would"]
        assert [(w["step"], w["job_id"]) for w in would] == [("signal", 2)]  # reclaim on: a's newer job
        assert carry.run(None, store, off, s, guarantees, None, NOW, act=False).to_json()["would"] == []
        PreemptionStore(store).add(job_id=1, account="a", gpu_type="v100", gpus=1, signal="USR1", reason="move",
                                   grace=60.0, now=NOW - 100, target_type="a100")
        would = carry.run(None, store, off, s, guarantees, None, NOW, act=False).to_json()["would"]
        assert [(w["step"], w["job_id"]) for w in would] == [("resolve", 1)]
