#!/usr/bin/env python3
"""Every policy's solve time on Philly-like sharing problems (issue 22's table): tenants x GPU types x demand
modes, cold; warm rounds (unchanged, and with a fraction of the tenants changed) for the policies that take a
warm start; ``--check``'s cost; oef-coop's partitioned mode with its loss against the exact solve.

Usage: python3 benchmarks/policy_table.py [--tenants 100,300,1000,2000] [--types 10] [--modes none,total,per-type]
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
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = ("none", "total", "per-type")

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
    ap.add_argument("--tenants", default="100,300,1000,2000")
    ap.add_argument("--types", default="10", help="GPU type counts, e.g. 4,10 (default 10)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per cell (default 120)")
    ap.add_argument("--policies", default=",".join(policies.names()))
    ap.add_argument("--warm", action="store_true", help="warm rounds for the policies that take a warm start")
    ap.add_argument("--check", action="store_true", help="also time fairness.check (solve --check)")
    ap.add_argument("--partitions", default="", help="oef-coop partitioned rows, e.g. 2,4,8")
    ap.add_argument("--change", type=float, default=0.02, help="fraction of tenants changed for 'warm changed'")
    ap.add_argument("--json", help="also write every cell's result to this file")
    ap.add_argument("--speeds", default="random", choices=("random", "models", "gavel"),
                    help="philly.py's speed family: random (a speed vector per class, the default), models (40 job "
                         "models on the k types: classes share speed vectors), gavel (k <= 3)")
    a = ap.parse_args(argv)
    names = [s for s in a.policies.split(",") if s]
    modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        ap.error(f"--modes: unknown mode {bad[0]!r} (known: {', '.join(MODES)})")
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
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
