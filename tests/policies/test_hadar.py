"""hadar (paper 004): the primal-dual admission rule with exponential per-type prices (eq. 5-8) — a worked
example computed by hand, a gang spanning GPU types at its slowest type's speed, the exact best placement
(eq. 4) against brute force, caps / capacity / work conservation on random instances, made-up jobs, the
CLI, and a counter-example for properties the paper does not claim (sharing incentive, envy-freeness)."""

from __future__ import annotations

import itertools
import json
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_fair import fairness, policies
from slurm_fair.errors import InputError
from slurm_fair.model import ClassJob, JobClass, Problem, Tenant, problem_from_dict, problem_to_dict
from slurm_fair.policies import hadar
from slurm_fair.policies.common import room

EXAMPLES = int(os.environ.get("SLURM_FAIR_HYPOTHESIS_EXAMPLES", 40))


def worked() -> Problem:
    return problem_from_dict({"gpu_types": {"k80": 4, "v100": 2}, "tenants": [
        {"name": "fast", "classes": [{"name": "bert", "throughput": {"k80": 1, "v100": 10},
                                      "jobs": [{"id": "f1", "gpus": 3, "remaining": 360}]}]},
        {"name": "slow", "classes": [{"name": "cnn", "throughput": {"k80": 1, "v100": 2},
                                      "jobs": [{"id": "s1", "gpus": 1, "remaining": 720},
                                               {"id": "s2", "gpus": 1, "remaining": 1080},
                                               {"id": "s3", "gpus": 1, "remaining": 1440},
                                               {"id": "s4", "gpus": 8, "remaining": 7200}]}]}]})


def test_worked_example_by_hand_from_eq_5_to_8():
    # Rounds of 360 s; every slowest usable type is k80 (normalized speed 1), so t_j^max = remaining / 360:
    # f1 1, s1 2, s2 3, s3 4 rounds. s4 wants 8 GPUs of a 6-GPU cluster: never fits, no candidate (its
    # 20 rounds would otherwise be the horizon). T = 4; C = 6; min_j t_j^max W_j = min(1*3, 2, 3, 4) = 2;
    # eta = T C / 2 = 12; eq. 7: U_min = min Smin / (4 eta T) = 1 / 192; eq. 6: U_max = the largest best speed
    # of a job able to use the type = 10 (bert's V100) on both types; alpha = ln(10 * 192) = ln 1920.
    p = worked()
    vu = p.virtual_users()
    jobs, made_up = hadar.queue(p, vu)
    assert [j.id for j in jobs] == ["f1", "s1", "s2", "s3", "s4"] and made_up == []
    prm = hadar.price_parameters(vu, jobs)
    assert prm.horizon == pytest.approx(4.0) and prm.eta == pytest.approx(12.0)
    assert prm.u_min == pytest.approx(1 / 192)
    np.testing.assert_allclose(prm.u_max, [10.0, 10.0])
    assert prm.alpha == pytest.approx(math.log(1920))
    # eq. 5 on k80 (c = 4): U_min * 1920^(gamma/4)
    np.testing.assert_allclose(prm.price(np.array([1.0, 2.0]), vu.capacity), [1920 ** 0.25 / 192, 10.0])

    a = hadar.solve(p)
    # The price is charged over the schedule: a job holds its GPUs for D = ceil(rho / x) slots of 360 s and
    # pays each slot's price (eq. 3a); T = 4 gives 4 slots, all at U_min = 1/192 before the first job.
    # f1 (3 GPUs, 1 round) first: V100 alone has 2 < 3, so its gang spans: at equal prices 1/192 the faster
    #   V100s, then one K80; it runs at min(10, 1) = 1 for D = 1 slot: U = 3, cost 3/192, mu = 2.984 -> admitted.
    #   slot 0: gamma = (1, 2): k80 1920^(1/4)/192 = 0.03448, v100 full at 10; slots 1-3 still at 1/192.
    # s1 (2 rounds on a K80, D = 2): mu = 1 - (1920^(1/4) + 1)/192 = 0.9603 -> admitted; k80 gamma (2, 1, 0, 0)
    # s2 (D = 3): mu = 1 - (1920^(1/2) + 1920^(1/4) + 1)/192 = 0.7321 -> admitted; k80 gamma (3, 2, 1, 0)
    # s3 (D = 4): mu = 1 - (1920^(3/4) + 1920^(1/2) + 1920^(1/4) + 1)/192 = -0.7786 -> priced out
    #   (charged one round only, as before this fix: 1 - 1920^(3/4)/192 = -0.511); s4 does not fit.
    # slot 0's k80 price at the end: 1920^(3/4)/192 = 1.511.
    # fill_idle: the last K80 goes to slow/cnn (below its demand of 11 GPUs; fast/bert is at its demand 3).
    np.testing.assert_allclose(a.x, [[1.0, 2.0], [3.0, 0.0]])
    assert [(q.job, dict(q.gpus), q.speed) for q in a.job_placements] == [
        ("f1", {"k80": 1, "v100": 2}, 1.0), ("s1", {"k80": 1}, 1.0), ("s2", {"k80": 1}, 1.0)]
    notes = "\n".join(a.notes)
    assert "5 job(s), 3 admitted on 5 GPU(s), 2 turned away (1 did not fit, 1 priced out)" in notes
    assert "fast/bert f1 on 1 k80 + 2 v100 at speed 1" in notes
    assert "utility (throughput at each gang's slowest type) 5" in notes  # 3 + 1 + 1
    assert "k80=1.511" in notes and "1 idle GPU(s) handed" in notes
    # the per-job payoffs behind the decisions
    _, decisions = hadar.admit(vu, jobs, prm)
    assert [d.reason for d in decisions] == ["admitted"] * 3 + ["priced out", "no room"]
    np.testing.assert_allclose([d.payoff for d in decisions[:4]],
                               [3 - 3 / 192, 1 - (1920 ** 0.25 + 1) / 192, 1 - (1920 ** 0.5 + 1920 ** 0.25 + 1) / 192,
                                1 - (1920 ** 0.75 + 1920 ** 0.5 + 1920 ** 0.25 + 1) / 192])
    assert a.per_tenant() == {"fast": {"k80": 1.0, "v100": 2.0}, "slow": {"k80": 3.0, "v100": 0.0}}


def test_a_gang_spanning_types_is_worth_its_slowest_type():
    # speeds k80 1, p100 3, v100 4; a 3-GPU job; free: 1 k80, 3 p100, 2 v100; prices 0.1, 1.0, 0.2.
    # bottleneck >= 4: V100 alone (2) is too few. >= 3: cheapest first 2 v100 + 1 p100, speed 3: 9 - 1.4 = 7.6.
    # >= 1: 1 k80 + 2 v100, speed 1: 3 - 0.5 = 2.5. Valued per GPU (2*4 + 1 - 0.5 = 8.5) the K80 mix would win.
    mu, w, x = hadar.find_alloc(3, np.array([1.0, 3.0, 4.0]), np.array([0.1, 1.0, 0.2]), np.array([1, 3, 2]))
    assert mu == pytest.approx(7.6) and x == 3.0
    np.testing.assert_array_equal(w, [0, 1, 2])
    # without the P100s the job must take the K80 and runs at 1
    mu, w, x = hadar.find_alloc(3, np.array([1.0, 3.0, 4.0]), np.array([0.1, 1.0, 0.2]), np.array([1, 0, 2]))
    assert mu == pytest.approx(2.5) and x == 1.0
    np.testing.assert_array_equal(w, [1, 0, 2])
    # too few GPUs in all: it does not fit
    assert hadar.find_alloc(4, np.array([1.0, 4.0]), np.array([0.1, 0.1]), np.array([1, 2]))[1] is None


def one_and_gang(v100: float) -> Problem:
    return problem_from_dict({"gpu_types": {"k80": 1, "v100": 2}, "tenants": [
        {"name": "a", "classes": [{"name": "x", "throughput": {"k80": 1, "v100": v100}, "jobs": [
            {"id": "one", "gpus": 1, "remaining": 100}, {"id": "gang", "gpus": 2, "remaining": 200}]}]}]})


def test_the_slowest_speed_decides_admission():
    # A 1-GPU job takes a V100 first (shorter); the 2-GPU job of the same class can then only get 1 V100 +
    # 1 K80, and it runs at min(10, 1) = 1, not at (10 + 1) / 2. T = 1 round (both are shorter than one),
    # C = 3, min t^max W = 1, eta = 3, U_min = 1/12, U_max = 10; after "one" the V100 costs
    # (1/12) * 120^(1/2) = 0.913: the gang's mu = 2 - 1/12 - 0.913 > 0 -> admitted.
    a = hadar.solve(one_and_gang(10.0))
    by = {q.job: q for q in a.job_placements}
    assert dict(by["one"].gpus) == {"v100": 1} and by["one"].speed == 10.0
    assert dict(by["gang"].gpus) == {"k80": 1, "v100": 1} and by["gang"].speed == 1.0
    assert "utility (throughput at each gang's slowest type) 12" in "\n".join(a.notes)  # 1*10 + 2*1
    # the per-type sum counts the gang's V100 at 10: the allocation's throughput overstates it
    assert a.total_throughput() == pytest.approx(21.0)
    # With 1000 on a V100 the gang is priced out: now U_max = 1000 and after "one" the V100 costs
    # (1/12) * 12000^(1/2) = 9.129; the gang is worth 2 * 1 = 2 < 9.129 + 1/12 although its GPUs would be
    # worth 1001 at their own speeds. fill_idle then hands the class the two idle GPUs.
    p = one_and_gang(1000.0)
    vu = p.virtual_users()
    jobs, _ = hadar.queue(p, vu)
    _, decisions = hadar.admit(vu, jobs, hadar.price_parameters(vu, jobs))
    assert [d.reason for d in decisions] == ["admitted", "priced out"]
    assert decisions[1].payoff == pytest.approx(2 - 1 / 12 - 12000 ** 0.5 / 12)
    b = hadar.solve(p)
    assert [q.job for q in b.job_placements] == ["one"]
    np.testing.assert_allclose(b.x, [[1.0, 2.0]])


def _brute(width, speed, price, avail):
    best = -math.inf
    ranges = [range(int(min(a, width)) + 1) if s > 0 else range(1) for s, a in zip(speed, avail)]
    for w in itertools.product(*ranges):
        if sum(w) != width:
            continue
        x = min(s for s, v in zip(speed, w) if v > 0)
        best = max(best, width * x - float(np.dot(price, w)))
    return best


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.integers(1, 5), st.lists(st.tuples(st.sampled_from([0.0, 1.0, 1.5, 2.0, 4.0]),
                                             st.floats(0.01, 5.0), st.integers(0, 4)), min_size=1, max_size=4))
def test_find_alloc_is_the_best_placement_eq_4(width, types):
    speed = np.array([t[0] for t in types])
    price = np.array([t[1] for t in types])
    avail = np.array([t[2] for t in types], dtype=float)
    mu, w, x = hadar.find_alloc(width, speed, price, avail)
    want = _brute(width, speed, price, avail)
    if w is None:
        assert want == -math.inf
        return
    assert mu == pytest.approx(want, rel=1e-9, abs=1e-9)
    assert w.sum() == width and (w <= avail).all() and (w[speed <= 0] == 0).all()
    assert x == min(speed[w > 0]) and mu == pytest.approx(width * x - price @ w)


@st.composite
def instances(draw):
    k = draw(st.integers(1, 3))
    types = [f"g{j}" for j in range(k)]
    gpus = {g: draw(st.integers(0, 8)) for g in types}
    tenants = []
    for t in range(draw(st.integers(1, 4))):
        classes = []
        for c in range(draw(st.integers(1, 2))):
            thr = {g: draw(st.sampled_from([0.0, 1.0, 2.0, 3.5, 8.0])) for g in types}
            if not any(thr.values()):
                thr[types[0]] = 1.0
            cls = {"name": f"c{c}", "throughput": thr}
            if draw(st.booleans()):
                cls["demand"] = draw(st.sampled_from([0, 1, 2.5, 4, 9]))
            if draw(st.booleans()):
                cls["type_demand"] = {g: draw(st.sampled_from([0, 1, 1.5, 3])) for g in types if draw(st.booleans())}
            if draw(st.booleans()):
                cls["jobs"] = [{"id": f"t{t}c{c}j{i}", "gpus": draw(st.integers(1, 5)),
                                "remaining": draw(st.sampled_from([0, 60, 360, 5000, 86400]))}
                               for i in range(draw(st.integers(0, 4)))]
            classes.append(cls)
        tenants.append({"name": f"t{t}", "weight": draw(st.sampled_from([1, 2])), "classes": classes})
    return problem_from_dict({"gpu_types": gpus, "tenants": tenants})


@settings(max_examples=EXAMPLES, deadline=None)
@given(instances())
def test_caps_capacity_whole_gangs_and_work_conservation(problem):
    a = hadar.solve(problem)
    vu = problem.virtual_users()
    props = fairness.check(a, None, sample=0)
    assert props["capacity"].value is True, props["capacity"].detail
    assert props["demand"].value is True, props["demand"].detail
    # work conservation: a type with idle GPUs has no class below its caps able to use it
    idle = vu.capacity - a.x.sum(axis=0)
    left = room(vu, a.x)
    for j in range(vu.k):
        if idle[j] > 1e-6:
            assert (left[:, j] <= 1e-6).all(), (vu.gpu_types[j], idle[j], left[:, j])
    # every admitted job is placed whole on types its class can use, at its slowest type's speed; the
    # allocation holds at least the admitted jobs' GPUs (fill_idle only adds)
    rows = {(vu.tenant[i], vu.cls[i]): i for i in range(vu.n)}
    jobs = {(t.name, c.name, j.id): j for t in problem.tenants for c in t.classes for j in (c.jobs or ())}
    placed = np.zeros((vu.n, vu.k))
    for q in a.job_placements:
        i = rows[(q.tenant, q.cls)]
        for g, v in q.gpus:
            placed[i, vu.gpu_types.index(g)] += v
        used = [vu.gpu_types.index(g) for g, v in q.gpus if v > 0]
        assert q.speed == pytest.approx(min(vu.speed[i, used]))
        assert (vu.speed[i, used] > 0).all()
        if (q.tenant, q.cls, q.job) in jobs:
            assert sum(v for _, v in q.gpus) == jobs[(q.tenant, q.cls, q.job)].gpus
        else:  # a made-up job: one GPU
            assert sum(v for _, v in q.gpus) == 1 and "#" in q.job
    assert (placed <= a.x + 1e-9).all()
    assert (placed <= np.floor(vu.type_cap + 1e-9)).all()
    assert (placed.sum(axis=1) <= np.floor(vu.demand + 1e-9)).all()
    # the first job in the queue that fits its class on an empty cluster is always admitted (U_min is low
    # enough), and the decision is a pure function of the problem
    jl, _ = hadar.queue(problem, vu)
    cand = hadar.candidates(vu, jl)
    if cand:
        first = cand[0]
        want = f"{first.id}#0" if first.copies else first.id  # a made-up class: its first 1-GPU job
        assert any(q.job == want and rows[(q.tenant, q.cls)] == first.row for q in a.job_placements)
        prm = hadar.price_parameters(vu, jl)
        usable = hadar.usable_types(vu)
        slowest = [float(vu.speed[j.row][usable[j.row]].min()) for j in cand]
        assert prm.u_min <= min(slowest) / (4 * prm.horizon) * (1 + 1e-12)  # below every job's utility per GPU
        assert (prm.u_max >= prm.u_min).all() and prm.horizon >= 1.0
    b = hadar.solve(problem)
    np.testing.assert_array_equal(a.x, b.x)
    assert a.job_placements == b.job_placements and a.notes == b.notes


def test_without_jobs_each_class_sees_one_1_gpu_job_per_gpu_of_demand():
    p = problem_from_dict({"gpu_types": {"k80": 3, "v100": 1}, "tenants": [
        {"name": "a", "classes": [{"name": "x", "throughput": {"k80": 1, "v100": 4}, "demand": 2}]},
        {"name": "b", "classes": [{"name": "y", "throughput": {"k80": 1, "v100": 2}, "demand": 3},
                                  {"name": "z", "throughput": {"k80": 1}, "jobs": [
                                      {"id": "z1", "gpus": 1, "remaining": 60}]}]}]})
    a = hadar.solve(p)
    notes = "\n".join(a.notes)
    assert "no jobs given for 2 class(es) (a/x, b/y): each sees one 1-GPU job of 3600 s per GPU of its demand" in notes
    assert "6 job(s)" in notes  # 2 + 3 made up, 1 listed
    assert {q.job for q in a.job_placements} >= {"z1", "x#0"}  # z1 is shortest; x#0 is the fastest made-up job
    ids = [q.job for q in a.job_placements]
    assert ids[0] == "z1" and ids[1] == "x#0"
    assert dict(a.job_placements[1].gpus) == {"v100": 1}  # the V100 is worth 4 to x, 2 to y
    # all listed classes: no such note
    assert not any("no jobs given" in n for n in hadar.solve(worked()).notes)


def test_solve_json_through_the_cli(tmp_path):
    from click.testing import CliRunner

    from slurm_fair.cli import main

    f = tmp_path / "p.json"
    f.write_text(json.dumps(problem_to_dict(worked())))
    r = CliRunner().invoke(main, ["solve", "--policy", "hadar", "--input", str(f), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["policy"] == "hadar" and out["solver"] == ""
    assert out["allocation"] == {"fast": {"k80": 1.0, "v100": 2.0}, "slow": {"k80": 3.0, "v100": 0.0}}
    assert out["job_placements"][0] == {"tenant": "fast", "class": "bert", "job": "f1",
                                        "gpus": {"k80": 1, "v100": 2}, "speed": 1.0}
    assert [p["job"] for p in out["job_placements"]] == ["f1", "s1", "s2"]
    # the table form prints the per-job notes
    r = CliRunner().invoke(main, ["solve", "-p", "hadar", "-i", str(f)])
    assert r.exit_code == 0 and "note: hadar: 5 job(s), 3 admitted" in r.output


def test_bad_jobs_in_a_problem_built_in_code_are_input_errors():
    def prob(job):
        return Problem({"k80": 2}, (Tenant("t", (JobClass("c", {"k80": 1.0}, jobs=(job,)),)),))

    with pytest.raises(InputError) as e:
        hadar.solve(prob(ClassJob("j", 0, 10.0)))
    assert e.value.field == "tenants.t.classes.c.jobs[0].gpus"
    with pytest.raises(InputError) as e:
        hadar.solve(prob(ClassJob("j", 1, math.nan)))
    assert e.value.field == "tenants.t.classes.c.jobs[0].remaining"
    with pytest.raises(InputError) as e:
        hadar.solve(prob(ClassJob("j", 1, 10.0)), solver="gurobi-ish")
    assert e.value.field == "solver"


def test_nothing_fits_everything_idle_goes_to_fill_idle():
    # a single 3-GPU job on a 2-GPU cluster: no candidate, no prices; the class still gets both GPUs
    p = problem_from_dict({"gpu_types": {"k80": 2}, "tenants": [
        {"name": "a", "classes": [{"name": "x", "throughput": {"k80": 1}, "demand": 4,
                                   "jobs": [{"id": "big", "gpus": 3, "remaining": 10}]}]}]})
    a = hadar.solve(p)
    assert a.job_placements == () and not any(n.startswith("prices") for n in a.notes)
    np.testing.assert_allclose(a.x, [[2.0]])
    assert "1 job(s), 0 admitted on 0 GPU(s), 1 turned away (1 did not fit, 0 priced out)" in a.notes[0]


def test_not_sharing_incentive_nor_envy_free_counter_example():
    # The paper claims a competitive ratio in total utility, no fairness. Two tenants, equal weights, 4 V100s;
    # each wants 8 GPUs and has one 4-GPU job. a's job is shorter, goes first and takes every V100 (the price
    # of the first GPU is U_min, far below its utility); b's job then does not fit and no GPU is idle.
    # b's weight share (2 V100s) would give it throughput 2 > 0, and b prefers a's bundle: neither sharing
    # incentive nor envy-freeness hold (both classes are below their demand of 8, so both are compared).
    p = problem_from_dict({"gpu_types": {"v100": 4}, "tenants": [
        {"name": "a", "classes": [{"name": "x", "throughput": {"v100": 1}, "demand": 8,
                                   "jobs": [{"id": "a1", "gpus": 4, "remaining": 600}]}]},
        {"name": "b", "classes": [{"name": "y", "throughput": {"v100": 1}, "demand": 8,
                                   "jobs": [{"id": "b1", "gpus": 4, "remaining": 1200}]}]}]})
    a = hadar.solve(p)
    np.testing.assert_allclose(a.x, [[4.0], [0.0]])
    props = fairness.check(a, None, sample=0)
    assert props["sharing_incentive"].value is False, props["sharing_incentive"].detail
    assert "b: throughput 0 < 2" in props["sharing_incentive"].detail
    assert props["envy_free"].value is False and "b envies a" in props["envy_free"].detail
    assert props["capacity"].value is True and props["demand"].value is True


def test_not_strategy_proof_counter_example():
    # One V100, one K80; a and b each ask for 1 GPU (made-up 1-GPU jobs of 3600 s: equal remaining time, so
    # the larger best speed goes first). Honest: b (3 on a V100) goes first and takes the V100, a gets the K80
    # (throughput 1). a reports 2x on the V100 (4 > 3): it goes first, takes the V100, and its true throughput
    # is 2. The checker's probe finds that lie.
    p = problem_from_dict({"gpu_types": {"k80": 1, "v100": 1}, "tenants": [
        {"name": "a", "classes": [{"name": "x", "throughput": {"k80": 1, "v100": 2}, "demand": 1}]},
        {"name": "b", "classes": [{"name": "y", "throughput": {"k80": 1, "v100": 3}, "demand": 1}]}]})
    a = hadar.solve(p)
    np.testing.assert_allclose(a.x, [[1.0, 0.0], [0.0, 1.0]])
    probe = fairness.strategy_proof_probe(a, hadar.solve)
    assert probe.value is False and "a gains by reporting" in probe.detail, probe.detail
    assert "true throughput 1 -> 2" in probe.detail


def test_registered_after_the_others():
    assert policies.names()[-1] == "hadar"
    assert policies.solve("hadar", worked()).policy == "hadar"
    assert not policies.takes_warm("hadar")


# --------------------------------------------------------------------------- issue 22: true to the paper


def test_jobs_are_taken_in_arrival_order_by_slurm_job_id():
    # Two tenants, 2 V100s; a's job 5 (2 GPUs, 3600 s = 10 rounds) arrived before b's job 9 (2 GPUs, 360 s).
    # Arrival order (the paper's queue; Slurm ids grow with submission) takes job 5 first, although job 9 is
    # shorter (the rule before issue 22 took it first). T = 10, C = 2, min t^max W = min(20, 2) = 2, eta = 10,
    # U_min = 1 / (4 * 10 * 10) = 1/400: job 5 pays 2 GPUs x 10 slots x 1/400 = 0.05, mu = 2 - 0.05 = 1.95 > 0:
    # admitted on both V100s; job 9 then does not fit.
    p = problem_from_dict({"gpu_types": {"v100": 2}, "tenants": [
        {"name": "a", "classes": [{"name": "x", "throughput": {"v100": 1},
                                   "jobs": [{"id": "5", "gpus": 2, "remaining": 3600}]}]},
        {"name": "b", "classes": [{"name": "y", "throughput": {"v100": 1},
                                   "jobs": [{"id": "9", "gpus": 2, "remaining": 360}]}]}]})
    vu = p.virtual_users()
    jobs, _ = hadar.queue(p, vu)
    assert [j.id for j in jobs] == ["5", "9"]
    prm = hadar.price_parameters(vu, jobs)
    assert prm.u_min == pytest.approx(1 / 400) and prm.slots == 10
    _, decisions = hadar.admit(vu, jobs, prm)
    assert [d.reason for d in decisions] == ["admitted", "no room"]
    assert decisions[0].payoff == pytest.approx(1.95)
    a = hadar.solve(p)
    np.testing.assert_allclose(a.x, [[2.0], [0.0]])
    # ids that are not all numbers: the listing order (every class's first job, then every class's second)
    q = problem_from_dict({"gpu_types": {"v100": 2}, "tenants": [
        {"name": "a", "classes": [{"name": "x", "throughput": {"v100": 1},
                                   "jobs": [{"id": "late", "gpus": 2, "remaining": 3600}]}]},
        {"name": "b", "classes": [{"name": "y", "throughput": {"v100": 1},
                                   "jobs": [{"id": "9", "gpus": 2, "remaining": 360}]}]}]})
    assert [j.id for j in hadar.queue(q)[0]] == ["late", "9"]


def test_the_price_is_charged_over_every_slot_the_job_holds():
    # One class, 4 K80s (speed 1, so U_max = 1), four 1-GPU jobs of 1440 s = 4 rounds each (D = 4 slots).
    # T = 4, C = 4, min t^max W = 4, eta = T C / 4 = 4, U_min = 1 / (4 * 4 * 4) = 1/64, R = U_max / U_min = 64:
    # k(gamma) = 64^(gamma/4 - 1) in each slot, and every admitted job raises all 4 slots by one GPU.
    #   j1: 4 * 64^-1 = 0.0625 -> mu 0.9375; j2: 4 * 64^-0.75 = 0.1768 -> 0.8232; j3: 4 * 64^-0.5 = 0.5 -> 0.5;
    #   j4: 4 * 64^-0.25 = 1.4142 -> mu -0.4142: priced out. Charged one slot only (the rule before issue 22)
    #   j4 would pay 64^-0.25 = 0.354 and be admitted. The idle K80 then goes to the class (fill_idle).
    p = problem_from_dict({"gpu_types": {"k80": 4}, "tenants": [
        {"name": "a", "classes": [{"name": "x", "throughput": {"k80": 1},
                                   "jobs": [{"id": f"j{i}", "gpus": 1, "remaining": 1440} for i in range(1, 5)]}]}]})
    vu = p.virtual_users()
    jobs, _ = hadar.queue(p, vu)
    prm = hadar.price_parameters(vu, jobs)
    assert prm.u_min == pytest.approx(1 / 64) and prm.slots == 4
    _, decisions = hadar.admit(vu, jobs, prm)
    assert [d.reason for d in decisions] == ["admitted"] * 3 + ["priced out"]
    np.testing.assert_allclose([d.payoff for d in decisions],
                               [1 - 4 / 64, 1 - 4 * 64 ** -0.75, 1 - 4 * 64 ** -0.5, 1 - 4 * 64 ** -0.25])
    a = hadar.solve(p)
    assert [q.job for q in a.job_placements] == ["j1", "j2", "j3"]
    np.testing.assert_allclose(a.x, [[4.0]])
    assert "1 idle GPU(s) handed" in "\n".join(a.notes)


def test_a_class_without_demand_is_decided_without_a_job_per_gpu():
    # One class, no demand, no jobs, 10 000 K80s: it stands for 10 000 made-up 1-GPU jobs of 3600 s (10 rounds).
    # T = 10, C = 1e4, min t^max W = 10, eta = 1e4, U_min = 1 / (4 * 1e4 * 10) = 2.5e-6, R = 1 / U_min = 4e5.
    # The n-th job pays 10 slots at U_min R^((n-1)/C) and is admitted while that is below its utility 1:
    # n - 1 < C ln(1 / (10 U_min)) / ln R = 1e4 ln(4e4) / ln(4e5) = 8214.94, so 8215 are admitted and the
    # 8216th is refused, which ends the class (the other 1784 are identical). The paper would leave the
    # 1785 GPUs its prices withheld idle; fill_idle hands them to the class.
    p = problem_from_dict({"gpu_types": {"k80": 10000}, "tenants": [
        {"name": "a", "classes": [{"name": "x", "throughput": {"k80": 1}}]}]})
    vu = p.virtual_users()
    jobs, made_up = hadar.queue(p, vu)
    assert made_up == [0] and len(jobs) == 1 and jobs[0].copies == 10000
    want = math.floor(1e4 * math.log(4e4) / math.log(4e5)) + 1
    assert want == 8215
    _, decisions = hadar.admit(vu, jobs, hadar.price_parameters(vu, jobs))
    assert len(decisions) == want + 1 and decisions[-1].count == 10000 - want
    assert decisions[-1].reason == "priced out" and decisions[-1].job.id == f"x#{want}"
    a = hadar.solve(p)
    assert len(a.job_placements) == want
    assert a.notes[0] == f"hadar: 10000 job(s), {want} admitted on {want} GPU(s), {10000 - want} turned away " \
                         f"(0 did not fit, {10000 - want} priced out)"
    np.testing.assert_allclose(a.x, [[10000.0]])
