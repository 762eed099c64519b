"""Round planning: from a cluster snapshot and profiles to per-account GPU limits and job priorities.

Pure functions of data (no I/O): the daemon's round (``daemon/round.py``) observes Slurm, calls these,
then applies and records the result.

Rules (each documented where it is implemented):

* **Class of a job** (:func:`job_class`): the first of ``classes.order`` that gives a name: a
  ``class=NAME`` token in ``--comment``, the ``--wckey``, the job name.
* **Demand** (:func:`observe_demand`): per (account, class), the GPUs of its pending and running jobs,
  the smallest pending job, and the GPU types its jobs asked for (None = some job is untyped, any type).
  Per type (:meth:`ClassDemand.type_demand`): the GPUs of its jobs that request that type plus its untyped
  jobs' GPUs (an untyped job can run on any type of its partition), at most the class's total; a class
  with only typed jobs can use 0 GPUs of any other type (``type_demand`` of the problem, which also makes
  such a type unusable for the class: no throughput there, not its slowest type). Per job (``jobs`` of the
  problem, for the per-job policies): its GPUs and the seconds of its time limit left (minus the time it
  has run, if running) as its remaining work — Slurm knows no better; a job with no time limit gets
  ``model.DEFAULT_REMAINING``.
* **Throughput** (:func:`lookup_throughput`), per GPU type: the account's own profile of the class, else the
  site-wide profile (empty account), else the shipped defaults; a type still unknown for a class that has
  some profile gets the class's *slowest* known throughput (``assumed``: never overstates a speedup); a
  class with no profile at all runs at 1.0 everywhere (``unprofiled``: homogeneous GPUs).
* **Problem** (:func:`build_problem`): tenant = the account (or ``tenants.map``), weight =
  ``tenants.weights`` or the sum of the tenant's accounts' fair-share Shares (0 counts as 1); one virtual
  user per (account, class) with demand (total GPUs and ``type_demand`` per GPU type, so no policy gives a
  class a share of a type beyond what its jobs request there); GPU types = usable GPUs per type on nodes in
  managed partitions.
* **Plan** (:func:`make_plan`): the policy's fractional shares are summed per account and rounded with
  :func:`slurm_fair.rounding.place` using the deviations carried per account (sticky: of floor and ceil, the
  one closest to the GPUs the account holds now); the smallest pending job
  gates an account (``min_gpus``) only while it has no running GPU job. **Work conservation:** GPUs no
  account was given go, one at a time, to accounts with pending jobs that can use that type and whose
  limit is below their demand (fewest extra GPUs first, then name). These extras are not owed back: they
  do not enter the deviations. Per type, no limit exceeds what the account's jobs could use there (GPUs
  of its jobs that request that type, plus its untyped jobs); the rest goes back to the pool first. Accounts without GPU jobs get limit 0 (an early round lifts it when they
  submit). Limits are per type plus the untyped total ``ANY_GPU`` (= sum), because Slurm does not enforce
  typed limits on untyped requests.
* **Priorities** (:func:`site_factors`, :func:`update_deficit`): see those functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

import numpy as np

from .. import fairness
from ..cluster.base import ANY_GPU, CLEAR, Job, Snapshot, supports_pending_retype
from ..model import DEFAULT_REMAINING, Allocation, ClassJob, JobClass, Problem, Tenant
from ..rounding import place

# sources of a throughput value, from most to least specific
SRC_ACCOUNT = "account"
SRC_SITE = "site"
SRC_SHIPPED = "shipped"
SRC_ASSUMED = "assumed"
SRC_UNPROFILED = "unprofiled"

_CLASS_TOKEN = re.compile(r"(?:^|[\s,;])class=([^\s,;]+)")
DEFAULT_CLASS = "default"
# Slurm's root account is the parent of every account: a GrpTRES there caps the whole cluster.
NEVER_MANAGED = frozenset({"root"})


# ------------------------------------------------------------------------------------------- jobs


def job_class(job: Job, order: Iterable[str] = ("comment", "wckey", "name")) -> str:
    """The job's class: the first source in ``order`` that names one (see the module docstring)."""
    for src in order:
        if src == "comment":
            m = _CLASS_TOKEN.search(job.comment or "")
            if m:
                return m.group(1)
        elif src == "wckey":
            wk = (job.wckey or "").lstrip("*")  # Slurm shows a default wckey as "*name"
            if wk:
                return wk
        elif src == "name":
            if job.name:
                return job.name
    return DEFAULT_CLASS


def _in_partitions(partition: str, partitions: Iterable[str]) -> bool:
    parts = tuple(partitions)
    if not parts:
        return True
    return any(p in parts for p in (partition or "").split(","))


def gpu_jobs(snapshot: Snapshot, partitions: Iterable[str] = (), accounts: Iterable[str] = ()) -> list[Job]:
    """Pending and running GPU jobs in the managed partitions (and accounts, if any are named)."""
    accts = set(accounts)
    return [
        j for j in snapshot.jobs
        if j.gpus > 0 and (j.pending or j.running) and _in_partitions(j.partition, partitions)
        and (not accts or j.account in accts)
    ]


@dataclass
class ClassDemand:
    """What one (account, class) asks for now."""

    gpus: int = 0  # GPUs of pending + running jobs
    pending_gpus: int = 0
    running_gpus: int = 0
    pending_jobs: int = 0
    running_jobs: int = 0
    min_pending: int | None = None  # smallest pending job (GPUs), None = nothing pending
    types: set[str] | None = field(default_factory=set)  # requested types; None = some job is untyped
    by_type: dict[str, int] = field(default_factory=dict)  # GPUs of pending+running jobs per requested type ("" = untyped)
    pending_by_type: dict[str, int] = field(default_factory=dict)  # same, pending jobs only
    # (job id, GPUs, seconds of its time limit left: the limit, minus the time run for a running job;
    # None = no limit known) — the per-job policies' view of the class (``JobClass.jobs``)
    jobs: list[tuple[int, int, float | None]] = field(default_factory=list)

    def add(self, job: Job, now: float | None = None) -> None:
        g = job.gpus
        left = None
        if job.time_limit is not None:
            ran = max(0.0, now - job.start_time) if (now is not None and job.running and job.start_time) else 0.0
            left = max(0.0, job.time_limit * 60.0 - ran)
        self.jobs.append((job.job_id, g, left))
        self.gpus += g
        t = job.gpu_type or ""
        self.by_type[t] = self.by_type.get(t, 0) + g
        if job.pending:
            self.pending_gpus += g
            self.pending_jobs += 1
            self.min_pending = g if self.min_pending is None else min(self.min_pending, g)
            self.pending_by_type[t] = self.pending_by_type.get(t, 0) + g
        else:
            self.running_gpus += g
            self.running_jobs += 1
        if job.gpu_type is None:
            self.types = None
        elif self.types is not None:
            self.types.add(job.gpu_type)

    def type_demand(self, gpu_types: Iterable[str]) -> dict[str, float]:
        """Most GPUs of each type the class's jobs can use: GPUs of jobs requesting that type plus the
        untyped jobs' GPUs (they run on any type), at most the class's total ``gpus``."""
        untyped = self.by_type.get("", 0)
        return {g: float(min(self.by_type.get(g, 0) + untyped, self.gpus)) for g in gpu_types}


def observe_demand(snapshot: Snapshot, cfg: Any) -> dict[tuple[str, str], ClassDemand]:
    """(account, class) -> ClassDemand over the pending and running GPU jobs of ``snapshot``."""
    out: dict[tuple[str, str], ClassDemand] = {}
    for j in gpu_jobs(snapshot, cfg.cluster.partitions, cfg.limits.accounts):
        if j.account in NEVER_MANAGED:
            continue
        out.setdefault((j.account, job_class(j, cfg.classes.order)), ClassDemand()).add(j, snapshot.taken_at)
    return dict(sorted(out.items()))


def usable_capacity(snapshot: Snapshot, partitions: Iterable[str] = ()) -> dict[str, int]:
    """Usable GPUs per type on nodes of the managed partitions (every type of the cluster is listed)."""
    parts = tuple(partitions)
    if not parts:
        return snapshot.capacity()
    cap = {t: 0 for t in snapshot.gpu_types()}
    for n in snapshot.nodes:
        if n.usable and any(p in parts for p in n.partitions):
            for t, c in n.gpus.items():
                cap[t] = cap.get(t, 0) + c
    return cap


# ------------------------------------------------------------------------------------------- profiles


def _index(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], float]:
    return {(r.get("account", "") or "", r["class"], r["gpu_type"]): float(r["throughput"]) for r in rows}


class ProfileIndex:
    """Fast lookup over the store's profile rows and the shipped rows."""

    def __init__(self, profiles_rows: Iterable[Mapping[str, Any]], shipped_rows: Iterable[Mapping[str, Any]]):
        self.profiles = _index(profiles_rows)
        self.shipped = {(c, g): v for (_a, c, g), v in _index(shipped_rows).items()}

    def lookup(self, account: str, cls: str, gpu_types: Iterable[str]) -> tuple[dict[str, float], dict[str, str]]:
        thr: dict[str, float] = {}
        src: dict[str, str] = {}
        missing = []
        for g in gpu_types:
            if (account, cls, g) in self.profiles and account:
                thr[g], src[g] = self.profiles[(account, cls, g)], SRC_ACCOUNT
            elif ("", cls, g) in self.profiles:
                thr[g], src[g] = self.profiles[("", cls, g)], SRC_SITE
            elif (cls, g) in self.shipped:
                thr[g], src[g] = self.shipped[(cls, g)], SRC_SHIPPED
            else:
                missing.append(g)
        if missing:
            if thr:
                slowest = min(thr.values())
                for g in missing:
                    thr[g], src[g] = slowest, SRC_ASSUMED
            else:
                for g in missing:
                    thr[g], src[g] = 1.0, SRC_UNPROFILED
        return thr, src


def lookup_throughput(profiles_rows: Iterable[Mapping[str, Any]], shipped_rows: Iterable[Mapping[str, Any]],
                      account: str, cls: str, gpu_types: Iterable[str]) -> tuple[dict[str, float], dict[str, str]]:
    """(throughput per type, source per type) of ``cls`` for ``account`` (chain in the module docstring)."""
    return ProfileIndex(profiles_rows, shipped_rows).lookup(account, cls, list(gpu_types))


# ------------------------------------------------------------------------------------------- problem


@dataclass(frozen=True)
class Built:
    """A Problem plus the bookkeeping to map its virtual users back to (account, class)."""

    problem: Problem
    rows: dict[tuple[str, str], tuple[str, str]]  # (account, class) -> (tenant, class name in the problem)
    tenant_of: dict[str, str]  # account -> tenant
    weights: dict[str, float]  # tenant -> weight
    throughput: dict[str, dict[str, dict[str, float]]]  # account -> class -> type -> raw throughput used
    sources: dict[str, dict[str, dict[str, str]]]  # account -> class -> type -> source
    capacity: dict[str, int]


def tenant_weights(snapshot: Snapshot, accounts: Iterable[str], cfg: Any) -> tuple[dict[str, str], dict[str, float]]:
    """(account -> tenant, tenant -> weight) for ``accounts``."""
    tmap = dict(cfg.tenants.map)
    tenant_of = {a: tmap.get(a, a) for a in accounts}
    weights: dict[str, float] = {}
    for a, t in sorted(tenant_of.items()):
        acct = snapshot.account(a)
        shares = acct.shares if acct is not None and acct.shares > 0 else 1
        weights[t] = weights.get(t, 0.0) + float(shares)
    for t in weights:
        if t in cfg.tenants.weights:
            weights[t] = float(cfg.tenants.weights[t])
    return tenant_of, weights


def build_problem(snapshot: Snapshot, demand: Mapping[tuple[str, str], ClassDemand],
                  profiles_rows: Iterable[Mapping[str, Any]], shipped_rows: Iterable[Mapping[str, Any]],
                  cfg: Any) -> Built:
    """The sharing problem of this round (see the module docstring)."""
    capacity = usable_capacity(snapshot, cfg.cluster.partitions)
    types = list(capacity)
    index = ProfileIndex(profiles_rows, shipped_rows)
    accounts = sorted({a for (a, _c), d in demand.items() if d.gpus > 0})
    tenant_of, weights = tenant_weights(snapshot, accounts, cfg)
    accounts_of: dict[str, list[str]] = {}
    for a in accounts:
        accounts_of.setdefault(tenant_of[a], []).append(a)
    rows: dict[tuple[str, str], tuple[str, str]] = {}
    thr_all: dict[str, dict[str, dict[str, float]]] = {}
    src_all: dict[str, dict[str, dict[str, str]]] = {}
    tenants = []
    for t in sorted(accounts_of):
        classes = []
        for a in accounts_of[t]:
            for (acct, cls), d in demand.items():
                if acct != a or d.gpus <= 0:
                    continue
                thr, src = index.lookup(a, cls, types)
                # per-type caps: a type none of its jobs requests (all typed otherwise) gets cap 0, which
                # also makes it unusable for the class in the problem (no speed there)
                td = d.type_demand(types)
                if not any(thr.get(g, 0) > 0 and capacity[g] > 0 and td[g] > 0 for g in types):
                    # asks only for types with no usable GPUs: it cannot get a share this round
                    thr_all.setdefault(a, {})[cls] = thr
                    src_all.setdefault(a, {})[cls] = src
                    continue
                name = cls if len(accounts_of[t]) == 1 else f"{a}/{cls}"
                rows[(a, cls)] = (t, name)
                thr_all.setdefault(a, {})[cls] = thr
                src_all.setdefault(a, {})[cls] = src
                jobs = tuple(ClassJob(str(jid), g, DEFAULT_REMAINING if left is None else left)
                             for jid, g, left in d.jobs if g > 0)
                classes.append(JobClass(name=name, throughput=thr, demand=float(d.gpus), type_demand=td,
                                        jobs=jobs))
        if classes:
            tenants.append(Tenant(name=t, classes=tuple(classes), weight=weights[t]))
    problem = Problem(gpu_types=dict(capacity), tenants=tuple(tenants))
    return Built(problem=problem, rows=rows, tenant_of=tenant_of, weights=weights, throughput=thr_all,
                 sources=src_all, capacity=dict(capacity))


# ------------------------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class Plan:
    """Everything one round decided (JSON-able through :meth:`as_dict`)."""

    capacity: dict[str, int]
    accounts: tuple[str, ...]  # managed accounts this round (limits set for each)
    ideal_class: dict[str, dict[str, dict[str, float]]]  # account -> class -> type -> GPUs
    ideal: dict[str, dict[str, float]]  # account -> type -> GPUs (fractional)
    deviation_before: dict[str, dict[str, float]]
    real: dict[str, dict[str, int]]  # rounded (placement)
    deviations: dict[str, dict[str, float]]  # to carry into the next round
    extra: dict[str, dict[str, int]]  # work conservation on top of real
    limits: dict[str, dict[str, int]]  # account -> {type: n, ANY_GPU: total}
    min_gpus: dict[str, int]
    demand: dict[str, int]  # account -> GPUs of pending + running jobs
    total_throughput: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def _account_class_ideal(built: Built, alloc: Allocation) -> dict[str, dict[str, dict[str, float]]]:
    per_class = alloc.per_class()
    out: dict[str, dict[str, dict[str, float]]] = {}
    for (a, cls), (t, name) in built.rows.items():
        x = per_class.get(t, {}).get(name)
        if x is None:
            continue
        out.setdefault(a, {})[cls] = {g: max(0.0, float(v)) for g, v in x.items()}
    return out


def _fit_capacity(ideal: dict[str, dict[str, float]], capacity: Mapping[str, int]) -> None:
    """Scale a type's shares down if the solver's float noise put them a hair above its capacity."""
    for g, cap in capacity.items():
        tot = sum(row.get(g, 0.0) for row in ideal.values())
        if tot > cap > 0 or (cap == 0 and tot > 0):
            f = cap / tot if tot else 0.0
            for row in ideal.values():
                if g in row:
                    row[g] *= f


def make_plan(built: Built, alloc: Allocation, demand: Mapping[tuple[str, str], ClassDemand],
              deviations: Mapping[str, Mapping[str, float]], managed_accounts: Iterable[str],
              in_use: Mapping[str, Mapping[str, int]] | None = None) -> Plan:
    """Round the allocation to per-account limits (see the module docstring).

    ``managed_accounts``: every account slurm-fair sets limits for this round (those without GPU jobs get
    0). ``deviations``: carried from the previous applied round (unknown accounts/types are ignored).
    ``in_use``: GPUs each account's running jobs hold per type (:func:`gpus_in_use`); the rounding then
    prefers, of floor and ceil, the value closest to it (sticky rounding, :mod:`slurm_fair.rounding`).
    """
    cap = dict(built.capacity)
    types = list(cap)
    ideal_class = _account_class_ideal(built, alloc)
    accounts = sorted(set(managed_accounts) | {a for (a, _c) in demand})
    ideal: dict[str, dict[str, float]] = {a: {g: 0.0 for g in types} for a in accounts}
    for a, classes in ideal_class.items():
        for x in classes.values():
            for g, v in x.items():
                if g in ideal[a]:
                    ideal[a][g] += v
    _fit_capacity(ideal, cap)
    acct_demand = {a: 0 for a in accounts}
    running = {a: 0 for a in accounts}
    min_pending: dict[str, int] = {}
    for (a, _c), d in demand.items():
        acct_demand[a] += d.gpus
        running[a] += d.running_gpus
        if d.min_pending is not None:
            min_pending[a] = min(min_pending.get(a, d.min_pending), d.min_pending)
    min_gpus = {a: (min_pending.get(a, 0) if running[a] == 0 else 0) for a in accounts}
    dev_before = {a: {g: float(deviations.get(a, {}).get(g, 0.0)) for g in types} for a in accounts}
    held = {a: {g: int(n) for g, n in (in_use or {}).get(a, {}).items() if g in cap} for a in accounts}
    placement = place(ideal, cap, deviations=dev_before, min_gpus=min_gpus, demand=acct_demand, current=held)
    real = {a: dict(placement.real[a]) for a in accounts}

    # per type, the most GPUs the account's jobs could use there (typed requests for that type + untyped)
    usable = {a: {g: 0 for g in types} for a in accounts}
    pending = {a: {g: 0 for g in types} for a in accounts}
    for (a, _c), d in demand.items():
        for g in types:
            usable[a][g] += d.by_type.get(g, 0) + d.by_type.get("", 0)
            pending[a][g] += d.pending_by_type.get(g, 0) + d.pending_by_type.get("", 0)
    # a limit above that is of no use to the account: the GPUs go back to the pool
    base = {a: {g: min(real[a][g], usable[a][g]) for g in types} for a in accounts}
    # work conservation: hand out GPUs nobody holds a limit for
    extra = {a: {g: 0 for g in types} for a in accounts}
    total = {a: sum(base[a].values()) for a in accounts}
    for g in types:
        free = cap[g] - sum(base[a][g] for a in accounts)
        while free > 0:
            cands = [a for a in accounts
                     if pending[a][g] > 0 and base[a][g] + extra[a][g] < usable[a][g] and total[a] < acct_demand[a]]
            if not cands:
                break
            a = min(cands, key=lambda a: (sum(extra[a].values()), a))
            extra[a][g] += 1
            total[a] += 1
            free -= 1
    limits = {}
    for a in accounts:
        row = {g: base[a][g] + extra[a][g] for g in types}
        row[ANY_GPU] = sum(row.values())
        limits[a] = row
    return Plan(
        capacity=cap, accounts=tuple(accounts), ideal_class=ideal_class, ideal=ideal,
        deviation_before=dev_before, real=real,
        deviations={a: dict(placement.deviations[a]) for a in accounts}, extra=extra, limits=limits,
        min_gpus=min_gpus, demand=acct_demand, total_throughput=float(alloc.total_throughput()),
    )


def real_per_class(built: Built, alloc: Allocation, real: Mapping[str, Mapping[str, int]]) -> np.ndarray:
    """The rounded GPUs per account (``plan.real``) put back on the problem's virtual users, (n, k): the
    inverse of :func:`make_plan`'s sum of an account's classes. Each account's GPUs of a type are split among
    its classes in proportion to their ideal shares of that type; where the account's ideal share of the
    type is 0, equally among its classes that can use the type (none: the GPUs are left out)."""
    vu = alloc.vu
    n, k = vu.n, vu.k
    if n == 0:
        return np.zeros((0, k))
    row_of = {key: i for i, key in enumerate(zip(vu.tenant, vu.cls))}
    accounts = sorted({a for (a, _c) in built.rows})
    pos = {a: p for p, a in enumerate(accounts)}
    acc = np.full(n, -1)
    for (a, _c), key in built.rows.items():
        i = row_of.get(key)
        if i is not None:
            acc[i] = pos[a]
    r = np.array([[float(real.get(a, {}).get(g, 0)) for g in vu.gpu_types] for a in accounts]).reshape(len(accounts), k)
    x = np.clip(np.asarray(alloc.x, dtype=float), 0.0, None)
    can = ((vu.speed > 0) & (vu.type_cap > 0)).astype(float)
    has = acc >= 0
    tot = np.zeros((len(accounts), k))
    cnt = np.zeros((len(accounts), k))
    np.add.at(tot, acc[has], x[has])
    np.add.at(cnt, acc[has], can[has])
    t, c = tot[acc[has]], cnt[acc[has]]
    split = np.where(t > 1e-9, x[has] / np.where(t > 1e-9, t, 1.0), np.where(c > 0, can[has] / np.where(c > 0, c, 1.0), 0.0))
    y = np.zeros((n, k))
    y[has] = split * r[acc[has]]
    return y


def account_throughput(built: Built, alloc: Allocation, x: np.ndarray) -> dict[str, float]:
    """Normalized throughput per account of the allocation ``x`` of ``alloc``'s virtual users (sum over the
    account's classes of GPUs x speed relative to the class's slowest usable type)."""
    vu = alloc.vu
    u = (np.asarray(x, dtype=float) * vu.speed).sum(axis=1) if vu.n else np.zeros(0)
    row_of = {key: i for i, key in enumerate(zip(vu.tenant, vu.cls))}
    out: dict[str, float] = {}
    for (a, _c), key in sorted(built.rows.items()):
        i = row_of.get(key)
        if i is not None:
            out[a] = out.get(a, 0.0) + float(u[i])
    return out


def round_fairness(built: Built, alloc: Allocation, plan: Plan) -> dict[str, Any]:
    """Envy and sharing-incentive violations of one round (:func:`slurm_fair.fairness.violations`): of the
    policy's fractional allocation (``ideal``) and of the whole GPUs the round placed per account
    (``real``: ``plan.real`` split among the account's classes by :func:`real_per_class`); and
    ``throughput``: {"ideal"|"real": {account: normalized throughput}} of the same two allocations."""
    vu = alloc.vu
    y = real_per_class(built, alloc, plan.real)
    return {"ideal": fairness.violations(vu, alloc.x), "real": fairness.violations(vu, y),
            "throughput": {"ideal": account_throughput(built, alloc, alloc.x),
                           "real": account_throughput(built, alloc, y)}}


def limit_changes(current: Mapping[str, Mapping[str, int]], planned: Mapping[str, Mapping[str, int]],
                  managed_accounts: Iterable[str]) -> dict[str, dict[str, int]]:
    """Only the limit values that differ from what Slurm has now; CLEAR for every limit of an account
    slurm-fair managed before that is not planned any more."""
    out: dict[str, dict[str, int]] = {}
    for a in sorted(planned):
        now = current.get(a, {})
        diff = {k: int(v) for k, v in planned[a].items() if now.get(k) != int(v)}
        if diff:
            out[a] = diff
    for a in sorted(set(managed_accounts) - set(planned)):
        now = current.get(a, {})
        gone = {k: CLEAR for k in now}
        if gone:
            out[a] = gone
    return out


# ------------------------------------------------------------------------------------------- priorities


def update_deficit(deficits: Mapping[str, float], ideal: Mapping[str, float], received: Mapping[str, float],
                   dt: float) -> dict[str, float]:
    """Accumulate GPU-seconds owed: ``d[a] += (ideal[a] - received[a]) * dt``.

    Only accounts present in ``ideal`` or ``received`` (i.e. with GPU jobs now) are kept: an account whose
    jobs are all gone starts again from 0 (no banking of credit while idle). ``dt`` is clamped at >= 0.
    """
    dt = max(0.0, float(dt))
    out = {}
    for a in sorted(set(ideal) | set(received)):
        out[a] = float(deficits.get(a, 0.0)) + (float(ideal.get(a, 0.0)) - float(received.get(a, 0.0))) * dt
    return out


def site_factors(snapshot: Snapshot, deficits: Mapping[str, float], cfg: Any) -> dict[int, int]:
    """SiteFactor for every pending GPU job that is not held (job id -> int in [site_factor_min, site_factor_max]).

    Accounts with pending GPU jobs are ranked by deficit (largest first, then name); within an account,
    jobs are ranked longest-waiting first (submit time, then job id): OEF's round robin by starvation.
    The ``L = priority.levels`` levels are split into one band per account, the higher ranked account's band
    above the lower ones' (``band(r) = [floor((m-1-r)·L/m), floor((m-r)·L/m))`` for ``m`` accounts, at least
    one level wide); inside its band the account's oldest job gets the top level, the next one the level
    below, and so on, and the rest share the band's bottom. Level ``l`` maps to
    ``min + l·(max-min) // (L-1)`` (all ``min`` when L = 1).
    """
    pr = cfg.priority
    levels = int(pr.levels)
    jobs = [j for j in gpu_jobs(snapshot, cfg.cluster.partitions, cfg.limits.accounts)
            if j.pending and not j.reason.startswith("JobHeld")]  # held jobs have no priority to order
    by_acct: dict[str, list[Job]] = {}
    for j in jobs:
        by_acct.setdefault(j.account, []).append(j)
    ranked = sorted(by_acct, key=lambda a: (-float(deficits.get(a, 0.0)), a))
    m = len(ranked)
    out: dict[int, int] = {}
    for r, a in enumerate(ranked):
        lo = ((m - 1 - r) * levels) // m
        hi = max(((m - r) * levels) // m, lo + 1)
        width = hi - lo
        for i, j in enumerate(sorted(by_acct[a], key=lambda j: (j.submit_time, j.job_id))):
            level = min(lo + max(width - 1 - i, 0), levels - 1)
            out[j.job_id] = level_value(level, pr.site_factor_min, pr.site_factor_max, levels)
    return out


def level_value(level: int, lo: int, hi: int, levels: int) -> int:
    if levels <= 1:
        return int(lo)
    return int(lo + (level * (hi - lo)) // (levels - 1))


def received_gpus(snapshot: Snapshot, cfg: Any) -> dict[str, float]:
    """GPUs each account's running GPU jobs hold now."""
    out: dict[str, float] = {}
    for j in gpu_jobs(snapshot, cfg.cluster.partitions, cfg.limits.accounts):
        if j.running:
            n = sum(j.gpus_allocated.values()) if j.gpus_allocated else j.gpus
            out[j.account] = out.get(j.account, 0.0) + n
    return out


def gpus_in_use(snapshot: Snapshot) -> dict[str, dict[str, int]]:
    """account -> type -> GPUs held by running jobs ("?" for a running job whose type is unknown)."""
    out: dict[str, dict[str, int]] = {}
    for j in snapshot.jobs:
        if not j.running or j.gpus <= 0:
            continue
        row = out.setdefault(j.account, {})
        if j.gpus_allocated:
            for g, n in j.gpus_allocated.items():
                row[g] = row.get(g, 0) + int(n)
        else:
            g = j.gpu_type or "?"
            row[g] = row.get(g, 0) + j.gpus
    return out


def managed_accounts(snapshot: Snapshot, demand: Mapping[tuple[str, str], ClassDemand], cfg: Any) -> list[str]:
    """Accounts whose limits slurm-fair sets: ``limits.accounts``, else every account with GPU jobs or a
    fair-share share (every account association the snapshot lists)."""
    if cfg.limits.accounts:
        return sorted(cfg.limits.accounts)
    return sorted(({a.name for a in snapshot.accounts} | {a for (a, _c) in demand}) - NEVER_MANAGED)


def limit_batches(changes: Mapping[str, Mapping[str, int]]) -> list[dict[str, dict[str, int]]]:
    """Split limit changes into calls of ``Cluster.set_accounts_gpu_limits`` so that the backend (which
    writes accounts with identical settings in one sacctmgr call) needs as few calls as possible.

    Either one call with everything (one sacctmgr per distinct per-account settings), or one call per
    limit key (one sacctmgr per distinct (key, value)), whichever needs fewer sacctmgr runs.
    """
    if not changes:
        return []
    whole = len({tuple(sorted(ch.items())) for ch in changes.values() if ch})
    keys: dict[str, dict[str, dict[str, int]]] = {}
    for a, ch in changes.items():
        for k, v in ch.items():
            keys.setdefault(k, {})[a] = {k: v}
    per_key = sum(len({tuple(x.items()) for x in batch.values()}) for batch in keys.values())
    if whole <= per_key:
        return [{a: dict(ch) for a, ch in changes.items() if ch}]
    return [keys[k] for k in sorted(keys)]


# ------------------------------------------------------------------------------------------- untyped requests
# etc/job_submit.lua types untyped GPU requests from a map the daemon publishes each round
# (daemon/publish.py); jobs it typed carry ``fair:flex`` in their comment (Job.flexible).

DEFAULT_TARGET = "*"  # key of the map's default line (accounts without a line of their own)


def flexible_as_untyped(snapshot: Snapshot) -> Snapshot:
    """The snapshot with every *pending* flexible job shown untyped: its demand counts as untyped (usable on
    any type) because the daemon can still move it. Use it only where Slurm can retype pending jobs
    (:func:`slurm_fair.cluster.base.supports_pending_retype`); elsewhere a flexible job stays typed."""
    jobs = tuple(replace(j, gpu_type=None) if j.pending and j.flexible and j.gpu_type else j
                 for j in snapshot.jobs)
    return replace(snapshot, jobs=jobs)


def pending_typed(snapshot: Snapshot) -> dict[str, dict[str, int]]:
    """account -> type -> GPUs of its pending jobs that request that type (held jobs included)."""
    out: dict[str, dict[str, int]] = {}
    for j in snapshot.jobs:
        if j.pending and j.gpu_type and j.gpus > 0:
            row = out.setdefault(j.account, {})
            row[j.gpu_type] = row.get(j.gpu_type, 0) + j.gpus
    return out


def share_room(plan: Plan, in_use: Mapping[str, Mapping[str, int]],
               pending: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """account -> type -> room in its share: limit − GPUs in use − GPUs of pending jobs typed for it."""
    return {a: {g: int(plan.limits[a].get(g, 0)) - int(in_use.get(a, {}).get(g, 0)) - int(pending.get(a, {}).get(g, 0))
                for g in plan.capacity}
            for a in plan.accounts}


def _speed(throughput: Mapping[str, Mapping[str, Mapping[str, float]]] | None, account: str, g: str) -> float:
    """Sum over the account's classes of their throughput on ``g`` (0 when unknown)."""
    classes = (throughput or {}).get(account, {})
    return float(sum(float(x.get(g, 0.0)) for x in classes.values()))


def typed_claims(snapshot: Snapshot) -> dict[str, int]:
    """type -> GPUs of pending and running jobs (every account) that request exactly that type."""
    out: dict[str, int] = {}
    for j in snapshot.jobs:
        if (j.pending or j.running) and j.gpu_type and j.gpus > 0:
            out[j.gpu_type] = out.get(j.gpu_type, 0) + j.gpus
    return out


def default_target(plan: Plan, idle: Mapping[str, int] | None = None,
                   claims: Mapping[str, int] | None = None) -> tuple[str, str] | None:
    """The map's ``*`` line: the type with the most capacity no account's limit holds (capacity − Σ limits);
    ties: the most idle GPUs now (``idle``), then the most GPUs no typed job asks for (capacity − ``claims``,
    :func:`typed_claims`: where typed demand contends least, an account's first untyped jobs are most likely
    to fit its coming share), then the name. None when the cluster has no GPU type."""
    if not plan.capacity:
        return None
    free = {g: int(c) - sum(int(plan.limits[a].get(g, 0)) for a in plan.accounts) for g, c in plan.capacity.items()}
    idle = idle or {}
    unclaimed = {g: int(c) - int((claims or {}).get(g, 0)) for g, c in plan.capacity.items()}
    g = min(plan.capacity, key=lambda g: (-free[g], -int(idle.get(g, 0)), -unclaimed[g], g))
    if free[g] > 0:
        return g, f"most GPUs not held by any account's limit ({free[g]} of {plan.capacity[g]})"
    if int(idle.get(g, 0)) > 0:
        return g, f"most idle GPUs now ({int(idle.get(g, 0))} of {plan.capacity[g]})"
    return g, f"fewest GPUs asked for by typed jobs ({plan.capacity[g] - unclaimed[g]} of {plan.capacity[g]})"


def untyped_targets(plan: Plan, snapshot: Snapshot,
                    throughput: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None
                    ) -> dict[str, tuple[str, str]]:
    """account -> (GPU type, reason) for untyped GPU requests, plus ``"*"`` (:func:`default_target`).

    Rules: an account gets the type where its share has the most room (:func:`share_room`: limit minus GPUs
    in use minus GPUs of its pending jobs already typed for that type); ties go to the type its classes run
    fastest on (sum of ``throughput[account][class][type]``, when known), then to the name. An account with
    no room on any type gets the ``*`` type (its jobs wait for the next round's limits there). Accounts of
    the plan only; others use ``*``. Pure: the map file is written by ``daemon/publish.py``.
    """
    in_use = gpus_in_use(snapshot)
    room = share_room(plan, in_use, pending_typed(snapshot))
    usage = snapshot.gpu_types()
    idle = {g: max(u.total - u.unusable - u.allocated, 0) for g, u in usage.items()}
    dflt = default_target(plan, idle, typed_claims(snapshot))
    out: dict[str, tuple[str, str]] = {}
    if dflt is None:
        return out
    types = sorted(t for t in plan.capacity if plan.capacity[t] > 0) or sorted(plan.capacity)
    for a in plan.accounts:
        g = min(types, key=lambda g: (-room[a][g], -_speed(throughput, a, g), g))
        if room[a][g] > 0:
            lim = int(plan.limits[a].get(g, 0))
            used = int(in_use.get(a, {}).get(g, 0))
            out[a] = (g, f"most room in its share: limit {lim}, in use {used}, pending {lim - used - room[a][g]}")
        else:
            out[a] = (dflt[0], f"no room in its share now; {dflt[1]}")
    out[DEFAULT_TARGET] = dflt
    return out


def _gaps(account: str, sources: Mapping[str, Mapping[str, Mapping[str, str]]], rep: set[tuple[str, str]],
          capacity: Mapping[str, int]) -> dict[str, str]:
    """type -> a class of ``account`` that reports its throughput but has no profile on that type."""
    gaps: dict[str, str] = {}
    for cls, src in sorted(sources.get(account, {}).items()):
        if (account, cls) in rep:
            for g, s in sorted(src.items()):
                if s == SRC_ASSUMED and capacity.get(g, 0) > 0:
                    gaps.setdefault(g, cls)
    return gaps


def explore_plan(plan: Plan, snapshot: Snapshot, sources: Mapping[str, Mapping[str, Mapping[str, str]]],
                 reporting: Iterable[tuple[str, str]]) -> tuple[Plan, list[dict[str, Any]]]:
    """Exploration, part 1 (``profiling.explore``): an account with a reporting class (see
    :func:`explore_targets`) that has no room in its share on any type the class has no profile on, but has
    room (limit not used by running or typed pending jobs) on another type, moves one GPU of its limit from
    there to such a type, if that type has a GPU no account's limit holds. Its total (``ANY_GPU``) is
    unchanged and nobody else's limit moves. One GPU per account per round. Returns (plan, moves)."""
    rep = set(reporting)
    room = share_room(plan, gpus_in_use(snapshot), pending_typed(snapshot))
    held = {g: sum(int(plan.limits[a].get(g, 0)) for a in plan.accounts) for g in plan.capacity}
    limits = {a: dict(v) for a, v in plan.limits.items()}
    moves: list[dict[str, Any]] = []
    for a in plan.accounts:
        gaps = _gaps(a, sources, rep, plan.capacity)
        if not gaps or any(room[a].get(g, 0) > 0 for g in gaps):
            continue
        free = [g for g in sorted(gaps) if plan.capacity[g] - held[g] >= 1]
        src = [f for f in sorted(plan.capacity) if f not in gaps and room[a].get(f, 0) >= 1]
        if not free or not src:
            continue
        f = max(src, key=lambda t: (room[a][t], -src.index(t)))
        g = free[0]
        limits[a][f] -= 1
        limits[a][g] = limits[a].get(g, 0) + 1
        held[f] -= 1
        held[g] += 1
        moves.append({"account": a, "class": gaps[g], "from": f, "to": g})
    return (replace(plan, limits=limits) if moves else plan), moves


def explore_targets(targets: Mapping[str, tuple[str, str]], plan: Plan, snapshot: Snapshot,
                    sources: Mapping[str, Mapping[str, Mapping[str, str]]],
                    reporting: Iterable[tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """``targets`` with exploration (``profiling.explore``, Gandiva_fair's opportunistic profiling): an account
    with a class that reports its throughput (``reporting``: (account, class) with a measured or harvested
    value) but has no profile on some GPU type (source ``assumed``) gets its untyped submissions steered to
    such a type, if its share has room there (so exploring never takes more than its share; see
    :func:`explore_plan` for how that room is made); among several, the type with the most room, then the
    name. An account whose target is already such a type, with room, keeps it (the reason says so). Pure; the result is what the type map publishes (per account: job_submit.lua sees no
    class), so all of that account's untyped submissions go there until the next round."""
    rep = set(reporting)
    room = share_room(plan, gpus_in_use(snapshot), pending_typed(snapshot))
    out = dict(targets)
    for a, (g0, why) in targets.items():
        if a == DEFAULT_TARGET or a not in room:
            continue
        gaps = _gaps(a, sources, rep, plan.capacity)
        if not gaps:
            continue
        if g0 in gaps:
            if room[a].get(g0, 0) > 0:
                out[a] = (g0, f"explore: class {gaps[g0]} has no profile on {g0}; {why}")
            continue
        cands = [g for g in sorted(gaps) if room[a].get(g, 0) > 0]
        if cands:
            g = max(cands, key=lambda t: (room[a][t], -cands.index(t)))
            out[a] = (g, f"explore: class {gaps[g]} has no profile on {g} (room in its share: {room[a][g]})")
    return out


@dataclass(frozen=True)
class Retype:
    """Move one pending flexible job to another GPU type."""

    job_id: int
    account: str
    old_type: str
    new_type: str
    gpus_per_node: int


def with_retypes(snapshot: Snapshot, moves: Iterable[Retype]) -> Snapshot:
    """The snapshot as it will be once ``moves`` are applied (their jobs request the new type)."""

    moved = {m.job_id: m.new_type for m in moves}
    if not moved:
        return snapshot
    return replace(snapshot, jobs=tuple(replace(j, gpu_type=moved[j.job_id]) if j.job_id in moved else j
                                        for j in snapshot.jobs))


def retype_moves(plan: Plan, snapshot: Snapshot, max_moves: int = 10,
                 throughput: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None) -> list[Retype]:
    """Pending flexible jobs to move to a type with room (apply only where Slurm supports retyping).

    Per account and type, the room left after running jobs (limit − in use) is handed to its pending jobs
    of that type oldest first (held jobs skipped); a flexible job that no longer fits moves to the type with
    the most room left that fits it whole (ties: faster for the account's classes, then name), which
    then holds those GPUs. At most ``max_moves`` jobs, oldest first.
    """
    in_use = gpus_in_use(snapshot)
    free = {a: {g: int(plan.limits[a].get(g, 0)) - int(in_use.get(a, {}).get(g, 0)) for g in plan.capacity}
            for a in plan.accounts}
    waiting = sorted((j for j in snapshot.jobs
                      if j.pending and j.gpu_type and j.gpus > 0 and j.account in free
                      and not j.reason.startswith("JobHeld")),
                     key=lambda j: (j.submit_time, j.job_id))
    misfits: list[Job] = []
    for j in waiting:
        row = free[j.account]
        if row.get(j.gpu_type, 0) >= j.gpus:
            row[j.gpu_type] -= j.gpus
        elif j.flexible:
            misfits.append(j)
    moves: list[Retype] = []
    for j in misfits:
        if len(moves) >= max_moves:
            break
        row = free[j.account]
        fits = [g for g in row if g != j.gpu_type and row[g] >= j.gpus]
        if not fits:
            continue
        g = min(fits, key=lambda g: (-row[g], -_speed(throughput, j.account, g), g))
        row[g] -= j.gpus
        moves.append(Retype(j.job_id, j.account, j.gpu_type, g, j.gpus_per_node))
    return moves


def flexible_note(snapshot: Snapshot | None, account: str) -> str | None:
    """What ``slurm-fair explain`` says about the account's pending flexible (``fair:flex``) jobs: on a
    Slurm that cannot retype pending jobs (< 23.02.6) they keep the type they were given at submission."""
    if snapshot is None:
        return None
    ids = sorted(j.job_id for j in snapshot.jobs if j.account == account and j.pending and j.flexible)
    if not ids:
        return None
    shown = ", ".join(map(str, ids[:10])) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
    if supports_pending_retype(snapshot.slurm_version):
        return (f"pending flexible jobs (fair:flex) {shown}: typed at submission; slurm-fair moves them to "
                "another GPU type when theirs has no room left in the account's share and another has")
    return (f"pending flexible jobs (fair:flex) {shown}: typed at submission; Slurm {snapshot.slurm_version} "
            "cannot change a pending job's GPU type (needs >= 23.02.6, SchedMD bug 17184), so they wait for "
            "the type they were given")


# --------------------------------------------------------------------------- a round's decisions, all at once

# At most this many SiteFactor updates per round (slurmctld spends ~4 ms per job update on the testbed): the
# jobs whose factor moves most go first, the rest follow in the next rounds. Bounds a round's time when
# thousands of pending jobs need new factors at once (first round, big reordering).
MAX_SITE_FACTOR_UPDATES = 1000
MAX_RETYPES = 10  # pending fair:flex jobs moved to another GPU type per round


@dataclass(frozen=True)
class Decisions:
    """Everything one round decides (:func:`decide`), before anything is applied."""

    demand: dict[tuple[str, str], ClassDemand]
    built: Built
    alloc: Allocation
    plan: Plan
    received: dict[str, float]
    deficits: dict[str, float]
    factors: dict[int, int]  # SiteFactor of every pending GPU job
    factor_changes: dict[int, int]  # the ones to write this round (differ from Slurm's, capped)
    factors_deferred: int
    current: dict[str, dict[str, int]]  # the accounts' limits in Slurm now
    planned: dict[str, dict[str, int]]  # limits the plan wants, for accounts Slurm knows
    changes: dict[str, dict[str, int]]  # only what differs (empty when limits are not managed)
    retypes: list[Retype]
    targets: dict[str, Any]  # untyped GPU requests: the type map job_submit.lua uses
    dt: float  # seconds of deficit accounting since the last ok round
    explored: list[dict[str, Any]] = field(default_factory=list)  # exploration's limit moves (explore_plan)


def decide(snapshot: Snapshot, cfg: Any, solve: Any, *, profiles: Any, shipped: Any, deviations: Mapping[str, Any],
           deficits: Mapping[str, float], managed_before: set[str], last_ok_started: float | None, now: float,
           empty_alloc: Any) -> Decisions:
    """One round's decisions from the snapshot and the state carried from earlier rounds, with no side effects:
    demand per class, the problem and its allocation (``solve(problem) -> Allocation``; ``empty_alloc(built)``
    when nobody asks for GPUs), the plan (integer GPUs, limits), deficits and SiteFactors, limit changes, retypes
    and the untyped-request targets. Raises what the policy raises (SolverError, InputError)."""
    profiles = list(profiles)
    retype_ok = supports_pending_retype(snapshot.slurm_version)
    # a pending fair:flex job can still be moved where Slurm retypes pending jobs: its demand is untyped
    demand = observe_demand(flexible_as_untyped(snapshot) if retype_ok else snapshot, cfg)
    built = build_problem(snapshot, demand, profiles, shipped, cfg)
    known = {a.name for a in snapshot.accounts}
    managed = [a for a in managed_accounts(snapshot, demand, cfg) if a in known or any(d == a for (d, _c) in demand)]
    alloc = solve(built.problem) if built.problem.tenants else empty_alloc(built)
    plan = make_plan(built, alloc, demand, deviations, managed, gpus_in_use(snapshot))
    explored: list[dict[str, Any]] = []
    reporting = {(r.get("account") or "", r["class"]) for r in profiles if r.get("source") in ("measured", "harvested")}
    if cfg.profiling.explore:
        plan, explored = explore_plan(plan, snapshot, built.sources, reporting)
    received = received_gpus(snapshot, cfg)
    ideal_tot = {a: sum(v.values()) for a, v in plan.ideal.items() if plan.demand.get(a, 0) > 0}
    dt = 0.0 if last_ok_started is None else min(max(now - last_ok_started, 0.0), 2 * float(cfg.daemon.period))
    new_deficits = update_deficit(dict(deficits), ideal_tot, received, dt)
    factors = site_factors(snapshot, new_deficits, cfg)
    current_sf = {j.job_id: j.site_factor for j in snapshot.jobs}
    factor_changes = {jid: v for jid, v in factors.items() if current_sf.get(jid) != v}
    deferred = 0
    if len(factor_changes) > MAX_SITE_FACTOR_UPDATES:
        order = sorted(factor_changes, key=lambda j: (-abs(factor_changes[j] - current_sf.get(j, 0)), j))
        deferred = len(order) - MAX_SITE_FACTOR_UPDATES
        factor_changes = {j: factor_changes[j] for j in sorted(order[:MAX_SITE_FACTOR_UPDATES])}
    current = {a.name: dict(a.limits) for a in snapshot.accounts}
    planned = {a: lim for a, lim in plan.limits.items() if a in known}
    changes = limit_changes(current, planned, managed_before & known) if cfg.limits.manage else {}
    retypes = retype_moves(plan, snapshot, MAX_RETYPES, built.throughput) if retype_ok else []
    targets = untyped_targets(plan, with_retypes(snapshot, retypes), built.throughput)
    if cfg.profiling.explore:
        targets = explore_targets(targets, plan, with_retypes(snapshot, retypes), built.sources, reporting)
    return Decisions(demand=demand, built=built, alloc=alloc, plan=plan, received=received, deficits=new_deficits,
                     factors=factors, factor_changes=factor_changes, factors_deferred=deferred, current=current,
                     planned=planned, changes=changes, retypes=retypes, targets=targets, dt=dt, explored=explored)
