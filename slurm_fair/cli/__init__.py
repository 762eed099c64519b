"""The ``slurm-fair`` command. Subcommands live in sibling modules; this module only assembles them."""

from __future__ import annotations

import sys

import click

from .common import group_config_option


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: the version is looked up only when asked (from a source tree it asks git)."""
    if not value or ctx.resilient_parsing:
        return
    from .. import installed_version

    click.echo(f"slurm-fair {installed_version()}")
    ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version (the installed wheel's, or a source tree's from git) and exit.")
@group_config_option
def main(config_path: str | None) -> None:
    """slurm-fair: heterogeneity-aware, provably fair GPU sharing for Slurm clusters."""


def console_main() -> None:
    """The ``slurm-fair`` console script: stdout carries only the command's output (C-level prints of the
    solver libraries go to stderr, see :mod:`slurm_fair.stdio`)."""
    from ..stdio import protect_stdout

    protect_stdout()
    for stream in (sys.stdout, sys.stderr):  # a character the terminal cannot show is printed as its escape
        try:
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
        except (AttributeError, ValueError):
            pass
    main()


def _register() -> None:
    from . import admin, cluster, compare, config, hooks, profiles, report, simulate, site, solve, why

    for mod in (solve, compare, simulate, cluster, admin, site, report, why, profiles, config, hooks):
        mod.register(main)


_register()
