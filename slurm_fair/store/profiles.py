"""Profiles: throughput values per (account, class, GPU type) and source, the job reports the daemon took, CSV
import and export."""

from __future__ import annotations

import csv
import dataclasses
import io
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from ..catalog import PROFILE_SOURCES  # (= profiling.core.SOURCES)
from ..errors import InputError
from ..validate import gpu_type as _check_gpu_type, name as _check_name, number
from .base import StoreBase
from .codec import _fields

CSV_HEADER = ("account", "class", "gpu_type", "throughput")
SAMPLE_SOURCES = ("measured", "harvested")  # values kept as moving averages of samples (= profiling.core.MEASURED)
_PROFILE_PK = ("account", "class", "gpu_type", "source")


@dataclass(frozen=True)
class ProfileValue:
    """A row of ``profiles``: one ``source``'s throughput of an account's (empty: every account's) class on a GPU
    type. ``samples``, ``rejected`` and the change window (``window_start``, ``window_base``, ``window_history``:
    JSON, profiling/trust.py) belong to sampled values (measured, harvested)."""

    account: str
    cls: str  # the column ``class``
    gpu_type: str
    throughput: float
    samples: int = 1
    source: str = "set"
    updated: float | None = None
    rejected: int = 0
    detail: str | None = None
    window_start: float | None = None
    window_base: float | None = None
    window_history: str | None = None


@dataclass(frozen=True)
class ProfileReport:
    """A row of ``profile_reports``: a job's report ``n`` the daemon took (``status``: accepted, rejected or
    refused, ``message`` why)."""

    job_id: int
    n: int
    time: float
    round_id: int | None
    account: str | None
    cls: str | None  # the column ``class``
    gpu_type: str | None
    nvml: str | None
    throughput: float | None
    source: str | None
    status: str
    message: str | None


def _check_throughput(field: str, value: Any, bounds: tuple[float, float] | None = None) -> float:
    """A throughput (> 0, finite; CSV cells are text) within ``bounds`` (``[profiling] min_throughput ..
    max_throughput`` as the CLI passes them: the bounds a job's report must meet) when given."""
    v = number(field, value, positive=True, text=True)
    if bounds is not None and not bounds[0] <= v <= bounds[1]:
        raise InputError(field, value, f"outside [profiling] min_throughput..max_throughput "
                                       f"[{bounds[0]:g}, {bounds[1]:g}]")
    return v


class ProfilesMixin(StoreBase):
    """The ``profiles`` and ``profile_reports`` tables."""

    def set_profile(self, cls: str, gpu_type: str, throughput: float, account: str = "",
                    samples: int = 1, source: str = "set", detail: str | None = None,
                    bounds: tuple[float, float] | None = None) -> None:
        """Store a profile value of ``source`` (replacing that source's value for the key); ``bounds``: the
        throughput must lie in them (:func:`_check_throughput`)."""
        if source not in PROFILE_SOURCES:
            raise InputError("source", source, f"must be one of {', '.join(PROFILE_SOURCES)}")
        row = {
            "account": _check_name("account", account, allow_empty=True),
            "class": _check_name("class", cls),
            "gpu_type": _check_gpu_type("gpu_type", gpu_type),
            "throughput": _check_throughput(f"throughput of class {cls!r} on GPU type {gpu_type!r}", throughput,
                                            bounds),
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

    def profile_values(self) -> list[ProfileValue]:
        """Every stored profile value, all sources side by side, by account, class, type and source."""
        return [ProfileValue(**_fields(r)) for r in self.db["profiles"].rows_where(
            order_by="account, class, gpu_type, source")]

    def record_sample(self, account: str, cls: str, gpu_type: str, source: str,
                      take: Callable[[ProfileValue | None], tuple[dict | None, bool]],
                      now: float | None = None) -> tuple[ProfileValue | None, bool]:
        """Store what one sample of (account, class, GPU type, ``source`` measured or harvested) makes of that
        value: ``take(old value or None)`` returns (the new value's fields or None to store nothing, accepted?);
        the rules live in ``slurm_fair/profiling`` (``core.sample``, ``trust.take_sample``). Returns (the value
        stored now, else the old one or None, accepted)."""
        if source not in SAMPLE_SOURCES:
            raise InputError("source", source, f"a sample's source must be one of {', '.join(SAMPLE_SOURCES)}")
        key = [_check_name("account", account, allow_empty=True), _check_name("class", cls),
               _check_gpu_type("gpu_type", gpu_type), source]
        with self.transaction():
            row = next(self.db["profiles"].rows_where(
                "account = ? and class = ? and gpu_type = ? and source = ?", key), None)
            old = None if row is None else ProfileValue(**_fields(row))
            new, ok = take(old)
            if new is None:
                return old, ok
            row = {"account": key[0], "class": key[1], "gpu_type": key[2], "source": source,
                   "detail": None if old is None else old.detail, **new}
            # plain SQL, as sqlite-utils' upsert would (insert, else update the columns named): its table
            # introspection was half the harvest's time a report (issue 41's report flood)
            cols = list(row)
            self.db.execute(
                f"insert into profiles ({', '.join(f'[{c}]' for c in cols)}) values ({', '.join('?' * len(cols))}) "
                f"on conflict ({', '.join(f'[{c}]' for c in _PROFILE_PK)}) do update set "
                + ", ".join(f"[{c}] = excluded.[{c}]" for c in cols if c not in _PROFILE_PK),
                [row[c] for c in cols])
        # the upsert leaves the columns ``new`` does not name as they were
        return ProfileValue(**{**(dataclasses.asdict(old) if old is not None else {}), **_fields(row)}), ok

    # -------------------------------------------------------------------------------- profile reports/jobs

    def report_taken(self, job_id: int, n: int) -> bool:
        """Whether report ``n`` of job ``job_id`` was already taken (accepted, rejected or refused)."""
        return self.db.execute("select 1 from profile_reports where job_id = ? and n = ?",
                               [int(job_id), int(n)]).fetchone() is not None

    def record_report(self, row: Mapping[str, Any]) -> None:
        """One report the daemon took (see migration 6); a second one with the same (job_id, n) is ignored."""
        data = {k: row.get(k) for k in ("job_id", "n", "time", "round_id", "account", "class", "gpu_type", "nvml",
                                         "throughput", "source", "status", "message")}
        with self.transaction():  # plain SQL: sqlite-utils' insert introspects the table each call
            self.db.execute(f"insert or ignore into profile_reports ({', '.join(f'[{c}]' for c in data)}) "
                            f"values ({', '.join('?' * len(data))})", list(data.values()))

    def profile_reports(self, account: str | None = None, limit: int = 100) -> list[ProfileReport]:
        """The newest ``limit`` reports (of ``account``), newest first."""
        where, args = ("account = ?", [account]) if account is not None else (None, [])
        return [ProfileReport(**_fields(r)) for r in self.db["profile_reports"].rows_where(
            where, args, order_by="time desc, job_id desc", limit=limit)]

    def import_csv(self, text: str, source: str = "imported", detail: str | None = None,
                   bounds: tuple[float, float] | None = None) -> int:
        """Upsert profiles from CSV text with header ``account,class,gpu_type,throughput``.

        Every row is checked first; any bad row raises InputError naming ``line N <column>`` (a throughput: its
        class and GPU type too) and the value, and then nothing is written. Returns the number of rows
        imported. ``source``: imported or shipped. ``bounds``: every throughput must lie in them.
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
                    "throughput": _check_throughput(
                        f"line {n} throughput of class {cls!r} on GPU type {gpu_type!r}", thr, bounds),
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

    @staticmethod
    def export_csv(rows: Iterable[ProfileValue]) -> str:
        """Profile values (``rows``: the ones the rounds use, ``daemon/bounded.round_profiles``) as CSV, in the
        format ``import_csv`` reads back."""
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow(CSV_HEADER)
        for r in rows:
            w.writerow([r.account, r.cls, r.gpu_type, repr(float(r.throughput))])
        return out.getvalue()
