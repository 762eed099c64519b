"""Slurm's multifactor priority model (sim/fairshare.py) against hand-worked numbers."""

from __future__ import annotations

import math

import pytest

from slurm_fair.errors import InputError
from slurm_fair.sim.fairshare import (
    Assoc, Multifactor, PriorityWeights, age_factor, billing, classic, decay, fair_tree, level_fs, new_usage,
    priority, speed_weights, types_by_speed)


def u(name, shares=1.0, usage=0.0):
    return Assoc(name, shares, usage)


def acct(name, shares, *children, usage=0.0):
    return Assoc(name, shares, usage, tuple(children))


def test_fair_tree_three_accounts():
    # A (1 share): a1 10, a2 30 -> usage 40; B (1): no usage; C (2): c1 (1 share) 20, c2 (3 shares) 20. Total 80.
    # Level FS: A = 0.25 / 0.5 = 0.5; B = inf; C = 0.5 / 0.5 = 1  -> B, C, A.
    # In B both users inf (tied): rank 6, 6. In C: c2 = 0.75/0.5 = 1.5, c1 = 0.25/0.5 = 0.5 -> ranks 4, 3.
    # In A: a1 = 0.5/0.25 = 2, a2 = 0.5/0.75 -> ranks 2, 1. N = 6.
    root = acct("root", 1, acct("A", 1, u("a1", 1, 10), u("a2", 1, 30)), acct("B", 1, u("b1"), u("b2")),
                acct("C", 2, u("c1", 1, 20), u("c2", 3, 20)))
    f = fair_tree(root)
    assert f == pytest.approx({"A/a1": 2 / 6, "A/a2": 1 / 6, "B/b1": 1.0, "B/b2": 1.0, "C/c1": 3 / 6, "C/c2": 4 / 6})
    lv = level_fs(root)
    assert lv["A"] == pytest.approx(0.5) and lv["C"] == pytest.approx(1.0) and lv["B"] == math.inf
    assert lv["C/c2"] == pytest.approx(1.5) and lv["A/a2"] == pytest.approx(0.5 / 0.75)


def test_fair_tree_tied_accounts_rank_like_slurm():
    # X and Y have no usage (inf, tied); Z used everything. x1 rank 3; y1 starts tied -> rank 3; z1 gets the
    # rank left, 1 (not 2): Slurm's ranks skip over ties.
    root = acct("root", 1, acct("X", 1, u("x1")), acct("Y", 1, u("y1")), acct("Z", 1, u("z1", 1, 10)))
    assert fair_tree(root) == pytest.approx({"X/x1": 1.0, "Y/y1": 1.0, "Z/z1": 1 / 3})


def test_fair_tree_user_tied_with_sibling_account():
    # u (10 of 20) and K (10 of 20) both Level FS 1: the user goes first (rank 3), K's highest user ties with it;
    # k1 = 0.5/0.2 = 2.5, k2 = 0.5/0.8 -> rank 1.
    root = acct("root", 1, u("u", 1, 10), acct("K", 1, u("k1", 1, 2), u("k2", 1, 8)))
    assert fair_tree(root) == pytest.approx({"u": 1.0, "K/k1": 1.0, "K/k2": 1 / 3})


def test_fair_tree_zero_usage_and_zero_shares():
    root = acct("root", 1, acct("A", 1, u("a1"), u("a2")), acct("B", 1, u("b1")))
    assert fair_tree(root) == {"A/a1": 1.0, "A/a2": 1.0, "B/b1": 1.0}  # nobody used anything: all tied
    # a zero-share account ranks last (Level FS 0) even without usage
    root = acct("root", 1, acct("A", 0, u("a1")), acct("B", 1, u("b1", 1, 5)))
    assert fair_tree(root) == pytest.approx({"B/b1": 1.0, "A/a1": 0.5})
    assert fair_tree(acct("root", 1)) == {}


def test_fair_tree_account_usage_given():
    # an account's own raw usage, when given, is what its children's usage is divided by (sshare's RawUsage)
    root = acct("root", 1, acct("A", 1, u("a1", 1, 10), u("a2", 1, 10), usage=40), acct("B", 1, u("b1", 1, 30)))
    lv = level_fs(root)
    assert lv["A"] == pytest.approx(0.5 / (40 / 70)) and lv["A/a1"] == pytest.approx(0.5 / 0.25)


def test_classic_matches_slurms_worked_example():
    # classic_fair_share.html's example: A 40 (B 30: user1; C 10: user2, user3), D 60 (E 25: user4; F 35: user5);
    # usage 0.2, 0.25, 0, 0.25, 0 of the machine (root usage 1).
    root = acct("root", 1,
                acct("A", 40, acct("B", 30, u("user1", 1, 0.2)), acct("C", 10, u("user2", 1, 0.25), u("user3"))),
                acct("D", 60, acct("E", 25, u("user4", 1, 0.25)), acct("F", 35, u("user5"))), usage=1.0)
    f = classic(root)
    assert f["A/B/user1"] == pytest.approx(0.408479, abs=1e-6)
    assert f["A/C/user2"] == pytest.approx(0.022097, abs=1e-6)
    assert f["A/C/user3"] == pytest.approx(0.125, abs=1e-6)
    assert f["D/E/user4"] == pytest.approx(0.5, abs=1e-6)
    assert f["D/F/user5"] == pytest.approx(0.749154, abs=2e-5)  # the page rounds U_E to 0.1458


def test_classic_flat_tree_and_dampening():
    # two accounts, one user each: S = 0.5; U = 0.75 and 0.25 of the total -> 2^-1.5, 2^-0.5
    root = acct("root", 1, acct("A", 1, u("a", 1, 30)), acct("B", 1, u("b", 1, 10)))
    assert classic(root) == pytest.approx({"A/a": 2 ** -1.5, "B/b": 2 ** -0.5})
    assert classic(root, dampening=2) == pytest.approx({"A/a": 2 ** -0.75, "B/b": 2 ** -0.25})
    assert classic(acct("root", 1, acct("A", 0, u("a")))) == {"A/a": 0.0}


def test_decay_is_slurms_per_second_factor():
    assert decay(100.0, 0.0, 3600.0) == 100.0
    assert decay(100.0, 3600.0, 3600.0) == pytest.approx(50.00402369932148)  # 100 (1 - 0.693/3600)^3600
    assert decay(100.0, 1800.0, 3600.0) == pytest.approx(70.71352324649189)
    assert decay(100.0, 1e6, 0.0) == 100.0  # half-life 0: no decay
    assert new_usage(10.0, 2.0, 3600.0) == pytest.approx(19.961533333510772)  # 10 s x 2 x D^10
    with pytest.raises(InputError, match="half_life"):
        decay(1.0, 1.0, -5.0)


def test_billing_sum_and_max_tres():
    w = {"GRES/gpu": 1.0, "gres/gpu:a100": 4.0}
    assert billing(2, "a100", w) == 10.0  # 2 x 1 + 2 x 4
    assert billing(2, "a100", w, max_tres=True) == 8.0  # the larger weighted TRES
    assert billing(2, "v100", w) == 2.0 and billing(2, "v100", w, max_tres=True) == 2.0
    assert billing(3, "k80", {"GRES/gpu": 1.0}) == 3.0  # flat
    assert billing(3, "k80", {"GRES/gpu:v100": 2.0}) == 0.0  # a type not named weighs 0
    with pytest.raises(InputError, match="TRESBillingWeights"):
        billing(1, "k80", {"CPU": 1.0})


def test_speed_weights_slowest_is_one():
    thr = {"a": {"k80": 1.0, "v100": 4.0}, "b": {"k80": 2.0, "v100": 4.0}, "c": {"v100": 5.0}}
    # v100: mean of 4, 2 and 1 (c's only type) = 7/3; k80: mean of 1, 1 = 1
    assert speed_weights(thr, ["k80", "v100"]) == pytest.approx({"GRES/gpu:k80": 1.0, "GRES/gpu:v100": 7 / 3})
    assert types_by_speed(thr, ["v100", "k80"]) == ("k80", "v100")


def test_age_factor_and_priority():
    day = 86400.0
    assert age_factor(3.5 * day, 7 * day) == 0.5
    assert age_factor(30 * day, 7 * day) == 1.0 and age_factor(-5.0, 7 * day) == 0.0
    w = PriorityWeights()
    assert (w.fairshare, w.age) == (10000.0, 1000.0)
    assert priority(0.5, 3.5 * day, w) == 5500
    assert priority(0.5, 3.5 * day, w, site_factor=7) == 5507
    assert priority(1 / 3, 0.0, w) == 3333  # truncated to a whole number
    assert priority(0.0, 0.0, PriorityWeights(0, 0)) == 1  # 0 is a held job's
    assert priority(1.0, day, PriorityWeights(100, 70), max_age=2 * day) == 135


def test_multifactor_validates():
    m = Multifactor()
    assert (m.half_life, m.calc_period, m.max_age, m.fair_tree) == (7 * 86400.0, 300.0, 7 * 86400.0, True)
    with pytest.raises(InputError, match="calc_period"):
        Multifactor(calc_period=0)
    with pytest.raises(InputError, match="shares"):
        Assoc("a", -1)
