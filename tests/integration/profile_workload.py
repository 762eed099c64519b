#!/usr/bin/env python3
"""A tiny training stand-in for the profiling tests. ON PURPOSE its speed depends on the GPU type Slurm gave
the job (read from `scontrol show job -d $SLURM_JOB_ID`): the testbed's GPUs are fake (the same CPU runs every
"GPU"), so a real workload would measure the same speed on every type and the tests could not tell whether a
profile landed on the right type. Rates (steps/s): a100 40, v100 20, k80 5, anything else 1.

Usage: profile_workload.py [SECONDS] [--report]   (prints "step N rate=R steps/s" lines for SECONDS, default
3; --report also calls slurm_fair.report() once with the rate)."""

import os
import re
import subprocess
import sys
import time

RATES = {"a100": 40.0, "v100": 20.0, "k80": 5.0}


def gpu_type() -> str:
    out = subprocess.run(["scontrol", "show", "job", "-d", os.environ["SLURM_JOB_ID"]], capture_output=True,
                         text=True, check=True).stdout
    m = re.search(r"gres/gpu:([A-Za-z0-9_.-]+)=", out) or re.search(r"GRES=gpu:([A-Za-z0-9_.-]+):", out)
    return m.group(1) if m else ""


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else 3.0
    t = gpu_type()
    rate = RATES.get(t, 1.0)
    print(f"workload on {t or '?'}: {rate} steps/s", flush=True)
    if "--report" in sys.argv:
        import slurm_fair

        slurm_fair.report(steps=rate * seconds, seconds=seconds)
    t0, step = time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        time.sleep(0.25)
        step += 1
        print(f"step {step} rate={rate} steps/s", flush=True)


if __name__ == "__main__":
    main()
