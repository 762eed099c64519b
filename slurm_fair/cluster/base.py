"""The Cluster interface: the only way the rest of slurm-fair observes and changes a Slurm cluster.

Observation returns immutable dataclasses; actions are batched so a round costs few Slurm calls.
Backends: ``cli`` (squeue/scontrol/sinfo JSON + sacctmgr -P; always available) and ``pyslurm``
(in-process, optional). Both pass the same contract tests on the real testbed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Mapping

from ..jobrecord import split_tokens

# Key used in Account.limits and in set_accounts_gpu_limits for the untyped ``gres/gpu`` total.
ANY_GPU = "*"
# Value that clears a limit (sacctmgr's -1).
CLEAR = -1
# Comment token etc/job_submit.lua adds to a job whose untyped GPU request it typed: slurm-fair may move
# the job to another GPU type while it is pending (where Slurm supports that, see supports_pending_retype).
FLEX_TOKEN = "fair:flex"
# Comment token a user adds to say the job checkpoints (it saves its state on the checkpoint signal and resumes
# from it when restarted): with --requeue, upgrade moves may move it (preemption.upgrade = "checkpointing").
# Slurm shows a job's --signal nowhere slurm-fair reads (squeue --json of 22.05 and 24.11 has no such field;
# 22.05's scontrol show job prints none; job_submit.lua's job_desc does not offer warn_signal), so the comment
# is how a job says it.
CHECKPOINT_TOKEN = "fair:checkpoint"
# A job without a time limit shows ``UNLIMITED`` when Slurm's main scheduler started it and
# ``TimeLimit=365-00:00:00`` when the backfill scheduler did (backfill plans such a job with a year: seen on the
# 22.05 testbed, issue 39). Both mean "no limit": a limit of a year or more is read as none (``Job.time_limit``
# None), so nothing slurm-fair decides depends on which scheduler started a job.
YEAR_MINUTES = 365 * 24 * 60


def known_limit(minutes: int | None) -> int | None:
    """A time limit in minutes as slurm-fair reads it: None for none, and for a year or more (:data:`YEAR_MINUTES`)."""
    return None if minutes is None or minutes >= YEAR_MINUTES else int(minutes)


@dataclass(frozen=True)
class Job:
    job_id: int
    name: str
    account: str
    user: str
    partition: str
    state: str  # PENDING, RUNNING, ... (first state if Slurm gives a list)
    reason: str
    priority: int
    submit_time: int  # unix seconds
    start_time: int | None  # unix seconds, None if not started
    gpus_per_node: int  # GPUs requested per node (0 if the job requests none)
    nodes: int  # nodes requested (or allocated when running)
    gpu_type: str | None  # requested GPU type, None = untyped request
    gpus_allocated: Mapping[str, int] = field(default_factory=dict)  # type -> GPUs, running jobs
    comment: str = ""
    wckey: str = ""
    restart_count: int = 0
    site_factor: int = 0
    requeue: bool = False  # Slurm may requeue the job (--requeue, or JobRequeue=1 without --no-requeue)
    time_limit: int | None = None  # minutes; None = unlimited or not known (a year or more: :func:`known_limit`)
    # why a pending job cannot start now whatever slurm-fair does ("" = it could): held, dependency, begin-time,
    # reservation — computed by the backend from Slurm's fields (cluster/blocked.py); such a job is not demand
    blocked: str = ""
    batch: bool = True  # a batch job (sbatch); False = an interactive allocation (salloc), never signalled
    cls: str | None = None  # the class the daemon assigned (plan/classcap.py folds extra classes), else read
    node_gpus: Mapping[str, int] = field(default_factory=dict)  # running: node -> GPUs held there ({} = not known)
    # a pending job's begin time (Slurm's eligible_time, unix seconds; None = not known, 0 in Slurm: held). Once a
    # backend has read it, ``blocked`` is its whole verdict (cluster/blocked.job_blocked_kind; the round settles a
    # begin time due within a round as demand: daemon/plan/binding.py)
    begin_time: int | None = None

    def __post_init__(self) -> None:
        if self.time_limit is not None and known_limit(self.time_limit) is None:  # backfill's year: no limit
            object.__setattr__(self, "time_limit", None)

    @property
    def gpus(self) -> int:
        """Total GPUs the job requests."""
        return self.gpus_per_node * max(self.nodes, 1)

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def flexible(self) -> bool:
        """The comment carries the token ``fair:flex`` (separated by whitespace, ``,`` or ``;``): the
        job's GPU type was chosen by slurm-fair at submission, not by the user."""
        c = self.comment or ""
        return FLEX_TOKEN in c and FLEX_TOKEN in split_tokens(c)

    @property
    def checkpoints(self) -> bool:
        """The job declares it checkpoints: the comment carries the token ``fair:checkpoint`` (as for
        ``fair:flex``) and Slurm may requeue it."""
        return self.requeue and CHECKPOINT_TOKEN in split_tokens(self.comment or "")

    @property
    def running(self) -> bool:
        return self.state == "RUNNING"


@dataclass(frozen=True)
class Node:
    name: str
    state: tuple[str, ...]  # e.g. ("IDLE",), ("MIXED", "DRAIN")
    partitions: tuple[str, ...]
    gpus: Mapping[str, int]  # configured GPUs per type
    gpus_allocated: Mapping[str, int]

    @property
    def usable(self) -> bool:
        bad = {"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING", "FUTURE",
               "POWERED_DOWN", "POWER_DOWN", "MAINTENANCE", "REBOOT_REQUESTED", "REBOOT_ISSUED", "INVALID",
               "UNKNOWN", "INVAL"}
        return not any(s.upper().rstrip("*~#!%$@^-") in bad for s in self.state)


@dataclass(frozen=True)
class Account:
    name: str
    shares: int  # fair-share Shares of the account association (parent=cluster level)
    limits: Mapping[str, int]  # GrpTRES GPU limits: type -> N, ANY_GPU -> untyped total; absent = none
    users: tuple[str, ...] = ()
    parent: str = ""  # parent account ("root" for a top-level account; "" when not known)


@dataclass(frozen=True)
class GpuTypeUsage:
    """One GPU type's GPUs across the snapshot's nodes (:meth:`Snapshot.gpu_types`): configured, allocated to jobs,
    and on nodes that cannot run jobs (``Node.usable`` false: down, draining, not responding, …)."""

    total: int
    allocated: int
    unusable: int


@dataclass(frozen=True)
class Snapshot:
    slurm_version: str
    taken_at: float  # unix seconds
    nodes: tuple[Node, ...]
    jobs: tuple[Job, ...]  # pending and running jobs that request GPUs
    accounts: tuple[Account, ...]
    partitions: tuple[str, ...]

    def gpu_types(self) -> dict[str, GpuTypeUsage]:
        out: dict[str, list[int]] = {}
        for n in self.nodes:
            for t, c in n.gpus.items():
                acc = out.setdefault(t, [0, 0, 0])
                acc[0] += c
                acc[1] += n.gpus_allocated.get(t, 0)
                if not n.usable:
                    acc[2] += c
        return {t: GpuTypeUsage(*v) for t, v in sorted(out.items())}

    def capacity(self) -> dict[str, int]:
        """Usable GPUs per type (configured minus those on down/drained nodes)."""
        return {t: u.total - u.unusable for t, u in self.gpu_types().items()}

    def account(self, name: str) -> Account | None:
        for a in self.accounts:
            if a.name == name:
                return a
        return None


class Cluster(ABC):
    """Observe and act on one Slurm cluster. Every call is bounded by the backend's timeout and raises
    ClusterUnreachable / CommandFailed / Unsupported / ParseError (slurm_fair.cluster.errors)."""

    name: str = "?"

    @abstractmethod
    def version(self) -> str:
        """Slurm version string, e.g. '22.05.8'."""

    @abstractmethod
    def snapshot(self) -> Snapshot:
        """GPU nodes, pending+running GPU jobs, accounts with shares and GPU limits, partitions."""

    @abstractmethod
    def set_accounts_gpu_limits(self, limits: Mapping[str, Mapping[str, int]]) -> None:
        """account -> {gpu type or ANY_GPU: N or CLEAR}; only the given keys change. Batched: accounts
        that get the same settings are written in one sacctmgr call."""

    @abstractmethod
    def set_site_factors(self, factors: Mapping[int, int]) -> None:
        """job id -> SiteFactor for pending jobs; jobs with the same value are set in one call."""

    @abstractmethod
    def set_job_gpu_type(self, job_id: int, gpu_type: str, gpus_per_node: int) -> None:
        """Retype a pending job's GPU request. Raises Unsupported on Slurm < 23.02.6 (broken there)."""

    @abstractmethod
    def signal_job(self, job_id: int, signal: str) -> None:
        """Send a signal to the job's batch shell (scancel --signal=SIG --batch)."""

    @abstractmethod
    def requeue_job(self, job_id: int) -> None:
        """Requeue a job (scontrol requeue)."""

    def cluster_name(self) -> str:
        """Slurm's ``ClusterName`` ("" where the backend names no cluster: the simulator, test doubles)."""
        return ""

    def priority_weights(self) -> int | None:
        """The sum of slurmctld's ``PriorityWeight*`` (``cluster.ctld_config.weights_sum``), read once; None
        where the backend cannot tell (the simulator, test doubles): ``priority.site_factor_max = "auto"`` then
        takes its fallback."""
        return None

    def slurm_user(self) -> tuple[str, int] | None:
        """slurmctld's ``SlurmUser`` as (name, uid), read once (``cluster.ctld_config.slurm_user``): the controller
        hooks run as it, so the spool ingest takes record files it owns. None where the backend cannot tell (the
        simulator, test doubles); raises ClusterError where it could not be read."""
        return None

    def cancel_job(self, job_id: int) -> None:
        """Cancel a job (scancel): ``preemption.unrequeueable = "cancel"`` only."""
        from .errors import Unsupported

        raise Unsupported(f"the {self.name} backend cannot cancel jobs")

    def job_info(self, job_id: int) -> Job | None:
        """One job as Slurm shows it now, in any state (finished ones while slurmctld still knows them; its GPUs
        may be 0), with its SiteFactor where Slurm gives it; None if Slurm does not know the job. Needs no rights
        beyond seeing the job (``slurm-fair why`` runs it as the job's user)."""
        from .errors import Unsupported

        raise Unsupported(f"the {self.name} backend cannot look up a single job")


def version_tuple(v: str) -> tuple[int, ...]:
    parts = []
    for p in v.split("."):
        num = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(num) if num else 0)
    return tuple(parts)


def supports_pending_retype(version: str) -> bool:
    """Changing a pending job's GRES type is broken before 23.02.6."""
    return version_tuple(version) >= (23, 2, 6)
