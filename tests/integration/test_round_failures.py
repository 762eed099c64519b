"""One bad record never stops a round (issue 10, item 4), on the real testbed:

* an account named ``bad acct`` (Slurm 22.05 creates it; the CLI backend refuses such a name),
* a Slurm command that fails for one call only (a ``sacctmgr`` shim on PATH fails the first ``modify`` that
  names acct_c, then runs the real one),
* the store locked by another connection (a write transaction held for 2 s) while the next round runs.

Each failure is recorded on its round with its cause, the other accounts' limits reach Slurm, and the next
round runs and catches up.
"""

from __future__ import annotations

import shutil
import sqlite3
import threading
import time

from slurm_fair import config as config_mod
from slurm_fair.cluster.base import ANY_GPU
from slurm_fair.cluster.cli import CliCluster
from slurm_fair.daemon.round import run_round
from slurm_fair.store import Store

BAD = "bad acct"


def limits_in_slurm(testbed) -> dict[str, dict[str, int]]:
    return testbed.gpu_limits(("acct_a", "acct_b", "acct_c", BAD))


def planned_limits(store: Store, round_id: int) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for p in store.placements(round_id):
        out.setdefault(p.account, {})[p.gpu_type] = p.limit
    for row in out.values():
        row[ANY_GPU] = sum(row.values())
    return out


def test_bad_account_failing_call_and_locked_store_are_recorded_and_the_rest_applies(testbed, tmp_path):
    testbed.sacctmgr("add", "account", BAD, "fairshare=1")
    try:
        shim = tmp_path / "bin"
        shim.mkdir()
        marker = tmp_path / "sacctmgr-failed-once"
        real = shutil.which("sacctmgr", path=testbed.env.get("PATH"))
        assert real, "sacctmgr not on PATH"
        (shim / "sacctmgr").write_text(
            "#!/bin/sh\n"
            f'case " $* " in *" modify "*acct_c*) if [ ! -e "{marker}" ]; then : > "{marker}"; '
            "echo 'sacctmgr: error: injected failure for this call' >&2; exit 1; fi;; esac\n"
            f'exec "{real}" "$@"\n')
        (shim / "sacctmgr").chmod(0o755)
        env = dict(testbed.env, PATH=f"{shim}:{testbed.env.get('PATH', '/usr/bin:/bin')}")
        cfg_file = tmp_path / "slurm-fair.toml"
        # hard caps (limits.lend = false): every account gets limits to write, so the failures have calls to hit
        cfg_file.write_text('[daemon]\ndatabase = "sf.sqlite"\ndry_run = false\n[policy]\nname = "oef-noncoop"\n'
                            '[cluster]\nbackend = "cli"\ntimeout = 30\n[limits]\nlend = false\n')
        cfg = config_mod.load(cfg_file)
        cluster = CliCluster(timeout=30, env=env)
        store = Store(cfg.database_path)
        testbed.sbatch(account="acct_a", gpus=1, gpu_type="v100", name="resnet50-bs64")
        testbed.sbatch(account="acct_c", gpus=1, gpu_type="a100", name="resnet50-bs64")
        testbed.wait_scheduled()

        # round 1: the bad name and the failing sacctmgr call are isolated; acct_a and acct_b are applied
        r1 = run_round(cluster, store, cfg)
        row1 = store.round(r1.round_id)
        assert r1.status == "ok" and row1.status == "ok", (row1.message, row1.details)
        fails = row1.details["apply_failures"]
        assert set(fails) == {BAD, "acct_c"}, fails
        assert "must be a Slurm account name" in fails[BAD]
        assert "injected failure for this call" in fails["acct_c"]
        assert BAD in row1.message and "injected failure" in row1.message
        assert row1.details["apply_batch_errors"], "the whole batch failed first, then each account alone"
        events = {(e.account, e.kind) for e in store.events(kind="apply-failed")}
        assert events == {(BAD, "apply-failed"), ("acct_c", "apply-failed")}
        plan1 = planned_limits(store, r1.round_id)
        slurm = limits_in_slurm(testbed)
        for a in ("acct_a", "acct_b"):
            assert slurm[a] == plan1[a], (a, slurm[a], plan1[a])
        assert slurm["acct_c"] == {} and slurm[BAD] == {}
        assert {r.account for r in store.applied(r1.round_id)} == {"acct_a", "acct_b"}
        assert "acct_c" not in store.deviations()  # its limits did not change: its deviation was not advanced

        # round 2 while another connection holds the write lock for 2 s: it waits, applies acct_c, records
        locked, times = threading.Event(), {}

        def hold() -> None:
            other = sqlite3.connect(str(cfg.database_path), isolation_level=None)
            other.execute("BEGIN IMMEDIATE")
            other.execute("insert into events (time, kind, message) values (?, 'test', 'held the lock')",
                          [time.time()])
            locked.set()
            time.sleep(2.0)
            other.execute("COMMIT")
            times["released"] = time.time()
            other.close()

        t = threading.Thread(target=hold)
        t.start()
        assert locked.wait(10)
        r2 = run_round(cluster, store, cfg)
        t.join()
        row2 = store.round(r2.round_id)
        assert r2.status == "ok" and row2.status == "ok", row2
        assert row2.started >= times["released"] - 0.05  # begin_round waited for the other writer
        assert set(row2.details["apply_failures"]) == {BAD}  # acct_c went through this time
        slurm = limits_in_slurm(testbed)
        plan2 = planned_limits(store, r2.round_id)
        for a in ("acct_a", "acct_b", "acct_c"):
            assert slurm[a] == plan2[a], (a, slurm[a], plan2[a])
        assert [r.status for r in store.rounds(limit=5)] == ["ok", "ok"]
        store.close()
    finally:
        testbed.sacctmgr("delete", "account", BAD, check=False)


def site_factor(testbed, job_id: int) -> int:
    out = testbed.run(["sprio", "-h", "-j", str(job_id), "-o", "%S"], check=False).stdout.split()
    return int(out[0]) if out and out[0].isdigit() else -1


def test_a_job_gone_before_its_site_factor_is_set_leaves_the_other_jobs_set(testbed, tmp_path):
    """A pending job cancelled between the round's snapshot and its apply (a job that ends meanwhile, the
    everyday case): Slurm refuses its SiteFactor update; the other pending jobs still get theirs."""
    fill = [testbed.sbatch(account="acct_b", gpus=1, gpu_type="k80", name="resnet50-bs64") for _ in range(6)]
    for j in fill:  # every k80 busy: the next k80 jobs pend (Resources/Priority) and sprio lists them
        testbed.wait_state(j, ("RUNNING",), timeout=60)
    gone = testbed.sbatch(account="acct_a", gpus=1, gpu_type="k80", name="resnet50-bs64")
    time.sleep(1.1)  # a later submit time: a different SiteFactor level than `gone`
    kept = testbed.sbatch(account="acct_a", gpus=1, gpu_type="k80", name="resnet50-bs64")
    testbed.wait_for(lambda: site_factor(testbed, kept) == 0 and testbed.job_state(kept)[0] == "PENDING",
                     30, what="kept pending and listed by sprio")
    testbed.wait_scheduled()

    class CancelAfterSnapshot(CliCluster):
        def snapshot(self):
            snap = super().snapshot()
            testbed.run(["scancel", str(gone)])
            testbed.wait_state(gone, ("CANCELLED",), timeout=30)
            return snap

    cfg_file = tmp_path / "slurm-fair.toml"
    cfg_file.write_text('[daemon]\ndatabase = "sf.sqlite"\ndry_run = false\n[cluster]\nbackend = "cli"\ntimeout = 30\n')
    cfg = config_mod.load(cfg_file)
    store = Store(cfg.database_path)
    r = run_round(CancelAfterSnapshot(timeout=30, env=testbed.env), store, cfg)
    row = store.round(r.round_id)
    assert r.status == "ok" and row.status == "ok", row
    assert set(row.details["site_factor_failures"]) == {str(gone)}, row.details["site_factor_failures"]
    assert kept in r.factor_changes and gone not in r.factor_changes
    assert site_factor(testbed, kept) == r.factor_changes[kept] > 0
    assert "SiteFactor failed for 1 job" in row.message
    assert [e.job_id for e in store.events(kind="apply-failed")] == [gone]
    store.close()
