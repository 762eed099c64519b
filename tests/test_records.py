"""The typed round record (slurm_fair/records.py): one place to and from JSON, lenient with other versions."""

from __future__ import annotations

import json

from slurm_fair import config
from slurm_fair.daemon.round import run_round
from slurm_fair.records import PreemptionSummary, RoundDetails
from slurm_fair.sim.cluster import SimCluster, cluster_spec
from slurm_fair.sim.traces import TraceJob
from slurm_fair.store import Round, Store

THR = {"fast": {"k80": 1.0, "v100": 3.0}, "flat": {"k80": 1.0, "v100": 2.0}}


def _round(tmp_path, **sections):
    jobs = [TraceJob(f"{a}{i}", 0.0, a, c, 1, 1e6) for i in range(4) for a, c in (("a", "fast"), ("b", "flat"))]
    cfg = config.from_dict({"daemon": {"database": str(tmp_path / "s.sqlite"), "dry_run": False}, **sections})
    store = Store(cfg.database_path)
    cluster = SimCluster(cluster_spec("k80=2,v100=2", 2), {"a": 1, "b": 1}, THR, jobs, epoch=1.7e9)
    cluster.advance(0.0)
    return store, run_round(cluster, store, cfg, "oef-coop", now=cluster.clock())


def test_a_round_stores_its_record_and_reads_it_back_unchanged(tmp_path):
    store, res = _round(tmp_path, preemption={"enabled": True})
    d = res.details
    assert isinstance(d, RoundDetails) and isinstance(d.preemption, PreemptionSummary)
    assert d.policy == "oef-coop" and set(d.accounts) == {"a", "b"} and d.capacity == {"k80": 2, "v100": 2}
    stored = store.round().details
    assert stored == json.loads(json.dumps(d.to_json()))  # what the store holds is the record's JSON
    back = RoundDetails.of_round(store.round())
    assert back.to_json() == stored  # and reads back to the same record
    assert back.real == d.real and back.preemption.failed == []
    # optional parts the round did not have are not written at all
    assert "apply_error" not in stored and "type_map_error" not in stored and "status_file_error" not in stored


def test_keys_of_another_version_are_kept_and_missing_ones_read_as_defaults():
    newer = {"policy": "gavel", "accounts": ["x"], "from_a_newer_daemon": {"k": 1}}
    d = RoundDetails.from_json(newer)
    assert d.policy == "gavel" and d.accounts == ["x"] and d.real == {} and d.lend is False and d.preemption is None
    assert d.other == {"from_a_newer_daemon": {"k": 1}}
    assert d.to_json()["from_a_newer_daemon"] == {"k": 1}
    # a failed round has no details; a damaged container reads as an empty one, not as a crash in a reader
    assert RoundDetails.of_round(Round(1, 0.0, None, "gavel", "", "error", None, None, None, None, None)).accounts == []
    assert RoundDetails.of_round(None).capacity == {}
    assert RoundDetails.from_json({"capacity": None, "in_use": [1, 2], "accounts": "ab"}).in_use == {}
    assert RoundDetails.from_json({"capacity": None}).capacity == {}
    assert RoundDetails.from_json({"accounts": "ab"}).accounts == []


def test_the_preemption_summary_keeps_the_held_back_key_of_the_store():
    raw = {"over": {}, "waiting": {}, "upgrades": 0, "skipped": [], "signalled": [], "requeued": [], "resolved": [],
           "gone": [], "failed": [], "held-back": [{"job_id": 7, "account": "a", "gpu_type": "v100", "gpus": 1,
                                                   "reason": "r"}], "cancelled": []}
    p = PreemptionSummary.from_json(raw)
    assert p.held_back[0]["job_id"] == 7 and p.steps("held-back") == p.held_back and p.steps("would") == []
    assert p.to_json() == raw
