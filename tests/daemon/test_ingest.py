"""Ingesting hook records into the store, and the GPU-seconds they add up to."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from slurm_fair import jobrecord
from slurm_fair.daemon.ingest import check_record, ingest, ingest_round
from slurm_fair.store import Store, gpu_seconds, job_runs


def rec(job: int, event: str, t: float, restart: int = 0, account: str = "acct_a", gpus=None, count=None,
        context: str | None = None, **kw) -> dict:
    context = context or ("prolog_slurmctld" if event == "start" else "epilog_slurmctld")
    gpus = {"a100": 1} if gpus is None else gpus
    r = {"v": 1, "event": event, "context": context, "job_id": job, "restart_count": restart, "time": t,
         "account": account, "user": "alice", "partition": "gpu", "class": "cnn", "job_name": "j", "node": "",
         "gpus": gpus, "gpu_count": sum(gpus.values()) if count is None else count, "gpu_info": "scontrol TRES",
         "start_time": None, "end_time": None, "exit_code": None if event == "start" else 0}
    r.update(kw)
    return r


def spool_with(tmp_path: Path, *records: dict) -> Path:
    spool = tmp_path / "spool"
    for r in records:
        jobrecord.write_record(str(spool), r)
    return spool


def test_ingest_reads_removes_and_is_idempotent(tmp_path):
    store = Store(":memory:")
    records = [rec(1, "start", 100.0, start_time=99.0), rec(1, "end", 160.0, end_time=159.0, exit_code=3)]
    spool = spool_with(tmp_path, *records)
    res = ingest(store, spool)
    assert (res.read, res.bad, res.error) == (2, [], "")
    assert os.listdir(spool) == []
    stored = store.job_records(1)
    assert [(r.event, r.exit_code, r.gpus) for r in stored] == [("start", None, {"a100": 1}),
                                                                         ("end", 3, {"a100": 1})]
    spool_with(tmp_path, *records)  # the same files again (e.g. a crash between commit and unlink)
    assert ingest(store, spool).read == 2
    assert len(store.job_records()) == 2
    assert store.received_gpu_seconds(until=1000) == {"acct_a": {"a100": 60.0}}


def test_malformed_files_move_to_bad_and_become_events_without_stopping(tmp_path):
    store = Store(":memory:")
    spool = spool_with(tmp_path, rec(2, "start", 10.0))
    (spool / "junk.json").write_text("{not json")
    (spool / "3.0.start.prolog_slurmctld.json").write_text(json.dumps(rec(3, "start", 1.0, gpus={"a100": -1})))
    (spool / "4.0.end.prolog_slurmctld.json").write_text(json.dumps(rec(4, "end", 1.0, context="prolog_slurmctld")))
    (spool / ".5.0.start.prolog_slurmctld.json.123.tmp").write_text("{")  # a hook writing right now
    res = ingest(store, spool)
    assert res.read == 1 and sorted(res.bad) == ["3.0.start.prolog_slurmctld.json",
                                                 "4.0.end.prolog_slurmctld.json", "junk.json"]
    assert sorted(os.listdir(spool / "bad")) == sorted(res.bad)
    assert sorted(os.listdir(spool)) == [".5.0.start.prolog_slurmctld.json.123.tmp", "bad"]
    whys = {e.data["file"]: e.data["why"] for e in store.events(kind="hook-record-bad")}
    assert whys["junk.json"].startswith("not JSON")
    assert whys["3.0.start.prolog_slurmctld.json"] == "gpus.a100: must be a count >= 0 (got -1)"
    assert whys["4.0.end.prolog_slurmctld.json"] == "event: 'end' does not match context 'prolog_slurmctld'"
    old = time.time() - 7200
    os.utime(spool / ".5.0.start.prolog_slurmctld.json.123.tmp", (old, old))
    ingest(store, spool)
    assert os.listdir(spool) == ["bad"]  # stale temp file of a killed hook removed


@pytest.mark.parametrize("mutate, why", [
    (lambda r: r.pop("job_id"), "job_id: missing"),
    (lambda r: r.update(v=2), "v: unknown format version (got 2)"),
    (lambda r: r.update(time="x"), "time: wrong type (got 'x')"),
    (lambda r: r.update(restart_count=True), "restart_count: wrong type (got True)"),
    (lambda r: r.update(context="task_prolog"), "context: unknown hook context (got 'task_prolog')"),
])
def test_check_record_names_the_field(mutate, why):
    r = rec(1, "start", 1.0)
    assert check_record(r) == ""
    mutate(r)
    assert check_record(r) == why


def test_unreadable_spool_is_an_event_not_an_exception(tmp_path):
    store = Store(":memory:")
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    res = ingest(store, not_a_dir)
    assert res.read == 0 and "cannot list the spool" in res.error
    assert store.events(kind="hook-ingest-error")[0].message == res.error
    assert ingest(store, tmp_path / "missing").error == ""  # no hook has written yet


def test_ingest_round_off_without_spool_and_never_raises(tmp_path):
    from slurm_fair.config import from_dict

    store = Store(":memory:")
    assert ingest_round(store, from_dict({}), None) is None
    cfg = from_dict({"hooks": {"spool": str(spool_with(tmp_path, rec(1, "start", 5.0)))}})
    assert ingest_round(store, cfg, None).read == 1
    store.close()
    res = ingest_round(store, cfg, None)  # a closed database: reported, not raised
    assert res is not None and res.error


def test_gpu_seconds_windows_open_runs_requeues_and_untyped():
    records = [
        rec(1, "start", 100.0, gpus={"a100": 2}, start_time=100.0),
        rec(1, "end", 200.0, gpus={"a100": 2}),                              # 2 × 100 s
        rec(2, "start", 150.0, account="acct_b", gpus={"v100": 1}, count=2),  # open, 1 v100 + 1 untyped
        rec(3, "start", 0.0, account="acct_b", gpus={"k80": 1}),              # run 0, requeued ...
        rec(3, "end", 50.0, account="acct_b", gpus={"k80": 1}, requeued=True),
        rec(3, "start", 60.0, restart=1, account="acct_b", gpus={"k80": 4}),  # ... run 1 on 4 GPUs, open
        rec(4, "start", 10.0, restart=0, gpus={"a100": 1}),                    # lost end record:
        rec(4, "start", 30.0, restart=1, gpus={"a100": 1}),                    # closed by the next run
        rec(4, "end", 40.0, restart=1, gpus={"a100": 1}),
    ]
    runs = job_runs(records)
    assert [(r.job_id, r.restart_count, r.start, r.end) for r in runs] == [
        (1, 0, 100.0, 200.0), (2, 0, 150.0, None), (3, 0, 0.0, 50.0), (3, 1, 60.0, None),
        (4, 0, 10.0, 30.0), (4, 1, 30.0, 40.0)]
    got = gpu_seconds(runs, None, 250.0)
    assert got == {"acct_a": {"a100": 200.0 + 20.0 + 10.0},
                   "acct_b": {"v100": 100.0, "untyped": 100.0, "k80": 50.0 + 4 * 190.0}}
    # a window cuts every run
    assert gpu_seconds(runs, 120.0, 180.0) == {"acct_a": {"a100": 120.0},
                                               "acct_b": {"v100": 30.0, "untyped": 30.0, "k80": 240.0}}


def test_runs_without_gpu_info_and_slurmd_records_add_nothing():
    records = [rec(1, "start", 0.0, gpus={}, count=None, gpu_info="none: scontrol timed out after 2 s"),
               rec(2, "start", 0.0, context="prolog_slurmd", node="n1", gpu_info="slurmd")]
    assert gpu_seconds(job_runs(records), None, 100.0) == {}
    assert [r.job_id for r in job_runs(records)] == [1]


def test_non_utf8_huge_and_symlinked_spool_files_are_set_aside_without_reading(tmp_path):
    """Found by fuzzing: a spool file with bytes that are not UTF-8 stopped the whole ingest with
    UnicodeDecodeError. Such a file, one over the size limit and a symbolic link (never followed: its target's
    text would otherwise land in an event) go to bad/ with an event; good records still go in."""
    from slurm_fair.daemon import ingest as ing

    spool = spool_with(tmp_path, rec(7, "start", 100.0, start_time=99.0))
    (spool / "latin1.json").write_bytes(b'{"job_id": "caf\xe9"}')
    (spool / "big.json").write_bytes(b" " * (ing.MAX_RECORD_BYTES + 1))
    secret = tmp_path / "secret.txt"
    secret.write_text("do-not-copy")
    (spool / "link.json").symlink_to(secret)
    store = Store(str(tmp_path / "db.sqlite"))
    res = ingest(store, spool)
    assert res.read == 1 and sorted(res.bad) == ["big.json", "latin1.json", "link.json"]
    assert sorted(p.name for p in (spool / "bad").iterdir()) == ["big.json", "latin1.json", "link.json"]
    events = json.dumps(list(store.db["events"].rows))
    assert "not UTF-8" in events and "not followed" in events and "do-not-copy" not in events


@pytest.mark.parametrize("change, why", [
    ({"wieght": 1}, "wieght: unknown key"),
    ({"time": float("nan")}, "time: must be a finite number"),
    ({"requeued": "yes"}, "requeued: wrong type"),
    ({"uid": True}, "uid: wrong type"),
])
def test_check_record_refuses_unknown_keys_non_finite_times_and_wrong_types(change, why):
    r = rec(1, "start", 100.0)
    r.update(change)
    assert check_record(r).startswith(why), check_record(r)


def test_every_key_the_recorder_writes_is_known_to_ingest():
    """A record straight from jobrecord.build_record (a node hook, an end event) passes check_record."""
    env = {"SLURM_SCRIPT_CONTEXT": "epilog_slurmd", "SLURM_JOB_ID": "5", "SLURM_JOB_ACCOUNT": "acct_a",
           "SLURM_JOB_UID": "1000", "SLURM_JOB_GPUS": "0,1", "SLURM_JOB_EXIT_CODE2": "0:0", "SLURM_JOB_EXIT_CODE": "0"}
    r = jobrecord.build_record(env, {}, now=123.0)
    assert check_record(r) == "", check_record(r)


def test_a_job_name_with_stray_bytes_does_not_block_the_batch(tmp_path):
    store = Store(":memory:")
    bad = rec(11, "start", 10.0, job_name="bad\udcff\x1b[31m", user="\udcfe")  # what an older hook wrote
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "11.0.start.prolog_slurmctld.json").write_text(jobrecord.to_json(bad))  # \udcff escaped in JSON
    jobrecord.write_record(str(spool), rec(12, "start", 11.0))
    res = ingest(store, spool)
    assert (res.read, res.bad, res.error) == (2, [], "")
    (r11,) = store.job_records(11)
    assert r11.job_name == "bad\ufffd\x1b[31m" and r11.user == "\ufffd"
    assert len(store.job_records(12)) == 1


def test_submit_time_is_ingested_and_runs_take_the_earliest(tmp_path):
    store = Store(":memory:")
    spool = spool_with(tmp_path,
                       rec(9, "start", 100.0, start_time=99.0, submit_time=40.0),
                       rec(9, "end", 160.0, end_time=159.0, submit_time=40.0),
                       rec(9, "start", 200.0, restart=1, start_time=199.0, submit_time=180.0),  # moved on requeue
                       rec(9, "end", 260.0, restart=1, end_time=259.0, submit_time=180.0))
    assert ingest(store, spool).read == 4
    assert [r.submit_time for r in store.job_records(9)] == [40.0, 40.0, 180.0, 180.0]
    runs = store.job_runs()
    assert [(r.restart_count, r.submit) for r in runs] == [(0, 40.0), (1, 180.0)]
    # a record without the key (hooks older than submit times) is valid and gives None
    assert check_record(rec(10, "start", 1.0)) == "" and job_runs([rec(10, "start", 1.0)])[0].submit is None
    assert "submit_time: wrong type" in check_record(rec(10, "start", 1.0, submit_time="yesterday"))


def test_a_record_the_store_refuses_is_quarantined_and_the_rest_of_the_batch_ingested(tmp_path):
    store = Store(":memory:")
    # valid to check_record (ints), refused by SQLite (an int past 64 bits): the whole batch used to roll back
    huge = rec(21, "end", 10.0, exit_code=2 ** 70)
    spool = spool_with(tmp_path, rec(20, "start", 9.0), huge, rec(22, "start", 11.0))
    assert check_record(huge) == ""
    res = ingest(store, spool, round_id=7)
    assert res.read == 2 and res.bad == ["21.0.end.epilog_slurmctld.json"] and res.error == ""
    assert {r.job_id for r in store.job_records()} == {20, 22}
    assert os.listdir(spool) == ["bad"] and os.listdir(spool / "bad") == ["21.0.end.epilog_slurmctld.json"]
    (e,) = store.events(kind="hook-record-quarantined")
    assert e.round_id == 7 and e.message.startswith("21.0.end.epilog_slurmctld.json: the store refused it")
    assert "OverflowError" in e.message and str(spool / "bad") in e.message
    assert ingest(store, spool).read == 0  # nothing left to retry


def test_a_failing_database_moves_nothing_and_the_next_round_retries(tmp_path):
    db = tmp_path / "s.db"
    spool = spool_with(tmp_path, rec(30, "start", 9.0), rec(31, "start", 10.0))
    closed = Store(str(db))
    closed.close()
    res = ingest(closed, spool)
    assert res.read == 0 and res.bad == [] and "ProgrammingError" in res.error
    assert sorted(os.listdir(spool)) == ["30.0.start.prolog_slurmctld.json", "31.0.start.prolog_slurmctld.json"]
    assert ingest(Store(str(db)), spool).read == 2


def test_cpu_only_records_are_counted_and_removed_not_stored(tmp_path):
    """Issue 30's report flood: 20 000 end records of CPU-only jobs (with reports) grew the database by 12 MB and
    took 100 rounds to judge. A controller record whose trusted TRES has no GPU is now counted and its file
    removed; a record whose GPUs could not be read (gpu_info 'none: …', e.g. an untrusted header) and a node
    hook's record are stored as before."""
    store = Store(":memory:")
    cpu = [rec(10 + i, "end", 5.0, gpus={}, fair_tokens="fair:tput=9000000@1") for i in range(3)]
    unread = rec(20, "end", 5.0, gpus={}, count=0, gpu_info="none: scontrol: no field of its header is trusted")
    node = rec(21, "end", 5.0, gpus={}, count=0, context="epilog_slurmd", gpu_info="slurmd: device indices")
    gpu = rec(22, "end", 5.0)
    spool = spool_with(tmp_path, *cpu, unread, node, gpu)
    res = ingest(store, spool)
    assert (res.read, res.cpu_only, res.bad, res.error) == (3, 3, [], "")
    assert sorted({r.job_id for r in store.job_records()}) == [20, 21, 22]
    assert not list(spool.glob("*.json"))  # every file consumed
    assert res.as_dict()["cpu_only"] == 3


# -- issue 41 item 7: the spool trusts the filesystem's owner ------------------------------------------------------

def _owned_by(path: Path, uid: int) -> None:
    os.chown(path, uid, -1, follow_symlinks=False)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


@needs_root
def test_a_record_owned_by_another_uid_is_quarantined_not_ingested(tmp_path):
    """Any writer of the spool (mode 2770: the daemon's group) could forge a record for another account's job
    and it was ingested. A record file must be owned by SlurmUser, root or the daemon's user: one owned by uid
    12345 goes to bad/ with an event naming the file, its owner and the allowed uids; the others go in."""
    from slurm_fair.daemon.ingest import Writers

    store = Store(":memory:")
    spool = spool_with(tmp_path, rec(40, "start", 10.0), rec(41, "start", 11.0, account="victim"),
                       rec(42, "start", 12.0))
    forged = spool / "41.0.start.prolog_slurmctld.json"
    _owned_by(forged, 12345)
    _owned_by(spool / "42.0.start.prolog_slurmctld.json", 64030)  # SlurmUser's
    res = ingest(store, spool, writers=Writers.of(("slurm", 64030)))
    assert (res.read, res.bad, res.error) == (2, [forged.name], "")
    assert {r.job_id for r in store.job_records()} == {40, 42}
    assert os.listdir(spool / "bad") == [forged.name] and not forged.exists()
    (e,) = store.events(kind="hook-record-foreign-owner")
    assert e.data["file"] == forged.name and e.data["owner_uid"] == 12345
    assert e.data["expected_uids"] == sorted({0, os.geteuid(), 64030})
    assert "uid 12345" in e.message and "SlurmUser slurm (uid 64030)" in e.message and "text" not in e.data
    # without SlurmUser in the writers (a backend that names none), SlurmUser's file is foreign too
    jobrecord.write_record(str(spool), rec(43, "start", 13.0))
    _owned_by(spool / "43.0.start.prolog_slurmctld.json", 64030)
    assert ingest(store, spool).bad == ["43.0.start.prolog_slurmctld.json"]


@needs_root
def test_a_foreign_record_waits_while_slurm_user_is_unknown(tmp_path):
    """slurmctld down when the round starts: SlurmUser cannot be read, so a file of another owner is neither
    ingested nor set aside (it may be SlurmUser's); root's records go in; one event says why."""
    from slurm_fair.daemon.ingest import Writers

    store = Store(":memory:")
    spool = spool_with(tmp_path, rec(50, "start", 10.0), rec(51, "start", 11.0))
    _owned_by(spool / "51.0.start.prolog_slurmctld.json", 64030)
    res = ingest(store, spool, writers=Writers.of(None, unknown="scontrol: connection refused"))
    assert (res.read, res.bad) == (1, []) and os.listdir(spool) == ["51.0.start.prolog_slurmctld.json"]
    (e,) = store.events(kind="hook-ingest-error")
    assert "1 record file(s)" in e.message and "connection refused" in e.message
    assert ingest(store, spool, writers=Writers.of(("slurm", 64030))).read == 1  # known again: taken


def test_the_round_takes_slurm_user_from_the_cluster(tmp_path):
    from slurm_fair.cluster.errors import ClusterUnreachable
    from slurm_fair.config import from_dict
    from slurm_fair.daemon.ingest import writers_of

    class Ctld:
        def __init__(self, user):
            self.user = user

        def slurm_user(self):
            if isinstance(self.user, Exception):
                raise self.user
            return self.user

    w = writers_of(Ctld(("slurm", 64030)))
    assert w.uids == {0, os.geteuid(), 64030} and not w.unknown
    w = writers_of(Ctld(ClusterUnreachable("no answer")))
    assert w.uids == {0, os.geteuid()} and w.unknown == "no answer"
    assert writers_of(None).uids == {0, os.geteuid()}
    cfg = from_dict({"hooks": {"spool": str(spool_with(tmp_path, rec(1, "start", 5.0)))}})
    assert ingest_round(Store(":memory:"), cfg, None, Ctld(("slurm", 64030))).read == 1


def test_the_cli_backend_reads_slurm_user_from_the_config_it_already_reads(monkeypatch):
    from slurm_fair.cluster.cli import CliCluster
    from slurm_fair.cluster.ctld_config import parse_config, slurm_user
    from slurm_fair.cluster.errors import ParseError

    assert slurm_user(parse_config("SlurmUser               = slurm(64030)\n")) == ("slurm", 64030)
    assert slurm_user(parse_config("SlurmUser = root(0)\n")) == ("root", 0)
    assert slurm_user(parse_config("SlurmUser = slurm\n")) is None and slurm_user({}) is None
    calls = []
    c = CliCluster(timeout=1, env={})
    monkeypatch.setattr(c, "_run", lambda argv: calls.append(list(argv)) or "ClusterName = lab\nSlurmUser = slurm(64030)\n")
    assert c.slurm_user() == ("slurm", 64030) and c.cluster_name() == "lab"
    assert calls == [["scontrol", "show", "config"]]
    c = CliCluster(timeout=1, env={})
    monkeypatch.setattr(c, "_run", lambda argv: "ClusterName = lab\n")
    with pytest.raises(ParseError, match="SlurmUser"):
        c.slurm_user()


@pytest.mark.parametrize("plant", ["symlink", "file", "dangling"])
def test_bad_that_is_a_link_or_a_file_is_never_written_through(tmp_path, plant):
    """If ``bad`` was a symbolic link, quarantined files were moved out of the spool to where it points. Now
    bad/ is opened O_NOFOLLOW: nothing is moved through it, the bad file stays in the spool (not ingested, not
    lost) with an event, the link's target stays empty, and good records still go in."""
    store = Store(":memory:")
    spool = spool_with(tmp_path, rec(60, "start", 10.0))
    (spool / "junk.json").write_text("{not json")
    target = tmp_path / "elsewhere"
    target.mkdir()
    if plant == "symlink":
        (spool / "bad").symlink_to(target)
    elif plant == "dangling":
        (spool / "bad").symlink_to(tmp_path / "nowhere")
    else:
        (spool / "bad").write_text("not a folder")
    res = ingest(store, spool)
    assert res.read == 1 and res.bad == [] and res.left == ["junk.json"] and res.error == ""
    assert os.listdir(target) == [] and not (tmp_path / "nowhere").exists()
    assert (spool / "junk.json").read_text() == "{not json"
    (e,) = store.events(kind="hook-record-bad")
    assert "left in the spool" in e.message and "not followed" in e.message
    (r,) = store.events(kind="hook-quarantine-refused")
    assert ("a symbolic link" if plant != "file" else "not a folder") in r.message


@needs_root
def test_bad_owned_by_another_user_is_refused(tmp_path):
    store = Store(":memory:")
    spool = spool_with(tmp_path)
    spool.mkdir(exist_ok=True)
    (spool / "bad").mkdir()
    _owned_by(spool / "bad", 12345)
    (spool / "junk.json").write_text("{")
    res = ingest(store, spool)
    assert res.left == ["junk.json"] and os.listdir(spool / "bad") == []
    (r,) = store.events(kind="hook-quarantine-refused")
    assert "owned by uid 12345, not the daemon's user" in r.message


def test_bad_is_made_0750_and_a_name_taken_there_is_not_overwritten(tmp_path):
    store = Store(":memory:")
    spool = spool_with(tmp_path)
    spool.mkdir(exist_ok=True)
    (spool / "junk.json").write_text("{1")
    ingest(store, spool)
    assert oct((spool / "bad").stat().st_mode & 0o7777) == oct(0o750)
    (spool / "junk.json").write_text("{2")
    assert ingest(store, spool).bad == ["junk.json"]
    assert sorted(p.read_text() for p in (spool / "bad").iterdir()) == ["{1", "{2"]


def test_a_hard_link_or_a_fifo_in_the_spool_is_not_read(tmp_path):
    """A hard link to a file elsewhere (root's, on a filesystem without protected_hardlinks) would put its text in
    an event; a FIFO would hang the open. Neither is read."""
    store = Store(":memory:")
    spool = spool_with(tmp_path, rec(70, "start", 10.0))
    secret = tmp_path / "secret.txt"
    secret.write_text("do-not-copy")
    os.link(secret, spool / "link.json")
    os.mkfifo(spool / "pipe.json")
    res = ingest(store, spool)
    assert res.read == 1 and res.bad == ["link.json"] and (spool / "pipe.json").exists()
    assert "do-not-copy" not in json.dumps(list(store.db["events"].rows))
    assert "2 hard links" in store.events(kind="hook-record-bad")[0].message


def _event_bytes(store: Store) -> int:
    return sum(len(r["message"] or "") + len(r["data"] or "") for r in store.db["events"].rows)


def test_2000_bad_files_write_a_bounded_number_of_event_bytes_a_day(tmp_path):
    """Each bad file wrote an event with up to 2 000 characters of its text (2 000 bad files: 4.5 MB of events).
    Now the first EVENTS_PER_DAY of each kind a day are written one by one and one ``-more`` event counts the
    rest, across rounds; a reason that quotes a huge value is cut."""
    from slurm_fair.daemon.event_budget import EVENTS_PER_DAY

    store = Store(str(tmp_path / "db.sqlite"))
    spool = tmp_path / "spool"
    spool.mkdir()
    for i in range(2000):
        (spool / f"{i}.json").write_text(json.dumps(rec(i + 1, "start", 1.0, job_name="x" * 3000,
                                                        time="y" * 3000)))
    t0 = time.time()
    res = ingest(store, spool, now=1000.0)
    took = time.time() - t0
    assert len(res.bad) == 2000 and len(os.listdir(spool / "bad")) == 2000 and took < 30
    one = store.events(kind="hook-record-bad", limit=10 ** 4)
    assert len(one) == EVENTS_PER_DAY and all(len(e.message) < 500 for e in one)
    (more,) = store.events(kind="hook-record-bad-more")
    assert more.data["count"] == 2000 - EVENTS_PER_DAY and "every file set aside is in" in more.message
    total = _event_bytes(store)
    assert total < 100_000, total
    for i in range(500):  # the next round, the same day: only the count grows
        (spool / f"r2-{i}.json").write_text("{")
    ingest(store, spool, now=2000.0)
    assert len(store.events(kind="hook-record-bad", limit=10 ** 4)) == EVENTS_PER_DAY
    (more,) = store.events(kind="hook-record-bad-more")
    assert more.data["count"] == 2500 - EVENTS_PER_DAY and _event_bytes(store) < total + 1000
    print(f"2000 bad files: {total} bytes of events, {took:.2f} s")
