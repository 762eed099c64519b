"""slurm-fair config …: check the configuration file and print the commented default."""

from __future__ import annotations

import json

import click

from .. import config as config_mod
from .common import config_option, handle_errors, json_option


@click.group("config")
def config_group() -> None:
    """The slurm-fair configuration file."""


@config_group.command("check")
@config_option
@json_option(help="Print JSON instead of TOML.")
@handle_errors
def check_cmd(config_path: str | None, as_json: bool) -> None:
    """Validate the config file and print the effective configuration and where it came from.

    Exits 2 with the offending key named if the file is invalid.
    """
    cfg = config_mod.load(config_path)
    if cfg.source == "defaults":
        where = f"defaults (no file at {config_mod.DEFAULT_PATH})"
    else:
        where = cfg.source
    if as_json:
        click.echo(json.dumps({"source": cfg.source, "database_path": str(cfg.database_path),
                               "config": cfg.as_dict()}, indent=2))
        return
    click.echo(f"# source: {where}")
    click.echo(f"# database: {cfg.database_path}")
    click.echo(config_mod.render(cfg.as_dict(), header=False).lstrip("\n"), nl=False)


@config_group.command("default")
def default_cmd() -> None:
    """Print the fully commented default configuration file."""
    click.echo(config_mod.render_default(), nl=False)


def register(group: click.Group) -> None:
    """Add the ``config`` command group to ``group``."""
    group.add_command(config_group)
