"""Events within a daily budget: a flood of bad input writes a bounded number of events a day.

Used by the report harvest (``profile-report-refused`` and ``-rejected``, per account) and the spool ingest
(``hook-record-bad`` and the other per-file events, account None). Rule: events of one kind per account are
written one by one while fewer than ``per_day`` of them were written in the last day (counted in the store, so the
budget holds across rounds and restarts); beyond them one ``<kind>-more`` event per kind and account a day counts
the rest: its message says how many and gives the last one, ``data`` holds ``count`` and ``last_job_id``.
"""

from __future__ import annotations

import json

from ..store import Store

EVENTS_PER_DAY = 20  # events of one kind per account a day written one by one; the rest are counted
DAY = 86400.0


class EventBudget:
    """See the module docstring. ``kept`` names where every item stays (said in the ``-more`` message). With
    ``defer``, the counted events are summed in memory and written by :meth:`flush` (one update per kind and
    account, not one per event: 2 000 bad files cost one write); without, each one updates the ``-more`` event."""

    def __init__(self, store: Store, now: float, kept: str, per_day: int = EVENTS_PER_DAY, defer: bool = False):
        self.store, self.now, self.kept, self.per_day, self.defer = store, now, kept, per_day, defer
        self.seen: dict[tuple[str, str | None], int] = {}
        self.pending: dict[tuple[str, str | None], tuple[int, str, int | None, int | None]] = {}

    def event(self, kind: str, msg: str, round_id: int | None, job_id: int | None, account: str | None,
              data: object) -> None:
        key = (kind, account)
        if key not in self.seen:
            self.seen[key] = int(self.store.db.execute(
                "select count(*) from events where kind = ? and account is ? and time >= ?",
                [kind, account, self.now - DAY]).fetchone()[0])
        if self.seen[key] < self.per_day:
            self.seen[key] += 1
            self.store.event(kind, msg, round_id=round_id, job_id=job_id, account=account, data=data, at=self.now)
            return
        n = self.pending.get(key, (0, "", None, None))[0] + 1
        self.pending[key] = (n, msg, round_id, job_id)
        if not self.defer:
            self.flush()

    def flush(self) -> None:
        """Write the counted events (one ``-more`` event per kind and account a day, its count raised)."""
        pending, self.pending = self.pending, {}
        for (kind, account), (n, msg, round_id, job_id) in pending.items():
            more = f"{kind}-more"
            row = self.store.db.execute("select id, data from events where kind = ? and account is ? and time >= ? "
                                        "order by id desc limit 1", [more, account, self.now - DAY]).fetchone()
            count = (int((json.loads(row[1] or "{}") or {}).get("count") or 0) if row else 0) + n
            text = (f"{count} more {kind} event(s) of account {account!r} since this one was written (the first "
                    f"{self.per_day} of a day are written one by one; {self.kept}); the last: {msg}")
            new = {"count": count, "last_job_id": job_id}
            if row:
                with self.store.transaction():
                    self.store.db["events"].update(row[0], {"message": text, "data": json.dumps(new),
                                                            "round_id": round_id})
            else:
                self.store.event(more, text, round_id=round_id, job_id=job_id, account=account, data=new,
                                 at=self.now)
