"""Why a pending job cannot start now whatever slurm-fair does: held, waiting on a dependency, not before its
begin time, or in a reservation it cannot use now. Pure; the backends fill ``Job.blocked`` with it from Slurm's
own fields, the same in both JSON layouts (22.05 ``openapi/v0.0.38``, 24.11 ``data_parser/v0.0.42``) and in
pyslurm's legacy job records.

The rule (first match wins; ``""`` = the job could start once GPUs and limits allow):

* :data:`HELD` — Slurm's reason ``JobHeldUser`` / ``JobHeldAdmin`` (``--hold``, ``scontrol hold``), or the
  24.11 ``hold`` flag, or priority 0 while pending (Slurm gives every job it may start a priority >= 1; a hold
  sets it to 0, and 22.05's JSON has no ``hold`` field);
* :data:`DEPENDENCY` — reason ``Dependency`` / ``DependencyNeverSatisfied``, or a ``dependency`` string that
  still has an ``(unfulfilled)`` or ``(failed)`` part (before slurmctld's next pass updates the reason);
* :data:`BEGIN_TIME` — reason ``BeginTime``, or an ``eligible_time`` (the ``--begin`` time; 0 for a held job)
  after ``now``;
* :data:`RESERVATION` — reason ``Reservation`` (its reservation has not started), ``ReservationDeleted``, or
  ``ReqNodeNotAvail`` for a job submitted into a reservation (``resv_name``) — its reserved nodes cannot serve
  it now.

* :data:`SITE_LIMIT` — never from Slurm's fields alone: a round gives it to a job pending on an association
  limit (``AssocGrpGRES`` / ``AssocGrpTRES``) when the limit that binds is not slurm-fair's own — the site's (one
  it set, or one slurm-fair keeps as an upper bound, e.g. ``v100=0``) or a parent account's
  (``daemon/plan/binding.py``, issue 41);

* :data:`CANNOT_START` — any other reason outside the allow-list of what GPUs or slurm-fair could change (issue
  30): ``None`` / empty (not yet evaluated), ``Priority``, ``Resources``, and slurm-fair's own limits
  (``AssocGrpGRES``, ``AssocGrpTRES``). ``PartitionTimeLimit``, ``QOSMaxWallDurationPerJobLimit``,
  ``AssocMaxGRESPerJob``, ``JobArrayTaskLimit``, ``BadConstraints``, a QOS's or a down partition's or node's
  reason …: free GPUs would not start such a job (four 2-GPU jobs over their QOS's MaxWall once held six V100s
  idle for everyone on the testbed).

Only the allow-list is demand. A begin time is demand once it is due within a round (the round settles it,
``daemon/plan/binding.py``): whatever the job's restart count — a requeued job's begin time (Slurm sets it
``cred_expire`` + 1 s ahead, 121 s by default) is due within a round, one its owner moved a year ahead is not.
"""

from __future__ import annotations

from typing import Any, Mapping

from .base import ANY_GPU

HELD = "held"
DEPENDENCY = "dependency"
BEGIN_TIME = "begin-time"
RESERVATION = "reservation"
CANNOT_START = "cannot-start"
SITE_LIMIT = "site-limit"
KINDS = (HELD, DEPENDENCY, BEGIN_TIME, RESERVATION, CANNOT_START, SITE_LIMIT)
# Pending reasons of a job its account's GrpTRES limit holds back (Slurm 22.05 and 24.11 name GPU limits so).
LIMIT_REASONS = ("AssocGrpGRES", "AssocGrpTRES")
# the pending reasons of a job free GPUs (or slurm-fair's own limits) would start: everything else is not demand
DEMAND_REASONS = ("", "None", "Priority", "Resources") + LIMIT_REASONS

_HELD_REASONS = ("JobHeldUser", "JobHeldAdmin", "JobHeld")
_DEPENDENCY_REASONS = ("Dependency", "DependencyNeverSatisfied")
_RESERVATION_REASONS = ("Reservation", "ReservationDeleted")


def by_reason(reason: str) -> str:
    """The part of the rule that needs only Slurm's reason (for a job record that has nothing else)."""
    r = (reason or "").strip()
    if r.startswith(_HELD_REASONS):
        return HELD
    if r.startswith(_DEPENDENCY_REASONS):
        return DEPENDENCY
    if r.startswith("BeginTime"):
        return BEGIN_TIME
    if r in _RESERVATION_REASONS:
        return RESERVATION
    if r.startswith("ReqNodeNotAvail"):
        return ""  # decided with the job's reservation (blocked_reason); else below
    return "" if r in DEMAND_REASONS else CANNOT_START


def blocked_reason(*, state: str, reason: str, priority: int | None = None, hold: bool = False,
                   dependency: str = "", eligible_time: int | None = None, reservation: str = "",
                   now: float | None = None) -> str:
    """Why a pending job cannot start now (one of :data:`KINDS`), ``""`` when it could; always ``""`` for a job
    that is not pending. ``now``: the snapshot's time (None: a future ``eligible_time`` is not checked)."""
    if state != "PENDING":
        return ""
    r = (reason or "").strip()
    kind = by_reason(r)
    if kind:
        return kind
    if hold or priority == 0:
        return HELD
    dep = dependency or ""
    if "(unfulfilled)" in dep or "(failed)" in dep:
        return DEPENDENCY
    if now is not None and eligible_time and eligible_time > now:
        return BEGIN_TIME
    if reservation and r.startswith("ReqNodeNotAvail"):
        return RESERVATION
    if r.startswith("ReqNodeNotAvail"):
        return CANNOT_START  # the nodes it asks for are down, drained or reserved: free GPUs would not start it
    return ""


def describe(kind: str, reason: str = "") -> str:
    """A plain sentence for ``explain``: why such a job is not demand."""
    what = {
        HELD: "it is held (scontrol release starts counting it)",
        DEPENDENCY: "it waits on a dependency",
        BEGIN_TIME: "its begin time has not come",
        RESERVATION: "its reservation cannot serve it now",
        CANNOT_START: "Slurm would not start it on free GPUs (a partition, QOS or job limit, a constraint, nodes "
                      "it asks for)",
        SITE_LIMIT: "the association limit that holds it is the site's or a parent account's, not slurm-fair's",
    }.get(kind, kind)
    tail = f" (Slurm reason {reason})" if reason else ""
    return (f"not counted as demand: {what}{tail} — no share, no claim, no SiteFactor and no preemption is made "
            "for it until it could start")


def job_blocked_kind(job: Any) -> str:
    """Why a pending ``Job`` cannot start now (one of :data:`KINDS`), ``""`` when it could or when it is not
    pending: what the backend read into ``Job.blocked`` (and the round settled: a begin time due within a round
    is demand, ``daemon/plan/binding.py``). A job whose begin time the backend has read (``Job.begin_time`` set)
    has its whole verdict in ``blocked``; a record without it (a test's) falls back to Slurm's reason alone —
    ``BeginTime`` with no known time is not demand, whatever the restart count (issue 41: a requeued job's owner
    can move its begin time a year ahead)."""
    if not job.pending:
        return ""
    if job.blocked or job.begin_time is not None:
        return job.blocked
    return by_reason(job.reason)


def limit_binds(limits: Mapping[str, int], held: Mapping[str, int], job: Any) -> bool:
    """A GPU limit in ``limits`` (type or ``ANY_GPU`` -> GPUs) would hold the job by itself, its association
    holding ``held`` (the same keys): per type for a typed request (every listed type for a multi-type one), the
    untyped total for any (``daemon/plan/binding.py``; here so that ``why`` uses it without the planning code)."""
    def over(k: str) -> bool:
        return k in limits and held.get(k, 0) + job.gpus > int(limits[k])
    if over(ANY_GPU):
        return True
    types = [t for t in (job.gpu_type or "").split(",") if t]
    return bool(types) and all(over(t) for t in types)
