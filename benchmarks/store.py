#!/usr/bin/env python3
"""How long the store takes to record one allocation round, and to import/export profiles.

Usage: python3 benchmarks/store.py [--dir DIR]   (a file database in DIR, WAL, as the daemon uses it)

A round here writes what the daemon writes: shares (accounts x classes x GPU types), placements and applied
limits (accounts x GPU types), the whole deviation state, deficits, managed accounts and two events, all in
one transaction. Prints a table; the goal is that storage stays negligible next to a round period of minutes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurm_fair.profiling.core import effective  # noqa: E402
from slurm_fair.store import Store  # noqa: E402

TYPES = ["a100", "v100", "p100", "k80"]


def one_round(store: Store, n_accounts: int, n_classes: int) -> float:
    accounts = [f"acct{i:04d}" for i in range(n_accounts)]
    t0 = time.perf_counter()
    with store.transaction():
        r = store.begin_round("oef-noncoop", "ECOS")
        store.event("round", "started", round_id=r)
        store.record_shares(r, ({"account": a, "class": f"cls{c}", "gpu_type": t, "ideal": 0.5, "real": None}
                                for a in accounts for c in range(n_classes) for t in TYPES))
        store.record_placements(r, ({"account": a, "gpu_type": t, "ideal": 0.5, "deviation_before": 0.1,
                                     "real": 1, "limit": 2} for a in accounts for t in TYPES))
        store.record_applied(r, ({"account": a, "key": t, "old": 1, "new": 2} for a in accounts for t in TYPES))
        store.save_deviations(r, {a: {t: 0.25 for t in TYPES} for a in accounts})
        store.save_deficits({a: 1.0 for a in accounts})
        store.set_managed(accounts)
        store.finish_round(r, "ok", n_accounts=n_accounts, n_changes=n_accounts * len(TYPES))
        store.event("round", "finished", round_id=r)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None, help="folder for the database (default: a temporary folder)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        print(f"{'accounts':>8} {'classes':>7} {'rows/round':>10} {'median ms':>9} {'max ms':>8}")
        for n_acc, n_cls in [(3, 5), (50, 10), (500, 20)]:
            with Store(Path(d) / f"r{n_acc}.sqlite") as s:
                times = [one_round(s, n_acc, n_cls) for _ in range(args.repeat)]
            rows = n_acc * (n_cls * len(TYPES) + 3 * len(TYPES) + 2)
            print(f"{n_acc:>8} {n_cls:>7} {rows:>10} {statistics.median(times) * 1e3:>9.1f} {max(times) * 1e3:>8.1f}")
        print()
        print(f"{'profiles':>8} {'import ms':>9} {'export ms':>9}")
        for n in (77, 10_000):
            text = "account,class,gpu_type,throughput\n" + "".join(
                f",cls{i // 4},{TYPES[i % 4]},{1 + i / 7}\n" for i in range(n))
            with Store(Path(d) / f"p{n}.sqlite") as s:
                t0 = time.perf_counter()
                s.import_csv(text)
                t1 = time.perf_counter()
                s.export_csv(effective(s.profile_values()))
                t2 = time.perf_counter()
            print(f"{n:>8} {(t1 - t0) * 1e3:>9.1f} {(t2 - t1) * 1e3:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
