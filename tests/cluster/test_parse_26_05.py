"""The parsers on Slurm 26.05.5 (``data_parser/v0.0.45``, Debian forky), against outputs recorded by
tests/fixtures/slurm-json/capture.sh on the forky testbed (``testbed.sh --release forky``).

v0.0.45 removed the fields v0.0.44 had deprecated; of those the job and node records lost ``power`` (and nodes
``external_sensors`` and ``tres_weighted``), none of which slurm-fair reads. What it reads kept its name and shape
(numbers as ``{"set", "infinite", "number"}``, states as lists, ``gres/gpu:`` request strings), and
``sinfo --json`` is still the grouped summary, so nodes come from ``scontrol show node --json`` as on 24.11.
The GPU request forms and allocations are checked on this capture by tests/cluster/test_parse.py
(``REQUEST_LAYOUTS``); this file checks the rest.
"""

from __future__ import annotations

import json

import pytest

from slurm_fair.cluster import ANY_GPU, ParseError, Snapshot
from slurm_fair.cluster import parse as P
from slurm_fair.cluster import sacctmgr, slurm_json
from tests.conftest import text

V = "26.05"


def ids(name: str = "requests.txt") -> dict[str, int]:
    return {k: int(v) for k, _, v in (line.partition("=") for line in text(V, name).splitlines()) if k}


def test_version_and_envelope_of_data_parser_v0_0_45():
    assert slurm_json.parse_version_output(text(V, "version.txt")) == "26.05.5"
    plain = json.loads(text(V, "squeue_requests.json"))
    complex_ = json.loads(text(V, "squeue_requests_complex.json"))
    assert slurm_json.slurm_version(plain["meta"]) == "26.05.5"
    assert plain["meta"]["plugin"]["data_parser"] == "data_parser/v0.0.45"
    assert complex_["meta"]["plugin"]["data_parser"] == "data_parser/v0.0.45+complex"
    # the fields v0.0.45 dropped are really gone from this capture (so the parse below works without them)
    assert all("power" not in rec for rec in plain["jobs"])


def test_plain_and_complex_layouts_give_the_same_jobs():
    plain = P.parse_jobs(text(V, "squeue_requests.json"))
    complex_ = P.parse_jobs(text(V, "squeue_requests_complex.json"))
    assert len(plain) == 11  # 12 submitted, the CPU-only one is not a GPU job
    shape = [(j.job_id, j.gpus, j.gpu_type, j.state, j.reason, j.nodes, dict(j.gpus_allocated), j.comment, j.wckey,
              j.priority, j.submit_time, j.start_time, j.requeue, j.time_limit, j.blocked) for j in plain]
    assert shape == [(j.job_id, j.gpus, j.gpu_type, j.state, j.reason, j.nodes, dict(j.gpus_allocated), j.comment,
                      j.wckey, j.priority, j.submit_time, j.start_time, j.requeue, j.time_limit, j.blocked)
                     for j in complex_]


def test_held_and_pending_jobs_and_site_factor():
    jobs = {j.job_id: j for j in P.parse_jobs(text(V, "squeue_requests.json"),
                                              site_factors=P.parse_sprio(text(V, "sprio.txt")))}
    i = ids()
    pend = jobs[i["pend_assoc_v100"]]
    assert (pend.state, pend.reason, pend.site_factor, pend.comment) == ("PENDING", "AssocGrpGRES", 123,
                                                                       "fair:class=bert")
    held = jobs[i["held_gres_typed_2"]]
    assert (held.state, held.reason, held.blocked) == ("PENDING", "JobHeldUser", "held")
    assert held.time_limit is None  # MaxTime=INFINITE: {"infinite": true} (plain) and "Infinity" (+complex)
    run = jobs[i["run_gpus_typed_2"]]
    assert run.start_time is not None and run.start_time >= run.submit_time > 1.7e9


def test_nodes_from_scontrol_show_node_with_one_drained():
    nodes = {n.name: n for n in P.parse_nodes(text(V, "scontrol_node_requests.json"))}
    assert {n: dict(x.gpus) for n, x in nodes.items()} == {
        "a100-1": {"a100": 4}, "v100-1": {"v100": 4}, "k80-1": {"k80": 4}, "mixed-1": {"v100": 2, "k80": 2}}
    assert "DRAIN" in nodes["k80-1"].state and not nodes["k80-1"].usable
    assert all(nodes[n].usable for n in ("a100-1", "v100-1", "mixed-1"))
    snap = Snapshot("26.05.5", 0.0, tuple(nodes.values()), (), (), P.partitions_of(nodes.values()))
    assert snap.partitions == ("gpu",)
    assert {t: u.total for t, u in snap.gpu_types().items()} == {"a100": 4, "k80": 6, "v100": 6}
    assert snap.gpu_types()["k80"].unusable == 4


def test_sinfo_json_is_still_the_grouped_summary():
    with pytest.raises(ParseError, match="scontrol show node --json"):
        P.parse_nodes(text(V, "sinfo_requests.json"))


def test_accounts_and_limits():
    accts = {a.name: a for a in sacctmgr.parse_assoc(text(V, "sacctmgr_assoc_fmt_limits.txt"))}
    assert set(accts) == {"acct_a", "acct_b", "acct_c"}
    assert dict(accts["acct_a"].limits) == {"v100": 2, ANY_GPU: 5}
    assert dict(accts["acct_b"].limits) == {"k80": 0}
    assert [accts[a].shares for a in ("acct_a", "acct_b", "acct_c")] == [1, 1, 2]
