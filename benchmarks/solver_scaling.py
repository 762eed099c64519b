#!/usr/bin/env python3
"""Solve time of the OEF LPs as the number of virtual users grows: non-cooperative (eq. 9) and cooperative
(eq. 10) with the fast constraint-generation solver next to the plain cvxpy + ECOS form.

Usage: python3 benchmarks/solver_scaling.py [--n 10,100,500,1000,2000] [--k 3,10] [--plain-max-n 100]
                                           [--kind monotone|iid] [--seed 0]

Instances (fixed seeds): unweighted users, one class each; GPU types sorted slow -> fast and every job at
least as fast on a faster type (``monotone``: per-type speed-up ratios uniform in [1, 2.5), as in real
GPU generations), or unstructured speeds (``iid``). Capacity per type: uniform integers in [n/4, n) so the
cluster grows with the users. Times are wall seconds on this machine, solver import excluded, model build
included. "agree" is the relative difference of the cooperative optimum, fast vs plain ECOS (and vs one
sparse LP of all constraints in scipy/HiGHS). "—" = not run (too slow: the plain form is O(n²) rows).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.plain_coop import envy_violation, full_lp, plain  # noqa: E402
from slurm_fair.policies.oef_coop import fast as coop_fast  # noqa: E402

try:
    from slurm_fair.policies import oef_noncoop  # noqa: E402
except ImportError:  # written by another helper; the column is skipped without it
    oef_noncoop = None


def instance(n: int, k: int, seed: int, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, n, k])
    if kind == "monotone":
        r = rng.uniform(1.0, 2.5, (n, k))
        r[:, 0] = 1.0
        S = np.cumprod(r, axis=1)
    else:
        S = rng.uniform(1.0, 8.0, (n, k))
        S = S / S.min(axis=1, keepdims=True)
    c = rng.integers(max(1, n // 4), max(2, n), k).astype(float)
    return S, np.ones(n), c


def timed(f, *a, **kw):
    t = time.perf_counter()
    out = f(*a, **kw)
    return out, time.perf_counter() - t


def philly(tenants: list[int], k: int, seed: int) -> None:
    """oef-noncoop and gavel, default (live HiGHS filling) solver, cold, on Philly-like binding demands."""
    from benchmarks.philly import instance
    from slurm_fair.policies import gavel

    print("| tenants | classes | k | demands | oef-noncoop (s) | gavel (s) |")
    print("|---|---|---|---|---|---|")
    for n in tenants:
        for td in (False, True):
            p = instance(n, k, seed, type_demand=td)
            cells = []
            for pol in (oef_noncoop, gavel):
                t = time.perf_counter()
                try:
                    pol.solve(p)
                    cells.append(f"{time.perf_counter() - t:.2f}")
                except Exception as exc:  # reported, not hidden: the table says which failed and why
                    cells.append(f"error: {str(exc)[:80]}")
            print(f"| {n} | {p.virtual_users().n} | {k} | {'total + per-type' if td else 'total'} | {cells[0]} "
                  f"| {cells[1]} |", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default="10,100,500,1000,2000", help="numbers of virtual users, comma-separated")
    ap.add_argument("--k", default="3,10", help="numbers of GPU types, comma-separated")
    ap.add_argument("--plain-max-n", type=int, default=100, help="largest n for the plain forms (default 100)")
    ap.add_argument("--noncoop-max-n", type=int, default=2000, help="largest n for non-coop (default 2000)")
    ap.add_argument("--kind", choices=("monotone", "iid"), default="monotone")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--philly", default="", help="tenants, comma-separated: time oef-noncoop and gavel on "
                    "Philly-like binding demands (benchmarks/philly.py) instead, e.g. 100,1000,2000")
    a = ap.parse_args(argv)
    if a.philly:
        importlib.import_module("highspy")
        philly([int(v) for v in a.philly.split(",")], int(a.k.split(",")[-1]), a.seed)
        return 0
    ns = [int(v) for v in a.n.split(",")]
    ks = [int(v) for v in a.k.split(",")]
    for mod in ("cvxpy", "highspy"):  # import cost is not solve time
        importlib.import_module(mod)

    if oef_noncoop is None:
        print("note: slurm_fair.policies.oef_noncoop not present (not merged yet): non-coop column skipped\n")
    print(f"instances: {a.kind}, seed {a.seed}\n")
    print("| n | k | non-coop eq. 9 (s) | coop fast (s) | rounds | envy rows kept | coop plain ECOS (s) "
          "| full LP HiGHS (s) | speed-up vs ECOS | agree (rel. diff) | max envy |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for k in ks:
        for n in ns:
            S, w, c = instance(n, k, a.seed, a.kind)
            nc = "—"
            if oef_noncoop is not None and n <= a.noncoop_max_n:
                _, t_nc = timed(oef_noncoop.solve_arrays, S, w, c)
                nc = f"{t_nc:.2f}"
            (x, info), t_fast = timed(coop_fast.solve_with_info, S, w, c)
            v_fast = float(np.sum(S * x))
            pe, lp_t, speed, agree = "—", "—", "—", "—"
            if n <= a.plain_max_n:
                xp, t_p = timed(plain, S, w, c)
                xl, t_l = timed(full_lp, S, w, c)
                v_p, v_l = float(np.sum(S * xp)), float(np.sum(S * xl))
                pe, lp_t, speed = f"{t_p:.2f}", f"{t_l:.2f}", f"{t_p / t_fast:.0f}×"
                agree = f"{abs(v_fast - v_p) / v_p:.1e} / {abs(v_fast - v_l) / v_l:.1e}"
            viol = envy_violation(S, w, x)
            print(f"| {n} | {k} | {nc} | {t_fast:.2f} | {info.rounds} | {info.envy_rows} | {pe} | {lp_t} "
                  f"| {speed} | {agree} | {viol:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
