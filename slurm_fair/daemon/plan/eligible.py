"""Demand is what could start. Pure.

A pending job that cannot start now whatever slurm-fair does — held (``--hold``, ``scontrol hold``), waiting on a
dependency, not before its begin time, in a reservation it cannot use now, or held back for any reason outside the
allow-list of what free GPUs or slurm-fair's limits decide (``Priority``, ``Resources``, ``AssocGrpGRES`` …: a
partition's time limit, a QOS's MaxWall or GPU limit, a job array's task limit, bad constraints; issue 30) — is
**not demand**: it gets no share
in the policy's problem, claims no GPUs, earns no SiteFactor band for its account and triggers no preemption.
Counting it would hand GPUs to work that never starts (a held flood took 2 of 16 GPUs on the testbed) and, with
preemption on, requeue other accounts' running jobs for nothing. The job counts again from the first round after
Slurm would start it (``scontrol release``, its dependency met, its begin time passed). Each round settles the
rest on the whole snapshot (:mod:`.binding`, issue 41): a begin time due before the next round is demand whatever
the job's restart count (a requeued job's, 121 s ahead, is; one its owner moved a year ahead is not), and a job
pending on an association limit is demand only while the limit that binds it is slurm-fair's own — not the site's
(``v100=0`` kept as an upper bound), nor a parent account's (``site-limit``).

Why a job is blocked is read once, by the backend, from Slurm's fields (:mod:`slurm_fair.cluster.blocked`, into
``Job.blocked``); a job record without it (the simulator's, a test's) falls back to Slurm's reason alone.
"""

from __future__ import annotations

from typing import Iterable

from ...cluster.base import Job
from ...cluster.blocked import describe, job_blocked_kind

__all__ = ["blocked_kind", "startable", "counted", "not_demand", "describe"]


def blocked_kind(job: Job) -> str:
    """Why a pending job cannot start now (``held``, ``dependency``, ``begin-time``, ``reservation``,
    ``cannot-start``), ``""`` when it could or when it is not pending (:func:`.blocked.job_blocked_kind`: a light
    module, read by ``why`` without the planning code)."""
    return job_blocked_kind(job)


def startable(job: Job) -> bool:
    """A pending job Slurm could start once GPUs and limits allow."""
    return job.pending and not blocked_kind(job)


def counted(job: Job) -> bool:
    """The job is demand: it runs, or it is pending and could start."""
    return job.running or startable(job)


def not_demand(jobs: Iterable[Job]) -> dict[str, dict[str, int]]:
    """account -> why (``held`` …) -> GPUs of its pending GPU jobs that are not demand, for the round's record and
    ``explain``."""
    out: dict[str, dict[str, int]] = {}
    for j in jobs:
        kind = blocked_kind(j)
        if kind and j.gpus > 0:
            row = out.setdefault(j.account, {})
            row[kind] = row.get(kind, 0) + j.gpus
    return {a: dict(sorted(r.items())) for a, r in sorted(out.items())}
