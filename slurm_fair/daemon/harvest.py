"""Harvest throughput reports (``fair:tput=<steps/s>@<n>`` in job comments) into profiles, once per round.

Where reports come from: the comments of the running jobs in the round's snapshot, and the ``fair_tokens``
of EpilogSlurmctld hook records ingested in the last day (a job that wrote its last report just before it
ended: ``profile run`` does). Rules:

* Hook records are read once (issue 41: every round re-read the whole day's records before the cap applied):
  a cursor in the database (``harvest_cursor``: the last ``job_records`` row id considered) says where the
  last round stopped; each round moves the rows ingested since that carry a ``fair:tput`` token into the
  queue (``harvest_queue``: row id, account, job id; no record is parsed there) and advances the cursor, in
  one transaction (``read`` in the counts: rows moved this round). Queued rows older than a day are dropped.
* A round takes at most ``MAX_REPORTS_PER_ROUND`` new reports, and the cap applies before any record is
  parsed: the pick is fair-queued per account (:func:`fair_quotas`: each account with reports waiting gets an
  equal part of the round, an account with fewer gets all of its own and the rest is shared among the others;
  within an account, oldest job first), over the queue and the running jobs' new reports; the rest are
  ``deferred`` to the next rounds (issue 41: under one account's flood of 20 000 reports another account's
  report waited about 100 rounds; now it is taken in the first round that sees it, while fewer than
  ``MAX_REPORTS_PER_ROUND`` accounts have reports waiting).
* A report is taken once: key (job id, n); every report taken is stored in ``profile_reports`` as
  accepted, rejected (an outlier, counted on the profile) or refused (bad), so a job's comment read again
  next round changes nothing; the ones taken before are found in one query per 500 jobs. A picked record
  leaves the queue after its report is stored: a round stopped half-way (a crash, a restart) picks it again
  and finds it taken, so nothing is lost and nothing is taken twice.
* Class: the job's class (``classes.order``); account: the job's. GPU type: the one Slurm allocated to the
  job (a job on several types is refused); a job that held no GPU is refused — a ``fair:gpu=`` device name in
  a comment never chooses the type (issue 30: CPU-only jobs planted speeds through it).
* Value: the report divided by the job's GPU count (profiles are per GPU: linear scaling is assumed),
  checked by :func:`slurm_fair.profiling.core.check_sample`; source ``measured`` for profiling runs, else
  ``harvested``, and how far it is trusted: :mod:`slurm_fair.profiling.trust` (bounds from the first sample,
  the change window); a class name is the reporting account's own (other accounts' values of the same name are
  kept apart and never block it).
  An account's classes beyond ``[profiling] max_classes_per_account`` count as ``default``
  (:func:`slurm_fair.daemon.plan.classcap.report_class`): the cap is on the classes the account has stored
  values for, and a class stored in this harvest counts at once (issue 41: the set was built once a harvest,
  so 200 reports under 200 new names stored 200 classes).
* Grammar (:func:`slurm_fair.profiling.client.ascii_number` / ``ascii_int``): ``fair:tput=<number>@<n>`` with
  the number in ASCII digits (``12.5``, ``1.2e+03``; no sign, nan, inf, ``_`` or other scripts' digits) and
  ``n`` a whole number 1..10^9 in ASCII digits. Anything else is refused with an event, never parsed further.
* A refused or rejected report becomes a ``profile-report-refused`` / ``profile-report-rejected`` event,
  the first ``EVENTS_PER_DAY`` of each kind per account a day; beyond them one event of that kind per account
  a day counts the rest (``data``: ``count``, the last job; issue 30: a flood of bad reports wrote one event
  each) — every report stays in ``profile_reports`` with its status and message. Nothing here raises: a report that fails in any other way is refused with an event and the next one is taken;
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
MAX_REPORTS_PER_ROUND = 200  # new reports a round takes at most (fair-queued per account); the rest wait


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


def running_candidates(snapshot: Snapshot, class_order: Iterable[str]) -> list[dict]:
    """Reports in the comments of the running jobs, by job id (pure)."""
    out = []
    for j in snapshot.jobs:
        if not j.running or "fair:tput=" not in (j.comment or ""):
            continue
        tokens = parse_tokens(j.comment)
        if "tput" in tokens:
            gpus = {t: n for t, n in j.gpus_allocated.items() if n > 0}
            out.append({"job_id": j.job_id, "tokens": tokens, "account": j.account, "user": j.user,
                        "class": job_class(j, class_order), "gpus": gpus, "gpu_count": sum(gpus.values()) or j.gpus})
    return sorted(out, key=lambda c: c["job_id"])


def candidates(snapshot: Snapshot, end_records: Iterable[dict], class_order: Iterable[str]) -> list[dict]:
    """Reports visible now: ``{job_id, tokens, account, class, gpus: {type: n}, gpu_count}`` (pure; a record
    whose fields are not what the hook writes is skipped, never raised on; a running job's comment wins over
    an end record of the same job)."""
    out: dict[int, dict] = {}
    for r in end_records:
        c = _end_candidate(r)
        if c is not None:
            out[c["job_id"]] = c
    for c in running_candidates(snapshot, class_order):
        out[c["job_id"]] = c
    return [out[k] for k in sorted(out)]


def fair_quotas(waiting: dict[str, tuple[int, int]], limit: int) -> dict[str, int]:
    """How many of each account's waiting reports a round takes (pure): ``waiting`` is account -> (reports
    waiting, its oldest job id). Max-min fair: every account gets an equal part of ``limit``, one with fewer
    waiting gets them all and the rest is shared among the others; when parts no longer divide, the accounts
    with the oldest job take one more each. Accounts with nothing waiting are left out."""
    left = {a: n for a, (n, _) in waiting.items() if n > 0}
    out = {a: 0 for a in left}
    room = max(0, int(limit))
    while room and left:
        share = room // len(left)
        if share == 0:
            for a in sorted(left, key=lambda a: (waiting[a][1], a))[:room]:
                out[a] += 1
            break
        for a in sorted(left):
            give = min(share, left[a])
            out[a] += give
            room -= give
            left[a] -= give
            if not left[a]:
                del left[a]
    return {a: n for a, n in out.items() if n}


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


def _advance(store: Store, now: float) -> int:
    """Move the end records with a report ingested since the cursor into the queue and advance the cursor,
    in one transaction (module docstring); returns the rows moved. Row ids lower than the cursor can come
    back only when retention emptied the top of ``job_records``: then the cursor starts again from 0 (the
    records it reads again are found taken)."""
    db = store.db
    with store.transaction():
        row = db.execute("select last_id from harvest_cursor where name = 'end_records'").fetchone()
        cursor = int(row[0]) if row else 0
        top = int(db.execute("select coalesce(max(rowid), 0) from job_records").fetchone()[0])
        if top < cursor:
            cursor = 0
        moved = db.execute(
            "insert or ignore into harvest_queue (record_id, account, job_id, ingested) "
            "select rowid, coalesce(account, ''), job_id, ingested from job_records where rowid > ? and rowid <= ? "
            "and context = 'epilog_slurmctld' and ingested >= ? and data like '%fair:tput=%'",
            [cursor, top, now - END_RECORD_WINDOW]).rowcount
        db.execute("insert or replace into harvest_cursor (name, last_id) values ('end_records', ?)", [top])
        db.execute("delete from harvest_queue where ingested < ?", [now - END_RECORD_WINDOW])
    return max(0, int(moved))


def _pick(store: Store, running: list[dict], limit: int) -> tuple[list[dict], list[int], int]:
    """At most ``limit`` reports, fair-queued per account (:func:`fair_quotas`) over the queue and the running
    jobs' new reports: (candidates, the queue's record ids picked, reports left waiting). Only the picked
    records are read and parsed."""
    db = store.db
    queued: dict[str, tuple[int, int]] = {str(a): (int(n), int(first)) for a, n, first in db.execute(
        "select account, count(*), min(job_id) from harvest_queue group by account")}
    by_acct: dict[str, list[dict]] = {}
    for c in running:
        by_acct.setdefault(c["account"], []).append(c)
    waiting = dict(queued)
    for a, cs in by_acct.items():
        n, first = queued.get(a, (0, cs[0]["job_id"]))
        waiting[a] = (n + len(cs), min(first, cs[0]["job_id"]))
    quotas = fair_quotas(waiting, limit)
    picked: list[tuple[int, int, dict | None]] = []  # (job id, record id or -1, running candidate or None)
    for a, q in quotas.items():
        mine = [(int(j), int(r), None) for r, j in db.execute(
            "select record_id, job_id from harvest_queue where account = ? order by job_id, record_id limit ?",
            [a, q])] if a in queued else []
        mine += [(int(c["job_id"]), -1, c) for c in by_acct.get(a, ())]
        picked += sorted(mine, key=lambda t: (t[0], t[1]))[:q]
    ids = [r for _, r, c in picked if c is None]
    data: dict[int, str] = {}
    for i in range(0, len(ids), 500):
        part = ids[i:i + 500]
        data.update(db.execute(f"select rowid, data from job_records where rowid in ({','.join('?' * len(part))})",
                               part).fetchall())
    records = []
    for rid in ids:
        try:
            rec = json.loads(data.get(rid) or "")
        except (TypeError, ValueError):
            continue
        if isinstance(rec, dict) and "job_id" in rec:
            records.append(rec)
    chosen = {c["job_id"]: c for _, _, c in picked if c is not None}
    end = [c for c in map(_end_candidate, records) if c is not None and c["job_id"] not in chosen]
    out = sorted([*end, *chosen.values()], key=lambda c: c["job_id"])
    return out, ids, sum(n for n, _ in waiting.values()) - len(picked)


@dataclass(frozen=True)
class _Context:
    """What every report of one harvest is judged against."""

    rules: Rules
    trust: TrustRules
    known: list[str]
    values: list[ProfileValue]  # the stored profile values
    shipped: dict[tuple[str, str], float]  # (class, type) -> shipped throughput
    own: dict[str, set[str]]  # account -> the classes it has values for, with those stored in this harvest
    cap: int  # [profiling] max_classes_per_account
    round_id: int | None
    now: float
    budget: EventBudget
    bounds: dict  # (account, class, type, source) -> trust.reference's bounds: the same for the whole harvest
    site: Known | None = None  # the site's known classes (profiling/trust.py), made once a harvest


def _refuse(store: Store, base: dict, n: int, msg: str, x: "_Context", data: dict) -> str:
    store.record_report({**base, "n": n, "status": "refused", "message": msg})
    x.budget.event("profile-report-refused", msg, x.round_id, base["job_id"], base["account"], data)
    return "refused"


def _take(store: Store, c: dict, x: _Context) -> str | None:
    """Take one candidate's report: its status (accepted, rejected, refused) or None (already taken)."""
    if c["class"] and c["class"] != DEFAULT_CLASS:
        c["class"] = report_class(c["account"], c["class"], x.own.get(c["account"], set()), x.cap)
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
    key = (c["account"], c["class"], g, source)
    if key not in x.bounds:  # reference() reads only what the harvest read at its start: once per key
        x.bounds[key] = reference(x.values, x.shipped, c["account"], c["class"], g, source, x.trust, x.site)
    bounds = x.bounds[key]
    got: list[Verdict] = []

    def take(old: ProfileValue | None) -> tuple[dict | None, bool]:
        got.append(take_sample(old, value, x.now, bounds, x.rules, x.trust))
        return got[0].row, got[0].status == "accepted"

    with store.transaction():
        stored, _ = store.record_sample(c["account"], c["class"], g, source, take, now=x.now)
        v = got[0]
        if stored is not None and c["class"] != DEFAULT_CLASS:  # counts for the cap at once (issue 41)
            x.own.setdefault(c["account"], set()).add(c["class"])
        msg = "; ".join(m for m in (v.message and f"job {c['job_id']}: {v.message}", demoted) if m)
        store.record_report({**base, "n": n, "gpu_type": g, "throughput": value, "source": source,
                             "status": v.status, "message": msg})
        if v.status != "accepted" or v.limited:
            x.budget.event("profile-report-rejected" if v.status != "accepted" else "profile-value-limited",
                           msg, x.round_id, c["job_id"], c["account"],
                           {"gpu_type": g, "class": c["class"], "value": value, "source": source})
    return v.status


def harvest(store: Store, snapshot: Snapshot, cfg: Config, round_id: int | None, now: float | None = None) -> dict:
    """Take the new reports into the store (module docstring); returns counts for the round's details
    (``read``: hook records moved into the queue this round; ``deferred``: reports left waiting)."""
    now = time.time() if now is None else now
    counts: dict = {"accepted": 0, "rejected": 0, "refused": 0}
    try:
        read = _advance(store, now)
        if read:
            counts["read"] = read
        running = _new_only(store, running_candidates(snapshot, cfg.classes.order))
        found, picked, left = _pick(store, running, MAX_REPORTS_PER_ROUND)
        if left:
            counts["deferred"] = left
        found = _new_only(store, found)
        if found:
            _take_all(store, snapshot, cfg, round_id, now, found, counts)
        if picked:  # only after their reports are stored: a round stopped before this picks them again
            with store.transaction():
                for i in range(0, len(picked), 500):
                    part = picked[i:i + 500]
                    store.db.execute(f"delete from harvest_queue where record_id in ({','.join('?' * len(part))})", part)
    except Exception as e:  # noqa: BLE001 - harvesting must never stop a round
        store.event("profile-harvest-error", f"{type(e).__name__}: {e}", round_id=round_id)
        counts["error"] = f"{type(e).__name__}: {e}"
    return counts


def _take_all(store: Store, snapshot: Snapshot, cfg: Config, round_id: int | None, now: float, found: list[dict],
              counts: dict) -> None:
    rules = Rules.from_config(cfg.profiling)
    values = store.profile_values()
    own: dict[str, set[str]] = {}
    for r in values:
        if r.account and r.source != "shipped":
            own.setdefault(r.account, set()).add(r.cls)
    trust = TrustRules.from_config(cfg.profiling)
    shipped = {(r["class"], r["gpu_type"]): float(r["throughput"]) for r in shipped_profiles.load_shipped()}
    x = _Context(rules=rules, trust=trust, known=list(snapshot.gpu_types()), values=values, shipped=shipped,
                 own=own, cap=int(cfg.profiling.max_classes_per_account), round_id=round_id, now=now,
                 budget=EventBudget(store, now, "every report is in profile_reports"), bounds={},
                 site=site_known(values, shipped, trust))
    with store.transaction():  # one commit a round, not two a report (each report is a savepoint of it)
        _take_each(store, found, x, counts)


def _take_each(store: Store, found: list[dict], x: _Context, counts: dict) -> None:
    round_id = x.round_id
    for c in found:
        try:
            status = _take(store, c, x)
        except Exception as e:  # noqa: BLE001 - one bad report never stops the others
            x.budget.event("profile-report-refused", f"job {c.get('job_id')}: {type(e).__name__}: {e}",
                           round_id, c.get("job_id"), c.get("account"), {})
            status = "refused"
        if status:
            counts[status] += 1
