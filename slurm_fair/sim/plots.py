"""PNG plots of simulation results (matplotlib, the ``plot`` extra; Agg backend, no display needed).

* ``shares-<policy>.png``: GPUs held per account over simulated time (stacked), and each account's
  normalized throughput over time;
* ``jct-cdf.png``: the distribution of job completion times, one line per policy;
* ``compare.png``: total normalized throughput, mean and p95 JCT and max ρ per policy, side by side.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from ..errors import InputError


def _plt():
    try:
        import matplotlib
    except ImportError:
        raise InputError("--plot", None, "needs matplotlib: pip install 'slurm-fair[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def plot_all(results: Mapping[str, object], folder: str | Path) -> list[Path]:
    """Write the plots of ``results`` ({policy: engine.SimResult}) into ``folder``; returns the files."""
    plt = _plt()
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for name, r in results.items():
        tl = r.timeline
        accounts = sorted({a for s in tl for a in s["gpus"]} | {a for s in tl for a in s["throughput"]})
        hours = [s["time"] / 3600 for s in tl]
        fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
        if accounts and hours:
            ax1.stackplot(hours, [[s["gpus"].get(a, 0) for s in tl] for a in accounts], labels=accounts, step="post")
            for a in accounts:
                ax2.step(hours, [s["throughput"].get(a, 0.0) for s in tl], where="post", label=a)
        ax1.set_ylabel("GPUs held")
        ax1.set_title(f"{name}: GPUs and normalized throughput per account")
        ax2.set_ylabel("normalized throughput")
        ax2.set_xlabel("simulated time (h)")
        if 0 < len(accounts) <= 12:
            ax1.legend(loc="upper right", fontsize="small")
        files.append(out / f"shares-{_safe(name)}.png")
        fig.tight_layout()
        fig.savefig(files[-1], dpi=100)
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 5))
    for name, r in results.items():
        jct = sorted(row["jct"] / 3600 for row in r.job_rows if row.get("jct") is not None)
        if jct:
            ax.step(jct, [(i + 1) / len(jct) for i in range(len(jct))], where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (h)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT distribution")
    ax.legend()
    files.append(out / "jct-cdf.png")
    fig.tight_layout()
    fig.savefig(files[-1], dpi=100)
    plt.close(fig)
    names = list(results)
    metrics = (("total_throughput", "total normalized throughput"), ("mean_jct", "mean JCT (s)"),
               ("p95_jct", "p95 JCT (s)"), ("max_rho", "max finish-time fairness rho"))
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 4))
    for ax, (key, label) in zip(axes, metrics):
        vals = [getattr(results[n], key) or 0.0 for n in names]
        ax.bar(range(len(names)), vals)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
        ax.set_title(label, fontsize="medium")
    files.append(out / "compare.png")
    fig.tight_layout()
    fig.savefig(files[-1], dpi=100)
    plt.close(fig)
    return files
