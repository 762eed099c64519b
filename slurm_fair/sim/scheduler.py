"""Slurm's ``sched/backfill`` in simulated time: the scheduler of :class:`~slurm_fair.sim.cluster.SimCluster`.

The scheduler (:meth:`BackfillScheduler.schedule`, run at every event — submission, completion, requeue, a
round's changes) is Slurm's ``sched/backfill`` in two passes over the eligible pending jobs in priority order
(SiteFactor plus ``SimJob.priority`` — the fair-share and age terms when the cluster runs
``priority/multifactor``, :mod:`.slurm_priority`; else 0 —, highest first, then submit time, then job id):

1. *the main loop* starts each job where it fits now, and stops starting jobs at the first one left pending
   for resources (one partition: once a job is left pending, no lower-priority job starts in that pass). A
   job its account's limit holds back (``AssocGrpGRES``) does not stop it;
2. *the backfill pass* (every event, as with a small ``bf_interval``) walks the jobs left, at most
   ``bf_max_job_test``, with a plan (:mod:`slurm_fair.daemon.plan.backfill`) in which each running job holds
   its GPUs until its *expected* end (its latest start plus its time limit, not its real end; one with no
   limit holds them for ever; one past it is expected to end ``BF_RESOLUTION`` from now). A job starts now if
   the GPUs it would take are not in a reservation before its own expected end; otherwise it reserves the
   whole nodes where it can start earliest (Slurm reserves whole nodes) for its expected run, widened to
   ``bf_resolution`` — unless that start is beyond ``bf_window`` or it is held back by a limit (no
   reservation). An untyped job starts on the first type where it fits now, fastest for its class first (or
   in the site-wide node Weight order, ``node_order``, when the cluster has one), and reserves on the type
   where it can start earliest (ties: the one it tries first). A job without a time
   limit that this pass starts gets a limit of a year, as in Slurm (``TimeLimit=365-00:00:00``; the main loop
   leaves it ``UNLIMITED``): the daemon's snapshot shows it, and reads both as no limit.

A job fits when its account stays within its GrpTRES limits — the typed ``gres/gpu:<type>`` limit binds
typed jobs only (as in Slurm: a typed limit does not bind an untyped request) and the ``gres/gpu`` total
binds every job — and when whole GPUs of one type are free for it: on one node when a node of that type is
large enough (the fullest that holds it), else on whole free nodes of that type (a job larger than any
node). A job no type of the cluster can ever hold (or typed to a type its class cannot run on) stays
pending and blocks nobody (Slurm would have refused it at submission). A pending job's reason:
``AssocGrpGRES`` (its account's limit), ``Resources`` (the job that stopped the main loop, or one nothing
can hold), ``Priority`` (behind it), ``BeginTime`` (a requeued job waiting out its restart). Not modelled:
other partitions, QOS, CPUs and memory, node weights within a type and Slurm's own node choice there (the
placement rule above stands for it), ``bf_continue``/``bf_max_time`` and the time a pass takes, killing a job
at its time limit (trace limits are never shorter than the run: see :mod:`.traces`).
"""

from __future__ import annotations

import math
from typing import Mapping

from ..cluster.base import ANY_GPU, YEAR_MINUTES
from ..daemon.plan import place_gpus
from ..daemon.plan.backfill import Plan
from .jobs import BF_RESOLUTION, EPS, Run, SimJob

BF_MAX_JOB_TEST = 500  # Slurm's default bf_max_job_test: pending jobs the backfill pass considers
# A job without a time limit that the backfill pass starts gets a year (seen on the 22.05 testbed: such a job shows
# TimeLimit=365-00:00:00, one the main loop starts UNLIMITED); the daemon reads both as none (cluster.base.known_limit)
BACKFILL_NO_LIMIT = YEAR_MINUTES * 60.0


class BackfillScheduler:
    """The scheduler's passes, mixed into :class:`~slurm_fair.sim.cluster.SimCluster`, whose state they read and
    change: ``jobs``, ``free`` and ``node_gpus`` (GPUs free and configured per node and type), ``limits``,
    ``throughput``, ``gpu_types``, ``node_order``, ``_most`` (the largest job of a type), ``now``, ``bf_window``,
    ``bf_max_job_test``, ``events`` and the change counter ``_changes`` with ``_scheduled`` (what the last pass
    saw)."""

    def _usage(self) -> dict[str, dict[str, int]]:
        use: dict[str, dict[str, int]] = {}
        for j in self.jobs.values():
            if j.state == "RUNNING":
                u = use.setdefault(j.account, {})
                u[j.run_type] = u.get(j.run_type, 0) + j.gpus
                u[ANY_GPU] = u.get(ANY_GPU, 0) + j.gpus
        return use

    def _place(self, gpu_type: str, gpus: int) -> dict[str, int] | None:
        """GPUs of one type for a job: on one node when a node of that type is large enough (the fullest
        node that still holds it all, to keep whole nodes free), else on whole free nodes of that type
        (largest first); None when that is not free now."""
        return place_gpus(self.free, self.node_gpus, gpu_type, gpus)

    def schedule(self) -> None:
        """Slurm's two passes over the pending jobs (module docstring): the main loop in strict priority order,
        then the backfill pass. Nothing to do when nothing it depends on changed since the last call at this
        time."""
        key = (self._changes, self.now)
        if key == self._scheduled:
            return
        pend = sorted((j for j in self.jobs.values() if j.state == "PENDING" and j.eligible <= self.now + EPS),
                      key=lambda j: (-(j.site_factor + j.priority), j.submit, j.job_id))
        if pend:
            use = self._usage()
            behind = self._main_loop(pend, use)
            if behind:
                self._backfill(behind, use)
        self._scheduled = (self._changes, self.now)

    def _types(self, j: SimJob, use: Mapping[str, Mapping[str, int]]) -> list[str] | None:
        """The types ``j`` may start on as far as its account's limits go, in the order it tries them (an untyped
        job: fastest for its class first, or by node Weight, ``node_order``); None when a limit holds it back
        (reason ``AssocGrpGRES``) or when no type can ever hold it (its class cannot run on its typed request, or
        the cluster has too few GPUs of it: Slurm would have refused such a job at submission; reason
        ``Resources``) — such a job blocks nobody."""
        lim = self.limits.get(j.account, {})
        u = use.get(j.account, {})
        if ANY_GPU in lim and u.get(ANY_GPU, 0) + j.gpus > lim[ANY_GPU]:
            j.reason = "AssocGrpGRES"
            return None
        speeds = self.throughput[j.cls]
        if j.requested is not None:
            types = [j.requested] if speeds.get(j.requested, 0) > 0 and self._can_hold(j.requested, j.gpus) else []
            if types and j.requested in lim and u.get(j.requested, 0) + j.gpus > lim[j.requested]:
                j.reason = "AssocGrpGRES"
                return None
        elif self.node_order is not None:  # Slurm's node Weight: one site-wide order, lowest weight first
            types = [t for t in self.node_order if speeds.get(t, 0) > 0 and self._can_hold(t, j.gpus)]
        else:
            types = sorted((t for t in self.gpu_types if speeds.get(t, 0) > 0 and self._can_hold(t, j.gpus)),
                           key=lambda t: (-speeds[t], t))
        if not types:
            j.reason = "Resources"
            return None
        return types

    def _can_hold(self, t: str, gpus: int) -> bool:
        """Some day, with every GPU free, a job of ``gpus`` GPUs of type ``t`` fits (one node, or whole nodes)."""
        most = self._most.get(t)
        return most is not None and gpus <= most

    def _main_loop(self, pend: list[SimJob], use: dict[str, dict[str, int]]) -> list[SimJob]:
        """Start jobs in priority order where they fit now, until one is left pending for resources; a job a
        limit holds back does not stop the loop. Returns the jobs left for the backfill pass, in order."""
        behind: list[SimJob] = []
        for j in pend:
            types = self._types(j, use)
            if types is None:
                continue
            if behind:  # the partition is blocked for this pass
                j.reason = "Priority"
                behind.append(j)
                continue
            for t in types:
                where = self._place(t, j.gpus)
                if where is not None:
                    self._start(j, t, where, use)
                    break
            else:
                j.reason = "Resources"
                behind.append(j)
        return behind

    def _backfill(self, behind: list[SimJob], use: dict[str, dict[str, int]]) -> None:
        """The backfill pass (module docstring): each job (at most ``bf_max_job_test``) starts now where it
        delays no reservation of a higher-priority job, else reserves GPUs at its earliest start."""
        free_now = sum(c for row in self.free.values() for c in row.values())
        if free_now == 0:
            return
        holds = [(j.expected_end(self.now), n, j.run_type, c) for j in self.jobs.values() if j.state == "RUNNING"
                 for n, c in j.nodes.items()]
        plan = Plan(self.now, self.free, self.node_gpus, holds, BF_RESOLUTION)
        for j in behind[:self.bf_max_job_test]:
            if free_now == 0:
                break  # nothing can start now: the reservations left to make would change nothing
            types = self._types(j, use)
            if types is None:
                continue
            d = math.inf if j.time_limit is None else j.time_limit
            for t in types:
                where = plan.fits_now(t, j.gpus, d) if plan.free_now(t) >= j.gpus else None
                if where is not None:
                    self._start(j, t, where, use)
                    if j.time_limit is None:  # as Slurm's backfill does: TimeLimit=365-00:00:00 from now on
                        j.time_limit = BACKFILL_NO_LIMIT
                    plan.start(t, where, d)
                    free_now -= j.gpus
                    break
            else:
                if plan.idle_now(types):  # elsewhere a reservation cannot stop a start now
                    best = None
                    for t in types:
                        r = plan.earliest(t, j.gpus, d, before=self.now + self.bf_window if best is None
                                          else best[0])
                        if r is not None and (best is None or r[0] < best[0]):
                            best = r
                    if best is not None:
                        plan.reserve(best[1], best[0], d)

    def _start(self, j: SimJob, t: str, where: Mapping[str, int], use: dict[str, dict[str, int]]) -> None:
        for n, c in where.items():
            self.free[n][t] -= c
        j.nodes = dict(where)
        j.run_type = t
        j.state = "RUNNING"
        j.started = self.now
        j.done_at_start = j.done
        j.types_used.add(t)
        j.runs.append(Run(self.now, None, t, dict(where)))
        if j.first_start is None:
            j.first_start = self.now
        self.events.append((self.now, "start", j.job_id))
        self._changes += 1
        ua = use.setdefault(j.account, {})
        ua[t] = ua.get(t, 0) + j.gpus
        ua[ANY_GPU] = ua.get(ANY_GPU, 0) + j.gpus
