"""From the policy's fractional shares to per-account GPU limits. Pure.

* **Plan** (:func:`make_plan`): the policy's fractional shares are summed per account and rounded with
  :func:`slurm_fair.rounding.place` using the deviations carried per account (sticky: of floor and ceil, the
  one closest to the GPUs the account holds now); the smallest pending job
  gates an account (``min_gpus``) only while it has no running GPU job. **Work conservation:** GPUs no
  account was given go, one at a time, to accounts with pending jobs that can use that type and whose
  limit is below their demand (fewest extra GPUs first, then name). These extras are not owed back: they
  do not enter the deviations. Per type, no limit exceeds what the account's jobs could use there (GPUs
  of its jobs that request that type, plus its untyped jobs); the rest goes back to the pool first. Accounts
  without GPU jobs get limit 0 (an early round lifts it when they submit). Limits are per type plus the
  untyped total ``ANY_GPU`` (= sum), because Slurm does not enforce typed limits on untyped requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

from ... import fairness
from ...cluster.base import ANY_GPU, CLEAR
from ...model import Allocation
from ...rounding import place
from .demand import ClassDemand
from .problem import Built


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


