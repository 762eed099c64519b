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
  checked by :func:`slurm_fair.profiling.core.check_sample`; source ``measured`` for ``profile submit``
  jobs (``fair:profile`` in the comment), else ``harvested``.
* Grammar (:func:`slurm_fair.profiling.client.ascii_number` / ``ascii_int``): ``fair:tput=<number>@<n>`` with
  the number in ASCII digits (``12.5``, ``1.2e+03``; no sign, nan, inf, ``_`` or other scripts' digits) and
  ``n`` a whole number 1..10^9 in ASCII digits. Anything else is refused with an event, never parsed further.
* A refused or rejected report becomes a ``profile-report-refused`` / ``profile-report-rejected`` event;
  nothing here raises: a report that fails in any other way is refused with an event and the next one is taken;
  a failure outside the reports is a ``profile-harvest-error`` event and the round goes on.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterable

from .. import profiles as shipped_profiles
from ..cluster.base import Snapshot
from ..errors import InputError
from ..profiling.client import MAX_REPORT_N, ascii_int, ascii_number, parse_tokens
from ..profiling.core import Rules, check_sample
from ..store import Store
from .plan import job_class

END_RECORD_WINDOW = 86400.0


def _end_candidate(r: dict) -> dict | None:
    """The report of one end record, or None (no ``fair:tput`` token, or a record without a whole job id)."""
    tokens = parse_tokens(str(r.get("fair_tokens") or ""))
    job_id = r.get("job_id")
    if "tput" not in tokens or isinstance(job_id, bool) or not isinstance(job_id, int):
        return None
    gpus = {str(t): n for t, n in (r.get("gpus") if isinstance(r.get("gpus"), dict) else {}).items()
            if isinstance(n, int) and not isinstance(n, bool) and n > 0}
    count = r.get("gpu_count")
    count = count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else sum(gpus.values())
    return {"job_id": job_id, "tokens": tokens, "account": str(r.get("account") or ""),
            "class": str(r.get("class") or ""), "gpus": gpus, "gpu_count": count}


def candidates(snapshot: Snapshot, end_records: Iterable[dict], class_order: Iterable[str]) -> list[dict]:
    """Reports visible now: ``{job_id, tokens, account, class, gpus: {type: n}, gpu_count}`` (pure; a record
    whose fields are not what the hook writes is skipped, never raised on)."""
    out: dict[int, dict] = {}
    for r in end_records:
        c = _end_candidate(r)
        if c is not None:
            out[c["job_id"]] = c
    for j in snapshot.jobs:
        if not j.running:
            continue
        tokens = parse_tokens(j.comment)
        if "tput" in tokens:
            gpus = {t: n for t, n in j.gpus_allocated.items() if n > 0}
            out[j.job_id] = {"job_id": j.job_id, "tokens": tokens, "account": j.account,
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
    text = tok.get("tput") or ""
    if text.strip() and ascii_number(text) is None:
        raise InputError(f"throughput of class {c['class'] or '?'!r} on GPU type {g!r}", text,
                         "not a plain number: ASCII digits, one '.', an optional exponent (e.g. 12.5, 1.2e+03)")
    value = check_sample(c["class"] or "?", g, ascii_number(text) if text.strip() else text, rules, known_types)
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


def _take(store: Store, c: dict, rules: Rules, known: list[str], nvml: dict[str, str],
          round_id: int | None, now: float) -> str | None:
    """Take one candidate's report: its status (accepted, rejected, refused) or None (already taken)."""
    n_text = c["tokens"].get("n", "")
    n_ok = ascii_int(n_text)
    base = {"job_id": c["job_id"], "time": now, "round_id": round_id, "account": c["account"],
            "class": c["class"], "nvml": c["tokens"].get("gpu")}
    if n_ok is None:
        n = 0
        if store.report_taken(c["job_id"], n):
            return None
        msg = (f"job {c['job_id']}: report number {n_text!r} is not a whole number 1..{MAX_REPORT_N} "
               "in ASCII digits")
        store.record_report({**base, "n": n, "status": "refused", "message": msg})
        store.event("profile-report-refused", msg, round_id=round_id, job_id=c["job_id"],
                    account=c["account"], data={"tokens": c["tokens"]})
        return "refused"
    n = n_ok
    if store.report_taken(c["job_id"], n):
        return None
    try:
        g, value, source = judge(c, rules, known, nvml)
    except InputError as e:
        store.record_report({**base, "n": n, "status": "refused", "message": str(e)})
        store.event("profile-report-refused", f"job {c['job_id']}: {e}", round_id=round_id,
                    job_id=c["job_id"], account=c["account"], data={"tokens": c["tokens"], "gpus": c["gpus"]})
        return "refused"
    with store.transaction():
        row, ok = store.record_sample(c["account"], c["class"], g, value, source, rules, now=now)
        status = "accepted" if ok else "rejected"
        msg = "" if ok else (f"job {c['job_id']}: {value:.6g} steps/s is more than "
                             f"{rules.outlier_factor:g}x away from {row['throughput']:.6g}")
        store.record_report({**base, "n": n, "gpu_type": g, "throughput": value, "source": source,
                             "status": status, "message": msg})
        if not ok:
            store.event("profile-report-rejected", msg, round_id=round_id, job_id=c["job_id"],
                        account=c["account"], data={"gpu_type": g, "class": c["class"], "value": value})
    return status


def harvest(store: Store, snapshot: Snapshot, cfg: Any, round_id: int | None, now: float | None = None) -> dict:
    """Take the new reports into the store (module docstring); returns counts for the round's details."""
    now = time.time() if now is None else now
    counts = {"accepted": 0, "rejected": 0, "refused": 0}
    try:
        found = candidates(snapshot, _end_records(store, now), cfg.classes.order)
        if not found:
            return counts
        rules = Rules.from_config(cfg.profiling)
        nvml = shipped_profiles.nvml_map(str(cfg.nvml_map_path) if cfg.nvml_map_path else None)
        known = list(snapshot.gpu_types())
        for c in found:
            try:
                status = _take(store, c, rules, known, nvml, round_id, now)
            except Exception as e:  # noqa: BLE001 - one bad report never stops the others
                store.event("profile-report-refused", f"job {c.get('job_id')}: {type(e).__name__}: {e}",
                            round_id=round_id, job_id=c.get("job_id"), account=c.get("account"))
                status = "refused"
            if status:
                counts[status] += 1
    except Exception as e:  # noqa: BLE001 - harvesting must never stop a round
        store.event("profile-harvest-error", f"{type(e).__name__}: {e}", round_id=round_id)
        counts["error"] = f"{type(e).__name__}: {e}"
    return counts
