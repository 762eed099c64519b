"""Retention (store/retention.py, Store.prune, daemon/bounded.maybe_prune): what is pruned and what is kept."""

from __future__ import annotations

from slurm_fair import config
from slurm_fair.daemon import bounded
from slurm_fair.store import PendingJob, Store
from slurm_fair.daemon.preemption.store import PreemptionStore

DAY = 86400.0
NOW = 200 * DAY


def rec(job_id, event, t, context="epilog_slurmctld", restart=0):
    return {"v": 1, "event": event, "context": context, "job_id": job_id, "restart_count": restart, "time": t,
            "account": "a", "class": "c", "gpus": {"v100": 1}, "gpu_count": 1}


def counts(s):
    return {t: s.db.execute(f"select count(*) from {t}").fetchone()[0]
            for t in ("events", "job_records", "profile_reports", "rounds", "shares", "placements", "applied",
                      "preemptions", "pending_jobs", "profiles")}


def filled():
    s = Store(":memory:")
    old, new = NOW - 100 * DAY, NOW - DAY
    for t in (old, old + 1, new):  # three rounds: two old, one recent
        rid = s.begin_round("oef-coop", now=t)
        s.record_shares(rid, [{"account": "a", "class": "c", "gpu_type": "v100", "ideal": 1.0}])
        s.record_placements(rid, [{"account": "a", "gpu_type": "v100", "ideal": 1.0, "real": 1, "limit": 1}])
        s.record_applied(rid, [{"account": "a", "key": "v100", "old": 0, "new": 1, "time": t}])
        s.finish_round(rid, "ok", finished=t + 1)
    s.event("old", "x", at=old)
    s.event("new", "x", at=new)
    # job 1 ended long ago; job 2 started long ago and still runs; job 3 started long ago, never ended, gone
    s.upsert_job_records([rec(1, "start", old, "prolog_slurmctld"), rec(1, "end", old + 5),
                          rec(2, "start", old, "prolog_slurmctld"), rec(3, "start", old, "prolog_slurmctld"),
                          rec(4, "start", new, "prolog_slurmctld")])
    for jid, t in ((1, old), (2, old), (4, new)):
        s.record_report({"job_id": jid, "n": 1, "time": t, "account": "a", "class": "c", "status": "accepted"})
    s.set_profile("c", "v100", 5.0, account="a")
    s.db["profiles"].update(("a", "c", "v100", "set"), {"updated": old})  # an old value: never pruned
    done = PreemptionStore(s).add(job_id=9, account="a", gpu_type="v100", gpus=1, signal="USR1", reason="r", grace=60,
                                  round_id=1, now=old)
    PreemptionStore(s).step(done, "requeue", state="requeued", now=old + 60)
    PreemptionStore(s).add(job_id=8, account="a", gpu_type="v100", gpus=1, signal="USR1", reason="r", grace=60,
                           round_id=2, now=old)  # still signalled: in progress, keeps its round
    # job 5 was last seen pending long ago (pruned), job 6 first seen long ago and still pending (kept)
    s.record_pending([PendingJob(5, "a", "c", 1, None, old - 9, "", old - 5, old),
                      PendingJob(6, "a", "c", 1, "v100", old - 9, "", old, new)])
    return s


def test_prune_deletes_old_history_and_keeps_what_rounds_need():
    s = filled()
    before = counts(s)
    got = s.prune(90, now=NOW, live_jobs={2})
    after = counts(s)
    assert got == {"events": 1, "job_records": 3, "profile_reports": 1, "rounds": 1, "shares": 1,
                   "placements": 1, "applied": 1, "preemptions": 1, "pending_jobs": 1, "profiles": 0, "behind": 0}
    del got["behind"]
    assert {k: before[k] - after[k] for k in got} == got
    assert after["profiles"] == 1  # profile values stay, however old
    ids = [r for (r,) in s.db.execute("select id from rounds order by id")]
    assert ids == [2, 3]  # round 1 pruned; round 2 kept (a preemption in progress names it); 3 is new
    jobs = sorted({j for (j,) in s.db.execute("select job_id from job_records")})
    assert jobs == [2, 4]  # job 1 ended, job 3 is not live: pruned; job 2 still runs
    assert [j for (j,) in s.db.execute("select job_id from profile_reports order by job_id")] == [2, 4]
    assert [p.job_id for p in s.pending_jobs()] == [6]  # last seen a day ago: kept


def test_unknown_live_jobs_keep_every_unfinished_run_and_zero_days_prunes_nothing():
    s = filled()
    assert s.prune(0, now=NOW) == {}
    s.prune(90, now=NOW, live_jobs=None)
    assert sorted({j for (j,) in s.db.execute("select job_id from job_records")}) == [2, 3, 4]


def test_the_newest_round_is_kept_even_when_everything_is_old():
    s = filled()
    s.prune(0.5, now=NOW + 400 * DAY, live_jobs=set())
    assert [r for (r,) in s.db.execute("select id from rounds")] == [2, 3]  # 2: preemption in progress; 3: newest


def test_maybe_prune_runs_at_most_once_a_day_with_an_event():
    s = filled()
    cfg = config.from_dict({"store": {"retention_days": 90}})
    first = bounded.maybe_prune(s, cfg, NOW, {2})  # 100-day-old history: 7 days of it, then the rest
    assert first["events"] == 1 and first["rounds"] == 1 and "seconds" in first and first["behind"] == 1
    assert bounded.maybe_prune(s, cfg, NOW + 60, {2})["behind"] == 0  # the next round: caught up
    assert bounded.maybe_prune(s, cfg, NOW + 3600, {2}) is None
    again = bounded.maybe_prune(s, cfg, NOW + DAY + 60, {2})
    assert again is not None and again["rounds"] == 0
    e = s.events(kind="store-pruned")[0]
    assert "older than 90 days" in e.message
    assert bounded.maybe_prune(s, config.from_dict({"store": {"retention_days": 0}}), NOW + 9 * DAY, None) is None


def test_a_database_far_behind_catches_up_in_steps_one_a_round_then_daily():
    s = Store(":memory:")  # a round and an event every day for 100 days; retention 30 days; steps of 7 days
    for d in range(100, -1, -1):
        s.finish_round(s.begin_round("oef-coop", now=NOW - d * DAY), "ok")
        s.event("x", at=NOW - d * DAY)
    cfg = config.from_dict({"store": {"retention_days": 30}})
    calls = []
    while True:
        got = bounded.maybe_prune(s, cfg, NOW + len(calls), None)  # the next rounds, seconds apart
        assert got is not None
        calls.append(got["rounds"])
        if not got["behind"]:
            break
    # days -100..-31 in ten steps of 7, one a round; then day -30 (the clock moved on by seconds)
    assert calls == [7] * 10 + [1]
    assert bounded.maybe_prune(s, cfg, NOW + 3600, None) is None  # caught up: daily again
    assert s.db.execute("select count(*) from rounds").fetchone()[0] == 30
    assert "the rest next round" in s.events(kind="store-pruned", limit=20)[-1].message


def _profiles_of_every_kind(s):
    """filled()'s store plus profile values, each with its last update: class c of account a is named by recent
    job records, a pending job, shares and reports; no class 'gone*' is named by anything."""
    old, new = NOW - 100 * DAY, NOW - DAY
    for account, cls, g, source, t in (
            ("a", "gone", "v100", "harvested", old),  # unused for 100 days: pruned
            ("a", "gone", "k80", "harvested", new),  # updated a day ago: kept
            ("", "gone2", "v100", "set", old),  # site-wide, its class unused: pruned
            ("", "c", "k80", "imported", old),  # site-wide, class c used by account a: kept
            ("", "gone3", "v100", "shipped", old),  # shipped: never pruned
            ("b", "c", "v100", "measured", old),  # class c of account b: only a's jobs name c: pruned
            ("a", "c", "k80", "measured", old)):  # old, but account a's class c runs: kept
        s.set_profile(cls, g, 5.0, account=account, source=source)
        s.db["profiles"].update((account, cls, g, source), {"updated": t})
    s.db.execute("insert into profiles (account, class, gpu_type, source, throughput, samples) "
                 "values ('a', 'gone4', 'v100', 'set', 1.0, 1)")  # no update time (an old database): kept


def _profile_keys(s):
    return sorted((a, c, g, src) for a, c, g, src in
                  s.db.execute("select account, class, gpu_type, source from profiles"))


def test_profile_values_unused_for_profile_days_are_pruned_and_shipped_ones_never():
    """Issue 41 item 8: profile rows were never pruned (a tenant's class names grew the table for good)."""
    s = filled()
    _profiles_of_every_kind(s)
    assert s.prune(90, now=NOW, live_jobs={2})["profiles"] == 0  # profile_days 0 (the default here): kept
    assert len(_profile_keys(s)) == 9
    got = s.prune(90, now=NOW, live_jobs={2}, profile_days=90)
    assert got["profiles"] == 3
    assert _profile_keys(s) == [("", "c", "k80", "imported"), ("", "gone3", "v100", "shipped"),
                                ("a", "c", "k80", "measured"), ("a", "c", "v100", "set"),
                                ("a", "gone", "k80", "harvested"), ("a", "gone4", "v100", "set")]


def test_a_class_is_used_while_any_record_names_it_within_profile_days():
    s = filled()
    _profiles_of_every_kind(s)
    # 150 days later: class c's last job record, pending sighting, share and report are 150 days old
    got = s.prune(1000, now=NOW + 150 * DAY, live_jobs={2}, profile_days=90)
    assert got["profiles"] == 7 and _profile_keys(s) == [("", "gone3", "v100", "shipped"),
                                                          ("a", "gone4", "v100", "set")]
    s2 = filled()
    _profiles_of_every_kind(s2)
    s2.record_pending([PendingJob(7, "b", "c", 1, None, NOW, "", NOW, NOW)])  # account b's class c waits now
    s2.prune(90, now=NOW, live_jobs={2}, profile_days=90)
    assert ("b", "c", "v100", "measured") in _profile_keys(s2)


def test_maybe_prune_prunes_profiles_after_the_configured_days():
    s = filled()
    _profiles_of_every_kind(s)
    assert bounded.maybe_prune(s, config.from_dict({"store": {"profile_days": 0}}), NOW, {2})["profiles"] == 0
    s = filled()
    _profiles_of_every_kind(s)
    first = bounded.maybe_prune(s, config.from_dict({}), NOW, {2})  # the defaults: 90 and 90 days
    assert first["profiles"] == 3 and "profiles 3" in s.events(kind="store-pruned")[0].message
