"""How long does one observation (Cluster.snapshot()) take on a busy cluster?

Against a RUNNING testbed (or any cluster you may flood with held jobs; SLURM_CONF must point at it):

    python benchmarks/observe.py [--jobs 5000] [--accounts 200] [--runs 5] [--backend cli]
    contrib/testbed/testbed.sh --release trixie exec -- python benchmarks/observe.py   # Slurm 24.11

It creates accounts acct_bench_000.. (one sacctmgr call, root added to them in a second call), submits
``--jobs`` distinct held GPU jobs spread over them (distinct jobs, not an array: an unsplit pending array
is one record in squeue's JSON), checks that the snapshot sees them all, times ``snapshot()`` ``--runs``
times per backend, also times each Slurm command alone, prints tables, and cleans up (cancels the jobs,
deletes the accounts) even when interrupted.  Goal: <= 2 s per observation with the CLI backend.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_fair.cluster import Unsupported, connect  # noqa: E402
from slurm_fair.cluster import parse, sacctmgr  # noqa: E402

PREFIX = "acct_bench_"
JOB_NAME = "bench-observe"
TYPES = ("a100", "v100", "k80", None)


def run(argv: list[str], timeout: float = 120) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:6])}... exited {r.returncode}: {r.stderr.strip()[:300]}")
    return r.stdout


def config() -> dict[str, str]:
    out = {}
    for line in run(["scontrol", "show", "config"]).splitlines():
        k, eq, v = line.partition("=")
        if eq:
            out[k.strip()] = v.strip()
    return out


def check_room(cfg: dict[str, str], jobs: int) -> None:
    """slurmctld keeps finished jobs for MinJobAge seconds and refuses new ones past MaxJobCount (sbatch then
    retries forever): stop early with the reason instead."""
    in_memory = len(run(["squeue", "-h", "-t", "all", "-o", "%i"]).split())
    max_jobs = int(cfg.get("MaxJobCount", "10000"))
    if in_memory + jobs > max_jobs:
        raise SystemExit(f"slurmctld holds {in_memory} job records (finished ones stay MinJobAge="
                         f"{cfg.get('MinJobAge', '?')}); {jobs} more would pass MaxJobCount={max_jobs}. "
                         "Wait for them to be purged, or use fewer --jobs.")


def setup_accounts(n: int, cluster: str) -> list[str]:
    names = [f"{PREFIX}{i:03d}" for i in range(n)]
    run(["sacctmgr", "-i", "add", "account", ",".join(names), f"cluster={cluster}", "fairshare=1"])
    run(["sacctmgr", "-i", "add", "user", "root", "account=" + ",".join(names), f"cluster={cluster}"])
    return names


def submit(accounts: list[str], jobs: int, workdir: str, workers: int = 4) -> None:
    def one(i: int) -> None:
        t = TYPES[i % len(TYPES)]
        gres = f"--gres=gpu:{t}:1" if t else "--gres=gpu:1"
        run(["sbatch", "--parsable", "--hold", f"--account={accounts[i % len(accounts)]}", f"--job-name={JOB_NAME}",
             gres, "-o", "/dev/null", f"--chdir={workdir}", f"--comment=fair:class=c{i % 7}", "--wrap", "true"])

    t0 = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        for k, _ in enumerate(pool.map(one, range(jobs)), 1):
            if k % 1000 == 0:
                print(f"  submitted {k}/{jobs} ({time.monotonic() - t0:.0f} s)", file=sys.stderr)


def cleanup(accounts: list[str]) -> None:
    subprocess.run(["scancel", f"--name={JOB_NAME}"], capture_output=True, timeout=300)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", f"--name={JOB_NAME}", "-o", "%i"], capture_output=True, text=True,
                             timeout=120).stdout
        if not out.strip():
            break
        time.sleep(1)
    if accounts:
        subprocess.run(["sacctmgr", "-i", "delete", "user", "root", "where", "account=" + ",".join(accounts)],
                       capture_output=True, timeout=300)
        # slurmdbd learns about the cancellations a little later: retry while it says "Job(s) active"
        deadline = time.monotonic() + 120
        while True:
            r = subprocess.run(["sacctmgr", "-i", "delete", "account", ",".join(accounts)], capture_output=True,
                               text=True, timeout=300)
            if r.returncode == 0 or "active" not in (r.stdout + r.stderr) or time.monotonic() > deadline:
                break
            time.sleep(2)
        if r.returncode != 0:
            print(f"warning: deleting bench accounts: {(r.stdout + r.stderr).strip()[:300]}", file=sys.stderr)


def timed(f, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        f()
        out.append(time.perf_counter() - t0)
    return out


def table(header: list[str], rows: list[list[str]]) -> str:
    w = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).rjust(w[i]) if i else str(c).ljust(w[i]) for i, c in enumerate(r)) for r in [header, *rows]]
    lines.insert(1, "  ".join("-" * x for x in w))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--accounts", type=int, default=200)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--backend", action="append", choices=["cli", "pyslurm"], help="repeatable; default: all")
    ap.add_argument("--workdir", default=os.environ.get("TESTBED_JOBDIR", "/tmp"))
    args = ap.parse_args()
    backends = args.backend or ["cli", "pyslurm"]

    accounts: list[str] = []
    try:
        cfg = config()
        name = cfg["ClusterName"]
        check_room(cfg, args.jobs)
        t0 = time.monotonic()
        accounts = setup_accounts(args.accounts, name)
        print(f"created {len(accounts)} accounts in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        t0 = time.monotonic()
        submit(accounts, args.jobs, args.workdir)
        print(f"submitted {args.jobs} held GPU jobs in {time.monotonic() - t0:.1f} s", file=sys.stderr)

        rows = []
        version = "?"
        for b in backends:
            try:
                c = connect(backend=b, timeout=120)
                version = c.version()
            except Unsupported as e:
                rows.append([b, "-", "-", "-", "-", "-", f"skipped: {e}"[:90]])
                continue
            snap = c.snapshot()  # warm-up, and a check that it sees everything
            seen = sum(1 for j in snap.jobs if j.account.startswith(PREFIX))
            accts = sum(1 for a in snap.accounts if a.name.startswith(PREFIX))
            if seen != args.jobs or accts != args.accounts:
                raise SystemExit(f"{b}: snapshot saw {seen}/{args.jobs} bench jobs, {accts}/{args.accounts} accounts")
            t = timed(c.snapshot, args.runs)
            verdict = "ok (<= 2 s)" if statistics.median(t) <= 2.0 else "SLOW (> 2 s)"
            rows.append([b, str(len(snap.jobs)), f"{min(t):.3f}", f"{statistics.median(t):.3f}", f"{max(t):.3f}",
                         str(args.runs), verdict])
        print(f"\nSlurm {version}: snapshot() with {args.jobs} pending GPU jobs in {args.accounts} accounts\n")
        print(table(["backend", "jobs", "min s", "median s", "max s", "runs", "goal"], rows))

        # where the time goes (CLI backend): each command alone, and the parse
        c = connect(backend="cli", timeout=120)
        nodes_argv = c._nodes_argv()
        flag = c._json_flag()
        cmds = {} if flag == "--json" else {
            "squeue --json (not used)": ["squeue", "--json", "--states=PENDING,RUNNING"]}
        cmds |= {
            f"squeue {flag}": ["squeue", flag, "--states=PENDING,RUNNING"],
            " ".join(nodes_argv): nodes_argv,
            "sacctmgr show assoc": ["sacctmgr", "-P", "-n", "show", "assoc", f"format={sacctmgr.ASSOC_FORMAT}"],
            "sprio": ["sprio", "-h", "-o", "%i|%S"],
        }
        rows = []
        outs: dict[str, str] = {}
        for label, argv in cmds.items():
            t = timed(lambda argv=argv, label=label: outs.__setitem__(label, run(argv)), args.runs)
            rows.append([label, f"{statistics.median(t):.3f}", f"{len(outs[label]) / 1e6:.1f}"])
        t = timed(lambda: parse.parse_jobs(outs[f"squeue {flag}"]), args.runs)
        rows.append(["parse_jobs (Python)", f"{statistics.median(t):.3f}", ""])
        print()
        print(table(["step (run alone)", "median s", "output MB"], rows))
    finally:
        t0 = time.monotonic()
        cleanup(accounts)
        print(f"\ncleaned up (jobs cancelled, bench accounts deleted) in {time.monotonic() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
