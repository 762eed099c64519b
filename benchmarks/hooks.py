"""Hook latency: the shipped shim run as Slurm runs it (no PATH, hook env vars), against a running testbed.

    eval "$(contrib/testbed/testbed.sh env)"; python benchmarks/hooks.py [--n 50]

Installs hooks/ into a temp folder (slurm_fair.hookinstall.install, spool in the temp folder, SLURM_CONF of the
testbed for scontrol), submits one real GPU job so scontrol has something to show, then times N calls of
each context. Prints a table; goals: median <= 50 ms, p99 <= 200 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from slurm_fair import hookinstall, jobrecord  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=50)
    a = ap.parse_args()
    conf = os.environ.get("SLURM_CONF")
    if not conf:
        print("set SLURM_CONF (eval \"$(contrib/testbed/testbed.sh env)\")", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="hookbench-", dir="/tmp"))
    hookinstall.install(str(tmp / "hooks"), str(tmp / "spool"), slurm_conf=conf)
    shim = str(tmp / "hooks" / jobrecord.SHIM_NAME)
    job = subprocess.run(["sbatch", "--parsable", "-A", "acct_a", "--gres=gpu:1", "-o", "/dev/null",
                          "--comment", "class=bench", "--wrap", "sleep 300"], capture_output=True, text=True,
                         check=True, cwd="/tmp").stdout.strip().split(";")[0]
    try:
        time.sleep(2)
        base = {"SLURM_JOB_ID": job, "SLURM_JOB_ACCOUNT": "acct_a", "SLURM_JOB_USER": "root",
                "SLURM_JOB_PARTITION": "gpu", "SLURM_JOB_RESTART_COUNT": "0", "SLURM_JOB_NAME": "wrap"}
        cases = {
            "prolog_slurmctld": {},
            "epilog_slurmctld": {"SLURM_JOB_EXIT_CODE": "0", "SLURM_JOB_EXIT_CODE2": "0:0"},
            "prolog_slurmd": {"SLURMD_NODENAME": "a100-1", "SLURM_JOB_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0"},
            "epilog_slurmd": {"SLURMD_NODENAME": "a100-1", "SLURM_JOB_GPUS": "0", "SLURM_JOB_EXIT_CODE2": "0:0"},
        }
        subprocess.run([shim], env={**base, "SLURM_SCRIPT_CONTEXT": "prolog_slurmd"})  # first call compiles
        print(f"hook latency, {a.n} calls per context, load {os.getloadavg()[0]:.2f}, job {job}")
        print("| context | median ms | p99 ms | max ms | records |")
        print("|---|---|---|---|---|")
        ok = True
        for ctx, extra in cases.items():
            env = {**base, **extra, "SLURM_SCRIPT_CONTEXT": ctx}  # no PATH, as slurmctld/slurmd run hooks
            ms = []
            for _ in range(a.n):
                t0 = time.perf_counter()
                r = subprocess.run([shim], env=env)
                ms.append((time.perf_counter() - t0) * 1000)
                assert r.returncode == 0
            ms.sort()
            p99 = ms[min(len(ms) - 1, int(round(0.99 * (len(ms) - 1))))]
            med = statistics.median(ms)
            n_rec = len([f for f in os.listdir(tmp / "spool") if f".{ctx}." in f])
            ok &= med <= 50 and p99 <= 200
            print(f"| {ctx} | {med:.1f} | {p99:.1f} | {ms[-1]:.1f} | {n_rec} |")
        log = tmp / "spool.log"
        print("errors logged:", log.read_text() if log.exists() else "none")
        print("goals (median <= 50 ms, p99 <= 200 ms):", "met" if ok else "NOT met")
    finally:
        subprocess.run(["scancel", job])
    return 0


if __name__ == "__main__":
    sys.exit(main())
