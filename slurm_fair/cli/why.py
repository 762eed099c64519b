"""``slurm-fair why JOBID``: why a job waits, for any user. Only parses and prints; the work is
:func:`slurm_fair.views.why.explain_job` (pure) over the job from Slurm and the public status file
(:mod:`slurm_fair.daemon.status_file`). It opens the database only where the caller may write it (the daemon's user,
root: as ``slurm-fair explain`` does), to say when slurm-fair moved the job (its upgrade moves); other users get
everything else."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import sys
import time
from pathlib import Path

import click

from .. import config as config_mod
from ..errors import InputError
from .common import CONFIG_HELP, config_from_group, handle_errors, json_option
from .table import render


def _job_id(text: str) -> int:
    t = text.strip()
    if not t.isascii() or not t.isdigit() or int(t) <= 0:
        raise InputError("JOBID", text, "must be a job id: a positive number (array tasks: their own job id, "
                         "squeue -r -o %A)")
    return int(t)


def _n(v: int | None, none: str = "-") -> str:
    return none if v is None else str(v)


def _moves(cfg, jid: int) -> list:  # noqa: ANN001 - a Config
    """The job's upgrade moves from the database where the caller may read it (opened read-only: nothing is
    created or changed), else none. Never fails the command: a database that cannot be read gives none."""
    from ..daemon.preemption.store import PreemptionStore
    from ..store import Store
    from ..views.why import moves_from_records

    db = cfg.database_path
    if db is None or not os.path.isfile(db) or not os.access(db, os.R_OK):
        return []
    try:
        with Store(db, read_only=True) as store:
            return list(moves_from_records(PreemptionStore(store).rows(job_id=jid, limit=20)))
    except Exception:  # noqa: BLE001 - the moves are extra: why answers without them
        return []


def _print(ex) -> None:  # noqa: ANN001 - an Explanation
    j = ex.job
    if j is None:
        click.echo(f"job {ex.job_id}: {ex.summary}")
    else:
        what = (f"{j.gpus} GPU(s) of type {j.gpu_type}" if j.gpu_type else f"{j.gpus} GPU(s) of any type") \
            if j.gpus else "no GPU"
        click.echo(f"job {j.job_id} (\"{j.name}\", user {j.user}, account {j.account}): {j.state}, {what}, "
                   f"Slurm reason {j.reason or 'None'}")
        click.echo(f"why: {ex.summary}")
    for d in ex.details:
        click.echo(f"  - {d}")
    if ex.types and ex.status.available:
        click.echo("")
        click.echo(render(["GPU TYPE", "GUARANTEE", "IN USE", "CLAIMED", "LIMIT", "IDLE NOW"],
                          [[t.gpu_type, _n(t.guarantee), _n(t.in_use), _n(t.claims), _n(t.limit, "none"), _n(t.idle)]
                           for t in ex.types]))
        if ex.total_limit is not None:
            click.echo(f"account limit over all types: gres/gpu={ex.total_limit}")
    if ex.changes:
        click.echo("")
        click.echo("what would change it:")
        for c in ex.changes:
            click.echo(f"  - {c}")
    for n in ex.notes:
        click.echo(f"note: {n}")
    s = ex.status
    if s.available:
        when = datetime.datetime.fromtimestamp(s.written).strftime("%Y-%m-%d %H:%M:%S") if s.written else "-"
        click.echo(f"(slurm-fair round {s.round if s.round is not None else '-'}, policy {s.policy}; numbers as of "
                   f"{when}, {s.age_s:.0f} s ago)")


@click.command("why")
@click.argument("job_id_text", metavar="JOBID")
@click.option("--config", "config_path", metavar="PATH", default=None, help=CONFIG_HELP + " Only its "
              "daemon.status_file / daemon.publish_status and cluster settings are read.", callback=config_from_group)
@click.option("--status-file", "status_file", metavar="PATH",
              help="Read this status file instead of the one the config names.")
@json_option(help="Print JSON: {job_id, verdict, summary, details, changes, notes, job {job_id, name, user, "
                  "account, state, reason, gpus, gpu_type, allocated, flexible, requeue, submit_time, start_time, "
                  "site_factor}, types [{gpu_type, guarantee, in_use, claims, limit, idle, largest_idle_block, "
                  "others_claims, borrowers}], total_limit, status {available, error, round, written, age_s, stale, "
                  "dry_run, policy}, moves [{signalled_at, from_type, to_type, gpus, state, requeued_at, reason, "
                  "outcome}]}.")
@handle_errors
def why_cmd(job_id_text: str, config_path: str | None, status_file: str | None, as_json: bool) -> None:
    """Why job JOBID waits (or runs where it runs), in plain words, and what would change it: its account's
    guarantee, GPUs in use, claims and limit on each GPU type it can use; whether it waits on that limit
    (AssocGrpGRES), on free GPUs or priority (and who borrows GPUs of its types), on a hold or a dependency; the
    GPU type slurm-fair's type map chose; for a running job whether it is on borrowed GPUs and could be preempted;
    when slurm-fair moved the job to a faster GPU type (an upgrade move: from and to which type, when, and the time
    it was expected to save), where the caller may open the database.

    Any user can run it: it reads the job from Slurm (squeue) and the status file the daemon publishes each round
    (daemon.status_file, world-readable); the database only where the caller may write it (the daemon's user,
    root), for the moves. Exit 1 when Slurm does not know the job.

    \b
        slurm-fair why 12345
        slurm-fair why 12345 --json
    """
    from ..cluster import connect
    from ..daemon import status_file as status_mod
    from ..views.why import explain_job

    jid = _job_id(job_id_text)
    try:  # a terminal that cannot show a character gets its escape, never an error
        sys.stdout.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    except (AttributeError, ValueError):
        pass
    cfg = config_mod.load(config_path)
    path = Path(status_file) if status_file else cfg.status_path
    status, why_not = None, ""
    if path is None:
        why_not = "daemon.publish_status is off in the config"
    else:
        try:
            status = status_mod.read_status(path)
        except status_mod.StatusFileError as e:
            why_not = str(e)
    cluster = connect(backend=cfg.cluster.backend, timeout=float(cfg.cluster.timeout))
    job = cluster.job_info(jid)
    ex = explain_job(job, status, time.time(), job_id=jid, status_error=why_not,
                     moves=_moves(cfg, jid) if job is not None else ())
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(ex), indent=2, sort_keys=True))
    else:
        _print(ex)
    if ex.verdict == "unknown":
        sys.exit(1)


def register(group: click.Group) -> None:
    group.add_command(why_cmd)
