"""Preflight fails on names in the configuration that Slurm does not have (issue 29): ``[cluster] partitions``
(``["gpu-typo"]`` managed nothing and published a map of only its header), ``limits.accounts``, ``tenants.map``,
the ``preemption.checkpointing`` rules; a site's ``profiling.nvml_map`` types no node has are a note."""

from __future__ import annotations

from slurm_fair import config
from slurm_fair.cluster.base import Account, Node, Snapshot
from slurm_fair.daemon import preflight as PF

NODES = (Node("a", ("IDLE",), ("gpu",), {"a100": 4}, {}), Node("v", ("IDLE",), ("gpu", "old"), {"v100": 4}, {}))
SNAP = Snapshot("22.05.8", 0.0, NODES, (), (Account("acct_a", 1, {}), Account("acct_b", 1, {})), ("gpu", "old"))


def found(data, nvml=None):
    return [(f.level, f.what, f.detail) for f in PF.named_in_config(config.from_dict(data), SNAP, nvml)]


def test_nothing_named_nothing_to_say():
    assert found({}) == []


def test_a_partition_without_gpu_nodes_or_a_typo_is_a_problem_naming_key_and_value():
    out = found({"cluster": {"partitions": ["gpu", "gpu-typo"]}})
    assert out == [("problem", "cluster.partitions", "partition 'gpu-typo' has no GPU node in Slurm (no such "
                    "partition, or no GPU node in it; partitions with GPU nodes: gpu, old)")]
    assert found({"cluster": {"partitions": ["gpu", "old"]}}) == [("ok", "cluster.partitions", "gpu, old")]


def test_unknown_accounts_in_the_pilot_list_the_tenant_map_and_checkpointing_rules():
    out = found({"limits": {"accounts": ["acct_a", "acct_x"]}, "tenants": {"map": {"acct_y": "phys", "acct_b": "phys"}},
                 "preemption": {"checkpointing": ["account:acct_z", "partition:nope", "class:rl"]}})
    problems = {(w, d.split(" does")[0].split(" has")[0]) for lvl, w, d in out if lvl == "problem"}
    assert problems == {("limits.accounts", "account 'acct_x'"), ("tenants.map", "account 'acct_y'"),
                        ("preemption.checkpointing", "account 'acct_z'"),
                        ("preemption.checkpointing", "partition 'nope'")}
    assert all("sacctmgr show account" in d for lvl, w, d in out if lvl == "problem" and "account '" in d)


def test_nvml_types_no_node_has_are_a_note():
    assert found({}, {"nvidia a100": "a100", "tesla k80": "k80"}) == [
        ("note", "profiling.nvml_map", "maps devices to GPU type(s) no node has: k80 (Slurm's types: a100, v100)")]
    assert found({}, {"nvidia a100": "a100"}) == []


def test_check_fails_on_them_and_reads_a_bad_nvml_map_as_a_problem(tmp_path):
    bad = tmp_path / "nvml.csv"
    bad.write_text("name,type\n")
    cfg = config.from_dict({"cluster": {"partitions": ["gpu-typo"]}, "profiling": {"nvml_map": str(bad)},
                            "daemon": {"database": str(tmp_path / "s.sqlite")}})
    out = PF.check({}, SNAP, cfg, qos={}, partitions={}, slurm_conf=None, site={})
    problems = {f.what for f in out if f.level == PF.PROBLEM}
    assert {"cluster.partitions", "profiling.nvml_map"} <= problems
