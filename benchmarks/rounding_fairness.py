#!/usr/bin/env python3
"""How long the rounding placer (one round) and the fairness checks take as the cluster grows.

Usage: python3 benchmarks/rounding_fairness.py [--repeat N]

Also: one round's envy and sharing-incentive violation counts (``daemon.plan.round_fairness``) at up to 2000
tenants x 10 types, on a random fractional allocation within random demands and its rounding.

Random ideal shares that fill every GPU type (what a policy hands the placer), min_gpus 1-4, deviations
carried from the previous round. The fairness checks run on a random feasible allocation (no policy needed);
the strategy-proofness probe is left out (its cost is one policy solve per false report). Prints a table;
the goal is that both stay negligible next to a scheduling round of minutes.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from slurm_fair import fairness  # noqa: E402
from slurm_fair.cli.table import render  # noqa: E402
from slurm_fair.model import Allocation, problem_from_dict  # noqa: E402
from slurm_fair.rounding import place  # noqa: E402


def ideal_for(rng: random.Random, n: int, k: int, per_type: int):
    types = [f"gpu{j}" for j in range(k)]
    cap = {g: per_type for g in types}
    tenants = [f"acct{i:04d}" for i in range(n)]
    ideal = {t: {} for t in tenants}
    for g in types:
        w = [rng.random() for _ in tenants]
        s = sum(w)
        for t, wi in zip(tenants, w):
            ideal[t][g] = per_type * wi / s
    mins = {t: rng.choice([1, 1, 2, 4]) for t in tenants}
    return ideal, cap, mins


def time_place(n: int, k: int, per_type: int, repeat: int) -> tuple[float, float]:
    rng = random.Random(n * 31 + k)
    ideal, cap, mins = ideal_for(rng, n, k, per_type)
    dev = place(ideal, cap, None, mins).deviations  # warm state
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        dev = place(ideal, cap, dev, mins).deviations
        times.append(time.perf_counter() - t0)
    return statistics.median(times), max(times)


def time_checks(n: int, k: int, repeat: int) -> dict[str, float]:
    rng = np.random.default_rng(n + k)
    types = [f"gpu{j}" for j in range(k)]
    base = np.sort(rng.uniform(1, 5, size=k))
    data = {
        "gpu_types": {g: 8 for g in types},
        "tenants": [
            {"name": f"acct{i:04d}", "classes": [{"name": "c", "throughput": {g: float(v) for g, v in zip(types, base * rng.uniform(0.8, 1.2, size=k))}}]}
            for i in range(n)
        ],
    }
    p = problem_from_dict(data)
    x = rng.dirichlet(np.ones(n), size=k).T * 8
    a = Allocation(p, "random", x)
    out = {}
    for name in ("sharing_incentive", "envy_free", "pareto_efficient", "equal_throughput", "adjacent_types"):
        f = getattr(fairness, name)
        f(a)  # warm up (the first PE call imports scipy's LP code)
        ts = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            f(a)
            ts.append(time.perf_counter() - t0)
        out[name] = statistics.median(ts)
    return out


def time_round_counts(n: int, k: int, repeat: int, policy: str | None = None) -> tuple[float, float, float]:
    """Median seconds of one round's violation counts (``plan.round_fairness``'s two parts): the ideal
    (a random fractional allocation filling every type, or ``policy``'s) and the real (its rounding to whole
    GPUs, split back on the classes)."""
    from slurm_fair.daemon.plan import Built, real_per_class

    rng = np.random.default_rng(7 * n + k)
    types = [f"gpu{j}" for j in range(k)]
    base = np.sort(rng.uniform(1, 5, size=k))
    per = 4 * n // k  # 4 GPUs per tenant, demands of 1-15: contended
    tenants = [{"name": f"acct{i:04d}", "classes": [{
        "name": "c", "demand": int(rng.integers(1, 16)),
        "throughput": {g: float(v) for g, v in zip(types, base * rng.uniform(0.8, 1.2, size=k))}}]} for i in range(n)]
    p = problem_from_dict({"gpu_types": {g: per for g in types}, "tenants": tenants})
    vu = p.virtual_users()
    x = np.minimum(rng.dirichlet(np.ones(n), size=k).T * per, vu.demand[:, None] / k)
    a = Allocation(p, "random", x)
    built = Built(p, {(t, "c"): (t, "c") for t in vu.tenant}, {t: t for t in vu.tenant}, {t: 1.0 for t in vu.tenant},
                  {}, {}, {g: per for g in types})
    if policy is not None:
        from slurm_fair.policies import solve

        x = solve(policy, p).x
        a = Allocation(p, policy, x)
    real = {t: {g: int(round(x[i, j])) for j, g in enumerate(types)} for i, t in enumerate(vu.tenant)}
    fairness.violations(vu, x)
    ideal, split, real_t = [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fairness.violations(vu, x)
        t1 = time.perf_counter()
        y = real_per_class(built, a, real)
        t2 = time.perf_counter()
        fairness.violations(vu, y)
        t3 = time.perf_counter()
        ideal.append(t1 - t0)
        split.append(t2 - t1)
        real_t.append(t3 - t2)
    return statistics.median(ideal), statistics.median(split), statistics.median(real_t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rows = []
    for n, k, per in [(10, 3, 16), (100, 4, 128), (500, 4, 512), (1000, 10, 256), (2000, 10, 1024)]:
        med, worst = time_place(n, k, per, args.repeat)
        rows.append([n, k, n * k, per * k, f"{med * 1e3:.2f}", f"{worst * 1e3:.2f}"])
    print("rounding: one place() call")
    print(render(["tenants", "types", "cells", "GPUs", "median ms", "max ms"], rows))
    print()
    rows = []
    for n, k in [(10, 3), (50, 4), (200, 10)]:
        t = time_checks(n, k, max(1, args.repeat // 2))
        rows.append([n, k] + [f"{t[c] * 1e3:.1f}" for c in t])
    print("fairness checks on a random allocation (median ms; envy-freeness is O(n^2))")
    print(render(["users", "types", "SI", "EF", "PE (LP)", "equal", "adjacent"], rows))
    print()
    rows = []
    for n, k, policy in [(100, 4, None), (1000, 10, None), (1000, 10, "equal-share"), (1000, 10, "max-throughput"),
                         (2000, 10, None)]:
        t = time_round_counts(n, k, args.repeat, policy)
        rows.append([n, k, policy or "random"] + [f"{v * 1e3:.1f}" for v in t] + [f"{sum(t) * 1e3:.1f}"])
    print("one round's envy/SI violation counts (median ms): ideal, real split on the classes, real, all")
    print(render(["tenants", "types", "allocation", "ideal", "split", "real", "total"], rows))


if __name__ == "__main__":
    main()
