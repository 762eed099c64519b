"""Realized fairness of a window of the live cluster, read from the store (issue 39, item 1): what ``slurm-fair
report`` shows and what ``/metrics`` exports for the last :data:`METRICS_WINDOW_S` seconds. The computation is
pure (:func:`slurm_fair.fairness.live.live_realized`, which calls :func:`slurm_fair.fairness.realized.realized`);
this module only reads its inputs:

* the job runs from the hooks' start and end records (``Store.job_runs``, only jobs with a record in the window or
  a run still open), and the GPU jobs the rounds saw pending (``Store.pending_jobs``: last seen from the window's
  start, or from the last observing round before it, and submitted by its end) with the start of the last round
  at or before the window's end that observed the cluster (status ok, dry-run or solver-failed: it recorded its
  pending jobs before deciding), if it started at most :data:`STALE_PERIODS` daemon periods before that end;
* the accounts' tenants and weights from the rounds that started in the window (none: the newest before its
  end), and the GPUs per type from the newest of them that recorded a capacity;
* each (account, class)'s throughput per type by the daemon's own lookup (``daemon/plan/problem.py``,
  ``ProfileIndex``) over the profile values a round uses (``[profiling]``: ``bounded.round_profiles``) and the
  shipped profiles.

It works the same in shadow mode (``daemon.dry_run``): dry-run rounds record weights, capacity and pending jobs,
and the hooks record every job.
"""

from __future__ import annotations

from typing import Any

from ..config import Config
from ..errors import InputError
from ..fairness.live import DEFAULT_CLASS, LiveRealized, live_realized
from ..profiling import shipped as shipped_profiles
from ..store import Store
from .bounded import round_profiles
from .plan.problem import ProfileIndex

METRICS_WINDOW_S = 86400.0  # /metrics: realized fairness of the last 24 hours
KEYS = ("tenants", "weights", "capacity")
OBSERVED = ("ok", "dry-run", "solver-failed")  # statuses of rounds that saw the cluster (and its pending jobs)
STALE_PERIODS = 2.0  # an observing round more than this many daemon periods before the window's end is too old


def read(store: Store, t0: float, t1: float, cfg: Config | None = None) -> LiveRealized:
    """Realized fairness over [t0, t1] from ``store`` (module docstring); ``cfg`` picks the profile values as the
    daemon's rounds do (None: the defaults). Raises InputError when nothing can be computed (no round recorded a
    capacity or a weight, no job in the window, a bad window)."""
    if t1 <= t0:
        raise InputError("until", t1, f"must be after since ({t0})")
    points = store.round_series(t0, t1, keys=KEYS) or store.round_series(None, t1, keys=KEYS)[-1:]
    capacity: dict[str, Any] = next((p.values["capacity"] for p in reversed(points)
                                     if isinstance(p.values.get("capacity"), dict) and p.values["capacity"]), {})
    if not capacity:
        raise InputError("rounds", len(points), "no round up to the window's end recorded the GPUs per type "
                         "(run the daemon, in shadow mode if you like: daemon.dry_run = true)")
    runs = store.job_runs(since=t0)
    sighted = max((p.started for p in points if p.status in OBSERVED and p.started <= t1), default=None)
    if sighted is not None and t1 - sighted > STALE_PERIODS * float((cfg or Config()).daemon.period):
        sighted = None  # the daemon was not running then: whether a job still waited at the end is not known
    pending = store.pending_jobs(since=t0 if sighted is None else min(t0, sighted), until=t1)
    pairs = sorted({(str(r.account or ""), str(r.cls or "") or DEFAULT_CLASS) for r in runs}
                   | {(p.account, p.cls or DEFAULT_CLASS) for p in pending})
    index = ProfileIndex(round_profiles(store, cfg or Config()), shipped_profiles.load_shipped())
    types = list(capacity)
    throughput, sources = {}, {}
    for a, c in pairs:
        throughput[(a, c)], sources[(a, c)] = index.lookup(a, c, types)
    return live_realized(runs, [(p.values.get("tenants"), p.values.get("weights")) for p in points], capacity,
                         throughput, sources, t0, t1, pending, sighted)
