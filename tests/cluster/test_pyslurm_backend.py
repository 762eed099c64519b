"""The pyslurm backend's pure parts: legacy pyslurm records -> Job/Node, and the version/availability rules.

The fixture is real: ``pyslurm.job().get()`` / ``pyslurm.node().get()`` of pyslurm 22.5.3 on the Slurm
22.05.8 testbed.  None of this needs pyslurm installed (CI has none); the backend itself is exercised by the
contract suite (tests/integration/test_cluster_contract.py) where pyslurm is installed.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from slurm_fair.cluster import Unsupported, connect, parse
from slurm_fair.cluster import pyslurm_backend as pb
from slurm_fair.cluster.cli import CliCluster

FIX = json.loads((Path(__file__).parents[1] / "fixtures" / "pyslurm-22.5" / "legacy.json").read_text())
HAVE_PYSLURM = importlib.util.find_spec("pyslurm") is not None


@pytest.fixture
def known_users(monkeypatch):
    # the testbed's Unix users do not exist here: prefill the uid -> name cache from the fixture
    monkeypatch.setattr(pb, "_users", {int(uid): name for uid, name in FIX["users"].items()})


def _jobs():
    recs = [pb._job_record(r) for r in FIX["jobs"].values()]
    return {j.job_id: j for j in parse.parse_jobs({"jobs": recs}, site_factors={27: 40}, what="fixture")}


def test_legacy_jobs_parse_like_squeue(known_users):
    jobs = _jobs()
    assert sorted(jobs) == [27, 29, 30]  # failed jobs 25/26/28 and the CPU-only job 31 are dropped
    run = jobs[29]  # --gpus=a100:2: the new API's gres_per_node is empty for it, tres_per_job is not
    assert (run.state, run.user, run.account, run.gpus, run.gpu_type, run.name, run.comment) == (
        "RUNNING", "alice", "acct_a", 2, "a100", "fx-run", "fair:class=resnet50")
    assert dict(run.gpus_allocated) == {"a100": 2} and run.start_time and run.partition == "gpu"
    gres = jobs[30]  # --gres=gpu:v100:1
    assert (gres.gpus_per_node, gres.gpu_type, dict(gres.gpus_allocated)) == (1, "v100", {"v100": 1})
    held = jobs[27]  # --gpus=3 --hold --wckey=fx_wckey
    assert (held.state, held.reason, held.user, held.gpus, held.gpu_type, held.wckey, held.site_factor) == (
        "PENDING", "JobHeldUser", "bob", 3, None, "fx_wckey", 40)
    assert held.start_time is None and dict(held.gpus_allocated) == {}
    assert run.wckey == ""  # pyslurm gives '*' for no wckey
    assert all(j.requeue for j in jobs.values())  # pyslurm's bool 'requeue' (JobRequeue=1 on the testbed)
    flipped = pb._job_record({**FIX["jobs"]["29"], "requeue": False})
    assert parse.parse_job(flipped).requeue is False


def test_legacy_nodes_parse_with_drain_and_used_gres():
    nodes = {n.name: n for n in parse.parse_nodes({"nodes": [pb._node_record(r) for r in FIX["nodes"].values()]})}
    assert {n: dict(x.gpus) for n, x in nodes.items()} == {
        "a100-1": {"a100": 4}, "k80-1": {"k80": 4}, "mixed-1": {"v100": 2, "k80": 2}, "v100-1": {"v100": 4}}
    assert nodes["k80-1"].state == ("IDLE", "DRAIN") and not nodes["k80-1"].usable
    assert dict(nodes["a100-1"].gpus_allocated) == {"a100": 2}
    assert dict(nodes["mixed-1"].gpus_allocated) == {"v100": 1, "k80": 0}
    assert all(n.partitions == ("gpu",) for n in nodes.values())


def test_unknown_uid_falls_back_to_the_number(monkeypatch):
    monkeypatch.setattr(pb, "_users", {})
    assert pb._user_name(2_000_000_000) == "2000000000"


def test_major_minor_comparison():
    assert pb._major("22.5.3") == pb._major("22.05.8") == (22, 5)
    assert pb._major("25.11.2") != pb._major("22.05.8")


@pytest.mark.skipif(HAVE_PYSLURM, reason="pyslurm is installed here")
def test_without_pyslurm_connect_explains_and_auto_uses_cli():
    with pytest.raises(Unsupported, match=r"pyslurm.*not installed.*use backend='cli'"):
        connect("pyslurm", env={"PATH": "/nonexistent"})
    assert isinstance(connect("auto", env={"PATH": "/nonexistent"}), CliCluster)
    assert "not installed" in pb.unavailable_reason(CliCluster(env={}))


@pytest.mark.skipif(not HAVE_PYSLURM, reason="needs pyslurm installed")
def test_missing_slurm_conf_is_refused_before_importing(tmp_path):
    # importing pyslurm runs slurm_init(), which aborts the process on a missing slurm.conf
    cli = CliCluster(env={"SLURM_CONF": str(tmp_path / "nope.conf")})
    assert "does not exist" in pb.unavailable_reason(cli)
