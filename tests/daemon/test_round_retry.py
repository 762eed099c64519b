"""Recording a round survives a database locked past its busy timeout (issue 10, item 4): the write is
tried again, and a lock that outlasts every attempt raises (the daemon loop logs it and runs the next round)."""

from __future__ import annotations

import gc
import sqlite3
import threading
import time

import pytest

from slurm_fair.daemon import round as R
from slurm_fair.daemon import round_record as RR
from slurm_fair.store import Store


def _hold_lock(path, seconds: float, locked: threading.Event) -> threading.Thread:
    def hold() -> None:
        other = sqlite3.connect(str(path), isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        other.execute("insert into events (time, kind) values (?, 'test')", [time.time()])
        locked.set()
        time.sleep(seconds)
        other.execute("COMMIT")
        other.close()

    t = threading.Thread(target=hold)
    t.start()
    assert locked.wait(10)
    return t


def test_a_write_locked_past_the_busy_timeout_is_retried(tmp_path):
    store = Store(tmp_path / "db.sqlite", busy_timeout_ms=100)
    t = _hold_lock(tmp_path / "db.sqlite", 0.4, threading.Event())
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        store.begin_round("oef-noncoop")  # one attempt: the lock outlasts the 100 ms busy timeout
    rid = RR.with_retry(lambda: store.begin_round("oef-noncoop"))
    t.join()
    assert store.round(rid).status == "running"
    store.close()


def test_a_lock_that_outlasts_every_attempt_raises(tmp_path, monkeypatch):
    monkeypatch.setattr(RR, "RECORD_BACKOFF_S", 0.05)
    store = Store(tmp_path / "db.sqlite", busy_timeout_ms=50)
    t = _hold_lock(tmp_path / "db.sqlite", 1.5, threading.Event())
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        RR.with_retry(lambda: store.begin_round("oef-noncoop"), attempts=3)
    t.join()
    assert store.rounds() == []
    store.close()


class _BrokenCluster:
    """Stands for a backend with a bug (not Slurm): its snapshot raises something no backend should."""

    def snapshot(self):
        return 1 / 0


def test_an_unexpected_exception_is_recorded_on_its_round_and_the_next_round_runs(tmp_path):
    from slurm_fair import config as config_mod

    f = tmp_path / "c.toml"
    f.write_text('[daemon]\ndatabase = "db.sqlite"\n')
    cfg = config_mod.load(f)
    store = Store(cfg.database_path)
    first = R.run_round(_BrokenCluster(), store, cfg)
    second = R.run_round(_BrokenCluster(), store, cfg)
    rows = {r.id: r for r in store.rounds()}
    assert [rows[r.round_id].status for r in (first, second)] == ["error", "error"]
    msg = rows[first.round_id].message
    assert msg.startswith("round failed: ZeroDivisionError: division by zero (test_round_retry.py:"), msg
    store.close()


class _GcWatcher(_BrokenCluster):
    """Records whether Python's cyclic collector ran automatically while the round took its snapshot."""

    seen: list[bool] = []

    def snapshot(self):
        _GcWatcher.seen.append(gc.isenabled())
        return super().snapshot()


def test_the_round_pauses_automatic_collection_and_restores_it_even_when_it_fails(tmp_path):
    """Issue 30's rename flood: automatic collections over a round's objects were most of the flood's extra time;
    the round pauses them and collects once at its end — and a failing round must not leave them off."""
    from slurm_fair import config as config_mod

    f = tmp_path / "c.toml"
    f.write_text('[daemon]\ndatabase = "db.sqlite"\n')
    cfg = config_mod.load(f)
    store = Store(cfg.database_path)
    assert gc.isenabled()
    assert R.run_round(_GcWatcher(), store, cfg).status == "error"
    assert _GcWatcher.seen == [False] and gc.isenabled()
    gc.disable()  # a caller that had it off keeps it off
    try:
        R.run_round(_GcWatcher(), store, cfg)
        assert not gc.isenabled()
    finally:
        gc.enable()
    store.close()
