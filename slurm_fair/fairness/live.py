"""Realized fairness of a live cluster (issue 39, item 1): the hooks' job runs and what the rounds recorded, turned
into the inputs of :func:`.realized.realized` — the same function the simulator uses. Pure: no I/O (the store is
read by ``daemon/realized_window.py``). Definitions: ``docs/realized-fairness.md``, "On a live cluster".

* **Runs** (:func:`runs_of`): one :class:`~.realized.Run` per run of a job (``store.JobRun``: one per job id and
  restart count, from the controller hooks' start and end records). A job's submit is the earliest Slurm
  SubmitTime its records hold (none: its first start, counted in ``no_submit``); its last run with an end ended
  it; a run without an end is still running and counts to the window's end. A job is left out (``left_out``,
  with its GPU-seconds in the window) when one of its runs held GPUs of no single type of the capacity (GPUs
  Slurm counted only in ``gres/gpu``, a type the hooks could not read, several types at once, a type the last
  round did not see) or its runs disagree on their GPUs; a job that got no GPU is not a GPU job and is skipped.
* **Pending jobs** (``store.PendingJob``: the GPU jobs the rounds saw pending, ``pending_jobs``). A job is
  *pending at the window's end* when it was submitted by then and seen pending by the last round that observed the
  cluster at or before the end (``sighted``) or by a later one. Such a job without any start record is one
  :class:`~.realized.Run` without type, start and end (pending from its Slurm submit to the window's end:
  ``pending``), unless Slurm said it could not start whatever the scheduler did (held, dependency, begin time,
  reservation: ``left_out``, "pending, not startable"). A job with runs, pending at the end after its last
  run ended (requeued, not restarted yet), is not ended by that run: it waits again until the window's end. A
  job seen pending in the window that left without a start record (cancelled while pending, or its start was not
  recorded) cannot be a Run (a job that never started has no end): it is left out (``left_out``, 0 GPU-seconds)
  and its waiting is not counted. Without ``sighted`` (no round observed the cluster near the window's end) a
  job seen pending in the window is left out too (``left_out``: not known whether it still waited).
* **Accounts** are the daemon's tenants (each account, unless ``tenants.map`` groups them), weighed as the
  rounds weighed them (:func:`weights_of`: the newest round that had each); an account of the runs no round
  weighed counts 1 (``default_weight``).
* **Classes**: each job's class, its speeds from the throughput the daemon's lookup gives it (the account's
  profile, the site's, the shipped one, the slowest known for a missing type, 1.0 everywhere for a class never
  profiled: ``unprofiled``), relative to its slowest type of the capacity; a class an account has a profile of
  its own is that account's alone (``account/class``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from ..errors import InputError
from ..stats import percentile
from ..store import UNTYPED_GPU, JobRun, PendingJob
from .realized import Realized, RealizedSummary, Run, realized, speeds_from_throughput, summarize

DEFAULT_CLASS = "default"  # a run whose records name no class
UNPROFILED = "unprofiled"  # the daemon's source name of a class without any profile (speed 1.0 everywhere)
ASSUMED = "assumed"  # its source name of a type a profiled class has no value for (the class's slowest known)


LEFT_PENDING = ("left while pending (cancelled, or its start was not recorded): a job that never started has no "
                "end, so its waiting is not counted")
NOT_STARTABLE = "pending, not startable"
NO_SIGHTING = ("seen pending, but no round observed the cluster near the window's end: not known whether it still "
               "waited")

ACCOUNT_SOURCE = "account"  # the lookup's source of an account's own profile (daemon/plan/problem.py SRC_ACCOUNT)


def class_key(account: str, cls: str, own: bool = True) -> str:
    """The class of :class:`~.realized.Run` for an account's class: ``account/class`` when its speeds are the
    account's own (``own``), else the class's name (every account's jobs of it run at the same speeds: one class
    for all keeps the sweep's work per event small)."""
    return f"{account}/{cls or DEFAULT_CLASS}" if own else (cls or DEFAULT_CLASS)


@dataclass(frozen=True)
class LeftOut:
    """A job left out of the runs: its id, account, why, and its GPU-seconds inside the window."""

    job: int
    account: str
    why: str
    gpu_seconds: float


@dataclass(frozen=True)
class LiveRuns:
    """:func:`runs_of`'s answer: the runs, the (account, class) pairs they need speeds for, the jobs left out,
    those counted from their first start for want of a submit time, and those counted pending from the rounds'
    sightings alone (no start record: still waiting at the window's end)."""

    runs: tuple[Run, ...]
    classes: tuple[tuple[str, str], ...]
    left_out: tuple[LeftOut, ...]
    no_submit: tuple[int, ...]
    pending: tuple[int, ...] = ()


def _overlap(r: JobRun, t0: float, t1: float) -> float:
    end = t1 if r.end is None else min(r.end, t1)
    return max(0.0, end - max(r.start, t0)) * sum(int(n) for n in (r.gpus or {}).values())


def pending_at_end(p: PendingJob, t1: float, sighted: float | None) -> bool:
    """Whether ``p`` was pending at ``t1``: submitted by then and seen pending after ``t1`` or by the last round
    that observed the cluster at or before it (``sighted``, that round's start; None: no such round)."""
    return p.submit <= t1 and (p.last_seen > t1 or (sighted is not None and p.last_seen >= sighted))


def runs_of(job_runs: Iterable[JobRun], types: Iterable[str], t0: float, t1: float,
            tenant_of: Mapping[str, str] | None = None, own: Iterable[tuple[str, str]] | None = None,
            pending: Iterable[PendingJob] = (), sighted: float | None = None) -> LiveRuns:
    """The :class:`~.realized.Run` rows of the jobs in the system during [t0, t1] (module docstring). Jobs that
    ended before ``t0`` or were submitted after ``t1`` are not needed and dropped; times are kept as they are
    (Unix seconds). ``tenant_of`` maps an account to the account realized fairness counts it under; ``own``: the
    (account, class) pairs with speeds of their own (:func:`class_key`; None: every pair). ``pending``: the jobs
    the rounds saw pending, ``sighted``: the start of the last round at or before ``t1`` that observed the cluster
    (:func:`pending_at_end`)."""
    mine = None if own is None else set(own)
    seen = {int(p.job_id): p for p in pending}
    known = set(types)
    tmap = dict(tenant_of or {})
    by_job: dict[int, list[JobRun]] = {}
    for r in job_runs:
        by_job.setdefault(int(r.job_id), []).append(r)
    runs: list[Run] = []
    classes: dict[tuple[str, str], None] = {}
    left: list[LeftOut] = []
    no_submit: list[int] = []
    for jid, rs in sorted(by_job.items()):
        rs.sort(key=lambda r: (r.start, r.restart_count))
        last = rs[-1]
        if last.end is not None and last.end < t0:
            continue
        subs = [float(r.submit) for r in rs if r.submit is not None]
        submit = min([*subs, float(rs[0].start)])
        if submit > t1:
            continue
        account = str(last.account or "")
        gpu_rows = [{str(g): int(n) for g, n in (r.gpus or {}).items() if int(n) > 0} for r in rs]
        if not any(gpu_rows) and all(str(r.gpu_info or "").startswith("scontrol") for r in rs):
            continue  # Slurm answered: no GPU
        why = None
        if any(UNTYPED_GPU in g for g in gpu_rows):
            why = "GPUs counted only in gres/gpu (no type)"
        elif any(len(g) != 1 for g in gpu_rows):
            why = "no single GPU type read" if all(len(g) <= 1 for g in gpu_rows) else "GPUs of several types"
        elif any(next(iter(g)) not in known for g in gpu_rows):
            outside = sorted({t for g in gpu_rows for t in g} - known)
            why = "a GPU type outside the capacity (" + ", ".join(outside) + ")"
        elif len({sum(g.values()) for g in gpu_rows}) > 1:
            why = "its runs held different numbers of GPUs"
        if why is not None:
            left.append(LeftOut(jid, account, why, sum(_overlap(r, t0, t1) for r in rs)))
            continue
        if not subs:
            no_submit.append(jid)
        cls = str(last.cls or "") or DEFAULT_CLASS
        classes[(account, cls)] = None
        key = class_key(account, cls, mine is None or (account, cls) in mine)
        who = tmap.get(account, account)
        p = seen.get(jid)
        waits = (p is not None and last.end is not None and last.end <= t1 and p.last_seen >= last.end
                 and pending_at_end(p, t1, sighted))  # requeued and pending again at the window's end
        for i, (r, g) in enumerate(zip(rs, gpu_rows)):
            (gtype, n), = g.items()
            nxt = rs[i + 1].start if i + 1 < len(rs) else None
            end = r.end
            if nxt is not None:  # one run at a time: a run the records leave open, or end late, ends at the next
                end = nxt if end is None else min(end, nxt)
            if end is not None:
                end = max(float(end), float(r.start))
            runs.append(Run(str(jid), who, key, n, submit, gtype, float(r.start), end,
                            ended=nxt is None and end is not None and not waits))
    waiting: list[int] = []
    for jid, p in sorted(seen.items()):
        if jid in by_job or p.submit > t1 or p.gpus < 1:
            continue
        account = str(p.account or "")
        if not pending_at_end(p, t1, sighted):
            if p.last_seen >= t0:
                left.append(LeftOut(jid, account, LEFT_PENDING if sighted is not None else NO_SIGHTING, 0.0))
            continue
        if p.blocked:
            left.append(LeftOut(jid, account, f"{NOT_STARTABLE} ({p.blocked})", 0.0))
            continue
        cls = str(p.cls or "") or DEFAULT_CLASS
        classes[(account, cls)] = None
        key = class_key(account, cls, mine is None or (account, cls) in mine)
        runs.append(Run(str(jid), tmap.get(account, account), key, int(p.gpus), float(p.submit), None, None, None,
                        ended=False))
        waiting.append(jid)
    return LiveRuns(tuple(runs), tuple(classes), tuple(left), tuple(no_submit), tuple(waiting))


def weights_of(rounds: Sequence[tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]]
               ) -> tuple[dict[str, str], dict[str, float]]:
    """(account -> tenant, tenant -> weight) over ``rounds``, oldest first, each its details' ``tenants`` and
    ``weights`` (the newest round that had an account or tenant wins; a value that is not a positive number is
    skipped)."""
    tenant_of: dict[str, str] = {}
    weights: dict[str, float] = {}
    for tenants, ws in rounds:
        for a, t in (tenants or {}).items():
            tenant_of[str(a)] = str(t)
        for t, w in (ws or {}).items():
            if isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0:
                weights[str(t)] = float(w)
    return tenant_of, weights


@dataclass(frozen=True)
class LiveRealized:
    """Realized fairness of a live window: the result, its summary, and what it was computed from and with."""

    realized: Realized
    summary: RealizedSummary
    weights: Mapping[str, float]
    capacity: Mapping[str, int]
    sources: Mapping[str, Mapping[str, str]]  # class key -> type -> where its throughput came from
    default_weight: tuple[str, ...]  # accounts no round weighed (weight 1)
    live: LiveRuns

    @property
    def unprofiled(self) -> tuple[str, ...]:
        """Class keys without any profile: speed 1.0 on every type."""
        return tuple(k for k, row in sorted(self.sources.items()) if row and all(s == UNPROFILED for s in row.values()))

    @property
    def assumed(self) -> dict[str, list[str]]:
        """Class key -> the types its speed there is assumed (the class's slowest known: no profile of that type)."""
        return {k: sorted(g for g, src in row.items() if src == ASSUMED) for k, row in sorted(self.sources.items())
                if ASSUMED in row.values()}

    def as_json(self) -> dict[str, Any]:
        """JSON: the window, ``accounts`` (per account: weight, ratio (time-weighted), worst_episode_ratio,
        episodes, backlogged_s, time_to_fair_share {median, max, censored}, envy_share, jobs_ended, mean_jct,
        throughput (speed-weighted GPU-seconds), throughput_share), the summary's episodes / time to fair share /
        envy, ``capacity``, ``unprofiled`` classes, ``assumed`` {class: types}, ``default_weight`` accounts,
        ``left_out`` jobs, ``no_submit``, ``pending`` (jobs counted from the rounds' sightings alone)."""
        r = self.realized
        s = self.summary.as_json()
        accounts = {}
        for a in r.accounts:
            eps = [e for e in r.episodes if e.account == a.account]
            ttfs = sorted(e.time_to_fair_share for e in eps if e.time_to_fair_share is not None)
            accounts[a.account] = {
                "weight": a.weight, "ratio": a.ratio, "worst_episode_ratio": min((e.ratio for e in eps), default=None),
                "episodes": len(eps), "backlogged_s": a.backlogged,
                "time_to_fair_share": {"median": percentile(ttfs, 0.5),
                                       "max": ttfs[-1] if ttfs else None,
                                       "censored": sum(1 for e in eps if e.reached == "censored")},
                "envy_share": r.account_envy_share(a.account), "jobs_ended": a.jobs_ended, "mean_jct": a.mean_jct,
                "throughput": a.throughput, "throughput_share": a.throughput_share}
        return {"since": r.t0, "until": r.t1, "accounts": accounts, "episodes": s["episodes"],
                "long_episodes": s["long_episodes"], "time_to_fair_share": s["time_to_fair_share"],
                "envy": s["envy"], "capacity": dict(self.capacity), "unprofiled": list(self.unprofiled),
                "assumed": self.assumed,
                "default_weight": list(self.default_weight), "runs": len(self.live.runs),
                "left_out": [{"job": x.job, "account": x.account, "why": x.why, "gpu_seconds": x.gpu_seconds}
                             for x in self.live.left_out],
                "no_submit": list(self.live.no_submit), "pending": list(self.live.pending)}


def live_realized(job_runs: Iterable[JobRun], rounds: Sequence[tuple[Mapping[str, Any] | None,
                                                                      Mapping[str, Any] | None]],
                  capacity: Mapping[str, Any], throughput: Mapping[tuple[str, str], Mapping[str, float]],
                  sources: Mapping[tuple[str, str], Mapping[str, str]], t0: float, t1: float,
                  pending: Iterable[PendingJob] = (), sighted: float | None = None) -> LiveRealized:
    """Realized fairness over [t0, t1] (module docstring). ``rounds``: (tenants, weights) of the rounds, oldest
    first; ``capacity``: the last observed round's GPUs per type; ``throughput``/``sources``: per (account, class)
    of the runs (:attr:`LiveRuns.classes`) the daemon's lookup, type -> throughput and its source (a pair
    missing here runs at 1.0 everywhere, as an unprofiled class); ``pending``, ``sighted``: the jobs the rounds
    saw pending and the start of the last round at or before ``t1`` that observed the cluster (:func:`runs_of`).
    Raises InputError on a bad window or capacity."""
    cap = {str(g): int(n) for g, n in capacity.items() if isinstance(n, (int, float)) and not isinstance(n, bool)}
    if not cap:
        raise InputError("capacity", dict(capacity), "no round recorded the GPUs per type")
    tenant_of, weights = weights_of(rounds)
    own = {p for p, row in sources.items() if ACCOUNT_SOURCE in (row or {}).values()}
    live = runs_of(job_runs, cap, t0, t1, tenant_of, own, pending, sighted)
    default = tuple(sorted({r.account for r in live.runs} - set(weights)))
    weights = {**weights, **{a: 1.0 for a in default}}
    thr: dict[str, dict[str, float]] = {}
    src: dict[str, dict[str, str]] = {}
    for a, c in live.classes:
        key = class_key(a, c, (a, c) in own)
        row = throughput.get((a, c))
        if row and any(float(row.get(g, 0.0)) > 0 for g in cap):
            thr[key] = {g: float(row.get(g, 0.0)) for g in cap}
            src[key] = {g: str((sources.get((a, c)) or {}).get(g, "")) for g in cap}
        else:
            thr[key] = {g: 1.0 for g in cap}
            src[key] = {g: UNPROFILED for g in cap}
    speeds = speeds_from_throughput(thr, cap)
    for r in live.runs:  # a type the lookup gives no speed on, yet a run held it: its slowest known speed
        row = speeds[r.cls]
        if r.gpu_type is not None and row.get(r.gpu_type, 0.0) <= 0:
            row[r.gpu_type] = min((v for v in row.values() if v > 0), default=1.0)
    if not weights:
        raise InputError("accounts", [], "no round weighed an account and no GPU job ran in the window")
    res = realized(live.runs, weights, cap, speeds, t0, t1)
    return LiveRealized(res, summarize(res), weights, cap, src, default, live)
