"""Demand is what could start (issue 21 item 2): held, dependent, future and reservation-bound pending jobs are
read from Slurm's fields by the backend (cluster/blocked.py, both JSON layouts and pyslurm's records) and are not
demand for shares, claims, SiteFactor or preemption (daemon/plan/eligible.py).

The JSON is real: ``tests/fixtures/slurm-json/22.05/squeue_blocked.json`` was captured on the Slurm 22.05.8 testbed
(job ids -> what they are in ``blocked.txt``: a running job, one submitted with --no-requeue, one made
non-requeue-able with ``scontrol update requeue=0``, ``--dependency=afterok:1``, ``--begin=now+1hour``, ``--hold``,
``--reservation`` of a reservation that starts in two hours, and an ``salloc`` allocation); the shared captures in
``../shared/data/slurm-json`` (22.05 and 24.11) have held jobs (``--hold``) in both layouts.
"""

from __future__ import annotations

import copy
from dataclasses import replace
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_fair import config
from slurm_fair.cluster import parse
from slurm_fair.cluster import pyslurm_backend as pb
from slurm_fair.cluster.base import Account, Job, Node, Snapshot
from slurm_fair.cluster.blocked import (BEGIN_TIME, CANNOT_START, DEPENDENCY, HELD, RESERVATION, blocked_reason,
                                       by_reason)
from slurm_fair.daemon import plan as P
from slurm_fair.daemon.plan import binding
from slurm_fair.daemon.preemption import decide as PR
from slurm_fair.policies import get as get_policy

FIX = Path(__file__).parents[1] / "fixtures"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "slurm-json"
BLOCKED_22 = FIX / "slurm-json" / "22.05" / "squeue_blocked.json"
CAPTURED_AT = 1795686430  # a few seconds after the 22.05 capture (the --begin job's eligible_time is 1795690022)


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _jobs(doc, now=None) -> dict[int, Job]:
    return {j.job_id: j for j in parse.parse_jobs(doc, now=now)}


# ------------------------------------------------------------------------------------------------ the pure rule


@pytest.mark.parametrize("kw, want", [
    ({"reason": "JobHeldUser", "priority": 0}, HELD),
    ({"reason": "JobHeldAdmin", "priority": 0}, HELD),
    ({"reason": "Priority", "hold": True}, HELD),  # 24.11's hold flag
    ({"reason": "None", "priority": 0}, HELD),  # priority 0 while pending: held (22.05 has no hold flag)
    ({"reason": "Dependency"}, DEPENDENCY),
    ({"reason": "DependencyNeverSatisfied"}, DEPENDENCY),
    ({"reason": "Priority", "dependency": "afterok:1(unfulfilled)"}, DEPENDENCY),
    ({"reason": "Priority", "dependency": "afterok:1(failed)"}, DEPENDENCY),
    ({"reason": "BeginTime"}, BEGIN_TIME),
    ({"reason": "Priority", "eligible_time": 2000, "now": 1000}, BEGIN_TIME),
    ({"reason": "Reservation", "reservation": "maint"}, RESERVATION),
    ({"reason": "ReservationDeleted"}, RESERVATION),
    ({"reason": "ReqNodeNotAvail, Reserved for maintenance", "reservation": "r1"}, RESERVATION),
    # issue 30: only an allow-list is demand; free GPUs would not start these
    ({"reason": "ReqNodeNotAvail"}, CANNOT_START),  # the nodes it asks for are down or drained
    ({"reason": "QOSGrpGRES"}, CANNOT_START),  # its QOS binds before any account limit
    *[({"reason": r}, CANNOT_START) for r in (
        "PartitionTimeLimit", "PartitionNodeLimit", "QOSMaxWallDurationPerJobLimit",
        "AssocMaxWallDurationPerJobLimit", "AssocMaxGRESPerJob", "QOSMaxGRESPerUser", "JobArrayTaskLimit",
        "BadConstraints", "PartitionDown")],
    # demand
    ({"reason": "None"}, ""),
    ({"reason": "", "priority": 5}, ""),
    ({"reason": "Priority", "priority": 1}, ""),
    ({"reason": "Resources", "dependency": "afterok:1(fulfilled)"}, ""),  # hypothetical satisfied string
    ({"reason": "AssocGrpGRES", "eligible_time": 900, "now": 1000}, ""),  # eligible since 900
    ({"reason": "AssocGrpTRES"}, ""),
    ({"reason": "Priority", "eligible_time": 2000}, ""),  # no "now" given: only the reason counts
])
def test_rule(kw, want):
    assert blocked_reason(state="PENDING", **kw) == want


def test_rule_only_for_pending_jobs_and_reason_fallback():
    assert blocked_reason(state="RUNNING", reason="None", priority=0, hold=True) == ""
    assert by_reason("JobHeldUser") == HELD and by_reason("Priority") == "" and by_reason("") == ""
    # a Job record without the backend's field (simulator, hand-built) falls back to the reason
    j = Job(1, "n", "a", "u", "gpu", "PENDING", "Dependency", 5, 0, None, 1, 1, None)
    assert P.blocked_kind(j) == DEPENDENCY and not P.startable(j) and not P.counted(j)


# ------------------------------------------------------------------------------------------------ real JSON


def test_22_05_capture_of_every_kind():
    jobs = _jobs(_load(BLOCKED_22), now=CAPTURED_AT)
    kinds = {jid: j.blocked for jid, j in jobs.items()}
    assert kinds == {1: "", 2: "", 3: "", 4: DEPENDENCY, 5: BEGIN_TIME, 6: HELD, 7: RESERVATION, 8: ""}
    assert [jid for jid, j in jobs.items() if P.startable(j)] == []  # every pending job there is blocked
    assert {jid: (j.requeue, j.batch) for jid, j in jobs.items() if j.running} == {
        1: (True, True), 2: (False, True), 3: (False, True),  # --no-requeue; scontrol update requeue=0
        8: (True, False)}  # salloc: Slurm says requeue=true, but it is no batch job: it can never be requeued


def test_22_05_begin_time_also_from_eligible_time_alone():
    doc = _load(BLOCKED_22)
    rec = next(r for r in doc["jobs"] if r["job_id"] == 5)
    rec["state_reason"] = "Priority"  # before slurmctld's next pass sets the reason
    assert parse.parse_job(rec, now=CAPTURED_AT).blocked == BEGIN_TIME
    assert parse.parse_job(rec, now=rec["eligible_time"] + 1).blocked == ""  # its time came


@pytest.mark.parametrize("release, held, demand, qos_bound",
                         [("22.05", {10, 11}, {5}, 9), ("24.11", {14, 15}, {9}, 13)])
def test_shared_captures_held_in_both_layouts(release, held, demand, qos_bound):
    path = SHARED / release / "squeue.json"
    if not path.exists():
        pytest.skip(f"{path} not here (the shared data folder is not next to this checkout)")
    doc = _load(path)
    jobs = _jobs(doc)
    assert {jid for jid, j in jobs.items() if j.blocked == HELD} == held
    assert {jid for jid, j in jobs.items() if j.pending and P.startable(j)} == demand
    # its QOS's GrpTRES binds before any account limit: free GPUs would not start it (issue 30's allow-list)
    assert jobs[qos_bound].reason == "QOSGrpGRES" and jobs[qos_bound].blocked == CANNOT_START
    assert all(j.batch and j.requeue for j in jobs.values())
    if release == "24.11":
        # 24.11 also says so with its hold flag and a {set, infinite, number} priority of 0: either alone suffices
        rec = copy.deepcopy(next(r for r in doc["jobs"] if r["job_id"] == 14))
        rec["state_reason"] = "None"
        assert parse.parse_job(rec).blocked == HELD
        rec["hold"] = False
        assert parse.parse_job(rec).blocked == HELD  # priority {"number": 0}
        rec["priority"] = {"set": True, "infinite": False, "number": 4990}
        assert parse.parse_job(rec).blocked == ""
        # the 24.11 capture's --begin=now+1hour job (cancelled before the capture): its NUM eligible_time is read
        beg = copy.deepcopy(next(r for r in doc["jobs"] if r["job_id"] == 16)) if any(
            r["job_id"] == 16 for r in doc["jobs"]) else None
        if beg is None:
            beg = copy.deepcopy(next(r for r in _load(SHARED / release / "squeue_all.json")["jobs"]
                                     if r["job_id"] == 16))
        beg["job_state"], beg["state_reason"] = ["PENDING"], "Priority"
        at = beg["eligible_time"]["number"]
        assert parse.parse_job(beg, now=at - 60).blocked == BEGIN_TIME and parse.parse_job(beg, now=at).blocked == ""


def test_pyslurm_legacy_records_read_the_same_fields():
    fix = json.loads((FIX / "pyslurm-22.5" / "legacy.json").read_text())
    jobs = {j.job_id: j for j in parse.parse_jobs({"jobs": [pb._job_record(r) for r in fix["jobs"].values()]},
                                                  now=1795335300)}
    assert jobs[27].blocked == HELD and jobs[29].blocked == "" and jobs[29].batch  # batch_flag 1 (int)
    assert parse.parse_job(pb._job_record({**fix["jobs"]["29"], "batch_flag": 0})).batch is False


# ------------------------------------------------------------------------------------------------ planning

NODES = (Node("a100-1", ("IDLE",), ("gpu",), {"a100": 4}, {}), Node("v100-1", ("IDLE",), ("gpu",), {"v100": 4}, {}),
         Node("k80-1", ("IDLE",), ("gpu",), {"k80": 4}, {}), Node("mixed-1", ("IDLE",), ("gpu",), {"k80": 4}, {}))


def job(jid, account, gpus=1, gpu_type=None, state="PENDING", reason="Priority", blocked="", submit=1000):
    return Job(jid, "j", account, "u", "gpu", state, reason, 0 if blocked == HELD else 1, submit,
               None if state == "PENDING" else submit + 1, gpus, 1, gpu_type,
               {gpu_type or "k80": gpus} if state == "RUNNING" else {}, blocked=blocked, requeue=True)


def _decide(jobs, cfg):
    s = Snapshot("22.05.8", 2000.0, NODES, tuple(jobs),
                 (Account("acct_a", 1, {}), Account("acct_b", 1, {}), Account("acct_c", 1, {})), ("gpu",))
    return P.decide(s, cfg, lambda problem: get_policy("equal-share")(problem), profiles=[], shipped=[],
                    deviations={}, deficits={"acct_a": 1e6}, managed_before=set(), last_ok_started=None, now=2000.0,
                    empty_alloc=None)


def test_a_held_flood_gets_no_share_claim_or_sitefactor():
    """The issue's testbed case: an account with only six --hold 1-GPU jobs (the backend marks them held, Slurm's
    reason is JobHeldUser) next to an account with runnable jobs for every GPU: the flood gets nothing."""
    flood = [job(i, "acct_a", 1, None, reason="JobHeldUser", blocked=HELD) for i in range(1, 7)]
    other = [job(100 + i, "acct_b", 1, None) for i in range(16)]
    other_dep = [job(200, "acct_c", 1, None, reason="Dependency", blocked=DEPENDENCY),
                 job(201, "acct_c", 1, None, reason="BeginTime", blocked=BEGIN_TIME),
                 job(202, "acct_c", 1, None, reason="Reservation", blocked=RESERVATION)]
    d = _decide(flood + other + other_dep, config.from_dict({"preemption": {"enabled": True}}))
    assert {a for (a, _c) in d.demand} == {"acct_b"}
    assert sum(d.plan.ideal.get("acct_a", {}).values()) == 0 and sum(d.plan.real.get("acct_a", {}).values()) == 0
    assert sum(d.plan.real["acct_b"].values()) == 16
    assert set(d.factors) == set(range(100, 116))  # no SiteFactor band for acct_a (largest deficit) or acct_c
    assert d.not_demand == {"acct_a": {HELD: 6}, "acct_c": {BEGIN_TIME: 1, DEPENDENCY: 1, RESERVATION: 1}}
    # released (the next snapshot shows them startable): they count
    released = [job(i, "acct_a", 1, None) for i in range(1, 7)]
    d2 = _decide(released + other, config.from_dict({}))
    assert sum(d2.plan.ideal["acct_a"].values()) == pytest.approx(6) and d2.not_demand == {}
    assert set(d2.factors) >= set(range(1, 7))


def test_held_jobs_trigger_no_preemption():
    """acct_b runs on all four a100s above its guarantee; acct_a waits only with held a100 jobs: nobody is
    signalled. The same jobs released: acct_b's newest job is."""
    running = [job(10 + i, "acct_b", 1, "a100", state="RUNNING", submit=i) for i in range(4)]
    held = [job(1, "acct_a", 1, "a100", reason="JobHeldUser", blocked=HELD),
            job(2, "acct_a", 1, "a100", reason="Priority", blocked=HELD)]
    pc = config.from_dict({"preemption": {"enabled": True, "min_runtime": 0}}).preemption
    guarantees = {"acct_a": {"a100": 2}, "acct_b": {"a100": 2}}
    d = PR.decide(guarantees, running + held, [], 5000.0, pc)
    assert d.of("signal") == [] and d.waiting["a100"] == 0
    ready = [job(1, "acct_a", 1, "a100"), job(2, "acct_a", 1, "a100")]
    d2 = PR.decide(guarantees, running + ready, [], 5000.0, pc)
    assert [a.job_id for a in d2.of("signal")] == [13, 12]

_TEXT = st.text(max_size=40)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(state=st.sampled_from(["PENDING", "RUNNING", "COMPLETING", ""]), reason=_TEXT,
       priority=st.one_of(st.none(), st.integers(-5, 2**32)), hold=st.booleans(), dependency=_TEXT,
       eligible=st.one_of(st.none(), st.integers(0, 2**40)), reservation=_TEXT,
       now=st.one_of(st.none(), st.floats(0, 2**40)))
def test_rule_is_total_and_only_for_pending_jobs(state, reason, priority, hold, dependency, eligible, reservation,
                                                 now):
    kind = blocked_reason(state=state, reason=reason, priority=priority, hold=hold, dependency=dependency,
                          eligible_time=eligible, reservation=reservation, now=now)
    assert kind in ("", HELD, DEPENDENCY, BEGIN_TIME, RESERVATION, CANNOT_START)
    assert state == "PENDING" or kind == ""
    if state == "PENDING" and (hold or priority == 0):
        assert kind != ""


@settings(max_examples=100, deadline=None, derandomize=True)
@given(dependency=st.one_of(st.none(), st.integers(), _TEXT, st.lists(_TEXT, max_size=2)),
       resv=st.one_of(st.none(), st.integers(), _TEXT))
def test_odd_dependency_and_reservation_values_never_stop_parsing(dependency, resv):
    """A user sets the dependency and the reservation name: whatever Slurm prints there, the job parses."""
    rec = copy.deepcopy(next(r for r in _load(BLOCKED_22)["jobs"] if r["job_id"] == 4))
    rec["dependency"], rec["resv_name"] = dependency, resv
    job = parse.parse_job(rec, now=CAPTURED_AT)
    assert job.blocked == DEPENDENCY  # its reason still says so


def test_a_requeued_job_counts_while_its_begin_time_is_due_within_a_round():
    """Slurm holds a requeued job on a begin time it sets at the requeue (121 s ahead by default): due within a
    round, it stays demand, so its account's demand does not drop right after a reclaim (issue 28). The restart
    count decides nothing (issue 41): the same requeued job moved a year ahead by its owner is not demand, and a
    --begin job due within the round is."""
    T = 2000
    requeued = replace(job(1, "acct_a", 2, "v100", reason="BeginTime", blocked=BEGIN_TIME), restart_count=1,
                       begin_time=T + 121)
    later = replace(requeued, job_id=4, begin_time=T + 365 * 86400)
    fresh = replace(job(2, "acct_a", 1, "v100", reason="BeginTime", blocked=BEGIN_TIME), begin_time=T + 60)
    unknown = replace(job(5, "acct_a", 1, "v100", reason="BeginTime"), restart_count=3)  # Slurm gave no time
    assert not P.startable(requeued) and not P.startable(unknown)  # before the round settles them
    s = binding.settle(Snapshot("22.05.8", T, NODES, (requeued, later, fresh, unknown), (), ("gpu",)), T + 300, {})
    got = {j.job_id: P.startable(j) for j in s.jobs}
    assert got == {1: True, 4: False, 2: True, 5: False}
    d = _decide([*s.jobs, job(3, "acct_b", 1, None)], config.from_dict({}))
    assert d.demand[("acct_a", "j")].pending_gpus == 3
    assert d.not_demand == {"acct_a": {BEGIN_TIME: 3}}


def test_jobs_slurm_would_not_start_on_free_gpus_are_not_demand():
    """Issue 30 item 1: four 2-GPU V100 jobs over their QOS's MaxWall (Slurm reason
    QOSMaxWallDurationPerJobLimit: they can never start) got their account a guarantee of 6 V100 and set every
    other account's V100 limit to 0. Now they are not demand: no share, no claim, named in not_demand."""
    stuck = [job(30 + i, "acct_c", 2, "v100", reason="QOSMaxWallDurationPerJobLimit", blocked=CANNOT_START)
             for i in range(4)]
    busy = [job(10 + i, "acct_a", 1, "v100", state="RUNNING", submit=i) for i in range(2)]
    d = _decide(busy + stuck, config.from_dict({}))
    assert ("acct_c", "j") not in d.demand
    assert sum(d.plan.real.get("acct_c", {}).values()) == 0 and not any(d.plan.claims.get("acct_c", {}).values())
    assert d.not_demand == {"acct_c": {CANNOT_START: 8}}
    assert all(j not in d.factors for j in range(30, 34))  # no SiteFactor band either


def test_begin_time_is_read_from_eligible_time_in_both_layouts():
    """Issue 41: the round settles a begin time against the next round, so the backend records it: 22.05's plain
    int and 24.11's {set, infinite, number}; 0 (a held job) is no begin time."""
    j22 = _jobs(_load(BLOCKED_22), now=CAPTURED_AT)
    assert j22[5].begin_time == 1795690022 and j22[5].blocked == BEGIN_TIME
    assert j22[6].begin_time is None and j22[6].blocked == HELD  # --hold: eligible_time 0
    assert j22[1].begin_time is None  # running
    j24 = _jobs(_load(FIX / "slurm-json" / "24.11" / "squeue_all.json"))
    assert j24[9].begin_time == 1795320656 and j24[9].reason == "AssocGrpGRES"
    assert j24[14].begin_time is None and j24[14].blocked == HELD
