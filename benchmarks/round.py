"""Benchmark: full daemon rounds on the real testbed with many pending jobs.

    python benchmarks/round.py [--accounts 200] [--jobs 5000] [--rounds 3] [--policy oef-noncoop] [--keep]

Needs a running testbed (``eval "$(contrib/testbed/testbed.sh env)"``, root). Creates accounts
``bench_000``… (root is their user), sets their GPU limits to 0 and submits ``--jobs`` 1-GPU jobs spread over them (typed on the
three GPU types and untyped, two classes per account, so they stay pending until slurm-fair's limits let some start), then runs
``--rounds`` rounds of :func:`slurm_fair.daemon.round.run_round` with a throw-away database and prints,
per round, the seconds spent (snapshot, solve, whole round) and the number of Slurm calls by command
(counted on the CLI backend's argument log). Goal: a round <= 10 s. Jobs and accounts are removed at the
end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_fair import config  # noqa: E402
from slurm_fair.cli.table import render  # noqa: E402
from slurm_fair.cluster import connect  # noqa: E402
from slurm_fair.daemon.round import run_round  # noqa: E402
from slurm_fair.store import Store  # noqa: E402

TYPES = ("a100", "v100", "k80", None)
CLASSES = ("resnet18-bs64", "lm-bs20", "transformer-bs32", "a3c", "cyclegan", "recommendation-bs1024")


def run(argv: list[str], timeout: float = 120) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:6])}… failed: {r.stderr.strip()}")
    return r.stdout


class Timed:
    """Wraps a Cluster: times snapshot() and counts calls per method."""

    def __init__(self, inner):
        self.inner = inner
        self.methods: Counter[str] = Counter()
        self.snapshot_s = 0.0

    def snapshot(self):
        self.methods["snapshot"] += 1
        t = time.monotonic()
        try:
            return self.inner.snapshot()
        finally:
            self.snapshot_s += time.monotonic() - t

    def set_accounts_gpu_limits(self, limits):
        self.methods["set_accounts_gpu_limits"] += 1
        return self.inner.set_accounts_gpu_limits(limits)

    def set_site_factors(self, factors):
        self.methods["set_site_factors"] += 1
        return self.inner.set_site_factors(factors)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def setup(accounts: list[str], n_jobs: int, workdir: str) -> None:
    existing = set(run(["sacctmgr", "-n", "-P", "show", "account", "format=account"]).split())
    new = [a for a in accounts if a not in existing]
    for i in range(0, len(new), 50):
        chunk = ",".join(new[i:i + 50])
        run(["sacctmgr", "-i", "add", "account", chunk, "fairshare=1"])
        run(["sacctmgr", "-i", "add", "user", "root", f"account={chunk}"])
    # limit 0 first so the jobs stay pending (reason AssocGrpGRES) until slurm-fair gives them GPUs; held
    # jobs would not do: Slurm gives them no priority (sprio does not list them)
    for i in range(0, len(accounts), 50):
        run(["sacctmgr", "-i", "modify", "account", "where", "name=" + ",".join(accounts[i:i + 50]), "set",
             "GrpTRES=gres/gpu=0,gres/gpu:a100=0,gres/gpu:v100=0,gres/gpu:k80=0"])
    held = run(["squeue", "-h", "-t", "PD", "-o", "%i", "-A", ",".join(accounts), "-r"]).split()
    for i in range(0, len(held), 500):
        run(["scontrol", "release", ",".join(held[i:i + 500])])
    have = len(run(["squeue", "-h", "-t", "PD", "-o", "%i", "-A", ",".join(accounts)]).split())

    def submit(i: int) -> None:
        a = accounts[i % len(accounts)]
        cls = CLASSES[(i // len(accounts)) % 2 + (i % 3)]
        t = TYPES[i % len(TYPES)]
        gres = f"gpu:{t}:1" if t else "gpu:1"
        run(["sbatch", "-Q", "-A", a, "-J", cls, f"--gres={gres}", f"--chdir={workdir}",
             "--output=/dev/null", "--wrap", "sleep 60"])

    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(submit, range(have, n_jobs)))
    print(f"setup: {len(accounts)} accounts, {n_jobs} pending jobs ({n_jobs - have} submitted in "
          f"{time.monotonic() - t0:.1f} s)", flush=True)


def cleanup(accounts: list[str]) -> None:
    ids = run(["squeue", "-h", "-A", ",".join(accounts), "-o", "%i"]).split()  # scancel -A takes one account
    for i in range(0, len(ids), 500):
        subprocess.run(["scancel", *ids[i:i + 500]], capture_output=True, text=True, timeout=120)
    for _ in range(60):
        if not run(["squeue", "-h", "-A", ",".join(accounts), "-o", "%i"]).split():
            break
        time.sleep(1)
    for _ in range(5):  # accounts whose jobs are still completing cannot be deleted yet: retry
        left = sorted(set(accounts) & set(run(["sacctmgr", "-n", "-P", "show", "account", "format=account"]).split()))
        if not left:
            break
        for i in range(0, len(left), 50):
            subprocess.run(["sacctmgr", "-i", "delete", "account", ",".join(left[i:i + 50])],
                           capture_output=True, text=True, timeout=120)
        time.sleep(2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--accounts", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--policy", default="oef-noncoop")
    ap.add_argument("--keep", action="store_true", help="keep the benchmark jobs and accounts")
    args = ap.parse_args()
    if not os.environ.get("SLURM_CONF"):
        raise SystemExit("set SLURM_CONF (eval \"$(contrib/testbed/testbed.sh env)\")")
    accounts = [f"bench_{i:03d}" for i in range(args.accounts)]
    workdir = os.environ.get("SLURM_FAIR_TESTBED", "/tmp") + "/jobs"
    setup(accounts, args.jobs, workdir)
    cfg = config.from_dict({"policy": {"name": args.policy}, "limits": {"accounts": accounts}})
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "bench.sqlite")
        try:
            for r in range(1, args.rounds + 1):
                inner = connect("cli", timeout=120)
                cl = Timed(inner)
                res = run_round(cl, store, cfg)
                progs = Counter(c[0] for c in inner.calls)
                rows.append([r, res.status, f"{cl.snapshot_s:.2f}", f"{res.solve_seconds:.2f}", f"{res.seconds:.2f}",
                             sum(len(v) for v in res.limit_changes.values()), len(res.factor_changes),
                             res.details.site_factor_changes_deferred if res.details else 0,
                             progs.get("sacctmgr", 0), progs.get("scontrol", 0),
                             sum(progs.values()) - progs.get("sacctmgr", 0) - progs.get("scontrol", 0)])
                if res.status != "ok":
                    print(f"round {r}: {res.status}: {res.message}", file=sys.stderr)
        finally:
            store.close()
            if not args.keep:
                cleanup(accounts)
    print(f"\nfull round, {args.jobs} pending GPU jobs from {args.accounts} accounts, policy {args.policy} "
          "(goal <= 10 s per round)")
    print(render(["ROUND", "STATUS", "SNAPSHOT_S", "SOLVE_S", "ROUND_S", "LIMIT_CHANGES", "SITEFACTOR_CHANGES",
                  "DEFERRED", "SACCTMGR_CALLS", "SCONTROL_CALLS", "OTHER_CALLS"], rows))


if __name__ == "__main__":
    main()
