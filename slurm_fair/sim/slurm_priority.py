"""The simulated Slurm's ``priority/multifactor`` (issue 39): the usage and fair-share factors of its accounts over
simulated time, and the priority each pending job gets from them (the formulas: :mod:`.fairshare`).

:class:`SlurmPriority` keeps each account's raw usage (billed GPU-seconds, :func:`.fairshare.billing` of the
type each run held) and recomputes it every ``PriorityCalcPeriod`` as Slurm's decay thread does: the usage so
far decays by D^Δt, each run adds its seconds in the period × D^seconds × its billing (a run that ended in the
period was charged at its end, so D^Δt applies to that part too); then the fair-share
factors (Fair Tree, or classic) and every pending job's priority (fair-share + age; a job submitted between
two calculations gets its priority at submission, from the factors of the last one). Not continuously: between
two calculations factors and priorities stay as they are.

The association tree: the root, one account per simulated account (its shares), one user under each (the
simulator's jobs have accounts, not users: one user per account, named as the account, key
``"account/account"``).
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

from ..errors import InputError
from .fairshare import Assoc, Multifactor, billing, decay, factors, new_usage, priority
from .jobs import SimJob


class SlurmPriority:
    """See the module docstring. ``accounts``: {account: shares}; ``past_usage``: {account: raw usage at ``now``,
    billed GPU-seconds} (accounts not named: 0); ``now``: the time of the first calculation (trace time)."""

    def __init__(self, model: Multifactor, accounts: Mapping[str, int], past_usage: Mapping[str, float] | None,
                 now: float):
        self.model = model
        self.shares = {a: float(s) for a, s in accounts.items()}
        self.usage = {a: 0.0 for a in self.shares}
        for a, v in (past_usage or {}).items():
            if a not in self.shares:
                raise InputError("past_usage", a, f"names no account of the trace ({', '.join(sorted(self.shares))})")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise InputError(f"past_usage[{a!r}]", v, "must be a finite number >= 0 (billed GPU-seconds)")
            self.usage[a] = float(v)
        self.last = float(now)
        self.next_calc = self.last + model.calc_period
        self.factor: dict[str, float] = {}
        self._factors()

    def tree(self) -> Assoc:
        """The association tree of the accounts now (module docstring)."""
        return Assoc("root", 1.0, 0.0, tuple(Assoc(a, self.shares[a], 0.0, (Assoc(a, 1.0, self.usage[a]),))
                                             for a in sorted(self.shares)))

    def _factors(self) -> None:
        f = factors(self.tree(), self.model.fair_tree)
        self.factor = {a: f[f"{a}/{a}"] for a in self.shares}

    def job_priority(self, j: SimJob, now: float) -> int:
        """``j``'s priority without SiteFactor: fair-share factor of its account and its age (the time since it
        became eligible: its submission, or its requeue's restart)."""
        return priority(self.factor.get(j.account, 0.0), now - j.eligible, self.model.weights, self.model.max_age)

    def calc(self, now: float, jobs: Iterable[SimJob]) -> bool:
        """The calculation at ``now``: usage decayed and charged for every run in (last, now], factors and the
        pending jobs' priorities recomputed. Returns whether a pending job's priority changed."""
        dt = now - self.last
        m = self.model
        for a in self.usage:
            self.usage[a] = decay(self.usage[a], dt, m.half_life)
        pending = []
        for j in jobs:
            if j.state == "PENDING":
                pending.append(j)
            for r in reversed(j.runs):
                end = now if r.end is None else min(r.end, now)
                if end <= self.last:
                    break
                ran = end - max(r.start, self.last)
                charge = new_usage(ran, billing(j.gpus, r.gpu_type, m.billing_weights, m.max_tres), m.half_life)
                if r.end is not None and r.end < now:
                    # Slurm charges a run's last part when the job ends (priority_p_job_end), so this calculation's
                    # decay over the whole period applies to it too (measured: test_fairshare_model's replay)
                    charge = decay(charge, dt, m.half_life)
                self.usage[j.account] += charge
        self.last = now
        self.next_calc = now + m.calc_period
        self._factors()
        changed = False
        for j in pending:
            p = self.job_priority(j, now)
            if p != j.priority:
                j.priority = p
                changed = True
        return changed
