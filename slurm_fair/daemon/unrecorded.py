"""``slurm-fair limits adopt | clear``: what the admin says of GPU limits a store with no record faces (issue 29).

A store that never wrote, managed or recorded anything cannot tell a new install on a site with GPU limits of its
own from a lost database facing an earlier install's limits, so its rounds write no limit while such accounts
exist (``Decisions.unrecorded``, shown by ``status``). The admin says which they are:

* ``adopt``: they are the site's — each account's GPU limits now are recorded as its site limits (what
  ``limits.site_limits`` respects or adopts, and ``rollback`` restores);
* ``clear ACCOUNT...``: they are an earlier install's — the named accounts' GPU limits are cleared (non-GPU TRES
  untouched).

With an ownership file (``daemon/ownership.py``) a new database is seldom in that state: a limit equal to the
file's record is slurm-fair's (``adopt`` leaves it out, ``clear`` takes it back), any other value the site's
(``adopt`` records it, ``clear`` keeps it).

``plan_adopt`` and ``plan_clear`` are pure; ``adopt`` and ``clear`` do the I/O. Both refuse while the daemon runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from ..cluster.base import CLEAR, Cluster, Snapshot
from ..errors import InputError
from ..store import Store
from . import ownership
from .apply import apply_limits
from .ownership import OwnershipError, site_part


def plan_adopt(snapshot: Snapshot, owned: Mapping[str, Mapping[str, int]] | None = None
               ) -> dict[str, dict[str, int]]:
    """account -> its GPU limits now, for every account that has some — less those still as the ownership
    file's record (``owned``) says slurm-fair wrote them."""
    now = {a.name: {k: int(v) for k, v in a.limits.items()} for a in snapshot.accounts if a.limits}
    return {a: lim for a, lim in site_part(now, owned or {}).items() if lim}


def plan_clear(snapshot: Snapshot, accounts: Iterable[str], owned: Mapping[str, Mapping[str, int]] | None = None
               ) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """(the changes that clear the named accounts' GPU limits, the limits kept); InputError naming an account
    Slurm lacks. An account the ownership file has a record of (``owned``) loses only the limits still as
    slurm-fair wrote them: any other value is the site's (kept)."""
    out: dict[str, dict[str, int]] = {}
    kept: dict[str, dict[str, int]] = {}
    for name in accounts:
        acct = snapshot.account(name)
        if acct is None:
            raise InputError("ACCOUNT", name, "no such account in Slurm")
        mine = (owned or {}).get(name)
        theirs = site_part({name: acct.limits}, {name: mine})[name] if mine else {}
        if theirs:
            kept[name] = theirs
        if set(acct.limits) - set(theirs):
            out[name] = {k: CLEAR for k in acct.limits if k not in theirs}
    return out, kept


def adopt(cluster: Cluster, store: Store, dry_run: bool = False, ownership_path: Path | None = None
          ) -> dict[str, Any]:
    """Record every account's GPU limits now as its site limits (accounts already recorded keep their record),
    less those the ownership file says are slurm-fair's."""
    owned, key = ownership.load_for(cluster, ownership_path)
    if owned.error:
        raise OwnershipError(owned.error + " (move it away, or set limits.ownership_file)")
    limits = plan_adopt(cluster.snapshot(), owned.of(key or ""))
    recorded = [] if dry_run else store.record_site_limits(limits)
    if recorded:
        store.event("limits-adopted", f"GPU limits of {len(recorded)} account(s) adopted as the site's",
                    data={a: limits[a] for a in recorded})
    return {"dry_run": dry_run, "limits": limits, "recorded": recorded}


def clear(cluster: Cluster, store: Store, accounts: Iterable[str], dry_run: bool = False,
          ownership_path: Path | None = None) -> dict[str, Any]:
    """Clear the named accounts' GPU limits (an earlier install's; only slurm-fair's where the ownership file
    knows them); the accounts cleared leave the ownership file."""
    owned, key = ownership.load_for(cluster, ownership_path)
    if owned.error:
        raise OwnershipError(owned.error + " (move it away, or set limits.ownership_file)")
    accounts = list(accounts)
    changes, kept = plan_clear(cluster.snapshot(), accounts, owned.of(key or ""))
    out: dict[str, Any] = {"dry_run": dry_run, "limits": changes, "kept": kept, "failed": {}}
    if dry_run:
        return out
    applied = apply_limits(cluster, changes)
    out["failed"] = dict(applied.failed)
    if key is not None:
        err = ownership.record(ownership_path, key, {}, forget=[a for a in accounts if a not in applied.failed])
        if err:
            out["failed"]["ownership_file"] = err
    if applied.ok:
        store.event("limits-cleared", f"GPU limits of {len(applied.ok)} account(s) cleared as an earlier "
                    "install's", data=dict(applied.ok))
    return out


def as_rows(limits: Mapping[str, Mapping[str, int]]) -> list[list[Any]]:
    return [[a, "gres/gpu" if k == "*" else f"gres/gpu:{k}", "clear" if v == CLEAR else v]
            for a, ch in sorted(limits.items()) for k, v in sorted(ch.items())]
