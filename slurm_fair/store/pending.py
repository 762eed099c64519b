"""The pending GPU jobs the rounds saw (table ``pending_jobs``, migration 16): what realized fairness counts as an
account's backlog for jobs that have not started yet, which the hooks' start and end records cannot show
(``fairness/live.py``). One row per job id, upserted each round that observed the cluster (dry-run rounds too),
pruned with the store's history (``store/retention.py``: rows last seen before the cutoff)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable

from ..jobrecord import clean_text
from .base import StoreBase


@dataclass(frozen=True)
class PendingJob:
    """A GPU job a round saw pending: its Slurm ``submit`` time, the ``account`` and class (``cls``, as the round
    derived it) of its last sighting, its ``gpus``, the GPU type it asks for (``gpu_type``, None: untyped), why it
    could not start whatever slurm-fair did (``blocked``: held, dependency, ...; "" when it could), and the times
    of the first and the last round that saw it pending (the rounds' clock)."""

    job_id: int
    account: str
    cls: str
    gpus: int
    gpu_type: str | None
    submit: float
    blocked: str
    first_seen: float
    last_seen: float


UPSERT = ("insert into pending_jobs (job_id, account, class, gpus, gpu_type, submit, blocked, first_seen, last_seen) "
          "values (?, ?, ?, ?, ?, ?, ?, ?, ?) on conflict(job_id) do update set account = excluded.account, "
          "class = excluded.class, gpus = excluded.gpus, gpu_type = excluded.gpu_type, submit = excluded.submit, "
          "blocked = excluded.blocked, first_seen = min(first_seen, excluded.first_seen), "
          "last_seen = max(last_seen, excluded.last_seen)")


class PendingMixin(StoreBase):
    """The ``pending_jobs`` table."""

    def record_pending(self, jobs: Iterable[PendingJob]) -> int:
        """Upsert the pending jobs a round saw (one statement for all): a job seen before keeps its first
        sighting and gets this one's account, class, GPUs, type, blocked reason and time. Returns the count."""
        rows = [(int(j.job_id), clean_text(str(j.account or "")), clean_text(str(j.cls or "")), int(j.gpus),
                 None if j.gpu_type is None else clean_text(str(j.gpu_type)), float(j.submit),
                 clean_text(str(j.blocked or "")), float(j.first_seen), float(j.last_seen)) for j in jobs]
        with self.transaction():
            if rows:
                self.db.conn.executemany(UPSERT, rows)
        return len(rows)

    def pending_jobs(self, since: float | None = None, until: float | None = None) -> list[PendingJob]:
        """The jobs seen pending (by job id): ``since``: last seen at or after it; ``until``: submitted at or
        before it (a window's jobs)."""
        where, args = [], []
        if since is not None:
            where.append("last_seen >= ?")
            args.append(float(since))
        if until is not None:
            where.append("submit <= ?")
            args.append(float(until))
        sql = ("select job_id, account, class, gpus, gpu_type, submit, blocked, first_seen, last_seen from "
               "pending_jobs" + (" where " + " and ".join(where) if where else "") + " order by job_id")
        return [PendingJob(int(j), a or "", c or "", int(n), g, float(s), b or "", float(f), float(la))
                for j, a, c, n, g, s, b, f, la in self.db.execute(sql, args).fetchall()]
