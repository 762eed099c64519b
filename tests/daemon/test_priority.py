"""The age floor of SiteFactor (``priority.age_floor``, slurm_fair/daemon/plan/priority.py): hand-worked levels."""

from __future__ import annotations

import importlib
from dataclasses import replace

from slurm_fair import config
from slurm_fair.cluster.base import Account, Snapshot
from slurm_fair.daemon import plan as P
from slurm_fair.daemon.plan.priority import DEFICIT_TOL, aged
from slurm_fair.policies import get as get_policy
from tests.conftest import NODES, job, snap

D = importlib.import_module("slurm_fair.daemon.plan.decide")  # the module (the package exports the function)

# 10 levels, level l -> SiteFactor 100·l (min 0, max 900)
PR = {"site_factor_min": 0, "site_factor_max": 900, "levels": 10}


def case():
    """At t = 1000: acct_a owes most (deficit 50) and has one young job (1); acct_b owes little (5) and has two
    jobs pending 900 s and 800 s (2, 3) and a young one (4)."""
    jobs = [job(1, "acct_a", submit=900), job(2, "acct_b", submit=100), job(3, "acct_b", submit=200),
            job(4, "acct_b", submit=950)]
    return replace(snap(jobs), taken_at=1000.0), {"acct_a": 50.0, "acct_b": 5.0}


def test_without_the_floor_deficit_order_keeps_the_old_jobs_under_the_owed_account():
    s, deficits = case()
    f = P.site_factors(s, deficits, config.from_dict({"priority": {**PR, "age_floor": 0}}))
    # two bands of 5 levels: acct_a [5, 10) -> job 1 at 9; acct_b [0, 5) -> 2, 3, 4 at 4, 3, 2
    assert f == {1: 900, 2: 400, 3: 300, 4: 200}


def test_jobs_past_the_floor_rise_above_every_account_first_come_first():
    s, deficits = case()
    c = config.from_dict({"priority": {**PR, "age_floor": 500}})
    assert aged(s, c) == {2, 3}  # pending 900 s and 800 s; job 1 (100 s) and job 4 (50 s) are not
    f = P.site_factors(s, deficits, c)
    # three groups: the aged jobs [floor(2·10/3), 10) = [6, 10), acct_a [3, 6), acct_b [0, 3)
    # aged: 2 (submitted first) at 9, 3 at 8; acct_a's job 1 at 5; acct_b's young job 4 at 2
    assert f == {1: 500, 2: 900, 3: 800, 4: 200}
    assert min(f[2], f[3]) > max(f[1], f[4])


def test_the_floor_counts_from_submission_at_the_snapshot_time_and_skips_blocked_jobs():
    s, deficits = case()
    held = replace(s, jobs=s.jobs + (replace(job(5, "acct_a", submit=0), blocked="held"),))
    c = config.from_dict({"priority": {**PR, "age_floor": 800}})
    assert aged(held, c) == {2, 3}  # 800 s exactly counts; the held job 5 is no demand and gets no factor
    assert 5 not in P.site_factors(held, deficits, c)
    assert aged(replace(s, taken_at=999.0), c) == {2}


def test_an_account_with_only_aged_jobs_has_no_band_of_its_own():
    s = replace(snap([job(1, "acct_a", submit=0), job(2, "acct_b", submit=900)]), taken_at=1000.0)
    f = P.site_factors(s, {"acct_b": 9.0}, config.from_dict({"priority": {**PR, "age_floor": 600}}))
    # two groups: aged [5, 10) -> job 1 at 9; acct_b [0, 5) -> job 2 at 4
    assert f == {1: 900, 2: 400}


def _decide(jobs, cfg, now):
    s = Snapshot("22.05.8", now, NODES, tuple(jobs), (Account("acct_a", 1, {}), Account("acct_b", 1, {})), ("gpu",))
    return P.decide(s, cfg, lambda problem: get_policy("equal-share")(problem), profiles=[], shipped=[],
                    deviations={}, deficits={"acct_b": 1e6}, managed_before=set(), last_ok_started=None, now=now,
                    empty_alloc=None)


def test_the_update_cap_writes_the_aged_jobs_first(monkeypatch):
    """With room for one SiteFactor update in the round, the job past the floor is written even though a young
    job's factor moves further."""
    monkeypatch.setattr(D, "MAX_SITE_FACTOR_UPDATES", 1)
    cfg = config.from_dict({"priority": {**PR, "age_floor": 500}})
    # job 2 (acct_b, young) at 0 must rise to 400 (acct_b's band top); old job 1 (acct_a) at 800 must rise to 900
    jobs = [job(1, "acct_a", submit=0, site_factor=800), job(2, "acct_b", submit=900, site_factor=0)]
    d = _decide(jobs, cfg, 1000.0)
    assert d.factors == {1: 900, 2: 400}
    assert d.factor_changes == {1: 900} and d.factors_deferred == 1
    d0 = _decide(jobs, config.from_dict({"priority": {**PR, "age_floor": 0}}), 1000.0)
    assert d0.factors == {1: 400, 2: 900}  # no floor: acct_b owes more and comes first
    assert d0.factor_changes == {2: 900}  # the larger move goes first


# ------------------------------------------------------------------ equal deficits keep their order (issue 39)

def two_owed(deficit_a, deficit_b, factor_a=0, factor_b=0):
    jobs = [job(1, "acct_a", submit=900, site_factor=factor_a), job(2, "acct_b", submit=900, site_factor=factor_b)]
    return replace(snap(jobs), taken_at=1000.0), {"acct_a": deficit_a, "acct_b": deficit_b}


def test_equal_deficits_keep_last_rounds_order_across_float_noise():
    c = config.from_dict({"priority": {**PR, "age_floor": 0}})
    # round 1: deficits equal to the last bit but one: acct_b is a hair ahead, yet both are owed the same
    s, d = two_owed(100.0, 100.0 + 1e-9)
    f1 = P.site_factors(s, d, c)
    assert f1 == {1: 900, 2: 400}  # a tie: the name decides (no order before)
    # round 2: the noise turned (acct_b now a hair behind, then ahead again): the jobs keep their bands
    for noise in (-1e-9, 1e-9, 0.5):
        s2, d2 = two_owed(100.0, 100.0 + noise, factor_a=f1[1], factor_b=f1[2])
        assert P.site_factors(s2, d2, c) == f1, noise
    # the other order before is kept as well: acct_b above acct_a
    s3, d3 = two_owed(100.0, 100.0, factor_a=400, factor_b=900)
    assert P.site_factors(s3, d3, c) == {1: 400, 2: 900}


def test_a_real_difference_in_deficit_reorders_the_accounts():
    c = config.from_dict({"priority": {**PR, "age_floor": 0}})
    s, d = two_owed(100.0, 100.0 + 2 * DEFICIT_TOL, factor_a=900, factor_b=400)
    assert P.site_factors(s, d, c) == {1: 400, 2: 900}
    # a large deficit: the tolerance is a millionth of it (1e9 GPU-s: 1000 GPU-s apart are equal)
    s, d = two_owed(1e9, 1e9 + 900.0, factor_a=900, factor_b=400)
    assert P.site_factors(s, d, c) == {1: 900, 2: 400}
    s, d = two_owed(1e9, 1e9 + 1100.0, factor_a=900, factor_b=400)
    assert P.site_factors(s, d, c) == {1: 400, 2: 900}


def test_account_order_groups_from_the_largest_deficit_of_a_run():
    from slurm_fair.daemon.plan.priority import account_order
    d = {"a": 10.0, "b": 9.5, "c": 8.8, "d": 3.0}
    # a and b are within 1 GPU-s of a (a tie), c is 1.2 below a: its own group, whatever the order before
    assert account_order(d, d, {"b": 5, "a": 1, "c": 9, "d": 0}) == ["b", "a", "c", "d"]
    assert account_order(d, d, {}) == ["a", "b", "c", "d"]
