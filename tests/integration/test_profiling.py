"""Profiling on the real testbed: `profile submit` measures a class on every GPU type and the next round's
shares use it; a running job's `slurm_fair.report()` is harvested; a bad report is refused (profile unchanged,
event recorded, taken once); explain and status flag a tenant whose reported profile contradicts its jobs;
exploration types an untyped submission for a type its class was not measured on.

Jobs run as alice/bob, who cannot reach this checkout (CI clones into ``mktemp -d``) nor its virtual
environment: inside their jobs the system /usr/bin/python3 runs with PYTHONPATH at a copy of the ``slurm_fair``
package in the testbed's job dir, which is all `slurm_fair.report()` needs (standard library only). The workload (profile_workload.py) fakes a GPU-type-dependent speed ON PURPOSE:
the testbed's GPUs are fake.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_fair import config
from slurm_fair.jobrecord import parse_scontrol
from slurm_fair.store import Store

from .conftest import REPO_ROOT

PY = [sys.executable, "-c", "from slurm_fair.cli import main; main()"]
SYS_PY = "/usr/bin/python3"
WORKLOAD = Path(__file__).with_name("profile_workload.py")
RATES = {"a100": 40.0, "v100": 20.0, "k80": 5.0}  # profile_workload.py's


@pytest.fixture
def sf(testbed, tmp_path):
    """A config (this test's database, the testbed's hook spool) and a CLI runner."""
    if not Path(SYS_PY).exists():
        pytest.skip(f"{SYS_PY} missing: jobs need a Python their users can run")
    spool = config.load(testbed.env["SLURM_FAIR_CONFIG"]).spool_path
    cfg = tmp_path / "slurm-fair.toml"
    cfg.write_text('[daemon]\nperiod = 3\ndatabase = "sf.sqlite"\ndry_run = false\n[policy]\nname = "oef-noncoop"\n'
                   '[cluster]\nbackend = "cli"\ntimeout = 15\n'
                   + (f'[hooks]\nspool = "{spool}"\n' if spool else ""))
    store = Store(tmp_path / "sf.sqlite")

    class SF:
        path = cfg
        db = store
        env = {**testbed.env, "PYTHONPATH": str(REPO_ROOT)}

        @staticmethod
        def cli(*args, check=True, cwd=None, timeout=120):
            r = subprocess.run([*PY, *args, "--config", str(cfg)], env=SF.env, capture_output=True, text=True,
                               timeout=timeout, cwd=cwd)
            if check and r.returncode != 0:
                raise AssertionError(f"slurm-fair {' '.join(args)} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
            return r

        @staticmethod
        def values(account, cls):
            return {(r.gpu_type, r.source): r for r in store.profile_values()
                    if r.account == account and r.cls == cls}

    yield SF
    store.close()


@pytest.fixture(scope="module")
def pylib(testbed) -> str:
    """A copy of the ``slurm_fair`` package in the job dir, readable by the test users; its folder."""
    dst = testbed.jobdir / "pylib"
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(REPO_ROOT / "slurm_fair", dst / "slurm_fair", ignore=shutil.ignore_patterns("__pycache__"))
    for folder, dirs, files in os.walk(dst):
        os.chmod(folder, 0o755)
        for f in files:
            os.chmod(os.path.join(folder, f), 0o644)
    return str(dst)


def reporting_job(testbed, pylib, account, gpu_type, cls, python_code, sleep=60):
    """A job of ``account``'s user running ``python_code`` (with slurm_fair importable), then sleeping."""
    cmd = f"PYTHONPATH={shlex.quote(pylib)} {SYS_PY} -c {shlex.quote(python_code)} && sleep {sleep}"
    return testbed.sbatch(account, gpus=1, gpu_type=gpu_type, comment=f"class={cls}", command=cmd)


def comment(testbed, job) -> str:
    """The job's whole comment (``testbed.job`` splits ``scontrol -o`` on spaces: it keeps the first word)."""
    return parse_scontrol(testbed.run(["scontrol", "show", "job", str(job)]).stdout).get("Comment", "")


def wait_comment(testbed, job, text, timeout=60):
    return testbed.wait_for(lambda: text in comment(testbed, job), timeout, what=f"{text!r} in job {job}'s comment")


def test_profile_submit_measures_every_type_and_the_next_round_uses_it(testbed, sf):
    workload = testbed.job_file(WORKLOAD)
    r = sf.cli("profile", "submit", "--account", "acct_a", "--class", "demo", "--python", SYS_PY,
               "--seconds", "3", "--metric-regex", r"rate=([0-9.]+)", "--", SYS_PY, str(workload), "60",
               cwd=str(testbed.jobdir))
    jobs = {line.split(":")[0]: int(line.split()[-1]) for line in r.stdout.splitlines()}
    assert set(jobs) == set(RATES), r.stdout  # one job per GPU type of the cluster
    for t, j in jobs.items():
        testbed.wait_state(j, "COMPLETED", timeout=90)
        c = comment(testbed, j)
        assert f"fair:tput={RATES[t]:g}@1" in c and "fair:profile" in c and "class=demo" in c

    def measured():  # ended jobs: their reports come from the EpilogSlurmctld records
        sf.cli("daemon", "--once")
        v = sf.values("acct_a", "demo")
        return v if all((t, "measured") in v for t in RATES) else None

    v = testbed.wait_for(measured, 60, interval=2, what="a measured profile on every type")
    assert {t: v[(t, "measured")].throughput for t in RATES} == RATES
    listed = json.loads(sf.cli("profiles", "list", "--json", "--account", "acct_a").stdout)
    # (samples may exceed 1: the shared hook spool can hold the end records of an earlier run's demo jobs)
    assert {(x["gpu_type"], x["source"], x["used"]) for x in listed} == {(t, "measured", True) for t in RATES}
    assert all(x["single"] == (x["samples"] == 1) for x in listed)
    assert {x["gpu_type"]: x["speedup"] for x in listed} == {"a100": 8.0, "v100": 4.0, "k80": 1.0}
    status = json.loads(sf.cli("profile", "status", "--json").stdout)
    assert {(x["job_id"], x["status"]) for x in status["reports"]} >= {(j, "accepted") for j in jobs.values()}

    # the next round's problem uses the measured values for a demo job of acct_a
    samples = {t: sf.values("acct_a", "demo")[(t, "measured")].samples for t in RATES}
    testbed.wait_scheduled([testbed.sbatch("acct_a", gpus=1, comment="class=demo", command="sleep 60")])
    sf.cli("daemon", "--once")
    details = sf.db.rounds(limit=1)[0].details
    assert details["classes"]["acct_a"]["demo"]["throughput"] == RATES
    # a round does not take the same reports twice
    assert {t: sf.values("acct_a", "demo")[(t, "measured")].samples for t in RATES} == samples


def test_running_job_report_is_harvested_and_a_bad_one_refused(testbed, sf, pylib):
    code = ("import slurm_fair, time; slurm_fair.report(steps=120, seconds=10); time.sleep(8); "
            "slurm_fair.report(throughput=1e12)")  # the second is absurd (> [profiling] max_throughput)
    job = reporting_job(testbed, pylib, "acct_b", "v100", "rnn", code)
    wait_comment(testbed, job, "fair:tput=12@1")
    assert testbed.job(job)["JobState"] == "RUNNING"
    sf.cli("daemon", "--once")
    v = sf.values("acct_b", "rnn")
    assert set(v) == {("v100", "harvested")}
    assert (v[("v100", "harvested")].throughput, v[("v100", "harvested")].samples) == (12.0, 1)

    wait_comment(testbed, job, "fair:tput=1e+12@2", timeout=30)
    sf.cli("daemon", "--once")
    sf.cli("daemon", "--once")  # the same comment again: taken once
    after = sf.values("acct_b", "rnn")[("v100", "harvested")]
    assert (after.throughput, after.samples, after.rejected) == (12.0, 1, 0)  # unchanged
    refused = [e for e in sf.db.events(kind="profile-report-refused") if e.job_id == job]
    assert len(refused) == 1 and "max_throughput" in refused[0].message and "'rnn'" in refused[0].message
    assert [(r.n, r.status) for r in sf.db.profile_reports(account="acct_b")] == [(2, "refused"), (1, "accepted")]


def test_explain_and_status_flag_a_reported_profile_its_jobs_contradict(testbed, sf, pylib):
    # acct_c claims a 100x speedup of class "big" on v100 over k80; its jobs measure 2x. The class name is this
    # run's own: the hooks' end records of an earlier run's jobs (the testbed's spool is shared) carry reports too
    big = f"big{os.getpid()}"
    sf.cli("profiles", "set", big, "v100", "100", "--account", "acct_c")
    sf.cli("profiles", "set", big, "k80", "1", "--account", "acct_c")
    jv = reporting_job(testbed, pylib, "acct_c", "v100", big, "import slurm_fair; slurm_fair.report(throughput=10)")
    jk = reporting_job(testbed, pylib, "acct_c", "k80", big, "import slurm_fair; slurm_fair.report(throughput=5)")
    wait_comment(testbed, jv, "fair:tput=10@1")
    wait_comment(testbed, jk, "fair:tput=5@1")
    sf.cli("daemon", "--once")
    ex = json.loads(sf.cli("explain", "acct_c", "--json").stdout)
    (c,) = ex["profile_conflicts"]
    assert (c["account"], c["class"], c["gpu_type"], c["reference"]) == ("acct_c", big, "v100", "k80")
    assert (c["reported"], c["measured"], c["ratio"], c["samples"]) == (100.0, 10.0, 50.0, 1)
    assert "profile conflicts" in sf.cli("explain", "acct_c").stdout
    assert json.loads(sf.cli("status", "--json").stdout)["profile_conflicts"] == [c]
    # the class has measurements, so its speeds come from them only ([profiling] measured_speeds, on by default):
    # the round used the measured 10 / 5, not the reported 100 / 1, which could sandbag or inflate the speedup
    thr = sf.db.rounds(limit=1)[0].details["classes"]["acct_c"][big]["throughput"]
    assert (thr["v100"], thr["k80"]) == (10.0, 5.0)


def test_exploration_steers_untyped_submissions_to_a_type_the_class_was_not_measured_on(testbed, sf, tmp_path, pylib):
    etc = Path(testbed.env["SLURM_CONF"]).parent
    if not (etc / "job_submit.lua").exists():
        pytest.skip(f"no job_submit.lua in {etc}")
    type_map = etc / "gpu_type_map.txt"
    cfg = tmp_path / "explore.toml"
    cfg.write_text(sf.path.read_text() + f'[submit]\ntype_map = "{type_map}"\n')
    try:
        # class rl of acct_b reports from v100 only; its held untyped rl job is not demand (issue 21 item 2: the
        # test passes without it, checked on 22.05): the map's line for acct_b comes from the class's running job
        rep = reporting_job(testbed, pylib, "acct_b", "v100", "rl", "import slurm_fair; slurm_fair.report(throughput=3)")
        wait_comment(testbed, rep, "fair:tput=3@1")
        held = testbed.sbatch("acct_b", gpus=1, comment="class=rl", command="sleep 60", extra=["--hold"])
        testbed.wait_for(lambda: testbed.job(held).get("JobState") == "PENDING", 30, what="held job pending")
        r = subprocess.run([*PY, "daemon", "--once", "--config", str(cfg)], env=sf.env, capture_output=True,
                           text=True, timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        with Store(tmp_path / "sf.sqlite") as store:
            details = store.round().details
            assert {(k[1], k[3]) for k in [(r.account, r.cls, r.gpu_type, r.source)
                                            for r in store.profile_values()]} >= {("rl", "harvested")}
        tg = details["untyped_targets"]["acct_b"]
        target, why = tg["types"][0][0], tg["reason"]
        # limits lend: the idle A100s and K80s are acct_b's to use already, nothing moves between its limits;
        # the map puts a type rl was never measured on first on acct_b's line
        assert details["explore_moves"] == []
        assert target in ("a100", "k80") and why.startswith(f"explore: class rl has no profile on {target}"), why
        line = next(ln for ln in type_map.read_text().splitlines() if ln.startswith("acct_b "))
        assert line.split()[1].split(",")[0].split(":")[0] == target
        # the next untyped submission of acct_b lands on the explored type (job_submit.lua reads the map)
        nxt = testbed.sbatch("acct_b", gpus=1, comment="class=rl", command="sleep 30")
        assert f"gpu:{target}" in testbed.job(nxt).get("TresPerNode", "") + testbed.job(nxt).get("Gres", "")
    finally:
        type_map.unlink(missing_ok=True)
