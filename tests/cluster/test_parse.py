"""Unit tests of slurm_fair.cluster.parse (and its neighbours slurm_json, gres, sacctmgr) against real outputs
recorded from Slurm 22.05.8 and 24.11.5 (26.05.5: REQUEST_LAYOUTS here, the rest in test_parse_26_05.py).

Fixtures (tests/fixtures/slurm-json/<version>/):
* squeue.json, sinfo.json / scontrol_node.json, sacctmgr_assoc.txt, jobs.txt: the shared captures
  (/work/shared/data/slurm-json), job names in jobs.txt;
* *_requests.*, sprio.txt, sacctmgr_assoc_fmt_limits.txt, requests.txt: recorded by capture.sh on the
  project testbed (GPU request forms, multi-node, drained node, typed + untyped GrpTRES, SiteFactor).
"""

from __future__ import annotations

import json
import math

import pytest

from slurm_fair.cluster import ANY_GPU, ParseError, Snapshot
from slurm_fair.cluster import gres, sacctmgr, slurm_json
from slurm_fair.cluster import parse as P
from tests.conftest import SLURM_JSON, VERSIONS, text

FIX = SLURM_JSON
NODE_FILE = {"22.05": "sinfo.json", "24.11": "scontrol_node.json"}
NODE_REQ_FILE = {"22.05": "sinfo_requests.json", "24.11": "scontrol_node_requests.json"}



def ids(version: str, name: str) -> dict[str, int]:
    out = {}
    for line in text(version, name).splitlines():
        k, _, v = line.partition("=")
        out[k.strip()] = int(v)
    return out


def by_name(version: str, jobs_file: str, ids_file: str) -> dict[str, object]:
    jobs = {j.job_id: j for j in P.parse_jobs(text(version, jobs_file))}
    return {name: jobs.get(jid) for name, jid in ids(version, ids_file).items()}


# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_shared_capture_jobs_every_field(version):
    jobs = by_name(version, "squeue.json", "jobs.txt")
    # finished jobs (COMPLETED, FAILED, CANCELLED) are dropped, in 22.05 where squeue --json lists them too
    assert jobs["completed"] is None and jobs["failed"] is None and jobs["cancelled"] is None
    j = jobs["run_typed_gres"]
    assert (j.name, j.account, j.user, j.partition, j.state, j.reason) == (
        "st_run_typed_gres", "acct_a", "root", "gpu", "RUNNING", "None")
    assert (j.gpus_per_node, j.nodes, j.gpus, j.gpu_type) == (1, 1, 1, "v100")
    assert dict(j.gpus_allocated) == {"v100": 1}
    assert j.comment == "fair:class=resnet50" and j.wckey == "" and j.restart_count == 0
    assert j.priority == 1 and j.submit_time > 1.7e9 and j.start_time >= j.submit_time
    assert j.running and not j.pending

    p = jobs["pend_assocgrpgres"]
    assert (p.state, p.reason, p.priority, p.gpu_type, p.gpus) == ("PENDING", "AssocGrpGRES", 4990, "v100", 1)
    assert p.start_time is None and dict(p.gpus_allocated) == {} and p.pending
    # typed via --gpus (tres_per_job)
    assert (jobs["run_typed_gpus"].gpu_type, jobs["run_typed_gpus"].gpus) == ("v100", 1)
    # untyped running jobs: the real type comes from the allocation
    assert jobs["run_untyped_gres"].gpu_type is None
    assert dict(jobs["run_untyped_gres"].gpus_allocated) == {"a100": 1}
    assert jobs["run_untyped_gpus"].gpu_type is None
    assert dict(jobs["run_untyped_gpus"].gpus_allocated) == {"k80": 1}
    # QOS jobs, other partition
    assert (jobs["run_qos_mixed"].partition, jobs["run_qos_mixed"].priority) == ("mixed", 10000)
    assert jobs["pend_qosgrpgres"].reason == "QOSGrpGRES"
    # held untyped --gpus-per-node=2
    h = jobs["held_untyped"]
    assert (h.state, h.reason, h.gpus_per_node, h.gpu_type) == ("PENDING", "JobHeldUser", 2, None)
    # a held array not yet split is one record
    a = jobs["array_held"]
    assert (a.gpu_type, a.gpus, a.reason) == ("a100", 1, "JobHeldUser")
    assert len(P.parse_jobs(text(version, "squeue.json"))) == 9


def test_24_11_squeue_all_filters_finished():
    all_jobs = json.loads(text("24.11", "squeue_all.json"))["jobs"]
    assert len(all_jobs) == 16
    kept = P.parse_jobs(text("24.11", "squeue_all.json"))
    assert {j.state for j in kept} == {"PENDING", "RUNNING"} and len(kept) == 9


REQUEST_LAYOUTS = [("22.05", "squeue_requests.json"), ("24.11", "squeue_requests.json"),
                   ("24.11", "squeue_requests_complex.json"),  # --json=v0.0.42+complex
                   ("26.05", "squeue_requests.json"),  # data_parser/v0.0.45 (the rest: test_parse_26_05.py)
                   ("26.05", "squeue_requests_complex.json")]  # --json=v0.0.45+complex


@pytest.mark.parametrize("version,jobs_file", REQUEST_LAYOUTS)
def test_gpu_request_forms(version, jobs_file):
    jobs = by_name(version, jobs_file, "requests.txt")

    def shape(name):
        j = jobs[name]
        return j.gpus_per_node, j.nodes, j.gpus, j.gpu_type

    assert shape("held_gres_untyped_2") == (2, 1, 2, None)  # --gres=gpu:2
    assert shape("held_gres_typed_2") == (2, 1, 2, "v100")  # --gres=gpu:v100:2
    assert shape("held_gpus_typed_2") == (2, 1, 2, "v100")  # --gpus=v100:2
    assert shape("held_gpus_per_node_2") == (2, 1, 2, None)  # --gpus-per-node=2
    assert shape("held_gpus_per_task") == (2, 1, 2, None)  # -n2 --gpus-per-task=1
    assert shape("pend_assoc_k80_2node") == (1, 2, 2, "k80")  # -N2 --gres=gpu:k80:1
    # -N2 --gpus=3: per node rounded up (documented limitation)
    assert shape("held_gpus_untyped_3_on_2nodes") == (2, 2, 4, None)
    assert shape("run_gpus_per_node_a100") == (1, 1, 1, "a100")  # --gpus-per-node=a100:1
    assert jobs["held_cpu_only"] is None  # no GPUs -> not listed


@pytest.mark.parametrize("version,jobs_file", REQUEST_LAYOUTS)
def test_running_allocations_and_other_fields(version, jobs_file):
    jobs = by_name(version, jobs_file, "requests.txt")
    multi = jobs["run_gres_untyped_2node"]  # -N2 --gres=gpu:1, landed on two node types
    assert (multi.state, multi.nodes, multi.gpus, multi.gpu_type) == ("RUNNING", 2, 2, None)
    assert sum(multi.gpus_allocated.values()) == 2 and len(multi.gpus_allocated) == 2
    t = jobs["run_gpus_typed_2"]
    assert dict(t.gpus_allocated) == {"v100": 2}
    assert (t.comment, t.wckey, t.account) == ("fair:class=resnet50", "wk1", "acct_a")
    assert jobs["pend_assoc_v100"].comment == "fair:class=bert"
    assert jobs["pend_assoc_v100"].reason == "AssocGrpGRES"
    # Slurm shows "*NAME" for a job given the user's default wckey; the name without the "*" (in the 26.05 capture
    # root's default was ct_wckey, the first wckey root used: the contract test's, run on that testbed before)
    assert jobs["held_gres_typed_2"].wckey == ("ct_wckey" if version == "26.05" else "")
    p = jobs["pend_assoc_v100"]
    assert p.priority > 0 and p.submit_time > 1.7e9 and p.start_time is None and p.user == "root"


def test_complex_layout_equals_default_layout():
    plain = P.parse_jobs(text("24.11", "squeue_requests.json"))
    complex_ = P.parse_jobs(text("24.11", "squeue_requests_complex.json"))
    assert [(j.job_id, j.gpus, j.gpu_type, j.state, j.nodes, dict(j.gpus_allocated), j.comment, j.wckey)
            for j in plain] == [(j.job_id, j.gpus, j.gpu_type, j.state, j.nodes, dict(j.gpus_allocated), j.comment,
                                 j.wckey) for j in complex_]
    assert [j.priority for j in plain] == [j.priority for j in complex_]


@pytest.mark.parametrize("version", VERSIONS)
def test_site_factor_from_sprio(version):
    site = P.parse_sprio(text(version, "sprio.txt"))
    pend = ids(version, "requests.txt")["pend_assoc_v100"]
    assert site[pend] == 123
    jobs = {j.job_id: j for j in P.parse_jobs(text(version, "squeue_requests.json"), site_factors=site)}
    assert jobs[pend].site_factor == 123
    assert all(j.site_factor == 0 for j in jobs.values() if j.job_id not in site or site[j.job_id] == 0)


@pytest.mark.parametrize("version", VERSIONS)
def test_nodes_both_layouts(version):
    nodes = {n.name: n for n in P.parse_nodes(text(version, NODE_FILE[version]))}
    assert set(nodes) == {"a100-1", "v100-1", "k80-1", "mixed-1"}
    m = nodes["mixed-1"]
    assert dict(m.gpus) == {"v100": 2, "k80": 2} and dict(m.gpus_allocated) == {"v100": 0, "k80": 1}
    assert m.state == ("MIXED",) and m.partitions == ("mixed",) and m.usable
    assert dict(nodes["v100-1"].gpus_allocated) == {"v100": 2}

    drained = {n.name: n for n in P.parse_nodes(text(version, NODE_REQ_FILE[version]))}
    assert "DRAIN" in drained["k80-1"].state and not drained["k80-1"].usable
    assert drained["v100-1"].state == ("IDLE",) and drained["v100-1"].usable
    snap = Snapshot("x", 0.0, tuple(drained.values()), (), (), P.partitions_of(drained.values()))
    usage = snap.gpu_types()
    assert {t: u.total for t, u in usage.items()} == {"a100": 4, "k80": 6, "v100": 6}
    assert usage["k80"].unusable == 4 and snap.capacity()["k80"] == 2
    assert snap.partitions == ("gpu",)


def test_24_11_sinfo_is_rejected_with_a_hint():
    with pytest.raises(ParseError, match="scontrol show node --json"):
        P.parse_nodes(text("24.11", "sinfo.json"))


@pytest.mark.parametrize("version", VERSIONS)
def test_accounts(version):
    accts = {a.name: a for a in sacctmgr.parse_assoc(text(version, "sacctmgr_assoc_fmt_limits.txt"))}
    assert set(accts) == {"acct_a", "acct_b", "acct_c"}  # root left out
    assert dict(accts["acct_a"].limits) == {"v100": 2, ANY_GPU: 5}
    assert dict(accts["acct_b"].limits) == {"k80": 0}
    assert dict(accts["acct_c"].limits) == {}
    assert [accts[a].shares for a in ("acct_a", "acct_b", "acct_c")] == [1, 1, 2]
    assert accts["acct_c"].users == ("carol", "root")
    # the shared capture: -P with a header and more columns
    shared = {a.name: a for a in sacctmgr.parse_assoc(text(version, "sacctmgr_assoc.txt"))}
    assert dict(shared["acct_a"].limits) == {"v100": 2} and shared["acct_b"].limits == {}


def test_assoc_cluster_filter_and_parent_share():
    out = "c1|acct_x||parent|gres/gpu=3\nc2|acct_y||4|\nc1|acct_x|u1|1|\n"
    accts = sacctmgr.parse_assoc(out, cluster="c1")
    assert [(a.name, a.shares, dict(a.limits), a.users) for a in accts] == [("acct_x", 0, {ANY_GPU: 3}, ("u1",))]


def test_versions_and_envelopes():
    assert slurm_json.parse_version_output(text("22.05", "version.txt")) == "22.05.8"
    assert slurm_json.parse_version_output(text("24.11", "version.txt")) == "24.11.5"
    assert slurm_json.slurm_version(json.loads(text("22.05", "squeue.json"))["meta"]) == "22.05.8"
    assert slurm_json.slurm_version(json.loads(text("24.11", "squeue.json"))["meta"]) == "24.11.5"


@pytest.mark.parametrize("value,expected", [
    (None, None), (7, 7), ({"set": True, "infinite": False, "number": 30}, 30),
    ({"set": False, "infinite": False, "number": 0}, None), ({"set": False, "infinite": True, "number": 0}, math.inf),
    ("Infinity", math.inf),
])
def test_num_both_layouts(value, expected):
    assert slurm_json.num(value) == expected


@pytest.mark.parametrize("spec,expected", [
    ("gres:gpu:2", [(None, 2)]), ("gres:gpu", [(None, 1)]), ("gres:gpu:v100", [("v100", 1)]),
    ("gres:gpu:v100:1", [("v100", 1)]), ("gres/gpu:2", [(None, 2)]), ("gres/gpu:v100:2", [("v100", 2)]),
    ("gres/gpu=1", [(None, 1)]), ("gres/gpu:v100=1", [("v100", 1)]), ("cpu=4,gres/gpu=1", [(None, 1)]),
    ("gres:mps:100", []), ("", []), ("N/A", []), ("gpu:k80:3", [("k80", 3)]),
])
def test_gpu_request_strings(spec, expected):
    assert gres.gpu_requests(spec) == expected


@pytest.mark.parametrize("spec,expected", [
    ("gpu:v100:2,gpu:k80:2", {"v100": 2, "k80": 2}),
    ("gpu:v100:0(IDX:N/A),gpu:k80:1(IDX:2)", {"v100": 0, "k80": 1}),
    (["gpu:v100:1(IDX:0)"], {"v100": 1}),
    (["gres:gpu:v100:1(IDX:0)", "gres:gpu:k80:2(IDX:0,2)"], {"v100": 1, "k80": 2}),
    ("gpu:a100:4(S:0-1)", {"a100": 4}),
    ("gpu:4", {"gpu": 4}),
    ("mps:100,gpu:v100:2", {"v100": 2}),
    ("(null)", {}),
])
def test_gres_strings(spec, expected):
    assert gres.gres_gpus(spec) == expected


def test_tres_strings():
    assert gres.tres_gpus("cpu=1,node=1,billing=1,gres/gpu=1,gres/gpu:v100=1") == (1, {"v100": 1})
    assert gres.tres_gpus("cpu=2,gres/gpu=2,gres/gpu:a100=1,gres/gpu:k80=1,gres/gpumem=0") == (2, {"a100": 1, "k80": 1})
    assert sacctmgr.grptres_limits("cpu=10,gres/gpu:v100=2,gres/gpu=5") == {"v100": 2, ANY_GPU: 5}


@pytest.mark.parametrize("call,match", [
    (lambda: P.parse_jobs("not json"), "squeue --json: output is not JSON"),
    (lambda: P.parse_jobs("[1]"), "expected a JSON object"),
    (lambda: P.parse_jobs('{"meta": {}}'), "no 'jobs' list"),
    (lambda: P.parse_jobs('{"jobs": [{"job_state": "PENDING"}]}'), r"jobs\[0\]: no job_id"),
    (lambda: P.parse_jobs('{"jobs": [{"job_id": 5}]}'), "job 5: no job_state"),
    (lambda: P.parse_jobs('{"jobs": [{"job_id": 5, "job_state": 3}]}'), "job 5.job_state"),
    (lambda: P.parse_jobs('{"jobs": [{"job_id": 5, "job_state": "PENDING", "tres_per_node": "gres:gpu:v100:x"}]}'),
     "job 5.tres_per_node: bad GPU count 'x'"),
    (lambda: P.parse_jobs('{"jobs": [{"job_id": 5, "job_state": "PENDING", "priority": "high"}]}'),
     "job 5.priority: expected a number"),
    (lambda: P.parse_jobs('{"errors": [{"error": "boom"}], "jobs": []}'), "Slurm reported errors"),
    (lambda: P.parse_nodes('{"nodes": [{"name": "n1"}]}'), "node n1: no state"),
    (lambda: P.parse_nodes('{"nodes": [{"name": "n1", "state": "idle", "gres": "gpu:v100:zz"}]}'),
     "node n1.gres"),
    (lambda: sacctmgr.parse_assoc("c|acct_a||1"), "sacctmgr line 1: expected at least 5"),
    (lambda: sacctmgr.parse_assoc("c|acct_a||lots|"), "account acct_a: bad fairshare 'lots'"),
    (lambda: sacctmgr.parse_assoc("c|acct_a||1|gres/gpu:v100=many"), "bad GPU limit 'gres/gpu:v100=many'"),
    (lambda: P.parse_sprio("12 34"), "sprio line 1"),
    (lambda: slurm_json.parse_version_output("huh"), "no version number"),
])
def test_garbage_raises_parse_error_naming_what(call, match):
    with pytest.raises(ParseError, match=match):
        call()


@pytest.mark.parametrize("version", VERSIONS)
def test_requeue_flag_both_layouts(version):
    doc = json.loads(text(version, "squeue.json"))
    jobs = P.parse_jobs(doc)
    assert jobs and all(j.requeue is True for j in jobs)  # the testbed runs JobRequeue=1
    rec = next(r for r in doc["jobs"] if r["name"] == "st_run_typed_gres")
    assert P.parse_job({**rec, "requeue": False}).requeue is False  # what --no-requeue shows
    assert P.parse_job({k: v for k, v in rec.items() if k != "requeue"}).requeue is False  # unknown: never assumed
    with pytest.raises(ParseError, match=r"requeue: expected true or false, got 'maybe'"):
        P.parse_job({**rec, "requeue": "maybe"})


@pytest.mark.parametrize("version", VERSIONS)
def test_a_job_says_it_checkpoints_by_its_comment_both_layouts(version):
    """squeue --json has no field for a job's --signal in either layout (only exit codes carry a signal; the
    22.05 testbed showed none in scontrol show job either): a job declares it checkpoints with the comment token
    fair:checkpoint, read from the comment both layouts give (Job.checkpoints, with requeue)."""
    doc = json.loads(text(version, "squeue.json"))
    for rec in doc["jobs"]:
        assert not [k for k in rec if "signal" in k or k.startswith("warn")]
    rec = next(r for r in doc["jobs"] if r["name"] == "st_run_typed_gres")
    assert not P.parse_job(rec).checkpoints
    comment = rec["comment"] if isinstance(rec["comment"], str) else ""
    job = P.parse_job({**rec, "comment": (comment + " fair:checkpoint").strip()})
    assert job.checkpoints and "fair:checkpoint" in job.comment
    assert not P.parse_job({**rec, "comment": "fair:checkpoint", "requeue": False}).checkpoints
