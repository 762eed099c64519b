"""Validation against a peer (issue 12): our simulator with the ``gavel`` policy against Gavel's own simulator.

``tests/fixtures/gavel_sim/<trace>.json`` holds what Gavel's simulator (stanford-futuredata/gavel at the commit
recorded there) measured on two of its traces, 16 K80 + 16 P100 + 16 V100, 360-s rounds, with its
heterogeneity-aware max-min policy (``max_min_fairness_perf``) and its FIFO (``fifo_perf``): mean JCT, makespan
and every job's JCT. They were recorded once, by running Gavel (the fixture has the exact command and flags);
nothing here computes them. This test runs our simulator on the same jobs (the same trace file, checked by its
SHA-256; one account per job, as Gavel treats every job as a user; the jobs Gavel cannot simulate — a scale
factor without a measured throughput — left out on both sides), the same cluster (one GPU per node, Gavel's
``--num_gpus_per_server 1:1:1``) and the same round length, and asks for mean JCT and makespan within 15 %:

* Gavel's max-min against our ``gavel`` policy (the daemon's limits, SiteFactor and type map on the
  simulated Slurm);
* Gavel's FIFO against our simulated Slurm without slurm-fair (``dry_run``: the daemon sets nothing; Slurm
  starts jobs first come first served, each on its fastest type with room — what ``fifo_perf`` does).

On 23dbec the mean JCT is outside 15 % under both policies; those two cases are expected failures (strict: if
they start passing, the test says so) and docs/simulator.md explains why: Gavel moves a job to another GPU type
every 6-minute round for free, a Slurm job keeps the GPUs it started on, and on this 8-job trace one 8-GPU
job left on P100s decides the mean.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from slurm_fair.sim.cluster import cluster_spec
from slurm_fair.sim.engine import simulate
from slurm_fair.sim.gavel_trace import read_gavel

GAVEL = Path("/work/shared/data/gavel")
THROUGHPUTS = GAVEL / "physical_cluster_throughputs.json"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "gavel_sim"
TRACES = ("23dbec", "51b7ef")
TOLERANCE = 0.15
CLUSTER = "k80=16,p100=16,v100=16"  # Gavel's --cluster_spec 16:16:16 (v100:p100:k80)
OURS = {"max_min_fairness_perf": {"dry_run": False}, "fifo_perf": {"dry_run": True}}
# (trace, Gavel policy, metric) outside 15 %: measured, explained in docs/simulator.md ("Validation against Gavel's simulator")
# (23dbec under max-min came within 15 % with typing by expected completion, issue 28: 2 936 s, Gavel's 2 919 s)
OUTSIDE = {("23dbec", "fifo_perf", "mean_jct")}

needs_gavel = pytest.mark.skipif(not THROUGHPUTS.exists(), reason=f"Gavel's traces and throughputs not present under {GAVEL}")


def fixture(trace: str) -> dict:
    return json.loads((FIXTURES / f"{trace}.json").read_text())


_runs: dict = {}


def ours(trace: str, gavel_policy: str):
    """Our simulator on the fixture's jobs, once per (trace, policy) per test session."""
    key = (trace, gavel_policy)
    if key not in _runs:
        fx = fixture(trace)
        path = GAVEL / "traces" / fx["trace"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == fx["trace_sha256"], f"{path} is not the trace Gavel ran"
        assert hashlib.sha256(THROUGHPUTS.read_bytes()).hexdigest() == fx["throughputs_sha256"]
        tr = read_gavel(path, THROUGHPUTS, accounts="job", unmeasured="skip")
        assert sorted(int(j.id.rsplit("-", 1)[1]) for j in tr.jobs) == fx["lines_kept"]  # the same jobs as Gavel's
        flags = fx["policies"][gavel_policy]["flags"]
        r = simulate(tr, cluster_spec(CLUSTER, node_size=1), "gavel", round_s=float(flags["time_per_iteration_s"]),
                     **OURS[gavel_policy])
        assert r.finished == r.jobs == len(fx["lines_kept"]) and not r.round_errors, r.round_errors
        _runs[key] = r
    return _runs[key]


CASES = [pytest.param(t, p, m, id=f"{t}-{p}-{m}",
                      marks=[pytest.mark.xfail(strict=True, reason="outside 15 %: Gavel migrates jobs between GPU "
                                               "types every round, Slurm jobs stay put (docs/simulator.md)")]
                      if (t, p, m) in OUTSIDE else [])
         for t in TRACES for p in OURS for m in ("mean_jct", "makespan")]


@needs_gavel
@pytest.mark.parametrize("trace,gavel_policy,metric", CASES)
def test_within_15_percent_of_gavels_simulator(trace, gavel_policy, metric):
    theirs = fixture(trace)["policies"][gavel_policy][f"{metric}_s"]
    got = getattr(ours(trace, gavel_policy), metric)
    assert abs(got / theirs - 1) <= TOLERANCE, f"{trace} {gavel_policy} {metric}: ours {got:.0f} s, Gavel's {theirs:.0f} s"


def test_fixtures_record_how_they_were_measured():
    for t in TRACES:
        fx = fixture(t)
        assert len(fx["gavel_commit"]) == 40 and fx["note"].startswith("measured data")
        for p in OURS:
            run = fx["policies"][p]
            assert f"-p {p} " in run["command"] and "-c 16:16:16" in run["command"]
            assert f"--time_per_iteration {run['flags']['time_per_iteration_s']}" in run["command"]
            # the mean is the mean of the per-job JCTs Gavel printed, one per job it ran
            jcts = list(run["jct_s_by_trace_line"].values())
            assert sorted(map(int, run["jct_s_by_trace_line"])) == fx["lines_kept"]
            assert sum(jcts) / len(jcts) == pytest.approx(run["mean_jct_s"], abs=1e-3)
