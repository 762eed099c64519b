"""Realized fairness (``slurm_fair.fairness.realized``, issue 39 item 1) against schedules worked by hand: every
expected number is derived in the comment above its assertion (s = share, D = demand, B = entitled rate, r =
received rate). Each test pins a term of the definition (weights, speeds, classes, the demand cap, the rule for
jobs larger than a share in the backlog and the demand cap, per-job valuation, requeues, the 0.95 crossing, the 1.05
envy threshold, its weight scaling and its pair-time):
dropping the term changes a number asserted here."""

from __future__ import annotations

import pytest

from slurm_fair.errors import InputError
from slurm_fair.fairness.realized import Run, realized, speeds_from_throughput, summarize

# x gains 2x on a V100, y 4x; both run on both types
SPEEDS = {"x": {"k80": 1.0, "v100": 2.0}, "y": {"k80": 1.0, "v100": 4.0}}
TWO = {"k80": 4, "v100": 4}
approx = pytest.approx


def run(job, account, cls, gpus, submit, gpu_type=None, start=None, end=None, ended=False):
    return Run(job, account, cls, gpus, float(submit), gpu_type, None if start is None else float(start),
               None if end is None else float(end), ended)


def by_account(r):
    return {a.account: a for a in r.accounts}


def test_an_episodes_ratio_counts_weights_speeds_and_each_jobs_class():
    # weights A=3, B=1: W=4; shares A: k80 3, v100 3; B: k80 1, v100 1.
    runs = [run("a1", "A", "x", 3, 0, "v100", 0, 1000, True),
            run("b1", "B", "y", 1, 0, "k80", 0, 1000, True),
            run("b2", "B", "x", 1, 0, "v100", 600, 900, True)]
    r = realized(runs, {"A": 3, "B": 1}, TWO, SPEEDS, 0, 1000)
    # A has nothing pending: no episode. B: b2 (1 GPU <= its share 1 of a type x runs on) waits 0..600.
    (ep,) = r.episodes
    assert (ep.account, ep.start, ep.end, ep.censored) == ("B", 0, 600, False)
    # r_B = b1: 1 GPU x speed(y, k80) 1 = 1 -> received 600.
    # B's share k80 1 + v100 1 to its jobs b1 (y, 1 GPU) and b2 (x, 1 GPU), each at its class's speeds: b1 on the
    # v100 (4) + b2 on the k80 (1) = 5 (the other way round 2 + 1 = 3) -> entitled 3000. Ratio 0.2
    # (weights ignored: s = 2 + 2, b1 1 v100 x 4 + b2 1 v100 x 2 = 6 -> 1/6; speeds ignored: 2 -> 0.5).
    assert (ep.received, ep.entitled) == (approx(600), approx(3000))
    assert ep.ratio == approx(0.2)
    # never 0.95: the episode ends (b2 starts) before t1, with nothing left waiting: its length, "all"
    assert (ep.time_to_fair_share, ep.reached) == (approx(600), "all")
    acc = by_account(r)
    assert acc["A"].ratio is None and acc["A"].backlogged == 0
    assert acc["B"].ratio == approx(0.2) and acc["B"].backlogged == approx(600)
    # JCT: A 1000; B (1000 + 900) / 2 = 950
    assert (acc["A"].mean_jct, acc["B"].mean_jct, acc["B"].jobs_ended) == (approx(1000), approx(950), 2)
    # throughput: A 3 x 2 x 1000 = 6000; B 1 x 1 x 1000 + 1 x 2 x 300 = 1600; of 7600
    assert acc["A"].throughput == approx(6000) and acc["B"].throughput == approx(1600)
    assert acc["A"].throughput_share == approx(6000 / 7600) and acc["B"].throughput_share == approx(1600 / 7600)


def test_the_entitled_rate_is_capped_by_the_accounts_demand():
    # weights A=3, B=1 (B has no job, yet counts in W = 4): A's share k80 3, v100 3.
    runs = [run("a1", "A", "x", 1, 0, "k80", 0, 1000, True),
            run("a2", "A", "x", 2, 0, "v100", 500, 1000, True)]
    r = realized(runs, {"A": 3, "B": 1}, TWO, SPEEDS, 0, 1000)
    (ep,) = r.episodes
    assert (ep.start, ep.end) == (0, 500)
    # D = 1 + 2 = 3 GPUs: of its 3 + 3, the 3 v100 x 2 = 6 (uncapped: 3 x 2 + 3 x 1 = 9); r = 1 x 1 -> 1/6
    assert ep.entitled == approx(6 * 500)
    assert ep.ratio == approx(1 / 6)


def test_an_account_backlogged_for_part_of_the_window_per_episode_per_hour_and_time_weighted():
    # one type (speed 1), v100 = 6, weights A=1, B=2: A's share 2 GPUs.
    speeds = {"x": {"v100": 1.0}}
    runs = [run("a1", "A", "x", 1, 0, "v100", 0, 7200, True),
            run("a2", "A", "x", 2, 3000, "v100", 4800, 7200, True),
            run("a3", "A", "x", 1, 3500, "v100", 3600, 7200, True),
            run("a4", "A", "x", 1, 6000, "v100", 6600, 7200, True)]
    r = realized(runs, {"A": 1, "B": 2}, {"v100": 6}, speeds, 0, 7200)
    first, second = r.episodes
    # episode 1: a2 waits 3000..4800 (a3 3500..3600 inside it). B = min(s 2, D >= 3) = 2 throughout;
    # r = 1 on 3000..3600 (a1), 2 on 3600..4800 (a1 + a3): received 600 + 2400 = 3000, entitled 2 x 1800 = 3600
    assert (first.start, first.end) == (3000, 4800)
    assert (first.received, first.entitled) == (approx(3000), approx(3600))
    assert first.ratio == approx(3000 / 3600)
    # cumulative ratio at 3600: 600 / 1200; then slope 2 - 0.95 x 2 = 0.1 needs (1140 - 600) / 0.1 = 5400 s > 1200:
    # not reached; the episode ends at 4800 before t1: 1800, "all"
    assert (first.time_to_fair_share, first.reached) == (approx(1800), "all")
    # episode 2: a4 waits 6000..6600 while a1 + a2 + a3 run: r = 4, B = 2 -> ratio 2; r >= 0.95 B from its start: 0
    assert (second.start, second.end, second.ratio) == (6000, 6600, approx(2.0))
    assert (second.time_to_fair_share, second.reached) == (approx(0.0), "ratio")
    # hour 0: backlogged 3000..3600: 600 s, received 600, entitled 1200 -> 0.5
    # hour 1: 3600..4800 and 6000..6600: 1800 s, received 2400 + 2400 = 4800, entitled 3600 -> 4/3
    h0, h1 = r.hours
    assert (h0.account, h0.hour, h0.backlogged, h0.ratio) == ("A", 0, approx(600), approx(0.5))
    assert (h1.hour, h1.backlogged, h1.received, h1.entitled) == (1, approx(1800), approx(4800), approx(3600))
    # time-weighted: (3000/3600 x 1800 + 2 x 600) / 2400 = (1500 + 1200) / 2400 = 1.125; 2400 s of 7200 backlogged
    a = by_account(r)["A"]
    assert (a.ratio, a.backlogged) == (approx(1.125), approx(2400))
    # summary with episodes of >= 1800 s: only the first (p5 = min = 0.8333); time to fair share over [1800, 0]:
    # median 900, p95 0 + 0.95 x 1800 = 1710; nobody else has work: no pair compared
    s = summarize(r, long=1800)
    assert (s.episodes, s.long_episodes) == (2, 1)
    assert s.p5_ratio == approx(3000 / 3600) and s.min_ratio == approx(3000 / 3600)
    assert (s.ttfs_median, s.ttfs_p95) == (approx(900), approx(1710))
    assert s.envy_share is None and s.as_json()["accounts"]["A"]["ratio"] == approx(1.125)
    assert summarize(r).long_episodes == 0  # the default: episodes of an hour or more


def test_a_job_larger_than_every_share_counts_neither_as_backlog_nor_in_the_demand_cap():
    # k80 8, v100 8, weights 1 + 1 + 1: A's share 8/3 = 2.67 of each type. a1 (8 GPUs) waits 0..3000: it fits no
    # share (the partition could not run it), so it neither backlogs A nor counts in the cap. a0 (1 GPU) runs on a
    # k80 0..4000; a2 (1 GPU) waits 1000..2000: the one episode.
    runs = [run("a0", "A", "x", 1, 0, "k80", 0, 4000, True),
            run("a1", "A", "x", 8, 0, "v100", 3000, 4000, True),
            run("a2", "A", "x", 1, 1000, "v100", 2000, 4000, True)]
    r = realized(runs, {"A": 1, "B": 1, "C": 1}, {"k80": 8, "v100": 8}, SPEEDS, 0, 4000)
    (ep,) = r.episodes
    assert (ep.start, ep.end) == (1000, 2000)
    # r = a0's 1 k80 = 1. B = the share's value to a0 and a2 (1 GPU each, both fit both types): 2 v100 x 2 = 4
    # -> ratio 1/4 (a1 in the cap, D = 10: 2.67 v100 x 2 + 2.67 k80 x 1 = 8 -> 1/8)
    assert (ep.received, ep.entitled) == (approx(1000), approx(4000))
    assert ep.ratio == approx(0.25)


def test_a_job_counts_only_on_the_types_whose_share_it_fits():
    # k80 6, v100 2, weights 1 + 1: A's share k80 3, v100 1. a1 (2 GPUs, x) waits 0..1000: it fits the k80 share
    # only, so the partition runs it on 2 k80: B = 2 x 1 = 2 (counted on v100 too: 1 v100 x 2 + 1 k80 = 3).
    r = realized([run("a1", "A", "x", 2, 0)], {"A": 1, "B": 1}, {"k80": 6, "v100": 2}, SPEEDS, 0, 1000)
    (ep,) = r.episodes
    assert (ep.start, ep.end, ep.censored, ep.entitled) == (0, 1000, True, approx(2000))


def test_the_bundle_is_valued_per_job_at_its_own_class_not_at_the_best_class_per_type():
    # k80 4, v100 4, weights 1 + 1: A's share k80 2, v100 2. A's ay (class y: v100 4x, 1 GPU) runs on a v100
    # 0..1000; ax (class x: v100 2x, 2 GPUs) waits all the window.
    runs = [run("ay", "A", "y", 1, 0, "v100", 0, 1000, True), run("ax", "A", "x", 2, 0)]
    r = realized(runs, {"A": 1, "B": 1}, TWO, SPEEDS, 0, 1000)
    (ep,) = r.episodes
    # per job (the LP): ay 1 v100 x 4 = 4; ax 1 v100 x 2 + 1 k80 x 1 = 3: B = 7 (ax on 2 k80 and ay on a v100: 6).
    # At the best class per type (v100 4, k80 1, D = 3): 2 v100 x 4 + 1 k80 = 9. r = 4 -> 4/7 (best class: 4/9).
    assert (ep.received, ep.entitled) == (approx(4000), approx(7000))
    assert ep.ratio == approx(4 / 7)


def test_time_to_fair_share_is_the_exact_crossing_and_censored_by_the_window():
    speeds = {"x": {"v100": 1.0}}
    # v100 = 4, weights 1 + 1: A's share 2. a1 (1 GPU) waits 0..4000; a0 runs 0..4000, a2 (2 GPUs) 1000..5000.
    runs = [run("a0", "A", "x", 1, 0, "v100", 0, 4000, True),
            run("a1", "A", "x", 1, 0, "v100", 4000, 5000, True),
            run("a2", "A", "x", 2, 0, "v100", 1000, 5000, True)]
    r = realized(runs, {"A": 1, "B": 1}, {"v100": 4}, speeds, 0, 5000)
    (ep,) = r.episodes
    # B = 2 (s 2 <= D); r = 1 on 0..1000, 3 on 1000..4000. At 1000: 1000 of 2000; lack 0.95 x 2000 - 1000 = 900,
    # slope 3 - 1.9 = 1.1: crossing 900 / 1.1 = 818.18 s later, at 1818.18 (check: (1000 + 3 x 818.18) /
    # (2 x 1818.18) = 0.95). With 1.0 instead of 0.95: 1000 / 1 -> 2000.
    assert (ep.time_to_fair_share, ep.reached) == (approx(1000 + 900 / 1.1), "ratio")
    # received 1000 + 9000, entitled 8000 -> 1.25
    assert ep.ratio == approx(1.25)
    # a window ending at 3000 cuts the episode: censored, the crossing still inside it
    cut = realized(runs, {"A": 1, "B": 1}, {"v100": 4}, speeds, 0, 3000).episodes[0]
    assert (cut.end, cut.censored, cut.reached) == (3000, True, "ratio")
    # one ending at 1500 cuts it before the crossing: None
    early = realized(runs, {"A": 1, "B": 1}, {"v100": 4}, speeds, 0, 1500).episodes[0]
    assert (early.censored, early.time_to_fair_share, early.reached) == (True, None, "censored")
    # a window starting at 1000 sees r = 3 >= 0.95 x 2 from its first instant: 0
    late = realized(runs, {"A": 1, "B": 1}, {"v100": 4}, speeds, 1000, 5000).episodes[0]
    assert (late.start, late.time_to_fair_share) == (1000, approx(0.0))


def test_a_requeued_job_has_two_runs_and_waits_between_them():
    speeds = {"x": {"k80": 1.0, "v100": 3.0}}
    # k80 = 2, v100 = 2, weights 1 + 1: shares 1 + 1. a1 runs on k80 0..1000, is requeued, restarts on a v100
    # at 1300 and ends at 2000; a2 runs on k80 0..2000.
    runs = [run("a1", "A", "x", 1, 0, "k80", 0, 1000, False),
            run("a1", "A", "x", 1, 0, "v100", 1300, 2000, True),
            run("a2", "A", "x", 1, 0, "k80", 0, 2000, True)]
    r = realized(runs, {"A": 1, "B": 1}, {"k80": 2, "v100": 2}, speeds, 0, 2000)
    (ep,) = r.episodes
    # backlog only between the runs: 1000..1300. D = 2: B = 1 v100 x 3 + 1 k80 x 1 = 4; r = a2's 1 -> 0.25
    assert (ep.start, ep.end, ep.ratio) == (1000, 1300, approx(0.25))
    a = by_account(r)["A"]
    # JCT: a1 2000 - 0 (from its submit to its last run's end), a2 2000; throughput 1000 + 700 x 3 + 2000 = 5100
    assert (a.jobs_ended, a.mean_jct, a.throughput, a.throughput_share) == (2, approx(2000), approx(5100), approx(1.0))
    assert by_account(r)["B"].throughput_share == approx(0.0)
    # requeued and not restarted by t1: backlogged until the window's end, censored; a2 still running (no end)
    open_runs = [run("a1", "A", "x", 1, 0, "k80", 0, 1000, False), run("a2", "A", "x", 1, 0, "k80", 0, None)]
    (ep,) = realized(open_runs, {"A": 1, "B": 1}, {"k80": 2, "v100": 2}, speeds, 0, 2000).episodes
    assert (ep.start, ep.end, ep.censored, ep.ratio) == (1000, 2000, True, approx(0.25))
    # a job that never started: one row without type, start and end: backlogged from its submit
    (ep,) = realized([run("a1", "A", "x", 1, 500)], {"A": 1, "B": 1}, {"k80": 2, "v100": 2}, speeds, 0, 2000).episodes
    assert (ep.start, ep.end, ep.ratio, ep.entitled) == (500, 2000, 0.0, approx(3 * 1500))


def test_envy_of_held_gpus():
    # k80 = 4, v100 = 4, weights 1 + 1. A (class x: v100 2x) holds 2 k80 and has a 1-GPU job waiting;
    # B (class y) holds 2 v100, nothing waiting. Window 0..1000.
    runs = [run("a1", "A", "x", 2, 0, "k80", 0, 1000, True), run("a2", "A", "x", 1, 0),
            run("b1", "B", "y", 2, 0, "v100", 0, 1000, True)]
    r = realized(runs, {"A": 1, "B": 1}, TWO, SPEEDS, 0, 1000)
    # both have jobs in the system all along: (A, B) and (B, A) compared 1000 s each; B has nothing waiting, so it
    # envies nobody. A's value of B's 2 v100 (x 1/1): 2 x 2 = 4 (D_A = 3) > 1.05 x its own 2 k80 (2): envy all along
    assert (r.envy_seconds, r.compared_seconds, r.envy_share) == (approx(1000), approx(2000), approx(0.5))
    assert (r.backlogged_seconds, r.backlogged_envy_share) == (approx(1000), approx(1.0))
    assert (r.account_envy_share("A"), r.account_envy_share("B")) == (approx(1.0), approx(0.0))
    envy = summarize(r).as_json()["envy"]
    assert envy["pair_hours"] == approx(1000 / 3600) and envy["compared_pair_hours"] == approx(2000 / 3600)
    assert (envy["share"], envy["share_of_backlogged"]) == (approx(0.5), approx(1.0))


def test_envy_counts_only_while_the_envious_account_is_backlogged_over_every_pair_hour():
    # k80 = 4, v100 = 4, weights 1 + 1, window 0..1000. A (x) runs a1 (2 GPUs) on k80 0..1000; a2 (1 GPU) waits
    # 0..400, then runs on a k80 400..1000. B (y) holds 2 v100 0..1000, nothing waiting.
    runs = [run("a1", "A", "x", 2, 0, "k80", 0, 1000, True), run("a2", "A", "x", 1, 0, "k80", 400, 1000, True),
            run("b1", "B", "y", 2, 0, "v100", 0, 1000, True)]
    r = realized(runs, {"A": 1, "B": 1}, TWO, SPEEDS, 0, 1000)
    # A values B's 2 v100 at 2 x 2 = 4 (D_A = 3): 0..400 against its own 2 k80 (2): envy; 400..1000 against 3 k80
    # (3): 4 > 3.15, but A has nothing waiting then: not counted (counted: 1000 s). B values A's k80 at 1 < its 8.
    # Compared: both in the system all along, 2 x 1000 pair-seconds (the backlogged pair-time only: 400 -> 1.0).
    assert (r.envy_seconds, r.compared_seconds, r.envy_share) == (approx(400), approx(2000), approx(0.2))
    assert (r.backlogged_seconds, r.backlogged_envy_share) == (approx(400), approx(1.0))
    assert r.account_envy_share("A") == approx(0.4)


def test_no_envy_below_the_threshold_and_with_the_weights_scaling():
    speeds = {"x": {"k80": 1.0, "v100": 2.0}, "z": {"k80": 1.0, "v100": 1.03}}
    # weights A=1, B=1. A (z) holds 1 k80, B (x) holds 1 v100, both have a job waiting. Window 0..1000.
    runs = [run("a1", "A", "z", 1, 0, "k80", 0, 1000, True), run("a2", "A", "z", 1, 0),
            run("b1", "B", "x", 1, 0, "v100", 0, 1000, True), run("b2", "B", "x", 1, 0)]
    r = realized(runs, {"A": 1, "B": 1}, TWO, speeds, 0, 1000)
    # A: B's 1 v100 is worth 1.03 to z, its own k80 1: 1.03 <= 1.05 x 1, no envy (with 1.00 it would envy);
    # B: A's 1 k80 is worth 1 to x, its own v100 2: no envy. Both pairs compared 1000 s.
    assert (r.envy_seconds, r.compared_seconds, r.envy_share) == (0.0, approx(2000), approx(0.0))
    # weights A=1, B=3: A (x) holds 1 v100 (2) and waits with 3 more GPUs; B (x) holds 3 v100.
    runs = [run("a1", "A", "x", 1, 0, "v100", 0, 1000, True), run("a2", "A", "x", 1, 0), run("a3", "A", "x", 2, 0),
            run("b1", "B", "x", 3, 0, "v100", 0, 1000, True)]
    r = realized(runs, {"A": 1, "B": 3}, {"k80": 8, "v100": 8}, SPEEDS, 0, 1000)
    # A values B's bundle scaled by w_A / w_B = 1/3: 1 v100 = 2, not > 1.05 x 2: no envy
    # (unscaled: 3 v100 within D_A = 4 -> 6 > 2.1: envy). B has nothing waiting: it envies nobody.
    assert (r.envy_seconds, r.compared_seconds, r.backlogged_seconds) == (0.0, approx(2000), approx(1000))
    # weights 1 + 1: A (x) holds 2 v100 (4) and waits with 1 more GPU (D_A = 3); B (y) holds 8 k80.
    runs = [run("a1", "A", "x", 2, 0, "v100", 0, 1000, True), run("a2", "A", "x", 1, 0),
            run("b1", "B", "y", 8, 0, "k80", 0, 1000, True)]
    r = realized(runs, {"A": 1, "B": 1}, {"k80": 8, "v100": 8}, SPEEDS, 0, 1000)
    # A can use 3 of B's 8 k80: 3 <= 1.05 x 4, no envy (without A's demand cap: 8 > 4.2, envy)
    assert (r.envy_seconds, r.backlogged_seconds) == (0.0, approx(1000))


def test_speeds_from_throughput_normalize_to_the_slowest_type_of_the_capacity():
    thr = {"x": {"k80": 2.0, "v100": 6.0, "a100": 0.5}, "y": {"v100": 4.0, "k80": 0.0}}
    assert speeds_from_throughput(thr, ["k80", "v100"]) == {"x": {"k80": 1.0, "v100": 3.0},
                                                            "y": {"k80": 0.0, "v100": 1.0}}


@pytest.mark.parametrize("rows, kw, field", [
    ([run("j", "A", "x", 1, -5)], {}, r"runs\[0\].submit"),
    ([run("j", "A", "x", 1, 0, "k80", 10, 5, True)], {}, r"runs\[0\].end"),
    ([run("j", "A", "x", 1, 10, "k80", 5, 20, True)], {}, r"runs\[0\].start"),
    ([run("j", "A", "w", 1, 0)], {}, r"runs\[0\].cls"),
    ([run("j", "A", "x", 1, 0, "p100", 0, 5, True)], {}, r"runs\[0\].gpu_type"),
    ([run("j", "C", "x", 1, 0)], {}, r"runs\[0\].account"),
    ([run("j", "A", "x", 0, 0)], {}, r"runs\[0\].gpus"),
    ([run("j", "A", "x", 1, 0, "k80", 0, None, True)], {}, r"runs\[0\].ended"),
    ([run("j", "A", "x", 1, 0, "k80", 0, 50), run("j", "A", "x", 1, 0, "k80", 40, 60, True)], {}, "runs.job"),
    ([], {"t1": -1.0}, "t1"),
    ([], {"weights": {"A": 0}}, r"weights.A"),
    ([], {"speeds": {"x": {"p100": 1.0}}}, r"speeds.x"),
])
def test_bad_input_is_an_input_error_naming_the_field_and_value(rows, kw, field):
    args = {"weights": {"A": 1, "B": 1}, "capacity": TWO, "speeds": SPEEDS, "t0": 0.0, "t1": 100.0} | kw
    with pytest.raises(InputError, match=field):
        realized(rows, **args)
