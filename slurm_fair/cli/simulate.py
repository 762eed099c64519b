"""``slurm-fair simulate``: the daemon's rounds on a simulated cluster, driven by a job trace (issue 12)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..catalog import POLICIES
from ..errors import InputError, SlurmFairError
from .common import fail, json_option
from .table import render


def _trace(paths: tuple[str, ...], profiles: str | None, throughputs: str | None, accounts: str, unmeasured: str,
           generate: int | None, seed: int, gen_accounts: int, rate: float, mean_duration: float,
           capacity: dict[str, int] | None = None):
    from ..sim import csv_trace, gavel_trace, synthetic_trace

    if generate is not None:
        if paths:
            raise InputError("--generate", generate, "is used instead of --trace, not with it")
        return synthetic_trace.generate(seed=seed, jobs=generate, accounts=gen_accounts, rate=rate,
                                        mean_duration=mean_duration, capacity=capacity)
    if not paths:
        raise InputError("--trace", None, "give a trace (--trace FILE, repeatable) or --generate N")
    kinds = {Path(p).suffix.lower() for p in paths}
    if kinds == {".trace"}:
        if not throughputs:
            raise InputError("--throughputs", None, "Gavel .trace files need Gavel's throughputs JSON "
                             "(physical_cluster_throughputs.json)")
        return gavel_trace.read_gavel([Path(p) for p in paths], Path(throughputs), accounts=accounts,
                                      unmeasured=unmeasured)
    if kinds == {".csv"} and len(paths) == 1:
        if not profiles:
            raise InputError("--profiles", None, "a CSV trace needs a profiles CSV (class,gpu_type,throughput)")
        return csv_trace.read_csv(Path(paths[0]), Path(profiles))
    raise InputError("--trace", list(paths), "one CSV trace, or one or more Gavel .trace files")


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


COLUMNS = (("total_throughput", "throughput"), ("mean_jct", "mean JCT s"), ("median_jct", "median JCT s"),
           ("p95_jct", "p95 JCT s"), ("makespan", "makespan s"), ("max_rho", "max rho"), ("mean_rho", "mean rho"),
           ("utilization", "GPU util"), ("preemptions", "preempt"), ("finished", "done"), ("rounds", "rounds"),
           ("wall_seconds", "wall s"))
# rounds with envy / with a sharing-incentive violation: policy's shares (ideal) / placed GPUs (real)
FAIR_COLUMNS = (("rounds_with_envy", "envy rounds i/r"), ("rounds_with_si_violation", "SI rounds i/r"))


def _fair_cell(r, key: str) -> str:
    f = r.fairness
    if not f or not f.get("real", {}).get("rounds"):
        return "-"
    return f"{f['ideal'][key]}/{f['real'][key]}"


def store_paths(path: str | None, names: list[str]) -> dict[str, Path | None]:
    """Where each policy's kept store goes: ``path`` itself for one policy, else ``<stem>.<policy><suffix>``
    beside it; an existing file is an InputError (the simulation writes a new store)."""
    if not path:
        return {n: None for n in names}
    p = Path(path)
    out = {n: p if len(names) == 1 else p.with_name(f"{p.stem}.{n}{p.suffix}") for n in names}
    for q in out.values():
        if q.exists():
            raise InputError("--store", str(q), "exists; the simulation writes a new store")
    return out


@click.command("simulate")
@click.option("--trace", "paths", multiple=True, metavar="FILE",
              help="Job trace: one CSV (submit_time,account,class,gpus,work[,gpu_type]) with --profiles, or "
                   "Gavel .trace files (one per tenant) with --throughputs. Repeatable for .trace files.")
@click.option("--profiles", metavar="FILE", help="CSV class,gpu_type,throughput (steps/s per GPU) for a CSV trace.")
@click.option("--throughputs", metavar="FILE", help="Gavel's physical_cluster_throughputs.json, for .trace files.")
@click.option("--accounts", type=click.Choice(["file", "job"]), default="file", show_default=True,
              help="Gavel traces: one account per trace file (tenant), or one per job (as Gavel treats jobs).")
@click.option("--unmeasured", type=click.Choice(["error", "scale", "skip"]), default="error", show_default=True,
              help="Gavel traces: a job at a scale factor Gavel did not measure is an error, gets the throughput "
                   "of a smaller measured one scaled linearly, or is left out.")
@click.option("--generate", type=click.IntRange(min=1), default=None, metavar="N",
              help="Instead of a trace: N jobs drawn like Philly (seeded, Poisson arrivals), sizes that fit --cluster.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --generate.")
@click.option("--gen-accounts", type=click.IntRange(min=1), default=8, show_default=True, help="Accounts of --generate.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True,
              help="Arrivals per hour of --generate.")
@click.option("--mean-duration", type=click.FloatRange(min=0, min_open=True), default=3600.0, show_default=True,
              help="Mean job duration of --generate, seconds on the class's slowest type.")
@click.option("--cluster", "spec", required=True, metavar="SPEC",
              help="GPUs per type, e.g. k80=36,p100=36,v100=36 (nodes of --node-size GPUs of one type).")
@click.option("--node-size", type=click.IntRange(min=1), default=4, show_default=True, help="GPUs per node.")
@click.option("--policy", "policy", default="oef-coop", show_default=True, metavar="NAME",
              help="Policy of the daemon: " + ", ".join(POLICIES) + ".")
@click.option("--compare", "compare", default=None, metavar="LIST", help="Comma-separated policies to run one after another.")
@click.option("--round", "round_s", type=click.FloatRange(min=1), default=300.0, show_default=True,
              help="Seconds between daemon rounds.")
@click.option("--restart", "restart_s", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Checkpoint-restart delay of a requeued job, seconds.")
@click.option("--preemption/--no-preemption", default=False, show_default=True,
              help="Run the daemon with preemption.enabled (checkpoint signal, grace, requeue). Default off, as the "
                   "daemon's default (preemption.enabled = false).")
@click.option("--upgrade/--no-upgrade", default=True, show_default=True,
              help="Run the daemon with upgrade moves (preemption.upgrade = \"checkpointing\", the daemon's default; "
                   "every simulated job checkpoints): running jobs on slow GPU types move to idle faster ones when "
                   "the time saved pays for the restart. --no-upgrade: upgrade = \"off\" (no moves). Reclaim stays "
                   "as --preemption says.")
@click.option("--dry-run", is_flag=True, default=False,
              help="Run the daemon with daemon.dry_run: rounds compute but set no limit, SiteFactor or type map, so "
                   "the simulated Slurm schedules alone (by --priority, first come first served by default; untyped "
                   "jobs on their fastest free type unless --node-weights): the baseline.")
@click.option("--priority", "slurm_priority", type=click.Choice(["fifo", "fairshare", "fairshare-classic"]),
              default="fifo", show_default=True,
              help="The simulated Slurm's own job priority: fifo (SiteFactor, then submit time); fairshare "
                   "(priority/multifactor with Fair Tree: PriorityWeightFairshare 10000 x fair-share factor + "
                   "PriorityWeightAge 1000 x age, PriorityMaxAge 7 days; usage decayed with a 7-day half-life, the "
                   "factors recomputed every 5 minutes; one user per account); fairshare-classic (the same with "
                   "PriorityFlags=NO_FAIR_TREE). With or without --dry-run: under the daemon, the daemon's "
                   "SiteFactor adds on top, as in Slurm.")
@click.option("--billing", type=click.Choice(["flat", "by-type"]), default="flat", show_default=True,
              help="TRESBillingWeights of fair-share usage: flat (1 per GPU) or by-type (each GPU type weighs its "
                   "mean speed over the trace's classes, the slowest 1). Needs --priority fairshare or "
                   "fairshare-classic.")
@click.option("--past-usage", "past_usage", metavar="LIST", default=None,
              help="Fair-share usage of accounts at the start, billed GPU-seconds: ACCOUNT=USAGE,... "
                   "(e.g. a=36000,b=0; accounts left out: 0). Needs --priority fairshare or fairshare-classic.")
@click.option("--node-weights", "node_weights", metavar="ORDER", default=None,
              help="GPU types in the order of their nodes' Weight, lowest first (e.g. k80,p100,v100; types left out "
                   "come after, by name): the simulated Slurm starts an untyped job on the first that fits, one "
                   "site-wide order, instead of the job's fastest type (the default).")
@click.option("--horizon", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Stop after S simulated seconds (default: when every job is done).")
@click.option("--jobs-csv", metavar="FILE", help="Also write one row per job and policy (submit, start, end, JCT, rho).")
@click.option("--runs-csv", metavar="FILE", help="Also write one row per run of a job and policy (a requeued or moved job "
              "has several): policy, id, account, class, gpus, submit, type, start, end, ended (1: the run that ended "
              "the job); a job that never started has empty type, start and end.")
@click.option("--store", "store_path", metavar="PATH", help="Keep the daemon's store (SQLite) there, a new file, for "
              "`slurm-fair report --database PATH`; with --compare one per policy: PATH's name with .POLICY "
              "before the suffix.")
@click.option("--plot", "plot_dir", metavar="DIR", help="Write PNG plots there (needs matplotlib): GPUs and throughput "
              "per account over time per policy, the JCT distribution, envy and sharing-incentive violations per "
              "round, a policy comparison.")
@json_option(help='Print JSON: {"policies": {name: {total_throughput, mean_jct, median_jct, p95_jct, makespan, '
                  'max_rho, ..., fairness: {ideal|real: {rounds_with_envy, max_envy_pairs, '
                  'rounds_with_si_violation, ...}, realized: {accounts, long_episodes, time_to_fair_share, '
                  'envy}}}} (realized fairness: docs/realized-fairness.md).')
def simulate_cmd(paths, profiles, throughputs, accounts, unmeasured, generate, seed, gen_accounts, rate, mean_duration, spec,
                 node_size, policy, compare, round_s, restart_s, preemption, upgrade, dry_run, slurm_priority, billing,
                 past_usage, node_weights, horizon, jobs_csv, runs_csv, store_path, plot_dir, as_json) -> None:
    """Simulate a job trace on a cluster under the daemon's own round code (observe, solve, place, apply,
    preempt), one policy or several side by side: throughput, JCT, makespan, finish-time fairness, and the
    rounds whose shares (i) and placed GPUs (r) had envy or sharing-incentive violations. The daemon runs with
    its own defaults: no reclaim (--preemption turns it on), upgrade moves of the jobs that checkpoint
    (--no-upgrade turns them off).

    \b
        slurm-fair simulate --generate 200 --cluster k80=8,v100=8 --compare gavel,oef-coop
    """
    from .. import policies
    from ..sim.cluster import cluster_spec, node_order

    try:
        names = [n.strip() for n in (compare or policy).split(",") if n.strip()]
        for n in names:
            policies.get(n)
        nodes = cluster_spec(spec, node_size)
        order = None if node_weights is None else list(node_order(
            tuple(_capacity(nodes)), [t for t in node_weights.split(",") if t.strip()], "--node-weights"))
        for flag, v in (("--billing", None if billing == "flat" else billing), ("--past-usage", past_usage)):
            if v is not None and slurm_priority == "fifo":
                raise InputError(flag, v, "is fair-share usage: it needs --priority fairshare or fairshare-classic")
        history = _past_usage(past_usage)
        trace = _trace(paths, profiles, throughputs, accounts, unmeasured, generate, seed, gen_accounts, rate,
                       mean_duration, _capacity(nodes))
        for a in sorted(set(history or {}) - set(trace.accounts())):
            raise InputError("--past-usage", a, "names no account of the trace (" + ", ".join(trace.accounts()) + ")")
        stores = store_paths(store_path, names)
    except (SlurmFairError, OSError) as e:
        fail(e if isinstance(e, SlurmFairError) else InputError("--trace", getattr(e, "filename", None), str(e)))
    results = {}
    show = not as_json and sys.stderr.isatty()
    try:
        _run_all(names, trace, nodes, results, show, stores, round_s=round_s, restart_s=restart_s,
                 preemption=preemption, upgrade=upgrade, dry_run=dry_run, horizon=horizon, priority=slurm_priority,
                 billing=billing, node_weights=order, past_usage=history)
    except SlurmFairError as e:  # e.g. a trace job that can never fit the cluster: exit 2, no traceback
        fail(e)
    if jobs_csv:
        import csv

        with open(jobs_csv, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["policy", "id", "account", "class", "gpus", "submit", "start", "end", "jct", "rho", "restarts", "types"])
            for n, r in results.items():
                for row in r.job_rows:
                    w.writerow([n, row["id"], row["account"], row["class"], row["gpus"], row["submit"], row["start"],
                                row["end"], row.get("jct"), row.get("rho"), row["restarts"], " ".join(row["types"])])
    if runs_csv:
        _write_runs_csv(runs_csv, results)
    if plot_dir:
        from ..sim.plots import plot_all

        try:
            files = plot_all(results, plot_dir)
        except (SlurmFairError, OSError) as e:
            fail(e if isinstance(e, SlurmFairError) else InputError("--plot", plot_dir, str(e)))
        if not as_json:
            click.echo("plots: " + ", ".join(str(f) for f in files), err=True)
    if as_json:
        click.echo(json.dumps({"policies": {n: r.summary() for n, r in results.items()}}, indent=2))
    else:
        click.echo(f"trace: {len(trace.jobs)} jobs, {len(trace.accounts())} accounts; cluster: "
                   + ", ".join(f"{t}={c}" for t, c in _capacity(nodes).items()) + f"; round {round_s:g} s")
        click.echo(render(["policy", *(h for _k, h in COLUMNS), *(h for _k, h in FAIR_COLUMNS)],
                          [[n, *(_fmt(r.summary()[k]) for k, _h in COLUMNS), *(_fair_cell(r, k) for k, _h in FAIR_COLUMNS)]
                           for n, r in results.items()]))
        if store_path:
            click.echo("stores: " + ", ".join(str(p) for p in stores.values()), err=True)
        for n, r in results.items():
            for e in r.round_errors[:5]:
                click.echo(f"{n}: {e}", err=True)
    if any(r.round_errors for r in results.values()):
        raise SystemExit(1)


def _past_usage(text: str | None) -> dict[str, float] | None:
    """``--past-usage`` ``a=36000,b=0`` -> {account: billed GPU-seconds}."""
    if text is None:
        return None
    out: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        a, eq, v = part.partition("=")
        try:
            val = float(v)
        except ValueError:
            val = -1.0
        if not eq or not a.strip() or not (val >= 0 and val != float("inf")):
            raise InputError("--past-usage", part, "must be ACCOUNT=USAGE, USAGE billed GPU-seconds >= 0")
        out[a.strip()] = val
    return out


def _write_runs_csv(path: str, results) -> None:
    """``--runs-csv``: one row per run of a job and policy (``sim.runs.runs_csv_rows``)."""
    import csv

    from ..sim.runs import RUNS_CSV_COLUMNS, runs_csv_rows

    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(RUNS_CSV_COLUMNS)
        for n, r in results.items():
            w.writerows(runs_csv_rows(n, r.runs))


def _capacity(nodes) -> dict[str, int]:
    out: dict[str, int] = {}
    for g in nodes.values():
        for t, c in g.items():
            out[t] = out.get(t, 0) + c
    return dict(sorted(out.items()))


def register(group: click.Group) -> None:
    group.add_command(simulate_cmd)


def _run_all(names, trace, nodes, results, show, stores, **kw) -> None:
    """Simulate each policy of ``names`` into ``results`` (a progress bar on a terminal)."""
    from ..sim.engine import simulate

    for n in names:
        if show:
            with click.progressbar(length=len(trace.jobs), label=f"{n:>14}", file=sys.stderr) as bar:
                last = [0]

                def tick(_t, done, _total, bar=bar, last=last):
                    bar.update(done - last[0])
                    last[0] = done

                results[n] = simulate(trace, nodes, n, progress=tick, store_path=stores[n], **kw)
        else:
            results[n] = simulate(trace, nodes, n, store_path=stores[n], **kw)
