"""Demand that is real (issue 41 items 1 and 2), on the real testbed: a requeued job whose owner moved its begin time
a year ahead, and jobs of an account the site capped at ``v100=0`` pending on ``AssocGrpGRES`` — no share, no claim,
no limit lowered for another account, no signal or requeue for them; a requeued job with a begin time due within a
round still counts. Rounds run with ``slurm-fair daemon --once`` (test_preemption's config: preemption on,
min_runtime 0, so any share they got would also signal running jobs).
"""

from __future__ import annotations

import json
import tomllib

from slurm_fair import config as config_mod

from .scenario import sf
from .test_preemption import write_config
from .test_unrequeueable import _round

V100 = 6  # the testbed's V100s: 4 on v100-1, 2 on mixed-1


def _requeue(testbed, job_id: int) -> dict[str, str]:
    """``scontrol requeue`` a running job; it once it pends again (restart count 1, Slurm's reason BeginTime)."""
    testbed.run(["scontrol", "requeue", str(job_id)])
    return testbed.wait_for(lambda: (j := testbed.job(job_id)).get("JobState") == "PENDING"
                            and j.get("Restarts") == "1" and j, 60, what=f"job {job_id} requeued and pending")


def _set_begin(testbed, job_id: int, when: str) -> None:
    testbed.run(["scontrol", "update", f"jobid={job_id}", f"StartTime={when}"])
    testbed.wait_for(lambda: testbed.job_state(job_id) == ("PENDING", "BeginTime"), 30,
                     what=f"job {job_id} pending on BeginTime")


def _fill_v100(testbed, account: str, more: int) -> list[int]:
    """``account`` runs 1-GPU V100 jobs on every V100, and ``more`` that wait."""
    jobs = [testbed.sbatch(account, gpu_type="v100", name="runnable") for _ in range(V100 + more)]
    testbed.wait_for(lambda: sum(testbed.job_state(j)[0] == "RUNNING" for j in jobs) == V100, 60,
                     what=f"{account}'s jobs on all {V100} V100")
    return jobs


def test_requeued_jobs_moved_a_year_ahead_are_not_demand_and_a_due_one_is(testbed, tmp_path):
    cfg = write_config(testbed, tmp_path)
    # acct_a: three 2-GPU V100 jobs run (all six V100), then are requeued (restart count 1)
    mine = [testbed.sbatch("acct_a", gpus=2, gpu_type="v100", name="requeued", extra=["--requeue"])
            for _ in range(3)]
    for j in mine:
        testbed.wait_state(j, "RUNNING")
    for j in mine:
        _requeue(testbed, j)
    for j in mine:  # the owner moves them a year ahead
        _set_begin(testbed, j, "now+365days")
    b_jobs = _fill_v100(testbed, "acct_b", 2)  # acct_b takes every V100 and waits for two more
    assert all(testbed.job(j)["Restarts"] == "1" for j in mine)
    b_running = {j for j in b_jobs if testbed.job_state(j)[0] == "RUNNING"}

    # round 1: nothing of acct_a's counts
    testbed.wait_scheduled()
    d = _round(testbed, cfg, tmp_path)
    assert d["not_demand"] == {"acct_a": {"begin-time": 6}}, d["not_demand"]
    assert d["demand"].get("acct_a", 0) == 0 and d["demand"]["acct_b"] == V100 + 2
    assert sum(d["ideal"].get("acct_a", {}).values()) == 0 and sum(d["real"].get("acct_a", {}).values()) == 0
    assert sum(d["claims"].get("acct_a", {}).values()) == 0
    assert d["real"]["acct_b"].get("v100", 0) == V100  # every V100 is acct_b's guarantee
    # no limit below what acct_b runs, in the plan or in Slurm
    assert d["limits"].get("acct_b", {}).get("v100", V100) >= V100, d["limits"]
    assert testbed.gpu_limits()["acct_b"].get("v100", V100) >= V100, testbed.gpu_limits()
    pre = d["preemption"]
    assert pre["signalled"] == [] and pre["requeued"] == [] and pre["over"] == {}, pre
    testbed.wait_scheduled()
    # nothing signalled or requeued in Slurm: the same jobs run, none restarted (a pending one's reason may change)
    assert {j for j in b_jobs if testbed.job_state(j)[0] == "RUNNING"} == b_running and len(b_running) == V100
    assert all(testbed.job(j)["Restarts"] == "0" for j in b_jobs)
    ex = json.loads(sf(testbed, cfg, "explain", "acct_a", "--json"))
    assert ex["not_demand"] == {"begin-time": 6}
    assert "not counted as demand" in sf(testbed, cfg, "why", str(mine[0]))

    # round 2: one job's begin time back to a requeue's (120 s, as Slurm's default cred_expire gives; the
    # testbed's 11 s would pass before the round): due within a round, it is demand again and gets a share
    _set_begin(testbed, mine[2], "now+120")
    testbed.wait_scheduled()
    d2 = _round(testbed, cfg, tmp_path)
    assert d2["not_demand"] == {"acct_a": {"begin-time": 4}}, d2["not_demand"]
    assert d2["demand"]["acct_a"] == 2 and d2["demand"]["acct_b"] == V100 + 2
    assert 0 < sum(d2["ideal"]["acct_a"].values()) <= 2 and sum(d2["real"]["acct_a"].values()) > 0


def test_an_account_the_site_capped_claims_nothing(testbed, tmp_path):
    cfg = write_config(testbed, tmp_path)
    base = tomllib.loads(cfg.read_text())
    base.setdefault("limits", {})["site_limits"] = "adopt"  # a site limit is kept as an upper bound
    cfg.write_text(config_mod.render(config_mod.from_dict(base).as_dict()))
    # the site caps acct_a at v100=0 before slurm-fair manages it; `limits adopt` records it as the site's
    testbed.sacctmgr("modify", "account", "where", "name=acct_a", "set", "GrpTRES=gres/gpu:v100=0")
    adopted = json.loads(sf(testbed, cfg, "limits", "adopt", "--json"))
    assert adopted["limits"].get("acct_a") == {"v100": 0}, adopted
    # V100s idle: only the site's cap holds acct_a's jobs (AssocGrpGRES); then acct_b takes them all and waits for
    # two more (24.11 then shows the capped jobs on Resources or None: the cap holds them all the same)
    capped = [testbed.sbatch("acct_a", gpus=2, gpu_type="v100", name="capped") for _ in range(2)]
    testbed.wait_for(lambda: all(testbed.job_state(j)[1] in ("AssocGrpGRES", "AssocGrpTRES") for j in capped), 30,
                     what="Slurm's reason AssocGrpGRES")
    b_jobs = _fill_v100(testbed, "acct_b", 2)
    testbed.wait_scheduled(b_jobs)  # not the capped jobs: 24.11 may leave them on None
    assert all(testbed.job_state(j)[0] == "PENDING" for j in capped)

    d = _round(testbed, cfg, tmp_path)
    assert d["not_demand"] == {"acct_a": {"site-limit": 4}}, d["not_demand"]
    assert d["demand"].get("acct_a", 0) == 0 and d["demand"]["acct_b"] == V100 + 2
    assert sum(d["ideal"].get("acct_a", {}).values()) == 0 and sum(d["real"].get("acct_a", {}).values()) == 0
    assert sum(d["claims"].get("acct_a", {}).values()) == 0
    assert d["real"]["acct_b"].get("v100", 0) == V100
    assert d["limits"].get("acct_b", {}).get("v100", V100) >= V100, d["limits"]
    limits = testbed.gpu_limits()
    assert limits["acct_b"].get("v100", V100) >= V100 and limits["acct_a"]["v100"] == 0, limits  # the cap kept
    assert d["preemption"]["signalled"] == [] and d["preemption"]["over"] == {}
    assert sum(testbed.job_state(j)[0] == "RUNNING" for j in b_jobs) == V100
    ex = json.loads(sf(testbed, cfg, "explain", "acct_a", "--json"))
    assert ex["not_demand"] == {"site-limit": 4}
    assert all(j["blocked"] == "site-limit" and not j["counted"] for j in ex["pending_jobs"]), ex["pending_jobs"]
    assert "site-limit" in sf(testbed, cfg, "explain", "acct_a")
    why = sf(testbed, cfg, "why", str(capped[0]))
    assert "the association limit that holds it is the site's" in why, why
