"""Issue 31: cooperative OEF with users of proportional speed vectors merged (``coop_fast._merged_generation``)
or sharing one variable per direction (``coop_classes``, the second stage's form), against the per-user solver
of before (``aggregate=False``), one full sparse LP of all n(n-1) rows and the plain cvxpy form."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.plain_coop import envy_violation, full_lp, plain
from benchmarks.philly import instance
from slurm_fair.fairness.properties import violations
from slurm_fair.policies import common, oef_coop
from slurm_fair.policies.oef_coop import classes as coop_classes, fast as coop_fast, nearest as coop_nearest

REL = 1e-6  # the bar for "same optimum"; the solvers agree far closer (asserted below at 1e-8)


def _instance(seed, n, k, models, weighted=True, zeros=0.0, scale=True, dead_type=False):
    """n users drawing their speed directions from ``models`` random vectors (some users alone on theirs),
    each scaled by a random factor (``scale``); zeros shared by a direction (a type it cannot use)."""
    rng = np.random.default_rng(seed)
    r = rng.uniform(1.0, 2.5, (models, k))
    r[:, 0] = 1.0
    table = np.cumprod(r, axis=1)
    if zeros:
        mask = rng.random((models, k)) < zeros
        mask[np.arange(models), rng.integers(0, k, models)] = False
        table = np.where(mask, 0.0, table)
    S = table[rng.integers(0, models, n)]
    if scale:
        S = S * rng.choice([0.5, 1.0, 1.0, 3.0], n)[:, None]
    w = rng.choice([0.5, 1.0, 2.0, 3.0], n) if weighted else np.ones(n)
    c = rng.integers(1, 9, k).astype(float)
    if dead_type:
        c[0] = 0.0
    return S, w, c


CASES = [  # (seed, n, k, models, weighted, zeros, scale, dead_type)
    (0, 6, 2, 2, False, 0.0, False, False),
    (1, 12, 3, 3, True, 0.0, True, False),
    (2, 20, 4, 4, True, 0.3, True, False),
    (3, 30, 3, 5, True, 0.0, True, True),
    (4, 40, 5, 6, False, 0.2, True, False),
    (5, 50, 4, 10, True, 0.0, False, False),
    (6, 60, 6, 8, True, 0.25, True, True),
    (7, 25, 3, 25, True, 0.0, True, False),  # (almost) no repeated direction
    (8, 45, 10, 4, True, 0.1, True, False),
    (9, 35, 4, 2, True, 0.0, True, False),
]


def _obj(S, x):
    return float(np.sum(S * x))


def _feasible(S, w, c, x):
    assert np.all(x >= 0) and np.all(x.sum(axis=0) <= c + 1e-9)
    assert np.all(x[S == 0] == 0)
    assert envy_violation(S, w, x) <= 1e-7, envy_violation(S, w, x)


@pytest.mark.parametrize("seed,n,k,models,weighted,zeros,scale,dead", CASES)
def test_merged_and_t_form_same_optimum_as_per_user_and_full_lp(seed, n, k, models, weighted, zeros, scale, dead):
    S, w, c = _instance(seed, n, k, models, weighted, zeros, scale, dead)
    xm, im = coop_fast.solve_with_info(S, w, c, merge=True)  # merged
    xt, it = coop_fast.solve_with_info(S, w, c, merge=False)  # t form
    xu, iu = coop_fast.solve_with_info(S, w, c, aggregate=False)  # per user, the solver before issue 31
    ref = _obj(S, full_lp(S, w, c))
    for x in (xm, xt, xu):
        _feasible(S, w, c, x)
        assert _obj(S, x) == pytest.approx(ref, rel=1e-8)
    assert im.objective == pytest.approx(iu.objective, rel=REL)


@pytest.mark.parametrize("seed,n,k,models,weighted,zeros,scale,dead", CASES[:5])
def test_merged_same_optimum_as_plain_cvxpy(seed, n, k, models, weighted, zeros, scale, dead):
    S, w, c = _instance(seed, n, k, models, weighted, zeros, scale, dead)
    assert _obj(S, coop_fast.solve(S, w, c)) == pytest.approx(_obj(S, plain(S, w, c)), rel=REL)


def test_merged_split_is_by_weight():
    S, w, c = _instance(11, 30, 4, 3)
    x = coop_fast.solve_with_info(S, w, c, merge=True)[0]
    dirs = coop_classes.directions(np.where((S > 0) & (c > 0), S, 0.0), (S > 0).any(axis=1), 0)
    for e in range(dirs.m):
        mem = dirs.members(e)
        per = x[mem] / w[mem][:, None]
        np.testing.assert_allclose(per, np.broadcast_to(per[0], per.shape), atol=1e-12)


def test_directions_group_exactly_the_proportional_vectors():
    base = np.array([[1.0, 2.0, 4.0], [1.0, 3.0, 3.0], [0.0, 1.0, 2.0]])
    S = np.vstack([base[0], 2.5 * base[0], base[1], base[2], 7 * base[2], base[0] + [0, 1e-6, 0], np.zeros(3)])
    d = coop_classes.directions(S, S.sum(axis=1) > 0, 100)
    assert d.cls.tolist() == [0, 0, 1, 2, 2, 3, -1]
    assert d.size.tolist() == [2, 1, 2, 1]
    assert d.tcol.tolist() == [100, -1, 101, -1]
    alone = coop_classes.directions(S, S.sum(axis=1) > 0, 100, aggregate=False)
    assert alone.cls.tolist() == [0, 1, 2, 3, 4, 5, -1] and alone.groups == 0


def test_class_rows_expand_to_user_pairs_and_back():
    S, w, c = _instance(12, 20, 3, 4)
    d = coop_classes.directions(S, np.ones(20, dtype=bool), 0)
    pe, pi = np.array([0, 1, 2]), np.array([5, 6, 7])
    pairs = coop_classes.user_pairs(d, pe, pi)
    want = {(int(l), int(i)) for e, i in zip(pe, pi) for l in d.members(int(e)) if l != i}
    assert sorted(pairs) == sorted(want) and len(pairs) == len(want)
    code = coop_classes.class_pairs(d, np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]))
    assert set(code.tolist()) == set((pe * 20 + pi).tolist())


def test_no_repeated_direction_is_the_solver_of_before():
    rng = np.random.default_rng(13)
    S = np.cumprod(np.c_[np.ones(30), rng.uniform(1.0, 2.5, (30, 4))], axis=1)  # 30 distinct directions
    w, c = rng.choice([1.0, 2.0], 30), rng.integers(1, 9, 5).astype(float)
    assert coop_classes.directions(S, np.ones(30, dtype=bool), 0).groups == 0
    x, i = coop_fast.solve_with_info(S, w, c, merge=True)
    xu, iu = coop_fast.solve_with_info(S, w, c, aggregate=False)
    np.testing.assert_array_equal(x, xu)
    assert i.rounds == iu.rounds and i.binding == iu.binding


@pytest.mark.parametrize("seed", range(6))
def test_second_stage_aggregated_keeps_optimum_and_finds_the_nearest(seed):
    S, w, c = _instance(20 + seed, 24, 3, 4)
    x0, i0 = coop_fast.solve_with_info(S, w, c, merge=True)
    p = np.random.default_rng(seed).uniform(0, 2, S.shape) * (S > 0)
    p[::5] = np.nan
    x, info = coop_fast.solve_with_info(S, w, c, previous=p, merge=True)
    _feasible(S, w, c, x)
    assert _obj(S, x) == pytest.approx(i0.objective, rel=1e-7)
    assert info.moved_after <= info.moved_before + 1e-9
    # the per-user second stage (every envy row of every user) reaches the same least distance
    xu = coop_nearest.nearest(S, w, c, x0, p, None, aggregate=False)[0]
    known = ~np.isnan(p).any(axis=1)
    du = float(np.abs(xu - np.nan_to_num(p))[known].sum())
    assert info.moved_after == pytest.approx(du, abs=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_warm_seed_gives_the_same_optimum(seed):
    S, w, c = _instance(30 + seed, 40, 4, 5)
    x0, i0 = coop_fast.solve_with_info(S, w, c, merge=True)
    S2 = S.copy()
    S2[:4] = S2[4:8]  # a few users change job model
    xc, ic = coop_fast.solve_with_info(S2, w, c, merge=True)
    xw, iw = coop_fast.solve_with_info(S2, w, c, seed=i0.binding, seed_all=True, merge=True)
    assert iw.objective == pytest.approx(ic.objective, rel=1e-8)
    _feasible(S2, w, c, xw)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("type_demand", [False, True])
def test_policy_steps_same_optimum_and_envy_free(seed, type_demand):
    """oef-coop on a 'models' instance (shared job models, demands, per-type caps): every water-filling step's
    optimum equals the per-user solver's on that step's input, and the allocation is envy-free among the
    uncapped classes and sharing-incentive for them (the checker's tolerance)."""
    p = instance(30, 4, seed, speeds="models", type_demand=type_demand)
    vu = p.virtual_users()
    steps = []

    def step(S, w, c):
        x, info = coop_fast.solve_with_info(S, w, c, merge=True)
        steps.append((S, w, c, info.objective))
        return x

    common.waterfill(vu, step)
    assert steps
    for S, w, c, obj in steps:
        assert obj == pytest.approx(coop_fast.solve_with_info(S, w, c, aggregate=False)[1].objective, rel=1e-8)
    a = oef_coop.solve(p)
    v = violations(a.vu, a.x)
    assert v["envy_pairs"] == 0 and v["si_violations"] == 0
    assert np.all(a.x.sum(axis=1) <= a.vu.demand + 1e-6) and np.all(a.x <= a.vu.type_cap + 1e-6)
    b = oef_coop.solve(p, warm=a.warm)  # warm round, second stage on: the same allocation comes back
    assert b.total_throughput() == pytest.approx(a.total_throughput(), rel=1e-7)
    np.testing.assert_allclose(b.x, a.x, atol=1e-6)


def test_one_direction_and_edge_cases():
    S = np.array([[1.0, 2.0], [2.0, 4.0], [0.5, 1.0]])
    w = np.array([1.0, 2.0, 1.0])
    c = np.array([2.0, 3.0])
    x = coop_fast.solve_with_info(S, w, c, merge=True)[0]  # one merged user: everything, split by weight
    np.testing.assert_allclose(x, np.outer(w / w.sum(), c), atol=1e-9)
    _feasible(S, w, c, x)
    x0 = coop_fast.solve_with_info(S, w, np.zeros(2), merge=True)[0]
    assert np.all(x0 == 0)
    Z = np.vstack([S, np.zeros(2)])  # a user that can use nothing gets nothing, the others as before
    xz = coop_fast.solve(Z, np.r_[w, 1.0], c)
    assert np.all(xz[3] == 0) and _obj(Z, xz) == pytest.approx(_obj(S, x), rel=1e-9)


def test_merged_weights_far_apart_stay_within_tolerance():
    """A direction of many users (a merged weight 400 times a lone user's) next to lone users of weight 0.5:
    the in-model check works in row units (issue 31: a SolverError at 2 000 tenants with per-type demands)."""
    rng = np.random.default_rng(3)
    base = np.cumprod(np.c_[np.ones(6), rng.uniform(1.0, 2.5, (6, 5))], axis=1)
    S = np.vstack([np.repeat(base[:2], 100, axis=0), base[2:]])
    w = np.r_[np.full(200, 2.0), np.full(4, 0.5)]
    c = rng.integers(20, 200, 6).astype(float)
    x, info = coop_fast.solve_with_info(S, w, c, merge=True)
    ref = coop_fast.solve_with_info(S, w, c, aggregate=False)[1]
    assert info.objective == pytest.approx(ref.objective, rel=1e-8)
    _feasible(S, w, c, x)


def test_second_stage_of_the_simulators_first_try():
    """`simulate --generate 60 --cluster k80=4,v100=4` (tests/sim/test_engine.py): HiGHS' presolve called this
    second stage infeasible (the objective kept to 1e-12 relative); it runs without presolve now."""
    S = np.array([[1.0, 4.157153298281213], [1.0, 0.0], [1.0, 6.067830869127818], [1.0, 4.852982606401732],
                  [1.0, 11.747915337329683], [1.0, 0.0], [1.0, 4.16028118626366], [0.0, 1.0],
                  [1.0, 2.647606751487444], [1.0, 4.371868915942079], [1.0, 4.770326296615327], [1.0, 5.5719690083533]])
    w = np.array([1, 1, 1, 3, 1, 1, 1, 1.5, 1.5, 1, 1, 1]) / 3
    c = np.array([4.0, 4.0])
    q = 0.359823411963
    p = np.array([[0, q], [1.012743611398, 0], [0, q], [0, 0.539735117944], [0, q], [1.012743611398, 0], [0, q],
                  [0.455397360107, 0.401765880297], [1.519115417097, 7.6e-11], [0, q], [0, q], [0, q]])
    x0, i0 = coop_fast.solve_with_info(S, w, c, merge=True)
    x, info = coop_fast.solve_with_info(S, w, c, previous=p, merge=True)
    _feasible(S, w, c, x)
    assert _obj(S, x) == pytest.approx(i0.objective, rel=1e-7)
    assert info.moved_after <= info.moved_before + 1e-9


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("kind", ["proportional", "mixed"])
def test_merged_second_stage_same_least_distance_as_per_user(seed, kind):
    """nearest_merged (users of one direction and one previous bundle per weight merged) reaches the least L1
    distance of the per-user second stage, with the optimum kept and envy-freeness."""
    S, w, c = _instance(40 + seed, 30, 3, 4)
    x0, i0 = coop_fast.solve_with_info(S, w, c, merge=True)
    rng = np.random.default_rng(seed)
    d = coop_classes.directions(S, np.ones(30, dtype=bool), 0)
    bundle = rng.uniform(0, 1, (d.m, 3)) * (d.D > 0)
    p = bundle[d.cls] * w[:, None]  # last round split every direction by weight
    if kind == "mixed":
        p[rng.random(30) < 0.2] = rng.uniform(0, 2, 3)  # some users changed since
        p[rng.random(30) < 0.2] = np.nan  # some are new
        p = np.where(np.isnan(p).any(axis=1, keepdims=True), np.nan, p * (S > 0))
    x, rounds = coop_nearest.nearest_merged(S, w, c, x0, p)
    _feasible(S, w, c, x)
    assert _obj(S, x) == pytest.approx(i0.objective, rel=1e-7)
    xu = coop_nearest.nearest(S, w, c, x0, p, None, aggregate=False)[0]
    known = ~np.isnan(p).any(axis=1)
    dist = float(np.abs(x - np.nan_to_num(p))[known].sum())
    du = float(np.abs(xu - np.nan_to_num(p))[known].sum())
    assert dist == pytest.approx(du, abs=1e-6)


@pytest.mark.parametrize("seed", range(10))
def test_max_envy_by_directions_is_the_envy_matrix_max(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    S, w, c = _instance(60 + seed, n, 3, int(rng.integers(1, n + 1)), zeros=0.2)
    if seed % 3 == 0:
        S[0] = 0.0  # a user that values nothing
    x = rng.uniform(0, 2, S.shape)
    ref = float(coop_fast.envy_matrix(S, w, x).max())
    assert coop_classes.max_envy(S, w, x) == pytest.approx(ref, rel=1e-12, abs=1e-12)


def test_merging_is_automatic_only_above_merge_above_users(monkeypatch):
    """``merge=None`` (the policy's default): per user up to ``MERGE_ABOVE`` users — that solver's optimum is
    kept where it is fast (issue 28's simulator ran into a guarantee swinging between two accounts' jobs of one
    job model with the merged one) — and merged above it; the optimum value is the same either way."""
    S = np.array([[1.0, 2.0], [2.0, 4.0], [0.5, 1.0]])
    w = np.array([1.0, 2.0, 1.0])
    c = np.array([2.0, 3.0])
    auto = coop_fast.solve_with_info(S, w, c)[0]
    np.testing.assert_allclose(auto, coop_fast.solve_with_info(S, w, c, aggregate=False, merge=False)[0], atol=1e-9)
    monkeypatch.setattr(coop_fast, "MERGE_ABOVE", 2)
    merged = coop_fast.solve_with_info(S, w, c)[0]
    np.testing.assert_allclose(merged, np.outer(w / w.sum(), c), atol=1e-9)
    assert float(np.sum(S * merged)) == pytest.approx(float(np.sum(S * auto)), rel=1e-9)
