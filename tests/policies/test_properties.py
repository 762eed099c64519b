"""Property tests of the OEF policies over random small instances (hypothesis).

Throughput is normalized ("equivalent slowest GPUs"), read from ``Problem.virtual_users().speed``.
Independent references are written directly against ``scipy.optimize.linprog`` (HiGHS), not cvxpy.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import linprog

from slurm_fair.model import JobClass, Problem, Tenant
from tests.conftest import SETTINGS, problems
from slurm_fair.policies.common import waterfill
from slurm_fair.policies import bud, equal_share, gandiva_fair, gavel, hadar, max_throughput, oef_coop, oef_noncoop, themis

REL = 1e-6


def rel_close(a, b, rel=REL):
    assert abs(a - b) <= rel * max(1.0, abs(a), abs(b)), (a, b)


def check_capacity(a):
    vu = a.problem.virtual_users()
    assert (a.x >= 0).all()
    assert (a.x.sum(axis=0) <= vu.capacity + 1e-9).all()
    assert (a.x[vu.speed <= 0] == 0).all()


# --------------------------------------------------------------------------- independent linprog models


def _bounds(speed):
    return [(0, 0) if s <= 0 else (0, None) for s in speed.ravel()]


def _cap_rows(n, k, capacity):
    a = np.zeros((k, n * k))
    for j in range(k):
        a[j, j::k] = 1.0
    return a, capacity


def linprog_eq9(speed, weight, capacity):
    """max Σ w·x s.t. u_l/π_l = t for all l, capacity: variables x (n·k) then t."""
    n, k = speed.shape
    c = np.concatenate([-speed.ravel(), [0.0]])
    a_ub, b_ub = _cap_rows(n, k, capacity)
    a_ub = np.hstack([a_ub, np.zeros((k, 1))])
    a_eq = np.zeros((n, n * k + 1))
    for i in range(n):
        a_eq[i, i * k:(i + 1) * k] = speed[i] / weight[i]
        a_eq[i, -1] = -1.0
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.zeros(n), bounds=_bounds(speed) + [(0, None)],
                  method="highs")
    assert res.status == 0, res.message
    return -res.fun


def linprog_eq10(speed, weight, capacity):
    """max Σ w·x s.t. u_l(x_i)/π_i - u_l(x_l)/π_l <= 0 for all l != i, capacity."""
    n, k = speed.shape
    a_cap, b_cap = _cap_rows(n, k, capacity)
    rows = []
    for l in range(n):
        for i in range(n):
            if i != l:
                r = np.zeros(n * k)
                r[i * k:(i + 1) * k] += speed[l] / weight[i]
                r[l * k:(l + 1) * k] -= speed[l] / weight[l]
                rows.append(r)
    a_ub = np.vstack([a_cap] + rows) if rows else a_cap
    b_ub = np.concatenate([b_cap, np.zeros(len(rows))])
    res = linprog(-speed.ravel(), A_ub=a_ub, b_ub=b_ub, bounds=_bounds(speed), method="highs")
    assert res.status == 0, res.message
    return -res.fun


# --------------------------------------------------------------------------- non-cooperative OEF (eq. 9)


@SETTINGS
@given(problems(max_classes=2))
def test_noncoop_equal_weighted_throughput_capacity_and_optimum(p):
    a = oef_noncoop.solve(p)
    vu = p.virtual_users()
    check_capacity(a)
    level = a.user_throughput() / vu.weight
    for v in level:
        rel_close(v, level[0])
    rel_close(a.total_throughput(), linprog_eq9(vu.speed, vu.weight, vu.capacity))


@SETTINGS
@given(problems(), st.data())
def test_noncoop_strategy_proof_probe(p, data):
    """A user who inflates its reported speedups never gains true (normalized) throughput (Thm 5.4)."""
    vu = p.virtual_users()
    i = data.draw(st.integers(0, len(p.tenants) - 1))
    honest = oef_noncoop.solve(p).user_throughput()[i]
    t = p.tenants[i]
    cls = t.classes[0]
    slowest = min((g for g, v in cls.throughput.items() if v > 0), key=lambda g: cls.throughput[g])
    factors = {g: data.draw(st.sampled_from([1.0, 1.1, 1.5, 2.0, 4.0])) for g in cls.throughput if g != slowest}
    lie = JobClass(cls.name, {g: v * factors.get(g, 1.0) for g, v in cls.throughput.items()}, cls.demand)
    tenants = list(p.tenants)
    tenants[i] = Tenant(t.name, (lie,), t.weight)
    lied = oef_noncoop.solve(Problem(p.gpu_types, tuple(tenants)))
    true_gain = float(np.dot(vu.speed[i], lied.x[i]))
    assert true_gain <= honest * (1 + REL) + 1e-9, (true_gain, honest)


@SETTINGS
@given(problems(max_n=3))
def test_noncoop_probe_finds_no_gain_from_inflating_fast_types(p):
    """Thm 5.4 through ``fairness.strategy_proof_probe``: every inflation lie of every tenant (1.25/1.5/2 on
    each fast type and on all of them) leaves the liar's true throughput where it was. (Sandbagging, the
    slowest type over-reported, is outside the theorem and can pay: tests/fairness/test_fairness_check.py.)"""
    from slurm_fair import fairness

    r = fairness.strategy_proof_probe(oef_noncoop.solve(p), oef_noncoop.solve, sample=10**6, kinds=("inflate",))
    assert r.value is not False, r.detail
    assert "tried" not in r.detail  # every lie was tried


# --------------------------------------------------------------------------- cooperative OEF (eq. 10)


@SETTINGS
@given(problems(max_classes=2))
def test_coop_envy_free_sharing_incentive_and_optimum(p):
    a = oef_coop.solve(p)
    vu = p.virtual_users()
    check_capacity(a)
    s, x, w = vu.speed, a.x, vu.weight
    m = s @ x.T  # m[l, i] = u_l(x_i)
    own = np.diag(m) / w
    for l in range(vu.n):
        assert (m[l] / w <= own[l] * (1 + REL) + 1e-7).all(), "weighted envy"
    share = s @ vu.capacity * w / w.sum()  # u_l of its weight share of every type
    assert (np.diag(m) >= share * (1 - REL) - 1e-7).all(), "sharing incentive"
    rel_close(a.total_throughput(), linprog_eq10(s, w, vu.capacity))


# --------------------------------------------------------------------------- weights = replication


def replicate(p):
    tenants = []
    for t in p.tenants:
        for r in range(int(t.weight)):
            tenants.append(Tenant(f"{t.name}#{r}", t.classes, 1.0))
    return Problem(p.gpu_types, tuple(tenants))


@SETTINGS
@given(problems(max_n=4, integer_weights=True))
def test_weighted_equals_replication(p):
    rep = replicate(p)
    names = [t.name for t in p.tenants]
    # non-coop: per-tenant throughput is unique, so compare it directly
    a, b = oef_noncoop.solve(p).tenant_throughput(), oef_noncoop.solve(rep).tenant_throughput()
    for name in names:
        rel_close(a[name], sum(v for k, v in b.items() if k.split("#")[0] == name))
    # coop: same optimal value, and the weighted allocation split over replicas is envy-free there
    ca, cb = oef_coop.solve(p), oef_coop.solve(rep)
    rel_close(ca.total_throughput(), cb.total_throughput())
    vu = p.virtual_users()
    x_rep = np.vstack([ca.x[i] / p.tenants[i].weight for i in range(vu.n) for _ in range(int(p.tenants[i].weight))])
    s_rep = rep.virtual_users().speed
    m = s_rep @ x_rep.T
    assert (m <= np.diag(m)[:, None] * (1 + REL) + 1e-7).all()


# --------------------------------------------------------------------------- demand caps


POLICIES = [oef_noncoop, oef_coop, max_throughput, equal_share, gavel, gandiva_fair, bud, themis, hadar]


@SETTINGS
@given(problems(max_n=4, demands=True, max_classes=2), st.sampled_from(POLICIES))
def test_demands_never_exceeded(p, policy):
    a = policy.solve(p)
    vu = p.virtual_users()
    check_capacity(a)
    assert (a.x.sum(axis=1) <= vu.demand + 1e-9).all()
    mt = max_throughput.solve(p).total_throughput()
    assert a.total_throughput() <= mt * (1 + REL) + 1e-7  # eq. 4 is an upper bound
    if policy in (gavel, gandiva_fair):  # sharing incentive w.r.t. the (capped) equal share
        eq = equal_share.solve(p).user_throughput()
        assert (a.user_throughput() >= eq * (1 - REL) - 1e-7).all()


@SETTINGS
@given(problems(max_n=4, demands=True))
def test_noncoop_with_caps_uncapped_users_share_one_level(p):
    vu = p.virtual_users()
    x, capped = oef_noncoop.solve_arrays(vu.speed, vu.weight, vu.capacity, vu.demand)
    assert (x.sum(axis=1) <= vu.demand + 1e-9).all()
    level = (x * vu.speed).sum(axis=1) / vu.weight
    free = [i for i in range(vu.n) if i not in capped]
    for i in free:
        rel_close(level[i], level[free[0]])
    for i in range(vu.n):
        if i not in free and free:
            assert level[i] <= level[free[0]] * (1 + REL) + 1e-7


@SETTINGS
@given(problems(max_n=4, demands=True))
def test_coop_with_caps_envy_free_among_uncapped(p):
    vu = p.virtual_users()
    x, capped = waterfill(vu, lambda s, w, c: oef_coop.plain_step(s, w, c))
    free = [i for i in range(vu.n) if i not in capped]
    for i in capped:  # a capped user gets exactly its demand, or all it can use
        assert x[i].sum() <= vu.demand[i] + 1e-9
    m = vu.speed @ x.T
    for l in free:
        for i in free:
            assert m[l, i] / vu.weight[i] <= m[l, l] / vu.weight[l] * (1 + REL) + 1e-7


# --------------------------------------------------------------------------- per-type caps (type_demand)


def linprog_max_level(speed, weight, capacity, type_cap, demand, level_of, floor):
    """Independent check of a progressive-filling level: max t s.t. u_l = π_l t for l in ``level_of``,
    u_i >= floor_i for the others, per-type caps, demands, capacity (variables x (n·k) then t)."""
    n, k = speed.shape
    c = np.concatenate([np.zeros(n * k), [-1.0]])
    a_cap, b_cap = _cap_rows(n, k, capacity)
    a_ub = [np.hstack([a_cap, np.zeros((k, 1))])]
    b_ub = [b_cap]
    for i in range(n):
        if np.isfinite(demand[i]):
            r = np.zeros(n * k + 1)
            r[i * k:(i + 1) * k] = 1.0
            a_ub.append(r[None, :])
            b_ub.append([demand[i]])
        if i not in level_of:
            r = np.zeros(n * k + 1)
            r[i * k:(i + 1) * k] = -speed[i]
            a_ub.append(r[None, :])
            b_ub.append([-floor[i] * (1 - 1e-9)])
    a_eq = np.zeros((len(level_of), n * k + 1))
    for r, i in enumerate(level_of):
        a_eq[r, i * k:(i + 1) * k] = speed[i] / weight[i]
        a_eq[r, -1] = -1.0
    bounds = [(0, 0) if s <= 0 else (0, None if not np.isfinite(cp) else cp) for s, cp in zip(speed.ravel(), type_cap.ravel())]
    res = linprog(c, A_ub=np.vstack(a_ub), b_ub=np.concatenate(b_ub), A_eq=a_eq if level_of else None,
                  b_eq=np.zeros(len(level_of)) if level_of else None, bounds=bounds + [(0, None)], method="highs")
    assert res.status == 0, res.message
    return -res.fun


def check_caps(a):
    vu = a.problem.virtual_users()
    check_capacity(a)
    assert (a.x <= vu.type_cap + 1e-9).all(), "per-type cap"
    assert (a.x.sum(axis=1) <= vu.demand + 1e-9).all(), "total demand"


def check_work_conserving(a):
    """No GPU idle while a class below its demand and below its cap on that type could use it."""
    vu = a.problem.virtual_users()
    idle = vu.capacity - a.x.sum(axis=0)
    room_total = vu.demand - a.x.sum(axis=1)
    for j in np.flatnonzero(idle > 1e-6):
        for i in range(vu.n):
            could = vu.speed[i, j] > 0 and room_total[i] > 1e-6 and a.x[i, j] < vu.type_cap[i, j] - 1e-6
            assert not could, (vu.gpu_types[j], idle[j], i)


@SETTINGS
@given(problems(max_n=4, demands=True, max_classes=2, type_caps=True), st.sampled_from(POLICIES))
def test_type_caps_never_exceeded_and_work_conserving(p, policy):
    a = policy.solve(p)
    check_caps(a)
    mt = max_throughput.solve(p).total_throughput()
    assert a.total_throughput() <= mt * (1 + REL) + 1e-7
    if policy is not oef_noncoop:  # eq. 9's equality may leave GPUs idle by design (noted in Allocation.notes)
        check_work_conserving(a)
    if policy in (gavel, gandiva_fair):  # sharing incentive w.r.t. the capped equal share
        eq = equal_share.solve(p).user_throughput()
        assert (a.user_throughput() >= eq * (1 - REL) - 1e-7).all()


@SETTINGS
@given(problems(max_n=4, demands=True, type_caps=True))
def test_noncoop_type_caps_progressive_filling_level(p):
    """Uncapped classes share one weighted level, capped ones sit at or below it, and (independent LP)
    the uncapped classes cannot reach a higher common level with the capped ones kept at theirs."""
    vu = p.virtual_users()
    a = oef_noncoop.solve(p)
    check_caps(a)
    _, capped = oef_noncoop.solve_arrays(vu.speed, vu.weight, vu.capacity, np.where(
        [((vu.speed[i] > 0) & (vu.capacity > 0)).any() for i in range(vu.n)], vu.demand, 0.0), type_cap=vu.type_cap)
    u = a.user_throughput()
    level = u / vu.weight
    free = [i for i in range(vu.n) if i not in capped]
    if not free:
        return
    for i in free:
        rel_close(level[i], level[free[0]])
    for i in capped:
        assert level[i] <= level[free[0]] * (1 + REL) + 1e-7
    best = linprog_max_level(vu.speed, vu.weight, vu.capacity, vu.type_cap, vu.demand, free, u)
    assert best <= level[free[0]] * (1 + 1e-5) + 1e-6, (best, level[free[0]])
    if not capped:  # no cap binds: exactly eq. 9
        rel_close(a.total_throughput(), linprog_eq9(vu.speed, vu.weight, vu.capacity))


@SETTINGS
@given(problems(max_n=4, demands=True, type_caps=True))
def test_coop_type_caps_envy_free_among_uncapped_and_optimal_on_the_rest(p):
    """The water-filling's last round is eq. 10 (checked against the independent linprog) for the users
    still active, on the GPUs left; the uncapped classes are envy-free among themselves."""
    vu = p.virtual_users()
    a = oef_coop.solve(p)
    check_caps(a)
    check_work_conserving(a)
    trace: dict = {}
    x, capped = waterfill(vu, lambda s, w, c: oef_coop._solve_step(s, w, c), trace=trace)
    assert np.allclose(x, a.x, atol=1e-9)
    free = [i for i in range(vu.n) if i not in capped]
    m = vu.speed @ a.x.T
    for l in free:
        for i in free:
            assert m[l, i] / vu.weight[i] <= m[l, l] / vu.weight[l] * (1 + REL) + 1e-7
    if trace:
        s_last, x_last = trace["speed"], trace["x"]
        ref = linprog_eq10(s_last, trace["weight"], trace["capacity"])
        rel_close(float((s_last * x_last).sum()), ref, rel=1e-5)
