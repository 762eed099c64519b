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

Speed: each pair's users are sorted by r once; the trades of a pair are found with two cursors over the
holders (sellers from the largest r, buyers from the smallest), and the buyers that cannot buy are refused
in a batch (``_trade_pair``); the choices, their order and the arithmetic are those of the
one-trade-at-a-time scan over all users (``tests/policies/test_gandiva_batch.py`` keeps that scan and checks
equality on random instances). The passes over the pairs repeat until one makes no trade or raises the total
throughput by less than ``PASS_TOL`` (1e-9) of it: at 1 000 Philly tenants with binding demands trading to the
end takes 147 passes, the last ~90 moving 1e-4 to 1e-9 GPUs around triangles of types and the total by less
than 1e-8; the tolerance stops after ~63 passes (measured: total throughput 7e-9 relative below the end, 0.52 s
instead of 0.98 s of CPU at 1 000 tenants, 1.45 s instead of 3.54 s at 2 000). Every trade made still raises
both traders' throughput, so stopping early keeps sharing incentive; ``trade(..., tol=0)`` trades to the end.

Caps: the equal share is capped (total demand and per-type caps, see ``equal_share``), and a trade never
takes a user above its demand nor above its cap on the type it receives (a trade that would is made
smaller, or skipped for that pairing). Guarantees under caps: no user exceeds its demand or a type cap;
every user's throughput is at least its capped equal share's; the equal share it starts from is
work-conserving and trades move GPUs between users without idling any.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

from .. import lp
from ..model import Allocation, Problem, VirtualUsers
from .common import capped_note, clean, finish
from .equal_share import share_arrays
from .base import Policy

NAME = "gandiva-fair"
PASS_TOL = 1e-9  # stop when a pass over the type pairs raises total throughput by less than this fraction
EPS = 1e-9
MAX_TRADES = 100_000  # a guard; every trade exhausts a holding or a demand, so real runs stop far earlier


REL = 1e-9  # relative margin: a bid counts as strictly between the traders' speedups only beyond it


def second_price(bids, rs: float, rb: float) -> float:
    """Gandiva_fair §3.4: the trade's price (slow GPUs per fast GPU) is the second-highest bid, the largest
    speedup ``r`` among the other users wanting the fast type (``bids``: every user that runs on both types,
    sorted ascending) that lies strictly between the buyer's ``rb`` and the seller's ``rs``, so both traders
    gain; when no bid lies there ("if there is no such user"), the surplus is split equally, (rs + rb) / 2.
    The seller's and the buyer's own bids are never strictly between, so they exclude themselves."""
    i = bisect.bisect_left(bids, rs * (1 - REL)) - 1
    if i >= 0 and bids[i] > rb * (1 + REL):
        return float(bids[i])
    return (rs + rb) / 2


@dataclass(frozen=True)
class _Pair:
    """What a (slow a, fast b) pair's trades need that does not change while trading."""

    a: int
    b: int
    r: list  # (n,) r_l = speed_b / speed_a (0 where the user cannot run on a)
    bids: list  # r of every user running on both types, ascending
    sell: np.ndarray  # those users by largest r first (ties: lowest index)
    buy: np.ndarray  # those users by smallest r first (ties: lowest index)
    cap_a: list  # (n,) per-type caps on a and on b
    cap_b: list
    r_np: np.ndarray  # r, cap_a and the demands as arrays
    cap_a_np: np.ndarray
    dem_np: np.ndarray


def _pair(speed: np.ndarray, type_cap: np.ndarray, demand: np.ndarray, a: int, b: int) -> _Pair | None:
    both = (speed[:, a] > 0) & (speed[:, b] > 0)
    if both.sum() < 2:
        return None
    r = np.where(speed[:, a] > 0, speed[:, b] / np.where(speed[:, a] > 0, speed[:, a], 1), 0.0)
    members = np.flatnonzero(both)
    rl = r.tolist()
    sell = members[np.lexsort((members, -r[members]))]
    buy = members[np.lexsort((members, r[members]))]
    return _Pair(a, b, rl, sorted(r[members].tolist()), sell, buy, type_cap[:, a].tolist(),
                 type_cap[:, b].tolist(), r, type_cap[:, a].copy(), demand)


def _cannot_buy(x: np.ndarray, pr: _Pair, rowsum_np: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(full, tiny), (n,) bool each: the users that cannot buy a now — no room for a under their cap on a, or a
    full demand while any price gives them more GPUs (p > r >= 1) — and among them (``tiny``) those whose demand
    room is so small that even at p = r (the lowest price they could pay; the limit below only falls as p rises,
    IEEE operations being monotone) it allows at most EPS GPUs: refused whenever the seller has no cap of its own
    on b (then the buyer's limit is the smaller)."""
    full_np = (x[:, pr.a] >= pr.cap_a_np) | ((pr.r_np >= 1) & (rowsum_np >= pr.dem_np))
    with np.errstate(divide="ignore", invalid="ignore"):
        lim = np.maximum(pr.dem_np - rowsum_np, 0.0) / (1 - 1 / pr.r_np)
    tiny_np = (pr.r_np > 1) & (lim <= EPS) & ~full_np
    full_np |= tiny_np
    return full_np, tiny_np


def _top_seller(sl: list, ps: int, s_new: list, free: list, xa: list, rl: list) -> tuple[int, int]:
    """The next seller: the free holder of a with the largest r (ties: lowest index), from the static order
    ``sl`` (cursor ``ps``, moved past those that are no holders now) and the sorted newcomers ``s_new`` (their
    stale heads dropped in place). Returns (cursor, seller), seller -1 when there is none."""
    ns = len(sl)
    while ps < ns and not (free[sl[ps]] and xa[sl[ps]] > EPS):
        ps += 1
    while s_new and not (free[s_new[0][1]] and xa[s_new[0][1]] > EPS):
        del s_new[0]
    if ps == ns and not s_new:
        return ps, -1
    if s_new and (ps == ns or s_new[0] < (-rl[sl[ps]], sl[ps])):
        return ps, s_new[0][1]
    return ps, sl[ps]


def _cheapest_buyer(bl: list, pb: int, b_new: list, seller: int, free: list, xb: list, rl: list) -> tuple[int, int]:
    """The cheapest free holder of b other than ``seller``: from the static order ``bl`` (cursor ``pb``, moved
    past those that are no holders now) and the sorted newcomers ``b_new``. Returns (cursor, buyer), buyer -1
    when there is none."""
    nb = len(bl)
    while pb < nb and not (free[bl[pb]] and xb[bl[pb]] > EPS):
        pb += 1
    j = pb
    while j < nb:
        i = bl[j]
        if i != seller and free[i] and xb[i] > EPS:
            break
        j += 1
    buyer = bl[j] if j < nb else -1
    for key in b_new:
        i = key[1]
        if i != seller and free[i] and xb[i] > EPS:
            if buyer < 0 or key < (rl[buyer], buyer):
                buyer = i
            break
    return pb, buyer


def _amount(seller: int, buyer: int, rs: float, rb: float, bid: float, xa: list, xb: list, dem: list,
            rowsum: list, cap_a: list, cap_b: list) -> tuple[float, float, float, float]:
    """A trade's price p (second_price(bids, rs, rb)) and the a GPUs s the seller gives, within both sides'
    demands and per-type caps; returns (p, s, the seller's limit, the buyer's limit)."""
    isfinite = math.isfinite
    p = float(bid) if bid > rb * (1 + REL) else (rs + rb) / 2  # second_price(bids, rs, rb)
    s = min(xa[seller], xb[buyer] * p)
    # GPU counts: seller changes by s/p - s, buyer by s - s/p; keep both within demand, and the
    # seller's b (s/p more) and the buyer's a (s more) within their per-type caps
    lim_s = lim_b = math.inf
    d = 1 / p - 1
    if d > 0 and isfinite(dem[seller]):
        lim_s = min(lim_s, max(dem[seller] - rowsum[seller], 0.0) / d)
    d = 1 - 1 / p
    if d > 0 and isfinite(dem[buyer]):
        lim_b = min(lim_b, max(dem[buyer] - rowsum[buyer], 0.0) / d)
    if isfinite(cap_b[seller]):
        lim_s = min(lim_s, max(cap_b[seller] - xb[seller], 0.0) * p)
    if isfinite(cap_a[buyer]):
        lim_b = min(lim_b, max(cap_a[buyer] - xa[buyer], 0.0))
    return p, min(s, lim_s, lim_b), lim_s, lim_b


def _exchange(x: np.ndarray, xa: list, xb: list, rowsum: list, rowsum_np: np.ndarray, a: int, b: int, seller: int,
              buyer: int, s: float, q: float) -> None:
    """Make the trade in place: ``s`` GPUs of a from seller to buyer, ``q`` of b back (``x``, its column lists
    and the row sums kept equal)."""
    xa[seller] = x[seller, a] = xa[seller] - s
    xb[seller] = x[seller, b] = xb[seller] + q
    xb[buyer] = x[buyer, b] = xb[buyer] - q
    xa[buyer] = x[buyer, a] = xa[buyer] + s
    rowsum[seller] = rowsum_np[seller] = float(x[seller].sum())
    rowsum[buyer] = rowsum_np[buyer] = float(x[buyer].sum())


def _trade_pair(vu: VirtualUsers, x: np.ndarray, cols: list, pr: _Pair, rowsum: list, rowsum_np: np.ndarray,
                dem: list, budget: int, log: list[str] | None) -> int:
    """All trades of slow type a for fast type b (in place on ``x``, its columns as lists ``cols`` and
    ``rowsum`` / ``rowsum_np``, each row's ``x[i].sum()``); returns how many were made.

    The seller is the holder of a (not blocked for this pair) with the largest r (ties: lowest index), the
    buyer the other holder of b with the smallest r; each trade exhausts the seller's a, the buyer's b or a
    cap, so a pair makes at most about 2n trades. Instead of a scan of all users per trade, two cursors walk
    the users sorted by r (sellers from the largest, buyers from the smallest): a user before a cursor that
    is not a holder now never becomes one in this pair's run (a trade gives a to its buyer, whose r is below
    the seller's, and b to its seller, whose r is above the buyer's), so the cursors only move forward, and
    the choices, their order and the arithmetic are those of the scan (Python floats are IEEE doubles, as
    numpy's: the same operations in the same order give the same numbers)."""
    a, b, rl, bids = pr.a, pr.b, pr.r, pr.bids
    xa, xb = cols[a], cols[b]  # x's columns as lists, kept equal to x
    # the holders now, in the static orders; a user that becomes a holder during the run joins a short
    # sorted list of its own (a trade's buyer gains a, its seller gains b)
    sl = pr.sell[x[pr.sell, a] > EPS].tolist()
    # holders of b that cannot buy now: no room for a under their cap on a, or a full demand while any
    # price gives them more GPUs (p > r >= 1). Until they sell (and so change), each is refused the moment
    # it is the cheapest buyer left: they wait in their own list and are refused in a batch.
    cap_a = pr.cap_a
    full_np, tiny_np = _cannot_buy(x, pr, rowsum_np)
    holds = x[pr.buy, b] > EPS
    zb = full_np[pr.buy]
    bl = pr.buy[holds & ~zb].tolist()
    zl = pr.buy[holds & zb].tolist()
    full = full_np.tolist()
    tiny = tiny_np.tolist()
    nz = len(zl)
    zp = 0
    s_new: list[tuple[float, int]] = []  # (-r, index), sorted
    b_new: list[tuple[float, int]] = []  # (r, index), sorted
    free = [True] * vu.n
    cap_b = pr.cap_b
    ps = pb = 0
    made = 0
    while made < budget:
        ps, seller = _top_seller(sl, ps, s_new, free, xa, rl)
        if seller < 0:
            return made
        rs = rl[seller]
        if full[seller]:  # it may change now: from here on it is an ordinary holder of b
            full[seller] = tiny[seller] = False
            if xb[seller] > EPS:
                bisect.insort(b_new, (rs, seller))
        seller_capped = math.isfinite(cap_b[seller])
        # second_price's bid below the seller (the same for every buyer of this seller)
        k = bisect.bisect_left(bids, rs * (1 - REL)) - 1
        bid = bids[k] if k >= 0 else -math.inf
        # the buyers for this seller, cheapest first, until a trade or a block of the seller
        while True:
            pb, buyer = _cheapest_buyer(bl, pb, b_new, seller, free, xb, rl)
            # the waiting ones cheaper than this buyer come first: each ends the run or is refused
            while zp < nz:
                i = zl[zp]
                if buyer >= 0 and (rl[i], i) > (rl[buyer], buyer):
                    break
                if not full[i] or not free[i]:  # it sold (and is an ordinary holder now), or was left out
                    zp += 1
                    continue
                if rs <= rl[i] * (1 + 1e-9):
                    return made
                if tiny[i] and seller_capped:  # the full computation decides (and comes back here)
                    buyer = i
                    break
                free[i] = False
                zp += 1
            if buyer < 0:
                return made
            rb = rl[buyer]
            if rs <= rb * (1 + 1e-9):
                return made
            # a buyer with no room for a (its cap on a; its demand, as it gains GPUs when p > r_buyer >= 1)
            # cannot trade: the computation below gives s = 0 and leaves it out; this only skips the price
            if xa[buyer] >= cap_a[buyer] or (rb >= 1 and rowsum[buyer] >= dem[buyer]):
                free[buyer] = False
                continue
            p, s, lim_s, lim_b = _amount(seller, buyer, rs, rb, bid, xa, xb, dem, rowsum, cap_a, cap_b)
            if s <= EPS:
                # this pairing cannot trade (a demand or a type cap is full): leave the limiting side out
                if lim_b <= lim_s:
                    free[buyer] = False
                    continue
                free[seller] = False
                break
            q = s / p
            if xb[seller] <= EPS:
                bisect.insort(b_new, (rs, seller))
            if xa[buyer] <= EPS:
                bisect.insort(s_new, (-rb, buyer))
            _exchange(x, xa, xb, rowsum, rowsum_np, a, b, seller, buyer, s, q)
            made += 1
            if log is not None:
                log.append(
                    f"{vu.tenant[seller]}/{vu.cls[seller]} gives {s:.4g} {vu.gpu_types[a]} for {q:.4g} "
                    f"{vu.gpu_types[b]} of {vu.tenant[buyer]}/{vu.cls[buyer]} at price {p:.4g}"
                )
            break
    return made


def trade(vu: VirtualUsers, x: np.ndarray, log: list[str] | None = None, tol: float | None = None) -> np.ndarray:
    """Run Gandiva_fair trades on allocation ``x`` (n, k); returns the traded allocation. The passes stop when
    one raises the total throughput by less than ``tol`` (default :data:`PASS_TOL`) times the total; ``tol=0``
    trades until a pass makes no trade."""
    tol = PASS_TOL if tol is None else float(tol)
    x = x.copy()
    speed = vu.speed
    used = speed > 0
    mean = np.array([speed[used[:, j], j].mean() if used[:, j].any() else 0.0 for j in range(vu.k)])
    order = sorted(range(vu.k), key=lambda j: (mean[j], j))
    pairs = [(order[p], order[q]) for p in range(vu.k) for q in range(p + 1, vu.k)]
    pairs.sort(key=lambda ab: (-(mean[ab[1]] / max(mean[ab[0]], EPS)), ab))  # widest speed gap first
    prepared = [pr for pr in (_pair(speed, vu.type_cap, vu.demand, a, b) for a, b in pairs) if pr is not None]
    rowsum = [float(x[i].sum()) for i in range(vu.n)]
    rowsum_np = np.array(rowsum)
    cols = [x[:, j].tolist() for j in range(vu.k)]
    dem = vu.demand.tolist()
    trades = 0
    progress = True
    total = float((x * speed).sum())
    while progress and trades < MAX_TRADES:
        progress = False
        for pr in prepared:
            made = _trade_pair(vu, x, cols, pr, rowsum, rowsum_np, dem, MAX_TRADES - trades, log)
            trades += made
            progress = progress or made > 0
        before, total = total, float((x * speed).sum())
        if progress and total - before <= tol * total:
            break  # the pass's trades went round in circles of types, below the tolerance
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
