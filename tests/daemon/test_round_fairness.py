"""Envy and sharing-incentive violations per round (fairness.violations, plan.real_per_class,
plan.round_fairness), on hand-computed cases of 2-3 tenants and 2 GPU types."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_fair import fairness
from slurm_fair.daemon import plan as P
from slurm_fair.model import Allocation, problem_from_dict
from slurm_fair.policies import solve
from slurm_fair.store import ProfileValue


def problem(weights=(1, 1), demand_b=None, k80=2, v100=2):
    # a: 3x faster on a V100, b: 2x; no demand limits unless asked
    b = {"name": "default", "throughput": {"k80": 1, "v100": 2}}
    if demand_b is not None:
        b["demand"] = demand_b
    return problem_from_dict({"gpu_types": {"k80": k80, "v100": v100}, "tenants": [
        {"name": "a", "weight": weights[0], "classes": [{"name": "default", "throughput": {"k80": 1, "v100": 3}}]},
        {"name": "b", "weight": weights[1], "classes": [b]}]})


def counts(p, x):
    return fairness.violations(p.virtual_users(), np.array(x, dtype=float))


def test_a_case_with_envy_and_a_sharing_incentive_violation():
    # a holds both V100s (throughput 6), b both K80s (2). b values a's V100s at 2 x 2 = 4 > 2: envy, by 2.
    # a values b's K80s at 2 < 6. Weight shares (1 K80 + 1 V100): a 1 + 3 = 4 <= 6, b 1 + 2 = 3 > 2: b is short
    c = counts(problem(), [[0, 2], [2, 0]])
    assert c["envy_pairs"] == 1 and c["max_envy"] == pytest.approx(2.0)
    assert c["si_violations"] == 1 and c["min_si_ratio"] == pytest.approx(2 / 3)
    assert c["tenants"] == 2 and c["classes"] == 2 and c["compared"] == 2
    # the same verdicts as the full property checks
    alloc = Allocation(problem(), "fixed", np.array([[0, 2], [2, 0]], dtype=float))
    assert fairness.envy_free(alloc).value is False and fairness.sharing_incentive(alloc).value is False
    # b's envy of 2 is 100 % of its own throughput of 2
    assert fairness.largest_envy_ratio(problem().virtual_users(), np.array([[0, 2], [2, 0]], dtype=float)) == \
        pytest.approx(1.0)


def test_a_case_without_violations():
    # a: 1.4 V100 -> 4.2, b: 2 K80 + 0.6 V100 -> 3.2. b values a's at 2.8, a values b's at 2 + 1.8 = 3.8 < 4.2.
    # weight shares: a 4 <= 4.2 (ratio 1.05), b 3 <= 3.2 (ratio 1.0667)
    c = counts(problem(), [[0, 1.4], [2, 0.6]])
    assert c["envy_pairs"] == 0 and c["max_envy"] == 0.0 and c["si_violations"] == 0
    assert c["min_si_ratio"] == pytest.approx(1.05)


def test_weights_scale_the_compared_bundles_and_the_shares():
    # a has weight 2: b values a's 2 V100s scaled by 1/2 at 2 = its own 2 (no envy); a values b's K80s x 2 at 4 < 6.
    # shares of 3: a (2/3)(2 + 6) = 5.33 <= 6, b (1/3)(2 + 4) = 2 <= 2 (equal: not short)
    c = counts(problem(weights=(2, 1)), [[0, 2], [2, 0]])
    assert c["envy_pairs"] == 0 and c["si_violations"] == 0
    assert c["min_si_ratio"] == pytest.approx(1.0)


def test_capped_classes_are_not_compared():
    # b asks for 2 GPUs and has them (on the K80s): it is at its demand, so neither its envy nor its share counts
    c = counts(problem(demand_b=2), [[0, 2], [2, 0]])
    assert c["compared"] == 1 and c["envy_pairs"] == 0 and c["si_violations"] == 0
    assert c["min_si_ratio"] == pytest.approx(6 / 4)


def test_envy_between_classes_of_one_tenant_is_not_a_pair_of_tenants():
    p = problem_from_dict({"gpu_types": {"k80": 2, "v100": 2}, "tenants": [
        {"name": "a", "classes": [{"name": "x", "throughput": {"k80": 1, "v100": 3}},
                                  {"name": "y", "throughput": {"k80": 1, "v100": 3}}]},
        {"name": "b", "classes": [{"name": "default", "throughput": {"k80": 1, "v100": 3}}]}]})
    # a/x holds 2 V100 (6), a/y nothing, b 2 K80 (2); each class of a has weight 1/2, b 1
    c = counts(p, [[0, 2], [0, 0], [2, 0]])
    # pairs: (a, b) from a/y (values b's 2 K80 x (0.5/1) = 1 > 0) and (b, a) from b (values a/x's 2 V100 x 2 = 12 > 2)
    assert c["envy_pairs"] == 2 and c["max_envy"] == pytest.approx(10.0)
    # a/y short (0 < its share), b short (2 < (1/2)(2 + 6) = 4): two tenants
    assert c["si_violations"] == 2


def test_an_empty_problem_counts_nothing():
    from slurm_fair.model import Problem

    c = fairness.violations(Problem({"k80": 2}, ()).virtual_users(), np.zeros((0, 1)))
    assert c == {"tenants": 0, "classes": 0, "compared": 0, "envy_pairs": 0, "max_envy": 0.0, "si_violations": 0,
                 "min_si_ratio": None}


@pytest.mark.parametrize("seed", range(6))
def test_ideal_counts_agree_with_the_property_checks_on_single_class_tenants(seed):
    rng = np.random.default_rng(seed)
    n = 6
    p = problem_from_dict({"gpu_types": {"k80": 5, "p100": 4, "v100": 3}, "tenants": [
        {"name": f"t{i}", "weight": float(rng.integers(1, 4)), "classes": [{
            "name": "c", "throughput": {"k80": 1.0, "p100": float(rng.uniform(1, 3)), "v100": float(rng.uniform(1, 6))},
            **({"demand": int(rng.integers(1, 4))} if rng.random() < 0.5 else {})}]} for i in range(n)]})
    for policy in ("equal-share", "max-throughput", "oef-noncoop"):
        alloc = solve(policy, p)
        c = fairness.violations(alloc.vu, alloc.x)
        assert (c["envy_pairs"] == 0) == bool(fairness.envy_free(alloc).value), policy
        assert (c["si_violations"] == 0) == bool(fairness.sharing_incentive(alloc).value), policy


# ------------------------------------------------------------------------------------------- the real GPUs


def test_real_gpus_are_split_among_an_accounts_classes_like_its_ideal():
    from tests.daemon.test_plan import fixed_alloc, snap, job, CFG, PROFILES, SHIPPED

    jobs = [job(1, "acct_a", 1, None, name="x"), job(2, "acct_a", 1, None, name="x"), job(3, "acct_a", 2, None, name="y"),
            job(4, "acct_b", 2, None, name="s")]
    s = snap(jobs)
    d = P.observe_demand(s, CFG)
    b = P.build_problem(s, d, PROFILES, SHIPPED, CFG)
    alloc = fixed_alloc(b, {("acct_a", "x"): {"k80": 0.5, "v100": 1.0}, ("acct_a", "y"): {"k80": 1.0},
                            ("acct_b", "s"): {"k80": 1.5}})
    y = P.real_per_class(b, alloc, {"acct_a": {"k80": 2, "v100": 2}, "acct_b": {"k80": 1, "v100": 1}})
    vu = alloc.vu
    row = {(t, c): i for i, (t, c) in enumerate(zip(vu.tenant, vu.cls))}
    j = {g: vu.gpu_types.index(g) for g in vu.gpu_types}
    # acct_a's 2 K80 split 0.5 : 1.0, its 2 V100 all to x (y has no ideal V100)
    assert y[row[("acct_a", "x")], j["k80"]] == pytest.approx(2 / 3)
    assert y[row[("acct_a", "y")], j["k80"]] == pytest.approx(4 / 3)
    assert y[row[("acct_a", "x")], j["v100"]] == pytest.approx(2.0) and y[row[("acct_a", "y")], j["v100"]] == 0
    # acct_b's V100: no ideal V100 there, its one class can use it: all of it
    assert y[row[("acct_b", "s")], j["v100"]] == pytest.approx(1.0)
    assert y.sum() == pytest.approx(6.0)


def test_round_fairness_counts_the_rounded_placement_too():
    from tests.daemon.test_plan import fixed_alloc, snap, job, CFG

    # a (3x on a V100) and b (2x), 1 K80 + 2 V100 ... as profiles of the site
    profiles = [ProfileValue("", "ca", "k80", 1.0),
                ProfileValue("", "ca", "v100", 3.0),
                ProfileValue("", "cb", "k80", 1.0),
                ProfileValue("", "cb", "v100", 2.0)]
    from slurm_fair.cluster.base import Node

    nodes = (Node("v", ("IDLE",), ("gpu",), {"v100": 2}, {}), Node("k", ("IDLE",), ("gpu",), {"k80": 1}, {}))
    jobs = [job(i, "acct_a", 1, None, name="ca") for i in range(1, 5)] + [job(10 + i, "acct_b", 1, None, name="cb")
                                                                          for i in range(4)]
    s = snap(jobs, nodes=nodes, accounts={"acct_a": 1, "acct_b": 1})
    d = P.observe_demand(s, CFG)
    b = P.build_problem(s, d, profiles, [], CFG)
    # ideal: a 1.4 V100 (4.2), b 1 K80 + 0.6 V100 (2.2): b values a's at 2.8 > 2.2 (envy 0.6); a values b's at
    # 1 + 1.8 = 2.8 < 4.2. shares (0.5 K80 + 1 V100): a 3.5, b 2.5 > 2.2 (ratio 0.88)
    alloc = fixed_alloc(b, {("acct_a", "ca"): {"v100": 1.4}, ("acct_b", "cb"): {"k80": 1.0, "v100": 0.6}})
    plan = P.make_plan(b, alloc, d, {}, ["acct_a", "acct_b"])
    assert plan.real == {"acct_a": {"k80": 0, "v100": 1}, "acct_b": {"k80": 1, "v100": 1}}
    f = P.round_fairness(b, alloc, plan)
    assert f["ideal"]["envy_pairs"] == 1 and f["ideal"]["max_envy"] == pytest.approx(0.6)
    assert f["ideal"]["min_si_ratio"] == pytest.approx(2.2 / 2.5)
    # real: a 1 V100 (3), b 1 K80 + 1 V100 (3). a values b's at 1 + 3 = 4 > 3 (envy 1); b values a's at 2 < 3.
    # a's share 3.5 > 3 (ratio 6/7), b's 2.5 <= 3
    assert f["real"]["envy_pairs"] == 1 and f["real"]["max_envy"] == pytest.approx(1.0)
    assert f["real"]["si_violations"] == 1 and f["real"]["min_si_ratio"] == pytest.approx(3 / 3.5)
    assert f["throughput"] == {"ideal": {"acct_a": pytest.approx(4.2), "acct_b": pytest.approx(2.2)},
                               "real": {"acct_a": pytest.approx(3.0), "acct_b": pytest.approx(3.0)}}


def test_the_round_records_the_counts_and_survives_their_failure(monkeypatch, tmp_path):
    from slurm_fair import config
    from slurm_fair.daemon.round import run_round
    from slurm_fair.sim.cluster import SimCluster, cluster_spec
    from slurm_fair.sim.traces import TraceJob
    from slurm_fair.store import Store

    thr = {"fast": {"k80": 1.0, "v100": 3.0}, "flat": {"k80": 1.0, "v100": 2.0}}
    jobs = [TraceJob(f"{a}{i}", 0.0, a, c, 1, 1e6) for i in range(4) for a, c in (("a", "fast"), ("b", "flat"))]
    cfg = config.from_dict({"daemon": {"database": str(tmp_path / "s.sqlite"), "dry_run": False}, "hooks": {"spool": str(tmp_path / "sp")}})
    with Store(cfg.database_path) as store:
        for c, row in thr.items():
            for g, v in row.items():
                store.set_profile(c, g, v)
        cluster = SimCluster(cluster_spec("k80=2,v100=2", 2), {"a": 1, "b": 1}, thr, jobs, epoch=1.7e9)
        cluster.advance(0.0)
        res = run_round(cluster, store, cfg, "oef-coop", now=cluster.clock())
        f = store.round(res.round_id).details["fairness"]
        assert res.status == "ok" and set(f) == {"ideal", "real", "seconds"}
        assert store.round(res.round_id).details["throughput"]["ideal"] == {"a": pytest.approx(4.5),
                                                                              "b": pytest.approx(3.0)}
        # cooperative OEF: a 1.5 V100 (4.5; its weight share, 1 K80 + 1 V100, gives 4), b 2 K80 + 0.5 V100 (3;
        # its share 3): envy-free. Placed whole, a gets 1 V100 (then it values b's 2 K80 + 1 V100 at 5 > 3) or
        # 2 (then b values them at 4 > its 2 K80): one envious pair either way
        assert f["ideal"] == {"tenants": 2, "classes": 2, "compared": 2, "envy_pairs": 0, "max_envy": 0.0,
                              "si_violations": 0, "min_si_ratio": pytest.approx(1.0)}
        assert f["real"]["compared"] == 2 and f["real"]["envy_pairs"] == 1
        monkeypatch.setattr(P, "round_fairness", lambda *a: 1 / 0)
        res = run_round(cluster, store, cfg, "oef-noncoop", now=cluster.clock())
        assert res.status == "ok"
        assert store.round(res.round_id).details["fairness"]["error"].startswith("ZeroDivisionError")
