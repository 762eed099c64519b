"""The ``slurm-fair`` console script. ``slurm-fair profile report`` and ``slurm-fair profile run`` run inside
jobs: they are dispatched here, before the full command line (click, cvxpy, numpy: ~1.5 s) is imported."""

from __future__ import annotations

import sys


def console_main() -> None:
    argv = sys.argv[1:]
    if argv[:2] == ["profile", "report"]:
        from .profiling.client import main

        sys.exit(main(argv[2:]))
    if argv[:2] == ["profile", "run"]:
        from .profiling.agent import run_main

        sys.exit(run_main(argv[2:]))
    from .cli import console_main as full

    full()
