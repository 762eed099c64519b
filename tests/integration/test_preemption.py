"""Fair-share preemption on the real testbed: an over-share job gets the checkpoint signal, saves its state,
is requeued once by slurm-fair after the grace, and resumes from its checkpoint (contrib/checkpoint/train.sh).

The daemon is driven with ``slurm-fair daemon --once`` and a config of this test (the testbed's, plus a
``[preemption]`` section and a database in tmp_path). Requeued jobs wait cred_expire + 1 s (~11 s on the
testbed) before they can run again.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from slurm_fair import config as config_mod
from slurm_fair.cluster import connect
from slurm_fair.daemon.preemption.carry import run as preempt
from slurm_fair.store import Store
from slurm_fair.daemon.preemption.store import PreemptionStore

PY = [sys.executable, "-c", "from slurm_fair.cli import main; main()"]
TRAIN_SH = Path(__file__).resolve().parents[2] / "contrib" / "checkpoint" / "train.sh"


def write_config(testbed, tmp_path: Path, **preemption) -> Path:
    base = tomllib.loads(Path(testbed.env["SLURM_FAIR_CONFIG"]).read_text())
    base.setdefault("daemon", {}).update(database=str(tmp_path / "sf.sqlite"), period=300, dry_run=False)
    # upgrade_cost 0: a requeue must pay (issue 28), and these jobs restart at no cost
    base["preemption"] = {"enabled": True, "grace": 5, "min_runtime": 0, "signal": "USR1", "upgrade_cost": 0,
                          **preemption}
    path = tmp_path / "slurm-fair.toml"
    path.write_text(config_mod.render(config_mod.from_dict(base).as_dict()))
    return path


def cli(testbed, cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([*PY, *args, "--config", str(cfg)], env=testbed.env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"slurm-fair {' '.join(args)} exited {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def output(testbed, job_id: int) -> str:
    path = testbed.jobdir / f"slurm-{job_id}.out"
    return path.read_text() if path.exists() else ""


def test_preempted_job_checkpoints_is_requeued_once_and_resumes(testbed, tmp_path):
    cfg = write_config(testbed, tmp_path)
    ckpt = testbed.jobdir / f"ckpt-{tmp_path.name}.state"
    ckpt.unlink(missing_ok=True)
    # acct_a fills the four a100s: three sleepers, then the checkpointing job (the newest)
    sleepers = [testbed.sbatch("acct_a", gpu_type="a100", name="sleeper") for _ in range(3)]
    for j in sleepers:
        testbed.wait_state(j, "RUNNING")
    job = testbed.sbatch("acct_a", gpu_type="a100", name="ckpt", extra=["--requeue", "--open-mode=append"],
                         command=f"export CKPT={ckpt} STEPS=400 STEP_SECONDS=0.5; exec bash {testbed.job_file(TRAIN_SH)}")
    testbed.wait_state(job, "RUNNING")
    testbed.wait_for(lambda: "starting at step 0 (restart 0)" in output(testbed, job), 30, what="job started")
    # acct_b waits for an a100: its share is 1 of 4, so acct_a (limit 3) holds one GPU too many
    waiter = testbed.sbatch("acct_b", gpu_type="a100", name="waiter")
    assert testbed.job_state(waiter)[0] == "PENDING"
    testbed.wait_scheduled()
    try:
        cli(testbed, cfg, "daemon", "--once")
        with Store(tmp_path / "sf.sqlite") as store:
            [p] = [r.as_row() for r in PreemptionStore(store).rows(account="acct_a")]
            assert (p["job_id"], p["state"], p["gpu_type"], p["gpus"], p["signal"]) == (job, "signalled", "a100", 1,
                                                                                      "USR1")
            assert "acct_a uses 4 a100 GPUs with a guarantee of 3" in p["reason"]
            details = store.round().details["preemption"]
        assert details["over"] == {"acct_a": {"a100": 1}} and details["waiting"]["a100"] == 1
        saved = testbed.wait_for(
            lambda: [int(x.split()[-1]) for x in output(testbed, job).splitlines() if x.startswith("checkpoint saved")],
            20, what="checkpoint written after the signal")
        assert len(saved) == 1 and int(ckpt.read_text()) == saved[0]
        # the daemon (period 300 s) does not wait a whole period: it wakes up when the grace ends and requeues
        daemon = subprocess.Popen([*PY, "daemon", "--config", str(cfg)], env=testbed.env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        try:
            def requeued():
                with Store(tmp_path / "sf.sqlite") as store:
                    rows = [r.as_row() for r in PreemptionStore(store).rows()]
                return rows if rows[0]["state"] != "signalled" else None
            rows = testbed.wait_for(requeued, 60, interval=1, what="the daemon's requeue after the grace")
        finally:
            daemon.send_signal(signal.SIGTERM)
            _, log = daemon.communicate(timeout=60)
        assert daemon.returncode == 0 and "preemption: a grace period ends in" in log, log
        assert [(r["job_id"], r["state"]) for r in rows] == [(job, "requeued")]  # the sleepers were spared
        assert [s["step"] for s in rows[0]["steps"]] == ["signalled", "requeued"]
        assert rows[0]["requeued_at"] - rows[0]["signalled_at"] >= 5
        info = testbed.wait_for(lambda: (j := testbed.job(job)).get("Restarts") == "1" and j, 30,
                                what="job requeued (Restarts=1)")
        assert info["JobState"] in ("PENDING", "REQUEUED", "COMPLETING", "RUNNING")
        testbed.wait_state(waiter, "RUNNING", timeout=60)  # the freed a100 went to acct_b
        # free acct_a's other GPUs: the requeued job runs again and resumes from its checkpoint
        testbed.run(["scancel", *map(str, sleepers)])
        testbed.wait_state(job, "RUNNING", timeout=90)
        testbed.wait_for(lambda: f"resumed from step {saved[0]} (restart 1)" in output(testbed, job), 30,
                         what="resumed from the checkpoint")
        assert testbed.job(job).get("Restarts") == "1"  # requeued exactly once
        ex = json.loads(cli(testbed, cfg, "explain", "acct_a", "--json").stdout)
        assert [(p["job_id"], p["state"], [s["step"] for s in p["steps"]]) for p in ex["preemptions"]] == [
            (job, "requeued", ["signalled", "requeued"])]
        text = cli(testbed, cfg, "explain", "acct_a").stdout
        assert f"job {job} (1 a100, USR1): requeued" in text
        assert "1 requeued" in cli(testbed, cfg, "status").stdout
    finally:
        ckpt.unlink(missing_ok=True)


def test_signal_failure_on_one_job_is_recorded_and_the_others_proceed(testbed, tmp_path):
    """A job that ends between the snapshot and the signal: its signal fails (recorded), the next job is
    still signalled."""
    cfg = config_mod.load(write_config(testbed, tmp_path))
    a = [testbed.sbatch("acct_a", gpu_type="a100", name="sleeper") for _ in range(4)]
    for j in a:
        testbed.wait_state(j, "RUNNING")
    b = [testbed.sbatch("acct_b", gpu_type="a100", name="waiter") for _ in range(2)]
    testbed.wait_scheduled()
    cluster = connect(backend="cli", timeout=15, env=testbed.env)
    snap = cluster.snapshot()
    assert {j.job_id for j in snap.jobs if j.pending} >= set(b)
    testbed.run(["scancel", str(a[-1])])  # the newest acct_a job: the first to be chosen
    testbed.wait_for(lambda: testbed.job_state(a[-1])[0] not in ("RUNNING", "COMPLETING"), 30, what="job ended")
    with Store(tmp_path / "sf.sqlite") as store:
        out = preempt(cluster, store, cfg, snap, {"acct_a": {"a100": 2}, "acct_b": {"a100": 2}}, None, time.time())
        rows = {r.job_id: r.as_row() for r in PreemptionStore(store).rows()}
        events = store.events(kind="preemption")
    assert [f["job_id"] for f in out.failed] == [a[-1]] and "signal failed" in rows[a[-1]]["steps"][0]["message"]
    assert rows[a[-1]]["state"] == "failed" and rows[a[-1]]["signalled_at"] is None
    assert [s["job_id"] for s in out.signalled] == [a[-2]] and rows[a[-2]]["state"] == "signalled"
    assert {e.job_id for e in events} == {a[-1], a[-2]}
