"""Preemption cannot be dodged (issue 21 item 4): the pure rule (slurm_fair/daemon/preemption/unrequeueable.py), its place in
the preemption decision (daemon/preemption/decide.py), the limits it lowers (plan.decide) and its records in the store."""

from __future__ import annotations

import dataclasses

import pytest

from slurm_fair import config
from slurm_fair.cluster.base import ANY_GPU, Account, Job, Node, Snapshot
from slurm_fair.config import PreemptionConfig
from slurm_fair.daemon import plan as P
from slurm_fair.daemon.preemption import unrequeueable as UR
from slurm_fair.daemon.preemption.decide import Record, decide
from slurm_fair.policies import get as get_policy
from slurm_fair.store import Store
from slurm_fair.daemon.preemption.store import PreemptionStore

NOW = 100_000.0
CFG = PreemptionConfig(enabled=True, grace=120, min_runtime=600, signal="USR1", max_jobs_per_round=10)
LIMITS = {"A": {"a100": 1, "*": 1}, "B": {"a100": 2, "*": 2}}


def cfg(**kw):
    return dataclasses.replace(CFG, **kw)


def run(job_id, account, ran=3600.0, requeue=True, batch=True, gtype="a100", gpus=1):
    return Job(job_id=job_id, name=f"j{job_id}", account=account, user="u", partition="gpu", state="RUNNING",
               reason="None", priority=1, submit_time=int(NOW - ran - 10), start_time=int(NOW - ran),
               gpus_per_node=gpus, nodes=1, gpu_type=gtype, gpus_allocated={gtype: gpus}, requeue=requeue,
               batch=batch)


def pend(job_id, account, gtype="a100", gpus=1):
    return Job(job_id=job_id, name=f"p{job_id}", account=account, user="u", partition="gpu", state="PENDING",
               reason="AssocGrpGRES", priority=1, submit_time=int(NOW - 50), start_time=None, gpus_per_node=gpus,
               nodes=1, gpu_type=gtype)


def kinds(d):
    return [(a.kind, a.job_id) for a in d.actions]


def test_why_not_requeueable():
    assert UR.why_not_requeueable(run(1, "A")) is None
    assert "not requeue-able" in UR.why_not_requeueable(run(1, "A", requeue=False))
    # salloc: Slurm's JSON says requeue=true (testbed capture), but only batch jobs can be requeued
    assert "interactive allocation" in UR.why_not_requeueable(run(1, "A", batch=False))
    assert [a for a in config.UNREQUEUEABLE_ACTIONS] == ["hold-back", "cancel", "ignore"]
    assert config.Config().preemption.unrequeueable == "hold-back"


def test_new_candidate_that_cannot_be_requeued_is_held_back_and_the_next_job_is_preempted():
    """A's newest job (2) is --no-requeue: it is held back (not signalled), and A's next job is signalled in its
    place — dodging spares nobody. The hold-back uses no signal of the per-round cap."""
    jobs = [run(1, "A", ran=4000), run(2, "A", ran=3000, requeue=False), run(3, "A", ran=3500), pend(10, "B"),
            pend(11, "B")]
    d = decide(LIMITS, jobs, [], NOW, cfg(max_jobs_per_round=1))
    assert kinds(d) == [("hold-back", 2), ("signal", 3)]
    hb = d.actions[0]
    assert hb.due == NOW + 14400 and "not requeue-able" in hb.reason and "lowered by its 1 GPUs and it starts no GPU job on any type" in hb.reason
    assert [(s.job_id, s.reason.split(" (")[0]) for s in d.skipped] == [(1, "per-round cap reached")]
    # ignore: the old behaviour, listed as skipped
    d = decide(LIMITS, jobs, [], NOW, cfg(unrequeueable="ignore"))
    assert kinds(d) == [("signal", 3), ("signal", 1)] and d.skipped[0].job_id == 2
    # only when preemption would take it: a job that ran less than min_runtime is just skipped for that
    young = [run(1, "A", ran=4000), run(2, "A", ran=100, requeue=False), pend(10, "B")]
    d = decide(LIMITS, young, [], NOW, CFG)
    assert kinds(d) == [("signal", 1)] and "min_runtime" in d.skipped[0].reason


def test_at_most_the_excess_is_held_back():
    """A uses 4 a100s with a guarantee of 2, all --no-requeue: its two newest are held back (what preemption would
    have taken), the two others are only listed; a job already held back counts first."""
    jobs = [run(i, "A", ran=4000 - i, requeue=False) for i in range(1, 5)] + [pend(10, "B"), pend(11, "B")]
    lim = {"A": {"a100": 2}, "B": {"a100": 2}}
    d = decide(lim, jobs, [], NOW, CFG)
    assert kinds(d) == [("hold-back", 4), ("hold-back", 3)]
    assert sorted(s.job_id for s in d.skipped) == [1, 2] and all("not requeue-able" in s.reason for s in d.skipped)
    held = [Record(8, 4, "A", "a100", 1, UR.HELD_BACK, None, None)]
    assert kinds(decide(lim, jobs, held, NOW, CFG)) == [("hold-back", 3)]


def test_interactive_allocations_are_never_signalled_and_cancelled_under_cancel():
    jobs = [run(1, "A", ran=4000), run(2, "A", ran=3000, batch=False), pend(10, "B")]
    d = decide(LIMITS, jobs, [], NOW, cfg(unrequeueable="cancel", cancel_grace=60))
    assert kinds(d) == [("hold-back", 2), ("signal", 1)]
    # issue 30: an salloc allocation absorbed the hold-back and was never cancelled; now it gets a cancel time
    assert d.actions[0].due == NOW + 60
    held = [Record(8, 2, "A", "a100", 1, UR.HELD_BACK, None, NOW + 60)]
    later = decide(LIMITS, [run(2, "A", ran=3100, batch=False), run(1, "A", ran=4100), pend(10, "B")], held,
                   NOW + 61, cfg(unrequeueable="cancel", cancel_grace=60))
    assert ("cancel", 2) in kinds(later)
    d = decide(LIMITS, jobs, [], NOW, cfg(unrequeueable="ignore"))
    assert kinds(d) == [("signal", 1)] and "interactive allocation" in d.skipped[0].reason
    # batch jobs under "cancel" get a cancel time
    d = decide(LIMITS, [run(1, "A"), run(2, "A", requeue=False), pend(10, "B")], [], NOW,
               cfg(unrequeueable="cancel", cancel_grace=60))
    assert kinds(d)[0] == ("hold-back", 2) and d.actions[0].due == NOW + 60


def test_made_non_requeueable_during_the_grace():
    """scontrol update jobid=2 requeue=0 after the signal: at the end of the grace it is held back instead of a
    requeue that Slurm would refuse, and (nothing freed) A's other job is signalled in the same round."""
    jobs = [run(1, "A", ran=4000), run(2, "A", ran=3000, requeue=False), pend(10, "B")]
    hist = [Record(7, 2, "A", "a100", 1, "signalled", NOW - 130, NOW - 10)]
    d = decide(LIMITS, jobs, hist, NOW, CFG)
    assert kinds(d) == [("hold-back", 2), ("signal", 1)]
    assert d.actions[0].record_id == 7 and d.actions[0].reason.startswith("grace over, but it is not requeue-able")
    d = decide(LIMITS, jobs, hist, NOW, cfg(unrequeueable="ignore"))
    assert kinds(d) == [("resolve", 2), ("signal", 1)] and "unrequeueable = ignore" in d.actions[0].reason
    # still in its grace: nothing yet
    early = [Record(7, 2, "A", "a100", 1, "signalled", NOW - 30, NOW + 90)]
    assert kinds(decide(LIMITS, jobs, early, NOW, CFG)) == []


def test_held_back_record_ends_when_the_job_ends_and_is_cancelled_after_its_grace():
    jobs = [run(1, "A", ran=4000), run(2, "A", ran=3000, requeue=False), pend(10, "B")]
    held = Record(8, 2, "A", "a100", 1, UR.HELD_BACK, None, NOW - 1)  # requeue_at = cancel time
    # hold-back with no bound (hold_back_max = 0): it stays (never re-marked, never signalled); A's other job is
    # signalled
    assert kinds(decide(LIMITS, jobs, [held], NOW, cfg(hold_back_max=0))) == [("signal", 1)]
    # the default hold-back is bounded (issue 41): its time passed, A still over, B waits: cancelled
    d = decide(LIMITS, jobs, [held], NOW, CFG)
    assert kinds(d) == [("cancel", 2)] and "hold_back_max" in d.actions[0].reason
    # cancel: its cancel time passed, A still over, B waits
    d = decide(LIMITS, jobs, [held], NOW, cfg(unrequeueable="cancel"))
    assert kinds(d) == [("cancel", 2)] and "cancel_grace over" in d.actions[0].reason
    # cancel, but A is no longer over (a limit of 2): resolved, the hold-back ends
    d = decide({"A": {"a100": 2}, "B": {"a100": 2}}, jobs, [held], NOW, cfg(unrequeueable="cancel"))
    assert kinds(d) == [("resolve", 2)] and "the hold-back ends" in d.actions[0].reason
    # the job ended while B still waits: the record stays open (issue 30: the GPUs it freed are B's)
    assert ("gone", 2) not in kinds(decide(LIMITS, [run(1, "A"), pend(10, "B")], [held], NOW, CFG))
    # the job ended and nobody waits any more: gone
    d = decide(LIMITS, [run(1, "A"), run(10, "B")], [held], NOW, CFG)
    assert ("gone", 2) in kinds(d) and "hold-back on its account ends" in d.actions[0].reason


def test_penalties_and_hold_back_arithmetic():
    jobs = [run(2, "A", gpus=2), run(3, "B", batch=False), pend(10, "D")]
    recs = [Record(i, j, a, "a100", n, UR.HELD_BACK, None, None) for i, (j, a, n) in
            enumerate([(2, "A", 2), (3, "B", 1), (4, "C", 1)])]
    pen = UR.penalties(recs, jobs).held
    assert pen == {"A": {"a100": 2}, "B": {"a100": 1}}  # job 4 no longer runs: nothing held back
    cap = {"a100": 4, "v100": 4}
    lim = {"A": {}, "B": {"a100": 3, ANY_GPU: 3}, "C": {"v100": 1}}
    out = UR.hold_back(lim, {**pen, "D": {"a100": 1}}, cap)
    assert out["A"] == {"a100": 2, ANY_GPU: 6}  # no limit = the capacity, lowered
    assert out["B"] == {"a100": 2, ANY_GPU: 2} and out["C"] == {"v100": 1} and "D" not in out
    assert UR.hold_back({"A": {"a100": 1, ANY_GPU: 1}}, {"A": {"a100": 3}}, cap)["A"] == {"a100": 0, ANY_GPU: 0}
    # hard caps: preemption enforces the limits without the hold-back (the held-back job is not taken twice)
    assert UR.without_hold_back(out, pen) == {"A": {"a100": 4, ANY_GPU: 6}, "B": {"a100": 3, ANY_GPU: 2},
                                              "C": {"v100": 1}}


def test_the_round_lowers_the_limits_of_held_back_accounts():
    nodes = (Node("a100-1", ("MIXED",), ("gpu",), {"a100": 4}, {"a100": 4}),)
    jobs = [run(1, "A"), run(2, "A", requeue=False), run(3, "A"), run(4, "A"), pend(10, "B"), pend(11, "A")]
    s = Snapshot("22.05.8", NOW, nodes, tuple(jobs), (Account("A", 1, {}), Account("B", 1, {})), ("gpu",))
    c = config.from_dict({"preemption": {"enabled": True}})

    def dec(held):
        return P.decide(s, c, lambda problem: get_policy("equal-share")(problem), profiles=[], shipped=[],
                        deviations={}, deficits={}, managed_before=set(), last_ok_started=None, now=NOW,
                        empty_alloc=None, held_back=held)
    plain, held = dec(None), dec({"A": {"a100": 1}})
    assert held.held_back == {"A": {"a100": 1}} and plain.held_back == {}
    pa, ha = plain.planned["A"], held.planned["A"]
    assert ha["a100"] == pa.get("a100", 4) - 1 and ha[ANY_GPU] == pa.get(ANY_GPU, 4) - 1
    assert held.planned["B"] == plain.planned["B"]
    # issue 30: an account held back across all its jobs may hold no more than it runs (4), minus job 2's GPU
    rec = Record(8, 2, "A", "a100", 1, UR.HELD_BACK, None, None)
    across = dec(UR.penalties([rec], jobs))
    assert across.held_back == {"A": {"a100": 1}} and across.held_at == {"A": {"a100": 3, ANY_GPU: 3}}
    assert across.planned["A"]["a100"] <= 3 and across.planned["A"][ANY_GPU] == 3 and "B waits" in across.held_why["A"]


def test_store_keeps_held_back_records_open(tmp_path):
    with Store(tmp_path / "s.sqlite") as st:
        pid = PreemptionStore(st).add(job_id=5, account="A", gpu_type="a100", gpus=1, signal="", reason="r", grace=0,
                                      held_back=True, due=None, now=NOW, message="held back", for_job=10)
        sig = PreemptionStore(st).add(job_id=6, account="A", gpu_type="a100", gpus=1, signal="USR1", reason="r",
                                      grace=120, now=NOW)
        PreemptionStore(st).step(sig, "requeue-failed", "requeue failed", state=UR.HELD_BACK, now=NOW + 130,
                                 due=NOW + 1930)
        rows = {r.id: r.to_row() for r in PreemptionStore(st).history(since=NOW + 10_000)}
        assert rows[pid]["state"] == rows[sig]["state"] == UR.HELD_BACK
        assert rows[pid]["for_job"] == 10  # the demand it is held back for (issue 30)
        assert rows[sig]["finished_at"] is None and rows[sig]["requeue_at"] == NOW + 1930
        assert [s["step"] for s in rows[sig]["steps"]] == ["signalled", "requeue-failed"]
        assert PreemptionStore(st).next_due() is None  # hold-back: no wake-up for held-back jobs
        assert PreemptionStore(st).next_due(held_back=True) == NOW + 1930
        PreemptionStore(st).step(pid, "gone", "ended", state="gone", now=NOW + 50)
        assert {c.state: c.count for c in PreemptionStore(st).counts()} == {"gone": 1, UR.HELD_BACK: 1}
        with pytest.raises(Exception, match="state"):
            PreemptionStore(st).step(pid, "x", state="bogus")


# --------------------------------------------------------------------- issue 30 item 5: held across all its jobs
GUAR = {"A": {"a100": 2, "v100": 2}, "B": {"a100": 2, "v100": 0}}


def test_two_no_requeue_jobs_over_the_guarantee_hold_the_account_on_every_type_until_the_owed_job_runs():
    """The attack: A (a guarantee of 2 a100) runs two 2-GPU --no-requeue jobs while B waits for 2 a100. One is
    held back, the other (within what A may keep) is listed as held across all A's jobs; A's pending v100 job is
    held too (it could start on the v100 its limits left it before); when the held-back job ends first, A stays
    held at what it runs (the freed a100s are B's), and the hold-back ends only once B's job has started."""
    attack = [run(1, "A", ran=4000, requeue=False, gpus=2), run(2, "A", ran=3000, requeue=False, gpus=2),
              pend(10, "B", gpus=2), pend(20, "A", gtype="v100"), pend(21, "A", gpus=2)]
    d = decide(GUAR, attack, [], NOW, CFG)
    assert kinds(d) == [("hold-back", 2)]
    assert [(s.job_id, "held back across all its jobs" in s.reason) for s in d.skipped] == [(1, True)]
    rec = Record(8, 2, "A", "a100", 2, UR.HELD_BACK, None, None)
    hb = UR.penalties([rec], attack)
    assert hb.held == {"A": {"a100": 2}} and hb.frozen == {"A": {"a100": 2, ANY_GPU: 2}} and "B waits" in hb.why["A"]
    cap = {"a100": 8, "v100": 4}
    lim = UR.hold_back(GUAR, hb, cap)
    assert lim["A"] == {"a100": 0, "v100": 0, ANY_GPU: 2} and lim["B"] == GUAR["B"]  # v100: 2 before; A runs 4
    # the held-back job ends first: B still waits, the record stays open and A is held at what it runs
    ended = [j for j in attack if j.job_id != 2]
    assert kinds(decide(GUAR, ended, [rec], NOW, CFG)) == []
    hb = UR.penalties([rec], ended)
    assert hb.held == {} and hb.frozen == {"A": {"a100": 2, ANY_GPU: 2}}
    lim = UR.hold_back(GUAR, hb, cap)
    assert lim["A"] == {"a100": 2, "v100": 0, ANY_GPU: 2}  # A runs 2: neither job 20 nor job 21 starts
    # B's job has started: the hold-back ends (gone: the held-back job ended too), nothing is held any more
    started = [run(1, "A", ran=4000, requeue=False, gpus=2), run(10, "B", ran=10, gpus=2), pend(20, "A", "v100"),
               pend(21, "A", gpus=2)]
    d = decide(GUAR, started, [rec], NOW, CFG)
    assert kinds(d) == [("gone", 2)] and "no other account's job waits for a100" in d.actions[0].reason
    assert not UR.penalties([rec], started)


def test_the_hold_back_for_a_claim_ends_when_the_job_it_was_for_starts():
    """A claim's hold-back records the waiting job (for_job): it holds while that job waits, even if other jobs
    of the owed account have started, and ends (resolved: its job still runs) once that job runs, is gone or
    cannot start."""
    rec = Record(8, 2, "A", "a100", 2, UR.HELD_BACK, None, None, for_job=10)
    mine = [run(1, "A", ran=4000, requeue=False, gpus=2), run(2, "A", ran=3000, requeue=False, gpus=2)]
    waits = mine + [pend(10, "B", gpus=2)]
    assert UR.penalties([rec], waits).frozen == {"A": {"a100": 2, ANY_GPU: 2}}
    assert kinds(decide(GUAR, waits, [rec], NOW, CFG, reclaims=[])) == []
    for jobs, what in ((mine + [run(10, "B", ran=5, gpus=2)], "the job it was for (10, B) has started"),
                       (mine, "the job it was for (10) is gone"),
                       (mine + [dataclasses.replace(pend(10, "B", gpus=2), reason="JobHeldUser", priority=0)],
                        "the job it was for (10) cannot start")):
        assert not UR.penalties([rec], jobs + [pend(11, "B")]), what  # another B job waiting is not job 10
        d = decide(GUAR, jobs, [rec], NOW, CFG, reclaims=[])
        assert kinds(d) == [("resolve", 2)] and d.actions[0].reason.startswith(what), d.actions[0].reason
        assert d.actions[0].for_job == 10


def test_cancel_covers_the_accounts_other_non_requeueable_jobs_newest_first_as_many_as_the_owed_job_needs():
    """unrequeueable = "cancel": when the held-back job's cancel time has passed, A's other non-requeue-able jobs
    on that type (an salloc allocation too) are cancelled with it, newest first, only as many GPUs as B's job
    needs — never below A's guarantee."""
    a = [run(1, "A", ran=5000, requeue=False, gpus=2), run(2, "A", ran=4000, batch=False, gpus=2),
         run(3, "A", ran=3000, requeue=False, gpus=2)]
    rec = Record(8, 3, "A", "a100", 2, UR.HELD_BACK, None, NOW - 1)
    c = cfg(unrequeueable="cancel", cancel_grace=60)
    lim = {"A": {"a100": 2}, "B": {"a100": 4}}
    d = decide(lim, a + [pend(10, "B", gpus=4)], [rec], NOW, c)
    assert kinds(d) == [("cancel", 3), ("cancel", 2)]
    assert d.actions[1].record_id is None and "interactive allocation" in d.actions[1].reason
    # B needs only 2: the held-back job alone
    assert kinds(decide(lim, a + [pend(10, "B", gpus=2)], [rec], NOW, c)) == [("cancel", 3)]
    # a claim's job needing 6 (4 idle): the held-back job alone covers it
    rec10 = dataclasses.replace(rec, for_job=10)
    lim8 = {"A": {"a100": 2}, "B": {"a100": 8}}
    d = decide(lim8, a + [pend(10, "B", gpus=6)], [rec10], NOW, c, idle={"a100": 4})
    assert kinds(d) == [("cancel", 3)]
    # ... and needing 8 with 4 idle: one more; never A's last guarantee GPUs (job 1)
    d = decide(lim8, a + [pend(10, "B", gpus=8)], [rec10], NOW, c, idle={"a100": 4})
    assert kinds(d) == [("cancel", 3), ("cancel", 2)] and all(x.for_job == 10 for x in d.actions)


def test_why_and_explain_say_why_the_dodgers_pending_job_waits():
    """`why` (from the public status file) and `explain` name the account-wide hold-back for a pending job of a
    held-back account: on another type too, where the limit holds it at what the account runs (0)."""
    from slurm_fair.daemon.status_file import AccountStatus
    from slurm_fair.views.explain import _why
    from slurm_fair.views.why import HELD_ACROSS, explain_job
    from tests.views.test_why import status

    dodger = AccountStatus(guarantee={"v100": 2}, in_use={"k80": 4}, limits={"k80": 2, "v100": 0, "*": 2},
                           pending_gpus=1, managed=True, held_across=True)
    ex = explain_job(dataclasses.replace(pend(20, "acct_a", gtype="v100"), reason="AssocGrpGRES"),
                     status({"acct_a": dodger}), NOW)
    assert ex.verdict == "limit" and HELD_ACROSS in ex.details and "owes GPUs to starting" in ex.changes[0]
    plain = explain_job(dataclasses.replace(pend(20, "acct_a", gtype="v100"), reason="AssocGrpGRES"),
                        status({"acct_a": dataclasses.replace(dodger, held_across=False)}), NOW)
    assert HELD_ACROSS not in plain.details
    line = _why(pend(20, "A", gtype="v100"), "c", ["a100", "v100"],
                {"real": {}, "ideal": {}, "held_why": "B waits for a100 (job 2 could not be requeued)",
                 "held_at": {"a100": 2, ANY_GPU: 2}}, {"a100": 2, "v100": 0, ANY_GPU: 2}, {"a100": 4})
    assert line.startswith("held back across all its jobs") and "B waits for a100" in line and "any=2" in line


def test_a_hold_back_ends_after_hold_back_max_across_rounds():
    """Issue 41: A's guarantee is 2 A100; it runs two 2-GPU --no-requeue jobs, B's 2-GPU job waits. Before, under
    the default hold-back nothing more happened after 4, 8, 12, 16 and 20 hours: A kept 4 A100 until its jobs ended.
    Now (rounds every 5 minutes on a fake clock) the held-back job is cancelled when hold_back_max (4 h by
    default) has passed, not a round earlier; with hold_back_max = 0 it never is."""
    lim = {"A": {"a100": 2}, "B": {"a100": 2}}
    jobs = [run(1, "A", ran=8000, requeue=False, gpus=2), run(2, "A", ran=7000, requeue=False, gpus=2),
            pend(10, "B", gpus=2)]
    assert config.Config().preemption.hold_back_max == 14400

    def rounds(pc, until):
        history: list[Record] = []
        t = NOW
        while t <= NOW + until:
            d = decide(lim, jobs, history, t, pc)
            for a in d.actions:
                if a.kind == "hold-back":
                    history.append(Record(len(history) + 1, a.job_id, a.account, a.gpu_type, a.gpus, UR.HELD_BACK,
                                          None, a.due))
                elif a.kind == "cancel":
                    return t, a
            t += 300.0
        return None, None

    at, act = rounds(CFG, 20 * 3600)
    assert at == NOW + 14400 and act.job_id == 2 and "hold_back_max" in act.reason
    assert "preemption.unrequeueable = hold-back" in act.reason
    assert rounds(cfg(hold_back_max=0), 20 * 3600) == (None, None)
    assert rounds(cfg(hold_back_max=3600), 20 * 3600)[0] == NOW + 3600
    # a record held back by an earlier version (no cancel time) ends hold_back_max after it was created
    old = dataclasses.replace(Record(1, 2, "A", "a100", 2, UR.HELD_BACK, None, None), created=NOW - 14400)
    assert ("cancel", 2) in kinds(decide(lim, jobs, [old], NOW, CFG))
    assert kinds(decide(lim, jobs, [dataclasses.replace(old, created=NOW - 14000)], NOW, CFG)) == []
