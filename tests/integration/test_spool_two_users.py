"""The two-user spool on the testbed (issue 29, hooks): `hooks install --owner SLURMUSER --group DAEMONGROUP`
makes a 2770 spool; the controller hooks write their records into it as the Slurm user, and a daemon that runs as
a non-root user of that group ingests them (reads them into its own database and removes them)."""

from __future__ import annotations

import grp
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from slurm_fair import hookinstall, jobrecord
from slurm_fair.store import Store

from .test_hooks import ctld, wait_records

USER = GROUP = "sfdaemon"
REPO = Path(__file__).resolve().parents[2]


def _python_as(user: str) -> list[str]:
    """argv that runs slurm-fair's CLI as ``user``: this interpreter, or where it lies in a folder ``user`` cannot
    enter (a pyenv under /root), the system's python3 of the same version with this environment's packages."""
    main = "from slurm_fair.cli import main; main()"
    borrowed = (f"import site, sys; site.addsitedir({sysconfig.get_paths()['purelib']!r}); "
                f"sys.path.insert(0, {str(REPO)!r}); ")
    for exe, pre in ((sys.executable, ""), ("/usr/bin/python3", borrowed)):
        probe = subprocess.run(["runuser", "-u", user, "--", exe, "-c",
                                pre + "import sys, slurm_fair.cli; print(sys.version_info[:2])"],
                               capture_output=True, text=True, timeout=120, cwd="/")
        if probe.returncode == 0 and probe.stdout.strip() == str(sys.version_info[:2]):
            return [exe, "-c", pre + main]
    pytest.skip(f"no python3 {sys.version_info[:2]} with slurm-fair's packages that {user} can run")


def _exists(db: str, name: str) -> bool:
    return subprocess.run(["getent", db, name], capture_output=True).returncode == 0


@pytest.fixture
def daemon_user():
    """A system user and group ``sfdaemon`` (made here if missing; removed at the end only if made here)."""
    made = []
    if not _exists("group", GROUP):
        subprocess.run(["groupadd", "--system", GROUP], check=True, capture_output=True)
        made.append("group")
    if not _exists("passwd", USER):
        subprocess.run(["useradd", "--system", "--gid", GROUP, "--no-create-home", "--home-dir", "/nonexistent",
                        "--shell", "/usr/sbin/nologin", USER], check=True, capture_output=True)
        made.append("user")
    try:
        yield USER
    finally:
        if "user" in made:
            subprocess.run(["userdel", USER], check=False, capture_output=True)
        if "group" in made:
            subprocess.run(["groupdel", GROUP], check=False, capture_output=True)


def test_hooks_write_as_the_slurm_user_and_a_non_root_daemon_ingests(testbed, daemon_user):
    dest = Path(testbed.run(["scontrol", "show", "config"]).stdout.split("PrologSlurmctld", 1)[1]
                .split("=", 1)[1].split()[0]).parent
    conf = jobrecord.read_conf(str(dest / jobrecord.CONF_NAME))
    base = Path(tempfile.mkdtemp(prefix="sf-two-users-", dir="/tmp"))  # not under pytest's 0700 folders
    base.chmod(0o755)  # the daemon user traverses it
    spool, state = base / "records", base / "state"
    state.mkdir()
    shutil.chown(state, USER, GROUP)
    state.chmod(0o750)
    cfg = base / "sf.toml"
    cfg.write_text(f'[daemon]\ndatabase = "{state}/sf.sqlite"\ndry_run = true\n[cluster]\nbackend = "cli"\n'
                   f'[limits]\nownership_file = "{state}/ownership/limits.json"\n[metrics]\nlisten = ""\n'
                   f'[hooks]\nspool = "{spool}"\n')
    cfg.chmod(0o644)
    # the controller hooks run as SlurmUser (root on the testbed); the daemon's group reads and removes
    hookinstall.install(str(dest), str(spool), conf.get("slurm_conf", ""), conf.get("log", ""),
                        owner="root", group=GROUP)
    try:
        st = spool.stat()
        assert (st.st_uid, grp.getgrgid(st.st_gid).gr_name, stat.S_IMODE(st.st_mode)) == (0, GROUP, 0o2770)
        job = testbed.sbatch("acct_c", gpus=1, gpu_type="a100", command="sleep 2")
        rs = wait_records(testbed, spool, job, {(0, "start"), (0, "end")}, timeout=90)
        files = sorted(spool.glob(f"{job}.*.json"))
        assert files and ctld(rs, 0, "end")["account"] == "acct_c"
        for f in files:  # written by root, readable by the daemon's group (the spool's setgid group)
            fs = f.stat()
            assert fs.st_uid == 0 and grp.getgrgid(fs.st_gid).gr_name == GROUP, f
            assert stat.S_IMODE(fs.st_mode) & 0o040, (f, oct(fs.st_mode))
        r = subprocess.run(["runuser", "-u", USER, "--", *_python_as(USER), "daemon", "--once", "--config", str(cfg)],
                           env=testbed.env, capture_output=True, text=True, timeout=180, cwd="/")
        assert r.returncode == 0, r.stdout + r.stderr
        assert not list(spool.glob(f"{job}.*.json")), sorted(os.listdir(spool))  # ingested: removed
        db = state / "sf.sqlite"
        assert db.stat().st_uid == _uid(USER)  # the daemon's own database
        with Store(db) as store:
            assert {x.event for x in store.job_records(job)} >= {"start", "end"}
            assert [x.job_id for x in store.job_runs()].count(job) == 1
    finally:
        hookinstall.install(str(dest), conf["spool"], conf.get("slurm_conf", ""), conf.get("log", ""))
        shutil.rmtree(base, ignore_errors=True)


def _uid(name: str) -> int:
    import pwd

    return pwd.getpwnam(name).pw_uid
