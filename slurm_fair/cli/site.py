"""Site commands: ``rollback``. They only parse options and print; the work is in
:mod:`slurm_fair.daemon.rollback`."""

from __future__ import annotations

import json
import sys

import click

from .. import config as config_mod
from ..errors import SlurmFairError
from .common import config_option, handle_errors, json_option
from .table import render


@click.command("rollback")
@config_option
@click.option("--dry-run", is_flag=True, help="Only print what would be restored (changes nothing).")
@json_option
@handle_errors
def rollback_cmd(config_path: str | None, dry_run: bool, as_json: bool) -> None:
    """Take slurm-fair off the cluster: every GPU limit it changed back to the value recorded before its first
    change (site limits included, exact; cleared where the account had none), every SiteFactor it set back
    to 0, the type map removed. Refuses while the daemon runs. Running it again changes nothing. Exit 1 if
    something could not be restored (each named)."""
    from ..cluster import connect
    from ..daemon import rollback
    from ..daemon.service import AlreadyRunning, lock
    from ..store import Store

    cfg = config_mod.load(config_path)
    try:
        held = None if dry_run else lock(cfg.database_path)
    except AlreadyRunning as e:
        raise SlurmFairError(f"{e}: stop the daemon first (it would put its limits back)") from None
    try:
        cluster = connect(backend=cfg.cluster.backend, timeout=float(cfg.cluster.timeout))
        with Store(cfg.database_path) as store:
            out = rollback.run(cluster, store, cfg, dry_run=dry_run)
    finally:
        if held is not None:
            held.close()
    if as_json:
        click.echo(json.dumps(out, indent=2, sort_keys=True))
    else:
        verb = "would restore" if dry_run else "restored"
        rows = [[a, ("gres/gpu" if k == "*" else f"gres/gpu:{k}"), "clear" if v == -1 else v]
                for a, ch in sorted(out["limits"].items()) for k, v in sorted(ch.items())]
        click.echo(render(["ACCOUNT", "LIMIT", "RESTORED TO"], rows) if rows else "no GPU limit to restore")
        click.echo(f"{verb}: {len(rows)} limit(s) of {len(out['limits'])} account(s); "
                   f"SiteFactor back to 0 on {len(out['site_factors'])} pending job(s); "
                   + (f"type map {out['type_map']} {'would be ' if dry_run else ''}removed" if out["type_map"]
                      else "no type map"))
        for what, why in sorted(out["failed"].items()):
            click.echo(f"failed: {what}: {why}", err=True)
    if out["failed"]:
        sys.exit(1)


def register(main: click.Group) -> None:
    main.add_command(rollback_cmd)
