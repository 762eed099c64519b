"""Hadar's admission (the policy in ``policies/hadar/``): the best schedule of one job at the schedule's prices (eq. 4) and
the primal-dual rule over the round's queue, with the price of every time slot a job holds its GPUs in.

Time slots. Slot 0 is this round; a job admitted now runs from slot 0 until it completes: on a placement
whose slowest type has normalized speed x it needs ρ_j / x rounds, so it holds its GPUs in the first
D = ⌈ρ_j / x⌉ slots (at least 1, at most the horizon's ⌈T⌉ slots: ρ_j / x <= t_j^max <= T). γ^r(t) counts the
type-r GPUs held in slot t by the jobs admitted so far this round, and k^r(t) = U_min (U_max^r/U_min)^(γ^r(t)/c^r)
is eq. 5 per slot. The paper's payoff (eq. 3a) charges the whole schedule:
φ_j(s) = U_j − Σ_{t in s} Σ_r k^r(t) w_j^r, with ``prefix[r, D]`` = Σ_{t<D} k^r(t) the price of one type-r GPU
held for the first D slots. Jobs admitted in the same round all start now, so γ^r(t) only falls with t and a
job that fits slot 0 fits every later slot of its schedule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

_TIE = 1e-12  # relative margin by which a payoff must exceed another (or 0) to count as larger


@dataclass(frozen=True)
class Job:
    """One job of the round's queue, or (``copies`` > 0) a class without listed jobs standing for ``copies``
    identical made-up 1-GPU jobs of ``remaining`` seconds (decided one by one, never materialized)."""

    row: int  # virtual user (tenant, class) it belongs to
    pos: int  # its index in its class's job list
    id: str
    gpus: int  # W_j
    remaining: float  # seconds of work on its class's slowest usable type
    arrival: float = math.inf  # its place in the arrival order (the Slurm job id when every id is a number)
    copies: int = 0  # > 0: a made-up class of this many 1-GPU jobs
    batch: int = 0  # made-up classes of the same batch are decided together, round-robin


@dataclass(frozen=True)
class Prices:
    """The price function's parameters (eq. 5–8) for one round."""

    u_min: float  # U_min (eq. 7), the same for every type
    u_max: np.ndarray  # (k,) U_max^r (eq. 6)
    eta: float  # η
    horizon: float  # T, in rounds
    alpha: float  # Theorem 2's α = max(1, max_r ln(U_max^r / U_min))

    @property
    def slots(self) -> int:
        """The time slots a schedule can span: ⌈T⌉ (at least 1)."""
        return max(1, int(math.ceil(self.horizon - 1e-9)))

    def price(self, gamma: np.ndarray, capacity: np.ndarray) -> np.ndarray:
        """Eq. 5: k^r = U_min (U_max^r / U_min)^(γ^r / c^r) per type (inf for a type without GPUs); ``gamma`` is
        (k,) for one slot or (k, slots)."""
        cap = capacity.reshape((-1,) + (1,) * (gamma.ndim - 1))
        ratio = (self.u_max / self.u_min).reshape(cap.shape)
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(cap > 0, gamma / np.where(cap > 0, cap, 1.0), np.inf)
            return np.where(cap > 0, self.u_min * ratio ** frac, np.inf)

    def prefix(self, gamma: np.ndarray, capacity: np.ndarray) -> np.ndarray:
        """(k, slots + 1): [r, D] = Σ_{t<D} k^r(t), the price of one type-r GPU held in the first D slots."""
        out = np.zeros((gamma.shape[0], gamma.shape[1] + 1))
        np.cumsum(self.price(gamma, capacity), axis=1, out=out[:, 1:])
        return out


@dataclass(frozen=True)
class Decision:
    job: Job
    gpus: tuple[int, ...] | None  # (k,) GPUs per type when admitted, None when turned away
    speed: float  # x_j(s*): the gang's speed (its slowest type's); 0 when turned away
    payoff: float  # μ_j = U_j(s*) − cost(s*); -inf when it did not fit
    reason: str  # "admitted", "no room" (does not fit the free GPUs within its class's caps), "priced out"
    count: int = 1  # identical jobs this decision stands for (the turned-away rest of a made-up class)


def duration(rho: float, x: float, slots: int) -> int:
    """Slots a job of ρ rounds of work holds its GPUs at speed x: ⌈ρ / x⌉, within [1, slots]."""
    return min(slots, max(1, int(math.ceil(rho / x - 1e-9))))


def find_schedule(width: int, speed: np.ndarray, avail: np.ndarray, rho: float,
                  prefix: np.ndarray) -> tuple[float, np.ndarray | None, float]:
    """Eq. 4 for one job of ``width`` GPUs and ``rho`` rounds of work: (μ, w (k,) GPUs per type, x) maximizing
    W·x(w) − Σ_r w_r·prefix[r, D(x(w))] over the placements with w <= ``avail`` (whole GPUs, 0 where the job
    cannot run), x(w) the slowest speed among the types used and D its duration (``duration``);
    (-inf, None, 0) when the job does not fit.

    Exact: for each candidate bottleneck θ (each distinct usable speed, fastest first) the cheapest W GPUs
    at the θ-schedule's per-GPU price prefix[r, D(θ)] among the types at least as fast (cheapest first; ties:
    the faster type, then the type order) cost the least of any placement whose slowest type is >= θ; their
    true payoff, at their own slowest speed x >= θ and its duration D(x) <= D(θ), is at least that, so the
    best true payoff over the θs is the optimum. A later θ replaces the kept one only when its payoff is
    larger by more than 1e-12 relative (ties keep the faster bottleneck)."""
    slots = prefix.shape[1] - 1
    if width == 1:
        return _find_one(speed, avail, rho, prefix)
    types = [r for r in range(len(speed)) if avail[r] >= 1 and speed[r] > 0]
    if sum(avail[r] for r in types) < width:
        return -math.inf, None, 0.0
    best, best_w, best_x = -math.inf, None, 0.0
    for theta in sorted({float(speed[r]) for r in types}, reverse=True):
        col = prefix[:, duration(rho, theta, slots)]
        left, w, x = width, [], math.inf
        for r in sorted((r for r in types if speed[r] >= theta), key=lambda r: (col[r], -speed[r], r)):
            take = int(min(avail[r], left))
            if take <= 0:
                continue
            w.append((r, take))
            x = min(x, float(speed[r]))
            left -= take
            if left == 0:
                break
        if left > 0:
            continue
        col = prefix[:, duration(rho, x, slots)]
        cost = 0.0
        for r, take in w:
            cost += take * float(col[r])
        phi = width * x - cost
        if best_w is None or phi > best + _TIE * max(1.0, abs(best)):
            best, best_w, best_x = phi, w, x
    assert best_w is not None  # the slowest θ allows every type, which fit
    out = np.zeros(len(speed))
    for r, take in best_w:
        out[r] = take
    return best, out, best_x


def _find_one(speed, avail, rho: float, prefix: np.ndarray, pre: list | None = None) -> tuple[float, np.ndarray | None, float]:
    """``find_schedule`` for a 1-GPU job: the type of largest S_r − prefix[r, D(S_r)] (ties within 1e-12
    relative: the faster type, then the type order); ``pre``: ``prefix`` as lists, when the caller keeps
    them."""
    slots = prefix.shape[1] - 1
    pre = prefix.tolist() if pre is None else pre
    cand = []
    for r in range(len(speed)):
        s = float(speed[r])
        if avail[r] >= 1 and s > 0:
            d = min(slots, max(1, int(math.ceil(rho / s - 1e-9))))
            cand.append((s - pre[r][d], s, r))
    if not cand:
        return -math.inf, None, 0.0
    best = max(c[0] for c in cand)
    floor = best - _TIE * max(1.0, abs(best))
    phi, s, r = max((c for c in cand if c[0] >= floor), key=lambda c: (c[1], -c[2]))
    out = np.zeros(len(speed))
    out[r] = 1
    return phi, out, s


def find_alloc(width: int, speed: np.ndarray, price: np.ndarray, avail: np.ndarray) -> tuple[float, np.ndarray | None, float]:
    """Eq. 4 for one job held for one slot at per-GPU prices ``price`` (k,): ``find_schedule`` with D = 1."""
    prefix = np.column_stack([np.zeros(len(price)), np.asarray(price, dtype=float)])
    return find_schedule(width, speed, avail, 0.0, prefix)


def admit(vu, jobs: list[Job], params: Prices | None, rho: dict[int, float],
          room: np.ndarray) -> tuple[np.ndarray, list[Decision], np.ndarray]:
    """The primal-dual rule over ``jobs`` in order (``rho``: each job's rounds of work by its index in
    ``jobs``; ``room``: (n, k) whole GPUs per class and type): (x (n, k) GPUs of the admitted jobs, the
    decisions, γ (k, slots) at the end). Listed jobs one by one; then the made-up classes (``copies`` > 0),
    batch by batch, their 1-GPU jobs round-robin inside a batch in the order of ``jobs`` (every class's
    first before any class's second), a class dropping out at its first refusal (its other jobs are identical, prices only rise and room
    only shrinks within a round, so they would be refused too)."""
    x = np.zeros((vu.n, vu.k))
    decisions: list[Decision] = []
    if params is None:
        for j in jobs:
            decisions.append(Decision(j, None, 0.0, -math.inf, "no room", max(1, j.copies)))
        return x, decisions, np.zeros((vu.k, 1))
    capacity = vu.capacity.astype(float)
    room = room.copy()
    demand_left = np.floor(vu.demand + 1e-9)  # whole GPUs the class's jobs may still take in all
    gamma = np.zeros((vu.k, params.slots))
    prefix = params.prefix(gamma, capacity)
    ratio = params.u_max / params.u_min
    turned_away: dict[tuple[int, int, float], tuple[str, float]] = {}

    # Python mirrors of what a 1-GPU job reads (same values as the arrays; lists are faster to index)
    speed_l = vu.speed.tolist()
    room_l = room.tolist()
    cap_l = capacity.tolist()
    held0 = [0.0] * vu.k  # γ^r(0)
    pre = prefix.tolist()

    def attempt(j: Job, r_j: float) -> Decision:
        if j.gpus > demand_left[j.row]:
            return Decision(j, None, 0.0, -math.inf, "no room")
        rm = room_l[j.row]
        avail = [min(cap_l[r] - held0[r], rm[r]) for r in range(vu.k)]
        if j.gpus == 1:
            mu, w, speed = _find_one(speed_l[j.row], avail, r_j, prefix, pre)
        else:
            mu, w, speed = find_schedule(j.gpus, vu.speed[j.row], np.array(avail), r_j, prefix)
        if w is None or not mu > _TIE * max(1.0, j.gpus * speed):
            return Decision(j, None, 0.0, mu, "no room" if w is None else "priced out")
        x[j.row] += w
        room[j.row] -= w
        demand_left[j.row] -= j.gpus
        d = duration(r_j, speed, params.slots)
        for r in np.flatnonzero(w).tolist():  # eq. 5 on the rows that changed (Prices.price's arithmetic)
            gamma[r, :d] += w[r]
            np.cumsum(params.u_min * ratio[r] ** (gamma[r] / capacity[r]), out=prefix[r, 1:])
            pre[r] = prefix[r].tolist()
            held0[r] = float(gamma[r, 0])
            rm[r] = float(room[j.row, r])
        return Decision(j, tuple(w.astype(int).tolist()), speed, mu, "admitted")

    made_up = []
    for i, j in enumerate(jobs):
        if j.copies > 0:
            made_up.append(i)
            continue
        key = (j.row, j.gpus, j.remaining)
        if key in turned_away:  # an identical job of the class was refused: so is this one
            reason, mu = turned_away[key]
            decisions.append(Decision(j, None, 0.0, mu, reason))
            continue
        d = attempt(j, rho[i])
        if d.gpus is None:
            turned_away[key] = (d.reason, d.payoff)
        decisions.append(d)
    # made-up classes, batch by batch (``queue``: equal remaining time and best speed), round-robin inside
    batches: dict[int, list[int]] = {}
    for i in made_up:
        batches.setdefault(jobs[i].batch, []).append(i)
    for batch in sorted(batches):
        active = batches[batch]
        pos = 0
        while active:
            keep = []
            for i in active:
                j = jobs[i]
                one = Job(j.row, pos, f"{j.id}#{pos}", 1, j.remaining, j.arrival)
                d = attempt(one, rho[i])
                if d.gpus is None:
                    decisions.append(Decision(one, None, 0.0, d.payoff, d.reason, j.copies - pos))
                    continue
                decisions.append(d)
                if pos + 1 < j.copies:
                    keep.append(i)
            active = keep
            pos += 1
    return x, decisions, gamma
