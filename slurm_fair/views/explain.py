"""Data behind ``slurm-fair explain``: one account in the last recorded round, joined with what Slurm shows now
when it answers, and why each of its pending jobs waits. Returns a plain JSON-able dict; the CLI only prints it."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ..config import Config
from ..cluster.base import ANY_GPU, Snapshot
from ..cluster.blocked import describe
from ..daemon import plan as P
from ..daemon.plan.binding import settle_round
from ..daemon.preemption.store import PreemptionStore
from ..errors import InputError
from ..records import RoundDetails
from ..store import Store
from .status import profile_conflicts
from .why import move_line, moves_from_records


def _why(job: Any, cls: str, types: list[str], acct: dict[str, Any], limits_now: dict[str, int],
         in_use: dict[str, int]) -> str:
    """slurm-fair's view of why a pending job waits."""
    kind = P.blocked_kind(job)
    if kind:
        return f"Slurm holds it back ({job.reason}): {describe(kind)}"
    if acct.get("held_why"):  # issue 30: held back across all its jobs (daemon/preemption/unrequeueable.py)
        return held_across(acct["held_why"], acct.get("held_at", {}))
    held = sum(v for k, v in in_use.items())
    total_limit = limits_now.get(ANY_GPU)
    usable = types if job.gpu_type is None else [job.gpu_type]
    typed_room = {g: limits_now.get(g, None) for g in usable}
    guarantee = acct.get("real", {})
    if (job.reason or "").startswith(P.LIMIT_REASONS) or (total_limit is not None and held + job.gpus > total_limit):
        lim = ", ".join(f"{g}={v}" for g, v in typed_room.items() if v is not None) or "none per type"
        mine = ", ".join(f"{g}={guarantee.get(g, 0)}" for g in usable)
        return (f"held back by its limit (holds {held} GPUs; limit {total_limit if total_limit is not None else '-'}"
                f"; {lim}): other accounts' waiting jobs claim the GPUs of their guarantees; this account's "
                f"guarantee is {mine} (fair share {sum(acct.get('ideal', {}).values()):.2f} GPUs)")
    if job.reason in ("Resources", "Priority"):
        return (f"no limit holds it back; it waits for free GPUs ({job.reason}); SiteFactor {job.site_factor} "
                "orders it among the pending jobs (accounts owed the most first)")
    return f"no limit holds it back; Slurm reason {job.reason or 'None'}"


def held_across(why: str, at: dict[str, int]) -> str:
    """Why an account's pending GPU jobs wait while it is held back across all its jobs."""
    most = ", ".join(f"{'any' if k == ANY_GPU else k}={v}" for k, v in sorted(at.items())) or "none"
    return (f"held back across all its jobs: one of its running jobs that preemption would take cannot be requeued "
            f"and {why}; it starts no GPU job on any type (its limits are held at what it runs: {most}) until that "
            "demand runs (preemption.unrequeueable)")


def explain(store: Store, cfg: Config, account: str, snapshot: Snapshot | None, unreachable: str = "") -> dict[str, Any]:
    last = store.round()
    d = RoundDetails.of_round(last)
    known = set(d.accounts)
    if snapshot is not None:
        known |= {a.name for a in snapshot.accounts}
        # demand as the round settles it (issue 41: begin times due within a round, site-limit); what slurm-fair
        # wrote as the database has it (the ownership file is the daemon's)
        snapshot = settle_round(snapshot, float(cfg.daemon.period), store.written(), store.site_limits())
    if account not in known:
        raise InputError("account", account, f"unknown account (known: {', '.join(sorted(known)) or 'none'})")
    tenant = d.tenants.get(account, dict(cfg.tenants.map).get(account, account))
    live_acct = snapshot.account(account) if snapshot else None
    limits_now = dict(live_acct.limits) if live_acct else {}
    in_use = (P.gpus_in_use(snapshot).get(account, {}) if snapshot else d.in_use.get(account, {}))
    acct_view = {
        "ideal": d.ideal.get(account, {}),
        "deviation": d.deviations.get(account, {}),
        "real": d.real.get(account, {}),
        "held_why": d.held_why.get(account, ""),
        "held_at": d.held_at.get(account, {}),
    }
    out: dict[str, Any] = {
        "account": account,
        "round": last.id if last else None,
        "policy": last.policy if last else cfg.policy.name,
        "tenant": tenant,
        "weight": d.weights.get(tenant),
        "shares": live_acct.shares if live_acct else None,
        "classes": d.classes.get(account, {}),
        "demand_gpus": d.demand.get(account, 0),
        "ideal": acct_view["ideal"],
        "real": d.real.get(account, {}),  # its guarantee per type (the rounded share)
        "claims": d.claims.get(account, {}),  # of it, held for its waiting jobs
        "lendable": d.lendable,  # per type, GPUs no waiting account's claim holds
        "lend": d.lend,
        "extra": d.extra.get(account, {}),
        "deviation_before": d.deviation_before.get(account, {}),
        "deviation": acct_view["deviation"],
        "min_gpus": d.min_gpus.get(account),
        "planned_limits": d.limits.get(account, {}),
        "limits_in_slurm": limits_now if snapshot else None,
        "in_use": in_use,
        "deficit": d.deficits.get(account),
        "reachable": snapshot is not None,
        "unreachable": unreachable,
        "pending_jobs": [],
        # GPUs of its pending jobs that are not demand, per why (held, dependency, begin-time, reservation): in
        # the last round, and in Slurm now when it answers (plan.eligible)
        "not_demand": d.not_demand.get(account, {}),
        # per type, GPUs its limits were lowered by: its running jobs preemption could not requeue (held-back)
        "held_back": d.held_back.get(account, {}),
        # issue 30: held back across all its jobs until the demand it was held back for runs: what for, and the most
        # it may hold per type (what it ran, minus its held-back GPUs)
        "held_why": d.held_why.get(account, ""),
        "held_at": d.held_at.get(account, {}),
        "not_demand_now": (P.not_demand(j for j in P.gpu_jobs(snapshot, cfg.cluster.partitions, cfg.limits.accounts)
                                        if j.account == account).get(account, {}) if snapshot else None),
        # whether its pending fair:flex jobs can still be moved to another GPU type (None: it has none)
        "flexible_note": P.flexible_note(snapshot, account),
        "preemptions": [],  # newest first, with their steps (the table's rows, below)
        "moves": [],  # of those, the upgrade moves (a faster GPU type), oldest first, each with its sentence
        "profile_conflicts": [c for c in profile_conflicts(store, cfg) if c["account"] == account],
    }
    records = PreemptionStore(store).rows(account=account, limit=50)
    out["preemptions"] = [r.as_row() for r in records]
    # issue 41: a hold-back ends — job id -> when it is cancelled (preemption.hold_back_max / cancel_grace)
    out["held_back_until"] = {r.job_id: r.requeue_at for r in records
                              if r.state == "held-back" and r.requeue_at is not None}
    moved: dict[int, str] = {}  # job id -> its last move's sentence
    for r in sorted((r for r in records if r.target_type), key=lambda r: r.id or 0):
        for m in moves_from_records([r]):
            moved[r.job_id] = move_line(m)
            out["moves"].append({"job_id": r.job_id, **asdict(m), "text": move_line(m)})
    prices = d.prices
    out["prices"] = prices  # bud: the price of one GPU per type (None for the other policies)
    if prices:
        weights = d.weights
        total = sum(float(w) for w in weights.values())
        out["budget"] = float(weights.get(tenant, 0.0)) / total if total > 0 else None  # the tenant's
        out["spend"] = sum(float(prices.get(g, 0.0)) * float(v) for g, v in acct_view["ideal"].items())
    if snapshot is not None:
        types = list(P.usable_capacity(snapshot, cfg.cluster.partitions))
        for j in sorted(P.gpu_jobs(snapshot, cfg.cluster.partitions, cfg.limits.accounts),
                        key=lambda j: (j.submit_time, j.job_id)):
            if j.account != account or not j.pending:
                continue
            cls = P.job_class(j, cfg.classes.order)
            out["pending_jobs"].append({
                "job_id": j.job_id, "class": cls, "gpus": j.gpus, "gpu_type": j.gpu_type,
                "slurm_reason": j.reason, "site_factor": j.site_factor, "priority": j.priority,
                "counted": P.startable(j), "blocked": P.blocked_kind(j),
                "waited_s": max(0, int(snapshot.taken_at - j.submit_time)),
                "slurm_fair": _why(j, cls, types, acct_view, limits_now, in_use),
                "moved": moved.get(j.job_id),  # a move requeued it: it waits to restart on the faster type
            })
    return out
