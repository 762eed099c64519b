"""A pilot's SiteFactors (``limits.accounts`` set; slurm_fair/daemon/plan/priority.py ``pilot_factors``): the
pilot's jobs swap their places in Slurm's queue in the fair plan's order and take no other job's place, so no job
outside the pilot changes rank (issue 40, item 2). Hand-worked queues: final priority = base + SiteFactor."""

from __future__ import annotations

import importlib
import random
from dataclasses import replace

from slurm_fair import config
from slurm_fair.cluster.base import Account, Snapshot
from slurm_fair.daemon import plan as P
from slurm_fair.daemon.plan.priority import pilot_factors
from slurm_fair.policies import get as get_policy
from tests.conftest import NODES, job

D = importlib.import_module("slurm_fair.daemon.plan.decide")

PILOT = config.from_dict({"limits": {"accounts": ["acct_a", "acct_b"]}, "priority": {"age_floor": 0}})
ACCOUNTS = (Account("acct_a", 1, {}), Account("acct_b", 1, {}), Account("acct_c", 1, {}))


def pjob(jid, account, prio, submit, site_factor=0):
    """A pending GPU job whose priority in Slurm is ``prio`` (its SiteFactor ``site_factor`` included)."""
    return replace(job(jid, account, submit=submit, site_factor=site_factor), priority=prio)


def queue():
    """Slurm's own priorities (no SiteFactor yet): acct_c is outside the pilot.

    rank  job  account  priority
    1     1    acct_c   9000
    2     2    acct_a   8000   (submitted at 100)
    3     3    acct_c   7000
    4     4    acct_b   6000   (200)
    5     5    acct_a   5000   (300)
    6     6    acct_c   4000
    7     7    acct_b   3000   (400)
    """
    return [pjob(1, "acct_c", 9000, 50), pjob(2, "acct_a", 8000, 100), pjob(3, "acct_c", 7000, 60),
            pjob(4, "acct_b", 6000, 200), pjob(5, "acct_a", 5000, 300), pjob(6, "acct_c", 4000, 70),
            pjob(7, "acct_b", 3000, 400)]


def snapshot(jobs):
    return Snapshot("22.05.8", 1000.0, NODES, tuple(jobs), ACCOUNTS, ("gpu",))


def final(jobs, factors):
    """Each job's priority once ``factors`` are written: its base (priority - SiteFactor) + the new one (a job
    without a new factor keeps its own)."""
    return {j.job_id: j.priority - j.site_factor + factors.get(j.job_id, j.site_factor) for j in jobs}


def ranks(prio, outside):
    """job -> how many jobs are strictly above it and how many tie with it, for the jobs in ``outside``."""
    return {n: (sum(p > prio[n] for p in prio.values()), sum(p == prio[n] for p in prio.values()))
            for n in outside}


def decide(jobs, deficits):
    return P.decide(snapshot(jobs), PILOT, lambda problem: get_policy("equal-share")(problem), profiles=[],
                    shipped=[], deviations={}, deficits=deficits, managed_before=set(), last_ok_started=None,
                    now=1000.0, empty_alloc=None)


def test_the_pilot_swaps_its_own_places_in_the_fair_order_and_no_other_job_moves():
    """acct_b owes most: its jobs 4 and 7 take the pilot's two highest places (8000 and 6000), acct_a's 2 and 5
    the next two (5000 and 3000). The jobs of acct_c keep 9000, 7000, 4000: ranks 1, 3 and 6, as before."""
    jobs = queue()
    f = P.site_factors(snapshot(jobs), {"acct_b": 1000.0, "acct_a": 0.0}, PILOT)
    assert f == {4: 2000, 7: 3000, 2: -3000, 5: -2000}  # slot - base: 8000-6000, 6000-3000, 5000-8000, 3000-5000
    after = final(jobs, f)
    assert after == {1: 9000, 4: 8000, 3: 7000, 7: 6000, 2: 5000, 6: 4000, 5: 3000}
    before = final(jobs, {})
    assert ranks(after, {1, 3, 6}) == ranks(before, {1, 3, 6}) == {1: (0, 1), 3: (2, 1), 6: (5, 1)}
    # every pair of non-pilot jobs keeps its order, and the pilot's jobs are in the fair plan's order
    assert after[1] > after[3] > after[6]
    assert after[4] > after[7] > after[2] > after[5]
    # the other way round (acct_a owes most): acct_a's jobs get the high places, still none of acct_c's
    g = P.site_factors(snapshot(jobs), {"acct_a": 1000.0, "acct_b": 0.0}, PILOT)
    assert final(jobs, g) == {1: 9000, 2: 8000, 3: 7000, 5: 6000, 4: 5000, 6: 4000, 7: 3000}


def test_no_job_outside_the_pilot_gets_a_site_factor_and_the_next_round_writes_nothing_new():
    jobs = queue()
    dec = decide(jobs, {"acct_b": 1000.0})
    assert set(dec.factors) == {2, 4, 5, 7}  # acct_c's jobs 1, 3, 6: none
    assert dec.factor_changes == dec.factors
    # round 2: Slurm shows the written factors in each job's priority; the same order gives the same factors
    written = [replace(j, site_factor=dec.factors.get(j.job_id, 0),
                       priority=j.priority + dec.factors.get(j.job_id, 0)) for j in jobs]
    again = decide(written, {"acct_b": 1000.0})
    assert again.factors == dec.factors and again.factor_changes == {}


def test_a_job_with_a_factor_already_is_placed_by_its_own_priority_without_it():
    """Job 4 shows priority 106 000 with a SiteFactor of 100 000 (an earlier install's band): its own is 6000,
    and its slot is the pilot's 6000, not 106 000."""
    jobs = queue()
    jobs[3] = pjob(4, "acct_b", 106000, 200, site_factor=100000)
    f = P.site_factors(snapshot(jobs), {"acct_b": 1000.0, "acct_a": 0.0}, PILOT)
    assert final(jobs, f) == {1: 9000, 4: 8000, 3: 7000, 7: 6000, 2: 5000, 6: 4000, 5: 3000}
    assert f[4] == 2000


def test_equal_priorities_stay_equal():
    """Job 2 (acct_a) and job 3 (acct_c) both at 7000: whichever pilot job takes that place ties with job 3 as
    job 2 did; the ranks of job 3 are unchanged."""
    jobs = [pjob(2, "acct_a", 7000, 100), pjob(3, "acct_c", 7000, 60), pjob(4, "acct_b", 2000, 200)]
    f = P.site_factors(snapshot(jobs), {"acct_b": 1000.0}, PILOT)
    after = final(jobs, f)
    assert after == {2: 2000, 3: 7000, 4: 7000}
    assert ranks(after, {3}) == ranks(final(jobs, {}), {3}) == {3: (0, 2)}


def test_random_queues_keep_every_outside_jobs_rank_and_follow_the_fair_order():
    rng = random.Random(40)
    for _ in range(200):
        jobs = [pjob(i, rng.choice(["acct_a", "acct_b", "acct_c"]), rng.randint(1, 30) * 100, rng.randint(0, 999),
                     site_factor=rng.choice([0, 0, 500, -300])) for i in range(1, rng.randint(2, 25))]
        deficits = {"acct_a": rng.uniform(-50, 50), "acct_b": rng.uniform(-50, 50)}
        f = P.site_factors(snapshot(jobs), deficits, PILOT)
        outside = {j.job_id for j in jobs if j.account == "acct_c"}
        assert not set(f) & outside
        # Slurm's own order: the pilot's jobs without SiteFactor, the others as they are (theirs is kept)
        base = {j.job_id: j.priority - (0 if j.job_id in outside else j.site_factor) for j in jobs}
        assert ranks(final(jobs, f), outside) == ranks(base, outside)
        assert sorted(final(jobs, f)[j] for j in f) == sorted(base[j] for j in f)  # the same places, swapped


def test_pilot_factors_gives_the_highest_place_to_the_first_in_the_fair_order():
    jobs = [pjob(1, "acct_a", 100, 5), pjob(2, "acct_a", 300, 9), pjob(3, "acct_a", 200, 1)]
    # fair plan: 1 first, then 3 and 2 equal (submit time decides: 3 before 2)
    assert pilot_factors(jobs, {1: 9, 2: 5, 3: 5}) == {1: 200, 3: 0, 2: -200}


def test_a_capped_round_writes_the_lowered_pilot_jobs_first(monkeypatch):
    """Room for two updates of four: the two jobs that go down (2 and 5) are written, the two that go up wait;
    no acct_c job then has more pilot jobs ahead of it than Slurm's own order gives."""
    monkeypatch.setattr(D, "MAX_SITE_FACTOR_UPDATES", 2)
    jobs = queue()
    dec = decide(jobs, {"acct_b": 1000.0})
    assert dec.factors == {4: 2000, 7: 3000, 2: -3000, 5: -2000}
    assert dec.factor_changes == {2: -3000, 5: -2000} and dec.factors_deferred == 2
    partial = final(jobs, dec.factor_changes)
    for n in (1, 3, 6):
        assert ranks(partial, {n})[n][0] <= ranks(final(jobs, {}), {n})[n][0]
