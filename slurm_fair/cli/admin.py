"""Admin commands: ``daemon``, ``status``, ``shares``, ``history``, ``apply``, ``explain``.

They only parse options and print; the work is in :mod:`slurm_fair.daemon` (round, service, report).
"""

from __future__ import annotations

import datetime
import json
import sys
from typing import Any

import click

from ..config import Config
from .. import config as config_mod
from ..cluster.base import ANY_GPU
from ..cluster.errors import ClusterError
from ..errors import InputError, SlurmFairError
from ..text import printable
from .common import config_option, handle_errors, json_option
from .table import render






def _reader(cfg: Config, live: bool = False, instead: str = "showing Slurm's view only") -> Any:
    """The database opened read-only for a command that only reads: a missing one is an error naming the path
    (exit 1); nothing is created, migrated or re-permissioned. ``live``: the command also shows what Slurm says
    (``status``, ``explain``, ``apply``), so a missing database is a note on stderr (ending with ``instead``) and
    an empty store in memory stands in for it (no rounds yet)."""
    from ..store import MissingDatabase, Store, open_existing

    try:
        return open_existing(cfg.database_path)
    except MissingDatabase as e:
        if not live:
            raise
        click.echo(f"note: {e}; {instead}", err=True)
        return Store(":memory:")


def _cluster(cfg: Config, timeout: float | None = None) -> tuple[Any, str]:
    from ..cluster import connect

    try:
        return connect(backend=cfg.cluster.backend, timeout=float(timeout or cfg.cluster.timeout)), ""
    except ClusterError as e:
        return None, str(e)


def _snapshot(cfg: Config) -> tuple[Any, str]:
    """What Slurm shows now, for status/explain (at most 10 s: they fall back to the last round)."""
    from ..views.status import live_snapshot

    cluster, why = _cluster(cfg, timeout=min(float(cfg.cluster.timeout), 10.0))
    if cluster is None:
        return None, why
    return live_snapshot(cluster)


def _types(d: dict) -> str:
    return " ".join(f"{'any' if k == ANY_GPU else printable(k, 40)}={_num(v)}" for k, v in sorted(d.items(), key=lambda kv: kv[0] == ANY_GPU)
                    if v not in (None, 0, 0.0) or k == ANY_GPU) or "-"


def _num(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def _time(t: float | None) -> str:
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") if t else "-"


def _dump(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))


# ------------------------------------------------------------------------------------------- daemon


@click.command("daemon")
@config_option
@click.option("--once", is_flag=True, help="Run one round and exit (serves no /metrics): exit 0, or 3 when the round "
              "failed (recorded error or solver-failed, or not recorded); an unreachable cluster or a standby host "
              "exits 0, another host's lease 1.")
@click.option("--dry-run", is_flag=True, help="Compute and record rounds (status dry-run) but change nothing in Slurm.")
@handle_errors
def daemon_cmd(config_path: str | None, once: bool, dry_run: bool) -> None:
    """Run the slurm-fair daemon: every daemon.period seconds, turn the cluster's GPU jobs and profiled
    speedups into per-account per-GPU-type GrpTRES limits and job SiteFactors, and record why. With
    submit.type_map set, also publish the GPU type map that etc/job_submit.lua uses to type untyped requests.

    One instance per database (lock file <database>.lock), and per cluster: a daemon on another host that
    holds the database's lease makes this one exit 1, naming it and when the lease expires; with
    daemon.only_on_primary, rounds run only on the slurmctld host that serves (docs/daemon.md, "High
    availability"). SIGTERM finishes the current round and exits 0; SIGHUP reloads the config. One log line
    per round on stderr.

    Prometheus metrics are served at http://<metrics.listen>/metrics (127.0.0.1:9817 by default; "" = off),
    refreshed after every round; an address that cannot be bound is logged and the daemon runs on.
    """
    from ..daemon.service import serve

    sys.exit(serve(config_path, once=once, dry_run=dry_run))


# ------------------------------------------------------------------------------------------- status


@click.command("status")
@config_option
@json_option
@handle_errors
def status_cmd(config_path: str | None, as_json: bool) -> None:
    """Last round per account: weight, ideal share per GPU type, guarantee (the rounded share), deviation, limit
    in Slurm now (if Slurm answers; '-': none, every GPU no one claims is lent), GPUs in use and pending
    GPUs. Reads the database read-only and creates none: without one, Slurm's view alone (a note on stderr)."""
    from ..views.status import status

    cfg = config_mod.load(config_path)
    snap, why = _snapshot(cfg)
    with _reader(cfg, live=True) as store:
        st = status(store, cfg, snap, why)
    if as_json:
        _dump(st)
        return
    if st["round"] is None:
        click.echo("no completed round yet (start the daemon: slurm-fair daemon)")
    else:
        click.echo(f"round {st['round']} ({st['round_status']}, {_time(st['finished'])}), policy {st['policy']}")
    lr = st["latest_round"]
    if lr and lr["id"] != st["round"]:
        click.echo(f"latest round {lr['id']}: {lr['status']} {printable(lr['message'] or '', 300)}".rstrip())
    if not st["reachable"]:
        click.echo(f"Slurm not reachable ({printable(st['unreachable'], 300)}): limits, usage and pending are from "
                   "the last round")
    rows = [[a, _num(v["weight"]) if v["weight"] is not None else "-", _types(v["ideal"]), _types(v["real"]),
             _types(v["deviation"]), _types(v["limits"]), _types(v["in_use"]), v["pending_gpus"]]
            for a, v in st["accounts"].items()]
    click.echo(render(["ACCOUNT", "WEIGHT", "IDEAL", "GUARANTEE", "DEVIATION",
                       "LIMIT (SLURM)" if st["reachable"] else "LIMIT (PLANNED)", "IN USE", "PENDING"], rows))
    received = st["received_gpu_seconds"]
    if received:
        click.echo("\nreceived GPU-hours (from the hooks' job records)")
        click.echo(render(["ACCOUNT", "GPU-HOURS BY TYPE", "TOTAL"],
                          [[a, " ".join(f"{t}={v / 3600:.3f}" for t, v in sorted(per.items())),
                            f"{sum(per.values()) / 3600:.3f}"] for a, per in sorted(received.items())]))
    if st["unrecorded"]:
        click.echo("NO LIMIT WRITTEN: the database has no record of what slurm-fair wrote, and these accounts have "
                   "GPU limits (a new install on a site with its own, or a lost database facing an earlier "
                   "install's): " + "; ".join(f"{a} " + ",".join(f"{k}={v}" for k, v in sorted(ch.items()))
                                            for a, ch in sorted(st["unrecorded"].items()))
                   + " — `slurm-fair limits adopt` keeps them as the site's, `slurm-fair limits clear ACCOUNT...` "
                   "removes an earlier install's")
    for a, ch in sorted(st["hand_set"].items()):
        click.echo(f"set by hand, kept (slurm-fair does not write them): {a} "
                   + ", ".join(f"{'gres/gpu' if k == '*' else 'gres/gpu:' + k}={'none' if v == -1 else v}"
                               for k, v in sorted(ch.items())))
    if st["preemptions"]:
        click.echo("preemptions: " + ", ".join(f"{n} {state}" for state, n in sorted(st["preemptions"].items())))
    _conflicts(st["profile_conflicts"])


def _conflicts(conflicts: list[dict]) -> None:
    """Profile conflicts: a tenant's reported speedup vs its measured one (profiling.core.find_conflicts)."""
    if not conflicts:
        return
    click.echo("\nprofile conflicts (reported speedup vs measured, relative to the REF type; ACTION: "
               "[profiling] on_conflict):")
    click.echo(render(["ACCOUNT", "CLASS", "GPU_TYPE", "REF", "REPORTED", "MEASURED", "RATIO", "SAMPLES", "ACTION"],
                      [[c["account"], c["class"], c["gpu_type"], c["reference"], f"{c['reported_speedup']:.3g}x",
                        f"{c['measured_speedup']:.3g}x", f"{c['ratio']:.3g}", c["samples"], c.get("action", "flag")]
                       for c in conflicts]))


# ------------------------------------------------------------------------------------------- shares


@click.command("shares")
@config_option
@click.option("--round", "round_id", type=int, default=None, help="Round id (default: the last ok/dry-run round).")
@json_option
@handle_errors
def shares_cmd(config_path: str | None, round_id: int | None, as_json: bool) -> None:
    """Ideal (fractional) GPUs per account, class and GPU type of a round, and the account placements
    (rounded, deviation before, limit after work conservation). A missing database is an error (exit 1); none
    is created."""
    from ..store import as_row

    cfg = config_mod.load(config_path)
    with _reader(cfg) as store:
        r = store.round(round_id)
        if r is None:
            raise InputError("--round", round_id, "no such round" if round_id else "no completed round yet")
        shares, places = store.shares(r.id), store.placements(r.id)
    if as_json:
        _dump({"round": r.id, "policy": r.policy, "status": r.status, "shares": [as_row(s) for s in shares],
               "placements": [as_row(p) for p in places]})
        return
    click.echo(f"round {r.id} ({r.status}), policy {r.policy}")
    click.echo(render(["ACCOUNT", "CLASS", "GPU_TYPE", "IDEAL"],
                      [[s.account, s.cls, s.gpu_type, f"{s.ideal:.3f}"] for s in shares if s.ideal > 1e-9]))
    click.echo("")
    click.echo(render(["ACCOUNT", "GPU_TYPE", "IDEAL", "DEV_BEFORE", "REAL", "LIMIT"],
                      [[p.account, p.gpu_type, f"{p.ideal:.3f}", f"{p.deviation_before or 0:.3f}",
                        p.real, p.limit] for p in places]))


# ------------------------------------------------------------------------------------------- history


@click.command("history")
@config_option
@click.option("-n", "limit", type=click.IntRange(1, 100000), default=20, show_default=True, help="Rounds to show.")
@json_option
@handle_errors
def history_cmd(config_path: str | None, limit: int, as_json: bool) -> None:
    """The newest rounds: time, status, policy, accounts, changes, solve and total seconds, message. A missing
    database is an error (exit 1); none is created."""
    from ..store import as_row, open_existing

    cfg = config_mod.load(config_path)
    with open_existing(cfg.database_path) as store:
        rows = store.rounds(limit=limit)
    if as_json:
        _dump([{k: v for k, v in as_row(r).items() if k != "details"} for r in rows])
        return
    click.echo(render(["ROUND", "STARTED", "STATUS", "POLICY", "ACCOUNTS", "CHANGES", "SOLVE_S", "ROUND_S", "MESSAGE"],
                      [[r.id, _time(r.started), r.status, r.policy, r.n_accounts or 0,
                        r.n_changes or 0, f"{r.solve_seconds or 0:.2f}",
                        f"{(r.finished or r.started) - r.started:.2f}", (r.message or "")[:60]]
                       for r in rows]))


# ------------------------------------------------------------------------------------------- apply


@click.command("apply")
@config_option
@click.option("--commit", is_flag=True, help="Run one real round (like `daemon --once`): write what it decides.")
@click.option("--dry-run", is_flag=True, help="Only print what the next round would change (the default).")
@json_option
@handle_errors
def apply_cmd(config_path: str | None, commit: bool, dry_run: bool, as_json: bool) -> None:
    """Compute the next round now and print the limit and SiteFactor changes it would make, without changing
    Slurm or slurm-fair's database: it opens the database read-only and creates none (without one it plans as the
    first round of a new database would, a note on stderr). With --commit: run one real round (like
    `daemon --once`; in shadow mode, daemon.dry_run = true, it records but still writes nothing to Slurm)."""
    if commit and dry_run:
        raise InputError("--commit", True, "and --dry-run contradict each other")
    if commit:
        from ..daemon.service import serve

        sys.exit(serve(config_path, once=True))
    from ..daemon.round import run_round

    cfg = config_mod.load(config_path)
    cluster, why = _cluster(cfg)
    if cluster is None:
        raise SlurmFairError(f"cannot reach the cluster: {why}")
    with _reader(cfg, live=True, instead="planning as the first round of a new database would") as store:
        res = run_round(cluster, store, cfg, record=False)  # writes nothing: the store is read-only
    if res.status not in ("ok", "dry-run"):
        raise SlurmFairError(f"round would fail: {res.status}: {res.message}")
    plan = res.plan
    if as_json:
        _dump({"policy": res.policy, "limit_changes": res.limit_changes,
               "site_factor_changes": {str(k): v for k, v in res.factor_changes.items()},
               "limits": plan.limits, "ideal": plan.ideal, "real": plan.real, "deviations": plan.deviations})
        return
    before = res.details.limits_before if res.details else {}
    click.echo(f"dry run (policy {res.policy}): nothing was changed")
    if res.limit_changes:
        click.echo(render(["ACCOUNT", "LIMIT", "NOW", "WOULD_BE"],
                          [[a, "gres/gpu" if k == ANY_GPU else f"gres/gpu:{k}",
                            before.get(a, {}).get(k, "-"), "clear" if v == -1 else v]
                           for a, ch in res.limit_changes.items() for k, v in ch.items()]))
    else:
        click.echo("no limit changes")
    click.echo(f"{len(res.factor_changes)} SiteFactor change(s)")


# ------------------------------------------------------------------------------------------- explain


@click.command("explain")
@click.argument("account")
@config_option
@json_option
@handle_errors
def explain_cmd(account: str, config_path: str | None, as_json: bool) -> None:
    """Why ACCOUNT gets what it gets: weight, job classes with their speedups and where they come from,
    demand, ideal share, deviation, limit, and why each of its pending jobs waits (Slurm's reason and
    slurm-fair's view), whether its pending fair:flex jobs can still be moved to another GPU type, with bud
    the GPU prices and what its share costs of its budget, and every
    preemption of its jobs with its reason and steps. Reads the database read-only and creates none: without one,
    Slurm's view alone (a note on stderr)."""
    from ..views.explain import explain

    cfg = config_mod.load(config_path)
    snap, why = _snapshot(cfg)
    with _reader(cfg, live=True) as store:
        ex = explain(store, cfg, account, snap, why)
    if as_json:
        _dump(ex)
        return
    click.echo(f"account {printable(ex['account'])} (tenant {printable(ex['tenant'])}, weight {_num(ex['weight']) if ex['weight'] is not None else '-'}"
               f"), round {ex['round']}, policy {ex['policy']}")
    if ex["classes"]:
        click.echo(render(["CLASS", "JOB GPUS", "PENDING", "RUNNING", "THROUGHPUT (SOURCE)", "IDEAL"],
                          [[c, v["gpus"], v["pending_gpus"], v["running_gpus"],
                            " ".join(f"{g}={t:.3g}({v['source'].get(g, '?')})" for g, t in v["throughput"].items()),
                            _types(v["ideal"])] for c, v in ex["classes"].items()]))
    click.echo(f"demand:        {ex['demand_gpus']} GPUs")
    nd = ex.get("not_demand_now") if ex.get("not_demand_now") is not None else ex.get("not_demand")
    if nd:
        click.echo(f"not demand:    {_types(nd)} GPUs of pending jobs that cannot start now (not counted: no "
                   "share, claim, SiteFactor or preemption for them)")
    click.echo(f"ideal share:   {_types(ex['ideal'])}")
    if ex.get("lend"):
        click.echo(f"guarantee:     {_types(ex['real'])}  (the rounded share; claimed for waiting jobs: "
                   f"{_types(ex['claims'])})")
        click.echo(f"lendable:      {_types(ex['lendable'])}  (per type, GPUs no waiting account claims: any "
                   "account may start jobs there)")
    else:
        click.echo(f"rounded:       {_types(ex['real'])}  (+ work conservation: {_types(ex['extra'])})")
    click.echo(f"deviation:     {_types(ex['deviation_before'])} -> {_types(ex['deviation'])}")
    click.echo("limit planned: " + (_types(ex["planned_limits"]) if ex["planned_limits"] else "none"))
    click.echo("limit in Slurm: " + (_types(ex["limits_in_slurm"]) if ex["reachable"]
                                     else f"? ({printable(ex['unreachable'], 300)})"))
    click.echo(f"in use:        {_types(ex['in_use'])}")
    if ex.get("held_back"):
        click.echo(f"held back:     {_types(ex['held_back'])}  (its limits are lowered by the GPUs of its running jobs "
                   "preemption could not requeue: preemption.unrequeueable)")
    for jid, at in sorted((ex.get("held_back_until") or {}).items()):
        click.echo(f"held-back job {jid}: cancelled at {_time(at)} if its account still owes GPUs then "
                   "(preemption.hold_back_max, or cancel_grace under unrequeueable = cancel)")
    if ex.get("held_why"):
        click.echo(f"held across:   {_types(ex.get('held_at') or {})}  (the most it may hold: it starts no GPU job on "
                   f"any type until the demand it was held back for runs: {printable(ex['held_why'], 300)})")
    if ex.get("prices"):
        budget = "-" if ex.get("budget") is None else f"{ex['budget']:.4g}"
        click.echo(f"prices:        {_types(ex['prices'])}  (budget units; this account's ideal share costs "
                   f"{ex['spend']:.4g}, its tenant's budget is {budget})")
    if ex["pending_jobs"]:
        click.echo("")
        click.echo(render(["JOB", "CLASS", "GPUS", "TYPE", "WAITED_S", "SITEFACTOR", "SLURM REASON", "SLURM-FAIR"],
                          [[j["job_id"], j["class"], j["gpus"], j["gpu_type"] or "any", j["waited_s"],
                            j["site_factor"], j["slurm_reason"], j["slurm_fair"]] for j in ex["pending_jobs"]]))
    if ex["flexible_note"]:
        click.echo(f"note: {printable(ex['flexible_note'], 500)}")
    if ex.get("moves"):
        click.echo("")
        click.echo(f"upgrade moves of {printable(account)}'s jobs (oldest first):")
        for m in ex["moves"]:
            click.echo(f"  job {m['job_id']}: {m['text']}")
    if ex["preemptions"]:
        click.echo("")
        click.echo(f"preemptions of {printable(account)}'s jobs (newest first):")
        for p in ex["preemptions"]:
            click.echo(f"  job {p['job_id']} ({p['gpus']} {printable(p['gpu_type'])}, {printable(p['signal'])}): "
                       f"{printable(p['state'])} - {printable(p['reason'], 300)}")
            for st in p["steps"]:
                click.echo(f"    {_time(st['time'])}  {printable(st['step'])}"
                           + (f" (round {st['round_id']})" if st.get("round_id") else "")
                           + (f": {printable(st['message'], 300)}" if st.get("message") else ""))
    _conflicts(ex["profile_conflicts"])


def register(group: click.Group) -> None:
    """Add the admin commands to ``group``."""
    for cmd in (daemon_cmd, status_cmd, shares_cmd, history_cmd, apply_cmd, explain_cmd):
        group.add_command(cmd)
