"""Warm rounds for oef-coop (issue 9, item 3): a solve seeded with an earlier solve's binding envy rows
reaches the same optimum, whatever the seed holds; the daemon's round saves the rows and seeds the next."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_fair import policies
from slurm_fair.daemon import round as R
from slurm_fair.model import Problem, problem_from_dict
from slurm_fair.policies import oef_coop
from slurm_fair.policies.oef_coop import fast as coop_fast
from slurm_fair.store import Store

from tests.conftest import CFG, job, snap


def monotone(n: int, k: int, seed: int):
    rng = np.random.default_rng([seed, n, k])
    r = rng.uniform(1.0, 2.5, (n, k))
    r[:, 0] = 1.0
    S = np.cumprod(r, axis=1)
    w = rng.choice([1.0, 2.0, 3.0], n)
    c = rng.integers(max(1, n // 4), n, k).astype(float)
    return S, w, c


@pytest.mark.parametrize("seed", range(4))
def test_seeded_solve_reaches_the_cold_optimum(seed):
    S, w, c = monotone(80, 5, seed)
    x0, i0 = coop_fast.solve_with_info(S, w, c)
    assert i0.binding and i0.seeded == 0
    assert all(0 <= a < 80 and 0 <= b < 80 and a != b for a, b in i0.binding)
    x1, i1 = coop_fast.solve_with_info(S, w, c, seed=i0.binding)
    assert i1.seeded == len(i0.binding)
    assert i1.objective == pytest.approx(i0.objective, rel=1e-9)
    assert i1.max_envy <= 1e-7
    # the same problem seeded with its own binding rows needs no more LP rounds than the cold start
    assert i1.rounds <= i0.rounds
    # a changed problem (a tenth of the users re-drawn) seeded with the old rows: the new cold optimum
    S2, _, _ = monotone(80, 5, seed + 100)
    S3 = S.copy()
    S3[::10] = S2[::10]
    xc, ic = coop_fast.solve_with_info(S3, w, c)
    xw, iw = coop_fast.solve_with_info(S3, w, c, seed=i0.binding)
    assert iw.objective == pytest.approx(ic.objective, rel=1e-9)
    assert iw.max_envy <= 1e-7
    assert np.allclose(xw.sum(axis=0), c) and np.allclose(xc.sum(axis=0), c)


def test_a_seed_with_bad_pairs_is_only_a_hint():
    S, w, c = monotone(30, 3, 7)
    x0, i0 = coop_fast.solve_with_info(S, w, c)
    junk = [(0, 0), (-1, 3), (3, 30), (5, 6), (5, 6)]
    x1, i1 = coop_fast.solve_with_info(S, w, c, seed=junk)
    assert i1.seeded == 1  # only (5, 6), once
    assert i1.objective == pytest.approx(i0.objective, rel=1e-9)
    x2, i2 = coop_fast.solve_with_info(S, w, c, seed=[])
    assert i2.seeded == 0 and i2.objective == pytest.approx(i0.objective, rel=1e-9)


def problem(n: int, seed: int, demand: bool = True) -> Problem:
    rng = np.random.default_rng(seed)
    S, w, _ = monotone(n, 3, seed)
    tenants = []
    for t in range(n // 2):
        classes = []
        for c in range(2):
            row = S[2 * t + c]
            d = {"demand": int(rng.choice([1, 2, 4, 8]))} if demand else {}
            classes.append({"name": f"c{c}", "throughput": {"k80": row[0], "p100": row[1], "v100": row[2]}, **d})
        tenants.append({"name": f"t{t}", "weight": float(w[2 * t]), "classes": classes})
    return problem_from_dict({"gpu_types": {"k80": 30, "p100": 20, "v100": 10}, "tenants": tenants})


@pytest.mark.parametrize("demand", [False, True])
def test_policy_warm_start_keys_and_result(demand):
    p = problem(60, 3, demand)
    cold = oef_coop.solve(p)
    keys = {(t.name, c.name) for t in p.tenants for c in t.classes}
    pairs = oef_coop._warm_pairs(cold.warm)
    assert pairs and all(a in keys and b in keys and a != b for a, b in pairs)
    # and one fingerprint per class, so that a later solve can drop the rows of changed classes
    assert {(e[1], e[2]) for e in cold.warm if e[0] == "fp"} == keys
    warm = oef_coop.solve(p, warm=cold.warm)
    np.testing.assert_allclose(warm.x, cold.x, atol=1e-7)
    assert any(n.startswith("warm start:") and "seeded" in n for n in warm.notes)
    # pairs that name classes the problem does not have, and malformed entries, are skipped
    junk = [(("gone", "c0"), ("t0", "c0")), "x", (("t0",), ("t1", "c0")), ((1, 2), (3, 4))]
    again = oef_coop.solve(p, warm=junk)
    np.testing.assert_allclose(again.x, cold.x, atol=1e-7)
    assert any("no envy row of the previous solve applied" in n for n in again.notes)
    # the warm start survives the JSON round trip the store gives it
    import json
    back = json.loads(json.dumps(cold.warm))
    np.testing.assert_allclose(oef_coop.solve(p, warm=back).x, cold.x, atol=1e-7)


def test_which_policies_take_a_warm_start_and_the_others_ignore_one():
    # oef-noncoop, gavel and max-throughput take last round's allocation (stable optima, tests/policies/test_stable.py)
    assert [n for n in policies.names() if policies.takes_warm(n)] == [
        "oef-noncoop", "oef-coop", "max-throughput", "gavel", "themis"]
    p = problem(8, 1)
    a = policies.solve("equal-share", p, warm=[(("t0", "c0"), ("t1", "c0"))])
    assert a.warm == () and np.allclose(a.x, policies.solve("equal-share", p).x)
    # binding-row pairs mean nothing to gavel: same result
    assert np.allclose(policies.solve("gavel", p, warm=[(("t0", "c0"), ("t1", "c0"))]).x, policies.solve("gavel", p).x)


def test_the_round_saves_the_binding_rows_and_seeds_the_next_round(tmp_path):
    store = Store(tmp_path / "db.sqlite")
    assert store.warm_start("oef-coop") is None
    jobs = [job(i, a, gpus=g, name=cls) for i, (a, g, cls) in enumerate(
        [("acct_a", 4, "x"), ("acct_a", 2, "y"), ("acct_b", 4, "x"), ("acct_c", 8, "y"), ("acct_c", 1, "z")], 1)]
    store.set_profile("x", "v100", 10.0, account="acct_a")
    store.set_profile("x", "k80", 1.0, account="acct_a")
    store.set_profile("x", "v100", 3.0, account="acct_b")
    store.set_profile("x", "k80", 1.0, account="acct_b")
    s = snap(jobs)
    first = R.compute(s, store, CFG, "oef-coop", 1000.0)
    assert not any(n.startswith("warm start:") for n in first.alloc.notes)  # nothing saved yet: cold
    assert first.alloc.warm
    assert R._warm(store, "oef-coop") is None and R._warm(store, "gavel") is None
    import json
    store.save_warm_start("oef-coop", first.alloc.warm, 1)
    assert store.warm_start("oef-coop") == json.loads(json.dumps(first.alloc.warm))
    second = R.compute(s, store, CFG, "oef-coop", 1300.0)
    assert any(n.startswith("warm start:") and "seeded" in n for n in second.alloc.notes)
    np.testing.assert_allclose(second.alloc.x, first.alloc.x, atol=1e-7)
    # an unreadable saved start counts as none: the round still solves
    store.db.execute("update warm_start set data = 'not json'")
    assert store.warm_start("oef-coop") is None
    third = R.compute(s, store, CFG, "oef-coop", 1600.0)
    np.testing.assert_allclose(third.alloc.x, first.alloc.x, atol=1e-7)
    store.close()


def test_a_capped_class_moves_to_faster_idle_gpus():
    # eq. 10 gives b (1.2x on a V100) the K80s and a (10x) the V100s; a only needs 1 GPU, so V100s stay idle:
    # b, at its demand of 2, moves from K80s to the idle V100s (it gains, nobody loses)
    p = problem_from_dict({"gpu_types": {"k80": 4, "v100": 4}, "tenants": [
        {"name": "a", "classes": [{"name": "c", "throughput": {"k80": 1, "v100": 10}, "demand": 1}]},
        {"name": "b", "classes": [{"name": "c", "throughput": {"k80": 1, "v100": 1.2}, "demand": 2}]}]})
    a = oef_coop.solve(p)
    np.testing.assert_allclose(a.x, [[0, 1], [0, 2]], atol=1e-9)
