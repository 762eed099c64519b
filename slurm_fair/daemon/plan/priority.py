"""Job priorities: the deficits behind SiteFactor. Pure.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Mapping

from ...config import Config
from ...cluster.base import Job, Snapshot
from .demand import gpu_jobs
from .eligible import startable

#: deficits less than this apart (GPU-seconds; or a millionth of the larger, if more) are equal: their accounts keep
#: the order they had (:func:`account_order`). Ranked by exact floats, two accounts owed the same swapped bands from
#: one round to the next on the testbed (SiteFactor 100 833 vs 59 994, then 59 994 vs 110 000), and the next round
#: requeued one's job to give its GPUs back to the other (issue 39).
DEFICIT_TOL = 1.0

#: ``priority.site_factor_max = "auto"`` where the site's priority weights are all 0 or unknown (SiteFactor
#: alone orders the jobs then, so no range can swamp them)
AUTO_RANGE = 100000

# ------------------------------------------------------------------------------------------- priorities


def factor_range(cfg: Config, weights: int | None = None) -> tuple[int, int, int]:
    """(lowest, highest SiteFactor, levels) of ``[priority]``: ``site_factor_max = "auto"`` is
    ``site_factor_min`` + ``weights`` (the sum of the site's ``PriorityWeight*``, ``cluster.ctld_config.weights_sum``),
    or + :data:`AUTO_RANGE` where that is 0 or None; ``levels`` at most one per value of the range."""
    pr = cfg.priority
    lo = int(pr.site_factor_min)
    if pr.site_factor_max == "auto":
        hi = lo + (int(weights) if weights and weights > 0 else AUTO_RANGE)
    else:
        hi = int(pr.site_factor_max)
    return lo, hi, max(1, min(int(pr.levels), hi - lo + 1))


def with_weights(cfg: Config, weights: int | None) -> Config:
    """``cfg`` with ``site_factor_max = "auto"`` (and ``levels``) resolved against the site's priority weights
    (their sum; None: unknown) — what a round plans with. A configured number is kept."""
    if cfg.priority.site_factor_max != "auto":
        return cfg
    _lo, hi, levels = factor_range(cfg, weights)
    return replace(cfg, priority=replace(cfg.priority, site_factor_max=hi, levels=levels))


def update_deficit(deficits: Mapping[str, float], ideal: Mapping[str, float], received: Mapping[str, float],
                   dt: float) -> dict[str, float]:
    """Accumulate GPU-seconds owed: ``d[a] += (ideal[a] - received[a]) * dt``.

    Only accounts present in ``ideal`` or ``received`` (i.e. with GPU jobs now) are kept: an account whose
    jobs are all gone starts again from 0 (no banking of credit while idle). ``dt`` is clamped at >= 0.
    """
    dt = max(0.0, float(dt))
    out = {}
    for a in sorted(set(ideal) | set(received)):
        out[a] = float(deficits.get(a, 0.0)) + (float(ideal.get(a, 0.0)) - float(received.get(a, 0.0))) * dt
    return out


def aged(snapshot: Snapshot, cfg: Config) -> set[int]:
    """Ids of the pending GPU jobs past the age floor: pending at least ``priority.age_floor`` seconds (since
    their submission, at the snapshot's time). Empty when the floor is 0 (off)."""
    floor = float(cfg.priority.age_floor)
    if floor <= 0:
        return set()
    now = float(snapshot.taken_at)
    return {j.job_id for j in gpu_jobs(snapshot, cfg.cluster.partitions, cfg.limits.accounts)
            if startable(j) and now - float(j.submit_time) >= floor}


def site_factors(snapshot: Snapshot, deficits: Mapping[str, float], cfg: Config) -> dict[int, int]:
    """SiteFactor for every pending GPU job that could start (:func:`.eligible.startable`; not held, dependent …) (job id -> int: in :func:`factor_range`, except in a pilot).

    Accounts with pending GPU jobs are ranked by deficit (largest first; equal deficits, within
    :data:`DEFICIT_TOL`, keep last round's order — read from their jobs' SiteFactor now, in a pilot their priority — then name:
    :func:`account_order`); within an account,
    jobs are ranked longest-waiting first (submit time, then job id): OEF's round robin by starvation.
    The ``L = priority.levels`` levels are split into one band per account, the higher ranked account's band
    above the lower ones' (``band(r) = [floor((m-1-r)·L/m), floor((m-r)·L/m))`` for ``m`` accounts, at least
    one level wide); inside its band the account's oldest job gets the top level, the next one the level
    below, and so on, and the rest share the band's bottom. Level ``l`` maps to
    ``min + l·(max-min) // (L-1)`` (all ``min`` when L = 1).

    The age floor (``priority.age_floor`` > 0): the jobs pending at least that long (:func:`aged`) leave their
    accounts and form one more group, ranked above every account (it takes the top band of ``m + 1``), first
    come first (submit time, then job id) inside it — as Slurm's age factor would lift them, so that no
    deficit order can hold a job back for ever. An account whose every pending job is aged has no band.

    A pilot (``limits.accounts`` set): the bands above only rank the pilot's jobs (the fair plan); the values
    written are :func:`pilot_factors` of that ranking, which keeps every other job's place in Slurm's queue.
    """
    least, most, levels = factor_range(cfg)
    jobs = [j for j in gpu_jobs(snapshot, cfg.cluster.partitions, cfg.limits.accounts)
            if startable(j)]  # held, dependent, future jobs are not demand (.eligible): no band for them
    old = aged(snapshot, cfg)
    by_acct: dict[str, list[Job]] = {}
    for j in jobs:
        if j.job_id not in old:
            by_acct.setdefault(j.account, []).append(j)
    groups = [[j for j in jobs if j.job_id in old]] if old else []
    pilot = bool(cfg.limits.accounts)
    # last round's order of the accounts (ties of deficit keep it): their jobs' highest SiteFactor, in a pilot
    # their highest priority (a pilot's SiteFactor is a swap of priorities, not a band)
    before = {a: max(int(j.priority if pilot else j.site_factor) for j in js) for a, js in by_acct.items()}
    groups += [by_acct[a] for a in account_order(by_acct, deficits, before)]
    m = len(groups)
    out: dict[int, int] = {}
    for r, group in enumerate(groups):
        lo = ((m - 1 - r) * levels) // m
        hi = max(((m - r) * levels) // m, lo + 1)
        width = hi - lo
        for i, j in enumerate(sorted(group, key=lambda j: (j.submit_time, j.job_id))):
            level = min(lo + max(width - 1 - i, 0), levels - 1)
            out[j.job_id] = level_value(level, least, most, levels)
    return pilot_factors(jobs, out) if pilot else out


def pilot_factors(jobs: Iterable[Job], fair: Mapping[int, int]) -> dict[int, int]:
    """A pilot's SiteFactors: the pilot's pending jobs swap their places in Slurm's queue among themselves, in
    the fair plan's order, and take no other job's place (job id -> SiteFactor; pure).

    Each job's own priority, its *base*, is Slurm's priority without SiteFactor: ``priority - site_factor``
    (squeue's priority less sprio's SiteFactor). The bases of the pilot's jobs, highest first, are the pilot's
    *slots*; the jobs ranked by ``fair`` (highest value first, then submit time, then id) take them in turn —
    the first the highest slot, the second the next … — and each gets ``SiteFactor = its slot - its base``, so
    its priority becomes its slot. The pilot's priorities are then the same numbers as without slurm-fair, only
    on other jobs of the pilot: for every priority ``p``, as many pilot jobs are above ``p`` (and as many equal
    to it) as before. A job outside the pilot keeps its own priority (it gets no SiteFactor), so it has exactly
    as many pilot jobs ahead of it, and the same place in the queue, as the site's own priority gives it; jobs
    outside the pilot keep their order among themselves. SiteFactors may be negative (a job swapped lower).
    Equal priorities stay equal: Slurm's own tie-break orders them, not ``fair``. What it cannot hold: Slurm
    recomputes priorities every ``PriorityCalcPeriod`` and a job's age and fair-share factors move between
    rounds, so a slot moves with its new holder's factors until the next round swaps again."""
    js = list(jobs)
    base = {j.job_id: int(j.priority) - int(j.site_factor) for j in js}
    slots = sorted(base.values(), reverse=True)
    ranked = sorted(js, key=lambda j: (-int(fair.get(j.job_id, 0)), j.submit_time, j.job_id))
    return {j.job_id: slot - base[j.job_id] for j, slot in zip(ranked, slots)}


def account_order(accounts: Iterable[str], deficits: Mapping[str, float],
                  before: Mapping[str, int]) -> list[str]:
    """Accounts by deficit, largest first; deficits within :data:`DEFICIT_TOL` of the largest of their run count
    as equal, and such accounts keep their order of before (``before``: account -> the highest SiteFactor its
    pending jobs have now, i.e. last round's band; higher first), then name. Stable from round to round where
    the deficits only move by float noise."""
    by_d = sorted(accounts, key=lambda a: (-float(deficits.get(a, 0.0)), a))
    out: list[str] = []
    i = 0
    while i < len(by_d):
        top = float(deficits.get(by_d[i], 0.0))
        tol = max(DEFICIT_TOL, 1e-6 * abs(top))
        k = i
        while k < len(by_d) and top - float(deficits.get(by_d[k], 0.0)) < tol:
            k += 1
        out += sorted(by_d[i:k], key=lambda a: (-int(before.get(a, -1)), a))
        i = k
    return out


def level_value(level: int, lo: int, hi: int, levels: int) -> int:
    if levels <= 1:
        return int(lo)
    return int(lo + (level * (hi - lo)) // (levels - 1))


