"""Unit tests of the pure round planning (slurm_fair/daemon/plan.py) on hand-built snapshots."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from slurm_fair import config
from slurm_fair.cluster.base import ANY_GPU, CLEAR, Account, Node, Snapshot
from slurm_fair.daemon import plan as P
from slurm_fair.model import Allocation
from slurm_fair.policies import get as get_policy
from slurm_fair.store import ProfileValue
from tests.conftest import CFG, NODES, job, snap

def cfg(**sections):
    return config.from_dict(sections)


# ------------------------------------------------------------------------------------------- classes


def test_job_class_order_and_sources():
    j = job(1, "a", name="nm", comment="foo class=resnet bar", wckey="wk")
    assert P.job_class(j) == "resnet"
    assert P.job_class(j, ("wckey", "comment")) == "wk"
    assert P.job_class(j, ("name",)) == "nm"
    assert P.job_class(job(2, "a", name="nm", wckey="*wk")) == "wk"  # Slurm's default-wckey marker
    assert P.job_class(job(3, "a", name="nm", comment="no token here")) == "nm"
    assert P.job_class(job(4, "a", name="", comment="x"), ("comment", "name")) == P.DEFAULT_CLASS
    # the token must be a whole word: "subclass=x" is not a class token
    assert P.job_class(job(5, "a", name="nm", comment="subclass=x")) == "nm"


def test_observe_demand_sums_pending_and_running_and_types():
    jobs = [
        job(1, "acct_a", 2, "v100", name="r"),
        job(2, "acct_a", 1, "k80", name="r"),
        job(3, "acct_a", 3, "v100", state="RUNNING", name="r", alloc={"v100": 3}),
        job(4, "acct_b", 4, None, name="t"),
        job(5, "acct_b", 0, None, name="t"),  # no GPUs: ignored
        job(6, "root", 1, None, name="t"),  # the root account is never managed
        job(7, "acct_c", 1, "k80", name="x", partition="cpu"),
        job(8, "acct_c", 1, "k80", name="x", state="COMPLETING"),
    ]
    d = P.observe_demand(snap(jobs), CFG)
    assert set(d) == {("acct_a", "r"), ("acct_b", "t"), ("acct_c", "x")}
    a = d[("acct_a", "r")]
    assert (a.gpus, a.pending_gpus, a.running_gpus, a.min_pending, a.types) == (6, 3, 3, 1, {"v100", "k80"})
    assert d[("acct_b", "t")].types is None  # an untyped job can use any type
    d2 = P.observe_demand(snap(jobs), cfg(cluster={"partitions": ["gpu"]}))
    assert ("acct_c", "x") not in d2


# ------------------------------------------------------------------------------------------- profiles

PROFILES = [
    ProfileValue("acct_a", "r", "v100", 10.0),
    ProfileValue("", "r", "v100", 7.0),
    ProfileValue("", "r", "k80", 2.0),
]
SHIPPED = [
    {"account": "", "class": "r", "gpu_type": "a100", "throughput": 20.0},
    {"account": "", "class": "s", "gpu_type": "v100", "throughput": 3.0},
    {"account": "", "class": "s", "gpu_type": "k80", "throughput": 1.5},
]


def test_lookup_chain_per_type():
    thr, src = P.lookup_throughput(PROFILES, SHIPPED, "acct_a", "r", ["a100", "v100", "k80", "p100"])
    assert thr == {"a100": 20.0, "v100": 10.0, "k80": 2.0, "p100": 2.0}
    assert src == {"a100": "shipped", "v100": "account", "k80": "site", "p100": "assumed"}
    thr, src = P.lookup_throughput(PROFILES, SHIPPED, "acct_b", "r", ["v100"])
    assert (thr, src) == ({"v100": 7.0}, {"v100": "site"})
    thr, src = P.lookup_throughput(PROFILES, SHIPPED, "acct_b", "s", ["v100", "k80", "a100"])
    assert thr == {"v100": 3.0, "k80": 1.5, "a100": 1.5}  # slowest known for the unknown type
    assert src["a100"] == "assumed" and src["v100"] == "shipped"
    thr, src = P.lookup_throughput(PROFILES, SHIPPED, "acct_b", "nope", ["v100", "k80"])
    assert thr == {"v100": 1.0, "k80": 1.0} and set(src.values()) == {"unprofiled"}


# ------------------------------------------------------------------------------------------- problem


def test_build_problem_weights_tenants_types_capacity():
    nodes = NODES + (Node("v100-2", ("IDLE", "DRAIN"), ("gpu",), {"v100": 4}, {}),)
    jobs = [job(1, "acct_a", 1, "v100", name="r"), job(2, "acct_b", 1, None, name="s"),
            job(3, "acct_c", 1, None, name="s"), job(4, "acct_c", 1, None, name="r")]
    s = snap(jobs, nodes=nodes)
    d = P.observe_demand(s, CFG)
    b = P.build_problem(s, d, PROFILES, SHIPPED, CFG)
    assert b.capacity == {"k80": 4, "v100": 4}  # the drained node does not count
    pr = b.problem
    assert [t.name for t in pr.tenants] == ["acct_a", "acct_b", "acct_c"]
    assert [t.weight for t in pr.tenants] == [1.0, 1.0, 2.0]  # fair-share Shares
    a_r = pr.tenant("acct_a").classes[0]
    assert a_r.throughput == {"k80": 2.0, "v100": 10.0}  # the profiles (account v100, site k80)...
    assert a_r.type_demand == {"k80": 0.0, "v100": 1.0}  # ...but its jobs ask only for v100
    assert a_r.demand == 1.0
    vu = pr.virtual_users()
    row = vu.tenant.index("acct_a")
    assert list(vu.speed[row]) == [0.0, 1.0]  # k80 unusable: v100 is its slowest (and only) usable type
    # untyped jobs may run on any type: acct_c's class "s" (one untyped job) can use 1 of each
    c_s = next(c for c in pr.tenant("acct_c").classes if c.name == "s")
    assert c_s.type_demand == {"k80": 1.0, "v100": 1.0}
    assert b.sources["acct_a"]["r"]["v100"] == "account"
    assert {c.name for c in pr.tenant("acct_c").classes} == {"r", "s"}

    c2 = cfg(tenants={"map": {"acct_a": "phys", "acct_b": "phys"}, "weights": {"acct_c": 5.0}})
    b2 = P.build_problem(s, d, PROFILES, SHIPPED, c2)
    assert [(t.name, t.weight) for t in b2.problem.tenants] == [("acct_c", 5.0), ("phys", 2.0)]
    assert {c.name for c in b2.problem.tenant("phys").classes} == {"acct_a/r", "acct_b/s"}
    assert b2.rows[("acct_b", "s")] == ("phys", "acct_b/s")


# ------------------------------------------------------------------------------------------- plan


def fixed_alloc(built, x_by_row):
    """An Allocation with given GPUs per (account, class) row (solver-independent tests)."""
    vu = built.problem.virtual_users()
    x = np.zeros((vu.n, vu.k))
    for i, (t, c) in enumerate(zip(vu.tenant, vu.cls)):
        acct_cls = next(k for k, v in built.rows.items() if v == (t, c))
        for j, g in enumerate(vu.gpu_types):
            x[i, j] = x_by_row.get(acct_cls, {}).get(g, 0.0)
    return Allocation(built.problem, "fixed", x)


def two_account_case(extra_jobs=()):
    jobs = [job(i, "acct_a", 1, "v100", name="r") for i in range(1, 7)]
    jobs += [job(10 + i, "acct_b", 1, None, name="s") for i in range(8)]
    jobs += list(extra_jobs)
    s = snap(jobs)
    d = P.observe_demand(s, CFG)
    return s, d, P.build_problem(s, d, PROFILES, SHIPPED, CFG)


def test_make_plan_rounds_and_carries_deviations():
    s, d, b = two_account_case()
    alloc = fixed_alloc(b, {("acct_a", "r"): {"v100": 2.6}, ("acct_b", "s"): {"v100": 1.4, "k80": 4.0}})
    managed = P.managed_accounts(s, d, CFG)
    assert managed == ["acct_a", "acct_b", "acct_c"]
    p1 = P.make_plan(b, alloc, d, {}, managed)
    assert p1.ideal["acct_a"] == pytest.approx({"k80": 0.0, "v100": 2.6})
    assert p1.real == {"acct_a": {"k80": 0, "v100": 3}, "acct_b": {"k80": 4, "v100": 1},
                       "acct_c": {"k80": 0, "v100": 0}}
    assert p1.deviations["acct_a"]["v100"] == pytest.approx(-0.4)
    assert p1.deviations["acct_b"]["v100"] == pytest.approx(0.4)
    assert p1.limits["acct_a"] == {"k80": 0, "v100": 3, ANY_GPU: 3}
    assert p1.limits["acct_c"] == {"k80": 0, "v100": 0, ANY_GPU: 0}  # no GPU jobs: nothing
    # next round, same ideal: real = round(ideal + dev), dev += ideal - real
    p2 = P.make_plan(b, alloc, d, p1.deviations, managed)
    assert p2.deviation_before["acct_a"]["v100"] == pytest.approx(-0.4)
    assert p2.real["acct_a"]["v100"] == 2 and p2.real["acct_b"]["v100"] == 2  # round(2.2), round(1.8)
    assert p2.deviations["acct_a"]["v100"] == pytest.approx(-0.4 + 2.6 - 2)
    assert p2.deviations["acct_b"]["v100"] == pytest.approx(0.4 + 1.4 - 2)
    # averaged over the two rounds each account got its ideal to within the carried deviation
    assert (p1.real["acct_a"]["v100"] + p2.real["acct_a"]["v100"]) / 2 == pytest.approx(2.5)


def test_work_conservation_gives_unowned_gpus_to_pending_jobs_that_can_use_them():
    # acct_c has pending k80-only jobs but (say) the policy gave it nothing: the 2 k80s nobody holds go to it;
    # acct_a asks only for v100, so it gets no k80 even though it has pending jobs
    # (hard caps: limits.lend = false)
    extra_jobs = [job(30 + i, "acct_c", 1, "k80", name="x") for i in range(3)]
    s, d, b = two_account_case(extra_jobs)
    alloc = fixed_alloc(b, {("acct_a", "r"): {"v100": 2.0}, ("acct_b", "s"): {"v100": 2.0, "k80": 2.0}})
    p = P.make_plan(b, alloc, d, {}, P.managed_accounts(s, d, CFG), lend=False)
    assert p.real["acct_c"] == {"k80": 0, "v100": 0}
    assert p.extra["acct_c"]["k80"] + p.extra["acct_b"]["k80"] == 2
    assert p.extra["acct_a"]["k80"] == 0
    for g, cap in p.capacity.items():
        assert sum(lim[g] for lim in p.limits.values()) == cap  # every GPU has a limit owner
    for a, lim in p.limits.items():
        assert lim[ANY_GPU] == sum(v for k, v in lim.items() if k != ANY_GPU)
        assert lim[ANY_GPU] <= p.demand[a]
    # extras are a gift, not owed back: deviations only come from the rounding
    assert p.deviations["acct_c"]["k80"] == 0.0


def test_work_conservation_leaves_gpus_nobody_can_use():
    jobs = [job(1, "acct_a", 1, "v100", name="r")]
    s = snap(jobs)
    d = P.observe_demand(s, CFG)
    b = P.build_problem(s, d, PROFILES, SHIPPED, CFG)
    p = P.make_plan(b, fixed_alloc(b, {("acct_a", "r"): {"v100": 1.0}}), d, {}, P.managed_accounts(s, d, CFG),
                    lend=False)
    assert p.limits["acct_a"] == {"k80": 0, "v100": 1, ANY_GPU: 1}  # demand 1: no more (hard caps)
    assert sum(lim["k80"] for lim in p.limits.values()) == 0


def test_min_gpus_blocks_small_share_until_the_deviation_grows():
    jobs = [job(1, "acct_a", 4, "v100", name="r")] + [job(10 + i, "acct_b", 1, "v100", name="s") for i in range(8)]
    s = snap(jobs, nodes=(NODES[0],))
    d = P.observe_demand(s, CFG)
    b = P.build_problem(s, d, PROFILES, SHIPPED, CFG)
    alloc = fixed_alloc(b, {("acct_a", "r"): {"v100": 1.5}, ("acct_b", "s"): {"v100": 2.5}})
    managed = ["acct_a", "acct_b"]
    devs: dict = {}
    got = []
    for _ in range(3):
        p = P.make_plan(b, alloc, d, devs, managed)
        got.append(p.real["acct_a"]["v100"])
        devs = p.deviations
    assert p.min_gpus["acct_a"] == 4
    assert got == [0, 0, 4]  # 1.5, 3.0 < 4: wait; 4.5 -> 4 GPUs, a whole job
    assert devs["acct_a"]["v100"] == pytest.approx(0.5)


def test_limit_changes_only_changed_and_clear_for_leavers():
    current = {"acct_a": {"v100": 3, ANY_GPU: 3}, "acct_b": {"v100": 1}, "old": {"k80": 2, ANY_GPU: 2}}
    planned = {"acct_a": {"v100": 3, "k80": 0, ANY_GPU: 3}, "acct_b": {"v100": 2, ANY_GPU: 2}}
    ch = P.limit_changes(current, planned, {"acct_a", "old", "gone"})
    assert ch == {"acct_a": {"k80": 0}, "acct_b": {"v100": 2, ANY_GPU: 2}, "old": {"k80": CLEAR, ANY_GPU: CLEAR}}
    assert P.limit_changes(planned, planned, set(planned)) == {}


# ------------------------------------------------------------------------------------------- priorities


def test_update_deficit_accumulates_and_forgets_idle_accounts():
    d = P.update_deficit({"a": 10.0, "gone": 99.0}, {"a": 2.0, "b": 1.5}, {"a": 1.0, "c": 2.0}, 60)
    assert d == {"a": 10.0 + 60.0, "b": 90.0, "c": -120.0}
    assert P.update_deficit({"a": 1.0}, {"a": 5.0}, {}, -3) == {"a": 1.0}


def test_site_factors_rank_accounts_by_deficit_and_jobs_by_wait():
    jobs = [job(1, "acct_a", submit=50), job(2, "acct_a", submit=10), job(3, "acct_b", submit=5),
            job(4, "acct_c", submit=1, state="RUNNING"), job(5, "acct_c", submit=70), job(6, "acct_a", 0),
            job(7, "acct_b", submit=1, reason="JobHeldUser")]
    s = snap(jobs)
    c = cfg(priority={"site_factor_min": 100, "site_factor_max": 1000, "levels": 10})
    f = P.site_factors(s, {"acct_a": 5.0, "acct_b": 50.0, "acct_c": -1.0}, c)
    assert set(f) == {1, 2, 3, 5}  # pending GPU jobs only, not held ones
    assert f[3] > f[2] > f[1] > f[5]  # b (largest deficit), then a oldest first, then c
    assert all(isinstance(v, int) and 100 <= v <= 1000 for v in f.values())
    assert f[3] == 1000  # the top band's oldest job gets the top level
    assert len(set(f.values())) == 4
    one = P.site_factors(s, {}, cfg(priority={"site_factor_min": 7, "site_factor_max": 9, "levels": 1}))
    assert set(one.values()) == {7}


def test_site_factors_more_accounts_than_levels_stay_in_range_and_ordered():
    jobs = [job(i, f"acct{i:02d}", submit=i) for i in range(30)]
    s = snap(jobs, accounts={f"acct{i:02d}": 1 for i in range(30)})
    deficits = {f"acct{i:02d}": float(i) for i in range(30)}
    f = P.site_factors(s, deficits, cfg(priority={"levels": 4, "site_factor_max": 30}))
    vals = [f[i] for i in range(30)]
    assert vals == sorted(vals) and min(vals) >= 0 and max(vals) <= 30 and vals[-1] == 30


# ------------------------------------------------------------------------------------------- with a policy


def fast_flat_case():
    """acct_a runs class "fast" (10x on a V100), acct_b class "flat" (1.1x); 8 pending 1-GPU jobs each."""
    profiles = [
        ProfileValue("", "fast", "v100", 10.0),
        ProfileValue("", "fast", "k80", 1.0),
        ProfileValue("", "flat", "v100", 1.1),
        ProfileValue("", "flat", "k80", 1.0),
    ]
    jobs = [job(i, "acct_a", 1, None, name="fast") for i in range(8)]
    jobs += [job(20 + i, "acct_b", 1, None, name="flat") for i in range(8)]
    return profiles, jobs


def test_real_policy_noncoop_gives_only_v100_to_the_account_with_the_big_speedup():
    profiles, jobs = fast_flat_case()
    s = snap(jobs, accounts={"acct_a": 1, "acct_b": 1})
    d = P.observe_demand(s, CFG)
    b = P.build_problem(s, d, profiles, [], CFG)
    alloc = get_policy("oef-noncoop")(b.problem)
    p = P.make_plan(b, alloc, d, {}, P.managed_accounts(s, d, CFG), lend=False)
    # non-cooperative OEF equalises normalized throughput: 10·a_v100 = 1.1·b_v100 + b_k80, so the account
    # with the big speedup gets only V100s (about 0.76 of them) and the other one every K80
    ia, ib = p.ideal["acct_a"], p.ideal["acct_b"]
    assert 10 * ia["v100"] + ia["k80"] == pytest.approx(1.1 * ib["v100"] + ib["k80"], rel=1e-4)
    assert ia["k80"] == pytest.approx(0, abs=1e-6) and ib["k80"] == pytest.approx(4, abs=1e-6)
    assert p.real["acct_a"] == {"k80": 0, "v100": 1} and p.real["acct_b"] == {"k80": 4, "v100": 3}
    assert p.limits["acct_a"] == {"k80": 0, "v100": 1, ANY_GPU: 1}  # hard caps: the guarantee
    assert p.limits["acct_b"] == {"k80": 4, "v100": 3, ANY_GPU: 7}
    # lending (the default), every GPU idle: each waiting job claims its guarantee, fastest type first; an
    # account's limit is the capacity less the others' claims, and a limit at the capacity is left out
    lent = P.make_plan(b, alloc, d, {}, P.managed_accounts(s, d, CFG), free=P.FreeGPUs.of(s),
                       order={a: P.type_order(b, a) for a in ("acct_a", "acct_b")})
    assert lent.claims == {"acct_a": {"k80": 0, "v100": 1}, "acct_b": {"k80": 4, "v100": 3}}
    assert lent.limits == {"acct_a": {"k80": 0, "v100": 1, ANY_GPU: 1}, "acct_b": {"v100": 3, ANY_GPU: 7}}


def test_limit_batches_pick_the_fewer_sacctmgr_calls():
    same = {f"a{i}": {"v100": i % 2, "k80": 1} for i in range(10)}
    b = P.limit_batches(same)
    assert b == [same]  # 2 distinct settings: 2 calls either way, keep one batch
    varied = {f"a{i}": {"v100": i % 2, "k80": (i // 2) % 2, ANY_GPU: (i // 4) % 3} for i in range(12)}
    b = P.limit_batches(varied)
    assert len(b) == 3  # 12 distinct settings, but per key only 2 + 2 + 3 = 7 (key, value) pairs
    merged = {}
    for batch in b:
        for a, ch in batch.items():
            merged.setdefault(a, {}).update(ch)
    assert merged == varied
    assert P.limit_batches({}) == []


def test_limit_per_type_capped_by_what_the_jobs_can_use_rest_goes_to_others():  # hard caps
    nodes = (Node("a100-1", ("IDLE",), ("gpu",), {"a100": 4}, {}),) + NODES
    jobs = [job(i, "acct_c", 1, "a100", name="x") for i in range(2)]  # only 2 A100 jobs
    jobs += [job(10 + i, "acct_c", 1, "v100", name="x") for i in range(4)]
    jobs += [job(20 + i, "acct_a", 1, "a100", name="r") for i in range(3)]
    jobs += [job(30 + i, "acct_b", 1, None, name="s") for i in range(2)]
    s = snap(jobs, nodes=nodes)
    d = P.observe_demand(s, CFG)
    assert d[("acct_c", "x")].by_type == {"a100": 2, "v100": 4}
    b = P.build_problem(s, d, PROFILES, SHIPPED, CFG)
    alloc = fixed_alloc(b, {("acct_c", "x"): {"a100": 4.0, "v100": 2.0}})
    p = P.make_plan(b, alloc, d, {}, ["acct_a", "acct_b", "acct_c"], lend=False)
    assert p.real["acct_c"]["a100"] == 4  # the rounding (and the deviation) keep the policy's share...
    assert p.limits["acct_c"]["a100"] == 2  # ...but the limit stops at what its jobs can use
    # the 2 A100s go to the accounts with pending jobs that can run there: one each (fewest extras first)
    assert p.extra["acct_a"]["a100"] == 1 and p.extra["acct_b"]["a100"] == 1
    assert p.extra["acct_b"]["v100"] + p.limits["acct_c"]["v100"] <= 6
    assert p.limits["acct_b"][ANY_GPU] == 2  # its demand


# ------------------------------------------------------------------------------------------- per-type demand


def test_type_demand_is_typed_plus_untyped_gpus_capped_at_the_total():
    jobs = [job(1, "acct_a", 2, "v100", name="m"), job(2, "acct_a", 1, "v100", name="m", state="RUNNING"),
            job(3, "acct_a", 1, None, name="m"), job(4, "acct_b", 3, "k80", name="t")]
    d = P.observe_demand(snap(jobs), CFG)
    # 3 GPUs of v100 jobs + 1 untyped GPU (any type); the untyped GPU alone for k80; a100 not in the jobs
    assert d[("acct_a", "m")].type_demand(["v100", "k80", "a100"]) == {"v100": 4.0, "k80": 1.0, "a100": 1.0}
    # only typed jobs: nothing elsewhere
    assert d[("acct_b", "t")].type_demand(["v100", "k80"]) == {"v100": 0.0, "k80": 3.0}
    many_untyped = P.ClassDemand()
    for i in range(3):
        many_untyped.add(job(10 + i, "acct_c", 2, None))
    many_untyped.add(job(20, "acct_c", 1, "v100"))
    assert many_untyped.type_demand(["v100", "k80"]) == {"v100": 7.0, "k80": 6.0}  # capped at the total 7


DEMO_NODES = (
    Node("a100-1", ("IDLE",), ("gpu",), {"a100": 4}, {}),
    Node("v100-1", ("IDLE",), ("gpu",), {"v100": 4}, {}),
    Node("k80-1", ("IDLE",), ("gpu",), {"k80": 4}, {}),
    Node("mixed-1", ("IDLE",), ("gpu",), {"v100": 2, "k80": 2}, {}),
)
DEMO_PROFILES = [
    ProfileValue("", c, g, v)
    for c, g, v in [("cnn", "a100", 12), ("cnn", "v100", 10), ("cnn", "k80", 1), ("rl", "a100", 1.2), ("rl", "v100", 1.1),
                    ("rl", "k80", 1), ("lm", "a100", 4), ("lm", "v100", 3), ("lm", "k80", 1)]
]


@pytest.mark.parametrize("policy", ["oef-coop", "oef-noncoop", "max-throughput", "equal-share", "gavel", "gandiva-fair"])
def test_demo_case_no_ideal_share_beyond_what_the_jobs_request_per_type(policy):
    # contrib/demo.sh: per account 2 a100, 4 v100, 4 k80 one-GPU jobs; acct_c has weight 2. Before per-type
    # demand, cooperative OEF gave acct_c an ideal a100=4 although its jobs request only 2 A100s.
    jobs, jid = [], 0
    for acct, cls in (("acct_a", "cnn"), ("acct_b", "rl"), ("acct_c", "lm")):
        for g, cnt in (("a100", 2), ("v100", 4), ("k80", 4)):
            for _ in range(cnt):
                jid += 1
                jobs.append(job(jid, acct, 1, g, name=cls))
    s = snap(jobs, nodes=DEMO_NODES)
    d = P.observe_demand(s, CFG)
    b = P.build_problem(s, d, DEMO_PROFILES, [], CFG)
    alloc = get_policy(policy)(b.problem)
    p = P.make_plan(b, alloc, d, {}, P.managed_accounts(s, d, CFG))
    for (a, cls), dem in d.items():
        for g, v in p.ideal_class[a][cls].items():
            assert v <= dem.by_type.get(g, 0) + 1e-6, (a, cls, g, v)
    assert p.ideal["acct_c"]["a100"] <= 2 + 1e-6
    # the A100s acct_c cannot use went to accounts that can use them (nobody's a100 jobs are left unserved
    # while A100s are idle), except under non-cooperative OEF, whose equal-throughput rule may leave GPUs idle
    if policy != "oef-noncoop":
        assert sum(p.ideal[a]["a100"] for a in p.ideal) == pytest.approx(4, abs=1e-6)
    if policy == "oef-coop":
        # rl (acct_b, 1.1x) is capped at its 4 k80 jobs; that must not hand it a full share of the V100s on
        # top: the 10x-speedup cnn account (acct_a, same weight) holds more V100 than acct_b
        assert p.ideal["acct_a"]["v100"] > p.ideal["acct_b"]["v100"] + 1


def test_decide_is_the_whole_round_decision_without_side_effects():
    """plan.decide (what round.compute calls): limits only where they change, SiteFactors for pending jobs,
    deficits advanced by the time since the last ok round (capped at two periods), the policy called once."""
    profiles, jobs = fast_flat_case()
    s = snap(jobs, accounts={"acct_a": 1, "acct_b": 1}, limits={"acct_a": {"k80": 0, "v100": 1, ANY_GPU: 1}})
    calls = []

    def solve(problem):
        calls.append(problem)
        return get_policy("oef-noncoop")(problem)

    d = P.decide(s, CFG, solve, profiles=profiles, shipped=[], deviations={}, deficits={}, managed_before=set(),
                 last_ok_started=1000.0, now=1000.0 + 10 * CFG.daemon.period, empty_alloc=None)
    assert len(calls) == 1 and isinstance(d, P.Decisions)
    # every GPU idle: each account claims its guarantee (a: 1 V100; b: 3 V100 + 4 K80); b's K80 limit would be
    # the capacity, so it has none
    assert d.planned == {"acct_a": {"k80": 0, "v100": 1, ANY_GPU: 1}, "acct_b": {"v100": 3, ANY_GPU: 7}}
    assert "acct_a" not in d.changes and d.changes["acct_b"] == {"v100": 3, ANY_GPU: 7}
    assert d.dt == 2 * CFG.daemon.period  # capped
    assert set(d.factors) == {j.job_id for j in jobs} and d.factor_changes == d.factors  # all start at 0
    assert d.retypes == []  # 22.05 cannot retype pending jobs
    # nobody asking: the policy is not called, the empty allocation stands in
    d2 = P.decide(snap([]), CFG, solve, profiles=profiles, shipped=[], deviations={}, deficits={}, managed_before=set(),
                  last_ok_started=None, now=0.0, empty_alloc=lambda built: Allocation(built.problem, "x", np.zeros((0, 2))))
    assert len(calls) == 1 and d2.dt == 0.0
    assert d2.changes == {} and all(lim == {} for lim in d2.planned.values())  # nobody waits: no limit binds


# ------------------------------------------------------------------------------------------- guarantee + lend


def _w(*jobs):
    return P.Waiting(list(jobs))


def test_claims_come_from_free_gpus_placed_node_by_node():
    # 4 idle V100s on two nodes, 2 each: a 4-GPU job cannot start there, so it claims nothing (holding them
    # would keep them idle for nothing); 2-GPU jobs fit one node each
    nodes = (Node("v-1", ("MIXED",), ("gpu",), {"v100": 4}, {"v100": 2}),
             Node("v-2", ("MIXED",), ("gpu",), {"v100": 4}, {"v100": 2}))
    free = P.FreeGPUs.of(snap(nodes=nodes))
    assert free.totals() == {"v100": 4} and free.block("v100") == 2
    real = {"a": {"v100": 4}, "b": {"v100": 4}}
    c = P.claims_of(real, {}, {"a": _w((4, "v100")), "b": _w((2, "v100"), (2, None), (1, "v100"))}, {}, free)
    assert c == {"a": {"v100": 0}, "b": {"v100": 4}}
    # no bound given: the guarantee alone
    assert P.claims_of(real, {}, {"a": _w((4, "v100"))}, {})["a"] == {"v100": 4}


def test_claims_within_the_guarantee_less_use_furthest_below_first_untyped_fastest_first():
    real = {"a": {"v100": 2, "k80": 2}, "b": {"v100": 2, "k80": 0}}
    used = {"a": {"v100": 2}, "b": {"v100": 0}}
    free = P.FreeGPUs({"v": {"v100": 2}, "k": {"k80": 4}}, {"v": {"v100": 4}, "k": {"k80": 4}})
    c = P.claims_of(real, used, {"a": _w((1, None), (1, None), (1, None)), "b": _w((1, None), (1, None))},
                    {"a": ["v100", "k80"], "b": ["v100", "k80"]}, free)
    assert c == {"a": {"v100": 0, "k80": 2}, "b": {"v100": 2, "k80": 0}}  # a's V100 guarantee is in use


def _b_borrows_every_v100(more=()):
    """a waits for 2 V100s (guarantee 2), b runs a 4-V100 job on v100-1 (guarantee 2); ``more``: other jobs. Returns
    (problem, allocation, demand, make_plan's keyword arguments)."""
    s = snap([job(1, "a", 1, "v100"), job(2, "a", 1, "v100"), *more,
              replace(job(3, "b", 4, "v100", state="RUNNING", alloc={"v100": 4}), node_gpus={"v100-1": 4})],
             nodes=(Node("v100-1", ("ALLOCATED",), ("gpu",), {"v100": 4}, {"v100": 4}), NODES[1]),
             accounts={"a": 1, "b": 1})
    d = P.observe_demand(s, CFG)
    b = P.build_problem(s, d, [], [], CFG)
    alloc = fixed_alloc(b, {("a", "j"): {"v100": 2.0}, ("b", "j"): {"v100": 2.0}})
    return b, alloc, d, dict(waiting=P.waiting_gpus(s, CFG), free=P.FreeGPUs.of(s), in_use=P.gpus_in_use(s))


def test_claims_with_reclaim_count_borrowed_gpus_and_limits_lend_the_rest():
    # v100: b borrows all 4 (guarantee 0), a waits with a guarantee of 2: with preemption on, the borrowed GPUs
    # serve a's claim (preemption frees them); without, nothing is free, so no claim holds anything
    b, alloc, d, kw = _b_borrows_every_v100()
    p = P.make_plan(b, alloc, d, {}, ["a", "b"], reclaim=True, **kw)
    assert p.real["a"]["v100"] == 2 and p.claims["a"] == {"v100": 2, "k80": 0}
    # while the claim is served by reclaim, every account is held to its guarantee on v100 (issue 28)
    assert p.limits["b"] == {"v100": 2, ANY_GPU: 6} and p.limits["a"] == {"v100": 2, ANY_GPU: 6}
    assert [(r.account, r.job_id, r.gpu_type, r.victims) for r in p.reclaims] == [("a", 1, "v100", (3,))]
    assert p.lendable() == {"v100": 2, "k80": 4}
    q = P.make_plan(b, alloc, d, {}, ["a", "b"], reclaim=False, **kw)
    assert q.claims["a"] == {"v100": 0, "k80": 0} and q.limits == {"a": {}, "b": {}}


def test_held_dependent_and_future_jobs_claim_nothing():
    jobs = [job(1, "a", 1, "v100", reason="JobHeldUser"), job(2, "a", 1, "v100", reason="Dependency"),
            job(3, "a", 1, "v100", reason="BeginTime"), job(4, "a", 2, None, reason="Priority"),
            job(5, "a", 1, "k80", state="RUNNING", alloc={"k80": 1})]
    w = P.waiting_gpus(snap(jobs), CFG)
    assert w["a"].jobs == [(2, None)] and w["a"].typed == {} and w["a"].untyped == 2


def test_lend_limits_and_changes_clear_what_is_no_longer_limited():
    lim = P.lend_limits({"v100": 4, "k80": 4}, {"a": {"v100": 1}, "b": {"v100": 2, "k80": 4}}, ["a", "b", "c"])
    assert lim == {"a": {"v100": 2, "k80": 0, ANY_GPU: 2}, "b": {"v100": 3, ANY_GPU: 7},
                   "c": {"v100": 1, "k80": 0, ANY_GPU: 1}}
    ch = P.limit_changes({"a": {"v100": 2, "k80": 3, ANY_GPU: 5}}, {"a": {"v100": 2}}, {"a"})
    assert ch == {"a": {"k80": CLEAR, ANY_GPU: CLEAR}}


# ------------------------------------------------------------------------------------------- account trees


def tree_snap(jobs=()):
    """root -> dept (2) -> {kid1 (1), kid2 (3) -> {g1 (1), g2 (1)}}; root -> solo (2)."""
    accts = (Account("dept", 2, {}, (), "root"), Account("kid1", 1, {}, ("alice",), "dept"),
             Account("kid2", 3, {}, (), "dept"), Account("g1", 1, {}, ("bob",), "kid2"),
             Account("g2", 1, {}, ("carol",), "kid2"), Account("solo", 2, {}, ("dave",), "root"))
    return Snapshot("22.05.8", 0.0, NODES, tuple(jobs), accts, ("gpu",))


def test_parse_assoc_reads_the_parent_and_old_output_without_it():
    text = ("testbed|dept||2||root\ntestbed|kid1||1|gres/gpu:v100=2|dept\ntestbed|kid1|alice|1||\n"
            "testbed|solo||1||root\n")
    from slurm_fair.cluster import sacctmgr

    accts = {a.name: a for a in sacctmgr.parse_assoc(text)}
    assert (accts["dept"].parent, accts["kid1"].parent, accts["solo"].parent) == ("root", "dept", "root")
    assert accts["kid1"].limits == {"v100": 2} and accts["kid1"].users == ("alice",)
    header = "Cluster|Account|User|Share|GrpTRES|ParentName\n" + text
    assert {a.name: a.parent for a in sacctmgr.parse_assoc(header)} == {a: accts[a].parent for a in accts}
    assert {a.parent for a in sacctmgr.parse_assoc("c|acct_a||1|\n")} == {""}  # five columns: no parent known


def test_fair_tree_weights_split_a_parents_shares_among_its_children():
    s = tree_snap()
    w = {a: P.tree_weight(s, a) for a in ("dept", "kid1", "kid2", "g1", "g2", "solo")}
    assert w["dept"] == 2.0 and w["solo"] == 2.0  # top level: their Shares
    assert w["kid1"] == pytest.approx(2 * 1 / 4) and w["kid2"] == pytest.approx(2 * 3 / 4)
    assert w["g1"] == w["g2"] == pytest.approx(1.5 / 2)
    assert w["g1"] + w["g2"] + w["kid1"] == pytest.approx(w["dept"])  # the subtree weighs its root


def test_only_the_leaves_of_the_tree_are_managed_and_parents_never_get_a_limit():
    jobs = [job(1, "kid1", 1, "v100"), job(2, "g1", 1, "v100"), job(3, "g2", 1, "k80"), job(4, "solo", 1, "k80"),
            job(5, "kid2", 1, "v100")]  # kid2 is a parent with a job of its own
    s = tree_snap(jobs)
    d = P.observe_demand(s, CFG)
    assert P.parent_accounts(s) == {"dept", "kid2"}
    assert P.managed_accounts(s, d, CFG) == ["g1", "g2", "kid1", "solo"]
    dec = P.decide(s, cfg(preemption={"enabled": True}), lambda problem: get_policy("equal-share")(problem),
                   profiles=[], shipped=[], deviations={}, deficits={},
                   managed_before={"dept", "kid2"}, last_ok_started=None, now=0.0, empty_alloc=None)
    assert "dept" not in dec.planned and "kid2" not in dec.planned
    assert dec.built.weights["g1"] == pytest.approx(0.75) and dec.built.weights["kid1"] == pytest.approx(0.5)
    # a parent slurm-fair limited before (an older version) has its limits cleared, not left capping a subtree
    s2 = Snapshot("22.05.8", 0.0, NODES, tuple(jobs), tuple(
        Account(a.name, a.shares, {"v100": 0, ANY_GPU: 0} if a.name == "dept" else {}, a.users, a.parent)
        for a in s.accounts), ("gpu",))
    dec2 = P.decide(s2, CFG, lambda problem: get_policy("equal-share")(problem), profiles=[], shipped=[],
                    deviations={}, deficits={}, managed_before={"dept"}, last_ok_started=None, now=0.0,
                    empty_alloc=None)
    assert dec2.changes["dept"] == {"v100": CLEAR, ANY_GPU: CLEAR}


def test_a_pilot_divides_only_its_accounts_part_and_touches_no_other_account():
    """limits.accounts = [acct_a]: acct_b's jobs still compete for the GPUs, so acct_a's guarantee is its part
    (half of each type with equal shares), not the whole cluster; only acct_a gets limits, SiteFactors and a
    line in the type map (the map says @listed-only)."""
    jobs = [job(i, "acct_a", 1, "v100") for i in range(1, 9)] + [job(i, "acct_b", 1, "v100") for i in range(11, 19)]
    jobs += [job(30, "acct_a", 1, None), job(31, "acct_b", 1, None)]
    s = snap(jobs, accounts={"acct_a": 1, "acct_b": 1})
    c = cfg(limits={"accounts": ["acct_a"]})
    dec = P.decide(s, c, lambda problem: get_policy("equal-share")(problem), profiles=[], shipped=[], deviations={},
                   deficits={}, managed_before=set(), last_ok_started=None, now=0.0, empty_alloc=None)
    assert dec.plan.real["acct_a"]["v100"] == 2  # of 4 V100s: the other half is acct_b's
    assert set(dec.planned) == {"acct_a"} and set(dec.changes) <= {"acct_a"}
    assert {k.partition("/")[0] for k in dec.targets} == {"acct_a"}
    assert {j for j in dec.factors} == {j.job_id for j in jobs if j.account == "acct_a"}
    whole = P.decide(snap([j for j in jobs if j.account == "acct_a"], accounts={"acct_a": 1, "acct_b": 1}), c,
                     lambda problem: get_policy("equal-share")(problem), profiles=[], shipped=[], deviations={},
                     deficits={}, managed_before=set(), last_ok_started=None, now=0.0, empty_alloc=None)
    assert whole.plan.real["acct_a"]["v100"] == 4  # alone, the pilot account may have them all


def test_a_partition_pilot_divides_its_partitions_gpus_and_its_limits_leave_other_partitions_running():
    """cluster.partitions = [pilot] (the v100 node): acct_a also runs 2 K80 jobs in partition 'other'. The
    pilot divides only the V100s; Slurm's GrpTRES counts every partition, so the GPUs held elsewhere are added
    to acct_a's limits (their type's, when the pilot limits it, and the total) and its K80 jobs are not
    squeezed by the pilot."""
    nodes = (Node("v100-1", ("MIXED",), ("pilot",), {"v100": 4}, {}),
             Node("k80-1", ("MIXED",), ("other",), {"k80": 4}, {"k80": 2}))
    jobs = [job(1, "acct_a", 2, "k80", state="RUNNING", partition="other", alloc={"k80": 2}),
            job(2, "acct_a", 1, "v100", partition="pilot"), job(3, "acct_a", 1, "v100", partition="pilot"),
            job(4, "acct_b", 2, "v100", partition="pilot"), job(5, "acct_b", 1, "k80", partition="other")]
    s = snap(jobs, nodes=nodes, accounts={"acct_a": 1, "acct_b": 1})
    c = cfg(cluster={"partitions": ["pilot"]}, limits={"lend": False})
    dec = P.decide(s, c, lambda problem: get_policy("equal-share")(problem), profiles=[], shipped=[], deviations={},
                   deficits={}, managed_before=set(), last_ok_started=None, now=0.0, empty_alloc=None)
    assert dec.built.capacity == {"v100": 4}  # only the pilot's GPUs are divided
    assert dec.plan.real["acct_a"] == {"v100": 2} and dec.plan.real["acct_b"] == {"v100": 2}
    assert dec.plan.limits["acct_a"]["v100"] == 2
    assert "k80" not in dec.planned["acct_a"]  # a type the pilot does not manage gets no limit
    assert dec.planned["acct_a"][ANY_GPU] == dec.plan.limits["acct_a"][ANY_GPU] + 2  # its K80 jobs elsewhere
    assert dec.planned["acct_b"] == dec.plan.limits["acct_b"]  # nothing elsewhere is running for acct_b
    assert set(dec.factors) == {2, 3, 4}  # jobs outside the pilot get no SiteFactor


# ------------------------------------------------------------------ claims by whole jobs, reclaim (issue 28)

from slurm_fair.daemon.plan.limits import claims_and_reclaims  # noqa: E402
from slurm_fair.daemon.plan.reclaim import Borrowed, Holder  # noqa: E402


def _held(jid, account, gpus, node, start=0.0):
    return Holder(jid, account, "v100", gpus, {node: gpus}, start)


def _v100_nodes(*busy):
    """Nodes n1.. of 4 V100s with ``busy[i]`` GPUs in use."""
    free = {f"n{i + 1}": {"v100": 4 - b} for i, b in enumerate(busy)}
    return P.FreeGPUs(free, {x: {"v100": 4} for x in free})


def test_room_3_and_one_8_gpu_job_claims_nothing_and_frees_nothing():
    # b borrows all 8 V100s (guarantee 5); a's room is 3 and its one job needs 8: it could not start on 3
    real = {"a": {"v100": 3}, "b": {"v100": 5}}
    used = {"b": {"v100": 8}}
    holders = [_held(1, "b", 4, "n1"), _held(2, "b", 4, "n2")]
    free = _v100_nodes(4, 4)
    claims, reclaims = claims_and_reclaims(real, used, {"a": P.Waiting([(8, "v100")], [7])}, {}, free,
                                             Borrowed(holders, real, used))
    assert claims["a"] == {"v100": 0} and reclaims == []
    # a 2-GPU job fits its room: it claims, and one of b's jobs is its victim (node n1, one job does it)
    claims, reclaims = claims_and_reclaims(real, used, {"a": P.Waiting([(2, "v100")], [7])}, {}, free,
                                             Borrowed(holders, real, used))
    assert claims["a"] == {"v100": 2} and [(r.job_id, dict(r.where), r.victims) for r in reclaims] == \
        [(7, {"n1": 2}, (1,))]


def test_an_8_gpu_claim_on_4_gpu_nodes_takes_victims_on_the_whole_nodes_that_need_fewest_freed():
    # n1: b's 4-GPU job; n2: b's two 1-GPU jobs, 2 idle; n3: b's 3-GPU job, 1 idle; n4: c's 4-GPU job (c is at
    # its guarantee: not a borrower). b holds 9 with a guarantee of 4: it gives back at most 5.
    real = {"a": {"v100": 8}, "b": {"v100": 4}, "c": {"v100": 4}}
    used = {"b": {"v100": 9}, "c": {"v100": 4}}
    holders = [_held(1, "b", 4, "n1"), _held(2, "b", 1, "n2"), _held(3, "b", 1, "n2"), _held(4, "b", 3, "n3"),
               _held(5, "c", 4, "n4")]
    free = _v100_nodes(4, 2, 3, 4)
    claims, reclaims = claims_and_reclaims(real, used, {"a": P.Waiting([(8, "v100")], [9])}, {}, free,
                                             Borrowed(holders, real, used))
    assert claims["a"] == {"v100": 8}
    (r,) = reclaims
    assert dict(r.where) == {"n2": 4, "n3": 4} and sorted(r.victims) == [2, 3, 4]  # 5 GPUs freed, not 4 + 4


def test_while_a_claim_is_served_by_reclaim_the_others_are_held_to_their_guarantee_there():
    cap = {"p100": 16, "v100": 16}
    claims = {"a": {"p100": 8, "v100": 0}}
    real = {"a": {"p100": 8, "v100": 4}, "b": {"p100": 3, "v100": 4}, "c": {"p100": 3, "v100": 4},
            "d": {"p100": 2, "v100": 4}}
    # lending alone: each of b, c, d may take 16 - 8 = 8 P100s, 24 together: a reclaim's GPUs are refilled
    plain = P.lend_limits(cap, claims, "abcd")
    assert [plain[x]["p100"] for x in "bcd"] == [8, 8, 8]
    held = P.lend_limits(cap, claims, "abcd", real, {"p100"})
    assert [held[x]["p100"] for x in "abcd"] == [8, 3, 3, 2]  # sum 16: nobody refills what is freed
    assert "v100" not in held["b"] and held["b"][ANY_GPU] == 3 + 16  # untyped: at most the per-type sum


def test_a_borrowing_cap_applies_only_where_another_account_could_claim():
    # b holds 1 of its 4 K80s: on k80 a may borrow max(2, ceil(0.5 x 4)) = 2 over its guarantee 4, c (guarantee
    # 0) max(2, 0) = 2, b itself nobody can claim from (a and c are not short on k80); on v100 nobody is short
    real = {"a": {"k80": 4, "v100": 2}, "b": {"k80": 4, "v100": 6}, "c": {"k80": 0, "v100": 0}}
    used = {"a": {"k80": 5, "v100": 6}, "b": {"k80": 1, "v100": 6}, "c": {"k80": 2}}
    caps = P.Borrowing(2, 0.5).caps(real, used, "abc", ["k80", "v100"])
    assert caps == {"a": {"k80": 6}, "c": {"k80": 2}}
    waits = P.Waiting([(1, "v100"), (2, None)], [1, 2], [None, ("k80", "v100")])
    assert P.waiting_types({"b": waits, "c": P.Waiting([(1, "v100")])}, ["k80", "v100"]) == {
        "b": {"k80", "v100"}, "c": {"v100"}}
    assert P.Borrowing(2, 0.5).caps(real, used, "abc", ["k80", "v100"], {"b": {"k80"}}) == caps
    assert P.Borrowing(2, 0.5).caps(real, used, "abc", ["k80", "v100"], {"b": {"v100"}}) == {}  # b waits elsewhere
    assert P.Borrowing(1, 0.75).caps(real, used, "abc", ["k80"]) == {"a": {"k80": 7}, "c": {"k80": 1}}  # ceil(3)
    assert P.Borrowing().caps(real, used, "abc", ["k80"]) == {}  # -1: off
    cap = {"k80": 12, "v100": 12}
    plain = P.lend_limits(cap, {}, "abc", real, (), (), used)
    assert plain == {"a": {}, "b": {}, "c": {}}  # nobody claims: unbounded lending
    lim = P.lend_limits(cap, {}, "abc", real, (), (), used, caps)
    assert lim["a"] == {"k80": 6, ANY_GPU: 6 + 12} and lim["c"] == {"k80": 2, ANY_GPU: 2 + 12}
    assert lim["b"] == {}  # only b could claim k80 back: it is not capped
    # a claim still bounds the loan: b's 3 waiting K80 GPUs leave c 12 - 3 = 9, less than its cap... and a 9
    lim = P.lend_limits(cap, {"b": {"k80": 3}}, "abc", real, (), (), used, {"a": {"k80": 10}, "c": {"k80": 2}})
    assert lim["a"]["k80"] == 9 and lim["c"]["k80"] == 2 and lim["b"] == {}


def test_make_plan_caps_borrowing_with_the_config():
    s, d, b = two_account_case()
    alloc = fixed_alloc(b, {("acct_a", "r"): {"v100": 2.6}, ("acct_b", "s"): {"v100": 1.4, "k80": 4.0}})
    managed = P.managed_accounts(s, d, CFG)
    # acct_b waits with one untyped 8-GPU job: larger than its guarantee anywhere, it claims nothing, so every
    # GPU is lent — but acct_b waits, below its guarantee on both types
    big = {"acct_b": P.Waiting([(8, None)], [99])}
    free = P.make_plan(b, alloc, d, {}, managed, {"acct_a": {"v100": 3}}, waiting=big)
    held = P.make_plan(b, alloc, d, {}, managed, {"acct_a": {"v100": 3}}, waiting=big, borrowing=P.Borrowing(0, 0.0))
    assert held.claims["acct_b"] == {"k80": 0, "v100": 0}
    assert free.real["acct_b"] == held.real["acct_b"] == {"k80": 4, "v100": 1}
    assert free.limits["acct_a"] == {} and free.limits["acct_c"] == {}  # no cap: a and c may take any GPU
    # acct_b holds none of its k80 and v100 guarantee: the others may not borrow there (k = 0, f = 0)
    assert held.limits["acct_a"] == {"k80": 0, "v100": 3, ANY_GPU: 3}
    assert held.limits["acct_c"] == {"k80": 0, "v100": 0, ANY_GPU: 0}
    assert held.limits["acct_b"] == {}  # nobody else is short of its guarantee: b is not capped
    # with preemption (reclaim) borrowed GPUs come back anyway: no cap
    assert P.make_plan(b, alloc, d, {}, managed, {"acct_a": {"v100": 3}}, waiting=big, reclaim=True,
                       free=P.FreeGPUs({"n": {"k80": 4, "v100": 1}}, {"n": {"k80": 4, "v100": 4}}),
                       borrowing=P.Borrowing(0, 0.0)).limits["acct_c"] == {}
    # nobody waits: nobody could claim, nothing is capped
    assert P.make_plan(b, alloc, d, {}, managed, {"acct_a": {"v100": 3}}, waiting={},
                       borrowing=P.Borrowing(0, 0.0)).limits == free.limits


def test_a_flexible_jobs_demand_counts_for_every_type_it_could_use():
    flex = replace(job(1, "a", 2, "v100", comment="fair:flex"))
    fixed = job(2, "a", 1, "v100")
    d = P.ClassDemand()
    d.add(flex)
    d.add(fixed)
    assert d.type_demand(["v100", "k80"]) == {"v100": 3.0, "k80": 2.0}  # the typed job only where it asked
    pinned = P.ClassDemand()  # Slurm 22.05: a typed pending job cannot be retyped, so it can use its type only
    pinned.add(flex, flexible_anywhere=False)
    pinned.add(fixed, flexible_anywhere=False)
    assert pinned.type_demand(["v100", "k80"]) == {"v100": 3.0, "k80": 0.0}


def test_an_untyped_job_claims_idle_gpus_of_a_slower_type_before_it_reclaims_a_faster_one():
    # v100 (fastest for a): all 4 held by b above its guarantee; k80: 4 idle. a's untyped 1-GPU job takes a k80.
    real = {"a": {"v100": 2, "k80": 2}, "b": {"v100": 2, "k80": 2}}
    used = {"b": {"v100": 4}}
    free = P.FreeGPUs({"v": {"v100": 0}, "k": {"k80": 4}}, {"v": {"v100": 4}, "k": {"k80": 4}})
    claims, reclaims = claims_and_reclaims(real, used, {"a": P.Waiting([(1, None)], [5])}, {"a": ["v100", "k80"]},
                                           free, Borrowed([Holder(1, "b", "v100", 4, {"v": 4})], real, used))
    assert claims["a"] == {"v100": 0, "k80": 1} and reclaims == []


def test_an_untyped_job_never_claims_a_type_its_class_cannot_run_on():
    """Issue 28, seen in the simulator at 90 % (seed #0): an untyped 8-GPU job whose class has no K80 speed
    claimed K80 (its account's order lists every type), and five K80 jobs were requeued for it one after another
    while it could never start there. Its claim now goes only where its class runs (``Waiting.runs_on``)."""
    real = {"a": {"v100": 4, "k80": 8}, "b": {"v100": 4, "k80": 0}}
    used = {"b": {"v100": 8, "k80": 8}}
    nodes = {"v": {"v100": 4}, "v2": {"v100": 4}, "k": {"k80": 4}, "k2": {"k80": 4}}
    free = P.FreeGPUs({x: {t: 0 for t in row} for x, row in nodes.items()}, nodes)
    holders = [Holder(1, "b", "k80", 4, {"k": 4}), Holder(2, "b", "k80", 4, {"k2": 4}),
               Holder(3, "b", "v100", 4, {"v": 4}), Holder(4, "b", "v100", 4, {"v2": 4})]
    anywhere = P.Waiting([(8, None)], [7])
    claims, reclaims = claims_and_reclaims(real, used, {"a": anywhere}, {"a": ["k80", "v100"]}, free.copy(),
                                           Borrowed(holders, real, used))
    assert claims["a"]["k80"] == 8 and reclaims[0].gpu_type == "k80"  # before: any type in the order
    no_k80 = P.Waiting([(8, None)], [7], [("v100",)])
    claims, reclaims = claims_and_reclaims(real, used, {"a": no_k80}, {"a": ["k80", "v100"]}, free.copy(),
                                           Borrowed(holders, real, used))
    assert claims["a"] == {"v100": 0, "k80": 0} and reclaims == []  # v100 room 4 < 8: it claims nothing


def test_waiting_jobs_carry_the_types_their_class_runs_on():
    untyped = job(1, "a", 2, None, reason="Resources")
    listed = job(2, "a", 1, "k80,v100", reason="Resources")
    typed = job(3, "a", 1, "v100", reason="Resources")
    s = snap([untyped, listed, typed])
    w = P.waiting_gpus(s, CFG, lambda j: ["v100", "p100"])["a"]
    by_id = {jid: w.types_of(i) for i, jid in enumerate(w.ids)}
    assert by_id == {1: ("v100", "p100"), 2: ("v100",), 3: None}  # a listed request: only its types it can run on
    any_type = P.waiting_gpus(s, CFG)["a"]  # no runs_on: an untyped job may use any type
    assert any_type.types_of(any_type.ids.index(1)) is None


def test_retypes_and_the_plan_count_room_under_the_limits_in_force():
    """A job is retyped only where the limit Slurm will hold after the round has room: an account left alone
    (its own GPU limits, ``limits.site_limits = "respect"``) keeps Slurm's limits, whatever the plan said (seen
    on 24.11: a new database left the old limits alone, jobs were moved to idle V100s and waited on
    AssocGrpGRES)."""
    k80_busy = [job(i, "acct_b", gpu_type="k80", state="RUNNING", alloc={"k80": 1}) for i in range(1, 5)]
    flex = job(10, "acct_a", gpu_type="k80", comment="fair:flex", reason="Resources")
    other = job(11, "acct_c", gpu_type="k80", comment="fair:flex", reason="Resources")

    def decide(limits):
        nodes = (Node("v100-1", ("IDLE",), ("gpu",), {"v100": 4}, {}),
                 Node("k80-1", ("ALLOCATED",), ("gpu",), {"k80": 4}, {"k80": 4}))
        s = replace(snap(k80_busy + [flex, other], nodes=nodes, limits=limits), slurm_version="24.11.1")
        return P.decide(s, CFG, lambda problem: get_policy("equal-share")(problem), profiles=[], shipped=[],
                        deviations={}, deficits={}, managed_before=set(), last_ok_started=None, now=0.0,
                        empty_alloc=None)

    free = decide({})
    assert {m.job_id: m.new_type for m in free.retypes} == {10: "v100", 11: "v100"}  # room for both
    held = decide({"acct_a": {"v100": 0}})
    assert "acct_a" in held.left_alone and held.plan_in_force().limits["acct_a"] == {"v100": 0}
    assert {m.job_id: m.new_type for m in held.retypes} == {11: "v100"}  # acct_a's limit has no V100 room


def test_a_folded_jobs_copy_equals_dataclasses_replace():
    """classcap._with_class (a fast copy for rename floods) gives what ``replace(job, cls=...)`` gives."""
    from slurm_fair.daemon.plan.classcap import _with_class

    j = job(7, "acct_a", 2, "v100", comment="class=x123 fair:flex", reason="Resources")
    got = _with_class(j, "default")
    assert got == replace(j, cls="default") and got is not j and j.cls is None and got.cls == "default"


def test_while_a_claim_is_served_by_reclaim_accounts_with_untyped_jobs_are_held_to_what_they_hold():
    """Issue 39, on the 22.05 testbed: Slurm counts an untyped request against the total only, so an account with
    ``v100=0`` and untyped jobs pending took V100s reclaimed for another. While a reclaim is in flight its total
    is what it holds plus its own claims; an account whose pending jobs are all typed keeps lending's total."""
    cap = {"a100": 4, "v100": 6, "k80": 6}
    claims = {"b": {"a100": 4}, "c": {"v100": 6, "k80": 2}}
    real = {"a": {"k80": 4}, "b": {"a100": 4}, "c": {"v100": 6, "k80": 2}, "d": {}}
    used = {"a": {"a100": 4, "v100": 6, "k80": 6}, "d": {"k80": 1}}
    held = P.lend_limits(cap, claims, "abcd", real, {"a100", "v100"}, {"b", "c", "d"}, used)
    assert held["b"][ANY_GPU] == 4 and held["c"][ANY_GPU] == 8 and held["d"][ANY_GPU] == 1
    assert held["d"]["v100"] == 0 and held["d"]["k80"] == 4  # its typed limits are as before
    typed = P.lend_limits(cap, claims, "abcd", real, {"a100", "v100"}, (), used)
    assert typed["d"][ANY_GPU] == 4 and typed["b"][ANY_GPU] == 8  # the per-type sums, as before
    # no reclaim in flight: lending as before, untyped jobs or not
    assert P.lend_limits(cap, claims, "abcd", real, (), {"b", "c", "d"}, used) == P.lend_limits(cap, claims, "abcd")


def test_in_the_round_a_reclaim_is_requeued_a_borrower_with_untyped_jobs_is_held_to_what_it_holds():
    # the case above, and b (borrowing all 4 V100s) has an untyped job pending: Slurm would start it on a V100
    # freed for a (typed limits do not bind it). In the requeue round its total is what it holds (4)
    b, alloc, d, kw = _b_borrows_every_v100([job(4, "b", 1, None)])
    grace = P.make_plan(b, alloc, d, {}, ["a", "b"], reclaim=True, **kw)
    assert grace.limits["b"][ANY_GPU] == 6  # in the grace nothing is freed: lending as before
    now = P.make_plan(b, alloc, d, {}, ["a", "b"], reclaim=True, requeuing=True, **kw)
    assert now.limits["b"] == {"v100": 2, ANY_GPU: 4} and now.limits["a"][ANY_GPU] == 6
