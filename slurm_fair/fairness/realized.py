"""Realized fairness: how much of its share each account *received*, computed from what its jobs held (issue 39,
item 1). Pure: no I/O; one exact sweep over the runs' events. The definitions, their formulas and why each
choice was made: ``docs/realized-fairness.md``.

Inputs, typed: :class:`Run` rows (one per run of a job: a requeued or moved job has several; a job that never
started has one row without type, start and end), each account's weight, GPUs per type, each class's speed per
type (:func:`speeds_from_throughput`: relative to the class's slowest type, as the policies normalize) and a
window [t0, t1].

Definitions (n accounts a with weights w_a, W = Σ w_a, capacity C_g of type g):

* **share** of a on type g: s_a,g = w_a / W × C_g (its sharing-incentive bundle).
* A job is **in the system** from its submit until the end of its run that ended it; it is **pending** while
  in the system and not running (before its first start, between a requeue and its restart). It **fits type g**
  when its class runs on g and its GPUs are at most a's share there (gpus ≤ s_a,g): the static partition could
  run it on g. It **could run** when it fits some type. One rule serves the backlog and the demand cap: a job
  that could run counts in both, one that fits no type in neither (the partition could not run it either, so
  sharing incentive promises it nothing).
* a is **backlogged** at t when one of its jobs that could run is pending at t; a **backlog episode** is a maximal
  interval of [t0, t1] where it is.
* **entitled** rate B_a(t): the value of a's share s_a to its jobs that could run, in the system at t (running and
  pending), each at its own class's speeds, on the types it fits, up to its own GPUs — the transport LP
  max Σ_j,g x_j,g speed(c_j, g) s.t. Σ_g x_j,g ≤ gpus_j, Σ_j x_j,g ≤ s_a,g, x_j,g ≥ 0 (0 where j does not fit g),
  solved exactly by :func:`.transport.transport_value` (successive most-profitable augmenting paths).
* **received** rate r_a(t) = Σ over a's runs running at t of gpus × speed(class, type) (every run: a job larger
  than any share that ran is received too).
* **realized share ratio** of an episode E: ∫_E r_a / ∫_E B_a; of an hour bucket: the same over the bucket's
  backlogged part; an account's **time-weighted ratio**: Σ_E ratio_E × |E| / Σ_E |E|.
* **time to fair share** of an episode starting at s: the first τ − s with ∫_s^τ r_a ≥ 0.95 ∫_s^τ B_a; if the
  episode ends before that and before t1, its length (the account then had no fitting job waiting: it ran all
  it could use); None when the window's end cut the episode first.
* **envy of held GPUs**: at t, with H_b(t) the GPUs per type b's runs hold, a's speeds the best of its classes in
  the system per type and D_a its jobs' GPUs in the system, V_a(x) = Σ_g take_g × speed_g with x's GPUs taken
  fastest type first up to D_a (:func:`.values.row_values`); a envies b when V_a(H_b × w_a / w_b) > 1.05 ×
  V_a(H_a), counted only while a is backlogged; over every ordered pair a ≠ b while both have a job in the system
  (``compared_seconds``); ``envy_share`` = envious pair-seconds / compared pair-seconds. The share of the pair-time
  a is backlogged (the definition before) is kept as ``backlogged_envy_share``.
* per account: mean JCT of its jobs that ended in the window (end of the ending run − submit); its throughput,
  ∫_{t0}^{t1} r_a, and that over every account's (its share of the cluster's realized throughput).

Every quantity is piecewise constant between events (submits, starts, ends, hour boundaries), so each integral
is a sum over the event grid and the 0.95 crossing is solved exactly within its segment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from ..errors import InputError
from ..stats import percentile
from ..validate import number
from .transport import transport_value
from .values import row_values

FAIR = 0.95  # time to fair share: until the cumulative ratio reaches this
ENVY = 1.05  # a envies b when b's scaled bundle is worth more than this times a's own
HOUR = 3600.0
LONG = HOUR  # the summary's episode ratios: episodes at least this long (shorter: time to fair share's business)
EPS = 1e-9


@dataclass(frozen=True)
class Run:
    """One run of a job (``gpu_type``, ``start``, ``end`` None: the job never started; ``end`` None alone: still
    running). ``ended``: the job ended with this run (its work was done); False: requeued or moved after it."""

    job: str
    account: str
    cls: str
    gpus: int
    submit: float
    gpu_type: str | None
    start: float | None
    end: float | None
    ended: bool


@dataclass(frozen=True)
class Episode:
    """One backlog episode of an account: [start, end], ``censored`` when the window's end cut it; ``received`` and
    ``entitled`` the integrals of r_a and B_a over it (speed-weighted GPU-seconds); ``reached``: "ratio" (the
    cumulative ratio reached 0.95 after ``time_to_fair_share`` seconds), "all" (the episode ended first: its length),
    "censored" (neither before t1: None)."""

    account: str
    start: float
    end: float
    censored: bool
    received: float
    entitled: float
    time_to_fair_share: float | None
    reached: str

    @property
    def length(self) -> float:
        return self.end - self.start

    @property
    def ratio(self) -> float:
        return self.received / self.entitled if self.entitled > 0 else 0.0


@dataclass(frozen=True)
class HourBucket:
    """An account's backlogged part of hour ``hour`` (from t0): ``backlogged`` seconds, its integrals."""

    account: str
    hour: int
    backlogged: float
    received: float
    entitled: float

    @property
    def ratio(self) -> float:
        return self.received / self.entitled if self.entitled > 0 else 0.0


@dataclass(frozen=True)
class AccountRealized:
    """One account over the window: ``backlogged`` seconds, ``ratio`` (time-weighted over its episodes; None
    without one), ``jobs_ended`` and their ``mean_jct`` (None without one), ``throughput`` (∫ r_a) and its
    ``throughput_share`` of every account's (None when nobody ran)."""

    account: str
    weight: float
    backlogged: float
    ratio: float | None
    jobs_ended: int
    mean_jct: float | None
    throughput: float
    throughput_share: float | None


@dataclass(frozen=True)
class Realized:
    """Realized fairness over [t0, t1]: every episode and hour bucket, per account, and the envy of held GPUs
    (``envy_seconds`` of ``compared_seconds`` ordered pair-seconds in which both accounts had a job in the system;
    ``backlogged_seconds``: those in which the envious one was backlogged, the denominator before issue 39's
    second round)."""

    t0: float
    t1: float
    episodes: tuple[Episode, ...]
    hours: tuple[HourBucket, ...]
    accounts: tuple[AccountRealized, ...]
    envy_seconds: float
    compared_seconds: float
    # per envious account a: (a, its envious pair-seconds, its compared pair-seconds), the totals' split by a
    envy_by_account: tuple[tuple[str, float, float], ...] = ()
    backlogged_seconds: float = 0.0

    @property
    def envy_share(self) -> float | None:
        return self.envy_seconds / self.compared_seconds if self.compared_seconds > 0 else None

    @property
    def backlogged_envy_share(self) -> float | None:
        """Envious pair-seconds over the compared ones in which the envious account was backlogged."""
        return self.envy_seconds / self.backlogged_seconds if self.backlogged_seconds > 0 else None

    def account_envy_share(self, account: str) -> float | None:
        """The share of ``account``'s compared pair-seconds (it and another with a job in the system) in which it
        was backlogged and envied the other's held GPUs; None when it was never compared."""
        row = next((r for r in self.envy_by_account if r[0] == account), None)
        return row[1] / row[2] if row is not None and row[2] > 0 else None


# ------------------------------------------------------------------------------------------------ inputs


def speeds_from_throughput(throughput: Mapping[str, Mapping[str, float]],
                           gpu_types: Iterable[str]) -> dict[str, dict[str, float]]:
    """class -> type -> speed relative to the class's slowest of ``gpu_types`` where it runs (throughput > 0), as
    :class:`~slurm_fair.model.Problem` normalizes; a type the class does not run on gets 0, types outside
    ``gpu_types`` are left out."""
    types = list(gpu_types)
    out: dict[str, dict[str, float]] = {}
    for cls, row in throughput.items():
        vals = {g: number(f"throughput.{cls}.{g}", row.get(g, 0.0), nonneg=True) for g in types}
        pos = [v for v in vals.values() if v > 0]
        slow = min(pos) if pos else 1.0
        out[cls] = {g: v / slow for g, v in vals.items()}
    return out


def _check_runs(runs: Sequence[Run], weights: Mapping[str, float], types: Sequence[str],
                speeds: Mapping[str, Mapping[str, float]]) -> dict[str, list[Run]]:
    """The runs grouped by job, each job's in start order; an InputError naming the field and value on a bad row."""
    jobs: dict[str, list[Run]] = {}
    for i, r in enumerate(runs):
        f = f"runs[{i}]"
        if not isinstance(r, Run):
            raise InputError(f, r, "must be a realized.Run")
        if r.account not in weights:
            raise InputError(f"{f}.account", r.account, "has no weight")
        if r.cls not in speeds:
            raise InputError(f"{f}.cls", r.cls, "is not a class with speeds")
        if isinstance(r.gpus, bool) or not isinstance(r.gpus, int) or r.gpus < 1:
            raise InputError(f"{f}.gpus", r.gpus, "must be a whole number >= 1")
        number(f"{f}.submit", r.submit, nonneg=True)
        if (r.gpu_type is None) != (r.start is None):
            raise InputError(f"{f}.gpu_type", r.gpu_type, "and start are both set (a run) or both None (never started)")
        if r.gpu_type is not None and r.gpu_type not in types:
            raise InputError(f"{f}.gpu_type", r.gpu_type, f"is not a GPU type of the capacity ({', '.join(types)})")
        if r.start is not None:
            if number(f"{f}.start", r.start, nonneg=True) < r.submit:
                raise InputError(f"{f}.start", r.start, f"is before the job's submit ({r.submit})")
            if speeds[r.cls].get(r.gpu_type, 0.0) <= 0:
                raise InputError(f"{f}.gpu_type", r.gpu_type, f"class {r.cls!r} does not run on it (speed 0)")
        elif r.end is not None:
            raise InputError(f"{f}.end", r.end, "is set for a job that never started")
        if r.end is not None and number(f"{f}.end", r.end, nonneg=True) < r.start:
            raise InputError(f"{f}.end", r.end, f"is before the run's start ({r.start})")
        if r.ended and r.end is None:
            raise InputError(f"{f}.ended", r.ended, "a run that ended its job needs an end")
        jobs.setdefault(r.job, []).append(r)
    for job, rs in jobs.items():
        first = rs[0]
        if any((r.account, r.cls, r.gpus, r.submit) != (first.account, first.cls, first.gpus, first.submit) for r in rs):
            raise InputError("runs.job", job, "its runs disagree on account, class, GPUs or submit")
        started = sorted((r for r in rs if r.start is not None), key=lambda r: r.start)
        if len(started) != len(rs) and len(rs) > 1:
            raise InputError("runs.job", job, "has a row without a start beside its runs")
        for a, b in zip(started, started[1:]):
            if a.end is None or a.end > b.start + EPS or a.ended:
                raise InputError("runs.job", job, f"its run from {a.start} overlaps or ends the job before the next, "
                                 f"from {b.start}")
        jobs[job] = started or rs
    return jobs


def _check_rest(weights: Mapping[str, float], capacity: Mapping[str, int],
                speeds: Mapping[str, Mapping[str, float]], t0: float, t1: float) -> None:
    if not weights:
        raise InputError("weights", dict(weights), "must name at least one account")
    for a, w in weights.items():
        number(f"weights.{a}", w, positive=True)
    if not capacity:
        raise InputError("capacity", dict(capacity), "must name at least one GPU type")
    for g, c in capacity.items():
        number(f"capacity.{g}", c, nonneg=True)
    for cls, row in speeds.items():
        for g, v in row.items():
            if g not in capacity:
                raise InputError(f"speeds.{cls}", g, "is not a GPU type of the capacity")
            number(f"speeds.{cls}.{g}", v, nonneg=True)
    number("t0", t0, nonneg=True)
    if number("t1", t1, nonneg=True) <= t0:
        raise InputError("t1", t1, f"must be after t0 ({t0})")


# ------------------------------------------------------------------------------------------------ the sweep


@dataclass
class _State:
    """What holds between two events, per account (index a), class (c), job group (k: the speeds of a job on the
    types it fits) and type (g)."""

    demand: np.ndarray  # (A,) GPUs of jobs in the system
    classes: np.ndarray  # (A, C) jobs in the system per class
    fitting: np.ndarray  # (A,) pending jobs that could run
    groups: np.ndarray  # (A, K) GPUs of jobs that could run in the system, per group
    held: np.ndarray  # (A, G) GPUs held per type
    rate: np.ndarray  # (A,) received rate r_a
    changed: set  # accounts whose groups changed since their entitled rate was last computed


def _events(jobs: Mapping[str, list[Run]], acct: Mapping[str, int], cls: Mapping[str, int], typ: Mapping[str, int],
            speed: np.ndarray, share: np.ndarray,
            groups: dict[tuple[float, ...], int]) -> list[tuple[float, int, int, int, int, int, float]]:
    """(time, kind, account, class, group or type, GPUs, rate) changes: kind 0 demand + class (+ group of a job
    that could run, else -1), 1 pending that could run, 2 held + rate; + at an interval's start, − at its end (an
    open end: none). ``groups`` gets each group its index: a group is the jobs of the same speeds on the types they
    fit (0 elsewhere), whatever their class — in the transport program they are alike."""
    ev: list = []
    for rs in jobs.values():
        r0 = rs[0]
        a, c, n = acct[r0.account], cls[r0.cls], r0.gpus
        runs = [r for r in rs if r.start is not None]
        last = next((r.end for r in runs if r.ended), None)
        row = tuple(float(speed[c, g]) if speed[c, g] > 0 and n <= share[a, g] + EPS else 0.0
                    for g in range(share.shape[1]))  # its speed on each type it fits, else 0
        k = groups.setdefault(row, len(groups)) if any(row) else -1
        ev.append((r0.submit, 0, a, c, k, n, 0.0))
        if last is not None:
            ev.append((last, 0, a, c, k, -n, 0.0))
        gaps, t = [], r0.submit
        for r in runs:
            gaps.append((t, r.start))
            t = r.end
        if last is None:
            gaps.append((t, None))
        for s, e in gaps:
            if k >= 0 and s is not None and (e is None or e > s):
                ev.append((s, 1, a, 0, 0, 1, 0.0))
                if e is not None:
                    ev.append((e, 1, a, 0, 0, -1, 0.0))
        for r in runs:
            g = typ[r.gpu_type]
            ev.append((r.start, 2, a, 0, g, n, n * speed[c, g]))
            if r.end is not None:
                ev.append((r.end, 2, a, 0, g, -n, -n * speed[c, g]))
    return ev


def _apply(st: _State, kind: int, a: int, c: int, x: int, n: int, rate: float) -> None:
    if kind == 0:
        st.demand[a] += n
        st.classes[a, c] += 1 if n > 0 else -1
        if x >= 0:
            st.groups[a, x] += n
            st.changed.add(a)
    elif kind == 1:
        st.fitting[a] += n
    else:
        st.held[a, x] += n
        st.rate[a] += rate


@dataclass
class _Open:
    """An account's episode under way."""

    start: float
    received: float = 0.0
    entitled: float = 0.0
    crossed: float | None = None


def _cross(ep: _Open, t: float, dt: float, r: float, b: float) -> None:
    """Where, within the segment [t, t + dt] (rates r, b), the episode's cumulative ratio first reaches FAIR."""
    if ep.crossed is not None or dt <= 0:
        return
    slope = r - FAIR * b
    if ep.entitled <= 0:  # the episode's first segment: the ratio is r / b from its first instant
        if slope >= -EPS * max(1.0, b):
            ep.crossed = t - ep.start
        return
    lack = FAIR * ep.entitled - ep.received
    if slope > 0 and lack / slope <= dt + EPS:
        ep.crossed = t - ep.start + max(0.0, lack / slope)


class _Entitled:
    """B_a of each account, computed again only when its groups changed (and then only while it is backlogged), and
    memoized by its groups' GPUs: the transport LP per account (:func:`.transport.transport_value`)."""

    def __init__(self, groups: Mapping[tuple[float, ...], int], share: np.ndarray):
        self.value = np.zeros((len(groups), share.shape[1]))  # (K, G) value per GPU of group k on type g
        for row, i in groups.items():
            self.value[i] = row
        self.share = share
        self.now = np.zeros(share.shape[0])
        self.stale = np.zeros(share.shape[0], dtype=bool)
        self.memo: dict[tuple, float] = {}

    def rates(self, st: _State, back: np.ndarray) -> np.ndarray:
        for a in st.changed:
            self.stale[a] = True
        st.changed.clear()
        for a in np.flatnonzero(back & self.stale).tolist():
            ks = np.flatnonzero(st.groups[a] > EPS)
            key = (a, *ks.tolist(), *st.groups[a, ks].tolist())
            if key not in self.memo:
                self.memo[key] = transport_value(self.value[ks], st.groups[a, ks], self.share[a]) if len(ks) else 0.0
            self.now[a] = self.memo[key]
            self.stale[a] = False
        return np.where(back, self.now, 0.0)


def realized(runs: Sequence[Run], weights: Mapping[str, float], capacity: Mapping[str, int],
             speeds: Mapping[str, Mapping[str, float]], t0: float, t1: float) -> Realized:
    """Realized fairness of ``runs`` over [``t0``, ``t1``] (see the module docstring for every definition).
    ``weights``: account -> weight > 0 (every account of the runs; accounts without runs count in W too);
    ``capacity``: GPU type -> GPUs; ``speeds``: class -> type -> speed (:func:`speeds_from_throughput`)."""
    _check_rest(weights, capacity, speeds, t0, t1)
    types = list(capacity)
    jobs = _check_runs(runs, weights, types, speeds)
    names = sorted(weights)
    acct = {a: i for i, a in enumerate(names)}
    classes = sorted(speeds)
    cls = {c: i for i, c in enumerate(classes)}
    typ = {g: i for i, g in enumerate(types)}
    w = np.array([float(weights[a]) for a in names])
    cap = np.array([float(capacity[g]) for g in types])
    share = np.outer(w / w.sum(), cap)  # (A, G) s_a,g
    speed = np.array([[float(speeds[c].get(g, 0.0)) for g in types] for c in classes]).reshape(len(classes), len(types))
    groups: dict[tuple[float, ...], int] = {}
    ev = _events(jobs, acct, cls, typ, speed, share, groups)
    n_hours = int(math.ceil((t1 - t0) / HOUR - EPS))
    ev.sort(key=lambda e: e[0])
    grid = sorted({t0, t1, *(t0 + k * HOUR for k in range(1, n_hours)), *(e[0] for e in ev if t0 < e[0] < t1)})
    A, G = len(names), len(types)
    st = _State(np.zeros(A), np.zeros((A, len(classes))), np.zeros(A, dtype=int), np.zeros((A, len(groups))),
                np.zeros((A, G)), np.zeros(A), set())
    bundle = _Entitled(groups, share)
    scale = w[:, None] / w[None, :]  # (A, B) w_a / w_b
    opened: dict[int, _Open] = {}
    episodes: list[Episode] = []
    hours: dict[tuple[int, int], list[float]] = {}
    thr = np.zeros(A)
    envy_s = pair_s = back_s = 0.0
    envy_a, pair_a = np.zeros(A), np.zeros(A)
    i = 0
    for t, t_next in zip(grid, grid[1:]):
        while i < len(ev) and ev[i][0] <= t + EPS:
            _apply(st, *ev[i][1:])
            i += 1
        dt = t_next - t
        back = st.fitting > 0
        entitled = bundle.rates(st, back)
        envious, backlogged_pairs, by_a = _envy(st, back, speed, scale)
        active = st.demand > 0
        n_active = int(active.sum())
        thr += st.rate * dt
        for a in sorted({*np.flatnonzero(back).tolist(), *opened}):  # the accounts backlogged now or until now
            if back[a] and a not in opened:
                opened[a] = _Open(t)
            elif not back[a] and a in opened:
                episodes.append(_close(names[a], opened.pop(a), t, False))
            if back[a]:
                ep = opened[a]
                _cross(ep, t, dt, float(st.rate[a]), float(entitled[a]))
                ep.received += st.rate[a] * dt
                ep.entitled += entitled[a] * dt
                h = hours.setdefault((a, int((t - t0 + EPS) // HOUR)), [0.0, 0.0, 0.0])
                h[0] += dt
                h[1] += st.rate[a] * dt
                h[2] += entitled[a] * dt
        pair_s += n_active * (n_active - 1) * dt
        back_s += backlogged_pairs * dt
        envy_s += envious * dt
        envy_a += by_a * dt
        pair_a += np.where(active, n_active - 1, 0) * dt
    for a, ep in sorted(opened.items()):
        episodes.append(_close(names[a], ep, t1, True))
    episodes.sort(key=lambda e: (e.account, e.start))
    buckets = tuple(HourBucket(names[a], k, v[0], v[1], v[2]) for (a, k), v in sorted(hours.items()))
    return Realized(t0, t1, tuple(episodes), buckets, _accounts(names, w, jobs, episodes, thr, t0, t1),
                    envy_s, pair_s, tuple((a, float(envy_a[i]), float(pair_a[i])) for i, a in enumerate(names)),
                    back_s)


def _envy(st: _State, back: np.ndarray, speed: np.ndarray, scale: np.ndarray) -> tuple[int, int, np.ndarray]:
    """A segment's envy of held GPUs over the pairs (a backlogged, b != a with a job in the system), in one bundle-
    value call: (envious pairs, such pairs, envious pairs per envious account a)."""
    idx = np.flatnonzero(back)
    if not len(idx):
        return 0, 0, np.zeros(len(back))
    best = np.where(st.classes[idx, :, None] > 0, speed[None, :, :], 0.0).max(axis=1)  # speed_a,g: best class
    i, bb = np.nonzero((st.demand > 0)[None, :] & (np.arange(len(back))[None, :] != idx[:, None]))
    aa = idx[i]
    values = row_values(np.concatenate([best[i], best[i]]),
                        np.concatenate([st.held[bb] * scale[aa, bb][:, None], st.held[aa]]),
                        np.concatenate([st.demand[aa], st.demand[aa]]))
    m = len(aa)
    envies = values[:m] > ENVY * values[m:] + EPS
    return int(envies.sum()), m, np.bincount(aa, weights=envies.astype(float), minlength=len(back))


def _close(account: str, ep: _Open, end: float, censored: bool) -> Episode:
    if ep.crossed is not None:
        ttfs, reached = ep.crossed, "ratio"
    elif censored:
        ttfs, reached = None, "censored"
    else:
        ttfs, reached = end - ep.start, "all"
    return Episode(account, ep.start, end, censored, float(ep.received), float(ep.entitled), ttfs, reached)


def _accounts(names: Sequence[str], w: np.ndarray, jobs: Mapping[str, list[Run]], episodes: Sequence[Episode],
              thr: np.ndarray, t0: float, t1: float) -> tuple[AccountRealized, ...]:
    jct: dict[str, list[float]] = {a: [] for a in names}
    for rs in jobs.values():
        end = next((r.end for r in rs if r.ended), None)
        if end is not None and t0 <= end <= t1:
            jct[rs[0].account].append(end - rs[0].submit)
    total = float(thr.sum())
    out = []
    for i, a in enumerate(names):
        eps = [e for e in episodes if e.account == a]
        length = sum(e.length for e in eps)
        ratio = sum(e.ratio * e.length for e in eps) / length if length > 0 else None
        out.append(AccountRealized(a, float(w[i]), length, ratio, len(jct[a]),
                                   sum(jct[a]) / len(jct[a]) if jct[a] else None, float(thr[i]),
                                   float(thr[i]) / total if total > 0 else None))
    return tuple(out)


# ------------------------------------------------------------------------------------------------ summary


@dataclass(frozen=True)
class RealizedSummary:
    """The numbers ``simulate --json`` reports (``realized``): per account; over episodes of at least ``long``
    seconds the p5 and minimum ratio; time to fair share's median and p95 over the episodes the window did not
    cut; the share of compared pair-hours (both accounts with a job in the system) with envy of held GPUs, and of
    the pair-hours the envious account was backlogged (the denominator before)."""

    accounts: tuple[AccountRealized, ...]
    episodes: int
    long: float
    long_episodes: int
    p5_ratio: float | None
    min_ratio: float | None
    ttfs_episodes: int
    ttfs_median: float | None
    ttfs_p95: float | None
    envy_pair_hours: float
    compared_pair_hours: float
    envy_share: float | None
    backlogged_pair_hours: float = 0.0
    backlogged_envy_share: float | None = None

    def as_json(self) -> dict:
        return {
            "accounts": {a.account: {"weight": a.weight, "ratio": a.ratio, "backlogged_s": a.backlogged,
                                     "jobs_ended": a.jobs_ended, "mean_jct": a.mean_jct,
                                     "throughput_share": a.throughput_share} for a in self.accounts},
            "episodes": self.episodes,
            "long_episodes": {"min_length_s": self.long, "count": self.long_episodes, "p5_ratio": self.p5_ratio,
                              "min_ratio": self.min_ratio},
            "time_to_fair_share": {"episodes": self.ttfs_episodes, "median": self.ttfs_median,
                                   "p95": self.ttfs_p95},
            "envy": {"pair_hours": self.envy_pair_hours, "compared_pair_hours": self.compared_pair_hours,
                     "share": self.envy_share, "backlogged_pair_hours": self.backlogged_pair_hours,
                     "share_of_backlogged": self.backlogged_envy_share},
        }


def summarize(r: Realized, long: float = LONG) -> RealizedSummary:
    """The summary of ``r``: ratios over episodes of at least ``long`` seconds (p5, linear between order
    statistics as :func:`~slurm_fair.stats.percentile`), time to fair share over the episodes not censored."""
    ratios = [e.ratio for e in r.episodes if e.length >= long - EPS]
    ttfs = [e.time_to_fair_share for e in r.episodes if e.time_to_fair_share is not None]
    return RealizedSummary(r.accounts, len(r.episodes), float(long), len(ratios), percentile(ratios, 0.05),
                           min(ratios) if ratios else None, len(ttfs), percentile(ttfs, 0.5), percentile(ttfs, 0.95),
                           r.envy_seconds / HOUR, r.compared_seconds / HOUR, r.envy_share,
                           r.backlogged_seconds / HOUR, r.backlogged_envy_share)
