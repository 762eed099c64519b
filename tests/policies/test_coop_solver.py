"""The fast cooperative-OEF solver against the plain forms (cvxpy + ECOS, and one full sparse LP in HiGHS)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.plain_coop import envy_violation, full_lp, plain
from slurm_fair.errors import InputError
from slurm_fair.policies.oef_coop import fast as coop_fast

CHECK_TOL = 1e-6  # what any caller's checker may use; the solver must stay well inside it


def _objective(S, x):
    return float(np.sum(S * x))


def _assert_feasible(S, w, c, x):
    assert x.shape == S.shape
    assert np.all(x >= 0)
    assert np.all(x.sum(axis=0) <= c + 1e-9)
    assert envy_violation(S, w, x) <= 1e-7, envy_violation(S, w, x)


def _monotone(rng, n, k):
    """Realistic speeds: types sorted slow -> fast, every job at least as fast on a newer type."""
    r = rng.uniform(1.0, 2.5, (n, k))
    r[:, 0] = 1.0
    return np.cumprod(r, axis=1)


def _iid(rng, n, k):
    """Unstructured speeds: no common type order."""
    S = rng.uniform(1.0, 8.0, (n, k))
    return S / S.min(axis=1, keepdims=True)


def _instance(seed, n, k, kind="monotone", weighted=False, zeros=0.0, ties=False):
    rng = np.random.default_rng(seed)
    S = _monotone(rng, n, k) if kind == "monotone" else _iid(rng, n, k)
    if ties:  # several users with the same speed vector, and equal entries within a vector
        S = np.round(S)
        S[n // 2 :] = S[: n - n // 2]
    if zeros:
        mask = rng.random((n, k)) < zeros
        mask[np.arange(n), rng.integers(0, k, n)] = False  # every user can use at least one type
        S = np.where(mask, 0.0, S)
    w = rng.choice([0.5, 1.0, 2.0, 3.0], n) if weighted else np.ones(n)
    c = rng.integers(1, 9, k).astype(float)
    return S, w, c


def test_paper_section_3_1_example():
    # OEF §3.1, eq. (6): two users, one GPU of each of two types, speeds <1, 2> and <1, 5>.
    S = np.array([[1.0, 2.0], [1.0, 5.0]])
    x = coop_fast.solve(S, np.ones(2), np.ones(2))
    np.testing.assert_allclose(x, [[1.0, 0.25], [0.0, 0.75]], atol=1e-7)
    assert _objective(S, x) == pytest.approx(5.25, rel=1e-8)
    _assert_feasible(S, np.ones(2), np.ones(2), x)


CASES = [
    # (seed, n, k, kind, weighted, zeros, ties)
    (1, 2, 2, "monotone", False, 0.0, False),
    (2, 5, 3, "monotone", False, 0.0, False),
    (3, 12, 4, "iid", False, 0.0, False),
    (4, 20, 3, "monotone", True, 0.0, False),
    (5, 25, 5, "iid", True, 0.3, False),
    (6, 30, 4, "monotone", False, 0.0, True),
    (7, 40, 6, "iid", True, 0.2, True),
    (8, 60, 3, "monotone", True, 0.1, False),
    (9, 60, 5, "iid", False, 0.0, False),
]


@pytest.mark.parametrize("seed,n,k,kind,weighted,zeros,ties", CASES)
def test_same_optimum_as_full_lp(seed, n, k, kind, weighted, zeros, ties):
    S, w, c = _instance(seed, n, k, kind, weighted, zeros, ties)
    x = coop_fast.solve(S, w, c)
    _assert_feasible(S, w, c, x)
    ref = full_lp(S, w, c)
    assert envy_violation(S, w, ref) <= CHECK_TOL
    assert _objective(S, x) == pytest.approx(_objective(S, ref), rel=1e-6)
    assert np.all(x[S == 0] == 0)


@pytest.mark.parametrize("seed,n,k,kind,weighted,zeros,ties", CASES[:6])
def test_same_optimum_as_plain_cvxpy_ecos(seed, n, k, kind, weighted, zeros, ties):
    S, w, c = _instance(seed, n, k, kind, weighted, zeros, ties)
    x = coop_fast.solve(S, w, c)
    ref = plain(S, w, c)
    assert _objective(S, x) == pytest.approx(_objective(S, ref), rel=1e-6)


def test_sharing_incentive_follows():
    # Thm 5.1: envy-free + optimal => every user gets at least its weighted share's worth.
    S, w, c = _instance(11, 30, 4, "iid", weighted=True)
    x = coop_fast.solve(S, w, c)
    share = (w / w.sum())[:, None] * c[None, :]
    assert np.all(np.sum(S * x, axis=1) >= np.sum(S * share, axis=1) - 1e-7)


def test_all_capacity_used_when_usable():
    S, w, c = _instance(12, 15, 4, "monotone", weighted=True, zeros=0.3)
    x = coop_fast.solve(S, w, c)
    np.testing.assert_allclose(x.sum(axis=0), c, rtol=1e-7)


def test_degenerate_inputs():
    # a user who can use nothing, a type nobody can use, a type with no GPUs
    S = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 2.0], [1.0, 0.0, 3.0]])
    w = np.array([1.0, 1.0, 2.0])
    c = np.array([2.0, 5.0, 0.0])
    x = coop_fast.solve(S, w, c)
    _assert_feasible(S, w, c, x)
    assert np.all(x[0] == 0) and np.all(x[:, 1] == 0) and np.all(x[:, 2] == 0)
    assert _objective(S, x) == pytest.approx(_objective(S, full_lp(S, w, c)), rel=1e-7)
    # one user takes everything usable; no users at all
    x1 = coop_fast.solve([[1.0, 3.0]], [2.0], [4.0, 1.0])
    np.testing.assert_allclose(x1, [[4.0, 1.0]])
    assert coop_fast.solve(np.zeros((0, 2)), np.zeros(0), [1.0, 1.0]).shape == (0, 2)


def test_identical_users_get_identical_value():
    S = np.tile([1.0, 1.7, 3.2], (7, 1))
    x = coop_fast.solve(S, np.ones(7), [3.0, 2.0, 1.0])
    u = np.sum(S * x, axis=1)
    np.testing.assert_allclose(u, u[0], rtol=1e-7)
    assert u.sum() == pytest.approx(3.0 + 3.4 + 3.2)


def test_large_capacity_scale_keeps_envy_tight():
    S, w, c = _instance(13, 40, 4, "iid", weighted=True)
    x = coop_fast.solve(S, w, c * 1000)
    assert envy_violation(S, w, x) <= 1e-7


def test_named_cvxpy_solver_is_the_plain_form():
    S, w, c = _instance(14, 8, 3, "monotone", weighted=True)
    x, info = coop_fast.solve_with_info(S, w, c, solver="ECOS")
    assert info.solver == "ECOS" and info.envy_rows == 8 * 7
    assert info.objective == pytest.approx(_objective(S, coop_fast.solve(S, w, c)), rel=1e-6)


@pytest.mark.parametrize(
    "args,field",
    [
        (([[1.0, -1.0]], [1.0], [1.0, 1.0]), "speed"),
        (([[1.0, np.nan]], [1.0], [1.0, 1.0]), "speed"),
        (([1.0, 2.0], [1.0], [1.0, 1.0]), "speed"),
        (([[1.0, 2.0]], [0.0], [1.0, 1.0]), "weight"),
        (([[1.0, 2.0]], [1.0, 1.0], [1.0, 1.0]), "weight"),
        (([[1.0, 2.0]], [1.0], [1.0]), "capacity"),
        (([[1.0, 2.0]], [1.0], [1.0, -2.0]), "capacity"),
    ],
)
def test_bad_input_names_the_field(args, field):
    with pytest.raises(InputError) as e:
        coop_fast.solve(*args)
    assert e.value.field == field


def test_unknown_solver_name():
    with pytest.raises(InputError) as e:
        coop_fast.solve([[1.0]], [1.0], [1.0], solver="NOPE")
    assert e.value.field == "solver"
