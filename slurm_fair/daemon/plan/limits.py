"""From the policy's fractional shares to per-account GPU limits: guarantee + lend. Pure.

* **Guarantee** (:func:`make_plan`): the policy's fractional shares are summed per account and rounded with
  :func:`slurm_fair.rounding.place` using the deviations carried per account (sticky: of floor and ceil, the
  one closest to the GPUs the account holds now); the smallest pending job gates an account (``min_gpus``)
  only while it has no running GPU job. The rounded share (``Plan.real``) is the account's **guarantee** of
  each type — Kueue's *nominal quota* of a flavor.
* **Claims**: the part of its guarantee an account's *waiting* jobs need now (:func:`claims_and_reclaims`): job
  by job, a startable pending job claims its GPUs on its type (an untyped one on its account's fastest type
  where it fits) within the account's guarantee minus what it uses, and only where it fits whole as Slurm would
  place it — on the idle GPUs, or, when preemption reclaims, on nodes where borrowers' jobs give GPUs back
  (:mod:`.reclaim`; such a claim is one of the plan's ``reclaims``, naming its victims). Held jobs, jobs waiting on a dependency or
  a begin time claim nothing (:func:`.demand.startable`), nor does a job that could not start anyway: idle
  GPUs are never held for nothing.
* **Lend** (``limits.lend = true``, the default): every GPU no claim holds is lendable — Kueue's borrowing
  from the cohort, with no borrowing limit. An account's limit of a type is the type's capacity minus the
  *other* accounts' claims there: it may start jobs on every GPU that is not held for someone else's
  waiting jobs, so no GPU stays idle for an account that does not need it, an account without jobs can
  start at once on whatever is not claimed, and when nobody waits no limit binds at all (a limit equal to
  the capacity is written as no limit). GPUs an account holds above its guarantee are **borrowed**: when
  another account waits under its guarantee there, they are reclaimed by preemption (the plan's reclaims,
  ``daemon/preemption/victims.py``). While a claim on a type is served by reclaim, every account is held to its guarantee
  there (and its total to the sum of its per-type limits), so nobody refills what preemption frees.
* **Lending horizon** (:class:`Borrowing`, ``limits.borrow_gpus`` >= 0; off by default): on a type where an account
  with jobs waiting for it holds less than its guarantee, the others may hold at most their guarantee plus
  ``max(borrow_gpus, ceil(borrow_fraction x guarantee))`` there — Kueue's ``borrowingLimit``, bound only while
  someone could claim and only without reclaim, where a loan lasts as long as the job that took it.
* **Hard caps** (``limits.lend = false``): the old rule — the limit is the guarantee, cut to what the
  account's jobs could use there, plus GPUs no account was given handed, one at a time, to accounts with
  pending jobs that can use them (``extra``).

Limits are per type plus the untyped total ``ANY_GPU``, because Slurm does not enforce typed limits on
untyped requests: the total is the capacity of every type minus the other accounts' claims (lend), or the
sum of the per-type limits (hard caps).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ... import fairness
from ...cluster.base import ANY_GPU, CLEAR
from ...model import Allocation
from ...rounding import LastRound, place
from .borrow import Borrowing, waiting_types
from .demand import ClassDemand, FreeGPUs, Waiting
from .reclaim import Borrowed, Reclaim
from .problem import Built


@dataclass(frozen=True)
class Plan:
    """Everything one round decided (JSON-able through :meth:`as_dict`)."""

    capacity: dict[str, int]
    accounts: tuple[str, ...]  # managed accounts this round (limits set for each)
    ideal_class: dict[str, dict[str, dict[str, float]]]  # account -> class -> type -> GPUs
    ideal: dict[str, dict[str, float]]  # account -> type -> GPUs (fractional)
    deviation_before: dict[str, dict[str, float]]
    real: dict[str, dict[str, int]]  # rounded shares: each account's guarantee per type
    deviations: dict[str, dict[str, float]]  # to carry into the next round
    extra: dict[str, dict[str, int]]  # hard caps only: work conservation on top of real
    limits: dict[str, dict[str, int]]  # account -> {type: n, ANY_GPU: total}; a key left out = no limit
    min_gpus: dict[str, int]
    demand: dict[str, int]  # account -> GPUs of pending + running jobs
    total_throughput: float = 0.0
    claims: dict[str, dict[str, int]] = field(default_factory=dict)  # guarantee held for waiting jobs
    lend: bool = True
    reclaims: tuple[Reclaim, ...] = ()  # claims served by reclaim: the waiting job, its placement, its victims

    def limit(self, account: str, gpu_type: str) -> int:
        """The account's limit of a type (its capacity where no limit is set)."""
        return int(self.limits.get(account, {}).get(gpu_type, self.capacity.get(gpu_type, 0)))

    def lendable(self) -> dict[str, int]:
        """type -> GPUs no claim holds (in use or idle): what any account may start jobs on."""
        return {g: c - sum(self.claims.get(a, {}).get(g, 0) for a in self.claims) for g, c in self.capacity.items()}

    def as_dict(self) -> dict[str, Any]:
        out = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}
        out["reclaims"] = [r.as_dict() for r in self.reclaims]
        return out


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


def claims_of(real: Mapping[str, Mapping[str, int]], used: Mapping[str, Mapping[str, int]],
              waiting: Mapping[str, Waiting], order: Mapping[str, Sequence[str]],
              free: FreeGPUs | None = None, borrowed: Borrowed | None = None) -> dict[str, dict[str, int]]:
    """account -> type -> GPUs of its guarantee held for its waiting jobs (:func:`claims_and_reclaims`)."""
    return claims_and_reclaims(real, used, waiting, order, free, borrowed)[0]


def claims_and_reclaims(real: Mapping[str, Mapping[str, int]], used: Mapping[str, Mapping[str, int]],
                        waiting: Mapping[str, Waiting], order: Mapping[str, Sequence[str]],
                        free: FreeGPUs | None = None, borrowed: Borrowed | None = None
                        ) -> tuple[dict[str, dict[str, int]], list[Reclaim]]:
    """(account -> type -> GPUs of its guarantee held for its waiting jobs, the claims served by reclaim).

    Job by job: accounts furthest below their guarantee first (GPUs used / guaranteed, then name), each
    account's jobs in its order (``waiting``); a job claims its GPUs on its type — an untyped one on the first
    type of ``order[account]`` (fastest first) where it fits — when they fit both in what is left of the
    account's guarantee there (guarantee − used − claimed) and, whole, where Slurm would place it: on the idle
    GPUs (``free``, node by node; an untyped job on any of its types first), or, with ``borrowed`` (preemption
    on), once borrowers' jobs give back their GPUs on the nodes the job needs (:mod:`.reclaim`: such a claim is a :class:`.reclaim.Reclaim` naming its
    victims; the GPUs its victims free beyond the job serve the next claims). ``free`` None: no bound. A job
    that fits nowhere claims nothing: holding GPUs idle for a job that cannot start would only delay others.
    """
    room = {a: {g: max(0, int(n) - int(used.get(a, {}).get(g, 0))) for g, n in row.items()} for a, row in real.items()}
    out = {a: {g: 0 for g in row} for a, row in real.items()}
    reclaims: list[Reclaim] = []

    def share(a: str) -> tuple[float, str]:
        g = sum(int(v) for v in real[a].values())
        return (sum(int(v) for v in used.get(a, {}).values()) / g if g else float("inf"), a)

    def serve(a: str, job_id: int, g: str, gpus: int, idle: bool) -> bool:
        if free is None or free.take(g, gpus):
            return True
        if idle or borrowed is None:
            return False
        got = borrowed.place(free.free, free.size, g, gpus)
        if got is None:
            return False
        where, victims = got
        borrowed.take(victims)
        for h in victims:  # what the victims free, less what the job takes, serves the next claims
            for x, k in h.nodes.items():
                if x in free.free:
                    free.free[x][h.gpu_type] = free.free[x].get(h.gpu_type, 0) + int(k)
        for x, k in where.items():
            free.free[x][g] -= k
        reclaims.append(Reclaim(a, job_id, g, gpus, dict(where), tuple(h.job_id for h in victims)))
        return True

    for a in sorted((a for a in real if a in waiting), key=share):
        types = list(order.get(a, ())) + [g for g in real[a] if g not in order.get(a, ())]
        w = waiting[a]
        for i, (gpus, t) in enumerate(w.jobs):
            jid = w.ids[i] if i < len(w.ids) else 0
            can = w.types_of(i)
            cands = [g for g in ([t] if t is not None else types)
                     if g in room[a] and room[a][g] >= gpus and (t is not None or can is None or g in can)]
            # idle GPUs on any type it can use first, then reclaim (nothing is freed where GPUs idle)
            for g, idle in [(g, True) for g in cands] + [(g, False) for g in cands]:
                if serve(a, jid, g, gpus, idle):
                    out[a][g] += gpus
                    room[a][g] -= gpus
                    break
    return out, reclaims


def lend_limits(capacity: Mapping[str, int], claims: Mapping[str, Mapping[str, int]],
                accounts: Iterable[str], guarantee: Mapping[str, Mapping[str, int]] | None = None,
                reclaiming: Iterable[str] = (), untyped: Iterable[str] = (),
                used: Mapping[str, Mapping[str, int]] | None = None,
                borrow_caps: Mapping[str, Mapping[str, int]] | None = None) -> dict[str, dict[str, int]]:
    """Per account: capacity minus the other accounts' claims, per type and in total (``ANY_GPU``); a value
    equal to the capacity is left out (no limit). On a type in ``reclaiming`` (a claim there is served by
    reclaim) every account is held to its ``guarantee`` there, so no borrower refills what preemption frees
    (a claimant's claim is within its guarantee); its total is then at most the sum of its per-type limits.

    Slurm counts an untyped request against the total ``gres/gpu`` only, never against a typed limit, and
    places it on whichever node has a free GPU first: an account with untyped pending jobs (``untyped``) could
    take the GPUs freed for another account whatever its typed limits say (seen on the 22.05 testbed, issue 39:
    an account with ``v100=0`` took 2 of the V100s reclaimed for another). While a reclaim is in flight its total
    is therefore at most what it holds now (``used``, every type) plus its own claims: its untyped jobs start only
    on GPUs held for it, none on GPUs lent (its typed jobs wait with them until the reclaim is done). The caller
    names such accounts only in the round a reclaim's victims are requeued (``make_plan``'s ``requeuing``).

    ``borrow_caps`` (:meth:`Borrowing.caps`): account -> type -> the most it may hold there; each such type's
    limit is at most that, and the account's total at most the sum of its per-type limits (an untyped job would
    otherwise start past a typed cap)."""
    claimed = {g: sum(int(claims.get(a, {}).get(g, 0)) for a in claims) for g in capacity}
    total_cap = sum(capacity.values())
    total_claimed = sum(claimed.values())
    held = set(reclaiming)
    loose = set(untyped)
    capped = borrow_caps or {}
    out: dict[str, dict[str, int]] = {}
    for a in accounts:
        own = claims.get(a, {})
        row = {}
        per_type = 0
        for g, c in capacity.items():
            v = int(c) - claimed[g] + int(own.get(g, 0))
            if g in held:
                v = min(v, int((guarantee or {}).get(a, {}).get(g, 0)))
            if g in capped.get(a, {}):
                v = min(v, int(capped[a][g]))
            per_type += min(v, int(c))
            if v < c:
                row[g] = v
        tot = total_cap - total_claimed + sum(int(v) for v in own.values())
        if capped.get(a):
            tot = min(tot, per_type)
        if held:
            tot = min(tot, per_type)
            if a in loose:
                tot = min(tot, sum(int(v) for v in (used or {}).get(a, {}).values()) + sum(int(v) for v in own.values()))
        if tot < total_cap:
            row[ANY_GPU] = tot
        out[a] = row
    return out


def _hard_caps(accounts: list[str], types: list[str], cap: Mapping[str, int], real: Mapping[str, Mapping[str, int]],
               demand: Mapping[tuple[str, str], ClassDemand], acct_demand: Mapping[str, int]
               ) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """``limits.lend = false``: (limits, extra) — the guarantee cut to what the account's jobs could use on each
    type, plus GPUs no account holds handed to accounts with pending jobs (fewest extra first, then name)."""
    usable = {a: {g: 0 for g in types} for a in accounts}
    pending = {a: {g: 0 for g in types} for a in accounts}
    for (a, _c), d in demand.items():
        for g in types:
            usable[a][g] += d.by_type.get(g, 0) + d.by_type.get("", 0)
            pending[a][g] += d.pending_by_type.get(g, 0) + d.pending_by_type.get("", 0)
    base = {a: {g: min(real[a][g], usable[a][g]) for g in types} for a in accounts}
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
    return limits, extra


def make_plan(built: Built, alloc: Allocation, demand: Mapping[tuple[str, str], ClassDemand],
              deviations: Mapping[str, Mapping[str, float]], managed_accounts: Iterable[str],
              in_use: Mapping[str, Mapping[str, int]] | None = None, *,
              waiting: Mapping[str, Waiting] | None = None, order: Mapping[str, Sequence[str]] | None = None,
              lend: bool = True, free: FreeGPUs | None = None, reclaim: bool = False,
              moving: Sequence[tuple[str, str, int]] = (), last: LastRound | None = None,
              requeuing: bool = False, borrowing: Borrowing = Borrowing()) -> Plan:
    """Round the allocation to guarantees and limits (see the module docstring).

    ``managed_accounts``: every account slurm-fair sets limits for this round. ``deviations``: carried from the
    previous applied round (unknown accounts/types are ignored). ``in_use``: GPUs each account's running jobs
    hold per type (:func:`.demand.gpus_in_use`); the rounding then prefers, of floor and ceil, the value closest
    to it (sticky rounding, :mod:`slurm_fair.rounding`), and claims count from it. ``waiting``: each account's
    startable pending GPUs (:func:`.demand.waiting_gpus`; None: every pending GPU of ``demand``). ``order``: per
    account the types its untyped jobs prefer (fastest first; :func:`.problem.type_order`). ``free``: the GPUs
    free now, node by node (None: claims are not bounded by them); with ``reclaim`` (preemption on) the GPUs
    accounts hold above their guarantee serve claims too: preemption gives them back. ``moving``: upgrade moves
    in flight, (account, target type, GPUs): their GPUs on the target are taken from ``free`` and claimed by
    their account on top of its guarantee claims, so nobody else starts there meanwhile. ``last``: last round's
    ideal and guarantees; an account whose ideal did not move keeps its guarantee (:mod:`slurm_fair.rounding`).
    ``requeuing``: a reclaim's victims may be requeued this round (their grace is over): the GPUs they free appear
    now, and accounts with untyped jobs pending are held in total to what they hold plus their claims
    (:func:`lend_limits`; in the rounds of a grace nothing is freed, and they are not). ``borrowing``: the cap on
    what an account may hold above its guarantee where others could claim (:class:`Borrowing`; lending without
    ``reclaim`` only: with it, borrowed GPUs come back by preemption).
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
    largest = {a: 0 for a in accounts}  # each account's largest running job: a window it runs on is held
    for (a, _c), d in demand.items():
        acct_demand[a] += d.gpus
        running[a] += d.running_gpus
        largest[a] = max(largest[a], d.max_running)
        if d.min_pending is not None:
            min_pending[a] = min(min_pending.get(a, d.min_pending), d.min_pending)
    min_gpus = {a: (min_pending.get(a, 0) if running[a] == 0 else 0) for a in accounts}
    dev_before = {a: {g: float(deviations.get(a, {}).get(g, 0.0)) for g in types} for a in accounts}
    held = {a: {g: int(n) for g, n in (in_use or {}).get(a, {}).items() if g in cap} for a in accounts}
    placement = place(ideal, cap, deviations=dev_before, min_gpus=min_gpus, demand=acct_demand, current=held, last=last,
                      running_jobs=largest)
    real = {a: dict(placement.real[a]) for a in accounts}
    borrowed = Borrowed(free.holders, real, held) if reclaim and free is not None else None
    if waiting is None:
        waiting = {}
        for (a, _c), d in demand.items():
            w = waiting.setdefault(a, Waiting())
            for g, n in d.pending_by_type.items():
                w.jobs.extend([(1, g or None)] * int(n))
    free = None if free is None else free.copy()
    for _a, g, n in moving:
        if free is not None:
            free.take(g, int(n))
    claims, reclaims = claims_and_reclaims(real, held, waiting, order or {}, free, borrowed)
    for a, g, n in moving:
        if a in claims and g in claims[a]:
            claims[a][g] += int(n)
    if lend:
        loose = {a for a, w in waiting.items() if w.untyped > 0} if requeuing else set()
        limits = lend_limits(cap, claims, accounts, real, {r.gpu_type for r in reclaims}, loose, held,
                             {} if reclaim else borrowing.caps(real, held, accounts, types, waiting_types(waiting, types)))
        extra = {a: {g: 0 for g in types} for a in accounts}
    else:
        limits, extra = _hard_caps(accounts, types, cap, real, demand, acct_demand)
    return Plan(
        capacity=cap, accounts=tuple(accounts), ideal_class=ideal_class, ideal=ideal,
        deviation_before=dev_before, real=real,
        deviations={a: dict(placement.deviations[a]) for a in accounts}, extra=extra, limits=limits,
        min_gpus=min_gpus, demand=acct_demand, total_throughput=float(alloc.total_throughput()),
        claims=claims, lend=lend, reclaims=tuple(reclaims),
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


def drift(current: Mapping[str, Mapping[str, int]], written: Mapping[str, Mapping[str, int]],
          accounts: Iterable[str], site: Mapping[str, Mapping[str, int]] | None = None) -> dict[str, dict[str, int]]:
    """account -> key -> the value in Slurm now (CLEAR: none) of every GPU limit that is someone else's: one
    slurm-fair last wrote with another value (``written``, CLEAR for a limit it cleared); with ``site`` (account
    -> the site limits the round honours, :func:`own_limits`), also, on the accounts it names, one slurm-fair
    never wrote that differs from that record — a key the site added (issue 40: ``k80=1`` on a managed account),
    changed or removed since. It is theirs from now on (:func:`pin_drift`; issue 29: an admin's hand-set limit is
    never overwritten nor cleared). A never-written key still at its recorded site value is not drift: the
    round honours it through :func:`site_bounded` (left alone, or an upper bound when adopted)."""
    out: dict[str, dict[str, int]] = {}
    for a in sorted(set(accounts)):
        now = current.get(a, {})
        mine = written.get(a, {})
        for k, v in mine.items():
            have = int(now.get(k, CLEAR))
            if have != int(v):
                out.setdefault(a, {})[k] = have
        if site is None or a not in site:
            continue
        own = site[a]
        for k in sorted((set(now) | set(own)) - set(mine)):
            have = int(now.get(k, CLEAR))
            if have != int(own.get(k, CLEAR)):
                out.setdefault(a, {})[k] = have
    return out


def pin_drift(planned: Mapping[str, Mapping[str, int]], drifted: Mapping[str, Mapping[str, int]]
              ) -> dict[str, dict[str, int]]:
    """The planned limits with every drifted key kept at the value someone else set (a cleared one stays
    unset): :func:`limit_changes` then never writes it."""
    out = {a: dict(lim) for a, lim in planned.items()}
    for a, keys in drifted.items():
        if a not in out:
            continue
        for k, v in keys.items():
            if v == CLEAR:
                out[a].pop(k, None)
            else:
                out[a][k] = int(v)
    return out


def restore(now: Mapping[str, int], site: Mapping[str, int], written: Mapping[str, int]) -> dict[str, int]:
    """The changes that give an account back its site limits (``site``: what it had before slurm-fair first
    changed it), touching only what slurm-fair wrote and is still there as it wrote it (``written``): a value
    someone set since, or one slurm-fair never wrote, is left as it is."""
    out: dict[str, int] = {}
    for k, v in now.items():
        if k in written and int(written[k]) == int(v):
            target = int(site.get(k, CLEAR))
            if target != int(v):
                out[k] = target
    for k, v in site.items():
        if k not in now and int(written.get(k, 0)) == CLEAR:
            out[k] = int(v)
    return out


def limit_changes(current: Mapping[str, Mapping[str, int]], planned: Mapping[str, Mapping[str, int]],
                  managed_accounts: Iterable[str], site: Mapping[str, Mapping[str, int]] | None = None,
                  written: Mapping[str, Mapping[str, int]] | None = None) -> dict[str, dict[str, int]]:
    """Only the limit values that differ from what Slurm has now; CLEAR for a GPU limit Slurm has that the plan
    leaves out (no limit). An account slurm-fair managed before that is not planned any more gets its site
    limits back (:func:`restore`, with ``written``: only what slurm-fair wrote, nothing where it wrote nothing
    and the account's site limits are recorded; without ``written``, or for an account with neither record,
    every GPU limit it has is cleared)."""
    out: dict[str, dict[str, int]] = {}
    for a in sorted(planned):
        now = current.get(a, {})
        diff = {k: int(v) for k, v in planned[a].items() if now.get(k) != int(v)}
        diff.update({k: CLEAR for k in now if k not in planned[a]})
        if diff:
            out[a] = diff
    for a in sorted(set(managed_accounts) - set(planned)):
        now = current.get(a, {})
        if written is None or (not written.get(a) and a not in (site or {})):
            # no record of what slurm-fair wrote nor of the account's site limits (an older version's writes, or
            # ones retention pruned from ``applied`` before the record existed): every GPU limit cleared, as before
            gone = {k: CLEAR for k in now}
        else:  # only what slurm-fair wrote (nothing, where it never wrote: issue 40, an account left alone)
            gone = restore(now, (site or {}).get(a, {}), written.get(a, {}))
        if gone:
            out[a] = gone
    return out


def with_held_elsewhere(planned: Mapping[str, Mapping[str, int]],
                        elsewhere: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Limits for a partition pilot: an account's GrpTRES counts its jobs in every partition, so the GPUs it
    holds outside the managed ones (:func:`.demand.held_elsewhere`) are added to each planned limit of their
    type and to the total — the limit then binds the managed partitions as planned and leaves what runs
    elsewhere running."""
    return _shift(planned, elsewhere, +1)


def in_partitions(limits: Mapping[str, Mapping[str, int]],
                  elsewhere: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """The inverse of :func:`with_held_elsewhere`: Slurm's limits seen from the managed partitions (the GPUs
    each account holds elsewhere taken off each limit of their type and off the total)."""
    return _shift(limits, elsewhere, -1)


def _shift(limits: Mapping[str, Mapping[str, int]], elsewhere: Mapping[str, Mapping[str, int]],
           sign: int) -> dict[str, dict[str, int]]:
    out = {}
    for a, lim in limits.items():
        away = {g: int(n) for g, n in elsewhere.get(a, {}).items() if n > 0}
        out[a] = {k: int(n) + sign * (sum(away.values()) if k == ANY_GPU else away.get(k, 0)) for k, n in lim.items()}
    return out


def own_limits(accounts: Iterable[str], current: Mapping[str, Mapping[str, int]],
               site: Mapping[str, Mapping[str, int]], managed_before: Iterable[str]) -> dict[str, dict[str, int]]:
    """account -> the site limits a round honours: the ones recorded before slurm-fair first managed it (``site``;
    a round records them for every account it plans, left alone or not, before it manages it), else — for an
    account slurm-fair never managed — the ones it has now (``current``: the site's part, ``site_part``); an
    account managed before with no record (a database from before the record was kept for every account): none."""
    before = set(managed_before)
    return {a: (dict(site[a]) if a in site else (dict(current.get(a, {})) if a not in before else {}))
            for a in accounts}


def site_bounded(planned: Mapping[str, Mapping[str, int]], current: Mapping[str, Mapping[str, int]],
                 site: Mapping[str, Mapping[str, int]], managed_before: Iterable[str], mode: str
                 ) -> tuple[dict[str, dict[str, int]], list[str]]:
    """The planned limits with the site's own GPU limits honoured; returns (limits, accounts left alone).

    An account's site limits are :func:`own_limits`. ``mode = "respect"``: an account with site limits is left
    alone, its limits kept (restored, if slurm-fair had changed them); ``"adopt"``: it is managed, and each site
    limit stays an upper bound of the planned one (a key the plan leaves unlimited takes the site's value). A key
    the site adds later to an account slurm-fair manages is no site limit here but drift (:func:`drift`): kept
    as the site set it, the account still managed."""
    own_of = own_limits(planned, current, site, managed_before)
    out: dict[str, dict[str, int]] = {}
    alone: list[str] = []
    for a, lim in planned.items():
        own = own_of[a]
        if not own:
            out[a] = dict(lim)
        elif mode == "adopt":
            row = dict(lim)
            for k, v in own.items():
                row[k] = min(int(v), int(row[k])) if k in row else int(v)
            out[a] = row
        else:
            out[a] = {k: int(v) for k, v in own.items()}
            alone.append(a)
    return out, sorted(alone)


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


