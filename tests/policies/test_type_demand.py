"""Per-type demand (``type_demand``): parsing, the virtual-user caps, and every policy on the OEF paper's
§3.1 example with a per-type cap added, checked against the definitions (not against numbers of the code)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import linprog

from slurm_fair import fairness
from slurm_fair.errors import InputError
from slurm_fair.model import Allocation, problem_from_dict, problem_to_dict
from slurm_fair.policies import equal_share, gandiva_fair, gavel, max_throughput, oef_coop, oef_noncoop

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "etc" / "examples" / "type-demand.json"


def paper_31(u2_type_demand, u2_demand=None):
    """OEF §3.1: one gpu1 and one gpu2, speedups <1, 2> (u1) and <1, 5> (u2); u2 gets per-type caps."""
    c2 = {"name": "job", "throughput": {"gpu1": 1, "gpu2": 5}, "type_demand": u2_type_demand}
    if u2_demand is not None:
        c2["demand"] = u2_demand
    return problem_from_dict({
        "gpu_types": {"gpu1": 1, "gpu2": 1},
        "tenants": [{"name": "u1", "classes": [{"name": "job", "throughput": {"gpu1": 1, "gpu2": 2}}]},
                    {"name": "u2", "classes": [c2]}],
    })


# --------------------------------------------------------------------------- model


def test_type_demand_parsed_round_tripped_and_turned_into_caps():
    p = paper_31({"gpu2": 0.25, "gpu1": 3})
    c = p.tenant("u2").classes[0]
    assert c.type_demand == {"gpu2": 0.25, "gpu1": 3.0} and c.demand is None
    assert problem_from_dict(problem_to_dict(p)) == p
    vu = p.virtual_users()
    assert vu.type_cap[0].tolist() == [math.inf, math.inf]  # u1: no per-type caps
    assert vu.type_cap[1].tolist() == [3.0, 0.25]
    assert vu.demand.tolist() == [math.inf, 3.25]  # no demand given: the sum of type_demand


def test_absent_type_means_zero_and_makes_the_type_unusable():
    p = paper_31({"gpu2": 1}, u2_demand=5)
    vu = p.virtual_users()
    assert vu.type_cap[1].tolist() == [0.0, 1.0]
    # gpu1 is unusable for u2: its speed there is 0 and gpu2 is now its slowest usable type (speed 1)
    assert vu.speed[1].tolist() == [0.0, 1.0]
    assert vu.demand[1] == 1.0  # demand 5, but it can use only 1 GPU in all


@pytest.mark.parametrize("td, path, value", [
    ({"h100": 1}, "tenants[1].classes[0].type_demand.h100", "h100"),
    ({"gpu1": -1}, "tenants[1].classes[0].type_demand.gpu1", "-1"),
    ({"gpu1": "2"}, "tenants[1].classes[0].type_demand.gpu1", "'2'"),
    ({"gpu1": float("inf")}, "tenants[1].classes[0].type_demand.gpu1", "inf"),
    ([1, 2], "tenants[1].classes[0].type_demand", "[1, 2]"),
])
def test_bad_type_demand_names_the_path_and_value(td, path, value):
    with pytest.raises(InputError) as e:
        paper_31(td)
    assert e.value.field == path and value in str(e.value)


# --------------------------------------------------------------------------- per policy, §3.1 + a cap

ALL = [oef_noncoop, oef_coop, max_throughput, equal_share, gavel, gandiva_fair]


def caps_respected(a):
    vu = a.problem.virtual_users()
    assert (a.x >= 0).all()
    assert (a.x.sum(axis=0) <= vu.capacity + 1e-9).all()
    assert (a.x <= vu.type_cap + 1e-9).all()
    assert (a.x.sum(axis=1) <= vu.demand + 1e-9).all()
    assert fairness.demand(a).value is True


def work_conserving(a):
    vu = a.problem.virtual_users()
    idle = vu.capacity - a.x.sum(axis=0)
    for j in np.flatnonzero(idle > 1e-6):
        for i in range(vu.n):
            assert not (vu.speed[i, j] > 0 and a.x[i].sum() < vu.demand[i] - 1e-6 and a.x[i, j] < vu.type_cap[i, j] - 1e-6)


@pytest.mark.parametrize("policy", ALL, ids=lambda m: m.NAME)
def test_every_policy_respects_a_binding_type_cap(policy):
    # unconstrained, OEF gives u2 0.75 (coop) or 4/7 (noncoop) of gpu2: a cap of 0.25 binds for OEF
    p = paper_31({"gpu1": 1, "gpu2": 0.25})
    a = policy.solve(p)
    caps_respected(a)
    if policy is not oef_noncoop:
        work_conserving(a)
    assert a.x[1, 1] <= 0.25 + 1e-9


def test_noncoop_type_cap_progressive_filling_levels():
    # u2 (speed <1, 5>) can use 0.25 of gpu2. Definition: the common level t rises until u2 cannot rise
    # with its cap but could without it; u2 freezes there, u1 goes on alone.
    p = paper_31({"gpu1": 1, "gpu2": 0.25})
    a = oef_noncoop.solve(p)
    u = a.user_throughput()
    # independent LP: the largest t with u1 = u2 = t, x22 <= 0.25, capacity
    # x = [x11, x12, x21, x22, t]
    res = linprog([0, 0, 0, 0, -1], A_ub=[[1, 0, 1, 0, 0], [0, 1, 0, 1, 0]], b_ub=[1, 1],
                  A_eq=[[1, 2, 0, 0, -1], [0, 0, 1, 5, -1]], b_eq=[0, 0],
                  bounds=[(0, None)] * 3 + [(0, 0.25), (0, None)], method="highs")
    level = -res.fun
    assert u[1] == pytest.approx(level, rel=1e-6)  # u2 froze at the highest common level
    assert u[0] >= level * (1 - 1e-6)  # u1 is at least there, and cannot rise further with u2 kept:
    res1 = linprog([-1, -2, 0, 0], A_ub=[[1, 0, 1, 0], [0, 1, 0, 1], [0, 0, -1, -5]], b_ub=[1, 1, -u[1] * (1 - 1e-9)],
                   bounds=[(0, None)] * 3 + [(0, 0.25)], method="highs")
    assert u[0] == pytest.approx(-res1.fun, rel=1e-6)
    # without the cap u2 rises above that level: the cap, not u1, stopped it
    free = oef_noncoop.solve(paper_31({"gpu1": 1, "gpu2": 1})).user_throughput()
    assert free[1] > level * (1 + 1e-3)
    assert any("u2/job" in n for n in a.notes)


def test_coop_type_cap_freezes_the_usable_part_and_resolves_the_rest():
    # eq. 10 alone gives u2 [0, 0.75]; with a gpu2 cap of 0.25 it keeps 0.25 of gpu2 (the usable part of
    # its share), and eq. 10 for u1 alone on the rest gives u1 everything left: [1, 0.75]
    p = paper_31({"gpu1": 1, "gpu2": 0.25})
    a = oef_coop.solve(p)
    caps_respected(a)
    work_conserving(a)
    assert a.x[1].tolist() == pytest.approx([0, 0.25], abs=1e-7)
    assert a.x[0].tolist() == pytest.approx([1, 0.75], abs=1e-7)
    r = fairness.check(a)
    assert r["envy_free"].value is True and "among the 1 uncapped class(es)" in r["envy_free"].detail
    # a cap that does not bind changes nothing: the paper's X = [[1, 0.25], [0, 0.75]]
    b = oef_coop.solve(paper_31({"gpu1": 1, "gpu2": 0.75}))
    assert b.x.ravel().tolist() == pytest.approx([1, 0.25, 0, 0.75], abs=1e-7)


def test_coop_gpus_only_a_capped_class_can_use_go_to_it():
    # u2 can use only gpu2 (gpu1 absent from type_demand) and u1 is capped at 0.5 of gpu2: after the
    # water-filling nobody uncapped is left for the rest of gpu2, so it goes to u2 (work conservation)
    p = problem_from_dict({
        "gpu_types": {"gpu1": 1, "gpu2": 2},
        "tenants": [{"name": "u1", "classes": [{"name": "j", "throughput": {"gpu1": 1, "gpu2": 2}, "type_demand": {"gpu1": 1, "gpu2": 0.5}}]},
                    {"name": "u2", "classes": [{"name": "j", "throughput": {"gpu1": 1, "gpu2": 5}, "type_demand": {"gpu2": 1.25}}]}],
    })
    for policy in (oef_coop, gavel, equal_share, gandiva_fair, max_throughput):
        a = policy.solve(p)
        caps_respected(a)
        work_conserving(a)
        # gpu1: only u1 can use it; gpu2: 0.5 + 1.25 can be used, 0.25 stays idle (nobody can take it)
        assert a.x[:, 0].sum() == pytest.approx(1) and a.x[:, 1].sum() == pytest.approx(1.75), policy.NAME


def test_gandiva_trades_never_cross_a_type_cap():
    # equal share [[0.5, 0.5], [0.5, 0.5]]; u2 (fast on gpu2) would buy u1's gpu2, but may hold only 0.6 of it
    p = paper_31({"gpu1": 1, "gpu2": 0.6})
    a = gandiva_fair.solve(p)
    caps_respected(a)
    assert a.x[1, 1] == pytest.approx(0.6)  # traded up to its cap, not beyond
    eq = equal_share.solve(p).user_throughput()
    assert (a.user_throughput() >= eq - 1e-9).all()  # trades still help both sides


def test_gavel_type_cap_max_min_level():
    p = paper_31({"gpu1": 1, "gpu2": 0.25})
    a = gavel.solve(p)
    caps_respected(a)
    e = equal_share.solve(p).user_throughput()  # the capped equal share
    ratio = a.user_throughput() / e
    # independent LP: max t with u_l >= t e_l under the caps; Gavel's smallest ratio must reach it
    res = linprog([0, 0, 0, 0, -1], A_ub=[[1, 0, 1, 0, 0], [0, 1, 0, 1, 0], [-1, -2, 0, 0, e[0]], [0, 0, -1, -5, e[1]]],
                  b_ub=[1, 1, 0, 0], bounds=[(0, None)] * 3 + [(0, 0.25), (0, None)], method="highs")
    assert ratio.min() == pytest.approx(-res.fun, rel=1e-6)
    assert ratio.min() >= 1 - 1e-9


# --------------------------------------------------------------------------- example file and the check


def test_example_file_every_policy_within_caps():
    p = problem_from_dict(json.loads(EXAMPLE.read_text()))
    vu = p.virtual_users()
    assert np.isfinite(vu.type_cap).any()
    for policy in ALL:
        a = policy.solve(p)
        caps_respected(a)
        r = fairness.check(a)
        assert r["capacity"].value is True and r["demand"].value is True
        assert "per-type caps" in r["demand"].detail
    r = fairness.check(oef_coop.solve(p))
    assert r["envy_free"].value is True and "uncapped class(es)" in r["envy_free"].detail
    eq = fairness.equal_throughput(oef_noncoop.solve(p))
    assert eq.value is True and "at their demand or type caps not compared" in eq.detail


def test_demand_check_names_a_broken_type_cap():
    p = paper_31({"gpu1": 1, "gpu2": 0.25})
    bad = fairness.demand(Allocation(p, "hand-built", np.array([[1, 0.5], [0, 0.5]])))
    assert bad.value is False and "u2" in bad.detail and "gpu2" in bad.detail and bad.worst == pytest.approx(0.25)
    # a type the class cannot use (absent from type_demand) must get nothing
    q = paper_31({"gpu2": 1})
    bad = fairness.demand(Allocation(q, "hand-built", np.array([[0.5, 0.5], [0.5, 0.5]])))
    assert bad.value is False and "cannot use" in bad.detail


def test_plain_cooperative_form_honours_type_caps_too():
    # the plain cvxpy form (all envy rows, ECOS) runs inside the same water-filling
    p = paper_31({"gpu1": 1, "gpu2": 0.25})
    a = oef_coop.solve_plain(p)
    caps_respected(a)
    work_conserving(a)
    assert a.x[1].tolist() == pytest.approx([0, 0.25], abs=1e-6)


@pytest.mark.parametrize("policy", ALL, ids=lambda m: m.NAME)
def test_a_class_whose_caps_leave_no_usable_type_gets_nothing(policy):
    # u2's jobs request only gpu3, which this problem does not have... as a type present with 0 GPUs
    p = problem_from_dict({
        "gpu_types": {"gpu1": 1, "gpu2": 1, "gpu3": 0},
        "tenants": [{"name": "u1", "classes": [{"name": "job", "throughput": {"gpu1": 1, "gpu2": 2}}]},
                    {"name": "u2", "classes": [{"name": "job", "throughput": {"gpu1": 1, "gpu2": 5, "gpu3": 9},
                                                "type_demand": {"gpu3": 2}}]}],
    })
    a = policy.solve(p)
    caps_respected(a)
    assert a.x[1].sum() == 0
    if policy is not oef_noncoop:
        assert a.x[0].sum() == pytest.approx(2)  # u1 gets everything it can use
