"""Job times from the hooks' job runs (``store.job_runs``): pure, no I/O.

* A job is **finished** when every run of it has ended; it belongs to a window when its last run *ended* in it.
* **Queue wait** = its first run's start − its submit time; **JCT** (job completion time) = its last run's end −
  its submit time. The submit time is Slurm's SubmitTime that the controller hooks recorded (the earliest of the
  job's records: a requeue may move it); a job whose records hold none (hooks older than the submit time, or
  scontrol did not answer) has no wait and no JCT and is counted in ``jobs`` but not in ``with_submit``.
  Slurm's times have one-second resolution; a wait is never below 0.
* **Run time** (``seconds``) = last end − first start (requeue waits included), what ``report`` showed before it
  knew submit times.
* A job's **GPU type** is that of its first run: the type it got GPUs of (several: joined with ``+``), ``untyped``
  for GPUs Slurm counted in ``gres/gpu`` only, ``?`` where the hooks could not read its GPUs; a job that got no GPU
  (read from Slurm) is not a GPU job and has no wait row.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

from ..stats import percentile
from ..store import JobRun

UNKNOWN_TYPE = "?"
NO_GPU = ""


def gpu_type_of(run: JobRun) -> str:
    """The GPU type a run got (module docstring): a type, ``a+b`` for several, ``?`` unknown, "" for no GPU."""
    gpus = run.gpus
    if isinstance(gpus, Mapping) and any(int(n) > 0 for n in gpus.values()):
        return "+".join(sorted(str(t) for t, n in gpus.items() if int(n) > 0))
    if isinstance(gpus, Mapping) and str(run.gpu_info or "").startswith("scontrol"):
        return NO_GPU  # Slurm answered: the job got no GPU
    return UNKNOWN_TYPE


@dataclass(frozen=True)
class FinishedJob:
    """One finished job: its runs' first start and last end, its submit time (None: not recorded)."""

    job_id: int
    account: str
    gpu_type: str  # see gpu_type_of
    submit: float | None
    start: float
    end: float
    runs: int

    @property
    def seconds(self) -> float:
        """Run time: first start to last end (requeue waits included)."""
        return self.end - self.start

    @property
    def wait(self) -> float | None:
        """Queue wait: first start − submit (None without a submit time)."""
        return None if self.submit is None else max(0.0, self.start - self.submit)

    @property
    def jct(self) -> float | None:
        """Job completion time: last end − submit (None without a submit time)."""
        return None if self.submit is None else max(0.0, self.end - self.submit)


def finished_jobs(runs: Iterable[JobRun], since: float | None, until: float | None) -> list[FinishedJob]:
    """The jobs whose runs have all ended, the last one in [since, until] (None: open), by job id."""
    by_job: dict[int, list[JobRun]] = {}
    for r in runs:
        by_job.setdefault(int(r.job_id), []).append(r)
    out = []
    for jid, rs in sorted(by_job.items()):
        if any(r.end is None for r in rs):
            continue
        end = max(float(r.end) for r in rs if r.end is not None)
        if (since is not None and end < since) or (until is not None and end > until):
            continue
        first = min(rs, key=lambda r: (r.start, r.restart_count))
        subs = [float(r.submit) for r in rs if r.submit is not None]
        out.append(FinishedJob(job_id=jid, account=str(rs[-1].account), gpu_type=gpu_type_of(first),
                               submit=min(subs) if subs else None, start=float(first.start), end=end,
                               runs=len(rs)))
    return out


@dataclass(frozen=True)
class WaitStats:
    """Queue wait and JCT of the finished GPU jobs of one account and GPU type (seconds; None: no job with a
    submit time)."""

    jobs: int  # finished in the window
    with_submit: int  # of them, those with a submit time: the numbers below are over these
    wait_mean_s: float | None
    wait_p50_s: float | None
    wait_p95_s: float | None
    wait_max_s: float | None
    jct_mean_s: float | None
    run_mean_s: float | None  # mean run time (first start to last end) of all ``jobs``

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def wait_stats(jobs: Iterable[FinishedJob]) -> dict[str, dict[str, WaitStats]]:
    """account -> GPU type -> :class:`WaitStats` of the finished GPU jobs (jobs that got no GPU are left out)."""
    groups: dict[tuple[str, str], list[FinishedJob]] = {}
    for j in jobs:
        if j.gpu_type != NO_GPU:
            groups.setdefault((j.account, j.gpu_type), []).append(j)
    out: dict[str, dict[str, WaitStats]] = {}
    for (a, t), js in sorted(groups.items()):
        waits = [j.wait for j in js if j.wait is not None]
        jcts = [j.jct for j in js if j.jct is not None]
        out.setdefault(a, {})[t] = WaitStats(
            jobs=len(js), with_submit=len(waits),
            wait_mean_s=statistics.fmean(waits) if waits else None, wait_p50_s=percentile(waits, 0.5),
            wait_p95_s=percentile(waits, 0.95), wait_max_s=max(waits) if waits else None,
            jct_mean_s=statistics.fmean(jcts) if jcts else None,
            run_mean_s=statistics.fmean(j.seconds for j in js))
    return out
