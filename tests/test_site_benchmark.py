"""The pure parts of benchmarks/site_round.py (the benchmark itself needs a testbed)."""

from __future__ import annotations

from collections import Counter

from benchmarks import site_probe as S
from benchmarks import site_report as report
from benchmarks import site_round as B

SDIAG = """*******************************************************
sdiag output at Thu Nov 26 09:16:15 2026 (1795684575)
*******************************************************
Server thread count:  3

Remote Procedure Call statistics by message type
\tMESSAGE_NODE_REGISTRATION_STATUS        ( 1002) count:4      ave_time:272    total_time:1091
\tREQUEST_NODE_INFO                       ( 2007) count:2      ave_time:340    total_time:681
\tREQUEST_STATS_INFO                      ( 2035) count:1      ave_time:150    total_time:150

Remote Procedure Call statistics by user
\troot            (       0) count:7      ave_time:274    total_time:1922

Pending RPC statistics
\tNo pending RPCs
"""


def test_parse_sdiag_and_diff():
    a = S.parse_sdiag(SDIAG)
    assert a["types"]["REQUEST_NODE_INFO"] == [2, 681]
    assert a["users"] == {"root": [7, 1922]}
    b = S.parse_sdiag(SDIAG.replace("count:2      ave_time:340    total_time:681",
                                    "count:5      ave_time:340    total_time:1700")
                      .replace("count:1      ave_time:150    total_time:150", "count:2      ave_time:150    total_time:300")
                      .replace("count:7 ", "count:11 "))
    d = S.sdiag_diff(a, b)
    assert d["types"] == {"REQUEST_NODE_INFO": [3, 1019]}  # the later sdiag's own REQUEST_STATS_INFO removed
    assert d["rpcs"] == 3 and d["total_us"] == 1019
    assert d["users"]["root"][0] == 4
    # a counter that went down (sdiag --reset) counts from zero
    assert S.sdiag_diff(b, a)["types"]["REQUEST_NODE_INFO"] == [2, 681]


def test_call_kind():
    assert S.call_kind(["sacctmgr", "-i", "modify", "account", "where", "name=a"]) == "sacctmgr modify"
    assert S.call_kind(["sacctmgr", "-P", "-n", "show", "assoc"]) == "sacctmgr show"
    assert S.call_kind(["scontrol", "update", "jobid=1", "sitefactor=3"]) == "scontrol update"
    assert S.call_kind(["scontrol", "--version"]) == "scontrol --version"
    assert S.call_kind(["squeue", "--json"]) == "squeue"
    assert S.calls_by_kind([("squeue", 1.0, True), ("squeue", 0.5, False)]) == {"squeue": [2, 1.5, 1]}


def test_bands():
    acct = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c"}
    b = S.bands({1: 90, 2: 80, 3: 50, 4: 60, 5: 10}, acct)
    assert (b["accounts"], b["distinct_values"], b["accounts_overlapping"], b["jobs"]) == (3, 5, 0, 5)
    b = S.bands({1: 90, 2: 55, 3: 50, 4: 60, 5: 10}, acct)  # a's range 55..90 meets b's 50..60
    assert b["accounts_overlapping"] == 2
    assert S.bands({}, {})["accounts"] == 0


def test_order_kept():
    acct = {1: "a", 2: "b", 3: "c"}
    assert B.order_kept({1: 30, 2: 20, 3: 10}, {1: 300, 2: 200, 3: 100}, acct) == 1.0
    assert B.order_kept({1: 30, 2: 20, 3: 10}, {1: 100, 2: 200, 3: 300}, acct) == 0.0
    assert B.order_kept({}, {}, {}) is None


def test_tree_and_jobs():
    tree = B.make_tree(300, 10, 3)
    leaves = B.leaf_user(tree)
    assert len(tree["depts"]) == 10 and len(tree["leaves"]) == 30 and len(leaves) == 300
    assert all(len(v) == 10 for v in tree["leaves"].values())
    assert all(B.OURS.match(n) for n in [*tree["depts"], *tree["leaves"], *leaves])
    assert not B.OURS.match("acct_a") and not B.OURS.match("sfbx")
    subs = B.plan_jobs(tree, 5000, ["a100", "v100", "k80"], 0.25, 0.8, 1, seed=0)
    assert sum(s["tasks"] for s in subs) == 5000 == len(subs)
    per = Counter(s["account"] for s in subs)
    assert set(per) == set(leaves)  # every leaf has at least one job
    assert any(":" not in s["gres"][4:] for s in subs)  # untyped requests too
    arrays = B.plan_jobs(tree, 5000, ["a100"], 0.0, 0.8, 50, seed=0)
    assert sum(s["tasks"] for s in arrays) == 5000 and len(arrays) < 5000
    argv = B.sbatch_argv(arrays[0], 60, hold=True)
    assert argv[0] == "sbatch" and "--hold" in argv and argv[-2:] == ["--wrap", "sleep 60"]
    small = B.make_tree(12, 2, 2)
    assert len(B.leaf_user(small)) == 12 and len(small["leaves"]) == 4


def test_report_renders_a_result():
    rnd = {"round": 1, "variant": "default", "status": "ok", "message": "", "seconds": 2.0, "wall": 2.0,
           "phases": {"observe": 1.0, "solve": 0.1, "plan": 0.2}, "calls": {"squeue": [1, 0.5, 0]},
           "window": {"seconds": 4.0, "sdiag": {"types": {"REQUEST_JOB_INFO": [1, 500]}, "users": {}, "rpcs": 1,
                                                 "total_us": 500},
                      "cpu": {"slurmctld": 0.2}, "load": 1.0},
           "peak_rss_kb": 131072, "pending_records": 10, "running_records": 2, "accounts_seen": 5,
           "managed_accounts": 3, "limit_accounts": 1, "limit_keys": 2, "factor_changes": 10, "factors_deferred": 0,
           "factors_planned": 10, "bands_planned": {"distinct_values": 10, "accounts": 3, "accounts_overlapping": 0},
           "type_map_lines": {"lines": 4, "bytes": 100}}
    result = {"args": {"array_size": 1, "types": "a100", "untyped": 0.25, "skew": 0.8, "policy": "", "period": 300.0,
                       "gap": 5.0},
              "started": "now", "cpus": 2, "load_before": [1.0, 1.0, 1.0],
              "slurm": {"version": "22.05.8", "MaxJobCount": 10000, "MaxArraySize": 1001, "MinJobAge": "300",
                        "SchedulerParameters": ""},
              "rounds": {"import_s": 0.2, "rounds": [rnd],
                         "polls": [{"seconds": 1.0, "interval": 5.0, "calls": {"squeue": [1, 0.5, 0]},
                                    "window": rnd["window"]}]}}
    text = report.render(result)
    assert "**round wall s** | **2.00**" in text and "`squeue` calls (s) | 1 (0.50)" in text
    assert "per daemon.period of 300 s" in text
