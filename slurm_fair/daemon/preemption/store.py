"""Preemptions: one row per preempted job with every step."""

from __future__ import annotations

import time
from typing import Any

from .. import preemptions as P
from ..errors import InputError
from ..preemptions import OPEN_STATES, STATES, PreemptionRecord
from .base import StoreBase
from .codec import _dumps, _int, _loads

PREEMPTION_STATES = STATES  # the state machine is slurm_fair/preemptions.py; the store only stores
OPEN_PREEMPTIONS = OPEN_STATES


class PreemptionsMixin(StoreBase):
    """The ``preemptions`` table: rows of :class:`~slurm_fair.preemptions.PreemptionRecord`. What a step does to
    a record (its state, requeue_at, requeued_at, finished_at) is decided in ``slurm_fair/preemptions.py``."""

    @staticmethod
    def _preemption_row(r: dict) -> dict:
        r = dict(r)
        r["steps"] = _loads(r["steps"]) or []
        return r

    def _insert_preemption(self, rec: PreemptionRecord) -> int:
        row = rec.to_row()
        row["steps"] = _dumps(row["steps"])
        with self.transaction():
            return self.db["preemptions"].insert(row).last_pk

    def add_preemption(self, *, job_id: int, account: str, gpu_type: str, gpus: int, signal: str, reason: str,
                       grace: float, round_id: int | None = None, user: str = "", ok: bool = True,
                       message: str = "", now: float | None = None, target_type: str | None = None,
                       held_back: bool = False, due: float | None = None, for_job: int | None = None) -> int:
        """Record a checkpoint signal sent to a job (``ok``: :func:`~slurm_fair.preemptions.signal_sent`) or that
        failed (:func:`~slurm_fair.preemptions.signal_failed`, ``message`` says why), or a job held back
        (``held_back``: :func:`~slurm_fair.preemptions.held_back`, ``due`` its cancel time); ``for_job``: the waiting
        job a reclaim frees GPUs for; returns its id."""
        now = time.time() if now is None else now
        common = {"job_id": _int(job_id, "job_id"), "account": account, "gpu_type": gpu_type,
                  "gpus": _int(gpus, "gpus"), "reason": reason, "now": now, "round_id": _int(round_id, "round_id"),
                  "user": user}
        if held_back:
            return self._insert_preemption(P.held_back(**common, message=message, due=due, for_job=for_job))
        if ok:
            return self._insert_preemption(P.signal_sent(**common, signal=signal, grace=grace, message=message,
                                                         target_type=target_type, for_job=for_job))
        return self._insert_preemption(P.signal_failed(**common, signal=signal, message=message,
                                                       target_type=target_type))

    def preemption_step(self, preemption_id: int, step: str, message: str = "", *, state: str | None = None,
                        round_id: int | None = None, now: float | None = None, due: Any = ...) -> None:
        """Append a step to a preemption (and with ``state`` move it there): :func:`~slurm_fair.preemptions.advance`."""
        now = time.time() if now is None else now
        with self.transaction():
            rows = list(self.db["preemptions"].rows_where("id = ?", [preemption_id]))
            if not rows:
                raise InputError("preemption_id", preemption_id, "no such preemption")
            rec = P.advance(PreemptionRecord.from_row(self._preemption_row(rows[0])), step, message, state=state,
                            round_id=_int(round_id, "round_id"), now=now, due=due)
            row = rec.to_row()
            update = {k: row[k] for k in ("state", "requeue_at", "requeued_at", "finished_at")}
            update["steps"] = _dumps(row["steps"])
            self.db["preemptions"].update(preemption_id, update)

    def preemption_history(self, since: float) -> list[PreemptionRecord]:
        """What preemption decisions need: open preemptions, and every one signalled or requeued since
        ``since`` (leases)."""
        return [PreemptionRecord.from_row(self._preemption_row(r)) for r in self.db["preemptions"].rows_where(
            "state in ('signalled', 'held-back') or coalesce(requeued_at, signalled_at, created) >= ?", [since],
            order_by="id")]

    def preemptions(self, account: str | None = None, job_id: int | None = None, limit: int | None = 100,
                    since: float | None = None, until: float | None = None) -> list[dict]:
        """The newest ``limit`` (None: all) preemptions (of ``account``'s jobs, of ``job_id``, created in
        [since, until]), newest first, with steps."""
        window, args = self._window("created", since, until)
        where = [window] if window else []
        if account is not None:
            where.append("account = ?")
            args.append(account)
        if job_id is not None:
            where.append("job_id = ?")
            args.append(job_id)
        return [self._preemption_row(r) for r in self.db["preemptions"].rows_where(
            " and ".join(where) or None, args, order_by="id desc", limit=limit)]

    def preemption_counts(self) -> dict[str, int]:
        """state -> number of preemptions."""
        return {r[0]: r[1] for r in self.db.execute("select state, count(*) from preemptions group by state")}

    def preemption_totals(self) -> list[dict]:
        """Per account and GPU type: ``started`` (every preemption: checkpoint signals sent or failed),
        ``requeued`` (of those, jobs requeued) and ``open`` (signalled, in their grace now)."""
        rows = self.db.execute(
            "select account, coalesce(gpu_type, ''), count(*), sum(requeued_at is not null), "
            "sum(state = 'signalled') from preemptions group by account, coalesce(gpu_type, '') "
            "order by account, coalesce(gpu_type, '')")
        return [{"account": a, "gpu_type": g, "started": n, "requeued": rq, "open": op}
                for a, g, n, rq, op in rows.fetchall()]

    def next_preemption_due(self, held_back: bool = False) -> float | None:
        """When the first open preemption can be acted on (unix seconds), None if none is open: a reclaim's
        victims (``for_job`` set) are requeued together, when the last of them ends its grace
        (``victims.due``), so a claim's group is due at its latest end of grace; any other signal at its own;
        with ``held_back`` also the cancel times of held-back jobs (``preemption.unrequeueable = "cancel"``)."""
        states = "('signalled', 'held-back')" if held_back else "('signalled')"
        row = self.db.execute(
            "select min(at) from ("
            f" select requeue_at as at from preemptions where state in {states}"
            "  and (for_job is null or target_type is not null or state != 'signalled')"
            " union all"
            " select max(requeue_at) as at from preemptions where state = 'signalled'"
            "  and for_job is not null and target_type is null group by for_job)").fetchone()
        return row[0] if row else None
