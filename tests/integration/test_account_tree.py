"""An account tree on the real testbed: a parent's GrpTRES caps its whole subtree, so slurm-fair manages only
the leaves. root -> t_top -> t_mid -> {t_leaf1 (alice), t_leaf2 (bob)}, plus t_top -> t_side (carol): jobs only
in the leaves. After rounds with jobs pending and running, no parent has a GPU limit, every leaf job runs or
waits only for GPUs (never on a parent's limit), and the leaves' weights split their parents' Shares."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from slurm_fair import config as config_mod
from slurm_fair.store import Store

PY = [sys.executable, "-c", "from slurm_fair.cli import main; main()"]
TREE = [("t_top", "root", 2), ("t_mid", "t_top", 3), ("t_side", "t_top", 1), ("t_leaf1", "t_mid", 1),
        ("t_leaf2", "t_mid", 1)]
USERS = {"t_leaf1": "alice", "t_leaf2": "bob", "t_side": "carol"}
PARENTS = ("t_top", "t_mid")


def _grptres(testbed) -> dict[str, str]:
    out = testbed.run(["sacctmgr", "-n", "-P", "show", "assoc", "where", "account=" + ",".join(a for a, _p, _s in TREE),
                       "format=account,user,grptres"]).stdout
    return {a: t for a, u, t in (line.split("|") for line in out.splitlines()) if not u}


@pytest.fixture
def tree(testbed):
    for acct, parent, share in TREE:
        testbed.sacctmgr("add", "account", acct, f"parent={parent}", f"fairshare={share}", check=False)
    for acct, user in USERS.items():
        testbed.sacctmgr("add", "user", user, f"account={acct}", "fairshare=1", check=False)
    try:
        yield
    finally:
        testbed.cancel_all()
        for acct, user in USERS.items():
            testbed.sacctmgr("delete", "user", user, "where", f"account={acct}", check=False)
        for acct, _p, _s in reversed(TREE):
            testbed.sacctmgr("delete", "account", acct, check=False)


def test_a_three_level_tree_keeps_every_leafs_jobs_running_and_parents_unlimited(testbed, tree, tmp_path):
    base = tomllib.loads(Path(testbed.env["SLURM_FAIR_CONFIG"]).read_text())
    base.setdefault("daemon", {}).update(database=str(tmp_path / "sf.sqlite"), dry_run=False)
    base["submit"] = {"type_map": ""}  # typed jobs only
    base["preemption"] = {"enabled": True, "min_runtime": 600}
    cfg = tmp_path / "slurm-fair.toml"
    cfg.write_text(config_mod.render(config_mod.from_dict(base).as_dict()))
    # an older slurm-fair capped the middle account at 0 (it managed every account): the round must clear it
    testbed.sacctmgr("modify", "account", "where", "name=t_mid", "set", "GrpTRES=gres/gpu=0,gres/gpu:v100=0")
    with Store(tmp_path / "sf.sqlite") as store:
        store.set_managed(["t_mid"])
    jobs = {a: [testbed.sbatch(a, user=u, gpus=1, gpu_type=t, name="tree")
                for t in ("v100", "v100", "k80", "a100", "k80", "v100", "a100")] for a, u in USERS.items()}

    def sf(*args):
        r = subprocess.run([*PY, *args, "--config", str(cfg)], env=testbed.env, capture_output=True, text=True,
                           timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        return r

    testbed.wait_scheduled()
    sf("daemon", "--once")
    sf("daemon", "--once")
    limits = _grptres(testbed)
    assert limits["t_top"] == "" and limits["t_mid"] == "", limits  # parents: no GPU limit, the 0 cleared
    with Store(tmp_path / "sf.sqlite") as store:
        rnd = store.round()
    d = rnd.details
    assert rnd.status == "ok" and not set(PARENTS) & set(d["limits"]), d["limits"]
    # Fair Tree weights: t_top (2) splits into t_mid 3/4 and t_side 1/4; t_mid's 1.5 into two leaves of 0.75
    assert d["weights"]["t_side"] == pytest.approx(0.5) and d["weights"]["t_leaf1"] == pytest.approx(0.75)
    # 21 one-GPU jobs on 16 GPUs: every leaf runs jobs, and none waits on an association limit of a parent
    testbed.wait_for(lambda: all(any(testbed.job_state(j)[0] == "RUNNING" for j in js) for js in jobs.values()),
                     60, what="every leaf running jobs")
    for acct, js in jobs.items():
        for j in js:
            state, reason = testbed.job_state(j)
            assert state == "RUNNING" or not reason.startswith(("AssocGrp", "AssocMax")) or \
                _grptres(testbed)[acct], (acct, j, state, reason)
