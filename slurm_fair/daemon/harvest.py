"""Harvest throughput reports (``fair:tput=<steps/s>@<n>`` in job comments) into profiles, once per round.

Where reports come from: the comments of the running jobs in the round's snapshot, and the ``fair_tokens``
of EpilogSlurmctld hook records ingested in the last day (a job that wrote its last report just before it
ended: ``profile run`` does). Rules:

* A report is taken once: key (job id, n); every report taken is stored in ``profile_reports`` as
  accepted, rejected (an outlier, counted on the profile) or refused (bad), so a job's comment read again
  next round changes nothing.
* Class: the job's class (``classes.order``); account: the job's. GPU type: the one Slurm allocated to the
  job (a job on several types is refused); without one, the NVML device name of a ``fair:gpu=`` token through
  the NVML map ([profiling] nvml_map).
* Value: the report divided by the job's GPU count (profiles are per GPU: linear scaling is assumed),
  checked by :func:`slurm_fair.profiling.core.check_sample`; source ``measured`` for profiling runs, else
  ``harvested``, and how far it is trusted: :mod:`slurm_fair.profiling.trust` (bounds from the first sample,
  the change window, which classes a job may name); a report naming another account's class is refused.
  An account's classes beyond ``[profiling] max_classes_per_account`` count as ``default``
  (:mod:`slurm_fair.daemon.plan.classcap`).
* A refused or rejected report becomes a ``profile-report-refused`` / ``profile-report-rejected`` event;
  nothing here raises (a failure is a ``profile-harvest-error`` event and the round goes on).
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterable

from .. import profiles as shipped_profiles
from ..cluster.base import Snapshot
from ..errors import InputError
from ..profiling.client import parse_tokens
from ..profiling.core import Rules, check_sample
from ..profiling.trust import TrustRules, Verdict, class_refusal, reference, report_source, take_sample
from ..store import Store
from .plan import DEFAULT_CLASS, job_class
from .plan.classcap import report_class

END_RECORD_WINDOW = 86400.0


def candidates(snapshot: Snapshot, end_records: Iterable[dict], class_order: Iterable[str]) -> list[dict]:
    """Reports visible now: ``{job_id, tokens, account, class, gpus: {type: n}, gpu_count}`` (pure)."""
    out: dict[int, dict] = {}
    for r in end_records:
        tokens = parse_tokens(r.get("fair_tokens") or "")
        if "tput" in tokens:
            gpus = {str(t): int(n) for t, n in (r.get("gpus") or {}).items() if int(n) > 0}
            out[int(r["job_id"])] = {"job_id": int(r["job_id"]), "tokens": tokens, "account": r.get("account") or "",
                                     "user": str(r.get("user") or ""),
                                     "class": r.get("class") or "", "gpus": gpus,
                                     "gpu_count": int(r.get("gpu_count") or sum(gpus.values()) or 0)}
    for j in snapshot.jobs:
        if not j.running:
            continue
        tokens = parse_tokens(j.comment)
        if "tput" in tokens:
            gpus = {t: n for t, n in j.gpus_allocated.items() if n > 0}
            out[j.job_id] = {"job_id": j.job_id, "tokens": tokens, "account": j.account, "user": j.user,
                             "class": job_class(j, class_order), "gpus": gpus,
                             "gpu_count": sum(gpus.values()) or j.gpus}
    return [out[k] for k in sorted(out)]


def judge(c: dict, rules: Rules, known_types: Iterable[str], nvml: dict[str, str]) -> tuple[str, float, str]:
    """(gpu type, per-GPU throughput, source) of a candidate report, or InputError saying why it is refused."""
    tok = c["tokens"]
    if len(c["gpus"]) > 1:
        raise InputError(f"job {c['job_id']} gpu_type", sorted(c["gpus"]),
                         "the job ran on several GPU types; its throughput belongs to none")
    g = next(iter(c["gpus"]), None) or shipped_profiles.gpu_type_of_device(tok.get("gpu"), nvml)
    value = check_sample(c["class"] or "?", g, tok.get("tput"), rules, known_types)
    per_gpu = value / max(1, int(c["gpu_count"] or 1))
    check_sample(c["class"] or "?", g, per_gpu, rules, known_types)
    return str(g), per_gpu, "measured" if "profile" in tok else "harvested"


def _end_records(store: Store, now: float) -> list[dict]:
    rows = store.db.execute(
        "select data from job_records where context = 'epilog_slurmctld' and ingested >= ? "
        "and data like '%fair:tput=%'", [now - END_RECORD_WINDOW]).fetchall()
    out = []
    for (data,) in rows:
        try:
            rec = json.loads(data)
        except (TypeError, ValueError):
            continue
        if isinstance(rec, dict) and "job_id" in rec:
            out.append(rec)
    return out


def _refuse(store: Store, base: dict, n: int, msg: str, round_id: int | None, data: dict) -> None:
    store.record_report({**base, "n": n, "status": "refused", "message": msg})
    store.event("profile-report-refused", msg, round_id=round_id, job_id=base["job_id"], account=base["account"],
                data=data)


def harvest(store: Store, snapshot: Snapshot, cfg: Any, round_id: int | None, now: float | None = None,
            kept: dict[str, tuple[str, ...]] | None = None) -> dict:
    """Take the new reports into the store (module docstring); returns counts for the round's details.
    ``kept``: per account the classes the round kept (plan/classcap.py)."""
    now = time.time() if now is None else now
    counts = {"accepted": 0, "rejected": 0, "refused": 0}
    try:
        found = candidates(snapshot, _end_records(store, now), cfg.classes.order)
        if not found:
            return counts
        rules = Rules.from_config(cfg.profiling)
        nvml = shipped_profiles.nvml_map(str(cfg.nvml_map_path) if cfg.nvml_map_path else None)
        known = list(snapshot.gpu_types())
        trust = TrustRules.from_config(cfg.profiling)
        values = store.profile_values()
        shipped = {(r["class"], r["gpu_type"]): float(r["throughput"]) for r in shipped_profiles.load_shipped()}
        own: dict[str, set[str]] = {}
        for r in values:
            if r.get("account") and r.get("source") != "shipped":
                own.setdefault(r["account"], set()).add(r["class"])
        cap = int(cfg.profiling.max_classes_per_account)
        for c in found:
            if c["class"] and c["class"] != DEFAULT_CLASS:
                c["class"] = report_class(c["account"], c["class"], own.get(c["account"], set()),
                                          (kept or {}).get(c["account"], ()), cap)
            n_text = c["tokens"].get("n", "")
            base = {"job_id": c["job_id"], "time": now, "round_id": round_id, "account": c["account"],
                    "class": c["class"], "nvml": c["tokens"].get("gpu")}
            if not n_text.isdigit() or int(n_text) < 1:
                n = 0
                if store.report_taken(c["job_id"], n):
                    continue
                msg = f"job {c['job_id']}: report number {n_text!r} is not a whole number >= 1"
                store.record_report({**base, "n": n, "status": "refused", "message": msg})
                store.event("profile-report-refused", msg, round_id=round_id, job_id=c["job_id"],
                            account=c["account"], data={"tokens": c["tokens"]})
                counts["refused"] += 1
                continue
            n = int(n_text)
            if store.report_taken(c["job_id"], n):
                continue
            base["class"] = c["class"]
            try:
                g, value, _ = judge(c, rules, known, nvml)
            except InputError as e:
                _refuse(store, base, n, f"job {c['job_id']}: {e}", round_id, {"tokens": c["tokens"], "gpus": c["gpus"]})
                counts["refused"] += 1
                continue
            refusal = class_refusal(values, {k[0] for k in shipped} | {DEFAULT_CLASS}, c["account"], c["class"], trust)
            if refusal:
                _refuse(store, base, n, f"job {c['job_id']}: {refusal}", round_id, {"class": c["class"], "gpu_type": g})
                counts["refused"] += 1
                continue
            source, demoted = report_source("profile" in c["tokens"], c.get("user") or "", int(c["gpu_count"] or 0),
                                            trust)
            bounds = reference(values, shipped, c["account"], c["class"], g, source, trust)
            got: list[Verdict] = []

            def take(old: dict | None) -> tuple[dict | None, bool]:
                got.append(take_sample(old, value, now, bounds, rules, trust))
                return got[0].row, got[0].status == "accepted"

            with store.transaction():
                store.record_sample(c["account"], c["class"], g, value, source, rules, now=now, take=take)
                v = got[0]
                msg = "; ".join(m for m in (v.message and f"job {c['job_id']}: {v.message}", demoted) if m)
                store.record_report({**base, "n": n, "gpu_type": g, "throughput": value, "source": source,
                                     "status": v.status, "message": msg})
                if v.status != "accepted" or v.limited:
                    store.event("profile-report-rejected" if v.status != "accepted" else "profile-value-limited",
                                msg, round_id=round_id, job_id=c["job_id"], account=c["account"],
                                data={"gpu_type": g, "class": c["class"], "value": value, "source": source})
            counts[v.status] += 1
    except Exception as e:  # noqa: BLE001 - harvesting must never stop a round
        store.event("profile-harvest-error", f"{type(e).__name__}: {e}", round_id=round_id)
        counts["error"] = f"{type(e).__name__}: {e}"
    return counts
