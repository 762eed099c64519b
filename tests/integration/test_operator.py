"""The daemon as a dedicated non-root user with sacctmgr AdminLevel=Operator (what the shipped systemd unit
runs): rounds write limits and other users' SiteFactors, the type map goes to its own state folder, rollback
works; without the Operator level the same round changes nothing."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

from slurm_fair import config as config_mod
from slurm_fair.cluster.cli import CliCluster

OPERATOR = "slurm-fair"  # made by testbed.sh up (a Unix user only; the test grants the Operator level)
HERE = Path(__file__).resolve()


def _grant_traversal(paths) -> list[tuple[Path, int]]:
    """o+x on every folder above ``paths`` that lacks it (a checkout in a private folder such as mktemp -d),
    so the operator can run this checkout's Python; returns what to restore."""
    changed = []
    for p in paths:
        for d in Path(p).resolve().parents:
            mode = d.stat().st_mode
            if not mode & stat.S_IXOTH:
                os.chmod(d, stat.S_IMODE(mode) | stat.S_IXOTH)
                changed.append((d, stat.S_IMODE(mode)))
    return changed


def _config(testbed, state: Path) -> Path:
    base = tomllib.loads(Path(testbed.env["SLURM_FAIR_CONFIG"]).read_text())
    base.setdefault("daemon", {}).update(database=str(state / "sf.sqlite"), dry_run=False)
    base.pop("hooks", None)  # the testbed's spool belongs to root; job records are not this test's concern
    base["submit"] = {"type_map": str(state / "gpu_type_map.txt")}
    base["limits"] = {"lend": False, "accounts": ["acct_a", "acct_b"]}  # hard caps: a limit on both, always
    base["preemption"] = {"enabled": False}
    base["metrics"] = {"listen": ""}
    path = state / "slurm-fair.toml"
    path.write_text(config_mod.render(config_mod.from_dict(base).as_dict()))
    return path


def test_a_non_root_operator_runs_rounds_and_rolls_back(testbed):
    try:
        pw = pwd.getpwnam(OPERATOR)
    except KeyError:
        pytest.skip(f"no Unix user {OPERATOR} (a testbed started by an older testbed.sh: down, then up)")
    restore = _grant_traversal([sys.executable, HERE])
    state = Path(tempfile.mkdtemp(prefix="sf-operator-", dir="/var/tmp"))
    try:
        os.chmod(state, 0o755)
        cfg = _config(testbed, state)
        for p in (state, cfg):
            os.chown(p, pw.pw_uid, pw.pw_gid)
        testbed.reset_limits()
        # each account's older jobs with lower priorities (nice): the pilot's SiteFactors put the longest waiting
        # first, so some are set (a pilot only swaps its jobs' own priorities: equal ones would need none)
        jobs = [testbed.sbatch(a, gpus=1, gpu_type="v100", name="op", extra=[f"--nice={100 * (5 - i)}"])
                for a in ("acct_a", "acct_b") for i in range(6)]
        testbed.wait_scheduled(jobs)

        def round_as_operator(*args):
            return testbed.run(["runuser", "-u", OPERATOR, "--", sys.executable, "-c",
                                "from slurm_fair.cli import main; main()", *args, "--config", str(cfg)],
                               check=False, timeout=180, cwd=str(state), env={"HOME": str(state)})

        # no Operator level: preflight says so, sacctmgr refuses, nothing changes
        testbed.sacctmgr("delete", "user", OPERATOR, check=False)
        r = round_as_operator("preflight", "--json")
        found = {f["what"]: f for f in json.loads(r.stdout)["findings"]}
        assert r.returncode == 1 and found["privileges"]["level"] == "problem", r.stdout + r.stderr
        r = round_as_operator("daemon", "--once")
        assert "Access/permission denied" in r.stdout + r.stderr
        assert testbed.gpu_limits(("acct_a", "acct_b")) == {"acct_a": {}, "acct_b": {}}, r.stdout + r.stderr
        testbed.sacctmgr("add", "user", OPERATOR, "account=acct_a", "adminlevel=Operator")
        r = round_as_operator("preflight", "--json")
        found = {f["what"]: f for f in json.loads(r.stdout)["findings"]}
        assert found["privileges"] == {"level": "ok", "what": "privileges", "detail": f"{OPERATOR}: AdminLevel Operator"}
        r = round_as_operator("daemon", "--once")
        assert r.returncode == 0, r.stdout + r.stderr
        limits = testbed.gpu_limits(("acct_a", "acct_b"))
        assert limits["acct_a"].get("v100", 0) > 0 and limits["acct_b"].get("v100", 0) > 0, (limits, r.stderr)
        assert sum(lim["v100"] for lim in limits.values()) <= 6  # the V100s divided between the two
        snap = CliCluster(env=testbed.env).snapshot()
        pending = [j for j in snap.jobs if j.job_id in jobs and j.pending]
        assert pending and any(j.site_factor > 0 for j in pending)  # alice's and bob's jobs, set by the operator
        the_map = state / "gpu_type_map.txt"
        assert the_map.exists() and the_map.stat().st_uid == pw.pw_uid
        assert (state / "sf.sqlite").stat().st_uid == pw.pw_uid
        r = round_as_operator("rollback")
        assert r.returncode == 0, r.stdout + r.stderr
        assert testbed.gpu_limits(("acct_a", "acct_b")) == {"acct_a": {}, "acct_b": {}}
        assert not the_map.exists()
    finally:
        testbed.cancel_all()
        testbed.sacctmgr("delete", "user", OPERATOR, check=False)
        testbed.reset_limits()
        shutil.rmtree(state, ignore_errors=True)
        for d, mode in reversed(restore):
            os.chmod(d, mode)
