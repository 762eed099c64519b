"""The SQLite store: schema, transactions, profiles CSV, round bookkeeping and carried state."""

from __future__ import annotations

import dataclasses
import sqlite3

import pytest

from slurm_fair.errors import InputError
from slurm_fair.store import CSV_HEADER, MIGRATIONS, Placement, Share, Store, StoreError, as_row, migrate, schema_version
from slurm_fair.profiling.core import effective
from slurm_fair.daemon.preemption.store import PreemptionStore

import sqlite_utils

HEADER = ",".join(CSV_HEADER) + "\n"


@pytest.fixture
def store():
    s = Store(":memory:")
    yield s
    s.close()


@pytest.fixture
def path(tmp_path):
    return tmp_path / "state" / "slurm-fair.sqlite"


# ------------------------------------------------------------------------------------ schema


def test_creates_parent_folder_wal_and_busy_timeout(path):
    with Store(path) as s:
        assert path.exists()
        assert s.db.journal_mode == "wal"
        assert s.db.execute("pragma busy_timeout").fetchone()[0] == 10_000
        assert s.version == len(MIGRATIONS)
        assert [r["version"] for r in s.db["schema_version"].rows] == list(range(1, len(MIGRATIONS) + 1))


def test_reopen_keeps_data_and_applies_no_migration_twice(path):
    with Store(path) as s:
        s.set_profile("resnet50", "v100", 4.0)
        applied = [r["applied"] for r in s.db["schema_version"].rows]
    with Store(path) as s:
        assert [r["applied"] for r in s.db["schema_version"].rows] == applied
        assert effective(s.profile_values())[0].throughput == 4.0


def test_old_schema_is_upgraded_on_open(path):
    path.parent.mkdir()
    db = sqlite_utils.Database(sqlite3.connect(path, isolation_level=None))
    assert migrate(db, upto=1) == 1
    assert "idx_shares_round_id" not in {i.name for i in db["shares"].indexes}
    db.close()
    with Store(path) as s:
        assert s.version == len(MIGRATIONS) == schema_version(s.db)
        assert "idx_shares_round_id" in {i.name for i in s.db["shares"].indexes}


def test_newer_schema_is_refused(path):
    with Store(path) as s:
        s.db["schema_version"].insert({"version": len(MIGRATIONS) + 1, "name": "future", "applied": 0.0})
    with pytest.raises(StoreError, match="newer"):
        Store(path)


def test_not_a_database_is_a_store_error(tmp_path):
    p = tmp_path / "junk.sqlite"
    p.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot open"):
        Store(p)


# ------------------------------------------------------------------------------------ transactions


def test_transaction_rollback_loses_nothing_already_stored(path):
    with Store(path) as s:
        s.set_profile("a", "v100", 1.0)
        s.save_deviations(None, {"acct": {"v100": 0.25}})
        with pytest.raises(RuntimeError):
            with s.transaction():
                s.set_profile("b", "v100", 2.0)
                s.save_deviations(None, {"other": {"k80": 1.0}})
                rid = s.begin_round("oef-noncoop")
                raise RuntimeError("boom")
        assert [p.cls for p in effective(s.profile_values())] == ["a"]
        assert s.deviations() == {"acct": {"v100": 0.25}}
        assert s.rounds() == []
    with Store(path) as s:  # and it is on disk, not only in this connection
        assert [p.cls for p in effective(s.profile_values())] == ["a"]
        assert s.deviations() == {"acct": {"v100": 0.25}}
        assert s.round(rid) is None


def test_nested_transaction_is_part_of_the_outer_one(store):
    with pytest.raises(RuntimeError):
        with store.transaction():
            with store.transaction():
                store.set_profile("a", "v100", 1.0)
            raise RuntimeError("outer fails after inner succeeded")
    assert effective(store.profile_values()) == []


def test_commit_is_visible_to_a_second_connection(path):
    with Store(path) as writer, Store(path) as reader:
        with writer.transaction():
            writer.set_profile("a", "k80", 1.0)
            assert effective(reader.profile_values()) == []  # not committed yet
        assert len(effective(reader.profile_values())) == 1


# ------------------------------------------------------------------------------------ profiles


def test_set_profile_upserts_and_validates(store):
    store.set_profile("resnet50", "v100", 2.0)
    store.set_profile("resnet50", "v100", 3.0, samples=5, source="measured")
    store.set_profile("resnet50", "v100", 9.0, account="acct_a")
    store.set_profile("resnet50", "v100", 2.5)  # replaces the set value, not the measured one
    assert [(r.account, r.throughput, r.samples, r.source) for r in store.profile_values()] == [
        ("", 3.0, 5, "measured"), ("", 2.5, 1, "set"), ("acct_a", 9.0, 1, "set")]
    # the policies' view: reported (set) wins, unless prefer_measured
    assert [(r.account, r.throughput, r.source) for r in effective(store.profile_values())] == [
        ("", 2.5, "set"), ("acct_a", 9.0, "set")]
    assert [(r.account, r.throughput, r.source) for r in effective(store.profile_values(), True)] == [
        ("", 3.0, "measured"), ("acct_a", 9.0, "set")]
    for kwargs, field in [
        (dict(cls="", gpu_type="v100", throughput=1), "class"),
        (dict(cls="x", gpu_type="v 100", throughput=1), "gpu_type"),
        (dict(cls="x", gpu_type="v100", throughput=0), "throughput of class 'x' on GPU type 'v100'"),
        (dict(cls="x", gpu_type="v100", throughput=float("nan")), "throughput of class 'x' on GPU type 'v100'"),
        (dict(cls="x", gpu_type="v100", throughput="fast"), "throughput of class 'x' on GPU type 'v100'"),
        (dict(cls="x", gpu_type="v100", throughput=1, account="a,b"), "account"),
        (dict(cls="x", gpu_type="v100", throughput=1, samples=0), "samples"),
        (dict(cls="x", gpu_type="v100", throughput=1, source="manual"), "source"),
        (dict(cls="x", gpu_type="v100", throughput=1e300, bounds=(1e-6, 1e7)), "throughput of class 'x' on GPU type 'v100'"),
        (dict(cls="x", gpu_type="v100", throughput=1e-7, bounds=(1e-6, 1e7)), "throughput of class 'x' on GPU type 'v100'"),
    ]:
        with pytest.raises(InputError) as e:
            store.set_profile(**kwargs)
        assert e.value.field == field
    assert len(effective(store.profile_values())) == 2


def test_delete_profiles(store):
    for t in ("k80", "v100"):
        store.set_profile("lm", t, 1.0)
        store.set_profile("lm", t, 1.0, account="acct_a")
    assert store.delete_profiles("lm", gpu_type="k80") == 1
    assert store.delete_profiles("lm", account="acct_a") == 2
    assert store.delete_profiles("nope") == 0
    assert [(r.account, r.gpu_type) for r in effective(store.profile_values())] == [("", "v100")]


def test_import_csv_and_export_round_trip(store):
    text = HEADER + ",resnet50,v100,4.25\nacct_a,resnet50,k80,0.1\n\n,lm,p100,82.5227\n"
    assert store.import_csv(text) == 3
    assert {r.source for r in effective(store.profile_values())} == {"imported"}
    exported = store.export_csv(effective(store.profile_values()))
    other = Store(":memory:")
    assert other.import_csv(exported) == 3
    assert other.export_csv(effective(other.profile_values())) == exported
    got = {(r.account, r.cls, r.gpu_type): r.throughput for r in effective(other.profile_values())}
    assert got == {("", "resnet50", "v100"): 4.25, ("acct_a", "resnet50", "k80"): 0.1,
                   ("", "lm", "p100"): 82.5227}
    assert exported.splitlines()[0] == "account,class,gpu_type,throughput"


def test_export_keeps_full_float_precision(store):
    store.set_profile("x", "v100", 1 / 3)
    other = Store(":memory:")
    other.import_csv(store.export_csv(effective(store.profile_values())))
    assert effective(other.profile_values())[0].throughput == 1 / 3


@pytest.mark.parametrize("body, field, value", [
    (",a,v100,1\n,b,v100,-2\n", "line 3 throughput of class 'b' on GPU type 'v100'", "-2"),
    (",a,v100,1\n,b,v100,fast\n", "line 3 throughput of class 'b' on GPU type 'v100'", "fast"),
    (",a,v100,1\n,,v100,1\n", "line 3 class", ""),
    (",a,v100,1\n,b,v 100,1\n", "line 3 gpu_type", "v 100"),
    (",a,v100\n", "line 2", ",a,v100"),
    (",a,v100,1\n,a,v100,2\n", "line 3 gpu_type", "v100"),
])
def test_import_csv_bad_row_names_line_column_value_and_writes_nothing(store, body, field, value):
    store.set_profile("kept", "k80", 7.0)
    before = effective(store.profile_values())
    with pytest.raises(InputError) as e:
        store.import_csv(HEADER + body)
    assert e.value.field == field
    assert e.value.value == value
    assert field in str(e.value)
    assert effective(store.profile_values()) == before


@pytest.mark.parametrize("text", ["", "class,account,gpu_type,throughput\n", "account,class,gpu_type\n"])
def test_import_csv_bad_header(store, text):
    with pytest.raises(InputError) as e:
        store.import_csv(text)
    assert e.value.field == "line 1"
    assert effective(store.profile_values()) == []


# ------------------------------------------------------------------------------------ rounds


def test_round_lifecycle_and_last_good_round(store):
    assert store.round() is None
    r1 = store.begin_round("oef-noncoop", "ECOS")
    assert store.round(r1).status == "running"
    assert store.round() is None  # running rounds do not count
    store.finish_round(r1, "ok", solve_seconds=0.5, total_throughput=12.5, n_accounts=3, n_changes=2,
                       message="fine", details={"capacity": {"v100": 6}})
    r2 = store.begin_round("oef-noncoop")
    store.finish_round(r2, "unreachable", message="slurmctld down")
    r3 = store.begin_round("gavel")
    store.finish_round(r3, "dry-run")
    store.begin_round("gavel")  # still running
    last = store.round()
    assert last.id == r3 and last.status == "dry-run"
    first = store.round(r1)
    assert first.details == {"capacity": {"v100": 6}}
    assert first.finished >= first.started
    assert (first.solver, first.n_changes, first.total_throughput) == ("ECOS", 2, 12.5)
    assert [r.status for r in store.rounds()] == ["running", "dry-run", "unreachable", "ok"]
    assert [r.id for r in store.rounds(limit=2)] == [r3 + 1, r3]
    assert store.rounds(limit=1, details=False)[0].details is None
    assert store.last_finished_round() == dataclasses.replace(store.round(r3), details=None)
    store.finish_round(r3, "error")
    assert store.round().id == r1


def test_round_series_reads_chosen_details_keys_over_a_window(store):
    ids = []
    for t, f in ((100.0, {"ideal": {"envy_pairs": 0}}), (200.0, None), (300.0, {"error": "x"})):
        rid = store.begin_round("gavel", now=t)
        details = {"capacity": {"v100": 2}, **({"fairness": f} if f is not None else {})}
        store.finish_round(rid, "ok", details=details, finished=t + 1, total_throughput=t / 100)
        store.record_placements(rid, [{"account": "a", "gpu_type": "v100", "ideal": 1.5, "real": 2, "limit": 2}])
        ids.append(rid)
    store.begin_round("gavel", now=400.0)  # running: not in any series
    rows = store.round_series()
    assert [r.id for r in rows] == ids and [r.started for r in rows] == [100.0, 200.0, 300.0]
    assert [r.values["fairness"] for r in rows] == [{"ideal": {"envy_pairs": 0}}, None, {"error": "x"}]
    assert "capacity" not in rows[0].values and rows[0].finished == 101.0 and rows[2].total_throughput == 3.0
    assert [r.id for r in store.round_series(150.0, 300.0)] == ids[1:]
    assert [r.values["capacity"] for r in store.round_series(until=150.0, keys=("capacity",))] == [{"v100": 2}]
    assert store.placements_between(since=250.0) == [Placement(ids[2], "a", "v100", 1.5, None, 2, 2)]
    with pytest.raises(InputError, match="keys"):
        store.round_series(keys=("x') from rounds; --",))
    p1 = PreemptionStore(store).add(job_id=1, account="a", gpu_type="v100", gpus=1, signal="USR1", reason="r", grace=60, now=50.0)
    PreemptionStore(store).add(job_id=2, account="a", gpu_type="v100", gpus=1, signal="USR1", reason="r", grace=60, now=500.0)
    assert [p.id for p in PreemptionStore(store).rows(limit=None, until=100.0)] == [p1]


def test_finish_round_rejects_bad_status_field_and_id(store):
    r = store.begin_round("oef-noncoop")
    with pytest.raises(InputError) as e:
        store.finish_round(r, "great")
    assert e.value.field == "status"
    with pytest.raises(InputError) as e:
        store.finish_round(r, "ok", colour="red")
    assert e.value.field == "colour"
    with pytest.raises(InputError) as e:
        store.finish_round(r + 99, "ok")
    assert e.value.field == "round_id"
    assert store.round(r).status == "running"


def test_shares_placements_applied(store):
    r = store.begin_round("oef-noncoop")
    store.record_shares(r, [
        {"account": "acct_b", "class": "lm", "gpu_type": "k80", "ideal": 1.5, "real": None},
        {"account": "acct_a", "class": "resnet50", "gpu_type": "v100", "ideal": 2.25, "real": 2},
    ])
    store.record_placements(r, [
        {"account": "acct_a", "gpu_type": "v100", "ideal": 2.25, "deviation_before": -0.5, "real": 2, "limit": 4},
    ])
    store.record_applied(r, [
        {"account": "acct_a", "key": "v100", "old": None, "new": 4},
        {"account": "acct_a", "key": "*", "old": 8, "new": -1},
    ])
    assert store.shares(r) == [Share(r, "acct_a", "resnet50", "v100", 2.25, 2), Share(r, "acct_b", "lm", "k80", 1.5, None)]
    assert as_row(store.shares(r)[0]) == {"round_id": r, "account": "acct_a", "class": "resnet50", "gpu_type": "v100",
                                          "ideal": 2.25, "real": 2}
    assert store.placements(r) == [Placement(r, "acct_a", "v100", 2.25, -0.5, 2, 4)]
    applied = store.applied(r)
    assert [(a.key, a.old, a.new) for a in applied] == [("v100", None, 4), ("*", 8, -1)]
    assert all(a.time > 0 for a in applied)
    assert store.shares(r + 1) == [] and store.placements(r + 1) == [] and store.applied(r + 1) == []


def test_rows_of_an_unknown_round_are_refused(store):
    with pytest.raises(sqlite3.IntegrityError):
        store.record_shares(42, [{"account": "a", "class": "c", "gpu_type": "v100", "ideal": 1.0}])


# ------------------------------------------------------------------------------------ carried state


def test_deviations_are_replaced_as_a_whole(store):
    assert store.deviations() == {}
    store.save_deviations(None, {"a": {"v100": 0.5, "k80": -0.25}, "b": {"v100": 0.0}})
    assert store.deviations() == {"a": {"k80": -0.25, "v100": 0.5}, "b": {"v100": 0.0}}
    r = store.begin_round("oef-noncoop")
    store.save_deviations(r, {"b": {"k80": 1.5}})
    assert store.deviations() == {"b": {"k80": 1.5}}
    assert [row["round_id"] for row in store.db["deviations"].rows] == [r]
    store.save_deviations(r, {})
    assert store.deviations() == {}


def test_deficits_are_replaced_as_a_whole(store):
    store.save_deficits({"a": 1.5, "b": -2.0})
    assert store.deficits() == {"a": 1.5, "b": -2.0}
    store.save_deficits({"c": 0.25})
    assert store.deficits() == {"c": 0.25}


def test_managed(store):
    assert store.managed() == set()
    store.set_managed(["acct_a", "acct_b", "acct_a"])
    assert store.managed() == {"acct_a", "acct_b"}
    store.set_managed({"acct_c"})
    assert store.managed() == {"acct_c"}


def test_events(store):
    r = store.begin_round("oef-noncoop")
    e1 = store.event("round", "started", round_id=r)
    e2 = store.event("job-retyped", "moved to v100", job_id=17, account="acct_a", data={"from": "k80"})
    store.event("round", "finished", round_id=r)
    assert e2 == e1 + 1
    evs = store.events()
    assert [e.message for e in evs] == ["finished", "moved to v100", "started"]
    job = evs[1]
    assert (job.kind, job.job_id, job.account, job.data) == ("job-retyped", 17, "acct_a", {"from": "k80"})
    assert [e.message for e in store.events(kind="round")] == ["finished", "started"]
    assert len(store.events(limit=1)) == 1
    assert evs[0].data is None


def test_inner_savepoint_failure_caught_keeps_the_outer_work(store):
    with store.transaction():
        store.set_profile("outer", "v100", 1.0)
        with pytest.raises(InputError):
            with store.transaction():
                store.set_profile("inner", "v100", 1.0)
                store.set_profile("inner", "v100", -1.0)  # fails: the inner block is undone
    assert [p.cls for p in effective(store.profile_values())] == ["outer"]


def test_second_process_waits_for_the_write_lock_instead_of_failing(path):
    """A read-then-write transaction and a concurrent writer (as the daemon and the CLI): both succeed."""
    import threading

    Store(path).close()
    b_done = threading.Event()
    errors = []

    def writer_b():  # its own connection, as another process would have
        try:
            with Store(path) as b:
                b.set_profile("from-b", "k80", 2.0)
        except Exception as e:  # reported by the assertion below
            errors.append(e)
        b_done.set()

    with Store(path) as a:
        with a.transaction():
            assert effective(a.profile_values()) == []  # read first
            t = threading.Thread(target=writer_b)
            t.start()
            assert not b_done.wait(0.5)  # b waits for a's write lock
            a.set_profile("from-a", "v100", 1.0)  # then write, in the same transaction
        t.join(timeout=15)
        assert errors == [] and b_done.is_set()
        assert {p.cls for p in effective(a.profile_values())} == {"from-a", "from-b"}


def test_numpy_values_are_stored_as_plain_numbers(store):
    np = pytest.importorskip("numpy")
    r = store.begin_round("oef-noncoop")
    store.record_shares(r, [{"account": "a", "class": "c", "gpu_type": "v100", "ideal": np.float64(0.5),
                             "real": np.int64(1)}])
    store.record_placements(r, [{"account": "a", "gpu_type": "v100", "ideal": np.float64(0.5),
                                 "deviation_before": np.float64(0.1), "real": np.int64(1), "limit": np.int64(2)}])
    store.record_applied(r, [{"account": "a", "key": "v100", "old": np.int64(1), "new": np.int64(2)}])
    store.finish_round(r, "ok", details={"x": np.array([1.5, 2.0]), "n": np.int64(3)})
    store.event("round", job_id=np.int64(5), data={"y": np.float64(0.25)})
    assert store.shares(r)[0].real == 1 and type(store.shares(r)[0].real) is int
    assert store.placements(r)[0].limit == 2
    assert store.applied(r)[0].new == 2
    assert store.round(r).details == {"x": [1.5, 2.0], "n": 3}
    assert store.events()[0].data == {"y": 0.25} and store.events()[0].job_id == 5
    with pytest.raises(InputError) as e:
        store.record_applied(r, [{"account": "a", "key": "v100", "old": 1, "new": 2.5}])
    assert e.value.field == "new"
    assert len(store.applied(r)) == 1


def test_migration_9_adds_submit_time_and_keeps_every_job_record(path):
    import json as _json

    path.parent.mkdir()
    db = sqlite_utils.Database(sqlite3.connect(path, isolation_level=None))
    assert migrate(db, upto=8) == 8
    rows = [{"job_id": j, "restart_count": 0, "event": ev, "context": ctx, "node": "", "time": 100.0 + j,
             "start_time": 99.0, "end_time": 160.0 if ev == "end" else None, "account": "acct_a", "user": "alice",
             "partition": "gpu", "class": "cnn", "job_name": "n", "gpus": '{"a100": 1}', "gpu_count": 1,
             "gpu_info": "scontrol TRES", "exit_code": None, "exit_signal": None, "exit_status": None,
             "derived_exit_code": None, "file": f"{j}.json", "ingested": 1.0, "data": data}
            for j, ev, ctx, data in ((1, "start", "prolog_slurmctld", '{"job_id": 1}'),
                                     (1, "end", "epilog_slurmctld", None),
                                     (2, "start", "prolog_slurmctld", _json.dumps({"submit_time": 42.5})),
                                     (3, "start", "prolog_slurmctld", "{broken"))]
    db["job_records"].insert_all(rows)
    before = [dict(r) for r in db["job_records"].rows]
    db.close()
    with Store(path) as s:
        assert s.version == len(MIGRATIONS) >= 16
        after = list(s.db["job_records"].rows)
        assert [{k: v for k, v in r.items() if k != "submit_time"} for r in after] == before
        # the one stored record that held a submit time gives it; the others (none, or unreadable data): null
        assert [r["submit_time"] for r in after] == [None, None, 42.5, None]
        assert {r.job_id: r.submit for r in s.job_runs()} == {1: None, 2: 42.5, 3: None}


def test_job_runs_since_reads_only_the_jobs_a_window_needs(tmp_path):
    """``job_runs(since=t)``: jobs with a record or a Slurm time at or after t, and jobs with a run still open (a
    start record without its end) however old; a job that ended before t is not read."""
    def rec(job, restart, event, t, start, end=None):
        ctx = "prolog_slurmctld" if event == "start" else "epilog_slurmctld"
        return {"job_id": job, "restart_count": restart, "event": event, "context": ctx, "node": "", "time": t,
                "start_time": start, "end_time": end, "account": "a", "class": "c", "gpus": {"v100": 1},
                "gpu_count": 1, "gpu_info": "scontrol"}

    with Store(tmp_path / "s.sqlite") as st:
        st.upsert_job_records([
            rec(1, 0, "start", 100, 100), rec(1, 0, "end", 200, 100, 200),  # ended before 1000
            rec(2, 0, "start", 100, 100),  # still running since 100
            rec(3, 0, "start", 900, 900), rec(3, 0, "end", 1500, 900, 1500),  # ended in the window
            rec(4, 0, "start", 100, 100), rec(4, 0, "end", 300, 100, 300),  # requeued, its next run open
            rec(4, 1, "start", 400, 400),
        ])
        assert sorted({r.job_id for r in st.job_runs(since=1000)}) == [2, 3, 4]
        assert sorted({r.job_id for r in st.job_runs()}) == [1, 2, 3, 4]
        assert [(r.restart_count, r.end) for r in st.job_runs(since=1000) if r.job_id == 4] == [(0, 300.0), (1, None)]


def test_migration_16_adds_pending_jobs_and_keeps_everything(path):
    """A database at version 15 gains ``pending_jobs``; its rounds, job records and SiteFactors are kept."""
    from slurm_fair.store import PendingJob

    path.parent.mkdir()
    db = sqlite_utils.Database(sqlite3.connect(path, isolation_level=None))
    assert migrate(db, upto=15) == 15
    assert "pending_jobs" not in db.table_names()
    db["rounds"].insert({"id": 1, "started": 10.0, "policy": "oef-coop", "status": "dry-run"})
    db["site_factors"].insert({"job_id": 7, "before": 0, "value": 5, "time": 10.0})
    db["job_records"].insert({"job_id": 7, "restart_count": 0, "event": "start", "context": "prolog_slurmctld",
                              "node": "", "time": 11.0, "account": "a", "class": "c", "gpus": '{"v100": 1}',
                              "gpu_count": 1, "gpu_info": "scontrol", "submit_time": 9.0})
    before = {t: [dict(r) for r in db[t].rows] for t in ("rounds", "site_factors", "job_records")}
    db.close()
    with Store(path) as s:
        assert s.version == len(MIGRATIONS) >= 16
        assert {t: [dict(r) for r in s.db[t].rows] for t in before} == before
        assert s.pending_jobs() == []
        first = PendingJob(8, "a", "c", 2, None, 5.0, "", 20.0, 20.0)
        assert s.record_pending([first, PendingJob(9, "b", "d", 1, "v100", 6.0, "Dependency", 20.0, 20.0)]) == 2
        # a later round: job 8 seen again (its first sighting kept, its class and GPUs updated), job 9 not
        s.record_pending([PendingJob(8, "a", "e", 4, "a100", 5.0, "", 30.0, 30.0)])
        assert s.pending_jobs() == [PendingJob(8, "a", "e", 4, "a100", 5.0, "", 20.0, 30.0),
                                    PendingJob(9, "b", "d", 1, "v100", 6.0, "Dependency", 20.0, 20.0)]
        assert [p.job_id for p in s.pending_jobs(since=25.0)] == [8]
        assert [p.job_id for p in s.pending_jobs(until=5.5)] == [8]
        assert s.record_pending([]) == 0
