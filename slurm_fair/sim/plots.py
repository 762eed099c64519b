"""PNG plots of simulation results (the charts are :mod:`slurm_fair.plots`'s, shared with ``slurm-fair
report --plot``).

* ``shares-<policy>.png``: GPUs held per account over simulated time (stacked), and each account's
  normalized throughput over time;
* ``jct-cdf.png``: the distribution of job completion times, one line per policy;
* ``fairness.png``: envy pairs and sharing-incentive violations per round, per policy (placed GPUs and the
  policy's fractional shares);
* ``compare.png``: total normalized throughput, mean and p95 JCT, max ρ and the rounds with envy among the
  placed GPUs per policy, side by side.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from .. import plots

METRICS = (("total_throughput", "total normalized throughput"), ("mean_jct", "mean JCT (s)"),
           ("p95_jct", "p95 JCT (s)"), ("max_rho", "max finish-time fairness rho"),
           ("rounds_with_envy", "rounds with envy (placed GPUs)"))


def plot_all(results: Mapping[str, object], folder: str | Path) -> list[Path]:
    """Write the plots of ``results`` ({policy: engine.SimResult}) into ``folder``; returns the files."""
    plots.pyplot()  # a clear error before anything is written when matplotlib is missing
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for name, r in results.items():
        tl = r.timeline
        accounts = sorted({a for s in tl for a in s["gpus"]} | {a for s in tl for a in s["throughput"]})
        files.append(plots.shares(out / f"shares-{plots.safe_name(name)}.png",
                                  f"{name}: GPUs and normalized throughput per account", [s["time"] / 3600 for s in tl],
                                  {a: [s["gpus"].get(a, 0) for s in tl] for a in accounts},
                                  {a: [s["throughput"].get(a, 0.0) for s in tl] for a in accounts}))
    files.append(plots.cdf(out / "jct-cdf.png", {name: [row["jct"] for row in r.job_rows if row.get("jct") is not None]
                                                 for name, r in results.items()}))
    files.append(plots.fairness(out / "fairness.png", {name: ([s["time"] / 3600 for s in r.timeline],
                                                               [s.get("fairness") for s in r.timeline])
                                                        for name, r in results.items()}))
    values = {name: {**r.summary(), "rounds_with_envy": (r.fairness.get("real") or {}).get("rounds_with_envy")}
              for name, r in results.items()}
    files.append(plots.compare(out / "compare.png", values, METRICS))
    return files
