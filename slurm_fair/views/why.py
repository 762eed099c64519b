"""Why a job waits (``slurm-fair why JOBID``): pure, no I/O.

:func:`explain_job` combines the job as Slurm shows it (:class:`~slurm_fair.cluster.base.Job`, its Slurm
reason first) with the public status file (:mod:`slurm_fair.daemon.status_file`: per account and GPU type the
guarantee, claims, GPUs in use and limits; per type the idle GPUs) into an :class:`Explanation`: a verdict, one
plain sentence, the numbers per GPU type the job can use, and what would change it. It reads no database, so any
user can run it.

Verdicts (:data:`VERDICTS`): ``unknown`` (Slurm does not know the job), ``finished``, ``not-gpu`` (slurm-fair
does not manage it), ``held``, ``dependency``, ``begin-time``, ``reservation`` (Slurm holds it back: it is not demand, no claim is
made for it),
``limit`` (its account's GPU limit, Slurm's AssocGrpGRES/AssocGrpTRES), ``resources`` (no free GPUs of its types),
``priority`` (others go first), ``qos`` (a QOS limit, not slurm-fair's), ``other`` (any other Slurm reason),
``running``, ``running-borrowed`` (its account holds more than its guarantee of a type the job runs on).

Job names and comments are the user's bytes: nothing here prints them; the job name is kept only through
:func:`printable` (control characters escaped, length bounded).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from ..cluster.base import ANY_GPU, Job
from ..cluster.blocked import LIMIT_REASONS, SITE_LIMIT, describe, job_blocked_kind as blocked_kind, limit_binds
from ..daemon.status_file import AccountStatus, PublicStatus
from ..text import printable

if TYPE_CHECKING:  # the record's module is not imported at run time: `why` stays light
    from ..daemon.preemption.record import PreemptionRecord

VERDICTS = ("unknown", "finished", "not-gpu", "held", "dependency", "begin-time", "reservation", "limit", "resources", "priority",
            "qos", "other", "running", "running-borrowed")


@dataclass(frozen=True)
class JobFacts:
    """The job as Slurm shows it (the name escaped by :func:`printable`)."""

    job_id: int
    name: str
    user: str
    account: str
    state: str
    reason: str
    gpus: int
    gpu_type: str | None  # requested type; None = any type
    allocated: Mapping[str, int]  # running: the GPUs it holds per type
    flexible: bool  # its type was chosen by slurm-fair's type map at submission (fair:flex)
    requeue: bool
    submit_time: int
    start_time: int | None
    site_factor: int


@dataclass(frozen=True)
class TypeFacts:
    """One GPU type the job can use, from the status file (None: the file is unavailable)."""

    gpu_type: str
    guarantee: int | None = None  # the account's guarantee (rounded fair share) of the type
    in_use: int | None = None  # GPUs the account's running jobs hold
    claims: int | None = None  # of its guarantee, held for its waiting jobs
    limit: int | None = None  # the account's GrpTRES of the type in Slurm; None = no limit
    idle: int | None = None
    largest_idle_block: int | None = None
    capacity: int | None = None  # usable GPUs of the type
    others_guarantee: Mapping[str, int] = field(default_factory=dict)  # other accounts' guarantees of the type
    others_claims: Mapping[str, int] = field(default_factory=dict)  # other accounts' claims on the type
    borrowers: Mapping[str, int] = field(default_factory=dict)  # accounts above their guarantee: GPUs above


@dataclass(frozen=True)
class StatusFacts:
    available: bool
    error: str = ""  # why it is not available
    round: int | None = None
    written: float | None = None
    age_s: float | None = None
    stale: bool = False
    dry_run: bool = False
    policy: str = ""


@dataclass(frozen=True)
class MoveFacts:
    """An upgrade move slurm-fair made of the job, or began (``daemon/preemption/upgrade.py``): one record of the store's
    preemptions table with a target type (:func:`moves_from_records`)."""

    signalled_at: float | None  # when its checkpoint signal was sent (None: the signal failed)
    from_type: str
    to_type: str
    gpus: int
    state: str  # signalled (in its grace), requeued (moved), resolved (not moved after all), gone, failed
    requeued_at: float | None
    reason: str  # the daemon's: the idle GPUs of the faster type and the time the move is expected to save
    outcome: str = ""  # the last step's message (why a move was resolved, what failed)


@dataclass(frozen=True)
class Explanation:
    job_id: int
    verdict: str
    summary: str  # one plain sentence
    details: tuple[str, ...]
    changes: tuple[str, ...]  # what would change it
    notes: tuple[str, ...]  # about the data (stale status, shadow mode, ...)
    job: JobFacts | None
    types: tuple[TypeFacts, ...]
    total_limit: int | None  # the account's gres/gpu total in Slurm; None = none (or unknown)
    status: StatusFacts
    moves: tuple[MoveFacts, ...] = ()  # its upgrade moves, oldest first (only where the database was readable)


# --------------------------------------------------------------------------------------------- upgrade moves


def moves_from_records(rows: Iterable[PreemptionRecord]) -> tuple[MoveFacts, ...]:
    """The upgrade moves among a job's preemption records (``PreemptionStore.rows(job_id=)``), oldest first.
    Reclaims (no target type) are left out."""
    out = []
    for r in rows:
        if not r.target_type:
            continue
        outcome = r.steps[-1].message if r.steps else ""
        out.append(MoveFacts(
            signalled_at=None if r.signalled_at is None else float(r.signalled_at),
            from_type=printable(r.gpu_type, 32), to_type=printable(str(r.target_type), 32),
            gpus=r.gpus, state=r.state,
            requeued_at=None if r.requeued_at is None else float(r.requeued_at),
            reason=printable(r.reason, 300), outcome=printable(outcome, 300)))
    return tuple(sorted(out, key=lambda m: (m.signalled_at or 0.0)))


def _utc(t: float | None) -> str:
    return "-" if t is None else datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def move_line(m: MoveFacts) -> str:
    """One plain sentence: when slurm-fair moved the job (or began to), from and to which type, and why."""
    what = f"{m.gpus} {m.from_type} -> {m.to_type}"
    if m.state == "requeued":
        return (f"slurm-fair moved it ({what}): checkpoint signal at {_utc(m.signalled_at)}, requeued onto "
                f"{m.to_type} at {_utc(m.requeued_at)}; why: {m.reason}")
    if m.state == "signalled":
        return (f"slurm-fair is moving it ({what}): checkpoint signal sent at {_utc(m.signalled_at)}, it is requeued "
                f"onto {m.to_type} when the grace ends; why: {m.reason}")
    end = f" ({m.outcome})" if m.outcome else ""
    return (f"slurm-fair began to move it ({what}) at {_utc(m.signalled_at)} but did not: {m.state}{end}; "
            f"why it began: {m.reason}")


# --------------------------------------------------------------------------------------------- helpers


def _facts(job: Job) -> JobFacts:
    return JobFacts(job_id=job.job_id, name=printable(job.name), user=printable(job.user, 64),
                    account=printable(job.account, 64), state=printable(job.state, 32),
                    reason=printable(job.reason, 64), gpus=job.gpus, gpu_type=job.gpu_type,
                    allocated={printable(g, 32): int(n) for g, n in job.gpus_allocated.items()},
                    flexible=job.flexible, requeue=job.requeue, submit_time=job.submit_time,
                    start_time=job.start_time, site_factor=job.site_factor)


def _usable_types(job: Job, status: PublicStatus | None) -> list[str]:
    if job.running and job.gpus_allocated:
        return sorted(job.gpus_allocated)
    if job.gpu_type:
        return sorted(job.gpu_type.split(","))
    return sorted(status.types) if status is not None else []


def _type_facts(g: str, account: str, status: PublicStatus | None) -> TypeFacts:
    if status is None:
        return TypeFacts(gpu_type=g)
    acct = status.account(account)
    t = status.types.get(g)
    others = {a: int(v.claims.get(g, 0)) for a, v in status.accounts.items() if a != account and v.claims.get(g, 0)}
    shares = {a: int(v.guarantee.get(g, 0)) for a, v in status.accounts.items()
              if a != account and v.guarantee.get(g, 0)}
    borrowers = {a: int(v.in_use.get(g, 0)) - int(v.guarantee.get(g, 0)) for a, v in status.accounts.items()
                 if int(v.in_use.get(g, 0)) > int(v.guarantee.get(g, 0))}
    return TypeFacts(gpu_type=g, guarantee=int(acct.guarantee.get(g, 0)), in_use=int(acct.in_use.get(g, 0)),
                     claims=int(acct.claims.get(g, 0)), limit=acct.limits.get(g),
                     idle=None if t is None else t.idle, largest_idle_block=None if t is None else t.largest_idle_block,
                     capacity=None if t is None else t.capacity, others_guarantee=dict(sorted(shares.items())),
                     others_claims=dict(sorted(others.items())), borrowers=dict(sorted(borrowers.items())))


def _list(d: Mapping[str, int], unit: str = "") -> str:
    return ", ".join(f"{a} {n}{unit}" for a, n in d.items())


def _status_facts(status: PublicStatus | None, error: str, now: float) -> StatusFacts:
    if status is None:
        return StatusFacts(available=False, error=error or "no status file")
    return StatusFacts(available=True, round=status.round, written=status.written, age_s=status.age(now),
                       stale=status.stale(now), dry_run=status.dry_run, policy=status.policy)


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _notes(st: StatusFacts, status: PublicStatus | None, acct: AccountStatus | None) -> list[str]:
    notes = []
    if not st.available:
        notes.append(f"slurm-fair's status is unavailable ({st.error}): only what Slurm says is shown")
    elif st.stale:
        notes.append(f"slurm-fair's status is {_ago(st.age_s or 0)} old (round {st.round}): the daemon writes it "
                     "every round and poll, so it may be stopped or failing; the numbers below may be out of date")
    if status is not None and status.dry_run:
        notes.append("slurm-fair runs in shadow mode (dry run): it computes shares but sets no limit and no "
                     "priority; the limits shown are the site's own")
    elif status is not None and acct is not None and acct.limits and not acct.managed:
        notes.append("slurm-fair does not set this account's limits (they are the site's own, or limits are not "
                     "managed): ask your administrators about them")
    return notes


# --------------------------------------------------------------------------------------------- the verdict


def _held(job: Job) -> tuple[str, str, list[str]] | None:
    r = job.reason or ""
    jid = job.job_id
    if r.startswith("JobHeldUser"):
        return "held", "it is held by its user", [f"release it: scontrol release {jid}"]
    if r.startswith("JobHeld"):
        return "held", "it is held by an administrator", ["ask your administrators to release it"]
    if r.startswith("DependencyNeverSatisfied"):
        return ("dependency", "its dependency can never be satisfied (a job it depends on failed)",
                [f"cancel it (scancel {jid}) and submit it again, or change its dependency: "
                 f"scontrol update jobid={jid} dependency=..."])
    if r.startswith("Dependency"):
        return "dependency", "it waits for the jobs it depends on", ["the jobs it depends on ending as required"]
    if r.startswith("BeginTime"):
        return "begin-time", "it may not start before its begin time", ["its begin time passing"]
    kind = blocked_kind(job)  # what the backend read from Slurm's other fields (priority 0, hold, begin time …)
    if kind == "reservation":
        return ("reservation", f"its reservation cannot serve it now ({r or 'no reason'})",
                ["its reservation starting (scontrol show reservation), or submitting it outside the reservation"])
    if kind == "held":
        return "held", "it is held (priority 0)", [f"release it: scontrol release {jid}"]
    if kind == "dependency":
        return "dependency", "it waits for the jobs it depends on", ["the jobs it depends on ending as required"]
    if kind == "begin-time":
        return "begin-time", "it may not start before its begin time", ["its begin time passing"]
    return None


HELD_ACROSS = ("the account is held back across all its jobs: one of its running jobs that preemption would take "
               "cannot be requeued (--no-requeue, requeue=0 or an interactive allocation), so its limits are held at "
               "what it runs and it starts no GPU job on any type until the other accounts' jobs it owes GPUs to run "
               "(preemption.unrequeueable)")


def _limit_binds(job: Job, types: list[TypeFacts], total: int | None, acct: AccountStatus | None) -> bool:
    """Whether the account's limits (as the status file has them) keep the job from starting on every GPU type it
    can use, whatever is free."""
    if acct is None or not types:
        return False
    if total is not None and sum(acct.in_use.values()) + job.gpus > total:
        return True
    return all(t.limit is not None and (t.in_use or 0) + job.gpus > t.limit for t in types)


def _site_limit(job: Job, acct: AccountStatus | None) -> tuple[str, list[str], list[str]] | None:
    """A site limit of the account (``acct.site_limits``, the round's ``plan.binding.site_bounds``) that holds the
    job by itself, as the round settles it (issue 41): the job is not demand, and only the site can lift it."""
    site = dict(acct.site_limits) if acct is not None else {}
    held = {**acct.in_use, ANY_GPU: sum(acct.in_use.values())} if acct is not None else {}
    if not site or not limit_binds(site, held, job):
        return None
    keys = [ANY_GPU] if ANY_GPU in site and held[ANY_GPU] + job.gpus > site[ANY_GPU] else [
        t for t in (job.gpu_type or "").split(",") if t in site]
    where = "; ".join(f"GrpTRES gres/gpu{'' if k == ANY_GPU else ':' + k}={site[k]} and it holds {held.get(k, 0)}"
                      for k in keys)
    name = printable(job.account, 64)
    summary = (f"it waits on a GPU limit the site set on account {name}, not slurm-fair's ({job.reason}): {where}")
    return (summary, [describe(SITE_LIMIT, job.reason)],
            [f"your administrators raising or removing the limit (sacctmgr show assoc where account={name}): "
             "slurm-fair never lifts a site's limit", f"a job of account {name} ending (it frees room under the limit)"])


def _limit(job: Job, types: list[TypeFacts], total: int | None, acct: AccountStatus, status: PublicStatus | None
           ) -> tuple[str, list[str], list[str]]:
    held = sum(acct.in_use.values())
    binding = [t for t in types if t.limit is not None and (t.in_use or 0) + job.gpus > t.limit]
    if binding:
        where = "; ".join(f"it may hold at most {t.limit} {t.gpu_type} GPU(s) (GrpTRES gres/gpu:{t.gpu_type}="
                          f"{t.limit}) and holds {t.in_use}" for t in binding)
    elif total is not None:
        where = f"it may hold at most {total} GPU(s) in all (GrpTRES gres/gpu={total}) and holds {held}"
    else:
        where = "the limit's numbers are not in slurm-fair's status"
    why = (job.reason if (job.reason or "").startswith(LIMIT_REASONS) else
           f"Slurm shows {job.reason or 'None'} now; the limit holds it whatever GPUs are free")
    summary = f"it waits on its account's GPU limit ({why}): account {printable(job.account, 64)} — {where}"
    details, changes = [], [f"a job of account {printable(job.account, 64)} ending (it frees room under the limit)"]
    lend = status is not None and status.lend
    if acct.held_across:  # issue 30: preemption cannot be dodged by --no-requeue (daemon/preemption/unrequeueable.py)
        details.append(HELD_ACROSS)
        changes.insert(0, "the jobs of other accounts that its account owes GPUs to starting (the hold ends then)")
    if status is not None and not lend and acct.managed:
        details.append("limits are hard caps here (limits.lend = false): an account may not use more than its "
                       "guarantee, even while GPUs are idle")
    for t in binding or types:
        if t.capacity is not None and t.others_guarantee:
            details.append(f"{t.gpu_type}: {t.capacity} GPU(s) in all, shared by the fair shares of the accounts with "
                           f"GPU jobs: the other accounts' guarantees are {_list(t.others_guarantee)}")
        if t.others_claims and lend:
            details.append(f"{t.gpu_type}: the limit is the type's GPUs minus those held for other accounts' waiting "
                           f"jobs under their guarantees ({_list(t.others_claims)})")
        if t.guarantee is not None and t.in_use is not None and t.in_use >= t.guarantee:
            details.append(f"{t.gpu_type}: the account holds {t.in_use}, at or above its guarantee of {t.guarantee}")
        elif t.guarantee is not None:
            details.append(f"{t.gpu_type}: the account holds {t.in_use} of its guarantee of {t.guarantee}: the next "
                           "slurm-fair round raises its limit to serve its guarantee")
    if lend and any(t.others_claims for t in types):
        changes.append("other accounts' waiting jobs starting or going away (their claims hold the GPUs back)")
    if status is not None:
        changes.append(f"slurm-fair's next round (every {status.period:g} s; sooner when a limit holds a job back "
                       "while GPUs it can use are idle) moves the limits with the guarantees and the waiting jobs")
    return summary, details, changes


def _resources(job: Job, types: list[TypeFacts], status: PublicStatus | None, acct: AccountStatus
               ) -> tuple[str, str, list[str], list[str]]:
    verdict = "priority" if job.reason == "Priority" else "resources"
    idle = ", ".join(f"{t.gpu_type} {t.idle}" for t in types if t.idle is not None)
    if verdict == "priority":
        summary = ("no limit holds it back; jobs with a higher priority go first (Priority); slurm-fair orders "
                   f"pending GPU jobs through SiteFactor ({job.site_factor} for this job: accounts owed the most GPU "
                   "time first)")
    elif job.reason in ("None", ""):
        summary = "no limit holds it back; Slurm has not tried to schedule it yet (reason None): ask again shortly"
    else:
        summary = f"no limit holds it back; it waits for free GPUs of its type(s) ({job.reason})"
    details = []
    if idle:
        details.append(f"idle GPUs now: {idle}")
        if job.gpus > 1 and all((t.largest_idle_block or 0) < job.gpus for t in types if t.idle is not None):
            details.append(f"no node has {job.gpus} idle GPUs of its type(s) (the job needs them on "
                           f"{'one node' if job.nodes <= 1 else f'{job.nodes} nodes'})")
    changes = [f"GPUs of {'its type' if len(types) == 1 else 'its types'} freeing up as other jobs end"]
    for t in types:
        if not t.borrowers:
            continue
        details.append(f"{t.gpu_type}: {_list(t.borrowers, ' above its guarantee')} (borrowed while nobody needed "
                       "them)")
        under = t.guarantee is not None and (t.in_use or 0) + job.gpus <= t.guarantee
        if status is not None and status.preemption.enabled and under:
            changes.append(f"{t.gpu_type}: preemption is on and account {printable(job.account, 64)} is under its "
                           f"guarantee ({t.in_use} of {t.guarantee}): slurm-fair reclaims borrowed GPUs — the "
                           f"newest borrowing jobs get signal {status.preemption.signal} and are requeued after "
                           f"{status.preemption.grace:g} s")
        elif status is not None and status.preemption.enabled:
            changes.append(f"{t.gpu_type}: borrowed GPUs are reclaimed only for an account under its guarantee; "
                           f"{printable(job.account, 64)} holds {t.in_use} of its guarantee of {t.guarantee}")
        elif status is not None:
            changes.append(f"{t.gpu_type}: borrowed GPUs come back when those jobs end (preemption is off)")
    if acct.claims and any(acct.claims.get(t.gpu_type) for t in types):
        details.append("slurm-fair holds GPUs of the account's guarantee for its waiting jobs (claims: "
                       + _list({t.gpu_type: acct.claims[t.gpu_type] for t in types if acct.claims.get(t.gpu_type)})
                       + "): other accounts cannot start jobs on them")
    return verdict, summary, details, changes


def _type_choice(job: Job, status: PublicStatus | None) -> list[str]:
    out = []
    if job.flexible and job.gpu_type:
        out.append(f"its GPU type {job.gpu_type} was chosen at submission by slurm-fair's type map (the job asked "
                   "for any GPU)")
        if status is not None and job.pending:
            out.append("slurm-fair may move it to another type with room while it waits" if status.retype else
                       "this Slurm cannot move a pending job to another type (Slurm < 23.02.6): it keeps "
                       f"{job.gpu_type}; submit with another --gres=gpu:TYPE:N to choose")
    elif job.gpu_type is None and job.pending:
        out.append("it asked for any GPU type: Slurm may start it on any of them")
    if status is not None and (job.flexible or job.gpu_type is None):
        order = status.type_order.get(job.account) or status.type_order.get("*")
        if order:
            out.append(f"new untyped jobs of {printable(job.account, 64)} are given, in order: {', '.join(order)}")
            out.append("a new untyped job no type has room for (and not left untyped) is given the type expected to "
                       "start it first: backfill's plan of the queue, with jobs ending after their class's "
                       "recorded run time, at most their time limits")
    return out


def _running(job: Job, types: list[TypeFacts], status: PublicStatus | None) -> tuple[str, str, list[str], list[str]]:
    where = ", ".join(f"{n} {g}" for g, n in sorted(job.gpus_allocated.items())) or f"{job.gpus} GPU(s)"
    over = [t for t in types if t.guarantee is not None and t.in_use is not None and t.in_use > t.guarantee]
    if not over:
        known = status is not None and types and all(t.guarantee is not None for t in types)
        return ("running", f"it runs on {where}" + (", within its account's guarantee: slurm-fair does not preempt "
                                                      "it" if known else ""), [], [])
    details = [f"{t.gpu_type}: account {printable(job.account, 64)} holds {t.in_use}, {t.in_use - (t.guarantee or 0)} "
               f"above its guarantee of {t.guarantee}: its newest jobs there run on borrowed GPUs" for t in over]
    if status is None or not status.preemption.enabled:
        changes = ["preemption is off: it runs to its end"]
    elif not job.requeue or not job.batch:
        changes = [_unrequeueable_fate(status.preemption)]
    else:
        p = status.preemption
        changes = [f"if another account waits under its guarantee of {', '.join(t.gpu_type for t in over)}, "
                   f"slurm-fair may reclaim borrowed GPUs: the newest borrowing jobs get signal {p.signal} (to "
                   f"checkpoint) and are requeued {p.grace:g} s later; a job that ran less than {p.min_runtime:g} s "
                   "is not picked"]
    return "running-borrowed", f"it runs on {where}, partly or wholly on borrowed GPUs", details, changes


def _unrequeueable_fate(p: Any) -> str:
    """What happens to a running job Slurm cannot requeue while its account runs above its guarantee
    (``preemption.unrequeueable``, daemon/preemption/unrequeueable.py; issue 41: a hold-back ends)."""
    rule = getattr(p, "unrequeueable", "")
    after = float(getattr(p, "ends_after", 0.0) or 0.0)
    if rule not in ("hold-back", "cancel"):
        return ("it cannot be requeued (--no-requeue or an interactive allocation), so slurm-fair never preempts it"
                + (" (preemption.unrequeueable = ignore)" if rule == "ignore" else ""))
    held = ("it cannot be requeued (--no-requeue or an interactive allocation): if another account waits under its "
            "guarantee, its account is held back (it starts no GPU job on any type) and this job")
    if after > 0:
        return (f"{held} is cancelled {after:g} s ({after / 3600:.3g} h) after the hold-back began, unless the "
                f"waiting jobs could start by then (preemption.unrequeueable = {rule})")
    return f"{held} runs on until it ends (preemption.unrequeueable = {rule}, no bound: hold_back_max = 0)"


# --------------------------------------------------------------------------------------------- entry point


def explain_job(job: Job | None, status: PublicStatus | None, now: float, *, job_id: int | None = None,
                status_error: str = "", moves: Iterable[MoveFacts] = ()) -> Explanation:
    """Why ``job`` (None: Slurm does not know ``job_id``) is where it is (module docstring). ``status``: the public
    status file (None: unavailable, ``status_error`` says why). ``moves``: the job's upgrade moves
    (:func:`moves_from_records`; the CLI reads them only where the caller may read the database): each is said
    first among the details."""
    ex = _explain_job(job, status, now, job_id=job_id, status_error=status_error)
    mv = tuple(moves)
    if not mv or ex.job is None:
        return ex
    return replace(ex, details=tuple(move_line(m) for m in mv) + ex.details, moves=mv)


def _explain_job(job: Job | None, status: PublicStatus | None, now: float, *, job_id: int | None = None,
                 status_error: str = "") -> Explanation:
    st = _status_facts(status, status_error, now)
    if job is None:
        jid = int(job_id or 0)
        return Explanation(jid, "unknown", f"Slurm does not know job {jid} (it ended a while ago, or never existed; "
                           "sacct shows past jobs)", (), (), (), None, (), None, st)
    acct = status.account(job.account) if status is not None else None
    types = [_type_facts(g, job.account, status) for g in _usable_types(job, status)]
    total = acct.limits.get(ANY_GPU) if acct is not None else None
    notes = _notes(st, status, acct)
    facts = _facts(job)
    details: list[str] = []
    changes: list[str] = []
    if job.state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "SUSPENDED"):
        verdict, summary = "finished", f"it has ended ({facts.state}): nothing waits"
    elif job.gpus <= 0:
        verdict, summary = "not-gpu", ("it requests no GPU: slurm-fair does not manage it (Slurm reason "
                                       f"{facts.reason or 'None'})")
    elif job.state != "PENDING":
        verdict, summary, details, changes = _running(job, types, status)
        if job.state != "RUNNING":
            summary = f"it is {facts.state.lower()}; " + summary
    elif (held := _held(job)) is not None:
        verdict, summary, changes = held
        period = float(status.period) if status is not None else 0.0
        if verdict == "begin-time" and job.begin_time is not None and period > 0 \
                and float(job.begin_time) <= now + period:  # as the round settles it (daemon/plan/binding.py)
            details = [f"it is counted as demand: its begin time is due within a round ({period:g} s), as after "
                       "a requeue"]
        else:
            details = ["it is not counted as demand: slurm-fair gives its account no share, claim, SiteFactor or "
                       "preemption for it, and holds no GPU for it, until it could start"]
    elif ((job.reason or "").startswith(LIMIT_REASONS) or job.reason in ("Resources", "Priority", "None", "")) \
            and (site := _site_limit(job, acct)) is not None:  # Slurm's reason may lag or name free GPUs (24.11)
        verdict = "site-limit"
        summary, details, changes = site
    elif (job.reason or "").startswith(LIMIT_REASONS):
        verdict = "limit"
        summary, details, changes = _limit(job, types, total, acct or AccountStatus(), status)
    elif job.reason in ("Resources", "Priority", "None", "") and _limit_binds(job, types, total, acct):
        # Slurm names one reason; which depends on when and in what order its scheduler last looked (24.11 shows
        # Resources while no GPU of the type is free, None right after an update, though the limit holds the job)
        verdict = "limit"
        summary, details, changes = _limit(job, types, total, acct or AccountStatus(), status)
    elif job.reason in ("Resources", "Priority", "None", ""):
        verdict, summary, details, changes = _resources(job, types, status, acct or AccountStatus())
    elif (job.reason or "").startswith("QOS"):
        verdict, summary = "qos", (f"it is held back by a QOS limit ({facts.reason}): set by your administrators, "
                                   "not by slurm-fair")
        changes = ["ask your administrators (sacctmgr show qos shows the limits)"]
    else:
        verdict, summary = "other", (f"Slurm holds it back for a reason slurm-fair does not set ({facts.reason}); "
                                     "see the Slurm documentation of job reason codes")
    if verdict in ("qos", "other") and blocked_kind(job) == "cannot-start":  # issue 30: only what could start
        details = ["it is not counted as demand: free GPUs would not start it, so slurm-fair gives its account no "
                   "share, claim, SiteFactor or preemption for it"] + list(details)
    if verdict not in ("unknown", "finished", "not-gpu"):
        details = _type_choice(job, status) + details
    return Explanation(job.job_id, verdict, summary, tuple(details), tuple(changes), tuple(notes), facts,
                       tuple(types), total, st)
