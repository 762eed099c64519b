"""Realized fairness of a live cluster (fairness/live.py): the hooks' job runs turned into realized.Run rows, and
the numbers of a schedule worked out by hand — each of which moves if a term of the formula (speeds, weights,
demand cap, the open run counting to the window's end, the envy scale) is dropped.

The schedule, window [1000, 1100]; capacity fast 4, slow 4; rounds weigh acct_a 1, acct_b 3 (W = 4), so acct_a's
share is fast 1, slow 1 and acct_b's fast 3, slow 3. acct_a's class x is profiled (throughput 30 on fast, 10 on
slow: speeds 3 and 1); acct_b's class y has no profile (speed 1 on both).

    acct_b  B1 3 fast  submit 1000, run 1000-1100 (ended)      B2 1 slow  submit 1000, run 1000-1030 (ended)
    acct_a  A1 1 fast  submit 1000, run 1040-1070 (ended)      A2 1 slow  submit 1020, run 1070- (still running)

acct_a is backlogged (a job of 1 GPU, its share of one type, pending) over [1000, 1070]: one episode.
  received: A1 on fast, 1 x 3 over [1040, 1070] = 90.
  entitled: its share at its speeds, fastest first, capped by its demand D: D = 1 on [1000, 1020): 1 fast = 3;
  D = 2 on [1020, 1070): 1 fast + 1 slow = 4. 3 x 20 + 4 x 50 = 260.  Ratio 90 / 260 = 9/26.
  (speeds dropped: 30 / 120 = 0.25; demand cap dropped: 90 / 280; weights equal: share 2 + 2, 90 / 360.)
  Time to fair share: never 95 % before the episode ends at 1070 (not cut by the window): its length, 70.
acct_b is never backlogged (its jobs start at their submit): no ratio.
Throughput: acct_a 90 + A2 on slow 1 x 1 x 30 (to the window's end: it is still running) = 120; acct_b B1 300 +
  B2 30 = 330; shares 120/450 and 330/450.
JCT: acct_a A1 70 (A2 has not ended); acct_b B1 100, B2 30: mean 65.
Envy of held GPUs, counted while acct_a is backlogged, over the pair-time both accounts have a job in the system
  (all of [1000, 1100]: 100 s each way): acct_b's held GPUs scaled by w_a / w_b = 1/3, valued by acct_a
  (speeds 3, 1, up to its demand) against its own:
  [1000, 1030): b holds fast 3 + slow 1 -> fast 1 + slow 1/3 = 3 (D = 1) or 3.33 (D = 2) > 1.05 x 0 (a holds none);
  [1030, 1040): fast 3 -> fast 1 = 3 > 0: envy;  [1040, 1070): 3 against its own fast 1 = 3: not above 3.15.
  [1070, 1100): acct_a has nothing waiting: no envy. Envy 40 of 100 s: 0.4 (without the scale: fast 3 is worth
  6 > 3.15: 70 of 100; over the backlogged pair-time only: 40 of 70). acct_b never waits: 0 of 100. All pairs:
  40 of 200.
"""

from __future__ import annotations

import pytest

from slurm_fair.errors import InputError
from slurm_fair.fairness.live import LeftOut, class_key, live_realized, runs_of, weights_of
from slurm_fair.fairness.realized import Run
from slurm_fair.store import JobRun

SCONTROL = "scontrol -d show job"
CAP = {"fast": 4, "slow": 4}
ROUNDS = [({"acct_a": "acct_a"}, {"acct_a": 5.0}),  # an older round: the newest weight wins
          ({"acct_a": "acct_a", "acct_b": "acct_b"}, {"acct_a": 1.0, "acct_b": 3.0})]
THROUGHPUT = {("acct_a", "x"): {"fast": 30.0, "slow": 10.0}}
SOURCES = {("acct_a", "x"): {"fast": "site", "slow": "site"}}


def jr(job, account, cls, start, end, gpus, submit, restart=0, info=SCONTROL):
    return JobRun(job, restart, account, cls, float(start), None if submit is None else float(submit),
                  None if end is None else float(end), gpus, info)


SCHEDULE = [
    jr(1, "acct_b", "y", 1000, 1100, {"fast": 3}, 1000),
    jr(2, "acct_b", "y", 1000, 1030, {"slow": 1}, 1000),
    jr(3, "acct_a", "x", 1040, 1070, {"fast": 1}, 1000),
    jr(4, "acct_a", "x", 1070, None, {"slow": 1}, 1020),
]


def test_the_hand_worked_schedule():
    live = live_realized(SCHEDULE, ROUNDS, CAP, THROUGHPUT, SOURCES, 1000.0, 1100.0)
    acc = {a.account: a for a in live.realized.accounts}
    a, b = acc["acct_a"], acc["acct_b"]
    assert (a.weight, b.weight) == (1.0, 3.0)
    (ep,) = live.realized.episodes
    assert (ep.account, ep.start, ep.end, ep.censored) == ("acct_a", 1000.0, 1070.0, False)
    assert ep.received == pytest.approx(90) and ep.entitled == pytest.approx(260)
    assert a.ratio == pytest.approx(9 / 26) and b.ratio is None
    assert (ep.time_to_fair_share, ep.reached) == (pytest.approx(70), "all")
    assert a.throughput == pytest.approx(120) and b.throughput == pytest.approx(330)
    assert a.throughput_share == pytest.approx(120 / 450) and b.throughput_share == pytest.approx(330 / 450)
    assert (a.jobs_ended, a.mean_jct, b.jobs_ended, b.mean_jct) == (1, pytest.approx(70), 2, pytest.approx(65))
    assert live.realized.account_envy_share("acct_a") == pytest.approx(0.4)
    assert live.realized.account_envy_share("acct_b") == 0.0  # never backlogged: envies nobody
    assert live.realized.envy_share == pytest.approx(0.2)
    assert live.realized.backlogged_envy_share == pytest.approx(4 / 7)
    assert live.unprofiled == ("y",) and live.default_weight == ()
    j = live.as_json()
    assert j["accounts"]["acct_a"]["worst_episode_ratio"] == pytest.approx(9 / 26)
    assert j["accounts"]["acct_a"]["time_to_fair_share"] == {"median": pytest.approx(70), "max": pytest.approx(70),
                                                             "censored": 0}
    assert j["accounts"]["acct_a"]["envy_share"] == pytest.approx(0.4)
    assert (j["since"], j["until"], j["runs"], j["unprofiled"]) == (1000.0, 1100.0, 4, ["y"])


def test_a_window_that_cuts_the_episode_and_the_open_run():
    """[1000, 1050]: the episode is cut at 1050 (censored: no time to fair share); received 1 x 3 x 10 = 30,
    entitled 3 x 20 + 4 x 30 = 180; A2 has not started; acct_b's throughput 3 x 50 + 30 = 180."""
    live = live_realized(SCHEDULE, ROUNDS, CAP, THROUGHPUT, SOURCES, 1000.0, 1050.0)
    (ep,) = live.realized.episodes
    assert (ep.end, ep.censored, ep.time_to_fair_share, ep.reached) == (1050.0, True, None, "censored")
    assert ep.ratio == pytest.approx(30 / 180)
    acc = {a.account: a for a in live.realized.accounts}
    assert acc["acct_b"].throughput == pytest.approx(180) and acc["acct_a"].jobs_ended == 0


def test_runs_of_turns_the_hooks_runs_into_realized_runs():
    runs = [
        jr(10, "a", "x", 100, 150, {"fast": 2}, 90),  # requeued: run 0 ...
        jr(10, "a", "x", 160, 200, {"fast": 2}, 95, restart=1),  # ... its SubmitTime moved: the earliest counts
        jr(11, "a", "", 120, None, {"slow": 1}, None),  # no class, no submit, still running
        jr(12, "b", "y", 100, 130, {"untyped": 1}, 100),  # GPUs counted only in gres/gpu
        jr(13, "b", "y", 100, 130, {"fast": 1, "slow": 1}, 100),  # several types at once
        jr(14, "b", "y", 100, 130, {}, 100),  # Slurm said: no GPU
        jr(15, "b", "y", 100, 130, {}, 100, info="none: scontrol did not answer"),  # not read
        jr(16, "b", "y", 10, 20, {"fast": 1}, 5),  # ended before the window
        jr(17, "b", "y", 400, 410, {"fast": 1}, 350),  # submitted after it
        jr(18, "b", "y", 100, 140, {"fast": 1}, 100),  # its first run's end record is late: ends at the next start
        jr(18, "b", "y", 130, 150, {"fast": 1}, 100, restart=1),
        jr(19, "b", "y", 100, 130, {"tpu": 1}, 100),  # a type outside the capacity
    ]
    live = runs_of(runs, CAP, 50.0, 300.0, tenant_of={"a": "team"})
    assert live.runs == (
        Run("10", "team", "a/x", 2, 90.0, "fast", 100.0, 150.0, False),
        Run("10", "team", "a/x", 2, 90.0, "fast", 160.0, 200.0, True),
        Run("11", "team", "a/default", 1, 120.0, "slow", 120.0, None, False),
        Run("18", "b", "b/y", 1, 100.0, "fast", 100.0, 130.0, False),
        Run("18", "b", "b/y", 1, 100.0, "fast", 130.0, 150.0, True),
    )
    assert live.classes == (("a", "x"), ("a", "default"), ("b", "y"))
    assert live.no_submit == (11,)
    assert live.left_out == (LeftOut(12, "b", "GPUs counted only in gres/gpu (no type)", 30.0),
                             LeftOut(13, "b", "GPUs of several types", 60.0),
                             LeftOut(15, "b", "no single GPU type read", 0.0),
                             LeftOut(19, "b", "a GPU type outside the capacity (tpu)", 30.0))
    assert class_key("a", "") == "a/default"


def test_weights_of_takes_the_newest_round_and_skips_bad_values():
    assert weights_of([({"a": "t"}, {"t": 2, "u": 1}), ({"b": "b"}, {"t": 3, "b": True, "c": -1, "d": "x"})]) == (
        {"a": "t", "b": "b"}, {"t": 3.0, "u": 1.0})


def test_accounts_no_round_weighed_and_types_a_profile_misses():
    """An account no round weighed counts 1 and is named; a run on a type its class's profile gives 0 runs at the
    class's slowest known speed, never an error."""
    runs = [jr(1, "new", "z", 1000, 1010, {"slow": 1}, 1000), jr(2, "acct_b", "y", 1000, 1010, {"fast": 1}, 1000)]
    live = live_realized(runs, ROUNDS[1:], CAP, {("new", "z"): {"fast": 5.0, "slow": 0.0}}, {}, 1000.0, 1100.0)
    assert live.default_weight == ("new",) and live.weights["new"] == 1.0
    acc = {a.account: a for a in live.realized.accounts}
    assert acc["new"].throughput == pytest.approx(10.0)  # speed 1 (its slowest known, fast = 1 relative to itself)
    assert set(acc) == {"acct_a", "acct_b", "new"}  # acct_a: weighed by a round in the window, counts in W


def test_nothing_to_compute_is_a_clear_error():
    with pytest.raises(InputError, match="capacity"):
        live_realized(SCHEDULE, ROUNDS, {}, THROUGHPUT, SOURCES, 1000.0, 1100.0)
    with pytest.raises(InputError, match="no round weighed an account"):
        live_realized([], [], CAP, {}, {}, 1000.0, 1100.0)
    with pytest.raises(InputError, match="t1"):
        live_realized(SCHEDULE, ROUNDS, CAP, THROUGHPUT, SOURCES, 1100.0, 1000.0)


def test_own_profiles_make_a_class_the_accounts_alone():
    """A class an account has a profile of its own is keyed account/class; the others are one class for all
    accounts (the daemon's lookup gives every account the same speeds for them). The source name is the lookup's."""
    from slurm_fair.daemon.plan.problem import SRC_ACCOUNT
    from slurm_fair.fairness.live import ACCOUNT_SOURCE

    assert ACCOUNT_SOURCE == SRC_ACCOUNT
    runs = [jr(1, "acct_a", "x", 1000, 1010, {"fast": 1}, 1000), jr(2, "acct_b", "x", 1000, 1010, {"fast": 1}, 1000)]
    own = {("acct_a", "x"): {"fast": 30.0, "slow": 10.0}, ("acct_b", "x"): {"fast": 10.0, "slow": 10.0}}
    live = live_realized(runs, ROUNDS[1:], CAP, own, {("acct_a", "x"): {"fast": "account", "slow": "account"},
                                                      ("acct_b", "x"): {"fast": "site", "slow": "site"}},
                         1000.0, 1100.0)
    assert sorted(r.cls for r in live.live.runs) == ["acct_a/x", "x"]
    acc = {a.account: a for a in live.realized.accounts}
    assert (acc["acct_a"].throughput, acc["acct_b"].throughput) == (pytest.approx(30.0), pytest.approx(10.0))


def test_a_type_a_profile_lacks_is_named_as_assumed():
    live = live_realized(SCHEDULE, ROUNDS, CAP, {("acct_a", "x"): {"fast": 30.0, "slow": 30.0}},
                         {("acct_a", "x"): {"fast": "site", "slow": "assumed"}}, 1000.0, 1100.0)
    assert live.assumed == {"x": ["slow"]} and live.as_json()["assumed"] == {"x": ["slow"]}


# ---------------------------------------------------------------------------------------------- pending jobs
# A schedule where one account's jobs never start (issue 39: the starving account a site needs to see), window
# [1000, 1100]; capacity fast 2, slow 2; rounds weigh acct_a and acct_b 1 each (shares fast 1, slow 1 each);
# acct_a's class x: speeds 3 (fast), 1 (slow); acct_b's class y: unprofiled (1, 1).
#
#   acct_b  B1 2 fast, B2 2 slow: submit 1000, run 1000-1100 (hook records; they hold every GPU)
#   acct_a  A1 1 GPU x, submit 1010, seen pending by the rounds 1020 ... 1090 (the last round: ``sighted``), never
#           started: pending at the window's end -> one Run without type, start and end, waiting 1010-1100
#           A2 1 GPU x, submit 1030, seen pending 1040-1060, gone without a start record (cancelled): left out
#           A3 1 GPU x, submit 1000, seen pending to 1090 but waiting on a dependency: left out (not startable)
#
# acct_a is backlogged over [1010, 1100] (A1 fits: 1 GPU <= its share of one type), cut by the window: censored.
#   received 0; entitled: its share at its speeds capped by its demand D = 1 (A1): 1 fast x 3 = 3 per second,
#   x 90 s = 270 (with A2 counted to the window's end: D = 2 from 1030, 3 x 20 + 4 x 70 = 340; with A3: from 1000).
#   Ratio 0; time to fair share: None (censored). Without the pending rows: no episode at all (ratio None).
# Envy: acct_a backlogged, acct_b in the system, 90 pair-seconds; b holds fast 2 + slow 2 (x w_a / w_b = 1),
#   worth 3 to a (D = 1: one fast GPU) > 1.05 x 0: envious all 90 s (share 1).
# Throughput: acct_b 2 x 100 + 2 x 100 = 400, acct_a 0.

from slurm_fair.fairness.live import LEFT_PENDING, NO_SIGHTING, NOT_STARTABLE, pending_at_end  # noqa: E402
from slurm_fair.store import PendingJob  # noqa: E402

CAP2 = {"fast": 2, "slow": 2}
ROUNDS2 = [({"acct_a": "acct_a", "acct_b": "acct_b"}, {"acct_a": 1.0, "acct_b": 1.0})]
STARVED_RUNS = [jr(1, "acct_b", "y", 1000, 1100, {"fast": 2}, 1000),
                jr(2, "acct_b", "y", 1000, 1100, {"slow": 2}, 1000)]
STARVED_PENDING = [PendingJob(11, "acct_a", "x", 1, None, 1010.0, "", 1020.0, 1090.0),
                   PendingJob(12, "acct_a", "x", 1, "fast", 1030.0, "", 1040.0, 1060.0),
                   PendingJob(13, "acct_a", "x", 1, None, 1000.0, "Dependency", 1020.0, 1090.0)]


def test_an_account_whose_jobs_never_start_is_backlogged_with_ratio_zero():
    live = live_realized(STARVED_RUNS, ROUNDS2, CAP2, THROUGHPUT, SOURCES, 1000.0, 1100.0,
                         STARVED_PENDING, sighted=1090.0)
    (ep,) = live.realized.episodes
    assert (ep.account, ep.start, ep.end, ep.censored) == ("acct_a", 1010.0, 1100.0, True)
    assert ep.received == 0 and ep.entitled == pytest.approx(270)
    assert (ep.ratio, ep.time_to_fair_share, ep.reached) == (0.0, None, "censored")
    acc = {a.account: a for a in live.realized.accounts}
    assert acc["acct_a"].ratio == 0.0 and acc["acct_a"].backlogged == pytest.approx(90)
    assert acc["acct_a"].throughput == 0 and acc["acct_b"].throughput == pytest.approx(400)
    assert acc["acct_a"].jobs_ended == 0 and acc["acct_a"].mean_jct is None
    assert live.realized.account_envy_share("acct_a") == pytest.approx(1.0)
    assert live.live.pending == (11,)
    assert live.live.left_out == (LeftOut(12, "acct_a", LEFT_PENDING, 0.0),
                                  LeftOut(13, "acct_a", f"{NOT_STARTABLE} (Dependency)", 0.0))
    j = live.as_json()
    assert j["pending"] == [11] and j["runs"] == 3
    assert j["accounts"]["acct_a"]["time_to_fair_share"] == {"median": None, "max": None, "censored": 1}
    # the hooks' records alone do not see acct_a at all
    blind = live_realized(STARVED_RUNS, ROUNDS2, CAP2, THROUGHPUT, SOURCES, 1000.0, 1100.0)
    assert blind.realized.episodes == () and "acct_a" not in {a.account for a in blind.realized.accounts
                                                              if a.backlogged > 0}


def test_when_a_job_was_pending_at_the_windows_end():
    a1 = STARVED_PENDING[0]  # submit 1010, seen 1020-1090
    assert pending_at_end(a1, 1100.0, 1090.0)  # seen by the last round before the end
    assert not pending_at_end(a1, 1100.0, 1095.0)  # a later round did not see it: gone
    assert pending_at_end(a1, 1050.0, 1040.0)  # seen after the end: still waiting then
    assert not pending_at_end(a1, 1005.0, 1000.0)  # not submitted yet
    assert not pending_at_end(a1, 1100.0, None)  # no round observed the cluster: only later sightings count
    # a window that ends at 1050 (last round 1040): A2 (seen to 1060) was still waiting, A1 too; both from submit
    live = runs_of(STARVED_RUNS, CAP2, 1000.0, 1050.0, pending=STARVED_PENDING, sighted=1040.0)
    assert live.pending == (11, 12)
    assert [(r.job, r.submit, r.gpu_type, r.start, r.end, r.ended) for r in live.runs if r.account == "acct_a"] == [
        ("11", 1010.0, None, None, None, False), ("12", 1030.0, None, None, None, False)]
    # a job that left before the window began is not listed
    assert runs_of(STARVED_RUNS, CAP2, 1070.0, 1100.0, pending=STARVED_PENDING[1:2], sighted=1090.0).left_out == ()


def test_a_requeued_job_seen_pending_again_waits_to_the_windows_end():
    """acct_a's job 21 ran 1000-1040 on fast (its record ends it) and was seen pending at 1060, the last round: it
    was requeued, not done. It stays in the system and is backlogged over [1040, 1100]: received 0, entitled 3 x 60.
    Without the sighting its run ends the job (JCT 40) and acct_a is never backlogged."""
    runs = [jr(21, "acct_a", "x", 1000, 1040, {"fast": 1}, 1000)]
    seen = [PendingJob(21, "acct_a", "x", 1, "fast", 1000.0, "", 1050.0, 1060.0)]
    live = live_realized(runs, ROUNDS2, CAP2, THROUGHPUT, SOURCES, 1000.0, 1100.0, seen, sighted=1060.0)
    (r,) = live.live.runs
    assert (r.end, r.ended) == (1040.0, False) and live.live.pending == ()
    (ep,) = live.realized.episodes
    assert (ep.start, ep.end, ep.received, ep.entitled) == (1040.0, 1100.0, 0.0, pytest.approx(180))
    done = live_realized(runs, ROUNDS2, CAP2, THROUGHPUT, SOURCES, 1000.0, 1100.0)
    assert done.realized.episodes == () and done.live.runs[0].ended


def test_without_a_round_near_the_windows_end_a_pending_job_is_not_guessed():
    """No round observed the cluster near the window's end (``sighted`` None): job 11, last seen at 1090, may have
    started or left since; it is listed, not counted. Seen after the end (1090 > 1050), it still waited then."""
    live = runs_of(STARVED_RUNS, CAP2, 1000.0, 1100.0, pending=STARVED_PENDING[:1], sighted=None)
    assert live.pending == () and live.left_out == (LeftOut(11, "acct_a", NO_SIGHTING, 0.0),)
    assert runs_of(STARVED_RUNS, CAP2, 1000.0, 1050.0, pending=STARVED_PENDING[:1], sighted=None).pending == (11,)
