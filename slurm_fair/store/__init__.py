"""slurm-fair's state: one SQLite database, accessed through sqlite-utils.

Tables: profiles (throughput per account/class/GPU type and source), profile_reports (job reports the daemon
took), rounds (one row per allocation round), shares,
placements, applied (what a round computed and changed), deviations and deficits (state carried from round to
round), managed (accounts whose limits slurm-fair has set), events and preemptions (one row per preempted job
with every step; read and written by ``daemon/preemption/store.py``), lease (the leader lock: which daemon runs
rounds on this database), pending_jobs (the GPU jobs the rounds saw pending: realized fairness's backlog of jobs
not started yet). The schema is created by numbered migrations recorded in ``schema_version``; opening a
database applies the missing ones.

Every write method runs in one transaction; ``with store.transaction():`` groups several (a round writes
everything inside one) and nests (inner blocks are savepoints of the outer transaction).

One module per concern, :class:`Store` is built from them: ``schema`` (the migrations), ``base`` (the
connection and transactions), ``profiles`` (profiles, profile reports, CSV), ``rounds`` (rounds, shares,
placements, carried state, warm starts), ``limits`` (applied changes, managed accounts, site limits),
``jobs`` (hook job records, job runs), ``pending`` (pending jobs the rounds saw), ``retention`` (events,
pruning), ``leader`` (the daemon's leader lock, table ``lease``); ``codec``: JSON columns and checked numbers.
"""

from __future__ import annotations

from pathlib import Path

from .base import StoreBase
from .codec import as_row
from .jobs import CONTROLLER_CONTEXTS, UNTYPED_GPU, JobRecord, JobRun, JobsMixin, gpu_seconds, job_runs
from .leader import Leader, LeaderMixin
from .limits import AppliedChange, LimitsMixin
from .pending import PendingJob, PendingMixin
from .profiles import CSV_HEADER, PROFILE_SOURCES, ProfileReport, ProfilesMixin, ProfileValue
from .retention import Event, RetentionMixin
from .rounds import ROUND_STATUSES, Placement, Round, RoundPoint, RoundsMixin, Share
from .schema import BUSY_TIMEOUT_MS, MIGRATIONS, StoreError, migrate, schema_version

__all__ = [
    "BUSY_TIMEOUT_MS", "CONTROLLER_CONTEXTS", "CSV_HEADER", "Leader", "MIGRATIONS", "MissingDatabase",
    "PROFILE_SOURCES", "ROUND_STATUSES", "UNTYPED_GPU", "Store", "StoreError", "gpu_seconds", "job_runs",
    "migrate", "open_existing", "schema_version",
    "AppliedChange", "Event", "JobRecord", "JobRun", "PendingJob", "Placement", "ProfileReport", "ProfileValue",
    "Round", "RoundPoint",
    "Share", "as_row",
]


class Store(ProfilesMixin, RoundsMixin, LimitsMixin, RetentionMixin, JobsMixin, PendingMixin, LeaderMixin,
            StoreBase):
    """The slurm-fair database. ``Store(":memory:")`` for tests."""


class MissingDatabase(StoreError):
    """There is no database at the configured path (commands that only read refuse to create one)."""


def open_existing(path: str | Path) -> Store:
    """Open the database at ``path`` read-only without creating it (nor its folder, nor SQLite's side files) and
    without migrating or re-permissioning it: commands that only read use this, so that a wrong ``--config`` or a
    command run as root leaves no file behind and changes no owner or mode.
    Raises :class:`MissingDatabase` naming the path."""
    p = Path(path)
    if str(path) != ":memory:" and not p.is_file():
        raise MissingDatabase(f"no database at {p} (daemon.database): the daemon has not run with this "
                              "configuration yet, or --config names another file; nothing was created")
    return Store(p, read_only=True)
