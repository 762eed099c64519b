"""The schema: numbered migrations recorded in ``schema_version``; opening a database applies the missing ones."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any, Callable, Iterator

import sqlite_utils

from ..errors import SlurmFairError

BUSY_TIMEOUT_MS = 10_000


class StoreError(SlurmFairError):
    """The database cannot be used (newer schema than this slurm-fair knows, unwritable, corrupt)."""


# ------------------------------------------------------------------------------------------------
# migrations: index i (1-based) brings the schema from version i-1 to version i. Append only; never edit.


def _m1_initial(db: sqlite_utils.Database) -> None:
    db["profiles"].create(
        {"account": str, "class": str, "gpu_type": str, "throughput": float, "samples": int,
         "source": str, "updated": float},
        pk=("account", "class", "gpu_type"), not_null={"account", "class", "gpu_type", "throughput"},
    )
    db["rounds"].create(
        {"id": int, "started": float, "finished": float, "policy": str, "solver": str, "status": str,
         "solve_seconds": float, "total_throughput": float, "n_accounts": int, "n_changes": int,
         "message": str, "details": str},
        pk="id", not_null={"started", "policy", "status"},
    )
    db["shares"].create(
        {"round_id": int, "account": str, "class": str, "gpu_type": str, "ideal": float, "real": int},
        foreign_keys=[("round_id", "rounds", "id")], not_null={"round_id", "account", "class", "gpu_type"},
    )
    db["placements"].create(
        {"round_id": int, "account": str, "gpu_type": str, "ideal": float, "deviation_before": float,
         "real": int, "limit": int},
        foreign_keys=[("round_id", "rounds", "id")], not_null={"round_id", "account", "gpu_type"},
    )
    db["deviations"].create(
        {"account": str, "gpu_type": str, "value": float, "round_id": int},
        pk=("account", "gpu_type"), not_null={"account", "gpu_type", "value"},
    )
    db["deficits"].create({"account": str, "value": float, "updated": float}, pk="account",
                          not_null={"account", "value"})
    db["applied"].create(
        {"round_id": int, "account": str, "key": str, "old": int, "new": int, "time": float},
        foreign_keys=[("round_id", "rounds", "id")], not_null={"round_id", "account", "key", "time"},
    )
    db["managed"].create({"account": str}, pk="account")
    db["events"].create(
        {"id": int, "time": float, "kind": str, "round_id": int, "job_id": int, "account": str,
         "message": str, "data": str},
        pk="id", not_null={"time", "kind"},
    )


def _m2_indexes(db: sqlite_utils.Database) -> None:
    db["shares"].create_index(["round_id"])
    db["placements"].create_index(["round_id"])
    db["applied"].create_index(["round_id"])
    db["rounds"].create_index(["status", "id"])
    db["events"].create_index(["kind", "id"])


def _m3_job_records(db: sqlite_utils.Database) -> None:
    db["job_records"].create(
        {"job_id": int, "restart_count": int, "event": str, "context": str, "node": str, "time": float,
         "start_time": float, "end_time": float, "account": str, "user": str, "partition": str, "class": str,
         "job_name": str, "gpus": str, "gpu_count": int, "gpu_info": str, "exit_code": int, "exit_signal": int,
         "exit_status": int, "derived_exit_code": str, "file": str, "ingested": float, "data": str},
        pk=("job_id", "restart_count", "event", "context", "node"),
        not_null={"job_id", "restart_count", "event", "context", "node", "time"},
    )
    db["job_records"].create_index(["account"])
    db["job_records"].create_index(["event", "time"])


def _m4_preemptions(db: sqlite_utils.Database) -> None:
    """One row per preempted job: its checkpoint signal, then requeue / resolved / gone / failed. ``steps`` is
    a JSON list of ``{time, round_id, step, message}`` (every step, in order)."""
    db["preemptions"].create(
        {"id": int, "job_id": int, "account": str, "user": str, "gpu_type": str, "gpus": int, "signal": str,
         "reason": str, "state": str, "round_id": int, "created": float, "signalled_at": float,
         "requeue_at": float, "requeued_at": float, "finished_at": float, "steps": str},
        pk="id", not_null={"job_id", "account", "state", "created"},
    )
    db["preemptions"].create_index(["job_id"])
    db["preemptions"].create_index(["account", "id"])
    db["preemptions"].create_index(["state"])


def _m5_warm_start(db: sqlite_utils.Database) -> None:
    """A policy's warm start for the next round (``Allocation.warm`` as JSON; oef-coop: its binding envy rows
    as ``[[tenant, class], [tenant, class]]`` pairs). Only a hint to the solver: losing it costs time, not
    correctness."""
    db["warm_start"].create({"policy": str, "data": str, "round_id": int, "updated": float}, pk="policy")


def _legacy_source(value: str | None) -> str:
    """Migration 6's mapping of the source strings stored before sources were fixed: ``manual`` -> set,
    ``import:<file>``/``import`` -> imported, ``gavel`` -> shipped; a source of the new set stays; anything else
    counts as imported (a person put it there). Frozen here with the migration it belongs to."""
    v = (value or "").strip()
    if v in ("imported", "set", "measured", "harvested", "shipped"):
        return v
    if v == "manual":
        return "set"
    if v in ("gavel", "gandiva-fair") or v.startswith("shipped"):
        return "shipped"
    return "imported"


def _m6_profile_sources(db: sqlite_utils.Database) -> None:
    """Profile values of every source side by side: the key gains ``source`` (imported | set | measured |
    harvested | shipped; older strings are mapped: manual -> set, import:<file> -> imported (the file kept in
    ``detail``), gavel -> shipped), plus ``rejected`` (outlier samples refused). ``profile_reports``: one row
    per job report the daemon took (key: job id and the report's number, so none counts twice), accepted,
    rejected (outlier) or refused (bad value)."""
    tbl = db["profiles"]
    tbl.add_column("rejected", int, not_null_default=0)
    tbl.add_column("detail", str)
    for r in list(tbl.rows):
        new = _legacy_source(r["source"])
        detail = r["source"][len("import:"):] if (r["source"] or "").startswith("import:") else None
        db.execute("update profiles set source = ?, detail = ? where account = ? and class = ? and gpu_type = ?",
                   [new, detail, r["account"], r["class"], r["gpu_type"]])
    db.execute("update profiles set source = 'imported' where source is null")
    tbl.transform(pk=("account", "class", "gpu_type", "source"), not_null={"source", "samples"})
    db["profile_reports"].create(
        {"job_id": int, "n": int, "time": float, "round_id": int, "account": str, "class": str, "gpu_type": str,
         "nvml": str, "throughput": float, "source": str, "status": str, "message": str},
        pk=("job_id", "n"), not_null={"job_id", "n", "time", "status"},
    )
    db["profile_reports"].create_index(["account", "class"])


def _m7_upgrade_moves(db: sqlite_utils.Database) -> None:
    """A preemption may move its job to a faster GPU type (an upgrade move): ``target_type`` is the type the job
    is given when it is requeued (null: a reclaim, the job keeps its type)."""
    db["preemptions"].add_column("target_type", str)


def _m8_site_limits(db: sqlite_utils.Database) -> None:
    """The GPU limits an account had before slurm-fair first changed them (``limits``: JSON {gpu type or "*":
    value}; {} = none): what ``slurm-fair rollback`` restores. Filled from ``applied`` for databases that
    already changed limits: per account and key, the ``old`` value of its first change."""
    db["site_limits"].create({"account": str, "limits": str, "recorded": float}, pk="account",
                             not_null={"account", "limits", "recorded"})
    first: dict[str, dict[str, Any]] = {}
    when: dict[str, float] = {}
    for r in db.execute("select account, key, old, time from applied order by rowid").fetchall():
        acct, key, old, t = r
        row = first.setdefault(acct, {})
        when.setdefault(acct, t)
        if key not in row:
            row[key] = old
    if first:
        db["site_limits"].insert_all([{"account": a, "recorded": when[a],
                                       "limits": json.dumps({k: v for k, v in row.items() if v is not None})}
                                      for a, row in first.items()])


def _m9_submit_time(db: sqlite_utils.Database) -> None:
    """Hook records carry the job's Slurm SubmitTime (``submit_time``, epoch seconds; null in records of hooks
    older than this column, or where scontrol did not answer): queue wait and job completion time in
    ``slurm-fair report``. Filled from the stored record (``data``) where it holds one."""
    db["job_records"].add_column("submit_time", float)
    db.execute("update job_records set submit_time = json_extract(data, '$.submit_time') "
               "where case when json_valid(data) then json_type(data, '$.submit_time') in ('integer', 'real') else 0 end")


def _m10_trust_retention(db: sqlite_utils.Database) -> None:
    """A measured or harvested value remembers the change window it is in (``window_start``, ``window_base``:
    profiling/trust.py holds it within [profiling] max_change_factor of that base), and indexes on the times
    retention prunes by (store/retention.py)."""
    db["profiles"].add_column("window_start", float)
    db["profiles"].add_column("window_base", float)
    db["events"].create_index(["time"])
    db["job_records"].create_index(["time"])
    db["profile_reports"].create_index(["time"])
    db["rounds"].create_index(["started"])


def _m11_reclaim_for(db: sqlite_utils.Database) -> None:
    """A reclaim names the waiting job it frees GPUs for (``for_job``; null: an upgrade move, a hold-back, or a
    preemption recorded before this column): a requeue while that job still cannot start is visible."""
    db["preemptions"].add_column("for_job", int)


def _m12_written(db: sqlite_utils.Database) -> None:
    """What slurm-fair last wrote per account and GPU limit key (``value``; -1: it cleared the limit): a value in
    Slurm that differs was set by someone else and is kept (issue 29). Filled from ``applied``: per account and
    key, the ``new`` value of its last change."""
    db["written"].create({"account": str, "key": str, "value": int, "time": float}, pk=("account", "key"),
                         not_null={"account", "key", "value", "time"})
    last: dict[tuple[str, str], tuple[int, float]] = {}
    for acct, key, new, t in db.execute("select account, key, new, time from applied order by rowid").fetchall():
        if new is not None:
            last[(acct, key)] = (int(new), float(t))
    if last:
        db["written"].insert_all([{"account": a, "key": k, "value": v, "time": t} for (a, k), (v, t) in last.items()])


def _m13_lease(db: sqlite_utils.Database) -> None:
    """The daemon lease (one row, ``name`` = 'daemon'): which daemon runs rounds on this database (``host``,
    ``pid`` and a random ``token`` per process), since when (``acquired``) and until when (``expires``, renewed
    every round): a daemon on another host refuses to run rounds while it is live (daemon/leader.py)."""
    db["lease"].create({"name": str, "host": str, "pid": int, "token": str, "acquired": float, "expires": float},
                       pk="name", not_null={"name", "host", "pid", "token", "acquired", "expires"})


def _m14_window_history(db: sqlite_utils.Database) -> None:
    """A measured or harvested value keeps its earlier values that can still bound its next change
    (``window_history``: JSON [[time until which it was held, value], ...], oldest first): the change window
    slides (issue 30), so a value moves at most ``max_change_factor`` against every value it held in the last
    ``change_window``. Null for rows from before (their window's base then counts, held until their update)."""
    db["profiles"].add_column("window_history", str)


def _m15_site_factors(db: sqlite_utils.Database) -> None:
    """The SiteFactor slurm-fair last set on each pending job (``value``) and the one the job had before its first
    change (``before``): ``rollback`` gives a job back its own SiteFactor where it is still slurm-fair's, and
    leaves one the site set (issue 29). Rows of jobs no longer pending are dropped each round."""
    db["site_factors"].create({"job_id": int, "before": int, "value": int, "time": float}, pk="job_id",
                              not_null={"job_id", "before", "value", "time"})


def _m16_pending_jobs(db: sqlite_utils.Database) -> None:
    """The GPU jobs the rounds saw pending (``store/pending.py``): one row per job id with its account, class,
    GPUs, requested GPU type (null: untyped), Slurm submit time, why it could not start (``blocked``; "" when it
    could) and the times of the first and last round that saw it pending. Realized fairness counts a job that has
    not started yet from these (``fairness/live.py``); retention prunes rows last seen before its cutoff."""
    db["pending_jobs"].create(
        {"job_id": int, "account": str, "class": str, "gpus": int, "gpu_type": str, "submit": float,
         "blocked": str, "first_seen": float, "last_seen": float},
        pk="job_id", not_null={"job_id", "account", "gpus", "submit", "first_seen", "last_seen"},
    )
    db["pending_jobs"].create_index(["last_seen"])


def _m17_harvest_cursor(db: sqlite_utils.Database) -> None:
    """The harvest reads hook records once (daemon/harvest.py, issue 41): ``harvest_cursor`` (one row per
    source, ``name`` = 'end_records': ``last_id``, the last ``job_records`` row id considered) and
    ``harvest_queue`` (end records with a report not taken yet: the record's row id, account, job id and when it
    was ingested), from which each round takes its fair-queued part."""
    db["harvest_cursor"].create({"name": str, "last_id": int}, pk="name", not_null={"name", "last_id"})
    db["harvest_queue"].create({"record_id": int, "account": str, "job_id": int, "ingested": float},
                               pk="record_id", not_null={"record_id", "account", "job_id", "ingested"})
    db["harvest_queue"].create_index(["account", "job_id"])
    db["harvest_queue"].create_index(["ingested"])


MIGRATIONS: tuple[Callable[[sqlite_utils.Database], None], ...] = (
    _m1_initial, _m2_indexes, _m3_job_records, _m4_preemptions, _m5_warm_start, _m6_profile_sources,
    _m7_upgrade_moves, _m8_site_limits, _m9_submit_time, _m10_trust_retention, _m11_reclaim_for, _m12_written,
    _m13_lease, _m14_window_history, _m15_site_factors, _m16_pending_jobs,
    _m17_harvest_cursor,
)


@contextlib.contextmanager
def _write_lock(db: sqlite_utils.Database) -> Iterator[None]:
    """A transaction that holds the write lock from its start (inside an open transaction: a savepoint)."""
    conn = db.conn
    if conn.in_transaction:
        with db.atomic():
            yield
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def schema_version(db: sqlite_utils.Database) -> int:
    if "schema_version" not in db.table_names():
        return 0
    row = db.execute("select max(version) from schema_version").fetchone()
    return row[0] or 0


def migrate(db: sqlite_utils.Database, upto: int | None = None) -> int:
    """Apply the missing migrations (up to ``upto``, default all), each in its own transaction. Each step takes
    the write lock first (``BEGIN IMMEDIATE``) and reads the version again under it, so two processes migrating
    one database at once apply each step once (the other finds it applied)."""
    target = len(MIGRATIONS) if upto is None else upto
    with _write_lock(db):
        if "schema_version" not in db.table_names():
            db["schema_version"].create({"version": int, "name": str, "applied": float}, pk="version")
    current = schema_version(db)
    if current > len(MIGRATIONS):
        raise StoreError(
            f"database schema version {current} is newer than this slurm-fair knows ({len(MIGRATIONS)})"
        )
    for version in range(current + 1, target + 1):
        fn = MIGRATIONS[version - 1]
        with _write_lock(db):
            if schema_version(db) >= version:  # another process applied it since
                continue
            fn(db)
            db["schema_version"].insert({"version": version, "name": fn.__name__, "applied": time.time()})
    return schema_version(db)
