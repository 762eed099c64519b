#!/usr/bin/env python3
"""How fast the simulator runs the daemon's rounds (issue 12's speed goal: a 1000-job trace with five policies
in ≤ 60 s).

Usage: python3 benchmarks/sim_speed.py [--jobs 1000] [--rates 30,120] [--policies oef-coop,oef-noncoop,gavel,...]

For each arrival rate: one seeded generated trace (``slurm-fair simulate --generate``'s generator: Philly-like
sizes, exponential durations of mean 3600 s on the slowest type, 8 accounts, the shipped Gavel classes) on
36 K80 + 36 P100 + 36 V100, 300-s rounds, each policy in turn in this process (cvxpy is imported before the
clock starts). Prints per rate and policy the rounds, the wall time, the milliseconds per round and the GPU
utilization (how loaded the cluster was), and the total over the policies against the goal.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_fair.cli.table import render  # noqa: E402
from slurm_fair.sim.cluster import cluster_spec  # noqa: E402
from slurm_fair.sim.engine import simulate  # noqa: E402
from slurm_fair.sim.synthetic_trace import generate  # noqa: E402

FIVE = "oef-coop,oef-noncoop,gavel,gandiva-fair,max-throughput"
GOAL_S = 60.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--rates", default="30,120", help="arrivals per hour, one run per rate")
    ap.add_argument("--policies", default=FIVE)
    ap.add_argument("--cluster", default="k80=36,p100=36,v100=36")
    a = ap.parse_args()
    nodes = cluster_spec(a.cluster)
    policies = [p.strip() for p in a.policies.split(",") if p.strip()]
    warm = generate(seed=1, jobs=3, accounts=2, rate=60.0, mean_duration=300.0)
    for p in policies:  # imports (cvxpy, the policy modules) before any clock
        simulate(warm, nodes, p)
    rows = []
    for rate in (float(r) for r in a.rates.split(",")):
        trace = generate(seed=0, jobs=a.jobs, accounts=8, rate=rate, mean_duration=3600.0)
        total = 0.0
        for p in policies:
            r = simulate(trace, nodes, p)
            total += r.wall_seconds
            rows.append([f"{rate:g}", p, r.rounds, f"{r.wall_seconds:.1f}", f"{1000 * r.wall_seconds / max(r.rounds, 1):.0f}",
                         f"{r.utilization:.0%}", f"{r.finished}/{r.jobs}"])
        rows.append([f"{rate:g}", f"all {len(policies)}", "", f"{total:.1f}", "", "",
                     "goal met" if total <= GOAL_S else f"goal ({GOAL_S:g} s) not met"])
    print(f"{a.jobs}-job generated traces on {a.cluster}, round 300 s")
    print(render(["jobs/h", "policy", "rounds", "wall s", "ms/round", "util", "done"], rows))


if __name__ == "__main__":
    main()
