"""``slurm-fair limits adopt | clear``: what the admin says of GPU limits a store with no record faces (issue 29).

A store that never wrote, managed or recorded anything cannot tell a new install on a site with GPU limits of its
own from a lost database facing an earlier install's limits, so its rounds write no limit while such accounts
exist (``Decisions.unrecorded``, shown by ``status``). The admin says which they are:

* ``adopt``: they are the site's — each account's GPU limits now are recorded as its site limits (what
  ``limits.site_limits`` respects or adopts, and ``rollback`` restores);
* ``clear ACCOUNT...``: they are an earlier install's — the named accounts' GPU limits are cleared (non-GPU TRES
  untouched).

``plan_adopt`` and ``plan_clear`` are pure; ``adopt`` and ``clear`` do the I/O. Both refuse while the daemon runs.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..cluster.base import CLEAR, Cluster, Snapshot
from ..errors import InputError
from ..store import Store
from .apply import apply_limits


def plan_adopt(snapshot: Snapshot) -> dict[str, dict[str, int]]:
    """account -> its GPU limits now, for every account that has some."""
    return {a.name: {k: int(v) for k, v in a.limits.items()} for a in snapshot.accounts if a.limits}


def plan_clear(snapshot: Snapshot, accounts: Iterable[str]) -> dict[str, dict[str, int]]:
    """The changes that clear the named accounts' GPU limits; InputError naming an account Slurm lacks."""
    out: dict[str, dict[str, int]] = {}
    for name in accounts:
        acct = snapshot.account(name)
        if acct is None:
            raise InputError("ACCOUNT", name, "no such account in Slurm")
        if acct.limits:
            out[name] = {k: CLEAR for k in acct.limits}
    return out


def adopt(cluster: Cluster, store: Store, dry_run: bool = False) -> dict[str, Any]:
    """Record every account's GPU limits now as its site limits (accounts already recorded keep their record)."""
    limits = plan_adopt(cluster.snapshot())
    recorded = [] if dry_run else store.record_site_limits(limits)
    if recorded:
        store.event("limits-adopted", f"GPU limits of {len(recorded)} account(s) adopted as the site's",
                    data={a: limits[a] for a in recorded})
    return {"dry_run": dry_run, "limits": limits, "recorded": recorded}


def clear(cluster: Cluster, store: Store, accounts: Iterable[str], dry_run: bool = False) -> dict[str, Any]:
    """Clear the named accounts' GPU limits (an earlier install's)."""
    changes = plan_clear(cluster.snapshot(), accounts)
    out: dict[str, Any] = {"dry_run": dry_run, "limits": changes, "failed": {}}
    if dry_run or not changes:
        return out
    applied = apply_limits(cluster, changes)
    out["failed"] = dict(applied.failed)
    if applied.ok:
        store.event("limits-cleared", f"GPU limits of {len(applied.ok)} account(s) cleared as an earlier "
                    "install's", data=dict(applied.ok))
    return out


def as_rows(limits: Mapping[str, Mapping[str, int]]) -> list[list[Any]]:
    return [[a, "gres/gpu" if k == "*" else f"gres/gpu:{k}", "clear" if v == CLEAR else v]
            for a, ch in sorted(limits.items()) for k, v in sorted(ch.items())]
