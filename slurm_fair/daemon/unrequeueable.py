"""Preemption cannot be dodged: what happens to a job preemption would take but Slurm cannot requeue. Pure.

A running job can escape the checkpoint-signal → grace → requeue flow (``daemon/preempt.py``) three ways: it was
submitted with ``--no-requeue`` (or the site runs ``JobRequeue=0``), its user runs ``scontrol update jobid=N
requeue=0`` during the grace (the requeue then fails: "Requested operation is presently disabled"), or it is an
interactive allocation (``salloc``: Slurm requeues only batch jobs, and ``scancel --batch`` has no batch shell to
signal). Such a job, when its account is over its guarantee on the job's GPU type and preemption would take it
(every other condition of a new signal holds, or its grace just ended with its account still over while someone
waits), is handled by ``preemption.unrequeueable``:

* ``hold-back`` (default): the job keeps running, and its account's limits on that type (and its untyped total)
  are lowered by the job's GPUs until it ends — its own pending jobs are held back by that many GPUs, so dodging
  gains the account nothing. Other requeue-able jobs of over-share accounts are preempted as usual in its place.
* ``cancel``: the same hold-back, then, ``preemption.cancel_grace`` seconds later, ``scancel`` if its account is
  still over its guarantee there while someone waits (else the hold-back ends: ``resolved``) — interactive
  allocations (``salloc``, ``srun``) too (issue 30: one absorbed the hold-back and was never cancelled).
* ``ignore``: the job is only listed among the skipped candidates (the behaviour before this rule).

Interactive allocations are counted as usage like any running job, and are never signalled.

The rule's state is a preemption record in state :data:`HELD_BACK` (open until the job ends: ``gone``), with its
steps and an event; ``explain`` lists it, and the round's details have the limits lowered per account.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from ..cluster.base import ANY_GPU, Job
from .. import preemptions as _states

HOLD_BACK, CANCEL, IGNORE = "hold-back", "cancel", "ignore"
HELD_BACK = _states.HELD_BACK  # a preemption record's state while the rule holds its account back


def why_not_requeueable(job: Job) -> str | None:
    """Why Slurm cannot requeue the job (None: it can)."""
    if not job.batch:
        return "an interactive allocation (salloc): Slurm requeues only batch jobs"
    if not job.requeue:
        return "not requeue-able (--no-requeue, scontrol update requeue=0, or JobRequeue=0)"
    return None


def acts(action: str) -> bool:
    """The rule does something (``hold-back`` or ``cancel``)."""
    return action in (HOLD_BACK, CANCEL)


def cancel_due(action: str, job: Job, since: float, cancel_grace: float) -> float | None:
    """When a job held back since ``since`` is cancelled (None: never — ``hold-back``); an interactive allocation
    too under ``cancel`` (issue 30)."""
    if action != CANCEL:
        return None
    return float(since) + float(cancel_grace)


def penalties(records: Iterable[tuple[int, str, str, int]], running: Mapping[int, Job]) -> dict[str, dict[str, int]]:
    """account -> type -> GPUs held back: ``records`` are the open held-back ones (job id, account, type, GPUs);
    a job that no longer runs holds nothing back (its record is closed as ``gone`` by the next decision)."""
    out: dict[str, dict[str, int]] = {}
    for job_id, account, gpu_type, gpus in records:
        job = running.get(job_id)
        if job is None or not job.running:
            continue
        n = int(job.gpus_allocated.get(gpu_type, gpus))
        row = out.setdefault(account, {})
        row[gpu_type] = row.get(gpu_type, 0) + n
    return {a: dict(sorted(r.items())) for a, r in sorted(out.items())}


def hold_back(limits: Mapping[str, Mapping[str, int]], held: Mapping[str, Mapping[str, int]],
              capacity: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """The limits with each held-back account's lowered: per type by its held-back GPUs there, and its untyped
    total (``ANY_GPU``) by all of them. A type or total the account has no limit on counts as the capacity (no
    limit = all of it). Never below 0. Accounts not in ``limits`` (not managed) are left out: nothing to lower."""
    out = {a: dict(v) for a, v in limits.items()}
    for a, per in held.items():
        if a not in out or not per:
            continue
        row = out[a]
        for t, n in per.items():
            base = row.get(t, capacity.get(t, 0))
            row[t] = max(0, int(base) - int(n))
        base_any = row.get(ANY_GPU, sum(int(c) for c in capacity.values()))
        row[ANY_GPU] = max(0, int(base_any) - sum(int(n) for n in per.values()))
    return out


def without_hold_back(limits: Mapping[str, Mapping[str, int]], held: Mapping[str, Mapping[str, int]]
                      ) -> dict[str, dict[str, int]]:
    """The limits before :func:`hold_back` lowered them (per type; what preemption enforces with hard caps: the
    held-back job already counts against its account there, so lowering the target too would take its GPUs twice)."""
    out = {a: dict(v) for a, v in limits.items()}
    for a, per in held.items():
        if a in out:
            for t, n in per.items():
                if t in out[a]:
                    out[a][t] = int(out[a][t]) + int(n)
    return out
