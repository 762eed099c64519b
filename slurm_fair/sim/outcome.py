"""What a simulation did to jobs, against a baseline run of the same trace (issue 28's benchmark). Pure.

* :func:`job_deltas` — per job (by trace id), its JCT here minus its JCT in the baseline (Slurm alone): the jobs
  that gained or lost most are where a policy's mean hides its cost.
* :func:`restarts` — over a run's requeues: how many, and how many restarted on the GPU type they were requeued
  from (a reclaim that gave the GPUs back to a job of the same kind) — with, where the preemption record names the
  job it was for, whether that job had started by the victim's restart.
* :class:`Ratios` — one trace's mean JCT, makespan, p95 and max ρ over the baseline's (issue 39's goals on them:
  :mod:`.benchmark`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from .jobs import Run


@dataclass(frozen=True)
class JobDelta:
    """One job's JCT in a run against the baseline (seconds; None where it did not finish)."""

    job: str
    account: str
    cls: str
    gpus: int
    base_jct: float | None
    jct: float | None
    base_types: tuple[str, ...]
    types: tuple[str, ...]
    restarts: int

    @property
    def delta(self) -> float | None:
        if self.base_jct is None or self.jct is None:
            return None
        return self.jct - self.base_jct


def job_deltas(base_rows: Iterable[Mapping], rows: Iterable[Mapping]) -> list[JobDelta]:
    """Per job in both runs (``SimResult.job_rows``, matched on ``id``), sorted by delta, largest loss first (jobs
    without a delta last)."""
    base = {str(r["id"]): r for r in base_rows}
    out = []
    for r in rows:
        b = base.get(str(r["id"]))
        if b is None:
            continue
        out.append(JobDelta(str(r["id"]), str(r["account"]), str(r["class"]), int(r["gpus"]), b.get("jct"),
                            r.get("jct"), tuple(b.get("types") or ()), tuple(r.get("types") or ()),
                            int(r.get("restarts") or 0)))
    return sorted(out, key=lambda d: (d.delta is None, -(d.delta or 0.0), d.job))


def extremes(deltas: Sequence[JobDelta], n: int = 5) -> tuple[list[JobDelta], list[JobDelta]]:
    """The ``n`` jobs that lost most (delta > 0, largest first) and the ``n`` that gained most (delta < 0,
    largest gain first)."""
    known = [d for d in deltas if d.delta is not None]
    lost = [d for d in sorted(known, key=lambda d: -d.delta) if d.delta > 0][:n]
    gained = [d for d in sorted(known, key=lambda d: d.delta) if d.delta < 0][:n]
    return lost, gained


@dataclass(frozen=True)
class Restarts:
    """A run's requeues. ``same_type``: requeues whose next run was on the type it was requeued from;
    ``same_type_before_claimant``: of those, the ones whose restart came while the job the requeue was for had not
    started yet (only where the record names that job: ``known_claimant`` requeues)."""

    jobs: int
    requeues: int
    same_type: int
    same_type_before_claimant: int
    known_claimant: int
    most_per_job: int

    @property
    def per_job(self) -> float:
        return self.requeues / self.jobs if self.jobs else 0.0

    @property
    def same_type_share(self) -> float:
        return self.same_type / self.requeues if self.requeues else 0.0


def restarts(runs: Mapping[str, Sequence[Run]], first_start: Mapping[str, float | None],
             claimant: Mapping[tuple[str, float], str] | None = None) -> Restarts:
    """``runs``: job -> its runs in time order (``SimJob.runs``); ``first_start``: job -> its first start (None: never started);
    ``claimant``: (victim job, requeue time rounded to 6 decimals) -> the job the requeue was for, where recorded."""
    claimant = claimant or {}
    requeues = same = before = known = most = 0
    for job, rs in runs.items():
        n = 0
        for a, b in zip(rs, rs[1:]):
            if a.how != "requeue":
                continue
            n += 1
            if a.gpu_type != b.gpu_type:
                continue
            same += 1
            who = claimant.get((job, round(a.end, 6))) if a.end is not None else None
            if who is not None:
                known += 1
                s = first_start.get(who)
                if s is None or s > b.start:
                    before += 1
        n += sum(1 for r in rs[-1:] if r.how == "requeue")  # requeued and not restarted (yet)
        requeues += n
        most = max(most, n)
    return Restarts(len(runs), requeues, same, before, known, most)


@dataclass(frozen=True)
class Ratios:
    """One seed's (or window's) ratios to the baseline on the same trace."""

    seed: str
    mean_jct: float | None
    makespan: float | None
    p95_jct: float | None
    max_rho: float | None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None
