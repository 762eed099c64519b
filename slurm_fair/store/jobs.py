"""The hooks' job records, and the job runs and GPU-seconds computed from them."""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..jobrecord import clean_text
from .base import StoreBase
from .codec import _dumps, _fields, _float, _int, _loads

# hook records written by the controller (PrologSlurmctld/EpilogSlurmctld) carry the job's GPU types
CONTROLLER_CONTEXTS = ("prolog_slurmctld", "epilog_slurmctld")
UNTYPED_GPU = "untyped"  # GPUs a record counts in gres/gpu but under no gres/gpu:<type>


@dataclass(frozen=True)
class JobRecord:
    """A row of ``job_records``: one hook record (jobrecord's format) as stored, ``gpus`` (type -> GPUs) and
    ``data`` (the record as the hook wrote it) decoded."""

    job_id: int
    restart_count: int
    event: str
    context: str
    node: str
    time: float
    start_time: float | None
    end_time: float | None
    account: str
    user: str
    partition: str
    cls: str  # the column ``class``
    job_name: str
    gpus: dict[str, int]
    gpu_count: int | None
    gpu_info: str
    exit_code: int | None
    exit_signal: int | None
    exit_status: int | None
    derived_exit_code: str | None
    file: str | None
    ingested: float
    data: Any
    submit_time: float | None


@dataclass(frozen=True)
class JobRun:
    """One run of a job (job id, restart count) from its controller hook records (:func:`job_runs`): ``end`` None
    while open, ``gpus`` type -> GPUs (``untyped``: counted only in gres/gpu), ``submit`` None when unknown."""

    job_id: int
    restart_count: int
    account: str
    cls: str  # the job's class
    start: float
    submit: float | None
    end: float | None
    gpus: dict[str, int]
    gpu_info: str | None


def job_runs(records: Iterable[Mapping]) -> list[JobRun]:
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
        runs.append(JobRun(job, restart, (s or e)["account"] or (e or s)["account"],
                           (s or e)["class"] or (e or s)["class"], float(start), min(subs) if subs else None,
                           None if end is None else float(end), gpus, (src or s or e)["gpu_info"]))
    nxt: dict[int, float] = {}
    for i in reversed(range(len(runs))):  # sorted by (job, restart): a later run of the same job closes an open one
        run = runs[i]
        if run.end is None and run.job_id in nxt:
            runs[i] = dataclasses.replace(run, end=max(run.start, nxt[run.job_id]))
        nxt[run.job_id] = run.start
    return runs


def gpu_seconds(runs: Iterable[JobRun], since: float | None, until: float) -> dict[str, dict[str, float]]:
    """GPU-seconds per account and GPU type received in [since, until] (since None = from the first run):
    each run's overlap with the window times its GPUs of each type; an open run counts up to ``until``."""
    out: dict[str, dict[str, float]] = {}
    for run in runs:
        lo = run.start if since is None else max(run.start, since)
        hi = min(until, run.end if run.end is not None else until)
        if hi <= lo or not run.gpus:
            continue
        per = out.setdefault(run.account, {})
        for t, n in run.gpus.items():
            per[t] = per.get(t, 0.0) + n * (hi - lo)
    return out


EVERY_CLASS = "*"  # class_run_times' key of the median over every class (no class is named "*" in a map line)


def class_run_times(runs: Iterable[JobRun]) -> dict[str, float]:
    """Class -> the median run time (seconds) of its jobs whose runs have all ended: a job's run time is the sum
    of its runs (a requeued job ran several); :data:`EVERY_CLASS` -> the median over every such job. What the
    type map estimates a job's end by when it has no time limit (``daemon/plan/typemap.run_estimate``). Classes
    with no such job are left out (none at all: empty)."""
    per_job: dict[int, tuple[str, float, bool]] = {}
    for r in runs:
        cls, total, open_ = per_job.get(r.job_id, (r.cls, 0.0, False))
        per_job[r.job_id] = (r.cls or cls, total + (r.end - r.start if r.end is not None else 0.0),
                             open_ or r.end is None)
    times: dict[str, list[float]] = {}
    for cls, total, open_ in per_job.values():
        if not open_ and cls and total > 0:
            times.setdefault(cls, []).append(total)
    out = {cls: statistics.median(xs) for cls, xs in times.items()}
    every = [x for xs in times.values() for x in xs]
    if every:
        out[EVERY_CLASS] = statistics.median(every)
    return out


class JobsMixin(StoreBase):
    """The ``job_records`` table."""

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

    def job_records(self, job_id: int | None = None) -> list[JobRecord]:
        """Stored hook records (of ``job_id``), ordered by job, restart, time."""
        where, args = ("job_id = ?", [job_id]) if job_id is not None else (None, [])
        return [JobRecord(**{**_fields(r), "gpus": _loads(r["gpus"]) or {}, "data": _loads(r["data"])})
                for r in self.db["job_records"].rows_where(
                    where, args, order_by="job_id, restart_count, time, context, node")]

    def job_runs(self, since: float | None = None) -> list[JobRun]:
        """Job runs from the controller hook records (see :func:`job_runs`); ``since``: only the jobs with a record
        written or a Slurm time at or after it, or a run without an end record (still running), so a window's
        reader does not decode the whole history."""
        sql = ("select job_id, restart_count, event, context, time, start_time, end_time, submit_time, account, "
               "class, gpus, gpu_count, gpu_info from job_records where context in (?, ?)")
        args: list[Any] = list(CONTROLLER_CONTEXTS)
        if since is not None:
            sql += (" and job_id in (select job_id from job_records where context in (?, ?) group by job_id having "
                    "max(max(time, coalesce(end_time, 0), coalesce(start_time, 0))) >= ? "
                    "or sum(event = 'start') > sum(event = 'end'))")
            args += [*CONTROLLER_CONTEXTS, float(since)]
        rows = self.db.execute(sql, args)
        cols = [d[0] for d in rows.description]
        return job_runs(dict(zip(cols, r)) for r in rows.fetchall())

    def received_gpu_seconds(self, since: float | None = None, until: float | None = None
                             ) -> dict[str, dict[str, float]]:
        """GPU-seconds per account and GPU type in [since, until] (default: all, up to now), from the hook
        records (see :func:`job_runs`, :func:`gpu_seconds`)."""
        return gpu_seconds(self.job_runs(), since, time.time() if until is None else until)
