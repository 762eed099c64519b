"""Demand is what could start (issue 21 item 2), on the real testbed: held jobs, a job waiting on a dependency and
one with a future begin time are not demand — no share, no claim, no SiteFactor — while another account's runnable
jobs get the GPUs; released, the held jobs count in the next round.

The daemon is driven with ``slurm-fair daemon --once`` (a config of this test: the testbed's, a database in
tmp_path, preemption on so that a share would also mean reclaiming GPUs).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from slurm_fair import config as config_mod
from slurm_fair.store import Store

from .scenario import CAPACITY, sf


def _config(testbed, tmp_path: Path) -> Path:
    base = tomllib.loads(Path(testbed.env["SLURM_FAIR_CONFIG"]).read_text())
    base.setdefault("daemon", {}).update(database=str(tmp_path / "sf.sqlite"), period=300, dry_run=False)
    base["preemption"] = {"enabled": True, "grace": 5, "min_runtime": 3600}  # a lease: nobody is requeued here
    path = tmp_path / "slurm-fair.toml"
    path.write_text(config_mod.render(config_mod.from_dict(base).as_dict()))
    return path


def _round(testbed, cfg: Path, tmp_path: Path) -> dict:
    sf(testbed, cfg, "daemon", "--once")
    with Store(tmp_path / "sf.sqlite") as store:
        r = store.round()
    assert r.status == "ok", r
    return r.details


def test_held_flood_dependency_and_begin_time_are_not_demand(testbed, tmp_path):
    cfg = _config(testbed, tmp_path)
    # acct_b: runnable typed jobs for every GPU, and 4 more that wait
    b_jobs = [testbed.sbatch("acct_b", gpu_type=t, name="runnable") for t, n in CAPACITY.items() for _ in range(n)]
    b_jobs += [testbed.sbatch("acct_b", gpu_type="a100", name="runnable-waits") for _ in range(4)]
    testbed.wait_for(lambda: sum(testbed.job_state(j)[0] == "RUNNING" for j in b_jobs) == 16, 60,
                     what="acct_b's jobs on all 16 GPUs")
    # acct_a: only six held 1-GPU jobs (the flood); acct_c: a dependency and a begin time
    held = [testbed.sbatch("acct_a", name="flood", extra=["--hold"]) for _ in range(6)]
    dep = testbed.sbatch("acct_c", gpu_type="k80", name="after", extra=[f"--dependency=afterok:{b_jobs[0]}"])
    later = testbed.sbatch("acct_c", gpu_type="k80", name="later", extra=["--begin=now+1hour"])
    assert [testbed.job_state(j)[1] for j in held] == ["JobHeldUser"] * 6
    testbed.wait_for(lambda: testbed.job_state(dep)[1] == "Dependency" and testbed.job_state(later)[1] == "BeginTime",
                     30, what="Slurm's reasons Dependency and BeginTime")
    testbed.wait_scheduled()

    d = _round(testbed, cfg, tmp_path)
    assert d["not_demand"] == {"acct_a": {"held": 6}, "acct_c": {"begin-time": 1, "dependency": 1}}
    assert d["demand"].get("acct_a", 0) == 0 and d["demand"].get("acct_c", 0) == 0
    assert d["demand"]["acct_b"] == 20
    assert sum(d["ideal"].get("acct_a", {}).values()) == 0 and sum(d["real"].get("acct_a", {}).values()) == 0
    assert sum(d["real"].get("acct_c", {}).values()) == 0
    assert d["real"]["acct_b"] == CAPACITY  # the whole cluster is acct_b's guarantee
    assert all(sum(d["claims"].get(a, {}).values()) == 0 for a in ("acct_a", "acct_c"))
    assert d["site_factors_set"] == 4  # acct_b's waiting jobs only: none for the held/dependent/future ones
    pre = d["preemption"]
    assert pre["signalled"] == [] and pre["over"] == {}  # nobody is preempted for work that cannot start
    ex = json.loads(sf(testbed, cfg, "explain", "acct_a", "--json"))
    assert ex["not_demand"] == {"held": 6} and ex["not_demand_now"] == {"held": 6}
    assert [(j["job_id"], j["counted"], j["blocked"]) for j in ex["pending_jobs"]] == [(j, False, "held") for j in held]
    assert all("not counted as demand: it is held" in j["slurm_fair"] for j in ex["pending_jobs"])
    text = sf(testbed, cfg, "explain", "acct_c")
    assert "not demand:" in text and "begin-time=1" in text and "dependency=1" in text
    why = sf(testbed, cfg, "why", str(held[0]))
    assert "not counted as demand" in why

    # released: the next round counts them (acct_a gets a share and claims for its waiting jobs)
    testbed.run(["scontrol", "release", ",".join(map(str, held))])
    testbed.wait_for(lambda: all(testbed.job_state(j)[1] != "JobHeldUser" for j in held), 30, what="released")
    d2 = _round(testbed, cfg, tmp_path)
    assert d2["demand"]["acct_a"] == 6 and "acct_a" not in d2["not_demand"]
    assert sum(d2["ideal"]["acct_a"].values()) > 0 and sum(d2["real"]["acct_a"].values()) > 0
    assert d2["not_demand"] == {"acct_c": {"begin-time": 1, "dependency": 1}}  # still blocked
    assert d2["site_factors_set"] == 4 + 6


def test_jobs_over_their_qos_max_wall_are_not_demand(testbed, tmp_path):
    """Issue 30 item 1, on the testbed: four 2-GPU V100 jobs of acct_c under a QOS whose MaxWall they exceed
    (reason QOSMaxWallDurationPerJobLimit: they can never start) got acct_c a guarantee of 6 V100 and set every
    other account's V100 limit to 0. Only jobs that free GPUs would start are demand now."""
    cfg = _config(testbed, tmp_path)
    testbed.sacctmgr("add", "qos", "sf_short", "MaxWall=00:01:00", check=False)
    testbed.sacctmgr("modify", "account", "where", "name=acct_c", "set", "qos+=sf_short")
    try:
        b_jobs = [testbed.sbatch("acct_b", gpu_type=t, name="runnable") for t, n in CAPACITY.items() for _ in range(n)]
        testbed.wait_for(lambda: sum(testbed.job_state(j)[0] == "RUNNING" for j in b_jobs) == 16, 60,
                         what="acct_b's jobs on all 16 GPUs")
        more_b = [testbed.sbatch("acct_b", gpu_type="v100", name="runnable-waits") for _ in range(2)]
        stuck = [testbed.sbatch("acct_c", gpus=2, gpu_type="v100", name="too-long",
                                extra=["--qos=sf_short", "--time=10"]) for _ in range(4)]
        testbed.wait_for(lambda: all(testbed.job_state(j)[1] == "QOSMaxWallDurationPerJobLimit" for j in stuck), 30,
                         what="Slurm's reason QOSMaxWallDurationPerJobLimit")
        testbed.wait_scheduled()
        d = _round(testbed, cfg, tmp_path)
        assert d["not_demand"] == {"acct_c": {"cannot-start": 8}}
        assert d["demand"].get("acct_c", 0) == 0 and sum(d["real"].get("acct_c", {}).values()) == 0
        assert sum(d["claims"].get("acct_c", {}).values()) == 0
        assert d["real"]["acct_b"] == CAPACITY  # the whole cluster stays acct_b's guarantee
        assert all(j not in (d.get("untyped_targets") or {}) for j in stuck)
        assert d["preemption"]["signalled"] == []
        assert "v100" not in (d["limits"].get("acct_b") or {}) or d["limits"]["acct_b"]["v100"] >= 6
        why = sf(testbed, cfg, "why", str(stuck[0]))
        assert "not counted as demand" in why and "QOSMaxWallDurationPerJobLimit" in why
        assert more_b
    finally:
        testbed.cancel_all()
        testbed.sacctmgr("modify", "account", "where", "name=acct_c", "set", "qos-=sf_short", check=False)
        testbed.sacctmgr("delete", "qos", "sf_short", check=False)
