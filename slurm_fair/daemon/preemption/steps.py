"""The steps a round's preemption decision is made of (:func:`.decide.decide`, :func:`.victims.signals`,
:func:`.unrequeueable.held_back_steps`, :func:`.upgrade.move_signals`), carried out by :mod:`.carry`: typed
records only."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Action:
    """One step for one job: a new signal or hold-back, or what becomes of an open preemption."""

    kind: str  # signal | requeue | resolve | gone | hold-back | cancel
    job_id: int
    account: str
    gpu_type: str
    gpus: int
    reason: str
    signal: str = ""  # for kind == "signal"
    record_id: int | None = None  # the preemption this step belongs to (requeue/resolve/gone)
    target_type: str | None = None  # an upgrade move: the type the job gets with its requeue
    due: float | None = None  # hold-back: when the job is cancelled (preemption.unrequeueable = cancel), else None
    for_job: int | None = None  # a reclaim: the waiting job whose placement the freed GPUs complete


@dataclass(frozen=True)
class Skip:
    """A running job of an over-share account that was considered and not signalled, and why."""

    job_id: int
    account: str
    gpu_type: str
    reason: str


@dataclass(frozen=True)
class Decision:
    """A round's steps, the candidates not signalled, and what the decision started from."""

    actions: tuple[Action, ...]
    skipped: tuple[Skip, ...]
    over: dict[str, dict[str, int]]  # account -> type -> GPUs in use above the limit (before this decision)
    waiting: dict[str, int]  # type -> GPUs that waiting accounts could use there (before this decision)

    def of(self, kind: str) -> list[Action]:
        return [a for a in self.actions if a.kind == kind]

