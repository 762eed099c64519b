"""Reclaim that delivers on real Slurm (issue 39): time limits read the same whichever scheduler started a job,
freed GPUs requeued only when they reach the claimant in Slurm's order, protection that follows the type."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from slurm_fair.cluster.base import YEAR_MINUTES, Job
from slurm_fair.cluster.parse import parse_jobs
from slurm_fair.config import PreemptionConfig
from slurm_fair.daemon.plan.demand import FreeGPUs
from slurm_fair.daemon.preemption import victims as V
from slurm_fair.daemon.preemption.decide import decide
from slurm_fair.daemon.preemption.order import first_taker
from slurm_fair.daemon.preemption.record import REQUEUED
from tests.conftest import VERSIONS, text
from tests.daemon.preemption.test_decide import NOW, kinds, on, pend, run, signalled

CFG = PreemptionConfig(enabled=True, grace=5, min_runtime=0, signal="USR1", max_jobs_per_round=10,
                       upgrade_cost=300)


# ------------------------------------------------------------------ 365 days (backfill) = UNLIMITED (main scheduler)

def _running_with_limit(version: str, limit) -> Job:
    """The capture's first running GPU job, its ``time_limit`` replaced by ``limit`` as Slurm writes it."""
    data = json.loads(text(version, "squeue.json"))
    first = next(j.job_id for j in parse_jobs(data) if j.running)
    rec = dict(next(r for r in data["jobs"] if r["job_id"] == first))
    rec["time_limit"] = limit
    (job,) = [j for j in parse_jobs({**data, "jobs": [rec]}) if j.running] or [None]
    assert job is not None
    return job


@pytest.mark.parametrize("version", VERSIONS)
def test_backfills_year_and_unlimited_both_read_as_no_limit(version):
    year = YEAR_MINUTES
    if version == "22.05":
        forms = {"backfill": year, "unlimited": 4294967295}
    else:
        forms = {"backfill": {"set": True, "infinite": False, "number": year},
                 "unlimited": {"set": True, "infinite": True, "number": 0}}
    got = {k: _running_with_limit(version, v).time_limit for k, v in forms.items()}
    assert got == {"backfill": None, "unlimited": None}
    # a real limit is kept (30 minutes, and a day short of a year)
    short = {"set": True, "infinite": False, "number": 30} if version == "24.11" else 30
    assert _running_with_limit(version, short).time_limit == 30
    assert Job(1, "j", "a", "u", "p", "RUNNING", "", 1, 0, 0, 1, 1, None, time_limit=year - 1440).time_limit \
        == year - 1440


def test_the_gain_of_a_requeue_does_not_depend_on_which_scheduler_started_the_victim():
    # the numbers: two identical jobs that ran 10 s, one started by backfill (365-00:00:00), one by the
    # main scheduler (UNLIMITED): before, 31 535 985 GPU-s against 5; now both "as long again as it ran"
    by_backfill = replace(run(1, "A", "v100", 1, ran=10.0), time_limit=YEAR_MINUTES)
    by_main = replace(run(2, "A", "v100", 1, ran=10.0), time_limit=None)
    assert by_backfill.time_limit is None
    assert V.expected_left(by_backfill, NOW) == V.expected_left(by_main, NOW) == 10.0
    assert V.pays(1, [by_backfill], NOW, CFG) == (False, V.pays(1, [by_main], NOW, CFG)[1])
    # a job with a real limit: its limit less what it ran
    assert V.expected_left(replace(by_main, time_limit=60), NOW) == 3600.0 - 10.0


# ------------------------------------------------------------------ who takes the freed GPUs, in Slurm's order

def _nodes():
    # Slurm's node order: a100-1 first (lowest Weight / slurm.conf order), then v100-1
    idle = {"a100-1": {"a100": 0}, "v100-1": {"v100": 0}}
    size = {"a100-1": {"a100": 4}, "v100-1": {"v100": 4}}
    return idle, size


def _prio(job: Job, p: int) -> Job:
    return replace(job, priority=p)


def test_an_untyped_job_of_higher_priority_takes_freed_gpus_unless_its_total_binds_it():
    idle, size = _nodes()
    claimant = _prio(pend(99, "B", "v100"), 10)
    other = _prio(pend(50, "C", None), 20)  # untyped, higher priority: typed limits do not bind it
    freed = {"v100-1": {"v100": 1}}
    lim = {"C": {"v100": 0, "*": 4}}
    assert first_taker(claimant, freed, idle, size, [claimant, other], lim, {}) == other
    # its total bounds it (what it holds now): the freed V100 reaches B
    assert first_taker(claimant, freed, idle, size, [claimant, other], {"C": {"v100": 0, "*": 2}},
                       {"C": {"k80": 2}}) is None
    # a typed job of C is bound by its typed limit
    typed = _prio(pend(51, "C", "v100"), 20)
    assert first_taker(claimant, freed, idle, size, [claimant, typed], lim, {}) is None
    # lower priority: B's job goes first
    assert first_taker(claimant, freed, idle, size, [claimant, _prio(other, 5)], lim, {}) is None
    # an idle GPU elsewhere takes the other job first (node order: a100-1 has one idle)
    idle2 = {"a100-1": {"a100": 1}, "v100-1": {"v100": 0}}
    assert first_taker(claimant, freed, idle2, size, [claimant, other], lim, {}) is None


def _two_claims():
    """A holds every GPU; B's untyped job 98 (priority 30) was freed an A100 (victim 1), C's untyped job 99
    (priority 20) a V100 (victim 2). Slurm would start B's job first, on the first node with a free GPU."""
    jobs = [on(run(1, "A", "a100", 1, ran=7200), **{"a100-1": 1}), on(run(2, "A", "v100", 1, ran=7200),
                                                                         **{"v100-1": 1}),
            _prio(pend(98, "B", None), 30), _prio(pend(99, "C", None), 20)]
    recs = [replace(signalled(1, 1, "A", "a100", 1, ago=200), for_job=98),
            replace(signalled(2, 2, "A", "v100", 1, ago=200), for_job=99)]
    idle, size = _nodes()
    return jobs, recs, FreeGPUs(idle, size)


def test_claims_are_requeued_in_slurms_order_one_after_another_when_they_would_cross():
    jobs, recs, free = _two_claims()
    lim = {"B": {"*": 1}, "C": {"*": 1}}
    # B's job is first in Slurm's order and takes the first free GPU: both freed at once, it would land on the
    # A100 (a100-1 is first), and C's on the V100 — as meant. Requeued together.
    d = decide({"A": {}, "B": {"a100": 1}, "C": {"v100": 1}}, jobs, recs, NOW, CFG, reclaims=[], free=free,
               slurm_limits=lim)
    assert sorted(kinds(d)) == [("requeue", 1), ("requeue", 2)]
    # the node order the other way round (v100-1 first): B's job would take the V100 freed for C. B's claim
    # is requeued now; C's waits a round (it is listed neither as requeued nor as resolved)
    free2 = FreeGPUs({"v100-1": {"v100": 0}, "a100-1": {"a100": 0}}, {"v100-1": {"v100": 4}, "a100-1": {"a100": 4}})
    d = decide({"A": {}, "B": {"a100": 1}, "C": {"v100": 1}}, jobs, recs, NOW, CFG, reclaims=[], free=free2,
               slurm_limits=lim)
    assert kinds(d) == [("requeue", 1)]
    # nothing else requeued (B's claim already served): C's is resolved, naming the job that would take its GPUs
    d = decide({"A": {}, "B": {"a100": 1}, "C": {"v100": 1}}, jobs, recs[1:], NOW, CFG, reclaims=[], free=free2,
               slurm_limits={"B": {"*": 2}, "C": {"*": 1}})
    assert kinds(d) == [("resolve", 2)] and "job 98 of B" in d.actions[0].reason
    # B bounded by its total (what it holds): C's claim is requeued
    d = decide({"A": {}, "B": {"a100": 1}, "C": {"v100": 1}}, jobs, recs[1:], NOW, CFG, reclaims=[], free=free2,
               slurm_limits={"B": {"*": 0}, "C": {"*": 1}})
    assert kinds(d) == [("requeue", 2)]


# ------------------------------------------------------------------ protection follows what was reclaimed

def test_protection_covers_the_type_that_was_reclaimed_not_the_job_wherever_it_landed():
    freed_for = replace(signalled(7, 55, "B", gtype="a100", gpus=1, ago=120.0, state=REQUEUED,
                                  requeued_at=NOW - 100.0), for_job=111)
    on_a100 = run(111, "C", "a100", 1, ran=90.0)
    on_v100 = run(111, "C", "v100", 1, ran=90.0)  # untyped: Slurm put it on a V100 freed for someone else
    assert "reclaimed for it" in V.blockers([on_a100], [freed_for], NOW, CFG)[111]
    assert V.blockers([on_v100], [freed_for], NOW, CFG) == {}
    assert V.reclaimed_for([freed_for], 111, NOW, {"v100"}) is None
    assert V.reclaimed_for([freed_for], 111, NOW, {"a100"}) == NOW - 100.0


# ------------------------------------------------------------------ the untyped total is held in the requeue round only

def test_requeuing_is_the_round_a_reclaims_grace_is_over():
    from slurm_fair import config
    from slurm_fair.daemon.preemption.carry import requeuing
    from slurm_fair.daemon.preemption.store import PreemptionStore
    from slurm_fair.store import Store

    cfg = config.from_dict({"preemption": {"enabled": True, "grace": 120}})
    with Store(":memory:") as store:
        ps = PreemptionStore(store)
        assert not requeuing(store, 1000.0, cfg)
        ps.add(job_id=1, account="A", gpu_type="v100", gpus=1, signal="USR1", reason="r", grace=120, now=1000.0,
               for_job=99)
        ps.add(job_id=2, account="A", gpu_type="k80", gpus=1, signal="USR1", reason="move", grace=10, now=1000.0,
               target_type="v100")  # an upgrade move: no reclaim
        assert not requeuing(store, 1060.0, cfg)  # in its grace: nothing is freed yet
        assert requeuing(store, 1120.0, cfg)  # grace over: its victims may be requeued this round
        [rec] = [r for r in ps.rows(job_id=1)]
        ps.step(rec.id, "requeued", "grace over", state="requeued", now=1121.0)
        assert not requeuing(store, 1200.0, cfg)  # done
