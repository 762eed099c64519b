"""Guarantee flips (issue 28): problem fingerprints and the flip counts over a series of rounds."""

from __future__ import annotations

import dataclasses

import pytest

from slurm_fair.fairness.stability import Fingerprint, fingerprint, flips
from slurm_fair.model import problem_from_dict
from slurm_fair.records import RoundDetails
from slurm_fair.store import RoundPoint


def _problem(demand_b=4, cap_v=8, weight_a=1.0):
    return problem_from_dict({
        "gpu_types": {"k80": 8, "v100": cap_v},
        "tenants": [
            {"name": "A", "weight": weight_a, "classes": [{"name": "x", "throughput": {"k80": 1, "v100": 3}, "demand": 6}]},
            {"name": "B", "classes": [{"name": "y", "throughput": {"k80": 1, "v100": 2}, "demand": demand_b}]},
        ]})


ROWS = {("a", "x"): ("A", "x"), ("b", "y"): ("B", "y")}


def test_fingerprint_moves_with_what_the_policy_sees():
    base = fingerprint(_problem(), ROWS)
    assert base == fingerprint(_problem(), ROWS)
    b4 = fingerprint(_problem(demand_b=5), ROWS)  # b's demand moved: b's hash and the problem's, not a's
    assert b4.accounts["a"] == base.accounts["a"] and b4.accounts["b"] != base.accounts["b"]
    assert b4.problem != base.problem and b4.capacity == base.capacity
    cap = fingerprint(_problem(cap_v=4), ROWS)  # capacity: the problem's hash, not the accounts'
    assert cap.accounts == base.accounts and cap.capacity != base.capacity and cap.problem != base.problem
    w = fingerprint(_problem(weight_a=2.0), ROWS)
    assert w.accounts["a"] != base.accounts["a"]
    assert Fingerprint.from_json(base.as_json()) == base
    assert Fingerprint.from_json(None) is None and Fingerprint.from_json({"problem": 1}) is None


def _point(i, status="ok", **values):
    return RoundPoint(i, float(i), float(i) + 1.0, "oef-coop", status, None, None, None, None, values=values)


def _round(i, fp, real, status="ok", **more):
    return _point(i, status, fingerprint=fp.as_json(), real=real, **more)


def test_flip_counts_by_hand():
    p0 = fingerprint(_problem(), ROWS)
    p1 = fingerprint(_problem(demand_b=5), ROWS)
    rows = [
        _round(1, p0, {"a": {"k80": 4, "v100": 4}, "b": {"k80": 4, "v100": 4}}),
        # same problem, a's v100 4 -> 3 and b's 4 -> 5: two flips of (a) and of (b), of 4 account-types
        _round(2, p0, {"a": {"k80": 4, "v100": 3}, "b": {"k80": 4, "v100": 5}}),
        _point(3, "error", fingerprint=None, real={}),  # skipped
        # b's demand moved: (a) not counted; a's own inputs unchanged: a's k80 4 -> 2 is a flip of (b);
        # b's change is not counted (its inputs moved)
        _round(4, p1, {"a": {"k80": 2, "v100": 3}, "b": {"k80": 6, "v100": 5}}),
        _round(5, p1, {"a": {"k80": 2, "v100": 3}, "b": {"k80": 6, "v100": 5}}),  # nothing moved
    ]
    c = flips(rows)
    assert c.pairs == 3
    assert (c.same_problem, c.flips_same_problem) == (8, 2)
    assert (c.same_account, c.flips_same_account) == (4 + 2 + 4, 2 + 1)
    assert c.changed == 4 and c.account_type_rounds == 12
    assert c.rate_same_problem == pytest.approx(0.25)
    assert c.examples[0] == (2, "a", "v100", 4, 3)
    js = c.as_json()
    assert js["rate_same_account"] == pytest.approx(0.3) and js["examples"][0] == [2, "a", "v100", 4, 3]
    assert c.ideal_moved_same_problem == 0 and c.rounding_flips_same_account == 0  # no ideal recorded


def test_ideal_splits_the_policys_flips_from_the_roundings():
    p0 = fingerprint(_problem(), ROWS)
    r1 = _round(1, p0, {"a": {"k80": 4, "v100": 4}, "b": {"k80": 4, "v100": 4}},
                ideal={"a": {"k80": 4.0, "v100": 3.5}, "b": {"k80": 4.0, "v100": 4.5}})
    # a's v100 ideal stays 3.5 but its guarantee 4 -> 3 (the rounding); b's ideal moves 4.5 -> 5.2 (the policy)
    r2 = _round(2, p0, {"a": {"k80": 4, "v100": 3}, "b": {"k80": 4, "v100": 5}},
                ideal={"a": {"k80": 4.0, "v100": 3.5}, "b": {"k80": 4.0, "v100": 5.2}})
    c = flips([r1, r2])
    assert c.flips_same_problem == 2
    assert c.ideal_moved_same_problem == 1 and c.rounding_flips_same_account == 1


def test_rounds_without_fingerprint_break_the_chain_and_details_work_too():
    p0 = fingerprint(_problem(), ROWS)
    old = _point(2, fingerprint=None, real={"a": {"k80": 0}})
    rows = [_round(1, p0, {"a": {"k80": 4}}), old, _round(3, p0, {"a": {"k80": 1}})]
    assert flips(rows).pairs == 0
    d = [RoundDetails(real={"a": {"k80": 4}}, fingerprint=p0.as_json()),
         RoundDetails(real={"a": {"k80": 3}, "c": {"k80": 1}}, fingerprint=p0.as_json())]
    c = flips(d)
    # an account-type absent in one round counts as 0 there
    assert (c.same_problem, c.flips_same_problem) == (2, 2)
    assert flips([]) == dataclasses.replace(flips([]))


def test_round_details_keep_the_fingerprint_and_older_rounds_read_without_one():
    fp = fingerprint(_problem(), ROWS).as_json()
    d = RoundDetails(policy="oef-coop", fingerprint=fp)
    assert RoundDetails.from_json(d.to_json()).fingerprint == fp
    assert "fingerprint" not in RoundDetails(policy="x").to_json()
    assert RoundDetails.from_json({"policy": "x"}).fingerprint is None
