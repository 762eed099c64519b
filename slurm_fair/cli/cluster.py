"""``slurm-fair cluster`` and ``slurm-fair jobs``: what slurm-fair sees of the Slurm cluster (read-only)."""

from __future__ import annotations

import json
from typing import Callable

import click

from ..cluster import Snapshot, connect
from ..cluster.connect import BACKENDS
from ..cluster.summary import UNTYPED_KEY, account_usage, cluster_dict, job_dict
from ..errors import SlurmFairError
from .common import fail, json_option
from .table import render


def _cluster_options(f: Callable) -> Callable:
    f = json_option(f, help="Print JSON for machines instead of tables.")
    f = click.option("--timeout", type=float, default=30.0, show_default=True,
                     help="Seconds before a Slurm command is abandoned (the cluster counts as unreachable).")(f)
    f = click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
                     help="How to talk to Slurm: cli (the Slurm commands), pyslurm, or auto.")(f)
    return f


def _snapshot(backend: str, timeout: float) -> Snapshot:
    try:
        return connect(backend=backend, timeout=timeout).snapshot()
    except SlurmFairError as e:
        fail(e)


def _counts(d: dict[str, int]) -> str:
    return ",".join(f"{k}:{v}" for k, v in d.items()) or "-"


@click.command("cluster")
@_cluster_options
def cluster_cmd(backend: str, timeout: float, as_json: bool) -> None:
    """Show the cluster as slurm-fair sees it: GPUs per type (total, allocated, unusable = on down or
    drained nodes) and, per account, fair-share shares, GrpTRES GPU limits (``*`` = untyped gres/gpu),
    GPUs in use and GPUs requested by pending jobs.

    Uses the Slurm commands of the cluster SLURM_CONF points at.  Example: ``slurm-fair cluster --json``.
    """
    snap = _snapshot(backend, timeout)
    if as_json:
        click.echo(json.dumps(cluster_dict(snap), indent=2))
        return
    click.echo(f"Slurm {snap.slurm_version}   partitions: {', '.join(snap.partitions) or '-'}   "
               f"nodes: {len(snap.nodes)}   GPU jobs: {len(snap.jobs)}")
    click.echo()
    usage = snap.gpu_types()
    rows = [[t, u.total, u.allocated, u.unusable, u.total - u.unusable - u.allocated] for t, u in usage.items()]
    click.echo(render(["gpu type", "total", "allocated", "unusable", "free"], rows))
    click.echo()
    acc = account_usage(snap)
    rows = [[name, "-" if e["shares"] is None else e["shares"], _counts(e["limits"]), _counts(e["in_use"]),
             _counts(e["pending"]), e["jobs_running"], e["jobs_pending"]] for name, e in acc.items()]
    click.echo(render(["account", "shares", "limits", "in use", "pending", "running jobs", "pending jobs"], rows))


@click.command("jobs")
@_cluster_options
@click.option("--account", "-A", "accounts", multiple=True, metavar="NAME", help="Only these accounts (repeatable).")
@click.option("--state", type=click.Choice(["all", "pending", "running"]), default="all", show_default=True,
              help="Only pending or only running jobs.")
def jobs_cmd(backend: str, timeout: float, as_json: bool, accounts: tuple[str, ...], state: str) -> None:
    """List pending and running GPU jobs as slurm-fair sees them: GPUs and requested type (``untyped`` when the
    job named none; running jobs also show the types they got), the fields a job's class is read from
    (comment, wckey, name), priority with its SiteFactor, and Slurm's reason."""
    snap = _snapshot(backend, timeout)
    jobs = [j for j in snap.jobs if (not accounts or j.account in accounts)
            and (state == "all" or j.state == state.upper())]
    if as_json:
        click.echo(json.dumps({"slurm_version": snap.slurm_version, "jobs": [job_dict(j) for j in jobs]}, indent=2))
        return
    rows = [[j.job_id, j.account, j.user, j.state, j.gpus, j.gpu_type or UNTYPED_KEY,
             _counts(dict(j.gpus_allocated)) if j.running else "", j.name, j.comment or "-", j.wckey or "-",
             j.priority, j.site_factor, j.reason] for j in jobs]
    click.echo(render(["job", "account", "user", "state", "gpus", "type", "got", "name", "comment", "wckey",
                       "priority", "site", "reason"], rows, right=[0, 4, 10, 11]))
    click.echo(f"{len(jobs)} job(s)")


def register(group: click.Group) -> None:
    """Add this module's commands to ``group``."""
    group.add_command(cluster_cmd)
    group.add_command(jobs_cmd)
