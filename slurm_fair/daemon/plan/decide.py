"""A round's decisions, all at once (:func:`decide`): pure, nothing applied."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from ...config import Config
from ...cluster.base import Job, Snapshot, supports_pending_retype
from ...model import Allocation
from ...rounding import LastRound
from .demand import (NEVER_MANAGED, ClassDemand, FreeGPUs, flexible_as_untyped, gpu_jobs, gpus_in_use,
                     held_elsewhere, job_class,
                     managed_accounts, observe_demand, parent_accounts, received_gpus, waiting_gpus)
from ..ownership import site_part
from ..preemption.unrequeueable import HoldBack, hold_back
from .binding import site_bounds
from .eligible import not_demand
from .borrow import Borrowing
from .limits import (Plan, drift, in_partitions, limit_changes, make_plan, own_limits, pin_drift, site_bounded,
                     with_held_elsewhere)
from .priority import aged, site_factors, update_deficit
from .problem import SRC_ASSUMED, SRC_UNPROFILED, Built, build_problem, type_order
from .typemap import (Retype, Target, explore_plan, explore_targets, retype_moves, untyped_targets,
                      with_retypes)
from .view import PartitionView

# --------------------------------------------------------------------------- a round's decisions, all at once

# At most this many SiteFactor updates per round (slurmctld spends ~4 ms per job update on the testbed): the
# jobs whose factor moves most go first, the rest follow in the next rounds. Bounds a round's time when
# thousands of pending jobs need new factors at once (first round, big reordering).
MAX_SITE_FACTOR_UPDATES = 1000
MAX_RETYPES = 10  # pending fair:flex jobs moved to another GPU type per round


@dataclass(frozen=True)
class Decisions:
    """Everything one round decides (:func:`decide`), before anything is applied."""

    demand: dict[tuple[str, str], ClassDemand]
    built: Built
    alloc: Allocation
    plan: Plan
    received: dict[str, float]
    deficits: dict[str, float]
    factors: dict[int, int]  # SiteFactor of every pending GPU job
    factor_changes: dict[int, int]  # the ones to write this round (differ from Slurm's, capped)
    factors_deferred: int
    current: dict[str, dict[str, int]]  # the accounts' limits in Slurm now
    planned: dict[str, dict[str, int]]  # limits the plan wants, for accounts Slurm knows
    changes: dict[str, dict[str, int]]  # only what differs (empty when limits are not managed)
    retypes: list[Retype]
    targets: dict[str, Target]  # untyped GPU requests: the type map job_submit.lua uses
    dt: float  # seconds of deficit accounting since the last ok round
    explored: list[dict[str, Any]] = field(default_factory=list)  # exploration's limit moves (explore_plan)
    reporting: frozenset[tuple[str, str]] = frozenset()  # (account, class) with measured or harvested values
    left_alone: tuple[str, ...] = ()  # accounts whose own (site) GPU limits slurm-fair respects
    # account -> why -> GPUs of its pending jobs that are not demand (held, dependency, begin-time, reservation)
    not_demand: dict[str, dict[str, int]] = field(default_factory=dict)
    held_back: dict[str, dict[str, int]] = field(default_factory=dict)  # limits lowered: unrequeueable jobs
    # accounts held back across all their jobs (daemon/preemption/unrequeueable.py): type -> the most they may hold, and why
    held_at: dict[str, dict[str, int]] = field(default_factory=dict)
    held_why: dict[str, str] = field(default_factory=dict)
    drift: dict[str, dict[str, int]] = field(default_factory=dict)  # limits someone else set since (kept)
    in_force: dict[str, dict[str, int]] | None = None  # the limits Slurm holds after the round (None: the plan's)
    # GPU limits a store with no record faces: no limit is written until the admin adopts or clears them
    unrecorded: dict[str, dict[str, int]] = field(default_factory=dict)
    # the accounts' GPU limits now less those still as slurm-fair wrote them: what rounds record as site limits
    site_now: dict[str, dict[str, int]] = field(default_factory=dict)
    # the site limits that hold an account's jobs (binding.site_bounds: the site's own now and those recorded):
    # a job they hold is not demand (site-limit); `why` says so from the status file
    site_bounds: dict[str, dict[str, int]] = field(default_factory=dict)
    run_times: dict[str, float] = field(default_factory=dict)  # class -> recorded run time, s (the type map's estimate)

    def plan_in_force(self) -> Plan:
        """The plan with the limits in force after the round: what retypes and the type map count room under."""
        return self.plan if self.in_force is None else replace(self.plan, limits=self.in_force)


def decide(snapshot: Snapshot | PartitionView, cfg: Config, solve: Any, *, profiles: Any, shipped: Any, deviations: Mapping[str, Any],
           deficits: Mapping[str, float], managed_before: set[str], last_ok_started: float | None, now: float,
           empty_alloc: Any, moving: Sequence[tuple[str, str, int]] = (),
           site: Mapping[str, Mapping[str, int]] | None = None,
           held_back: HoldBack | Mapping[str, Mapping[str, int]] | None = None, last: LastRound | None = None,
           written: Mapping[str, Mapping[str, int]] | None = None, requeuing: bool = False,
           run_times: Mapping[str, float] | None = None) -> Decisions:
    """One round's decisions from the snapshot (or its :class:`PartitionView`, made once by the caller) and the
    state carried from earlier rounds, with no side effects:
    demand per class, the problem and its allocation (``solve(problem) -> Allocation``; ``empty_alloc(built)``
    when nobody asks for GPUs), the plan (integer GPUs, limits), deficits and SiteFactors, limit changes, retypes
    and the untyped-request targets. ``moving``: upgrade moves in flight (``make_plan``). ``site``: the GPU
    limits accounts had before slurm-fair first managed them (:func:`.limits.site_bounded`). ``held_back``:
    what open hold-backs do (``daemon/preemption/unrequeueable.py``: a :class:`HoldBack`, or account -> type -> GPUs of its
    running jobs preemption could not requeue): its limits are lowered by them, and an account held back across
    all its jobs may hold no more than it runs now. ``last``: last round's ideal and guarantees (``make_plan``).
    ``run_times``: class -> its recorded run time in seconds (the store's job runs,
    ``store.jobs.class_run_times``): the type map's estimate of when a job without a time limit ends.
    ``written``: the GPU limits slurm-fair last wrote (the store's, with the ownership file's): one that differs in
    Slurm now was set by someone else and is kept (:func:`.limits.drift`), and so is a key it never wrote that differs
    from the account's site limits (issue 40); an account leaving the managed set gets back only what slurm-fair
    wrote. ``requeuing``: a reclaim's victims may be requeued this round (``make_plan``).
    Raises what the policy raises (SolverError, InputError)."""
    profiles = list(profiles)
    view = PartitionView.of(snapshot, cfg.cluster.partitions)
    elsewhere = held_elsewhere(view.whole, cfg.cluster.partitions)
    snapshot = view.managed  # a partition pilot's GPUs and jobs
    retype_ok = supports_pending_retype(snapshot.slurm_version)
    # a pending fair:flex job can still be moved where Slurm retypes pending jobs: its demand is untyped
    seen = flexible_as_untyped(snapshot) if retype_ok else snapshot
    demand = observe_demand(seen, cfg)
    built = build_problem(snapshot, demand, profiles, shipped, cfg)
    known = {a.name for a in snapshot.accounts}
    managed = [a for a in managed_accounts(snapshot, demand, cfg) if a in known or any(d == a for (d, _c) in demand)]
    alloc = solve(built.problem) if built.problem.tenants else empty_alloc(built)
    order = {a: type_order(built, a) for a in {a for (a, _c) in demand}}
    plan = make_plan(built, alloc, demand, deviations, managed, gpus_in_use(snapshot),
                     waiting=waiting_gpus(seen, cfg, lambda j: known_types(built, cfg, j)), order=order, lend=bool(cfg.limits.lend),
                     free=FreeGPUs.of(snapshot, cfg.cluster.partitions), reclaim=bool(cfg.preemption.enabled),
                     moving=moving, last=last, requeuing=requeuing,
                     borrowing=Borrowing(cfg.limits.borrow_gpus, cfg.limits.borrow_fraction))
    explored: list[dict[str, Any]] = []
    reporting = {(r.account or "", r.cls) for r in profiles if r.source in ("measured", "harvested")}
    if cfg.profiling.explore:
        plan, explored = explore_plan(plan, snapshot, built.sources, reporting)
    received = received_gpus(snapshot, cfg)
    ideal_tot = {a: sum(v.values()) for a, v in plan.ideal.items() if plan.demand.get(a, 0) > 0}
    dt = 0.0 if last_ok_started is None else min(max(now - last_ok_started, 0.0), 2 * float(cfg.daemon.period))
    new_deficits = update_deficit(dict(deficits), ideal_tot, received, dt)
    factors = site_factors(snapshot, new_deficits, cfg)
    current_sf = {j.job_id: j.site_factor for j in snapshot.jobs}
    factor_changes = {jid: v for jid, v in factors.items() if current_sf.get(jid) != v}
    deferred = 0
    if len(factor_changes) > MAX_SITE_FACTOR_UPDATES:
        old = aged(snapshot, cfg)  # jobs past the age floor first: their rise is what keeps them from starving
        # a pilot's factors are a swap (priority.pilot_factors): a job lowered takes nobody's place, one raised
        # takes another's, so the lowered go first and a raised one only after them — no job outside the pilot
        # then has more pilot jobs ahead of it than last round or than the site's own priority gives it
        up = (lambda j: factor_changes[j] > current_sf.get(j, 0)) if cfg.limits.accounts else (lambda j: False)
        order = sorted(factor_changes, key=lambda j: (up(j), j not in old, -abs(factor_changes[j] - current_sf.get(j, 0)),
                                                      j))
        deferred = len(order) - MAX_SITE_FACTOR_UPDATES
        factor_changes = {j: factor_changes[j] for j in sorted(order[:MAX_SITE_FACTOR_UPDATES])}
    current = {a.name: dict(a.limits) for a in snapshot.accounts}
    parents = parent_accounts(snapshot)  # never limited: a parent's limit caps its whole subtree
    mine = set(managed)  # a pilot's (limits.accounts) plan has the other accounts too: they get no limit
    planned = {a: lim for a, lim in plan.limits.items() if a in known and a not in parents and a in mine}
    planned = with_held_elsewhere(planned, elsewhere)
    hb = held_back if isinstance(held_back, HoldBack) else HoldBack({a: dict(v) for a, v in (held_back or {}).items()})
    if hb:  # jobs preemption could not requeue hold their accounts back (daemon/preemption/unrequeueable.py)
        planned = hold_back(planned, hb, plan.capacity)
    # the site's own limits now: what slurm-fair wrote, still as it wrote it, is not the site's (a new database
    # beside the ownership file: daemon/ownership.py)
    site_now = site_part(current, written or {})
    # the site limits this round honours (recorded before slurm-fair first managed the account, else its own now);
    # a key slurm-fair never wrote that differs from them is the site's too (drift: kept, never cleared)
    own = own_limits(planned, site_now, site or {}, managed_before) if written is not None else None
    planned, left_alone = site_bounded(planned, site_now, site or {}, managed_before, cfg.limits.site_limits)
    drifted = drift(current, written or {}, (managed_before | set(planned)) & known, own)
    planned = pin_drift(planned, drifted)
    changes = limit_changes(current, planned, managed_before & known, site or {}, written) if cfg.limits.manage else {}
    # a store that never wrote, managed or recorded anything, facing GPU limits on accounts it would manage: a
    # new install on a site with limits of its own, or a lost database facing an earlier install's limits — the
    # two look alike, so nothing is written until the admin says which (slurm-fair limits adopt | clear)
    fresh = written is not None and not written and not managed_before and not site
    unrecorded = {a: dict(current[a]) for a in sorted(planned) if fresh and current.get(a)}
    if unrecorded:
        changes = {}
    # the limits in force after this round: the planned ones where slurm-fair writes them, Slurm's own elsewhere
    # (left alone, a parent, outside a pilot, limits.manage off); retypes and the type map count room under
    # these — a job moved where the limit in force has no room waits on AssocGrpGRES with GPUs idle (seen on
    # 24.11: a new database left the old limits alone while the plan's said there was room)
    in_force = {a: dict(planned[a]) if (cfg.limits.manage and a in planned and not unrecorded)
                else dict(current.get(a, {}))
                for a in plan.accounts}
    in_force = in_partitions(in_force, elsewhere)  # (a partition pilot's view)

    retypes = (retype_moves(replace(plan, limits=in_force), snapshot, MAX_RETYPES, built.throughput,
                            lambda j: known_types(built, cfg, j), cfg.classes.order) if retype_ok else [])
    d = Decisions(demand=demand, built=built, alloc=alloc, plan=plan, received=received, deficits=new_deficits,
                  factors=factors, factor_changes=factor_changes, factors_deferred=deferred, current=current,
                  planned=planned, changes=changes, retypes=retypes, targets={}, dt=dt, explored=explored,
                  reporting=frozenset(reporting), left_alone=tuple(left_alone),
                  held_back={a: dict(v) for a, v in hb.held.items()}, held_at={a: dict(v) for a, v in hb.frozen.items()},
                  held_why=dict(hb.why), drift=drifted, in_force=in_force,
                  unrecorded=unrecorded, site_now=site_now, site_bounds=site_bounds(current, written or {}, site or {}),
                  run_times=dict(run_times or {}),
                  not_demand=not_demand([j for j in gpu_jobs(snapshot, cfg.cluster.partitions)
                                         if j.account not in NEVER_MANAGED]))
    return replace(d, targets=type_map(d, view.with_managed(with_retypes(snapshot, retypes)), cfg))


UNKNOWN_SOURCES = (SRC_ASSUMED, SRC_UNPROFILED)  # a value filled in, not measured, set or shipped


def known_types(built: Built, cfg: Config, job: Job) -> list[str]:
    """Types a job may be moved to: where its class has a profile (measured, set or shipped: not the 'assumed'
    fill-in); every type for a class with no profile at all."""
    src = built.sources.get(job.account, {}).get(job_class(job, cfg.classes.order), {})
    return [g for g, s in src.items() if s not in UNKNOWN_SOURCES] or list(built.capacity)


def type_map(d: Decisions, snapshot: Snapshot | PartitionView, cfg: Config) -> dict[str, Target]:
    """The GPU type map for ``snapshot`` (or its :class:`PartitionView`) under the round's decisions ``d``: the
    round publishes it, and the daemon publishes it again from each later poll's snapshot (the rooms follow the
    GPUs that free up and the jobs that arrive between rounds, as Slurm alone would see them; the guarantees and
    limits stay the round's)."""
    snapshot = PartitionView.of(snapshot, cfg.cluster.partitions).managed
    plan = d.plan_in_force()
    targets = untyped_targets(plan, snapshot, d.built.throughput, reclaim=bool(cfg.preemption.enabled),
                              site_speed=d.built.site_speed, class_speed=d.built.class_speed,
                              run_times=d.run_times, class_order=cfg.classes.order)
    if cfg.profiling.explore:
        targets = explore_targets(targets, plan, snapshot, d.built.sources, d.reporting)
    if cfg.limits.accounts:  # a pilot types only its own accounts' jobs (the map says @listed-only)
        pilot = set(cfg.limits.accounts)
        targets = {k: t for k, t in targets.items() if k.partition("/")[0] in pilot}
    return targets
