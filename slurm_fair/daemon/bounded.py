"""The daemon's side of bounded state and trusted profiles (issue 21): fold an account's extra job classes,
the profile values a round uses (``[profiling] on_conflict``), and the daily prune (``[store] retention_days``,
``profile_days``).
The rules are pure (plan/classcap.py, profiling/trust.py, store/retention.py); this module reads the store,
writes events and never raises into a round (a failure is an event).
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterable

from ..config import Config
from ..profiling import shipped as shipped_profiles
from ..cluster.base import Snapshot
from ..profiling.trust import effective_values
from ..store import ProfileValue, Store
from .plan.classcap import Folded, fold

PRUNE_EVERY = 86400.0  # seconds between two prunes
PRUNE_STEP_DAYS = 7.0  # days of the oldest history one prune deletes at most (catching up: one step a round)
PRUNE_EVENT = "store-pruned"
PRUNE_ERROR = "store-prune-error"
FOLD_EVENT = "class-folded"


def fold_round(store: Store, snapshot: Snapshot, cfg: Config, round_id: int | None, now: float) -> Folded:
    """The snapshot with each account's classes beyond ``[profiling] max_classes_per_account`` folded into
    ``default``; one ``class-folded`` event per account and class a day."""
    try:
        values = store.profile_values()
        known = {(r.account, r.cls) for r in values if r.account}
        site = {r.cls for r in values if not r.account} | {r["class"] for r in shipped_profiles.load_shipped()}
        out = fold(snapshot, cfg.classes.order, int(cfg.profiling.max_classes_per_account), known, site)
        for acct, classes in out.folded.items():
            _note_folded(store, acct, classes, int(cfg.profiling.max_classes_per_account), round_id, now)
        return out
    except Exception as e:  # noqa: BLE001 - never stops a round: the classes stay as they are
        store.event("class-fold-error", f"{type(e).__name__}: {e}", round_id=round_id)
        return Folded(snapshot, {}, {})


FOLD_NAMES = 20  # class names one class-folded event lists (the count covers the rest)


def _note_folded(store: Store, acct: str, classes: Iterable[str], cap: int, round_id: int | None,
                 now: float) -> None:
    """One ``class-folded`` event per account a day (issue 30: renaming 10 000 pending jobs before each round wrote
    9 982 events a round): the day's event is updated with the classes seen since (``data``: ``count`` and the
    first ``FOLD_NAMES`` names), a new one written once a day has passed."""
    row = store.db.execute("select id, data from events where kind = ? and account = ? and time >= ? "
                           "order by id desc limit 1", [FOLD_EVENT, acct, now - PRUNE_EVERY]).fetchone()
    data = json.loads(row[1] or "{}") if row else {}
    names = list(data.get("classes") or [])
    count = int(data.get("count") or len(names))
    seen = set(names)
    for c in classes:  # (a set: a rename flood folds 10 000 names a round)
        if c not in seen:
            count += 1
            if len(names) < FOLD_NAMES:
                names.append(c)
                seen.add(c)
    if row and count == int(data.get("count") or len(names)) and names == list(data.get("classes") or []):
        return  # nothing new today
    shown = ", ".join(repr(c) for c in names) + (f" and {count - len(names)} more" if count > len(names) else "")
    msg = (f"{count} class(es) of account {acct!r} count as 'default' (the account has more than {cap} classes: "
           f"[profiling] max_classes_per_account): {shown}")
    new = {"classes": names, "count": count}
    if row:
        with store.transaction():
            store.db["events"].update(row[0], {"message": msg, "data": json.dumps(new)})
    else:
        store.event(FOLD_EVENT, msg, round_id=round_id, account=acct, data=new, at=now)


def round_profiles(store: Store, cfg: Config) -> list[ProfileValue]:
    """The profile values the policies use this round (profiling/trust.py ``effective_values``)."""
    p = cfg.profiling
    rows, _acted = effective_values(store.profile_values(), float(p.conflict_margin), p.on_conflict,
                                    bool(p.prefer_measured), bool(p.measured_speeds))
    return rows


def maybe_prune(store: Store, cfg: Config, now: float, live_jobs: Iterable[int] | None,
                round_id: int | None = None) -> dict[str, Any] | None:
    """Prune (``Store.prune``) when the last prune is a day old or more, or left history behind (a database
    catching up deletes at most ``PRUNE_STEP_DAYS`` of its oldest days a round); the counts, or None when not
    due. Each prune is a ``store-pruned`` event (rows deleted per table, seconds it took, ``behind``)."""
    days = float(cfg.store.retention_days)
    if days <= 0:
        return None
    try:
        last = store.db.execute("select time, kind, data from events where kind in (?, ?) order by id desc limit 1",
                                [PRUNE_EVENT, PRUNE_ERROR]).fetchone()
        behind = bool(last and last[1] == PRUNE_EVENT and (json.loads(last[2] or "{}") or {}).get("behind"))
        if last is not None and now - float(last[0]) < PRUNE_EVERY and not behind:
            return None
        t0 = time.monotonic()
        counts: dict[str, Any] = dict(store.prune(days, now=now, live_jobs=live_jobs, step_days=PRUNE_STEP_DAYS,
                                                   profile_days=float(cfg.store.profile_days)))
        counts["seconds"] = round(time.monotonic() - t0, 3)
        store.event(PRUNE_EVENT, f"pruned what is older than {days:g} days"
                    + (f" (the oldest {PRUNE_STEP_DAYS:g} days of it; the rest next round)" if counts["behind"] else "")
                    + ": " + ", ".join(f"{k} {v}" for k, v in counts.items() if k not in ("seconds", "behind") and v)
                    + f" ({counts['seconds']:g} s)", round_id=round_id, data=counts, at=now)
        return counts
    except Exception as e:  # noqa: BLE001 - pruning never stops a round; tried again next round
        store.event(PRUNE_ERROR, f"{type(e).__name__}: {e}", round_id=round_id, at=now)  # next try in a day
        return {"error": f"{type(e).__name__}: {e}"}
