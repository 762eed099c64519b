#!/usr/bin/env python3
"""Policies against the Slurm a site already runs, side by side, in the simulator, seed by seed (issues 19, 28, 39).

Usage: python3 benchmarks/vs_slurm.py [--policies oef-coop,gavel,...] [--variants plain,preempt,moves,upgrade]
                                      [--baselines all] [--reference bytype-fast] [--fifo fifo-fast]
                                      [--loads 0.3,0.6,0.9] [--seeds 5] [--jobs 160]
                                      [--gavel 23dbec,51b7ef,925e2b,795a4c,e13805:30]
                                      [--philly-windows 5] [--philly-jobs 60] [--philly-cluster k80=36,...]
                                      [--cluster k80=16,p100=16,v100=16] [--processes 2] [--per-seed]
                                      [--json FILE] [--jobs-md FILE] [--from-json FILE] [--no-time-limits]

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

For each trace: the baselines of ``--baselines`` (``slurm_fair.sim.benchmark.BASELINES``; dry runs: the daemon
computes but sets no limit, SiteFactor or type map): ``fifo-*`` strict priority by submit time (Slurm alone before
issue 39), ``flat-*`` Slurm's fair-share with every GPU billed alike, ``bytype-*`` fair-share with GPUs billed by
type (weights proportional to each type's mean speed over the trace's classes), each with node weights fastest
type first (``*-fast``) or slowest first (``*-slow``); ``fifo-class`` (not in ``all``): FIFO typing an untyped
job to the fastest free type of its class, the simulator's rule before issue 39. Then each policy in each
variant — ``plain``: guarantees, lending limits, SiteFactor and the type map, no preemption and no moves;
``preempt``: plus reclaim preemption (the config's defaults); ``moves``: upgrade moves of the jobs that checkpoint
(``preemption.upgrade = "checkpointing"``; every simulated job declares it checkpoints), no reclaim; ``upgrade``:
reclaim and moves together — the default configuration of issue 39's goals. A requeued job restarts 60 s later
from its checkpoint.

Printed, per workload, for every baseline and every policy × variant (the "worst" of each measure over the
workload's traces, that trace named, and the account where the measure is an account's): (1) ratios to the
reference baseline (``--reference``) on the same trace — mean JCT (ratio of sums and worst trace), makespan, p95,
max ρ — mean JCT over FIFO's (``--fifo``), the worst account's mean-JCT ratio, requeues and guarantee flips;
(2) realized fairness (``docs/realized-fairness.md``): the realized share ratio's p5 and minimum over backlog
episodes of at least an hour and its p5 over backlogged account-hours, the lowest account's time-weighted ratio,
time to fair share's median and p95, the share of pair-hours with envy of held GPUs; (3) per policy cell, issue
39's goals (``slurm_fair.sim.benchmark.goal_checks``) and issue 28's requeue and flip goals, each miss with its
value, bound, trace and account; (4) with ``--per-seed``, every trace's numbers; (5) per workload, for the first
policy and the last variant, the five jobs that lost most and the five that gained most against the reference
(``--jobs-md`` writes them all, per trace). ``--json`` writes every number; ``--from-json`` prints them again.
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

from slurm_fair import config as config_mod  # noqa: E402
from slurm_fair.cli.table import render  # noqa: E402
from slurm_fair.errors import InputError  # noqa: E402
from slurm_fair.sim.benchmark import (  # noqa: E402
    BASELINES, GoalSpec, RunMeasures, Worst, baselines, goal_checks, met, requeue_checks, run_measures, trace_cell, worst)
from slurm_fair.sim.cluster import cluster_spec  # noqa: E402
from slurm_fair.sim.engine import simulate  # noqa: E402
from slurm_fair.sim.gavel_trace import read_gavel  # noqa: E402
from slurm_fair.sim.outcome import Ratios, extremes, job_deltas, ratio  # noqa: E402
from slurm_fair.sim.runs import realized_record  # noqa: E402
from slurm_fair.sim.synthetic_trace import generate  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "gavel"
POLICIES = "oef-coop,oef-noncoop,gavel,gandiva-fair,max-throughput,equal-share,bud,themis,hadar"
VARIANTS = {"plain": {}, "preempt": {"preemption": True}, "moves": {"upgrade": True},
            "upgrade": {"preemption": True, "upgrade": True}}
BASELINE = "baseline"  # the variant column of a baseline's rows
MEAN_DURATION = 4 * 3600.0
ACCOUNTS = 6


def capacity(nodes) -> dict[str, int]:
    """GPU type -> GPUs of ``nodes``."""
    cap: dict[str, int] = {}
    for g in nodes.values():
        for t, c in g.items():
            cap[t] = cap.get(t, 0) + c
    return cap


def offered_load(trace, nodes) -> float:
    """λ · E[g · work / r̄] / N of a trace on ``nodes`` (module docstring)."""
    cap = capacity(nodes)
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
    cap = capacity(nodes)
    t0 = time.monotonic()
    try:
        if variant == BASELINE:
            r = simulate(trace, nodes, "oef-coop", round_s=round_s,
                         **BASELINES[policy].kwargs(trace.throughput, list(cap)))
        else:
            opts = VARIANTS[variant]
            r = simulate(trace, nodes, policy, round_s=round_s, preemption=bool(opts.get("preemption")),
                         upgrade=bool(opts.get("upgrade")))
        accts = {a: 1 for a in sorted({j.account for j in trace.jobs})}  # simulate's weights: 1 each
        measures = run_measures(realized_record(r.runs, accts, cap, trace.throughput, r.sim_seconds), r.runs)
    except Exception as e:  # noqa: BLE001 - one failed simulation is reported, the others still run
        return group, seed, policy, variant, {"failed": f"{type(e).__name__}: {e}", "wall": time.monotonic() - t0}
    rs = r.restarts
    return group, seed, policy, variant, {
        "mean_jct": r.mean_jct, "p95_jct": r.p95_jct, "makespan": r.makespan, "utilization": r.utilization,
        "max_rho": r.max_rho, "finished": r.finished, "jobs": r.jobs, "preemptions": r.preemptions,
        "requeues": rs.requeues, "same_type": rs.same_type, "same_type_before_claimant": rs.same_type_before_claimant,
        "known_claimant": rs.known_claimant, "most_requeues_per_job": rs.most_per_job,
        "flips": r.flips, "rounds": r.rounds, "errors": r.round_errors[:3], "wall": time.monotonic() - t0,
        "realized": dataclasses.asdict(measures), "realized_summary": r.realized and r.realized.as_json(),
        "job_rows": [{k: row.get(k) for k in ("id", "account", "class", "gpus", "submit", "start", "jct", "types",
                                                "restarts")} for row in r.job_rows],
    }


def _indexed(i: int):
    return i, _run(i)


def _fmt(x, digits=2) -> str:
    return "-" if x is None else f"{round(x, digits) + 0.0:.{digits}f}"  # (+ 0.0: no "-0.00")


def _num(x) -> str:
    """A goal's value or bound: 3 decimals below 10 (ratios, shares), whole seconds above."""
    return "-" if x is None else _fmt(x, 3 if abs(x) < 10 else 0)


def _named(x, account) -> str:
    return "-" if x is None else f"{_fmt(x)} ({account})"


def _w(w: Worst, digits: int = 3, scale: float = 1.0) -> str:
    if w.value is None:
        return "-"
    where = w.trace if w.account is None else f"{w.trace}, {w.account}"
    return f"{_fmt(w.value * scale, digits)} ({where})"


def _cells(results, ref: str, fifo: str | None):
    """(workload, policy, variant) -> [(trace, its run, the reference's run, its TraceCell)], in results' order;
    a trace without the reference's run is left out."""
    base = {(g, s): m for g, s, p, v, m in results if p == ref and v == BASELINE}
    ff = {(g, s): m for g, s, p, v, m in results if p == fifo and v == BASELINE}
    groups: dict[tuple[str, str, str], list] = {}
    def to(s, m, b):
        return Ratios(s, ratio(m["mean_jct"], b["mean_jct"]), ratio(m["makespan"], b["makespan"]),
                      ratio(m["p95_jct"], b["p95_jct"]), ratio(m["max_rho"], b["max_rho"]))

    for g, s, p, v, m in results:
        b = base.get((g, s))
        if b is None:
            continue
        f = ff.get((g, s))
        cell = trace_cell(to(s, m, b), to(s, m, f) if f else None, RunMeasures(**m["realized"]),
                          RunMeasures(**b["realized"]))
        groups.setdefault((g, p, v), []).append((s, m, b, cell))
    return groups


def tables(results, ref: str, fifo: str | None, per_seed: bool, round_s: float, grace: float) -> tuple[str, list[dict]]:
    eff, fair, goals, seed_rows, verdicts = [], [], [], [], []
    for (g, p, v), items in _cells(results, ref, fifo).items():
        cells = [c for *_x, c in items]
        runs = [m for _s, m, _b, _c in items]
        sums = ratio(sum(m["mean_jct"] or 0 for m in runs) or None,
                     sum(b["mean_jct"] or 0 for _s, _m, b, _c in items) or None)
        jobs = sum(m["jobs"] for m in runs)
        req = sum(m["requeues"] for m in runs)
        same = sum(m["same_type"] for m in runs)
        # restarts on the same type while the job the requeue was for had not started (a same-type restart whose
        # record names no such job — an upgrade move that came back — counts as one)
        wasted = sum(m.get("same_type_before_claimant", 0) + m["same_type"] - m.get("known_claimant", 0)
                     for m in runs)
        flips = [m["flips"] for m in runs if m.get("flips")]
        fl_n = sum(f.get("flips_same_problem", 0) for f in flips)  # the whole problem unchanged
        fl_d = sum(f.get("same_problem", 0) for f in flips)
        fa_n = sum(f.get("flips_same_account", 0) for f in flips)  # the account's own inputs unchanged
        fa_d = sum(f.get("same_account", 0) for f in flips)

        def hi(key):
            return _w(worst(cells, lambda c: (getattr(c.ratios, key), None), True))

        eff.append([g, p, v, len(cells), _fmt(sums), hi("mean_jct"), hi("makespan"), hi("p95_jct"), hi("max_rho"),
                    _w(worst(cells, lambda c: (c.fifo_mean_jct, None), True)),
                    _w(worst(cells, lambda c: (c.fifo and c.fifo.makespan, None), True)),
                    _w(worst(cells, lambda c: (c.account_jct, c.account_jct_account), True)),
                    f"{req / jobs:.2f}" if jobs else "-", f"{same}/{req} ({wasted})",
                    f"{fl_n}/{fl_d}" if flips else "-", f"{fa_n}/{fa_d}" if flips else "-"])
        fair.append([g, p, v, sum(c.run.long_episodes for c in cells),
                     _w(worst(cells, lambda c: (c.run.p5_ratio, None), False)),
                     _w(worst(cells, lambda c: (c.run.min_ratio, c.run.min_ratio_account), False)),
                     _w(worst(cells, lambda c: (c.run.p5_hours, None), False)),
                     _w(worst(cells, lambda c: c.run.lowest_account, False)),
                     _w(worst(cells, lambda c: (c.run.ttfs_median, None), True), 0),
                     _w(worst(cells, lambda c: (c.run.ttfs_p95, None), True), 0),
                     _w(worst(cells, lambda c: (c.run.envy_share, None), True), 2, 100.0)])
        checks = []
        if v != BASELINE:
            opts = VARIANTS.get(v, {})
            spec = GoalSpec(bool(opts.get("preemption")), bool(opts.get("upgrade")), g.startswith("generated 90"),
                            round_s, grace)
            checks = goal_checks(cells, spec) + requeue_checks(req, jobs, wasted, fl_n, fl_d, v != "plain")
            shown = [c for c in checks if c.met is not True] or [None]
            for k, c in enumerate(shown):  # one row per goal missed or not checked, the cell's verdict first
                goals.append([g, p, v, {True: "yes", False: "no", None: "unchecked"}[met(checks)]] if k == 0
                             else ["", "", "", ""])
                goals[-1] += ["-", "", "", "", ""] if c is None else [
                    ("missed: " if c.met is False else "not checked: ") + c.goal, _num(c.value), _num(c.bound),
                    c.trace, c.account or ""]
        verdicts.append({"workload": g, "policy": p, "variant": v, "reference": ref, "fifo": fifo,
                         "met": met(checks) if checks else None, "ratio_of_sums": sums,
                         "checks": [dataclasses.asdict(c) for c in checks],
                         "traces": [dataclasses.asdict(c) for c in cells], "requeues": req, "jobs": jobs,
                         "same_type": same, "same_type_wasted": wasted, "flips_same_problem": fl_n,
                         "same_problem": fl_d, "flips_same_account": fa_n, "same_account": fa_d})
        for c in cells:
            r = c.run
            seed_rows.append([g, p, v, c.trace, _fmt(c.ratios.mean_jct), _fmt(c.ratios.makespan),
                              _fmt(c.ratios.p95_jct), _fmt(c.ratios.max_rho), _fmt(c.fifo_mean_jct),
                              _fmt(c.fifo and c.fifo.makespan),
                              _named(c.account_jct, c.account_jct_account), _fmt(r.p5_ratio),
                              _named(r.min_ratio, r.min_ratio_account), _fmt(r.p5_hours), _named(*r.lowest_account),
                              _fmt(r.ttfs_median, 0), _fmt(r.ttfs_p95, 0),
                              _fmt(None if r.envy_share is None else 100 * r.envy_share)])
    out = [f"(1) against the reference baseline {ref} on the same trace (FIFO: {fifo or 'none'})",
           render(["workload", "policy", "variant", "traces", "JCT/ref (sums)", "worst JCT/ref", "worst makespan",
                   "worst p95", "worst max rho", "worst JCT/FIFO", "worst makespan/FIFO", "worst account JCT/ref", "requeues/job",
                   "same-type restarts (before its job)", "flips (same problem)", "flips (same own inputs)"], eff),
           "\n(2) realized fairness (share ratios: lowest is worst; time to fair share s, envy % of pair-hours: "
           "highest is worst)",
           render(["workload", "policy", "variant", "episodes >= 1 h", "share p5 (episodes)", "share min (episodes)",
                   "share p5 (account-hours)", "lowest account", "ttfs median s", "ttfs p95 s", "envy %"], fair),
           "\n(3) goals (issue 39's; issue 28's requeues and flips): each goal missed or not checked, with the "
           "trace (and account) of least margin",
           render(["workload", "policy", "variant", "goals met", "goal", "value", "bound", "trace", "account"],
                  goals)]
    if per_seed:
        out.append("\nper trace (ratios to the reference baseline on the same trace)")
        out.append(render(["workload", "policy", "variant", "trace", "mean JCT", "makespan", "p95", "max rho",
                           "JCT/FIFO", "makespan/FIFO", "account JCT/ref", "share p5", "share min", "p5 hours", "lowest account",
                           "ttfs median s", "ttfs p95 s", "envy %"], seed_rows))
    return "\n".join(out), verdicts


def job_tables(results, policy: str, variant: str, ref: str) -> tuple[str, str]:
    """The five jobs that lost and gained most per workload (printed), and every trace's (markdown)."""
    base = {(g, s): m for g, s, p, v, m in results if p == ref and v == BASELINE}
    printed, md = [], [f"# Jobs that lost and gained most: {policy} {variant} against {ref}\n"]
    by_group: dict[str, list] = {}
    for g, s, p, v, m in results:
        if p == policy and v == variant and (g, s) in base:
            ds = job_deltas(base[(g, s)]["job_rows"], m["job_rows"])
            by_group.setdefault(g, []).extend((s, d) for d in ds)
            lost, gained = extremes(ds)
            md.append(f"\n## {g} {s}\n")
            md.append(f"| job | account | class | GPUs | JCT {ref} s | JCT s | Δ s | types ({ref} → here) | restarts |")
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
        printed.append(render(["workload", "trace", "job", "GPUs", "class", "Δ JCT s", f"{ref} JCT s",
                               "types", "restarts"], rows))
    head = f"\nthe five jobs that lost most, then the five that gained most, per workload ({policy} {variant})\n"
    return head + "\n\n".join(printed), "\n".join(md) + "\n"


def _print(results, settings: dict, a) -> list[dict]:
    """Print every table of ``results`` (fresh or from --json) and return the verdicts."""
    ref = a.reference or settings["reference"]
    fifo = settings.get("fifo") if a.fifo is None else (a.fifo or None)
    names = {p for _g, _s, p, v, _m in results if v == BASELINE}
    if ref not in names:
        raise SystemExit(f"--reference {ref}: no run of that baseline (baselines run: {', '.join(sorted(names))})")
    if fifo not in names:
        fifo = None
    text, verdicts = tables(results, ref, fifo, a.per_seed, settings["round"], settings["grace"])
    print(text)
    errs = [(g, s, p, v, m["errors"]) for g, s, p, v, m in results if m["errors"]]
    if errs:
        print("\nround errors:")
        for e in errs[:20]:
            print("  ", *e)
    pol = [(p, v) for _g, _s, p, v, _m in results if v != BASELINE]
    if pol:
        policy = pol[0][0]
        variant = [v for p, v in pol if p == policy][-1]
        printed, md = job_tables(results, policy, variant, ref)
        print(printed)
        if a.jobs_md:
            Path(a.jobs_md).write_text(md)
    return verdicts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policies", default="oef-coop", help=f"comma list, or 'all' ({POLICIES})")
    ap.add_argument("--variants", default="plain,preempt,moves,upgrade", help=f"comma list of {', '.join(VARIANTS)}")
    ap.add_argument("--baselines", default="all",
                    help=f"comma list of {', '.join(BASELINES)} and 'all' (every one but fifo-class)")
    ap.add_argument("--reference", default=None,
                    help="the baseline the ratios and goals are against (default bytype-fast; must be run)")
    ap.add_argument("--fifo", default=None, help="the FIFO baseline of the JCT/FIFO column and goal (default "
                    "fifo-fast; '' or one not run: none)")
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
    ap.add_argument("--per-seed", action="store_true", help="also every trace's numbers")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--jobs-md", metavar="FILE", help="write the lost/gained jobs of every trace as markdown")
    ap.add_argument("--from-json", metavar="FILE",
                    help="print the tables of an earlier run's --json, simulating nothing")
    ap.add_argument("--no-time-limits", action="store_true",
                    help="generated traces without time limits (the partition's MaxTime, INFINITE: backfill knows no "
                         "job's end), as users who never pass --time")
    a = ap.parse_args()
    if a.from_json:
        data = json.loads(Path(a.from_json).read_text())
        if "settings" not in data:
            raise SystemExit(f"--from-json {a.from_json}: written before issue 39 (no baselines, no realized "
                             "fairness): run the benchmark again")
        runs = data["runs"]
        _print([(r["workload"], r["trace"], r["policy"], r["variant"], r) for r in runs], data["settings"], a)
        return
    try:
        chosen = baselines(a.baselines)
    except InputError as e:
        raise SystemExit(str(e)) from None
    settings = {"reference": "bytype-fast", "fifo": "fifo-fast", "round": a.round,
                "grace": config_mod.from_dict({}).preemption.grace, "cluster": a.cluster,
                "philly_cluster": a.philly_cluster, "baselines": [b.name for b in chosen]}
    if (a.reference or settings["reference"]) not in settings["baselines"]:
        raise SystemExit(f"--reference {a.reference or settings['reference']} is not among --baselines "
                         f"({', '.join(settings['baselines'])})")
    policies = [p.strip() for p in (POLICIES if a.policies == "all" else a.policies).split(",") if p.strip()]
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    for v in variants:
        if v not in VARIANTS:
            raise SystemExit(f"--variants: {v!r} is not one of {', '.join(VARIANTS)}")
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
    tasks = []
    for g, s, trace, where in workloads:
        tasks += [(g, s, trace, where, b.name, BASELINE, a.round) for b in chosen]
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
    print(f"{a.cluster} (Philly windows: {a.philly_cluster}), round {a.round:g} s, grace {settings['grace']:g} s, "
          f"{len(tasks)} simulations in {wall:.0f} s. 'worst': over a workload's traces, that trace (and account) "
          "named. Measures and goals: benchmarks/README.md, docs/vs-slurm.md")
    failed = [(g, s, p, v, m["failed"]) for g, s, p, v, m in results if "failed" in m]
    for g, s, p, v, why in failed:
        print(f"FAILED {g} {s} {p} {v}: {why}")
    bad = {(g, s) for g, s, *_ in failed}
    results = [r for r in results if (r[0], r[1]) not in bad]  # a trace whose baseline or a run failed is left out
    verdicts = _print(results, settings, a) if results else []
    if a.json:
        Path(a.json).write_text(json.dumps({"settings": settings, "verdicts": verdicts, "runs": [
            {"workload": g, "trace": s, "policy": p, "variant": v, **m} for g, s, p, v, m in results]}, indent=1))


if __name__ == "__main__":
    main()
