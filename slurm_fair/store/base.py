"""The connection every part of the store shares: opening (private files, WAL, migrations) and transactions."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Iterator, Self, Sequence, TypeVar

import sqlite_utils

from .. import statefiles
from .schema import BUSY_TIMEOUT_MS, MIGRATIONS, StoreError, migrate, schema_version

R = TypeVar("R")


def read_only_uri(path: str) -> str:
    """The SQLite URI that opens ``path`` read-only and creates no file. ``mode=ro`` alone still creates the WAL
    side files (``-wal``, ``-shm``: owned by whoever runs the command, so a reader as root would leave files the
    daemon cannot open); SQLite removes them when the last connection closes, so when there is no ``-wal`` no
    process has the database open and ``immutable=1`` reads the file as it is, without side files or locks.
    (A daemon starting during that read could checkpoint under it: the command then fails or shows that
    moment's rows, and the database is untouched.)"""
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
    return uri if os.path.exists(path + "-wal") else uri + "&immutable=1"


def _current_version(db: sqlite_utils.Database, path: str) -> int:
    """The schema version of a database opened read-only: it must be this slurm-fair's (a reader migrates
    nothing)."""
    version = schema_version(db)
    if version != len(MIGRATIONS):
        raise StoreError(f"database {path} has schema version {version}, this slurm-fair reads version "
                         f"{len(MIGRATIONS)}" + (": it is newer than this slurm-fair" if version > len(MIGRATIONS)
                                                 else ": start the daemon once to migrate it (commands that only "
                                                      "read migrate nothing)"))
    return version


def _while_locked(step: Callable[[], R], busy_timeout_ms: int) -> R:
    """``step()``, tried again while SQLite says the database is locked, up to the busy timeout. Switching a new
    database to WAL needs it alone, and SQLite does not wait for that (the busy handler is not called): two
    processes opening a new database at once (the daemon starting while ``status`` reads it) failed with
    "database is locked" in about half of 80 tries before this."""
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        try:
            return step()
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


class StoreBase:
    """The database connection (``db``) and its transactions; :class:`slurm_fair.store.Store` adds the tables'
    methods (one module per concern)."""

    def __init__(self, path: str | Path, busy_timeout_ms: int = BUSY_TIMEOUT_MS, read_only: bool = False):
        """Open (and create, private, migrated) the database at ``path``; ``read_only``: open an existing one
        read-only (:func:`read_only_uri`), creating, migrating and re-permissioning nothing."""
        self.path = str(path)
        self.read_only = read_only
        if self.path != ":memory:" and not read_only:
            try:  # private whatever the umask: folders 0750, the database and SQLite's side files 0600
                statefiles.make_dirs(Path(self.path).parent)
                statefiles.create_private(self.path)
                for p in (self.path, *(self.path + s for s in statefiles.SQLITE_SIDE_FILES)):
                    statefiles.tighten(p)
            except (OSError, statefiles.StateFileError) as e:
                raise StoreError(f"cannot create the database {self.path} or its folder: {e}") from e
        try:
            if read_only and self.path != ":memory:":
                conn = sqlite3.connect(read_only_uri(self.path), uri=True, timeout=busy_timeout_ms / 1000,
                                       isolation_level=None)
            else:
                conn = sqlite3.connect(self.path, timeout=busy_timeout_ms / 1000, isolation_level=None)
            self.db = sqlite_utils.Database(conn)
            self.db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            self.db.execute("PRAGMA foreign_keys = ON")
            if read_only:
                self.version = _current_version(self.db, self.path)
                return
            if self.path != ":memory:":
                _while_locked(self.db.enable_wal, busy_timeout_ms)
                # WAL + NORMAL: a commit is not fsynced (a checkpoint is): a power cut may lose the last
                # round's rows but never corrupts the database. FULL cost ~3 ms a commit, ~10 a round.
                self.db.execute("PRAGMA synchronous = NORMAL")
            self.version = _while_locked(lambda: migrate(self.db), busy_timeout_ms)
        except sqlite3.DatabaseError as e:
            raise StoreError(f"cannot open database {self.path}: {e}") from e

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Self]:
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

    def _records(self, record: Callable[..., R], sql: str, args: Sequence[Any] = ()) -> list[R]:
        """The rows ``sql`` selects, each as ``record(*columns)``: the select lists the record's fields in order."""
        return [record(*row) for row in self.db.execute(sql, list(args)).fetchall()]

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
