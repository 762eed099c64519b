"""job_submit.lua on the real testbed: partition-aware typing and the module form.

* Partitions: three partitions made at runtime with ``scontrol create`` (the A100 node; the K80-only node; the
  nodes without A100s), a daemon round publishes their ``#@partition`` lines, and untyped jobs submitted with
  ``-p`` one partition, ``-p a,b``, and with none (the default partition, moved to the K80 partition for the
  test, and back: right after a change both stay flagged default for a while) get types only their partitions
  have, and run there. A job whose account has no type in its partition passes untyped.
* Module form: the shipped site example (slurm_fair/share/job_submit_site_example.lua) installed as the
  testbed's job_submit.lua, with slurm-fair's script next to it as slurm_fair_submit.lua: the site's own rule
  (a default time limit) and slurm-fair's typing both apply.

Each test restores what it changed (partitions deleted, ``gpu`` the default again, the original job_submit.lua
back with a newer mtime so slurmctld reloads it). Slurm 22.05 (``gres:gpu:``) and 24.11 (``gres/gpu:``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import GPUS

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "slurm_fair" / "share" / "job_submit.lua"
SITE_EXAMPLE = REPO / "slurm_fair" / "share" / "job_submit_site_example.lua"
PY = [sys.executable, "-c", "from slurm_fair.cli import main; main()"]
PARTS = ("tp_a100", "tp_k80", "tp_rest")


def install_lua(testbed, path: Path, text: str) -> None:
    """Install a Lua script as slurmctld needs it: checked with ``luac5.1 -p``, written to a temporary file and
    renamed over ``path``, its mtime above the one it replaces (slurmctld reloads when the mtime grows, 1 s)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    r = testbed.run(["luac5.1", "-p", str(tmp)], check=False)
    if r.returncode != 0:
        tmp.unlink()
        raise AssertionError(f"{path.name} does not compile: {r.stderr}")
    tmp.chmod(0o644)
    old = path.stat().st_mtime if path.exists() else 0.0
    stamp = float(int(max(time.time(), old)) + 1)
    os.utime(tmp, (stamp, stamp))
    os.replace(tmp, path)


@pytest.fixture
def etc(testbed) -> Path:
    """The testbed's folder of slurm.conf, job_submit.lua and the map; the original job_submit.lua and map are
    restored afterwards (the script with a newer mtime)."""
    folder = Path(testbed.env["SLURM_CONF"]).parent
    script, tmap = folder / "job_submit.lua", folder / "gpu_type_map.txt"
    if not script.exists():
        pytest.skip(f"no job_submit.lua in {folder} (testbed set up before the plugin was added: down + up)")
    before, map_before = script.read_text(), (tmap.read_text() if tmap.exists() else None)
    yield folder
    if script.read_text() != before:
        install_lua(testbed, script, before)
    (folder / "slurm_fair_submit.lua").unlink(missing_ok=True)
    if map_before is None:
        tmap.unlink(missing_ok=True)
    else:
        tmap.write_text(map_before)


def submit(testbed, *opts: str, account: str = "acct_a", user: str = "alice",
           ) -> tuple[int, subprocess.CompletedProcess[str]]:
    argv = ["sbatch", "--parsable", f"--chdir={testbed.jobdir}", "--output=/dev/null", f"--account={account}",
            *opts, "--wrap", "sleep 600"]
    r = testbed.run(["runuser", "-u", user, "--", *argv], cwd=str(testbed.jobdir), check=False, timeout=30)
    assert r.returncode == 0, f"sbatch {' '.join(opts)} rejected: {r.stderr}"
    return int(r.stdout.strip().split(";")[0]), r


def gpu_type(job: dict[str, str]) -> str | None:
    """The GPU type of the job's request (TresPerNode / TresPerJob), None when untyped."""
    req = " ".join(job.get(k, "") for k in ("TresPerNode", "TresPerJob", "TresPerTask"))
    m = re.search(r"gres[:/]gpu:([A-Za-z][\w.-]*)", req)
    return m.group(1) if m else None


def node_types(testbed) -> dict[str, set[str]]:
    """node -> its GPU types, from ``sinfo -N`` (the testbed's node names are not assumed)."""
    out = testbed.run(["sinfo", "-h", "-N", "-o", "%N|%G"]).stdout
    nodes: dict[str, set[str]] = {}
    for line in out.splitlines():
        name, _, gres = line.partition("|")
        types = set(re.findall(r"gpu:([A-Za-z][\w.-]*):\d+", gres))
        nodes.setdefault(name.strip(), set()).update(types)
    return nodes


def drop_partitions(testbed) -> None:
    """Make ``gpu`` the default again and delete the test's partitions (jobs cancelled first: Slurm keeps a
    partition with jobs)."""
    testbed.cancel_all()
    testbed.run(["scontrol", "update", "PartitionName=gpu", "Default=YES"], check=False)
    for p in PARTS:
        if testbed.run(["scontrol", "show", "partition", p], check=False).returncode == 0:
            testbed.run(["scontrol", "delete", f"PartitionName={p}"])


@pytest.fixture
def partitions(testbed, etc):
    """tp_a100 (the nodes with only A100s), tp_k80 (only K80s), tp_rest (every GPU node without A100s): name ->
    the types its nodes have. Deleted afterwards; ``gpu`` stays (or becomes again) the default."""
    drop_partitions(testbed)
    nodes = node_types(testbed)
    groups = {"tp_a100": sorted(n for n, t in nodes.items() if t == {"a100"}),
              "tp_k80": sorted(n for n, t in nodes.items() if t == {"k80"}),
              "tp_rest": sorted(n for n, t in nodes.items() if t and "a100" not in t)}
    assert all(groups.values()), f"the testbed's nodes do not make the three partitions: {nodes}"
    try:
        for p, members in groups.items():
            testbed.run(["scontrol", "create", f"PartitionName={p}", f"Nodes={','.join(members)}", "State=UP",
                         "MaxTime=INFINITE"])
        yield {p: set().union(*(nodes[n] for n in members)) for p, members in groups.items()}
    finally:
        drop_partitions(testbed)


def daemon_round(testbed, tmp_path: Path, type_map: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[daemon]\ndatabase = "sf.sqlite"\ndry_run = false\n[cluster]\nbackend = "cli"\n'
                   f'[submit]\ntype_map = {json.dumps(str(type_map))}\n')
    r = subprocess.run([*PY, "daemon", "--once", "--config", str(cfg)], env=testbed.env, capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr


def test_untyped_jobs_get_only_types_of_their_partitions(testbed, etc, partitions, tmp_path):
    script = etc / "job_submit.lua"
    if script.read_text() != SCRIPT.read_text():  # the testbed was set up from another checkout
        install_lua(testbed, script, SCRIPT.read_text())
    type_map = etc / "gpu_type_map.txt"
    daemon_round(testbed, tmp_path, type_map)
    text = type_map.read_text()
    published = dict(ln.split()[1:3] for ln in text.splitlines() if ln.startswith("#@partition "))
    assert {p: set(published.get(p, "").split(",")) for p in PARTS} == partitions, text
    assert set(published["gpu"].split(",")) == set().union(*(t for t in GPUS.values()))
    line = next(ln for ln in text.splitlines() if ln.startswith("acct_a "))
    order = [cell.split(":")[0] for cell in re.split(r"[,|]", line.split()[1])]  # acct_a's types, in order

    def first_in(*parts: str) -> str:
        allowed = set().union(*(partitions[p] for p in parts))
        return next(g for g in order if g in allowed)

    jobs = {}
    for spec in ("tp_a100", "tp_k80", "tp_rest", "tp_a100,tp_k80"):
        jid, r = submit(testbed, f"--partition={spec}", "--gres=gpu:1")
        jobs[spec] = jid
        job = testbed.job(jid)
        got = gpu_type(job)
        assert got == first_in(*spec.split(",")), (spec, order, job, r.stderr)
        assert got in set().union(*(partitions[p] for p in spec.split(","))), (spec, job)
        assert f"given type '{got}'" in r.stderr
    assert gpu_type(testbed.job(jobs["tp_a100,tp_k80"])) != "v100"
    # Slurm runs them where their partitions are (the union job on the A100 or the K80 node)
    for spec, jid in jobs.items():
        job = testbed.wait_state(jid, "RUNNING", timeout=60)
        assert node_types(testbed)[job["NodeList"]] & set().union(*(partitions[p] for p in spec.split(","))), job

    # no -p: the default partition (part_list's flag_default), here the K80 one. Right after the change gpu keeps
    # its flag too (Slurm clears it when it next packs partition state): the types both have, i.e. k80
    testbed.run(["scontrol", "update", "PartitionName=tp_k80", "Default=YES"])
    jid, r = submit(testbed, "--gpus=1")
    job = testbed.job(jid)
    assert job["Partition"] == "tp_k80" and gpu_type(job) == "k80", (job, r.stderr)
    testbed.run(["scontrol", "update", "PartitionName=gpu", "Default=YES"])
    jid, r = submit(testbed, "--gpus=1")  # tp_k80 still flagged: again k80 (in both), never a type outside gpu
    job = testbed.job(jid)
    assert job["Partition"] == "gpu" and gpu_type(job) == "k80", (job, r.stderr)
    testbed.run(["scontrol", "show", "partition"])  # packs partition state: only gpu flagged now
    jid, r = submit(testbed, "--gpus=1")
    assert gpu_type(testbed.job(jid)) == first_in("tp_a100", "tp_rest"), r.stderr  # gpu: every type

    # an account whose types are not in the job's partition: the job passes untyped, with a note
    parts_lines = "".join(ln + "\n" for ln in text.splitlines() if ln.startswith("#@partition "))
    type_map.write_text(parts_lines + "acct_a a100:4 test\n* a100:4\n")
    jid, r = submit(testbed, "--partition=tp_rest", "--gres=gpu:1")
    assert gpu_type(testbed.job(jid)) is None, r.stderr
    assert "none of the types for account acct_a (a100) is in partition tp_rest" in r.stderr


def test_site_script_loads_the_module_and_both_apply(testbed, etc):
    """The site's job_submit.lua (the shipped example) loads slurm-fair's script as a module: its default time
    limit and slurm-fair's typing (within the job's partition) both happen; restored afterwards."""
    log = Path(testbed.env["SLURM_FAIR_TESTBED"]) / "log" / "slurmctld.log"
    seen = log.stat().st_size if log.exists() else None
    (etc / "gpu_type_map.txt").write_text("#@partition gpu a100,k80,v100\nacct_a v100:8 test room\n* k80:8\n")
    install_lua(testbed, etc / "slurm_fair_submit.lua", SCRIPT.read_text())
    install_lua(testbed, etc / "job_submit.lua", SITE_EXAMPLE.read_text())
    jid, r = submit(testbed, "--gres=gpu:1")
    job = testbed.job(jid)
    assert job["TimeLimit"] == "01:00:00", job  # the site's rule
    assert gpu_type(job) == "v100", (job, r.stderr)  # slurm-fair's
    assert "site: no --time given" in r.stderr and "given type 'v100' (account acct_a: test room)" in r.stderr
    out = testbed.run(["squeue", "-h", "-j", str(jid), "-O", "Comment:100"]).stdout.strip()
    assert out == "fair:flex"
    jid, r = submit(testbed, "--gres=gpu:k80:1", "--time=10")
    job = testbed.job(jid)
    assert job["TimeLimit"] == "00:10:00" and gpu_type(job) == "k80" and "slurm-fair" not in r.stderr, job
    # scontrol update goes through the site's slurm_job_modify, which calls the module's
    testbed.run(["scontrol", "update", f"JobId={jid}", "TimeLimit=20"])
    assert testbed.job(jid)["TimeLimit"] == "00:20:00"
    if seen is not None:  # slurmctld's log: the script loaded slurm-fair as a module (no globals of its own)
        with log.open("rb") as f:
            f.seek(seen)
            assert b"slurm-fair job_submit module loaded" in f.read()
