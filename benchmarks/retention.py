#!/usr/bin/env python3
"""The database after a simulated year of a 300-account site, with and without retention ([store] retention_days).

Usage: python3 benchmarks/retention.py [--days 365] [--accounts 300] [--active 60] [--retention 90] [--dir DIR]
                                       [--only-pruned]

Two SQLite databases (the daemon's schema, WAL, as the daemon opens them) get the same history, day by day, at a
site's rates. Rounds: one every 5 minutes (288 a day), each writing what a real round writes. The shapes come
from one real round (:func:`slurm_fair.daemon.round.run_round` on the simulator, :mod:`slurm_fair.sim.cluster`,
with ``--accounts`` accounts, ``--active`` of them with pending jobs of 2 classes, 4 GPU types): its details
JSON (reused for every round), its shares (active accounts x classes x types) and its placements (every
account x type), plus 3 applied limit changes and 2 events. Jobs: ~2 000 a day, each with a PrologSlurmctld and
an EpilogSlurmctld hook record (the record JSON as the hooks write it); profile reports from 10% of the jobs
(3 each); 20 preemptions and 300 further events a day. One database is never pruned; the other is pruned once
a day as the daemon does (``Store.prune``, live jobs = 50 of the last day's). Rows are written with
executemany, one transaction per day (faster than the daemon's per-round writes; the sizes are the same).
Prints a table at checkpoints: file size (database + WAL), rows per table, the daily prune's time and the time
to write a day; at the end, the first prune of the never-pruned database (a site that turns retention on after
a year) and a VACUUM. ``--only-pruned`` writes only the pruned database (a year of the never-pruned one at
these rates is ~36 GB: run it for fewer days and extrapolate; growth is linear by construction).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurm_fair.store import Store, as_row  # noqa: E402

TYPES = ["a100", "v100", "p100", "k80"]
DAY = 86400.0
ROUNDS_PER_DAY = 288
JOBS_PER_DAY = 2000
TABLES = ("rounds", "shares", "placements", "applied", "events", "job_records", "profile_reports", "preemptions")
CHECKPOINTS = (1, 30, 90, 180, 365)


def real_round(n_accounts: int, active: int) -> tuple[str, list[dict], list[dict]]:
    """(details JSON, share rows, placement rows) of one real round (module docstring)."""
    from types import SimpleNamespace as NS

    from slurm_fair import config, profiles
    from slurm_fair.daemon.round import run_round
    from slurm_fair.sim.cluster import SimCluster

    thr: dict[str, dict[str, float]] = {}
    for r in profiles.load_shipped():
        thr.setdefault(r["class"], {})[r["gpu_type"]] = r["throughput"]
    classes = [c for c, v in sorted(thr.items()) if len(v) >= 3][:2]
    for c in classes:  # a fourth type (the shipped tables have three): as fast as the fastest
        thr[c]["a100"] = max(thr[c].values())
    nodes = {f"n{i:03d}": {t: 8} for i, t in enumerate(TYPES * 8)}
    accounts = [f"acct{i:04d}" for i in range(n_accounts)]
    jobs = [NS(id=f"{a}-{cls}-{k}", submit=0.0, account=a, cls=cls, gpus=1, work=1e9, gpu_type=None)
            for a in accounts[:active] for cls in classes for k in range(3)]
    sim = SimCluster(nodes, {a: 1 for a in accounts}, thr, jobs, epoch=1.7e9)
    sim.advance(1.0)
    with Store(":memory:") as st:
        res = run_round(sim, st, config.from_dict({"daemon": {"dry_run": False}}))
        if res.status != "ok":
            raise SystemExit(f"the template round failed: {res.status} {res.message}")
        rid = res.round_id
        details = st.db.execute("select details from rounds where id = ?", [rid]).fetchone()[0]
        return details, [as_row(s) for s in st.shares(rid)], [as_row(p) for p in st.placements(rid)]


def hook_record(job_id: int, event: str, t: float, account: str, rng: random.Random) -> dict:
    ctx = "prolog_slurmctld" if event == "start" else "epilog_slurmctld"
    data = {"v": 1, "event": event, "context": ctx, "job_id": job_id, "restart_count": 0, "time": t,
            "start_time": t, "end_time": t + 3600 if event == "end" else None, "submit_time": t - 600,
            "account": account, "user": f"user{rng.randint(0, 999)}", "partition": "gpu", "class": "cls0",
            "job_name": f"train-{rng.randint(0, 10**6)}", "gpus": {rng.choice(TYPES): 2}, "gpu_count": 2,
            "gpu_info": "", "exit_code": 0, "exit_signal": 0, "exit_status": 0, "derived_exit_code": "0:0",
            "node": "", "nodelist": f"gpu-{rng.randint(1, 200):03d}", "job_state": "COMPLETED" if event == "end" else "RUNNING",
            "fair_tokens": ""}
    row = {k: data.get(k) for k in ("job_id", "restart_count", "event", "context", "node", "time", "start_time",
                                    "end_time", "account", "user", "partition", "class", "job_name", "gpu_count",
                                    "gpu_info", "exit_code", "exit_signal", "exit_status", "derived_exit_code",
                                    "submit_time")}
    row["gpus"] = json.dumps(data["gpus"])
    row["file"] = f"{job_id}.0.{event}.{ctx}.json"
    row["ingested"] = t + 5
    row["data"] = json.dumps(data)
    return row


def insert(db, table: str, rows: list[dict]) -> None:
    if rows:
        cols = list(rows[0])
        db.conn.executemany(f'insert into "{table}" ({", ".join(chr(34) + c + chr(34) for c in cols)}) '
                            f'values ({", ".join("?" for _ in cols)})', [[r[c] for c in cols] for r in rows])


def write_day(store: Store, day: int, t0: float, accounts: list[str], template: tuple[str, list[dict], list[dict]],
              rng: random.Random, next_job: int) -> tuple[int, list[int]]:
    """One day of history; returns (next job id, the day's job ids)."""
    db = store.db
    start = t0 + day * DAY
    details, shares, places = template
    with store.transaction():
        for k in range(ROUNDS_PER_DAY):
            t = start + k * 300.0
            rid = db.conn.execute(
                "insert into rounds (started, finished, policy, solver, status, solve_seconds, total_throughput, "
                "n_accounts, n_changes, message, details) values (?, ?, 'oef-coop', '', 'ok', 0.2, 100.0, ?, 3, '', ?)",
                [t, t + 2, len(accounts), details]).lastrowid
            insert(db, "shares", [{**r, "round_id": rid, "ideal": rng.random()} for r in shares])
            insert(db, "placements", [{**r, "round_id": rid, "ideal": rng.random()} for r in places])
            insert(db, "applied", [{"round_id": rid, "account": rng.choice(accounts), "key": rng.choice(TYPES),
                                    "old": 1, "new": 2, "time": t} for _ in range(3)])
            insert(db, "events", [{"time": t, "kind": "round", "round_id": rid, "job_id": None, "account": None,
                                   "message": "started", "data": None},
                                  {"time": t + 2, "kind": "round", "round_id": rid, "job_id": None, "account": None,
                                   "message": "finished", "data": None}])
        ids = list(range(next_job, next_job + JOBS_PER_DAY))
        recs = []
        for j in ids:
            t = start + rng.random() * DAY
            a = rng.choice(accounts)
            recs += [hook_record(j, "start", t, a, rng), hook_record(j, "end", min(t + 3600, start + DAY - 1), a, rng)]
        insert(db, "job_records", recs)
        insert(db, "profile_reports", [{"job_id": j, "n": n, "time": start + rng.random() * DAY, "round_id": None,
                                        "account": rng.choice(accounts), "class": "cls0", "gpu_type": "v100",
                                        "nvml": None, "throughput": 10.0, "source": "harvested",
                                        "status": "accepted", "message": ""}
                                       for j in ids[: JOBS_PER_DAY // 10] for n in (1, 2, 3)])
        insert(db, "preemptions", [{"job_id": j, "account": rng.choice(accounts), "user": "u", "gpu_type": "v100",
                                    "gpus": 2, "signal": "USR1", "reason": "over its share", "state": "requeued",
                                    "round_id": None, "created": start + 100, "signalled_at": start + 100,
                                    "requeue_at": start + 220, "requeued_at": start + 220, "finished_at": start + 220,
                                    "steps": "[]", "target_type": None} for j in ids[:20]])
        insert(db, "events", [{"time": start + rng.random() * DAY, "kind": "profile-report-refused",
                               "round_id": None, "job_id": rng.choice(ids), "account": rng.choice(accounts),
                               "message": "job 1: throughput of class 'x' on GPU type 'v100' ... outside", "data": "{}"}
                              for _ in range(300)])
    return next_job + JOBS_PER_DAY, ids


def size_mb(path: Path) -> float:
    return sum(os.path.getsize(p) for p in (path, Path(str(path) + "-wal")) if p.exists()) / 1e6


def rows(store: Store) -> dict[str, int]:
    return {t: store.db.execute(f"select count(*) from {t}").fetchone()[0] for t in TABLES}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--accounts", type=int, default=300)
    ap.add_argument("--active", type=int, default=60, help="accounts with demand in each round")
    ap.add_argument("--retention", type=float, default=90.0, help="retention_days of the pruned database")
    ap.add_argument("--dir", default=None, help="folder for the databases (default: a temporary folder)")
    ap.add_argument("--only-pruned", action="store_true", help="write only the daily-pruned database")
    a = ap.parse_args()
    rng = random.Random(21)
    accounts = [f"acct{i:04d}" for i in range(a.accounts)]
    t0 = 1.7e9
    checkpoints = sorted({d for d in CHECKPOINTS if d <= a.days} | {a.days})
    template = real_round(a.accounts, a.active)
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        pa, pb = Path(d) / "never-pruned.sqlite", Path(d) / "pruned.sqlite"
        sa, sb = (None if a.only_pruned else Store(pa)), Store(pb)
        print(f"# {a.accounts} accounts ({a.active} with demand per round), {ROUNDS_PER_DAY} rounds/day of "
              f"{len(template[1])} shares, {len(template[2])} placements and {len(template[0]) / 1e3:.0f} kB of "
              f"details (a real round's), {JOBS_PER_DAY} jobs/day, retention {a.retention:g} days; "
              "sizes = database + WAL")
        print(f"{'day':>4} {'never pruned MB':>15} {'pruned MB':>9} {'prune s':>7} {'write s/day':>11}  "
              + " ".join(f"{t:>15}" for t in TABLES) + "   (rows: never pruned / pruned)")
        nj = 1
        for day in range(a.days):
            st = time.perf_counter()
            state = rng.getstate()
            nj2, ids = write_day(sb, day, t0, accounts, template, rng, nj)
            write_s = time.perf_counter() - st
            if sa is not None:
                rng.setstate(state)
                write_day(sa, day, t0, accounts, template, rng, nj)
            nj = nj2
            now = t0 + (day + 1) * DAY
            tp = time.perf_counter()
            sb.prune(a.retention, now=now, live_jobs=ids[-50:])
            prune_s = time.perf_counter() - tp
            if day + 1 in checkpoints:
                rb = rows(sb)
                ra = rows(sa) if sa is not None else {t: "-" for t in TABLES}
                big = f"{size_mb(pa):>15.1f}" if sa is not None else f"{'-':>15}"
                print(f"{day + 1:>4} {big} {size_mb(pb):>9.1f} {prune_s:>7.2f} {write_s:>11.2f}  "
                      + " ".join(f"{f'{ra[t]}/{rb[t]}':>15}" for t in TABLES), flush=True)
        sb.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        mean = sb.db.execute("select avg(length(data)) from (select data from job_records limit 1000)").fetchone()[0]
        print(f"\nhook record JSON {mean / 1e3:.2f} kB; the daily-pruned database after {a.days} days, WAL "
              f"checkpointed: {size_mb(pb):.1f} MB")
        if sa is not None:
            sa.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            before = size_mb(pa)
            tp = time.perf_counter()
            got = sa.prune(a.retention, now=t0 + a.days * DAY, live_jobs=[])
            first = time.perf_counter() - tp
            sa.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            print(f"never-pruned database after {a.days} days: {before:.1f} MB ({before / a.days:.1f} MB/day); its "
                  f"first prune: {first:.1f} s, rows deleted " + ", ".join(f"{t} {n}" for t, n in got.items())
                  + f"; file then {size_mb(pa):.1f} MB")
            tv = time.perf_counter()
            sa.db.execute("VACUUM")
            sa.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            print(f"VACUUM: {time.perf_counter() - tv:.1f} s, file then {size_mb(pa):.1f} MB")
            sa.close()
        sb.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
