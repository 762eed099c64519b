#!/usr/bin/env python3
"""Every share policy against Slurm alone, side by side, in the simulator (issue "Never slower than Slurm alone").

Usage: python3 benchmarks/vs_slurm.py [--policies oef-coop,gavel,...] [--loads 0.3,0.6,0.9] [--jobs 160]
                                      [--gavel 23dbec,51b7ef] [--variants plain,preempt,upgrade]
                                      [--cluster k80=16,p100=16,v100=16] [--processes 2] [--json FILE]

Workloads (each simulated with the daemon's own round code, ``slurm_fair.sim.engine.simulate``):

* generated traces (``slurm-fair simulate --generate``'s generator: Poisson arrivals, Philly's GPU counts,
  exponential durations of mean 4 h on the slowest type, 6 accounts, the shipped Gavel job classes) at each
  offered load of ``--loads``. The offered load is the GPU-time the arrivals bring per second of arrivals,
  each job's time taken at its class's capacity-weighted mean speed over the GPU types (as if it ran on a
  GPU drawn in proportion to the cluster's types), divided by the GPUs: ``λ · E[g · work / r̄] / N``;
* the shared Gavel traces named by ``--gavel`` (Gavel's measured throughputs, one account per job, as in the
  validation against Gavel's simulator);
* with ``--philly N``, the first N jobs by arrival of all 15 shared Philly-derived traces, one account per trace
  file (jobs of tens to hundreds of hours: a few long jobs set the makespan).

For each workload: Slurm alone (``--dry-run``: the daemon computes but sets no limit, SiteFactor or type map)
and each policy in each variant (``plain``: guarantees, lending limits, SiteFactor and the type map;
``preempt``: plus reclaim preemption with the config's defaults, 120-s grace and a 600-s lease; ``upgrade``:
plus upgrade moves, 300-s upgrade cost; ``moves``: upgrade moves without reclaim, the recommended mode). A requeued job restarts 60 s later from its checkpoint. Printed: mean,
worst-trace and p95 JCT, makespan, utilization, max ρ, the rounds with envy / a sharing-incentive violation of
the placed GPUs, preemptions, as ratios to Slurm alone over the same traces; then the mean queue wait by job
size (1, 2, 4, 8 GPUs) under Slurm alone and the first policy named. ``--json`` writes every number.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_fair.cli.table import render  # noqa: E402
from slurm_fair.sim.cluster import cluster_spec  # noqa: E402
from slurm_fair.sim.engine import simulate  # noqa: E402
from slurm_fair.sim.traces import generate, read_gavel  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "gavel"
POLICIES = "oef-coop,oef-noncoop,gavel,gandiva-fair,max-throughput,equal-share,bud,themis,hadar"
VARIANTS = {"plain": {}, "preempt": {"preemption": True}, "upgrade": {"preemption": True, "upgrade": True},
            "moves": {"upgrade": True}}  # moves: upgrade moves of the checkpointing jobs, no reclaim
MEAN_DURATION = 4 * 3600.0
ACCOUNTS = 6


def offered_load(trace, nodes) -> float:
    """λ · E[g · work / r̄] / N of a trace on ``nodes`` (module docstring)."""
    cap: dict[str, int] = {}
    for g in nodes.values():
        for t, c in g.items():
            cap[t] = cap.get(t, 0) + c
    n = sum(cap.values())
    busy = 0.0
    for j in trace.jobs:
        thr = trace.throughput[j.cls]
        usable = {t: c for t, c in cap.items() if thr.get(t, 0) > 0}
        mean = sum(c * thr[t] for t, c in usable.items()) / sum(usable.values())
        busy += j.work / mean * j.gpus  # thr is the whole job's rate: its GPU-seconds = time x gpus
    subs = sorted(j.submit for j in trace.jobs)
    span = (subs[-1] - subs[0]) * len(subs) / max(len(subs) - 1, 1) if len(subs) > 1 else 1.0
    return busy / span / n


def generated(load: float, jobs: int, nodes, seed: int):
    """A generated trace whose offered load is ``load`` (the rate found by scaling a probe)."""
    probe = generate(seed=seed, jobs=jobs, accounts=ACCOUNTS, rate=10.0, mean_duration=MEAN_DURATION)
    rate = 10.0 * load / offered_load(probe, nodes)
    return generate(seed=seed, jobs=jobs, accounts=ACCOUNTS, rate=rate, mean_duration=MEAN_DURATION)


_TASKS: list = []  # filled before the pool forks (traces hold read-only mappings that do not pickle)


def _run(i: int):
    name, trace, nodes, policy, variant, round_s = _TASKS[i]
    opts = VARIANTS.get(variant, {})
    kw = {"preemption": bool(opts.get("preemption"))}
    if opts.get("upgrade"):
        kw["upgrade"] = True
    t0 = time.monotonic()
    if policy == "slurm":
        r = simulate(trace, nodes, "oef-coop", round_s=round_s, dry_run=True)
    else:
        r = simulate(trace, nodes, policy, round_s=round_s, **kw)
    f = (r.fairness or {}).get("real", {})
    return name, policy, variant, {
        "mean_jct": r.mean_jct, "p95_jct": r.p95_jct, "makespan": r.makespan, "utilization": r.utilization,
        "max_rho": r.max_rho, "finished": r.finished, "jobs": r.jobs, "preemptions": r.preemptions,
        "envy_rounds": f.get("rounds_with_envy"), "si_rounds": f.get("rounds_with_si_violation"),
        "rounds": r.rounds, "errors": r.round_errors[:3], "wall": time.monotonic() - t0,
        "wait_by_size": _wait_by_size(r),
    }


def _wait_by_size(r) -> dict[int, list[float]]:
    """Per job size: [sum of queue waits (first start − submit), jobs]."""
    acc: dict[int, list[float]] = {}
    for row in r.job_rows:
        if row.get("start") is not None:
            a = acc.setdefault(int(row["gpus"]), [0.0, 0])
            a[0] += row["start"] - row["submit"]
            a[1] += 1
    return dict(sorted(acc.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policies", default=POLICIES)
    ap.add_argument("--loads", default="0.3,0.6,0.9")
    ap.add_argument("--jobs", type=int, default=160)
    ap.add_argument("--seeds", type=int, default=3, help="generated traces per load (seeds 0..N-1)")
    ap.add_argument("--gavel", default="23dbec,51b7ef", help="shared Gavel trace ids ('' for none)")
    ap.add_argument("--philly", type=int, default=0, help="also the first N jobs of all shared traces (0: no)")
    ap.add_argument("--variants", default="plain,preempt")
    ap.add_argument("--cluster", default="k80=16,p100=16,v100=16")
    ap.add_argument("--round", type=float, default=300.0)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--json", metavar="FILE")
    a = ap.parse_args()
    nodes = cluster_spec(a.cluster)
    workloads = []
    for load in (float(x) for x in a.loads.split(",") if x.strip()):
        for seed in range(a.seeds):
            workloads.append((f"generated {load:.0%}#{seed}", generated(load, a.jobs, nodes, seed)))
    for tid in (x.strip() for x in a.gavel.split(",") if x.strip()):
        t = read_gavel([SHARED / "traces" / f"{tid}.trace"], SHARED / "physical_cluster_throughputs.json",
                       accounts="job", unmeasured="scale")
        workloads.append((f"gavel {tid}", t))
    if a.philly:
        t = read_gavel(sorted((SHARED / "traces").glob("*.trace")), SHARED / "physical_cluster_throughputs.json",
                       accounts="file", unmeasured="scale")
        jobs = tuple(sorted(t.jobs, key=lambda j: (j.submit, j.id))[: a.philly])
        workloads.append((f"philly first {a.philly}", dataclasses.replace(t, jobs=jobs)))
    policies = [p.strip() for p in a.policies.split(",") if p.strip()]
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    tasks = []
    for name, trace in workloads:
        tasks.append((name, trace, nodes, "slurm", "-", a.round))
        for p in policies:
            for v in variants:
                tasks.append((name, trace, nodes, p, v, a.round))
    _TASKS[:] = tasks
    t0 = time.monotonic()
    with mp.get_context("fork").Pool(a.processes) as pool:
        results = pool.map(_run, range(len(tasks)), chunksize=1)
    wall = time.monotonic() - t0
    base = {name: m for name, p, v, m in results if p == "slurm"}
    groups: dict[tuple[str, str, str], list[tuple[dict, dict]]] = {}
    for name, p, v, m in results:
        groups.setdefault((name.split("#")[0], p, v), []).append((m, base[name]))
    rows = []
    for (name, p, v), runs in groups.items():
        def tot(k, which):
            vals = [r[which][k] for r in runs if r[0].get(k) and r[1].get(k)]
            return sum(vals) if vals else None

        def ratio(k):
            a_, b_ = tot(k, 0), tot(k, 1)
            return f"{a_ / b_:.2f}" if a_ and b_ else "-"

        worst = max((m["mean_jct"] / b["mean_jct"] for m, b in runs if m["mean_jct"] and b["mean_jct"]), default=None)
        n = len(runs)
        mean = (lambda k: sum(m[k] for m, _b in runs if m[k] is not None) / n)
        rows.append([name, "Slurm alone" if p == "slurm" else p, v, n,
                     f"{mean('mean_jct'):.0f}", ratio("mean_jct"), "-" if worst is None else f"{worst:.2f}",
                     ratio("p95_jct"), ratio("makespan"), f"{mean('utilization'):.2f}", ratio("max_rho"),
                     sum(m["envy_rounds"] or 0 for m, _b in runs), sum(m["rounds"] for m, _b in runs),
                     sum(m["si_rounds"] or 0 for m, _b in runs), sum(m["preemptions"] for m, _b in runs),
                     f"{sum(m['finished'] for m, _b in runs)}/{sum(m['jobs'] for m, _b in runs)}",
                     "; ".join(e for m, _b in runs for e in m["errors"])[:40]])
    print(f"{a.cluster}, round {a.round:g} s, {len(tasks)} simulations in {wall:.0f} s; ratios are of sums over the "
          "traces of a workload (worst: the largest per-trace mean-JCT ratio)")
    print(render(["workload", "policy", "variant", "traces", "mean JCT s", "JCT/Slurm", "worst", "p95/Slurm",
                  "makespan/Slurm", "util", "max rho/Slurm", "envy rounds", "rounds", "SI rounds", "preempt", "done",
                  "errors"], rows))
    first = policies[0] if policies else None
    wait_rows = []
    for (name, p, v), runs in groups.items():
        if p not in ("slurm", first):
            continue
        sizes: dict[int, list[float]] = {}
        for m, _b in runs:
            for g, (wsum, n) in m["wait_by_size"].items():
                acc = sizes.setdefault(int(g), [0.0, 0])
                acc[0] += wsum
                acc[1] += n
        wait_rows.append([name, "Slurm alone" if p == "slurm" else p, v] +
                         [f"{sizes[g][0] / sizes[g][1]:.0f} ({sizes[g][1]})" if g in sizes and sizes[g][1] else "-"
                          for g in (1, 2, 4, 8)])
    print(f"\nmean queue wait, s (jobs), by job size: Slurm alone and {first}")
    print(render(["workload", "policy", "variant", "1 GPU", "2 GPUs", "4 GPUs", "8 GPUs"], wait_rows))
    if a.json:
        Path(a.json).write_text(json.dumps([{"workload": n, "policy": p, "variant": v, **m} for n, p, v, m in results],
                                           indent=1))


if __name__ == "__main__":
    main()
