"""The pure preemption decision (slurm_fair/daemon/preemption/decide.py): one test per rule."""

from __future__ import annotations

from slurm_fair.cluster.base import Job
from slurm_fair.config import PreemptionConfig
from slurm_fair.daemon.preemption.decide import Record, decide

NOW = 100_000.0
CFG = PreemptionConfig(enabled=True, grace=120, min_runtime=600, signal="USR1", max_jobs_per_round=10)


def run(job_id, account, gtype="a100", gpus=1, ran=3600.0, requeue=True, alloc=None, restarts=0):
    return Job(job_id=job_id, name=f"j{job_id}", account=account, user="u", partition="gpu", state="RUNNING",
               reason="None", priority=1, submit_time=int(NOW - ran - 10), start_time=int(NOW - ran),
               gpus_per_node=gpus, nodes=1, gpu_type=gtype, gpus_allocated=alloc or {gtype: gpus},
               requeue=requeue, restart_count=restarts)


def pend(job_id, account, gtype="a100", gpus=1):
    return Job(job_id=job_id, name=f"p{job_id}", account=account, user="u", partition="gpu", state="PENDING",
               reason="AssocGrpGRES", priority=1, submit_time=int(NOW - 50), start_time=None,
               gpus_per_node=gpus, nodes=1, gpu_type=gtype)


def signalled(rid, job_id, account, gtype="a100", gpus=1, ago=10.0, grace=120.0, state="signalled", requeued_at=None):
    return Record(rid, job_id, account, gtype, gpus, state, NOW - ago, NOW - ago + grace, requeued_at)


def kinds(d):
    return [(a.kind, a.job_id) for a in d.actions]


LIMITS = {"A": {"a100": 1, "v100": 0, "*": 1}, "B": {"a100": 2, "v100": 0, "*": 2}}


def test_over_share_job_is_signalled_with_reason():
    jobs = [run(1, "A", ran=4000), run(2, "A", ran=3000), pend(10, "B")]
    d = decide(LIMITS, jobs, [], NOW, CFG)
    assert kinds(d) == [("signal", 2)]  # newest of A; B can use 1 GPU, so only one job
    act = d.actions[0]
    assert act.signal == "USR1" and act.gpu_type == "a100" and act.gpus == 1
    assert "A uses 2 a100 GPUs with a limit of 1" in act.reason
    assert d.over == {"A": {"a100": 1}} and d.waiting["a100"] == 1


def test_account_within_its_limit_is_never_preempted():
    jobs = [run(1, "A"), pend(10, "B"), pend(11, "B")]
    assert decide(LIMITS, jobs, [], NOW, CFG).actions == ()


def test_no_waiting_account_no_preemption():
    jobs = [run(1, "A"), run(2, "A")]  # A over its limit, but nobody waits
    assert decide(LIMITS, jobs, [], NOW, CFG).actions == ()
    # B waits, but for v100 (where it has no room) - nothing on a100
    assert decide(LIMITS, [*jobs, pend(10, "B", "v100")], [], NOW, CFG).actions == ()
    # B waits for a100 but already uses its whole a100 limit
    full = [*jobs, run(3, "B"), run(4, "B"), pend(10, "B")]
    assert decide(LIMITS, full, [], NOW, CFG).actions == ()


def test_untyped_pending_job_counts_as_waiting():
    jobs = [run(1, "A", ran=4000), run(2, "A", ran=3000), pend(10, "B", gtype=None)]
    assert kinds(decide(LIMITS, jobs, [], NOW, CFG)) == [("signal", 2)]


def test_untyped_running_job_counts_under_its_real_type():
    jobs = [run(1, "A"), run(2, "A", gtype=None, alloc={"a100": 1}), pend(10, "B")]
    d = decide(LIMITS, jobs, [], NOW, CFG)
    assert d.over == {"A": {"a100": 1}} and kinds(d) == [("signal", 2)]


def test_min_runtime_protects_young_jobs():
    jobs = [run(1, "A", ran=4000), run(2, "A", ran=100), pend(10, "B")]
    d = decide(LIMITS, jobs, [], NOW, CFG)
    assert kinds(d) == [("signal", 1)]  # the newest ran only 100 s: the older one goes
    assert [(s.job_id, s.reason) for s in d.skipped] == [(2, "ran 100 s < preemption.min_runtime 600 s")]
    young = [run(1, "A", ran=500), run(2, "A", ran=100), pend(10, "B")]
    assert decide(LIMITS, young, [], NOW, CFG).actions == ()


def test_not_requeueable_jobs_are_skipped_when_the_rule_is_ignore():
    """preemption.unrequeueable = "ignore" (the behaviour before the rule; the default, hold-back, is tested in
    tests/daemon/preemption/test_unrequeueable.py)."""
    jobs = [run(1, "A", ran=4000), run(2, "A", ran=3000, requeue=False), pend(10, "B")]
    d = decide(LIMITS, jobs, [], NOW, PreemptionConfig(**{**CFG.__dict__, "unrequeueable": "ignore"}))
    assert kinds(d) == [("signal", 1)]
    assert d.skipped[0].job_id == 2 and "not requeue-able" in d.skipped[0].reason


def test_lease_after_requeue_and_after_signal():
    jobs = [run(1, "A", ran=4000), run(2, "A", ran=3000), pend(10, "B")]
    # job 2 was requeued 300 s ago by slurm-fair (and has run since): its lease is not over
    hist = [Record(7, 2, "A", "a100", 1, "requeued", NOW - 400, NOW - 280, NOW - 300)]
    d = decide(LIMITS, jobs, hist, NOW, CFG)
    assert kinds(d) == [("signal", 1)] and "lease: its last requeue was 300 s ago" in d.skipped[0].reason
    # a resolved preemption 200 s ago also starts a lease (never signalled twice within one)
    hist = [Record(7, 2, "A", "a100", 1, "resolved", NOW - 200, NOW - 80, None)]
    assert kinds(decide(LIMITS, jobs, hist, NOW, CFG)) == [("signal", 1)]
    # long ago: the job may be preempted again
    hist = [Record(7, 2, "A", "a100", 1, "resolved", NOW - 2000, NOW - 1880, None)]
    assert kinds(decide(LIMITS, jobs, hist, NOW, CFG)) == [("signal", 2)]


def test_job_waiting_its_grace_is_not_signalled_again_and_counts_as_freed():
    jobs = [run(1, "A", ran=4000), run(2, "A", ran=3000), run(3, "A", ran=2000), pend(10, "B"), pend(11, "B")]
    limits = {"A": {"a100": 1}, "B": {"a100": 2}}
    hist = [signalled(5, 3, "A", ago=10)]
    d = decide(limits, jobs, hist, NOW, CFG)
    # A is 2 over, B can use 2: job 3 (in grace) covers one, so exactly one more (job 2) is signalled
    assert kinds(d) == [("signal", 2)]
    hist = [signalled(5, 3, "A", ago=10), signalled(6, 2, "A", ago=10)]
    assert decide(limits, jobs, hist, NOW, CFG).actions == ()


def test_never_more_gpus_than_waiting_accounts_can_use():
    limits = {"A": {"a100": 0}, "B": {"a100": 3}, "C": {"a100": 1}}
    jobs = [run(i, "A", ran=4000 - i) for i in range(1, 5)] + [pend(10, "B"), pend(11, "B"), pend(12, "C", gpus=2)]
    d = decide(limits, jobs, [], NOW, CFG)
    # B can start 2 (pending 2, room 3), C only 1 (room 1 although its job wants 2): 3 GPUs
    assert kinds(d) == [("signal", 4), ("signal", 3), ("signal", 2)]
    # a 2-GPU job is not preempted when only 1 GPU can be used; a smaller older one is
    jobs = [run(1, "A", ran=4000), run(2, "A", ran=3000, gpus=2), pend(10, "C")]
    d = decide({"A": {"a100": 0}, "C": {"a100": 1}}, jobs, [], NOW, CFG)
    assert kinds(d) == [("signal", 1)] and "can use only 1" in d.skipped[0].reason


def test_untyped_waiting_gpu_is_counted_once_across_types():
    limits = {"A": {"a100": 0, "v100": 0}, "B": {"a100": 1, "v100": 1}}
    jobs = [run(1, "A", "a100"), run(2, "A", "v100"), pend(10, "B", gtype=None)]
    assert len(decide(limits, jobs, [], NOW, CFG).of("signal")) == 1


def test_order_most_over_share_account_first_newest_first_and_cap():
    limits = {"A": {"a100": 3}, "C": {"a100": 0}, "B": {"a100": 5}}
    jobs = ([run(i, "A", ran=4000 + i) for i in range(1, 5)]  # A: 4 in use, 1 over; newest = job 1
            + [run(i, "C", ran=5000 - i) for i in range(11, 15)]  # C: 4 in use, 4 over; newest = job 14
            + [pend(20 + i, "B") for i in range(3)])
    d = decide(limits, jobs, [], NOW, CFG)
    assert kinds(d) == [("signal", 14), ("signal", 13), ("signal", 12)]
    # B can use 5: after three of C's jobs, A and C are both 1 over (tie: account name), then C again
    d = decide(limits, [*jobs, pend(30, "B"), pend(31, "B")], [], NOW, CFG)
    assert kinds(d) == [("signal", 14), ("signal", 13), ("signal", 12), ("signal", 1), ("signal", 11)]
    capped = decide(limits, [*jobs, pend(30, "B")], [], NOW,
                    PreemptionConfig(enabled=True, min_runtime=600, max_jobs_per_round=2))
    assert kinds(capped) == [("signal", 14), ("signal", 13)]
    assert {s.job_id for s in capped.skipped if "per-round cap" in s.reason} == {12, 1}


def test_grace_over_requeues_when_still_over_share():
    jobs = [run(1, "A", ran=4000), run(2, "A", ran=3000), pend(10, "B")]
    d = decide(LIMITS, jobs, [signalled(5, 2, "A", ago=121)], NOW, CFG)
    assert kinds(d) == [("requeue", 2)] and d.actions[0].record_id == 5
    assert "grace over; A still uses 2 a100 GPUs with a limit of 1" in d.actions[0].reason
    # still in grace: nothing
    assert decide(LIMITS, jobs, [signalled(5, 2, "A", ago=100)], NOW, CFG).actions == ()


def test_resolved_situation_is_recorded_and_not_requeued():
    hist = [signalled(5, 2, "A", ago=200)]
    # the other A job ended: A is within its limit now
    d = decide(LIMITS, [run(2, "A", ran=3000), pend(10, "B")], hist, NOW, CFG)
    assert kinds(d) == [("resolve", 2)] and "no longer above its a100 limit" in d.actions[0].reason
    # B's pending job is gone: nobody waits
    d = decide(LIMITS, [run(1, "A", ran=4000), run(2, "A", ran=3000)], hist, NOW, CFG)
    assert kinds(d) == [("resolve", 2)] and "no account under its share waits" in d.actions[0].reason


def test_signalled_job_that_stopped_running_is_gone():
    hist = [signalled(5, 2, "A", ago=30)]
    d = decide(LIMITS, [run(1, "A"), pend(10, "B")], hist, NOW, CFG)
    assert kinds(d) == [("gone", 2)] and "ended" in d.actions[0].reason
    requeued_itself = Job(2, "j2", "A", "u", "gpu", "PENDING", "BeginTime", 1, 0, None, 1, 1, "a100", restart_count=1)
    d = decide(LIMITS, [run(1, "A"), requeued_itself, pend(10, "B")], hist, NOW, CFG)
    assert kinds(d)[0] == ("gone", 2) and "requeued itself" in d.actions[0].reason


def test_signalled_job_restarted_since_is_not_requeued_again():
    hist = [signalled(5, 2, "A", ago=300)]
    again = run(2, "A", ran=100, restarts=1)  # requeued by someone else and running again since the signal
    d = decide(LIMITS, [run(1, "A"), again, pend(10, "B")], hist, NOW, CFG)
    assert d.actions[0].kind == "gone" and "restarted since the signal (restarts 1)" in d.actions[0].reason
    assert kinds(d) == [("gone", 2), ("signal", 1)]  # A is still over: its other job; job 2 is in a new lease


def test_accounts_without_limits_are_left_alone():
    jobs = [run(1, "X", ran=4000), run(2, "X"), pend(10, "B")]
    assert decide(LIMITS, jobs, [], NOW, CFG).actions == ()
    jobs = [run(1, "A", ran=4000), run(2, "A"), pend(10, "X")]
    assert decide(LIMITS, jobs, [], NOW, CFG).actions == ()


def test_daemon_wakes_up_when_a_grace_ends():
    from slurm_fair.config import Config
    from slurm_fair.daemon.service import preemption_wakeup
    from slurm_fair.store import Store

    on = Config(preemption=PreemptionConfig(enabled=True, grace=120))
    with Store(":memory:") as store:
        assert preemption_wakeup(store, on, NOW) is None  # nothing signalled
        PreemptionStore(store).add(job_id=2, account="A", gpu_type="a100", gpus=1, signal="USR1", reason="r", grace=120,
                                   now=NOW)
        assert preemption_wakeup(store, on, NOW + 20) == 101.0  # 1 s after the grace ends
        assert preemption_wakeup(store, on, NOW + 500) == 0.0  # overdue: at once
        assert preemption_wakeup(store, on, NOW + 500, since=NOW + 100) == 0.0  # came due during the round
        # already due when the round just run began: that round's to act on; it left it open (the claim's
        # other victims in their grace, say): waking up again at once would run rounds in a loop
        assert preemption_wakeup(store, on, NOW + 500, since=NOW + 400) is None
        off = Config(preemption=PreemptionConfig(enabled=False, upgrade="off"))
        assert preemption_wakeup(store, off, NOW) is None  # preemption and upgrade moves off
        # moves need no reclaim: a daemon with only upgrade moves on (the default) wakes up for their grace too
        assert preemption_wakeup(store, Config(), NOW + 20) == 101.0


def test_a_claims_victims_are_due_when_the_last_grace_ends():
    """A reclaim's victims are requeued together (``victims.due`` waits while one is in its grace), so the
    wake-up is the group's latest end of grace, not its first: waking for the first, the round would leave it
    open and (before this) the daemon and the simulator ran rounds at that instant for ever (the simulator's 90 %
    seed #2 with preemption: over 10 000 rounds at one simulated time)."""
    from slurm_fair.store import Store

    with Store(":memory:") as store:
        PreemptionStore(store).add(job_id=2, account="A", gpu_type="v100", gpus=1, signal="USR1", reason="r", grace=120,
                                   now=NOW, for_job=9)
        PreemptionStore(store).add(job_id=3, account="B", gpu_type="v100", gpus=1, signal="USR1", reason="r", grace=120,
                                   now=NOW + 90, for_job=9)
        assert PreemptionStore(store).next_due() == NOW + 210  # job 9's victims: when job 3's grace ends
        PreemptionStore(store).add(job_id=4, account="B", gpu_type="k80", gpus=1, signal="USR1", reason="r", grace=120,
                                   now=NOW + 30, for_job=8)
        assert PreemptionStore(store).next_due() == NOW + 150  # job 8's lone victim comes first
        PreemptionStore(store).add(job_id=5, account="C", gpu_type="k80", gpus=1, signal="USR1", reason="move",
                                   grace=120, now=NOW + 10, target_type="v100", for_job=7)
        assert PreemptionStore(store).next_due() == NOW + 130  # a move is due on its own


# ------------------------------------------------------------------ reclaim by claims (issue 28, limits lend)

from dataclasses import replace as _replace  # noqa: E402

from slurm_fair.daemon.plan.demand import FreeGPUs  # noqa: E402
from slurm_fair.daemon.plan.reclaim import Reclaim, holders_of  # noqa: E402
from slurm_fair.daemon.preemption.store import PreemptionStore

GUAR = {"A": {"v100": 0}, "B": {"v100": 8}}


def on(job, **nodes):
    return _replace(job, node_gpus=dict(nodes))


def claim8(victims=(1, 2)):
    return Reclaim("B", 99, "v100", 8, {"n1": 4, "n2": 4}, tuple(victims))


def test_reclaim_signals_all_victims_of_a_claim_and_names_the_job_they_are_for():
    jobs = [on(run(1, "A", "v100", 4, ran=7200), n1=4), on(run(2, "A", "v100", 4, ran=7200), n2=4),
            pend(99, "B", "v100", 8)]
    d = decide(GUAR, jobs, [], NOW, CFG, reclaims=[claim8()])
    assert kinds(d) == [("signal", 1), ("signal", 2)]
    assert {a.for_job for a in d.actions} == {99} and "for job 99 of B" in d.actions[0].reason
    # no claim served by reclaim (e.g. room 3 and one 8-GPU job: the plan names none): nothing is signalled,
    # although A is above its guarantee and B waits
    assert decide(GUAR, jobs, [], NOW, CFG, reclaims=[]).actions == ()


def test_reclaim_signals_none_when_one_victim_is_in_its_lease():
    jobs = [on(run(1, "A", "v100", 4, ran=7200), n1=4), on(run(2, "A", "v100", 4, ran=300), n2=4),
            pend(99, "B", "v100", 8)]
    d = decide(GUAR, jobs, [], NOW, CFG, reclaims=[claim8()])
    assert d.actions == () and {s.job_id for s in d.skipped} == {1, 2}
    assert any("min_runtime" in s.reason for s in d.skipped if s.job_id == 2)


def test_reclaim_must_pay():
    # a 1-GPU job would wait ~700 s more for a 4-GPU job that ran 700 s: 1 x (700 - 120) < 4 x 300
    jobs = [on(run(1, "A", "v100", 4, ran=700), n1=4), pend(99, "B", "v100", 1)]
    rc = Reclaim("B", 99, "v100", 1, {"n1": 1}, (1,))
    d = decide(GUAR, jobs, [], NOW, CFG, reclaims=[rc])
    assert d.actions == () and "does not pay" in d.skipped[0].reason
    # the same job after 10 h: 1 x (36000 - 120) > 1200, it pays
    long = [on(run(1, "A", "v100", 4, ran=36000), n1=4), pend(99, "B", "v100", 1)]
    assert kinds(decide(GUAR, long, [], NOW, CFG, reclaims=[rc])) == [("signal", 1)]


def test_requeues_per_job_per_day_are_bounded_over_a_sliding_24_h():
    jobs = [on(run(1, "A", "v100", 4, ran=7200), n1=4), pend(99, "B", "v100", 4)]
    rc = Reclaim("B", 99, "v100", 4, {"n1": 4}, (1,))
    twice = [signalled(1, 1, "A", "v100", 4, ago=80000, state="requeued", requeued_at=NOW - 79000),
             signalled(2, 1, "A", "v100", 4, ago=40000, state="requeued", requeued_at=NOW - 39000)]
    d = decide(GUAR, jobs, twice, NOW, CFG, reclaims=[rc])
    assert d.actions == () and "max_requeues_per_day = 2" in d.skipped[0].reason
    # the first requeue is more than 24 h ago: one in the window, it may be signalled again
    older = [_replace(twice[0], requeued_at=NOW - 90000), twice[1]]
    assert kinds(decide(GUAR, jobs, older, NOW, CFG, reclaims=[rc])) == [("signal", 1)]


def _free():
    # n1, n2: 4 V100s each, none idle
    return FreeGPUs({"n1": {"v100": 0}, "n2": {"v100": 0}}, {"n1": {"v100": 4}, "n2": {"v100": 4}})


def test_grace_over_victims_are_requeued_together_when_the_job_they_were_freed_for_then_starts():
    jobs = [on(run(1, "A", "v100", 4, ran=7200), n1=4), on(run(2, "A", "v100", 4, ran=7200), n2=4),
            pend(99, "B", "v100", 8)]
    recs = [_replace(signalled(1, 1, "A", "v100", 4, ago=200), for_job=99),
            _replace(signalled(2, 2, "A", "v100", 4, ago=200), for_job=99)]
    d = decide(GUAR, jobs, recs, NOW, CFG, reclaims=[], free=_free())
    assert kinds(d) == [("requeue", 1), ("requeue", 2)] and all(a.for_job == 99 for a in d.actions)
    # one member still in its grace: the claim waits for it (neither is requeued alone)
    late = [recs[0], _replace(recs[1], requeue_at=NOW + 50)]
    assert decide(GUAR, jobs, late, NOW, CFG, reclaims=[], free=_free()).actions == ()


def test_a_victim_is_not_requeued_to_restart_on_the_same_type_while_the_job_it_was_freed_for_cannot_start():
    # victim 2 shares n2 with C's 2-GPU job: requeuing 1 and 2 frees 4 + 2, never 8 on two whole nodes
    jobs = [on(run(1, "A", "v100", 4, ran=7200), n1=4), on(run(2, "A", "v100", 2, ran=7200), n2=2),
            on(run(3, "C", "v100", 2, ran=7200), n2=2), pend(99, "B", "v100", 8)]
    recs = [_replace(signalled(1, 1, "A", "v100", 4, ago=200), for_job=99),
            _replace(signalled(2, 2, "A", "v100", 2, ago=200), for_job=99)]
    d = decide(GUAR, jobs, recs, NOW, CFG, reclaims=[], free=_free())
    assert kinds(d) == [("resolve", 1), ("resolve", 2)]
    assert "would still not start" in d.actions[0].reason
    # the job it was freed for started meanwhile (elsewhere): nothing to requeue for
    started = [j for j in jobs if j.job_id != 99] + [run(99, "B", "v100", 8, ran=10)]
    d = decide(GUAR, started, recs, NOW, CFG, reclaims=[], free=_free())
    assert kinds(d) == [("resolve", 1), ("resolve", 2)] and "has started" in d.actions[0].reason


def test_a_victim_that_cannot_be_requeued_is_held_back_and_the_claim_placed_again_without_it():
    # A holds 4 a100s on n1 with a guarantee of 3; B waits for 1. The plan names A's newest job, which Slurm cannot
    # requeue: it is held back (A's excess is 1) and the next newest goes in its place.
    free = FreeGPUs({"n1": {"a100": 0}}, {"n1": {"a100": 4}})
    jobs = [on(run(i, "A", ran=7200 - i), n1=1) for i in (1, 2, 3)] + [on(run(4, "A", ran=100, requeue=False), n1=1),
                                                                        pend(99, "B")]
    free.holders = tuple(holders_of(jobs))
    guar = {"A": {"a100": 3}, "B": {"a100": 1}}
    rc = Reclaim("B", 99, "a100", 1, {"n1": 1}, (4,))
    d = decide(guar, jobs, [], NOW, CFG, reclaims=[rc], free=free)
    assert kinds(d) == [("hold-back", 4), ("signal", 3)] and d.actions[1].for_job == 99
    # every job of A is non-requeue-able: at most its excess (1) is held back, the others are listed
    stuck = [_replace(j, requeue=False) if j.running else j for j in jobs]
    d = decide(guar, stuck, [], NOW, CFG, reclaims=[rc], free=free)
    assert kinds(d) == [("hold-back", 4)] and {s.job_id for s in d.skipped} == {1, 2, 3}


def test_requeues_per_day_bound_the_hard_cap_rule_too():
    jobs = [run(1, "A", ran=7200), run(2, "A", ran=7200), pend(10, "B")]
    twice = [signalled(1, 2, "A", ago=80000, state="requeued", requeued_at=NOW - 79000),
             signalled(2, 2, "A", ago=40000, state="requeued", requeued_at=NOW - 39000)]
    d = decide(LIMITS, jobs, twice, NOW, CFG)
    assert kinds(d) == [("signal", 1)]  # job 2 was requeued twice today: the other one goes
    assert any(s.job_id == 2 and "max_requeues_per_day" in s.reason for s in d.skipped)


def test_a_flexible_claimant_typed_elsewhere_is_moved_to_the_type_its_victims_free():
    """Issue 28, seen in the simulator at 90 % (seed #2): a reclaim requeued victims on V100 for a flexible job
    that job_submit.lua had typed P100; in Slurm it still waited for P100, and the victims restarted on their own
    GPUs a minute later (5 of 20 requeues restarted on the same type before the job they were for had started).
    The requeue now moves the claimant to the type it frees (``preemption.carry._claimant_to``); the simulated Slurm
    starts it there at once."""
    from slurm_fair.daemon.preemption.carry import _claimant_to
    from slurm_fair.sim.cluster import SimCluster, cluster_spec
    from slurm_fair.sim.traces import TraceJob

    thr = {"cnn": {"p100": 2.0, "v100": 4.0}}
    jobs = [TraceJob("1", 0.0, "b", "cnn", 4, 1e9, "v100"), TraceJob("2", 0.0, "b", "cnn", 4, 1e9, "p100"),
            TraceJob("3", 1.0, "a", "cnn", 2, 1e9, "p100")]
    c = SimCluster(cluster_spec("p100=4,v100=4"), {"a": 1, "b": 1}, thr, jobs)
    c.advance(2.0)
    c.jobs[3].flex = True  # typed by job_submit.lua (fair:flex)
    assert [c.jobs[i].state for i in (1, 2, 3)] == ["RUNNING", "RUNNING", "PENDING"]
    claimant = next(j for j in c.snapshot().jobs if j.job_id == 3)
    assert claimant.flexible and claimant.gpu_type == "p100"
    c.requeue_job(1)  # the victim on V100
    done: set[int] = set()
    msg = _claimant_to(c, claimant, "v100", done, "grace over")
    assert "job 3 moved gres/gpu:p100 -> gres/gpu:v100" in msg and done == {3}
    assert (c.jobs[3].state, c.jobs[3].run_type) == ("RUNNING", "v100")  # started on what the victim freed
    c.advance(c.now + 120.0)
    assert c.jobs[1].state == "PENDING"  # the victim does not take its GPUs back
    # a job that is not flexible, or already of that type, or moved once this round, is left as it is
    fixed = _replace(claimant, comment="")
    assert not fixed.flexible and _claimant_to(c, fixed, "v100", set(), "m") == "m"
    assert _claimant_to(c, claimant, "v100", done, "m") == "m"


def test_a_job_gpus_were_reclaimed_for_is_no_reclaims_victim_for_a_day():
    """Reclaim converges (issue 28; 90 % load seed 0 in the simulator): two accounts' 8-GPU jobs took the P100s from
    each other by reclaim every ~1 000 s. A job a reclaim requeued others for keeps what was freed for 24 h."""
    from dataclasses import replace

    from slurm_fair.daemon.preemption import victims as V
    from slurm_fair.daemon.preemption.record import REQUEUED

    job = run(111, "A", gtype="p100", gpus=8, ran=1000.0)
    freed_for = replace(signalled(7, 55, "B", gtype="p100", gpus=8, ago=1200.0, state=REQUEUED,
                                  requeued_at=NOW - 1080.0), for_job=111)
    why = V.blockers([job], [freed_for], NOW, CFG)
    assert "reclaimed for it 1080 s ago" in why[111]
    assert V.reclaimed_for([freed_for], 111, NOW) == NOW - 1080.0
    old = replace(freed_for, requeued_at=NOW - 90_000.0)  # more than a day ago: a victim like any other
    assert V.blockers([job], [old], NOW, CFG) == {} and V.reclaimed_for([old], 111, NOW) is None
    other = replace(freed_for, for_job=112)  # a reclaim for another job protects nothing here
    assert V.blockers([job], [other], NOW, CFG) == {}
