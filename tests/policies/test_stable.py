"""Stable optima (issue 28, item 1): oef-coop's second stage keeps the optimum and returns, of the optima, the
one nearest (L1) to last round's allocation."""

from __future__ import annotations

import dataclasses
import json

import cvxpy as cp
import numpy as np
import pytest

from benchmarks.plain_coop import envy_violation, full_lp
from benchmarks.philly import instance
from slurm_fair.policies import oef_coop, stable
from slurm_fair.policies.oef_coop import fast as coop_fast

REL = 1e-7


def _instance(seed, n, k, ties):
    rng = np.random.default_rng(seed)
    r = rng.uniform(1.0, 2.5, (n, k))
    r[:, 0] = 1.0
    S = np.cumprod(r, axis=1)
    if ties:  # equal speed vectors and equal entries: a face of optima, not a vertex
        S = np.round(S)
        S[n // 2:] = S[: n - n // 2]
    w = rng.choice([1.0, 2.0], n)
    c = rng.integers(2, 9, k).astype(float)
    return S, w, c


def _nearest_reference(S, w, c, opt, p):
    """The least L1 distance to ``p`` over every envy-free allocation of throughput >= opt (1 - REL): all
    n(n-1) envy rows at once, through cvxpy (independent of the constraint generation)."""
    n, k = S.shape
    x = cp.Variable((n, k), nonneg=True)
    U = S @ x.T
    li, ii = np.nonzero(~np.eye(n, dtype=bool))
    own = cp.diag(U)
    cons = [cp.sum(x, axis=0) <= c, cp.multiply(S == 0, x) == 0,
            cp.multiply(own[li], 1.0 / w[li]) >= cp.multiply(U[li, ii], 1.0 / w[ii]),
            cp.sum(cp.multiply(S, x)) >= opt * (1 - coop_fast.STABLE_REL)]
    prob = cp.Problem(cp.Minimize(cp.sum(cp.abs(x - p))), cons)
    prob.solve(solver=cp.HIGHS)
    return float(prob.value)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("ties", [False, True])
def test_optimum_kept_and_nearest_to_a_random_previous(seed, ties):
    S, w, c = _instance(seed, 10, 3, ties)
    x0, i0 = coop_fast.solve_with_info(S, w, c)
    opt = float(np.sum(S * full_lp(S, w, c)))
    assert i0.objective == pytest.approx(opt, rel=REL)
    p = np.random.default_rng(100 + seed).uniform(0, 2, S.shape) * (S > 0)
    x, info = coop_fast.solve_with_info(S, w, c, previous=p)
    assert float(np.sum(S * x)) == pytest.approx(opt, rel=REL)
    assert envy_violation(S, w, x) <= 1e-7
    assert np.all(x.sum(axis=0) <= c + 1e-9) and np.all(x >= 0)
    dist = float(np.abs(x - p).sum())
    assert dist == pytest.approx(info.moved_after, abs=1e-9)
    assert dist <= info.moved_before + 1e-9  # never farther than the first stage's vertex
    assert dist == pytest.approx(_nearest_reference(S, w, c, opt, p), abs=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_philly_like_optimum_unchanged(seed):
    vu = instance(40, 4, seed).virtual_users()
    S, w, c = vu.speed, vu.weight, vu.capacity
    x0 = coop_fast.solve(S, w, c)
    p = np.random.default_rng(seed).uniform(0, 3, S.shape) * (S > 0)
    p[::7] = np.nan  # new users: no distance term
    x = coop_fast.solve_with_info(S, w, c, previous=p)[0]
    assert float(np.sum(S * x)) == pytest.approx(float(np.sum(S * x0)), rel=REL)
    assert envy_violation(S, w, x) <= 1e-7


def _two_optima():
    """An instance with two distinct optima: the first stage's, and the one nearest to a far-off point."""
    for seed in range(20):
        S, w, c = _instance(seed, 8, 3, ties=True)
        xa = coop_fast.solve(S, w, c)
        xb = coop_fast.solve_with_info(S, w, c, previous=np.random.default_rng(seed).uniform(0, 3, S.shape))[0]
        if np.abs(xa - xb).sum() > 0.5:
            return S, w, c, xa, xb
    raise AssertionError("no instance with two optima found")


def test_previous_optimum_is_returned_and_a_different_one_too():
    S, w, c, xa, xb = _two_optima()
    assert float(np.sum(S * xa)) == pytest.approx(float(np.sum(S * xb)), rel=REL)
    for target in (xa, xb):  # whichever optimum last round had, it is kept: no flip
        x = coop_fast.solve_with_info(S, w, c, previous=target)[0]
        np.testing.assert_allclose(x, target, atol=1e-7)
    # a point near xb (not itself an optimum) gets the optimum nearest to it, not xa
    near = xb + 0.01 * (S > 0)
    x = coop_fast.solve_with_info(S, w, c, previous=near)[0]
    assert np.abs(x - near).sum() <= np.abs(xb - near).sum() + 1e-7
    assert np.abs(x - near).sum() < np.abs(xa - near).sum()


def _problem(n, seed):
    from tests.policies.test_coop_warm import problem
    return problem(n, seed, True)


def test_policy_keeps_last_rounds_allocation_and_its_throughput():
    p = _problem(30, 4)
    plain = oef_coop.solve(p, stable=False)
    first = oef_coop.solve(p)
    assert first.total_throughput() == pytest.approx(plain.total_throughput(), rel=REL)
    prev = stable.Previous.from_warm(first.warm)
    assert prev is not None and set(prev.x) == {(t.name, c.name) for t in p.tenants for c in t.classes}
    again = oef_coop.solve(p, warm=json.loads(json.dumps(first.warm)))  # as the store gives it back
    np.testing.assert_allclose(again.x, first.x, atol=1e-7)
    assert any(n.startswith("stable:") for n in again.notes)
    # stable off: the previous allocation is still saved, but not used
    off = oef_coop.solve(p, warm=first.warm, stable=False)
    assert not any(n.startswith("stable:") for n in off.notes)
    assert stable.Previous.from_warm(off.warm) is not None


def test_new_and_vanished_tenants():
    p = _problem(30, 5)
    first = oef_coop.solve(p)
    # one tenant gone, one new one (a copy of another under a new name)
    new = dataclasses.replace(p.tenants[1], name="newcomer")
    p2 = dataclasses.replace(p, tenants=p.tenants[2:] + (new,))
    ref = oef_coop.solve(p2, stable=False)
    got = oef_coop.solve(p2, warm=first.warm)
    assert got.total_throughput() == pytest.approx(ref.total_throughput(), rel=REL)
    assert any("stable:" in n for n in got.notes)


def test_previous_entries_round_trip_and_junk_is_skipped():
    prev = stable.Previous({("t", "c"): {"a": 1.5, "b": 0.0}, ("u", "c"): {"a": 0.0}},
                            steps=({("t", "c"): {"a": 2.0}, ("u", "c"): {"a": 1.0}}, {("t", "c"): {"b": 0.5}}))
    back = stable.Previous.from_warm(json.loads(json.dumps(prev.entries())))
    assert back == stable.Previous({("t", "c"): {"a": 1.5}, ("u", "c"): {}},
                                    steps=({("t", "c"): {"a": 2.0}, ("u", "c"): {"a": 1.0}}, {("t", "c"): {"b": 0.5}}))
    # step 1 knows only ("t", "c"): ("u", "c") falls back to the final allocation; a new class is NaN
    from slurm_fair.model import VirtualUsers
    vu = VirtualUsers(tenant=("t", "u", "new"), cls=("c", "c", "c"), weight=np.ones(3), raw=np.ones((3, 2)),
                      speed=np.ones((3, 2)), demand=np.full(3, np.inf), type_cap=np.full((3, 2), np.inf),
                      capacity=np.ones(2), gpu_types=("a", "b"))
    arr = back.array(vu, 1)
    np.testing.assert_array_equal(arr[:2], [[0.0, 0.5], [0.0, 0.0]])
    assert np.isnan(arr[2]).all()
    np.testing.assert_array_equal(back.array(vu, 0)[:2], [[2.0, 0.0], [1.0, 0.0]])
    np.testing.assert_array_equal(back.array(vu, 7)[:2], [[1.5, 0.0], [0.0, 0.0]])
    junk = [("x", "t", "c", "a", -1.0), ("x", "t", "c", "a", float("nan")), ("x", 1, "c", "a", 1.0),
            ("x", "t", "c", "a", True), ("fp", "t", "c", "h"), "x", ("x", "t", "c", "a", 1.0, -1),
            ("x", "t", "c", "a", 1.0, 1.5)]
    assert stable.Previous.from_warm(junk) is None
    assert all(stable.is_entry(e) for e in prev.entries())


# --------------------------------------------------------------------------- the filling policies

from slurm_fair.model import problem_from_dict  # noqa: E402
from slurm_fair.policies import gavel, oef_noncoop  # noqa: E402

FILLING = [gavel, oef_noncoop]


def _twins():
    """Two identical tenants on 4 k80 + 4 v100: every split with equal throughput is optimal for both policies."""
    cls = {"name": "c", "throughput": {"k80": 1.0, "v100": 2.0}}
    return problem_from_dict({"gpu_types": {"k80": 4, "v100": 4},
                              "tenants": [{"name": "A", "classes": [cls]}, {"name": "B", "classes": [cls]}]})


def _u(alloc):
    return (alloc.x * alloc.vu.speed).sum(axis=1)


@pytest.mark.parametrize("pol", FILLING, ids=lambda m: m.NAME)
def test_filling_keeps_the_levels_and_returns_last_rounds_split(pol):
    p = _twins()
    first = pol.solve(p)
    # another optimum: A holds all k80 and one v100, B three v100 (6 each)
    other = stable.Previous({("A", "c"): {"k80": 4.0, "v100": 1.0}, ("B", "c"): {"k80": 0.0, "v100": 3.0}})
    got = pol.solve(p, warm=other.entries())
    np.testing.assert_allclose(_u(got), _u(first), rtol=1e-7)
    np.testing.assert_allclose(got.x, [[4.0, 1.0], [0.0, 3.0]], atol=1e-6)
    assert any(n.startswith("stable:") for n in got.notes)
    # and the split it returned is kept next round (no flip); with stable off, the filling's own
    again = pol.solve(p, warm=json.loads(json.dumps(got.warm)))
    np.testing.assert_allclose(again.x, got.x, atol=1e-7)
    off = pol.solve(p, warm=got.warm, stable=False)
    np.testing.assert_allclose(off.x, first.x, atol=1e-9)


@pytest.mark.parametrize("pol", FILLING, ids=lambda m: m.NAME)
@pytest.mark.parametrize("seed", range(3))
def test_filling_levels_unchanged_on_philly_like_instances(pol, seed):
    p = instance(30, 3, seed, speeds="gavel")
    ref = pol.solve(p)
    vu = ref.vu
    rng = np.random.default_rng(seed)
    prev = stable.Previous({k: {g: float(rng.uniform(0, 3)) for g in vu.gpu_types}
                             for i, k in enumerate(zip(vu.tenant, vu.cls)) if i % 5})  # every 5th class new
    got = pol.solve(p, warm=prev.entries())
    np.testing.assert_allclose(_u(got), _u(ref), rtol=1e-7, atol=1e-7)
    pa = prev.array(vu)
    known = ~np.isnan(pa).any(axis=1)
    assert np.abs(got.x - pa)[known].sum() <= np.abs(ref.x - pa)[known].sum() + 1e-6


@pytest.mark.parametrize("seed", range(4))
def test_water_filling_returns_last_rounds_optimum_of_every_step(seed):
    """With binding demands the water-filling solves several steps; last round's steps (saved in warm) let an
    unchanged problem return exactly last round's allocation, whichever optimum that was."""
    from tests.policies.test_coop_warm import problem

    p = problem(30, seed, True)
    vu = p.virtual_users()
    rng = np.random.default_rng(seed)
    far = stable.Previous({k: {g: float(rng.uniform(0, 4)) for g in vu.gpu_types} for k in zip(vu.tenant, vu.cls)})
    b = oef_coop.solve(p, warm=far.entries())  # some optimum (nearest to a random point)
    prev = stable.Previous.from_warm(b.warm)
    assert prev is not None and len(prev.steps) >= 1
    again = oef_coop.solve(p, warm=json.loads(json.dumps(b.warm)))
    np.testing.assert_allclose(again.x, b.x, atol=1e-7)
    assert again.total_throughput() == pytest.approx(oef_coop.solve(p, stable=False).total_throughput(), rel=REL)


def test_second_stage_skipped_where_the_optimum_is_the_only_one():
    # OEF §3.1's example: one optimum (x = [[1, .25], [0, .75]]); any previous point gets it, no second stage
    S, w, c = np.array([[1.0, 2.0], [1.0, 5.0]]), np.ones(2), np.ones(2)
    x, info = coop_fast.solve_with_info(S, w, c, previous=np.array([[0.0, 1.0], [1.0, 0.0]]))
    np.testing.assert_allclose(x, [[1.0, 0.25], [0.0, 0.75]], atol=1e-7)
    assert info.stable_rounds == 0 and info.moved_after == pytest.approx(info.moved_before)
    # twins have a face of optima: the second stage runs and moves toward the previous split
    S2 = np.array([[1.0, 2.0], [1.0, 2.0]])
    p = np.array([[1.0, 0.0], [0.0, 1.0]])
    x2, info2 = coop_fast.solve_with_info(S2, w, c, previous=p)
    assert info2.stable_rounds >= 1 or info2.moved_before <= 1e-9
    # p itself is not envy-free (values 1 and 2); the nearest optimum keeps A on all k80: A (1, .25), B (0, .75)
    np.testing.assert_allclose(x2, [[1.0, 0.25], [0.0, 0.75]], atol=1e-7)
    assert info2.moved_after == pytest.approx(0.5, abs=1e-7)


def test_max_throughput_keeps_its_total_and_last_rounds_split():
    from slurm_fair.policies import max_throughput

    p = _twins()  # any split of the 8 GPUs between the twins is optimal
    first = max_throughput.solve(p)
    other = stable.Previous({("A", "c"): {"k80": 4.0, "v100": 1.0}, ("B", "c"): {"k80": 0.0, "v100": 3.0}})
    got = max_throughput.solve(p, warm=other.entries())
    assert got.total_throughput() == pytest.approx(first.total_throughput(), rel=max_throughput.TOTAL_REL)
    np.testing.assert_allclose(got.x, [[4.0, 1.0], [0.0, 3.0]], atol=1e-6)
    again = max_throughput.solve(p, warm=json.loads(json.dumps(got.warm)))
    np.testing.assert_allclose(again.x, got.x, atol=1e-7)
