"""The vs-Slurm benchmark's pure parts (``benchmarks/vs_slurm.py``, issue 39): its baselines, what it measures of
one simulation, and the issue's goals. Pure: the script runs the simulations and prints.

* :class:`Baseline` / :data:`BASELINES` — the Slurm a site runs, as ``simulate`` models it: FIFO or fair-share
  priority, flat or by-type GPU billing, node weights fastest type first or slowest first (the types by their mean
  speed over the trace's classes, as by-type billing weighs them: :func:`.fairshare.types_by_speed`), and ``fifo-class`` (the type rule of ``--dry-run`` before
  issue 39: the fastest free type of the job's class);
* :func:`run_measures` — one simulation's realized fairness (:class:`RunMeasures`) from its
  :class:`~slurm_fair.fairness.realized.Realized` record and runs: the realized share ratio's p5 and minimum over
  backlog episodes of at least an hour, its p5 over backlogged account-hours (:func:`weighted_percentile`: each
  hour bucket weighs its backlogged seconds), time to fair share's median and p95, the share of compared pair-hours
  with envy of held GPUs, each account's time-weighted ratio over its long episodes and its mean JCT, the median
  finished job's run time;
* :class:`TraceCell` / :func:`trace_cell` — one trace of a benchmark cell against the reference baseline and FIFO
  on the same trace, with the worst account's mean-JCT ratio (:func:`account_jct_ratio`);
* :func:`worst` — a measure's worst trace over a workload's traces, named (trace, account);
* :func:`goal_checks` — issue 39's goals on every trace of a cell (the trace with the smallest margin is named);
  :func:`requeue_checks` — issue 28's requeue and flip goals, which stay.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ..errors import InputError
from ..fairness.realized import LONG, Realized, Run, summarize
from ..stats import percentile
from .fairshare import types_by_speed
from .outcome import Ratios

TOL = 1e-9


# ------------------------------------------------------------------------------------------------ baselines


@dataclass(frozen=True)
class Baseline:
    """A dry run (the daemon computes, sets nothing) under ``priority`` (fifo | fairshare), ``billing`` (flat |
    by-type; fair-share only) and node weights ``order`` (fast | slow: one site-wide order, the types by their
    by-type billing weight, :func:`.fairshare.types_by_speed`, fastest or slowest first; None: the fastest free type
    of the job's class, the simulator's rule before issue 39)."""

    name: str
    priority: str
    billing: str | None
    order: str | None

    def kwargs(self, throughput: Mapping[str, Mapping[str, float]], types: Sequence[str]) -> dict[str, Any]:
        """``slurm_fair.sim.engine.simulate``'s keyword arguments for this baseline on a trace and cluster."""
        out: dict[str, Any] = {"dry_run": True}
        if self.order is None:
            return out  # today's --dry-run: nothing else passed
        out["priority"] = self.priority
        if self.billing is not None:
            out["billing"] = self.billing
        slow_first = types_by_speed(throughput, types)
        out["node_weights"] = list(slow_first[::-1] if self.order == "fast" else slow_first)
        return out


BASELINES = {b.name: b for b in (
    Baseline("fifo-fast", "fifo", None, "fast"), Baseline("fifo-slow", "fifo", None, "slow"),
    Baseline("flat-fast", "fairshare", "flat", "fast"), Baseline("flat-slow", "fairshare", "flat", "slow"),
    Baseline("bytype-fast", "fairshare", "by-type", "fast"), Baseline("bytype-slow", "fairshare", "by-type", "slow"),
    Baseline("fifo-class", "fifo", None, None))}


def baselines(spec: str) -> list[Baseline]:
    """The baselines of a comma list of :data:`BASELINES` names and ``all`` (every one but ``fifo-class``), each
    once, in the order named."""
    names: list[str] = []
    for n in (x.strip() for x in spec.split(",") if x.strip()):
        names += [b for b in BASELINES if b != "fifo-class"] if n == "all" else [n]
    for n in names:
        if n not in BASELINES:
            raise InputError("--baselines", n, f"is not a baseline ({', '.join(BASELINES)})")
    return [BASELINES[n] for n in dict.fromkeys(names)]


# ------------------------------------------------------------------------------------------------ one simulation


def weighted_percentile(values: Sequence[float], weights: Sequence[float], q: float) -> float | None:
    """The smallest value v with the weights of the values <= v at least ``q`` of the total (None when no weight):
    the ratio below which a ``q`` part of the weighed time lies."""
    pairs = sorted((v, w) for v, w in zip(values, weights) if w > 0)
    total = sum(w for _v, w in pairs)
    if total <= 0:
        return None
    acc = 0.0
    for v, w in pairs:
        acc += w
        if acc >= q * total - TOL * total:
            return v
    return pairs[-1][0]


@dataclass(frozen=True)
class RunMeasures:
    """One simulation's realized fairness (``docs/realized-fairness.md``): over backlog episodes of at least
    ``long`` seconds (``long_episodes`` of them) the ratio's p5 and minimum (with its account); the p5 over
    backlogged account-hours (weighted by backlogged seconds); time to fair share's median and p95 (seconds, the
    episodes the window did not cut); the share of compared pair-hours with envy of held GPUs; per account its
    time-weighted ratio over its episodes of at least ``long`` seconds (accounts with one) and its mean JCT
    (accounts with a finished job); the median finished job's run time (seconds it ran, over all its runs)."""

    episodes: int
    long_episodes: int
    p5_ratio: float | None
    min_ratio: float | None
    min_ratio_account: str | None
    p5_hours: float | None
    ttfs_median: float | None
    ttfs_p95: float | None
    envy_share: float | None
    account_ratios: Mapping[str, float] = field(default_factory=dict)
    account_jct: Mapping[str, float] = field(default_factory=dict)
    median_run: float | None = None

    @property
    def lowest_account(self) -> tuple[float | None, str | None]:
        """The lowest time-weighted ratio of an account, and that account."""
        return lowest(self.account_ratios)


def lowest(values: Mapping[str, float]) -> tuple[float | None, str | None]:
    """The smallest value and its key (ties: the first name); (None, None) when empty."""
    if not values:
        return None, None
    k = min(values, key=lambda a: (values[a], a))
    return values[k], k


def run_measures(rec: Realized | None, runs: Sequence[Run], long: float = LONG) -> RunMeasures:
    """The measures of one simulation from its realized record (None: nothing simulated) and its runs."""
    per_job: dict[str, float] = {}
    done: set[str] = set()
    for r in runs:
        if r.start is not None and r.end is not None:
            per_job[r.job] = per_job.get(r.job, 0.0) + (r.end - r.start)
        if r.ended:
            done.add(r.job)
    median_run = percentile([per_job[j] for j in sorted(done)], 0.5)
    if rec is None:
        return RunMeasures(0, 0, None, None, None, None, None, None, None, {}, {}, median_run)
    s = summarize(rec, long)
    longs = [e for e in rec.episodes if e.length >= long - TOL]
    low = min(longs, key=lambda e: (e.ratio, e.account, e.start)) if longs else None
    hours = [h for h in rec.hours if h.backlogged > 0]
    per_account: dict[str, tuple[float, float]] = {}  # account -> (sum of ratio x length, sum of length)
    for e in longs:
        x, n = per_account.get(e.account, (0.0, 0.0))
        per_account[e.account] = (x + e.ratio * e.length, n + e.length)
    return RunMeasures(
        episodes=s.episodes, long_episodes=s.long_episodes, p5_ratio=s.p5_ratio, min_ratio=s.min_ratio,
        min_ratio_account=low.account if low else None,
        p5_hours=weighted_percentile([h.ratio for h in hours], [h.backlogged for h in hours], 0.05),
        ttfs_median=s.ttfs_median, ttfs_p95=s.ttfs_p95, envy_share=s.envy_share,
        account_ratios={a: x / n for a, (x, n) in sorted(per_account.items()) if n > 0},
        account_jct={a.account: a.mean_jct for a in rec.accounts if a.mean_jct is not None},
        median_run=median_run)


# ------------------------------------------------------------------------------------------------ one cell


def account_jct_ratio(run: Mapping[str, float], ref: Mapping[str, float]) -> tuple[float | None, str | None]:
    """The largest ratio of an account's mean JCT here over its mean JCT in the reference, over the accounts with a
    finished job in both, and that account (ties: the first name)."""
    both = {a: run[a] / ref[a] for a in run if a in ref and ref[a] > 0}
    if not both:
        return None, None
    k = min(both, key=lambda a: (-both[a], a))
    return both[k], k


@dataclass(frozen=True)
class TraceCell:
    """One trace of a cell: ``ratios`` to the reference baseline on the same trace (mean JCT, makespan, p95, max ρ),
    ``fifo`` the same to the FIFO baseline's (None without a FIFO run), the worst account's mean-JCT ratio to the
    reference (and that account), this run's measures and the reference's."""

    trace: str
    ratios: Ratios
    fifo: Ratios | None
    account_jct: float | None
    account_jct_account: str | None
    run: RunMeasures
    ref: RunMeasures

    @property
    def fifo_mean_jct(self) -> float | None:
        return self.fifo.mean_jct if self.fifo else None


def trace_cell(ratios: Ratios, fifo: Ratios | None, run: RunMeasures, ref: RunMeasures) -> TraceCell:
    """A :class:`TraceCell` (the trace is ``ratios.seed``)."""
    v, a = account_jct_ratio(run.account_jct, ref.account_jct)
    return TraceCell(ratios.seed, ratios, fifo, v, a, run, ref)


@dataclass(frozen=True)
class Worst:
    """A measure's worst value over a workload's traces, its trace and account (None where not per account);
    ``value`` None and ``trace`` "-" when no trace had the number."""

    value: float | None
    trace: str
    account: str | None = None


Pick = Callable[[TraceCell], "tuple[float | None, str | None]"]


def worst(cells: Sequence[TraceCell], pick: Pick, highest: bool) -> Worst:
    """The worst of ``pick(cell)`` = (value, account) over ``cells``: the highest (``highest``) or the lowest;
    ties: the first trace."""
    best: Worst | None = None
    for c in cells:
        v, a = pick(c)
        if v is None:
            continue
        if best is None or (v > best.value if highest else v < best.value):
            best = Worst(v, c.trace, a)
    return best or Worst(None, "-")


# ------------------------------------------------------------------------------------------------ the goals


@dataclass(frozen=True)
class GoalSpec:
    """Which goals a cell has: ``reclaim`` (preemption on), ``moves`` (upgrade moves on), ``high_load`` (the 90 %
    workload), the round and the preemption grace (seconds)."""

    reclaim: bool
    moves: bool
    high_load: bool
    round_s: float
    grace: float


@dataclass(frozen=True)
class GoalCheck:
    """One goal over a cell's traces. ``met``: True (every trace met it or had nothing to measure), False (a trace
    missed it), None (not checked on some trace: a number it needs is missing). ``value``/``bound``/``trace``/
    ``account``: the trace with the smallest margin (value − bound, or bound − value for an upper bound);
    ``checked``: the traces that had the number."""

    goal: str
    met: bool | None
    value: float | None
    bound: float | None
    trace: str
    account: str | None
    checked: int


@dataclass(frozen=True)
class _Goal:
    name: str
    value: Pick  # (value, account); a value None: nothing to measure on that trace (met) if vacuous, else unchecked
    bound: Callable[[TraceCell], float | None]
    higher: bool  # the value must be at least the bound (else at most)
    vacuous: bool = True


def above_baseline(ref: float | None) -> float:
    """A realized share ratio's bound against the fair-share by-type baseline: 0.15 above it, or 0.95 where it is
    above 0.80 (so at most 0.95); 0.95 where the baseline had no such episode."""
    return 0.95 if ref is None else min(ref + 0.15, 0.95)


def _goals(spec: GoalSpec) -> list[_Goal]:
    p5 = _Goal(f"share p5 >= {0.90 if spec.reclaim else 0.80:.2f}", lambda c: (c.run.p5_ratio, None),
               lambda c: 0.90 if spec.reclaim else 0.80, True)
    out = [p5, _Goal("share p5 >= ref+0.15|0.95", p5.value, lambda c: above_baseline(c.ref.p5_ratio), True)]
    if spec.reclaim:
        out += [
            _Goal("share min >= 0.75", lambda c: (c.run.min_ratio, c.run.min_ratio_account), lambda c: 0.75, True),
            _Goal("share min >= ref+0.15|0.95", lambda c: (c.run.min_ratio, c.run.min_ratio_account),
                  lambda c: above_baseline(c.ref.min_ratio), True),
            _Goal("every account >= 0.90", lambda c: c.run.lowest_account, lambda c: 0.90, True),
            _Goal("every account >= ref+0.15|0.95", lambda c: c.run.lowest_account,
                  lambda c: above_baseline(c.ref.lowest_account[0]), True),
            _Goal("ttfs p95 <= 2 rounds + grace", lambda c: (c.run.ttfs_p95, None),
                  lambda c: 2 * spec.round_s + spec.grace, False),
            _Goal("envy <= 1 %", lambda c: (c.run.envy_share, None), lambda c: 0.01, False)]
    else:
        out.append(_Goal("ttfs p95 <= median run", lambda c: (c.run.ttfs_p95, None), lambda c: c.ref.median_run, False))
    # the baseline had no episode at all: any wait is more than half of its
    out.append(_Goal("ttfs p95 <= ref/2", lambda c: (c.run.ttfs_p95, None), lambda c: 0.5 * (c.ref.ttfs_p95 or 0.0),
                     False))
    out += [_Goal("mean JCT <= 1.00 ref", lambda c: (c.ratios.mean_jct, None), lambda c: 1.00, False, False),
            _Goal("makespan <= 1.02 ref", lambda c: (c.ratios.makespan, None), lambda c: 1.02, False, False)]
    if spec.moves:
        most = 0.60 if spec.high_load else 0.90
        out.append(_Goal(f"mean JCT <= {most:.2f} FIFO", lambda c: (c.fifo_mean_jct, None), lambda c: most, False,
                         False))
    return out


def _check(goal: _Goal, cells: Sequence[TraceCell]) -> GoalCheck:
    missed = unchecked = False
    pick: tuple[float, float, float, str, str | None] | None = None  # (margin, value, bound, trace, account)
    checked = 0
    for c in cells:
        v, acct = goal.value(c)
        b = goal.bound(c)
        if v is None and goal.vacuous:
            continue
        if v is None or b is None:
            unchecked = True
            continue
        checked += 1
        margin = v - b if goal.higher else b - v
        missed = missed or margin < -TOL
        if pick is None or margin < pick[0]:
            pick = (margin, v, b, c.trace, acct)
    met = False if missed else (None if unchecked else True)
    if pick is None:
        return GoalCheck(goal.name, met, None, None, "-", None, 0)
    return GoalCheck(goal.name, met, pick[1], pick[2], pick[3], pick[4], checked)


def goal_checks(cells: Sequence[TraceCell], spec: GoalSpec) -> list[GoalCheck]:
    """Issue 39's goals on every trace of a cell (``docs/vs-slurm.md`` lists them): the realized share ratio
    (p5 >= 0.90, min >= 0.75 and every account's time-weighted ratio >= 0.90 with reclaim; p5 >= 0.80 without),
    each 0.15 above the reference baseline's or 0.95; time to fair share's p95 <= 2 rounds + the grace with reclaim
    (<= the reference run's median job run time without) and <= half the reference's; envy <= 1 % of pair-hours
    with reclaim; mean JCT <= 1.00x and makespan <= 1.02x the reference's; with moves, mean JCT <= 0.90x FIFO's
    (0.60x at high load)."""
    return [_check(g, cells) for g in _goals(spec)]


def requeue_checks(requeues: int, jobs: int, wasted: int, flips: int, unchanged: int,
                   preempts: bool) -> list[GoalCheck]:
    """Issue 28's goals that stay (over a cell's traces together): with preemption or moves, requeues <= 0.5 a job
    and same-type restarts before the job they were for (``wasted``) <= 10 % of requeues; guarantee flips with the
    whole problem unchanged <= 5 % of such account-type-rounds (``unchanged``)."""
    out = []

    def one(name: str, value: float | None, bound: float) -> None:
        out.append(GoalCheck(name, True if value is None else value <= bound + TOL, value, bound, "all", None,
                             0 if value is None else 1))

    if preempts:
        one("requeues/job <= 0.5", requeues / jobs if jobs else None, 0.5)
        one("same-type restarts <= 10 %", wasted / requeues if requeues else None, 0.10)
    one("flips <= 5 %", flips / unchanged if unchanged else None, 0.05)
    return out


def met(checks: Sequence[GoalCheck]) -> bool | None:
    """All met (True), one missed (False), else one not checked (None)."""
    if any(c.met is False for c in checks):
        return False
    return None if any(c.met is None for c in checks) else True
