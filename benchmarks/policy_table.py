#!/usr/bin/env python3
"""Every policy's solve time on Philly-like sharing problems (issue 9's table): tenants x 10 GPU types,
without demands, with binding total demands, and with per-type demands too; cold (a fresh process per cell).

Usage: python3 benchmarks/policy_table.py [--tenants 100,1000,2000] [--k 10] [--seed 0] [--timeout 120]
                                        [--policies oef-noncoop,gavel,...] [--check]

Instances: ``benchmarks.philly.instance(tenants, k, seed)`` (1-2 classes per tenant, demands 1/2/4/8/32 GPUs,
capacity about half the total demand); "none" drops every demand (each class could use the whole cluster),
"per-type" adds 1-3 asked-for types per class (``type_demand``). Each cell runs in its own process (solver
imports excluded from the time) with a wall-clock limit, so one slow policy cannot hide the others: "> T s"
means it did not finish in T seconds, "error: ..." that it failed (with the message). ``--check`` adds the time
of ``fairness.check`` (the CLI's ``solve --check``) after the solve.

The "Gavel's code" column: Gavel's own max-min policies (its repository, cvxpy + ECOS, water-filling with
GLPK_MI) on the same "total" instances, timed outside this project and recorded in
``benchmarks/reference/gavel_maxmin.json`` (with the commit): the ratio is Gavel's time over ours for ``gavel``.
Times are wall seconds on the machine that runs this; the reference was measured on this machine kind.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = ("none", "total", "per-type")
CELL = r"""
import dataclasses, json, sys, time
sys.path.insert(0, {root!r})
import cvxpy, highspy  # import cost is not solve time
from benchmarks.philly import instance
from slurm_fair import policies, fairness
p = instance({n}, {k}, {seed}, type_demand={mode!r} == "per-type")
if {mode!r} == "none":
    p = dataclasses.replace(p, tenants=tuple(dataclasses.replace(t, classes=tuple(
        dataclasses.replace(c, demand=None, type_demand=None) for c in t.classes)) for t in p.tenants))
solve = policies.get({policy!r})
t0 = time.perf_counter()
a = solve(p)
t1 = time.perf_counter()
out = {{"solve": t1 - t0, "total_throughput": a.total_throughput(), "users": p.virtual_users().n}}
if {check}:
    fairness.check(a, solve=lambda q: solve(q))
    out["check"] = time.perf_counter() - t1
print(json.dumps(out))
"""


def cell(policy: str, n: int, k: int, seed: int, mode: str, timeout: float, check: bool) -> dict:
    code = CELL.format(root=str(ROOT), n=n, k=k, seed=seed, mode=mode, policy=policy, check=check)
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"timeout": timeout}
    if p.returncode != 0:
        lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
        return {"error": (lines[-1] if lines else f"exit {p.returncode}")[:90]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def fmt(r: dict, key: str = "solve") -> str:
    if "timeout" in r:
        return f"> {r['timeout']:g} s"
    if "error" in r:
        return f"error: {r['error']}"
    return f"{r[key]:.2f}"


def gavel_reference() -> dict[int, dict[str, float | None]]:
    path = ROOT / "benchmarks" / "reference" / "gavel_maxmin.json"
    out: dict[int, dict[str, float | None]] = {}
    for r in json.loads(path.read_text())["results"]:
        out.setdefault(int(r["n"]), {})[r["policy"]] = r.get("seconds")
    return out


def main(argv=None) -> int:
    from slurm_fair import policies

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tenants", default="100,1000,2000")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per cell (default 120)")
    ap.add_argument("--policies", default=",".join(policies.names()))
    ap.add_argument("--check", action="store_true", help="also time fairness.check (solve --check)")
    a = ap.parse_args(argv)
    names = [s for s in a.policies.split(",") if s]
    ref = gavel_reference()
    head = "| policy | tenants | " + " | ".join(f"{m} (s)" for m in MODES)
    head += " | check, total (s) | check / solve" if a.check else ""
    head += " | Gavel's code, total: single LP / water-filling (s) |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for name in names:
        for n in (int(v) for v in a.tenants.split(",")):
            cells = {m: cell(name, n, a.k, a.seed, m, a.timeout, a.check and m == "total") for m in MODES}
            row = f"| {name} | {n} | " + " | ".join(fmt(cells[m]) for m in MODES)
            if a.check:
                t = cells["total"]
                ok = "check" in t
                row += f" | {fmt(t, 'check') if ok else '—'} | {t['check'] / t['solve']:.1f}×" if ok else " | — | —"
            g = ref.get(n, {}) if name == "gavel" else {}
            if g:
                def show(v):
                    return "not run" if v is None else f"{v:.2f}"  # the reference file says why
                ours = cells["total"].get("solve")
                wf = g.get("waterfill")
                ratio = f" ({wf / ours:.0f}× ours)" if wf and ours else ""
                row += f" | {show(g.get('single'))} / {show(wf)}{ratio} |"
            else:
                row += " | |"
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
