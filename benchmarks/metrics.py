#!/usr/bin/env python3
"""What the daemon's /metrics costs: the refresh after a round (read the store, compute the families) and one
scrape over HTTP, at growing numbers of accounts.

Usage: python3 benchmarks/metrics.py [--dir DIR] [--types N] [--repeat R]

Each size records one round the way the daemon does (placements per account and type; details with the
capacity, deviations, GPUs in use and pending GPUs), 20 preemptions per account, then times ``Exporter.refresh``
and ``GET /metrics`` (median of R). Prints a table; the goal is a refresh negligible next to a round and a
scrape well inside Prometheus' default 10 s timeout.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurm_fair.daemon.metrics import Exporter  # noqa: E402
from slurm_fair.store import Store  # noqa: E402
from slurm_fair.daemon.preemption.store import PreemptionStore  # noqa: E402


def record(store: Store, n_accounts: int, types: list[str]) -> None:
    accounts = [f"acct{i:04d}" for i in range(n_accounts)]
    rid = store.begin_round("oef-noncoop", "")
    details = {"capacity": {t: 8 * n_accounts for t in types}, "accounts": accounts,
               "deviations": {a: {t: 0.25 for t in types} for a in accounts},
               "in_use": {a: {t: 3 for t in types} for a in accounts}, "pending_gpus": {a: 5 for a in accounts},
               "ideal": {a: {t: 2.5 for t in types} for a in accounts}}
    with store.transaction():
        store.record_placements(rid, ({"account": a, "gpu_type": t, "ideal": 2.5, "deviation_before": 0.1,
                                       "real": 3, "limit": 3} for a in accounts for t in types))
        store.finish_round(rid, "ok", solve_seconds=1.0, n_accounts=n_accounts, details=details)
        for a in accounts:
            for j in range(20):
                PreemptionStore(store).add(job_id=j, account=a, gpu_type=types[j % len(types)], gpus=1, signal="USR1",
                                           reason="over", grace=120, round_id=rid)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None)
    ap.add_argument("--types", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    types = [f"gpu{i}" for i in range(args.types)]
    print("| accounts | GPU types | series | /metrics bytes | refresh (ms) | scrape (ms) |")
    print("|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        for n in (10, 100, 1000):
            store = Store(Path(d) / f"m{n}.sqlite")
            record(store, n, types)
            exp = Exporter()
            refresh = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                exp.refresh(store)
                refresh.append(time.perf_counter() - t0)
            port = exp.serve("127.0.0.1", 0)
            scrape = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as r:
                    body = r.read()
                scrape.append(time.perf_counter() - t0)
            exp.close()
            store.close()
            series = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
            print(f"| {n} | {len(types)} | {series} | {len(body)} | {statistics.median(refresh) * 1e3:.1f} | "
                  f"{statistics.median(scrape) * 1e3:.1f} |")


if __name__ == "__main__":
    main()
