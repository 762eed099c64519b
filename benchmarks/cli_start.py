"""How long ``slurm-fair`` takes to start, per command (issue 31's goal: 0.3 s for ``--help`` and ``why``).

    python3 benchmarks/cli_start.py [--runs 5]

Each command runs in a fresh process (`slurm-fair ... --help`, which imports what the command needs to parse its
options; ``why``, ``status``, ``history`` and ``explain`` import the rest of what they need only when they run:
that import is timed too, as `python -c "import ..."`). Prints the median wall seconds of each."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

CASES = [
    ("slurm-fair --help", [sys.executable, "-c", "from slurm_fair.cli import main; main()", "--help"]),
    ("slurm-fair why --help", [sys.executable, "-c", "from slurm_fair.cli import main; main()", "why", "--help"]),
    ("slurm-fair status --help",
     [sys.executable, "-c", "from slurm_fair.cli import main; main()", "status", "--help"]),
    ("slurm-fair history --help",
     [sys.executable, "-c", "from slurm_fair.cli import main; main()", "history", "--help"]),
    ("slurm-fair explain --help",
     [sys.executable, "-c", "from slurm_fair.cli import main; main()", "explain", "--help"]),
    ("why's imports (cluster, status file, explanation)",
     [sys.executable, "-c", "import slurm_fair.cli, slurm_fair.cluster, slurm_fair.daemon.status_file, slurm_fair.views.why"]),
    ("status's imports (store, status view, cluster)",
     [sys.executable, "-c", "import slurm_fair.cli, slurm_fair.store, slurm_fair.views.status, slurm_fair.cluster"]),
    ("history's imports (store)", [sys.executable, "-c", "import slurm_fair.cli, slurm_fair.store"]),
    ("explain's imports (store, explanation, cluster)",
     [sys.executable, "-c", "import slurm_fair.cli, slurm_fair.store, slurm_fair.views.explain, slurm_fair.cluster"]),
    ("a solving command's imports (policies, cvxpy)",
     [sys.executable, "-c", "import slurm_fair.cli, slurm_fair.policies, slurm_fair.lp"]),
    ("python itself", [sys.executable, "-c", "pass"]),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    width = max(len(n) for n, _ in CASES)
    print(f"{'command':<{width}}  median s  (of {a.runs})")
    for name, argv in CASES:
        times = []
        for _ in range(a.runs):
            t0 = time.perf_counter()
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=120)
            times.append(time.perf_counter() - t0)
        print(f"{name:<{width}}  {statistics.median(times):8.3f}")


if __name__ == "__main__":
    main()
