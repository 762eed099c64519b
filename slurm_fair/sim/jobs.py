"""The simulated Slurm's job records: :class:`SimJob` (a trace job once submitted: its request, its state, its
progress, what it held and for how long) and :class:`Run` (one run of it); and time limits in whole minutes, as
Slurm keeps them (:func:`whole_minutes`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError

EPS = 1e-9
BF_RESOLUTION = 60.0  # a running job past its expected end is expected to end this much later (bf_resolution)


@dataclass
class Run:
    """One run of a job: its start, its end (None while it runs), the GPU type and GPUs per node it held, and how
    it ended: ``"done"`` (its work was done) or ``"requeue"`` (None while it runs)."""

    start: float
    end: float | None
    gpu_type: str
    nodes: dict[str, int]
    how: str | None = None


@dataclass
class SimJob:
    job_id: int
    trace_id: str
    account: str
    cls: str
    gpus: int
    work: float
    submit: float
    requested: str | None  # typed request (after job_submit typing), None = untyped
    flex: bool = False
    state: str = "PENDING"  # PENDING, RUNNING, DONE
    reason: str = "Priority"  # why a pending job did not start at the last scheduling pass
    site_factor: int = 0
    priority: int = 0  # the multifactor priority without SiteFactor (fair-share and age; 0 under FIFO)
    done: float = 0.0  # steps done (kept over a requeue: the job checkpointed)
    eligible: float = 0.0  # a requeued job waits until then
    run_type: str | None = None
    nodes: dict[str, int] = field(default_factory=dict)  # node -> GPUs held
    started: float | None = None  # current run
    done_at_start: float = 0.0  # steps done when the current run started
    first_start: float | None = None
    end: float | None = None
    restarts: int = 0
    signals: int = 0
    busy: float = 0.0  # GPU-seconds held (finished runs)
    norm_busy: float = 0.0  # the same, each run's GPU-seconds times its type's speed relative to the slowest
    types_used: set[str] = field(default_factory=set)
    time_limit: float | None = None  # seconds, whole minutes (as Slurm keeps it); None = unlimited
    runs: list[Run] = field(default_factory=list)

    def expected_end(self, now: float) -> float:
        """When the backfill plan expects the current run to end: its latest start plus its time limit (a job
        past it: ``BF_RESOLUTION`` from now); inf without a limit."""
        if self.started is None or self.time_limit is None:
            return math.inf
        end = self.started + self.time_limit
        return end if end > now + EPS else now + BF_RESOLUTION


def whole_minutes(field_name: str, seconds: Any) -> float | None:
    """A time in seconds (a limit, a window), rounded up to whole minutes as Slurm keeps it; None or inf =
    unlimited."""
    if seconds is None:
        return None
    try:
        v = float(seconds)
    except (TypeError, ValueError):
        raise InputError(field_name, seconds, "must be a number of seconds > 0 or None (unlimited)") from None
    if not v > 0:
        raise InputError(field_name, seconds, "must be a number of seconds > 0 or None (unlimited)")
    return None if math.isinf(v) else math.ceil(v / 60.0 - 1e-9) * 60.0
