"""Tests of the deviation-carrying rounding placer (OEF §4.3)."""

from __future__ import annotations

import random

import pytest

from slurm_fair.errors import InputError
from slurm_fair.rounding import Placement, place


def run_rounds(ideal, capacity, rounds, min_gpus=None, demand=None):
    """Run ``rounds`` rounds with a constant ideal; return (sum of real per tenant/type, placements)."""
    dev = None
    total = {t: {g: 0 for g in capacity} for t in ideal}
    seen = []
    for _ in range(rounds):
        p = place(ideal, capacity, dev, min_gpus, demand)
        dev = p.deviations
        seen.append(p)
        for t in ideal:
            for g in capacity:
                total[t][g] += p.real[t][g]
    return total, seen


def test_single_round_rounds_half_up_and_carries_deviation():
    p = place({"a": {"v100": 1.5, "k80": 0.25}, "b": {"v100": 0.5, "k80": 0.75}}, {"v100": 2, "k80": 1})
    assert isinstance(p, Placement)
    # v100: a 1.5 -> 2 and b 0.5 -> 1 overshoot capacity 2; both claims are -0.5, the name decides: b gives back
    assert p.real["a"]["v100"] == 2 and p.real["b"]["v100"] == 0
    assert p.real["b"]["k80"] == 1 and p.real["a"]["k80"] == 0
    for t, row in {"a": {"v100": 1.5, "k80": 0.25}, "b": {"v100": 0.5, "k80": 0.75}}.items():
        for g, v in row.items():
            assert p.deviations[t][g] == pytest.approx(v - p.real[t][g])


def test_capacity_takeback_prefers_smallest_claim_then_name():
    # Both round 0.6 -> 1 and 0.4 + 0 -> 0; capacity 1: the one with the larger claim keeps it.
    p = place({"x": {"g": 0.45}, "y": {"g": 0.55}}, {"g": 1})
    assert p.real == {"x": {"g": 0}, "y": {"g": 1}}
    # exact tie: both 0.5 -> 1, one GPU: the name decides (deterministic), the other is owed 0.5
    p = place({"b": {"g": 0.5}, "a": {"g": 0.5}}, {"g": 1})
    assert p.real == {"b": {"g": 0}, "a": {"g": 1}}
    assert p.deviations["b"]["g"] == pytest.approx(0.5)
    assert p.deviations["a"]["g"] == pytest.approx(-0.5)


def test_free_gpus_go_to_tenants_still_owed():
    # three tenants with a third of one GPU each: plain rounding gives 0 to all; the GPU is not left idle
    p = place({"a": {"g": 1 / 3}, "b": {"g": 1 / 3}, "c": {"g": 1 / 3}}, {"g": 1})
    assert sum(p.real[t]["g"] for t in "abc") == 1
    total, _ = run_rounds({"a": {"g": 1 / 3}, "b": {"g": 1 / 3}, "c": {"g": 1 / 3}}, {"g": 1}, 300)
    assert [total[t]["g"] for t in "abc"] == [100, 100, 100]


@pytest.mark.parametrize("seed", range(40))
def test_long_run_average_converges_to_ideal(seed):
    rng = random.Random(seed)
    types = ["a100", "v100", "k80"][: rng.randint(1, 3)]
    cap = {g: rng.randint(1, 8) for g in types}
    tenants = [f"t{i}" for i in range(rng.randint(1, 6))]
    ideal = {t: {} for t in tenants}
    for g in types:
        w = [rng.random() for _ in tenants]
        used = rng.choice([1.0, 0.8])  # a policy may leave GPUs idle (e.g. demand-limited)
        for t, wi in zip(tenants, w):
            ideal[t][g] = cap[g] * used * wi / sum(w)
    mins = {t: rng.choice([0, 1]) for t in tenants}
    for rounds in (50, 400):
        total, seen = run_rounds(ideal, cap, rounds, min_gpus=mins)
        for t in tenants:
            for g in types:
                # |avg - ideal| = |dev_R| / R and the deviation stays within 1 GPU
                assert abs(total[t][g] / rounds - ideal[t][g]) <= 1.0 / rounds + 1e-9
        for p in seen:
            for g in types:
                assert sum(p.real[t][g] for t in tenants) <= cap[g]
            assert all(abs(v) < 1.0 + 1e-9 for d in p.deviations.values() for v in d.values())


@pytest.mark.parametrize("seed", range(30))
def test_capacity_demand_and_min_gpus_never_violated(seed):
    rng = random.Random(1000 + seed)
    types = ["a100", "v100", "k80"]
    cap = {g: rng.randint(0, 6) for g in types}
    tenants = [f"t{i}" for i in range(rng.randint(2, 6))]
    ideal = {t: {g: 0.0 for g in types} for t in tenants}
    for g in types:
        w = [rng.random() for _ in tenants]
        for t, wi in zip(tenants, w):
            ideal[t][g] = cap[g] * wi / sum(w)
    mins = {t: rng.choice([1, 2, 4]) for t in tenants}
    dem = {t: rng.randint(1, 8) for t in tenants}
    dev = {t: {g: rng.uniform(-3, 3) for g in types} for t in tenants}  # arbitrary carried state
    for _ in range(100):
        p = place(ideal, cap, dev, mins, dem)
        dev = p.deviations
        for g in types:
            assert sum(p.real[t][g] for t in tenants) <= cap[g]
        for t in tenants:
            tot = p.total(t)
            assert all(v >= 0 for v in p.real[t].values())
            assert tot <= dem[t]
            assert tot == 0 or tot >= mins[t]
            assert tot == 0 or max(p.real[t].values()) >= mins[t]  # a job's GPUs are of one type


def test_min_gpus_tenant_is_not_starved_and_keeps_its_average():
    # b is owed half a GPU per round but its smallest job needs 4: it gets 0 until its claim reaches 4
    ideal = {"a": {"a100": 3.5}, "b": {"a100": 0.5}}
    total, seen = run_rounds(ideal, {"a100": 4}, 80, min_gpus={"a": 1, "b": 4})
    b_rounds = [p.real["b"]["a100"] for p in seen]
    assert set(b_rounds) == {0, 4}  # never a useless 1..3 GPUs
    assert b_rounds[:6] == [0] * 6  # accumulating its deviation first
    assert 4 in b_rounds[:8]  # ... and guaranteed to run once the claim is big enough
    assert total["b"]["a100"] == pytest.approx(0.5 * 80, abs=4)
    assert total["a"]["a100"] == pytest.approx(3.5 * 80, abs=4)
    # while b waits, its deviation grows by its ideal every round
    assert seen[0].deviations["b"]["a100"] == pytest.approx(0.5)
    assert seen[1].deviations["b"]["a100"] == pytest.approx(1.0)


def test_min_gpus_is_reached_on_one_type():
    # a job runs on GPUs of one type: 1 V100 + 1 K80 cannot start a's 2-GPU job, so a waits until its claim on
    # one type reaches 2 (with b's 3.7 per type in the way it gets 2 + 2 every 6-7 rounds); it keeps its average
    ideal = {"a": {"v100": 0.3, "k80": 0.3}, "b": {"v100": 3.7, "k80": 3.7}}
    total, seen = run_rounds(ideal, {"v100": 4, "k80": 4}, 1000, min_gpus={"a": 2})
    for p in seen:
        assert p.total("a") == 0 or max(p.real["a"].values()) >= 2
        assert all(abs(d) < 2 + 1 for d in p.deviations["a"].values())  # owed: below min_gpus + 1 per type
    assert sum(total["a"].values()) == pytest.approx(0.6 * 1000, abs=4)


def test_gpus_split_over_types_are_moved_to_one_type():
    # four tenants, one 8-GPU job each, ideal 8/3 GPUs of each of three 16-GPU types: rounded 3 + 3 + 2, which
    # starts no job (the simulator found the four waiting forever on an idle cluster); each gets 8 on one type
    types = {"k80": 16, "p100": 16, "v100": 16}
    ideal = {t: {g: 8 / 3 for g in types} for t in "abcd"}
    dev: dict = {}
    for _ in range(3):
        p = place(ideal, types, deviations=dev, min_gpus={t: 8 for t in "abcd"}, demand={t: 8 for t in "abcd"})
        dev = p.deviations
        for t in "abcd":
            assert sorted(p.real[t].values()) == [0, 0, 8]
        for g in types:
            assert sum(p.real[t][g] for t in "abcd") <= 16
    # the policy's preference decides the type: a claim larger on v100 lands there
    ideal2 = {"a": {"k80": 2.0, "p100": 2.0, "v100": 4.0}, "b": {"k80": 6.0, "p100": 2.0, "v100": 0.0}}
    p = place(ideal2, types, min_gpus={"a": 8, "b": 8}, demand={"a": 8, "b": 8})
    assert p.real["a"] == {"k80": 0, "p100": 0, "v100": 8} and p.real["b"] == {"k80": 8, "p100": 0, "v100": 0}
    assert p.deviations["a"] == pytest.approx({"k80": 2.0, "p100": 2.0, "v100": -4.0})  # owed back elsewhere


def test_split_gpus_go_on_one_type_where_they_compete_by_claim():
    # b holds 3 of each 4-GPU type; a's 1 + 1 becomes 2 on one type, where b (not below a job's size) gives one
    # back: a's job starts; the deviations record who is owed what (the testbed's owed 4-GPU job behind a flood
    # waited forever while a's GPUs were moved only into room nobody held)
    p = place({"a": {"g": 1.0, "h": 1.0}, "b": {"g": 3.0, "h": 3.0}}, {"g": 4, "h": 4}, min_gpus={"a": 2})
    assert p.real["a"] == {"g": 2, "h": 0} and p.deviations["a"] == pytest.approx({"g": -1.0, "h": 1.0})
    assert p.real["b"] == {"g": 2, "h": 3} and p.deviations["b"] == pytest.approx({"g": 1.0, "h": 0.0})


def test_split_gpus_with_no_type_large_enough_wait():
    # a's smallest job needs 5 GPUs of one type; no type has 5: a gets nothing and keeps its claim
    p = place({"a": {"g": 1.0, "h": 1.0}, "b": {"g": 3.0, "h": 3.0}}, {"g": 4, "h": 4}, min_gpus={"a": 5})
    assert p.real["a"] == {"g": 0, "h": 0} and p.deviations["a"] == pytest.approx({"g": 1.0, "h": 1.0})
    assert p.real["b"] == {"g": 3, "h": 3}


def test_demand_is_never_exceeded_and_excess_ideal_is_not_owed():
    ideal = {"a": {"g": 6.0}, "b": {"g": 2.0}}
    total, seen = run_rounds(ideal, {"g": 8}, 50, demand={"a": 3})
    assert all(p.real["a"]["g"] <= 3 for p in seen)
    # the unusable part is dropped, not accumulated forever
    assert all(abs(p.deviations["a"]["g"]) < 1 for p in seen)
    assert total["b"]["g"] == 100
    # b is owed nothing more, so the GPUs a cannot use stay free (no over-allocation beyond the ideal)
    assert all(p.real["b"]["g"] == 2 for p in seen)


def test_deterministic_and_independent_of_input_order():
    ideal = {"c": {"g": 0.5, "h": 1.5}, "a": {"g": 0.5, "h": 0.5}, "b": {"g": 1.0, "h": 0.0}}
    rev = dict(reversed(list(ideal.items())))
    for _ in range(3):
        assert place(ideal, {"g": 2, "h": 2}).real == place(rev, {"g": 2, "h": 2}).real
    p1 = place(ideal, {"g": 2, "h": 2}, min_gpus={"a": 2})
    p2 = place(ideal, {"g": 2, "h": 2}, min_gpus={"a": 2})
    assert p1 == p2


def test_missing_types_in_ideal_count_as_zero():
    p = place({"a": {"g": 1.0}}, {"g": 1, "h": 3})
    assert p.real == {"a": {"g": 1, "h": 0}}
    assert p.deviations == {"a": {"g": 0.0, "h": 0.0}}


@pytest.mark.parametrize(
    "kwargs, field, fragment",
    [
        (dict(ideal={"a": {"zz": 1.0}}, capacity={"g": 1}), "ideal.a", "unknown GPU type"),
        (dict(ideal={"a": {"g": 1.0}}, capacity={"g": 1}, deviations={"ghost": {"g": 0.1}}), "deviations", "unknown tenant"),
        (dict(ideal={"a": {"g": 1.0}}, capacity={"g": 1}, deviations={"a": {"zz": 0.1}}), "deviations.a", "unknown GPU type"),
        (dict(ideal={"a": {"g": 1.0}}, capacity={"g": 1}, min_gpus={"ghost": 1}), "min_gpus", "unknown tenant"),
        (dict(ideal={"a": {"g": 1.0}}, capacity={"g": 1}, demand={"ghost": 1}), "demand", "unknown tenant"),
        (dict(ideal={"a": {"g": -1.0}}, capacity={"g": 1}), "ideal.a.g", ">= 0"),
        (dict(ideal={"a": {"g": float("nan")}}, capacity={"g": 1}), "ideal.a.g", "finite"),
        (dict(ideal={"a": {"g": 1.0}}, capacity={"g": 1.5}), "capacity.g", "whole number"),
        (dict(ideal={"a": {"g": 1.0}}, capacity={"g": 1}, min_gpus={"a": -2}), "min_gpus.a", "whole number"),
        (dict(ideal={"a": {"g": 1.0}, "b": {"g": 0.5}}, capacity={"g": 1}), "ideal.*.g", "exceed the capacity"),
    ],
)
def test_errors_name_the_field_and_value(kwargs, field, fragment):
    with pytest.raises(InputError) as ei:
        place(**kwargs)
    assert ei.value.field == field
    assert fragment in ei.value.problem
    assert field in str(ei.value)


def test_unknown_keys_are_named_in_the_error():
    with pytest.raises(InputError) as ei:
        place({"a": {"g": 1.0}}, {"g": 1}, deviations={"ghost": {"g": 0.0}, "a": {}})
    assert ei.value.value == ["ghost"]
    assert "ghost" in str(ei.value)


# --------------------------------------------------------------------------- the rounding rule, pinned
# OEF §4.3: real = round_half_up(ideal + dev), dev <- dev + ideal - real. Each case below is worked out by hand
# from that rule and the documented refinements, and fails if the rule changes (floor, ceil, half-to-even).


def test_half_up_at_exactly_one_half_rounds_up():
    # ideal 1 + carried 0.5 = 1.5 -> 2 GPUs of b; a: 0.25 -> 0. (floor would give b=1 and hand the free GPU of a
    # to the same tenant as work conservation: a=1, b=1.)
    p = place({"x": {"a": 0.25, "b": 1.0}}, {"a": 2, "b": 4}, deviations={"x": {"b": 0.5}}, demand={"x": 2})
    assert p.real == {"x": {"a": 0, "b": 2}}
    assert p.deviations["x"] == pytest.approx({"a": 0.25, "b": -0.5})


def test_half_up_not_half_to_even():
    # 2.5 -> 3 and 1.5 -> 2 overshoot capacity 4 by one; both residual claims are -0.5, so the tie rule (the name
    # sorting last gives back) takes one from y: x=3, y=1. Half-to-even would give 2.5 -> 2, 1.5 -> 2.
    p = place({"x": {"a": 2.5}, "y": {"a": 1.5}}, {"a": 4})
    assert p.real == {"x": {"a": 3}, "y": {"a": 1}}
    assert p.deviations == {"x": {"a": pytest.approx(-0.5)}, "y": {"a": pytest.approx(0.5)}}


def test_below_one_half_rounds_down_then_min_gpus_blocks():
    # a: 0.75 -> 1, b: 0.25 -> 0; total 1 is below the smallest job (2 GPUs): nothing this round, the whole
    # ideal is carried. (ceil would give a=1, b=1 and start the job.)
    p = place({"x": {"a": 0.75, "b": 0.25}}, {"a": 4, "b": 2}, min_gpus={"x": 2}, demand={"x": 3})
    assert p.real == {"x": {"a": 0, "b": 0}}
    assert p.deviations["x"] == pytest.approx({"a": 0.75, "b": 0.25})


def test_carried_deviation_alternates_a_shared_gpu():
    # two tenants each owed half of one GPU: it alternates x, y, x, y and every deviation is exactly +-0.5 or 0
    dev = None
    got = []
    for _ in range(4):
        p = place({"x": {"a": 0.5}, "y": {"a": 0.5}}, {"a": 1}, deviations=dev)
        got.append((p.real["x"]["a"], p.real["y"]["a"]))
        dev = p.deviations
    assert got == [(1, 0), (0, 1), (1, 0), (0, 1)]
    assert dev == {"x": {"a": pytest.approx(0.0)}, "y": {"a": pytest.approx(0.0)}}


# --------------------------------------------------------------------------- sticky rounding (current holdings)


def test_sticky_rounding_keeps_what_a_tenant_holds_within_floor_and_ceil():
    # x and y are owed 1.5 GPUs each of 3; half-up alternates 2/1, 1/2 (a GPU would move every round)
    ideal = {"x": {"a": 1.5}, "y": {"a": 1.5}}
    p = place(ideal, {"a": 3}, current={"x": {"a": 1}, "y": {"a": 2}})
    assert p.real == {"x": {"a": 1}, "y": {"a": 2}}  # what they hold: 1 is floor(1.5), 2 is ceil(1.5)
    assert p.deviations == {"x": {"a": pytest.approx(0.5)}, "y": {"a": pytest.approx(-0.5)}}
    # next round the claims are 2.0 and 1.0: no choice left, the GPU moves (deviations back to 0)
    p2 = place(ideal, {"a": 3}, deviations=p.deviations, current={"x": {"a": 1}, "y": {"a": 2}})
    assert p2.real == {"x": {"a": 2}, "y": {"a": 1}}
    assert p2.deviations == {"x": {"a": pytest.approx(0.0)}, "y": {"a": pytest.approx(0.0)}}


def test_sticky_rounding_never_goes_outside_floor_and_ceil():
    # holding 3 of an ideal 1.2: ceil(1.2) = 2, not 3; holding 0 of 1.7: floor = 1 (no GPU left over)
    p = place({"x": {"a": 1.2}, "y": {"a": 1.7}}, {"a": 3}, current={"x": {"a": 3}, "y": {"a": 0}})
    assert p.real == {"x": {"a": 2}, "y": {"a": 1}}


def test_sticky_rounding_keeps_deviations_bounded_and_averages_converging():
    rng = random.Random(7)
    for _ in range(20):
        n, cap = rng.randint(2, 5), {"a": rng.randint(2, 9), "b": rng.randint(1, 6)}
        weights = [rng.random() + 0.1 for _ in range(n)]
        ideal = {f"t{i}": {g: c * w / sum(weights) for g, c in cap.items()} for i, w in enumerate(weights)}
        dev, held, total = None, {}, {t: {g: 0 for g in cap} for t in ideal}
        rounds = 300
        for _ in range(rounds):
            p = place(ideal, cap, deviations=dev, current=held)
            for t in ideal:
                for g in cap:
                    assert -1 - 1e-9 < p.deviations[t][g] < 1 + 1e-9
                    total[t][g] += p.real[t][g]
            dev, held = p.deviations, p.real
        for t in ideal:
            for g in cap:
                assert abs(total[t][g] / rounds - ideal[t][g]) <= 1.0 / rounds + 1e-9


def test_current_names_known_tenants_and_types_only():
    with pytest.raises(InputError, match="current"):
        place({"x": {"a": 1.0}}, {"a": 2}, current={"z": {"a": 1}})
    with pytest.raises(InputError, match="current.x"):
        place({"x": {"a": 1.0}}, {"a": 2}, current={"x": {"b": 1}})


def test_two_starved_tenants_do_not_block_each_other_forever():
    # 8 GPUs, two tenants with one 8-GPU job each and ideal 4 each: the claims grow alike; the capacity step must
    # let one of them reach its minimum (the simulator found both cut to 7, then blocked, round after round)
    from slurm_fair.rounding import place

    ideal = {"a": {"v100": 4.0}, "b": {"v100": 4.0}}
    dev: dict = {}
    started = []
    for r in range(6):
        p = place(ideal, {"v100": 8}, deviations=dev, min_gpus={"a": 8, "b": 8}, demand={"a": 8, "b": 8})
        dev = p.deviations
        started += [t for t in ("a", "b") if p.real[t]["v100"] == 8]
        assert sum(p.real[t]["v100"] for t in ("a", "b")) in (0, 8)
    assert started, "nobody ever got the 8 GPUs its job needs"


# --------------------------------------------------------------------------- holding still (issue 28)

def _rounds(ideal, cap, n, hold):
    """``n`` rounds of ``place`` with a constant ideal; returns the guarantees of every round."""
    from slurm_fair.rounding import LastRound

    dev, last, out = {}, None, []
    for _ in range(n):
        p = place(ideal, cap, deviations=dev, last=last if hold else None)
        out.append(p.real)
        dev, last = p.deviations, LastRound(ideal=ideal, real=p.real)
    return out


def test_deviation_carrying_alone_flips_a_constant_fractional_ideal():
    # 3.5 + 3.5 on 7 GPUs: half-up rounding with the carried deviation alternates 4/3 (by design)
    seq = _rounds({"a": {"g": 3.5}, "b": {"g": 3.5}}, {"g": 7}, 4, hold=False)
    assert [r["a"]["g"] for r in seq] == [4, 3, 4, 3]


def test_last_round_holds_while_the_ideal_does_not_move():
    seq = _rounds({"a": {"g": 3.5}, "b": {"g": 3.5}}, {"g": 7}, 5, hold=True)
    assert [(r["a"]["g"], r["b"]["g"]) for r in seq] == [(4, 3)] * 5
    seq = _rounds({"a": {"g": 16 / 3, "h": 1.0}, "b": {"g": 16 / 3}, "c": {"g": 16 / 3}}, {"g": 16, "h": 1}, 6, hold=True)
    assert all(r == seq[0] for r in seq)
    assert sum(seq[0][t]["g"] for t in "abc") == 16


def test_held_deviation_is_frozen_and_rotation_resumes_when_the_ideal_moves():
    from slurm_fair.rounding import LastRound

    ideal = {"a": {"g": 3.5}, "b": {"g": 3.5}}
    first = place(ideal, {"g": 7})
    held = place(ideal, {"g": 7}, deviations=first.deviations, last=LastRound(ideal, first.real))
    assert held.real == first.real and held.deviations == first.deviations
    # a's ideal moves: both are rounded again from the carried deviation (b's ideal moved too)
    moved = {"a": {"g": 3.0}, "b": {"g": 4.0}}
    p = place(moved, {"g": 7}, deviations=held.deviations, last=LastRound(ideal, held.real))
    assert p.real == {"a": {"g": 3}, "b": {"g": 4}}
    assert p.deviations["a"]["g"] == pytest.approx(held.deviations["a"]["g"])


def test_held_tenant_still_obeys_its_demand_and_a_malformed_last_round_is_ignored():
    from slurm_fair.rounding import LastRound

    ideal = {"a": {"g": 3.5}, "b": {"g": 3.5}}
    last = LastRound(ideal, {"a": {"g": 4}, "b": {"g": 3}})
    assert place(ideal, {"g": 7}, demand={"a": 2}, last=last).real["a"]["g"] == 2
    for bad in (LastRound({"a": "x"}, {"a": {"g": 4}}), LastRound(ideal, {"a": {"g": -1}, "b": {"g": 1.5}}),
                LastRound({"a": {"g": "nan?"}}, {"a": {"g": 4}})):
        assert place(ideal, {"g": 7}, last=bad).real == place(ideal, {"g": 7}).real


def test_a_small_move_keeps_last_rounds_whole_gpus_while_they_are_still_a_rounding():
    from slurm_fair.rounding import LastRound

    last = LastRound({"a": {"g": 16 / 3}, "b": {"g": 16 / 3}, "c": {"g": 16 / 3}}, {"a": {"g": 6}, "b": {"g": 5}, "c": {"g": 5}})
    moved = {"a": {"g": 5.2}, "b": {"g": 5.4}, "c": {"g": 5.4}}
    # without last round: half-up gives a 5, b 5, c 5 and the free GPU to the largest claim
    assert place(moved, {"g": 16}).real["a"]["g"] == 5
    p = place(moved, {"g": 16}, last=last)
    assert p.real == {"a": {"g": 6}, "b": {"g": 5}, "c": {"g": 5}}  # 6 is still ceil(5.2): kept
    assert p.deviations["a"]["g"] == pytest.approx(-0.8)  # carried as always: within (-1, 1)
    # last round's guarantee comes before what the tenant holds now (a guarantee that follows the running jobs
    # flips); what it holds decides between two new roundings only
    q = place(moved, {"g": 16}, last=last, current={"a": {"g": 5}})
    assert q.real["a"]["g"] == 6
    r = place({"a": {"g": 4.6}, "b": {"g": 5.7}, "c": {"g": 5.7}}, {"g": 16}, last=last, current={"a": {"g": 4}})
    assert r.real["a"]["g"] == 4  # 6 is no rounding of 4.6: floor or ceil, the one it holds
    # last round's GPUs that are no rounding any more are not kept
    far = place({"a": {"g": 3.2}, "b": {"g": 6.4}, "c": {"g": 6.4}}, {"g": 16}, last=last)
    assert far.real["a"]["g"] == 3


def test_holding_still_never_holds_a_guarantee_that_min_gpus_took_from_its_ideal():
    # c's one waiting job needs 4 GPUs; its ideal is 2 each round: rounded to 0 (the job would not fit), the
    # deviation grows until ideal + deviation reaches 4 and the job's window comes — holding 0 would starve it
    from slurm_fair.rounding import LastRound, place
    ideal = {"a": {"x": 2.0}, "c": {"x": 2.0}}
    dev = None
    last = None
    got = []
    for _ in range(3):
        p = place(ideal, {"x": 4}, deviations=dev, min_gpus={"c": 4}, last=last)
        got.append(p.real["c"]["x"])
        dev = p.deviations
        last = LastRound(ideal=ideal, real=p.real)
    assert 4 in got, got


def test_a_window_once_given_is_held_while_the_job_still_needs_it():
    # c's 4-GPU job gets its window of 4 (ideal 2, the deviation grew); the next rounds it keeps the 4 instead
    # of the deviation taking them back (4, 0, 4, 0...: the reclaimed GPUs would go back to a and b each time)
    from slurm_fair.rounding import LastRound, place
    ideal = {"a": {"x": 2.0}, "c": {"x": 2.0}}
    dev, last, got = None, None, []
    for _ in range(5):
        p = place(ideal, {"x": 4}, deviations=dev, min_gpus={"c": 4}, last=last)
        got.append(p.real["c"]["x"])
        dev, last = p.deviations, LastRound(ideal=ideal, real=p.real)
    first = got.index(4)
    assert all(n == 4 for n in got[first:]), got


def test_a_window_is_held_while_the_job_runs_on_it():
    from slurm_fair.rounding import LastRound, place
    ideal = {"a": {"x": 2.0}, "c": {"x": 2.0}}
    last = LastRound(ideal=ideal, real={"a": {"x": 0}, "c": {"x": 4}})
    # c's job now runs on its 4 GPUs (nothing of c waits): the window stays while it runs
    p = place(ideal, {"x": 4}, deviations={"a": {"x": 0.0}, "c": {"x": -2.0}}, current={"c": {"x": 4}}, last=last,
              running_jobs={"c": 4})
    assert p.real["c"]["x"] == 4
    # four 1-GPU jobs on the same GPUs need no window: the guarantee follows the ideal (reclaim may take 2)
    p = place(ideal, {"x": 4}, deviations={"a": {"x": 0.0}, "c": {"x": -2.0}}, current={"c": {"x": 4}}, last=last,
              running_jobs={"c": 1})
    assert p.real["c"]["x"] < 4
    # the job ended: the window is let go and the deviation is paid back
    p = place(ideal, {"x": 4}, deviations={"a": {"x": 0.0}, "c": {"x": -2.0}}, current={}, last=last)
    assert p.real["c"]["x"] < 4
