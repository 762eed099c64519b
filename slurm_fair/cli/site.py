"""Site commands: ``preflight``, ``rollback``, ``limits adopt | clear``. They only parse options and print; the
work is in :mod:`slurm_fair.daemon.preflight`, :mod:`slurm_fair.daemon.rollback` and
:mod:`slurm_fair.daemon.unrecorded`."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3
import sys
import time
from typing import Any, Iterator

import click

from .. import config as config_mod
from ..errors import InputError, SlurmFairError
from .common import config_option, handle_errors, json_option
from .table import render


@contextlib.contextmanager
def _site_change(cfg: Any, dry_run: bool, what: str) -> Iterator[tuple[Any, Any]]:
    """(cluster, store) for a command that changes Slurm behind the daemon's back (rollback, limits adopt|clear):
    the daemon's lock taken and another host's live leader lock refused (the daemon would undo the change), unless
    ``dry_run``, which creates no database either (without one it says so and reads an empty store)."""
    from ..cluster import connect
    from ..daemon import leader
    from ..daemon.service import AlreadyRunning, lock
    from ..store import Store

    try:
        held = None if dry_run else lock(cfg.database_path)
    except AlreadyRunning as e:
        raise SlurmFairError(f"{e}: stop the daemon first (it would undo the {what})") from None
    try:
        cluster = connect(backend=cfg.cluster.backend, timeout=float(cfg.cluster.timeout))
        path = cfg.database_path
        if dry_run and not path.is_file():  # nothing recorded: the dry run must not create the database
            click.echo(f"note: no database at {path} (daemon.database): slurm-fair has recorded nothing there, so no "
                       "limit it wrote can be told from the site's; nothing was created", err=True)
            path = ":memory:"
        with Store(path, read_only=dry_run and path != ":memory:") as store:  # a dry run: nothing created or changed
            if not dry_run:  # a daemon on another host sharing the database would undo the change
                leader.check_free(store, leader.whoami(cfg.daemon.host_id), time.time(), f"{what} refused")
            yield cluster, store
    finally:
        if held is not None:
            held.close()


@click.command("rollback")
@config_option
@click.option("--dry-run", is_flag=True, help="Only print what would be restored (changes nothing).")
@json_option
@handle_errors
def rollback_cmd(config_path: str | None, dry_run: bool, as_json: bool) -> None:
    """Take slurm-fair off the cluster: every GPU limit it changed back to the value recorded before its first
    change (site limits included, exact; cleared where the account had none) where it is still what
    slurm-fair wrote (a value set by hand since is kept and named), every SiteFactor it set back to the job's
    own (0 for most), the type map removed. Refuses while the daemon runs (here, or on another host sharing the
    database while its lease is live). Running it again changes nothing. Exit 1 if something could not be
    restored (each named). --dry-run creates no file: without a database it says so
    and shows what a rollback with nothing recorded would do."""
    from ..daemon import rollback

    cfg = config_mod.load(config_path)
    with _site_change(cfg, dry_run, "rollback") as (cluster, store):
        out = rollback.run(cluster, store, cfg, dry_run=dry_run)
    if as_json:
        click.echo(json.dumps(out, indent=2, sort_keys=True))
    else:
        verb = "would restore" if dry_run else "restored"
        rows = [[a, ("gres/gpu" if k == "*" else f"gres/gpu:{k}"), "clear" if v == -1 else v]
                for a, ch in sorted(out["limits"].items()) for k, v in sorted(ch.items())]
        click.echo(render(["ACCOUNT", "LIMIT", "RESTORED TO"], rows) if rows else "no GPU limit to restore")
        click.echo(f"{verb}: {len(rows)} limit(s) of {len(out['limits'])} account(s); "
                   f"SiteFactor back to the job's own on {len(out['site_factors'])} pending job(s); "
                   + (f"type map {out['type_map']} {'would be ' if dry_run else ''}removed" if out["type_map"]
                      else "no type map"))
        for a, ch in sorted(out["kept"].items()):
            click.echo(f"kept (set by someone else since slurm-fair wrote it): {a} "
                       + ", ".join(f"{'gres/gpu' if k == '*' else 'gres/gpu:' + k}="
                                   f"{'none' if v == -1 else v}" for k, v in sorted(ch.items())))
        if out["unrecorded"]:
            click.echo("the database never ran a round (new, or the old one lost): it cannot tell which GPU limits "
                       "slurm-fair wrote; left as they are: " + "; ".join(
                           f"{a} {','.join(f'{k}={v}' for k, v in sorted(ch.items()))}"
                           for a, ch in sorted(out["unrecorded"].items())), err=True)
        if out.get("ownership_error"):
            click.echo(f"{out['ownership_error']} (rolled back with what the database knows)", err=True)
        for what, why in sorted(out["failed"].items()):
            click.echo(f"failed: {what}: {why}", err=True)
    if out["failed"]:
        sys.exit(1)


@click.command("preflight")
@config_option
@json_option(help="Print one JSON document {ok, slurm_version, findings, error}, also when a check cannot run "
                  "(error: why it stopped; exit 1, 2 for a bad config).")
@handle_errors
def preflight_cmd(config_path: str | None, as_json: bool) -> None:
    """Check what rounds need (root or sacctmgr AdminLevel=Operator, limits enforced, typed GPU TRES tracked,
    multifactor priority for SiteFactor, job_submit.lua and a writable type map next to it, the hooks, a
    writable database, the partitions and accounts the configuration names) and list what will override
    slurm-fair (a QOS GPU limit that can bind is a problem unless limits.qos_accepted names it, and so is a
    SiteFactor range above the sum of the site's priority weights; partition QOS, accounts with limits of their
    own, parents of the account tree are notes). Exit 1 with every problem named."""
    from ..daemon import preflight

    got = _Found()
    try:
        cluster_name = _preflight(config_path, got)
    except (SlurmFairError, sqlite3.Error) as e:
        if not as_json:
            raise
        _preflight_json(got, f"{type(e).__name__}: {e}" if isinstance(e, sqlite3.Error) else str(e))
        sys.exit(2 if isinstance(e, InputError) else 1)
    found = got.found
    problems = [f for f in found if f.level == preflight.PROBLEM]
    if as_json:
        _preflight_json(got, None)
    else:
        click.echo(f"Slurm {got.slurm_version}, cluster {cluster_name}")
        click.echo(render(["", "CHECK", "DETAIL"], [[f.level, f.what, f.detail] for f in found]))
        click.echo(f"{len(problems)} problem(s)" + ("" if problems else ": ready for rounds"))
    if problems:
        sys.exit(1)


@dataclasses.dataclass
class _Found:
    """What preflight found so far: Slurm's version (None until Slurm answered) and the findings."""

    slurm_version: str | None = None
    found: list = dataclasses.field(default_factory=list)


def _preflight(config_path: str | None, got: _Found) -> str:
    """Run the checks, filling ``got`` as they go, so that a stop half way still shows
    what was found; returns the cluster's name."""
    import os
    import pwd

    from ..cluster.cli import CliCluster
    from ..daemon import preflight
    from ..store import Store

    cfg = config_mod.load(config_path)
    cluster = CliCluster(timeout=float(cfg.cluster.timeout))
    snapshot = cluster.snapshot()
    got.slurm_version = snapshot.slurm_version
    config, qos, parts = preflight.gather(cluster)
    site = {}
    if cfg.database_path.exists():
        with Store(cfg.database_path, read_only=True) as store:
            site = store.site_limits()
    got.found = preflight.check(config, snapshot, cfg, qos=qos, partitions=parts,
                                   slurm_conf=os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf", site=site)
    py = preflight.hook_python(preflight.hook_python_version(), cfg)
    if py is not None:
        got.found.append(py)
    user = pwd.getpwuid(os.geteuid()).pw_name
    allowed = preflight.privilege(user, os.geteuid(),
                                  None if os.geteuid() == 0 else preflight.my_admin_level(cluster, user))
    if allowed is not None:
        got.found.insert(0, allowed)
    return cluster.cluster_name()


def _preflight_json(got: _Found, error: str | None) -> None:
    from ..daemon import preflight

    problems = [f for f in got.found if f.level == preflight.PROBLEM]
    click.echo(json.dumps({"ok": error is None and not problems, "slurm_version": got.slurm_version,
                           "findings": [f.as_dict() for f in got.found], "error": error}, indent=2))


@click.command("files")
@click.option("--copy", "dest", metavar="DIR", help="Copy them into DIR (created if missing; existing files are "
              "replaced).")
def files_cmd(dest: str | None) -> None:
    """The site files shipped with slurm-fair (in the wheel too): job_submit.lua, the hook shim, the systemd unit,
    the commented default config, the slurm.conf lines for the hooks. Prints where they are; --copy DIR copies
    them there."""
    import shutil
    from pathlib import Path

    share = Path(__file__).resolve().parent.parent / "share"
    files = sorted(p for p in share.iterdir() if p.is_file() and not p.name.startswith((".", "_")))
    if dest:
        out = Path(dest)
        out.mkdir(parents=True, exist_ok=True)
        for p in files:
            shutil.copy2(p, out / p.name)
    for p in files:
        click.echo(str((Path(dest) / p.name) if dest else p))


@click.group("limits")
def limits_group() -> None:
    """GPU limits a database with no record faces (a new install on a site with limits of its own, or a lost
    database facing an earlier install's): its rounds write no limit until you say which they are."""


def _unrecorded(config_path: str | None, as_json: bool, dry_run: bool, act: Any) -> dict:
    from ..daemon.unrecorded import as_rows

    cfg = config_mod.load(config_path)
    with _site_change(cfg, dry_run, "limits change") as (cluster, store):
        out = act(cluster, store, cfg)
    if as_json:
        click.echo(json.dumps(out, indent=2, sort_keys=True))
    else:
        rows = as_rows(out["limits"])
        click.echo(render(["ACCOUNT", "LIMIT", "VALUE"], rows) if rows else "no account has a GPU limit")
    return out


@limits_group.command("adopt")
@config_option
@click.option("--dry-run", is_flag=True, help="Only print the limits that would be adopted.")
@json_option
@handle_errors
def limits_adopt_cmd(config_path: str | None, dry_run: bool, as_json: bool) -> None:
    """Keep every account's GPU limits now as the site's own: recorded as its site limits (limits.site_limits
    then respects or adopts them; rollback restores them); the rounds then write limits again. A limit still as
    the ownership file (limits.ownership_file) says slurm-fair wrote it is slurm-fair's: not adopted."""
    from ..daemon import unrecorded

    out = _unrecorded(config_path, as_json, dry_run,
                      lambda c, st, cfg: unrecorded.adopt(c, st, dry_run=dry_run, ownership_path=cfg.ownership_path))
    if not as_json:
        click.echo(f"{'would adopt' if dry_run else 'adopted'}: {len(out['limits'])} account(s)"
                   + ("" if dry_run else f" ({len(out['recorded'])} recorded now)"))


@limits_group.command("clear")
@click.argument("accounts", nargs=-1, required=True, metavar="ACCOUNT...")
@config_option
@click.option("--dry-run", is_flag=True, help="Only print the limits that would be cleared.")
@json_option
@handle_errors
def limits_clear_cmd(accounts: tuple[str, ...], config_path: str | None, dry_run: bool, as_json: bool) -> None:
    """Clear the GPU limits of ACCOUNT... (an earlier install's, its database lost); non-GPU TRES untouched. Where
    the ownership file (limits.ownership_file) has a record of the account, only the limits still as slurm-fair
    wrote them are cleared (any other value is the site's: kept, listed under "kept")."""
    from ..daemon import unrecorded

    out = _unrecorded(config_path, as_json, dry_run,
                      lambda c, st, cfg: unrecorded.clear(c, st, accounts, dry_run=dry_run,
                                                          ownership_path=cfg.ownership_path))
    if not as_json:
        for what, why in sorted(out["failed"].items()):
            click.echo(f"failed: {what}: {why}", err=True)
    if out["failed"]:
        sys.exit(1)


def register(main: click.Group) -> None:
    main.add_command(limits_group)
    main.add_command(files_cmd)
    main.add_command(preflight_cmd)
    main.add_command(rollback_cmd)
