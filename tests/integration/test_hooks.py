"""The slurm-fair hooks on the real testbed: Slurm runs the shipped shim (installed by testbed.sh up) as
PrologSlurmctld/EpilogSlurmctld/Prolog/Epilog; records land in the spool; a daemon round ingests them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_fair import config, hookinstall, jobrecord
from slurm_fair.store import Store

from .conftest import GPUS

PY = [sys.executable, "-c", "from slurm_fair.cli import main; main()"]


@pytest.fixture
def spool(testbed) -> Path:
    p = config.load(testbed.env["SLURM_FAIR_CONFIG"]).spool_path
    if p is None:
        pytest.skip("this testbed's slurm-fair.toml has no [hooks] spool (started by an older testbed.sh?)")
    return p


def records(spool: Path, job: int) -> dict[tuple[int, str, str], dict]:
    out = {}
    for f in spool.glob(f"{job}.*.json"):
        r = json.loads(f.read_text())
        out[(r["restart_count"], r["event"], r["context"] + (f"@{r['node']}" if r["node"] else ""))] = r
    return out


def wait_records(testbed, spool: Path, job: int, want: set[tuple[int, str]], timeout: float = 60) -> dict:
    """Wait until the controller records (restart, event) in ``want`` exist for ``job``."""
    def have():
        rs = records(spool, job)
        got = {(k[0], k[1]) for k in rs if k[2] in jobrecord.CONTEXTS and k[2].endswith("slurmctld")}
        return rs if want <= got else None
    return testbed.wait_for(have, timeout, what=f"hook records {sorted(want)} of job {job}")


def ctld(rs: dict, restart: int, event: str) -> dict:
    return rs[(restart, event, "prolog_slurmctld" if event == "start" else "epilog_slurmctld")]


def test_typed_and_untyped_jobs_recorded_with_account_type_count_class_exit_code(testbed, spool):
    typed = testbed.sbatch("acct_a", gpus=2, gpu_type="v100", comment="run class=cnn", command="sleep 2; exit 3")
    untyped = testbed.sbatch("acct_b", gpus=1, name="rljob", command="sleep 2")
    rt = wait_records(testbed, spool, typed, {(0, "start"), (0, "end")})
    ru = wait_records(testbed, spool, untyped, {(0, "start"), (0, "end")})
    s, e = ctld(rt, 0, "start"), ctld(rt, 0, "end")
    for r in (s, e):
        assert (r["account"], r["user"], r["partition"], r["class"]) == ("acct_a", "alice", "gpu", "cnn")
        assert r["gpus"] == {"v100": 2} and r["gpu_count"] == 2 and r["gpu_info"].startswith("scontrol")
    assert (e["exit_code"], e["exit_signal"]) == (3, 0) and s["exit_code"] is None
    assert s["start_time"] is not None and e["end_time"] is not None and e["end_time"] >= s["start_time"]
    us = ctld(ru, 0, "start")
    assert us["account"] == "acct_b" and us["class"] == "rljob" and us["gpu_count"] == 1
    (gtype, n), = us["gpus"].items()  # the untyped request records the type it really got
    assert n == 1 and gtype in GPUS[us["nodelist"]]
    assert ctld(ru, 0, "end")["exit_code"] == 0
    # the node hooks ran too, on the job's node, with the device indices
    node = [r for k, r in rt.items() if k[2] == f"prolog_slurmd@{s['nodelist']}"]
    assert node and node[0]["gpu_count"] == 2


def test_requeue_gives_one_record_pair_per_run(testbed, spool):
    job = testbed.sbatch("acct_c", gpus=1, gpu_type="k80", command="sleep 600", extra=["--requeue"])
    testbed.wait_state(job, "RUNNING")
    wait_records(testbed, spool, job, {(0, "start")})
    testbed.run(["scontrol", "requeue", str(job)])
    testbed.wait_for(lambda: testbed.job(job).get("JobState") == "RUNNING" and testbed.job(job).get("Restarts") == "1",
                     60, what="job running again after requeue")
    testbed.run(["scancel", str(job)])
    rs = wait_records(testbed, spool, job, {(0, "start"), (0, "end"), (1, "start"), (1, "end")})
    assert ctld(rs, 0, "end")["requeued"] is True and ctld(rs, 1, "end")["requeued"] is False
    assert ctld(rs, 0, "end")["time"] <= ctld(rs, 1, "start")["time"]
    assert all(ctld(rs, r, ev)["gpus"] == {"k80": 1} for r in (0, 1) for ev in ("start", "end"))


def test_broken_env_or_unwritable_spool_exits_0_fast(testbed, tmp_path):
    dest = tmp_path / "hooks"
    hookinstall.install(str(dest), str(tmp_path / "spool"), slurm_conf=testbed.env["SLURM_CONF"])
    (dest / "hooks.conf").write_text(f"spool=/proc/slurm-fair-no-spool\nslurm_conf={testbed.env['SLURM_CONF']}\n")
    shim = str(dest / jobrecord.SHIM_NAME)
    for env in ({}, {"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld"},
                {"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_JOB_ID": "999999"},
                {"SLURM_SCRIPT_CONTEXT": "epilog_slurmd", "SLURM_JOB_ID": "1", "SLURMD_NODENAME": "x"}):
        t0 = time.monotonic()
        r = subprocess.run([shim], env=env, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and time.monotonic() - t0 < 5, (env, r.stderr)


def test_daemon_round_ingests_records_and_gpu_time_matches(testbed, spool, tmp_path):
    job = testbed.sbatch("acct_c", gpus=2, gpu_type="a100", command="sleep 6")
    rs = wait_records(testbed, spool, job, {(0, "start"), (0, "end")}, timeout=90)
    s, e = ctld(rs, 0, "start"), ctld(rs, 0, "end")
    cfg = tmp_path / "sf.toml"
    cfg.write_text(f'[daemon]\ndatabase = "sf.sqlite"\ndry_run = false\n[cluster]\nbackend = "cli"\n[hooks]\nspool = "{spool}"\n')
    r = subprocess.run([*PY, "daemon", "--once", "--config", str(cfg)], env=testbed.env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert not list(spool.glob(f"{job}.*.json"))  # ingested files are removed
    with Store(tmp_path / "sf.sqlite") as store:
        run, = [x for x in store.job_runs() if x.job_id == job]
        start = s["start_time"] if s["start_time"] is not None else s["time"]
        end = e["end_time"] if e["end_time"] is not None else e["time"]
        assert (run.start, run.end, run.gpus) == (start, end, {"a100": 2})
        got = store.received_gpu_seconds(since=start - 1, until=end + 1)["acct_c"]["a100"]
    assert got == pytest.approx(2 * (end - start))
    assert 2 * 5 <= got <= 2 * 10  # the job slept 6 s on 2 GPUs (Slurm times have 1 s resolution)
    st = subprocess.run([*PY, "status", "--json", "--config", str(cfg)], env=testbed.env, capture_output=True,
                        text=True, timeout=60)
    assert st.returncode == 0, st.stderr
    assert json.loads(st.stdout)["received_gpu_seconds"]["acct_c"]["a100"] >= got


def test_a_sites_own_hooks_keep_running_when_chained(testbed, spool, tmp_path):
    """A site had its own PrologSlurmctld, EpilogSlurmctld and Epilog: `hooks install --chain` runs each of them
    after slurm-fair's record, with Slurm's environment; removing the chain leaves only the record."""
    dest = Path(testbed.run(["scontrol", "show", "config"]).stdout.split("PrologSlurmctld", 1)[1]
                .split("=", 1)[1].split()[0]).parent
    conf = jobrecord.read_conf(str(dest / jobrecord.CONF_NAME))
    site = tmp_path / "site"
    site.mkdir()
    site.chmod(0o755)
    programs = {}
    for key in ("PrologSlurmctld", "EpilogSlurmctld", "Epilog"):
        p = site / f"{key}.sh"
        p.write_text(f'#!/bin/sh\necho "$SLURM_SCRIPT_CONTEXT $SLURM_JOB_ID" > "{site}/{key}.$SLURM_JOB_ID"\nexit 0\n')
        p.chmod(0o755)
        programs[key] = str(p)

    def install(chain):
        hookinstall.install(str(dest), conf["spool"], conf.get("slurm_conf", ""), conf.get("log", ""), chain=chain)

    install(programs)
    try:
        job = testbed.sbatch("acct_b", gpus=1, gpu_type="v100", command="sleep 1")
        wait_records(testbed, spool, job, {(0, "start"), (0, "end")})
        testbed.wait_for(lambda: all((site / f"{k}.{job}").exists() for k in programs), 60,
                         what="the site's chained hooks ran")
        assert (site / f"PrologSlurmctld.{job}").read_text() == f"prolog_slurmctld {job}\n"
        assert (site / f"EpilogSlurmctld.{job}").read_text() == f"epilog_slurmctld {job}\n"
        assert (site / f"Epilog.{job}").read_text() == f"epilog_slurmd {job}\n"
        testbed.wait_state(job, "COMPLETED")
    finally:
        install({k: "" for k in programs})
    assert hookinstall.chained(str(dest)) == {}
    job = testbed.sbatch("acct_b", gpus=1, gpu_type="v100", command="sleep 1")
    wait_records(testbed, spool, job, {(0, "start"), (0, "end")})
    assert not list(site.glob(f"*.{job}"))


def test_a_record_the_store_refuses_is_quarantined_while_the_others_ingest(testbed, spool, tmp_path):
    """A record the store cannot take (an exit code past 64 bits, valid JSON and valid to the format check)
    sits in the spool next to real records of a real job: the round moves it to bad/ with an event naming the
    file, and ingests the real job's records (the whole batch used to roll back, every round, for good)."""
    job = testbed.sbatch("acct_c", gpus=1, gpu_type="a100", command="sleep 2")
    rs = wait_records(testbed, spool, job, {(0, "start"), (0, "end")}, timeout=90)
    bad = dict(ctld(rs, 0, "end"), job_id=job + 900000, exit_code=2 ** 70)
    bad_name = Path(jobrecord.write_record(str(spool), bad)).name
    cfg = tmp_path / "sf.toml"
    cfg.write_text(f'[daemon]\ndatabase = "sf.sqlite"\ndry_run = false\n[cluster]\nbackend = "cli"\n[hooks]\nspool = "{spool}"\n')
    try:
        r = subprocess.run([*PY, "daemon", "--once", "--config", str(cfg)], env=testbed.env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert not list(spool.glob(f"{job}.*.json")) and not (spool / bad_name).exists()
        assert (spool / "bad" / bad_name).exists()
        with Store(tmp_path / "sf.sqlite") as store:
            assert {x.event for x in store.job_records(job)} >= {"start", "end"}
            assert not store.job_records(job + 900000)
            (e,) = [e for e in store.events(kind="hook-record-quarantined") if bad_name in e.message]
            assert "OverflowError" in e.message
            (rnd,) = store.db.execute("select status from rounds order by id desc limit 1").fetchall()
            assert rnd[0] == "ok"
    finally:
        for f in (spool / "bad").glob(f"{job + 900000}.*"):
            f.unlink()


def test_a_record_another_user_wrote_into_the_spool_is_quarantined_unread(testbed, spool, tmp_path):
    """Issue 41: the spool is group-writable, and a record any member of its group wrote was ingested (a forged
    end record for another account's job). Next to a real job's records (written by the hooks as SlurmUser, root
    here), a record owned by uid 12345 goes to bad/ unread with an event naming its owner, and the real records
    go in: the daemon reads SlurmUser from the testbed's slurmctld."""
    job = testbed.sbatch("acct_c", gpus=1, gpu_type="a100", command="sleep 2")
    rs = wait_records(testbed, spool, job, {(0, "start"), (0, "end")}, timeout=90)
    forged = Path(jobrecord.write_record(str(spool), dict(ctld(rs, 0, "end"), job_id=job + 900001,
                                                           account="acct_a")))
    os.chown(forged, 12345, -1)
    cfg = tmp_path / "sf.toml"
    cfg.write_text(f'[daemon]\ndatabase = "sf.sqlite"\ndry_run = true\n[cluster]\nbackend = "cli"\n'
                   f'[hooks]\nspool = "{spool}"\n')
    try:
        r = subprocess.run([*PY, "daemon", "--once", "--config", str(cfg)], env=testbed.env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert not forged.exists() and (spool / "bad" / forged.name).stat().st_uid == 12345
        with Store(tmp_path / "sf.sqlite") as store:
            assert {x.event for x in store.job_records(job)} >= {"start", "end"}
            assert not store.job_records(job + 900001)
            (e,) = [e for e in store.events(kind="hook-record-foreign-owner") if e.data["file"] == forged.name]
            assert e.data["owner_uid"] == 12345 and 0 in e.data["expected_uids"]
            assert "SlurmUser root (uid 0)" in e.message
    finally:
        for f in (spool / "bad").glob(f"{job + 900001}.*"):
            f.unlink()
