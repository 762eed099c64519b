"""Read the hooks' job start/end records (``slurm_fair/jobrecord.py``) from the spool into the store.

Called once per round, before planning (:func:`ingest_round`). Rules:

* Only ``*.json`` files whose name does not start with ``.`` are read (the hooks write hidden temp files
  and rename them, so a listed file is complete). Hidden ``*.tmp`` files older than an hour (a hook killed
  mid-write) are deleted.
* Who may write (issue 41): a record file must be owned by ``SlurmUser`` (the controller hooks run as it; read
  from ``scontrol show config`` once per daemon start, :func:`writers_of`), root (the node hooks) or the daemon's
  own user. The owner is checked on the entry (no link followed) and again on the opened file (``O_NOFOLLOW``,
  ``fstat``) before anything is read. A file of any other owner — a member of the spool's group forging a record
  for someone else's job — is moved to ``<spool>/bad/`` unread, with a ``hook-record-foreign-owner`` event naming
  the file, its owner's uid and the allowed uids. While SlurmUser cannot be read (slurmctld down), files of other
  owners wait in the spool (neither read nor moved) with a ``hook-ingest-error`` event.
* A file that is not a valid record (not JSON, wrong format version, a missing or mistyped field, a symbolic
  link, a file with more than one hard link) is moved to ``<spool>/bad/`` and reported as a ``hook-record-bad``
  event; it never stops the round.
* ``bad/`` is reached through folder descriptors: opened with ``O_DIRECTORY|O_NOFOLLOW`` (made 0750 if missing)
  and used only if it is a folder of the daemon's user; files are renamed into it relative to both folders. A
  ``bad`` that is a symbolic link, not a folder, or another user's is never used: the files to set aside stay
  in the spool, not ingested (nothing is lost, nothing moves out of the spool), with a
  ``hook-quarantine-refused`` event saying why.
* Per-file events (the kinds above, ``hook-record-quarantined`` and a file's ``hook-ingest-error``) are within a
  daily budget (:mod:`.event_budget`): the first ``EVENTS_PER_DAY`` of each kind a day one by one, then one
  ``<kind>-more`` event counting the rest; a reason is cut to ``MAX_WHY`` characters. 2 000 bad files wrote
  4.5 MB of events; now 46 kB.
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

import errno
import json
import math
import os
import sqlite3
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import Config
from .. import jobrecord
from ..cluster.base import Cluster
from ..cluster.errors import ClusterError
from ..store import Store
from .event_budget import EventBudget

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
    bad: list[str] = field(default_factory=list)  # files moved to bad/
    error: str = ""
    cpu_only: int = 0  # records of jobs Slurm allocated no GPU: removed, not stored
    left: list[str] = field(default_factory=list)  # files to set aside, left in the spool: bad/ refused

    def as_dict(self) -> dict[str, Any]:
        """The round's details: at most MAX_NAMES names of each list (``n_bad``, ``n_left``: how many)."""
        return {"read": self.read, "bad": self.bad[:MAX_NAMES], "n_bad": len(self.bad), "error": self.error,
                "cpu_only": self.cpu_only, "left": self.left[:MAX_NAMES], "n_left": len(self.left)}


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
MAX_WHY = 300  # characters of a reason in an event (a value in it is cut: a record's string may be 1 MB)
MAX_NAMES = 50  # bad file names a round's details list (the rest counted)


@dataclass(frozen=True)
class Writers:
    """Who may own a record file: root, the daemon's own user and ``SlurmUser`` (the controller hooks run as it;
    the node hooks as root). ``unknown``: why SlurmUser could not be read (slurmctld down at the round's start):
    files of any other owner then wait in the spool, neither read nor set aside."""

    uids: frozenset[int]
    named: str
    unknown: str = ""

    @classmethod
    def of(cls, slurm_user: tuple[str, int] | None, unknown: str = "") -> "Writers":
        me = os.geteuid()
        names = {0: "root (uid 0)", **({me: f"the daemon's user (uid {me})"} if me else {})}
        if slurm_user is not None:
            names[slurm_user[1]] = f"SlurmUser {slurm_user[0]} (uid {slurm_user[1]})"
        return cls(frozenset(names), ", ".join(names[u] for u in sorted(names)), unknown)


_BAD, _FOREIGN, _SKIP, _WAIT = "hook-record-bad", "hook-record-foreign-owner", "skip", "wait"


def _clip(text: str, n: int = MAX_WHY) -> str:
    return text if len(text) <= n else text[:n] + f"… ({len(text)} characters)"


def _open_record(dfd: int, name: str, writers: Writers) -> tuple[str, str, str, dict]:
    """(text, why, verdict, facts) of the spool entry ``name`` (``dfd``: the spool): verdict "" (read: ``text``),
    ``_BAD`` / ``_FOREIGN`` (set aside, ``why``), ``_SKIP`` (gone, or not a file), ``_WAIT`` (an owner not known
    to be allowed while SlurmUser is unknown). The owner is checked before anything is read: on the entry itself
    (no link followed), then on the opened file (O_NOFOLLOW, fstat: the file read is the file checked)."""
    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)

    def owner(uid: int) -> tuple[str, str, str, dict] | None:
        if uid in writers.uids:
            return None
        if writers.unknown:
            return "", f"owned by uid {uid}; SlurmUser unknown ({writers.unknown})", _WAIT, {}
        return ("", f"owned by uid {uid}, which may not write records (they may: {writers.named})", _FOREIGN,
                {"owner_uid": uid, "expected_uids": sorted(writers.uids)})

    verdict = owner(st.st_uid)
    if verdict:
        return verdict
    if stat.S_ISLNK(st.st_mode):  # never followed: a record is a plain file the hook wrote
        return "", "a symbolic link, not a record file (not followed)", _BAD, {}
    if not stat.S_ISREG(st.st_mode):
        return "", "", _SKIP, {}
    try:  # O_NONBLOCK: a FIFO swapped in after the check does not hang the round
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "", "a symbolic link, not a record file (not followed)", _BAD, {}
        raise
    with os.fdopen(fd, "rb") as fh:
        fst = os.fstat(fd)
        verdict = owner(fst.st_uid)
        if verdict:
            return verdict
        if not stat.S_ISREG(fst.st_mode):
            return "", "", _SKIP, {}
        if fst.st_nlink != 1:  # the hook writes a new file and renames it: one link; another is someone's link
            return "", f"{fst.st_nlink} hard links, a record file has one (not read)", _BAD, {}
        data = fh.read(MAX_RECORD_BYTES + 1)
    if len(data) > MAX_RECORD_BYTES:
        return "", f"larger than {MAX_RECORD_BYTES} bytes", _BAD, {}
    try:
        return data.decode("utf-8"), "", "", {}
    except UnicodeDecodeError as e:
        return "", f"not UTF-8 text ({e.reason} at byte {e.start})", _BAD, {}


class _Quarantine:
    """Moves spool files into ``<spool>/bad/``, by folder descriptors: ``bad`` is opened with
    O_DIRECTORY|O_NOFOLLOW (made 0750 if missing) and must be a folder of the daemon's user. Anything else there (a
    symbolic link, a file, another owner's folder) is refused: nothing is moved through it, the files stay in the
    spool (not ingested), and :attr:`refused` says why."""

    def __init__(self, spool: Path, dfd: int):
        self.spool, self.dfd = spool, dfd
        self.fd: int | None = None
        self.refused = ""

    def _open(self) -> bool:
        if self.fd is not None or self.refused:
            return self.fd is not None
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        where = self.spool / BAD_DIR
        try:
            try:
                fd = os.open(BAD_DIR, flags, dir_fd=self.dfd)
            except FileNotFoundError:
                try:
                    os.mkdir(BAD_DIR, 0o750, dir_fd=self.dfd)
                except FileExistsError:
                    pass  # made meanwhile: checked below like any other
                fd = os.open(BAD_DIR, flags, dir_fd=self.dfd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                is_link = stat.S_ISLNK(os.stat(BAD_DIR, dir_fd=self.dfd, follow_symlinks=False).st_mode)
                self.refused = f"{where} is {'a symbolic link' if is_link else 'not a folder'} (not followed)"
            else:
                self.refused = f"cannot open {where}: {e.strerror or e}"
            return False
        owner = os.fstat(fd).st_uid
        if owner != os.geteuid():
            os.close(fd)
            self.refused = f"{where} is owned by uid {owner}, not the daemon's user (uid {os.geteuid()})"
            return False
        self.fd = fd
        return True

    def move(self, name: str) -> bool:
        """Move ``name`` into bad/ (a new name if taken there); False (left in the spool) when bad/ is refused."""
        if not self._open():
            return False
        dest = name
        try:
            os.stat(dest, dir_fd=self.fd, follow_symlinks=False)
            dest = f"{name}.{time.time_ns()}"
        except FileNotFoundError:
            pass
        os.rename(name, dest, src_dir_fd=self.dfd, dst_dir_fd=self.fd)
        return True

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class _Run:
    """One ingest's spool, quarantine and event budget (per-file events; module docstring)."""

    def __init__(self, store: Store, spool: Path, dfd: int, round_id: int | None, now: float, res: IngestResult):
        self.store, self.spool, self.dfd, self.round_id, self.res = store, spool, dfd, round_id, res
        self.quarantine = _Quarantine(spool, dfd)
        self.budget = EventBudget(store, now, f"every file set aside is in {spool / BAD_DIR}", defer=True)

    def event(self, kind: str, message: str, data: Any = None) -> None:
        try:
            self.budget.event(kind, message, self.round_id, None, None, data)
        except Exception:  # noqa: BLE001 - the store itself failing is reported by the round
            pass

    def set_aside(self, name: str, kind: str, why: str, data: dict) -> None:
        """Move ``name`` to bad/ with a ``kind`` event naming it and why (left in the spool if bad/ is refused)."""
        why = _clip(why)
        if self.quarantine.move(name):
            self.res.bad.append(name)
            self.event(kind, f"{name}: {why}; moved to {self.spool / BAD_DIR}", {"file": name, "why": why, **data})
        else:
            self.res.left.append(name)
            self.event(kind, f"{name}: {why}; left in the spool, not ingested: {self.quarantine.refused}",
                       {"file": name, "why": why, "refused": self.quarantine.refused, **data})

    def finish(self) -> None:
        self.quarantine.close()
        if self.quarantine.refused:
            self.event("hook-quarantine-refused", f"{self.quarantine.refused}: {len(self.res.left)} file(s) left "
                       "in the spool, not ingested; make it a folder of the daemon's user (or remove it)")
        try:
            self.budget.flush()
        except Exception:  # noqa: BLE001
            pass


def ingest(store: Store, spool: Path, round_id: int | None = None, now: float | None = None,
           writers: Writers | None = None) -> IngestResult:
    """Read every record file in ``spool`` into ``store`` (see the module docstring); ``writers``: who may own a
    record (default: root and the daemon's user). Never raises."""
    res = IngestResult()
    now = time.time() if now is None else now
    try:
        dfd = os.open(spool, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return res  # no hook has written yet
    except OSError as e:
        res.error = f"cannot list the spool {spool}: {e}"
        _event(store, "hook-ingest-error", res.error, round_id)
        return res
    try:
        names = sorted(os.listdir(dfd))
    except OSError as e:
        res.error = f"cannot list the spool {spool}: {e}"
        _event(store, "hook-ingest-error", res.error, round_id)
        os.close(dfd)
        return res
    run = _Run(store, spool, dfd, round_id, now, res)
    try:
        _ingest(run, names, writers or Writers.of(None))
    finally:
        run.finish()
        os.close(dfd)
    return res


def _ingest(run: _Run, names: list[str], writers: Writers) -> None:
    store, spool, dfd, res, round_id = run.store, run.spool, run.dfd, run.res, run.round_id
    good: list[dict] = []
    good_names: list[str] = []
    skipped: list[str] = []
    waiting = 0
    for name in names:
        try:
            if name.startswith("."):
                if name.endswith(".tmp") and (run.budget.now - os.stat(name, dir_fd=dfd, follow_symlinks=False)
                                              .st_mtime > STALE_TMP_SECONDS):
                    os.unlink(name, dir_fd=dfd)
                continue
            if not name.endswith(".json"):
                continue
            text, why, verdict, facts = _open_record(dfd, name, writers)
            if verdict in (_SKIP, _WAIT):
                waiting += verdict == _WAIT
                continue
            if not verdict:
                try:
                    rec = json.loads(text)
                    why = check_record(rec)
                except (ValueError, RecursionError) as e:
                    why = f"not JSON: {e}"
                verdict = _BAD if why else ""
            if verdict:
                run.set_aside(name, verdict, why, facts or {"text": text[:2000]})
                continue
            if cpu_only(rec):
                skipped.append(name)
                continue
            good.append(rec)
            good_names.append(name)
        except FileNotFoundError:
            continue  # removed meanwhile
        except OSError as e:
            res.error = f"{name}: {e}"
            run.event("hook-ingest-error", res.error)
    if waiting:
        run.event("hook-ingest-error", f"{waiting} record file(s) of owners other than {writers.named} wait in the "
                  f"spool: SlurmUser could not be read ({writers.unknown}); the next round tries again")
    stored = _store(run, good, good_names)
    if stored is None:
        return
    res.read = len(stored)
    res.cpu_only = len(skipped)
    for name in stored + skipped:
        try:
            os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            pass
        except OSError as e:
            res.error = f"cannot remove ingested {name}: {e}"
    if res.error:
        _event(store, "hook-ingest-error", res.error, round_id)


def _store(run: _Run, good: list[dict], names: list[str]) -> list[str] | None:
    """Upsert the batch; if the store refuses it, each record on its own, and a record it still refuses is
    quarantined (moved to bad/, a ``hook-record-quarantined`` event naming the file and the error). Returns the
    names stored, or None when none was and the database itself failed (nothing moved: the next round retries)."""
    store, res, round_id = run.store, run.res, run.round_id
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
            run.set_aside(name, "hook-record-quarantined", f"the store refused it ({why})", {})
        except OSError as e:
            res.error = f"cannot quarantine {name}: {e}"
    return stored


def _event(store: Store, kind: str, message: str, round_id: int | None, data: Any = None) -> None:
    try:
        store.event(kind, message, round_id=round_id, data=data)
    except Exception:  # noqa: BLE001 - the store itself failing is reported by the round
        pass


def writers_of(cluster: Cluster | None) -> Writers:
    """Who may own a record on ``cluster``: root, the daemon's user and its ``SlurmUser`` (read once per backend);
    where it cannot be read, files of other owners wait (:class:`Writers`)."""
    read = getattr(cluster, "slurm_user", None)  # a stand-in cluster without it names no SlurmUser
    try:
        return Writers.of(read() if read is not None else None)
    except ClusterError as e:
        return Writers.of(None, unknown=_clip(str(e)))


def ingest_round(store: Store, cfg: Config, round_id: int | None, cluster: Cluster | None = None
                 ) -> IngestResult | None:
    """The round's one call: ingest ``cfg.spool_path`` (None when ``hooks.spool`` is empty), taking the record
    files of root, the daemon's user and ``cluster``'s SlurmUser (:func:`writers_of`). Never raises."""
    spool = getattr(cfg, "spool_path", None)
    if spool is None:
        return None
    try:
        return ingest(store, Path(spool), round_id, writers=writers_of(cluster))
    except Exception as e:  # noqa: BLE001 - ingestion never stops a round
        res = IngestResult(error=f"{type(e).__name__}: {e}")
        _event(store, "hook-ingest-error", res.error, round_id)
        return res
