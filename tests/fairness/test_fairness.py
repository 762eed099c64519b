"""Fairness checks on hand-built allocations with the paper's numbers (OEF §2.4, §3.1, §4.2.3)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

from slurm_fair import fairness
from slurm_fair.model import Allocation, Problem, problem_from_dict


def problem(speeds, caps=(1, 1), types=("gpu1", "gpu2"), weights=None, demands=None):
    """One single-class tenant u1, u2, ... per row of ``speeds``."""
    tenants = []
    for i, row in enumerate(speeds):
        c = {"name": "job", "throughput": dict(zip(types, row))}
        if demands and demands[i] is not None:
            c["demand"] = demands[i]
        tenants.append({"name": f"u{i + 1}", "weight": (weights or [1] * len(speeds))[i], "classes": [c]})
    return problem_from_dict({"gpu_types": dict(zip(types, caps)), "tenants": tenants})


def alloc(p: Problem, x) -> Allocation:
    return Allocation(problem=p, policy="hand-built", x=np.array(x, dtype=float))


EQ6 = [[1, 2], [1, 5]]  # §3.1 eq. 6
EQ1 = [[1, 2], [1, 3], [1, 4]]  # §2.4 eq. 1 / §3.1 eq. 5


# --------------------------------------------------------------------------- paper allocations


def test_eq6_cooperative_allocation_is_ef_si_pe_but_not_equal():
    r = fairness.check(alloc(problem(EQ6), [[1, 0.25], [0, 0.75]]))
    assert set(r) == set(fairness.KEYS)
    assert r["envy_free"].value is True  # u1's constraint is tight: 1 + 2*0.25 == 0 + 2*0.75
    assert r["sharing_incentive"].value is True
    assert r["pareto_efficient"].value is True
    assert r["capacity"].value is True and r["demand"].value is True
    assert r["adjacent_types"].value is True
    assert r["equal_throughput"].value is False  # 1.5 vs 3.75
    assert r["equal_throughput"].worst == pytest.approx(2.25)
    assert r["strategy_proof_probe"].value is None  # no solver given
    assert "no solver" in r["strategy_proof_probe"].detail


def test_eq6_max_min_allocation_is_not_pareto_efficient():
    # §3.1: X^f = max-min fairness; u1 trades GPU2 for GPU1 and both gain
    r = fairness.pareto_efficient(alloc(problem(EQ6), [[0.5, 0.5], [0.5, 0.5]]))
    assert r.value is False
    assert r.worst > 0.1
    assert "without anyone losing" in r.detail


def test_eq6_after_u1_lies_envy_free_for_the_truth_fails():
    # §3.1: u1 lies (speedup 4) and gets X^l = [[1, .375], [0, .625]]; under the TRUE speeds u2 now envies u1?
    # u2: own 5*.625 = 3.125 vs u1's bundle 1 + 5*.375 = 2.875 -> no; but u1 now takes more than SI needs.
    r = fairness.check(alloc(problem(EQ6), [[1, 0.375], [0, 0.625]]))
    assert r["envy_free"].value is True
    assert r["pareto_efficient"].value is True
    # total 4.875 < 5.25 of the honest optimum: PE holds but efficiency dropped, as the paper says
    a = alloc(problem(EQ6), [[1, 0.375], [0, 0.625]])
    assert a.total_throughput() == pytest.approx(4.875)


def test_eq5_max_throughput_allocation_violates_si_and_ef_but_is_pe():
    r = fairness.check(alloc(problem(EQ1), [[1, 0], [0, 0], [0, 1]]))
    assert r["sharing_incentive"].value is False
    assert "u2" in r["sharing_incentive"].detail  # u2 gets nothing
    assert r["sharing_incentive"].worst == pytest.approx(1 / 3 + 3 / 3)
    assert r["envy_free"].value is False
    assert r["pareto_efficient"].value is True


def test_eq1_gandiva_allocation_u3_envies_u2():
    r = fairness.envy_free(alloc(problem(EQ1), [[1, 0.09], [0, 0.47], [0, 0.44]]))
    assert r.value is False
    assert "u3 envies u2" in r.detail
    assert r.worst == pytest.approx(4 * 0.03)


def test_eq2_allocation_has_all_fairness_properties():
    r = fairness.check(alloc(problem(EQ1), [[1, 0], [0, 0.5], [0, 0.5]]))
    for k in ("sharing_incentive", "envy_free", "pareto_efficient", "adjacent_types", "capacity", "demand"):
        assert r[k].value is True, (k, r[k])


def test_eq3_gavel_allocation_is_not_pareto_efficient():
    # §2.4: "u2 can trade with u1 to obtain higher efficiency without hurting anyone"
    r = fairness.pareto_efficient(alloc(problem(EQ1), [[0.91, 0.09], [0.09, 0.45], [0, 0.45]]))
    assert r.value is False


def test_weighted_noncoop_allocation_has_equal_weighted_throughput():
    # §4.2.3: eq. 6 with pi_2 = 2 -> X = [[1, 1/3], [0, 2/3]], u1 = 5/3, u2 = 10/3
    p = problem(EQ6, weights=[1, 2])
    r = fairness.check(alloc(p, [[1, 1 / 3], [0, 2 / 3]]))
    assert r["equal_throughput"].value is True
    assert r["pareto_efficient"].value is True
    # Thm 3.3 (SI and SP conflict): u2's weight share, 2/3 of each type, would give it 2/3 + 5 * 2/3 = 4
    assert r["sharing_incentive"].value is False
    assert "u2" in r["sharing_incentive"].detail and r["sharing_incentive"].worst == pytest.approx(4 - 10 / 3)
    # the same allocation ignoring weights is unequal
    assert fairness.equal_throughput(alloc(problem(EQ6), [[1, 1 / 3], [0, 2 / 3]])).value is False
    # weighted envy: u2 values u1's bundle scaled by 2/1 at 2*(1 + 5/3) > 10/3
    assert r["envy_free"].value is False
    assert "u2 envies u1" in r["envy_free"].detail


def test_weighted_sharing_incentive_uses_weight_shares():
    p = problem(EQ6, weights=[1, 3])  # u1's share is 1/4 of each type: 1/4 + 2/4 = 0.75
    assert fairness.sharing_incentive(alloc(p, [[0.75, 0], [0.25, 1]])).value is True
    r = fairness.sharing_incentive(alloc(p, [[0.7, 0], [0.3, 1]]))
    assert r.value is False and r.worst == pytest.approx(0.05)


def test_multiclass_virtual_users_split_the_weight():
    # §4.2.4: u1 has two classes <1,2> and <1,3>, u2 two classes <1,5>; X from the paper (rounded to 2 digits)
    p = problem_from_dict(
        {
            "gpu_types": {"gpu1": 1, "gpu2": 1},
            "tenants": [
                {"name": "u1", "classes": [{"name": "a", "throughput": {"gpu1": 1, "gpu2": 2}}, {"name": "b", "throughput": {"gpu1": 1, "gpu2": 3}}]},
                {"name": "u2", "classes": [{"name": "c", "throughput": {"gpu1": 1, "gpu2": 5}}, {"name": "d", "throughput": {"gpu1": 1, "gpu2": 5}}]},
            ],
        }
    )
    t = 45 / 37  # exact solution of 1 + 2a = 3b = 5c, a + b + 2c = 1
    x = [[1, (t - 1) / 2], [0, t / 3], [0, t / 5], [0, t / 5]]
    r = fairness.check(alloc(p, x))
    assert r["equal_throughput"].value is True
    assert r["capacity"].value is True
    rough = fairness.equal_throughput(alloc(p, [[1, 0.11], [0, 0.41], [0, 0.24], [0, 0.24]]))
    assert rough.value is False and rough.worst < 0.1  # the paper's rounded numbers are only near-equal
    assert "u1/a" in rough.detail or "u1/b" in rough.detail or "u2/" in rough.detail


# --------------------------------------------------------------------------- feasibility, adjacency


def test_capacity_and_demand_violations_are_named():
    p = problem(EQ6, demands=[0.5, None])
    r = fairness.capacity(alloc(p, [[0.6, 0.5], [0.6, 0.5]]))
    assert r.value is False and "gpu1" in r.detail and r.worst == pytest.approx(0.2)
    r = fairness.demand(alloc(p, [[0.4, 0.3], [0.6, 0.7]]))
    assert r.value is False and "u1" in r.detail and r.worst == pytest.approx(0.2)
    assert fairness.demand(alloc(p, [[0.25, 0.25], [0.75, 0.75]])).value is True
    assert fairness.capacity(alloc(p, [[-0.1, 0.5], [0.6, 0.5]])).value is False
    # infeasible allocation: PE is not applicable
    assert fairness.pareto_efficient(alloc(p, [[0.6, 0.5], [0.6, 0.5]])).value is None


def test_sharing_incentive_respects_demand():
    # u1 can use 0.5 GPU: its fair baseline is its best 0.5 GPU of the half share = 0.5 * 2 on gpu2
    p = problem(EQ6, demands=[0.5, None])
    assert fairness.sharing_incentive(alloc(p, [[0, 0.5], [1, 0.5]])).value is True
    # below its demand, u1 is compared with its capped baseline 1.0
    r = fairness.sharing_incentive(alloc(p, [[0.25, 0], [0.75, 1]]))
    assert r.value is False and "u1" in r.detail and r.worst == pytest.approx(0.75)
    # at its demand, u1's cap decides its share: it is not compared, and the detail says so
    r = fairness.sharing_incentive(alloc(p, [[0.5, 0], [0.5, 1]]))
    assert r.value is True and "among the 1 uncapped class(es)" in r.detail
    # equal throughput skips the class that sits at its demand
    r = fairness.equal_throughput(alloc(p, [[0, 0.5], [1, 0.5]]))
    assert r.value is True and "at their demand" in r.detail


def test_pareto_with_demand_limited_idle_gpus_is_efficient():
    p = problem(EQ6, demands=[1, 1])
    # both saturated: nothing left to improve
    assert fairness.pareto_efficient(alloc(p, [[1, 0], [0, 1]])).value is True
    # u1 holds gpu2 (worth 2 to it, gpu1 only 1): swapping would hurt u1, so this is Pareto-efficient too
    assert fairness.pareto_efficient(alloc(p, [[0, 1], [1, 0]])).value is True
    # half of gpu2 idle while u2 could still use it
    r = fairness.pareto_efficient(alloc(p, [[1, 0], [0, 0.5]]))
    assert r.value is False and r.worst == pytest.approx(2.5) and "u2" in r.detail


THREE = ("k80", "v100", "a100")


def test_adjacent_types_detects_a_gap():
    p = problem([[1, 2, 4], [1, 3, 6]], caps=(1, 1, 1), types=THREE)
    ok = fairness.adjacent_types(alloc(p, [[1, 0.5, 0], [0, 0.5, 1]]))
    assert ok.value is True and "k80 < v100 < a100" in ok.detail
    bad = fairness.adjacent_types(alloc(p, [[0.5, 0, 0.5], [0.5, 1, 0.5]]))
    assert bad.value is False
    assert "u1 uses k80, a100 but not v100" in bad.detail


def test_adjacent_types_not_applicable_when_orders_differ():
    p = problem([[1, 2, 3], [1, 3, 2]], caps=(1, 1, 1), types=THREE)
    r = fairness.adjacent_types(alloc(p, [[1, 0, 0], [0, 1, 1]]))
    assert r.value is None and "different speed orders" in r.detail


# --------------------------------------------------------------------------- strategy-proofness probe


def max_throughput(p: Problem) -> Allocation:
    """Eq. 4 (a mechanism the paper shows is not strategy-proof), as a plain LP."""
    vu = p.virtual_users()
    n, k = vu.n, vu.k
    a = np.zeros((k, n * k))
    for j in range(k):
        a[j, j::k] = 1
    res = linprog(-vu.speed.reshape(-1), A_ub=a, b_ub=vu.capacity, bounds=(0, None), method="highs")
    return Allocation(p, "test-max-throughput", res.x.reshape(n, k))


def equal_split(p: Problem) -> Allocation:
    """Weight share of every type whatever is reported: strategy-proof by construction."""
    vu = p.virtual_users()
    return Allocation(p, "test-equal-split", vu.weight[:, None] / vu.weight.sum() * vu.capacity[None, :])


def test_strategy_proof_probe_catches_a_profitable_lie():
    p = problem(EQ1)
    r = fairness.strategy_proof_probe(max_throughput(p), max_throughput)
    assert r.value is False
    assert "gains by reporting" in r.detail and "gpu2" in r.detail
    assert r.worst >= 1.0  # at least a whole fast GPU more


def test_strategy_proof_probe_passes_a_report_independent_mechanism():
    p = problem(EQ1, weights=[1, 2, 1])
    r = fairness.strategy_proof_probe(equal_split(p), equal_split)
    assert r.value is True
    # per lie model, 3 tenants x 3 factors: inflating the 1 type faster than their slowest ("all but slowest"
    # needs >= 3 types), and over-reporting the slowest
    assert r.detail == ("inflating fast types: no gain from 9 false reports; over-reporting the slowest type "
                        "(sandbagging the fast ones): no gain from 9 false reports")


def test_lies_never_under_report():
    p = problem([[1, 2, 4]], caps=(1, 1, 1), types=THREE)
    seen = list(fairness.lies(p, factors=(1.5,)))
    assert [d for _, _, d, _ in seen] == ["x1.5 on v100", "x1.5 on a100", "x1.5 on all but k80"]
    truth = p.virtual_users().speed[0]
    for _, _, _, lying in seen:
        # every reported normalized speedup >= the true one, at least one strictly
        rep = lying.virtual_users().speed[0]
        assert (rep >= truth).all() and (rep > truth).any()


def test_check_runs_the_probe_when_given_a_solver():
    p = problem(EQ1)
    r = fairness.check(equal_split(p), solve=equal_split)
    assert r["strategy_proof_probe"].value is True
    assert r["pareto_efficient"].value is False  # equal split of heterogeneous GPUs wastes throughput
    assert r["sharing_incentive"].value is True and r["envy_free"].value is True


@pytest.mark.parametrize("seed", range(6))
def test_bundle_values_vectorized_equals_the_greedy_loop(seed):
    """The envy check values every other bundle at once (``bundle_values``): the same numbers as the one-by-one
    greedy ``bundle_value`` (fastest type first within demand and per-type caps), including unusable types,
    ties in speed, infinite demand and caps."""
    from slurm_fair.fairness import bundle_value, bundle_values

    rng = np.random.default_rng(seed)
    k = 5
    for _ in range(20):
        speed = rng.choice([0.0, 1.0, 1.5, 2.0, 3.0], k)
        bundles = rng.uniform(0, 3, (15, k)) * (rng.random((15, k)) < 0.7)
        demand = float(rng.choice([np.inf, 0.5, 1.0, 2.5, 6.0]))
        cap = None if rng.random() < 0.4 else np.where(rng.random(k) < 0.5, np.inf, rng.uniform(0, 2, k))
        got = bundle_values(speed, bundles, demand, cap)
        want = [bundle_value(speed, b, demand, cap) for b in bundles]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_strategy_proof_probe_samples_false_reports_with_a_fixed_seed():
    from benchmarks.philly import instance
    from slurm_fair import fairness
    from slurm_fair.policies import gavel

    p = instance(40, 3, 0)
    a = gavel.solve(p)
    s1, s2 = fairness.sample_tenants(p, 5), fairness.sample_tenants(p, 5)
    assert s1 == s2 and len(s1) == 5 and set(s1) <= {t.name for t in p.tenants}
    assert fairness.sample_tenants(p, 40) is None and fairness.sample_tenants(p, None) is None
    tried, total = fairness.schedule(p, 5)
    assert fairness.schedule(p, 5) == (tried, total) and len(tried) == 5
    # every class's lies, both models: the count the detail names
    assert total == sum(len(fairness.class_lies(p, t, c)) for t in p.tenants for c in t.classes)
    # two lies per drawn class (its first two: the largest factor, all fast types inflated / slowest over-reported)
    by_class = {}
    for lie in tried:
        by_class.setdefault((lie.tenant, lie.cls), []).append(lie)
    assert [len(v) for v in by_class.values()] == [2, 2, 1]
    for (t, c), v in by_class.items():
        assert v == fairness.class_lies(p, p.tenant(t), next(k for k in p.tenant(t).classes if k.name == c))[:len(v)]
    r = fairness.strategy_proof_probe(a, gavel.solve, sample=5)
    assert f"tried 5 of {total} false reports: 3 class(es) drawn with seed 0" in r.detail
    assert fairness.strategy_proof_probe(a, gavel.solve, sample=0).value is None
