#!/usr/bin/env python3
"""How long every allocation policy takes, and how much throughput it gets, as the number of tenants grows.

Usage: python3 benchmarks/bench_policies.py [--tenants 10,50,100] [--policies oef-coop,...] [--solver ECOS]

Tenants draw 1-2 job classes from the measured Gavel throughputs (shared/data/gavel, physical cluster,
K80/P100/V100, single-GPU rows). The cluster has 2 K80, 1.5 P100 and 1 V100 per tenant. Each size runs
twice: without demands, and with a demand of 1-6 GPUs per class; ``--type-caps`` adds a third run where
every class also has per-type caps (``type_demand``: 0-4 GPUs of each type, as if its jobs requested some
types only). Prints one table: wall seconds of
``policies.solve`` (LP time included), total normalized throughput, and its share of max-throughput (eq. 4).
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_fair import policies  # noqa: E402
from slurm_fair.model import JobClass, Problem, Tenant  # noqa: E402

DATA = Path("/work/shared/data/gavel/physical_cluster_throughputs_isolated.csv")
TYPES = ("k80", "p100", "v100")


def job_types() -> list[tuple[str, dict[str, float]]]:
    here = ROOT / "shared" / "data" / "gavel" / DATA.name
    path = here if here.exists() else DATA
    out = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["scale_factor"] == "1":
                out.append((row["job_type"], {g: float(row[g]) for g in TYPES}))
    return out


def instance(n: int, demands: bool | str, seed: int = 7) -> Problem:
    rng = random.Random(seed * 1000 + n)
    jobs = job_types()
    tenants = []
    for i in range(n):
        classes = []
        for c, (name, thr) in enumerate(rng.sample(jobs, rng.choice([1, 1, 2]))):
            demand = float(rng.randint(1, 6)) if demands else None
            td = None
            if demands == "type caps":
                td = {g: float(rng.randint(0, 4)) for g in TYPES}
                if not any(td.values()):
                    td[rng.choice(TYPES)] = 1.0
            classes.append(JobClass(f"{name}#{c}", thr, demand, td))
        tenants.append(Tenant(f"acct{i:03d}", tuple(classes), float(rng.choice([1, 1, 2]))))
    caps = {"k80": 2 * n, "p100": (3 * n) // 2, "v100": n}
    return Problem(caps, tuple(tenants))


def table(header, rows) -> str:
    cells = [list(map(str, header))] + [[str(c) for c in r] for r in rows]
    width = [max(len(r[j]) for r in cells) for j in range(len(header))]
    lines = ["  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, width))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in width))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tenants", default="10,50,100")
    ap.add_argument("--policies", default=",".join(policies.names()))
    ap.add_argument("--solver", default=None)
    ap.add_argument("--type-caps", action="store_true", help="also run with per-type caps (type_demand) on every class")
    args = ap.parse_args()
    rows = []
    for n in [int(v) for v in args.tenants.split(",")]:
        for demands in (False, True) + (("type caps",) if args.type_caps else ()):
            p = instance(n, demands)
            vus = p.virtual_users().n
            best = policies.solve("max-throughput", p, args.solver).total_throughput()
            for name in args.policies.split(","):
                t0 = time.perf_counter()
                a = policies.solve(name, p, args.solver)
                wall = time.perf_counter() - t0
                capped = sum(1 for note in a.notes if note.startswith("demand capped"))
                rows.append([n, vus, demands if isinstance(demands, str) else ("yes" if demands else "no"), name, f"{wall:.3f}", f"{a.solve_seconds:.3f}",
                             f"{a.total_throughput():.1f}", f"{100 * a.total_throughput() / best:.1f}%",
                             "yes" if capped else ""])
                print(f"... {n} tenants, demands={demands}, {name}: {wall:.2f}s", file=sys.stderr, flush=True)
    print(table(["tenants", "classes", "demands", "policy", "wall s", "LP s", "throughput", "of max", "capped"], rows))


if __name__ == "__main__":
    main()
