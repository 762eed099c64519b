"""The ``preemptions`` table: one row per preempted job with every step, and its reads (typed).

:class:`PreemptionStore` wraps a :class:`~slurm_fair.store.Store` (its connection and transactions): the store
package (layer 1) knows nothing of preemption but the table's migration (``store/schema.py``) and its pruning
(``store/retention.py``). What a step does to a record (its state, requeue_at, requeued_at, finished_at) is
decided in :mod:`.record`; this module only stores it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ...errors import InputError
from ...store import Store
from ...store.base import StoreBase
from ...store.codec import _dumps, _int, _loads
from . import record as P
from .record import PreemptionRecord


@dataclass(frozen=True)
class StateCount:
    """How many preemptions are in one state (:meth:`PreemptionStore.counts`)."""

    state: str
    count: int


@dataclass(frozen=True)
class PreemptionTotal:
    """Preemptions of one account on one GPU type (:meth:`PreemptionStore.totals`): ``started`` (every
    preemption: checkpoint signals sent or failed), ``requeued`` (of those, jobs requeued) and ``open``
    (signalled, in their grace now)."""

    account: str
    gpu_type: str
    started: int
    requeued: int
    open: int


class PreemptionStore:
    """The ``preemptions`` table of ``store``: rows of :class:`~.record.PreemptionRecord`. Every write runs in one
    of the store's transactions (nested in the caller's, as the store's own writes are)."""

    def __init__(self, store: Store):
        self.store = store

    @staticmethod
    def _row(r: dict) -> dict:
        r = dict(r)
        r["steps"] = _loads(r["steps"]) or []
        return r

    def _insert(self, rec: PreemptionRecord) -> int:
        row = rec.to_row()
        row["steps"] = _dumps(row["steps"])
        with self.store.transaction():
            return self.store.db["preemptions"].insert(row).last_pk

    def add(self, *, job_id: int, account: str, gpu_type: str, gpus: int, signal: str, reason: str,
            grace: float, round_id: int | None = None, user: str = "", ok: bool = True, message: str = "",
            now: float | None = None, target_type: str | None = None, held_back: bool = False,
            due: float | None = None, for_job: int | None = None) -> int:
        """Record a checkpoint signal sent to a job (``ok``: :func:`.record.signal_sent`) or that
        failed (:func:`.record.signal_failed`, ``message`` says why), or a job held back
        (``held_back``: :func:`.record.held_back`, ``due`` its cancel time); ``for_job``: the waiting
        job a reclaim frees GPUs for; returns its id."""
        now = time.time() if now is None else now
        common = {"job_id": _int(job_id, "job_id"), "account": account, "gpu_type": gpu_type,
                  "gpus": _int(gpus, "gpus"), "reason": reason, "now": now, "round_id": _int(round_id, "round_id"),
                  "user": user}
        if held_back:
            return self._insert(P.held_back(**common, message=message, due=due, for_job=for_job))
        if ok:
            return self._insert(P.signal_sent(**common, signal=signal, grace=grace, message=message,
                                                         target_type=target_type, for_job=for_job))
        return self._insert(P.signal_failed(**common, signal=signal, message=message,
                                                       target_type=target_type))

    def step(self, preemption_id: int, step: str, message: str = "", *, state: str | None = None,
             round_id: int | None = None, now: float | None = None, due: Any = ...) -> None:
        """Append a step to a preemption (and with ``state`` move it there): :func:`.record.advance`."""
        now = time.time() if now is None else now
        with self.store.transaction():
            rows = list(self.store.db["preemptions"].rows_where("id = ?", [preemption_id]))
            if not rows:
                raise InputError("preemption_id", preemption_id, "no such preemption")
            rec = P.advance(PreemptionRecord.from_row(self._row(rows[0])), step, message, state=state,
                            round_id=_int(round_id, "round_id"), now=now, due=due)
            row = rec.to_row()
            update = {k: row[k] for k in ("state", "requeue_at", "requeued_at", "finished_at")}
            update["steps"] = _dumps(row["steps"])
            self.store.db["preemptions"].update(preemption_id, update)

    def history(self, since: float) -> list[PreemptionRecord]:
        """What preemption decisions need: open preemptions, and every one signalled or requeued since
        ``since`` (minimum runs, requeues per day)."""
        return [PreemptionRecord.from_row(self._row(r)) for r in self.store.db["preemptions"].rows_where(
            "state in ('signalled', 'held-back') or coalesce(requeued_at, signalled_at, created) >= ?", [since],
            order_by="id")]

    def rows(self, account: str | None = None, job_id: int | None = None, limit: int | None = 100,
             since: float | None = None, until: float | None = None) -> list[PreemptionRecord]:
        """The newest ``limit`` (None: all) preemptions (of ``account``'s jobs, of ``job_id``, created in
        [since, until]), newest first, with steps."""
        window, args = StoreBase._window("created", since, until)
        where = [window] if window else []
        if account is not None:
            where.append("account = ?")
            args.append(account)
        if job_id is not None:
            where.append("job_id = ?")
            args.append(job_id)
        return [PreemptionRecord.from_row(self._row(r)) for r in self.store.db["preemptions"].rows_where(
            " and ".join(where) or None, args, order_by="id desc", limit=limit)]

    def counts(self) -> list[StateCount]:
        """How many preemptions are in each state (states with none are not listed)."""
        return [StateCount(str(st), int(n)) for st, n in self.store.db.execute(
            "select state, count(*) from preemptions group by state")]

    def totals(self) -> list[PreemptionTotal]:
        """Per account and GPU type (in that order): :class:`PreemptionTotal`."""
        rows = self.store.db.execute(
            "select account, coalesce(gpu_type, ''), count(*), sum(requeued_at is not null), "
            "sum(state = 'signalled') from preemptions group by account, coalesce(gpu_type, '') "
            "order by account, coalesce(gpu_type, '')")
        return [PreemptionTotal(a, g, n, rq, op) for a, g, n, rq, op in rows.fetchall()]

    def next_due(self, held_back: bool = False) -> float | None:
        """When the first open preemption can be acted on (unix seconds), None if none is open: a reclaim's
        victims (``for_job`` set) are requeued together, when the last of them ends its grace
        (``victims.due``), so a claim's group is due at its latest end of grace; any other signal at its own;
        with ``held_back`` also the cancel times of held-back jobs (``preemption.unrequeueable = "cancel"``)."""
        states = "('signalled', 'held-back')" if held_back else "('signalled')"
        row = self.store.db.execute(
            "select min(at) from ("
            f" select requeue_at as at from preemptions where state in {states}"
            "  and (for_job is null or target_type is not null or state != 'signalled')"
            " union all"
            " select max(requeue_at) as at from preemptions where state = 'signalled'"
            "  and for_job is not null and target_type is null group by for_job)").fetchone()
        return row[0] if row else None
