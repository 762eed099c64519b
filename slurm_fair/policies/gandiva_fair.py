"""Gandiva_fair: equal share, then second-price trades of slow GPUs for fast GPUs (OEF §2.4 eq. 1;
Gandiva_fair EuroSys'20 §3.4 and §4 "Trading").

Start from the equal (weighted, demand-capped) share (``equal_share``). GPU types are ordered by their
mean normalized speed over the virtual users (slow to fast). For every (slow a, fast b) pair, with
r_l = w_l^b / w_l^a (user l's speedup of b over a):

* the *seller* is the user holding some of type a with the largest r (it gives a, gets b);
* the *buyer* is the user holding some of type b with the smallest r (it gives b, gets a);
* the price p (a-GPUs per b-GPU) is the second-highest bid (Gandiva_fair §3.4: "the speedup of user B; if
  there is no such user, we simply split the surplus equally"): the largest r among all the *other* users
  wanting the fast type (every user that runs on both types, whatever it holds) that lies strictly between
  r_buyer and r_seller; if none does, the surplus is split equally, p = (r_buyer + r_seller)/2 (the "2.5" of
  OEF eq. 1 and "2.9" of its lying example). A bid at or above r_seller (a user who would outbid the seller
  but holds no a, or is at a cap) or at or below r_buyer is not a price both traders gain at, so it is
  passed over;
* the seller gives s a-GPUs for s/p b-GPUs, with s as large as both holdings (and the demands) allow.

Trades run while some pair has r_seller > r_buyer. Each trade strictly raises both parties' throughput (p
lies strictly inside (r_buyer, r_seller)), so the outcome keeps sharing incentive; it is neither envy-free
nor strategy-proof (OEF Table 1), and the result depends on the trading order, as in Gandiva_fair itself. No
LP is solved.

Speed: the trades of a pair are found with two heaps (holders of a by largest r, holders of b by smallest
r), O(log n) per trade; the choices, their order and the arithmetic are those of the one-trade-at-a-time
scan over all users (``tests/test_gandiva_batch.py`` keeps that scan and checks equality on random
instances).

Caps: the equal share is capped (total demand and per-type caps, see ``equal_share``), and a trade never
takes a user above its demand nor above its cap on the type it receives (a trade that would is made
smaller, or skipped for that pairing). Guarantees under caps: no user exceeds its demand or a type cap;
every user's throughput is at least its capped equal share's; the equal share it starts from is
work-conserving and trades move GPUs between users without idling any.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from .. import lp
from ..model import Allocation, Problem, VirtualUsers
from ._common import capped_note, clean, finish
from .equal_share import share_arrays

NAME = "gandiva-fair"
EPS = 1e-9
MAX_TRADES = 100_000  # a guard; every trade exhausts a holding or a demand, so real runs stop far earlier


REL = 1e-9  # relative margin: a bid counts as strictly between the traders' speedups only beyond it


def second_price(bids: np.ndarray, rs: float, rb: float) -> float:
    """Gandiva_fair §3.4: the trade's price (slow GPUs per fast GPU) is the second-highest bid, the largest
    speedup ``r`` among the other users wanting the fast type (``bids``: every user that runs on both types,
    sorted ascending) that lies strictly between the buyer's ``rb`` and the seller's ``rs``, so both traders
    gain; when no bid lies there ("if there is no such user"), the surplus is split equally, (rs + rb) / 2.
    The seller's and the buyer's own bids are never strictly between, so they exclude themselves."""
    i = int(np.searchsorted(bids, rs * (1 - REL), side="left")) - 1
    if i >= 0 and bids[i] > rb * (1 + REL):
        return float(bids[i])
    return (rs + rb) / 2


def _trade_pair(vu: VirtualUsers, x: np.ndarray, a: int, b: int, budget: int, log: list[str] | None) -> int:
    """All trades of slow type ``a`` for fast type ``b`` (in place on ``x``); returns how many were made.

    The seller is the holder of a (not blocked for this pair) with the largest r (ties: lowest index), the
    buyer the other holder of b with the smallest r; each trade exhausts the seller's a, the buyer's b or a
    cap, so a pair makes at most about 2n trades. The holders are kept in two heaps keyed by (∓r, index),
    with stale entries dropped when they reach the top: each trade costs O(log n) instead of a scan of all
    users, with the same choices and the same arithmetic as the scan."""
    speed = vu.speed
    both = (speed[:, a] > 0) & (speed[:, b] > 0)
    if both.sum() < 2:
        return 0
    r = np.where(speed[:, a] > 0, speed[:, b] / np.where(speed[:, a] > 0, speed[:, a], 1), 0.0)
    bids = np.sort(r[both])
    rl = r.tolist()
    xa = x[:, a]
    xb = x[:, b]
    members = np.flatnonzero(both)
    sellers = [(-rl[i], i) for i in members[xa[members] > EPS].tolist()]
    buyers = [(rl[i], i) for i in members[xb[members] > EPS].tolist()]
    heapq.heapify(sellers)
    heapq.heapify(buyers)
    free = np.ones(vu.n, dtype=bool)
    demand, type_cap = vu.demand, vu.type_cap
    made = 0

    def top(heap, col):
        while heap and not (free[heap[0][1]] and col[heap[0][1]] > EPS):
            heapq.heappop(heap)
        return heap[0][1] if heap else -1

    while made < budget:
        seller = top(sellers, xa)
        if seller < 0:
            break
        buyer = top(buyers, xb)
        if buyer == seller:  # the best buyer but one
            held = heapq.heappop(buyers)
            buyer = top(buyers, xb)
            heapq.heappush(buyers, held)
        if buyer < 0:
            break
        rs, rb = rl[seller], rl[buyer]
        if rs <= rb * (1 + 1e-9):
            break
        p = second_price(bids, rs, rb)
        s = min(float(xa[seller]), float(xb[buyer]) * p)
        # GPU counts: seller changes by s/p - s, buyer by s - s/p; keep both within demand, and the seller's
        # b (s/p more) and the buyer's a (s more) within their per-type caps
        lim_s = lim_b = math.inf
        for who, delta_per_s in ((seller, 1 / p - 1), (buyer, 1 - 1 / p)):
            if delta_per_s > 0 and math.isfinite(demand[who]):
                room = max(demand[who] - x[who].sum(), 0.0) / delta_per_s
                if who == seller:
                    lim_s = min(lim_s, room)
                else:
                    lim_b = min(lim_b, room)
        if math.isfinite(type_cap[seller, b]):
            lim_s = min(lim_s, max(type_cap[seller, b] - x[seller, b], 0.0) * p)
        if math.isfinite(type_cap[buyer, a]):
            lim_b = min(lim_b, max(type_cap[buyer, a] - x[buyer, a], 0.0))
        s = min(s, lim_s, lim_b)
        if s <= EPS:
            # this pairing cannot trade (a demand or a type cap is full): leave the limiting side out
            free[buyer if lim_b <= lim_s else seller] = False
            continue
        seller_had_b = xb[seller] > EPS
        buyer_had_a = xa[buyer] > EPS
        x[seller, a] -= s
        x[seller, b] += s / p
        x[buyer, b] -= s / p
        x[buyer, a] += s
        if not seller_had_b:
            heapq.heappush(buyers, (rs, seller))
        if not buyer_had_a:
            heapq.heappush(sellers, (-rb, buyer))
        made += 1
        if log is not None:
            log.append(
                f"{vu.tenant[seller]}/{vu.cls[seller]} gives {s:.4g} {vu.gpu_types[a]} for {s / p:.4g} "
                f"{vu.gpu_types[b]} of {vu.tenant[buyer]}/{vu.cls[buyer]} at price {p:.4g}"
            )
    return made


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
            made = _trade_pair(vu, x, a, b, MAX_TRADES - trades, log)
            trades += made
            progress = progress or made > 0
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
