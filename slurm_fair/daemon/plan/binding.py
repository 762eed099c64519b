"""Demand is what can start, settled once per round on the whole snapshot (issue 41). Pure.

Two pending jobs look like demand from Slurm's reason alone and are not:

* **A begin time that is not due.** A job on ``BeginTime`` (or with an ``eligible_time`` ahead) counts only when
  its begin time comes before the next round (``taken_at + daemon.period``), whatever its restart count: a job
  Slurm requeued (slurm-fair's reclaim, a node failure) gets a begin time ``cred_expire`` + 1 s ahead (121 s by
  default), due within a round, and stays its account's demand; one whose owner moved it a year ahead
  (``scontrol update jobid=N StartTime=now+365days``) claims nothing until the round before it. A ``BeginTime`` job whose begin time
  Slurm does not give is **not due**: every Slurm layout gives ``eligible_time``, and a job that cannot be placed
  in time is the one an attacker would use — at worst a genuine job counts one round late.
* **An association limit that is not slurm-fair's.** A job pending on ``AssocGrpGRES`` / ``AssocGrpTRES`` counts
  only while the limit that binds it is one slurm-fair wrote, which the plan can lift. The same holds for a job
  Slurm shows on ``Resources``, ``Priority`` or ``None``: Slurm names one reason, and 24.11 shows ``Resources``
  while no GPU of the job's type is free though a limit holds it (measured on the testbed, issue 41). When its account's site
  limit (:func:`site_bounds`: one slurm-fair never wrote or that someone changed since, or a site limit recorded
  before slurm-fair managed the account and kept as an upper bound, e.g. ``v100=0``) or any limit of a parent
  account (slurm-fair never limits parents) would hold the job by itself, the job is :data:`SITE_LIMIT`: no
  share, no claim, no SiteFactor band, no preemption for it. A QOS's limit has reasons of its own
  (``QOSGrpGRES`` …) and is never demand (``cluster/blocked.py``). A limit binds a job when the GPUs its
  association (or the parent's subtree) holds now plus the job's request pass it: per type for a typed request
  (every listed type for a multi-type one), and the untyped total (``gres/gpu``) for any request. When no limit
  binds by this count (Slurm's reason lags a round, or a limit just changed), the job counts.

:func:`settle` returns the snapshot with each job's ``blocked`` settled; the round runs it on the snapshot it
takes, before anything reads it (``daemon/round.py``), so shares, claims, SiteFactors, preemption and the
round's record all see the same demand.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping

from ...cluster.base import ANY_GPU, Job, Snapshot
from ...cluster.blocked import BEGIN_TIME, DEMAND_REASONS, SITE_LIMIT, job_blocked_kind, limit_binds

Limits = Mapping[str, Mapping[str, int]]  # account -> key (type or ANY_GPU) -> GPUs


def site_bounds(current: Limits, written: Limits, recorded: Limits) -> dict[str, dict[str, int]]:
    """account -> key -> the least site limit that holds its jobs: each GPU limit in Slurm now that is not as
    slurm-fair last wrote it (``written``; one it never wrote, or one someone changed since), and each recorded
    site limit (``recorded``: what the account had before slurm-fair first managed it, kept as an upper bound in
    ``limits.site_limits = "adopt"``, left alone in ``"respect"``) — the smaller where both are set."""
    out: dict[str, dict[str, int]] = {}
    for a, lim in current.items():
        mine = written.get(a, {})
        for k, v in lim.items():
            if k not in mine or int(mine[k]) != int(v):
                out.setdefault(a, {})[k] = int(v)
    for a, lim in recorded.items():
        row = out.setdefault(a, {})
        for k, v in lim.items():
            row[k] = min(int(v), row[k]) if k in row else int(v)
    return {a: row for a, row in out.items() if row}


def _held(jobs: Iterable[Job]) -> dict[str, dict[str, int]]:
    """account -> key -> GPUs its running jobs hold (per type, and ANY_GPU: the total)."""
    out: dict[str, dict[str, int]] = {}
    for j in jobs:
        if not j.running:
            continue
        row = out.setdefault(j.account, {})
        alloc = dict(j.gpus_allocated) or ({j.gpu_type: j.gpus} if j.gpu_type else {})
        for t, n in alloc.items():
            row[t] = row.get(t, 0) + int(n)
        row[ANY_GPU] = row.get(ANY_GPU, 0) + (sum(int(n) for n in alloc.values()) or j.gpus)
    return out


def _ancestors(account: str, parent: Mapping[str, str]) -> list[str]:
    out: list[str] = []
    a = parent.get(account, "")
    while a and a not in out and a != account:
        out.append(a)
        a = parent.get(a, "")
    return out


@dataclass(frozen=True)
class Holders:
    """What the association limits of a snapshot hold (made once per round, :meth:`of`): per account, the GPUs
    its running jobs hold; its ancestors; each ancestor's limits and the GPUs its whole subtree holds."""

    held: dict[str, dict[str, int]]
    ancestors: dict[str, list[str]]
    limits: dict[str, dict[str, int]]
    subtree: dict[str, dict[str, int]]

    @classmethod
    def of(cls, snapshot: Snapshot) -> "Holders":
        held = _held(snapshot.jobs)
        parent = {a.name: a.parent for a in snapshot.accounts}
        names = set(parent) | set(held)
        anc = {a: _ancestors(a, parent) for a in names}
        subtree: dict[str, dict[str, int]] = {}
        for a in names:
            for p in anc[a]:
                row = subtree.setdefault(p, {})
                for k, n in held.get(a, {}).items():
                    row[k] = row.get(k, 0) + n
        for p in list(subtree):
            for k, n in held.get(p, {}).items():
                subtree[p][k] = subtree[p].get(k, 0) + n
        return cls(held, anc, {a.name: dict(a.limits) for a in snapshot.accounts}, subtree)


def site_holds(job: Job, holders: Holders, bounds: Limits) -> bool:
    """The job waits (on ``AssocGrpGRES`` / ``AssocGrpTRES``, or a reason of :data:`DEMAND_REASONS` Slurm shows in its
    place) on an association limit that is not slurm-fair's: its account's site limit (``bounds``,
    :func:`site_bounds`) or a parent account's limit would hold it by itself."""
    if not job.pending or (job.reason or "").strip() not in DEMAND_REASONS or job.gpus <= 0:
        return False
    if limit_binds(bounds.get(job.account, {}), holders.held.get(job.account, {}), job):
        return True
    return any(limit_binds(holders.limits.get(p, {}), holders.subtree.get(p, {}), job)
               for p in holders.ancestors.get(job.account, []))


def begin_due(job: Job, due_by: float) -> bool:
    """A pending job held only by its begin time, due by ``due_by`` (the next round); a begin time Slurm does
    not give is not due."""
    return job.begin_time is not None and float(job.begin_time) <= due_by


def settle(snapshot: Snapshot, due_by: float, bounds: Limits) -> Snapshot:
    """The snapshot with each pending job's ``blocked`` settled (see the module docstring): a begin time due by
    ``due_by`` is demand (``""``), one later or unknown is :data:`BEGIN_TIME`; a job an association limit that is
    not slurm-fair's holds (:func:`site_holds`) is :data:`SITE_LIMIT`."""
    jobs = []
    holders = Holders.of(snapshot)
    for j in snapshot.jobs:
        kind = job_blocked_kind(j)
        new = kind
        if kind == BEGIN_TIME or (not kind and j.pending and j.begin_time is not None and j.begin_time > due_by):
            new = "" if begin_due(j, due_by) else BEGIN_TIME
        elif not kind and site_holds(j, holders, bounds):
            new = SITE_LIMIT
        jobs.append(replace(j, blocked=new) if new != j.blocked else j)
    return replace(snapshot, jobs=tuple(jobs))


def settle_round(snapshot: Snapshot, period: float, written: Limits, recorded: Limits) -> Snapshot:
    """:func:`settle` as a round (and ``explain``) runs it: begin times due within ``period`` seconds of the
    snapshot, the site's limits from the accounts' limits now, what slurm-fair wrote (``written``) and the site
    limits recorded before it managed each account (``recorded``)."""
    current = {a.name: dict(a.limits) for a in snapshot.accounts}
    return settle(snapshot, snapshot.taken_at + float(period), site_bounds(current, written, recorded))
