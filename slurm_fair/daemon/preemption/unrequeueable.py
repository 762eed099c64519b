"""Preemption cannot be dodged: what happens to a job preemption would take but Slurm cannot requeue. Pure.

A running job can escape the checkpoint-signal → grace → requeue flow (:mod:`.decide`) three ways: it was
submitted with ``--no-requeue`` (or the site runs ``JobRequeue=0``), its user runs ``scontrol update jobid=N
requeue=0`` during the grace (the requeue then fails: "Requested operation is presently disabled"), or it is an
interactive allocation (``salloc``: Slurm requeues only batch jobs, and ``scancel --batch`` has no batch shell to
signal). Such a job, when its account is over its guarantee on the job's GPU type and preemption would take it
(every other condition of a new signal holds, or its grace just ended with its account still over while someone
waits), is handled by ``preemption.unrequeueable``:

* ``hold-back`` (default): the job keeps running, its account's limits on that type (and its untyped total)
  are lowered by the job's GPUs, and, while the demand it was held back for still waits (``for_job``: the waiting
  job of a claim; without one, another account's waiting jobs on that type), the account is held back across
  all its jobs (issue 30): its limits on every type and its untyped total are held at what it runs now, minus its
  running held-back GPUs — it starts no new GPU job anywhere, and GPUs its jobs free are the owed account's. The
  hold-back ends when that demand no longer waits (the job it was for started, ended or cannot start), not when
  the held-back job ends — and it is bounded (issue 41: two ``--no-requeue`` jobs above their account's guarantee
  kept it for as long as their time limits): a job still held back ``preemption.hold_back_max`` seconds later
  (default 4 h; 0 = no bound) while its account is still over its guarantee there and someone waits is
  cancelled as under ``cancel`` (the same record and reason); ``why`` and ``explain`` say when.
* ``cancel``: the same hold-back, then, ``preemption.cancel_grace`` seconds later, ``scancel`` if its account is
  still over its guarantee there while someone waits (else the hold-back ends: ``resolved``) — interactive
  allocations (``salloc``, ``srun``) too (issue 30: one absorbed the hold-back and was never cancelled) — and, if
  the owed job needs more GPUs than that job frees, the account's other non-requeue-able jobs on that type, newest
  first, as many as the owed job needs (never more than the account holds above its guarantee).
* ``ignore``: the job is only listed among the skipped candidates (the behaviour before this rule).

Interactive allocations are counted as usage like any running job, and are never signalled.

The rule's state is a preemption record in state :data:`HELD_BACK` (open until the demand it was for no longer
waits: ``resolved``, or ``gone`` when its job has ended too), with its steps and an event; ``explain`` and ``why``
say why the account's pending jobs wait, and the round's details have the limits lowered and held per account.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from ...cluster.base import ANY_GPU, Job
from ...cluster.blocked import job_blocked_kind
from . import record as _states
from .record import PreemptionRecord
from .steps import Action

if TYPE_CHECKING:  # not at run time: waiting imports daemon/plan, whose decide imports this module
    from .waiting import WaitingGPUs

HOLD_BACK, CANCEL, IGNORE = "hold-back", "cancel", "ignore"
HELD_BACK = _states.HELD_BACK  # a preemption record's state while the rule holds its account back
# a non-requeue-able job preemption would take beyond the excess another held-back job already stands for
ACROSS = ("{nr}; not held back itself (at most the excess is), but {a} is held back across all its jobs: it starts "
          "no GPU job on any type until the demand it owes runs (preemption.unrequeueable)")


def why_not_requeueable(job: Job) -> str | None:
    """Why Slurm cannot requeue the job (None: it can)."""
    if not job.batch:
        return "an interactive allocation (salloc): Slurm requeues only batch jobs"
    if not job.requeue:
        return "not requeue-able (--no-requeue, scontrol update requeue=0, or JobRequeue=0)"
    return None


def acts(action: str) -> bool:
    """The rule does something (``hold-back`` or ``cancel``)."""
    return action in (HOLD_BACK, CANCEL)


def end_after(cfg: object) -> float:
    """Seconds a held-back job runs on before it is cancelled (``cfg``: the ``[preemption]`` section):
    ``cancel_grace`` under ``cancel``, ``hold_back_max`` under ``hold-back`` (0: never), 0 otherwise."""
    rule = str(getattr(cfg, "unrequeueable", IGNORE))
    if rule == CANCEL:
        return float(getattr(cfg, "cancel_grace", 0.0))
    if rule == HOLD_BACK:
        return float(getattr(cfg, "hold_back_max", 0.0))
    return 0.0


def ends(action: str, grace: float) -> bool:
    """Held-back jobs are cancelled once their time is over: always under ``cancel``, under ``hold-back`` when
    ``hold_back_max`` > 0."""
    return action == CANCEL or (action == HOLD_BACK and grace > 0)


def cancel_due(action: str, job: Job, since: float, cancel_grace: float) -> float | None:
    """When a job held back since ``since`` is cancelled: ``since`` + ``cancel_grace`` (:func:`end_after`) under
    ``cancel``, and under ``hold-back`` when it is bounded; None: never. An interactive allocation too (issue 30)."""
    if not ends(action, float(cancel_grace)):
        return None
    return float(since) + float(cancel_grace)


@dataclass(frozen=True)
class HoldBack:
    """What open hold-backs do to the round's limits (:func:`penalties`)."""

    held: dict[str, dict[str, int]] = field(default_factory=dict)  # account -> type -> GPUs of running held-back jobs
    # account -> type (and ANY_GPU) -> the most it may hold: what it runs now minus its running held-back GPUs; a
    # type missing here is 0 (an account held back across all its jobs starts nothing anywhere)
    frozen: dict[str, dict[str, int]] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)  # account -> the demand it is held back for

    def __bool__(self) -> bool:
        return bool(self.held or self.frozen)


def startable(job: Job) -> bool:
    """A pending job Slurm could start once GPUs and limits allow (as ``plan/eligible.py``; read here from the
    light module, which does not load the planning code)."""
    return job.pending and not job_blocked_kind(job)


def _can_use(job: Job, gpu_type: str) -> bool:
    return job.gpu_type is None or gpu_type in job.gpu_type.split(",")


def owed_waits(record: PreemptionRecord, jobs: Mapping[int, Job]) -> tuple[bool, str]:
    """Whether the demand a hold-back was for still waits, and what it is (or why it no longer waits): the job it
    was for (``for_job``) while it is pending and could start (``plan/eligible.py``); without one, another
    account's pending jobs that could start on its type."""
    if record.for_job is not None:
        j = jobs.get(record.for_job)
        if j is None:
            return False, f"the job it was for ({record.for_job}) is gone"
        if j.running:
            return False, f"the job it was for ({record.for_job}, {j.account}) has started"
        if not startable(j):
            return False, f"the job it was for ({record.for_job}) cannot start ({j.state}, {j.reason or 'no reason'})"
        return True, f"job {record.for_job} of {j.account} waits for {record.gpu_type}"
    owed = sorted({j.account for j in jobs.values() if j.account != record.account and j.gpus > 0 and startable(j)
                   and _can_use(j, record.gpu_type)})
    if not owed:
        return False, f"no other account's job waits for {record.gpu_type} any more"
    return True, f"{', '.join(owed)} wait{'s' if len(owed) == 1 else ''} for {record.gpu_type}"


def freeze(held: Mapping[str, Mapping[str, int]], jobs: Iterable[Job], why: Mapping[str, str]) -> HoldBack:
    """The :class:`HoldBack` of the accounts in ``why`` (held back across all their jobs) and ``held`` (per type,
    GPUs of their running held-back jobs): each may hold at most what it runs now minus those, on every type and
    in all (never below 0)."""
    use: dict[str, dict[str, int]] = {}
    for j in jobs:
        if j.running and j.account in why:
            row = use.setdefault(j.account, {})
            for t, n in j.gpus_allocated.items():
                row[t] = row.get(t, 0) + int(n)
    frozen: dict[str, dict[str, int]] = {}
    for a in sorted(why):
        mine, minus = use.get(a, {}), held.get(a, {})
        row = {t: max(0, n - int(minus.get(t, 0))) for t, n in sorted(mine.items())}
        row[ANY_GPU] = max(0, sum(mine.values()) - sum(int(n) for n in minus.values()))
        frozen[a] = row
    return HoldBack({a: dict(sorted(r.items())) for a, r in sorted(held.items()) if r}, frozen,
                    {a: why[a] for a in sorted(why)})


def penalties(records: Iterable[PreemptionRecord], jobs: Sequence[Job]) -> HoldBack:
    """What the open held-back ``records`` do to the limits now: ``held`` has the GPUs of their jobs that still
    run (the account's limits on that type are lowered by them); an account whose record's demand still waits
    (:func:`owed_waits`) is held back across all its jobs (``frozen``), even after the held-back job ended — the
    GPUs it freed are the owed account's. A record whose demand no longer waits holds nothing (the next decision
    closes it)."""
    by_id = {j.job_id: j for j in jobs}
    held: dict[str, dict[str, int]] = {}
    why: dict[str, str] = {}
    for r in records:
        waits, what = owed_waits(r, by_id)
        if not waits:
            continue
        why.setdefault(r.account, f"{what} (job {r.job_id} could not be requeued)")
        job = by_id.get(r.job_id)
        if job is None or not job.running:
            continue
        n = int(job.gpus_allocated.get(r.gpu_type, r.gpus))
        row = held.setdefault(r.account, {})
        row[r.gpu_type] = row.get(r.gpu_type, 0) + n
    return freeze(held, jobs, why)


def hold_back(limits: Mapping[str, Mapping[str, int]], held: HoldBack | Mapping[str, Mapping[str, int]],
              capacity: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """The limits with each held-back account's lowered: per type by its held-back GPUs there, and its untyped
    total (``ANY_GPU``) by all of them; an account held back across all its jobs (``HoldBack.frozen``) also gets
    at most what it runs now, minus those, on every type of ``capacity`` and in all. A type or total the account
    has no limit on counts as the capacity (no limit = all of it). Never below 0. Accounts not in ``limits`` (not
    managed) are left out: nothing to lower."""
    hb = held if isinstance(held, HoldBack) else HoldBack({a: dict(v) for a, v in held.items()})
    out = {a: dict(v) for a, v in limits.items()}
    total = sum(int(c) for c in capacity.values())
    for a, per in hb.held.items():
        if a not in out or not per:
            continue
        row = out[a]
        for t, n in per.items():
            base = row.get(t, capacity.get(t, 0))
            row[t] = max(0, int(base) - int(n))
        base_any = row.get(ANY_GPU, total)
        row[ANY_GPU] = max(0, int(base_any) - sum(int(n) for n in per.values()))
    for a, cap in hb.frozen.items():
        if a not in out:
            continue
        row = out[a]
        for t in sorted(set(capacity) | (set(cap) - {ANY_GPU})):
            row[t] = min(int(row.get(t, capacity.get(t, 0))), int(cap.get(t, 0)))
        row[ANY_GPU] = min(int(row.get(ANY_GPU, total)), int(cap.get(ANY_GPU, 0)))
    return out


def also_cancelled(account: str, gpu_type: str, first: int, need: int, excess: int, running: Iterable[Job],
                   taken: set[int]) -> list[Job]:
    """``unrequeueable = "cancel"``: the account's other non-requeue-able jobs on ``gpu_type`` cancelled with its
    held-back job ``first`` (``first`` GPUs), newest first, while the owed demand needs more GPUs (``need``) and
    the account still holds more than its guarantee there (``excess``, before ``first``); ``taken``: jobs already
    handled."""
    out: list[Job] = []
    need, excess = need - first, excess - first
    for j in sorted(running, key=lambda j: (-(j.start_time or 0), -j.job_id)):
        if need <= 0 or excess <= 0:
            break
        g = int(j.gpus_allocated.get(gpu_type, 0))
        if (j.account != account or not j.running or g <= 0 or j.job_id in taken or why_not_requeueable(j) is None
                or g > excess):
            continue
        out.append(j)
        need, excess = need - g, excess - g
    return out


def without_hold_back(limits: Mapping[str, Mapping[str, int]], held: Mapping[str, Mapping[str, int]]
                      ) -> dict[str, dict[str, int]]:
    """The limits before :func:`hold_back` lowered them (per type; what preemption enforces with hard caps: the
    held-back job already counts against its account there, so lowering the target too would take its GPUs twice)."""
    out = {a: dict(v) for a, v in limits.items()}
    for a, per in held.items():
        if a in out:
            for t, n in per.items():
                if t in out[a]:
                    out[a][t] = int(out[a][t]) + int(n)
    return out


def held_back_steps(history: Sequence[PreemptionRecord], running: Mapping[int, Job], known: Mapping[int, Job],
                    excess: dict[str, dict[str, int]], waiting: WaitingGPUs, idle: Mapping[str, int], now: float,
                    rule: str, limits: Mapping[str, Mapping[str, int]], use: Mapping[str, Mapping[str, int]],
                    word: str, grace: float | None = None) -> list[Action]:
    """The held-back jobs' steps in a round's decision (:func:`.decide.decide`): the hold-back ends once the
    demand it was for no longer waits (the job it was for started, ended or cannot start; without one, nobody
    under its share waits for the type):
    ``resolve``, or ``gone`` when the held-back job has ended too. A held-back job that ended while that demand
    still waits keeps its record open: its account stays held, and the GPUs it freed are the owed account's. With
    ``unrequeueable = "cancel"``, once their cancel time passed, ``cancel`` while their account is still over on
    that type and someone waits (the GPUs count as freed) — and the account's other non-requeue-able jobs there,
    newest first, as many GPUs as the owed job still needs — else ``resolve`` (the hold-back ends)."""
    out: list[Action] = []
    taken: set[int] = set()
    for r in sorted((r for r in history if r.state == HELD_BACK), key=lambda r: r.id):
        job = running.get(r.job_id)
        waits, what = owed_waits(r, known)
        if waits and r.for_job is None and waiting.available(r.gpu_type) <= 0:
            waits, what = False, f"no account under its share waits for {r.gpu_type} any more"
        if not waits:
            kind, ran = ("gone", "it has ended and ") if job is None else ("resolve", "")
            out.append(Action(kind, r.job_id, r.account, r.gpu_type, r.gpus,
                              f"{ran}{what}: the hold-back on its account ends", record_id=r.id, for_job=r.for_job))
            continue
        ending = acts(rule) if grace is None else ends(rule, grace)  # grace: end_after (hold_back_max 0: never)
        due = r.requeue_at
        if due is None and ending and grace and r.created is not None:  # held back before hold_back_max existed
            due = float(r.created) + float(grace)
        if job is None or not ending or due is None or now < due:  # salloc/srun too
            continue
        g = int(job.gpus_allocated.get(r.gpu_type, r.gpus))
        ex, avail = excess.get(r.account, {}).get(r.gpu_type, 0), waiting.available(r.gpu_type)
        if ex > 0 and avail > 0:
            owed = known.get(r.for_job) if r.for_job is not None else None
            need = (max(0, owed.gpus - int(idle.get(r.gpu_type, 0))) if owed is not None else min(ex, avail))
            taken.add(r.job_id)
            more = also_cancelled(r.account, r.gpu_type, g, need, ex, running.values(),
                                     taken | {x.job_id for x in history if x.state == HELD_BACK})
            out.append(Action("cancel", r.job_id, r.account, r.gpu_type, g,
                              f"{_over(rule)}; {r.account} still uses {use[r.account][r.gpu_type]} {r.gpu_type} GPUs "
                              f"with a {word} of {int(limits[r.account][r.gpu_type])} and accounts under their share "
                              f"can start {avail} there; it cannot be requeued (preemption.unrequeueable = {rule})",
                              record_id=r.id, for_job=r.for_job))
            for m in more:
                mg = int(m.gpus_allocated.get(r.gpu_type, 0))
                out.append(Action("cancel", m.job_id, m.account, r.gpu_type, mg,
                                  f"cancelled with held-back job {r.job_id}: {r.account}'s other job on {r.gpu_type} "
                                  f"is {why_not_requeueable(m)}, and {what} needing {need} GPUs "
                                  f"(newest first; preemption.unrequeueable = {rule})", for_job=r.for_job))
                taken.add(m.job_id)
            freed = g + sum(int(m.gpus_allocated.get(r.gpu_type, 0)) for m in more)
            excess[r.account][r.gpu_type] = ex - freed
            waiting.take(r.gpu_type, freed)
        else:
            why = (f"{r.account} is no longer above its {r.gpu_type} {word}" if ex <= 0 else
                   f"no account under its share waits for {r.gpu_type} any more")
            out.append(Action("resolve", r.job_id, r.account, r.gpu_type, g,
                              f"resolved, not cancelled: {why}; the hold-back ends", record_id=r.id,
                              for_job=r.for_job))
    return out


def _over(rule: str) -> str:
    return ("held back for preemption.hold_back_max and its account still owes" if rule == HOLD_BACK
            else "cancel_grace over")
