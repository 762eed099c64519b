"""``slurm-fair rollback``: take slurm-fair off a cluster without a trace.

* **Limits**: every account slurm-fair changed or manages gets back the GPU limits it had before slurm-fair first
  managed it (recorded in the store's ``site_limits`` by the first round that planned it, left alone or not, the
  exact values; an account never recorded had none) — but only where a limit is still what slurm-fair last wrote
  (the store's ``written``): a value someone set since is theirs and is left (``kept``, named), and so is one
  slurm-fair never wrote (named when it differs from the record: a key added by hand). Only
  what differs from what Slurm shows now is written; a GPU limit slurm-fair had set where the account had none
  is cleared. Non-GPU TRES are never touched. What slurm-fair wrote is the database's record over the
  ownership file's (``daemon/ownership.py``): a lost database's limits are still known from the file (a value
  equal to the file's is taken back, any other kept and named), and the accounts given back leave the file. A
  database that never ran a round with no ownership record knows nothing slurm-fair wrote: the accounts with GPU
  limits are named (``unrecorded``), none is touched.
* **SiteFactor**: every pending GPU job whose SiteFactor is still the one slurm-fair last set gets back the one
  it had before slurm-fair's first change (the store's ``site_factors``; 0 for most jobs); one the site set
  since is left. A store with no such record (an older version's factors) sets every one back to 0, as before.
* **Type map**: the published file is removed (job_submit.lua then lets untyped requests through unchanged).
* **State**: the managed set is emptied, restored accounts' records dropped (a later start records afresh), a
  ``rollback`` event written. Running it again finds nothing to do.

The daemon must not run meanwhile (it would put its limits back): the command takes the daemon's lock and
refuses while a daemon holds it. ``plan_rollback`` is pure; ``run`` does the I/O.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..config import Config
from ..cluster.base import CLEAR, Cluster, Snapshot
from ..store import Store
from . import ownership, plan as P
from .apply import apply_factors, apply_limits


@dataclass(frozen=True)
class Rollback:
    """What a rollback changes."""

    limits: dict[str, dict[str, int]]  # account -> key -> value (CLEAR: remove the limit)
    site_factors: dict[int, int]  # pending job -> 0
    type_map: str | None  # the map file to remove (None: none there)
    accounts: list[str] = field(default_factory=list)  # every account slurm-fair touched
    kept: dict[str, dict[str, int]] = field(default_factory=dict)  # set by someone else since: left as they are


def plan_rollback(snapshot: Snapshot, site: Mapping[str, Mapping[str, int]], managed: Iterable[str],
                  type_map: Path | None, cfg: Config, written: Mapping[str, Mapping[str, int]] | None = None,
                  factors_set: Mapping[int, tuple[int, int]] | None = None) -> Rollback:
    """The changes that restore the cluster (module docstring). ``written``: what slurm-fair last wrote (None:
    not known — every GPU limit of the accounts is set back, as before the store kept it; likewise for an
    account it has no record for: an older version's writes, or ones retention pruned before the record)."""
    accounts = sorted(set(site) | set(managed) | set(written or {}))
    changes: dict[str, dict[str, int]] = {}
    kept: dict[str, dict[str, int]] = {}
    for a in accounts:
        acct = snapshot.account(a)
        if acct is None:  # gone from Slurm: nothing to restore
            continue
        target = {k: int(v) for k, v in site.get(a, {}).items()}
        now = dict(acct.limits)
        if written is None or (not written.get(a) and a not in site):
            # no record of what slurm-fair wrote there nor of the account's site limits (older writes): as before
            diff = {k: v for k, v in target.items() if now.get(k) != v}
            diff.update({k: CLEAR for k in now if k not in target})
        else:
            diff = P.restore(now, target, written.get(a, {}))
            # what someone else set: a value over slurm-fair's, or a key it never wrote unlike the site record
            # (issue 40: a key added by hand to a managed account)
            theirs = P.drift({a: now}, {a: written.get(a, {})}, [a], {a: target}).get(a)
            if theirs:
                kept[a] = theirs
        if diff:
            changes[a] = diff
    factors: dict[int, int] = {}
    for j in P.gpu_jobs(snapshot, cfg.cluster.partitions, cfg.limits.accounts):
        if not j.pending:
            continue
        if not factors_set:  # no record (an older version's factors): back to 0, as before
            if j.site_factor:
                factors[j.job_id] = 0
        elif j.job_id in factors_set:
            before, value = factors_set[j.job_id]
            if j.site_factor == value and before != value:  # still slurm-fair's: the job's own back
                factors[j.job_id] = before
    present = str(type_map) if type_map is not None and (type_map.exists() or type_map.is_symlink()) else None
    return Rollback(changes, factors, present, accounts, kept)


def run(cluster: Cluster, store: Store, cfg: Config, dry_run: bool = False) -> dict[str, Any]:
    """Roll back (module docstring); with ``dry_run`` only say what would change. Returns the report:
    ``limits`` {account: {key: value, -1 = clear}}, ``site_factors`` (jobs reset), ``type_map`` (file removed
    or None), ``failed`` {account or 'site_factor' or 'type_map' or 'ownership_file': cause}, ``dry_run``,
    ``ownership_file`` (its path, None: off) and ``ownership_error`` when it could not be read."""
    snapshot = cluster.snapshot()
    owned, cluster_key = ownership.load_for(cluster, cfg.ownership_path)
    rb = plan_rollback(snapshot, store.site_limits(), store.managed(), cfg.type_map_path, cfg,
                       ownership.merged(owned.of(cluster_key or ""), store.written()), store.factors_set())
    never_ran = not store.rounds(limit=1, details=False)
    unrecorded = ({a.name: dict(a.limits) for a in snapshot.accounts if a.limits and a.name not in rb.accounts}
                  if never_ran else {})
    out: dict[str, Any] = {"dry_run": dry_run, "accounts": rb.accounts, "limits": rb.limits, "kept": rb.kept,
                           "unrecorded": unrecorded, "site_factors": sorted(rb.site_factors),
                           "type_map": rb.type_map, "failed": {},
                           "ownership_file": None if owned.path is None else str(owned.path)}
    if owned.error:  # a rollback with what the database alone knows; the file is named
        out["ownership_error"] = owned.error
    if dry_run:
        return out
    applied = apply_limits(cluster, rb.limits)
    out["failed"].update(applied.failed)
    _done, factor_failed = apply_factors(cluster, rb.site_factors)
    if factor_failed:
        out["failed"]["site_factor"] = "; ".join(f"{k}: {v}" for k, v in sorted(factor_failed.items()))
    if rb.type_map is not None:
        try:
            os.unlink(rb.type_map)
        except FileNotFoundError:
            pass
        except OSError as e:
            out["failed"]["type_map"] = f"{rb.type_map}: {e.strerror or e}"
    restored = [a for a in rb.accounts if a not in applied.failed]
    if cluster_key is not None:  # given back: they leave the ownership file
        err = ownership.record(owned.path, cluster_key, {}, forget=restored)
        if err:
            out["failed"]["ownership_file"] = err
    with store.transaction():
        store.set_managed(sorted(set(store.managed()) - set(restored)))
        store.forget_site_limits(restored)
        store.forget_written(restored)
        store.forget_factors()
        store.event("rollback", f"rolled back {len(restored)} account(s), {len(rb.site_factors)} SiteFactor(s)"
                    + (", removed the type map" if rb.type_map and "type_map" not in out["failed"] else "")
                    + (f"; failed: {', '.join(sorted(out['failed']))}" if out["failed"] else ""),
                    data={"limits": rb.limits, "kept": rb.kept, "failed": out["failed"]})
    return out
