"""``slurm-fair report``: what the store recorded over a window of time (shares, GPUs placed, throughput and
fairness per account and round, policies compared, job times, preemptions), as a table, JSON or PNG charts.
The data come from :mod:`slurm_fair.views.report`; this module only parses and prints."""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path
from typing import Any

import click

from .. import config as config_mod
from ..errors import InputError
from .common import config_option, handle_errors, json_option
from .table import render

WHEN_HELP = ("an ISO date or date-time (2026-11-25, 2026-11-25T14:00, local time unless it has an offset) or a "
             "span before now: a number and s, m, h, d or w (90m, 2h, 3d)")


def _time(t: float | None) -> str:
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") if t is not None else "-"


def _f(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _h(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.2f}"


def _ir(f: dict, key: str) -> str:
    return f"{f['ideal'][key]}/{f['real'][key]}" if f["real"]["rounds"] else "-"


def _dur(seconds: float | None) -> str:
    """A duration that reads at a glance: 42s, 12.5m, 3.20h (one unit per cell)."""
    if seconds is None:
        return "-"
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.2f}h"


def _print_waits(waits: dict) -> None:
    rows = [[a, t, w["jobs"], w["with_submit"], _dur(w["wait_mean_s"]), _dur(w["wait_p50_s"]), _dur(w["wait_p95_s"]),
             _dur(w["jct_mean_s"])]
            for a, row in (waits.get("by_account") or {}).items() for t, w in row.items()]
    click.echo("")
    if not rows:
        click.echo("queue wait and JCT: no finished GPU job in the window")
        return
    click.echo(render(["ACCOUNT", "GPU TYPE", "JOBS", "WITH SUBMIT", "WAIT MEAN", "WAIT P50", "WAIT P95", "JCT MEAN"],
                      rows, right=range(2, 8)))
    click.echo("WAIT: queue wait, first start - submit; JCT: job completion time, last end - submit; over the "
               "finished GPU jobs whose hook records hold the submit time (WITH SUBMIT of JOBS); GPU TYPE: the type "
               "the job's first run got ('untyped': counted in gres/gpu only, '?': not read)")


def _print_table(rep: dict) -> None:
    click.echo(f"{rep['rounds']} round(s) from {_time(rep['first'])} to {_time(rep['last'])}: "
               + ", ".join(f"{n} {s}" for s, n in sorted(rep["statuses"].items())))
    click.echo("")
    click.echo(render(
        ["POLICY", "ROUNDS", "OK", "ROUND_S", "SOLVE_S", "THROUGHPUT", "ENVY ROUNDS I/R", "SI ROUNDS I/R",
         "MAX ENVY PAIRS I/R", "MIN SI RATIO I/R", "JOBS", "MEAN JOB H"],
        [[n, p["rounds"], p["ok_rounds"], _f(p["mean_round_seconds"]), _f(p["mean_solve_seconds"]),
          _f(p["mean_total_throughput"]), _ir(p["fairness"], "rounds_with_envy"),
          _ir(p["fairness"], "rounds_with_si_violation"), _ir(p["fairness"], "max_envy_pairs"),
          f"{_f(p['fairness']['ideal']['min_si_ratio'])}/{_f(p['fairness']['real']['min_si_ratio'])}",
          p["jobs"]["count"], _h(p["jobs"]["mean_s"])] for n, p in rep["policies"].items()]))
    jobs = rep["jobs"]
    pre = rep["preemptions"]["by_account"]
    click.echo("")
    click.echo(render(
        ["ACCOUNT", "ROUNDS", "IDEAL", "REAL", "LIMIT", "THROUGHPUT I/R", "JOBS", "MEAN JOB H", "PREEMPTED"],
        [[a, v["rounds"], _f(v["mean_ideal"]), _f(v["mean_real"]), _f(v["mean_limit"]),
          f"{_f(v['mean_throughput_ideal'])}/{_f(v['mean_throughput_real'])}",
          jobs["by_account"].get(a, {}).get("count", 0), _h(jobs["by_account"].get(a, {}).get("mean_s")),
          pre.get(a, 0)] for a, v in rep["accounts"].items()]))
    click.echo("")
    click.echo("IDEAL, REAL, LIMIT: mean GPUs per round (policy's share, whole GPUs placed, limit set); THROUGHPUT: "
               "mean normalized throughput of the share / of the placed GPUs; I/R: policy's shares / placed GPUs")
    click.echo(f"jobs: {jobs['count']} finished; run time, first start to last end (requeues included): mean "
               f"{_h(jobs['mean_s'])} h, median {_h(jobs['median_s'])} h, p95 {_h(jobs['p95_s'])} h")
    _print_waits(rep.get("waits") or {})
    by_state = rep["preemptions"]["by_state"]
    click.echo(f"preemptions: {rep['preemptions']['total']}"
               + (" (" + ", ".join(f"{n} {s}" for s, n in by_state.items()) + ")" if by_state else ""))
    if rep["fairness"]["errors"]:
        click.echo(f"fairness counts failed in {rep['fairness']['errors']} round(s) (see their details)")
    _print_realized(rep.get("realized") or {})


def _print_realized(r: dict) -> None:
    click.echo("")
    if "error" in r:
        click.echo(f"realized fairness: not computed: {r['error']}")
        return
    if not r:
        return
    click.echo(f"realized fairness from {_time(r['since'])} to {_time(r['until'])} (docs/realized-fairness.md):")
    rows = [[a, _f(v["weight"]), _f(v["ratio"]), _f(v["worst_episode_ratio"]), v["episodes"],
             _dur(v["backlogged_s"]), _dur(v["time_to_fair_share"]["median"]), _dur(v["time_to_fair_share"]["max"]),
             _f(v["envy_share"]), v["jobs_ended"], _dur(v["mean_jct"]), _f(v["throughput_share"])]
            for a, v in r["accounts"].items()]
    click.echo(render(["ACCOUNT", "WEIGHT", "RATIO", "WORST", "EPISODES", "BACKLOGGED", "TTFS P50", "TTFS MAX",
                       "ENVY", "JOBS", "MEAN JCT", "THROUGHPUT"], rows, right=range(1, 12)))
    envy = r["envy"]
    click.echo("RATIO: speed-weighted GPU-time received while backlogged (a job that fits its share "
               "of a type pending) over its share's "
               "(weight's part of every type, worth to its jobs that fit it, each at its class's speeds up to its "
               "GPUs), time-weighted over its episodes; WORST: its lowest episode; TTFS: time to 95 % of that "
               "rate; ENVY: share of its pair-time (it and another with jobs) in which it was backlogged and "
               "would rather hold the other's GPUs (scaled by weights, > 5 %); JOBS, MEAN JCT: jobs that ended "
               "in the window; THROUGHPUT: its share of all received speed-weighted GPU-time")
    click.echo(f"envy of held GPUs: {_f(envy['share'], 3)} of {_f(envy['compared_pair_hours'])} compared "
               f"pair-hours; capacity: " + ", ".join(f"{g}={n}" for g, n in sorted(r["capacity"].items())))
    if r["unprofiled"]:
        click.echo("no profile (speed 1 on every type): " + ", ".join(r["unprofiled"]))
    if r.get("assumed"):
        click.echo("speed assumed (the class's slowest known, no profile there): "
                   + ", ".join(f"{c} on {'/'.join(ts)}" for c, ts in r["assumed"].items()))
    if r["default_weight"]:
        click.echo("no round weighed (weight 1): " + ", ".join(r["default_weight"]))
    if r["left_out"]:
        gs = sum(x["gpu_seconds"] for x in r["left_out"])
        why = sorted({x["why"] for x in r["left_out"]})
        click.echo(f"left out: {len(r['left_out'])} job(s), {gs / 3600:.2f} GPU-hours in the window ("
                   + "; ".join(why) + ")")
    if r["no_submit"]:
        click.echo(f"{len(r['no_submit'])} job(s) without a recorded submit time: counted from their first start")
    if r.get("pending"):
        click.echo(f"{len(r['pending'])} job(s) pending at the window's end without a start: counted waiting from "
                   "their submit time (the rounds saw them pending)")
    click.echo("not seen: " + r["not_seen"])


@click.command("report")
@config_option
@click.option("--database", "db_path", metavar="PATH",
              help="Read this store instead of the config's daemon.database (e.g. one kept by "
                   "`slurm-fair simulate --store PATH`).")
@click.option("--since", metavar="WHEN", help="From WHEN on (rounds started, jobs whose last run ended, preemptions "
              "made at or after it): " + WHEN_HELP + ".")
@click.option("--until", metavar="WHEN", help="Up to WHEN (same forms).")
@click.option("--plot", "plot_dir", metavar="DIR",
              help="Write PNG charts there (needs matplotlib): GPUs placed and throughput per account over time "
                   "per policy, job times, envy and sharing-incentive violations per round, a policy comparison.")
@json_option(help='Print JSON: {window, rounds, first, last, statuses, policies {name: {rounds, ok_rounds, '
                  'mean_round_seconds, mean_solve_seconds, mean_total_throughput, fairness, jobs}}, fairness, '
                  'accounts, jobs, waits {jobs, with_submit, by_account {account: {gpu type: {jobs, with_submit, '
                  'wait_mean_s, wait_p50_s, wait_p95_s, wait_max_s, jct_mean_s, run_mean_s}}}}, preemptions, '
                  'timeline, realized {since, until, accounts {account: {weight, ratio, worst_episode_ratio, episodes, '
                  'backlogged_s, time_to_fair_share {median, max, censored}, envy_share, jobs_ended, mean_jct, '
                  'throughput, throughput_share}}, episodes, long_episodes, time_to_fair_share, envy, capacity, '
                  'unprofiled, assumed, default_weight, runs, left_out, no_submit, pending, not_seen} (or {error})}.')
@handle_errors
def report_cmd(config_path: str | None, db_path: str | None, since: str | None, until: str | None,
               plot_dir: str | None, as_json: bool) -> None:
    """What the store recorded over a window: per account and round the policy's share, the whole GPUs
    placed, the limit and their throughput; envy and sharing-incentive violations per round; each policy
    used (rounds, round seconds, throughput, fairness); job times from the hook records, and per account and
    GPU type the queue wait (start - submit, mean, p50, p95) and JCT (end - submit); preemptions; and
    realized fairness per account over the window (--since, else the first round; --until, else now): the
    share ratio it received while backlogged, its worst episode, time to fair share, envy of held GPUs, mean
    JCT and throughput share (docs/realized-fairness.md). Shadow mode (daemon.dry_run) reports it too: how
    fair the cluster is under Slurm alone.

    \b
        slurm-fair report --since 3d
        slurm-fair report --since 2026-11-01 --until 2026-11-08 --plot /tmp/report
        slurm-fair report --database sim.sqlite --json
    """
    from ..views import report
    from ..store import Store

    now = time.time()
    lo = report.parse_when("--since", since, now)
    hi = report.parse_when("--until", until, now)
    if lo is not None and hi is not None and hi < lo:
        raise InputError("--until", until, f"is before --since ({since})")
    cfg = None
    if db_path is not None:
        path = Path(db_path)
        if not path.is_file():
            raise InputError("--database", db_path, "no such file")
        if config_path is not None:
            cfg = config_mod.load(config_path)
    else:
        cfg = config_mod.load(config_path)
        path = Path(cfg.database_path)
        if not path.is_file():
            click.echo(f"no store at {path} yet: no rounds to report (start the daemon: slurm-fair daemon)")
            return
    with Store(path, read_only=True) as store:  # creates, migrates and re-permissions nothing
        rep = report.load(store, lo, hi, now=now, cfg=cfg)
    if rep["rounds"] == 0:
        where = ("in the store" if lo is None and hi is None
                 else f"between {_time(lo) if lo is not None else 'the start'} and {_time(hi) if hi is not None else 'now'}")
        if as_json:
            click.echo(json.dumps({**rep, "message": f"no rounds {where}"}, indent=2, sort_keys=True))
        elif (rep.get("realized") or {}).get("runs"):  # jobs ran in the window: their realized fairness
            click.echo(f"no rounds {where}")
            _print_realized(rep["realized"])
        else:
            click.echo(f"no rounds {where}: nothing to report")
        return
    if plot_dir:
        from ..plots import plot_report

        try:
            files = plot_report(rep, plot_dir)
        except OSError as e:
            raise InputError("--plot", plot_dir, str(e)) from None
        click.echo("plots: " + ", ".join(str(f) for f in files), err=True)
    if as_json:
        click.echo(json.dumps(rep, indent=2, sort_keys=True))
    else:
        _print_table(rep)


def register(group: click.Group) -> None:
    group.add_command(report_cmd)
