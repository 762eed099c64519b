#!/usr/bin/env python3
"""The database after a simulated year of a 300-account site, with and without retention ([store] retention_days).

Usage: python3 benchmarks/retention.py [--days 365] [--accounts 300] [--active 60] [--retention 90] [--dir DIR]

Two SQLite databases (the daemon's schema, WAL, as the daemon opens them) get the same synthetic history, day
by day, at a site's rates: a round every 5 minutes (288 a day) writing what a round writes (its row with a
details JSON shaped like daemon/round.py's, shares for ``--active`` accounts x 2 classes x 4 GPU types,
placements per active account and type, a few applied limit changes, 2 events); ~2 000 jobs a day with a
PrologSlurmctld and an EpilogSlurmctld hook record each (the record JSON as the hooks write it); profile
reports from 10% of the jobs (3 each); 20 preemptions a day; 300 further events a day. One database is never
pruned; the other is pruned once a day as the daemon does (``Store.prune``, live jobs = the last day's). Rows
are written with executemany in one transaction per day (faster than the daemon's per-round writes; the
sizes are the same). Prints a table at checkpoints: file size (database + WAL), rows per table, the daily
prune's time, and, at the end, one first prune of the never-pruned database (a site that turns retention on
after a year) and its VACUUM.
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

from slurm_fair.store import Store  # noqa: E402

TYPES = ["a100", "v100", "p100", "k80"]
DAY = 86400.0
ROUNDS_PER_DAY = 288
JOBS_PER_DAY = 2000
TABLES = ("rounds", "shares", "placements", "applied", "events", "job_records", "profile_reports", "preemptions")
CHECKPOINTS = (1, 30, 90, 180, 365)


def details(accounts: list[str], rng: random.Random) -> str:
    """A round's details JSON with the keys and shapes daemon/round.py's _details writes."""
    per_type = lambda: {t: round(rng.random() * 4, 6) for t in TYPES}  # noqa: E731
    per_type_i = lambda: {t: rng.randint(0, 8) for t in TYPES}  # noqa: E731
    classes = {a: {f"cls{c}": {"gpus": 4, "pending_gpus": 2, "running_gpus": 2, "min_pending": 1, "types": None,
                               "throughput": per_type(), "source": {t: "shipped" for t in TYPES},
                               "ideal": per_type()} for c in range(2)} for a in accounts}
    d = {"policy": "oef-coop", "slurm_version": "22.05.8", "capacity": {t: 64 for t in TYPES},
         "accounts": accounts, "tenants": {a: a for a in accounts}, "weights": {a: 1.0 for a in accounts}}
    for k in ("ideal", "deviation_before", "deviations"):
        d[k] = {a: per_type() for a in accounts}
    for k in ("real", "extra", "limits", "claims", "lendable", "limits_before"):
        d[k] = {a: per_type_i() for a in accounts}
    d.update({"lend": True, "min_gpus": {a: 1 for a in accounts}, "demand": {a: 8 for a in accounts},
              "pending_gpus": {a: 2 for a in accounts}, "pending_jobs": {a: 1 for a in accounts},
              "in_use": {a: 4 for a in accounts}, "classes": classes, "deficits": {a: 0.0 for a in accounts},
              "limit_changes": {}, "left_alone": [], "profile_reports": {"accepted": 1, "rejected": 0, "refused": 0}})
    return json.dumps(d)


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


def write_day(store: Store, day: int, t0: float, accounts: list[str], active: int, rng: random.Random,
              next_job: int) -> tuple[int, list[int]]:
    """One day of history; returns (next job id, the day's job ids)."""
    db = store.db
    start = t0 + day * DAY
    with store.transaction():
        for k in range(ROUNDS_PER_DAY):
            t = start + k * 300.0
            act = rng.sample(accounts, active)
            rid = db.conn.execute(
                "insert into rounds (started, finished, policy, solver, status, solve_seconds, total_throughput, "
                "n_accounts, n_changes, message, details) values (?, ?, 'oef-coop', '', 'ok', 0.2, 100.0, ?, 3, '', ?)",
                [t, t + 2, active, details(act, rng)]).lastrowid
            insert(db, "shares", [{"round_id": rid, "account": a, "class": f"cls{c}", "gpu_type": g,
                                   "ideal": rng.random(), "real": None} for a in act for c in range(2) for g in TYPES])
            insert(db, "placements", [{"round_id": rid, "account": a, "gpu_type": g, "ideal": rng.random(),
                                       "deviation_before": rng.random(), "real": 1, "limit": 2}
                                      for a in act for g in TYPES])
            insert(db, "applied", [{"round_id": rid, "account": rng.choice(act), "key": rng.choice(TYPES),
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
    a = ap.parse_args()
    rng = random.Random(21)
    accounts = [f"acct{i:04d}" for i in range(a.accounts)]
    t0 = 1.7e9
    checkpoints = sorted({d for d in CHECKPOINTS if d <= a.days} | {a.days})
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        pa, pb = Path(d) / "never-pruned.sqlite", Path(d) / "pruned.sqlite"
        sa, sb = Store(pa), Store(pb)
        print(f"# {a.accounts} accounts ({a.active} with demand per round), {ROUNDS_PER_DAY} rounds/day, "
              f"{JOBS_PER_DAY} jobs/day, retention {a.retention:g} days; sizes = database + WAL")
        print(f"{'day':>4} {'never pruned MB':>15} {'pruned MB':>9} {'prune s':>7} {'write s/day':>11}  "
              + " ".join(f"{t:>15}" for t in TABLES) + "   (rows: never pruned / pruned)")
        nj, write_s, prune_s = 1, 0.0, 0.0
        for day in range(a.days):
            st = time.perf_counter()
            state = rng.getstate()
            nj2, ids = write_day(sa, day, t0, accounts, a.active, rng, nj)
            rng.setstate(state)
            write_day(sb, day, t0, accounts, a.active, rng, nj)
            nj = nj2
            write_s = (time.perf_counter() - st) / 2
            now = t0 + (day + 1) * DAY
            tp = time.perf_counter()
            sb.prune(a.retention, now=now, live_jobs=ids[-50:])
            prune_s = time.perf_counter() - tp
            if day + 1 in checkpoints:
                ra, rb = rows(sa), rows(sb)
                print(f"{day + 1:>4} {size_mb(pa):>15.1f} {size_mb(pb):>9.1f} {prune_s:>7.2f} {write_s:>11.2f}  "
                      + " ".join(f"{f'{ra[t]}/{rb[t]}':>15}" for t in TABLES), flush=True)
        for s in (sa, sb):
            s.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        tp = time.perf_counter()
        got = sa.prune(a.retention, now=t0 + a.days * DAY, live_jobs=[])
        first = time.perf_counter() - tp
        sa.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        mean = (sb.db.execute("select avg(length(details)) from rounds").fetchone()[0],
                sb.db.execute("select avg(length(data)) from (select data from job_records limit 1000)").fetchone()[0])
        print(f"\nmean round details JSON {mean[0] / 1e3:.1f} kB, hook record JSON {mean[1] / 1e3:.2f} kB")
        print(f"first prune of the never-pruned database after {a.days} days: {first:.1f} s, rows deleted "
              + ", ".join(f"{t} {n}" for t, n in got.items()) + f"; file then {size_mb(pa):.1f} MB")
        tv = time.perf_counter()
        sa.db.execute("VACUUM")
        sa.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        print(f"VACUUM: {time.perf_counter() - tv:.1f} s, file then {size_mb(pa):.1f} MB "
              f"(the daily-pruned database: {size_mb(pb):.1f} MB)")
        sa.close()
        sb.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
