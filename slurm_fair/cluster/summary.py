"""Pure summaries of a Snapshot, for the ``slurm-fair cluster`` / ``slurm-fair jobs`` commands and their JSON."""

from __future__ import annotations

from typing import Any

from .base import Job, Snapshot

UNTYPED_KEY = "untyped"


def account_usage(snap: Snapshot) -> dict[str, dict[str, Any]]:
    """account -> shares, limits, users, GPUs in use per type (running jobs' allocations), GPUs pending per
    requested type (``untyped`` for requests without a type), and job counts.  Accounts that only have
    jobs (no association row seen) are included with shares None."""
    out: dict[str, dict[str, Any]] = {}

    def entry(name: str) -> dict[str, Any]:
        if name not in out:
            out[name] = {"shares": None, "limits": {}, "users": [], "in_use": {}, "pending": {},
                         "jobs_running": 0, "jobs_pending": 0}
        return out[name]

    for a in snap.accounts:
        e = entry(a.name)
        e["shares"] = a.shares
        e["limits"] = dict(sorted(a.limits.items()))
        e["users"] = list(a.users)
    for j in snap.jobs:
        e = entry(j.account)
        if j.running:
            e["jobs_running"] += 1
            for t, n in j.gpus_allocated.items():
                e["in_use"][t] = e["in_use"].get(t, 0) + n
        elif j.pending:
            e["jobs_pending"] += 1
            key = j.gpu_type or UNTYPED_KEY
            e["pending"][key] = e["pending"].get(key, 0) + j.gpus
    for e in out.values():
        e["in_use"] = dict(sorted(e["in_use"].items()))
        e["pending"] = dict(sorted(e["pending"].items()))
    return dict(sorted(out.items()))


def cluster_dict(snap: Snapshot) -> dict[str, Any]:
    """The ``slurm-fair cluster --json`` document."""
    return {
        "slurm_version": snap.slurm_version,
        "taken_at": snap.taken_at,
        "gpu_types": {t: {"total": u.total, "allocated": u.allocated, "unusable": u.unusable}
                      for t, u in snap.gpu_types().items()},
        "capacity": snap.capacity(),
        "partitions": list(snap.partitions),
        "nodes": [{"name": n.name, "state": list(n.state), "usable": n.usable, "partitions": list(n.partitions),
                   "gpus": dict(n.gpus), "gpus_allocated": dict(n.gpus_allocated)} for n in snap.nodes],
        "accounts": account_usage(snap),
    }


def job_dict(j: Job) -> dict[str, Any]:
    """One job as ``slurm-fair jobs --json`` prints it."""
    return {
        "job_id": j.job_id, "name": j.name, "account": j.account, "user": j.user, "partition": j.partition,
        "state": j.state, "reason": j.reason, "priority": j.priority, "site_factor": j.site_factor,
        "gpus": j.gpus, "gpus_per_node": j.gpus_per_node, "nodes": j.nodes, "gpu_type": j.gpu_type,
        "gpus_allocated": dict(j.gpus_allocated), "comment": j.comment, "wckey": j.wckey,
        "submit_time": j.submit_time, "start_time": j.start_time, "restart_count": j.restart_count,
    }
