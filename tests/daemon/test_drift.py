"""A GPU limit someone else set is theirs (issue 29): drift from what slurm-fair last wrote is kept, never
overwritten nor cleared; rollback and an account leaving the managed set give back only what slurm-fair wrote."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pathlib import Path

from slurm_fair.cluster.base import ANY_GPU, CLEAR
from slurm_fair.daemon import plan as P
from slurm_fair.daemon.rollback import plan_rollback
from slurm_fair.policies import get as get_policy
from slurm_fair.store import Store
from tests.conftest import CFG, job, snap


def test_drift_is_every_key_that_differs_from_what_slurm_fair_wrote():
    written = {"a": {"v100": 5, ANY_GPU: 16, "k80": CLEAR}, "b": {"v100": 3}}
    current = {"a": {"v100": 2, ANY_GPU: 16}, "b": {}}
    # a's v100 set by hand to 2; k80 was cleared by slurm-fair and is still unset; b's v100 removed by hand
    assert P.drift(current, written, ["a", "b"]) == {"a": {"v100": 2}, "b": {"v100": CLEAR}}
    assert P.drift(current, written, ["a"]) == {"a": {"v100": 2}}  # only the accounts asked about
    assert P.drift(current, {}, ["a", "b"]) == {}  # nothing written: nothing to tell


def test_a_key_slurm_fair_never_wrote_is_drift_where_it_differs_from_the_site_record():
    """Issue 40 (A): with the site limits a round honours, a never-written key is someone else's when it differs
    from them — added (k80=1 on a managed account with none recorded), changed (a left-alone account's v100 3 ->
    4) or removed — and not while it is the recorded value (left alone, or adopted as an upper bound)."""
    written = {"m": {"v100": 2, ANY_GPU: 6}}
    current = {"m": {"v100": 2, ANY_GPU: 6, "k80": 1}, "x": {"v100": 4}, "y": {}, "z": {"a100": 4}}
    own = {"m": {}, "x": {"v100": 3}, "y": {"v100": 3}, "z": {"a100": 4}}
    assert P.drift(current, written, ["m", "x", "y", "z"], own) == {
        "m": {"k80": 1}, "x": {"v100": 4}, "y": {"v100": CLEAR}}
    assert P.drift(current, written, ["m", "x", "y", "z"]) == {}  # without the record: written keys only, as before
    planned = P.pin_drift({"m": {"v100": 2, ANY_GPU: 6}}, {"m": {"k80": 1}})
    assert P.limit_changes(current, planned, {"m"}, own, written) == {}  # k80 neither cleared nor written


def test_a_hand_set_limit_is_kept_round_after_round():
    jobs = [job(i, "acct_b", gpu_type="v100", state="RUNNING", alloc={"v100": 1}) for i in range(1, 5)]
    jobs += [job(10 + i, "acct_a", gpu_type="v100", reason="Resources") for i in range(3)]

    def decide(limits, written):
        return P.decide(snap(jobs, limits=limits), CFG, lambda problem: get_policy("equal-share")(problem),
                        profiles=[], shipped=[], deviations={}, deficits={}, managed_before={"acct_a", "acct_b"},
                        last_ok_started=None, now=0.0, empty_alloc=None, written=written)

    first = decide({}, {})
    wrote = {a: dict(ch) for a, ch in first.changes.items()}
    assert wrote["acct_b"]["v100"] == 2  # equal shares: acct_a's waiting jobs claim 2 of acct_b's V100s
    # an admin sets acct_b's v100 to 1 by hand and removes acct_c's total
    by_hand = {"acct_b": {**wrote["acct_b"], "v100": 1},
               "acct_c": {k: v for k, v in wrote["acct_c"].items() if k != ANY_GPU}}
    again = decide(by_hand, wrote)
    assert again.drift == {"acct_b": {"v100": 1}, "acct_c": {ANY_GPU: CLEAR}}
    assert again.planned["acct_b"]["v100"] == 1 and ANY_GPU not in again.planned["acct_c"]
    assert again.changes == {}  # nothing written over the admin's values, nothing else moved


def test_restore_gives_back_only_what_slurm_fair_wrote():
    # recreated with k80=1 (not what slurm-fair wrote), a100 gone: nothing is set back, nothing cleared
    assert P.restore({"k80": 1}, {"a100": 4, ANY_GPU: 16}, {"a100": 2, ANY_GPU: 10, "k80": 0}) == {}
    # still as written: back to the site value, or cleared where the site had none
    assert P.restore({"a100": 2, ANY_GPU: 10}, {"a100": 4}, {"a100": 2, ANY_GPU: 10}) == {"a100": 4, ANY_GPU: CLEAR}
    # a site limit slurm-fair cleared comes back; one the admin removed since stays removed
    assert P.restore({}, {"v100": 3}, {"v100": CLEAR}) == {"v100": 3}
    assert P.restore({}, {"v100": 3}, {"v100": 1}) == {}


def test_an_account_leaving_the_managed_set_gets_its_site_limits_back_in_the_same_round():
    current = {"gone": {"v100": 2, ANY_GPU: 4, "k80": 1}}
    written = {"gone": {"v100": 2, ANY_GPU: 4, "k80": 0}}
    site = {"gone": {"v100": 6}}
    ch = P.limit_changes(current, {}, {"gone"}, site, written)
    assert ch == {"gone": {"v100": 6, ANY_GPU: CLEAR}}  # k80=1 was set by hand: left
    assert P.limit_changes(current, {}, {"gone"}) == {"gone": {"v100": CLEAR, ANY_GPU: CLEAR, "k80": CLEAR}}
    # neither record for the account (an older version's writes, or applied rows pruned before the record): as before
    assert P.limit_changes(current, {}, {"gone"}, {}, {"other": {"v100": 1}}) == {
        "gone": {"v100": CLEAR, ANY_GPU: CLEAR, "k80": CLEAR}}
    # its site limits recorded and nothing written there (issue 40: an account left alone): nothing changes
    assert P.limit_changes(current, {}, {"gone"}, site, {"other": {"v100": 1}}) == {}


def test_rollback_names_what_it_keeps(tmp_path):
    s = snap(limits={"acct_a": {"v100": 1, ANY_GPU: 4}, "acct_b": {"k80": 2}})
    rb = plan_rollback(s, {"acct_a": {}, "acct_b": {"k80": 2}}, {"acct_a", "acct_b"}, Path(tmp_path / "none"), CFG,
                       written={"acct_a": {"v100": 3, ANY_GPU: 4}, "acct_b": {"k80": 0}})
    assert rb.limits == {"acct_a": {ANY_GPU: CLEAR}}  # acct_b's k80=2: slurm-fair wrote 0, someone set 2 since
    assert rb.kept == {"acct_a": {"v100": 1}, "acct_b": {"k80": 2}}
    legacy = plan_rollback(s, {"acct_a": {}}, {"acct_a"}, Path(tmp_path / "none"), CFG)  # no record: as before
    assert legacy.limits == {"acct_a": {"v100": CLEAR, ANY_GPU: CLEAR}} and legacy.kept == {}


def test_the_store_keeps_the_last_value_written_per_key(tmp_path):
    with Store(tmp_path / "s.sqlite") as st:
        r1 = st.begin_round("equal-share")
        st.record_applied(r1, [{"account": "a", "key": "v100", "old": None, "new": 3},
                               {"account": "a", "key": ANY_GPU, "old": None, "new": 8}])
        r2 = st.begin_round("equal-share")
        st.record_applied(r2, [{"account": "a", "key": "v100", "old": 3, "new": CLEAR}])
        assert st.written() == {"a": {"v100": CLEAR, ANY_GPU: 8}}
        st.forget_written(["a"])
        assert st.written() == {}


def test_a_decision_without_a_record_of_writes_behaves_as_before():
    s = replace(snap([job(1, "acct_a", gpu_type="v100", reason="Resources")], limits={"acct_b": {"v100": 1}}))
    d = P.decide(s, CFG, lambda problem: get_policy("equal-share")(problem), profiles=[], shipped=[],
                 deviations={}, deficits={}, managed_before={"acct_b"}, last_ok_started=None, now=0.0,
                 empty_alloc=None)
    assert d.drift == {}


def test_rollback_gives_back_the_sitefactors_the_site_set(tmp_path):
    """Issue 29 item 6: rollback zeroed every SiteFactor, the site's own included. Now a job whose factor is still
    the one slurm-fair set gets back the one it had before (0 for most); one the site set since is left."""
    jobs = [replace(job(1, "acct_a", gpu_type="v100"), site_factor=500),    # slurm-fair set 500 over the site's 7
            replace(job(2, "acct_a", gpu_type="v100"), site_factor=900),    # the site set 900 since slurm-fair's 300
            replace(job(3, "acct_b", gpu_type="v100"), site_factor=40),     # slurm-fair never set it: the site's
            replace(job(4, "acct_b", gpu_type="v100"), site_factor=250)]    # slurm-fair's 250 over nothing
    s = snap(jobs)
    with Store(tmp_path / "s.sqlite") as st:
        st.record_factors({1: 500, 2: 300, 4: 250}, {1: 7, 2: 0, 4: 0}, [1, 2, 3, 4], now=1.0)
        st.record_factors({1: 500}, {1: 500}, [1, 2, 3, 4], now=2.0)  # a later change keeps the first 'before'
        rb = plan_rollback(s, {}, set(), None, CFG, {}, st.factors_set())
        assert rb.site_factors == {1: 7, 4: 0}
        st.record_factors({}, {}, [1], now=3.0)  # jobs 2-4 no longer pending: their rows go
        assert set(st.factors_set()) == {1}
    legacy = plan_rollback(s, {}, set(), None, CFG, {}, {})  # no record: every factor back to 0, as before
    assert legacy.site_factors == {1: 0, 2: 0, 3: 0, 4: 0}


def test_a_store_with_no_record_facing_gpu_limits_writes_none():
    """Issue 29: a new install on a site with limits of its own and a lost database facing an earlier install's
    look alike; nothing is written until the admin adopts or clears them (slurm-fair limits adopt | clear)."""
    from slurm_fair.daemon import unrecorded as U

    jobs = [job(i, "acct_b", gpu_type="v100", state="RUNNING", alloc={"v100": 1}) for i in range(1, 5)]
    jobs += [job(10 + i, "acct_a", gpu_type="v100", reason="Resources") for i in range(3)]
    s = snap(jobs, limits={"acct_b": {"v100": 4, ANY_GPU: 4}})

    def decide(written, site, managed):
        return P.decide(s, CFG, lambda problem: get_policy("equal-share")(problem), profiles=[], shipped=[],
                        deviations={}, deficits={}, managed_before=managed, last_ok_started=None, now=0.0,
                        empty_alloc=None, written=written, site=site)

    fresh = decide({}, {}, set())
    assert fresh.unrecorded == {"acct_b": {"v100": 4, ANY_GPU: 4}} and fresh.changes == {}
    assert fresh.plan_in_force().limits["acct_b"] == {"v100": 4, ANY_GPU: 4}  # retypes see Slurm's limits
    adopted = decide({}, U.plan_adopt(s), set())  # `limits adopt` recorded them as the site's
    assert adopted.unrecorded == {} and "acct_b" in adopted.left_alone and adopted.changes
    assert decide({"acct_b": {"v100": 4}}, {}, {"acct_b"}).unrecorded == {}  # a store with records: as before
    assert decide(None, {}, set()).unrecorded == {}  # no store given (the simulator's first round …): as before
    assert U.plan_clear(s, ["acct_b", "acct_a"]) == ({"acct_b": {"v100": CLEAR, ANY_GPU: CLEAR}}, {})
    with pytest.raises(Exception, match="no such account"):
        U.plan_clear(s, ["nobody"])
