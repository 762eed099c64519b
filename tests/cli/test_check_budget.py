"""Issue 41 item 8: ``solve --check`` and ``compare`` within a time budget that they report.

Before: the strategy-proofness probe re-solved every false report it planned (gandiva-fair on 300 GPU types,
5 classes: 120 re-solves of ~4 s each, killed at 500 s). Now it stops before a re-solve that would pass its
budget and says so (probe detail, the ``checks:`` line, ``check`` in the JSON)."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from slurm_fair import fairness, policies
from slurm_fair.cli import main
from slurm_fair.model import Allocation, Problem, problem_from_dict

PAPER_24 = str(Path(__file__).resolve().parents[2] / "etc" / "examples" / "paper-2.4.json")


def _problem() -> Problem:
    types = ("k80", "v100", "a100")
    speeds = [[1, 2, 4], [1, 3, 5], [1, 2, 6]]
    return problem_from_dict({"gpu_types": dict(zip(types, (2, 2, 2))), "tenants": [
        {"name": f"u{i}", "classes": [{"name": "job", "throughput": dict(zip(types, row))}]}
        for i, row in enumerate(speeds)]})


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _equal_split(clock: FakeClock, seconds: float):
    """A report-independent mechanism whose every solve takes ``seconds`` on ``clock``."""
    calls = []

    def solve(p: Problem) -> Allocation:
        clock.now += seconds
        calls.append(p)
        vu = p.virtual_users()
        return Allocation(p, "test-equal-split", vu.weight[:, None] / vu.weight.sum() * vu.capacity[None, :])
    return solve, calls


def test_the_probe_stops_before_a_re_solve_that_would_pass_its_budget_and_says_so():
    clock = FakeClock()
    solve, calls = _equal_split(clock, 2.0)
    honest = solve(_problem())
    calls.clear()
    full = fairness.strategy_proof_probe(honest, solve, clock=clock)  # no budget: every planned lie
    planned = len(calls)
    assert planned > 5 and fairness.probe.STOPPED not in full.detail
    calls.clear()
    start = clock.now
    r = fairness.strategy_proof_probe(honest, solve, budget_s=5.0, clock=clock)
    assert len(calls) == 2 and clock.now - start <= 5.0  # a third 2-s solve would end at 6 s
    assert r.value is True  # no gain from the two it tried
    assert f"stopped by the time budget of 5 s after 2 of {planned} false reports" in r.detail


def test_a_probe_with_no_time_for_one_re_solve_does_not_run_and_says_so():
    clock = FakeClock()
    solve, calls = _equal_split(clock, 0.0)
    honest = dataclasses.replace(solve(_problem()), solve_seconds=10.0)  # the honest solve took 10 s
    calls.clear()
    r = fairness.strategy_proof_probe(honest, solve, budget_s=5.0, clock=clock)
    assert calls == [] and r.value is None
    assert r.detail.startswith("not run: one re-solve would pass the time budget (stopped by the time budget of 5 s")


def _slow(monkeypatch, seconds: float):
    """Every policy sleeps ``seconds`` per solve (what a 300-type problem does to gandiva-fair, in short)."""
    real = policies.get

    def get(name):
        policy = real(name)

        def slow(problem, solver=None):
            time.sleep(seconds)
            return policy(problem, solver=solver)
        return slow
    monkeypatch.setattr(policies, "get", get)


def test_solve_check_stops_within_its_budget_and_reports_it(monkeypatch):
    _slow(monkeypatch, 0.25)
    t0 = time.monotonic()
    r = CliRunner().invoke(main, ["solve", "-p", "gavel", "-i", PAPER_24, "--check", "--check-budget", "1"])
    took = time.monotonic() - t0
    assert r.exit_code == 0, r.output
    assert "stopped by the time budget of 1 s" in r.output
    assert "strategy-proofness probe budget 1 s, probe NOT finished" in r.output
    assert took < 0.25 + 1.0 + 1.5  # the honest solve, the budget, and the cheap checks (without: 18 x 0.25 s more)
    out = json.loads(CliRunner().invoke(main, ["solve", "-p", "gavel", "-i", PAPER_24, "--check", "--json",
                                               "--check-budget", "1"]).output)
    assert out["check"]["budget_s"] == 1.0 and out["check"]["probe_finished"] is False
    assert out["check"]["seconds"] <= 1.0 + 1.0


def test_solve_check_budget_needs_check():
    r = CliRunner().invoke(main, ["solve", "-i", PAPER_24, "--check-budget", "5"])
    assert r.exit_code == 2 and "--check-budget needs --check" in r.output


def test_solve_check_finishes_within_a_generous_budget():
    out = json.loads(CliRunner().invoke(main, ["solve", "-p", "oef-coop", "-i", PAPER_24, "--check", "--json"]).output)
    assert out["check"]["probe_finished"] is True and out["check"]["budget_s"] == 30.0


def test_compare_shares_one_budget_among_the_probes_and_names_those_it_stopped(monkeypatch):
    _slow(monkeypatch, 0.25)
    t0 = time.monotonic()
    r = CliRunner().invoke(main, ["compare", "-i", PAPER_24, "--policies", "gavel,oef-coop,equal-share",
                                  "--check-budget", "1.5"])
    took = time.monotonic() - t0
    assert r.exit_code == 0, r.output
    last = r.output.strip().splitlines()[-1]
    assert last.startswith("checks: ") and "probe budget 1.5 s for all policies" in last
    assert "probe NOT finished (stopped by the time budget): gavel, oef-coop, equal-share" in last
    assert took < 3 * 0.25 + 1.5 + 2.0  # three honest solves, the budget, the cheap checks
    out = json.loads(CliRunner().invoke(main, ["compare", "-i", PAPER_24, "--policies", "gavel,oef-coop",
                                               "--check-budget", "1", "--json"]).output)
    assert out["check_budget_s"] == 1.0
    assert sum(p["check"]["seconds"] for p in out["policies"].values()) <= 1.0 + 1.5
    assert np.all([p["check"]["probe_finished"] is False for p in out["policies"].values()])
