"""Data behind ``slurm-fair report``: what the store recorded over a window of time, per round, account and
policy. :func:`report` is pure (rows in, JSON-able dict out); :func:`load` reads the store for it.

What it reads: finished rounds (``rounds``: policy, status, seconds, total throughput, and only the
``fairness`` and ``throughput`` keys of their details), the placements (ideal share, real GPUs and limit per
account and GPU type per round), the job runs from the hooks' records (``store.job_runs``) and the
preemptions. A round belongs to the window when it *started* in it; a job when its last run *ended* in it;
a preemption when it was *created* in it. ``realized`` (:mod:`.realized`): realized fairness per account over the
window, from the same job runs.

Jobs (:mod:`.jobtimes`): ``jobs`` shows each finished job's run time, **start to end** (first run's start to
last run's end, requeue waits included); ``waits`` shows, per account and GPU type, the queue wait (first start −
submit) and the job completion time (last end − submit) from the submit time the controller hooks record. Each
job is counted under the policy of the last round started at or before its end.
"""

from __future__ import annotations

import bisect
import datetime
import re
import statistics
import time
from typing import Any, Iterable, Mapping

from ..config import Config
from ..daemon.preemption.record import PreemptionRecord
from ..daemon.preemption.store import PreemptionStore
from ..errors import InputError
from ..store import JobRun, Placement, RoundPoint, Store
from ..stats import fairness_summary, percentile
from .jobtimes import FinishedJob, finished_jobs, wait_stats
from .realized import section as realized_section

__all__ = ["JOB_TIME", "WAIT_TIME", "load", "parse_when", "report"]

RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
JOB_TIME = "start_to_end"  # what the job times measure (see the module docstring)
WAIT_TIME = "queue wait = first start - submit; jct = last end - submit"


def parse_when(option: str, text: str | None, now: float) -> float | None:
    """A time bound: None, an ISO date or date-time (``2026-11-25``, ``2026-11-25T14:00``, with an offset or
    ``Z``; without one it is local time), or a span before ``now``: a number and one of s, m, h, d, w
    (``90m``, ``2h``, ``3d``). Anything else is an InputError naming ``option`` and the value."""
    if text is None:
        return None
    m = RELATIVE.match(text)
    if m:
        return now - float(m.group(1)) * UNIT_S[m.group(2)]
    try:
        when = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InputError(option, text, "must be an ISO date/time (2026-11-25, 2026-11-25T14:00) or a span "
                         "before now (90m, 2h, 3d, 1w)") from None
    return when.timestamp()


# ------------------------------------------------------------------------------------------- report


def _stats(values: list[float]) -> dict[str, Any]:
    return {"count": len(values), "mean_s": statistics.fmean(values) if values else None,
            "median_s": percentile(values, 0.5), "p95_s": percentile(values, 0.95),
            "max_s": max(values) if values else None}


def _mean(values: Iterable[float | None]) -> float | None:
    v = [float(x) for x in values if x is not None]
    return statistics.fmean(v) if v else None


def report(rounds: list[RoundPoint], placements: Iterable[Placement],
           runs: Iterable[JobRun], preemptions: Iterable[PreemptionRecord],
           since: float | None = None, until: float | None = None) -> dict[str, Any]:
    """The report of a window (see the module docstring). ``rounds``: ``store.round_series`` points with the
    ``fairness`` and ``throughput`` values, oldest first; ``placements``: ``store.placements_between`` of
    the same rounds; ``runs``: ``store.job_runs()``; ``preemptions``: those created in the window.

    Returned: ``window`` {since, until}; ``rounds`` (count), ``first``/``last`` (start times),
    ``statuses`` {status: rounds}; ``timeline``: per round {round, time, policy, status, ideal, real, limit
    (GPUs per account, summed over types), throughput_ideal, throughput_real (normalized throughput per
    account, from the round's details), fairness (its counts, or None)}; ``accounts``: per account the mean
    over the rounds that placed it of the same numbers (mean_ideal, mean_real, mean_limit,
    mean_throughput_ideal, mean_throughput_real) and ``rounds``; ``policies``: per policy {rounds,
    ok_rounds, mean_round_seconds, mean_solve_seconds, mean_total_throughput, fairness (summary), jobs
    (start-to-end statistics)}; ``fairness``: the summary over the window; ``jobs``: {measured:
    "start_to_end", count, mean_s, median_s, p95_s, max_s, by_account {account: same}, times [seconds of
    each job]}; ``waits``: {measured, jobs, with_submit, by_account {account: {GPU type: {jobs, with_submit,
    wait_mean_s, wait_p50_s, wait_p95_s, wait_max_s, jct_mean_s, run_mean_s}}}} (:mod:`.jobtimes`);
    ``preemptions``: {total, by_state, by_account}."""
    per_round: dict[int, dict[str, dict[str, float]]] = {}
    for p in placements:
        row = per_round.setdefault(int(p.round_id), {"ideal": {}, "real": {}, "limit": {}})
        for key, v in (("ideal", p.ideal), ("real", p.real), ("limit", p.limit)):
            if v is not None:
                row[key][p.account] = row[key].get(p.account, 0.0) + float(v)
    timeline = []
    statuses: dict[str, int] = {}
    for r in rounds:
        statuses[r.status] = statuses.get(r.status, 0) + 1
        thr = r.values.get("throughput") or {}
        pl = per_round.get(int(r.id), {"ideal": {}, "real": {}, "limit": {}})
        timeline.append({"round": r.id, "time": r.started, "policy": r.policy, "status": r.status,
                         **pl, "throughput_ideal": dict(thr.get("ideal") or {}),
                         "throughput_real": dict(thr.get("real") or {}), "fairness": r.values.get("fairness")})
    accounts: dict[str, dict[str, Any]] = {}
    for s in timeline:
        if not s["ideal"]:
            continue
        for a in s["ideal"]:
            acc = accounts.setdefault(a, {k: [] for k in ("ideal", "real", "limit", "throughput_ideal",
                                                          "throughput_real")})
            for k in acc:
                acc[k].append(s[k].get(a, 0.0))
    accounts = {a: {"rounds": len(v["ideal"]), **{f"mean_{k}": _mean(vals) for k, vals in v.items()}}
                for a, v in sorted(accounts.items())}

    starts = [float(r.started) for r in rounds]
    jobs: list[FinishedJob] = finished_jobs(runs, since, until)
    policy_of_job: dict[int, str | None] = {}
    for j in jobs:
        i = bisect.bisect_right(starts, j.end) - 1
        policy_of_job[j.job_id] = rounds[i].policy if i >= 0 else None
    policies: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r.policy for r in rounds):
        rs = [r for r in rounds if r.policy == name]
        ok = [r for r in rs if r.status in ("ok", "dry-run")]
        policies[name] = {
            "rounds": len(rs), "ok_rounds": len(ok),
            "mean_round_seconds": _mean(r.finished - r.started for r in rs if r.finished is not None),
            "mean_solve_seconds": _mean(r.solve_seconds for r in ok),
            "mean_total_throughput": _mean(r.total_throughput for r in ok),
            "fairness": fairness_summary(r.values.get("fairness") for r in rs),
            "jobs": _stats([j.seconds for j in jobs if policy_of_job[j.job_id] == name]),
        }
    by_account: dict[str, list[float]] = {}
    for j in jobs:
        by_account.setdefault(j.account, []).append(j.seconds)
    pre = list(preemptions)
    by_state: dict[str, int] = {}
    pre_acct: dict[str, int] = {}
    for p in pre:
        by_state[p.state] = by_state.get(p.state, 0) + 1
        pre_acct[p.account] = pre_acct.get(p.account, 0) + 1
    return {
        "window": {"since": since, "until": until},
        "rounds": len(rounds),
        "first": starts[0] if starts else None,
        "last": starts[-1] if starts else None,
        "statuses": statuses,
        "policies": policies,
        "fairness": fairness_summary(r.values.get("fairness") for r in rounds),
        "accounts": accounts,
        "jobs": {"measured": JOB_TIME, **_stats([j.seconds for j in jobs]),
                 "by_account": {a: _stats(v) for a, v in sorted(by_account.items())},
                 "by_policy": {name: [j.seconds for j in jobs if policy_of_job[j.job_id] == name]
                               for name in policies},
                 "times": [j.seconds for j in jobs]},
        "waits": {"measured": WAIT_TIME, "jobs": sum(1 for j in jobs if j.gpu_type),
                  "with_submit": sum(1 for j in jobs if j.gpu_type and j.submit is not None),
                  "by_account": {a: {t: w.as_dict() for t, w in row.items()} for a, row in wait_stats(jobs).items()}},
        "preemptions": {"total": len(pre), "by_state": dict(sorted(by_state.items())),
                        "by_account": dict(sorted(pre_acct.items()))},
        "timeline": timeline,
    }


def load(store: Store, since: float | None = None, until: float | None = None, *, now: float | None = None,
         cfg: Config | None = None) -> dict[str, Any]:
    """:func:`report` of the rounds, placements, job runs and preemptions ``store`` holds for [since, until], and
    ``realized``: realized fairness over [since or the first round's start, until or ``now``]
    (:func:`.realized.section`; ``cfg`` picks the profile values as the rounds do)."""
    rounds = store.round_series(since, until, keys=("fairness", "throughput"))
    rep = report(rounds, store.placements_between(since, until), store.job_runs(),
                 PreemptionStore(store).rows(limit=None, since=since, until=until), since, until)
    if rounds or since is not None:  # a window without a round of its own: the newest round before it weighs
        rep["realized"] = realized_section(store, since, until, rep["first"], time.time() if now is None else now,
                                           cfg)
    return rep
