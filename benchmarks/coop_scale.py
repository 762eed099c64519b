#!/usr/bin/env python3
"""oef-coop at a big site's size (issue 22 item 1): exact against POP-style partitioned, cold and warm.

Usage: python3 benchmarks/coop_scale.py [--n 100,300,1000,2000] [--k 10] [--demands none,total]
                                        [--parts 0,2,4,8] [--timeout 120] [--processes 0] [--seed 0]
                                        [--split stratified|hash]

Instances: ``benchmarks.philly.instance(n, k, seed)`` (Philly-like binding demands, about twice the capacity;
``none`` drops every demand). ``parts`` 0 = exact (``oef_coop.solve``), p > 0 = partitioned into p groups
(``partition_above=1``, seed 0). Every cell (one instance, one mode) runs in its own forked process with a
wall-clock limit (``--timeout``; a cell past it prints ``>T``), four solves in a row:

- ``cold``: no warm start; ``warm same``: the same problem seeded with the cold solve's ``warm`` (a round in
  which nothing changed); ``cold chg`` / ``warm chg``: 2 % of the tenants re-drawn (new speeds and demands,
  ``coop_warm.changed_philly``), solved cold and seeded with the first cold solve's ``warm``.

Loss columns (partitioned rows, against the exact cold solve of the same instance, when it finished):
``loss %``: 1 - total normalized throughput / the exact one. ``envy %``: the largest envy of a class below its
demand of the bundle of another class below its demand, S_l.x_i w_l/w_i - S_l.x_l, relative to S_l.x_l (the
set on which the exact solve is envy-free; the exact row shows its own value). ``SI viol``: classes whose throughput is below
the usable part (fastest first, within demand and type caps) of their weight share w_l/W of every type.
Seconds are wall seconds of ``oef_coop.solve`` on a shared 2-CPU machine (noisy).
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.coop_warm import changed_philly  # noqa: E402
from benchmarks.philly import instance  # noqa: E402
from slurm_fair.cli.table import render  # noqa: E402
from slurm_fair.policies import oef_coop  # noqa: E402
from slurm_fair.policies.common import best_gpus  # noqa: E402

SOLVES = ("cold", "warm same", "cold chg", "warm chg")


def problem(n: int, k: int, seed: int, demands: str):
    p = instance(n, k, seed)
    if demands == "none":
        p = drop_demands(p)
    return p


def drop_demands(p):
    return dataclasses.replace(p, tenants=tuple(dataclasses.replace(t, classes=tuple(
        dataclasses.replace(c, demand=None, type_demand=None) for c in t.classes)) for t in p.tenants))


def _cell(q, n, k, seed, demands, parts, processes, split):
    p = problem(n, k, seed, demands)
    p2 = changed_philly(instance(n, k, seed), 0.02, seed)
    if demands == "none":
        p2 = drop_demands(p2)
    kw = dict(partition_above=1, partition_parts=parts, processes=processes, partition_split=split) if parts else {}

    def timed(prob, warm=None):
        t = time.perf_counter()
        a = oef_coop.solve(prob, warm=warm, **kw)
        return a, time.perf_counter() - t

    a0, t = timed(p)
    q.put(("cold", t, a0.x))
    _, t = timed(p, a0.warm)
    q.put(("warm same", t, None))
    _, t = timed(p2)
    q.put(("cold chg", t, None))
    _, t = timed(p2, a0.warm)
    q.put(("warm chg", t, None))
    q.put(("done", 0.0, None))


def run_cell(n, k, seed, demands, parts, timeout, processes, split):
    """{solve: seconds} and the cold x (None when it did not finish in ``timeout``)."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    proc = ctx.Process(target=_cell, args=(q, n, k, seed, demands, parts, processes, split))
    proc.start()
    end = time.monotonic() + timeout
    times, x = {}, None
    while True:
        left = end - time.monotonic()
        if left <= 0:
            break
        try:
            name, t, val = q.get(timeout=left)
        except Exception:
            break
        if name == "done":
            break
        times[name] = t
        if name == "cold":
            x = val
    if proc.is_alive():
        proc.kill()
    proc.join()
    return times, x


def measures(p, x):
    """Total normalized throughput, largest relative envy of a class below its demand, SI violations."""
    vu = p.virtual_users()
    S, w = vu.speed, vu.weight
    own = (S * x).sum(axis=1)
    below = np.flatnonzero(x.sum(axis=1) < vu.demand - 1e-6)
    envy = 0.0
    if below.size > 1:
        U = S[below] @ x[below].T  # U[l, i] = S_l . x_i among the classes below their demand
        wb, ob = w[below], own[below]
        env = U * (wb[:, None] / wb[None, :]) - ob[:, None]
        np.fill_diagonal(env, -np.inf)
        envy = float(max(0.0, (env.max(axis=1) / np.maximum(ob, 1e-12)).max()))
    share = (w / w.sum())[:, None] * vu.capacity[None, :]
    si = np.array([float(S[i] @ best_gpus(S[i], share[i], vu.demand[i], vu.type_cap[i])) for i in range(vu.n)])
    viol = int(np.sum(own < si * (1 - 1e-6) - 1e-9))
    return float(own.sum()), envy, viol


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default="100,300,1000,2000")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--demands", default="none,total")
    ap.add_argument("--parts", default="0,2,4,8")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--processes", type=int, default=0)
    ap.add_argument("--split", choices=("stratified", "hash"), default="stratified")
    a = ap.parse_args()
    rows = []
    for n in (int(v) for v in a.n.split(",")):
        for demands in a.demands.split(","):
            p = problem(n, a.k, a.seed, demands)
            exact = None
            for parts in (int(v) for v in a.parts.split(",")):
                times, x = run_cell(n, a.k, a.seed, demands, parts, a.timeout, a.processes, a.split)
                cells = [f"{times[s]:.2f}" if s in times else f">{a.timeout:g}" for s in SOLVES]
                loss = envy = viol = "-"
                if x is not None:
                    tot, e, v = measures(p, x)
                    envy, viol = f"{100 * e:.2f}", str(v)
                    if parts == 0:
                        exact = tot
                    elif exact is not None:
                        loss = f"{100 * (1 - tot / exact):.3f}"
                row = [n, p.virtual_users().n, demands, "exact" if parts == 0 else f"k={parts}", *cells, loss, envy, viol]
                rows.append(row)
                print(" | ".join(str(c) for c in row), flush=True)
    print(render(["tenants", "classes", "demands", "mode", *SOLVES, "loss %", "envy %", "SI viol"], rows))


if __name__ == "__main__":
    main()
