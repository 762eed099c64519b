#!/usr/bin/env python3
"""What live realized fairness costs (``report``'s section and ``/metrics``' 24-hour series): a store holding a
day of hook records of generated jobs (submits spread over 25 h, waits exponential with a 30-minute mean, run
times exponential with a 2-hour mean, 1–8 GPUs on one of three types, five classes) and 288 dry-run rounds that
weighed the accounts, then ``daemon/metrics.py``'s ``read_inputs`` over the last 24 h, timed.

Usage: python3 benchmarks/realized_live.py [--sizes 10:2000,50:5000] [--seed 1]

Prints, per ACCOUNTS:JOBS, the seconds, the runs and backlog episodes the window held. The goal: well inside a
round's period (the exporter computes it at most every 10 minutes).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurm_fair.daemon import metrics as M  # noqa: E402
from slurm_fair.store import Store  # noqa: E402

TYPES = {"a100": 64, "v100": 96, "k80": 96}
NOW = 1_800_000_000.0


def fill(store: Store, n_accounts: int, n_jobs: int, rng: random.Random) -> None:
    accounts = [f"acct{i}" for i in range(n_accounts)]
    details = {"tenants": {a: a for a in accounts}, "weights": {a: float(1 + i % 3) for i, a in enumerate(accounts)},
               "capacity": TYPES}
    for k in range(288):
        rid = store.begin_round("oef-coop", "", now=NOW - 86400 + k * 300)
        store.finish_round(rid, "dry-run", details=details, finished=NOW - 86400 + k * 300 + 1)
    recs = []
    for j in range(n_jobs):
        a, g, n = rng.choice(accounts), rng.choice(list(TYPES)), rng.choice([1, 1, 2, 4, 8])
        sub = NOW - 90000 + rng.random() * 90000
        start = sub + rng.expovariate(1 / 1800)
        end = start + rng.expovariate(1 / 7200)
        for event, ctx, t in (("start", "prolog_slurmctld", start), ("end", "epilog_slurmctld", end)):
            if t <= NOW:
                recs.append({"job_id": j, "restart_count": 0, "event": event, "context": ctx, "node": "", "time": t,
                             "start_time": start, "end_time": end if event == "end" else None, "account": a,
                             "class": f"c{j % 5}", "gpus": {g: n}, "gpu_count": n, "gpu_info": "scontrol",
                             "submit_time": sub})
    store.upsert_job_records(recs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10:2000,50:5000", help="ACCOUNTS:JOBS,... (default %(default)s)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    print("ACCOUNTS  JOBS  SECONDS  RUNS  EPISODES")
    for size in args.sizes.split(","):
        n_acc, n_jobs = (int(x) for x in size.split(":"))
        with tempfile.TemporaryDirectory() as d, Store(Path(d) / "s.sqlite") as store:
            fill(store, n_acc, n_jobs, random.Random(args.seed))
            t = time.perf_counter()
            inp = M.read_inputs(store, now=NOW)
            el = time.perf_counter() - t
            live = inp.realized
            print(f"{n_acc:8d}  {n_jobs:4d}  {el:7.2f}  {len(live.live.runs) if live else 0:4d}  "
                  f"{len(live.realized.episodes) if live else 0:8d}")


if __name__ == "__main__":
    main()
