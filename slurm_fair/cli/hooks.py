"""``slurm-fair hooks install``: put the Slurm hook shim where slurmctld/slurmd can run it.

Only parses and prints; the work is :func:`slurm_fair.jobrecord.install` (stdlib only, so the testbed runs
the same code with the system python3).
"""

from __future__ import annotations

import click

from .. import jobrecord


@click.group("hooks")
def hooks_group() -> None:
    """Slurm hooks that record job starts and ends for the daemon (docs/hooks.md: Job records from Slurm hooks)."""


@hooks_group.command("install")
@click.argument("dest", metavar="DEST")
@click.option("--spool", default=jobrecord.DEFAULT_SPOOL, show_default=True, metavar="DIR",
              help="Folder the hooks write records to; set the same folder as [hooks] spool in the config.")
@click.option("--slurm-conf", default="", metavar="PATH",
              help="SLURM_CONF for the controller hooks' scontrol call (they get none; default: Slurm's default).")
@click.option("--log", "log", default="", metavar="PATH",
              help="File the hooks log their errors to (default: <spool>.log).")
def install_cmd(dest: str, spool: str, slurm_conf: str, log: str) -> None:
    """Copy the hook shim and jobrecord.py into DEST (absolute path), write DEST/hooks.conf, create the
    spool, and print the slurm.conf lines to add (then run `scontrol reconfigure`)."""
    try:
        lines = jobrecord.install(dest, spool, slurm_conf, log)
    except ValueError as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(2) from None
    except OSError as e:
        click.echo(f"error: DEST: cannot install into {dest}: {e.strerror or e} (got {dest!r})", err=True)
        raise SystemExit(1) from None
    click.echo(f"# installed into {dest}; add to slurm.conf, then: scontrol reconfigure")
    click.echo(lines, nl=False)


def register(group: click.Group) -> None:
    group.add_command(hooks_group)
