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
* ``pending_jobs`` last seen pending before the cutoff;
* ``profiles`` not used for ``[store] profile_days`` (:func:`prune_profiles`, its own cutoff, issue 41: profile
  rows were never pruned): a value whose last update (a report, a measurement, an import or ``set``) is older,
  of a class no job record, pending job, share or report of the account (of any account, for a site-wide value)
  names since. ``shipped`` values, and values with no update time, are never pruned.

Never pruned: ``deviations``, ``deficits``, ``managed``, ``site_limits`` (what rollback restores), ``warm_start``, the
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
          "pending_jobs", "profiles")


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


def prune(db: sqlite_utils.Database, cutoff: float, live_jobs: Iterable[int] | None = None,
          profile_cutoff: float | None = None) -> dict[str, int]:
    """Delete what is older than ``cutoff`` and the profile values not used since ``profile_cutoff`` (None: none)
    (module docstring); rows deleted per table."""
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
    if profile_cutoff is not None:
        out["profiles"] = prune_profiles(db, profile_cutoff)
    return {t: out.get(t, 0) for t in TABLES}


def prune_profiles(db: sqlite_utils.Database, cutoff: float) -> int:
    """Delete the profile values not used since ``cutoff`` (module docstring); rows deleted."""
    ex = db.conn.execute
    ex("create temp table if not exists _used (account text, class text)")
    ex("delete from _used")
    ex("""insert into _used
          select account, class from job_records where time >= ? and class is not null
          union select account, class from pending_jobs where last_seen >= ? and class is not null
          union select account, class from profile_reports where time >= ? and class is not null
          union select s.account, s.class from shares s join rounds r on r.id = s.round_id where r.started >= ?""",
       [cutoff] * 4)
    n = ex("""delete from profiles where source != 'shipped' and updated is not null and updated < ?
              and not exists (select 1 from _used u where u.class = profiles.class
                              and (profiles.account = '' or u.account = profiles.account))""", [cutoff]).rowcount
    ex("delete from _used")
    return n


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
              step_days: float | None = None, profile_days: float = 0) -> dict[str, int]:
        """Delete what is older than ``retention_days`` (store.retention.prune: what is kept, rows deleted
        per table; ``step_days``: at most that many days of the oldest history at once, ``behind``: 1 when
        more is left), and the profile values not used for ``profile_days`` (0: none); 0 days deletes
        nothing at all."""
        if retention_days <= 0:
            return {}
        now = time.time() if now is None else float(now)
        cutoff, behind = cutoff_for(self.db, now - float(retention_days) * 86400.0, step_days)
        pcut = now - float(profile_days) * 86400.0 if profile_days > 0 else None
        with self.transaction():
            return {**prune(self.db, cutoff, live_jobs, pcut), "behind": int(behind)}

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
