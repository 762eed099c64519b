"""Retention: prune the database's history older than ``[store] retention_days`` (issue 21, "bounded state").

:func:`prune` deletes, in one transaction (``Store.prune`` opens it), everything older than ``cutoff``
(epoch seconds) that no current computation needs:

* ``events`` with ``time < cutoff``;
* ``job_records`` of a job run (job id, restart count) whose newest record is older than the cutoff, when the
  run has ended (an ``end`` record) or its job is not live (``live_jobs``: the job ids Slurm lists now;
  None = not known, then unfinished runs are all kept);
* ``profile_reports`` with ``time < cutoff``, except those of live jobs (a running job's comment still holds
  its last report: forgetting that it was taken would count it again);
* ``rounds`` started before the cutoff with their ``shares``, ``placements`` and ``applied`` rows, except the
  newest round and the rounds a preemption in progress (``signalled``) refers to;
* ``preemptions`` finished (any state but ``signalled``) before the cutoff;
* ``pending_jobs`` last seen pending before the cutoff.

Never pruned: ``profiles`` (the latest value per account, class, type and source: what the policies use),
``deviations``, ``deficits``, ``managed``, ``site_limits`` (what rollback restores), ``warm_start``, the
schema. SQLite reuses the freed pages, so a database pruned daily stops growing at about ``retention_days``
of history; the file itself shrinks only with ``VACUUM``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterable

import sqlite_utils

from .base import StoreBase
from .codec import _dumps, _int, _loads

TABLES = ("events", "job_records", "profile_reports", "rounds", "shares", "placements", "applied", "preemptions",
          "pending_jobs")


def cutoff_for(db: sqlite_utils.Database, cutoff: float, step_days: float | None) -> tuple[float, bool]:
    """(the cutoff of one prune, whether history older than ``cutoff`` is left after it): with ``step_days``,
    at most that many days past the oldest event or prunable round (indexed minima; what is kept whatever
    its age is not counted), so a database that turns retention on after years catches up in bounded steps."""
    if step_days is None:
        return cutoff, False
    oldest = [t for (t,) in (db.conn.execute(q).fetchone() for q in (
        "select min(time) from events",
        "select min(started) from rounds where id < (select max(id) from rounds) and id not in "
        "(select round_id from preemptions where state = 'signalled' and round_id is not null)")) if t is not None]
    if not oldest:
        return cutoff, False
    step = min(oldest) + float(step_days) * 86400.0
    return (step, True) if step < cutoff else (cutoff, False)


def prune(db: sqlite_utils.Database, cutoff: float, live_jobs: Iterable[int] | None = None) -> dict[str, int]:
    """Delete what is older than ``cutoff`` (module docstring); rows deleted per table."""
    ex = db.conn.execute
    out: dict[str, int] = {}
    ex("create temp table if not exists _live (job_id integer primary key)")
    ex("delete from _live")
    known = live_jobs is not None
    if known:
        db.conn.executemany("insert or ignore into _live values (?)", [(int(j),) for j in live_jobs or ()])
    out["events"] = ex("delete from events where time < ?", [cutoff]).rowcount
    ended_or_gone = ("exists (select 1 from job_records e where e.job_id = r.job_id and "
                     "e.restart_count = r.restart_count and e.event = 'end')")
    if known:
        ended_or_gone = f"({ended_or_gone} or r.job_id not in (select job_id from _live))"
    ex("create temp table if not exists _runs (job_id integer, restart_count integer)")
    ex("delete from _runs")
    ex(f"""insert into _runs select r.job_id, r.restart_count from
           (select distinct job_id, restart_count from job_records where time < ?) r
           where not exists (select 1 from job_records n where n.job_id = r.job_id
                             and n.restart_count = r.restart_count and n.time >= ?)
           and {ended_or_gone}""", [cutoff, cutoff])
    out["job_records"] = ex("delete from job_records where (job_id, restart_count) in "
                            "(select job_id, restart_count from _runs)").rowcount
    out["profile_reports"] = ex("delete from profile_reports where time < ? and job_id not in "
                                "(select job_id from _live)", [cutoff]).rowcount
    ex("create temp table if not exists _rounds (id integer primary key)")
    ex("delete from _rounds")
    ex("""insert into _rounds select id from rounds where started < ? and id < (select max(id) from rounds)
          and id not in (select round_id from preemptions where state = 'signalled' and round_id is not null)""",
       [cutoff])
    for t in ("shares", "placements", "applied"):
        out[t] = ex(f"delete from {t} where round_id in (select id from _rounds)").rowcount
    out["preemptions"] = ex("delete from preemptions where coalesce(finished_at, requeued_at, created) < ? "
                            "and state != 'signalled'", [cutoff]).rowcount
    out["rounds"] = ex("delete from rounds where id in (select id from _rounds)").rowcount
    out["pending_jobs"] = ex("delete from pending_jobs where last_seen < ?", [cutoff]).rowcount
    for t in ("_live", "_runs", "_rounds"):
        ex(f"delete from {t}")
    return {t: out.get(t, 0) for t in TABLES}


@dataclass(frozen=True)
class Event:
    """A row of ``events``, ``data`` decoded (None: none)."""

    id: int
    time: float
    kind: str
    round_id: int | None
    job_id: int | None
    account: str | None
    message: str
    data: Any


class RetentionMixin(StoreBase):
    """The ``events`` table, and pruning the history (:func:`prune`)."""

    def prune(self, retention_days: float, now: float | None = None, live_jobs: Iterable[int] | None = None,
              step_days: float | None = None) -> dict[str, int]:
        """Delete what is older than ``retention_days`` (store.retention.prune: what is kept, rows deleted
        per table; ``step_days``: at most that many days of the oldest history at once, ``behind``: 1 when
        more is left); 0 days deletes nothing."""
        if retention_days <= 0:
            return {}
        now = time.time() if now is None else float(now)
        cutoff, behind = cutoff_for(self.db, now - float(retention_days) * 86400.0, step_days)
        with self.transaction():
            return {**prune(self.db, cutoff, live_jobs), "behind": int(behind)}

    # -------------------------------------------------------------------------------- events

    def event(self, kind: str, message: str = "", round_id: int | None = None, job_id: int | None = None,
              account: str | None = None, data: Any = None, at: float | None = None) -> int:
        row = {"time": time.time() if at is None else float(at), "kind": kind, "round_id": _int(round_id, "round_id"), "job_id": _int(job_id, "job_id"),
               "account": account, "message": message, "data": _dumps(data)}
        with self.transaction():
            return self.db["events"].insert(row).last_pk

    def events(self, limit: int = 100, kind: str | None = None) -> list[Event]:
        """The newest ``limit`` events (of ``kind``), newest first."""
        where, args = ("kind = ?", [kind]) if kind else (None, [])
        return [Event(**{**r, "data": _loads(r["data"])})
                for r in self.db["events"].rows_where(where, args, order_by="id desc", limit=limit)]
