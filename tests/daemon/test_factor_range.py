"""``priority.site_factor_max = "auto"`` (the default): the SiteFactor range is the sum of the site's
``PriorityWeight*`` (issue 40, item 2), resolved by each round from ``Cluster.priority_weights``."""

from __future__ import annotations

from slurm_fair import config
from slurm_fair.cluster.ctld_config import parse_config, weights_sum
from slurm_fair.daemon import plan as P
from slurm_fair.daemon.round import run_round
from slurm_fair.sim.cluster import SimCluster, cluster_spec
from slurm_fair.sim.traces import TraceJob
from slurm_fair.store import Store
from tests.conftest import job, snap

SHOW_CONFIG = """Configuration data as of 2026-12-07T17:00:00
PriorityWeightAge       = 1000
PriorityWeightAssoc     = 0
PriorityWeightFairShare = 10000
PriorityWeightJobSize   = 0
PriorityWeightPartition = 0
PriorityWeightQOS       = 10000
PriorityWeightTRES      = CPU=500,GRES/gpu=1500
"""


def test_the_weights_sum_reads_every_weight_and_the_tres_list():
    assert weights_sum(parse_config(SHOW_CONFIG)) == 23000
    assert weights_sum(parse_config("PriorityWeightTRES = (null)\nPriorityWeightAge = 0\n")) == 0


def test_auto_is_the_sum_of_the_weights_and_a_number_is_kept():
    auto = config.from_dict({})
    assert P.factor_range(auto, 23000) == (0, 23000, 10000)
    assert P.factor_range(auto, 99) == (0, 99, 100)  # one level per value at most
    assert P.factor_range(auto, 0) == P.factor_range(auto, None) == (0, 100000, 10000)  # all 0 / unknown
    shifted = config.from_dict({"priority": {"site_factor_min": 500}})
    assert P.factor_range(shifted, 23000) == (500, 23500, 10000)
    fixed = config.from_dict({"priority": {"site_factor_max": 50000}})
    assert P.with_weights(fixed, 23000) is fixed
    resolved = P.with_weights(auto, 23000).priority
    assert (resolved.site_factor_max, resolved.levels) == (23000, 10000)


def test_site_factors_stay_within_the_sites_weights():
    """Two accounts, three jobs: the highest SiteFactor is the sum of the weights, not 100 000."""
    s = snap([job(1, "acct_a", submit=1), job(2, "acct_b", submit=2), job(3, "acct_b", submit=3)])
    f = P.site_factors(s, {"acct_a": 9.0}, P.with_weights(config.from_dict({"priority": {"age_floor": 0}}), 23000))
    assert max(f.values()) == 23000 and min(f.values()) >= 0
    assert f[1] > f[2] > f[3]


class WeightedSim(SimCluster):
    def priority_weights(self):
        return 22000


def test_a_round_plans_with_the_weights_its_cluster_reports(tmp_path):
    jobs = [TraceJob(f"{a}{i}", 0.0, a, "c", 1, 1e6) for i in range(4) for a in ("a", "b")]
    cfg = config.from_dict({"daemon": {"database": str(tmp_path / "s.sqlite"), "dry_run": False},
                            "priority": {"age_floor": 0}})
    for cls, top in ((WeightedSim, 22000), (SimCluster, 100000)):  # the simulator alone reports no weights
        cluster = cls(cluster_spec("v100=1", 2), {"a": 1, "b": 1}, {"c": {"v100": 1.0}}, jobs, epoch=1.7e9)
        cluster.advance(0.0)
        with Store(tmp_path / f"{cls.__name__}.sqlite") as store:
            res = run_round(cluster, store, cfg, "oef-coop", now=cluster.clock())
        assert res.status == "ok" and max(res.decisions.factors.values()) == top


def test_the_cli_backend_reads_the_config_once_for_the_weights_and_the_cluster_name(monkeypatch):
    from slurm_fair.cluster.cli import CliCluster

    calls = []
    c = CliCluster(timeout=1, env={})
    monkeypatch.setattr(c, "_run", lambda argv: calls.append(list(argv)) or SHOW_CONFIG + "ClusterName = lab\n")
    assert c.priority_weights() == 23000 and c.cluster_name() == "lab" and c.priority_weights() == 23000
    assert calls == [["scontrol", "show", "config"]]
