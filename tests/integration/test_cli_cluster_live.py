"""``slurm-fair cluster`` / ``slurm-fair jobs`` as a user runs them, against the real testbed."""

from __future__ import annotations

import json
import sys

CLI = [sys.executable, "-c", "from slurm_fair.cli import main; main()"]


def test_cluster_json_shows_the_testbed(testbed):
    out = testbed.run([*CLI, "cluster", "--json"]).stdout
    doc = json.loads(out)
    assert doc["slurm_version"].startswith(testbed.slurm_series + ".")
    assert {t: v["total"] for t, v in doc["gpu_types"].items()} == {"a100": 4, "v100": 6, "k80": 6}
    assert all(v["unusable"] == 0 for v in doc["gpu_types"].values())
    assert {a: doc["accounts"][a]["shares"] for a in ("acct_a", "acct_b", "acct_c")} == {
        "acct_a": 1, "acct_b": 1, "acct_c": 2}
    assert set(doc["accounts"]) == {"acct_a", "acct_b", "acct_c"}
    assert all(doc["accounts"][a]["limits"] == {} for a in doc["accounts"])


def test_cluster_table_and_jobs_with_a_limit_and_jobs(testbed):
    testbed.sacctmgr("modify", "account", "where", "name=acct_b", "set", "GrpTRES=gres/gpu:k80=3")
    run = testbed.sbatch(account="acct_a", gpus=2, gpu_type="a100", name="cli-run", comment="fair:class=bert")
    held = testbed.sbatch(account="acct_b", gpus=1, name="cli-held", extra=["--hold"])
    testbed.wait_state(run, "RUNNING")
    doc = json.loads(testbed.run([*CLI, "cluster", "--json"]).stdout)
    assert doc["gpu_types"]["a100"]["allocated"] == 2
    assert doc["accounts"]["acct_a"]["in_use"] == {"a100": 2}
    assert doc["accounts"]["acct_b"]["limits"] == {"k80": 3}
    assert doc["accounts"]["acct_b"]["pending"] == {"untyped": 1}
    table = testbed.run([*CLI, "cluster"]).stdout
    assert "a100" in table and "k80:3" in table and "untyped:1" in table

    jobs = json.loads(testbed.run([*CLI, "jobs", "--json"]).stdout)["jobs"]
    by_id = {j["job_id"]: j for j in jobs}
    assert (by_id[run]["state"], by_id[run]["gpu_type"], by_id[run]["comment"], by_id[run]["user"]) == (
        "RUNNING", "a100", "fair:class=bert", "alice")
    assert (by_id[held]["state"], by_id[held]["gpu_type"], by_id[held]["reason"]) == ("PENDING", None, "JobHeldUser")
    table = testbed.run([*CLI, "jobs", "--state", "pending"]).stdout
    assert "cli-held" in table and "cli-run" not in table and "untyped" in table


def test_unreachable_prints_error_without_traceback(testbed, tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("\n".join("SlurmctldPort=9" if line.startswith("SlurmctldPort=") else line
                              for line in open(testbed.env["SLURM_CONF"]).read().splitlines()) + "\n")
    tmp_path.chmod(0o755)
    r = testbed.run([*CLI, "jobs", "--timeout", "3"], check=False, env={"SLURM_CONF": str(conf)})
    assert r.returncode == 1
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    assert "no answer within 3 s" in r.stderr or "Unable to contact slurm controller" in r.stderr
    r = testbed.run([*CLI, "cluster", "--backend", "nope"], check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr
