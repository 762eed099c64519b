"""Measuring helpers for ``benchmarks/site_round.py`` (not a benchmark on its own).

* :func:`sdiag` / :func:`sdiag_diff`: slurmctld's RPC counters (``sdiag``: by message type and by user).
* :func:`cpu_seconds`: CPU time (user + system) of the testbed's daemons, from ``/proc/<pid>/stat``.
* :class:`CountingCli`: the CLI backend, logging every Slurm command it runs with its kind and wall time.
* :func:`child_main` (``python benchmarks/site_probe.py --out OUT.json ...``): runs daemon rounds in a fresh
  process, as ``slurm-fair daemon`` does (one Cluster, one Store, rounds one after the other), and writes per
  round the phase times, the Slurm calls, the sdiag and CPU deltas of the round's window and the process's
  peak RSS. Run as a child so the peak RSS is the daemon's alone.

Every Slurm call is an argument list with a timeout; nothing is built from a shell string.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from collections import Counter, defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

_RPC_RE = re.compile(r"^\s+(\S+)\s+\(\s*(\d+)\)\s+count:(\d+)\s+ave_time:(\d+)\s+total_time:(\d+)")
DAEMONS = ("slurmctld", "slurmdbd", "mariadbd")
CLK_TCK = os.sysconf("SC_CLK_TCK")
VARIANTS: dict[str, dict[str, Any]] = {"default": {}, "lend": {"lend": True}, "nolend": {"lend": False}}


# ------------------------------------------------------------------------------------------------ sdiag
def sdiag(timeout: float = 60) -> dict[str, Any]:
    """``sdiag`` parsed: {"types": {name: [count, total_us]}, "users": {...}, "taken": unix s}. The sdiag call
    itself is one REQUEST_STATS_INFO RPC, counted in its own output."""
    r = subprocess.run(["sdiag"], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"sdiag exited {r.returncode}: {r.stderr.strip()[:300]}")
    return {**parse_sdiag(r.stdout), "taken": time.time()}


def parse_sdiag(text: str) -> dict[str, Any]:
    """The RPC tables of sdiag's output: {"types": {name: [count, total_us]}, "users": {name: [...]}}."""
    out: dict[str, Any] = {"types": {}, "users": {}}
    section = None
    for line in text.splitlines():
        if line.startswith("Remote Procedure Call statistics by message type"):
            section = "types"
        elif line.startswith("Remote Procedure Call statistics by user"):
            section = "users"
        elif line.startswith("Pending RPC"):
            section = None
        elif section:
            m = _RPC_RE.match(line)
            if m:
                out[section][m.group(1)] = [int(m.group(3)), int(m.group(5))]
    return out


def sdiag_diff(before: Mapping[str, Any], after: Mapping[str, Any], own_calls: int = 1) -> dict[str, Any]:
    """RPCs between two sdiag snapshots: {"types": {name: [count, total_us]}, "users": ..., "rpcs": n}, the
    ``own_calls`` REQUEST_STATS_INFO of the later sdiag (and any in between that the caller made) removed. A
    counter that went down (sdiag --reset, a slurmctld restart) counts from zero."""
    out: dict[str, Any] = {}
    for sec in ("types", "users"):
        d: dict[str, list[int]] = {}
        for name, (c1, t1) in after[sec].items():
            c0, t0 = before[sec].get(name, [0, 0])
            if c1 < c0:
                c0, t0 = 0, 0
            if c1 - c0 > 0:
                d[name] = [c1 - c0, t1 - t0]
        out[sec] = d
    st = out["types"].get("REQUEST_STATS_INFO")
    if st:
        st[0] -= own_calls
        if st[0] <= 0:
            del out["types"]["REQUEST_STATS_INFO"]
    out["rpcs"] = sum(c for c, _ in out["types"].values())
    out["total_us"] = sum(t for _, t in out["types"].values())
    return out


# ------------------------------------------------------------------------------------------------ CPU
def daemon_pids(testbed: str) -> dict[str, int]:
    """The testbed's daemons that run now: name -> pid (from ``<testbed>/run/<name>.pid``)."""
    pids = {}
    for name in DAEMONS:
        try:
            pid = int(Path(testbed, "run", f"{name}.pid").read_text().split()[0])
            if Path(f"/proc/{pid}/comm").read_text().strip() == name:
                pids[name] = pid
        except (OSError, ValueError, IndexError):
            pass
    return pids


def cpu_seconds(pids: Mapping[str, int]) -> dict[str, float]:
    """utime + stime of each process, in seconds."""
    out = {}
    for name, pid in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[name] = (int(fields[11]) + int(fields[12])) / CLK_TCK
        except (OSError, IndexError, ValueError):
            out[name] = float("nan")
    return out


def probe(pids: Mapping[str, int]) -> dict[str, Any]:
    """One measuring point: sdiag, the daemons' CPU seconds, the wall clock and the 1-min load."""
    return {"sdiag": sdiag(), "cpu": cpu_seconds(pids), "t": time.monotonic(), "load": os.getloadavg()[0]}


def window(p0: Mapping[str, Any], p1: Mapping[str, Any], own_calls: int = 1) -> dict[str, Any]:
    """What happened between two probes: seconds, RPCs, CPU seconds per daemon, load at the end."""
    return {"seconds": p1["t"] - p0["t"], "sdiag": sdiag_diff(p0["sdiag"], p1["sdiag"], own_calls),
            "cpu": {k: p1["cpu"][k] - p0["cpu"].get(k, 0.0) for k in p1["cpu"]}, "load": p1["load"]}


# ------------------------------------------------------------------------------------------------ calls
def call_kind(argv: list[str]) -> str:
    """A Slurm command by what it does: ``squeue``, ``sacctmgr show``, ``scontrol update`` …"""
    prog = argv[0]
    if prog in ("sacctmgr", "scontrol"):
        words = [a for a in argv[1:] if not a.startswith("-")]
        return f"{prog} {words[0]}" if words else f"{prog} {argv[1] if len(argv) > 1 else ''}".strip()
    return prog


def _counting_cli() -> type:
    from slurm_fair.cluster.cli import CliCluster

    class CountingCli(CliCluster):
        """CliCluster that logs (kind, seconds, ok) per Slurm command and keeps the last snapshot. The four
        observation commands run concurrently: each one's seconds run from its start to when its output was
        read."""

        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, **kw)
            self.log: list[tuple[str, float, bool]] = []
            self._started: dict[int, float] = {}
            self.last_snapshot = None
            self.snapshot_seconds = 0.0

        def _start(self, argv):  # type: ignore[no-untyped-def]
            t = time.perf_counter()
            proc = super()._start(argv)
            self._started[id(proc)] = t
            return proc

        def _finish(self, argv, proc, deadline):  # type: ignore[no-untyped-def]
            ok = False
            try:
                out = super()._finish(argv, proc, deadline)
                ok = True
                return out
            finally:
                t0 = self._started.pop(id(proc), time.perf_counter())
                self.log.append((call_kind(list(argv)), time.perf_counter() - t0, ok))

        def snapshot(self):  # type: ignore[no-untyped-def]
            t = time.perf_counter()
            try:
                self.last_snapshot = super().snapshot()
                return self.last_snapshot
            finally:
                self.snapshot_seconds += time.perf_counter() - t

    return CountingCli


def calls_by_kind(log: list[tuple[str, float, bool]]) -> dict[str, list[float]]:
    """{kind: [count, seconds, failed]}"""
    out: dict[str, list[float]] = {}
    for kind, sec, ok in log:
        row = out.setdefault(kind, [0, 0.0, 0])
        row[0] += 1
        row[1] += sec
        row[2] += 0 if ok else 1
    return out


# ------------------------------------------------------------------------------------------------ bands
def bands(factors: Mapping[int, int], account_of: Mapping[int, str]) -> dict[str, Any]:
    """How SiteFactors split the accounts: distinct values, accounts, and accounts whose [min, max] range meets
    another account's (0 = every account has a band of its own)."""
    by: dict[str, list[int]] = defaultdict(list)
    for j, v in factors.items():
        a = account_of.get(j)
        if a is not None:
            by[a].append(v)
    ranges = sorted((min(v), max(v), a) for a, v in by.items())
    overlapping: set[str] = set()
    for i in range(1, len(ranges)):
        lo, _hi, a = ranges[i]
        j = i - 1
        while j >= 0 and ranges[j][1] >= lo:  # sorted by min: earlier ranges that reach this one
            overlapping.update((a, ranges[j][2]))
            j -= 1
    return {"jobs": sum(len(v) for v in by.values()), "accounts": len(by),
            "distinct_values": len({x for v in by.values() for x in v}),
            "accounts_overlapping": len(overlapping),
            "min": min((r[0] for r in ranges), default=None), "max": max((r[1] for r in ranges), default=None)}


# ------------------------------------------------------------------------------------------------ phases
class Phases:
    """Wall time per round phase, by wrapping the functions ``daemon/round.py`` calls (benchmark only)."""

    def __init__(self) -> None:
        self.t: Counter[str] = Counter()
        self._depth = 0

    def wrap(self, owner: Any, name: str, bucket: str) -> None:
        """Time ``owner.name`` into ``bucket``, unless it runs inside another timed call (counted there)."""
        fn = getattr(owner, name)

        def timed(*a: Any, **kw: Any) -> Any:
            if self._depth:
                return fn(*a, **kw)
            self._depth += 1
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.t[bucket] += time.perf_counter() - t
                self._depth -= 1

        setattr(owner, name, timed)

    def wrap_store(self, store: Any) -> None:
        """Recording: the store writes the round makes (row first, plan and details in one transaction)."""
        for name in ("begin_round", "finish_round", "record_site_limits"):
            self.wrap(store, name, "record")
        inner = store.transaction

        @contextmanager
        def transaction() -> Iterator[Any]:
            nested = self._depth
            self._depth += 1
            t = time.perf_counter()
            try:
                with inner() as s:
                    yield s
            finally:
                self._depth -= 1
                if not nested:
                    self.t["record"] += time.perf_counter() - t

        store.transaction = transaction


def install_phases(ph: Phases) -> None:
    from slurm_fair.daemon import type_map_file
    from slurm_fair.daemon.preemption import carry
    from slurm_fair.daemon import round as R

    ph.wrap(R, "mark_interrupted", "record")
    ph.wrap(R, "ingest_round", "ingest")
    ph.wrap(R, "harvest", "harvest")
    ph.wrap(R, "compute", "solve+plan")
    ph.wrap(R, "round_details", "details")
    ph.wrap(R, "apply_limits", "apply limits")
    ph.wrap(R, "apply_factors", "apply SiteFactor")
    ph.wrap(R, "_retype", "retype")
    ph.wrap(type_map_file, "publish_type_map", "type map")
    ph.wrap(carry, "run", "preemption")


# ------------------------------------------------------------------------------------------------ child
def child_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="run daemon rounds and measure them (used by site_round.py)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", required=True, help="JSON: the config document (TOML tables as objects)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per variant")
    ap.add_argument("--variants", default="default",
                    help="comma list: default (the config as is), lend, nolend (limits.lend); one store for all")
    ap.add_argument("--polls", type=int, default=3, help="daemon polls between rounds to time after the rounds")
    ap.add_argument("--gap", type=float, default=5.0)
    ap.add_argument("--settle", type=float, default=2.0)
    ap.add_argument("--testbed", required=True)
    a = ap.parse_args(argv)
    t = time.perf_counter()
    from slurm_fair import config
    from slurm_fair.daemon.round import run_round
    from slurm_fair.records import RoundDetails
    from slurm_fair.store import Store

    import_s = time.perf_counter() - t
    doc = json.loads(Path(a.config).read_text())
    variants = [v for v in a.variants.split(",") if v]
    cfgs = {}
    for v in variants:
        if v not in VARIANTS:
            raise SystemExit(f"unknown variant {v!r} (known: {', '.join(VARIANTS)})")
        d = json.loads(json.dumps(doc))
        d.setdefault("limits", {}).update(VARIANTS[v])
        cfgs[v] = config.from_dict(d, source=f"site_round benchmark ({v})")
    cfg = cfgs[variants[0]]
    cluster = _counting_cli()(timeout=float(cfg.cluster.timeout))
    store = Store(cfg.database_path)
    ph = Phases()
    install_phases(ph)
    ph.wrap_store(store)
    pids = daemon_pids(a.testbed)
    rounds = []
    res = None
    try:
        plan = [(v, r) for v in variants for r in range(1, a.rounds + 1)]
        for i, (variant, r) in enumerate(plan):
            cfg = cfgs[variant]
            ph.t.clear()
            cluster.log.clear()
            cluster.snapshot_seconds = 0.0
            p0 = probe(pids)
            res = run_round(cluster, store, cfg)
            wall = time.monotonic() - p0["t"]
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            time.sleep(a.settle)  # slurmdbd pushes the new limits to slurmctld after sacctmgr returns
            p1 = probe(pids)
            snap = cluster.last_snapshot
            account_of = {j.job_id: j.account for j in snap.jobs} if snap else {}
            c = res.decisions
            phases = dict(ph.t)
            phases["observe"] = cluster.snapshot_seconds
            phases["solve"] = res.solve_seconds
            if "solve+plan" in phases:
                phases["plan"] = phases.pop("solve+plan") - res.solve_seconds
            d = res.details or RoundDetails()
            rounds.append({
                "round": r, "variant": variant, "status": res.status, "message": res.message, "seconds": res.seconds, "wall": wall,
                "phases": phases, "calls": calls_by_kind(cluster.log), "window": window(p0, p1),
                "peak_rss_kb": rss,
                "pending_records": sum(1 for j in snap.jobs if j.pending) if snap else None,
                "running_records": sum(1 for j in snap.jobs if j.running) if snap else None,
                "accounts_seen": len(snap.accounts) if snap else None,
                "managed_accounts": res.n_accounts,
                "limit_accounts": len(res.limit_changes),
                "limit_keys": sum(len(v) for v in res.limit_changes.values()),
                "factor_changes": len(res.factor_changes),
                "factors_deferred": d.site_factor_changes_deferred,
                "factors_planned": d.site_factors_set,
                "bands_planned": bands(c.factors, account_of) if c is not None else None,
                "type_map_lines": _lines(cfg.type_map_path),
            })
            if i < len(plan) - 1:
                time.sleep(a.gap)
        polls = measure_polls(cluster, res, cfg, pids, a.polls, a.gap, a.settle)
    finally:
        store.close()
    Path(a.out).write_text(json.dumps({"import_s": import_s, "rounds": rounds, "polls": polls}, indent=1))
    return 0


def measure_polls(cluster: Any, res: Any, cfg: Any, pids: Mapping[str, int], n: int, gap: float,
                  settle: float) -> list[dict[str, Any]]:
    """What the daemon does between rounds (``service.serve``): every max(MIN_POLL, 3 × its own time) s a
    snapshot, the type map refreshed from it, the early-round triggers checked. Timed ``n`` times after the
    last round, with its RPCs and the daemons' CPU."""
    from slurm_fair.daemon import plan as P
    from slurm_fair.daemon.service import MIN_POLL, refresh_type_map

    last_demand = dict(res.plan.demand) if res is not None and res.plan is not None else {}
    out = []
    for _ in range(n):
        time.sleep(gap)
        cluster.log.clear()
        p0 = probe(pids)
        t = time.perf_counter()
        snap = cluster.snapshot()
        refresh_type_map(res, snap, cfg)
        P.early_triggers(snap, last_demand, cfg)
        took = time.perf_counter() - t
        time.sleep(settle)
        out.append({"seconds": took, "interval": max(MIN_POLL, 3 * took), "calls": calls_by_kind(cluster.log),
                    "window": window(p0, probe(pids))})
    return out


def _lines(path: Path | None) -> dict[str, int] | None:
    try:
        text = Path(path).read_text() if path else None
    except OSError:
        return None
    if text is None:
        return None
    return {"lines": sum(1 for ln in text.splitlines() if ln.strip() and not ln.startswith("#")),
            "bytes": len(text.encode())}


if __name__ == "__main__":
    sys.exit(child_main())
