"""What a simulation's jobs held, run by run, and its realized fairness (issue 39 item 1). Pure.

* :func:`job_runs` — one :class:`~slurm_fair.fairness.realized.Run` per run of a simulated job (``SimJob.runs``;
  a requeued or moved job has several, a job that never started one row without type, start and end), in trace
  time from the first submit, as ``SimResult.job_rows`` counts it;
* :func:`realized_record` — the realized fairness of those runs, every episode and hour bucket (what
  ``benchmarks/vs_slurm.py`` measures), and :func:`realized_of` its summary (``simulate --json``'s ``realized``):
  the accounts' weights (their Shares, 0 counting as 1, as the daemon's problem weighs them), the cluster's GPUs per
  type, the classes' speeds relative to their slowest type of the cluster, over [0, the simulated time];
* :func:`runs_csv_rows` — the rows of ``simulate --runs-csv`` (:data:`RUNS_CSV_COLUMNS`, in that order).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from ..fairness.realized import Realized, RealizedSummary, Run, realized, speeds_from_throughput, summarize
from .jobs import SimJob

RUNS_CSV_COLUMNS = ("policy", "id", "account", "class", "gpus", "submit", "type", "start", "end", "ended")


def job_runs(jobs: Iterable[SimJob], start: float) -> tuple[Run, ...]:
    """Every run of ``jobs`` (in their order, each job's runs in time order), times less ``start``; ``ended``:
    the run's work was done (``Run.how == "done"``)."""
    out: list[Run] = []
    for j in jobs:
        base = (j.trace_id, j.account, j.cls, int(j.gpus), j.submit - start)
        if not j.runs:
            out.append(Run(*base, None, None, None, False))
        for r in j.runs:
            out.append(Run(*base, r.gpu_type, r.start - start, None if r.end is None else r.end - start,
                           r.how == "done"))
    return tuple(out)


def weights(accounts: Mapping[str, Any], runs: Sequence[Run]) -> dict[str, float]:
    """Account -> weight: its Shares (0 counts as 1), and 1 for an account of ``runs`` not in ``accounts``."""
    out = {a: float(s) if s else 1.0 for a, s in accounts.items()}
    for r in runs:
        out.setdefault(r.account, 1.0)
    return out


def realized_record(runs: Sequence[Run], accounts: Mapping[str, Any], capacity: Mapping[str, int],
                    throughput: Mapping[str, Mapping[str, float]], t1: float) -> Realized | None:
    """The realized fairness of ``runs`` over [0, ``t1``], every episode and hour bucket (None when ``t1`` is 0:
    nothing simulated)."""
    if t1 <= 0:
        return None
    return realized(runs, weights(accounts, runs), capacity, speeds_from_throughput(throughput, capacity), 0.0, t1)


def realized_of(runs: Sequence[Run], accounts: Mapping[str, Any], capacity: Mapping[str, int],
                throughput: Mapping[str, Mapping[str, float]], t1: float) -> RealizedSummary | None:
    """The realized fairness summary of ``runs`` over [0, ``t1``] (None when ``t1`` is 0: nothing simulated)."""
    rec = realized_record(runs, accounts, capacity, throughput, t1)
    return None if rec is None else summarize(rec)


def runs_csv_rows(policy: str, runs: Iterable[Run]) -> list[list[Any]]:
    """``simulate --runs-csv``'s rows of one policy: :data:`RUNS_CSV_COLUMNS`; a job that never started has empty
    type, start and end; ``ended`` is 1 for the run that ended its job, else 0."""
    return [[policy, r.job, r.account, r.cls, r.gpus, r.submit, r.gpu_type or "", "" if r.start is None else r.start,
             "" if r.end is None else r.end, int(r.ended)] for r in runs]
