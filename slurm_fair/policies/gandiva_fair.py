"""Gandiva_fair: equal share, then second-price trades of slow GPUs for fast GPUs (OEF §2.4 eq. 1;
Gandiva_fair EuroSys'20 §3.4 and §4 "Trading").

Start from the equal (weighted, demand-capped) share (``equal_share``). GPU types are ordered by their
mean normalized speed over the virtual users (slow to fast). For every (slow a, fast b) pair, with
r_l = w_l^b / w_l^a (user l's speedup of b over a):

* the *seller* is the user holding some of type a with the largest r (it gives a, gets b);
* the *buyer* is the user holding some of type b with the smallest r (it gives b, gets a);
* the price p (a-GPUs per b-GPU) is the second-highest bid: the largest r among the other holders of a
  (seller and buyer excluded); if there is none, the surplus is split equally, p = (r_buyer + r_seller)/2
  (the "2.5" of OEF eq. 1 and "2.9" of its lying example);
* the seller gives s a-GPUs for s/p b-GPUs, with s as large as both holdings (and the demands) allow.

Trades run while some pair has r_seller > r_buyer. Each trade raises both parties' throughput (p lies in
[r_buyer, r_seller]), so the outcome keeps sharing incentive; it is neither envy-free nor strategy-proof
(OEF Table 1), and the result depends on the trading order, as in Gandiva_fair itself. No LP is solved.

Caps: the equal share is capped (total demand and per-type caps, see ``equal_share``), and a trade never
takes a user above its demand nor above its cap on the type it receives (a trade that would is made
smaller, or skipped for that pairing). Guarantees under caps: no user exceeds its demand or a type cap;
every user's throughput is at least its capped equal share's; the equal share it starts from is
work-conserving and trades move GPUs between users without idling any.
"""

from __future__ import annotations

import math

import numpy as np

from .. import lp
from ..model import Allocation, Problem, VirtualUsers
from ._common import capped_note, clean, finish
from .equal_share import share_arrays
from .base import Policy

NAME = "gandiva-fair"
EPS = 1e-9
MAX_TRADES = 100_000  # a guard; every trade exhausts a holding or a demand, so real runs stop far earlier


def _price_of(r: np.ndarray, others: np.ndarray, seller: int, buyer: int) -> float:
    """Second price: the largest speedup among the other holders of the slow type (``others``, a mask),
    kept within [r_buyer, r_seller]; with no other holder the surplus is split, (r_s + r_b) / 2."""
    rs, rb = float(r[seller]), float(r[buyer])
    if others.any():
        return min(max(float(r[others].max()), rb), rs)
    return (rs + rb) / 2


def trade(vu: VirtualUsers, x: np.ndarray, log: list[str] | None = None) -> np.ndarray:
    """Run Gandiva_fair trades on allocation ``x`` (n, k); returns the traded allocation."""
    x = x.copy()
    speed = vu.speed
    used = speed > 0
    mean = np.array([speed[used[:, j], j].mean() if used[:, j].any() else 0.0 for j in range(vu.k)])
    order = sorted(range(vu.k), key=lambda j: (mean[j], j))
    pairs = [(order[p], order[q]) for p in range(vu.k) for q in range(p + 1, vu.k)]
    pairs.sort(key=lambda ab: (-(mean[ab[1]] / max(mean[ab[0]], EPS)), ab))  # widest speed gap first
    trades = 0
    progress = True
    while progress and trades < MAX_TRADES:
        progress = False
        for a, b in pairs:
            # the same rule as a per-trade scan over users, on boolean masks (ties: lowest index)
            both = (speed[:, a] > 0) & (speed[:, b] > 0)
            r = np.where(speed[:, a] > 0, speed[:, b] / np.where(speed[:, a] > 0, speed[:, a], 1), 0.0)
            free = np.ones(vu.n, dtype=bool)  # not blocked for this pair
            while trades < MAX_TRADES:
                holds_a = both & (x[:, a] > EPS)
                sellers = np.flatnonzero(holds_a & free)
                if sellers.size == 0:
                    break
                seller = int(sellers[np.argmax(r[sellers])])
                ok_b = both & (x[:, b] > EPS) & free
                ok_b[seller] = False
                buyers = np.flatnonzero(ok_b)
                if buyers.size == 0:
                    break
                buyer = int(buyers[np.argmin(r[buyers])])
                if r[seller] <= r[buyer] * (1 + 1e-9):
                    break
                others = holds_a.copy()
                others[[seller, buyer]] = False
                p = _price_of(r, others, seller, buyer)
                s = min(x[seller, a], x[buyer, b] * p)
                # GPU counts: seller changes by s/p - s, buyer by s - s/p; keep both within demand, and the
                # seller's b (s/p more) and the buyer's a (s more) within their per-type caps
                limit = {seller: math.inf, buyer: math.inf}
                for who, delta_per_s in ((seller, 1 / p - 1), (buyer, 1 - 1 / p)):
                    if delta_per_s > 0 and math.isfinite(vu.demand[who]):
                        limit[who] = min(limit[who], max(vu.demand[who] - x[who].sum(), 0.0) / delta_per_s)
                if math.isfinite(vu.type_cap[seller, b]):
                    limit[seller] = min(limit[seller], max(vu.type_cap[seller, b] - x[seller, b], 0.0) * p)
                if math.isfinite(vu.type_cap[buyer, a]):
                    limit[buyer] = min(limit[buyer], max(vu.type_cap[buyer, a] - x[buyer, a], 0.0))
                s = min(s, limit[seller], limit[buyer])
                if s <= EPS:
                    # this pairing cannot trade (a demand or a type cap is full): leave the limiting side out
                    free[buyer if limit[buyer] <= limit[seller] else seller] = False
                    continue
                x[seller, a] -= s
                x[seller, b] += s / p
                x[buyer, b] -= s / p
                x[buyer, a] += s
                trades += 1
                progress = True
                if log is not None:
                    log.append(
                        f"{vu.tenant[seller]}/{vu.cls[seller]} gives {s:.4g} {vu.gpu_types[a]} for {s / p:.4g} "
                        f"{vu.gpu_types[b]} of {vu.tenant[buyer]}/{vu.cls[buyer]} at price {p:.4g}"
                    )
    return x


def solve(problem: Problem, solver: str | None = None) -> Allocation:
    lp.pick_solver(solver)  # validated for a uniform interface; no LP is solved
    vu = problem.virtual_users()
    timer = lp.Timer()
    log: list[str] = []
    with timer.measure():
        x0, capped = share_arrays(vu)
        x = clean(trade(vu, x0, log), vu.speed, vu.capacity, vu.demand, vu.type_cap)
    notes = capped_note(vu, capped) + ((f"{len(log)} trade(s)",) if log else ())
    return finish(problem, NAME, x, timer, solver, notes, uses_lp=False)


POLICY = Policy(NAME, solve, guarantees=("sharing_incentive",),
                claim=("Gandiva_fair: the equal share, then second-price trades of slow GPUs for fast ones (Pareto "
                       "improvements); sharing incentive"),
                options=(), warm=False)
