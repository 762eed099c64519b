"""Read the hooks' job start/end records (``slurm_fair/jobrecord.py``) from the spool into the store.

Called once per round, before planning (:func:`ingest_round`). Rules:

* Only ``*.json`` files whose name does not start with ``.`` are read (the hooks write hidden temp files
  and rename them, so a listed file is complete). Hidden ``*.tmp`` files older than an hour (a hook killed
  mid-write) are deleted.
* A file that is not a valid record (not JSON, wrong format version, a missing or mistyped field) is moved
  to ``<spool>/bad/`` and reported as a ``hook-record-bad`` event; it never stops the round.
* Good records are upserted in one transaction (key: job id, restart count, event, context, node), and
  their files removed only after the commit: a crash in between re-reads them next round, which changes
  nothing (idempotent).
* A record the store refuses (any exception for that row: a number too large for SQLite, ...) is quarantined:
  the batch is retried one record at a time, the refused file moved to ``<spool>/bad/`` with a
  ``hook-record-quarantined`` event naming the file and the error, and the others ingested. When the database
  itself fails (an sqlite3 error other than an integrity/data error: locked, disk full, read-only, closed),
  nothing is moved: a
  ``hook-ingest-error`` event, and the next round retries what was not stored.
* A controller hook's record of a job Slurm allocated no GPU (its TRES read and trusted: ``gpu_info``
  ``scontrol …``, no GPU in it) is counted (``cpu_only``) and its file removed, not stored: nothing slurm-fair
  does uses a CPU-only job, and at a site most jobs are — 20 000 such records (issue 30's report flood) grew the
  database by 12 MB and their refused reports took 100 rounds to judge. A record whose GPUs could not be read
  (``gpu_info`` ``none: …``: an untrusted header, scontrol failing) is stored as before.
* Nothing here raises: an unreadable spool becomes a ``hook-ingest-error`` event and the round goes on.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import Config
from .. import jobrecord
from ..store import Store

BAD_DIR = "bad"
STALE_TMP_SECONDS = 3600
# field -> accepted types (None allowed where listed); anything else makes the record bad
_FIELDS: dict[str, tuple[type, ...]] = {
    "v": (int,), "event": (str,), "context": (str,), "job_id": (int,), "restart_count": (int,),
    "time": (int, float), "account": (str,), "gpus": (dict,),
}
_OPTIONAL: dict[str, tuple[type, ...]] = {
    "start_time": (int, float, type(None)), "end_time": (int, float, type(None)),
    "submit_time": (int, float, type(None)),
    "gpu_count": (int, type(None)), "exit_code": (int, type(None)), "exit_signal": (int, type(None)),
    "exit_status": (int, type(None)), "user": (str,), "partition": (str,), "class": (str,), "job_name": (str,),
    "node": (str,), "gpu_info": (str,), "derived_exit_code": (str, type(None)),
    "uid": (int, type(None)), "nodelist": (str,), "gpu_indices": (str,), "job_state": (str,), "requeued": (bool,),
    "fair_tokens": (str,),
}


@dataclass
class IngestResult:
    read: int = 0
    bad: list[str] = field(default_factory=list)
    error: str = ""
    cpu_only: int = 0  # records of jobs Slurm allocated no GPU: removed, not stored

    def as_dict(self) -> dict[str, Any]:
        return {"read": self.read, "bad": self.bad, "error": self.error, "cpu_only": self.cpu_only}


def cpu_only(rec: dict) -> bool:
    """A controller hook's record of a job with no GPU in its trusted TRES (module docstring)."""
    return (not str(rec["context"]).endswith("_slurmd") and not any(rec["gpus"].values())
            and not rec.get("gpu_count") and str(rec.get("gpu_info", "")).startswith("scontrol "))


def check_record(rec: Any) -> str:
    """"" if ``rec`` is a valid hook record, else why not (naming the field and value)."""
    if not isinstance(rec, dict):
        return f"record: must be a JSON object (got {type(rec).__name__})"
    for spec, required in ((_FIELDS, True), (_OPTIONAL, False)):
        for k, types in spec.items():
            if k not in rec:
                if required:
                    return f"{k}: missing"
                continue
            v = rec[k]
            if (isinstance(v, bool) and bool not in types) or not isinstance(v, types):
                return f"{k}: wrong type (got {v!r})"
            if isinstance(v, float) and not math.isfinite(v):
                return f"{k}: must be a finite number (got {v!r})"
    unknown = sorted(set(rec) - set(_FIELDS) - set(_OPTIONAL))
    if unknown:
        return f"{unknown[0]}: unknown key (a record has {', '.join(sorted({*_FIELDS, *_OPTIONAL}))})"
    if rec["v"] != jobrecord.FORMAT_VERSION:
        return f"v: unknown format version (got {rec['v']!r})"
    if rec["context"] not in jobrecord.CONTEXTS:
        return f"context: unknown hook context (got {rec['context']!r})"
    if rec["event"] != jobrecord.CONTEXTS[rec["context"]]:
        return f"event: {rec['event']!r} does not match context {rec['context']!r}"
    if rec["job_id"] < 1 or rec["restart_count"] < 0:
        return f"job_id/restart_count: out of range (got {rec['job_id']!r}/{rec['restart_count']!r})"
    for t, n in rec["gpus"].items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            return f"gpus.{t}: must be a count >= 0 (got {n!r})"
    return ""


MAX_RECORD_BYTES = 1 << 20  # a hook record is a few hundred bytes


def _read_record(path: Path) -> tuple[str, str]:
    """(text, "") or ("", why not): opened without following links, at most MAX_RECORD_BYTES, UTF-8."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_RECORD_BYTES + 1)
    if len(data) > MAX_RECORD_BYTES:
        return "", f"larger than {MAX_RECORD_BYTES} bytes"
    try:
        return data.decode("utf-8"), ""
    except UnicodeDecodeError as e:
        return "", f"not UTF-8 text ({e.reason} at byte {e.start})"


def _move_bad(spool: Path, name: str) -> None:
    bad = spool / BAD_DIR
    bad.mkdir(exist_ok=True)
    dest = bad / name
    if dest.exists():
        dest = bad / f"{name}.{time.time_ns()}"
    os.replace(spool / name, dest)


def ingest(store: Store, spool: Path, round_id: int | None = None, now: float | None = None) -> IngestResult:
    """Read every record file in ``spool`` into ``store`` (see the module docstring). Never raises."""
    res = IngestResult()
    now = time.time() if now is None else now
    try:
        names = sorted(os.listdir(spool))
    except FileNotFoundError:
        return res  # no hook has written yet
    except OSError as e:
        res.error = f"cannot list the spool {spool}: {e}"
        _event(store, "hook-ingest-error", res.error, round_id)
        return res
    good: list[dict] = []
    good_names: list[str] = []
    skipped: list[str] = []
    for name in names:
        path = spool / name
        try:
            if name.startswith("."):
                if name.endswith(".tmp") and now - path.stat().st_mtime > STALE_TMP_SECONDS:
                    path.unlink()
                continue
            if not name.endswith(".json"):
                continue
            if path.is_symlink():  # never followed: a record is a plain file the hook wrote
                text, why = "", "a symbolic link, not a record file (not followed)"
            elif not path.is_file():
                continue
            else:
                text, why = _read_record(path)
            if not why:
                try:
                    rec = json.loads(text)
                    why = check_record(rec)
                except (ValueError, RecursionError) as e:
                    why = f"not JSON: {e}"
            if why:
                _move_bad(spool, name)
                res.bad.append(name)
                _event(store, "hook-record-bad", f"{name}: {why}; moved to {spool / BAD_DIR}", round_id,
                       data={"file": name, "why": why, "text": text[:2000]})
                continue
            if cpu_only(rec):
                skipped.append(name)
                continue
            good.append(rec)
            good_names.append(name)
        except OSError as e:
            res.error = f"{name}: {e}"
            _event(store, "hook-ingest-error", res.error, round_id)
    stored = _store(store, spool, good, good_names, res, round_id)
    if stored is None:
        return res
    good_names = stored
    res.read = len(good_names)
    res.cpu_only = len(skipped)
    for name in good_names + skipped:
        try:
            (spool / name).unlink()
        except FileNotFoundError:
            pass
        except OSError as e:
            res.error = f"cannot remove ingested {name}: {e}"
    if res.error:
        _event(store, "hook-ingest-error", res.error, round_id)
    return res


def _store(store: Store, spool: Path, good: list[dict], names: list[str], res: IngestResult,
           round_id: int | None) -> list[str] | None:
    """Upsert the batch; if the store refuses it, each record on its own, and a record it still refuses is
    quarantined (moved to bad/, a ``hook-record-quarantined`` event naming the file and the error). Returns the
    names stored, or None when none was and the database itself failed (nothing moved: the next round retries)."""
    try:
        store.upsert_job_records(good, names)
        return names
    except Exception as e:  # noqa: BLE001 - one record must not hold back the batch
        batch_error = f"{type(e).__name__}: {e}"
    if not good:  # nothing to blame but the store
        res.error = f"storing 0 records: {batch_error}"
        _event(store, "hook-ingest-error", res.error, round_id)
        return None
    stored: list[str] = []
    refused: list[tuple[str, str]] = []
    for rec, name in zip(good, names):
        try:
            store.upsert_job_records([rec], [name])
            stored.append(name)
        except sqlite3.Error as e:
            if isinstance(e, (sqlite3.IntegrityError, sqlite3.DataError)):  # the record's own values
                refused.append((name, f"{type(e).__name__}: {e}"))
                continue
            # the database itself (locked, disk full, read-only, closed), not the record
            res.error = f"storing {len(good)} records: {batch_error}; then {type(e).__name__}: {e}"
            _event(store, "hook-ingest-error", res.error, round_id)
            return stored or None
        except Exception as e:  # noqa: BLE001
            refused.append((name, f"{type(e).__name__}: {e}"))
    for name, why in refused:
        try:
            _move_bad(spool, name)
        except OSError as e:
            res.error = f"cannot quarantine {name}: {e}"
            continue
        res.bad.append(name)
        _event(store, "hook-record-quarantined", f"{name}: the store refused it ({why}); moved to {spool / BAD_DIR}",
               round_id, data={"file": name, "why": why})
    return stored


def _event(store: Store, kind: str, message: str, round_id: int | None, data: Any = None) -> None:
    try:
        store.event(kind, message, round_id=round_id, data=data)
    except Exception:  # noqa: BLE001 - the store itself failing is reported by the round
        pass


def ingest_round(store: Store, cfg: Config, round_id: int | None) -> IngestResult | None:
    """The round's one call: ingest ``cfg.spool_path`` (None when ``hooks.spool`` is empty). Never raises."""
    spool = getattr(cfg, "spool_path", None)
    if spool is None:
        return None
    try:
        return ingest(store, Path(spool), round_id)
    except Exception as e:  # noqa: BLE001 - ingestion never stops a round
        res = IngestResult(error=f"{type(e).__name__}: {e}")
        _event(store, "hook-ingest-error", res.error, round_id)
        return res
