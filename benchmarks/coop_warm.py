#!/usr/bin/env python3
"""oef-coop cold against warm (seeded with the previous solve's binding envy rows, as the daemon does from
round to round; issue 9 item 3).

Usage: python3 benchmarks/coop_warm.py [--n 100,1000] [--k 10] [--seed 0] [--change 0.02]

Two kinds of instance, k GPU types, fixed seeds:
- ``plain``: the solver alone (``coop_fast``), no demands — n unweighted users with monotone speed-ups
  (per type ratio uniform in [1, 2.5)), capacity per type uniform in [n/4, n) (``solver_scaling.instance``);
- ``philly``: the policy (``oef_coop.solve``, water-filling over binding demands) on ``philly.instance`` —
  n tenants with 1-2 classes, Philly-like demands of about twice the capacity.
Rows: ``cold`` (similarity seeding only); ``warm, same`` (the same problem seeded with its own binding rows:
a round where nothing changed); ``warm, changed`` (a fraction ``--change`` of users re-drawn: new speeds,
and for ``philly`` new demands, seeded with the old rows) next to the cold solve of that changed problem.
Columns: wall seconds, LP rounds (``plain``), binding rows kept, and the largest difference from the cold
optimum (objective, relative). Goals (issue 9): at 1000 x 10, <= 2 s cold and <= 1 s warm.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.philly import instance as philly_instance  # noqa: E402
from benchmarks.solver_scaling import instance as plain_instance  # noqa: E402
from slurm_fair.cli.table import render  # noqa: E402
from slurm_fair.policies import oef_coop  # noqa: E402
from slurm_fair.policies.oef_coop import fast as coop_fast  # noqa: E402


def changed_plain(S, frac, seed):
    rng = np.random.default_rng([seed, 99])
    n, k = S.shape
    ch = rng.choice(n, max(1, int(round(frac * n))), replace=False)
    r = rng.uniform(1.0, 2.5, (ch.size, k))
    r[:, 0] = 1.0
    S2 = S.copy()
    S2[ch] = np.cumprod(r, axis=1)
    return S2


def changed_philly(p, frac, seed):
    """The problem with a fraction of its tenants' classes re-drawn (speeds and demands) from another seed."""
    other = philly_instance(len(p.tenants), len(p.gpu_types), seed + 1000)
    rng = np.random.default_rng([seed, 98])
    ch = set(rng.choice(len(p.tenants), max(1, int(round(frac * len(p.tenants)))), replace=False).tolist())
    tenants = tuple(dataclasses.replace(other.tenants[i], name=t.name) if i in ch else t for i, t in enumerate(p.tenants))
    return dataclasses.replace(p, tenants=tenants)


def timed(f, *a, **kw):
    t = time.perf_counter()
    out = f(*a, **kw)
    return out, time.perf_counter() - t


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-300)


def plain_rows(n, k, seed, frac):
    S, w, c = plain_instance(n, k, seed, "monotone")
    (x0, i0), t0 = timed(coop_fast.solve_with_info, S, w, c)
    (x1, i1), t1 = timed(coop_fast.solve_with_info, S, w, c, seed=i0.binding)
    S2 = changed_plain(S, frac, seed)
    (x2, i2), t2 = timed(coop_fast.solve_with_info, S2, w, c)
    (x3, i3), t3 = timed(coop_fast.solve_with_info, S2, w, c, seed=i0.binding)
    tag = f"plain {n}x{k}"
    return [
        [tag, "cold", f"{t0:.2f}", i0.rounds, len(i0.binding), "-"],
        [tag, "warm, same", f"{t1:.2f}", i1.rounds, len(i1.binding), f"{rel(i1.objective, i0.objective):.1e}"],
        [tag, f"cold, {frac:.0%} changed", f"{t2:.2f}", i2.rounds, len(i2.binding), "-"],
        [tag, f"warm, {frac:.0%} changed", f"{t3:.2f}", i3.rounds, len(i3.binding), f"{rel(i3.objective, i2.objective):.1e}"],
    ]


def philly_rows(n, k, seed, frac):
    p = philly_instance(n, k, seed)
    a0, t0 = timed(oef_coop.solve, p)
    a1, t1 = timed(oef_coop.solve, p, warm=a0.warm)
    p2 = changed_philly(p, frac, seed)
    a2, t2 = timed(oef_coop.solve, p2)
    a3, t3 = timed(oef_coop.solve, p2, warm=a0.warm)

    def tot(a):
        return float(a.user_throughput().sum())

    tag = f"philly {n}x{k}"
    return [
        [tag, "cold", f"{t0:.2f}", "-", len(oef_coop._warm_pairs(a0.warm)), "-"],
        [tag, "warm, same", f"{t1:.2f}", "-", len(oef_coop._warm_pairs(a1.warm)), f"{rel(tot(a1), tot(a0)):.1e}"],
        [tag, f"cold, {frac:.0%} changed", f"{t2:.2f}", "-", len(oef_coop._warm_pairs(a2.warm)), "-"],
        [tag, f"warm, {frac:.0%} changed", f"{t3:.2f}", "-", len(oef_coop._warm_pairs(a3.warm)), f"{rel(tot(a3), tot(a2)):.1e}"],
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default="100,1000")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--change", type=float, default=0.02)
    ap.add_argument("--only", choices=("plain", "philly"), default=None)
    a = ap.parse_args()
    rows = []
    for n in (int(v) for v in a.n.split(",")):
        if a.only in (None, "plain"):
            rows += plain_rows(n, a.k, a.seed, a.change)
        if a.only in (None, "philly"):
            rows += philly_rows(n, a.k, a.seed, a.change)
    print(render(["instance", "solve", "seconds", "LP rounds", "binding rows", "vs cold optimum"], rows))


if __name__ == "__main__":
    main()
