#!/usr/bin/env python3
"""How long the preemption decision (slurm_fair.daemon.preemption.decide.decide) takes as the cluster grows.

Usage: python3 benchmarks/preempt.py [--repeat N]

Random cluster: R running 1-GPU jobs spread over A accounts and 3 GPU types, P pending jobs (a quarter
untyped), limits that leave half of the accounts above their limit and half under it, and 100 open
preemptions (half of them past their grace). Every rule is evaluated (no early exit: cap = 10 000). Prints
a table (median of N runs); the goal is that it stays negligible next to a round (seconds).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurm_fair.cli.table import render  # noqa: E402
from slurm_fair.cluster.base import Job  # noqa: E402
from slurm_fair.config import PreemptionConfig  # noqa: E402
from slurm_fair.daemon.preemption.decide import Record, decide  # noqa: E402

TYPES = ("a100", "v100", "k80")
NOW = 1_000_000.0


def instance(rng: random.Random, n_accounts: int, n_running: int, n_pending: int):
    accounts = [f"acct{i:04d}" for i in range(n_accounts)]
    jobs, use = [], {a: {t: 0 for t in TYPES} for a in accounts}
    for i in range(n_running):
        a, t = rng.choice(accounts), rng.choice(TYPES)
        use[a][t] += 1
        jobs.append(Job(i + 1, "j", a, "u", "gpu", "RUNNING", "None", 1, 0, int(NOW - rng.uniform(0, 7200)), 1, 1, t,
                        {t: 1}, requeue=rng.random() > 0.1))
    for i in range(n_pending):
        a = rng.choice(accounts)
        t = None if rng.random() < 0.25 else rng.choice(TYPES)
        jobs.append(Job(n_running + i + 1, "p", a, "u", "gpu", "PENDING", "AssocGrpGRES", 1, 0, None, 1, 1, t))
    limits = {a: {t: max(use[a][t] + (rng.randint(1, 3) if k % 2 else -rng.randint(1, 3)), 0) for t in TYPES}
              for k, a in enumerate(accounts)}
    running = [j for j in jobs if j.running]
    hist = [Record(k + 1, j.job_id, j.account, j.gpu_type, 1, "signalled", NOW - (300 if k % 2 else 30),
                   NOW - (300 if k % 2 else 30) + 120) for k, j in enumerate(rng.sample(running, 100))]
    return limits, jobs, hist


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    cfg = PreemptionConfig(enabled=True, grace=120, min_runtime=600, max_jobs_per_round=10_000)
    rows = []
    for n_accounts, n_running, n_pending in ((20, 500, 500), (200, 5000, 5000), (1000, 20000, 20000)):
        limits, jobs, hist = instance(random.Random(0), n_accounts, n_running, n_pending)
        times, d = [], None
        for _ in range(args.repeat):
            t = time.perf_counter()
            d = decide(limits, jobs, hist, NOW, cfg)
            times.append(time.perf_counter() - t)
        counts = {k: len(d.of(k)) for k in ("signal", "requeue", "resolve", "gone")}
        rows.append([n_accounts, n_running, n_pending, f"{statistics.median(times) * 1000:.1f}", counts["signal"],
                     counts["requeue"], counts["resolve"], len(d.skipped)])
    print(render(["ACCOUNTS", "RUNNING", "PENDING", "DECIDE_MS", "SIGNALS", "REQUEUES", "RESOLVED", "SKIPPED"], rows))


if __name__ == "__main__":
    main()
