"""The harvest's bounded work (issue 41 items 4 and 5): the class cap within and across harvests, hook records read
once through a cursor, the per-round cap before parsing, fair queueing per account, and reports taken once when a
round stops half-way. Hand-built snapshots and records: pure data through a real store."""

from __future__ import annotations

import json
import sqlite3

import pytest
import sqlite_utils

from slurm_fair import config
from slurm_fair.daemon import harvest as H
from slurm_fair.daemon.harvest import fair_quotas, harvest
from slurm_fair.store import Store
from slurm_fair.store.schema import migrate

from .test_harvest import job, snap, values

CFG = config.from_dict({"profiling": {"max_throughput": 1000.0}})
CAP = int(CFG.profiling.max_classes_per_account)


def rec(job_id, account="acct_a", cls="c", tput="20@1"):
    return {"v": 1, "event": "end", "context": "epilog_slurmctld", "job_id": job_id, "restart_count": 0,
            "time": 5.0, "account": account, "class": cls, "gpus": {"v100": 1}, "gpu_count": 1,
            "gpu_info": "scontrol AllocTRES", "fair_tokens": f"fair:tput={tput}"}


def classes(store, account="acct_a"):
    return {r.cls for r in store.profile_values() if r.account == account}


def taken(counts):
    return counts["accepted"] + counts["rejected"] + counts["refused"]


# ------------------------------------------------------------------------------------------------ class cap
def test_302_running_jobs_with_distinct_classes_store_at_most_the_cap_in_one_harvest_and_after():
    """Issue 41 item 4: the account's classes were counted once a harvest, so 302 running 1-GPU jobs under 302
    names stored 200 classes in one harvest (cap 20). Now a class stored counts at once: 20, and still 20 after
    the rest are taken in later harvests (their reports count for ``default``)."""
    s = Store(":memory:")
    jobs = [job(1000 + i, f"class=n{i} fair:tput=20@1", {"v100": 1}) for i in range(302)]
    first = harvest(s, snap(*jobs), CFG, 1, now=10.0)
    assert taken(first) == H.MAX_REPORTS_PER_ROUND and first["deferred"] == 302 - H.MAX_REPORTS_PER_ROUND
    assert classes(s) == {f"n{i}" for i in range(CAP)} | {"default"}
    for r in (2, 3):
        harvest(s, snap(*jobs), CFG, r, now=10.0 * r)
    assert len(s.profile_reports(limit=10 ** 4)) == 302  # every report taken, once
    assert classes(s) - {"default"} == {f"n{i}" for i in range(CAP)}
    assert values(s)[("acct_a", "default", "v100", "harvested")][1] == 302 - CAP  # the rest count as default


def test_end_records_over_50_names_store_at_most_the_cap_across_harvests():
    """Issue 41 item 4: 20 000 end records over 50 names stored 50 classes. The same shape, 1 000 records over 50
    names drained over 5 harvests: the cap's 20; another account's classes are its own."""
    s = Store(":memory:")
    s.upsert_job_records([rec(1000 + i, cls=f"evil{i % 50}") for i in range(1000)] + [rec(5000, "acct_b", "mine")])
    for r in range(1, 7):
        harvest(s, snap(), CFG, r, now=10.0 * r)
    assert len(s.profile_reports(limit=10 ** 4)) == 1001
    assert len(classes(s) - {"default"}) == CAP and classes(s, "acct_b") == {"mine"}


# ------------------------------------------------------------------------------------------------ fair queue
@pytest.mark.parametrize("waiting, limit, want", [
    ({"a": (5000, 1), "b": (1, 9000)}, 200, {"a": 199, "b": 1}),
    # equal part 66: b takes its 30, a and c share the other 170
    ({"a": (150, 1), "b": (30, 2), "c": (100, 3)}, 200, {"a": 85, "b": 30, "c": 85}),
    ({"a": (5, 7), "b": (5, 3), "c": (5, 5)}, 2, {"b": 1, "c": 1}),  # fewer places than accounts: oldest jobs
    ({"a": (3, 1), "b": (0, 2)}, 200, {"a": 3}),
    ({}, 200, {}),
])
def test_fair_quotas_are_max_min_fair_per_account(waiting, limit, want):
    assert fair_quotas(waiting, limit) == want


def test_a_genuine_report_of_another_account_is_taken_within_3_rounds_of_a_5000_report_flood():
    """Issue 41 item 5: under one account's flood, a later job's genuine report waited about 100 rounds (oldest job
    first). Now the pick is fair-queued per account: the report of acct_b, ingested after the first round, is taken
    in the next round, and the flood still drains 199 a round."""
    s = Store(":memory:")
    s.upsert_job_records([rec(1000 + i, "flood", "f") for i in range(5000)])
    first = harvest(s, snap(), CFG, 1, now=10.0)
    assert taken(first) == H.MAX_REPORTS_PER_ROUND and first["read"] == 5000
    s.upsert_job_records([rec(900_000, "acct_b", "genuine", "7@1")])
    for r in (2, 3, 4):
        out = harvest(s, snap(), CFG, r, now=10.0 * r)
        if ("acct_b", "genuine", "v100", "harvested") in values(s):
            break
    assert r <= 3 and taken(out) == H.MAX_REPORTS_PER_ROUND  # within 3 rounds; the round's cap holds
    assert values(s)[("acct_b", "genuine", "v100", "harvested")] == (7.0, 1, 0)


def test_running_jobs_reports_share_the_round_fairly_with_the_queue():
    s = Store(":memory:")
    s.upsert_job_records([rec(1000 + i, "flood", "f") for i in range(500)])
    out = harvest(s, snap(job(99_999, "class=mine fair:tput=5@1", {"v100": 1}, account="acct_b")), CFG, 1, now=10.0)
    assert taken(out) == H.MAX_REPORTS_PER_ROUND and out["deferred"] == 501 - H.MAX_REPORTS_PER_ROUND
    assert ("acct_b", "mine", "v100", "harvested") in values(s)


# ------------------------------------------------------------------------------------------------ cursor
def test_a_round_after_a_quiet_round_reads_no_old_record():
    """Issue 41 item 5: every round re-read the whole day's hook records (0.26 s a round under a flood). Now the
    cursor moves each record into the queue once: ``read`` counts the rows moved, 0 in a round with no new
    record, and the queue's backlog is still taken."""
    s = Store(":memory:")
    s.upsert_job_records([rec(1000 + i) for i in range(2 * H.MAX_REPORTS_PER_ROUND + 10)])
    assert harvest(s, snap(), CFG, 1, now=10.0)["read"] == 2 * H.MAX_REPORTS_PER_ROUND + 10
    second = harvest(s, snap(), CFG, 2, now=20.0)
    assert "read" not in second and taken(second) == H.MAX_REPORTS_PER_ROUND  # the backlog, no record re-read
    s.upsert_job_records([rec(5000), rec(5001)])
    assert harvest(s, snap(), CFG, 3, now=30.0)["read"] == 2  # only the new rows
    assert "read" not in harvest(s, snap(), CFG, 4, now=40.0)
    assert s.db.execute("select count(*) from harvest_queue").fetchone()[0] == 0
    assert len(s.profile_reports(limit=10 ** 4)) == 2 * H.MAX_REPORTS_PER_ROUND + 12


def test_a_queued_record_older_than_a_day_is_dropped():
    s = Store(":memory:")
    s.upsert_job_records([rec(1000 + i) for i in range(H.MAX_REPORTS_PER_ROUND + 5)])
    ingested = s.db.execute("select max(ingested) from job_records").fetchone()[0]
    harvest(s, snap(), CFG, 1, now=ingested)
    assert "deferred" not in harvest(s, snap(), CFG, 2, now=ingested + H.END_RECORD_WINDOW + 1)
    assert s.db.execute("select count(*) from harvest_queue").fetchone()[0] == 0


def test_a_round_stopped_half_way_loses_nothing_and_takes_nothing_twice(tmp_path, monkeypatch):
    """A crash in the middle of a round (here: KeyboardInterrupt on the 50th report stored) and a restart on the same
    database: every report is taken exactly once, the profile counts each sample once, the queue ends empty.
    (A crash after the reports' commit and before the queue's rows are deleted: the next round finds them
    taken, see the test below.)"""
    path = tmp_path / "s.sqlite"
    n = H.MAX_REPORTS_PER_ROUND + 250
    with Store(path) as s:
        s.upsert_job_records([rec(1000 + i) for i in range(n)])
        real, calls = Store.record_report, []

        def crash(self, row):
            calls.append(row["job_id"])
            if len(calls) == 50:
                raise KeyboardInterrupt
            return real(self, row)

        monkeypatch.setattr(Store, "record_report", crash)
        with pytest.raises(KeyboardInterrupt):
            harvest(s, snap(), CFG, 1, now=10.0)
        monkeypatch.setattr(Store, "record_report", real)
        # the round's reports are one transaction: none of them stored, all still queued
        assert len(s.profile_reports(limit=10 ** 4)) == 0
        assert s.db.execute("select count(*) from harvest_queue").fetchone()[0] == n
    with Store(path) as s:  # the restart
        for r in range(2, 6):
            harvest(s, snap(), CFG, r, now=10.0 * r)
        reports = s.profile_reports(limit=10 ** 4)
        assert sorted(x.job_id for x in reports) == list(range(1000, 1000 + n))
        assert values(s)[("acct_a", "c", "v100", "harvested")] == (20.0, n, 0)
        assert s.db.execute("select count(*) from harvest_queue").fetchone()[0] == 0


def test_a_record_picked_again_after_its_report_was_stored_is_not_taken_twice():
    s = Store(":memory:")
    s.upsert_job_records([rec(1000 + i) for i in range(10)])
    harvest(s, snap(), CFG, 1, now=10.0)
    s.db.execute("insert into harvest_queue (record_id, account, job_id, ingested) "
                 "select rowid, account, job_id, ingested from job_records")  # as if the delete never ran
    assert harvest(s, snap(), CFG, 2, now=20.0) == {"accepted": 0, "rejected": 0, "refused": 0}
    assert values(s)[("acct_a", "c", "v100", "harvested")] == (20.0, 10, 0)
    assert s.db.execute("select count(*) from harvest_queue").fetchone()[0] == 0


def test_migration_17_harvests_the_records_of_the_day_stored_before_it(tmp_path):
    """A database at version 16 with an end record stored: after the migration the cursor starts at 0, so the
    records of the day stored before it are read once and taken."""
    import time

    path = tmp_path / "s.sqlite"
    db = sqlite_utils.Database(sqlite3.connect(path, isolation_level=None))
    assert migrate(db, upto=16) == 16
    db["job_records"].insert({"job_id": 77, "restart_count": 0, "event": "end", "context": "epilog_slurmctld",
                              "node": "", "time": 5.0, "account": "acct_a", "class": "c", "gpus": '{"v100": 1}',
                              "gpu_count": 1, "ingested": time.time(), "data": json.dumps(rec(77))})
    db.close()
    with Store(path) as s:
        assert {"harvest_queue", "harvest_cursor"} <= set(s.db.table_names())
        assert harvest(s, snap(), CFG, 1, now=time.time()) == {"accepted": 1, "rejected": 0, "refused": 0, "read": 1}
