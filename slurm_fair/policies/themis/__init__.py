"""Themis (Mahajan et al., NSDI '20; paper 003): finish-time fairness with round-by-round partial-allocation
auctions.

**Apps** are the virtual users (a tenant's job class, OEF §4.2.4), weighted by ``weight``. For app l:

* remaining work W_l = Σ_jobs gpus · remaining (GPU-seconds on the class's slowest usable type; the jobs
  of ``JobClass.job_list``: without ``jobs``, one 1-GPU job of ``DEFAULT_REMAINING`` s per GPU of demand);
* throughput of an allocation x_l, u_l(x_l) = Σ_j S_lj x_lj (at most its demand and type caps: the app's
  jobs use at most that many GPUs, eq. 1's min(‖G‖₁, job_demand_max));
* **finish-time fairness** (eq. 1) ρ_l(x_l) = T_sh / T_id with T_sh = elapsed_l + W_l / u_l(x_l) (time
  since the app appeared, plus the remaining work at the offered rate, the allocation assumed to hold
  until completion) and T_id = (done_l + W_l) / e_l: its whole work at the rate of its independent share,
  e_l = the throughput of its weight share w_l/Σw of every GPU type, demand-capped (the paper's 1/N share,
  weighted). ρ ≤ 1 is sharing incentive. elapsed_l and done_l (work done so far, Σ u·dt) come from the
  previous rounds (``warm``); in a one-shot solve both are 0 and ρ_l = e_l / u_l.

**One round** (Pseudocode 1):

1. Leases (§3.3.2, default ``LEASE_S`` = 10 min): every allocation an app got (from an auction or from the
   leftovers) carries its own lease, started when it was granted; an app keeps each allocation whose lease
   has not expired (cut to its current demand, caps and the capacity). GPUs nobody holds under a lease —
   expired, freed, or idle since the last auction — are the resources R auctioned in this round.
2. Filtering (line 17): among the apps with work left that could use a free GPU, the ⌈(1 − f)·N⌉ with the
   largest current ρ (of what they held last round; ∞ for an app holding nothing) bid; ties by the part of
   ρ already spent waiting (elapsed / T_id), then by the shortest T_id (the app whose ρ grows fastest while
   it waits), and every app tied on both with the last one in also bids (``bidders``); knob ``f`` (0.8).
3. Partial-allocation auction among the bidders on the free GPUs (``auction``): bids are 1/ρ_i(u) =
   T_id · u / (elapsed · u + W) with u the app's total throughput (its leased GPUs plus the new ones):
   G_pf = argmax Π_i (1/ρ_i)^{w_i} (line 6; an exponential-cone program, Eisenberg–Gale on throughput
   when nothing is held and nobody has waited); for each bidder the same without it (line 7); bidder i
   keeps c_i · G_pf,i with c_i = (Π_{j≠i} (1/ρ_j(G_pf))^{w_j} / Π_{j≠i} (1/ρ_j(G^{-i}))^{w_j})^{1/w_i}
   (lines 8-9; the weighted PA mechanism of Cole, Gkatzelis and Goel, the paper's [5]; for equal weights
   exactly line 8); 1 − c_i is its hidden payment.
4. Leftovers (line 21, "Leftover Allocation"): the hidden payments and any free GPU no bidder could use go
   to the apps that did not bid — the paper draws them at random; here deterministically, by weight,
   water-filling (``fill_idle``). What those apps cannot use stays **idle until the next auction** (the
   next round auctions it): giving it back to the bidders would undo the payments, and a bid lie would
   pay (``tests/policies/test_themis.py`` has an instance). ``work_conserving=True``
   (``policy.themis_work_conserving``) hands it to anyone below its caps instead, and trades
   strategy-proofness for work conservation.

Properties: a single auction is SP, PE and EF among the bidders for homogeneous valuations (Thm 3.2: here
when a bidder holds nothing and has not waited, 1/ρ ∝ u; with waiting or leased GPUs the valuation is
not homogeneous, and the mechanism is still the paper's but Thm 3.2's proof does not cover it), not SI
and not work-conserving (the hidden payments); over many rounds filtering drives max ρ down (Thm 3.3's
"maximizes SI"). A one-shot ``solve``/``compare`` (no history: nobody holds anything or has waited, every
ρ is ∞) runs one auction among the ⌈(1 − f)N⌉ apps with the shortest T_id (all apps when they tie); its
leftovers that the others cannot use stay idle. Envy-freeness and sharing incentive are not guaranteed
(``tests/policies/test_themis.py`` shows a counter-example found by the checker).

The daemon passes the previous round's state (``warm``, saved in the store after each round and given
back with ``dt``, the seconds since): ``version`` 2, ``leases`` ([app, GPU type, GPUs, age in seconds],
at most ``MAX_LEASES`` per app and type) and ``apps`` ({app: [elapsed, done]}); the state saved before
(``held`` + one ``lease_age``) still loads, every held GPU taking that age. The allocation's ``warm`` is
the next state. Cost: 1 + B exponential-cone solves for B bidders.

Beneath this package: ``auction`` (the partial-allocation auction's programs), ``conic`` (its conic form,
written straight for Clarabel).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ... import lp
from ...fairness import bundle_values
from ...model import DEFAULT_REMAINING, Allocation, Problem
from . import auction as pa
from ..common import TOL, at_caps, capped_note, clean, fill_idle, finish
from ..base import Policy
from ..bud import CONIC, DEFAULT_SOLVER

NAME = "themis"
F = 0.8  # fairness knob: the 1 - F fraction of apps with the worst rho bid in each round (paper: 0.8)
LEASE_S = 600.0  # an auctioned allocation holds this long (paper: 10 minutes)
MAX_LEASES = 8  # leases kept per app and GPU type (older ones merge, keeping the earlier expiry)
STATE_VERSION = 2
MIN_LEASE = 1e-4  # GPUs: a smaller grant (interior-point noise on ties, ~1e-6) gets no lease


@dataclasses.dataclass(frozen=True)
class Lease:
    """GPUs of one type that one app holds from one auction (or leftover grant), ``age`` seconds ago."""
    app: int
    gpu: int
    gpus: float
    age: float


def _key(vu, i: int) -> str:
    return f"{vu.tenant[i]}/{vu.cls[i]}"


def _finite(v: Any, default: float) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return default
    return f if math.isfinite(f) and f >= 0 else default


def _state(warm: Any, vu, keys: list[str]) -> tuple[list[Lease], np.ndarray, np.ndarray, np.ndarray]:
    """(leases aged by ``dt``, held x (n, k) = what each app held last round, elapsed (n,), done (n,)) from
    ``warm``. Reads this version's ``leases`` and the old one-lease state (``held`` + ``lease_age``: every held
    GPU gets that age). Anything malformed counts as absent (the state is a hint carried between rounds)."""
    held = np.zeros((vu.n, vu.k))
    elapsed = np.zeros(vu.n)
    done = np.zeros(vu.n)
    leases: list[Lease] = []
    if not isinstance(warm, dict):
        return leases, held, elapsed, done
    index = {k: i for i, k in enumerate(keys)}
    col = {g: j for j, g in enumerate(vu.gpu_types)}
    dt = _finite(warm.get("dt"), 0.0)
    rows = warm.get("leases")
    if isinstance(rows, list):
        for r in rows:
            if isinstance(r, list) and len(r) == 4 and r[0] in index and r[1] in col:
                g = _finite(r[2], 0.0)
                if g > 0:
                    leases.append(Lease(index[r[0]], col[r[1]], g, _finite(r[3], math.inf) + dt))
    elif isinstance(warm.get("held"), dict):  # the one-lease state saved before per-allocation leases
        age = warm.get("lease_age")
        age = math.inf if age is None else _finite(age, math.inf) + dt
        for k, row in warm["held"].items():
            if k in index and isinstance(row, dict):
                for g, v in row.items():
                    if g in col and _finite(v, 0.0) > 0:
                        leases.append(Lease(index[k], col[g], _finite(v, 0.0), age))
    for ls in leases:
        held[ls.app, ls.gpu] += ls.gpus
    apps = warm.get("apps")
    present = np.zeros(vu.n, bool)
    if isinstance(apps, dict):
        for k, v in apps.items():
            if k in index and isinstance(v, list) and len(v) == 2:
                present[index[k]] = True
                elapsed[index[k]] = _finite(v[0], 0.0)
                done[index[k]] = _finite(v[1], 0.0)
    u_prev = (clean(np.minimum(held, vu.type_cap), vu.speed, vu.capacity, vu.demand, vu.type_cap) * vu.speed).sum(axis=1)
    elapsed = np.where(present, elapsed + dt, 0.0)
    done = np.where(present, done + u_prev * dt, 0.0)
    return leases, held, elapsed, done


def _keep(leases: list[Lease], vu, lease_s: float) -> tuple[list[Lease], np.ndarray]:
    """The leases that have not expired, cut to each app's caps and the capacity (each lease of a cut cell
    shrinks in proportion), and what they add up to."""
    live = [ls for ls in leases if ls.age < lease_s]
    x = np.zeros((vu.n, vu.k))
    for ls in live:
        x[ls.app, ls.gpu] += ls.gpus
    kept = clean(np.minimum(x, vu.type_cap), vu.speed, vu.capacity, vu.demand, vu.type_cap)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(x > 0, kept / np.where(x > 0, x, 1.0), 0.0)
    live = [dataclasses.replace(ls, gpus=ls.gpus * float(ratio[ls.app, ls.gpu])) for ls in live]
    return [ls for ls in live if ls.gpus > TOL], kept


def _bound(leases: list[Lease]) -> list[Lease]:
    """At most MAX_LEASES per app and type: leases of the same age merge; beyond that the two oldest merge,
    keeping the older age (their GPUs are auctioned at the earlier expiry: never later than promised to others)."""
    by: dict[tuple[int, int], dict[float, float]] = {}
    for ls in leases:
        d = by.setdefault((ls.app, ls.gpu), {})
        d[ls.age] = d.get(ls.age, 0.0) + ls.gpus
    out = []
    for (i, j), d in sorted(by.items()):
        ages = sorted(d.items(), key=lambda t: -t[0])  # oldest first
        while len(ages) > MAX_LEASES:
            (a0, g0), (_, g1) = ages[0], ages[1]
            ages = [(a0, g0 + g1)] + ages[2:]
        out += [Lease(i, j, g, a) for a, g in ages]
    return out


def rho(u: np.ndarray, e: np.ndarray, work: np.ndarray, elapsed: np.ndarray, done: np.ndarray) -> np.ndarray:
    """Finish-time fairness (eq. 1) of apps with throughput ``u``: (elapsed + W/u) / ((done + W)/e); inf
    where u = 0 and work is left, 0 where the app has nothing to do."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t_sh = elapsed + np.where(u > 0, work / np.where(u > 0, u, 1.0), np.inf)
        t_id = (done + work) / np.where(e > 0, e, np.nan)
        out = t_sh / t_id
    out = np.where(work <= 0, 0.0, out)
    return np.where(np.isnan(out), np.inf, out)


def bidders(cand: list[int], f: float, r_now: np.ndarray, spent: np.ndarray, t_id: np.ndarray,
            keys: list[str]) -> list[int]:
    """Round-by-round filtering: the ⌈(1 − f)·N⌉ of the N candidates with the largest current ρ; ties (e.g.
    every app holding nothing: ρ = ∞) by the part of ρ already spent waiting (elapsed / T_id), then by the
    shortest T_id (the app whose ρ grows fastest while it waits: dρ/dt = 1/T_id). Apps tied on all three with
    the last one in also bid: nobody is left out for its name."""
    if not cand:
        return []
    nb = min(len(cand), max(1, math.ceil((1.0 - f) * len(cand))))
    rank = sorted(cand, key=lambda i: (-r_now[i], -spent[i], t_id[i], keys[i]))

    def tie(i):
        return (r_now[i], round(float(spent[i]), 12), round(float(t_id[i]), 9))

    last = tie(rank[nb - 1])
    while nb < len(rank) and tie(rank[nb]) == last:
        nb += 1
    return sorted(rank[:nb])


def solve(problem: Problem, solver: str | None = None, warm: Any = None, f: float = F,
          lease_s: float = LEASE_S, work_conserving: bool = False) -> Allocation:
    """One Themis round (module docstring); ``warm``: the previous round's state (with ``dt``)."""
    if not (0.0 <= f < 1.0):
        from ...errors import InputError
        raise InputError("themis f", f, "must be in [0, 1)")
    named = solver is not None and str(solver).strip()
    lp.pick_solver(solver if named else DEFAULT_SOLVER)
    use = lp.pick_solver(solver) if named and lp.pick_solver(solver) in CONIC else None
    vu = problem.virtual_users()
    keys = [_key(vu, i) for i in range(vu.n)]
    timer = lp.Timer()
    notes: list[str] = []
    # jobs -> remaining work; the weight share's throughput
    work, made_up = _work(problem, vu)
    share = vu.weight[:, None] / vu.weight.sum() * vu.capacity[None, :] if vu.n else np.zeros((0, vu.k))
    e = np.array([bundle_values(vu.speed[i], share[i:i + 1], vu.demand[i], vu.type_cap[i])[0] for i in range(vu.n)])
    leases, held, elapsed, done = _state(warm, vu, keys)
    with timer.measure():
        expired = sum(1 for ls in leases if ls.age >= lease_s)
        leases, x = _keep(leases, vu, lease_s)
        kept = x.copy()
        free = np.maximum(vu.capacity - x.sum(axis=0), 0.0)
        room_d = np.maximum(vu.demand - x.sum(axis=1), 0.0)
        room_t = np.where(vu.speed > 0, np.maximum(vu.type_cap - x, 0.0), 0.0)
        can = (work > 0) & (room_d > TOL) & ((room_t > TOL) & (free[None, :] > TOL)).any(axis=1)
        # current rho: of what each app held until now (kept or not), as if it held it to completion
        u_now = (clean(np.minimum(held, vu.type_cap), vu.speed, vu.capacity, vu.demand, vu.type_cap) * vu.speed).sum(axis=1)
        r_now = rho(u_now, e, work, elapsed, done)
        with np.errstate(divide="ignore", invalid="ignore"):
            t_id = np.where(e > 0, (done + work) / np.where(e > 0, e, 1.0), np.inf)
        spent = np.where(np.isfinite(t_id) & (t_id > 0), elapsed / np.where(t_id > 0, t_id, 1.0), 0.0)
        cand = [i for i in range(vu.n) if can[i]]
        bid = bidders(cand, f, r_now, spent, t_id, keys)
        head = "themis round: " + (f"{len(leases)} lease(s) kept ({kept.sum():.4g} GPU(s)), {expired} expired; "
                                   if warm is not None else "one-shot (no history: every rho infinite, ties by T_id); ")
        if bid:
            x = _auction(vu, x, np.array(bid), free, room_d, room_t, elapsed, work, use, notes,
                         head + f"{len(bid)} of {len(cand)} app(s) bid (f = {f:g}); ")
        else:
            notes.append(head + "no app could use a free GPU: no auction")
        x = _idle(vu, x, work_conserving, notes)
    new = x - kept
    leases = _bound(leases + [Lease(i, j, float(new[i, j]), 0.0) for i, j in zip(*np.nonzero(new > MIN_LEASE))])
    u = (x * vu.speed).sum(axis=1)
    r = rho(u, e, work, elapsed, done)
    fin = r[np.isfinite(r) & (work > 0)]
    if fin.size:
        notes.append(f"finish-time fairness rho: max {fin.max():.4g}, mean {fin.mean():.4g}"
                     + (f"; {int((~np.isfinite(r) & (work > 0)).sum())} app(s) get nothing (rho infinite)"
                        if (~np.isfinite(r) & (work > 0)).any() else ""))
    if made_up:
        notes.append(f"{made_up} class(es) without jobs: one 1-GPU job of the default remaining work per GPU of demand")
    notes[:0] = capped_note(vu, at_caps(vu, x))
    if named and use is None:
        notes.append(f"{lp.pick_solver(solver)} solves LPs only; the auction's programs ran on {DEFAULT_SOLVER}")
    alloc = finish(problem, NAME, x, timer, use or DEFAULT_SOLVER, notes)
    state = {
        "version": STATE_VERSION,
        "leases": [[keys[ls.app], vu.gpu_types[ls.gpu], float(ls.gpus), float(ls.age)] for ls in leases],
        "apps": {keys[i]: [float(elapsed[i]), float(done[i])] for i in range(vu.n)},
    }
    return dataclasses.replace(alloc, warm=state)


def _work(problem: Problem, vu) -> tuple[np.ndarray, int]:
    """Each class's remaining work (GPU-seconds of its jobs), and how many classes had made-up jobs."""
    work = np.zeros(vu.n)
    made_up = 0
    for i, (t, c) in enumerate(_classes(problem)):
        usable = float(vu.capacity[vu.speed[i] > 0].sum())
        if c.jobs is None:  # JobClass.job_list's made-up jobs, counted, not built (one per usable GPU without
            # a demand: 4.4 M objects, 5 s, at 1 000 tenants without demands)
            d = c.effective_demand()
            work[i] = math.floor(min(d if d is not None else math.inf, usable) + 1e-9) * DEFAULT_REMAINING
            made_up += 1
            continue
        jobs, _ = c.job_list(usable)
        work[i] = sum(j.gpus * j.remaining for j in jobs)
    return work, made_up


def _auction(vu, x: np.ndarray, b: np.ndarray, free, room_d, room_t, elapsed, work, use, notes: list[str],
             head: str) -> np.ndarray:
    """The partial-allocation auction among the bidders ``b`` for the ``free`` GPUs, its hidden payments and
    leftovers handed to the apps that did not bid; returns the new ``x``, its note (after ``head``) in ``notes``."""
    u0 = (x[b] * vu.speed[b]).sum(axis=1)
    m = pa.Market(vu.speed[b], vu.weight[b], free, room_d[b], room_t[b], u0, elapsed[b], work[b])
    res = pa.auction(m, use)
    g_pf, c = res.g_pf, res.c
    if res.rebuilt:
        notes.append(f"{res.rebuilt} leave-one-out program(s) solved as built without the bidder (the "
                     "parametrized one stalled; same program, same optimal value)")
    x[b] += c[:, None] * g_pf
    x = clean(x, vu.speed, vu.capacity, vu.demand, vu.type_cap)
    payment = float(((1.0 - c)[:, None] * g_pf).sum())
    # leftovers (hidden payments and GPUs no bidder could use): to the apps that did not bid
    others = np.ones(vu.n, dtype=bool)
    others[b] = False
    before = x.sum()
    frozen = dataclasses.replace(vu, demand=np.where(others, vu.demand, x.sum(axis=1)))
    x = clean(fill_idle(frozen, x), vu.speed, vu.capacity, vu.demand, vu.type_cap)
    to_others = float(x.sum() - before)
    notes.append(head + f"hidden payments {payment:.4g} GPU(s), c_i from {c.min():.4g} to {c.max():.4g}; "
                 f"{to_others:.4g} GPU(s) of leftovers to apps that did not bid")
    return x


def _idle(vu, x: np.ndarray, work_conserving: bool, notes: list[str]) -> np.ndarray:
    """GPUs still idle after the auction: handed to anyone below its caps (``work_conserving``), or left idle
    until the next auction; a note says which."""
    if work_conserving:
        before = x.sum()
        x = clean(fill_idle(vu, x), vu.speed, vu.capacity, vu.demand, vu.type_cap)
        if x.sum() > before + 1e-9:
            notes.append(f"work-conserving: {x.sum() - before:.4g} GPU(s) the non-bidders could not use went "
                         "to anyone below its caps, bidders included (the auction is then not strategy-proof)")
    else:
        idle = float(vu.capacity.sum() - x.sum())
        usable_idle = (vu.capacity - x.sum(axis=0) > 1e-9) & ((vu.speed > 0) & (x.sum(axis=1) < vu.demand - 1e-9)[:, None]
                                                             & (x < vu.type_cap - 1e-9)).any(axis=0)
        if usable_idle.any():
            notes.append(f"{idle:.4g} GPU(s) idle until the next auction (hidden payments no app that did not "
                         "bid could use; policy.themis_work_conserving = true hands them out)")
    return x


def _classes(problem: Problem):
    for t in problem.tenants:
        for c in t.classes:
            yield t, c


POLICY = Policy(NAME, solve, guarantees=(),
                claim=("Themis: partial-allocation auctions among the apps with the worst finish-time fairness; one "
                       "auction is strategy-proof, Pareto-efficient and envy-free among its bidders (Thm 3.2), sharing "
                       "incentive only over rounds (Thm 3.3)"),
                options=("f", "lease_s", "work_conserving"), warm=True)
