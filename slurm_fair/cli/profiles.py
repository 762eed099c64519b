"""slurm-fair profiles … and slurm-fair config …: throughput profiles in the database, and the config file."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Iterable, Sequence

import click

from .. import config as config_mod
from .. import profiles as shipped_profiles
from ..errors import InputError
from .common import config_option, decode_utf8, handle_errors, json_option
from ..store import PROFILE_SOURCES as SOURCES, Store



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


def list_rows(values: list[dict], cfg: Any, now: float) -> list[dict]:
    """``profiles list`` rows: every stored value (all sources side by side) with ``used`` (the value the
    policies use for that key), ``stale``/``single`` flags and ``speedup`` (throughput over the lowest
    throughput of the same account, class and source)."""
    from ..profiling.core import Rules, flags
    from ..profiling.trust import effective_values

    rules = Rules.from_config(cfg.profiling)
    used = {(r["account"], r["class"], r["gpu_type"], r["source"])  # as the rounds pick them ([profiling] on_conflict)
            for r in effective_values(values, rules.conflict_margin, cfg.profiling.on_conflict,
                                      rules.prefer_measured, bool(cfg.profiling.measured_speeds))[0]}
    slowest: dict[tuple[str, str, str], float] = {}
    for r in values:
        k = (r["account"], r["class"], r["source"])
        slowest[k] = min(slowest.get(k, float("inf")), float(r["throughput"]))
    out = []
    for r in values:
        row = {k: r.get(k) for k in ("account", "class", "gpu_type", "throughput", "source", "samples", "updated",
                                     "rejected", "detail")}
        row["speedup"] = float(r["throughput"]) / slowest[(r["account"], r["class"], r["source"])]
        row.update(flags(r, now, rules))
        row["used"] = (r["account"], r["class"], r["gpu_type"], r["source"]) in used
        out.append(row)
    return out


@profiles_group.command("list")
@config_option
@click.option("--account", default=None, help="Only this account ('' = the every-account profiles).")
@click.option("--class", "cls", default=None, help="Only this job class.")
@click.option("--source", type=click.Choice(SOURCES), default=None, help="Only values of this source.")
@json_option(help="Print JSON (a list of objects) instead of a table.")
@handle_errors
def list_cmd(config_path: str | None, account: str | None, cls: str | None, source: str | None,
             as_json: bool) -> None:
    """List the stored profiles: every source's value side by side.

    SOURCE is imported | set (reported by a person), measured (a `profile submit` job), harvested (reports
    of running jobs) or shipped. USED marks the value the policies use for that account, class and type
    (an account's class with any measured value uses measured values only, [profiling] measured_speeds;
    else reported wins, measured fills gaps, or wins with [profiling] prefer_measured). SPEEDUP is relative to
    the slowest type of the same account, class and source. FLAGS: stale (no sample for
    [profiling] stale_after seconds), single (one sample), N rejected (outlier samples refused).
    """
    cfg = config_mod.load(config_path)
    with Store(cfg.database_path) as store:
        values = store.profile_values()
    rows = [r for r in list_rows(values, cfg, time.time())
            if (account is None or r["account"] == account) and (cls is None or r["class"] == cls)
            and (source is None or r["source"] == source)]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no profiles (load the shipped defaults with: slurm-fair profiles import --shipped)")
        return
    click.echo(_table(
        ["ACCOUNT", "CLASS", "GPU_TYPE", "THROUGHPUT", "SPEEDUP", "SAMPLES", "SOURCE", "USED", "FLAGS"],
        [[r["account"] or "*", r["class"], r["gpu_type"], _fmt(r["throughput"]), f"{r['speedup']:.2f}",
          r["samples"], r["source"], "*" if r["used"] else "",
          ",".join([f for f in ("stale", "single") if r[f]] + ([f"{r['rejected']} rejected"] if r["rejected"] else []))]
         for r in rows],
    ))


@profiles_group.command("import")
@config_option
@click.argument("file", type=click.File("rb"), required=False)
@click.option("--shipped", "shipped", is_flag=False, flag_value="gavel", default=None, metavar="[NAME]",
              help="Import a table shipped with slurm-fair: gavel (default: Gavel's K80/P100/V100 "
                   "measurements) or gandiva-fair (Gandiva_fair's Table 1: K80/P40/P100/V100).")
@handle_errors
def import_cmd(config_path: str | None, file: Any, shipped: str | None) -> None:
    """Add or replace profiles from a CSV FILE ('-' = stdin), or a shipped table (--shipped [NAME]).

    The header must be exactly: account,class,gpu_type,throughput. An empty account means every account.
    Every row is checked before anything is written: one bad row (named by line and column) imports nothing.
    Values from a FILE have source "imported" (a tenant's reported profile), from --shipped "shipped".
    """
    if (shipped is not None) == (file is not None):
        raise InputError("FILE", getattr(file, "name", "-") if file else None, "give either a CSV FILE or --shipped")
    if shipped is not None:
        text, source, detail = shipped_profiles.shipped_csv(shipped), "shipped", shipped
    else:
        name = getattr(file, "name", "-")
        name = "<stdin>" if name in ("-", "<stdin>") or not isinstance(name, str) else name
        text, source, detail = decode_utf8(file.read(), name), "imported", name
    with _open_store(config_path) as store:
        n = store.import_csv(text, source=source, detail=detail)
    click.echo(f"imported {n} profile(s)")


@profiles_group.command("export")
@config_option
@click.argument("file", type=click.File("w", encoding="utf-8", lazy=True), default="-", required=False)
@handle_errors
def export_cmd(config_path: str | None, file: Any) -> None:
    """Write the profiles the policies use (one value per account, class, type) as CSV to FILE (default:
    stdout); `profiles import` reads it back (as imported values)."""
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
    """Set the THROUGHPUT (steps/s, > 0) of job class CLASS on GPU_TYPE (source "set": a reported value)."""
    with _open_store(config_path) as store:
        store.set_profile(cls, gpu_type, throughput, account=account)
    click.echo(f"set {cls} on {gpu_type} = {throughput}" + (f" for account {account}" if account else ""))


@profiles_group.command("delete")
@config_option
@click.argument("cls", metavar="CLASS")
@click.option("--account", default="", help="Account whose profile to delete (default: the every-account one).")
@click.option("--gpu-type", default=None, help="Only this GPU type (default: all GPU types of CLASS).")
@click.option("--source", type=click.Choice(SOURCES), default=None, help="Only values of this source (default: all).")
@handle_errors
def delete_cmd(config_path: str | None, cls: str, account: str, gpu_type: str | None, source: str | None) -> None:
    """Delete the profiles of job class CLASS. Exits 1 if there was none."""
    with _open_store(config_path) as store:
        n = store.delete_profiles(cls, account=account, gpu_type=gpu_type, source=source)
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
