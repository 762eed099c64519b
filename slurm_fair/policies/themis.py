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

1. Lease (§3.3.2, default ``LEASE_S`` = 10 min): if the previous allocation's lease has not expired, every
   app keeps what it held (cut to its current demand, caps and the capacity); only GPUs nobody holds are
   auctioned. Otherwise all GPUs are auctioned and nobody keeps anything.
2. Filtering: among the apps that could use more GPUs, the ⌈(1 − f)·N⌉ with the largest current ρ (of
   what they held; ∞ for an app holding nothing; ties by the part of ρ already spent waiting,
   elapsed · e / (done + W), then by name) bid; knob ``f`` (default 0.8).
3. Partial-allocation auction among the bidders on the free GPUs: the proportional-fair allocation
   G_pf = argmax Π_i (1/ρ_i)^{w_i} (line 6) — with the homogeneous valuation 1/ρ_i ∝ u_i of the paper's
   proof of Thm 3.2 this is the Eisenberg–Gale program, solved as in ``bud``; for each bidder i the same
   without i, G_pf^{-i} (line 7); i keeps the fraction c_i = (Π_{j≠i} u_j(G_pf)^{w_j} / Π_{j≠i}
   u_j(G_pf^{-i})^{w_j})^{1/w_i} of G_pf (line 8-9; the weighted PA mechanism of Cole, Gkatzelis and Goel,
   the paper's [5]; for equal weights exactly line 8); 1 − c_i is the hidden payment.
4. Leftovers (line 10 and "Leftover Allocation"): the hidden payments and any free GPU no bidder could use
   go to the apps that did not bid — the paper draws them at random; here deterministically, by weight,
   water-filling (``fill_idle``); GPUs still idle then go to anyone below its caps (the bidders included)
   so that the round is work-conserving, as the paper's overall scheme is.

Properties: a single auction is SP, PE and EF among the bidders (Thm 3.2, for homogeneous valuations) but
not SI; the leftovers make the round work-conserving; over many rounds filtering drives max ρ down
(Thm 3.3's "maximizes SI"). On one problem, as ``solve``/``compare`` see it (no history: every app holds
nothing, so the first ⌈(1 − f)N⌉ by name bid), envy-freeness and sharing incentive are not guaranteed
(``tests/test_themis.py`` shows a counter-example found by the checker).

The daemon passes the previous round's state (``warm``, saved in the store after each round and given
back with ``dt``, the seconds since): ``held`` (GPUs per app and type), ``lease_age`` (seconds since the
held allocation was auctioned), ``apps`` ({app: [elapsed, done]}). The allocation's ``warm`` is the next
state. Cost: 1 + B Eisenberg–Gale solves for B bidders.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from .. import lp
from ..fairness import bundle_values
from ..model import Allocation, Problem
from ._common import TOL, at_caps, capped_note, clean, fill_idle, finish
from .bud import CONIC, DEFAULT_SOLVER, eisenberg_gale
from .base import Policy

NAME = "themis"
F = 0.8  # fairness knob: the 1 - F fraction of apps with the worst rho bid in each round (paper: 0.8)
LEASE_S = 600.0  # an auctioned allocation holds this long (paper: 10 minutes)


def _key(vu, i: int) -> str:
    return f"{vu.tenant[i]}/{vu.cls[i]}"


def _state(warm: Any, vu, keys: list[str]) -> tuple[np.ndarray, float | None, np.ndarray, np.ndarray]:
    """(held x (n, k), lease age in seconds or None = no lease, elapsed (n,), done (n,)) from ``warm``.
    Anything malformed counts as absent (the state is a hint carried between rounds)."""
    held = np.zeros((vu.n, vu.k))
    elapsed = np.zeros(vu.n)
    done = np.zeros(vu.n)
    if not isinstance(warm, dict):
        return held, None, elapsed, done
    index = {k: i for i, k in enumerate(keys)}
    col = {g: j for j, g in enumerate(vu.gpu_types)}
    dt = _finite(warm.get("dt"), 0.0)
    h = warm.get("held")
    if isinstance(h, dict):
        for k, row in h.items():
            if k in index and isinstance(row, dict):
                for g, v in row.items():
                    if g in col:
                        held[index[k], col[g]] = _finite(v, 0.0)
    apps = warm.get("apps")
    if isinstance(apps, dict):
        for k, v in apps.items():
            if k in index and isinstance(v, list) and len(v) == 2:
                elapsed[index[k]] = _finite(v[0], 0.0)
                done[index[k]] = _finite(v[1], 0.0)
    u_prev = (held * vu.speed).sum(axis=1)
    present = np.array([k in (apps or {}) for k in keys]) if isinstance(apps, dict) else np.zeros(vu.n, bool)
    elapsed = np.where(present, elapsed + dt, 0.0)
    done = np.where(present, done + u_prev * dt, 0.0)
    age = warm.get("lease_age")
    lease_age = None if age is None else _finite(age, math.inf) + dt
    return held, lease_age, elapsed, done


def _finite(v: Any, default: float) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return default
    return f if math.isfinite(f) and f >= 0 else default


def rho(u: np.ndarray, e: np.ndarray, work: np.ndarray, elapsed: np.ndarray, done: np.ndarray) -> np.ndarray:
    """Finish-time fairness (eq. 1) of apps with throughput ``u``: (elapsed + W/u) / ((done + W)/e); inf
    where u = 0 and work is left, 0 where the app has nothing to do."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t_sh = elapsed + np.where(u > 0, work / np.where(u > 0, u, 1.0), np.inf)
        t_id = (done + work) / np.where(e > 0, e, np.nan)
        out = t_sh / t_id
    out = np.where(work <= 0, 0.0, out)
    return np.where(np.isnan(out), np.inf, out)


def solve(problem: Problem, solver: str | None = None, warm: Any = None, f: float = F,
          lease_s: float = LEASE_S) -> Allocation:
    """One Themis round (module docstring); ``warm``: the previous round's state (with ``dt``)."""
    if not (0.0 <= f < 1.0):
        from ..errors import InputError
        raise InputError("themis f", f, "must be in [0, 1)")
    named = solver is not None and str(solver).strip()
    lp.pick_solver(solver if named else DEFAULT_SOLVER)
    use = lp.pick_solver(solver) if named and lp.pick_solver(solver) in CONIC else None
    vu = problem.virtual_users()
    keys = [_key(vu, i) for i in range(vu.n)]
    timer = lp.Timer()
    notes: list[str] = []
    # jobs -> remaining work; the weight share's throughput
    work = np.zeros(vu.n)
    made_up = 0
    for i, (t, c) in enumerate(_classes(problem)):
        usable = float(vu.capacity[vu.speed[i] > 0].sum())
        jobs, fake = c.job_list(usable)
        made_up += int(fake)
        work[i] = sum(j.gpus * j.remaining for j in jobs)
    share = vu.weight[:, None] / vu.weight.sum() * vu.capacity[None, :] if vu.n else np.zeros((0, vu.k))
    e = np.array([bundle_values(vu.speed[i], share[i:i + 1], vu.demand[i], vu.type_cap[i])[0] for i in range(vu.n)])
    held, lease_age, elapsed, done = _state(warm, vu, keys)
    with timer.measure():
        keep = lease_age is not None and lease_age < lease_s
        x = np.zeros((vu.n, vu.k))
        if keep:  # the lease holds: keep what each app held, within its caps and the capacity
            x = clean(np.minimum(held, vu.type_cap), vu.speed, vu.capacity, vu.demand, vu.type_cap)
        free = np.maximum(vu.capacity - x.sum(axis=0), 0.0)
        room_d = np.maximum(vu.demand - x.sum(axis=1), 0.0)
        room_t = np.where(vu.speed > 0, np.maximum(vu.type_cap - x, 0.0), 0.0)
        can = (room_d > TOL) & ((room_t > TOL) & (free[None, :] > TOL)).any(axis=1)
        # current rho: of what each app held until now (kept or not), as if it held it to completion
        u_now = (clean(np.minimum(held, vu.type_cap), vu.speed, vu.capacity, vu.demand, vu.type_cap) * vu.speed).sum(axis=1)
        r_now = rho(u_now, e, work, elapsed, done)
        cand = [i for i in range(vu.n) if can[i]]
        nb = min(len(cand), max(1, math.ceil((1.0 - f) * len(cand)))) if cand else 0
        # ties (e.g. every app holding nothing: rho infinite) by the part of rho already spent waiting
        spent = elapsed * e / np.maximum(done + work, 1e-300)
        bidders = sorted(cand, key=lambda i: (-r_now[i], -spent[i], keys[i]))[:nb]
        bidders.sort()
        if bidders:
            b = np.array(bidders)
            w = vu.weight[b]
            g_pf, _, _ = eisenberg_gale(vu.speed[b], w, free, room_d[b], room_t[b], use)
            u_pf = (g_pf * vu.speed[b]).sum(axis=1)
            c = np.ones(b.size)
            if b.size > 1:
                logu = np.log(np.maximum(u_pf, 1e-300))
                for p in range(b.size):
                    rest = np.delete(np.arange(b.size), p)
                    g_m, _, _ = eisenberg_gale(vu.speed[b[rest]], w[rest], free, room_d[b[rest]], room_t[b[rest]], use)
                    u_m = (g_m * vu.speed[b[rest]]).sum(axis=1)
                    gain = float(np.dot(w[rest], logu[rest] - np.log(np.maximum(u_m, 1e-300))))
                    c[p] = min(1.0, math.exp(gain / w[p]))
            x[b] += c[:, None] * g_pf
            payment = float(((1.0 - c)[:, None] * g_pf).sum())
            # leftovers: to the apps that did not bid first, then to anyone below its caps
            others = np.ones(vu.n, dtype=bool)
            others[b] = False
            frozen = dataclasses.replace(vu, demand=np.where(others, vu.demand, x.sum(axis=1)))
            x = fill_idle(frozen, clean(x, vu.speed, vu.capacity, vu.demand, vu.type_cap))
            notes.append(f"themis round: {'lease kept, ' if keep else ''}{b.size} of {len(cand)} app(s) bid "
                         f"(f = {f:g}); hidden payments {payment:.4g} GPU(s), c_i from {c.min():.4g} to {c.max():.4g}")
        elif keep:
            notes.append(f"themis round: lease kept (auctioned {lease_age:.0f} s ago, lease {lease_s:g} s); "
                         "no GPU free for an auction")
        x = clean(fill_idle(vu, clean(x, vu.speed, vu.capacity, vu.demand, vu.type_cap)), vu.speed, vu.capacity,
                  vu.demand, vu.type_cap)
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
        "held": {keys[i]: {g: float(x[i, j]) for j, g in enumerate(vu.gpu_types) if x[i, j] > 0} for i in range(vu.n)},
        "lease_age": float(lease_age) if keep else 0.0,
        "apps": {keys[i]: [float(elapsed[i]), float(done[i])] for i in range(vu.n)},
    }
    return dataclasses.replace(alloc, warm=state)


def _classes(problem: Problem):
    for t in problem.tenants:
        for c in t.classes:
            yield t, c


POLICY = Policy(NAME, solve, guarantees=(),
                claim=("Themis: partial-allocation auctions among the apps with the worst finish-time fairness; one "
                       "auction is strategy-proof, Pareto-efficient and envy-free among its bidders (Thm 3.2), sharing "
                       "incentive only over rounds (Thm 3.3)"),
                options=("f", "lease_s"), warm=True)
