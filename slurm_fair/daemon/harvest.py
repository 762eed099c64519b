"""Harvest throughput reports (``fair:tput=<steps/s>@<n>`` in job comments) into profiles, once per round.

Where reports come from: the comments of the running jobs in the round's snapshot, and the ``fair_tokens``
of EpilogSlurmctld hook records ingested in the last day (a job that wrote its last report just before it
ended: ``profile run`` does). Rules:

* A report is taken once: key (job id, n); every report taken is stored in ``profile_reports`` as
  accepted, rejected (an outlier, counted on the profile) or refused (bad), so a job's comment read again
  next round changes nothing. A round takes at most ``MAX_REPORTS_PER_ROUND`` new reports, oldest job first
  (the rest are ``deferred`` to the next rounds), and finds the ones taken before in one query per 500 jobs.
* Class: the job's class (``classes.order``); account: the job's. GPU type: the one Slurm allocated to the
  job (a job on several types is refused); a job that held no GPU is refused — a ``fair:gpu=`` device name in
  a comment never chooses the type (issue 30: CPU-only jobs planted speeds through it).
* Value: the report divided by the job's GPU count (profiles are per GPU: linear scaling is assumed),
  checked by :func:`slurm_fair.profiling.core.check_sample`; source ``measured`` for profiling runs, else
  ``harvested``, and how far it is trusted: :mod:`slurm_fair.profiling.trust` (bounds from the first sample,
  the change window); a class name is the reporting account's own (other accounts' values of the same name are
  kept apart and never block it).
  An account's classes beyond ``[profiling] max_classes_per_account`` count as ``default``
  (:mod:`slurm_fair.daemon.plan.classcap`).
* Grammar (:func:`slurm_fair.profiling.client.ascii_number` / ``ascii_int``): ``fair:tput=<number>@<n>`` with
  the number in ASCII digits (``12.5``, ``1.2e+03``; no sign, nan, inf, ``_`` or other scripts' digits) and
  ``n`` a whole number 1..10^9 in ASCII digits. Anything else is refused with an event, never parsed further.
* A refused or rejected report becomes a ``profile-report-refused`` / ``profile-report-rejected`` event,
  the first ``EVENTS_PER_DAY`` of each kind per account a day; beyond them one event of that kind per account
  a day counts the rest (``data``: ``count``, the last job; :mod:`.event_budget`; issue 30: a flood of bad reports
  wrote one event each) — every report stays in ``profile_reports`` with its status and message. Nothing here raises: a report that fails in any other way is refused with an event and the next one is taken;
  a failure outside the reports is a ``profile-harvest-error`` event and the round goes on.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Iterable

from ..config import Config
from ..profiling import shipped as shipped_profiles
from ..cluster.base import Snapshot
from ..errors import InputError
from ..profiling.client import MAX_REPORT_N, ascii_int, ascii_number, parse_tokens
from ..profiling.core import Rules, check_sample
from ..profiling.trust import Known, TrustRules, Verdict, reference, report_source, site_known, take_sample
from ..store import ProfileValue, Store
from .plan import DEFAULT_CLASS, job_class
from .plan.classcap import report_class
from .event_budget import DAY, EVENTS_PER_DAY, EventBudget  # noqa: F401 - DAY, EVENTS_PER_DAY: said above

END_RECORD_WINDOW = 86400.0
MAX_REPORTS_PER_ROUND = 200  # new reports a round takes at most (oldest job first); the rest wait a round


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
            "user": str(r.get("user") or ""), "class": str(r.get("class") or ""), "gpus": gpus, "gpu_count": count}


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
            out[j.job_id] = {"job_id": j.job_id, "tokens": tokens, "account": j.account, "user": j.user,
                             "class": job_class(j, class_order), "gpus": gpus,
                             "gpu_count": sum(gpus.values()) or j.gpus}
    return [out[k] for k in sorted(out)]


def _new_only(store: Store, found: list[dict]) -> list[dict]:
    """The candidates whose report (job id, n) was not taken yet, found with one query per 500 jobs (issue 30: a
    day of 20 000 end records with reports cost every round 1.5 s of one lookup each)."""
    ids = sorted({int(c["job_id"]) for c in found})
    taken: set[tuple[int, int]] = set()
    for i in range(0, len(ids), 500):
        part = ids[i:i + 500]
        taken.update((int(j), int(n)) for j, n in store.db.execute(
            f"select job_id, n from profile_reports where job_id in ({','.join('?' * len(part))})", part))
    return [c for c in found if (int(c["job_id"]), ascii_int(c["tokens"].get("n", "")) or 0) not in taken]


def judge(c: dict, rules: Rules, known_types: Iterable[str]) -> tuple[str, float, str]:
    """(gpu type, per-GPU throughput, source) of a candidate report, or InputError saying why it is refused."""
    tok = c["tokens"]
    if len(c["gpus"]) > 1:
        raise InputError(f"job {c['job_id']} gpu_type", sorted(c["gpus"]),
                         "the job ran on several GPU types; its throughput belongs to none")
    if not c["gpus"] or int(c["gpu_count"] or 0) < 1:
        # issue 30: a CPU-only job planted speeds through the GPU name its comment gave (fair:gpu=...)
        raise InputError(f"job {c['job_id']} gpu_type", tok.get("gpu") or None,
                         "the job held no GPU (its hook records say so): a report counts only for the GPU type a "
                         "job ran on, never one its comment names")
    g = next(iter(c["gpus"]))
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


@dataclass(frozen=True)
class _Context:
    """What every report of one harvest is judged against."""

    rules: Rules
    trust: TrustRules
    known: list[str]
    values: list[ProfileValue]  # the stored profile values
    shipped: dict[tuple[str, str], float]  # (class, type) -> shipped throughput
    own: dict[str, set[str]]  # account -> the classes it has values for
    kept: dict[str, tuple[str, ...]]  # account -> the classes the round kept (plan/classcap.py)
    cap: int  # [profiling] max_classes_per_account
    round_id: int | None
    now: float
    budget: EventBudget
    site: Known | None = None  # the site's known classes (profiling/trust.py), made once a harvest


def _refuse(store: Store, base: dict, n: int, msg: str, x: "_Context", data: dict) -> str:
    store.record_report({**base, "n": n, "status": "refused", "message": msg})
    x.budget.event("profile-report-refused", msg, x.round_id, base["job_id"], base["account"], data)
    return "refused"


def _take(store: Store, c: dict, x: _Context) -> str | None:
    """Take one candidate's report: its status (accepted, rejected, refused) or None (already taken)."""
    if c["class"] and c["class"] != DEFAULT_CLASS:
        c["class"] = report_class(c["account"], c["class"], x.own.get(c["account"], set()),
                                  x.kept.get(c["account"], ()), x.cap)
    n_text = c["tokens"].get("n", "")
    n_ok = ascii_int(n_text)
    base = {"job_id": c["job_id"], "time": x.now, "round_id": x.round_id, "account": c["account"],
            "class": c["class"], "nvml": c["tokens"].get("gpu")}
    if n_ok is None:
        if store.report_taken(c["job_id"], 0):
            return None
        return _refuse(store, base, 0, f"job {c['job_id']}: report number {n_text!r} is not a whole number "
                       f"1..{MAX_REPORT_N} in ASCII digits", x, {"tokens": c["tokens"]})
    n = n_ok
    if store.report_taken(c["job_id"], n):
        return None
    try:
        g, value, _ = judge(c, x.rules, x.known)
    except InputError as e:
        return _refuse(store, base, n, f"job {c['job_id']}: {e}", x, {"tokens": c["tokens"], "gpus": c["gpus"]})
    source, demoted = report_source("profile" in c["tokens"], c.get("user") or "", int(c["gpu_count"] or 0), x.trust)
    bounds = reference(x.values, x.shipped, c["account"], c["class"], g, source, x.trust, x.site)
    got: list[Verdict] = []

    def take(old: ProfileValue | None) -> tuple[dict | None, bool]:
        got.append(take_sample(old, value, x.now, bounds, x.rules, x.trust))
        return got[0].row, got[0].status == "accepted"

    with store.transaction():
        store.record_sample(c["account"], c["class"], g, source, take, now=x.now)
        v = got[0]
        msg = "; ".join(m for m in (v.message and f"job {c['job_id']}: {v.message}", demoted) if m)
        store.record_report({**base, "n": n, "gpu_type": g, "throughput": value, "source": source,
                             "status": v.status, "message": msg})
        if v.status != "accepted" or v.limited:
            x.budget.event("profile-report-rejected" if v.status != "accepted" else "profile-value-limited",
                           msg, x.round_id, c["job_id"], c["account"],
                           {"gpu_type": g, "class": c["class"], "value": value, "source": source})
    return v.status


def harvest(store: Store, snapshot: Snapshot, cfg: Config, round_id: int | None, now: float | None = None,
            kept: dict[str, tuple[str, ...]] | None = None) -> dict:
    """Take the new reports into the store (module docstring); returns counts for the round's details.
    ``kept``: per account the classes the round kept (plan/classcap.py)."""
    now = time.time() if now is None else now
    counts = {"accepted": 0, "rejected": 0, "refused": 0}
    try:
        found = _new_only(store, candidates(snapshot, _end_records(store, now), cfg.classes.order))
        if len(found) > MAX_REPORTS_PER_ROUND:  # a flood of reports: the rest wait for the next rounds
            counts["deferred"] = len(found) - MAX_REPORTS_PER_ROUND
            found = found[:MAX_REPORTS_PER_ROUND]
        if not found:
            return counts
        rules = Rules.from_config(cfg.profiling)
        values = store.profile_values()
        own: dict[str, set[str]] = {}
        for r in values:
            if r.account and r.source != "shipped":
                own.setdefault(r.account, set()).add(r.cls)
        trust = TrustRules.from_config(cfg.profiling)
        shipped = {(r["class"], r["gpu_type"]): float(r["throughput"]) for r in shipped_profiles.load_shipped()}
        x = _Context(rules=rules, trust=trust, known=list(snapshot.gpu_types()), values=values, shipped=shipped,
                     own=own, kept=dict(kept or {}), cap=int(cfg.profiling.max_classes_per_account),
                     round_id=round_id, now=now, budget=EventBudget(store, now, "every report is in profile_reports"),
                     site=site_known(values, shipped, trust))
        for c in found:
            try:
                status = _take(store, c, x)
            except Exception as e:  # noqa: BLE001 - one bad report never stops the others
                x.budget.event("profile-report-refused", f"job {c.get('job_id')}: {type(e).__name__}: {e}",
                               round_id, c.get("job_id"), c.get("account"), {})
                status = "refused"
            if status:
                counts[status] += 1
    except Exception as e:  # noqa: BLE001 - harvesting must never stop a round
        store.event("profile-harvest-error", f"{type(e).__name__}: {e}", round_id=round_id)
        counts["error"] = f"{type(e).__name__}: {e}"
    return counts
