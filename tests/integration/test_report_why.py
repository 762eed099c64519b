"""What users and admins see, on the real testbed (Slurm 22.05 and 24.11):

* ``slurm-fair report`` gives the queue wait and JCT of finished jobs per account and GPU type, and they are
  Slurm's own numbers (sacct's Submit, Start, End);
* ``slurm-fair why JOBID``, run as the job's own user (alice or bob, who cannot read the database), says that a
  pending job waits on its account's limit and names it, that a held job is held, that a running job runs
  within its guarantee;
* a job name and comment with bytes that are not UTF-8, terminal escapes and line breaks (a forged Slurm line),
  running and then cancelled (slurmctld keeps them), neither stop a round nor the hooks' records nor forge a GPU
  count, and ``why``, ``status``, ``explain`` and ``profile status`` print them escaped.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from slurm_fair import config as config_mod
from slurm_fair.store import Store

from .conftest import ACCOUNT_USER, REPO_ROOT

PY = [sys.executable, "-c", "from slurm_fair.cli import main; main()"]
CLI = "from slurm_fair.cli import main; main()"


def _spool(testbed) -> Path:
    p = config_mod.load(testbed.env["SLURM_FAIR_CONFIG"]).spool_path
    if p is None:
        pytest.skip("this testbed's slurm-fair.toml has no [hooks] spool (started by an older testbed.sh?)")
    return p


def _config(tmp_path: Path, spool: Path, limits: dict | None = None, **daemon) -> Path:
    d = {"database": str(tmp_path / "sf.sqlite"), "period": 300, **daemon}
    cfg = {"daemon": d, "cluster": {"backend": "cli"}, "hooks": {"spool": str(spool)}, "metrics": {"listen": ""},
           "limits": limits or {}}
    path = tmp_path / "sf.toml"
    path.write_text(config_mod.render(config_mod.from_dict(cfg).as_dict()))
    return path


def _slurm_fair(testbed, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    r = subprocess.run([*PY, *args], env=testbed.env, capture_output=True, timeout=timeout)
    assert r.returncode == 0, (args, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")[-3000:])
    return r


def _ctld_records_done(spool: Path, jobs: list[int]) -> bool:
    names = {p.name for p in spool.glob("*.json")}
    return all(f"{j}.0.{ev}.{ctx}.json" in names for j in jobs
               for ev, ctx in (("start", "prolog_slurmctld"), ("end", "epilog_slurmctld")))


def _sacct_times(testbed, job: int) -> tuple[float, float, float]:
    out = testbed.run(["sacct", "-n", "-P", "-X", "-j", str(job), "-o", "Submit,Start,End"]).stdout.split("\n")[0]
    return tuple(datetime.datetime.fromisoformat(t).timestamp() for t in out.split("|"))  # type: ignore[return-value]


def test_report_gives_queue_wait_and_jct_per_account_and_type_as_slurm_has_them(testbed, tmp_path):
    spool = _spool(testbed)
    testbed.cancel_all()  # an earlier test's jobs end before this one's window: their records are not counted here
    time.sleep(2)
    t0 = time.time()
    # two jobs that each take all 4 A100s: the second waits for the first
    first = testbed.sbatch("acct_b", gpus=4, gpu_type="a100", name="wait-a", command="sleep 5")
    second = testbed.sbatch("acct_b", gpus=4, gpu_type="a100", name="wait-b", command="sleep 2")
    testbed.wait_for(lambda: _ctld_records_done(spool, [first, second]), 90,
                     what="start and end records of both jobs")
    cfg = _config(tmp_path, spool, dry_run=True)
    _slurm_fair(testbed, "daemon", "--once", "--config", str(cfg))  # ingests the records (a shadow round)
    since = datetime.datetime.fromtimestamp(t0 - 1).isoformat(timespec="seconds")
    rep = json.loads(_slurm_fair(testbed, "report", "--json", "--since", since, "--config", str(cfg)).stdout)
    w = rep["waits"]["by_account"]["acct_b"]["a100"]
    assert (w["jobs"], w["with_submit"]) == (2, 2), rep["waits"]
    slurm = {j: _sacct_times(testbed, j) for j in (first, second)}
    waits = sorted(start - sub for sub, start, _end in slurm.values())
    jcts = [end - sub for sub, _start, end in slurm.values()]
    runs = [end - start for _sub, start, end in slurm.values()]
    # Slurm's own times (one-second resolution), not the hooks' clocks
    assert w["wait_max_s"] == pytest.approx(waits[-1], abs=1) and w["wait_max_s"] >= 3  # waited for the first
    assert w["wait_mean_s"] == pytest.approx(sum(waits) / 2, abs=1)
    assert w["jct_mean_s"] == pytest.approx(sum(jcts) / 2, abs=1)
    assert 0 <= w["wait_p50_s"] <= w["wait_p95_s"] <= w["wait_max_s"]
    assert w["jct_mean_s"] >= w["run_mean_s"] >= 2 and w["run_mean_s"] == pytest.approx(sum(runs) / 2, abs=1)
    table = _slurm_fair(testbed, "report", "--since", since, "--config", str(cfg)).stdout.decode()
    row = next(ln.split() for ln in table.splitlines() if ln.startswith("acct_b ") and " a100 " in ln)
    assert row[:4] == ["acct_b", "a100", "2", "2"], table


def _user_python(testbed, user: str) -> list[str] | None:
    """An interpreter command ``user`` can run that imports this checkout's slurm_fair (this one, else the system
    python3 with this interpreter's site-packages); None if there is none (then the test runs ``why`` as root)."""
    pypath = os.pathsep.join([str(REPO_ROOT), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    tries = [[sys.executable]]
    sys_py = Path("/usr/bin/python3")
    if sys_py.exists():
        tries.append(["env", f"PYTHONPATH={pypath}", str(sys_py)])
    for py in tries:
        r = subprocess.run(["runuser", "-u", user, "--", *py, "-c", "import slurm_fair.cli"], env=testbed.env,
                           capture_output=True, timeout=120, cwd="/")
        if r.returncode == 0:
            return py
    return None


def _why(testbed, user: str, py: list[str] | None, job: int, status: Path, *extra: str
         ) -> subprocess.CompletedProcess:
    argv = [*(py or [sys.executable]), "-c", CLI, "why", str(job), "--status-file", str(status), *extra]
    if py is not None:
        argv = ["runuser", "-u", user, "--", *argv]
    return subprocess.run(argv, env=testbed.env, capture_output=True, timeout=120, cwd="/")


def test_why_tells_the_jobs_user_it_waits_on_its_accounts_limit(testbed, tmp_path):
    spool = _spool(testbed)
    status = testbed.jobdir / f".why-status-{os.getpid()}.json"  # readable by the users; the database is not
    # hard caps (limits.lend = false): each account's limit is its guarantee
    cfg = _config(tmp_path, spool, limits={"lend": False}, dry_run=False, status_file=str(status))
    try:
        held = {a: [testbed.sbatch(a, gpus=1, gpu_type="k80", name="why", extra=["--hold"]) for _ in range(4)]
                for a in ("acct_a", "acct_b")}
        testbed.wait_scheduled()
        _slurm_fair(testbed, "daemon", "--once", "--config", str(cfg))
        py = _user_python(testbed, "alice")
        if py is not None:  # alice cannot read the database (it is in the test's private tmp folder)
            r = subprocess.run(["runuser", "-u", "alice", "--", "test", "-r", str(tmp_path / "sf.sqlite")],
                               capture_output=True, timeout=30)
            assert r.returncode != 0
        # a held job: held, no claim
        r = _why(testbed, "alice", py, held["acct_a"][0], status, "--json")
        assert r.returncode == 0, r.stderr.decode(errors="replace")
        ex = json.loads(r.stdout)
        assert ex["verdict"] == "held" and ex["changes"][0] == f"release it: scontrol release {held['acct_a'][0]}"
        assert ex["status"]["available"] and ex["job"]["account"] == "acct_a"

        testbed.run(["scontrol", "release", ",".join(str(j) for js in held.values() for j in js)])
        testbed.wait_scheduled()
        # held jobs are not demand (issue 21 item 2): only now, released, do they get shares and limits
        _slurm_fair(testbed, "daemon", "--once", "--config", str(cfg))
        limits = testbed.gpu_limits()
        k80 = {a: limits.get(a, {}).get("k80") for a in held}
        assert any(v is not None and v < 4 for v in k80.values()), k80  # 6 K80s, 8 GPUs asked: someone is capped
        acct = next(a for a, v in sorted(k80.items()) if v is not None and v < 4)
        limit = k80[acct]
        user = ACCOUNT_USER[acct]

        def settled():
            states = {j: testbed.job_state(j) for j in held[acct]}
            running = [j for j, (s, _r) in states.items() if s == "RUNNING"]
            blocked = [j for j, (s, r) in states.items() if s == "PENDING" and r == "AssocGrpGRES"]
            return (running, blocked) if len(running) == limit and len(blocked) == 4 - limit else None

        running, blocked = testbed.wait_for(settled, 60, what=f"{acct}: {limit} k80 jobs running, the rest "
                                            "pending on AssocGrpGRES")
        _slurm_fair(testbed, "daemon", "--once", "--config", str(cfg))  # the status file sees them running
        assert testbed.gpu_limits()[acct]["k80"] == limit  # the round kept the limit (same demand)
        r = _why(testbed, user, py, blocked[0], status, "--json")
        assert r.returncode == 0, r.stderr.decode(errors="replace")
        ex = json.loads(r.stdout)
        assert ex["verdict"] == "limit", ex
        # Slurm names AssocGrpGRES, or (24.11: no K80 free either, or just after the round's update) Resources or
        # None: the limit holds it in every case
        assert ("AssocGrpGRES" in ex["summary"] or "Slurm shows" in ex["summary"]) and \
            f"GrpTRES gres/gpu:k80={limit}" in ex["summary"], ex["summary"]
        (t,) = ex["types"]
        assert (t["gpu_type"], t["limit"], t["in_use"], t["guarantee"]) == ("k80", limit, limit, limit), t
        assert any(d.startswith("limits are hard caps here") for d in ex["details"])
        text = _why(testbed, user, py, blocked[0], status)
        assert text.returncode == 0 and "why: it waits on its account's GPU limit (" in text.stdout.decode()
        r = _why(testbed, user, py, running[0], status, "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["verdict"] == "running"
        r = _why(testbed, user, py, 99999999, status)
        assert r.returncode == 1 and b"Slurm does not know job 99999999" in r.stdout
    finally:
        status.unlink(missing_ok=True)


def test_a_job_name_and_comment_with_any_bytes_break_nothing(testbed, tmp_path):
    spool = _spool(testbed)
    name = os.fsdecode(b"bad\xff\x1b[31mname")  # not UTF-8, and a terminal escape
    job = testbed.sbatch("acct_c", gpus=1, gpu_type="v100", name=name, comment=os.fsdecode(b"c\x01\xfe\x1b]0;x\x07"),
                         command="sleep 30")
    # (not testbed.wait_state: scontrol show job prints the name's raw bytes, which the helper cannot decode)
    testbed.wait_for(lambda: testbed.run(["squeue", "-h", "-j", str(job), "-o", "%T"]).stdout.strip() == "RUNNING",
                     60, what=f"job {job} running")
    testbed.wait_for(lambda: (spool / f"{job}.0.start.prolog_slurmctld.json").exists(), 30, what="its start record")
    cfg = _config(tmp_path, spool, dry_run=True)
    _slurm_fair(testbed, "daemon", "--once", "--config", str(cfg))
    with Store(tmp_path / "sf.sqlite") as store:
        (rnd,) = store.rounds(limit=1)
        assert rnd.status == "dry-run", rnd.message  # squeue --json's raw bytes did not fail the round
        recs = [r for r in store.job_records(job) if r.context == "prolog_slurmctld"]
        assert recs and recs[0].job_name == "bad\ufffd\x1b[31mname"  # stored (SQLite refused the raw byte)
        assert recs[0].submit_time is not None
    r = subprocess.run([*PY, "why", str(job), "--config", str(cfg)], env=testbed.env, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode("utf-8")
    assert '"bad\ufffd\\x1b[31mname"' in out and "\x1b" not in out and "\x07" not in out, out
    assert "runs on 1 v100" in out
    # the other commands that read jobs from Slurm while it is listed
    for args in (["status", "--json"], ["explain", "acct_c"], ["profile", "status"]):
        _slurm_fair(testbed, *args, "--config", str(cfg))
    # a second job whose comment holds a line break and a line of Slurm's own (22.05 prints no AllocTRES line:
    # the hook's record must not take it), then both cancelled: slurmctld keeps them (MinJobAge) and the rounds
    # must stay ok, the end records be ingested without a forged GPU count, and status print
    forged = testbed.sbatch("acct_c", gpus=1, gpu_type="v100", name=os.fsdecode(b"x\xfe\ny"),
                            comment="c\n   AllocTRES=gres/gpu=8,gres/gpu:v100=8", command="sleep 30")
    testbed.wait_for(lambda: testbed.run(["squeue", "-h", "-j", str(forged), "-o", "%T"]).stdout.strip() == "RUNNING",
                     60, what=f"job {forged} running")
    testbed.run(["scancel", str(job), str(forged)])
    testbed.wait_for(lambda: all((spool / f"{j}.0.end.epilog_slurmctld.json").exists() for j in (job, forged)), 60,
                     what="their end records")  # (the first round ingested and removed the start records)
    # still listed by slurmctld (the end records can be there while the jobs are COMPLETING: waited for)
    testbed.wait_for(lambda: testbed.run(["squeue", "-h", "--states=all", "-j", f"{job},{forged}", "-o", "%T"]
                                         ).stdout.split() == ["CANCELLED", "CANCELLED"], 30, what="both CANCELLED")
    _slurm_fair(testbed, "daemon", "--once", "--config", str(cfg))
    with Store(tmp_path / "sf.sqlite") as store:
        (rnd,) = store.rounds(limit=1)
        assert rnd.status == "dry-run", rnd.message
        ends = {r.job_id: r for r in store.job_records() if r.context == "epilog_slurmctld"}
        assert ends[job].gpus == {"v100": 1} and ends[job].job_name == "bad\ufffd\x1b[31mname"
        # the name's line break is cut off exactly (SLURM_JOB_NAME); the comment's forged line makes the header
        # untrusted: no GPUs recorded for this job, never the forged 8
        assert ends[forged].gpus == {} and ends[forged].gpu_count == 0, ends[forged]
        # 22.05 prints no AllocTRES line ("… after its free text"), 24.11 prints its own ("… where Slurm writes none")
        info = ends[forged].gpu_info
        assert info.startswith("none: scontrol: a AllocTRES line ") and "no field of its header is trusted" in info, info
        assert ends[forged].job_name == "x\ufffd\ny"
    for args in (["status"], ["status", "--json"], ["explain", "acct_c"], ["profile", "status"]):
        out = _slurm_fair(testbed, *args, "--config", str(cfg)).stdout.decode("utf-8")
        assert "\x1b" not in out and "\x07" not in out, (args, out)
