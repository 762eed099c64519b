"""Helpers shared by the policies: LP variables over virtual users, demand caps, finishing an Allocation.

Every policy works on ``problem.virtual_users()``: one row per (tenant, job class) with the *normalized*
speed matrix (throughput relative to the class's slowest usable GPU type, "equivalent slowest GPUs"),
the virtual-user weight (tenant weight split equally over its classes, OEF §4.2.4), the demand (most GPUs
the class can use now, ``inf`` = unlimited) and the GPU capacity per type.

Demand caps (shared vocabulary, see each policy's module docstring for what it guarantees):

* Every virtual user has a total demand ``d_l`` and per-type caps ``c_l^j`` (``VirtualUsers.type_cap``,
  ``inf`` = uncapped, 0 on types it cannot use); every allocation obeys ``x_l^j <= c_l^j`` and
  ``Σ_j x_l^j <= d_l``. Together they are the user's *caps*.
* A virtual user is *capped* when its own caps, not the fairness rule, decide its share: in the LP
  policies, when it cannot rise with its caps in force but could without them; in the water-filling
  policies, when the policy's uncapped allocation would give it more than a cap allows.
* :func:`waterfill` is the generic water-filling used by the policies whose per-step program has no
  caps (cooperative OEF; the per-type weight share honours type caps itself): solve for the active users;
  freeze every active user whose allocation breaks one of its caps (more GPUs than its demand, or more of a
  type than its cap there) at its *usable part* of that allocation (:func:`best_gpus`: its own fastest GPUs
  of that solve, at most ``c_l^j`` per type and ``d_l`` in all), remove those GPUs from the capacity, and
  solve again for the others, until no active user breaks a cap. A class stopped by a per-type cap is
  frozen exactly like one stopped by its total demand. Then :func:`fill_idle` hands GPUs still idle to the
  users that can use them (below their caps), by weight.
  Guarantees: no user ever exceeds a cap; a user capped by its total demand gets exactly its demand; a user
  capped on a type gets the usable part of what the policy would have given it (which can be worth less
  to it than its weight share: it is compared with nobody), plus idle GPUs nobody uncapped can use; the
  uncapped users get the policy's own allocation of the GPUs left over, so the policy's properties hold
  *among the uncapped users with respect to the remaining capacity*.
"""

from __future__ import annotations

from typing import Callable, Sequence

import cvxpy as cp
import numpy as np

from ..lp import Timer, pick_solver
from ..model import Allocation, Problem, VirtualUsers

TOL = 1e-7  # GPUs; below this an LP value is noise


def allocation_variable(speed: np.ndarray, type_cap: np.ndarray | None = None) -> tuple[cp.Variable, list[cp.Constraint]]:
    """A non-negative (n, k) variable, pinned to 0 where the class cannot run (speed 0) and at most
    ``type_cap`` where that is finite (per-type demand)."""
    n, k = speed.shape
    x = cp.Variable((n, k), nonneg=True)
    cons: list[cp.Constraint] = []
    unusable = (speed <= 0).astype(float)
    if unusable.any():
        cons.append(cp.multiply(unusable, x) == 0)
    if type_cap is not None:
        capped = np.isfinite(type_cap) & (speed > 0)
        if capped.any():
            cons.append(cp.multiply(capped.astype(float), x) <= np.where(capped, type_cap, 0.0))
    return x, cons


def type_caps(speed: np.ndarray, type_cap: np.ndarray | None, free: int | None = None) -> np.ndarray | None:
    """``type_cap`` with row ``free`` uncapped (for "could it rise without its own caps?" tests)."""
    if type_cap is None or free is None:
        return type_cap
    out = np.array(type_cap, dtype=float)
    out[free] = np.where(speed[free] > 0, np.inf, 0.0)
    return out


def capacity_constraint(x: cp.Variable, capacity: np.ndarray) -> cp.Constraint:
    return cp.sum(x, axis=0) <= capacity


def throughput_expr(x: cp.Variable, speed: np.ndarray) -> cp.Expression:
    """(n,) normalized throughput of every row."""
    return cp.sum(cp.multiply(speed, x), axis=1)


def clean(x: np.ndarray | None, speed: np.ndarray, capacity: np.ndarray, demand: np.ndarray | None = None,
          type_cap: np.ndarray | None = None) -> np.ndarray:
    """Remove solver noise so that the result respects the constraints *exactly*.

    Values below TOL become 0, unusable cells 0, cells above their type cap are cut to it, and a column
    (row) whose sum exceeds the capacity (demand) by solver tolerance is scaled down onto it.
    """
    n, k = speed.shape
    if x is None:
        return np.zeros((n, k))
    x = np.array(x, dtype=float).reshape(n, k)
    x[(x < TOL) | (speed <= 0)] = 0.0
    if type_cap is not None:
        x = np.minimum(x, type_cap)
    col = x.sum(axis=0)
    over = col > capacity
    if over.any():
        x[:, over] *= capacity[over] / col[over]  # col > capacity >= 0 there
    if demand is not None:
        row = x.sum(axis=1)
        fin = np.isfinite(demand) & (row > demand)
        if fin.any():
            x[fin] *= (demand[fin] / row[fin])[:, None]
    return x


def best_gpus(speed_row: np.ndarray, x_row: np.ndarray, demand: float, type_cap: np.ndarray | None = None) -> np.ndarray:
    """The usable part of ``x_row``: the user's own fastest GPUs of it, at most ``type_cap`` per type and
    ``demand`` in all (greedy fastest first, which maximizes the user's throughput within those caps)."""
    out = np.zeros_like(x_row)
    left = float(demand)
    for j in sorted(range(len(x_row)), key=lambda j: (-speed_row[j], j)):
        if left <= 0:
            break
        have = float(x_row[j]) if type_cap is None else min(float(x_row[j]), float(type_cap[j]))
        take = min(have, left)
        out[j] = take
        left -= take
    return out


Step = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def waterfill(vu: VirtualUsers, step: Step, *, step_takes_type_caps: bool = False, fill: bool = True,
              trace: dict | None = None, step_takes_rows: bool = False) -> tuple[np.ndarray, list[int]]:
    """Caps by water-filling around ``step(speed, weight, capacity) -> x`` (see module docstring).

    Each round solves the step for the active users on the capacity left; every active user given more
    GPUs than its demand, or more of a type than its cap there, is frozen at the usable part of its step
    allocation (:func:`best_gpus`: fastest GPUs first, within its type caps and its demand) and those GPUs
    leave the capacity; when nobody breaks a cap, the active users keep their step allocation.

    ``step_takes_type_caps``: the step honours per-type caps itself and is called with a fourth argument,
    the active users' ``type_cap`` rows (then only the total demand freezes a user). ``step_takes_rows``: the
    step also gets ``rows=`` (the active users' indices in ``vu``; a warm-started step maps its seed with
    them). ``fill``: hand idle
    GPUs to users below their caps at the end (:func:`fill_idle`). ``trace`` (a dict, for tests) receives
    the last round: ``active`` rows, their ``speed`` rows, ``weight``, the ``capacity`` left and the step's
    ``x``. Returns the (n, k) allocation and the indices of the capped virtual users (demand 0 included).
    """
    x = np.zeros((vu.n, vu.k))
    capped = [i for i in range(vu.n) if vu.demand[i] <= TOL]
    active = [i for i in range(vu.n) if vu.demand[i] > TOL]
    cap = vu.capacity.astype(float).copy()
    while active:
        extra = {"rows": np.array(active)} if step_takes_rows else {}
        if step_takes_type_caps:
            xa = step(vu.speed[active], vu.weight[active], cap, vu.type_cap[active], **extra)
        else:
            xa = step(vu.speed[active], vu.weight[active], cap, **extra)
        over = [pos for pos, i in enumerate(active)
                if xa[pos].sum() > vu.demand[i] + 1e-6 or (xa[pos] > vu.type_cap[i] + 1e-6).any()]
        if not over:
            x[active] = xa
            if trace is not None:
                trace.update(active=list(active), speed=vu.speed[active].copy(), weight=vu.weight[active].copy(),
                             capacity=cap.copy(), x=np.array(xa))
            break
        for pos in over:
            i = active[pos]
            x[i] = best_gpus(vu.speed[i], xa[pos], vu.demand[i], vu.type_cap[i])
            cap = np.maximum(cap - x[i], 0.0)
        capped.extend(active[pos] for pos in over)
        active = [i for pos, i in enumerate(active) if pos not in set(over)]
    if fill:
        x = fill_idle(vu, x)
    return x, sorted(capped)


def room(vu: VirtualUsers, x: np.ndarray) -> np.ndarray:
    """(n, k) GPUs each user could still take of each type: below its type cap and its total demand."""
    left = np.maximum(vu.demand - x.sum(axis=1), 0.0)
    per_type = np.where(vu.speed > 0, np.maximum(vu.type_cap - x, 0.0), 0.0)
    return np.minimum(per_type, left[:, None])


def fill_idle(vu: VirtualUsers, x: np.ndarray) -> np.ndarray:
    """Work conservation: GPUs of a type left idle go to the users that can use that type and are below
    their caps, by weight (water-filling: a user whose room runs out takes all of it, the rest is split
    again among the others). Types go fastest first (mean normalized speed of the users able to use them),
    and a user's room under its total demand is re-read after every type. Adds only: nobody loses anything.
    """
    x = np.array(x, dtype=float)
    usable = vu.speed > 0
    mean = np.array([vu.speed[usable[:, j], j].mean() if usable[:, j].any() else 0.0 for j in range(vu.k)])
    for j in sorted(range(vu.k), key=lambda j: (-mean[j], j)):
        idle = float(vu.capacity[j] - x[:, j].sum())
        while idle > 1e-9:
            r = room(vu, x)[:, j]
            who = np.flatnonzero(r > 1e-9)
            if who.size == 0:
                break
            w = vu.weight[who]
            share = idle * w / w.sum()
            give = np.minimum(share, r[who])
            x[who, j] += give
            idle -= float(give.sum())
            if np.all(give < r[who] - 1e-12):
                break  # nobody ran out of room: the whole idle amount was handed out
    return x


def upgrade_idle(vu: VirtualUsers, x: np.ndarray, users) -> np.ndarray:
    """Move ``users`` (capped ones: their own caps decide their share) from slower GPUs they hold to faster
    GPUs nobody holds, within their per-type caps: a Pareto improvement (the mover gains, the GPUs were
    idle, its total stays the same). Per user (in order), its slowest held type first to its fastest type
    with idle GPUs. The slower GPUs it frees become idle (``fill_idle`` can hand them out next)."""
    x = np.array(x, dtype=float)
    idle = vu.capacity - x.sum(axis=0)
    for i in users:
        s = vu.speed[i]
        fast = [k for k in np.argsort(-s, kind="stable") if s[k] > 0]
        for j in reversed(fast):  # slowest held type first
            for k in fast:
                if s[k] <= s[j] or x[i, j] <= 1e-12:
                    break
                m = min(x[i, j], idle[k], vu.type_cap[i, k] - x[i, k])
                if m > 1e-12:
                    x[i, j] -= m
                    x[i, k] += m
                    idle[k] -= m
                    idle[j] += m
    return x


def at_caps(vu: VirtualUsers, x: np.ndarray, tol: float = 1e-6) -> list[int]:
    """Users whose allocation ``x`` reaches their total demand or one of their finite per-type caps."""
    out = []
    for i in range(vu.n):
        fin = np.isfinite(vu.type_cap[i]) & (vu.speed[i] > 0)
        if (np.isfinite(vu.demand[i]) and x[i].sum() >= vu.demand[i] - tol) or (x[i][fin] >= vu.type_cap[i][fin] - tol).any():
            out.append(i)
    return out


def capped_note(vu: VirtualUsers, capped: Sequence[int]) -> tuple[str, ...]:
    """Allocation.notes entry naming the virtual users whose demand capped them (empty if none)."""
    if not capped:
        return ()
    def caps(i: int) -> str:
        typed = [f"{g}<={vu.type_cap[i, j]:g}" for j, g in enumerate(vu.gpu_types) if vu.speed[i, j] > 0 and np.isfinite(vu.type_cap[i, j])]
        return f"demand {vu.demand[i]:g}" + (f"; {' '.join(typed)}" if typed else "")

    names = ", ".join(f"{vu.tenant[i]}/{vu.cls[i]} ({caps(i)})" for i in capped)
    return (f"demand capped {len(capped)} class(es): {names}",)


def finish(
    problem: Problem,
    policy: str,
    x: np.ndarray,
    timer: Timer,
    solver: str | None,
    notes: Sequence[str] = (),
    uses_lp: bool = True,
) -> Allocation:
    return Allocation(
        problem=problem,
        policy=policy,
        x=x,
        solve_seconds=timer.seconds,
        solver=pick_solver(solver) if uses_lp else "",
        notes=tuple(notes),
    )
