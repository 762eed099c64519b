"""The daemon's leader lock row (migration 13; the table is still called ``lease``, its columns unchanged): read
it, and replace it only if it is still what the caller read (compare and swap inside one write transaction), so
that two daemons deciding at once cannot both win. The rules (who may hold it) are in
:mod:`slurm_fair.daemon.leader`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .base import StoreBase

NAME = "daemon"


@dataclass(frozen=True)
class Leader:
    """The leader lock: who runs rounds on this database: ``host`` (``daemon.host_id`` or the host name), ``pid``
    and ``token`` (random, one per daemon process), ``acquired`` and ``expires`` (epoch seconds)."""

    host: str
    pid: int
    token: str
    acquired: float
    expires: float


class LeaderMixin(StoreBase):
    """The leader lock, in the ``lease`` table (its name since migration 13)."""

    def leader(self) -> Leader | None:
        """The leader lock's row, or None (no daemon ever held it)."""
        row = self.db.execute("select host, pid, token, acquired, expires from lease where name = ?",
                              [NAME]).fetchone()
        return None if row is None else Leader(str(row[0]), int(row[1]), str(row[2]), float(row[3]), float(row[4]))

    def swap_leader(self, expected: Leader | None, new: Leader) -> bool:
        """Write ``new`` if the row is still ``expected`` (None: no row); False (nothing written) if another
        process changed it since the caller read it."""
        with self.transaction():  # BEGIN IMMEDIATE: the read and the write see no other writer in between
            if self.leader() != expected:
                return False
            self.db["lease"].upsert({"name": NAME, **dataclasses.asdict(new)}, pk="name")
        return True
