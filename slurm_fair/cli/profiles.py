"""slurm-fair profiles … and slurm-fair config …: throughput profiles in the database, and the config file."""

from __future__ import annotations

import json
import sys
from typing import Any, Iterable, Sequence

import click

from .. import config as config_mod
from .. import profiles as shipped_profiles
from ..errors import InputError
from .common import config_option, decode_utf8, handle_errors, json_option
from ..store import Store



def _open_store(config_path: str | None) -> Store:
    cfg = config_mod.load(config_path)
    return Store(cfg.database_path)


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def _fmt(x: float) -> str:
    return f"{x:.6g}"


@click.group("profiles")
def profiles_group() -> None:
    """Job-class throughput profiles (steps/s per GPU type), kept in slurm-fair's database.

    A profile is (account, class, GPU type) -> throughput; the empty account applies to every account, a
    named account overrides it. The policies compare GPU types by these numbers.
    """


@profiles_group.command("list")
@config_option
@click.option("--account", default=None, help="Only this account ('' = the every-account profiles).")
@click.option("--class", "cls", default=None, help="Only this job class.")
@json_option(help="Print JSON (a list of objects) instead of a table.")
@handle_errors
def list_cmd(config_path: str | None, account: str | None, cls: str | None, as_json: bool) -> None:
    """List the stored profiles."""
    with _open_store(config_path) as store:
        rows = [r for r in store.profiles()
                if (account is None or r["account"] == account) and (cls is None or r["class"] == cls)]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no profiles (load the shipped defaults with: slurm-fair profiles import --shipped)")
        return
    click.echo(_table(
        ["ACCOUNT", "CLASS", "GPU_TYPE", "THROUGHPUT", "SAMPLES", "SOURCE"],
        [[r["account"] or "*", r["class"], r["gpu_type"], _fmt(r["throughput"]), r["samples"], r["source"]]
         for r in rows],
    ))


@profiles_group.command("import")
@config_option
@click.argument("file", type=click.File("rb"), required=False)
@click.option("--shipped", is_flag=True,
              help="Import the profiles shipped with slurm-fair (Gavel's K80/P100/V100 measurements).")
@handle_errors
def import_cmd(config_path: str | None, file: Any, shipped: bool) -> None:
    """Add or replace profiles from a CSV FILE ('-' = stdin), or the shipped ones (--shipped).

    The header must be exactly: account,class,gpu_type,throughput. An empty account means every account.
    Every row is checked before anything is written: one bad row (named by line and column) imports nothing.
    """
    if shipped == (file is not None):
        raise InputError("FILE", getattr(file, "name", "-") if file else None, "give either a CSV FILE or --shipped")
    if shipped:
        text, source = shipped_profiles.shipped_csv(), "gavel"
    else:
        name = getattr(file, "name", "-")
        name = "<stdin>" if name in ("-", "<stdin>") or not isinstance(name, str) else name
        text, source = decode_utf8(file.read(), name), f"import:{name}"
    with _open_store(config_path) as store:
        n = store.import_csv(text, source=source)
    click.echo(f"imported {n} profile(s)")


@profiles_group.command("export")
@config_option
@click.argument("file", type=click.File("w", encoding="utf-8", lazy=True), default="-", required=False)
@handle_errors
def export_cmd(config_path: str | None, file: Any) -> None:
    """Write all profiles as CSV to FILE (default: stdout); `profiles import` reads it back."""
    with _open_store(config_path) as store:
        text = store.export_csv()
    file.write(text)


@profiles_group.command("set")
@config_option
@click.argument("cls", metavar="CLASS")
@click.argument("gpu_type")
@click.argument("throughput")
@click.option("--account", default="", help="Account this profile is for (default: every account).")
@handle_errors
def set_cmd(config_path: str | None, cls: str, gpu_type: str, throughput: str, account: str) -> None:
    """Set the THROUGHPUT (steps/s, > 0) of job class CLASS on GPU_TYPE."""
    with _open_store(config_path) as store:
        store.set_profile(cls, gpu_type, throughput, account=account)
    click.echo(f"set {cls} on {gpu_type} = {throughput}" + (f" for account {account}" if account else ""))


@profiles_group.command("delete")
@config_option
@click.argument("cls", metavar="CLASS")
@click.option("--account", default="", help="Account whose profile to delete (default: the every-account one).")
@click.option("--gpu-type", default=None, help="Only this GPU type (default: all GPU types of CLASS).")
@handle_errors
def delete_cmd(config_path: str | None, cls: str, account: str, gpu_type: str | None) -> None:
    """Delete the profiles of job class CLASS. Exits 1 if there was none."""
    with _open_store(config_path) as store:
        n = store.delete_profiles(cls, account=account, gpu_type=gpu_type)
    click.echo(f"deleted {n} profile(s)")
    if n == 0:
        sys.exit(1)


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
    """Add the ``profiles`` and ``config`` command groups to ``group``."""
    group.add_command(profiles_group)
    group.add_command(config_group)
