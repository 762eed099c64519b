"""slurm-fair's state: one SQLite database, accessed through sqlite-utils.

Tables: profiles (throughput per account/class/GPU type and source), profile_reports (job reports the daemon
took), rounds (one row per allocation round), shares,
placements, applied (what a round computed and changed), deviations and deficits (state carried from round to
round), managed (accounts whose limits slurm-fair has set), events and preemptions (one row per preempted job
with every step). The schema is created by numbered
migrations recorded in ``schema_version``; opening a database applies the missing ones.

Every write method runs in one transaction; ``with store.transaction():`` groups several (a round writes
everything inside one) and nests (inner blocks are savepoints of the outer transaction).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import sqlite_utils

from .. import statefiles
from ..jobrecord import clean_text
from ..errors import InputError, SlurmFairError
from ..validate import gpu_type as _check_gpu_type, name as _check_name, number

CSV_HEADER = ("account", "class", "gpu_type", "throughput")
PROFILE_SOURCES = ("imported", "set", "measured", "harvested", "shipped")  # = profiling.core.SOURCES
_PROFILE_PK = ("account", "class", "gpu_type", "source")
ROUND_STATUSES = ("ok", "dry-run", "unreachable", "solver-failed", "error", "running")
_ROUND_FIELDS = ("finished", "solve_seconds", "total_throughput", "n_accounts", "n_changes", "message", "details")
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


def _m6_profile_sources(db: sqlite_utils.Database) -> None:
    """Profile values of every source side by side: the key gains ``source`` (imported | set | measured |
    harvested | shipped; older strings are mapped: manual -> set, import:<file> -> imported (the file kept in
    ``detail``), gavel -> shipped), plus ``rejected`` (outlier samples refused). ``profile_reports``: one row
    per job report the daemon took (key: job id and the report's number, so none counts twice), accepted,
    rejected (outlier) or refused (bad value)."""
    from ..profiling.core import source_of_legacy

    tbl = db["profiles"]
    tbl.add_column("rejected", int, not_null_default=0)
    tbl.add_column("detail", str)
    for r in list(tbl.rows):
        new = source_of_legacy(r["source"])
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


MIGRATIONS: tuple[Callable[[sqlite_utils.Database], None], ...] = (
    _m1_initial, _m2_indexes, _m3_job_records, _m4_preemptions, _m5_warm_start, _m6_profile_sources,
    _m7_upgrade_moves, _m8_site_limits, _m9_submit_time, _m10_trust_retention,
)

# hook records written by the controller (PrologSlurmctld/EpilogSlurmctld) carry the job's GPU types
CONTROLLER_CONTEXTS = ("prolog_slurmctld", "epilog_slurmctld")
UNTYPED_GPU = "untyped"  # GPUs a record counts in gres/gpu but under no gres/gpu:<type>
PREEMPTION_STATES = ("signalled", "requeued", "resolved", "gone", "failed", "held-back", "cancelled")
OPEN_PREEMPTIONS = ("signalled", "held-back")  # held-back: daemon/unrequeueable.py, open until the job ends


def schema_version(db: sqlite_utils.Database) -> int:
    if "schema_version" not in db.table_names():
        return 0
    row = db.execute("select max(version) from schema_version").fetchone()
    return row[0] or 0


def migrate(db: sqlite_utils.Database, upto: int | None = None) -> int:
    """Apply the missing migrations (up to ``upto``, default all), each in its own transaction."""
    target = len(MIGRATIONS) if upto is None else upto
    with db.atomic():
        if "schema_version" not in db.table_names():
            db["schema_version"].create({"version": int, "name": str, "applied": float}, pk="version")
    current = schema_version(db)
    if current > len(MIGRATIONS):
        raise StoreError(
            f"database schema version {current} is newer than this slurm-fair knows ({len(MIGRATIONS)})"
        )
    for version in range(current + 1, target + 1):
        fn = MIGRATIONS[version - 1]
        with db.atomic():
            fn(db)
            db["schema_version"].insert({"version": version, "name": fn.__name__, "applied": time.time()})
    return schema_version(db)


# ------------------------------------------------------------------------------------------------
# validation helpers for profiles


def _check_throughput(field: str, value: Any) -> float:
    return number(field, value, positive=True, text=True)  # CSV cells are text


def _loads(value: str | None) -> Any:
    return None if value is None else json.loads(value)


def _json_default(o: Any) -> Any:
    if hasattr(o, "tolist"):  # numpy arrays and scalars
        return o.tolist()
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, default=_json_default)


def _int(value: Any, field: str = "value") -> int | None:
    """None, or an int (numpy integers, and floats with an integral value, are accepted)."""
    if value is None:
        return None
    if isinstance(value, float) and not value.is_integer():
        raise InputError(field, value, "must be an integer")
    return int(value)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def job_runs(records: Iterable[Mapping]) -> list[dict]:
    """Runs (one per job id and restart count) from controller hook records (``job_records`` rows).

    Rules: a run starts at its start record's Slurm StartTime, else the start hook's clock, else (no start
    record) the end record's StartTime; a run with no known start is left out. It ends at its end record's
    Slurm EndTime, else the end hook's clock; without an end record it is open (``end`` None), unless a
    later run of the same job started: then it ends there. GPUs per type come from the start record when it
    read them from Slurm, else from the end record; GPUs counted only in ``gres/gpu`` are ``untyped``.
    ``submit``: the earliest Slurm SubmitTime the run's records hold (None: none does; records from before
    migration 9 or where scontrol did not answer).
    """
    by_run: dict[tuple[int, int], dict[str, Mapping]] = {}
    for r in records:
        if r["context"] in CONTROLLER_CONTEXTS:
            by_run.setdefault((int(r["job_id"]), int(r["restart_count"])), {})[r["event"]] = r
    runs = []
    for (job, restart), ev in sorted(by_run.items()):
        s, e = ev.get("start"), ev.get("end")
        start = (s["start_time"] if s and s["start_time"] is not None else s["time"] if s
                 else e["start_time"] if e else None)
        if start is None:
            continue
        end = None if e is None else (e["end_time"] if e["end_time"] is not None else e["time"])
        src = next((r for r in (s, e) if r is not None and str(r.get("gpu_info") or "").startswith("scontrol")),
                   None)
        gpus: dict[str, int] = {}
        if src is not None:
            typed = src["gpus"] if isinstance(src["gpus"], Mapping) else (_loads(src["gpus"]) or {})
            gpus = {str(t): int(n) for t, n in typed.items() if int(n) > 0}
            rest = int(src["gpu_count"] or 0) - sum(gpus.values())
            if rest > 0:
                gpus[UNTYPED_GPU] = rest
        subs = [float(r["submit_time"]) for r in (s, e) if r is not None and r.get("submit_time") is not None]
        runs.append({"job_id": job, "restart_count": restart, "account": (s or e)["account"] or (e or s)["account"],
                     "class": (s or e)["class"] or (e or s)["class"], "start": float(start),
                     "submit": min(subs) if subs else None,
                     "end": None if end is None else float(end), "gpus": gpus,
                     "gpu_info": (src or s or e)["gpu_info"]})
    nxt: dict[int, float] = {}
    for run in reversed(runs):  # sorted by (job, restart): a later run of the same job closes an open one
        if run["end"] is None and run["job_id"] in nxt:
            run["end"] = max(run["start"], nxt[run["job_id"]])
        nxt[run["job_id"]] = run["start"]
    return runs


def gpu_seconds(runs: Iterable[Mapping], since: float | None, until: float) -> dict[str, dict[str, float]]:
    """GPU-seconds per account and GPU type received in [since, until] (since None = from the first run):
    each run's overlap with the window times its GPUs of each type; an open run counts up to ``until``."""
    out: dict[str, dict[str, float]] = {}
    for run in runs:
        lo = run["start"] if since is None else max(run["start"], since)
        hi = min(until, run["end"] if run["end"] is not None else until)
        if hi <= lo or not run["gpus"]:
            continue
        per = out.setdefault(run["account"], {})
        for t, n in run["gpus"].items():
            per[t] = per.get(t, 0.0) + n * (hi - lo)
    return out


# ------------------------------------------------------------------------------------------------


class Store:
    """The slurm-fair database. ``Store(":memory:")`` for tests."""

    def __init__(self, path: str | Path, busy_timeout_ms: int = BUSY_TIMEOUT_MS):
        self.path = str(path)
        if self.path != ":memory:":
            try:  # private whatever the umask: folders 0750, the database and SQLite's side files 0600
                statefiles.make_dirs(Path(self.path).parent)
                statefiles.create_private(self.path)
                for p in (self.path, *(self.path + s for s in statefiles.SQLITE_SIDE_FILES)):
                    statefiles.tighten(p)
            except (OSError, statefiles.StateFileError) as e:
                raise StoreError(f"cannot create the database {self.path} or its folder: {e}") from e
        try:
            conn = sqlite3.connect(self.path, timeout=busy_timeout_ms / 1000, isolation_level=None)
            self.db = sqlite_utils.Database(conn)
            self.db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            self.db.execute("PRAGMA foreign_keys = ON")
            if self.path != ":memory:":
                self.db.enable_wal()
                # WAL + NORMAL: a commit is not fsynced (a checkpoint is): a power cut may lose the last
                # round's rows but never corrupts the database. FULL cost ~3 ms a commit, ~10 a round.
                self.db.execute("PRAGMA synchronous = NORMAL")
            self.version = migrate(self.db)
        except sqlite3.DatabaseError as e:
            raise StoreError(f"cannot open database {self.path}: {e}") from e

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator["Store"]:
        """One SQLite transaction: everything inside is stored, or (on an exception) nothing is.

        Nested use joins the outer transaction (as a savepoint: an inner failure that is caught undoes
        only the inner block). The outer transaction starts with BEGIN IMMEDIATE: it takes the write lock at
        once (waiting up to the busy timeout for another process's write to finish), so a transaction that
        reads and then writes never fails half-way because another process wrote in between.
        """
        conn = self.db.conn
        if conn.in_transaction:
            with self.db.atomic():  # a savepoint inside the open transaction
                yield self
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield self
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _insert_many(self, table: str, data: list[dict]) -> None:
        """Insert rows of one shape (the keys of ``data[0]``, already validated) with one ``executemany``:
        sqlite-utils' ``insert_all`` builds and checks every row in Python (a third of a simulated round with
        a thousand share rows)."""
        if not data:
            return
        cols = list(data[0])
        sql = (f'insert into "{table}" ({", ".join(chr(34) + c + chr(34) for c in cols)}) '
               f'values ({", ".join("?" for _ in cols)})')
        self.db.conn.executemany(sql, [[r[c] for c in cols] for r in data])

    # -------------------------------------------------------------------------------- profiles

    def set_profile(self, cls: str, gpu_type: str, throughput: float, account: str = "",
                    samples: int = 1, source: str = "set", detail: str | None = None) -> None:
        """Store a profile value of ``source`` (replacing that source's value for the key)."""
        if source not in PROFILE_SOURCES:
            raise InputError("source", source, f"must be one of {', '.join(PROFILE_SOURCES)}")
        row = {
            "account": _check_name("account", account, allow_empty=True),
            "class": _check_name("class", cls),
            "gpu_type": _check_gpu_type("gpu_type", gpu_type),
            "throughput": _check_throughput("throughput", throughput),
            "samples": int(samples),
            "source": source,
            "updated": time.time(),
            "rejected": 0,
            "detail": detail,
        }
        if row["samples"] < 1:
            raise InputError("samples", samples, "must be >= 1")
        with self.transaction():
            self.db["profiles"].upsert(row, pk=_PROFILE_PK)

    def delete_profiles(self, cls: str, account: str = "", gpu_type: str | None = None,
                        source: str | None = None) -> int:
        """Delete the profiles of ``cls`` for ``account`` (all GPU types and sources, or only ``gpu_type`` /
        ``source``); count deleted."""
        where = "account = ? and class = ?"
        args: list[Any] = [account, cls]
        if gpu_type is not None:
            where += " and gpu_type = ?"
            args.append(gpu_type)
        if source is not None:
            where += " and source = ?"
            args.append(source)
        with self.transaction():
            cur = self.db.execute(f"delete from profiles where {where}", args)
            return cur.rowcount

    def profile_values(self) -> list[dict]:
        """Every stored profile value, all sources side by side (``account, class, gpu_type, source,
        throughput, samples, rejected, updated, detail``)."""
        return list(self.db["profiles"].rows_where(order_by="account, class, gpu_type, source"))

    def profiles(self, prefer_measured: bool = False) -> list[dict]:
        """The values the policies use: one per (account, class, GPU type), chosen among the sources by
        :func:`slurm_fair.profiling.core.effective`."""
        from ..profiling.core import effective

        return effective(self.profile_values(), prefer_measured)

    def record_sample(self, account: str, cls: str, gpu_type: str, value: float, source: str, rules: Any,
                      now: float | None = None,
                      take: Callable[[dict | None], tuple[dict | None, bool]] | None = None) -> tuple[dict, bool]:
        """Add one measured sample (``source`` measured or harvested, ``value`` already checked with
        ``profiling.core.check_sample``) to the moving average of (account, class, GPU type, source).
        Returns (the stored row, accepted); an outlier is counted in ``rejected`` and changes nothing else.
        ``take(old row or None)`` replaces ``profiling.core.update`` (profiling/trust.py); a None row from it
        stores nothing."""
        from ..profiling.core import MEASURED, update

        if source not in MEASURED:
            raise InputError("source", source, f"a sample's source must be one of {', '.join(MEASURED)}")
        key = [_check_name("account", account, allow_empty=True), _check_name("class", cls),
               _check_gpu_type("gpu_type", gpu_type), source]
        now = time.time() if now is None else float(now)
        with self.transaction():
            old = next(self.db["profiles"].rows_where(
                "account = ? and class = ? and gpu_type = ? and source = ?", key), None)
            new, ok = update(old, float(value), now, rules) if take is None else take(old)
            row = {"account": key[0], "class": key[1], "gpu_type": key[2], "source": source,
                   "detail": None if old is None else old.get("detail"), **(new or {})}
            if new is not None:
                self.db["profiles"].upsert(row, pk=_PROFILE_PK)
        return row, ok

    # -------------------------------------------------------------------------------- profile reports/jobs

    def report_taken(self, job_id: int, n: int) -> bool:
        """Whether report ``n`` of job ``job_id`` was already taken (accepted, rejected or refused)."""
        return self.db.execute("select 1 from profile_reports where job_id = ? and n = ?",
                               [int(job_id), int(n)]).fetchone() is not None

    def record_report(self, row: Mapping[str, Any]) -> None:
        """One report the daemon took (see migration 6); a second one with the same (job_id, n) is ignored."""
        data = {k: row.get(k) for k in ("job_id", "n", "time", "round_id", "account", "class", "gpu_type", "nvml",
                                         "throughput", "source", "status", "message")}
        with self.transaction():
            self.db["profile_reports"].insert(data, pk=("job_id", "n"), ignore=True)

    def profile_reports(self, account: str | None = None, limit: int = 100) -> list[dict]:
        """The newest ``limit`` reports (of ``account``), newest first."""
        where, args = ("account = ?", [account]) if account is not None else (None, [])
        return list(self.db["profile_reports"].rows_where(where, args, order_by="time desc, job_id desc",
                                                          limit=limit))

    def import_csv(self, text: str, source: str = "imported", detail: str | None = None) -> int:
        """Upsert profiles from CSV text with header ``account,class,gpu_type,throughput``.

        Every row is checked first; any bad row raises InputError naming ``line N <column>`` and the value,
        and then nothing is written. Returns the number of rows imported. ``source``: imported or shipped.
        """
        if source not in PROFILE_SOURCES:
            raise InputError("source", source, f"must be one of {', '.join(PROFILE_SOURCES)}")
        reader = csv.reader(io.StringIO(text, newline=""))
        try:
            header = next(reader)
        except StopIteration:
            raise InputError("line 1", "", f"empty file; the header must be {','.join(CSV_HEADER)}") from None
        except csv.Error as e:
            raise InputError("line 1", text[:80], f"not CSV: {e}") from None
        if tuple(h.strip() for h in header) != CSV_HEADER:
            raise InputError("line 1", ",".join(header), f"the header must be exactly {','.join(CSV_HEADER)}")
        now = time.time()
        rows: dict[tuple[str, str, str], dict] = {}
        first_seen: dict[tuple[str, str, str], int] = {}
        try:
            for record in reader:
                n = reader.line_num
                if not record or all(not c.strip() for c in record):
                    continue  # blank line
                if len(record) != len(CSV_HEADER):
                    raise InputError(
                        f"line {n}", ",".join(record), f"has {len(record)} columns, expected {len(CSV_HEADER)}"
                    )
                account, cls, gpu_type, thr = (c.strip() for c in record)
                row = {
                    "account": _check_name(f"line {n} account", account, allow_empty=True),
                    "class": _check_name(f"line {n} class", cls),
                    "gpu_type": _check_gpu_type(f"line {n} gpu_type", gpu_type),
                    "throughput": _check_throughput(f"line {n} throughput", thr),
                    "samples": 1,
                    "source": source,
                    "updated": now,
                    "rejected": 0,
                    "detail": detail,
                }
                key = (row["account"], row["class"], row["gpu_type"])
                if key in rows:
                    raise InputError(
                        f"line {n} gpu_type", gpu_type,
                        f"duplicate of line {first_seen[key]} (account {account!r}, class {cls!r})",
                    )
                rows[key] = row
                first_seen[key] = n
        except csv.Error as e:
            raise InputError(f"line {reader.line_num}", "", f"not valid CSV: {e}") from None
        with self.transaction():
            if rows:
                self.db["profiles"].upsert_all(rows.values(), pk=_PROFILE_PK)
        return len(rows)

    def export_csv(self) -> str:
        """The values the policies use (:meth:`profiles`) as CSV (``profiles import`` reads it back)."""
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow(CSV_HEADER)
        for r in self.profiles():
            w.writerow([r["account"], r["class"], r["gpu_type"], repr(float(r["throughput"]))])
        return out.getvalue()

    # -------------------------------------------------------------------------------- rounds

    def begin_round(self, policy: str, solver: str = "", now: float | None = None) -> int:
        """A new round, status ``running``, started at ``now`` (default: the wall clock)."""
        with self.transaction():
            return self.db["rounds"].insert(
                {"started": time.time() if now is None else float(now), "policy": policy, "solver": solver or "",
                 "status": "running"}
            ).last_pk

    def finish_round(self, round_id: int, status: str, **fields: Any) -> None:
        """Set ``status`` and any of finished (default now), solve_seconds, total_throughput, n_accounts,
        n_changes, message, details (JSON-able)."""
        if status not in ROUND_STATUSES:
            raise InputError("status", status, f"must be one of {', '.join(ROUND_STATUSES)}")
        for k in fields:
            if k not in _ROUND_FIELDS:
                raise InputError(k, fields[k], f"not a round field (known: {', '.join(_ROUND_FIELDS)})")
        update = {"status": status, "finished": time.time(), **fields}
        if "details" in update:
            update["details"] = _dumps(update["details"])
        with self.transaction():
            if self.db.execute("select 1 from rounds where id = ?", [round_id]).fetchone() is None:
                raise InputError("round_id", round_id, "no such round")
            self.db["rounds"].update(round_id, update)

    @staticmethod
    def _round_row(r: dict) -> dict:
        r = dict(r)
        r["details"] = _loads(r["details"])
        return r

    def rounds(self, limit: int = 20, details: bool = True) -> list[dict]:
        """The newest ``limit`` rounds, newest first; ``details=False`` leaves out the (large) details JSON
        (the daemon's own bookkeeping reads only ids, statuses and times)."""
        if not details:
            cols = ", ".join(c for c in self.db["rounds"].columns_dict if c != "details")
            return list(self.db["rounds"].rows_where(select=cols, order_by="id desc", limit=limit))
        return [self._round_row(r) for r in self.db["rounds"].rows_where(order_by="id desc", limit=limit)]

    def round_series(self, since: float | None = None, until: float | None = None,
                     keys: Iterable[str] = ("fairness",)) -> list[dict]:
        """Finished rounds started in [since, until] (None: no bound), oldest first: id, started, finished,
        policy, status, solve_seconds, total_throughput, n_accounts, n_changes, and ``keys``, top-level keys
        of their details (None where absent). SQLite extracts those keys, so the rest of each round's large
        details JSON is never decoded here."""
        names = list(keys)
        for k in names:
            if not k.isidentifier():
                raise InputError("keys", k, "must be a details key (letters, digits, _)")
        cols = ", ".join(["id", "started", "finished", "policy", "status", "solve_seconds", "total_throughput",
                          "n_accounts", "n_changes"] + [f"json_extract(details, '$.{k}') as {k}" for k in names])
        where, args = self._window("started", since, until)
        cur = self.db.execute(f"select {cols} from rounds where finished is not null and status != 'running'"
                              f"{' and ' + where if where else ''} order by id", args)
        out = []
        for row in cur.fetchall():
            r = dict(zip([d[0] for d in cur.description], row))
            for k in names:
                r[k] = _loads(r[k])
            out.append(r)
        return out

    @staticmethod
    def _window(column: str, since: float | None, until: float | None) -> tuple[str, list[float]]:
        where, args = [], []
        if since is not None:
            where.append(f"{column} >= ?")
            args.append(float(since))
        if until is not None:
            where.append(f"{column} <= ?")
            args.append(float(until))
        return " and ".join(where), args

    def round(self, round_id: int | None = None) -> dict | None:
        """Round ``round_id``, or (None) the last finished round whose status is ok or dry-run."""
        if round_id is None:
            rows = list(self.db["rounds"].rows_where(
                "status in ('ok', 'dry-run') and finished is not null", order_by="id desc", limit=1))
        else:
            rows = list(self.db["rounds"].rows_where("id = ?", [round_id]))
        return self._round_row(rows[0]) if rows else None

    def round_counts(self) -> dict[str, int]:
        """status -> number of rounds with that status."""
        return {r[0]: r[1] for r in self.db.execute("select status, count(*) from rounds group by status")}

    def last_finished_round(self) -> dict | None:
        """The newest round that is not ``running`` (any other status), without its details, or None."""
        cols = ", ".join(c for c in self.db["rounds"].columns_dict if c != "details")
        rows = list(self.db["rounds"].rows_where("status != 'running'", select=cols, order_by="id desc", limit=1))
        return rows[0] if rows else None

    # -------------------------------------------------------------------------------- shares/placements

    def record_shares(self, round_id: int, rows: Iterable[Mapping]) -> None:
        data = [{"round_id": round_id, "account": r["account"], "class": r["class"], "gpu_type": r["gpu_type"],
                 "ideal": float(r["ideal"]), "real": _int(r.get("real"), "real")} for r in rows]
        with self.transaction():
            self._insert_many("shares", data)

    def shares(self, round_id: int) -> list[dict]:
        return list(self.db["shares"].rows_where(
            "round_id = ?", [round_id], order_by="account, class, gpu_type",
            select="round_id, account, class, gpu_type, ideal, real"))

    def record_placements(self, round_id: int, rows: Iterable[Mapping]) -> None:
        data = [{"round_id": round_id, "account": r["account"], "gpu_type": r["gpu_type"],
                 "ideal": float(r["ideal"]), "deviation_before": _float(r.get("deviation_before")),
                 "real": _int(r.get("real"), "real"), "limit": _int(r.get("limit"), "limit")} for r in rows]
        with self.transaction():
            self._insert_many("placements", data)

    def placements(self, round_id: int) -> list[dict]:
        return list(self.db["placements"].rows_where(
            "round_id = ?", [round_id], order_by="account, gpu_type",
            select='round_id, account, gpu_type, ideal, deviation_before, real, "limit"'))

    def placements_between(self, since: float | None = None, until: float | None = None) -> list[dict]:
        """Placement rows (round_id, account, gpu_type, ideal, real, limit) of the finished rounds started in
        [since, until], by round, account and type."""
        where, args = self._window("r.started", since, until)
        cur = self.db.execute(
            'select p.round_id, p.account, p.gpu_type, p.ideal, p.real, p."limit" from placements p '
            "join rounds r on r.id = p.round_id where r.finished is not null"
            f"{' and ' + where if where else ''} order by p.round_id, p.account, p.gpu_type", args)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]

    # -------------------------------------------------------------------------------- carried state

    def deviations(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for r in self.db["deviations"].rows_where(order_by="account, gpu_type"):
            out.setdefault(r["account"], {})[r["gpu_type"]] = r["value"]
        return out

    def save_deviations(self, round_id: int | None, devs: Mapping[str, Mapping[str, float]]) -> None:
        """Replace the whole carried deviation state."""
        data = [{"account": a, "gpu_type": t, "value": float(v), "round_id": round_id}
                for a, per in devs.items() for t, v in per.items()]
        with self.transaction():
            self.db.execute("delete from deviations")
            self._insert_many("deviations", data)

    def deficits(self) -> dict[str, float]:
        return {r["account"]: r["value"] for r in self.db["deficits"].rows_where(order_by="account")}

    def save_deficits(self, d: Mapping[str, float]) -> None:
        """Replace the whole deficit state."""
        now = time.time()
        data = [{"account": a, "value": float(v), "updated": now} for a, v in d.items()]
        with self.transaction():
            self.db.execute("delete from deficits")
            if data:
                self.db["deficits"].insert_all(data)

    # -------------------------------------------------------------------------------- warm start

    def warm_start(self, policy: str, with_time: bool = False) -> Any:
        """The warm start saved for ``policy`` (decoded JSON), or None; ``with_time``: (data, time saved).
        An unreadable one counts as none."""
        row = next(self.db["warm_start"].rows_where("policy = ?", [policy]), None)
        data = None
        if row is not None:
            try:
                data = json.loads(row["data"])
            except (TypeError, ValueError):
                data = None
        if with_time:
            return data, (float(row["updated"]) if row is not None and data is not None else 0.0)
        return data

    def save_warm_start(self, policy: str, data: Any, round_id: int | None = None, now: float | None = None) -> None:
        """Replace ``policy``'s warm start (JSON-encodable; tuples become lists), saved at ``now``."""
        self.db["warm_start"].upsert({"policy": policy, "data": json.dumps(data), "round_id": round_id,
                                      "updated": time.time() if now is None else float(now)}, pk="policy")

    # -------------------------------------------------------------------------------- applied/managed

    def record_applied(self, round_id: int, rows: Iterable[Mapping]) -> None:
        now = time.time()
        data = [{"round_id": round_id, "account": r["account"], "key": r["key"], "old": _int(r.get("old"), "old"),
                 "new": _int(r.get("new"), "new"), "time": float(r.get("time", now))} for r in rows]
        with self.transaction():
            if data:
                self.db["applied"].insert_all(data)

    def applied(self, round_id: int) -> list[dict]:
        return list(self.db["applied"].rows_where(
            "round_id = ?", [round_id], order_by="rowid", select="round_id, account, key, old, new, time"))

    def managed(self) -> set[str]:
        return {r["account"] for r in self.db["managed"].rows}

    def record_site_limits(self, limits: Mapping[str, Mapping[str, int]], now: float | None = None) -> list[str]:
        """Keep each account's GPU limits as they are before slurm-fair first changes them: an account already
        recorded keeps its first record. Returns the accounts recorded now."""
        have = {r["account"] for r in self.db["site_limits"].rows}
        t = time.time() if now is None else float(now)
        new = [{"account": a, "limits": _dumps({k: int(v) for k, v in sorted(row.items())}), "recorded": t}
               for a, row in sorted(limits.items()) if a not in have]
        if new:
            with self.transaction():
                self.db["site_limits"].insert_all(new)
        return [r["account"] for r in new]

    def site_limits(self) -> dict[str, dict[str, int]]:
        """account -> its GPU limits before slurm-fair first changed them ({}: none)."""
        return {r["account"]: {k: int(v) for k, v in (_loads(r["limits"]) or {}).items()}
                for r in self.db["site_limits"].rows}

    def forget_site_limits(self, accounts: Iterable[str]) -> None:
        """Drop the records of ``accounts`` (after a rollback restored them)."""
        names = sorted(set(accounts))
        if names:
            with self.transaction():
                self.db.execute(f"delete from site_limits where account in ({','.join('?' * len(names))})", names)

    def set_managed(self, accounts: Iterable[str]) -> None:
        """Replace the set of accounts whose limits slurm-fair has set."""
        data = [{"account": a} for a in sorted(set(accounts))]
        with self.transaction():
            self.db.execute("delete from managed")
            if data:
                self.db["managed"].insert_all(data)

    def prune(self, retention_days: float, now: float | None = None, live_jobs: Iterable[int] | None = None,
              step_days: float | None = None) -> dict[str, int]:
        """Delete what is older than ``retention_days`` (store.retention.prune: what is kept, rows deleted
        per table; ``step_days``: at most that many days of the oldest history at once, ``behind``: 1 when
        more is left); 0 days deletes nothing."""
        from .retention import cutoff_for, prune

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

    def events(self, limit: int = 100, kind: str | None = None) -> list[dict]:
        """The newest ``limit`` events (of ``kind``), newest first."""
        where, args = ("kind = ?", [kind]) if kind else (None, [])
        out = []
        for r in self.db["events"].rows_where(where, args, order_by="id desc", limit=limit):
            r["data"] = _loads(r["data"])
            out.append(r)
        return out

    # -------------------------------------------------------------------------------- hook job records

    def upsert_job_records(self, rows: Iterable[Mapping], file_names: Iterable[str] | None = None) -> int:
        """Insert or replace hook records (jobrecord's format), keyed by job id, restart count, event, context
        and node (empty for controller hooks): ingesting a record twice changes nothing. Returns the count.
        Text that is not valid UTF-8 (a lone surrogate from a job name's stray byte) is stored with U+FFFD in
        its place: one user's job name never blocks the batch."""
        now = time.time()
        names = list(file_names) if file_names is not None else None
        data = []
        for i, r in enumerate(rows):
            text = {k: clean_text(str(r.get(k) or "")) for k in ("event", "context", "node", "account", "user",
                                                                 "partition", "class", "job_name", "gpu_info")}
            derived = r.get("derived_exit_code")
            data.append({
                "job_id": int(r["job_id"]), "restart_count": int(r["restart_count"]), "time": float(r["time"]),
                **text,
                "start_time": _float(r.get("start_time")), "end_time": _float(r.get("end_time")),
                "submit_time": _float(r.get("submit_time")), "gpus": _dumps(r.get("gpus") or {}),
                "gpu_count": _int(r.get("gpu_count"), "gpu_count"),
                "exit_code": _int(r.get("exit_code"), "exit_code"),
                "exit_signal": _int(r.get("exit_signal"), "exit_signal"),
                "exit_status": _int(r.get("exit_status"), "exit_status"),
                "derived_exit_code": None if derived is None else clean_text(str(derived)),
                "file": clean_text(names[i]) if names is not None else None, "ingested": now,
                "data": _dumps(dict(r)),
            })
        with self.transaction():
            if data:
                self.db["job_records"].upsert_all(data, pk=("job_id", "restart_count", "event", "context", "node"))
        return len(data)

    def job_records(self, job_id: int | None = None) -> list[dict]:
        """Stored hook records (of ``job_id``), ``gpus`` as a dict, ordered by job, restart, time."""
        where, args = ("job_id = ?", [job_id]) if job_id is not None else (None, [])
        out = []
        for r in self.db["job_records"].rows_where(where, args, order_by="job_id, restart_count, time, context, node"):
            r["gpus"] = _loads(r["gpus"]) or {}
            r["data"] = _loads(r["data"])
            out.append(r)
        return out

    def job_runs(self) -> list[dict]:
        """Job runs from the controller hook records (see :func:`job_runs`)."""
        rows = self.db.execute(
            "select job_id, restart_count, event, context, time, start_time, end_time, submit_time, account, class, "
            "gpus, gpu_count, gpu_info from job_records where context in (?, ?)", list(CONTROLLER_CONTEXTS))
        cols = [d[0] for d in rows.description]
        return job_runs(dict(zip(cols, r)) for r in rows.fetchall())

    def received_gpu_seconds(self, since: float | None = None, until: float | None = None
                             ) -> dict[str, dict[str, float]]:
        """GPU-seconds per account and GPU type in [since, until] (default: all, up to now), from the hook
        records (see :func:`job_runs`, :func:`gpu_seconds`)."""
        return gpu_seconds(self.job_runs(), since, time.time() if until is None else until)

    # -------------------------------------------------------------------------------- preemptions

    @staticmethod
    def _preemption_row(r: dict) -> dict:
        r = dict(r)
        r["steps"] = _loads(r["steps"]) or []
        return r

    def add_preemption(self, *, job_id: int, account: str, gpu_type: str, gpus: int, signal: str, reason: str,
                       grace: float, round_id: int | None = None, user: str = "", ok: bool = True,
                       message: str = "", now: float | None = None, target_type: str | None = None,
                       held_back: bool = False, due: float | None = None) -> int:
        """Record a checkpoint signal sent to a job (``ok``) or that failed (state ``failed``, ``message``
        says why); returns the preemption id. A sent signal opens the preemption (state ``signalled``) until
        ``now + grace``. ``target_type``: an upgrade move's faster type (None: a reclaim). ``held_back``: no signal
        was sent, the job cannot be requeued and its account is held back (state ``held-back``, open until the job
        ends; ``due``: when it is cancelled, None = never)."""
        now = time.time() if now is None else now
        if held_back:
            step = {"time": now, "round_id": round_id, "step": "held-back", "message": message}
            row = {"job_id": _int(job_id, "job_id"), "account": account, "user": user, "gpu_type": gpu_type,
                   "gpus": _int(gpus, "gpus"), "signal": "", "reason": reason, "state": "held-back",
                   "round_id": _int(round_id, "round_id"), "created": now, "signalled_at": None, "requeue_at": due,
                   "requeued_at": None, "finished_at": None, "steps": _dumps([step]), "target_type": None}
            with self.transaction():
                return self.db["preemptions"].insert(row).last_pk
        step = {"time": now, "round_id": round_id, "step": "signalled" if ok else "signal-failed",
                "message": message or (f"sent {signal}" if ok else "")}
        row = {"job_id": _int(job_id, "job_id"), "account": account, "user": user, "gpu_type": gpu_type,
               "gpus": _int(gpus, "gpus"), "signal": signal, "reason": reason, "state": "signalled" if ok else "failed",
               "round_id": _int(round_id, "round_id"), "created": now, "signalled_at": now if ok else None,
               "requeue_at": now + float(grace) if ok else None, "requeued_at": None,
               "finished_at": None if ok else now, "steps": _dumps([step]), "target_type": target_type}
        with self.transaction():
            return self.db["preemptions"].insert(row).last_pk

    def preemption_step(self, preemption_id: int, step: str, message: str = "", *, state: str | None = None,
                        round_id: int | None = None, now: float | None = None, due: Any = ...) -> None:
        """Append a step; with ``state`` also move the preemption there (``requeued`` sets requeued_at; any
        state but an open one, ``signalled`` or ``held-back``, sets finished_at). ``due`` (when given): the new
        requeue_at (a held-back job's cancel time, None = never)."""
        now = time.time() if now is None else now
        if state is not None and state not in PREEMPTION_STATES:
            raise InputError("state", state, f"must be one of {', '.join(PREEMPTION_STATES)}")
        with self.transaction():
            rows = list(self.db["preemptions"].rows_where("id = ?", [preemption_id]))
            if not rows:
                raise InputError("preemption_id", preemption_id, "no such preemption")
            steps = _loads(rows[0]["steps"]) or []
            steps.append({"time": now, "round_id": _int(round_id, "round_id"), "step": step, "message": message})
            update: dict[str, Any] = {"steps": _dumps(steps)}
            if state is not None:
                update["state"] = state
                if state == "requeued":
                    update["requeued_at"] = now
                if state not in OPEN_PREEMPTIONS:
                    update["finished_at"] = now
            if due is not ...:
                update["requeue_at"] = due
            self.db["preemptions"].update(preemption_id, update)

    def preemption_history(self, since: float) -> list[dict]:
        """What preemption decisions need: open preemptions, and every one signalled or requeued since
        ``since`` (leases)."""
        return [self._preemption_row(r) for r in self.db["preemptions"].rows_where(
            "state in ('signalled', 'held-back') or coalesce(requeued_at, signalled_at, created) >= ?", [since],
            order_by="id")]

    def preemptions(self, account: str | None = None, job_id: int | None = None, limit: int | None = 100,
                    since: float | None = None, until: float | None = None) -> list[dict]:
        """The newest ``limit`` (None: all) preemptions (of ``account``'s jobs, of ``job_id``, created in
        [since, until]), newest first, with steps."""
        window, args = self._window("created", since, until)
        where = [window] if window else []
        if account is not None:
            where.append("account = ?")
            args.append(account)
        if job_id is not None:
            where.append("job_id = ?")
            args.append(job_id)
        return [self._preemption_row(r) for r in self.db["preemptions"].rows_where(
            " and ".join(where) or None, args, order_by="id desc", limit=limit)]

    def preemption_counts(self) -> dict[str, int]:
        """state -> number of preemptions."""
        return {r[0]: r[1] for r in self.db.execute("select state, count(*) from preemptions group by state")}

    def preemption_totals(self) -> list[dict]:
        """Per account and GPU type: ``started`` (every preemption: checkpoint signals sent or failed),
        ``requeued`` (of those, jobs requeued) and ``open`` (signalled, in their grace now)."""
        rows = self.db.execute(
            "select account, coalesce(gpu_type, ''), count(*), sum(requeued_at is not null), "
            "sum(state = 'signalled') from preemptions group by account, coalesce(gpu_type, '') "
            "order by account, coalesce(gpu_type, '')")
        return [{"account": a, "gpu_type": g, "started": n, "requeued": rq, "open": op}
                for a, g, n, rq, op in rows.fetchall()]

    def next_preemption_due(self, held_back: bool = False) -> float | None:
        """The earliest end of grace of an open preemption (unix seconds), None if none is open; with
        ``held_back`` also the cancel times of held-back jobs (``preemption.unrequeueable = "cancel"``)."""
        states = "('signalled', 'held-back')" if held_back else "('signalled')"
        row = self.db.execute(f"select min(requeue_at) from preemptions where state in {states}").fetchone()
        return row[0] if row else None
