#!/usr/bin/env python3
"""Database growth and round time under issue 30's two floods and issue 41's GPU report flood, on the daemon's own round code.

Usage: python3 benchmarks/flood_growth.py [--rounds 30] [--flood-jobs 10000] [--reports 20000] [--policy oef-coop]

Four runs of :func:`slurm_fair.daemon.round.run_round` (preemption off, limits applied to the simulated cluster)
on :class:`slurm_fair.sim.cluster.SimCluster` (16 K80 + 16 P100 + 16 V100, every GPU held by long jobs of three
accounts, each with pending jobs of two classes), one round every 300 s of simulated time, each with a new
database; the four run interleaved, round by round (so whatever else loads the machine hits all three alike),
for ``--rounds`` rounds or as many as the report flood needs to drain, whichever is more:

* ``quiet``: as above, plus ``--flood-jobs`` pending 1-GPU jobs of an account ``flood`` under one class name;
* ``rename flood``: the same jobs, every one under a new class name (``class=`` in its comment) before every
  round, as a user renaming 10 000 pending jobs would (issue 30: 9 982 ``class-folded`` events a round);
* ``report flood``: the quiet run plus ``--reports`` EpilogSlurmctld records of CPU-only jobs of ``flood``
  with a ``fair:tput`` report each (issue 30: the first harvest took 60 s), written to the hooks' spool as the
  hook writes them (``jobrecord.write_record``; Slurm allocated them no GPU: ``gpu_info`` ``scontrol
  AllocTRES``) before the first round; the rounds ingest them (a CPU-only record is counted and removed, not
  stored: ``daemon/ingest.py``), and a round judges at most ``MAX_REPORTS_PER_ROUND`` reports of stored ones;
* ``gpu report flood`` (issue 41): the same number of records, of 1-GPU jobs (Slurm allocated each a V100), each
  with a plausible report under one of 400 class names, so every record is stored and its report judged; after
  round ``--genuine-at`` one genuine end record of ``acct_a`` (a later job) is written to the spool, and the
  rounds until its report is taken are printed (goal: within 3 rounds; the harvest fair-queues per account).

Printed per run: the database's growth (file + WAL) over the rounds and per day (× 288 / rounds: a day of
5-minute rounds; the report flood's records are a one-off of that day, so its day is the growth over the
rounds that drained them plus the rest of the day at the quiet run's rate), rows added to the tables that grew,
and the median and worst round time, the median CPU time of a round in this process (what other processes on a
shared machine do not change), and the median over rounds of a round's CPU time over the quiet run's same round;
the goal (issue 30): ≤ 10 MB a day, and no round slower by more than 10 % than the quiet run's median. Times include the simulated cluster's snapshot of 10 000 jobs, but not the time the
rename flood's snapshot spends giving the 10 000 jobs their new names (``Renaming.renaming_s`` and
``renaming_cpu``: in Slurm the users rename them between rounds, and squeue reads a renamed job as fast as any
other).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_fair import config, jobrecord  # noqa: E402
from slurm_fair.cli.table import render  # noqa: E402
from slurm_fair.daemon.harvest import MAX_REPORTS_PER_ROUND  # noqa: E402
from slurm_fair.daemon.round import run_round  # noqa: E402
from slurm_fair.sim.cluster import SimCluster, cluster_spec  # noqa: E402
from slurm_fair.sim.traces import TraceJob  # noqa: E402
from slurm_fair.store import Store  # noqa: E402

THROUGHPUT = {"cnn": {"k80": 1.0, "p100": 3.0, "v100": 5.0}, "rnn": {"k80": 1.0, "p100": 2.0, "v100": 2.5},
              "flood": {"k80": 1.0, "p100": 1.0, "v100": 1.0}}
ROUND_S = 300.0
ROUNDS_PER_DAY = 288
TABLES = ("rounds", "shares", "placements", "applied", "events", "job_records", "profile_reports", "profiles")


class Renaming(SimCluster):
    """The simulated cluster, the flood account's pending jobs under a new class name at every snapshot."""

    rename = False
    serial = 0
    renaming_s = 0.0  # seconds the last snapshot spent renaming: the user's doing, not the daemon's (subtracted)
    renaming_cpu = 0.0  # the same in CPU seconds of this process

    def snapshot(self):
        s = super().snapshot()
        self.renaming_s = self.renaming_cpu = 0.0
        if not self.rename:
            return s
        t0, c0 = time.monotonic(), time.process_time()
        self.serial += 1
        jobs = tuple(dataclasses.replace(j, comment=f"class=x{self.serial}_{j.job_id}", name=f"x{self.serial}_{j.job_id}")
                     if j.account == "flood" and j.state == "PENDING" else j for j in s.jobs)
        out = dataclasses.replace(s, jobs=jobs)
        self.renaming_s = time.monotonic() - t0
        self.renaming_cpu = time.process_time() - c0
        return out


def trace_jobs(flood_jobs: int) -> list[TraceJob]:
    jobs = []
    for a in ("acct_a", "acct_b", "acct_c"):
        for k in range(16):  # 48 long jobs hold every GPU for the whole run
            jobs.append(TraceJob(f"{a}-run-{k}", 0.0, a, "cnn" if k % 2 else "rnn", 1, 1e12, None))
        for k in range(20):
            jobs.append(TraceJob(f"{a}-wait-{k}", 1.0, a, "cnn" if k % 2 else "rnn", 1 + k % 2, 1e6, None))
    jobs += [TraceJob(f"flood-{k}", 2.0, "flood", "flood", 1, 1e6, None) for k in range(flood_jobs)]
    return jobs


def gpu_report_records(n: int, first_id: int) -> list[dict]:
    return [{"v": 1, "event": "end", "context": "epilog_slurmctld", "job_id": first_id + i, "restart_count": 0,
             "time": time.time(), "account": "flood", "user": "flood", "class": f"evil{i % 400}",
             "gpus": {"v100": 1}, "gpu_count": 1, "gpu_info": "scontrol AllocTRES", "job_name": f"evil{i % 400}",
             "fair_tokens": f"fair:tput={1 + (i % 7) / 10:g}@1"} for i in range(n)]


GENUINE_JOB = 5 * 10 ** 6


def genuine_record() -> dict:
    return {"v": 1, "event": "end", "context": "epilog_slurmctld", "job_id": GENUINE_JOB, "restart_count": 0,
            "time": time.time(), "account": "acct_a", "user": "alice", "class": "cnn", "gpus": {"v100": 1},
            "gpu_count": 1, "gpu_info": "scontrol AllocTRES", "job_name": "cnn", "fair_tokens": "fair:tput=5@1"}


def report_records(n: int, first_id: int) -> list[dict]:
    return [{"v": 1, "event": "end", "context": "epilog_slurmctld", "job_id": first_id + i, "restart_count": 0,
             "time": time.time(), "account": "flood", "user": "flood", "class": f"evil{i % 400}", "gpus": {},
             "gpu_count": 0, "gpu_info": "scontrol AllocTRES", "job_name": f"evil{i % 400}",
             "fair_tokens": f"fair:tput={9000000 + i}@1 fair:gpu=Tesla_V100-SXM2-16GB"} for i in range(n)]


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def counts(store: Store) -> dict[str, int]:
    return {t: int(store.db.execute(f"select count(*) from {t}").fetchone()[0]) for t in TABLES}


class Run:
    """One of the four runs: its simulated cluster, its own database, and what each round took."""

    def __init__(self, kind: str, flood_jobs: int, reports: int, policy: str, tmp: Path, genuine_at: int = 0):
        self.kind, self.policy, self.genuine_at = kind, policy, genuine_at
        self.genuine_taken: int | None = None  # the round that took the genuine report (gpu report flood)
        nodes = cluster_spec("k80=16,p100=16,v100=16")
        self.cluster = Renaming(nodes, {"acct_a": 1, "acct_b": 1, "acct_c": 1, "flood": 1}, THROUGHPUT,
                                trace_jobs(flood_jobs), epoch=time.time() - 10.0)
        self.cluster.now = 0.0
        self.cluster.advance(5.0)
        self.cluster.schedule()
        self.db = tmp / f"{kind.replace(' ', '-')}.sqlite"
        self.cfg = config.from_dict({"daemon": {"database": str(self.db), "period": ROUND_S, "dry_run": False},
                                     "policy": {"name": policy}, "hooks": {"spool": str(tmp / f"spool-{kind.replace(' ', '-')}")}})
        self.store = Store(self.cfg.database_path)
        for cls, row in THROUGHPUT.items():
            for g, v in row.items():
                self.store.set_profile(cls, g, v)
        self.cluster.rename = kind == "rename flood"
        self.store.db.execute("pragma wal_checkpoint(truncate)")
        self.size0, self.rows0 = size(self.db), counts(self.store)
        if kind == "report flood":  # written to the spool as the hook writes them; the rounds ingest them
            for rec in report_records(reports, 10 ** 6):
                jobrecord.write_record(str(self.cfg.spool_path), rec)
        if kind == "gpu report flood":
            for rec in gpu_report_records(reports, 10 ** 6):
                jobrecord.write_record(str(self.cfg.spool_path), rec)
        self.times: list[float] = []
        self.cpu: list[float] = []

    def round(self) -> None:
        c = self.cluster
        t0, c0 = time.monotonic(), time.process_time()
        res = run_round(c, self.store, self.cfg, self.policy, now=c.clock())
        self.times.append(time.monotonic() - t0 - c.renaming_s)
        self.cpu.append(time.process_time() - c0 - c.renaming_cpu)
        if res.status != "ok":
            raise SystemExit(f"{self.kind}: round {len(self.times)}: {res.status}: {res.message}")
        n = len(self.times)
        if self.kind == "gpu report flood":
            if n == self.genuine_at:  # a later job's genuine report, ingested by the next round
                jobrecord.write_record(str(self.cfg.spool_path), genuine_record())
            elif n > self.genuine_at and self.genuine_taken is None and self.store.report_taken(GENUINE_JOB, 1):
                self.genuine_taken = n
        c.advance(c.now + ROUND_S)
        c.schedule()

    def finish(self) -> dict:
        try:
            self.store.db.execute("pragma wal_checkpoint(truncate)")
            grown, rows = size(self.db) - self.size0, counts(self.store)
        finally:
            self.store.close()
        return {"kind": self.kind, "grown": grown, "rows": {t: rows[t] - self.rows0[t] for t in TABLES},
                "times": self.times, "cpu": self.cpu, "genuine_taken": self.genuine_taken}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--flood-jobs", type=int, default=10000)
    ap.add_argument("--reports", type=int, default=20000)
    ap.add_argument("--policy", default="oef-coop")
    ap.add_argument("--genuine-at", type=int, default=3, help="the round after which the genuine report is written")
    a = ap.parse_args()
    drain = -(-a.reports // MAX_REPORTS_PER_ROUND)
    rounds = max(a.rounds, drain + 2)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        runs = [Run(k, a.flood_jobs, a.reports, a.policy, tmp, a.genuine_at)
                for k in ("quiet", "rename flood", "report flood", "gpu report flood")]
        for _r in range(rounds):  # interleaved: round r of each run in turn, so load on the machine hits all alike
            for run in runs:
                run.round()
        quiet, rename, report, gpu = (run.finish() for run in runs)
    base, base_cpu = statistics.median(quiet["times"]), statistics.median(quiet["cpu"])
    per_round_quiet = quiet["grown"] / len(quiet["times"])
    rows = []
    for r in (quiet, rename, report, gpu):
        n = len(r["times"])
        paired = statistics.median(x / q for x, q in zip(r["cpu"], quiet["cpu"]))  # round by round, interleaved
        if r is report or r is gpu:  # the flood's records are one-off: the day is these rounds plus the rest at the quiet rate
            day = r["grown"] + max(0, ROUNDS_PER_DAY - n) * per_round_quiet
        else:
            day = r["grown"] / n * ROUNDS_PER_DAY
        med, worst, med_cpu = statistics.median(r["times"]), max(r["times"]), statistics.median(r["cpu"])
        rows.append([r["kind"], str(n), f"{r['grown'] / 1e6:.2f}", f"{day / 1e6:.1f}",
                     ", ".join(f"{t} +{v}" for t, v in r["rows"].items() if v),
                     f"{med:.2f}", f"{worst:.2f}", f"{(med / base - 1) * 100:+.0f} %", f"{med_cpu:.3f}",
                     f"{(med_cpu / base_cpu - 1) * 100:+.0f} %", f"{(paired - 1) * 100:+.0f} %"])
    print(f"{a.flood_jobs} pending flood jobs, {a.reports} report records, policy {a.policy}, "
          f"one round per {ROUND_S:g} s; goal: <= 10 MB a day, median round within +10 % of the quiet run's")
    print(render(["run", "rounds", "MB grown", "MB a day", "rows added", "round s (median)", "round s (worst)",
                  "median vs quiet", "round CPU s (median)", "CPU vs quiet", "CPU vs quiet, round by round"], rows))
    taken = gpu["genuine_taken"]
    print(f"gpu report flood: the genuine report written after round {a.genuine_at} was taken "
          + (f"in round {taken} ({taken - a.genuine_at} round(s) later; goal: within 3)" if taken else "never"))
    for r in (quiet, rename, report, gpu):  # where the worst rounds come from: wall against CPU (another process's load)
        med = statistics.median(r["times"])
        slow = [f"#{i + 1} {w:.2f} s (CPU {c:.2f} s)" for i, (w, c) in enumerate(zip(r["times"], r["cpu"]))
                if w > 1.5 * med]
        print(f"{r['kind']}: rounds over 1.5x its median: {', '.join(slow) or 'none'}")


if __name__ == "__main__":
    main()
