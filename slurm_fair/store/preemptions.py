"""Preemptions: one row per preempted job with every step."""

from __future__ import annotations

import time
from typing import Any

from ..errors import InputError
from .base import StoreBase
from .codec import _dumps, _int, _loads

PREEMPTION_STATES = ("signalled", "requeued", "resolved", "gone", "failed", "held-back", "cancelled")
OPEN_PREEMPTIONS = ("signalled", "held-back")  # held-back: daemon/unrequeueable.py, open until the job ends


class PreemptionsMixin(StoreBase):
    """The ``preemptions`` table."""

    @staticmethod
    def _preemption_row(r: dict) -> dict:
        r = dict(r)
        r["steps"] = _loads(r["steps"]) or []
        return r

    def add_preemption(self, *, job_id: int, account: str, gpu_type: str, gpus: int, signal: str, reason: str,
                       grace: float, round_id: int | None = None, user: str = "", ok: bool = True,
                       message: str = "", now: float | None = None, target_type: str | None = None,
                       held_back: bool = False, due: float | None = None) -> int:
        """Record a checkpoint signal sent to a job (``ok``) or that failed (state ``failed``, ``message``
        says why); returns the preemption id. A sent signal opens the preemption (state ``signalled``) until
        ``now + grace``. ``target_type``: an upgrade move's faster type (None: a reclaim). ``held_back``: no signal
        was sent, the job cannot be requeued and its account is held back (state ``held-back``, open until the job
        ends; ``due``: when it is cancelled, None = never)."""
        now = time.time() if now is None else now
        if held_back:
            step = {"time": now, "round_id": round_id, "step": "held-back", "message": message}
            row = {"job_id": _int(job_id, "job_id"), "account": account, "user": user, "gpu_type": gpu_type,
                   "gpus": _int(gpus, "gpus"), "signal": "", "reason": reason, "state": "held-back",
                   "round_id": _int(round_id, "round_id"), "created": now, "signalled_at": None, "requeue_at": due,
                   "requeued_at": None, "finished_at": None, "steps": _dumps([step]), "target_type": None}
            with self.transaction():
                return self.db["preemptions"].insert(row).last_pk
        step = {"time": now, "round_id": round_id, "step": "signalled" if ok else "signal-failed",
                "message": message or (f"sent {signal}" if ok else "")}
        row = {"job_id": _int(job_id, "job_id"), "account": account, "user": user, "gpu_type": gpu_type,
               "gpus": _int(gpus, "gpus"), "signal": signal, "reason": reason, "state": "signalled" if ok else "failed",
               "round_id": _int(round_id, "round_id"), "created": now, "signalled_at": now if ok else None,
               "requeue_at": now + float(grace) if ok else None, "requeued_at": None,
               "finished_at": None if ok else now, "steps": _dumps([step]), "target_type": target_type}
        with self.transaction():
            return self.db["preemptions"].insert(row).last_pk

    def preemption_step(self, preemption_id: int, step: str, message: str = "", *, state: str | None = None,
                        round_id: int | None = None, now: float | None = None, due: Any = ...) -> None:
        """Append a step; with ``state`` also move the preemption there (``requeued`` sets requeued_at; any
        state but an open one, ``signalled`` or ``held-back``, sets finished_at). ``due`` (when given): the new
        requeue_at (a held-back job's cancel time, None = never)."""
        now = time.time() if now is None else now
        if state is not None and state not in PREEMPTION_STATES:
            raise InputError("state", state, f"must be one of {', '.join(PREEMPTION_STATES)}")
        with self.transaction():
            rows = list(self.db["preemptions"].rows_where("id = ?", [preemption_id]))
            if not rows:
                raise InputError("preemption_id", preemption_id, "no such preemption")
            steps = _loads(rows[0]["steps"]) or []
            steps.append({"time": now, "round_id": _int(round_id, "round_id"), "step": step, "message": message})
            update: dict[str, Any] = {"steps": _dumps(steps)}
            if state is not None:
                update["state"] = state
                if state == "requeued":
                    update["requeued_at"] = now
                if state not in OPEN_PREEMPTIONS:
                    update["finished_at"] = now
            if due is not ...:
                update["requeue_at"] = due
            self.db["preemptions"].update(preemption_id, update)

    def preemption_history(self, since: float) -> list[dict]:
        """What preemption decisions need: open preemptions, and every one signalled or requeued since
        ``since`` (leases)."""
        return [self._preemption_row(r) for r in self.db["preemptions"].rows_where(
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
        """The earliest end of grace of an open preemption (unix seconds), None if none is open; with
        ``held_back`` also the cancel times of held-back jobs (``preemption.unrequeueable = "cancel"``)."""
        states = "('signalled', 'held-back')" if held_back else "('signalled')"
        row = self.db.execute(f"select min(requeue_at) from preemptions where state in {states}").fetchone()
        return row[0] if row else None
