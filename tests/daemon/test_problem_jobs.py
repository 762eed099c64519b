"""Jobs in the problem (issue 11, item 1): the optional per-class ``jobs`` list, what a per-job policy sees
without it, and the daemon filling it from Slurm (time limit left as remaining work)."""

from __future__ import annotations

import math

import pytest

from slurm_fair.cluster import parse as SP
from slurm_fair.cluster import slurm_json
from slurm_fair.errors import InputError
from slurm_fair.model import DEFAULT_REMAINING, ClassJob, problem_from_dict, problem_to_dict

from tests.conftest import VERSIONS, text


def doc(jobs=None, demand=None):
    c = {"name": "c", "throughput": {"k80": 1, "v100": 4}}
    if jobs is not None:
        c["jobs"] = jobs
    if demand is not None:
        c["demand"] = demand
    return {"gpu_types": {"k80": 4, "v100": 2}, "tenants": [{"name": "t", "classes": [c]}]}


def test_jobs_parse_round_trip_and_give_the_demand():
    p = problem_from_dict(doc([{"id": "17", "gpus": 2, "remaining": 600}, {"id": "18", "gpus": 1, "remaining": 0}]))
    c = p.tenants[0].classes[0]
    assert c.jobs == (ClassJob("17", 2, 600.0), ClassJob("18", 1, 0.0))
    assert c.effective_demand() == 3.0  # no demand given: the jobs' GPUs
    assert c.job_list(6) == (c.jobs, False)
    assert problem_from_dict(problem_to_dict(p)) == p
    # an explicit demand still wins
    assert problem_from_dict(doc([{"id": "a", "gpus": 2, "remaining": 1}], demand=5)).tenants[0].classes[0].effective_demand() == 5


def test_without_jobs_a_per_job_policy_sees_one_1_gpu_job_per_gpu_of_demand():
    c = problem_from_dict(doc(demand=3)).tenants[0].classes[0]
    jobs, made_up = c.job_list(6)
    assert made_up and [j.gpus for j in jobs] == [1, 1, 1]
    assert all(j.remaining == DEFAULT_REMAINING for j in jobs) and len({j.id for j in jobs}) == 3
    unlimited = problem_from_dict(doc()).tenants[0].classes[0]
    assert len(unlimited.job_list(6)[0]) == 6  # unlimited demand: one per usable GPU


@pytest.mark.parametrize("jobs, path, why", [
    ({"id": "a"}, "tenants[0].classes[0].jobs", "must be a list"),
    (["x"], "tenants[0].classes[0].jobs[0]", "must be an object"),
    ([{"id": "a", "gpus": 1, "remaining": 1, "remainig": 2}], "tenants[0].classes[0].jobs[0].remainig", "unknown"),
    ([{"id": "", "gpus": 1, "remaining": 1}], "tenants[0].classes[0].jobs[0].id", "non-empty"),
    ([{"id": 3, "gpus": 1, "remaining": 1}], "tenants[0].classes[0].jobs[0].id", "non-empty"),
    ([{"id": "a", "gpus": 1, "remaining": 1}, {"id": "a", "gpus": 1, "remaining": 1}],
     "tenants[0].classes[0].jobs[1].id", "duplicate"),
    ([{"id": "a", "gpus": 0, "remaining": 1}], "tenants[0].classes[0].jobs[0].gpus", ""),
    ([{"id": "a", "gpus": 1.5, "remaining": 1}], "tenants[0].classes[0].jobs[0].gpus", "whole"),
    ([{"id": "a", "gpus": 1, "remaining": -1}], "tenants[0].classes[0].jobs[0].remaining", ""),
    ([{"id": "a", "gpus": 1, "remaining": math.inf}], "tenants[0].classes[0].jobs[0].remaining", ""),
    ([{"id": "a", "gpus": 1, "remaining": 1e12}], "tenants[0].classes[0].jobs[0].remaining", ""),
    ([{"id": "a", "gpus": 1}], "tenants[0].classes[0].jobs[0].remaining", ""),
])
def test_bad_jobs_name_the_field(jobs, path, why):
    with pytest.raises(InputError) as e:
        problem_from_dict(doc(jobs))
    assert e.value.field == path and why in str(e.value)


@pytest.mark.parametrize("version", VERSIONS)
def test_time_limit_parsed_from_both_layouts(version):
    jobs = SP.parse_jobs(text(version, "squeue.json"))
    assert jobs and all(j.time_limit == 30 for j in jobs)  # the captures were submitted with -t 30
    assert slurm_json.as_minutes({"set": True, "infinite": True, "number": 0}, "x") is None
    assert slurm_json.as_minutes(4294967295, "x") is None and slurm_json.as_minutes(None, "x") is None
    assert slurm_json.as_minutes("UNLIMITED", "x") is None


def test_the_daemon_fills_jobs_from_slurm():
    import dataclasses

    from slurm_fair.daemon import plan as P

    from tests.conftest import CFG, job, snap

    run = dataclasses.replace(job(1, "acct_a", gpus=2, name="x", state="RUNNING", submit=1000), time_limit=60)
    pend = dataclasses.replace(job(2, "acct_a", gpus=1, name="x"), time_limit=30)
    free = job(3, "acct_a", gpus=4, name="x")  # no time limit known
    s = dataclasses.replace(snap([run, pend, free]), taken_at=1000 + 1 + 600.0)  # run started at 1001
    d = P.observe_demand(s, CFG)
    b = P.build_problem(s, d, [], [], CFG)
    (cls,) = b.problem.tenants[0].classes
    assert cls.jobs == (ClassJob("1", 2, 3600.0 - 600.0), ClassJob("2", 1, 1800.0), ClassJob("3", 4, DEFAULT_REMAINING))
