#!/usr/bin/env python3
"""Policies against Slurm alone, side by side, in the simulator, seed by seed (issues 19 and 28).

Usage: python3 benchmarks/vs_slurm.py [--policies oef-coop,gavel,...] [--variants plain,preempt,moves]
                                      [--loads 0.3,0.6,0.9] [--seeds 5] [--jobs 160]
                                      [--gavel 23dbec,51b7ef,925e2b,795a4c,e13805:30]
                                      [--philly-windows 5] [--philly-jobs 60] [--philly-cluster k80=36,...]
                                      [--cluster k80=16,p100=16,v100=16] [--processes 2] [--json FILE]
                                      [--jobs-md FILE] [--from-json FILE] [--no-time-limits]

Workloads (each simulated with the daemon's own round code, ``slurm_fair.sim.engine.simulate``, on the simulated
Slurm — priority order, backfill with reservations from time limits):

* ``generated L%``: ``--seeds`` traces per offered load of ``--loads`` (``slurm-fair simulate --generate``'s
  generator: Poisson arrivals, Philly's GPU counts, exponential durations of mean 4 h on the slowest type, 6
  accounts, the shipped Gavel job classes). Offered load = the GPU-time the arrivals bring per second of arrivals,
  each job's time taken at its class's capacity-weighted mean speed over the GPU types, over the GPUs;
* ``gavel``: the shared Gavel traces named by ``--gavel`` (``ID`` whole, ``ID:N`` its first N jobs; Gavel's
  measured throughputs, one account per job, as in the validation against Gavel's simulator);
* ``philly windows``: ``--philly-windows`` windows of ``--philly-jobs`` consecutive jobs (by arrival) of all 15
  shared Philly-derived traces merged, one account per trace file, each window starting at a seeded random
  position (window k: seed k) — not only the first jobs (jobs of tens to hundreds of hours: a few long ones can
  decide a window, so every window is shown). They run on ``--philly-cluster`` (36 GPUs of each type, as Gavel
  simulates these traces: some jobs ask for 32 GPUs at once).

For each trace: Slurm alone (``--dry-run``: the daemon computes but sets no limit, SiteFactor or type map) and each
policy in each variant — ``plain``: guarantees, lending limits, SiteFactor and the type map, no preemption and no
moves; ``preempt``: plus reclaim preemption (the config's defaults); ``moves``: upgrade moves of the jobs that
checkpoint (the default ``preemption.upgrade = "checkpointing"``; every simulated job declares it checkpoints), no
reclaim — the recommended mode; ``upgrade``: reclaim and moves together. A requeued job restarts 60 s later from
its checkpoint.

Printed: (1) per workload, policy and variant: the traces, mean JCT as a ratio of sums to Slurm alone's, the worst
trace's ratio of mean JCT, makespan, p95 and max ρ (each with the trace that gave it), requeues per job, the share
of requeues that restarted on the type they were requeued from, guarantee flips with unchanged inputs, and whether
the issue's goals hold on every trace; (2) with ``--per-seed``, every trace's ratios; (3) per workload, for the
first policy and variant, the five jobs that lost most and the five that gained most against Slurm alone
(``--jobs-md`` writes them all, per trace). ``--json`` writes every number.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_fair.cli.table import render  # noqa: E402
from slurm_fair.sim.cluster import cluster_spec  # noqa: E402
from slurm_fair.sim.engine import simulate  # noqa: E402
from slurm_fair.sim.gavel_trace import read_gavel  # noqa: E402
from slurm_fair.sim.outcome import Ratios, extremes, goal_verdicts, job_deltas, ratio  # noqa: E402
from slurm_fair.sim.synthetic_trace import generate  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "gavel"
POLICIES = "oef-coop,oef-noncoop,gavel,gandiva-fair,max-throughput,equal-share,bud,themis,hadar"
# moves: upgrade moves of the jobs that checkpoint (every simulated job says it does), no reclaim — the
# recommended mode; upgrade: reclaim and moves together
VARIANTS = {"plain": {}, "preempt": {"preemption": True}, "moves": {"upgrade": True},
            "upgrade": {"preemption": True, "upgrade": True}}
MEAN_DURATION = 4 * 3600.0
ACCOUNTS = 6
# The goals (ratios to Slurm alone, on every trace): plain and preempt, and moves at 90 % load
GOALS = {"mean_jct": 1.00, "makespan": 1.02, "max_rho": 1.00}
GOALS_MOVES = {"moderate": {"mean_jct": 0.90, "max_rho": 0.5}, "high": {"mean_jct": 0.60, "max_rho": 0.5}}


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


def philly_windows(count: int, size: int):
    """``count`` windows of ``size`` consecutive jobs of the 15 Philly-derived traces merged (module docstring)."""
    t = read_gavel(sorted((SHARED / "traces").glob("*.trace")), SHARED / "physical_cluster_throughputs.json",
                   accounts="file", unmeasured="scale")
    jobs = sorted(t.jobs, key=lambda j: (j.submit, j.id))
    out = []
    for k in range(count):
        at = random.Random(k).randrange(0, max(1, len(jobs) - size))
        out.append((f"@{at}", dataclasses.replace(t, jobs=tuple(jobs[at:at + size]))))
    return out


def gavel_traces(spec: str):
    out = []
    for part in (x.strip() for x in spec.split(",") if x.strip()):
        tid, _, n = part.partition(":")
        t = read_gavel([SHARED / "traces" / f"{tid}.trace"], SHARED / "physical_cluster_throughputs.json",
                       accounts="job", unmeasured="scale")
        if n:
            t = dataclasses.replace(t, jobs=tuple(sorted(t.jobs, key=lambda j: (j.submit, j.id))[: int(n)]))
        out.append((part, t))
    return out


_TASKS: list = []  # filled before the pool forks (traces hold read-only mappings that do not pickle)


def _run(i: int):
    group, seed, trace, nodes, policy, variant, round_s = _TASKS[i]
    opts = VARIANTS.get(variant, {})
    t0 = time.monotonic()
    try:
        if policy == "slurm":
            r = simulate(trace, nodes, "oef-coop", round_s=round_s, dry_run=True)
        else:
            r = simulate(trace, nodes, policy, round_s=round_s, preemption=bool(opts.get("preemption")),
                         upgrade=bool(opts.get("upgrade")))
    except Exception as e:  # noqa: BLE001 - one failed simulation is reported, the others still run
        return group, seed, policy, variant, {"failed": f"{type(e).__name__}: {e}", "wall": time.monotonic() - t0}
    rs = r.restarts
    return group, seed, policy, variant, {
        "mean_jct": r.mean_jct, "p95_jct": r.p95_jct, "makespan": r.makespan, "utilization": r.utilization,
        "max_rho": r.max_rho, "finished": r.finished, "jobs": r.jobs, "preemptions": r.preemptions,
        "requeues": rs.requeues, "same_type": rs.same_type, "same_type_before_claimant": rs.same_type_before_claimant,
        "known_claimant": rs.known_claimant, "most_requeues_per_job": rs.most_per_job,
        "flips": r.flips, "rounds": r.rounds, "errors": r.round_errors[:3], "wall": time.monotonic() - t0,
        "job_rows": [{k: row.get(k) for k in ("id", "account", "class", "gpus", "submit", "start", "jct", "types",
                                                "restarts")} for row in r.job_rows],
    }


def _indexed(i: int):
    return i, _run(i)


def _fmt(x, digits=2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _goals_for(group: str, variant: str) -> dict[str, float]:
    if variant in ("moves", "upgrade"):
        return GOALS_MOVES["high" if group.startswith("generated 90") else "moderate"]
    return GOALS


def tables(results, policies, variants, per_seed: bool) -> tuple[str, list[dict]]:
    base = {(g, s): m for g, s, p, v, m in results if p == "slurm"}
    groups: dict[tuple[str, str, str], list[tuple[str, dict, dict]]] = {}
    for g, s, p, v, m in results:
        if p != "slurm":
            groups.setdefault((g, p, v), []).append((s, m, base[(g, s)]))
    rows, seed_rows, verdicts = [], [], []
    for (g, p, v), runs in groups.items():
        per = [Ratios(s, ratio(m["mean_jct"], b["mean_jct"]), ratio(m["makespan"], b["makespan"]),
                      ratio(m["p95_jct"], b["p95_jct"]), ratio(m["max_rho"], b["max_rho"])) for s, m, b in runs]
        sums = ratio(sum(m["mean_jct"] or 0 for _s, m, _b in runs) or None,
                     sum(b["mean_jct"] or 0 for _s, _m, b in runs) or None)
        goals = _goals_for(g, v)
        vs = goal_verdicts(per, goals)
        jobs = sum(m["jobs"] for _s, m, _b in runs)
        req = sum(m["requeues"] for _s, m, _b in runs)
        same = sum(m["same_type"] for _s, m, _b in runs)
        # the measure: restarts on the same type while the job the requeue was for had not started (a
        # same-type restart whose record names no such job — an upgrade move that came back — counts as one)
        wasted = sum(m.get("same_type_before_claimant", 0) + m["same_type"] - m.get("known_claimant", 0)
                     for _s, m, _b in runs)
        flips = [m["flips"] for _s, m, _b in runs if m.get("flips")]
        fl_n = sum(f.get("flips_same_problem", 0) for f in flips)  # the whole problem unchanged
        fl_d = sum(f.get("same_problem", 0) for f in flips)
        fa_n = sum(f.get("flips_same_account", 0) for f in flips)  # the account's own inputs unchanged
        fa_d = sum(f.get("same_account", 0) for f in flips)

        def worst(key):
            vals = [(getattr(r, key), r.seed) for r in per if getattr(r, key) is not None]
            return f"{max(vals)[0]:.3f} ({max(vals)[1]})" if vals else "-"

        extra_ok = True
        if v != "plain":
            extra_ok = (req / jobs <= 0.5 if jobs else True) and (wasted <= 0.1 * req if req else True)
        if fl_d:
            extra_ok = extra_ok and fl_n <= 0.05 * fl_d
        met = all(x.met for x in vs) and extra_ok
        rows.append([g, p, v, len(runs), _fmt(sums), worst("mean_jct"), worst("makespan"), worst("p95_jct"),
                     worst("max_rho"), f"{req / jobs:.2f}" if jobs else "-", f"{same}/{req} ({wasted})",
                     f"{fl_n}/{fl_d}" if flips else "-", f"{fa_n}/{fa_d}" if flips else "-",
                     "yes" if met else "no"])
        verdicts.append({"workload": g, "policy": p, "variant": v, "met": met, "ratio_of_sums": sums,
                         "per_seed": [dataclasses.asdict(r) for r in per],
                         "verdicts": [dataclasses.asdict(x) for x in vs], "requeues": req, "jobs": jobs,
                         "same_type": same, "same_type_wasted": wasted, "flips_same_problem": fl_n, "same_problem": fl_d,
                         "flips_same_account": fa_n, "same_account": fa_d})
        for r in per:
            seed_rows.append([g, p, v, r.seed, _fmt(r.mean_jct), _fmt(r.makespan), _fmt(r.p95_jct), _fmt(r.max_rho)])
    out = [render(["workload", "policy", "variant", "traces", "JCT/Slurm (sums)", "worst JCT/Slurm", "worst makespan",
                   "worst p95", "worst max rho", "requeues/job", "same-type restarts (before its job)", "flips (same problem)",
                   "flips (same own inputs)", "goals met"],
                  rows)]
    if per_seed:
        out.append("\nper trace (ratio to Slurm alone on the same trace)")
        out.append(render(["workload", "policy", "variant", "trace", "mean JCT", "makespan", "p95", "max rho"],
                          seed_rows))
    return "\n".join(out), verdicts


def job_tables(results, policy: str, variant: str) -> tuple[str, str]:
    """The five jobs that lost and gained most per workload (printed), and every trace's (markdown)."""
    base = {(g, s): m for g, s, p, v, m in results if p == "slurm"}
    printed, md = [], [f"# Jobs that lost and gained most: {policy} {variant} against Slurm alone\n"]
    by_group: dict[str, list] = {}
    for g, s, p, v, m in results:
        if p == policy and v == variant:
            ds = job_deltas(base[(g, s)]["job_rows"], m["job_rows"])
            by_group.setdefault(g, []).extend((s, d) for d in ds)
            lost, gained = extremes(ds)
            md.append(f"\n## {g} {s}\n")
            md.append("| job | account | class | GPUs | JCT Slurm alone s | JCT s | Δ s | types (Slurm → here) | restarts |")
            md.append("|---|---|---|---|---|---|---|---|---|")
            for d in lost + gained:
                md.append(f"| {d.job} | {d.account} | {d.cls} | {d.gpus} | {d.base_jct:.0f} | {d.jct:.0f} | "
                          f"{d.delta:+.0f} | {','.join(d.base_types)} → {','.join(d.types)} | {d.restarts} |")
    for g, items in by_group.items():
        known = [(s, d) for s, d in items if d.delta is not None]
        lost = sorted((x for x in known if x[1].delta > 0), key=lambda x: -x[1].delta)[:5]
        gained = sorted((x for x in known if x[1].delta < 0), key=lambda x: x[1].delta)[:5]
        rows = [[g, s, d.job, d.gpus, d.cls, f"{d.delta:+.0f}", f"{d.base_jct:.0f}",
                 f"{','.join(d.base_types)} → {','.join(d.types)}", d.restarts] for s, d in lost + gained]
        printed.append(render(["workload", "trace", "job", "GPUs", "class", "Δ JCT s", "Slurm alone JCT s",
                               "types", "restarts"], rows))
    head = f"\nthe five jobs that lost most, then the five that gained most, per workload ({policy} {variant})\n"
    return head + "\n\n".join(printed), "\n".join(md) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policies", default="oef-coop", help=f"comma list, or 'all' ({POLICIES})")
    ap.add_argument("--variants", default="plain,preempt,moves")
    ap.add_argument("--loads", default="0.3,0.6,0.9")
    ap.add_argument("--jobs", type=int, default=160)
    ap.add_argument("--seeds", type=int, default=5, help="generated traces per load (seeds 0..N-1)")
    ap.add_argument("--gavel", default="23dbec,51b7ef,925e2b,795a4c,e13805:30",
                    help="shared Gavel traces: ID or ID:FIRST_N ('' for none)")
    ap.add_argument("--philly-windows", type=int, default=5, help="random windows of the Philly traces (0: none)")
    ap.add_argument("--philly-jobs", type=int, default=60)
    ap.add_argument("--cluster", default="k80=16,p100=16,v100=16")
    ap.add_argument("--philly-cluster", default="k80=36,p100=36,v100=36")
    ap.add_argument("--round", type=float, default=300.0)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--per-seed", action="store_true", help="also every trace's ratios")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--jobs-md", metavar="FILE", help="write the lost/gained jobs of every trace as markdown")
    ap.add_argument("--from-json", metavar="FILE", help="print the tables of an earlier run's --json, simulating nothing")
    ap.add_argument("--no-time-limits", action="store_true",
                    help="generated traces without time limits (the partition's MaxTime, INFINITE: backfill knows no "
                         "job's end), as users who never pass --time")
    a = ap.parse_args()
    if a.from_json:
        runs = json.loads(Path(a.from_json).read_text())["runs"]
        results = [(r["workload"], r["trace"], r["policy"], r["variant"], r) for r in runs]
        policies = list(dict.fromkeys(r["policy"] for r in runs if r["policy"] != "slurm"))
        variants = list(dict.fromkeys(r["variant"] for r in runs if r["policy"] != "slurm"))
        print(tables(results, policies, variants, a.per_seed)[0])
        if policies and variants:
            print(job_tables(results, policies[0], variants[0] if len(variants) == 1 else variants[-1])[0])
        return
    nodes = cluster_spec(a.cluster)
    big = cluster_spec(a.philly_cluster)
    workloads = []
    for load in (float(x) for x in a.loads.split(",") if x.strip()):
        for seed in range(a.seeds):
            trace = generated(load, a.jobs, nodes, seed)
            if a.no_time_limits:
                trace = dataclasses.replace(trace, jobs=tuple(dataclasses.replace(j, time_limit=None) for j in trace.jobs))
            workloads.append((f"generated {load:.0%}", f"#{seed}", trace, nodes))
    workloads += [("gavel", name, t, nodes) for name, t in gavel_traces(a.gavel)]
    if a.philly_windows:
        workloads += [("philly windows", name, t, big)
                      for name, t in philly_windows(a.philly_windows, a.philly_jobs)]
    policies = [p.strip() for p in (POLICIES if a.policies == "all" else a.policies).split(",") if p.strip()]
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    tasks = []
    for g, s, trace, where in workloads:
        tasks.append((g, s, trace, where, "slurm", "-", a.round))
        tasks += [(g, s, trace, where, p, v, a.round) for p in policies for v in variants]
    _TASKS[:] = tasks
    t0 = time.monotonic()
    results = [None] * len(tasks)
    with mp.get_context("fork").Pool(a.processes) as pool:  # one line on stderr per simulation, as it ends
        for done, (i, r) in enumerate(pool.imap_unordered(_indexed, range(len(tasks)), chunksize=1), 1):
            results[i] = r
            g, s, p, v, m = r
            print(f"[{done}/{len(tasks)} {time.monotonic() - t0:.0f} s] {g} {s} {p} {v}: {m['wall']:.0f} s"
                  + (f" FAILED {m['failed']}" if "failed" in m else ""), file=sys.stderr, flush=True)
    wall = time.monotonic() - t0
    print(f"{a.cluster} (Philly windows: {a.philly_cluster}), round {a.round:g} s, {len(tasks)} simulations in {wall:.0f} s. Ratios to Slurm alone on "
          "the same trace; 'worst': the largest over a workload's traces (that trace named). Goals: plain/preempt "
          "mean JCT <= 1.00, makespan <= 1.02, max rho <= 1.00; preempt/moves requeues <= 0.5 per job and same-type "
          "restarts before the job they were for started (in brackets) <= 10 % of requeues; flips <= 5 % of unchanged account-type-rounds; moves <= 0.90 (<= 0.60 at 90 %) mean "
          "JCT and max rho <= 0.5")
    failed = [(g, s, p, v, m["failed"]) for g, s, p, v, m in results if "failed" in m]
    for g, s, p, v, why in failed:
        print(f"FAILED {g} {s} {p} {v}: {why}")
    bad = {(g, s) for g, s, *_ in failed}
    results = [r for r in results if (r[0], r[1]) not in bad]  # a trace whose baseline or a run failed is left out
    text, verdicts = tables(results, policies, variants, a.per_seed)
    print(text)
    errs = [(g, s, p, v, m["errors"]) for g, s, p, v, m in results if m["errors"]]
    if errs:
        print("\nround errors:")
        for e in errs[:20]:
            print("  ", *e)
    if policies and variants:
        printed, md = job_tables(results, policies[0], variants[0] if len(variants) == 1 else variants[-1])
        print(printed)
        if a.jobs_md:
            Path(a.jobs_md).write_text(md)
    if a.json:
        Path(a.json).write_text(json.dumps({"verdicts": verdicts, "runs": [
            {"workload": g, "trace": s, "policy": p, "variant": v, **m} for g, s, p, v, m in results]}, indent=1))


if __name__ == "__main__":
    main()
