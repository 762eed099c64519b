#!/usr/bin/env python3
"""oef-noncoop and gavel (the live-HiGHS progressive filling, ``policies/filling/``) at a big site's size:
this tree's ``fill`` against the one at another git revision ("before"), on the same Philly-like instances.

Usage: python3 benchmarks/filling_scale.py [--tenants 100,300,1000,2000] [--k 4,10] [--modes none,total,per-type]
                                          [--policies oef-noncoop,gavel] [--before REV] [--repeat 3]

Instances as ``benchmarks/policy_table.py``: ``benchmarks.philly.instance(tenants, k, seed)``; "none" drops every
demand, "total" keeps the binding total demands, "per-type" adds 1-3 asked-for types per class. Each cell solves
the instance ``--repeat`` times with each ``fill`` in this process (nothing is kept between solves: every solve
is cold) and prints the best wall seconds, the LP solves of the last run, and the largest relative difference
of the per-class throughputs between the two (exact methods agree to about 1e-5 on these ill-conditioned
problems). ``--before ''`` times this tree only.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from benchmarks.philly import instance  # noqa: E402
from slurm_fair import policies  # noqa: E402
from slurm_fair.policies import filling  # noqa: E402

BASE = "ac89e69"  # main before issue 22's filling work


def load_fill(rev: str):
    """``fill`` of ``policies/_filling.py`` (today ``policies/filling/``) at git revision ``rev``, as a module inside the package (for its
    relative imports)."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:slurm_fair/policies/_filling.py"],
                         capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "_filling_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("slurm_fair.policies._filling_before", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod.fill


def problem(n: int, k: int, mode: str, seed: int):
    p = instance(n, k, seed, type_demand=mode == "per-type")
    if mode == "none":
        p = dataclasses.replace(p, tenants=tuple(dataclasses.replace(t, classes=tuple(
            dataclasses.replace(c, demand=None, type_demand=None) for c in t.classes)) for t in p.tenants))
    return p


def timed(name: str, p, fills, repeat: int):
    """Per fill of ``fills``: (best wall seconds, LP solves, per-class throughput), with ``filling.fill``
    set to it; the fills take turns, so a busy machine slows them alike."""
    out = [[float("inf"), 0, None] for _ in fills]
    keep = filling.fill
    try:
        for _ in range(repeat):
            for r, fill in zip(out, fills):
                def counting(*a, fill=fill, r=r, **kw):
                    res = fill(*a, **kw)
                    r[1] = res.lps
                    return res

                filling.fill = counting
                t0 = time.perf_counter()
                a = policies.solve(name, p)
                r[0] = min(r[0], time.perf_counter() - t0)
                r[2] = a.user_throughput()
    finally:
        filling.fill = keep
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tenants", default="100,300,1000,2000")
    ap.add_argument("--k", default="4,10")
    ap.add_argument("--modes", default="none,total,per-type")
    ap.add_argument("--policies", default="oef-noncoop,gavel")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--before", default=BASE, help=f"git revision of the 'before' _filling.py (default {BASE})")
    ap.add_argument("--repeat", type=int, default=3, help="solves per cell, best kept (default 3)")
    a = ap.parse_args(argv)
    fills = [filling.fill] + ([load_fill(a.before)] if a.before else [])
    for name in a.policies.split(","):  # warm-up (imports, first-call costs), not timed
        timed(name, problem(20, 4, "total", a.seed), fills, 1)
    print("| policy | tenants | types | demands | classes | before (s) | after (s) | before / after | LPs before → after | max rel. diff |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in a.policies.split(","):
        for n in (int(v) for v in a.tenants.split(",")):
            for k in (int(v) for v in a.k.split(",")):
                for mode in a.modes.split(","):
                    p = problem(n, k, mode, a.seed)
                    res = timed(name, p, fills, a.repeat)
                    t1, l1, u1 = res[0]
                    row = f"| {name} | {n} | {k} | {mode} | {p.virtual_users().n} |"
                    if len(res) > 1:
                        t0, l0, u0 = res[1]
                        diff = float(np.max(np.abs(u1 - u0) / np.maximum(np.abs(u0), 1e-9)))
                        row += f" {t0:.2f} | {t1:.2f} | {t0 / t1:.1f}× | {l0} → {l1} | {diff:.0e} |"
                    else:
                        row += f" — | {t1:.2f} | — | {l1} | — |"
                    print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
