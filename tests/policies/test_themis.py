"""themis (paper 003): the partial-allocation auction worked by hand, filtering by finish-time fairness,
leases across rounds (the daemon's state), leftovers, and the properties the paper does not claim for a
single round (a counter-example the checker finds)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_fair import config, fairness, policies
from slurm_fair.errors import InputError
from slurm_fair.model import problem_from_dict
from slurm_fair.policies import themis

ROOT = Path(__file__).resolve().parents[2]


def T(name, thr, weight=1.0, **cls):
    return {"name": name, "weight": weight, "classes": [{"name": "c", "throughput": thr, **cls}]}


def L(state):
    """The saved leases, rounded: (app, type, GPUs, age)."""
    return sorted((a, g, round(x, 5), round(t, 5)) for a, g, x, t in state["leases"])


def test_partial_allocation_auction_by_hand():
    # k80: 2, v100: 2; a runs equally on both, b 3x on a V100; f = 0: both bid, nothing held, no waiting, so
    # 1/rho is proportional to throughput and line 6 is Eisenberg-Gale. Proportional fair: prices (0.5, 0.5),
    # a takes the K80s (u_a = 2), b the V100s (u_b = 6). Without a, b takes all (u_b = 8): c_a = 6/8 = 0.75;
    # without b, a takes all (u_a = 4): c_b = 2/4 = 0.5. a keeps 1.5 K80, b 1 V100 (line 9).
    p = problem_from_dict({"gpu_types": {"k80": 2, "v100": 2},
                           "tenants": [T("a", {"k80": 1, "v100": 1}), T("b", {"k80": 1, "v100": 3})]})
    a = themis.solve(p, f=0.0)
    # the hidden payments (0.5 K80 + 1 V100) have no app outside the auction to go to: idle (line 10)
    np.testing.assert_allclose(a.x, [[1.5, 0.0], [0.0, 1.0]], atol=1e-5)
    assert any("hidden payments 1.5 GPU(s), c_i from 0.5 to 0.75" in n for n in a.notes), a.notes
    assert any("1.5 GPU(s) idle until the next auction" in n for n in a.notes), a.notes
    # work-conserving (the old behaviour): the payments go back to both by weight, fastest type first:
    # V100 0.5 each, K80 0.25 each
    w = themis.solve(p, f=0.0, work_conserving=True)
    np.testing.assert_allclose(w.x, [[1.75, 0.5], [0.25, 1.5]], atol=1e-5)


def test_a_lie_does_not_pay_in_the_paper_auction_and_pays_when_payments_are_given_back():
    # the instance above; a reports v100 = 2 (truth: 1). Proportional fair on the reports: a takes both K80
    # and y V100, b the rest; a indifferent (p_v100 = 2 p_k80 = 2/u_a), b on V100 (p_v100 = 3/u_b):
    # 3 (2 + 2y) = 2 * 3 (2 - y) -> y = 0.5, u_a = 3 (reported), u_b = 4.5. Without a, b takes all (8):
    # c_a = 4.5/8 = 0.5625: a keeps 1.125 K80 + 0.28125 V100, true throughput 1.40625 < 1.5 (truthful).
    # Given back (work-conserving): without b, a's reports give 6 -> c_b = 3/6 = 0.5, b keeps 0.75 V100;
    # the 0.96875 V100 and 0.875 K80 left go half to each: a's true throughput 2.328125 > 2.25 (truthful).
    def true_u(lie, wc):
        p = problem_from_dict({"gpu_types": {"k80": 2, "v100": 2},
                               "tenants": [T("a", {"k80": 1, "v100": lie}), T("b", {"k80": 1, "v100": 3})]})
        return float(themis.solve(p, f=0.0, work_conserving=wc).x[0] @ [1.0, 1.0])

    assert true_u(1.0, False) == pytest.approx(1.5, abs=1e-5)
    assert true_u(2.0, False) == pytest.approx(1.40625, abs=1e-5)
    assert true_u(1.0, True) == pytest.approx(2.25, abs=1e-5)
    assert true_u(2.0, True) == pytest.approx(2.328125, abs=1e-5)
    for lie in (0.5, 1.5, 3.0, 6.0):  # no other report beats the truth in the paper's auction
        assert true_u(lie, False) <= 1.5 + 1e-6


def test_bids_are_one_over_rho_with_the_waiting_time():
    # g: 2, both apps speed 1, 100 GPU-s of work each (one 2-GPU job, 50 s), independent share 1 GPU: T_id = 100.
    # a has waited 100 s, b just came: 1/rho_a = 100 u / (100 u + 100), 1/rho_b = u. Line 6: max
    # log(u_a / (u_a + 1)) + log u_b, u_a + u_b = 2: 1 / (u_a (u_a + 1)) = 1 / (2 - u_a) -> u_a^2 + 2 u_a - 2 = 0,
    # u_a = sqrt(3) - 1 = 0.7320508, u_b = 3 - sqrt(3) = 1.2679492 (on throughput alone: 1 and 1).
    # c_a = u_b / 2 = 0.6339746; c_b = [u_a / (u_a + 1)] / [2 / 3] = 0.6339746. Final: a 0.4641016, b 0.8038476.
    jobs = [{"id": "1", "gpus": 2, "remaining": 50}]
    p = problem_from_dict({"gpu_types": {"g": 2}, "tenants": [T("a", {"g": 1}, jobs=jobs),
                                                              T("b", {"g": 1}, jobs=[{**jobs[0], "id": "2"}])]})
    warm = {"version": 2, "leases": [], "apps": {"a/c": [100.0, 0.0]}, "dt": 0.0}
    r = themis.solve(p, warm=warm, f=0.0)
    s3 = 3 ** 0.5
    c = (3 - s3) / 2
    np.testing.assert_allclose(r.x.ravel(), [c * (s3 - 1), c * (3 - s3)], atol=1e-6)
    # with no waiting the program is Eisenberg-Gale on throughput: 1 each, c = 1/2
    r0 = themis.solve(p, warm={"apps": {}, "dt": 0.0}, f=0.0)
    np.testing.assert_allclose(r0.x.ravel(), [0.5, 0.5], atol=1e-6)


def test_pa_program_matches_an_independent_solve():
    # the conic program (exp cone) against scipy's SLSQP on the same objective, on random small auctions
    from scipy.optimize import minimize

    from slurm_fair.policies.themis import auction as pa

    rng = np.random.default_rng(7)
    for _ in range(5):
        n, k = 3, 2
        S = rng.uniform(1.0, 4.0, (n, k))
        free = np.array([2.0, 3.0])
        el = rng.uniform(0.0, 500.0, n)
        W = rng.uniform(100.0, 1000.0, n)
        u0 = np.array([0.0, 0.5, 0.0])
        m = pa.Market(S, np.ones(n), free, np.full(n, np.inf), np.full((n, k), np.inf), u0, el, W)
        y, opt = pa.conic(m)

        def negobj(z):
            u = u0 + (S * z.reshape(n, k)).sum(axis=1)
            return -np.sum(np.log(u) - np.log(el * u + W))

        cons = [{"type": "ineq", "fun": lambda z, j=j: free[j] - z.reshape(n, k)[:, j].sum()} for j in range(k)]
        ref = minimize(negobj, np.full(n * k, 0.5), bounds=[(1e-9, None)] * (n * k), constraints=cons,
                       method="SLSQP", options={"ftol": 1e-14, "maxiter": 500})
        u = m.utilities(y) * m.K
        assert np.sum(np.log(u) - np.log(el * u + W)) == pytest.approx(-ref.fun, abs=1e-7)


def test_one_shot_filtering_by_finish_time_not_by_name_and_leftovers_to_the_apps_that_did_not_bid():
    # 4 GPUs of one type, 3 apps (demand 4, speed 1) with 4000, 400 and 2000 GPU-s of work; one-shot (no
    # history): every rho is infinite, ties by the shortest T_id = W / e (e = 4/3): b (300 s), c (1500 s), then
    # a (3000 s). f = 0.5: ceil(1.5) = 2 bid: b and c (by name it would be a and b). PF: 2 each; c_i = 2/4 = 0.5
    # -> 1 GPU each; the 2 GPUs of hidden payments go to a, which did not bid. rho = e/u: 2/3, 4/3, 4/3.
    p = problem_from_dict({"gpu_types": {"g": 4}, "tenants": [
        T(n, {"g": 1}, jobs=[{"id": n, "gpus": 4, "remaining": r}]) for n, r in (("a", 1000), ("b", 100), ("c", 500))]})
    a = themis.solve(p, f=0.5)
    np.testing.assert_allclose(a.x.ravel(), [2.0, 1.0, 1.0], atol=1e-5)
    assert any("2 of 3 app(s) bid" in n and "2 GPU(s) of leftovers to apps that did not bid" in n for n in a.notes)
    assert any("rho: max 1.333, mean 1.111" in n for n in a.notes)


def test_apps_tied_at_the_cut_all_bid():
    # 3 identical apps, f = 0.5: all tie (rho infinite, same T_id), so all 3 bid rather than the first 2 by
    # name. PF 4/3 each; without one, 2 each: c = (4/3)^2 / 2^2 = 4/9 -> 16/27 GPU each; 4 - 16/9 idle.
    p = problem_from_dict({"gpu_types": {"g": 4}, "tenants": [T(n, {"g": 1}) for n in "abc"]})
    a = themis.solve(p, f=0.5)
    np.testing.assert_allclose(a.x.ravel(), [16 / 27] * 3, atol=1e-5)
    assert any("3 of 3 app(s) bid" in n for n in a.notes)


def test_rho_is_finish_time_fairness():
    # elapsed 100 s, 50 done, 150 left at rate 1.5; independent share rate 1: (100 + 100) / (200 / 1) = 1
    assert themis.rho(np.array([1.5]), np.array([1.0]), np.array([150.0]), np.array([100.0]), np.array([50.0]))[0] == pytest.approx(1.0)
    assert themis.rho(np.array([0.0]), np.array([1.0]), np.array([10.0]), np.zeros(1), np.zeros(1))[0] == np.inf
    assert themis.rho(np.array([0.0]), np.array([1.0]), np.array([0.0]), np.zeros(1), np.zeros(1))[0] == 0.0


def test_remaining_work_from_jobs_orders_the_bidders():
    # both hold 1 GPU of 2 and have waited 600 s (done 600 GPU-s each); a has 10x the work left, so its
    # elapsed time weighs less in its rho: b is further from fair and is the one that bids (f = 0.5 -> 1)
    p = problem_from_dict({"gpu_types": {"g": 3}, "tenants": [
        T("a", {"g": 1}, jobs=[{"id": "1", "gpus": 2, "remaining": 36000}]),
        T("b", {"g": 1}, jobs=[{"id": "2", "gpus": 2, "remaining": 3600}])]})
    # the state as saved before per-allocation leases (one lease_age for every held GPU) still loads
    warm = {"held": {"a/c": {"g": 1}, "b/c": {"g": 1}}, "lease_age": 0.0,
            "apps": {"a/c": [0.0, 0.0], "b/c": [0.0, 0.0]}, "dt": 600.0}
    r = themis.solve(p, warm=warm, f=0.5, lease_s=300)  # the leases expired: every GPU is auctioned again
    assert any("1 of 2 app(s) bid" in n for n in r.notes)
    # b bid and won the auction alone (c = 1): it takes its demand, 2 GPUs; a gets the leftover GPU
    np.testing.assert_allclose(r.x.ravel(), [1.0, 2.0], atol=1e-5)
    assert r.warm["apps"]["a/c"] == pytest.approx([600.0, 600.0]) and r.warm["version"] == 2
    # one lease per allocation: b's from the auction, a's from the leftovers, both just granted
    assert L(r.warm) == [("a/c", "g", 1.0, 0.0), ("b/c", "g", 2.0, 0.0)]
    # the old state with its lease still running: every held GPU is kept, the free one is auctioned
    old = {**warm, "lease_age": 100.0, "dt": 200.0}
    k = themis.solve(p, warm=old, f=0.5, lease_s=600)
    assert any("2 lease(s) kept (2 GPU(s)), 0 expired" in n for n in k.notes), k.notes
    assert sorted(ls[3] for ls in k.warm["leases"])[-2:] == [300.0, 300.0]


def test_each_allocation_holds_its_own_lease():
    # the two-app instance of the by-hand test, f = 0, lease 600 s, a round every 300 s
    p = problem_from_dict({"gpu_types": {"k80": 2, "v100": 2},
                           "tenants": [T("a", {"k80": 1, "v100": 1}), T("b", {"k80": 1, "v100": 3})]})
    r1 = themis.solve(p, f=0.0)  # a 1.5 K80, b 1 V100 (see above); 0.5 K80 + 1 V100 idle
    assert L(r1.warm) == [("a/c", "k80", 1.5, 0.0), ("b/c", "v100", 1.0, 0.0)]
    json.dumps(r1.warm)
    # 300 s on: both leases run; only the GPUs idle since round 1 are auctioned, and what they add gets new leases
    r2 = themis.solve(p, warm={**r1.warm, "dt": 300.0}, f=0.0)
    assert any("2 lease(s) kept (2.5 GPU(s)), 0 expired" in n for n in r2.notes), r2.notes
    assert (r2.x >= r1.x - 1e-9).all() and r2.x.sum() > r1.x.sum()
    ages = sorted({ls[3] for ls in r2.warm["leases"]})
    assert ages == [0.0, 300.0]
    added = r2.x - r1.x
    # 700 s after round 1: its leases expired (their GPUs are auctioned again); round 2's (400 s) still run
    r3 = themis.solve(p, warm={**r2.warm, "dt": 400.0}, f=0.0)
    assert any("expired" in n and "2 expired" in n for n in r3.notes), r3.notes
    assert (r3.x >= added - 1e-9).all()
    assert 700.0 not in {ls[3] for ls in r3.warm["leases"]} and 400.0 in {ls[3] for ls in r3.warm["leases"]}
    # bounded: many short rounds keep at most MAX_LEASES per app and type, and the state stays JSON
    w = r3.warm
    for _ in range(40):
        w = themis.solve(p, warm={**w, "dt": 10.0}, f=0.0, lease_s=1e6).warm
    assert len(w["leases"]) <= themis.MAX_LEASES * 2 * 2
    json.loads(json.dumps(w))
    # a state that does not fit the problem is ignored, never an error
    junk = themis.solve(p, warm={"leases": [["a/c", "k80", "x", 0], ["nobody/c", "k80", 1, 0], [1, 2]],
                                 "apps": {"a/c": [1]}, "dt": -5})
    junk_old = themis.solve(p, warm={"held": {"a/c": {"k80": "x"}, "nobody/c": {"k80": 1}}, "lease_age": "soon"})
    np.testing.assert_allclose(junk.x, junk_old.x, atol=1e-6)


def test_one_round_is_neither_envy_free_nor_sharing_incentive_counter_example():
    # the paper claims SP, PE and EF for the bidders of one auction (Thm 3.2), not SI, and round-by-round
    # fairness only over time: on the OEF paper's instance one round gives every GPU to the single bidder
    p = problem_from_dict(json.loads((ROOT / "etc/examples/paper-2.4.json").read_text()))
    props = fairness.check(themis.solve(p), None)
    assert props["envy_free"].value is False and props["sharing_incentive"].value is False
    assert props["pareto_efficient"].value is True  # the bidder uses every GPU


@st.composite
def problems(draw):
    n, k = draw(st.integers(1, 6)), draw(st.integers(1, 3))
    tenants = []
    for t in range(n):
        thr = {f"g{j}": draw(st.floats(1.0, 20.0)) for j in range(k)}
        cls = {"demand": draw(st.integers(1, 8))} if draw(st.booleans()) else {}
        tenants.append(T(f"t{t}", thr, weight=draw(st.sampled_from([1.0, 2.0])), **cls))
    return problem_from_dict({"gpu_types": {f"g{j}": draw(st.integers(1, 12)) for j in range(k)}, "tenants": tenants})


@settings(max_examples=int(os.environ.get("SLURM_FAIR_HYPOTHESIS_EXAMPLES", 30)), deadline=None)
@given(problems(), st.sampled_from([0.0, 0.5, 0.8]))
def test_capacity_demands_and_work_conservation(problem, f):
    faithful = themis.solve(problem, f=f)
    a = themis.solve(problem, f=f, work_conserving=True)
    vu = a.vu
    for r in (faithful, a):
        assert (r.x >= 0).all() and (r.x.sum(axis=0) <= vu.capacity + 1e-6).all()
        assert (r.x.sum(axis=1) <= vu.demand + 1e-6).all()
    # the same auction: work conservation only adds
    assert (a.x >= faithful.x - 1e-6).all()
    # work-conserving: no GPU idle while an app below its demand could use it
    idle = vu.capacity - a.x.sum(axis=0)
    below = a.x.sum(axis=1) < vu.demand - 1e-6
    assert not ((idle[None, :] > 1e-6) & (vu.speed > 0) & below[:, None]).any()


def test_registered_with_state_and_knobs():
    assert "themis" in policies.names() and policies.takes_warm("themis")
    cfg = config.from_dict({"policy": {"name": "themis", "themis_f": 0.5, "themis_lease": 60}})
    assert {k: v for k, v in cfg.policy.options().items() if k in ("f", "lease_s", "work_conserving")} == {
        "f": 0.5, "lease_s": 60.0, "work_conserving": False}
    assert config.from_dict({"policy": {"themis_work_conserving": True}}).policy.options()["work_conserving"] is True
    with pytest.raises(InputError) as e:
        config.from_dict({"policy": {"themis_f": 1.0}})
    assert e.value.field == "policy.themis_f"
    p = problem_from_dict({"gpu_types": {"g": 4}, "tenants": [
        T(n, {"g": 1}, jobs=[{"id": n, "gpus": 4, "remaining": r}]) for n, r in (("a", 1000), ("b", 100), ("c", 500))]})
    a = policies.solve("themis", p, options={"f": 0.5, "lease_s": 60, "work_conserving": True, "unknown_knob": 1})
    assert any("2 of 3 app(s) bid" in n for n in a.notes) and a.x.sum() == pytest.approx(4.0)
    with pytest.raises(InputError):
        themis.solve(p, f=1.5)


def test_the_daemon_ages_the_state_between_rounds(tmp_path):
    from slurm_fair.daemon import round as R
    from slurm_fair.store import Store

    from tests.conftest import CFG, job, snap

    store = Store(tmp_path / "db.sqlite")
    s = snap([job(1, "acct_a", gpus=8, name="x"), job(2, "acct_b", gpus=8, name="y")])
    first = R.compute(s, store, CFG, "themis", 1000.0)
    store.save_warm_start("themis", first.alloc.warm, 1, now=1000.0)
    assert R._warm(store, "themis", 1300.0)["dt"] == pytest.approx(300.0)
    second = R.compute(s, store, CFG, "themis", 1300.0)
    held = sum(1 for ls in first.alloc.warm["leases"])
    assert any(f"{held} lease(s) kept" in n for n in second.alloc.notes), second.alloc.notes
    assert (second.alloc.x >= first.alloc.x - 1e-9).all()  # what round 1 granted is held; idle GPUs auctioned
    store.close()


def test_leave_one_out_by_parameters_equals_a_program_built_without_the_bidder():
    # the auction reuses one parametrized program (the bidder left out gets weight 0 and no utility); its
    # optimal values, hence every c_i, must equal those of a program built from the other bidders alone
    from slurm_fair.policies.themis import auction as pa

    rng = np.random.default_rng(3)
    for _ in range(4):
        n, k = 5, 3
        S = rng.uniform(1.0, 5.0, (n, k)) * (rng.random((n, k)) < 0.8)
        S[:, 0] = np.maximum(S[:, 0], 1.0)
        free = rng.integers(1, 6, k).astype(float)
        room_d = np.where(rng.random(n) < 0.5, rng.integers(1, 5, n).astype(float), np.inf)
        room_t = np.where(rng.random((n, k)) < 0.3, rng.integers(1, 3, (n, k)).astype(float), np.inf)
        u0 = np.where(rng.random(n) < 0.3, rng.uniform(0.0, 3.0, n), 0.0)
        el = np.where(rng.random(n) < 0.5, rng.uniform(0.0, 2000.0, n), 0.0)
        W = rng.uniform(100.0, 5000.0, n)
        w = rng.choice([1.0, 2.0], n)
        m = pa.Market(S, w, free, room_d, room_t, u0, el, W)
        c = pa.auction(m).c
        for i in range(n):
            rest = np.delete(np.arange(n), i)
            mi = pa.Market(S[rest], w[rest], free, room_d[rest], room_t[rest], u0[rest], el[rest], W[rest])
            y_full, _ = pa.conic(m)
            y_i, _ = pa.Program(mi).solve()
            # c_i from the separately built program, in unscaled terms: prod_{j != i} V_j(G_pf) / V_j(G^-i)
            def V(u, j):
                return np.log(u) - np.log(el[j] * u + W[j])
            u_pf = m.utilities(y_full) * m.K
            u_mi = mi.utilities(y_i) * mi.K
            gain = sum(w[j] * (V(u_pf[j], j) - V(u_mi[t], j)) for t, j in enumerate(rest))
            assert c[i] == pytest.approx(min(1.0, np.exp(gain / w[i])), abs=1e-6)


@settings(max_examples=int(os.environ.get("SLURM_FAIR_HYPOTHESIS_EXAMPLES", 30)) // 2, deadline=None)
@given(problems(), st.sampled_from([0.0, 0.8]), st.lists(st.sampled_from([60.0, 300.0, 700.0]), min_size=3, max_size=3))
def test_rounds_keep_every_running_lease_and_stay_within_caps(problem, f, dts):
    w = None
    for dt in dts:
        r = themis.solve(problem, f=f, warm=None if w is None else {**w, "dt": dt}, lease_s=600.0)
        vu = r.vu
        assert (r.x >= -1e-9).all() and (r.x.sum(axis=0) <= vu.capacity + 1e-6).all()
        assert (r.x.sum(axis=1) <= vu.demand + 1e-6).all()
        if w is not None:  # each lease still running after dt is held this round (the problem does not change)
            keys = [f"{vu.tenant[i]}/{vu.cls[i]}" for i in range(vu.n)]
            run = np.zeros_like(r.x)
            for app, g, gpus, age in w["leases"]:
                if age + dt < 600.0:
                    run[keys.index(app), vu.gpu_types.index(g)] += gpus
            assert (r.x >= run - 1e-6).all()
        w = json.loads(json.dumps(r.warm))


def test_a_stalled_leave_one_out_program_is_solved_as_built_without_the_bidder(monkeypatch):
    # CLARABEL stalled on parametrized leave-one-out programs (bidder in with weight 0, no utility) at 1 000
    # tenants without demands; should one fail, the program built from the others is solved: the same c
    from slurm_fair.errors import SolverError
    from slurm_fair.policies.themis import auction as pa

    rng = np.random.default_rng(11)
    n, k = 5, 3
    S = rng.uniform(1.0, 5.0, (n, k))
    m = pa.Market(S, rng.choice([1.0, 2.0], n), np.array([2.0, 3.0, 1.0]), np.where(rng.random(n) < 0.5, 2.0, np.inf),
                  np.full((n, k), np.inf), np.zeros(n), rng.uniform(0.0, 500.0, n), rng.uniform(100.0, 900.0, n))
    want = pa.auction(m)
    assert want.rebuilt == 0
    for cls in (pa.Cells, pa.Direct):  # every program of the chain (the conic form, cvxpy's, ECOS) stalls
        def stall(self, present=None, solver=None, real=cls.solve):
            if present is not None and not np.asarray(present).all() and self.m.n == n:
                raise SolverError("stalled (test)")
            return real(self, present, solver)

        monkeypatch.setattr(cls, "solve", stall)
    got = pa.auction(m)
    assert got.rebuilt == n
    np.testing.assert_allclose(got.c, want.c, rtol=1e-6)
    np.testing.assert_allclose(got.g_pf, want.g_pf, atol=1e-9)
    mi = m.without(2)
    assert mi.n == n - 1 and np.array_equal(mi.A, np.delete(m.A, 2, axis=0)) and np.array_equal(mi.c, m.c)


def _dense_auction(m):
    """The auction as before issue 31: every program over all cells (``Program``), for comparison."""
    from slurm_fair.policies.themis import auction as pa

    prog = pa.Program(m)
    y, opt = prog.solve()
    out = np.empty(m.n)
    for i in range(m.n):
        pres = np.ones(m.n, dtype=bool)
        pres[i] = False
        out[i] = prog.solve(pres)[1]
    return y * m.c[None, :], np.exp(np.minimum((opt - m.w * m.g(m.utilities(y)) - out) / m.w, 0.0))


@pytest.mark.parametrize("seed", range(6))
def test_auction_on_the_cells_that_matter_equals_the_program_over_all_cells(seed):
    # column generation (a subset of the cells, checked with the duals, grown until no cell would enter)
    # gives the optimal values of the programs over all cells: the same c and G_pf as the dense programs
    from slurm_fair.policies.themis import auction as pa

    rng = np.random.default_rng([31, seed])
    n, k = int(rng.integers(6, 30)), int(rng.integers(2, 8))
    S = np.cumprod(rng.uniform(1.0, 2.5, (n, k)), axis=1) * (rng.random((n, k)) < 0.85)
    S[:, 0] = np.maximum(S[:, 0], 1.0)
    free = rng.integers(1, 8, k).astype(float)
    room_d = np.where(rng.random(n) < 0.5, rng.integers(1, 6, n).astype(float), np.inf)
    room_t = np.where(rng.random((n, k)) < 0.2, rng.integers(1, 3, (n, k)).astype(float), np.inf)
    u0 = np.where(rng.random(n) < 0.3, rng.uniform(0.0, 3.0, n), 0.0) if seed % 2 else np.zeros(n)
    el = np.where(rng.random(n) < 0.5, rng.uniform(0.0, 2000.0, n), 0.0) if seed % 3 else np.zeros(n)
    m = pa.Market(S, rng.choice([1.0, 2.0], n), free, room_d, room_t, u0, el, rng.uniform(100.0, 5000.0, n))
    got = pa.auction(m)
    g_ref, c_ref = _dense_auction(m)
    np.testing.assert_allclose(got.c, c_ref, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(m.utilities(got.g_pf / m.c[None, :]), m.utilities(g_ref / m.c[None, :]), rtol=1e-6)
    assert got.rebuilt == 0


def test_philly_auction_uses_few_cells_and_equals_the_dense_programs():
    from benchmarks.philly import instance
    from slurm_fair.policies.themis import auction as pa

    vu = instance(60, 10, 1).virtual_users()
    b = np.arange(0, vu.n, 3)
    m = pa.Market(vu.speed[b], vu.weight[b], vu.capacity, vu.demand[b], vu.type_cap[b], np.zeros(b.size),
                  np.zeros(b.size), np.full(b.size, 1000.0))
    got = pa.auction(m)
    assert got.cells < 0.5 * m.n * m.k
    g_ref, c_ref = _dense_auction(m)
    np.testing.assert_allclose(got.c, c_ref, rtol=1e-6, atol=1e-9)


def test_leave_one_out_programs_in_threads_give_the_answer_of_one_thread(monkeypatch):
    # issue 31: the leave-one-out programs run in chunks, each chunk on its own program, on up to THREADS threads;
    # the answer may not depend on how many threads ran, and the threads' solves may not leave a warning filter
    # behind (warnings.catch_warnings is process-wide)
    import warnings

    from slurm_fair.policies.themis import auction as pa

    rng = np.random.default_rng(31)
    n, k = 23, 4
    S = rng.uniform(1.0, 8.0, (n, k))
    S[rng.random((n, k)) < 0.2] = 0.0
    S[:, 0] = np.maximum(S[:, 0], 1.0)  # every bidder can use a GPU
    demand = np.where(rng.random(n) < 0.5, np.inf, rng.integers(1, 5, n).astype(float))
    m = pa.Market(S, rng.uniform(0.5, 2.0, n), np.array([4.0, 6.0, 3.0, 8.0]), demand, np.full((n, k), np.inf),
                  np.zeros(n), rng.uniform(0.0, 900.0, n), rng.uniform(100.0, 5000.0, n))
    monkeypatch.setattr(pa, "CHUNK", 5)
    monkeypatch.setattr(pa, "_cpus", lambda: 4)
    monkeypatch.setattr(pa, "THREADS", 1)
    one = pa.auction(m)
    before = list(warnings.filters)
    monkeypatch.setattr(pa, "THREADS", 4)
    four = pa.auction(m)
    assert list(warnings.filters) == before
    np.testing.assert_array_equal(four.g_pf, one.g_pf)
    np.testing.assert_array_equal(four.c, one.c)
    assert ((one.c > 0) & (one.c <= 1)).all() and (one.c < 1 - 1e-6).any()  # payments were computed
    # and each bidder's c against its leave-one-out program solved on its own, over every cell
    for i in (0, 7, 22):
        pres = np.ones(n, dtype=bool)
        pres[i] = False
        _y, opt = pa.conic(m)
        _y, opt_minus = pa.conic(m, pres)
        gi = m.w[i] * m.g(m.utilities(one.g_pf / m.c[None, :]))[i]
        assert one.c[i] == pytest.approx(np.exp(min((opt - gi - opt_minus) / m.w[i], 0.0)), rel=1e-6)


def test_a_program_the_solver_fails_on_is_built_again_then_solved_by_ecos(monkeypatch):
    # a CLARABEL failure (an exception, not a status) on a program of the auction — G_pf's included, which had no
    # fallback — is handled as a status that is not optimal: the program built afresh, then ECOS
    from slurm_fair import lp
    from slurm_fair.policies.themis import auction as pa

    rng = np.random.default_rng(5)
    n, k = 6, 3
    m = pa.Market(rng.uniform(1.0, 6.0, (n, k)), np.ones(n), np.array([3.0, 2.0, 4.0]), np.full(n, np.inf),
                  np.full((n, k), np.inf), np.zeros(n), rng.uniform(0.0, 500.0, n), rng.uniform(100.0, 1000.0, n))
    want = pa.auction(m)
    real, calls = lp.solve, []

    def clarabel_fails(problem, solver=None, *args, **kw):
        calls.append(solver)
        if solver == "CLARABEL":
            raise pa.SolverError("themis auction (partial allocation): solver CLARABEL failed: (made to fail)")
        return real(problem, solver, *args, **kw)

    def direct_fails(self, present=None, solver=None):
        calls.append("conic" if self.options.get("equilibrate_enable", True) else "conic, not equilibrated")
        raise pa.SolverError("themis auction (partial allocation): solver CLARABEL failed: (made to fail)")

    monkeypatch.setattr(pa.lp, "solve", clarabel_fails)
    monkeypatch.setattr(pa.Direct, "solve", direct_fails)
    got = pa.auction(m)
    # G_pf: its conic form, built again without equilibration, cvxpy's program, then ECOS
    assert calls[:4] == ["conic", "conic, not equilibrated", "CLARABEL", "ECOS"]
    assert set(calls) == {"conic", "conic, not equilibrated", "CLARABEL", "ECOS"}
    np.testing.assert_allclose(got.c, want.c, rtol=1e-5)
    np.testing.assert_allclose(got.g_pf, want.g_pf, atol=1e-5)


def _random_market(seed, n=14, k=4):
    from slurm_fair.policies.themis import auction as pa

    rng = np.random.default_rng([31, 7, seed])
    S = rng.uniform(1.0, 6.0, (n, k))
    S[rng.random((n, k)) < 0.2] = 0.0
    S[:, 0] = np.maximum(S[:, 0], 1.0)
    room_d = np.where(rng.random(n) < 0.5, rng.integers(1, 4, n).astype(float), np.inf)
    room_t = np.where(rng.random((n, k)) < 0.2, 1.0, np.inf)
    u0 = np.where(rng.random(n) < 0.3, rng.uniform(0.0, 2.0, n), 0.0)
    elapsed = np.where(rng.random(n) < 0.5, rng.uniform(0.0, 900.0, n), 0.0)
    return pa.Market(S, rng.choice([1.0, 2.0], n), rng.integers(1, 5, k).astype(float), room_d, room_t, u0, elapsed,
                     rng.uniform(100.0, 900.0, n))


@pytest.mark.parametrize("seed", range(4))
def test_the_conic_form_is_cvxpys_program(seed):
    # issue 31: the program written in CLARABEL's conic form (one persistent solver, leave-one-out solves as data
    # updates) has cvxpy's program's optimum: the same objective and utilities, with duals that certify it, for the
    # full market and with each of several bidders left out (bidders with and without elapsed time, held GPUs,
    # demand rows and cell bounds)
    from slurm_fair.policies.themis import auction as pa

    m = _random_market(seed)
    assert (m.ah > 0).any() and (m.ah <= 0).any() and m.v.any() and (m.ub < 1).any() and (m.u0 > 0).any()
    cells = (m.ub > 0) & (m.A > 0)
    direct, ref = pa.Direct(m, cells, pa.CONIC_OPTIONS["CLARABEL"]), pa.Cells(m, cells)
    for i in (None, 0, 5, m.n - 1):
        on = np.ones(m.n, bool) if i is None else np.arange(m.n) != i
        y1, v1, p1, q1 = direct.solve(on)
        if not direct.optimal:  # CLARABEL "AlmostSolved" (gap ~1e-11 of the 1e-12 asked): as the auction does
            y1, v1, p1, q1, prog = pa._exact(m, cells, on, None, direct)
            assert prog.optimal
        y2, v2, p2, q2 = ref.solve(on)
        if not ref.optimal:  # cvxpy's program is "AlmostSolved" now and then too
            y2, v2, p2, q2 = pa.Cells(m, cells, "ECOS").solve(on)
        assert v1 == pytest.approx(v2, rel=1e-8, abs=1e-10)
        np.testing.assert_allclose(m.utilities(y1), m.utilities(y2), rtol=1e-6, atol=1e-8)
        # the duals may differ from cvxpy's where the optimum is degenerate; they price the answer as optimal
        # over every cell (no bidder's best response at those prices beats its allocation: column generation's
        # check)
        assert not pa.outside(m, np.zeros_like(cells), y1, on, p1).any()
        assert (p1 >= 0).all() and (q1 >= 0).all()
        if i is not None:
            assert not y1[i].any()  # a bidder left out gets nothing


def test_a_failure_inside_clarabel_is_a_solver_error_and_the_next_solve_starts_afresh():
    from slurm_fair.errors import SolverError
    from slurm_fair.policies.themis import auction as pa

    m = _random_market(0)
    d = pa.Direct(m, (m.ub > 0) & (m.A > 0), pa.CONIC_OPTIONS["CLARABEL"])
    want = d.solve()[1]
    b0 = d.b0
    d.b0 = b0[:-1]  # the next data update has one row too few: CLARABEL refuses it
    with pytest.raises(SolverError, match="solver CLARABEL failed"):
        d.solve()
    d.b0 = b0
    assert d.solve()[1] == pytest.approx(want, rel=1e-9) and d.optimal
