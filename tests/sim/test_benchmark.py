"""sim/benchmark.py: the vs-Slurm benchmark's baselines, measures of one simulation and issue 39's goals, on
schedules and numbers worked by hand (every expected number derived in a comment)."""

from __future__ import annotations

import pytest

from slurm_fair.errors import InputError
from slurm_fair.fairness.realized import Run, realized
from slurm_fair.sim.benchmark import (BASELINES, GoalSpec, RunMeasures, above_baseline, account_jct_ratio, baselines,
                                      goal_checks, lowest, met, requeue_checks, run_measures, trace_cell,
                                      weighted_percentile, worst)
from slurm_fair.sim.outcome import Ratios

THR = {"a": {"k80": 1.0, "p100": 2.0, "v100": 4.0}, "b": {"k80": 1.0, "p100": 3.0, "v100": 2.0},
       "c": {"k80": 0.0, "p100": 1.0, "v100": 1.0}}


def test_baselines_and_the_simulate_arguments_they_pass():
    assert [b.name for b in baselines("all")] == ["fifo-fast", "fifo-slow", "flat-fast", "flat-slow", "bytype-fast",
                                                  "bytype-slow"]
    assert [b.name for b in baselines(" bytype-fast, fifo-class,bytype-fast")] == ["bytype-fast", "fifo-class"]
    assert [b.name for b in baselines("fifo-class,all")][:2] == ["fifo-class", "fifo-fast"]
    assert len(baselines("all,fifo-class")) == 7
    with pytest.raises(InputError, match="fifo-typo"):
        baselines("fifo-typo")
    types = ["k80", "p100", "v100"]
    assert BASELINES["fifo-class"].kwargs(THR, types) == {"dry_run": True}
    assert BASELINES["fifo-fast"].kwargs(THR, types) == {"dry_run": True, "priority": "fifo",
                                                         "node_weights": ["v100", "p100", "k80"]}
    assert BASELINES["bytype-slow"].kwargs(THR, types) == {
        "dry_run": True, "priority": "fairshare", "billing": "by-type", "node_weights": ["k80", "p100", "v100"]}
    assert BASELINES["flat-fast"].kwargs(THR, types)["billing"] == "flat"
    # the order is the by-type billing weights' (relative to each class's slowest type: a 1, 2, 4; b 1, 3, 2;
    # c -, 1, 1, a type a class does not run on left out of its mean -> k80 1, p100 2, v100 7/3); class b alone:
    # k80 1, p100 3, v100 2; class c alone: k80 weighs 1 (no class runs there), p100 and v100 1 (ties by name)
    assert BASELINES["flat-slow"].kwargs({"b": THR["b"]}, types)["node_weights"] == ["k80", "v100", "p100"]
    assert BASELINES["fifo-fast"].kwargs({"b": THR["b"]}, types)["node_weights"] == ["p100", "v100", "k80"]
    assert BASELINES["fifo-slow"].kwargs({"c": THR["c"]}, types)["node_weights"] == ["k80", "p100", "v100"]


def test_weighted_percentile_weighs_each_value():
    # total 9 300; 5 % = 465: 0 (100) and 0 (200) reach 300 only, 0.5 (3 600) reaches 3 900 -> 0.5
    assert weighted_percentile([0.5, 0.0, 1.5, 0.0, 1.5], [3600, 100, 3600, 200, 1800], 0.05) == 0.5
    assert weighted_percentile([0.2, 0.9], [1.0, 1.0], 0.5) == 0.2  # exactly half: the lower value
    assert weighted_percentile([0.2, 0.9], [1.0, 1.0], 0.51) == 0.9
    assert weighted_percentile([0.3, 0.1], [0.0, 5.0], 0.99) == 0.1  # a value without weight does not count
    assert weighted_percentile([], [], 0.05) is None
    assert weighted_percentile([1.0], [0.0], 0.05) is None


def _schedule():
    """4 K80, accounts a and b of weight 1 (shares: 2 K80 each), one class of speed 1; t1 = 12 800 s.
    b: b1-b3 run [0, 7200); b4, submitted at 0, runs [5400, 7200).
    a: a1 runs [0, 3600); a2, submitted at 0, runs [3700, 7300); a3, submitted at 9000, runs [9200, 12800)."""
    def job(name, acct, submit, start, end):
        return Run(name, acct, "c", 1, submit, "k80", start, end, True)
    runs = [job(f"b{i}", "b", 0.0, 0.0, 7200.0) for i in (1, 2, 3)] + [job("b4", "b", 0.0, 5400.0, 7200.0)]
    runs += [job("a1", "a", 0.0, 0.0, 3600.0), job("a2", "a", 0.0, 3700.0, 7300.0),
             job("a3", "a", 9000.0, 9200.0, 12800.0)]
    return runs, realized(runs, {"a": 1.0, "b": 1.0}, {"k80": 4}, {"c": {"k80": 1.0}}, 0.0, 12800.0)


def test_run_measures_of_a_schedule_worked_by_hand():
    runs, rec = _schedule()
    m = run_measures(rec, runs)
    # episodes: a [0, 3700) (a2 waits), a [9000, 9200) (a3 waits, 200 s: short), b [0, 5400) (b4 waits)
    assert m.episodes == 3 and m.long_episodes == 2
    # a's long episode: received 1 x 3600; entitled 2 (demand 2) x 3600 + 1 (demand 1: a2) x 100 = 7300
    # b's: received 3 x 5400, entitled 2 x 5400: 1.5 (not capped). p5 = r_a + 0.05 (1.5 - r_a)
    r_a = 3600 / 7300
    assert m.min_ratio == pytest.approx(r_a) and m.min_ratio_account == "a"
    assert m.p5_ratio == pytest.approx(r_a + 0.05 * (1.5 - r_a))
    # account-hours: a hour 0 0.5 (3 600 s), a hour 1 0 (100 s), a hour 2 0 (200 s), b hours 0 and 1 1.5 (3 600 s,
    # 1 800 s): 5 % of 9 300 s is 465 s, past the 300 s at 0 -> 0.5 (unweighted, it would be 0)
    assert m.p5_hours == pytest.approx(0.5)
    # time to fair share: b 0 (3 >= 0.95 x 2 from the start); a 3 700 and 200 (the episodes ended first: their
    # length) -> [0, 200, 3700]: median 200, p95 = 200 + 0.9 x 3500
    assert m.ttfs_median == pytest.approx(200.0) and m.ttfs_p95 == pytest.approx(3350.0)
    # envy: a envies b over all of [0, 3700) (b's 3 K80 capped at a's demand beat a's 1, then 0); b envies nobody;
    # compared: every pair-second both have a job in the system: a [0, 7300) and [9000, 12800), b [0, 7200):
    # 7 200 s each way (over a's backlogged pair-time only: 3700 / 3700)
    assert m.envy_share == pytest.approx(3700 / 14400)
    # per account over the long episodes only: a's short one (ratio 0) would give (r_a x 3700 + 0) / 3900
    assert m.account_ratios == {"a": pytest.approx(r_a), "b": pytest.approx(1.5)}
    assert m.lowest_account == (pytest.approx(r_a), "a")
    # mean JCT: a (3600 + 7300 + 3800) / 3; b 7200 each
    assert m.account_jct == {"a": pytest.approx(4900.0), "b": pytest.approx(7200.0)}
    # run times 3600 x 3 (a), 7200 x 3, 1800 (b): median 3600
    assert m.median_run == pytest.approx(3600.0)


def test_run_measures_sum_a_requeued_jobs_runs_and_need_a_record():
    runs = [Run("x", "a", "c", 1, 0.0, "k80", 0.0, 100.0, False), Run("x", "a", "c", 1, 0.0, "k80", 160.0, 460.0, True),
            Run("y", "a", "c", 1, 0.0, "k80", 0.0, 50.0, True), Run("z", "a", "c", 1, 0.0, None, None, None, False),
            Run("w", "a", "c", 1, 0.0, "k80", 10.0, None, False)]
    # x ran 100 + 300 = 400 s, y 50 s; z never started, w did not finish: median (400 + 50) / 2
    m = run_measures(None, runs)
    assert m.median_run == pytest.approx(225.0)
    assert (m.episodes, m.p5_ratio, m.p5_hours, m.ttfs_p95, m.envy_share, m.account_ratios) == (0, None, None, None,
                                                                                                 None, {})


def test_account_jct_ratio_and_lowest_name_the_account():
    # a: 200 / 100, b: 90 / 100; c has no reference run, d a reference of 0
    assert account_jct_ratio({"a": 200.0, "b": 90.0, "c": 50.0, "d": 5.0}, {"a": 100.0, "b": 100.0, "d": 0.0}) == \
        (2.0, "a")
    assert account_jct_ratio({"b": 2.0, "a": 2.0}, {"a": 1.0, "b": 1.0}) == (2.0, "a")  # a tie: the first name
    assert account_jct_ratio({"a": 1.0}, {}) == (None, None)
    assert lowest({"b": 0.5, "a": 0.7}) == (0.5, "b") and lowest({}) == (None, None)


def _m(p5=None, low=None, low_acct=None, accounts=None, ttfs=None, envy=None, median_run=None, jct=None):
    return RunMeasures(1, 1, p5, low, low_acct, p5, None, ttfs, envy, accounts or {}, jct or {}, median_run)


def _cells():
    # #0 meets every goal; #1 misses the share goals and the makespan, has no ttfs, envy or FIFO number
    c0 = trace_cell(Ratios("#0", 0.98, 1.01, 1.0, 2.0), Ratios("#0", 0.55, 0.9, 0.8, 1.0),
                    _m(0.92, 0.80, "a", {"a": 0.91, "b": 0.95}, 700.0, 0.005, 5000.0, {"a": 300.0, "b": 100.0}),
                    _m(0.70, 0.60, "a", {"a": 0.70}, 1500.0, 0.2, 4000.0, {"a": 100.0, "b": 100.0}))
    c1 = trace_cell(Ratios("#1", 1.0, 1.03, 1.0, 1.0), None, _m(0.88, 0.70, "c", {"c": 0.85}),
                    _m(0.85, None, None, {}, 3000.0))
    return c0, c1


def test_trace_cell_names_the_worst_account_and_worst_names_the_trace():
    c0, c1 = _cells()
    assert (c0.account_jct, c0.account_jct_account) == (3.0, "a") and c1.account_jct is None
    w = worst([c0, c1], lambda c: (c.run.min_ratio, c.run.min_ratio_account), False)
    assert (w.value, w.trace, w.account) == (0.70, "#1", "c")
    w = worst([c0, c1], lambda c: (c.ratios.makespan, None), True)
    assert (w.value, w.trace, w.account) == (1.03, "#1", None)
    assert worst([c0, c1], lambda c: (c.run.ttfs_p95, None), True).trace == "#0"  # #1 has none
    assert worst([c1], lambda c: (c.fifo_mean_jct, None), True).trace == "-"


def test_goals_with_reclaim_and_moves_at_high_load():
    c0, c1 = _cells()
    checks = {c.goal: c for c in goal_checks([c0, c1], GoalSpec(True, True, True, 300.0, 120.0))}
    assert list(checks) == ["share p5 >= 0.90", "share p5 >= ref+0.15|0.95", "share min >= 0.75",
                            "share min >= ref+0.15|0.95", "every account >= 0.90", "every account >= ref+0.15|0.95",
                            "ttfs p95 <= 2 rounds + grace", "envy <= 1 %", "ttfs p95 <= ref/2",
                            "mean JCT <= 1.00 ref", "makespan <= 1.02 ref", "mean JCT <= 0.60 FIFO"]

    def got(name):
        c = checks[name]
        return c.met, c.value, c.bound, c.trace, c.account, c.checked

    assert got("share p5 >= 0.90") == (False, 0.88, 0.90, "#1", None, 2)
    # against the reference: #0's is 0.70 -> 0.85; #1's 0.85 is above 0.80 -> 0.95 (missed by 0.07)
    assert got("share p5 >= ref+0.15|0.95") == (False, 0.88, 0.95, "#1", None, 2)
    assert got("share min >= 0.75") == (False, 0.70, 0.75, "#1", "c", 2)
    assert got("share min >= ref+0.15|0.95") == (False, 0.70, 0.95, "#1", "c", 2)  # #1's reference had none
    assert got("every account >= 0.90") == (False, 0.85, 0.90, "#1", "c", 2)
    # 2 rounds of 300 s + the grace of 120 s: 700 s is within (without the grace, 600, it would not be)
    assert got("ttfs p95 <= 2 rounds + grace") == (True, 700.0, 720.0, "#0", None, 1)  # #1: nothing to measure
    assert got("envy <= 1 %") == (True, 0.005, 0.01, "#0", None, 1)
    assert got("ttfs p95 <= ref/2") == (True, 700.0, 750.0, "#0", None, 1)
    assert got("mean JCT <= 1.00 ref")[:2] == (True, 1.0)  # exactly the reference's: met
    assert got("makespan <= 1.02 ref") == (False, 1.03, 1.02, "#1", None, 2)
    assert got("mean JCT <= 0.60 FIFO") == (None, 0.55, 0.60, "#0", None, 1)  # #1 has no FIFO run: not checked
    assert met(list(checks.values())) is False
    # #0 alone meets every goal; at moderate load the FIFO bound is 0.90
    alone = goal_checks([c0], GoalSpec(True, True, False, 300.0, 120.0))
    assert met(alone) is True and alone[-1].goal == "mean JCT <= 0.90 FIFO"


def test_goals_without_reclaim_and_a_trace_with_nothing_to_measure():
    c0, c1 = _cells()
    checks = {c.goal: c for c in goal_checks([c0, c1], GoalSpec(False, False, False, 300.0, 120.0))}
    assert list(checks) == ["share p5 >= 0.80", "share p5 >= ref+0.15|0.95", "ttfs p95 <= median run",
                            "ttfs p95 <= ref/2", "mean JCT <= 1.00 ref", "makespan <= 1.02 ref"]
    assert checks["share p5 >= 0.80"].met is True and checks["share p5 >= 0.80"].trace == "#1"  # margin 0.08 < 0.12
    # the reference run's median job run time: 4000 s on #0
    c = checks["ttfs p95 <= median run"]
    assert (c.met, c.value, c.bound) == (True, 700.0, 4000.0)
    # a reference without any episode: half of nothing -> any wait misses
    none = trace_cell(Ratios("#2", 1.0, 1.0, 1.0, 1.0), None, _m(ttfs=10.0), _m())
    c = {c.goal: c for c in goal_checks([none], GoalSpec(False, False, False, 300.0, 120.0))}["ttfs p95 <= ref/2"]
    assert (c.met, c.bound) == (False, 0.0)
    # no long episode anywhere: nothing to measure is met, with no value
    empty = {c.goal: c for c in goal_checks([none], GoalSpec(True, False, False, 300.0, 120.0))}
    assert (empty["share p5 >= 0.90"].met, empty["share p5 >= 0.90"].value, empty["share p5 >= 0.90"].trace) == \
        (True, None, "-")


def test_above_baseline_and_the_requeue_and_flip_goals():
    assert above_baseline(0.70) == pytest.approx(0.85) and above_baseline(0.85) == 0.95
    assert above_baseline(None) == 0.95
    # requeues 10 of 40 jobs: 0.25; 2 wasted of 10: 20 % > 10 %; flips 1 of 10: 10 % > 5 %
    rq = {c.goal: c for c in requeue_checks(10, 40, 2, 1, 10, True)}
    assert [(c.met, c.value) for c in rq.values()] == [(True, 0.25), (False, pytest.approx(0.2)), (False, 0.1)]
    assert [c.goal for c in requeue_checks(0, 40, 0, 0, 0, False)] == ["flips <= 5 %"]
    assert requeue_checks(0, 40, 0, 0, 0, True)[1].met is True  # no requeue: nothing wasted
