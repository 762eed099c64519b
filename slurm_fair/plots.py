"""PNG charts shared by ``slurm-fair simulate --plot`` and ``slurm-fair report --plot`` (matplotlib, the
``plot`` extra; Agg backend, no display needed). Each function draws one chart from plain data and writes
one file; what the data mean is the caller's (``sim/plots.py``: simulated jobs; :func:`plot_report`: a
store's rounds).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from .errors import InputError

DPI = 100


def pyplot(option: str = "--plot"):
    """matplotlib.pyplot on the Agg backend, or an InputError naming ``option`` when matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        raise InputError(option, None, "needs matplotlib: pip install 'slurm-fair[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def safe_name(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def shares(path: Path, title: str, hours: Sequence[float], gpus: Mapping[str, Sequence[float]],
           throughput: Mapping[str, Sequence[float]], gpus_label: str = "GPUs held",
           xlabel: str = "simulated time (h)") -> Path:
    """GPUs per account over time (stacked, top) and each account's normalized throughput (bottom)."""
    plt = pyplot()
    accounts = sorted(set(gpus) | set(throughput))
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    if accounts and len(hours):
        ax1.stackplot(hours, [gpus.get(a, [0] * len(hours)) for a in accounts], labels=accounts, step="post")
        for a in accounts:
            ax2.step(hours, throughput.get(a, [0.0] * len(hours)), where="post", label=a)
    ax1.set_ylabel(gpus_label)
    ax1.set_title(title)
    ax2.set_ylabel("normalized throughput")
    ax2.set_xlabel(xlabel)
    if 0 < len(accounts) <= 12:
        ax1.legend(loc="upper right", fontsize="small")
    return _save(plt, fig, path)


def cdf(path: Path, durations: Mapping[str, Sequence[float]], xlabel: str = "job completion time (h)",
        title: str = "JCT distribution") -> Path:
    """One step line per label: the fraction of jobs whose duration (seconds) is at most x (hours, log)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 5))
    drawn = False
    for name, values in durations.items():
        v = sorted(d / 3600 for d in values if d is not None and d > 0)
        if v:
            ax.step(v, [(i + 1) / len(v) for i in range(len(v))], where="post", label=name)
            drawn = True
    if drawn:
        ax.set_xscale("log")
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no finished jobs", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of jobs")
    ax.set_title(title)
    return _save(plt, fig, path)


def compare(path: Path, values: Mapping[str, Mapping[str, Any]], metrics: Sequence[tuple[str, str]]) -> Path:
    """One bar chart per metric (key, label), one bar per policy (missing values count 0)."""
    plt = pyplot()
    names = list(values)
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 4), squeeze=False)
    for ax, (key, label) in zip(axes[0], metrics):
        ax.bar(range(len(names)), [values[n].get(key) or 0.0 for n in names])
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
        ax.set_title(label, fontsize="medium")
    return _save(plt, fig, path)


def fairness(path: Path, series: Mapping[str, tuple[Sequence[float], Sequence[Mapping[str, Any] | None]]],
             xlabel: str = "simulated time (h)") -> Path:
    """Envy pairs (top) and sharing-incentive violations (bottom) per round, per policy: the placed whole
    GPUs (``real``, solid) and the policy's fractional allocation (``ideal``, dashed). ``series``: {policy:
    (hours, the rounds' ``details["fairness"]``)}; rounds without counts are gaps."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for n, (name, (hours, counts)) in enumerate(series.items()):
        for side, style in (("real", "-"), ("ideal", "--")):
            for ax, key in ((ax1, "envy_pairs"), (ax2, "si_violations")):
                ys = [float("nan") if not f or side not in f else f[side][key] for f in counts]
                ax.step(hours, ys, where="post", linestyle=style, color=f"C{n % 10}", label=f"{name} ({side})")
    ax1.set_ylabel("envy pairs")
    ax1.set_title("fairness per round: placed GPUs (solid), policy's shares (dashed)")
    ax2.set_ylabel("sharing-incentive violations")
    ax2.set_xlabel(xlabel)
    if 0 < len(series) <= 8:
        ax1.legend(loc="upper right", fontsize="small")
    return _save(plt, fig, path)


REPORT_METRICS = (("mean_total_throughput", "mean total normalized throughput"),
                  ("mean_round_seconds", "mean round seconds"),
                  ("envy_share", "rounds with envy (placed GPUs)"),
                  ("si_share", "rounds with SI violations (placed GPUs)"))


def plot_report(rep: Mapping[str, Any], folder: str | Path) -> list[Path]:
    """The report's charts (``views.report.report``) into ``folder``: ``shares-<policy>.png`` (GPUs placed
    and the placement's throughput per account over the window), ``jct-cdf.png`` (start-to-end times of the
    jobs, per policy), ``fairness.png`` and ``compare.png``; returns the files."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    t0 = rep["first"] or 0.0
    xlabel = "hours since the first round of the window"
    fair: dict[str, tuple[list[float], list[Any]]] = {}
    for name in rep["policies"]:
        tl = [s for s in rep["timeline"] if s["policy"] == name]
        hours = [(s["time"] - t0) / 3600 for s in tl]
        accounts = sorted({a for s in tl for a in s["real"]} | {a for s in tl for a in s["throughput_real"]})
        files.append(shares(out / f"shares-{safe_name(name)}.png", f"{name}: GPUs placed and their throughput per account",
                            hours, {a: [s["real"].get(a, 0) for s in tl] for a in accounts},
                            {a: [s["throughput_real"].get(a, 0.0) for s in tl] for a in accounts},
                            gpus_label="GPUs placed (real)", xlabel=xlabel))
        fair[name] = (hours, [s["fairness"] for s in tl])
    files.append(cdf(out / "jct-cdf.png", rep["jobs"]["by_policy"], xlabel="job time, first start to last end (h)",
                     title="job times from the hook records (no submit time: not JCT)"))
    files.append(fairness(out / "fairness.png", fair, xlabel=xlabel))
    values = {}
    for name, p in rep["policies"].items():
        f = p["fairness"]["real"]
        values[name] = {**p, "envy_share": f["rounds_with_envy"] / f["rounds"] if f["rounds"] else 0.0,
                        "si_share": f["rounds_with_si_violation"] / f["rounds"] if f["rounds"] else 0.0}
    files.append(compare(out / "compare.png", values, REPORT_METRICS))
    return files
