#!/usr/bin/env python3
"""Every allocation policy side by side, in three tables (``--table``): solve time on Philly-like sharing
problems (``solve``, the default), solve time and throughput on Gavel-measured job types (``gavel-types``), and
every policy simulated on the shared Gavel traces (``sim``).

Usage: python3 benchmarks/policy_table.py [--table solve|gavel-types|sim] [options of that table]

``--table solve`` (issue 22's table): tenants x GPU types x demand modes, cold; warm rounds (unchanged, and with a
fraction of the tenants changed) for the policies that take a warm start; ``--check``'s cost; oef-coop's
partitioned mode with its loss against the exact solve.

    python3 benchmarks/policy_table.py [--tenants 100,300,1000,2000] [--types 10] [--modes none,total,per-type]
                                       [--policies oef-noncoop,gavel,...] [--warm] [--check] [--partitions 2,4,8]
                                       [--change 0.02] [--seed 0] [--timeout 120] [--json FILE]
                                       [--speeds random|models|gavel]

Instances: ``benchmarks.philly.instance(tenants, k, seed, speeds)`` (``--speeds``: random, the default, or models,
40 job models shared by the classes; 1-2 classes per tenant, demands 1/2/4/8/32 GPUs,
capacity about half the total demand); "none" drops every demand (each class could use the whole cluster),
"total" keeps the binding total demands, "per-type" adds 1-3 asked-for types per class (``type_demand``).
Each cell runs in its own process (solver imports excluded from the time) with a wall-clock limit, so one slow
policy cannot hide the others: "> T s" means it did not finish in T seconds, "error: ..." that it failed.

Columns (seconds, wall clock, one process per cell):
* none / total / per-type: a cold solve of the instance in that demand mode;
* warm same / warm changed (cold): on the "total" instance, a second solve given the first one's ``warm`` (the
  daemon's next round with nothing changed), and a solve of the instance with ``--change`` of its tenants
  re-drawn (``philly.changed``) given the first one's ``warm``, next to the cold solve of that changed instance;
* check: ``fairness.check`` (the CLI's ``solve --check``) after the "total" solve, and its ratio to the solve;
* partitioned rows (``oef-coop k=P``): the policy's partitioned mode with P parts; loss against the exact
  solve of the same instance (saved by the exact cell): total-throughput loss in %, the largest envy between
  two uncapped classes as % of the envier's throughput, and tenants below their sharing-incentive share
  (partitioned / exact).
The "Gavel's code" column: Gavel's own max-min policies (its repository, cvxpy + ECOS, water-filling with
GLPK_MI) on the same "total" instances (10 types), timed outside this project and recorded in
``benchmarks/reference/gavel_maxmin.json`` (with the commit).

``--table gavel-types``: how long every policy takes, and how much throughput it gets, as the number of tenants
grows (formerly ``benchmarks/bench_policies.py``).

    python3 benchmarks/policy_table.py --table gavel-types [--tenants 10,50,100] [--policies oef-coop,...]
                                       [--solver ECOS] [--type-caps]

Tenants draw 1-2 job classes from the measured Gavel throughputs (shared/data/gavel, physical cluster,
K80/P100/V100, single-GPU rows). The cluster has 2 K80, 1.5 P100 and 1 V100 per tenant. Each size runs
twice: without demands, and with a demand of 1-6 GPUs per class; ``--type-caps`` adds a third run where
every class also has per-type caps (``type_demand``: 0-4 GPUs of each type, as if its jobs requested some
types only). Prints one table: wall seconds of ``policies.solve`` (LP time included), total normalized
throughput, and its share of max-throughput (eq. 4).

``--table sim``: every policy on the shared Gavel traces, simulated with the daemon's round code (issue 12,
item 6; formerly ``benchmarks/policies.py``).

    python3 benchmarks/policy_table.py --table sim [--jobs 1000] [--cluster k80=36,p100=36,v100=36] [--round 300]
                                       [--policies gavel,gandiva-fair,oef-coop,...] [--traces DIR]
                                       [--accounts file|job]

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
import csv
import dataclasses
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = ("none", "total", "per-type")
TABLES = ("solve", "gavel-types", "sim")
SHARED = Path("/work/shared/data/gavel")
GAVEL_TYPES = ("k80", "p100", "v100")
#: the policies ``--table sim`` runs unless told
SIM_POLICIES = "gavel,gandiva-fair,oef-noncoop,oef-coop,max-throughput,equal-share,bud,themis,hadar"

PRELUDE = r"""
import dataclasses, json, sys, time
import numpy as np
sys.path.insert(0, {root!r})
import cvxpy, highspy  # import cost is not solve time
from benchmarks.philly import instance, changed
from slurm_fair import policies, fairness

def make(n, k, seed, mode):
    p = instance(n, k, seed, speeds={speeds!r}, type_demand=mode == "per-type")
    if mode == "none":
        p = dataclasses.replace(p, tenants=tuple(dataclasses.replace(t, classes=tuple(
            dataclasses.replace(c, demand=None, type_demand=None) for c in t.classes)) for t in p.tenants))
    return p

def run(p, warm=None):
    t0 = time.perf_counter()
    a = policies.solve({policy!r}, p, warm=warm, options={options!r})
    return a, time.perf_counter() - t0
"""

COLD = PRELUDE + r"""
p = make({n}, {k}, {seed}, {mode!r})
a, t = run(p)
out = {{"solve": t, "total_throughput": a.total_throughput(), "users": a.vu.n}}
if {cache!r}:
    np.savez({cache!r}, x=np.asarray(a.x, dtype=float), total=a.total_throughput(),
             si=fairness.violations(a.vu, a.x)["si_violations"])
if {check}:
    t1 = time.perf_counter()
    fairness.check(a, solve=lambda q: policies.solve({policy!r}, q, options={options!r}))
    out["check"] = time.perf_counter() - t1
print(json.dumps(out))
"""

WARM = PRELUDE + r"""
p = make({n}, {k}, {seed}, "total")
a, t = run(p)
_, same = run(p, warm=a.warm)
p2 = changed(p, {change}, {seed}, speeds={speeds!r})
_, cold2 = run(p2)
_, warm2 = run(p2, warm=a.warm)
print(json.dumps({{"cold": t, "same": same, "changed_cold": cold2, "changed_warm": warm2}}))
"""

LOSS = PRELUDE + r"""
p = make({n}, {k}, {seed}, {mode!r})
a, t = run(p)
out = {{"solve": t}}
ref = np.load({cache!r}) if {cache!r} else None
if ref is not None:
    out.update(loss=1.0 - a.total_throughput() / float(ref["total"]), envy=fairness.largest_envy_ratio(a.vu, a.x),
               si=fairness.violations(a.vu, a.x)["si_violations"], si_exact=int(ref["si"]))
print(json.dumps(out))
"""


def cell(template: str, timeout: float, **kw) -> dict:
    code = template.format(root=str(ROOT), **kw)
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"timeout": timeout}
    if p.returncode != 0:
        lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
        return {"error": (lines[-1] if lines else f"exit {p.returncode}")[:90]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def fmt(r: dict | None, key: str = "solve") -> str:
    if r is None:
        return "—"
    if "timeout" in r:
        return f"> {r['timeout']:g} s"
    if "error" in r:
        return f"error: {r['error']}"
    return f"{r[key]:.2f}" if key in r else "—"


def gavel_reference() -> dict[int, dict[str, float | None]]:
    path = ROOT / "benchmarks" / "reference" / "gavel_maxmin.json"
    out: dict[int, dict[str, float | None]] = {}
    for r in json.loads(path.read_text())["results"]:
        out.setdefault(int(r["n"]), {})[r["policy"]] = r.get("seconds")
    return out


def _ints(s: str) -> list[int]:
    return [int(v) for v in s.split(",") if v.strip()]


def main(argv=None) -> int:
    from slurm_fair import policies

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", default="solve", choices=TABLES,
                    help="solve (Philly-like problems, the default), gavel-types (Gavel-measured job types, "
                         "in-process), sim (every policy simulated on the Gavel traces)")
    ap.add_argument("--tenants", help="tenant counts (default 100,300,1000,2000; gavel-types: 10,50,100)")
    ap.add_argument("--policies", help=f"default every policy (sim: {SIM_POLICIES})")
    g = ap.add_argument_group("--table solve")
    g.add_argument("--types", default="10", help="GPU type counts, e.g. 4,10 (default 10)")
    g.add_argument("--modes", default=",".join(MODES))
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--timeout", type=float, default=120.0, help="seconds per cell (default 120)")
    g.add_argument("--warm", action="store_true", help="warm rounds for the policies that take a warm start")
    g.add_argument("--check", action="store_true", help="also time fairness.check (solve --check)")
    g.add_argument("--partitions", default="", help="oef-coop partitioned rows, e.g. 2,4,8")
    g.add_argument("--change", type=float, default=0.02, help="fraction of tenants changed for 'warm changed'")
    g.add_argument("--json", help="also write every cell's result to this file")
    g.add_argument("--speeds", default="random", choices=("random", "models", "gavel"),
                   help="philly.py's speed family: random (a speed vector per class, the default), models (40 job "
                        "models on the k types: classes share speed vectors), gavel (k <= 3)")
    g = ap.add_argument_group("--table gavel-types")
    g.add_argument("--solver", default=None)
    g.add_argument("--type-caps", action="store_true", help="also run with per-type caps (type_demand) on every class")
    g = ap.add_argument_group("--table sim")
    g.add_argument("--jobs", type=int, default=1000)
    g.add_argument("--cluster", default="k80=36,p100=36,v100=36")
    g.add_argument("--round", type=float, default=300.0)
    g.add_argument("--traces", default=str(SHARED / "traces"))
    g.add_argument("--throughputs", default=str(SHARED / "physical_cluster_throughputs.json"))
    g.add_argument("--accounts", choices=("file", "job"), default="file")
    a = ap.parse_args(argv)
    if a.table == "gavel-types":
        gavel_types_table(a.tenants or "10,50,100", a.policies or ",".join(policies.names()), a.solver, a.type_caps)
    elif a.table == "sim":
        sim_table(a, a.policies or SIM_POLICIES)
    else:
        a.tenants = a.tenants or "100,300,1000,2000"
        a.policies = a.policies or ",".join(policies.names())
        modes = [m for m in a.modes.split(",") if m]
        bad = [m for m in modes if m not in MODES]
        if bad:
            ap.error(f"--modes: unknown mode {bad[0]!r} (known: {', '.join(MODES)})")
        solve_table(a, modes)
    return 0


def solve_table(a: argparse.Namespace, modes: list[str]) -> None:
    """``--table solve``: issue 22's table, a process per cell."""
    from slurm_fair import policies

    names = [s for s in a.policies.split(",") if s]
    ref = gavel_reference()
    cache = Path(tempfile.mkdtemp(prefix="policy-table-"))
    head = "| policy | tenants | types | " + " | ".join(f"{m} (s)" for m in modes)
    head += " | warm same / changed (cold) (s) | check (s, × solve) | partitioned loss: throughput / envy / SI | Gavel's code: LP / water-filling (s) |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    results = []
    rows = [(name, None) for name in names] + [("oef-coop", p) for p in _ints(a.partitions)]
    for name, parts in rows:
        options = {"partition_parts": parts, "partition_above": 1} if parts else {}
        label = f"{name} k={parts}" if parts else name
        for k in _ints(a.types):
            for n in _ints(a.tenants):
                base = dict(n=n, k=k, seed=a.seed, policy=name, options=options, speeds=a.speeds)
                cells, extra = {}, {}
                for m in modes:
                    saved = str(cache / f"{name}-{n}-{k}-{m}.npz")
                    if parts:
                        have = Path(saved).exists()
                        cells[m] = cell(LOSS, a.timeout, mode=m, cache=saved if have else "", **base)
                    else:
                        check = a.check and m == "total"
                        cells[m] = cell(COLD, a.timeout, mode=m, cache=saved, check=check, **base)
                if a.warm and not parts and policies.takes_warm(name):
                    extra["warm"] = cell(WARM, 4 * a.timeout, change=a.change, **base)
                row = f"| {label} | {n} | {k} | " + " | ".join(fmt(cells[m]) for m in modes)
                w = extra.get("warm")
                if w is None:
                    row += " | —"
                elif "same" in w:
                    row += f" | {w['same']:.2f} / {w['changed_warm']:.2f} ({w['changed_cold']:.2f})"
                else:
                    row += f" | {fmt(w)}"
                t = cells.get("total", {})
                row += f" | {t['check']:.2f} ({t['check'] / t['solve']:.1f}×)" if "check" in t else " | —"
                lossy = [(m, cells[m]) for m in modes if "loss" in cells[m]]
                row += " | " + ("; ".join(f"{m}: {c['loss']:.2%} / {c['envy']:.2%} / {c['si']} ({c['si_exact']})"
                                          for m, c in lossy) or "—")
                g = ref.get(n, {}) if name == "gavel" and k == 10 else {}
                if g:
                    def show(v):
                        return "not run" if v is None else f"{v:.2f}"  # the reference file says why
                    row += f" | {show(g.get('single'))} / {show(g.get('waterfill'))} |"
                else:
                    row += " | |"
                print(row, flush=True)
                results.append({"policy": label, "tenants": n, "types": k, "cells": cells, **extra})
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


def job_types() -> list[tuple[str, dict[str, float]]]:
    """Gavel's measured single-GPU job types: (name, throughput per type)."""
    data = SHARED / "physical_cluster_throughputs_isolated.csv"
    here = ROOT / "shared" / "data" / "gavel" / data.name
    path = here if here.exists() else data
    out = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["scale_factor"] == "1":
                out.append((row["job_type"], {g: float(row[g]) for g in GAVEL_TYPES}))
    return out


def gavel_types_instance(n: int, demands: bool | str, seed: int = 7):
    """n tenants of 1-2 classes drawn from ``job_types()``; demands False, True or "type caps"."""
    from slurm_fair.model import JobClass, Problem, Tenant

    rng = random.Random(seed * 1000 + n)
    jobs = job_types()
    tenants = []
    for i in range(n):
        classes = []
        for c, (name, thr) in enumerate(rng.sample(jobs, rng.choice([1, 1, 2]))):
            demand = float(rng.randint(1, 6)) if demands else None
            td = None
            if demands == "type caps":
                td = {g: float(rng.randint(0, 4)) for g in GAVEL_TYPES}
                if not any(td.values()):
                    td[rng.choice(GAVEL_TYPES)] = 1.0
            classes.append(JobClass(f"{name}#{c}", thr, demand, td))
        tenants.append(Tenant(f"acct{i:03d}", tuple(classes), float(rng.choice([1, 1, 2]))))
    caps = {"k80": 2 * n, "p100": (3 * n) // 2, "v100": n}
    return Problem(caps, tuple(tenants))


def text_table(header, rows) -> str:
    cells = [list(map(str, header))] + [[str(c) for c in r] for r in rows]
    width = [max(len(r[j]) for r in cells) for j in range(len(header))]
    lines = ["  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, width))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in width))
    return "\n".join(lines)


def gavel_types_table(tenants: str, names: str, solver: str | None, type_caps: bool) -> None:
    """``--table gavel-types``: solve time and share of max-throughput, in this process."""
    from slurm_fair import policies

    rows = []
    for n in [int(v) for v in tenants.split(",")]:
        for demands in (False, True) + (("type caps",) if type_caps else ()):
            p = gavel_types_instance(n, demands)
            vus = p.virtual_users().n
            best = policies.solve("max-throughput", p, solver).total_throughput()
            for name in names.split(","):
                t0 = time.perf_counter()
                a = policies.solve(name, p, solver)
                wall = time.perf_counter() - t0
                capped = sum(1 for note in a.notes if note.startswith("demand capped"))
                rows.append([n, vus, demands if isinstance(demands, str) else ("yes" if demands else "no"), name,
                             f"{wall:.3f}", f"{a.solve_seconds:.3f}",
                             f"{a.total_throughput():.1f}", f"{100 * a.total_throughput() / best:.1f}%",
                             "yes" if capped else ""])
                print(f"... {n} tenants, demands={demands}, {name}: {wall:.2f}s", file=sys.stderr, flush=True)
    print(text_table(["tenants", "classes", "demands", "policy", "wall s", "LP s", "throughput", "of max", "capped"],
                     rows))


def sim_table(a: argparse.Namespace, names: str) -> None:
    """``--table sim``: every policy simulated on the first ``--jobs`` jobs of the Gavel traces."""
    from slurm_fair.cli.table import render
    from slurm_fair.sim.cluster import cluster_spec
    from slurm_fair.sim.engine import simulate
    from slurm_fair.sim.gavel_trace import read_gavel

    trace = read_gavel(sorted(Path(a.traces).glob("*.trace")), a.throughputs, accounts=a.accounts, unmeasured="scale")
    jobs = tuple(sorted(trace.jobs, key=lambda j: (j.submit, j.id))[: a.jobs])
    trace = dataclasses.replace(trace, jobs=jobs)
    nodes = cluster_spec(a.cluster)
    res = {}
    t0 = time.monotonic()
    for p in (n.strip() for n in names.split(",") if n.strip()):
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
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
