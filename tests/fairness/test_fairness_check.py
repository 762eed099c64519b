"""``solve --check`` bounded (issue 22): Pareto efficiency as one LP built at once (the same LP as before: same
results), and the strategy-proofness probe with both lie models, a bounded number of re-solves."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.optimize import linprog

from benchmarks.philly import instance
from slurm_fair import fairness
from slurm_fair.fairness.values import PropertyResult, _fmt, _label, _tol
from slurm_fair.fairness.properties import capacity
from slurm_fair.model import Allocation, problem_from_dict
from slurm_fair.policies import gavel, oef_coop, oef_noncoop


# --------------------------------------------------------------------------- Pareto efficiency: same LP, same result


def pareto_reference(alloc: Allocation) -> PropertyResult:
    """The Pareto check as it was before issue 22 (matrix built entry by entry), kept as the reference.

    max sum_l u_l(y_l)  s.t.  u_l(y_l) >= u_l(x_l), sum_l y_l^j <= m_j, sum_j y_l^j <= d_l, 0 <= y_l^j <= c_l^j;
    Pareto-efficient iff the optimum does not exceed the current total throughput.
    """
    from scipy.optimize import linprog
    from scipy.sparse import lil_matrix

    cap_r = capacity(alloc)
    if cap_r.value is False:
        return PropertyResult("pareto_efficient", None, f"allocation is infeasible ({cap_r.detail})")
    vu, x = alloc.vu, np.asarray(alloc.x, dtype=float)
    n, k = vu.n, vu.k
    s = vu.speed
    u = (x * s).sum(axis=1)
    finite = [i for i in range(n) if np.isfinite(vu.demand[i])]
    a = lil_matrix((k + len(finite) + n, n * k))
    b = np.zeros(k + len(finite) + n)
    for j in range(k):
        for i in range(n):
            a[j, i * k + j] = 1.0
        b[j] = max(vu.capacity[j], x[:, j].sum())
    for r, i in enumerate(finite):
        for j in range(k):
            a[k + r, i * k + j] = 1.0
        b[k + r] = max(vu.demand[i], x[i].sum()) + _tol(vu.demand[i])
    for i in range(n):
        row = k + len(finite) + i
        for j in range(k):
            a[row, i * k + j] = -s[i, j]
        b[row] = -(u[i] - _tol(u[i]))
    def upper(i: int, j: int) -> float | None:
        if s[i, j] <= 0:
            return 0.0
        c = vu.type_cap[i, j]
        return None if not np.isfinite(c) else max(float(c), float(x[i, j])) + _tol(c)

    bounds = [(0.0, upper(i, j)) for i in range(n) for j in range(k)]
    res = linprog(-s.reshape(-1), A_ub=a.tocsr(), b_ub=b, bounds=bounds, method="highs")
    if res.status != 0:
        return PropertyResult("pareto_efficient", None, f"LP not solved: {res.message}")
    y = res.x.reshape(n, k)
    gains = (y * s).sum(axis=1) - u
    gain = float(-res.fun - u.sum())
    # each user's floor was relaxed by its tolerance; what that frees can be worth up to the fastest speed
    slack = sum(_tol(v) for v in u) * float(s.max(initial=1.0)) + _tol(u.sum())
    if gain > slack:
        i = int(np.argmax(gains))
        return PropertyResult(
            "pareto_efficient", False, f"throughput can rise by {_fmt(gain)} without anyone losing (e.g. {_label(vu, i)} +{_fmt(gains[i])})", gain
        )
    return PropertyResult("pareto_efficient", True, "no user can gain without another losing", max(gain, 0.0))


def _random_allocation(p, rng):
    """A feasible-or-not allocation of ``p``: random shares of each type, some left idle, some over a cap."""
    vu = p.virtual_users()
    x = rng.random((vu.n, vu.k)) * (rng.random((vu.n, vu.k)) < 0.5)
    x = x / np.maximum(x.sum(axis=0), 1e-9) * vu.capacity * rng.uniform(0.6, 1.0, vu.k)
    return Allocation(p, "random", np.where(vu.speed > 0, x, 0.0))


@pytest.mark.parametrize("seed", range(4))
def test_pareto_lp_built_at_once_gives_the_same_result_as_before(seed):
    rng = np.random.default_rng(seed)
    for n, k, per_type in ((4, 2, False), (12, 3, True), (30, 4, False), (30, 4, True)):
        p = instance(n, k, seed, type_demand=per_type)
        allocs = [_random_allocation(p, rng), oef_noncoop.solve(p), gavel.solve(p)]
        if n <= 12:
            allocs.append(oef_coop.solve(p))
        for a in allocs:
            got, want = fairness.pareto_efficient(a), pareto_reference(a)
            assert got.value == want.value, (n, k, a.policy, got, want)
            assert got.detail == want.detail
            assert got.worst == pytest.approx(want.worst, rel=1e-6, abs=1e-6)


# --------------------------------------------------------------------------- strategy-proofness: sandbagging


def two_tenants(k80_a: float = 1.0):
    """A: 1 on k80, 6 on v100; B: 1 on k80, 2 on v100; one GPU of each type, equal weights. ``k80_a``: what A
    reports on k80 (its slowest type)."""
    return problem_from_dict({"gpu_types": {"k80": 1, "v100": 1}, "tenants": [
        {"name": "A", "classes": [{"name": "job", "throughput": {"k80": k80_a, "v100": 6.0}}]},
        {"name": "B", "classes": [{"name": "job", "throughput": {"k80": 1.0, "v100": 2.0}}]}]})


def test_oef_noncoop_sandbagging_the_fast_type_pays_and_the_probe_says_so():
    """Worked by hand (eq. 9, equal weights: max t with u_A = u_B = t). A's speed ratio v100/k80 (6) beats B's
    (2), so B takes the k80 and the v100 is split: A gets v100 share 1 - y, B gets 1 + 2y.
    Honest: 6(1 - y) = 1 + 2y -> y = 5/8, t = 2.25: A's true throughput 2.25 (x_A = [0, 3/8]).
    Lie: A reports 2 on k80 (x2 on its slowest type), i.e. normalized (1, 3): 3(1 - y) = 1 + 2y -> y = 2/5,
    A gets 0.6 of the v100, worth 6 * 0.6 = 3.6 in truth (+60 %). A's reported ratio 3 still beats B's 2, so
    the optimum is unique (B must hold the whole k80). Inflating the v100 instead (ratio 6f > 6) makes A's
    level cheaper to reach: it gets less v100 (6f(1 - y) = 1 + 2y -> 1 - y = 3/(6f + 2) < 3/8) and only
    loses: Thm 5.4's lie model holds, sandbagging is outside it."""
    honest = oef_noncoop.solve(two_tenants())
    np.testing.assert_allclose(honest.x, [[0, 3 / 8], [1, 5 / 8]], atol=1e-7)
    lied = oef_noncoop.solve(two_tenants(k80_a=2.0))
    np.testing.assert_allclose(lied.x, [[0, 0.6], [1, 0.4]], atol=1e-7)
    assert 6.0 * lied.x[0, 1] == pytest.approx(3.6, rel=1e-7)
    # an independent LP of the lie (variables x_A^k80, x_A^v100, x_B^k80, x_B^v100, t): the same split
    res = linprog([0, 0, 0, 0, -1], A_eq=[[1, 3, 0, 0, -1], [0, 0, 1, 2, -1]], b_eq=[0, 0],
                  A_ub=[[1, 0, 1, 0, 0], [0, 1, 0, 1, 0]], b_ub=[1, 1], bounds=(0, None), method="highs")
    assert res.x[1] == pytest.approx(0.6, abs=1e-9) and -res.fun == pytest.approx(1.8, abs=1e-9)

    r = fairness.strategy_proof_probe(honest, oef_noncoop.solve)
    assert r.value is False
    assert r.detail.startswith("inflating fast types: no gain from 6 false reports; ")  # 2 tenants x 3 factors
    assert ("over-reporting the slowest type (sandbagging the fast ones): A gains by reporting x2 on k80, its "
            "slowest type: true throughput 2.25 -> 3.6") in r.detail
    assert r.worst == pytest.approx(3.6 - 2.25, rel=1e-6)
    assert "[oef-noncoop: strategy-proof against inflating fast types (Thm 5.4's lie model); not against sandbagging them" in r.detail
    # Thm 5.4's lie model alone: no gain
    only = fairness.strategy_proof_probe(honest, oef_noncoop.solve, kinds=("inflate",))
    assert only.value is True and "no gain from 6 false reports" in only.detail


def test_sandbag_lies_over_report_the_slowest_type_only():
    p = problem_from_dict({"gpu_types": {"k80": 1, "v100": 1, "a100": 1}, "tenants": [
        {"name": "u", "classes": [{"name": "job", "throughput": {"k80": 1.0, "v100": 2.0, "a100": 4.0}}]}]})
    seen = list(fairness.lies(p, factors=(1.5,), kinds=("sandbag",)))
    assert [d for _, _, d, _ in seen] == ["x1.5 on k80, its slowest type"]
    truth = p.virtual_users().speed[0]
    rep = seen[0][3].virtual_users().speed[0]
    # normalized to the (over-reported) slowest type again: every fast type's speedup is under-reported
    np.testing.assert_allclose(rep, [1.0, 2.0 / 1.5, 4.0 / 1.5])
    assert (rep[1:] < truth[1:]).all()
    # a class with one usable type has no lie of either kind (scaling it changes no normalized speed)
    one = problem_from_dict({"gpu_types": {"k80": 1}, "tenants": [
        {"name": "u", "classes": [{"name": "job", "throughput": {"k80": 1.0}}]}]})
    assert list(fairness.lies(one, kinds=fairness.KINDS)) == [] and fairness.class_lies(one, one.tenants[0], one.tenants[0].classes[0]) == []


# --------------------------------------------------------------------------- the probe's budget


def test_probe_budget_is_every_lie_when_small_and_two_re_solves_when_large():
    calls = []

    def counting(p):
        calls.append(1)
        return oef_noncoop.solve(p)

    small = two_tenants()
    assert fairness.budget(small) == 300  # 600 // 2 classes
    tried, total = fairness.schedule(small, fairness.budget(small))
    assert len(tried) == total == 12  # 2 tenants x 3 factors x (one fast type inflated, the slowest over-reported)
    fairness.strategy_proof_probe(oef_noncoop.solve(small), counting)
    assert len(calls) == 12  # one re-solve per false report; the honest outcome is the allocation itself

    big = instance(1000, 10, 0)
    n = big.virtual_users().n
    assert n > 1000 and fairness.budget(big) == 2
    tried, total = fairness.schedule(big, 2)
    assert len(tried) == 2 and total > 10 * n
    # one class, its two most telling lies: all fast types inflated by 2, its slowest type over-reported by 2
    assert tried[0].tenant == tried[1].tenant and tried[0].cls == tried[1].cls
    assert [lie.kind for lie in tried] == ["inflate", "sandbag"]
    assert tried[0].what.startswith("x2 on all but ") and tried[1].what.endswith("its slowest type")


def test_check_sample_zero_skips_the_probe_and_none_uses_the_budget():
    a = oef_noncoop.solve(two_tenants())
    assert fairness.check(a, oef_noncoop.solve, sample=0)["strategy_proof_probe"].value is None
    r = fairness.check(a, oef_noncoop.solve)["strategy_proof_probe"]
    assert "tried" not in r.detail  # every lie was tried: no sample named
    r = fairness.check(a, oef_noncoop.solve, sample=3)["strategy_proof_probe"]
    assert "(tried 3 of 12 false reports: 2 class(es) drawn with seed 0, --check-sample 3)" in r.detail


def test_a_policy_without_a_claim_gets_no_claim_text():
    a = dataclasses.replace(oef_noncoop.solve(two_tenants()), policy="something-else")
    r = fairness.strategy_proof_probe(a, oef_noncoop.solve)
    assert "[" not in r.detail


# --------------------------------------------------------------------------- Pareto: the cheap certificate (large problems)


def test_pareto_certificate_trade_on_the_max_min_allocation_of_eq6():
    """OEF §3.1 eq. 6 (speeds u1 (1, 2), u2 (1, 5)), max-min allocation [[.5, .5], [.5, .5]]; no demands, so
    GPU counts may change. The two trades tried (r: the middle of the interval where both gain):
    * u1 gives e gpu2 for r*e gpu1, r in (2, 5), r = 3.5; u2 holds 0.5 gpu1: e = 1/7; gains u1 (3.5 - 2)/7,
      u2 (5 - 3.5)/7: 3/7 in all;
    * u2 gives e gpu1 for r*e gpu2, r in (1/5, 1/2), r = 0.35; u2 holds 0.5 gpu1: e = 0.5 (u1 can give
      0.175 <= 0.5 gpu2); gains u2 0.5 (5 * 0.35 - 1) = 0.375, u1 0.5 (1 - 2 * 0.35) = 0.15: 0.525 in all.
    The larger is reported: u1 1.5 -> 1 + 2 * 0.325 = 1.65, u2 3 -> 5 * 0.675 = 3.375."""
    p = problem_from_dict({"gpu_types": {"gpu1": 1, "gpu2": 1}, "tenants": [
        {"name": f"u{i + 1}", "classes": [{"name": "job", "throughput": {"gpu1": 1.0, "gpu2": v}}]} for i, v in enumerate((2.0, 5.0))]})
    a = Allocation(p, "hand-built", np.array([[0.5, 0.5], [0.5, 0.5]]))
    r = fairness.pareto_efficient(a, exact_vars=0)
    assert r.value is False and r.worst == pytest.approx(0.525)
    assert "at least 0.525 without anyone losing (e.g. u2 +0.375: a trade of 0.5 gpu1 for 0.175 gpu2 with u1)" in r.detail
    exact = fairness.pareto_efficient(a)  # the LP: the largest gain, at least the certificate's
    assert exact.value is False and exact.worst >= r.worst - 1e-9


@pytest.mark.parametrize("seed", range(4))
def test_pareto_certificate_is_sound_against_the_lp(seed):
    """Whenever the certificate says "not Pareto-efficient", the exact LP agrees and gains at least as much;
    when it finds nothing the answer is the LP's."""
    rng = np.random.default_rng(100 + seed)
    found = 0
    for n, k, per_type in ((5, 2, False), (12, 3, True), (20, 4, False), (20, 4, True)):
        p = instance(n, k, seed, type_demand=per_type)
        for a in (_random_allocation(p, rng), oef_noncoop.solve(p), gavel.solve(p)):
            cert, exact = fairness.pareto_efficient(a, exact_vars=0), fairness.pareto_efficient(a, exact_vars=None)
            if "at least" in cert.detail:
                found += 1
                assert exact.value is False, (cert, exact)
                assert exact.worst >= cert.worst * (1 - 1e-6) - 1e-6
            else:
                assert cert == exact
    assert found > 0
