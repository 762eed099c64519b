"""Issue 40, item 1, on the testbed: no site value overwritten or cleared, read back from Slurm (sacctmgr).

* (A) the admin adds ``gres/gpu:k80=1`` by sacctmgr to an account slurm-fair manages (a key it never wrote): after
  several daemon rounds — acct_a waiting, then nobody waiting — it is still 1 (never raised, never cleared), and
  ``rollback`` leaves it (named "kept") while it takes back everything slurm-fair wrote. Before: the next round
  cleared it.
* (B) a new account created with ``GrpTRES=gres/gpu:v100=3`` is left alone by the round that first sees it and by
  every round after, and rollback leaves it as it is. Before: its site limit was never recorded, so the second
  round took it for a managed account and wrote the lending limits over it (``gres/gpu=13`` on top here).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from slurm_fair import config as config_mod
from slurm_fair.store import Store

PY = [sys.executable, "-c", "from slurm_fair.cli import main; main()"]
NEW = "sf_drift_new"  # the account of case B, created and deleted by the test


def _config(testbed, tmp_path: Path) -> Path:
    base = tomllib.loads(Path(testbed.env["SLURM_FAIR_CONFIG"]).read_text())
    base.setdefault("daemon", {}).update(database=str(tmp_path / "sf.sqlite"), dry_run=False, period=3)
    base["preemption"] = {"enabled": True, "min_runtime": 600}  # claims out of borrowed GPUs, nothing preempted
    base["limits"] = {"ownership_file": str(tmp_path / "ownership" / "limits.json")}  # lend, respect: the defaults
    base["metrics"] = {"listen": ""}
    path = tmp_path / "slurm-fair.toml"
    path.write_text(config_mod.render(config_mod.from_dict(base).as_dict()))
    return path


def _sf(testbed, cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([*PY, *args, "--config", str(cfg)], env=testbed.env, capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def _round(testbed, cfg: Path) -> dict:
    _sf(testbed, cfg, "daemon", "--once")
    with Store(config_mod.load(cfg).database_path) as st:
        r = st.round()
        assert r.status == "ok", r.message
        return r.details


def _grptres(testbed, account: str) -> str:
    out = testbed.run(["sacctmgr", "-n", "-P", "show", "assoc", "where", f"account={account}",
                       "format=account,user,grptres"]).stdout
    rows = [t for a, u, t in (line.split("|") for line in out.splitlines()) if a == account and not u]
    return rows[0] if rows else "<none>"


def _b_on_every_gpu(testbed) -> None:
    for t, n in (("a100", 4), ("v100", 6), ("k80", 6)):
        for _ in range(n):
            testbed.sbatch("acct_b", gpus=1, gpu_type=t, name="flat")
    testbed.wait_for(lambda: len(testbed.run(["squeue", "-h", "-t", "R"]).stdout.split("\n")) >= 16, 60,
                     what="acct_b on every GPU")


def _a_waits(testbed) -> None:
    for _ in range(3):
        testbed.sbatch("acct_a", gpus=1, gpu_type="v100", name="fast")
    testbed.wait_scheduled()  # acct_b on all 16 GPUs, acct_a's three V100 jobs pending: what the rounds see


def _nobody_waits(testbed) -> None:
    for jid in testbed.job_ids():
        if testbed.job_state(jid)[0] == "PENDING":
            testbed.run(["scancel", str(jid)])
    testbed.wait_for(lambda: all(testbed.job_state(j)[0] != "PENDING" for j in testbed.job_ids()), 60,
                     what="no job pending")


@pytest.fixture
def new_account(testbed):
    testbed.sacctmgr("delete", "account", NEW, check=False)  # left over by an aborted run
    try:
        yield NEW
    finally:
        testbed.sacctmgr("delete", "account", NEW, check=False)


def test_a_key_added_by_hand_to_a_managed_account_is_never_raised_nor_cleared(testbed, tmp_path):
    cfg = _config(testbed, tmp_path)
    _b_on_every_gpu(testbed)
    _a_waits(testbed)
    _round(testbed, cfg)
    # acct_a's 3 waiting jobs claim 3 of the 6 V100s: every other account may use 3 of them, 13 GPUs in all
    assert testbed.gpu_limits()["acct_b"] == {"v100": 3, "*": 13}, testbed.gpu_limits()
    testbed.sacctmgr("modify", "account", "where", "name=acct_b", "set", "GrpTRES=gres/gpu:k80=1")
    assert testbed.gpu_limits()["acct_b"] == {"v100": 3, "*": 13, "k80": 1}  # sacctmgr added the one key
    for _ in range(2):
        d = _round(testbed, cfg)
        assert testbed.gpu_limits()["acct_b"] == {"v100": 3, "*": 13, "k80": 1}, testbed.gpu_limits()
    assert d["drift"] == {"acct_b": {"k80": 1}}  # shown as the site's (status: set by hand, kept)
    _nobody_waits(testbed)
    _round(testbed, cfg)  # no claim: slurm-fair clears every limit it wrote ...
    assert testbed.gpu_limits()["acct_b"] == {"k80": 1}, testbed.gpu_limits()  # ... and not the site's
    _a_waits(testbed)
    _round(testbed, cfg)  # acct_a waits again: slurm-fair's limits come back beside the site's
    assert testbed.gpu_limits()["acct_b"] == {"v100": 3, "*": 13, "k80": 1}, testbed.gpu_limits()
    out = json.loads(_sf(testbed, cfg, "rollback", "--json").stdout)
    assert not out["failed"] and out["kept"] == {"acct_b": {"k80": 1}}, out
    assert _grptres(testbed, "acct_b") == "gres/gpu:k80=1"
    assert _grptres(testbed, "acct_a") == "" and _grptres(testbed, "acct_c") == ""


def test_a_new_account_with_its_own_limit_stays_left_alone(testbed, tmp_path, new_account):
    cfg = _config(testbed, tmp_path)
    _b_on_every_gpu(testbed)
    _a_waits(testbed)
    _round(testbed, cfg)  # slurm-fair manages acct_a, acct_b, acct_c
    assert _grptres(testbed, "acct_c") != ""
    # a new account arrives with a limit of its own (no jobs yet: its fair-share share makes it a managed account)
    testbed.sacctmgr("add", "account", new_account, "fairshare=1")
    testbed.sacctmgr("modify", "account", "where", f"name={new_account}", "set", "GrpTRES=gres/gpu:v100=3")
    assert _grptres(testbed, new_account) == "gres/gpu:v100=3"
    for _ in range(2):
        d = _round(testbed, cfg)
        assert new_account in d["left_alone"], d["left_alone"]
        assert _grptres(testbed, new_account) == "gres/gpu:v100=3"  # before, the 2nd round: v100=3,gres/gpu=13
    _nobody_waits(testbed)
    _round(testbed, cfg)
    assert _grptres(testbed, new_account) == "gres/gpu:v100=3"
    with Store(config_mod.load(cfg).database_path) as st:
        assert st.site_limits()[new_account] == {"v100": 3}
    out = json.loads(_sf(testbed, cfg, "rollback", "--json").stdout)
    assert not out["failed"] and new_account not in out["limits"], out
    assert _grptres(testbed, new_account) == "gres/gpu:v100=3"
    assert _grptres(testbed, "acct_b") == ""  # slurm-fair's own taken back
