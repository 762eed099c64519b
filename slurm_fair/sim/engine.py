"""Run the daemon's own round code on a simulated cluster (issue 12).

:func:`simulate` builds a :class:`~.cluster.SimCluster` from a trace, a store in a scratch folder (the trace's
throughputs as site-wide profiles) and a config (``policy.name``, ``daemon.period`` = the round,
``preemption.enabled``), then repeats: advance the cluster to the next round time (every arrival, completion
and requeue on the way, the scheduler after each), run ``daemon.round.run_round`` unchanged on it (observe,
solve, place, apply limits and SiteFactor, preempt, record), hand its published GPU type map to the
simulated ``job_submit.lua``. It stops when every job is done, or at ``horizon`` seconds. ``dry_run=True``
(``daemon.dry_run``): the rounds compute and record but set no limit, SiteFactor or type map, so the simulated
Slurm alone schedules (first come first served, each untyped job on its fastest type that fits, backfill) —
the baseline of a cluster without slurm-fair. Before each round the start and end records slurm-fair's
controller hooks would have written go into the config's spool (:mod:`.hooks`), which the round ingests.

The simulated Slurm's own priority and node choice (issue 39), with or without the daemon (its SiteFactor adds
on top, as in Slurm): ``priority="fifo"`` (the default: SiteFactor, then submit time), ``"fairshare"``
(``priority/multifactor`` with Fair Tree) or ``"fairshare-classic"`` (``PriorityFlags=NO_FAIR_TREE``) — usage
billed by ``billing`` (``"flat"``: 1 per GPU; ``"by-type"``: each type's mean speed over the trace's classes,
the slowest 1; or TRESBillingWeights as given), decayed and the factors recomputed every PriorityCalcPeriod (:func:`multifactor`,
:mod:`.slurm_priority`; ``slurm``: other settings than :class:`.fairshare.Multifactor`'s defaults),
``past_usage``: each account's raw usage at the start (billed GPU-seconds); ``node_weights``: GPU types by node
Weight, lowest first — untyped jobs take the first that fits instead of their fastest type.

Metrics (:class:`SimResult`), all from the simulated jobs:

* per job: JCT = end − submit; **total normalized throughput** = Σ over jobs of GPU-seconds × its class's
  speed on the type it ran on relative to the class's slowest type, divided by the makespan (the time-average
  of what the policies maximize, in "slowest-type GPUs");
* JCT mean, median, p95 (finished jobs), makespan (first submit to last end), GPU utilization (GPU-seconds
  held / (GPUs × makespan)), preemptions (requeues), jobs that ran on more than one type (over requeues);
* finish-time fairness per job, Themis' ρ = JCT / (T_isolated × N): T_isolated = its work at its best type's
  rate, N = the mean number of accounts with jobs in the system over the job's lifetime (sampled at every
  round); ``max_rho``, ``mean_rho``;
* per account, per round: GPUs held and normalized throughput (for plots of shares over time);
* per round, the envy and sharing-incentive violations the daemon recorded (``details["fairness"]``, read
  back from the store once at the end: ``timeline[i]["fairness"]``) and their summary (``fairness``:
  ``stats.fairness_summary``);
* every run of every job (``runs``: :func:`.runs.job_runs`) and the realized fairness of what they held
  (``realized``: :func:`.runs.realized_of`, ``docs/realized-fairness.md``), computed after the wall time is taken.

``store_path``: keep the daemon's store at that path (a new file) instead of a scratch folder, e.g. for
``slurm-fair report --database``.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..config import Config
from .. import config as config_mod
from ..daemon.plan import early_triggers, type_map
from ..daemon.plan.binding import settle
from ..daemon.preemption import wanted as preemption_wanted
from ..daemon.preemption.store import PreemptionStore
from ..daemon.round import run_round
from ..errors import InputError
from ..fairness.realized import Run, RealizedSummary
from ..fairness.stability import flips
from ..stats import fairness_summary, percentile
from .hooks import write_new_records
from ..store import Store
from .cluster import SimCluster
from .fairshare import Multifactor, speed_weights
from .outcome import Restarts, restarts
from .runs import job_runs, realized_of

PRIORITIES = ("fifo", "fairshare", "fairshare-classic")  # the simulated Slurm's priority (module docstring)
BILLINGS = ("flat", "by-type")
STALL_ROUNDS = 500
EPOCH = 1_700_000_000.0  # the simulated clock reads like unix time (2023-11-14): trace time 0 is this instant


@dataclass
class SimResult:
    policy: str
    rounds: int
    sim_seconds: float  # simulated time covered
    wall_seconds: float
    jobs: int
    finished: int
    total_throughput: float
    mean_jct: float | None
    median_jct: float | None
    p95_jct: float | None
    makespan: float | None
    utilization: float
    max_rho: float | None
    mean_rho: float | None
    preemptions: int
    multi_type_jobs: int
    round_errors: list[str] = field(default_factory=list)
    job_rows: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)  # per round: time, per-account GPUs / throughput
    fairness: dict[str, Any] = field(default_factory=dict)  # envy / SI violations over the rounds (fairness_summary)
    restarts: Restarts = field(default_factory=lambda: Restarts(0, 0, 0, 0, 0, 0))  # requeues, same-type restarts
    flips: dict[str, Any] = field(default_factory=dict)  # guarantee flips with unchanged inputs (fairness.stability)
    runs: tuple[Run, ...] = ()  # every run of every job, trace time (runs.job_runs)
    realized: RealizedSummary | None = None  # realized fairness of what the runs held (runs.realized_of)

    def summary(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in (
            "rounds", "sim_seconds", "wall_seconds", "jobs", "finished", "total_throughput", "mean_jct",
            "median_jct", "p95_jct", "makespan", "utilization", "max_rho", "mean_rho", "preemptions",
            "multi_type_jobs", "fairness", "flips")} | {"round_errors": self.round_errors[:20],
                                                        "restarts": dataclasses.asdict(self.restarts),
                                                        "realized": self.realized and self.realized.as_json()}


def _check_fits(jobs, throughput, nodes) -> None:
    """Every job must fit the cluster some day: GPUs of one type its class runs on, at least as many as it asks."""
    total = _capacity(nodes)
    for j in jobs:
        room = [total.get(t, 0) for t, v in throughput.get(j.cls, {}).items() if v > 0]
        if not room or max(room) < j.gpus:
            raise InputError("trace", j.id, f"asks for {j.gpus} GPU(s) of one type; the cluster has at most "
                             f"{max(room) if room else 0} of a type its class {j.cls!r} runs on")


def simulate(trace: Any, nodes: Mapping[str, Mapping[str, int]], policy: str, *, round_s: float = 300.0,
             restart_s: float = 60.0, preemption: bool = False, upgrade: bool = False, dry_run: bool = False,
             horizon: float | None = None,
             accounts: Mapping[str, int] | None = None, progress: Callable[[float, int, int], None] | None = None,
             workdir: str | Path | None = None, store_path: str | Path | None = None, priority: str = "fifo",
             billing: str | Mapping[str, float] = "flat", node_weights: Sequence[str] | None = None,
             past_usage: Mapping[str, float] | None = None, slurm: Multifactor | None = None) -> SimResult:
    """Simulate ``trace`` (``traces.Trace``) on ``nodes`` under ``policy``; see the module docstring."""
    t0 = time.monotonic()
    jobs = list(trace.jobs)
    throughput = {c: dict(r) for c, r in trace.throughput.items()}
    accts = dict(accounts or {}) or {a: 1 for a in sorted({j.account for j in jobs})}
    _check_fits(jobs, throughput, nodes)
    if store_path is not None and Path(store_path).exists():
        raise InputError("store_path", str(store_path), "exists; the simulation writes a new store")
    model = multifactor(priority, billing, throughput, _capacity(nodes), slurm)
    if past_usage and model is None:
        raise InputError("past_usage", dict(past_usage), "needs priority = \"fairshare\" or \"fairshare-classic\"")
    cluster = SimCluster(nodes, accts, throughput, jobs, restart_s=restart_s, epoch=EPOCH, node_weights=node_weights)
    start = min((float(j.submit) for j in jobs), default=0.0)
    cluster.now = start
    if model is not None:
        cluster.use_multifactor(model, past_usage)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        cfg = config_mod.from_dict({
            "daemon": {"database": str(store_path or Path(tmp) / "sim.sqlite"), "period": float(round_s),
                       "dry_run": bool(dry_run)},
            "policy": {"name": policy},
            "limits": {"ownership_file": ""},  # a simulated cluster's limits: nothing to keep outside the store
            "hooks": {"spool": str(Path(tmp) / "spool")},
            # moves need no reclaim: --upgrade alone moves the (checkpointing) jobs and preempts nothing else
            "preemption": {"enabled": bool(preemption), "upgrade": "checkpointing" if upgrade else "off"},
        })
        store = Store(cfg.database_path)
        try:
            for cls, row in throughput.items():
                for g, v in row.items():
                    store.set_profile(cls, g, float(v))
            rounds, errors, timeline, present, idle = 0, [], [], [], 0
            hook_records: set[tuple[int, int, str]] = set()  # the hooks' records written (sim/hooks.py)
            last = None
            blocked_seen: set[int] = set()
            t = start
            while cluster.pending_work() and (horizon is None or t <= start + horizon):
                if dry_run:
                    cluster.advance(t)
                else:
                    t = _advance_watching(cluster, t, cfg, last, blocked_seen)
                round_at = cluster.now
                write_new_records(cluster.jobs.values(), cluster.epoch, str(cfg.spool_path), hook_records)
                res = last = run_round(cluster, store, cfg, policy, now=cluster.clock())
                rounds += 1
                if res.status not in ("ok", "dry-run"):
                    errors.append(f"t={cluster.now - start:.0f}s: {res.status}: {res.message}")
                if res.status == "ok" and res.decisions is not None:  # a dry run publishes no type map
                    cluster.set_type_map(res.decisions.targets)
                cluster.schedule()
                timeline.append({"round": res.round_id, **_sample(cluster, start)})
                present.append((cluster.now, len({j.account for j in cluster.jobs.values() if j.state != "DONE"})))
                if progress is not None:
                    progress(cluster.now - start, sum(j.state == "DONE" for j in cluster.jobs.values()), len(jobs))
                nxt = cluster.next_event()
                waiting = any(j.state == "PENDING" for j in cluster.jobs.values())
                # nothing running and nothing to come, yet jobs wait: the placer may hold GPUs back for a while
                # (an account's smallest job must fit its rounded share: its claim grows each round); give up
                # only after STALL_ROUNDS such rounds in a row
                idle = 0 if (math.isfinite(nxt) or any(j.state == "RUNNING" for j in cluster.jobs.values())) else idle + 1
                if idle > STALL_ROUNDS:
                    stuck = sum(j.state == "PENDING" for j in cluster.jobs.values())
                    errors.append(f"stopped: {stuck} pending job(s) did not start in {STALL_ROUNDS} rounds with every GPU idle")
                    break
                # with no job pending a round changes nothing (no share to move, no job to start, signal or
                # requeue): skip to the first round time at or after the next event; otherwise every round runs
                # one period after this one (an early round moves the periodic ones, as in the daemon)
                if waiting or not math.isfinite(nxt) or (upgrade and not dry_run and _could_move(cluster)):
                    t += round_s  # (upgrade moves need the rounds while a job could move to a faster type)
                else:
                    t = max(t + round_s, start + math.ceil((nxt - start) / round_s - 1e-9) * round_s)
                # (no snapshot: the version is not checked; the simulated Slurm, 24.11, can retype pending jobs)
                due = PreemptionStore(store).next_due() if preemption_wanted(cfg) and not dry_run else None
                # as the daemon does (service.preemption_wakeup): the round that requeues comes 1 s after the
                # grace; one already due at this round was this round's to act on, and does not repeat it at once
                if due is not None and due - cluster.epoch + 1.0 > round_at:
                    t = min(t, max(due - cluster.epoch + 1.0, cluster.now))
            fair = {r.id: r.values["fairness"] for r in store.round_series(keys=("fairness",))}
            for s in timeline:
                s["fairness"] = fair.get(s["round"])
            claimant = _claimants(store, cluster)
            flip_counts = flips(store.round_series(keys=("real", "fingerprint", "ideal"))).as_json()
        finally:
            store.close()
    res = _result(policy, cluster, throughput, rounds, errors, timeline, present, start, time.monotonic() - t0)
    res.restarts = _restarts(cluster, claimant)
    res.flips = flip_counts
    res.runs = job_runs(cluster.jobs.values(), start)
    res.realized = realized_of(res.runs, accts, _capacity(nodes), throughput, cluster.now - start)
    return res


def multifactor(priority: str, billing: str | Mapping[str, float], throughput: Mapping[str, Mapping[str, float]],
                capacity: Mapping[str, int], slurm: Multifactor | None = None) -> Multifactor | None:
    """The simulated Slurm's ``priority/multifactor`` settings for ``simulate``'s ``priority`` and ``billing``
    (None: ``"fifo"``): ``slurm``'s (default :class:`.fairshare.Multifactor`: Slurm's half-life, calc period and
    max age, the testbed's weights) with Fair Tree (``"fairshare"``) or the classic formula
    (``"fairshare-classic"``) and TRESBillingWeights flat (``"flat"``: 1 per GPU), ``"by-type"``
    (:func:`.fairshare.speed_weights` of the trace's classes over the cluster's types) or as given (a mapping,
    e.g. ``{"GRES/gpu:a100": 108.6, "GRES/gpu:v100": 40}``; :func:`.fairshare.billing`)."""
    if priority not in PRIORITIES:
        raise InputError("priority", priority, "must be one of " + ", ".join(PRIORITIES))
    if isinstance(billing, str) and billing not in BILLINGS:
        raise InputError("billing", billing, "must be one of " + ", ".join(BILLINGS) + " or a mapping of weights")
    if priority == "fifo":
        for name, v in (("billing", None if billing == "flat" else billing), ("slurm", slurm)):
            if v is not None:
                raise InputError(name, v, "is for fair-share: it needs priority = \"fairshare\" or "
                                 "\"fairshare-classic\"")
        return None
    if not isinstance(billing, str):
        weights = dict(billing)
    else:
        weights = {"GRES/gpu": 1.0} if billing == "flat" else speed_weights(throughput, sorted(capacity))
    return dataclasses.replace(slurm or Multifactor(), fair_tree=priority == "fairshare", billing_weights=weights)


def _capacity(nodes: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    """GPU type -> GPUs of the cluster."""
    out: dict[str, int] = {}
    for g in nodes.values():
        for t, c in g.items():
            out[t] = out.get(t, 0) + int(c)
    return out


def _claimants(store: Store, cluster: SimCluster) -> dict[tuple[str, float], str]:
    """(victim's trace id, requeue time in trace time) -> the trace id of the job its preemption was for, where the
    preemption record names one (``for_job``)."""
    out: dict[tuple[str, float], str] = {}
    for rec in PreemptionStore(store).history(0.0):
        who = getattr(rec, "for_job", None)
        victim = cluster.jobs.get(rec.job_id)
        claimant = cluster.jobs.get(who) if who is not None else None
        if victim is None or claimant is None or rec.requeued_at is None:
            continue
        out[(victim.trace_id, round(rec.requeued_at - cluster.epoch, 6))] = claimant.trace_id
    return out


def _restarts(cluster: SimCluster, claimant: Mapping[tuple[str, float], str]) -> Restarts:
    """The run's requeues from each job's runs (``SimJob.runs``), in trace time."""
    runs, first = {}, {}
    for j in cluster.jobs.values():
        runs[j.trace_id] = list(j.runs)
        first[j.trace_id] = j.first_start
    return restarts(runs, first, claimant)


def _advance_watching(cluster: SimCluster, until: float, cfg: Config, last: Any, seen: set[int]) -> float:
    """Advance the cluster event by event up to ``until`` as the daemon's poll sees it between rounds: before
    each event the type map is published again from the cluster as it is then and the last round's decisions
    (``plan.type_map``; ``last``: that round's ``RoundResult``); after each, the early-round triggers are
    checked (``plan.early_triggers``: newcomers, jobs held back by a limit while GPUs idle) and, when one
    appears, the round comes ``daemon.early_round_after`` seconds later (if that is before ``until``).
    ``seen``: jobs that triggered already and are still blocked (each triggers once while it stays blocked;
    kept by the caller across rounds). Returns the time the next round runs at."""
    decisions = getattr(last, "decisions", None) if getattr(last, "status", "") == "ok" else None
    last_demand = dict(last.plan.demand) if getattr(last, "plan", None) is not None else {}
    early = None
    while True:
        stop = until if early is None else min(until, early)
        nxt = cluster.next_event()
        if nxt > stop + 1e-9:
            break
        if decisions is not None:  # demand as the round settles it (begin times due within a period count)
            snap = settle(cluster.snapshot(), cluster.clock() + float(cfg.daemon.period), {})
            cluster.set_type_map(type_map(decisions, snap, cfg))
        cluster.advance(nxt)
        trig = early_triggers(cluster.snapshot(), last_demand, cfg)
        if early is None and (trig.newcomers or (trig.blocked - seen)):
            early = cluster.now + float(cfg.daemon.early_round_after)
        seen.intersection_update(trig.blocked)
        seen.update(trig.blocked)
    stop = until if early is None else min(until, early)
    cluster.advance(stop)
    return stop


def _could_move(cluster: SimCluster) -> bool:
    """Some running job's class is faster on a type with enough idle GPUs for it (``upgrade.upgrade_moves`` moves
    only onto idle GPUs of a faster type): otherwise no round can move anything until an event — a job ends or
    arrives — and the rounds in between are skipped, as without moves (a Philly window with moves ran every
    300-s round through 700 simulated hours). Leases and budgets are not checked: rounds go on while they hold."""
    idle: dict[str, int] = {}
    for row in cluster.free.values():
        for g, n in row.items():
            idle[g] = idle.get(g, 0) + n
    for j in cluster.jobs.values():
        if j.state != "RUNNING":
            continue
        row = cluster.throughput.get(j.cls, {})
        here = row.get(j.run_type or "", 0.0)
        if any(v > here and idle.get(g, 0) >= j.gpus for g, v in row.items()):
            return True
    return False


def _sample(cluster: SimCluster, start: float) -> dict[str, Any]:
    gpus: dict[str, int] = {}
    thr: dict[str, float] = {}
    for j in cluster.jobs.values():
        if j.state == "RUNNING":
            gpus[j.account] = gpus.get(j.account, 0) + j.gpus
            thr[j.account] = thr.get(j.account, 0.0) + j.gpus * cluster.speed(j.cls, j.run_type)
    return {"time": cluster.now - start, "gpus": gpus, "throughput": thr}


def _result(policy, cluster: SimCluster, throughput, rounds, errors, timeline, present, start, wall) -> SimResult:
    now = cluster.now
    rows, jcts, rhos = [], [], []
    norm_gpu_s = busy = 0.0
    ends = []
    for j in cluster.jobs.values():
        held = j.busy + ((now - j.started) * j.gpus if j.started is not None else 0.0)
        busy += held
        # normalized GPU-seconds: per run type; a job that moved between types counts each run at its speed
        norm_gpu_s += j.norm_busy + ((now - j.started) * j.gpus * cluster.speed(j.cls, j.run_type)
                                     if j.started is not None else 0.0)
        row = {"id": j.trace_id, "account": j.account, "class": j.cls, "gpus": j.gpus, "submit": j.submit - start,
               "start": None if j.first_start is None else j.first_start - start,
               "end": None if j.end is None else j.end - start, "restarts": j.restarts,
               "types": sorted(j.types_used)}
        if j.end is not None:
            jct = j.end - j.submit
            jcts.append(jct)
            ends.append(j.end)
            best = max(throughput[j.cls].values())
            n = [k for tm, k in present if j.submit <= tm <= j.end] or [1]
            t_iso = j.work / best * max(1.0, statistics.fmean(n))
            rho = jct / t_iso if t_iso > 0 else math.inf
            rhos.append(rho)
            row.update(jct=jct, rho=rho)
        rows.append(row)
    first = min((j.submit for j in cluster.jobs.values()), default=start)
    makespan = (max(ends) - first) if ends else None
    total_gpus = sum(sum(g.values()) for g in cluster.node_gpus.values())
    span = makespan if makespan else max(now - first, 0.0)
    return SimResult(
        policy=policy, rounds=rounds, sim_seconds=now - start, wall_seconds=wall, jobs=len(cluster._arrivals),
        finished=len(jcts), total_throughput=norm_gpu_s / span if span > 0 else 0.0,
        mean_jct=statistics.fmean(jcts) if jcts else None, median_jct=percentile(jcts, 0.5),
        p95_jct=percentile(jcts, 0.95), makespan=makespan,
        utilization=busy / (total_gpus * span) if span > 0 and total_gpus else 0.0,
        max_rho=max(rhos) if rhos else None, mean_rho=statistics.fmean(rhos) if rhos else None,
        preemptions=cluster.preemptions, multi_type_jobs=sum(len(j.types_used) > 1 for j in cluster.jobs.values()),
        round_errors=errors, job_rows=rows, timeline=timeline,
        fairness=fairness_summary(s.get("fairness") for s in timeline),
    )
