"""The preemption state machine: a preempted job's typed record, its states, and every transition with the times
it sets. Pure (no I/O): :mod:`.store` keeps the rows, :mod:`.decide` decides the steps, :mod:`.carry` carries
them out; what a step does to the record is decided here only.

States (one record per preemption of a job)::

    signalled --grace over, still over its guarantee--> requeued          (closed)
    signalled --grace over, nobody waits any more-----> resolved          (closed)
    signalled --the job ended / requeued itself-------> gone              (closed)
    signalled --requeue refused, rule acts------------> held-back
    held-back --cancel time passed (rule "cancel")----> cancelled         (closed)
    (signal failed)                                     failed            (closed)
    (could never be requeued, rule acts)                held-back
    held-back --the demand it was for no longer waits--> resolved, or gone (its job ended too)  (closed)

``signalled`` and ``held-back`` are open: a signalled job waits for ``requeue_at`` = signal time + grace, a
held-back job holds its account's limits down until the demand it was held back for runs (``requeue_at``: when the rule cancels it, None =
never). Entering ``requeued`` sets ``requeued_at``; entering a closed state sets ``finished_at``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from ...errors import InputError

SIGNALLED, REQUEUED, RESOLVED, GONE, FAILED, HELD_BACK, CANCELLED = (
    "signalled", "requeued", "resolved", "gone", "failed", "held-back", "cancelled")
STATES = (SIGNALLED, REQUEUED, RESOLVED, GONE, FAILED, HELD_BACK, CANCELLED)
#: the ``preemptions`` table's columns, in the table's order (the order :meth:`PreemptionRecord.as_row` writes)
COLUMNS = ("id", "job_id", "account", "user", "gpu_type", "gpus", "signal", "reason", "state", "round_id", "created",
           "signalled_at", "requeue_at", "requeued_at", "finished_at", "steps", "target_type", "for_job")
OPEN_STATES = (SIGNALLED, HELD_BACK)  # a signalled job waits for its grace; a held-back job until the demand it owes runs


@dataclass(frozen=True)
class Step:
    """One time-stamped step of a preemption (``signalled``, ``requeued``, ``requeue-failed``...)."""

    time: float
    round_id: int | None
    step: str
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"time": self.time, "round_id": self.round_id, "step": self.step, "message": self.message}


@dataclass(frozen=True)
class PreemptionRecord:
    """One preemption (a row of the store's ``preemptions`` table). The first ten fields are what preemption
    decisions read (:mod:`.decide`); the rest is the record's history."""

    id: int | None
    job_id: int
    account: str
    gpu_type: str
    gpus: int
    state: str  # one of STATES
    signalled_at: float | None  # None when the signal failed or none was sent (held back)
    requeue_at: float | None  # signalled: signalled_at + grace; held-back: the cancel time (None = never)
    requeued_at: float | None = None
    target_type: str | None = None  # an upgrade move's faster type (None: a reclaim)
    user: str = ""
    signal: str = ""
    reason: str = ""
    round_id: int | None = None
    created: float | None = None
    finished_at: float | None = None
    steps: tuple[Step, ...] = field(default_factory=tuple)
    for_job: int | None = None  # a reclaim: the waiting job whose placement its GPUs complete

    @property
    def open(self) -> bool:
        return self.state in OPEN_STATES

    def to_row(self) -> dict[str, Any]:
        """The record as the store's row holds it (steps as JSON-able dicts; the store encodes them)."""
        row = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("id", "steps")}
        row["steps"] = [s.to_json() for s in self.steps]
        if self.id is not None:
            row["id"] = self.id
        return row

    def as_row(self) -> dict[str, Any]:
        """The record as a row of the table, its columns in the table's order and ``steps`` as JSON-able dicts:
        what ``explain --json`` and reports print."""
        row = self.to_row()
        row["id"] = self.id
        return {c: row[c] for c in COLUMNS}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "PreemptionRecord":
        """A stored row (``steps`` already decoded to a list); NULL type/GPUs of old rows read as "" / 0."""
        steps = tuple(Step(float(s.get("time") or 0.0), s.get("round_id"), str(s.get("step", "")),
                           str(s.get("message") or "")) for s in (row.get("steps") or []) if isinstance(s, Mapping))
        return cls(row.get("id"), int(row["job_id"]), row.get("account") or "", row.get("gpu_type") or "",
                   int(row.get("gpus") or 0), row["state"], row.get("signalled_at"), row.get("requeue_at"),
                   row.get("requeued_at"), row.get("target_type"), row.get("user") or "", row.get("signal") or "",
                   row.get("reason") or "", row.get("round_id"), row.get("created"), row.get("finished_at"), steps,
                   row.get("for_job"))


def signal_sent(*, job_id: int, account: str, gpu_type: str, gpus: int, signal: str, reason: str, grace: float,
                now: float, round_id: int | None = None, user: str = "", message: str = "",
                target_type: str | None = None, for_job: int | None = None) -> PreemptionRecord:
    """A checkpoint signal was sent: the preemption opens (``signalled``) until ``now + grace``; ``for_job``: the
    waiting job a reclaim frees GPUs for."""
    return PreemptionRecord(None, job_id, account, gpu_type, gpus, SIGNALLED, now, now + float(grace),
                            target_type=target_type, user=user, signal=signal, reason=reason, round_id=round_id,
                            created=now, steps=(Step(now, round_id, SIGNALLED, message or f"sent {signal}"),),
                            for_job=for_job)


def signal_failed(*, job_id: int, account: str, gpu_type: str, gpus: int, signal: str, reason: str, now: float,
                  message: str, round_id: int | None = None, user: str = "",
                  target_type: str | None = None) -> PreemptionRecord:
    """Sending the signal failed: the preemption is ``failed`` (closed) at once; ``message`` says why."""
    return PreemptionRecord(None, job_id, account, gpu_type, gpus, FAILED, None, None, target_type=target_type,
                            user=user, signal=signal, reason=reason, round_id=round_id, created=now, finished_at=now,
                            steps=(Step(now, round_id, "signal-failed", message),))


def held_back(*, job_id: int, account: str, gpu_type: str, gpus: int, reason: str, now: float, message: str,
              due: float | None, round_id: int | None = None, user: str = "",
              for_job: int | None = None) -> PreemptionRecord:
    """A job that cannot be requeued is held back (:mod:`.unrequeueable`): no signal, open until the demand
    it was held back for no longer waits (``for_job``: the waiting job of a claim; None: other accounts' waiting
    jobs on its type); ``due``: when the rule cancels it (None = never)."""
    return PreemptionRecord(None, job_id, account, gpu_type, gpus, HELD_BACK, None, due, reason=reason,
                            round_id=round_id, user=user, created=now, steps=(Step(now, round_id, HELD_BACK, message),),
                            for_job=for_job)


def advance(record: PreemptionRecord, step: str, message: str = "", *, state: str | None = None,
            round_id: int | None = None, now: float, due: Any = ...) -> PreemptionRecord:
    """The record after one more step; with ``state`` it moves there (``requeued`` sets requeued_at, a closed
    state sets finished_at). ``due`` (when given): the new requeue_at (a held-back job's cancel time)."""
    if state is not None and state not in STATES:
        raise InputError("state", state, f"must be one of {', '.join(STATES)}")
    changes: dict[str, Any] = {"steps": record.steps + (Step(now, round_id, step, message),)}
    if state is not None:
        changes["state"] = state
        if state == REQUEUED:
            changes["requeued_at"] = now
        if state not in OPEN_STATES:
            changes["finished_at"] = now
    if due is not ...:
        changes["requeue_at"] = due
    return dataclasses.replace(record, **changes)
