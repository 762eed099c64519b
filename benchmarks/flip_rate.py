"""Guarantee flips (issue 28, item 1) in the simulator: a policy (oef-coop by default) plain and preempt on
generated traces, with
``[policy] stable`` off (any optimum, rounding carries the deviation every round: the behaviour before), with
only the solver's tie-break toward last round (the rounding's hold switched off), and on (both).

Usage: python3 benchmarks/flip_rate.py [--seeds 0,1] [--jobs 60] [--load 0.6] [--cluster k80=16,p100=16,v100=16]
                                      [--policy oef-coop] [--modes off,solver,on]

Per run: (a) account-type-rounds with the whole problem unchanged and the share of them whose guarantee changed,
(b) the same with the account's own inputs (and the capacity) unchanged (``fairness.stability.flips`` on the
simulator's store), of (a) the account-type-rounds whose fractional ideal moved (the policy's own flips) and
of (b)'s flips those whose ideal did not (the rounding's), mean JCT, rounds and the mean solve seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.vs_slurm import generated  # noqa: E402
from slurm_fair import config as config_mod  # noqa: E402
from slurm_fair.daemon import round as round_mod  # noqa: E402
from slurm_fair.fairness.stability import flips  # noqa: E402
from slurm_fair.sim import engine  # noqa: E402
from slurm_fair.sim.cluster import cluster_spec  # noqa: E402
from slurm_fair.store import Store  # noqa: E402

MODES = ("off", "solver", "on")


def run(trace, nodes, mode: str, preempt: bool, round_s: float, policy: str = "oef-coop") -> dict:
    """One simulation; ``mode`` sets ``[policy] stable`` (the simulator takes no config, so its ``from_dict``
    is wrapped here) and, for ``solver``, switches the rounding's hold off."""
    orig_from_dict, orig_last = config_mod.from_dict, round_mod._last_round

    def from_dict(d):
        d = dict(d)
        d["policy"] = {**d.get("policy", {}), "stable": mode != "off"}
        return orig_from_dict(d)

    engine.config_mod.from_dict = from_dict
    if mode == "solver":
        round_mod._last_round = lambda store: None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "sim.sqlite"
            r = engine.simulate(trace, nodes, policy, round_s=round_s, preemption=preempt, store_path=db)
            rows = Store(str(db)).round_series(keys=("real", "fingerprint", "ideal"))
    finally:
        engine.config_mod.from_dict, round_mod._last_round = orig_from_dict, orig_last
    c = flips(rows)
    solve = [x.solve_seconds for x in rows if x.solve_seconds is not None]
    return {"policy": policy, "mode": mode, "preempt": preempt, **c.as_json(), "mean_jct": r.mean_jct, "makespan": r.makespan,
            "rounds": r.rounds, "preemptions": r.preemptions, "errors": r.round_errors[:2],
            "mean_solve_s": sum(solve) / len(solve) if solve else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--jobs", type=int, default=60)
    ap.add_argument("--load", type=float, default=0.6)
    ap.add_argument("--cluster", default="k80=16,p100=16,v100=16")
    ap.add_argument("--round", type=float, default=300.0)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--policy", default="oef-coop")
    a = ap.parse_args()
    nodes = cluster_spec(a.cluster)
    for seed in (int(s) for s in a.seeds.split(",")):
        trace = generated(a.load, a.jobs, nodes, seed)
        for preempt in (False, True):
            for mode in a.modes.split(","):
                out = run(trace, nodes, mode, preempt, a.round, a.policy)
                out["seed"] = seed
                print(json.dumps(out, default=str), flush=True)


if __name__ == "__main__":
    main()
