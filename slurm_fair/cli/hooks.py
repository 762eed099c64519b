"""``slurm-fair hooks install``: put the Slurm hook shim where slurmctld/slurmd can run it.

Only parses and prints; the work is :func:`slurm_fair.hookinstall.install` (stdlib only, so the testbed runs
the same code with the system python3).
"""

from __future__ import annotations

from typing import Callable

import click

from .. import hookinstall, jobrecord


@click.group("hooks")
def hooks_group() -> None:
    """Slurm hooks that record job starts and ends for the daemon (docs/hooks.md: Job records from Slurm hooks)."""


def _on_dest(dest: str, verb: str, act: Callable[[], str]) -> str:
    """``act()``; a bad argument exits 2 with its message, a failed file operation 1 naming DEST."""
    try:
        return act()
    except ValueError as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(2) from None
    except OSError as e:
        click.echo(f"error: DEST: cannot {verb} {dest}: {e.strerror or e} (got {dest!r})", err=True)
        raise SystemExit(1) from None


@hooks_group.command("install")
@click.argument("dest", metavar="DEST")
@click.option("--spool", default=jobrecord.DEFAULT_SPOOL, show_default=True, metavar="DIR",
              help="Folder the hooks write records to; set the same folder as [hooks] spool in the config.")
@click.option("--slurm-conf", default="", metavar="PATH",
              help="SLURM_CONF for the controller hooks' scontrol call (they get none; default: Slurm's default).")
@click.option("--log", "log", default="", metavar="PATH",
              help="File the hooks log their errors to (default: <spool>.log).")
@click.option("--chain", "chain", multiple=True, metavar="KEY=PROGRAM",
              help="Run the site's own hook PROGRAM after the record, in its place (same arguments, environment "
                   "and exit status), for KEY = PrologSlurmctld, EpilogSlurmctld, Prolog or Epilog: what slurm.conf "
                   "had there before. KEY= removes a chain; chains set earlier are kept. Repeatable.")
@click.option("--owner", default="", metavar="USER",
              help="Owner of the spool: SlurmUser, which runs the controller hooks (with --group: mode 2770).")
@click.option("--group", default="", metavar="GROUP",
              help="Group of the spool: the daemon's, which reads and removes the records (mode 2770).")
@click.option("--node-hooks", is_flag=True,
              help="Also print the node Prolog/Epilog lines (device indices): only where every node has the shim "
                   "at DEST and a python3 >= 3.9, or the node's prolog fails and Slurm drains it.")
def install_cmd(dest: str, spool: str, slurm_conf: str, log: str, chain: tuple[str, ...], owner: str, group: str,
                node_hooks: bool) -> None:
    """Copy the hook shim and jobrecord.py into DEST (absolute path), write DEST/hooks.conf, create the
    spool, and print the slurm.conf lines to add (then run `scontrol reconfigure`): the controller hooks, and
    the node hooks with --node-hooks. A hook slurm.conf already has keeps running when chained (--chain);
    `hooks uninstall` gives its line back."""
    pairs = {}
    for c in chain:
        key, eq, program = c.partition("=")
        if not eq:
            click.echo(f"error: --chain: expected KEY=PROGRAM (got {c!r})", err=True)
            raise SystemExit(2)
        pairs[key] = program
    lines = _on_dest(dest, "install into", lambda: hookinstall.install(
        dest, spool, slurm_conf, log, chain=pairs, owner=owner, group=group, node_hooks=node_hooks))
    click.echo(f"# installed into {dest}; add to slurm.conf, then: scontrol reconfigure")
    for context, program in sorted(hookinstall.chained(dest).items()):
        click.echo(f"# {context}: runs {program} after the record")
    click.echo(lines, nl=False)


@hooks_group.command("uninstall")
@click.argument("dest", metavar="DEST")
@click.option("--dry-run", is_flag=True, help="Only print the slurm.conf lines; remove nothing.")
def uninstall_cmd(dest: str, dry_run: bool) -> None:
    """Remove the hooks from DEST (the spool and its records stay) and print the slurm.conf lines that give
    each hook back what was chained there before (or remove it). In this order: --dry-run for the lines,
    put them in slurm.conf, `scontrol reconfigure`, then this without --dry-run (a hook slurm.conf still
    names must exist)."""
    lines = _on_dest(dest, "remove from", lambda: hookinstall.uninstall(dest, dry_run=dry_run))
    click.echo(f"# {'would remove' if dry_run else 'removed'} the hooks in {dest}; slurm.conf lines that restore "
               "the site's own hooks:")
    click.echo(lines, nl=False)


def register(group: click.Group) -> None:
    group.add_command(hooks_group)
