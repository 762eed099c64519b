"""Demand: which jobs count, what class they are, and what each (account, class) asks for now. Pure.

* **Class of a job** (:func:`job_class`): the first of ``classes.order`` that gives a name: a
  ``class=NAME`` token in ``--comment``, the ``--wckey``, the job name.
* **Demand** (:func:`observe_demand`): per (account, class), the GPUs of its pending and running jobs,
  the smallest pending job, and the GPU types its jobs asked for (None = some job is untyped, any type).
  Per type (:meth:`ClassDemand.type_demand`): the GPUs of its jobs that request that type plus its untyped
  jobs' GPUs (an untyped job can run on any type of its partition) and its pending fair:flex jobs' GPUs
  (slurm-fair typed them; they could use any type), at most the class's total. Per job (the
  ``jobs`` of the problem, for the per-job policies): its GPUs and the seconds of its time limit left (minus
  the time it has run, if running) as its remaining work — Slurm knows no better.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping, Sequence

from ...config import Config
from ...cluster.base import Job, Snapshot, supports_pending_retype
from ...cluster.blocked import LIMIT_REASONS
from ...jobrecord import comment_class
from .binding import settle
from .eligible import counted, startable
from .reclaim import Holder, holders_of

DEFAULT_CLASS = "default"
# Slurm's root account is the parent of every account: a GrpTRES there caps the whole cluster.
NEVER_MANAGED = frozenset({"root"})
# ------------------------------------------------------------------------------------------- jobs


def job_class(job: Job, order: Iterable[str] = ("comment", "wckey", "name")) -> str:
    """The job's class: the first source in ``order`` that names one (see the module docstring)."""
    assigned = getattr(job, "cls", None)  # assigned by the daemon (plan/classcap.py)
    if assigned is not None:
        return assigned
    for src in order:
        if src == "comment":
            found = comment_class(job.comment or "")
            if found is not None:
                return found
        elif src == "wckey":
            wk = (job.wckey or "").lstrip("*")  # Slurm shows a default wckey as "*name"
            if wk:
                return wk
        elif src == "name":
            if job.name:
                return job.name
    return DEFAULT_CLASS


def _in_partitions(partition: str, partitions: Iterable[str]) -> bool:
    parts = tuple(partitions)
    if not parts:
        return True
    return any(p in parts for p in (partition or "").split(","))


def gpu_jobs(snapshot: Snapshot, partitions: Iterable[str] = (), accounts: Iterable[str] = ()) -> list[Job]:
    """Pending and running GPU jobs in the managed partitions (and accounts, if any are named)."""
    accts = set(accounts)
    return [
        j for j in snapshot.jobs
        if j.gpus > 0 and (j.pending or j.running) and _in_partitions(j.partition, partitions)
        and (not accts or j.account in accts)
    ]


def pending_gpus(snapshot: Snapshot, partitions: Iterable[str] = (), accounts: Iterable[str] = ()) -> dict[str, int]:
    """account -> GPUs its pending GPU jobs that could start ask for (its demand, as the round's ``pending_gpus``:
    not held, not waiting on a dependency, a begin time or a reservation), in the managed partitions (and
    accounts, if any are named)."""
    out: dict[str, int] = {}
    for j in gpu_jobs(snapshot, partitions, accounts):
        if startable(j):
            out[j.account] = out.get(j.account, 0) + j.gpus
    return out


def partition_view(snapshot: Snapshot, partitions: Iterable[str] = ()) -> Snapshot:
    """The snapshot as a partition pilot (``cluster.partitions``) sees it: the nodes of its partitions and the
    jobs that may run there (all of them when no partition is named)."""
    parts = tuple(partitions)
    if not parts:
        return snapshot
    return replace(snapshot, nodes=tuple(n for n in snapshot.nodes if any(p in parts for p in n.partitions)),
                   jobs=tuple(j for j in snapshot.jobs if _in_partitions(j.partition, parts)))


def held_elsewhere(snapshot: Snapshot, partitions: Iterable[str] = ()) -> dict[str, dict[str, int]]:
    """account -> type -> GPUs its running jobs hold outside the managed partitions (none when every partition
    is managed). Slurm has no per-partition account limit (``sacctmgr add account … partition=`` is refused by
    Slurm 22.05; only user associations have a partition), so an account's GrpTRES counts these too."""
    parts = tuple(partitions)
    if not parts:
        return {}
    return gpus_in_use(replace(snapshot, jobs=tuple(j for j in snapshot.jobs
                                                    if j.running and not _in_partitions(j.partition, parts))))


@dataclass
class ClassDemand:
    """What one (account, class) asks for now."""

    gpus: int = 0  # GPUs of pending + running jobs
    pending_gpus: int = 0
    running_gpus: int = 0
    pending_jobs: int = 0
    running_jobs: int = 0
    min_pending: int | None = None  # smallest pending job (GPUs), None = nothing pending
    types: set[str] | None = field(default_factory=set)  # requested types; None = some job is untyped
    by_type: dict[str, int] = field(default_factory=dict)  # GPUs of pending+running jobs per requested type ("" = untyped)
    pending_by_type: dict[str, int] = field(default_factory=dict)  # same, pending jobs only
    max_running: int = 0  # GPUs of its largest running job
    # (job id, GPUs, seconds of its time limit left: the limit, minus the time run for a running job;
    # None = no limit known) — the per-job policies' view of the class (``JobClass.jobs``)
    jobs: list[tuple[int, int, float | None]] = field(default_factory=list)
    flexible: dict[str, int] = field(default_factory=dict)  # pending fair:flex jobs' GPUs per given type

    def add(self, job: Job, now: float | None = None, flexible_anywhere: bool = True) -> None:
        """Count ``job``; ``flexible_anywhere``: a pending flexible job may still move to another type (Slurm
        retypes pending jobs from 23.02.6); where it cannot, it counts on its given type only."""
        g = job.gpus
        left = None
        if job.time_limit is not None:
            ran = max(0.0, now - job.start_time) if (now is not None and job.running and job.start_time) else 0.0
            left = max(0.0, job.time_limit * 60.0 - ran)
        self.jobs.append((job.job_id, g, left))
        self.gpus += g
        t = job.gpu_type or ""
        self.by_type[t] = self.by_type.get(t, 0) + g
        if job.pending:
            self.pending_gpus += g
            self.pending_jobs += 1
            self.min_pending = g if self.min_pending is None else min(self.min_pending, g)
            self.pending_by_type[t] = self.pending_by_type.get(t, 0) + g
            if job.flexible and job.gpu_type and flexible_anywhere:
                self.flexible[job.gpu_type] = self.flexible.get(job.gpu_type, 0) + g
        else:
            self.running_gpus += g
            self.running_jobs += 1
            self.max_running = max(self.max_running, g)
        if job.gpu_type is None:
            self.types = None
        elif self.types is not None:
            self.types.add(job.gpu_type)

    def type_demand(self, gpu_types: Iterable[str]) -> dict[str, float]:
        """Most GPUs of each type the class's jobs can use: GPUs of jobs requesting that type plus the
        untyped jobs' GPUs (they run on any type) and the pending flexible jobs' (slurm-fair typed them; they
        could use any type: their demand does not drop off the others), at most the class's total ``gpus``."""
        untyped = self.by_type.get("", 0)
        flex = sum(self.flexible.values())
        return {g: float(min(self.by_type.get(g, 0) + untyped + flex - self.flexible.get(g, 0), self.gpus))
                for g in gpu_types}


def observe_demand(snapshot: Snapshot, cfg: Config) -> dict[tuple[str, str], ClassDemand]:
    """(account, class) -> ClassDemand over the running GPU jobs of ``snapshot`` in the managed partitions and its
    pending ones that could start (:func:`.eligible.counted`: held, dependent, future and reservation-bound jobs
    are not demand), of every account: a pilot (``limits.accounts``) divides only its accounts' part of the GPUs,
    the others' jobs compete for them as they do in Slurm (only the pilot's accounts get limits)."""
    out: dict[tuple[str, str], ClassDemand] = {}
    anywhere = supports_pending_retype(snapshot.slurm_version)  # on 22.05 a typed pending job cannot move
    for j in gpu_jobs(snapshot, cfg.cluster.partitions):
        if j.account in NEVER_MANAGED or not counted(j):  # demand is what could start (.eligible)
            continue
        out.setdefault((j.account, job_class(j, cfg.classes.order)), ClassDemand()).add(j, snapshot.taken_at,
                                                                                         anywhere)
    return dict(sorted(out.items()))


def usable_capacity(snapshot: Snapshot, partitions: Iterable[str] = ()) -> dict[str, int]:
    """Usable GPUs per type on nodes of the managed partitions (every type of the cluster is listed)."""
    parts = tuple(partitions)
    if not parts:
        return snapshot.capacity()
    cap = {t: 0 for t in snapshot.gpu_types()}
    for n in snapshot.nodes:
        if n.usable and any(p in parts for p in n.partitions):
            for t, c in n.gpus.items():
                cap[t] = cap.get(t, 0) + c
    return cap


def received_gpus(snapshot: Snapshot, cfg: Config) -> dict[str, float]:
    """GPUs each account's running GPU jobs hold now."""
    out: dict[str, float] = {}
    for j in gpu_jobs(snapshot, cfg.cluster.partitions):
        if j.running:
            n = sum(j.gpus_allocated.values()) if j.gpus_allocated else j.gpus
            out[j.account] = out.get(j.account, 0.0) + n
    return out


def gpus_in_use(snapshot: Snapshot) -> dict[str, dict[str, int]]:
    """account -> type -> GPUs held by running jobs ("?" for a running job whose type is unknown)."""
    out: dict[str, dict[str, int]] = {}
    for j in snapshot.jobs:
        if not j.running or j.gpus <= 0:
            continue
        row = out.setdefault(j.account, {})
        if j.gpus_allocated:
            for g, n in j.gpus_allocated.items():
                row[g] = row.get(g, 0) + int(n)
        else:
            g = j.gpu_type or "?"
            row[g] = row.get(g, 0) + j.gpus
    return out


def parent_accounts(snapshot: Snapshot) -> frozenset[str]:
    """Accounts some other account names as its parent. A parent's GrpTRES caps its whole subtree, so slurm-fair
    never writes one there: it manages the leaves of the account tree."""
    return frozenset(a.parent for a in snapshot.accounts if a.parent and a.parent != "root")


def managed_accounts(snapshot: Snapshot, demand: Mapping[tuple[str, str], ClassDemand], cfg: Config) -> list[str]:
    """Accounts whose limits slurm-fair sets: ``limits.accounts``, else every leaf account of the tree that has
    GPU jobs or a fair-share share (parents never: :func:`parent_accounts`)."""
    parents = parent_accounts(snapshot)
    if cfg.limits.accounts:
        return sorted(set(cfg.limits.accounts) - parents)
    return sorted(({a.name for a in snapshot.accounts} | {a for (a, _c) in demand}) - NEVER_MANAGED - parents)


@dataclass
class Waiting:
    """An account's startable pending jobs: (GPUs, requested type or None = any type), oldest first; ``ids``:
    their job ids, in the same order (may be left empty: 0 is used); ``runs_on``: for an untyped job, the types
    its class can run on (None, or a list shorter than ``jobs``: any type) — a job never claims a type its class
    cannot run on (issue 28: an untyped 8-GPU job whose class has no K80 speed claimed K80, and five K80 jobs were
    requeued for it, one after another, while it could never start there)."""

    jobs: list[tuple[int, str | None]] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    runs_on: list[tuple[str, ...] | None] = field(default_factory=list)

    def types_of(self, i: int) -> tuple[str, ...] | None:
        """The types job ``i`` can run on (None: any)."""
        return self.runs_on[i] if i < len(self.runs_on) else None

    @property
    def untyped(self) -> int:
        return sum(g for g, t in self.jobs if t is None)

    @property
    def typed(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for g, t in self.jobs:
            if t is not None:
                out[t] = out.get(t, 0) + g
        return out


def waiting_gpus(snapshot: Snapshot, cfg: Config,
                 runs_on: Callable[[Job], Iterable[str]] | None = None) -> dict[str, Waiting]:
    """account -> its startable pending jobs (:func:`startable`) in the managed partitions, highest priority
    first (SiteFactor, then submit time, then id); a job asking for several types (``a100,v100``) counts as
    untyped, and may use only those. ``runs_on(job)``: the types its class can run on (None: any)."""
    out: dict[str, Waiting] = {}
    jobs = [j for j in gpu_jobs(snapshot, cfg.cluster.partitions)
            if j.account not in NEVER_MANAGED and startable(j)]
    for j in sorted(jobs, key=lambda j: (-j.site_factor, j.submit_time, j.job_id)):
        t = j.gpu_type if j.gpu_type and "," not in j.gpu_type else None
        w = out.setdefault(j.account, Waiting())
        w.jobs.append((j.gpus, t))
        w.ids.append(j.job_id)
        can: tuple[str, ...] | None = None
        if t is None:
            listed = tuple(x for x in (j.gpu_type or "").split(",") if x)
            known = tuple(runs_on(j)) if runs_on is not None else None
            can = tuple(x for x in listed if known is None or x in known) if listed else known
        w.runs_on.append(can)
    return out


def idle_gpus(snapshot: Snapshot, partitions: Iterable[str] = ()) -> dict[str, int]:
    """type -> GPUs free now on usable nodes of the managed partitions."""
    return FreeGPUs.of(snapshot, partitions).totals()


def place_gpus(free: Mapping[str, Mapping[str, int]], size: Mapping[str, Mapping[str, int]], t: str,
               n: int) -> dict[str, int] | None:
    """Where a job of ``n`` GPUs of type ``t`` goes now ({node: GPUs}), None when it does not fit: on one node
    of that type with ``n`` free — the fullest such node, keeping whole nodes free — when ``n`` is at most the
    type's largest node, else on whole free nodes of that type, largest first (Slurm's rule as the simulator
    models it; ``free``/``size``: node -> type -> GPUs free / configured)."""
    nodes = [x for x in size if size[x].get(t, 0) > 0]
    if not nodes or n <= 0:
        return None
    if n <= max(size[x][t] for x in nodes):
        one = sorted((free[x].get(t, 0), x) for x in nodes if free[x].get(t, 0) >= n)
        return {one[0][1]: n} if one else None
    whole = sorted((x for x in nodes if free[x].get(t, 0) == size[x][t]), key=lambda x: (-size[x][t], x))
    out, left = {}, n
    for x in whole:
        k = min(size[x][t], left)
        out[x] = k
        left -= k
        if left == 0:
            return out
    return None


class FreeGPUs:
    """The GPUs free now, node by node, and where a job of ``n`` GPUs of one type would go (:func:`place_gpus`);
    ``holders``: the running GPU jobs on these nodes, where their GPUs are (:mod:`.reclaim`)."""

    def __init__(self, free: Mapping[str, Mapping[str, int]], size: Mapping[str, Mapping[str, int]],
                 holders: Sequence[Holder] = ()):
        self.free = {n: {t: int(c) for t, c in row.items()} for n, row in free.items()}
        self.size = {n: {t: int(c) for t, c in row.items()} for n, row in size.items()}
        self.holders = tuple(holders)

    def copy(self) -> "FreeGPUs":
        return FreeGPUs(self.free, self.size, self.holders)

    @classmethod
    def of(cls, snapshot: Snapshot, partitions: Iterable[str] = ()) -> "FreeGPUs":
        parts = tuple(partitions)
        free: dict[str, dict[str, int]] = {}
        size: dict[str, dict[str, int]] = {}
        for n in snapshot.nodes:
            if not n.usable or (parts and not any(p in parts for p in n.partitions)):
                continue
            size[n.name] = {t: int(c) for t, c in n.gpus.items()}
            free[n.name] = {t: max(0, int(c) - int(n.gpus_allocated.get(t, 0))) for t, c in n.gpus.items()}
        jobs = [j for j in snapshot.jobs if j.running and (not parts or _in_partitions(j.partition, parts))]
        return cls(free, size, holders_of(jobs))

    def totals(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for row in self.free.values():
            for t, c in row.items():
                out[t] = out.get(t, 0) + c
        return out

    def _where(self, t: str, n: int) -> dict[str, int] | None:
        return place_gpus(self.free, self.size, t, n)

    def fits(self, t: str, n: int) -> bool:
        return self._where(t, n) is not None

    def take(self, t: str, n: int) -> bool:
        """Place a job of ``n`` GPUs of type ``t``; False (nothing taken) when it does not fit now."""
        where = self._where(t, n)
        if where is None:
            return False
        for x, k in where.items():
            self.free[x][t] -= k
        return True

    def block(self, t: str) -> int:
        """The largest job of type ``t`` that fits now (its GPUs)."""
        nodes = [x for x in self.size if self.size[x].get(t, 0) > 0]
        if not nodes:
            return 0
        biggest = max(self.free[x][t] for x in nodes)
        if biggest < max(self.size[x][t] for x in nodes):
            return biggest
        return max(biggest, sum(self.size[x][t] for x in nodes if self.free[x][t] == self.size[x][t]))


def flexible_as_untyped(snapshot: Snapshot) -> Snapshot:
    """The snapshot with every *pending* flexible job shown untyped: its demand counts as untyped (usable on
    any type) because the daemon can still move it. Use it only where Slurm can retype pending jobs
    (:func:`slurm_fair.cluster.base.supports_pending_retype`); elsewhere a flexible job stays typed."""
    jobs = tuple(replace(j, gpu_type=None) if j.pending and j.flexible and j.gpu_type else j
                 for j in snapshot.jobs)
    return replace(snapshot, jobs=jobs)


def pending_typed(snapshot: Snapshot, startable_only: bool = False) -> dict[str, dict[str, int]]:
    """account -> type -> GPUs of its pending jobs that request that type (held jobs included, unless
    ``startable_only``: then only :func:`startable` ones)."""
    out: dict[str, dict[str, int]] = {}
    for j in snapshot.jobs:
        if j.pending and j.gpu_type and j.gpus > 0 and (not startable_only or startable(j)):
            row = out.setdefault(j.account, {})
            row[j.gpu_type] = row.get(j.gpu_type, 0) + j.gpus
    return out


def typed_claims(snapshot: Snapshot) -> dict[str, int]:
    """type -> GPUs of pending and running jobs (every account) that request exactly that type."""
    out: dict[str, int] = {}
    for j in snapshot.jobs:
        if (j.pending or j.running) and j.gpu_type and j.gpus > 0:
            out[j.gpu_type] = out.get(j.gpu_type, 0) + j.gpus
    return out






@dataclass(frozen=True)
class Triggers:
    """What calls for a round before the next periodic one (:func:`early_triggers`)."""

    newcomers: frozenset[str]  # accounts with startable pending GPU jobs and no GPU demand in the last round
    blocked: frozenset[int]  # startable jobs that could start now if the round changed a limit or their type


def early_triggers(snapshot: Snapshot, last_demand: Mapping[str, int], cfg: Config) -> Triggers:
    """The early-round triggers of a snapshot: accounts that had no share in the last round and now wait
    (they get a guarantee); jobs that wait on their account's limit (a claim made for someone whose jobs have
    since started elsewhere or gone) while a type they can use has enough idle GPUs for them; and, where Slurm
    can retype pending jobs, flexible (``fair:flex``) jobs whose type cannot start them now while another
    type's idle GPUs could (the round moves them, as Slurm alone would have started them there).

    Begin times are settled as the round settles them (:func:`.binding.settle`; the site's limits, which the
    round reads from the store, are left to the round): a job whose begin time is due within a period counts, as
    it will in the round (a job slurm-fair requeued waits out its begin time; one moved a year ahead does not)."""
    snapshot = settle(snapshot, snapshot.taken_at + float(cfg.daemon.period), {})
    free = FreeGPUs.of(snapshot, cfg.cluster.partitions)
    idle = free.totals()
    retype_ok = supports_pending_retype(snapshot.slurm_version)
    newcomers, blocked = set(), set()
    for j in gpu_jobs(snapshot, cfg.cluster.partitions, cfg.limits.accounts):
        if j.account in NEVER_MANAGED or not startable(j):
            continue
        if last_demand.get(j.account, 0) <= 0:
            newcomers.add(j.account)
        typed = j.gpu_type if j.gpu_type and "," not in j.gpu_type else None
        if (j.reason or "").startswith(LIMIT_REASONS):
            if any(free.fits(t, j.gpus) for t in ([typed] if typed else list(idle))):
                blocked.add(j.job_id)
        elif retype_ok and j.flexible and typed and not free.fits(typed, j.gpus):
            if any(free.fits(t, j.gpus) for t in idle if t != typed):
                blocked.add(j.job_id)
    return Triggers(frozenset(newcomers), frozenset(blocked))
