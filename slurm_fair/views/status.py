"""Data behind ``slurm-fair status``: the last recorded round, joined with what Slurm shows now when it
answers (``slurm-fair explain``, one account in detail: :mod:`.explain`). Returns plain JSON-able dicts; the CLI
only prints them."""

from __future__ import annotations

from typing import Any

from ..config import Config
from ..cluster.base import Snapshot
from ..cluster.errors import ClusterError
from ..daemon import plan as P
from ..daemon.preemption.store import PreemptionStore
from ..profiling.core import find_conflicts
from ..records import RoundDetails
from ..store import Store


def live_snapshot(cluster: Any) -> tuple[Snapshot | None, str]:
    if cluster is None:
        return None, "no cluster"
    try:
        return cluster.snapshot(), ""
    except ClusterError as e:
        return None, str(e)


def profile_conflicts(store: Store, cfg: Config) -> list[dict[str, Any]]:
    """{account, class, gpu_type, reference, reported, measured, reported_speedup, measured_speedup, ratio,
    samples, action} for each conflict beyond ``profiling.conflict_margin``; ``action``: what the rounds do
    about it (``profiling.on_conflict``: flag | ignore-tenant | fallback, profiling/trust.py)."""
    return [{**c, "action": cfg.profiling.on_conflict}
            for c in find_conflicts(store.profile_values(), float(cfg.profiling.conflict_margin))]


def status(store: Store, cfg: Config, snapshot: Snapshot | None, unreachable: str = "") -> dict[str, Any]:
    """Last good round (ok or dry-run) per account, with Slurm's limits and usage now if reachable."""
    last = store.round()
    latest = store.rounds(limit=1)
    out: dict[str, Any] = {
        "round": last.id if last else None,
        "policy": last.policy if last else cfg.policy.name,
        "round_status": last.status if last else None,
        "finished": last.finished if last else None,
        "latest_round": ({"id": latest[0].id, "status": latest[0].status, "message": latest[0].message,
                          "finished": latest[0].finished} if latest else None),
        "reachable": snapshot is not None,
        "unreachable": unreachable,
        "accounts": {},
        # GPU-seconds per account and type from the hooks' job records, all recorded time up to now
        "received_gpu_seconds": store.received_gpu_seconds(),
        "preemptions": {c.state: c.count for c in PreemptionStore(store).counts()},  # state -> preemptions
        # where a tenant's reported profile contradicts what its jobs measured (profiling.core.find_conflicts)
        "profile_conflicts": profile_conflicts(store, cfg),
    }
    d = RoundDetails.of_round(last)
    # GPU limits someone else set since slurm-fair wrote them: kept as they are, never written (issue 29)
    out["hand_set"] = {a: dict(ch) for a, ch in d.drift.items()}
    # GPU limits the store has no record of: no limit is written until `slurm-fair limits adopt` or `clear`
    out["unrecorded"] = {a: dict(ch) for a, ch in d.unrecorded.items()}
    live_limits = {a.name: dict(a.limits) for a in snapshot.accounts} if snapshot else {}
    in_use_now = P.gpus_in_use(snapshot) if snapshot else {}
    pending_now = P.pending_gpus(snapshot, cfg.cluster.partitions, cfg.limits.accounts) if snapshot else {}
    accounts = sorted(set(d.accounts) | (set(pending_now) | set(in_use_now)) - P.NEVER_MANAGED)
    for a in accounts:
        out["accounts"][a] = {
            "weight": d.weights.get(d.tenants.get(a, a)),
            "ideal": d.ideal.get(a, {}),
            "real": d.real.get(a, {}),  # the rounded share: the account's guarantee per type
            "claims": d.claims.get(a, {}),  # of it, held for its waiting jobs in that round
            "deviation": d.deviations.get(a, {}),
            "planned_limits": d.limits.get(a, {}),
            "limits": live_limits.get(a, {}) if snapshot else d.limits.get(a, {}),
            "limits_from": "slurm" if snapshot else "last round",
            "in_use": in_use_now.get(a, {}) if snapshot else d.in_use.get(a, {}),
            "pending_gpus": pending_now.get(a, 0) if snapshot else d.pending_gpus.get(a, 0),
        }
    return out
