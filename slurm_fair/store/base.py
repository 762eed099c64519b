"""The connection every part of the store shares: opening (private files, WAL, migrations) and transactions."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any, Callable, Iterator, Self, Sequence, TypeVar

import sqlite_utils

from .. import statefiles
from .schema import BUSY_TIMEOUT_MS, StoreError, migrate

R = TypeVar("R")


class StoreBase:
    """The database connection (``db``) and its transactions; :class:`slurm_fair.store.Store` adds the tables'
    methods (one module per concern)."""

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
