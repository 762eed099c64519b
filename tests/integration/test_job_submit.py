"""etc/job_submit.lua on the real testbed (installed next to slurm.conf by testbed.sh, JobSubmitPlugins=lua):
untyped GPU requests get the mapped type and count against typed GrpTRES limits; typed and non-GPU jobs are
untouched; (a broken map: test_submit_fail_open.py); `fair:flex` jobs are seen as flexible; a daemon round
publishes the map. Works on Slurm 22.05 (`gres:gpu:`) and 24.11 (`gres/gpu:`). Each test restores the map."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_fair.cluster import connect
from slurm_fair.store import Store

from .conftest import ACCOUNT_USER
from .test_partitions import daemon_round

PY = [sys.executable, "-c", "from slurm_fair.cli import main; main()"]


@pytest.fixture
def type_map(testbed):
    """The map file next to the testbed's job_submit.lua; its content (or absence) is restored afterwards."""
    etc = Path(testbed.env["SLURM_CONF"]).parent
    if not (etc / "job_submit.lua").exists():
        pytest.skip(f"no job_submit.lua in {etc} (testbed set up before the plugin was added: down + up)")
    path = etc / "gpu_type_map.txt"
    before = path.read_text() if path.exists() else None
    yield path
    if before is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(before)


def submit(testbed, *opts: str, account: str | None = "acct_a", user: str = "alice",
           check: bool = True) -> tuple[int | None, subprocess.CompletedProcess[str]]:
    """sbatch as ``user`` (argument list); returns (job id or None, the completed process)."""
    argv = ["sbatch", "--parsable", f"--chdir={testbed.jobdir}", "--output=/dev/null", *opts]
    if account:
        argv.append(f"--account={account}")
    argv += ["--wrap", "sleep 600"]
    r = testbed.run(["runuser", "-u", user, "--", *argv], cwd=str(testbed.jobdir), check=False, timeout=30)
    if check:
        assert r.returncode == 0, r.stderr
    jid = int(r.stdout.strip().split(";")[0]) if r.returncode == 0 and r.stdout.strip() else None
    return jid, r


def gpu_request(job: dict[str, str]) -> str:
    """The job's GPU request fields as scontrol shows them (TresPerNode/TresPerJob), joined."""
    return " ".join(job.get(k, "") for k in ("TresPerNode", "TresPerJob", "TresPerTask") if job.get(k))


def comment(testbed, jid: int) -> str:
    """The job's comment (``scontrol show job -o`` splits a comment with spaces, squeue does not)."""
    out = testbed.run(["squeue", "-h", "-j", str(jid), "-O", "Comment:500"]).stdout.strip()
    return "" if out == "(null)" else out


def typed(t: str) -> re.Pattern[str]:
    return re.compile(rf"gres[:/]gpu:{t}\b")  # 22.05 gres:gpu:v100:1, 24.11 gres/gpu:v100:1


def test_untyped_requests_get_the_mapped_type_and_count_against_its_limit(testbed, type_map):
    type_map.write_text("acct_a v100 most room in its share (test)\n* k80\n")
    testbed.sacctmgr("modify", "account", "where", "name=acct_a", "set", "GrpTRES=gres/gpu:v100=2")
    j1, r1 = submit(testbed, "--gres=gpu:1", "--comment=class=cnn")
    j2, _ = submit(testbed, "--gpus=1")
    j3, _ = submit(testbed, "--gres=gpu:1")
    assert "slurm-fair: untyped GPU request given type 'v100' (account acct_a: most room in its share (test))" \
        in r1.stderr
    for jid in (j1, j2):
        job = testbed.wait_state(jid, "RUNNING", timeout=60)
        assert typed("v100").search(gpu_request(job)), job
        assert "gres/gpu:v100=1" in job.get("AllocTRES", "") or "gres/gpu:v100=1" in job.get("TRES", ""), job
    assert comment(testbed, j1) == "class=cnn fair:flex" and comment(testbed, j2) == "fair:flex"
    # the third one is held back by the typed limit (untyped jobs used to escape it)
    testbed.wait_for(lambda: testbed.job_state(j3) == ("PENDING", "AssocGrpGRES"), 30,
                     what=f"job {j3} PENDING AssocGrpGRES")
    assert typed("v100").search(gpu_request(testbed.job(j3)))


def test_default_line_for_an_account_without_entry_and_the_default_account(testbed, type_map):
    type_map.write_text("acct_a v100\n* k80 most GPUs free\n")
    jid, r = submit(testbed, "--gres=gpu:1", account=None, user=ACCOUNT_USER["acct_b"])  # bob: default acct_b
    job = testbed.job(jid)
    assert job["Account"] == "acct_b" and typed("k80").search(gpu_request(job)), job
    assert "given type 'k80' (account acct_b: no entry for the account; default: most GPUs free)" in r.stderr


def test_typed_and_non_gpu_jobs_are_untouched(testbed, type_map):
    type_map.write_text("acct_a v100\n")
    jt, rt = submit(testbed, "--gres=gpu:k80:1", "--comment=class=rl")
    job = testbed.job(jt)
    assert typed("k80").search(gpu_request(job)) and comment(testbed, jt) == "class=rl", job
    jn, rn = submit(testbed)
    assert "gpu" not in gpu_request(testbed.job(jn)) and comment(testbed, jn) == ""
    assert "slurm-fair" not in rt.stderr + rn.stderr


def test_missing_map_lets_the_job_through_unchanged(testbed, type_map):
    type_map.unlink(missing_ok=True)
    jid, r = submit(testbed, "--gres=gpu:1")
    assert "slurm-fair" not in r.stderr  # shadow mode publishes no map: nothing said to the user (slurmctld.log has it)
    assert not re.search(r"gpu:(a100|v100|k80)", gpu_request(testbed.job(jid)))


def test_flexible_job_seen_by_the_daemon_and_explained(testbed, type_map, tmp_path):
    type_map.write_text("acct_a v100\n")
    testbed.sacctmgr("modify", "account", "where", "name=acct_a", "set", "GrpTRES=gres/gpu:v100=0")
    jid, _ = submit(testbed, "--gres=gpu:1", "--comment=class=cnn")
    testbed.wait_for(lambda: testbed.job_state(jid)[0] == "PENDING", 20, what="pending")
    snap = connect("cli", env=testbed.env).snapshot()
    (job,) = [j for j in snap.jobs if j.job_id == jid]
    assert job.flexible and job.gpu_type == "v100" and job.comment == "class=cnn fair:flex"
    cfg = tmp_path / "c.toml"
    cfg.write_text('[daemon]\ndatabase = "sf.sqlite"\ndry_run = false\n[cluster]\nbackend = "cli"\n[limits]\nmanage = false\n')
    r = subprocess.run([*PY, "explain", "acct_a", "--config", str(cfg)], env=testbed.env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    if testbed.slurm_version >= (23, 2, 6):
        assert f"pending flexible jobs (fair:flex) {jid}: typed at submission; slurm-fair moves them" in r.stdout
    else:
        assert f"pending flexible jobs (fair:flex) {jid}: typed at submission; Slurm 22.05" in r.stdout
        assert "cannot change a pending job's GPU type" in r.stdout


def test_daemon_round_publishes_the_planned_types(testbed, type_map, tmp_path):
    type_map.unlink(missing_ok=True)
    submit(testbed, "--gres=gpu:v100:1", "--job-name=cnn")
    submit(testbed, "--gres=gpu:k80:1", account="acct_b", user=ACCOUNT_USER["acct_b"])
    daemon_round(testbed, tmp_path, type_map)
    assert type_map.exists() and (type_map.stat().st_mode & 0o777) == 0o644
    lines = [ln for ln in type_map.read_text().splitlines() if not ln.startswith(("#", "@"))]
    published = {ln.split()[0]: ln.split()[1] for ln in lines}
    with Store(tmp_path / "sf.sqlite") as store:
        details = store.round().details
    planned = details["untyped_targets"]

    def cells(t):  # the map's TYPE:ROOM[:BLOCK] cells of a target
        return ",".join(f"{g}:{n}" + (f":{t['blocks'][g]}" if g in t["blocks"] else "") for g, n in t["types"])

    assert published == {k: (cells(t) if "/" not in k else  # class lines: TYPE:0 where the class is slow
                             ",".join(g + (":0" if g in t.get("slow", ()) else "") for g, _n in t["types"]))
                         for k, t in planned.items()}
    assert "*" in published and {"acct_a", "acct_b", "acct_c"} <= set(published)
    assert lines[0].startswith("* ")  # the default line in the head, before the accounts' sections (the index)
    head = type_map.read_text().splitlines()
    assert head[0].startswith("#@map ")  # then the fresh lines, then the index line
    assert next(ln for ln in head[1:] if not ln.startswith(("#@expires ", "#@soon "))).startswith("#@index ")
    # two jobs run, every other GPU is free and nobody waits: each account's line lends them all, fastest
    # type first, each with its free room (the V100 and K80 nodes each run one of the jobs)
    rooms = {g: int(n) for g, n, *_b in (c.split(":") for c in published["acct_a"].split(","))}
    assert rooms == {"a100": 4, "v100": 5, "k80": 5}, published["acct_a"]
    # the next untyped submission of acct_a is typed from the published map: its first type
    first = published["acct_a"].split(",")[0].split(":")[0]
    jid, rr = submit(testbed, "--gpus=1")
    assert typed(first).search(gpu_request(testbed.job(jid)))
    assert f"given type '{first}' (account acct_a: room: " in rr.stderr
