#!/usr/bin/env python3
"""Every policy on the shared Gavel traces, simulated with the daemon's round code (issue 12, item 6).

Usage: python3 benchmarks/policies.py [--jobs 1000] [--cluster k80=36,p100=36,v100=36] [--round 300]
                                     [--policies gavel,gandiva-fair,oef-coop,...] [--traces DIR] [--accounts file]

The workload: the first ``--jobs`` jobs by arrival of the Philly-derived multi-tenant traces
(``/work/shared/data/gavel/traces/*.trace``, one tenant per file, Gavel's measured K80/P100/V100
throughputs; a job at a scale factor Gavel did not measure gets a smaller measured one's scaled linearly), on a
36 K80 + 36 P100 + 36 V100 cluster (nodes of 4 GPUs), one daemon round every 300 s, no
preemption. Prints one table: per policy the total normalized throughput (slowest-type GPUs, time average),
mean / p95 JCT, makespan, max finish-time fairness ρ, utilization, and the ratios the issue's goals name
(OEF coop throughput / gavel's ≥ 1.15; mean JCT / gavel's and / gandiva-fair's ≤ 0.83), with the wall time.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_fair.cli.table import render  # noqa: E402
from slurm_fair.sim.cluster import cluster_spec  # noqa: E402
from slurm_fair.sim.engine import simulate  # noqa: E402
from slurm_fair.sim.traces import read_gavel  # noqa: E402

SHARED = Path("/work/shared/data/gavel")
DEFAULT = "gavel,gandiva-fair,oef-noncoop,oef-coop,max-throughput,equal-share,bud,themis,hadar"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--cluster", default="k80=36,p100=36,v100=36")
    ap.add_argument("--round", type=float, default=300.0)
    ap.add_argument("--policies", default=DEFAULT)
    ap.add_argument("--traces", default=str(SHARED / "traces"))
    ap.add_argument("--throughputs", default=str(SHARED / "physical_cluster_throughputs.json"))
    ap.add_argument("--accounts", choices=("file", "job"), default="file")
    a = ap.parse_args()
    trace = read_gavel(sorted(Path(a.traces).glob("*.trace")), a.throughputs, accounts=a.accounts, unmeasured="scale")
    jobs = tuple(sorted(trace.jobs, key=lambda j: (j.submit, j.id))[: a.jobs])
    trace = dataclasses.replace(trace, jobs=jobs)
    nodes = cluster_spec(a.cluster)
    res = {}
    t0 = time.monotonic()
    for p in (n.strip() for n in a.policies.split(",") if n.strip()):
        res[p] = simulate(trace, nodes, p, round_s=a.round)
        print(f"{p}: {res[p].wall_seconds:.1f} s", file=sys.stderr, flush=True)
    wall = time.monotonic() - t0
    g = res.get("gavel")
    gf = res.get("gandiva-fair")
    rows = []
    for p, r in res.items():
        rows.append([p, f"{r.total_throughput:.1f}",
                     f"{r.total_throughput / g.total_throughput:.2f}" if g and g.total_throughput else "-",
                     f"{r.mean_jct / 3600:.2f}" if r.mean_jct else "-",
                     f"{r.mean_jct / g.mean_jct:.2f}" if g and g.mean_jct and r.mean_jct else "-",
                     f"{r.mean_jct / gf.mean_jct:.2f}" if gf and gf.mean_jct and r.mean_jct else "-",
                     f"{r.p95_jct / 3600:.2f}" if r.p95_jct else "-", f"{r.makespan / 3600:.1f}" if r.makespan else "-",
                     f"{r.max_rho:.1f}" if r.max_rho else "-", f"{r.utilization:.0%}", f"{r.finished}/{r.jobs}",
                     r.rounds, f"{r.wall_seconds:.1f}", len(r.round_errors)])
    print(f"{len(jobs)} jobs of {len(trace.accounts())} tenants on {a.cluster}, round {a.round:g} s; "
          f"all policies {wall:.1f} s wall")
    print(render(["policy", "throughput", "/ gavel", "mean JCT h", "JCT / gavel", "JCT / gandiva-fair", "p95 JCT h",
                  "makespan h", "max rho", "util", "done", "rounds", "wall s", "round errors"], rows))


if __name__ == "__main__":
    main()
