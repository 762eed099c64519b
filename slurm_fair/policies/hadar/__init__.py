"""Hadar (Sultana, Xu, Yuan, Chen, Tzeng, 2024; paper 004): task-level heterogeneity-aware scheduling by the
online primal-dual admission rule with exponential per-type prices.

Hadar decides *per job*: a job j of W_j GPUs (a gang: all its workers at once, the paper's constraint (1e))
may put its workers on several GPU types, and then runs at the speed of its slowest worker (constraint
(1b): x_j = min{X_j^r : w_j^r > 0}, the parameter-synchronization barrier). The paper's example (§II-A): J1 on
two V100s and one K80 runs at min(40, 30) = 30. Every type r has a price per GPU that grows exponentially
with the GPUs of that type already given out in the round; a job is admitted when its utility beats the
price of the GPUs it takes (Algorithm 2, FIND_ALLOC lines 28–33), and the prices then rise (lines 10–11).
The allocation ``x[l, r]`` is the sum over the admitted jobs of class l of the type-r GPUs they take; these
per-tenant per-type totals are what the daemon applies as limits.

Jobs. A class's jobs are the ``jobs`` it lists, or, when it lists none, ``JobClass.job_list``'s made-up
jobs: one 1-GPU job of ``DEFAULT_REMAINING`` seconds per GPU of its demand (per usable GPU when its demand is
unlimited); the notes say which classes got them. Made-up jobs are counted, never built: a class stands in
the queue once (a ``Job`` with ``copies``) and its 1-GPU jobs are decided one at a time until the first is
refused (the rest are identical, and prices only rise within a round), so a class without demand on a large
cluster costs the GPUs it gets, not one job per GPU of the cluster (issue 22: 76 s at 1 000 tenants before).
``remaining`` is the job's work in seconds on
its class's slowest usable type, whose normalized speed is 1 (``VirtualUsers.speed``). A job can use type r
when its class has a speed there and at least one whole GPU of room under its per-type cap; it fits when
W_j GPUs of such types are free and within its class's caps (its per-type caps and total demand, less what
the class's earlier admitted jobs took). A job's speed on a placement s is x_j(s) = min over the types it
uses of the class's normalized speed S_l^r (eq. 1b).

Time. Hadar is round-based (Algorithm 1): one call of this policy is one scheduling round, and a time slot
is a round of ``ROUND_SECONDS`` = 360 s (the paper's 6-minute rounds, §IV-A). Slot 0 is this round; a job
admitted now runs from now until it completes, holding its GPUs in the first D_j = ⌈ρ_j / x_j⌉ slots. Its
utility does not count the time it already waited (a_j is taken as now: a problem carries no clock, and the
paper's U_j(f_j − a_j) would make a job that waited longer worth less). A job admitted now holds its GPUs
for at least this round, so its work counts as at least one round on its slowest usable type:
ρ_j = max(remaining_j / ROUND_SECONDS, Smin_j) rounds of one worker at normalized speed 1 per worker (E_j N_j =
W_j ρ_j iterations, in the paper's terms), with Smin_j / Smax_j the slowest / fastest speed among the types
job j can use.

Utility (the paper's special case, §III-A): the *effective throughput*, iterations over completion time,
U_j(d) = E_j N_j / d = W_j ρ_j / d. Run now on placement s it completes in d = ρ_j / x_j(s) rounds, so
U_j = W_j x_j(s): the gang's normalized throughput at its slowest worker's speed.

Prices (eq. 5–8). With γ^r the type-r GPUs given out so far this round and c^r the type's GPUs:

* eq. 5:  k^r(γ^r) = U_min (U_max^r / U_min)^(γ^r / c^r);
* eq. 8:  t_j^min = ρ_j / Smax_j and t_j^max = ρ_j / Smin_j rounds (M_j = W_j: the iterations are shared by
  the job's workers; t_j^max >= 1 by the clamp on ρ_j);
* eq. 6:  U_max^r = max_j U_j(t_j^min) / w_j^r over the jobs that can use type r, with w_j^r = W_j (all its
  workers on type r), i.e. the largest Smax_j among them: the most utility a job can get per GPU;
* eq. 7:  U_min = 1/(4η) min_j U_j(T) / (t_j^max Σ_r w_j^r) = min_j Smin_j / (4ηT), the same for every type;
  T (the horizon) = max_j t_j^max, the round by which every job admitted now has finished even on its slowest
  type; η = T·C / min_j (t_j^max W_j) with C = Σ_r c^r, the smallest η that meets the proof's condition
  1/η <= t_j^max Σ_r w_j^r / (Σ_t Σ_r c^r) for every job (Thm 2, eq. 9).

The parameters are computed over the round's *candidate* jobs, those that fit their class on an empty cluster
(a job that never fits takes no part). Then U_min <= min_j Smin_j / (4T) < every job's utility per GPU, so the
first GPU of a type is cheap enough for any job ("the price starts low enough to accept the incoming job"),
and a full type costs U_max^r >= every job's utility per GPU ("high enough to block other jobs"); a GPU of
type r costs more than x once γ^r / c^r > ln(x / U_min) / ln(U_max^r / U_min). A type no
candidate can use keeps the flat price U_min (nobody asks for it).

Admission (eq. 3a, 4 and FIND_ALLOC). Prices are kept per time slot: γ^r(t) is the type-r GPUs held in slot
t by the jobs admitted so far this round and k^r(t) follows eq. 5 per slot. For job j the best schedule is
s* = argmax_s φ_j(s), φ_j(s) = U_j(s) − Σ_{t<D(s)} Σ_r k^r(t) w_j^r(s): the paper's price *over the schedule*
(eq. 3a: every slot the job holds its GPUs in is paid for), at the prices before the job (Definition 1
charges k^{j−1}), over the placements s of its W_j workers on the GPUs free now within its class's caps (all
admitted jobs start now, so γ^r(t) only falls with t: a job that fits slot 0 fits all its slots). A long job
pays for every round it will hold its GPUs, so at equal utility per GPU the short job wins a contested GPU
(the paper aims at the average JCT). φ_j is found exactly (``admit.find_schedule``: per candidate
bottleneck θ, the cheapest W_j GPUs at the θ-schedule's price among the types at least that fast; ties keep
the faster bottleneck). The job is admitted when μ_j = φ_j(s*) > 0 (line 30); then γ^r(t) += w_j^r for
t < D_j and the prices follow eq. 5. Before issue 22 one round's price was charged whatever the job's length.

Order and ties. The paper's queue is in arrival order (Algorithm 1 line 3, Algorithm 2 walks Q by index).
When every listed job id is a whole number (the daemon's: Slurm job ids, given in submission order; a
requeued job keeps its id, so its first arrival), jobs are taken by id; otherwise (ids chosen by hand) by
place in their class's job list, every class's first job before any class's second, classes in the
problem's order. The made-up classes come after the listed jobs (they have no arrival); as jobs arriving
together they are taken shortest first (remaining / Smin), then the larger Smax (the more a GPU can be worth
to it: the paper maximizes total utility), and classes equal in both round-robin (every such class's first
1-GPU job before any one's second), in the problem's order. This is the order the made-up jobs had before
issue 22; a round-robin over all made-up classes instead lost 24-55 % of the admitted jobs' utility on the
Philly-like benchmark instances (slow-gaining classes took fast GPUs while they were cheap).
Before issue 22 every job was taken shortest-remaining-first. Tenant weights play no part in the admission
(the paper has none); they only split the idle GPUs handed out at the end. A job of a class whose job of
the same size and remaining work was turned away earlier in the round is turned away too without a search
(prices only rise and room only shrinks within a round, so its best φ cannot have become positive).

Work conservation. The rule can leave GPUs idle on purpose (it keeps expensive GPUs for jobs worth more,
and a job that does not fit whole is not placed), so afterwards ``common.fill_idle`` hands every idle GPU a
class below its caps can use to those classes, by weight. The paper does not do this: Algorithm 1 runs the
admitted jobs only, and a GPU its prices withheld stays idle until a later round. It is kept because the
daemon's limits are per tenant and type, not per job, and an idle GPU a tenant below its demand could use
would make the site slower than Slurm alone. Measured (issue 22, Philly-like instances, 300 and 1 000
tenants): the admitted jobs hold 70-82 % of the GPUs and fill_idle adds 1.2-3.4 % throughput. These are fractional per-type limits, not job
placements: a class may get GPUs that fit none of its jobs whole, and ``job_placements`` lists only the
admitted jobs. fill_idle only adds, so every admitted job keeps its placement.

Guarantees. Always: no class exceeds its demand or a per-type cap, no type its capacity, and no GPU stays
idle while a class below its caps could use it (fill_idle); a job is placed whole on W_j GPUs or not at all
(before fill_idle). From the paper: Theorem 2, the admitted jobs' total utility Σ_j W_j x_j is within a factor
2α of the best choice of jobs and placements for the round (P2), α = max(1, max_r ln(U_max^r / U_min)), via
Lemma 1 (D_0 = U_min·C <= OPT/2 holds here: U_min·C <= min Smin · min W / (4T) <= OPT / 4) and Lemmas 2–3, whose
allocation-cost relationship is the differential one: it holds in the limit of jobs small against a type's
capacity (the paper's "the resource demand of a job j is expected to be less than the capacity"); a job
taking a share δ of a type loosens it by the factor (R^δ − 1)/(δ ln R), R = U_max^r / U_min. The paper's P2
also has no per-class caps shared by several jobs (each job's schedules are its own); with ``demand`` and
``type_demand`` in force the bound is the paper's argument, not re-proved here. The notes give α.
Not claimed, and broken in general: sharing incentive, envy-freeness (an early job may take a whole type
while a later class gets nothing it can use; see ``tests/policies/test_hadar.py``), strategy-proofness (a class that
overstates its speed on a type raises what its jobs are worth per GPU there, U_j = W_j x_j, so they outbid
other jobs for it), max-min fairness of any kind.

Not implemented from the paper. Servers: the problem has one pool per GPU type, so there is no consolidation
on few machines, no communication cost between machines and no bandwidth resource (FIND_ALLOC lines 24–27, the
packed/unpacked variants). Waiting time in the utility (a_j is taken as now, see Time) and other utilities: the paper's framework can
express makespan or finish-time fairness through U_j; only its effective-throughput utility is offered.
Jobs scheduled to start in a later slot: every schedule starts now (Algorithm 1 decides each round for the
current round; a job not admitted waits in the queue). The
round length is the constant ``ROUND_SECONDS``, not the daemon's period (a policy is a function of the
problem alone); it only enters U_min, through t_j^max and T. Algorithm 2's recursion over
subsets of the queue (lines 14–21) is not run: as printed it keeps the branch of smaller total price-weighted
cost, which admitting nothing always wins, the per-round objective it should maximize instead is not stated,
and over subsets it is exponential; the competitive ratio (Thm 2, Lemma 1) is proved for the job-by-job
primal-dual rule implemented here. Line 7–8 returns at the first job FIND_ALLOC turns away (ending the round);
the text describes the choice "proceeding without selecting the job", which is what this does: the next job
is considered. Preemption, checkpoints and re-deciding every round are the daemon's loop, not the policy's.

Beneath this package: ``admit`` (the primal-dual admission rule: prices, FIND_ALLOC, FIND_SCHEDULE).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ... import lp
from ...errors import InputError
from ...model import DEFAULT_REMAINING, Allocation, JobPlacement, Problem, VirtualUsers
from ..common import TOL, at_caps, capped_note, clean, fill_idle, finish
from .admit import Decision, Job, Prices, admit as _admit, duration, find_alloc, find_schedule
from ..base import Policy

__all__ = ["Decision", "Job", "Prices", "admit", "candidates", "duration", "find_alloc", "find_schedule",
           "price_parameters", "queue", "solve", "usable_types", "work_rounds", "POLICY"]

NAME = "hadar"
ROUND_SECONDS = 360.0  # one time slot = one scheduling round (the paper's 6 minutes, §IV-A)
_LIST = 5  # names listed in a note before "..."


def usable_types(vu: VirtualUsers) -> np.ndarray:
    """(n, k) bool: the class can put a whole worker on the type (a speed there, at least one GPU of the
    type in the cluster and at least one whole GPU under its per-type cap)."""
    return (vu.speed > 0) & (vu.capacity[None, :] >= 1) & (np.floor(vu.type_cap + 1e-9) >= 1)


def _type_room(vu: VirtualUsers) -> np.ndarray:
    """(n, k) whole GPUs of each type a class's jobs may take in all (its per-type cap, floored; inf = none)."""
    return np.where(usable_types(vu), np.floor(np.minimum(vu.type_cap, vu.capacity[None, :]) + 1e-9), 0.0)


def _arrival(jobs) -> bool:
    """Whether every listed job id is a whole number (Slurm's job ids, given in submission order)."""
    try:
        return all(float(int(j.id)) == float(j.id) for j in jobs)
    except ValueError:
        return False


def queue(problem: Problem, vu: VirtualUsers | None = None) -> tuple[list[Job], list[int]]:
    """The round's jobs in the order Hadar decides them (module docstring) and the rows of the classes whose
    jobs are made up (each one ``Job`` with ``copies`` identical 1-GPU jobs, after the listed jobs). Raises
    InputError for a job with no whole GPU count >= 1 or a remaining time that is not a finite number >= 0
    (a Problem built in code, not parsed)."""
    vu = problem.virtual_users() if vu is None else vu
    usable = usable_types(vu)
    room = _type_room(vu)
    listed: list[Job] = []
    made: list[Job] = []
    row = 0
    for t in problem.tenants:
        for c in t.classes:
            if c.jobs is None:
                # JobClass.job_list's made-up jobs, counted, not built: one per GPU of demand (usable GPU)
                d = c.effective_demand()
                count = int(math.floor(min(d if d is not None else math.inf, float(room[row].sum())) + 1e-9))
                if count > 0:
                    made.append(Job(row, 0, c.name, 1, DEFAULT_REMAINING, copies=count))
            for pos, j in enumerate(c.jobs or ()):
                where = f"tenants.{t.name}.classes.{c.name}.jobs[{pos}]"
                if isinstance(j.gpus, bool) or not isinstance(j.gpus, (int, np.integer)) or j.gpus < 1:
                    raise InputError(f"{where}.gpus", j.gpus, "must be a whole number >= 1")
                rem = j.remaining
                if isinstance(rem, bool) or not isinstance(rem, (int, float, np.number)) or not math.isfinite(rem) or rem < 0:
                    raise InputError(f"{where}.remaining", rem, "must be a finite number of seconds >= 0")
                listed.append(Job(row, pos, str(j.id), int(j.gpus), float(rem)))
            row += 1
    if listed and _arrival(listed):
        listed = [dataclasses.replace(j, arrival=float(int(j.id))) for j in listed]
    smin, smax = _speed_range(vu, usable)

    def simultaneous(j: Job):  # among jobs that arrived together: shortest, then the larger top speed
        if smax[j.row] <= 0:  # no usable type: it goes last (and will not fit)
            return (math.inf, 0.0, j.row)
        return (j.remaining / smin[j.row], -smax[j.row], j.row)

    listed.sort(key=lambda j: (j.arrival, j.pos, j.row))
    made.sort(key=simultaneous)
    batch = {key: b for b, key in enumerate(sorted({simultaneous(j)[:2] for j in made}))}
    made = [dataclasses.replace(j, batch=batch[simultaneous(j)[:2]]) for j in made]
    return listed + made, [j.row for j in made]


def _speed_range(vu: VirtualUsers, usable: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n,) slowest and fastest normalized speed over each class's usable types (0 where it has none)."""
    s = np.where(usable, vu.speed, np.nan)
    has = usable.any(axis=1)
    smin = np.where(has, np.nanmin(np.where(has[:, None], s, 1.0), axis=1), 0.0)
    smax = np.where(has, np.nanmax(np.where(has[:, None], s, 1.0), axis=1), 0.0)
    return smin, smax


def work_rounds(vu: VirtualUsers, jobs: list[Job], round_seconds: float = ROUND_SECONDS) -> np.ndarray:
    """ρ_j per job: rounds of one worker at normalized speed 1, at least one round on its slowest type."""
    smin, _ = _speed_range(vu, usable_types(vu))
    return np.array([max(j.remaining / round_seconds, float(smin[j.row])) for j in jobs])


def candidates(vu: VirtualUsers, jobs: list[Job]) -> list[Job]:
    """The jobs that fit their class on an empty cluster (W_j <= its demand and its usable GPUs)."""
    room = _type_room(vu)
    fit = np.minimum(np.floor(vu.demand + 1e-9), room.sum(axis=1))
    return [j for j in jobs if j.gpus <= fit[j.row]]


def price_parameters(vu: VirtualUsers, jobs: list[Job], round_seconds: float = ROUND_SECONDS) -> Prices | None:
    """Eq. 6–8 over the candidate jobs (module docstring); None when there is none. A made-up class counts
    once: its jobs are identical, and the parameters are minima and maxima over jobs."""
    cand = candidates(vu, jobs)
    if not cand:
        return None
    usable = usable_types(vu)
    smin, smax = _speed_range(vu, usable)
    rows = np.array([j.row for j in cand])
    w = np.array([j.gpus for j in cand], dtype=float)
    rho = work_rounds(vu, cand, round_seconds)
    t_max = rho / smin[rows]  # eq. 8, >= 1
    horizon = float(t_max.max())  # T
    total = float(vu.capacity.sum())  # C
    eta = horizon * total / float((t_max * w).min())
    # eq. 7: U_j(T) / (t_j^max W_j) = (W_j ρ_j / T) / (W_j ρ_j / Smin_j) = Smin_j / T
    u_min = float(smin[rows].min()) / horizon / (4.0 * eta)
    # eq. 6: U_j(t_j^min) / W_j = Smax_j, over the candidates that can use the type
    u_max = np.full(vu.k, u_min)
    for r in range(vu.k):
        on = usable[rows, r]
        if on.any():
            u_max[r] = float(smax[rows][on].max())
    alpha = max(1.0, float(np.log(u_max / u_min).max()))
    return Prices(u_min, u_max, eta, horizon, alpha)


def admit(vu: VirtualUsers, jobs: list[Job], params: Prices | None,
          round_seconds: float = ROUND_SECONDS) -> tuple[np.ndarray, list[Decision]]:
    """The primal-dual rule over ``jobs`` in order: (x (n, k) GPUs of the admitted jobs, the decisions: one per
    listed job, one per admitted made-up job and one for the refused rest of a made-up class)."""
    rho = dict(enumerate(work_rounds(vu, jobs, round_seconds).tolist())) if jobs else {}
    x, decisions, _ = _admit(vu, jobs, params, rho, _type_room(vu))
    return x, decisions


def _names(vu: VirtualUsers, rows: list[int]) -> str:
    names = [f"{vu.tenant[i]}/{vu.cls[i]}" for i in rows[:_LIST]]
    return ", ".join(names) + (f", ... ({len(rows)} in all)" if len(rows) > _LIST else "")


def _notes(vu: VirtualUsers, decisions: list[Decision], made_up: list[int], params: Prices | None,
           handed: float, gamma: np.ndarray) -> list[str]:
    adm = [d for d in decisions if d.gpus is not None]
    gpus = sum(d.job.gpus for d in adm)
    no_room = sum(d.count for d in decisions if d.reason == "no room")
    priced = sum(d.count for d in decisions if d.reason == "priced out")
    notes = [f"hadar: {len(adm) + no_room + priced} job(s), {len(adm)} admitted on {gpus} GPU(s), "
             f"{no_room + priced} turned away ({no_room} did not fit, {priced} priced out)"]
    split = [d for d in adm if sum(1 for v in d.gpus if v > 0) > 1]
    if split:
        def one(d: Decision) -> str:
            parts = " + ".join(f"{v} {vu.gpu_types[r]}" for r, v in enumerate(d.gpus) if v > 0)
            return f"{vu.tenant[d.job.row]}/{vu.cls[d.job.row]} {d.job.id} on {parts} at speed {d.speed:g}"
        more = f", ... ({len(split)} in all)" if len(split) > _LIST else ""
        notes.append(f"{len(split)} admitted job(s) span GPU types, each at its slowest type's speed: "
                     + "; ".join(one(d) for d in split[:_LIST]) + more)
    if made_up:
        notes.append(f"no jobs given for {len(made_up)} class(es) ({_names(vu, made_up)}): each sees one 1-GPU job "
                     f"of {DEFAULT_REMAINING:g} s per GPU of its demand")
    if params is not None:
        final = params.price(gamma[:, 0], vu.capacity.astype(float))
        notes.append("prices (eq. 5-8): U_min " + f"{params.u_min:.4g}, U_max "
                     + " ".join(f"{g}={v:.4g}" for g, v in zip(vu.gpu_types, params.u_max))
                     + f", eta {params.eta:.4g}, T {params.horizon:.4g} round(s) of {ROUND_SECONDS:g} s, "
                     f"alpha {params.alpha:.4g} (Thm 2: 2*alpha-competitive); end of round (this slot) "
                     + " ".join(f"{g}={v:.4g}" for g, v in zip(vu.gpu_types, final)))
    if adm:
        true = sum(d.job.gpus * d.speed for d in adm)
        notes.append(f"admitted jobs' utility (throughput at each gang's slowest type) {true:.6g}")
    if handed > TOL:
        notes.append(f"work conservation: {handed:.6g} idle GPU(s) handed to classes below their caps "
                     "by weight (fill_idle, not in the paper; per-type limits, not job placements)")
    return notes


def solve(problem: Problem, solver: str | None = None) -> Allocation:
    """Hadar's primal-dual admission over the round's jobs, then idle GPUs to classes below their caps."""
    lp.pick_solver(solver)  # validated for a uniform interface; no LP is solved
    vu = problem.virtual_users()
    timer = lp.Timer()
    with timer.measure():
        jobs, made_up = queue(problem, vu)
        params = price_parameters(vu, jobs)
        rho = dict(enumerate(work_rounds(vu, jobs).tolist())) if jobs else {}
        x_jobs, decisions, gamma = _admit(vu, jobs, params, rho, _type_room(vu))
        x = clean(fill_idle(vu, x_jobs), vu.speed, vu.capacity, vu.demand, vu.type_cap)
    types = vu.gpu_types
    placements = tuple(
        JobPlacement(vu.tenant[d.job.row], vu.cls[d.job.row], d.job.id,
                     tuple((types[r], v) for r, v in enumerate(d.gpus) if v > 0), d.speed)
        for d in decisions if d.gpus is not None)
    notes = _notes(vu, decisions, made_up, params, float(x.sum() - x_jobs.sum()), gamma)
    notes += capped_note(vu, at_caps(vu, x))
    return dataclasses.replace(finish(problem, NAME, x, timer, solver, notes, uses_lp=False),
                               job_placements=placements)


POLICY = Policy(NAME, solve, guarantees=(),
                claim=("Hadar: primal-dual admission of jobs at exponential per-type prices; the admitted utility within"
                       " 2 alpha of the best (Thm 2); no fairness property"),
                options=(), warm=False)
