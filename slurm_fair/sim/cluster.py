"""A Slurm cluster in simulated time, behind the daemon's ``Cluster`` interface (issue 12).

What it models, in the terms the daemon sees through ``snapshot()`` and acts on:

* **Nodes**: GPUs per type per node (one type per node unless given otherwise), all in partition ``gpu``.
* **Jobs** from a trace (``traces.TraceJob``: submit time, account, class, GPUs, work in steps, an optional typed
  request, an optional time limit — else the partition's ``default_time``; Slurm keeps whole minutes, and so does
  the snapshot's ``Job.time_limit``). A job's class is its name and its comment ``class=<cls>`` (the daemon's
  ``classes.order`` finds it either way). An untyped job is typed at submission the way ``etc/job_submit.lua`` does
  once the daemon has published a type map (:meth:`set_type_map`: the account's line, else the ``*`` line, in the
  order of the job's ``account/class`` line if there is one; the first type whose room is not used up by the GPUs
  handed out against this map — each publication is a new one —, else untyped within the account's
  ``#@untyped`` room, else the type ``#@soon`` expects to start it first, else the first type) and gets the
  ``fair:flex`` token; before any map it stays
  untyped. Types its class cannot run on (no throughput in the trace) are skipped, as a user whose model does not
  fit a GPU type asks for the others (a line with none it can run on leaves the job untyped): the daemon cannot know
  it — a profile missing for a type only means "not measured" to it.
* **The scheduler**: Slurm's ``sched/backfill`` (:class:`.scheduler.BackfillScheduler`: the main loop in strict
  priority order, then the backfill pass with reservations from time limits), run at every event — submission,
  completion, requeue, a round's changes, a multifactor calculation.
* **Priority**: SiteFactor, then submit time (FIFO); with :meth:`SimCluster.use_multifactor`, Slurm's
  ``priority/multifactor`` adds fair-share and age terms, recomputed every ``PriorityCalcPeriod``
  (:mod:`.slurm_priority`). **Node weights** (``node_weights``): untyped jobs try the types in one site-wide
  order instead of their fastest first.
* **Progress**: a running job does ``throughput[class][type]`` steps per second (the whole job's rate on
  that type); it ends when its work is done (completion events are exact, no time step).
* **Preemption**: ``signal_job`` records the signal (the job checkpoints); ``requeue_job`` puts a running
  job back to pending with the work done so far kept, eligible again after ``restart_s`` seconds (the
  checkpoint-restart cost; Slurm's ``cred_expire`` wait is part of it); its time limit counts again from
  its next start.
* **Records**: ``events`` (time, start/end/requeue, job id) and per job ``runs`` (:class:`.jobs.Run`: start, end,
  GPU type, GPUs per node, ``"done"`` or ``"requeue"``).
* **Limits and SiteFactor** exactly as set; ``set_job_gpu_type`` retypes a pending job (the simulated Slurm
  reports version ``VERSION``, where that works).

Time only moves through :meth:`advance` (to a given time, event by event); ``snapshot().taken_at`` is the
simulated time, which the daemon's round receives as ``now``.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from ..cluster.base import CHECKPOINT_TOKEN, CLEAR, FLEX_TOKEN, Account, Cluster, Job, Node, Snapshot
from ..cluster.blocked import BEGIN_TIME
from ..cluster.errors import CommandFailed
from ..errors import InputError
from .jobs import EPS, SimJob, whole_minutes
from .fairshare import Multifactor
from .scheduler import BF_MAX_JOB_TEST, BackfillScheduler
from .slurm_priority import SlurmPriority
from .submit import SubmitMap

VERSION = "24.11.0"  # what the simulated Slurm reports (pending-job retype works from 23.02.6)
PARTITION = "gpu"


class SimCluster(BackfillScheduler, Cluster):
    """See the module docstring. ``nodes``: {node: {gpu_type: GPUs}}; ``accounts``: {account: shares};
    ``throughput``: {class: {gpu_type: steps/s of a whole job}}; ``jobs``: trace jobs (any objects with
    ``id, submit, account, cls, gpus, work, gpu_type`` and optionally ``time_limit``, seconds).

    ``default_time``: the partition's DefaultTime in seconds, the time limit of a job without one (None: the
    partition's MaxTime, INFINITE, as on the testbed — such a job is expected to run forever, so it holds its
    GPUs in every backfill plan and gets no reservation while it waits behind one). ``bf_window``: how far ahead
    (seconds) the backfill pass reserves (None: without bound, the slurm.conf advice of a window at least as
    long as the longest time limit); ``bf_max_job_test``: how many pending jobs it considers.
    ``node_weights``: GPU types in the order of their nodes' ``Weight`` (lowest first; :func:`node_order`):
    an untyped job takes the first that fits instead of its fastest type (None: fastest first). Slurm's
    ``priority/multifactor`` is off (priorities are SiteFactor alone, then submit time) until
    :meth:`use_multifactor`."""

    name = "sim"

    def __init__(self, nodes: Mapping[str, Mapping[str, int]], accounts: Mapping[str, int],
                 throughput: Mapping[str, Mapping[str, float]], jobs: Iterable[Any], restart_s: float = 60.0,
                 epoch: float = 0.0, default_time: float | None = None, bf_window: float | None = None,
                 bf_max_job_test: int = BF_MAX_JOB_TEST, node_weights: Sequence[str] | None = None):
        self.epoch = float(epoch)  # what the daemon reads: trace time + epoch (unix-like times)
        self.now = 0.0  # trace time (kept small: at 1.7e9 a double resolves only ~2e-7 s)
        self.node_gpus = {n: {t: int(c) for t, c in g.items() if c > 0} for n, g in nodes.items()}
        self.free = {n: dict(g) for n, g in self.node_gpus.items()}
        self.accounts = {a: int(s) for a, s in accounts.items()}
        self.limits: dict[str, dict[str, int]] = {a: {} for a in self.accounts}
        self.throughput = {c: {t: float(v) for t, v in row.items() if v > 0} for c, row in throughput.items()}
        self.restart_s = float(restart_s)
        self.default_time = whole_minutes("default_time", default_time)
        window = whole_minutes("bf_window", bf_window)  # (whole minutes, as slurm.conf gives it)
        self.bf_window = math.inf if window is None else window
        if isinstance(bf_max_job_test, bool) or not isinstance(bf_max_job_test, int) or bf_max_job_test < 1:
            raise InputError("bf_max_job_test", bf_max_job_test, "must be a whole number >= 1")
        self.bf_max_job_test = bf_max_job_test
        self._changes = 0  # bumped by every change the scheduler depends on; with the time, what it last saw
        self._scheduled: tuple[int, float] | None = None
        self.submit_map = SubmitMap()  # the simulated job_submit.lua's view of the published type map
        self.jobs: dict[int, SimJob] = {}
        self._arrivals = sorted(jobs, key=lambda j: (float(j.submit), str(j.id)))
        self._next_arrival = 0
        self._next_id = 1
        self.preemptions = 0
        self.events: list[tuple[float, str, int]] = []  # (time, what, job id): start, end, requeue
        types = sorted({t for g in self.node_gpus.values() for t in g})
        self.gpu_types = tuple(types)
        self.node_order = None if node_weights is None else node_order(types, node_weights, "node_weights")
        self.slurm_priority: SlurmPriority | None = None  # priority/multifactor (use_multifactor); None: off
        self._most = {t: sum(g.get(t, 0) for g in self.node_gpus.values()) for t in types}  # largest job of a type
        for j in self._arrivals:
            if j.cls not in self.throughput or not self.throughput[j.cls]:
                raise ValueError(f"trace job {j.id}: class {j.cls!r} has no throughput on any GPU type")
            if j.account not in self.accounts:
                self.accounts[j.account] = 1
                self.limits[j.account] = {}
            whole_minutes(f"trace job {j.id} time_limit", getattr(j, "time_limit", None))

    # ------------------------------------------------------------------ Cluster interface

    def version(self) -> str:
        return VERSION

    def snapshot(self) -> Snapshot:
        nodes = []
        for n, g in sorted(self.node_gpus.items()):
            alloc = {t: g[t] - self.free[n].get(t, 0) for t in g}
            state = ("ALLOCATED",) if all(self.free[n].get(t, 0) == 0 for t in g) else (
                ("MIXED",) if any(alloc.values()) else ("IDLE",))
            nodes.append(Node(n, state, (PARTITION,), dict(g), alloc))
        jobs = []
        for j in self.jobs.values():
            if j.state == "DONE":
                continue
            running = j.state == "RUNNING"
            jobs.append(Job(
                job_id=j.job_id, name=j.cls, account=j.account, user=j.account, partition=PARTITION,
                state=j.state, reason="None" if running else ("BeginTime" if j.eligible > self.now else j.reason),
                priority=j.site_factor + j.priority, submit_time=int(self.epoch + j.submit),
                start_time=int(self.epoch + j.started) if running else None,
                gpus_per_node=j.gpus, nodes=1, gpu_type=j.requested,
                gpus_allocated={j.run_type: j.gpus} if running and j.run_type else {},
                # every simulated job checkpoints (a requeue loses only restart_s): it says so as a user would
                comment=f"class={j.cls} {CHECKPOINT_TOKEN}" + (f" {FLEX_TOKEN}" if j.flex else ""),
                restart_count=j.restarts, site_factor=j.site_factor, requeue=True,
                time_limit=None if j.time_limit is None else math.ceil(j.time_limit / 60 - 1e-9),
                node_gpus=dict(j.nodes) if running else {},
                # a requeued job's begin time, as Slurm gives it (the round counts it once due: plan/binding.py)
                **({"blocked": BEGIN_TIME, "begin_time": math.ceil(self.epoch + j.eligible)}
                   if not running and j.state == "PENDING" and j.eligible > self.now else {}),
            ))
        accounts = tuple(Account(a, s, dict(self.limits.get(a, {}))) for a, s in sorted(self.accounts.items()))
        return Snapshot(VERSION, self.clock(), tuple(nodes), tuple(jobs), accounts, (PARTITION,))

    def clock(self) -> float:
        """The time the daemon sees now (trace time + ``epoch``)."""
        return self.epoch + self.now

    def set_accounts_gpu_limits(self, limits: Mapping[str, Mapping[str, int]]) -> None:
        for a, ch in limits.items():
            cur = self.limits.setdefault(a, {})
            for k, v in ch.items():
                if v == CLEAR:
                    self._changes += cur.pop(k, None) is not None
                elif cur.get(k) != int(v):
                    cur[k] = int(v)
                    self._changes += 1
        self.schedule()

    def set_site_factors(self, factors: Mapping[int, int]) -> None:
        for jid, f in factors.items():
            j = self.jobs.get(int(jid))
            if j is not None and j.state == "PENDING" and j.site_factor != int(f):
                j.site_factor = int(f)
                self._changes += 1
        self.schedule()

    def set_job_gpu_type(self, job_id: int, gpu_type: str, gpus_per_node: int) -> None:
        j = self.jobs.get(int(job_id))
        if j is None or j.state != "PENDING":
            raise CommandFailed(["scontrol", "update", f"JobId={job_id}"], 1, "Job is no longer pending execution")
        j.requested = gpu_type
        self._changes += 1
        self.schedule()

    def signal_job(self, job_id: int, signal: str) -> None:
        j = self.jobs.get(int(job_id))
        if j is None or j.state != "RUNNING":
            raise CommandFailed(["scancel", f"--signal={signal}", "--batch", str(job_id)], 1, "Job is not running")
        j.signals += 1

    def requeue_job(self, job_id: int) -> None:
        j = self.jobs.get(int(job_id))
        if j is None or j.state != "RUNNING":
            raise CommandFailed(["scontrol", "requeue", str(job_id)], 1, "Job is not running")
        self._stop(j, "requeue")
        j.state = "PENDING"
        j.restarts += 1
        j.eligible = self.now + self.restart_s
        self.preemptions += 1
        self.events.append((self.now, "requeue", j.job_id))
        self.schedule()

    # ------------------------------------------------------------------ simulation

    def use_multifactor(self, model: Multifactor, past_usage: Mapping[str, float] | None = None) -> None:
        """From now on, Slurm's ``priority/multifactor`` (:class:`.slurm_priority.SlurmPriority`): each pending job's
        priority is its fair-share and age terms plus its SiteFactor, recomputed every ``model.calc_period``;
        ``past_usage``: each account's raw usage now (billed GPU-seconds)."""
        self.slurm_priority = SlurmPriority(model, self.accounts, past_usage, self.now)
        for j in self.jobs.values():
            if j.state == "PENDING":
                j.priority = self.slurm_priority.job_priority(j, self.now)
        self._changes += 1

    def _next_calc(self) -> float:
        return math.inf if self.slurm_priority is None else self.slurm_priority.next_calc

    def _calc(self) -> None:
        """The multifactor calculation when one is due now (none under FIFO)."""
        sp = self.slurm_priority
        if sp is not None and sp.next_calc <= self.now + EPS and sp.calc(self.now, self.jobs.values()):
            self._changes += 1

    def set_type_map(self, targets: Mapping[str, Any], map_id: str | None = None) -> None:
        """The published GPU type map ({account or '*': plan.Target}, as the round records it, or plainly
        {account: type}): job_submit.lua's view (:meth:`.submit.SubmitMap.set`: each call without the last
        ``map_id`` is a new publication, its rooms unspent)."""
        self.submit_map.set(targets, map_id)

    def _map_type(self, account: str, gpus: int, cls: str, limit: float | None = None) -> str | None:
        """job_submit.lua's choice for an untyped job of ``gpus`` GPUs of class ``cls`` and a time limit of
        ``limit`` seconds (:meth:`.submit.SubmitMap.choose`); None: left untyped."""
        return self.submit_map.choose(account, gpus, cls, self.throughput[cls], limit, self.clock())

    def speed(self, cls: str, gpu_type: str | None) -> float:
        """The class's rate on ``gpu_type`` relative to its slowest type (normalized throughput per GPU)."""
        row = self.throughput.get(cls, {})
        return row.get(gpu_type or "", 0.0) / min(row.values()) if row else 0.0

    def rate(self, j: SimJob) -> float:
        return self.throughput[j.cls].get(j.run_type or "", 0.0)

    def pending_work(self) -> bool:
        """Jobs not done yet (submitted or still to come)."""
        return self._next_arrival < len(self._arrivals) or any(j.state != "DONE" for j in self.jobs.values())

    def next_event(self) -> float:
        """Time of the next arrival, completion or requeue eligibility (inf: none)."""
        t = math.inf
        if self._next_arrival < len(self._arrivals):
            t = float(self._arrivals[self._next_arrival].submit)
        for j in self.jobs.values():
            if j.state == "RUNNING":
                t = min(t, self._finish_time(j))
            elif j.state == "PENDING" and j.eligible > self.now:
                t = min(t, j.eligible)
        return t

    def advance(self, until: float) -> None:
        """Run the simulated cluster up to ``until``: every arrival, completion and requeue eligibility on
        the way, and the multifactor calculations (every ``PriorityCalcPeriod``, when on), with the scheduler after
        each."""
        while True:
            t = min(self.next_event(), self._next_calc())
            if t > until + EPS:
                break
            self.now = max(t, self.now)
            self._calc()
            self._arrive()
            self._finish()
            self.schedule()
        self.now = max(until, self.now)
        self._calc()
        self._arrive()
        self._finish()
        self.schedule()

    def _finish_time(self, j: SimJob) -> float:
        r = self.rate(j)
        return j.started + (j.work - j.done_at_start) / r if r > 0 and j.started is not None else math.inf

    def _done_now(self, j: SimJob) -> float:
        if j.started is None:
            return j.done
        return min(j.work, j.done_at_start + (self.now - j.started) * self.rate(j))

    def _arrive(self) -> None:
        while self._next_arrival < len(self._arrivals) and float(self._arrivals[self._next_arrival].submit) <= self.now + EPS:
            tj = self._arrivals[self._next_arrival]
            self._next_arrival += 1
            req = tj.gpu_type
            flex = False
            limit = getattr(tj, "time_limit", None)
            limit = self.default_time if limit is None else whole_minutes("time_limit", limit)
            if req is None and self.submit_map.lines:
                req = self._map_type(tj.account, int(tj.gpus), tj.cls, limit)
                flex = req is not None
            j = SimJob(self._next_id, str(tj.id), tj.account, tj.cls, int(tj.gpus), float(tj.work), float(tj.submit),
                       req, flex)
            j.eligible = j.submit
            j.time_limit = limit
            if self.slurm_priority is not None:
                j.priority = self.slurm_priority.job_priority(j, self.now)
            self.jobs[j.job_id] = j
            self._next_id += 1
            self._changes += 1

    def _finish(self) -> None:
        for j in self.jobs.values():
            if j.state == "RUNNING" and self.now >= self._finish_time(j) - 1e-6:
                self._stop(j, "done")
                j.state = "DONE"
                j.end = self.now
                self.events.append((self.now, "end", j.job_id))

    def _stop(self, j: SimJob, how: str) -> None:
        """End ``j``'s current run (``how``: "done" or "requeue"): its GPUs free, its work kept."""
        self._changes += 1
        if j.runs and j.runs[-1].end is None:
            j.runs[-1].end = self.now
            j.runs[-1].how = how
        j.done = self._done_now(j)
        if j.started is not None:
            held = (self.now - j.started) * j.gpus
            j.busy += held
            j.norm_busy += held * self.speed(j.cls, j.run_type)
        for n, c in j.nodes.items():
            self.free[n][j.run_type] += c
        j.nodes = {}
        j.started = None

def cluster_spec(text: str, node_size: int = 4) -> dict[str, dict[str, int]]:
    """``"k80=36,p100=36,v100=36"`` -> nodes of ``node_size`` GPUs of one type each ({node: {type: n}})."""
    from ..errors import InputError

    nodes: dict[str, dict[str, int]] = {}
    for part in (p.strip() for p in str(text).split(",") if p.strip()):
        t, _, n = part.partition("=")
        t = t.strip()
        if not t or not n.strip().isdigit() or int(n) <= 0:
            raise InputError("--cluster", part, "must be TYPE=COUNT with a whole COUNT >= 1, e.g. v100=16")
        count = int(n)
        i = 0
        while count > 0:
            nodes[f"{t}-{i:03d}"] = {t: min(node_size, count)}
            count -= node_size
            i += 1
    if not nodes:
        raise InputError("--cluster", text, "names no GPUs (e.g. k80=16,v100=16)")
    return nodes


def node_order(types: Sequence[str], order: Sequence[str], field: str = "node_weights") -> tuple[str, ...]:
    """The site-wide order of GPU types by node ``Weight`` (lowest first) from ``order``: types of the cluster,
    each once; types it leaves out come after, by name (as equal weights fall back to slurm.conf's order). An
    unknown or repeated type is an InputError naming ``field``."""
    seen: list[str] = []
    for t in order:
        t = str(t).strip()
        if t not in types:
            raise InputError(field, t, f"is not a GPU type of the cluster ({', '.join(sorted(types))})")
        if t in seen:
            raise InputError(field, t, "is named twice")
        seen.append(t)
    if not seen:
        raise InputError(field, list(order), "names no GPU type (e.g. k80,p100,v100: lowest weight first)")
    return tuple(seen) + tuple(sorted(t for t in types if t not in seen))
