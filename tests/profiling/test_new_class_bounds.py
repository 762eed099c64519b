"""Issue 41 item 3: a new class's speeds are bounded (profiling/trust.py ``new_class_bounds``).

Before, a report was bounded only by trusted values of the same class, so a class nobody had measured took any
first report: V100 = 9e6 and K80 = 2e-6 were accepted with the default configuration, and end to end (oef-coop,
8 V100 + 8 K80, two accounts of 16 pending GPUs each) the attacker's V100 share rose from its honest 2.67 to 5
and the honest account was pushed onto all 8 K80. Now such a class's report must lie within the range of the
site's known classes on that type (widened ``new_class_range``) and, against its own value on another type,
within the ratios the known classes show between the two types (widened ``new_class_ratio``)."""

from __future__ import annotations

import pytest

from slurm_fair import config, policies
from slurm_fair.cluster.base import Account, Job, Snapshot
from slurm_fair.daemon import bounded
from slurm_fair.daemon.harvest import harvest
from slurm_fair.daemon.plan.problem import lookup_throughput
from slurm_fair.model import JobClass, Problem, Tenant
from slurm_fair.profiling import shipped as shipped_profiles
from slurm_fair.profiling.trust import TrustRules, known_classes, new_class_bounds, reference
from slurm_fair.store import ProfileValue, Store
from tests.conftest import NODES

T = TrustRules()  # new_class_range 100, new_class_ratio 3
SHIPPED = {("a", "k80"): 1.0, ("a", "v100"): 4.0, ("b", "k80"): 2.0, ("b", "v100"): 4.0}  # v100/k80 in [2, 4]


def row(account, cls, g, source, v):
    return ProfileValue(account, cls, g, v, samples=1, source=source, updated=0.0, rejected=0)


# ------------------------------------------------------------------------------------ the pure rule

def test_a_new_class_is_bounded_by_the_known_classes_range_on_the_type():
    b = reference([], SHIPPED, "acct", "new", "v100", "harvested", T)
    assert (b.lo, b.hi) == (pytest.approx(4 / 100), pytest.approx(400.0)) and "known classes on v100" in b.why
    b = reference([], SHIPPED, "acct", "new", "k80", "measured", T)  # a profiling run's report too
    assert (b.lo, b.hi) == (pytest.approx(1 / 100), pytest.approx(200.0))
    narrow = TrustRules(new_class_range=2.0)
    b = reference([], SHIPPED, "acct", "new", "k80", "harvested", narrow)
    assert (b.lo, b.hi) == (pytest.approx(0.5), pytest.approx(4.0))


def test_a_new_class_s_ratio_between_types_is_bounded_by_the_known_ratios():
    own = [row("acct", "new", "v100", "harvested", 40.0)]
    b = reference(own, SHIPPED, "acct", "new", "k80", "harvested", T)
    # range: k80 in [1/100, 2*100]; ratio: 40 x k80/v100 in [1/4, 1/2] widened 3x = [40/12, 60]
    assert (b.lo, b.hi) == (pytest.approx(40 / 12), pytest.approx(60.0)) and "its own value on v100" in b.why
    # another account's values of the same name are not its own: only the range
    b = reference(own, SHIPPED, "other", "new", "k80", "harvested", T)
    assert (b.lo, b.hi) == (pytest.approx(0.01), pytest.approx(200.0))


def test_a_type_no_known_class_was_measured_on_takes_every_type_s_range_and_ratios():
    b = reference([], SHIPPED, "acct", "new", "a100", "harvested", T)
    assert (b.lo, b.hi) == (pytest.approx(0.01), pytest.approx(400.0)) and "none is known on a100" in b.why
    b = reference([row("acct", "new", "v100", "harvested", 40.0)], SHIPPED, "acct", "new", "a100", "harvested", T)
    # every pair's ratios: [1/4, 4] widened 3x -> 40 x [1/12, 12] = [3.33, 480], within the range [0.01, 400]
    assert (b.lo, b.hi) == (pytest.approx(40 / 12), pytest.approx(400.0))


def test_only_the_sites_values_make_a_class_known_never_a_tenants():
    vals = [row("acct", "big", "v100", "harvested", 1e5), row("acct", "big", "v100", "set", 1e5),
            row("acct", "big", "v100", "measured", 1e5), row("", "site", "v100", "set", 1000.0)]
    known = known_classes(vals, SHIPPED, T)
    assert known[("site", "v100")] == 1000.0 and not any("big" in c for c, _g in known)
    b = new_class_bounds(vals, SHIPPED, "acct", "new", "v100", T)
    assert b.hi == pytest.approx(1000.0 * 100)  # the site-wide value widens it, the tenant's 1e5 does not
    # with trusted_users, profiling runs are the site's: their measured values count
    known = known_classes(vals, SHIPPED, TrustRules(trusted_users=("prof",)))
    assert known[("acct/big", "v100")] == 1e5


# ------------------------------------------------------------------------------------ through harvest()

def tjob(jid, comment, gpu_type, account="acct_a"):
    return Job(job_id=jid, name="j", account=account, user="u", partition="gpu", state="RUNNING", reason="",
               priority=1, submit_time=1, start_time=2, gpus_per_node=1, nodes=1, gpu_type=None,
               gpus_allocated={gpu_type: 1}, comment=comment)


def snap(*jobs):
    return Snapshot("22.05.8", 0.0, NODES, tuple(jobs), (Account("acct_a", 1, {}), Account("acct_h", 1, {})),
                    ("gpu",))


def _v100_share_after(reports) -> tuple[float, Store]:
    """The attacker's (acct_a, class evil) oef-coop V100 share after its reports ``[(gpu type, value)]`` and the
    honest account's (acct_h, class cnn: 20 steps/s on V100, 5 on K80, a ratio of 4) went through harvest():
    8 V100 + 8 K80, each account 16 GPUs of demand, speeds as the rounds look them up."""
    cfg = config.from_dict({})
    s = Store(":memory:")
    jobs = [tjob(1, "class=cnn fair:tput=20@1", "v100", "acct_h"), tjob(2, "class=cnn fair:tput=5@1", "k80", "acct_h")]
    jobs += [tjob(10 + i, f"class=evil fair:tput={v:g}@1", g) for i, (g, v) in enumerate(reports)]
    for i, j in enumerate(jobs):  # one report a round, in order
        harvest(s, snap(j), cfg, i + 1, now=100.0 + i)
    rows, shipped = bounded.round_profiles(s, cfg), shipped_profiles.load_shipped()
    types = {"v100": 8, "k80": 8}
    tenants = tuple(Tenant(a, (JobClass(c, lookup_throughput(rows, shipped, a, c, types)[0], demand=16.0),), 1.0)
                    for a, c in (("acct_a", "evil"), ("acct_h", "cnn")))
    alloc = policies.solve("oef-coop", Problem(gpu_types=types, tenants=tenants))
    return float(alloc.x[0][list(types).index("v100")]), s


def test_the_issue_41_attack_moves_no_share():
    # the attacker's class really runs 3 steps/s on V100 and 1 on K80: its share when it reports that
    honest, _ = _v100_share_after([("v100", 3.0), ("k80", 1.0)])
    assert honest == pytest.approx(8 / 3, abs=1e-6)  # hand-checked: 2.67 V100 (and all 8 K80)
    attacked, s = _v100_share_after([("v100", 9e6), ("k80", 2e-6)])  # before: a V100 share of 5
    assert attacked <= honest + 1e-6
    rep = {r.gpu_type: r for r in s.profile_reports(account="acct_a")}
    assert rep["v100"].status == rep["k80"].status == "rejected"
    assert "no trusted value" in rep["v100"].message and "known classes on v100" in rep["v100"].message
    assert len(s.events(kind="profile-report-rejected")) == 2
    assert not [r for r in s.profile_values() if r.cls == "evil"]  # nothing stored


def test_a_ratio_beyond_the_known_ones_is_rejected_through_harvest():
    # a first report at the top of the V100 range is taken; a K80 report 25 000x below it is not (gavel's
    # v100/k80 ratios run 2.0 .. 12.7, widened 3x: at most 38.1)
    _, s = _v100_share_after([("v100", 25000.0), ("k80", 1.0)])
    rep = {r.gpu_type: r for r in s.profile_reports(account="acct_a")}
    assert rep["v100"].status == "accepted" and rep["k80"].status == "rejected"
    assert "its own value on v100" in rep["k80"].message
    evil = {r.gpu_type: r.throughput for r in s.profile_values() if r.cls == "evil"}
    assert evil == {"v100": 25000.0}
