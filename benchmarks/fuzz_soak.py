"""The hostile-bytes soak (issue 21, item 6): N random cases through slurm-fair's real parse paths.

    python benchmarks/fuzz_soak.py [--cases 10000] [--seed 0]

Cases (tests/hostile.py, the same code the CI fuzz tests run a few examples of) are spread evenly over four
kinds: ``squeue`` (captured squeue --json of 22.05 or 24.11 with arbitrary bytes in job names, comments, wckeys
and constraints, read by the CLI backend; every second case also runs a dry-run round), ``squeue_text``
(profile status's squeue lines), ``hook`` (a hook call with the bytes in its environment and in scontrol's text,
then ingested) and ``spool`` (arbitrary bytes and near-records as spool files, ingested). Prints one row per
kind: cases, tracebacks (an exception escaped), stopped rounds (a round not ok/dry-run), quarantined (records
set aside, expected), seconds; then the first failures. Exit 1 when any case had a traceback or a stopped round.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from slurm_fair.cli.table import render  # noqa: E402
from tests import hostile as H  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    stats = {k: {"cases": 0, "tracebacks": 0, "stopped": 0, "rounds": 0, "quarantined": 0, "seconds": 0.0}
             for k in H.KINDS}
    failures: list[str] = []
    t_all = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.cases):
            kind = H.KINDS[i % len(H.KINDS)]
            case = H.random_case(rng, kind)
            t0 = time.monotonic()
            o = H.run_case(case, Path(tmp))
            s = stats[kind]
            s["seconds"] += time.monotonic() - t0
            s["cases"] += 1
            s["rounds"] += bool(case.get("round_"))
            s["quarantined"] += o.note == "quarantined"
            if o.traceback or o.stopped:
                s["tracebacks"] += bool(o.traceback)
                s["stopped"] += bool(o.stopped)
                if len(failures) < 10:
                    failures.append(f"case {i} ({kind}): {o.traceback or o.stopped}\n    {case!r}"[:1500])
    rows = [[k, s["cases"], s["tracebacks"], s["stopped"], s["rounds"], s["quarantined"], f"{s['seconds']:.1f}"]
            for k, s in stats.items()]
    tot = {c: sum(s[c] for s in stats.values()) for c in ("cases", "tracebacks", "stopped", "rounds", "quarantined")}
    rows.append(["all", tot["cases"], tot["tracebacks"], tot["stopped"], tot["rounds"], tot["quarantined"],
                 f"{time.monotonic() - t_all:.1f}"])
    print(f"hostile-bytes soak: {a.cases} cases, seed {a.seed}")
    print(render(["KIND", "CASES", "TRACEBACKS", "STOPPED ROUNDS", "ROUNDS RUN", "QUARANTINED", "SECONDS"], rows))
    for f in failures:
        print(f)
    return 1 if tot["tracebacks"] or tot["stopped"] else 0


if __name__ == "__main__":
    sys.exit(main())
