"""Idle GPUs lend, on the real testbed (Slurm 22.05 and 24.11): with the daemon running (``slurm-fair daemon``,
not ``--once``), an account that had no jobs submits a burst of untyped 1-GPU jobs into the idle testbed.
job_submit.lua spreads them over the types the map lists with room (its Lua state counts what it handed out
since the map last changed), no limit holds anything back, and all of them run at once, on every GPU type —
as they would with Slurm alone."""

from __future__ import annotations

import re
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

from slurm_fair import config as config_mod
from slurm_fair.store import Store

from .scenario import CAPACITY, PY, gpus_in_use, jobs_of, stop_daemon


def _config(testbed, tmp_path: Path) -> Path:
    base = tomllib.loads(Path(testbed.env["SLURM_FAIR_CONFIG"]).read_text())
    if not base.get("submit", {}).get("type_map"):
        pytest.skip("the testbed has no submit.type_map: restart it (testbed.sh down; up) to install it")
    base.setdefault("daemon", {}).update(database=str(tmp_path / "sf.sqlite"), period=300, early_round_after=2,
                                         dry_run=False)
    base["metrics"] = {"listen": ""}
    path = tmp_path / "slurm-fair.toml"
    path.write_text(config_mod.render(config_mod.from_dict(base).as_dict()))
    return path


def test_a_burst_into_the_idle_testbed_runs_at_once_on_every_type(testbed, tmp_path):
    cfg = _config(testbed, tmp_path)
    c = config_mod.load(cfg)
    saved_map = c.type_map_path.read_bytes() if c.type_map_path.exists() else None
    c.type_map_path.unlink(missing_ok=True)
    proc = subprocess.Popen([*PY, "daemon", "--config", str(cfg)], env=testbed.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        store = Store(c.database_path)
        try:
            testbed.wait_for(lambda: any(r.status == "ok" for r in store.rounds(limit=5)) and c.type_map_path.exists(),
                             60, what="the daemon's first round and its type map")
        finally:
            store.close()
        # acct_b had no jobs: its line lends every free GPU
        line = next(ln for ln in c.type_map_path.read_text().splitlines() if ln.startswith("acct_b "))
        rooms = dict(cell.split(":")[:2] for cell in line.split()[1].split(","))
        assert {t: int(n) for t, n in rooms.items()} == CAPACITY, line
        t0 = time.monotonic()
        jobs = [testbed.sbatch("acct_b", name="burst") for _ in range(sum(CAPACITY.values()))]
        testbed.wait_for(lambda: len(jobs_of(testbed, "acct_b", "R")) == len(jobs), 30,
                         what="all 16 burst jobs running")
        took = time.monotonic() - t0
        assert gpus_in_use(testbed)["acct_b"] == CAPACITY  # on every type, as many as it has
        for j in jobs:  # typed by job_submit.lua (and marked flexible), or left untyped within the #@untyped room
            info = testbed.job(j)
            typed = re.search(r"gpu:[A-Za-z]", info.get("TresPerNode") or info.get("Gres") or "") is not None
            assert "fair:flex" in (info.get("Comment") or "") or not typed, info
        print(f"\nburst: 16 untyped jobs submitted and running in {took:.1f} s, spread {CAPACITY}")
    finally:
        rc = stop_daemon(proc)
        testbed.cancel_all()
        if saved_map is None:
            c.type_map_path.unlink(missing_ok=True)
        else:
            c.type_map_path.write_bytes(saved_map)
    assert rc == 0, proc.stderr.read()[-2000:]
