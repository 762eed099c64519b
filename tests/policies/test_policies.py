"""Policies beyond the paper's examples: registry, solver choice, errors, capacity and demand caps."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest

from slurm_fair import lp, policies
from slurm_fair.errors import InputError, SolverError
from slurm_fair.model import JobClass, Problem, Tenant, problem_from_dict
from slurm_fair.policies import equal_share, gandiva_fair, oef_coop, oef_noncoop

from tests.conftest import matrix_problem

SMALL = problem_from_dict(
    {
        "gpu_types": {"k80": 4, "v100": 4, "a100": 2},
        "tenants": [
            {"name": "acct_a", "weight": 1, "classes": [{"name": "resnet", "throughput": {"k80": 10, "v100": 30, "a100": 45}}]},
            {
                "name": "acct_b",
                "weight": 1,
                "classes": [
                    {"name": "lstm", "throughput": {"k80": 5, "v100": 20, "a100": 40}, "demand": 3},
                    {"name": "vae", "throughput": {"k80": 8, "v100": 9}},
                ],
            },
            {"name": "acct_c", "weight": 2, "classes": [{"name": "bert", "throughput": {"v100": 2, "a100": 5}, "demand": 2}]},
        ],
    }
)


def test_registry_lists_every_policy_and_rejects_unknown():
    assert policies.names() == ["oef-noncoop", "oef-coop", "max-throughput", "equal-share", "gavel", "gandiva-fair", "bud", "themis", "hadar"]
    with pytest.raises(InputError) as e:
        policies.get("drf")
    assert e.value.field == "policy" and e.value.value == "drf"


@pytest.mark.parametrize("name", policies.names())
def test_every_policy_respects_capacity_and_demand(name):
    a = policies.solve(name, SMALL)
    vu = SMALL.virtual_users()
    assert a.policy == name
    assert a.x.shape == (vu.n, vu.k)
    assert (a.x >= 0).all()
    assert (a.x.sum(axis=0) <= vu.capacity + 1e-9).all()
    assert (a.x.sum(axis=1) <= vu.demand + 1e-9).all()
    assert (a.x[vu.speed == 0] == 0).all()  # nobody holds GPUs it cannot run on
    assert a.solve_seconds >= 0
    assert a.total_throughput() > 0
    d = a.as_dict()
    assert set(d["allocation"]) == {"acct_a", "acct_b", "acct_c"}


@pytest.mark.parametrize("name", policies.names())
def test_unknown_solver_is_an_input_error(name):
    with pytest.raises(InputError) as e:
        policies.solve(name, SMALL, solver="gurobi-ish")
    assert e.value.field == "solver" and e.value.value == "gurobi-ish"
    assert "known: ECOS" in str(e.value)


def test_default_solver_is_ecos_and_names_are_case_insensitive():
    assert lp.pick_solver(None) == "ECOS"
    assert lp.pick_solver("") == "ECOS"
    assert lp.pick_solver("highs") == "HIGHS"
    assert oef_coop.solve(SMALL).solver == oef_coop.FAST_SOLVER  # exact constraint generation on HiGHS
    assert oef_coop.solve(SMALL, solver="ECOS").solver == "ECOS"  # a named solver: the plain form
    assert equal_share.solve(SMALL).solver == ""  # no LP


@pytest.mark.parametrize("solver", [s for s in ("HIGHS", "CLARABEL", "SCIPY") if s in lp.available_solvers()])
@pytest.mark.parametrize("name", ["oef-noncoop", "oef-coop", "max-throughput", "gavel"])
def test_solvers_agree_on_the_optimum(name, solver):
    ref = policies.solve(name, SMALL).total_throughput()
    got = policies.solve(name, SMALL, solver=solver)
    assert got.solver == solver
    assert got.total_throughput() == pytest.approx(ref, rel=1e-5)


def test_lp_solve_reports_infeasible_status():
    v = cp.Variable(nonneg=True)
    with pytest.raises(SolverError, match="infeasible"):
        lp.solve(cp.Problem(cp.Maximize(v), [v <= -1]))


def test_timer_adds_laps():
    t = lp.Timer()
    with t.measure():
        pass
    with t.measure():
        pass
    assert len(t.laps) == 2 and t.seconds == pytest.approx(sum(t.laps))


@pytest.mark.parametrize("name", ["oef-noncoop", "oef-coop", "equal-share"])
def test_notes_name_the_capped_class(name):
    a = policies.solve(name, matrix_problem([[1, 2], [1, 5]], demands=[None, 0.3]))
    assert any(n.startswith("demand capped 1 class(es): u2/c (demand 0.3)") for n in a.notes)
    np.testing.assert_allclose(a.x[1].sum(), 0.3, atol=1e-7)


def test_no_note_without_binding_demand():
    for name in ("oef-noncoop", "oef-coop", "equal-share"):
        assert not policies.solve(name, matrix_problem([[1, 2], [1, 5]], demands=[5, None])).notes


def test_noncoop_cap_progressive_filling_is_vertex_independent():
    """u1's demand binds: it freezes at its cap, with its best GPUs; u2 takes the rest."""
    a = oef_noncoop.solve(matrix_problem([[1, 2], [1, 5]], demands=[0.5, None]))
    np.testing.assert_allclose(a.x, [[0, 0.5], [1, 0.5]], atol=1e-6)
    # the capped user's level is below the others' and it got exactly its demand
    np.testing.assert_allclose(a.user_throughput(), [1.0, 3.5], atol=1e-6)


def test_noncoop_zero_demand_user_gets_nothing_others_equal():
    a = oef_noncoop.solve(matrix_problem([[1, 2], [1, 3], [1, 4]], demands=[None, 0, None]))
    np.testing.assert_allclose(a.x[1], 0, atol=1e-12)
    u = a.user_throughput()
    assert u[0] == pytest.approx(u[2], rel=1e-6)


def test_coop_solve_plain_equals_solve():
    np.testing.assert_allclose(oef_coop.solve_plain(SMALL).total_throughput(), oef_coop.solve(SMALL).total_throughput(), rtol=1e-7)


def test_coop_step_is_numpy_in_numpy_out():
    x = oef_coop._solve_step(np.array([[1.0, 2.0], [1.0, 5.0]]), np.ones(2), np.array([1.0, 1.0]))
    assert isinstance(x, np.ndarray) and x.shape == (2, 2)
    np.testing.assert_allclose(x, [[1, 0.25], [0, 0.75]], atol=1e-6)


def test_equal_share_splits_tenant_weight_among_classes_and_skips_unusable_types():
    p = Problem(
        {"g1": 4, "g2": 4},
        (
            Tenant("a", (JobClass("x", {"g1": 1, "g2": 2}), JobClass("y", {"g1": 1})), 1.0),
            Tenant("b", (JobClass("z", {"g1": 1, "g2": 3}),), 1.0),
        ),
    )
    a = equal_share.solve(p)
    # g1: weights 1/2, 1/2, 1 → 1, 1, 2 GPUs; g2: y cannot use it → x and z split 4 by 1/2 : 1
    np.testing.assert_allclose(a.x, [[1, 4 / 3], [1, 0], [2, 8 / 3]], atol=1e-9)


def test_equal_share_redistributes_capped_leftovers():
    a = equal_share.solve(matrix_problem([[1, 2], [1, 3], [1, 4]], capacity=(3, 3), demands=[1, None, None]))
    # u1's 2 GPUs of share keep its best 1 (its g2); the rest goes to u2, u3 evenly
    np.testing.assert_allclose(a.x, [[0, 1], [1.5, 1], [1.5, 1]], atol=1e-9)


def test_gandiva_trade_respects_buyer_demand():
    """u1 (the buyer of slow GPUs) may not grow past its demand of 0.7 GPUs."""
    a = gandiva_fair.solve(matrix_problem([[1, 2], [1, 3], [1, 4]], demands=[0.7, None, None]))
    assert a.x[0].sum() <= 0.7 + 1e-9
    eq = equal_share.solve(matrix_problem([[1, 2], [1, 3], [1, 4]], demands=[0.7, None, None]))
    assert (a.user_throughput() >= eq.user_throughput() - 1e-9).all()


def test_noncoop_class_without_usable_gpu_does_not_zero_everyone():
    p = Problem(
        {"g1": 2, "g2": 0},
        (
            Tenant("a", (JobClass("x", {"g1": 1.0}),), 1.0),
            Tenant("b", (JobClass("only-g2", {"g2": 3.0}),), 1.0),
            Tenant("c", (JobClass("y", {"g1": 2.0}),), 1.0),
        ),
    )
    a = oef_noncoop.solve(p)
    np.testing.assert_allclose(a.x, [[1, 0], [0, 0], [1, 0]], atol=1e-7)
    assert any("no GPU type present can run: b/only-g2" in n for n in a.notes)


def test_noncoop_notes_idle_gpus_left_by_equality():
    """u1 runs only on g1 (1 GPU): eq. 9 holds u2 to u1's throughput and leaves g2 GPUs idle."""
    p = matrix_problem([[1, 0], [1, 2]], capacity=(1, 4))
    a = oef_noncoop.solve(p)
    u = a.user_throughput()
    assert u[0] == pytest.approx(u[1], rel=1e-6)
    assert any("g2 GPU(s) left idle" in n for n in a.notes)


def test_noncoop_caps_lift_test_survives_solver_tolerance():
    """Regression (found by hypothesis): HiGHS called the lift LP at its own level infeasible by ~1e-9."""
    p = Problem(
        {"g0": 2, "g1": 6},
        (
            Tenant("t0", (JobClass("c0", {"g0": 0.0, "g1": 1.0}, 2.0),), 1.0),
            Tenant("t1", (JobClass("c0", {"g0": 1.0, "g1": 1.5}),), 2.0),
            Tenant("t2", (JobClass("c0", {"g0": 1.5, "g1": 1.0}, 2.0),), 1.0),
        ),
    )
    a = oef_noncoop.solve(p)
    level = a.user_throughput() / p.virtual_users().weight
    np.testing.assert_allclose(level, [2, 3, 3], rtol=1e-6)  # t0 capped at 2 GPUs of its only type
    assert a.notes == ("demand capped 1 class(es): t0/c0 (demand 2)",)


def test_noncoop_caps_level_off_by_highs_tolerance():
    """Regression (hypothesis): HiGHS's level was 3e-8 above the true one; t0 is capped by its demand
    (0.5 idle g0 it may not take), t2 by capacity (g1 is full), so only t0 is reported capped."""
    p = Problem(
        {"g0": 4, "g1": 4},
        (
            Tenant("t0", (JobClass("c0", {"g0": 1.0, "g1": 1.5}, 3.5),), 2.0),
            Tenant("t1", (JobClass("c0", {"g0": 0.0, "g1": 1.0}, 0.0),), 0.5),
            Tenant("t2", (JobClass("c0", {"g0": 0.0, "g1": 1.0}, 3.5),), 2.0),
            Tenant("t3", (JobClass("c0", {"g0": 0.0, "g1": 1.0}, 0.5),), 0.5),
        ),
    )
    a = oef_noncoop.solve(p)
    np.testing.assert_allclose(a.x, [[3.5, 0], [0, 0], [0, 3.5], [0, 0.5]], atol=1e-6)
    assert "t0/c0" in a.notes[0] and "t3/c0" in a.notes[0] and "t2/c0" not in a.notes[0]
