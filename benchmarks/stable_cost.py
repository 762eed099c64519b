#!/usr/bin/env python3
"""The cost of oef-coop's second stage (``[policy] stable``: of the optima, the one nearest to last round's).

Usage: python3 benchmarks/stable_cost.py [--n 100,300] [--k 10] [--seed 0] [--change 0.02] [--speeds random|gavel]

On ``philly.instance`` (n tenants, 1-2 classes, Philly-like demands), as the daemon's rounds see it: a first
solve, then the next round's problem (a fraction ``--change`` of tenants re-drawn, ``coop_warm``'s
``changed_philly``) solved warm from the first, with the second stage off and on; and the same problem again
(nothing changed). Columns: wall seconds, relative objective difference (on - off), L1 GPUs moved from the
previous allocation (off, on).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.coop_warm import changed_philly  # noqa: E402
from benchmarks.philly import instance  # noqa: E402
from slurm_fair.policies import oef_coop, stable  # noqa: E402


def moved(prev, alloc) -> float:
    p = stable.Previous.from_warm(prev.warm).array(alloc.vu)
    known = ~np.isnan(p).any(axis=1)
    return float(np.abs(alloc.x - np.nan_to_num(p))[known].sum())


def timed(f, *a, **kw):
    t = time.perf_counter()
    out = f(*a, **kw)
    return out, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="100,300")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--change", type=float, default=0.02)
    ap.add_argument("--speeds", default="random", help="random | gavel (Gavel's job types: classes share speed "
                    "rows, so the optimum is degenerate and the second stage has work to do)")
    a = ap.parse_args()
    print("n  case           off_s   on_s   rel_obj    moved_off  moved_on")
    for n in (int(v) for v in a.n.split(",")):
        p = instance(n, a.k, a.seed, speeds=a.speeds)
        first = oef_coop.solve(p)
        for case, q in (("same", p), ("changed", changed_philly(p, a.change, a.seed))):
            off, t_off = timed(oef_coop.solve, q, warm=first.warm, stable=False)
            on, t_on = timed(oef_coop.solve, q, warm=first.warm, stable=True)
            r = (on.total_throughput() - off.total_throughput()) / off.total_throughput()
            print(f"{n:<4} {case:<12} {t_off:6.2f} {t_on:6.2f} {r:10.2e} {moved(first, off):10.2f} {moved(first, on):9.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
