"""The lending horizon: a cap on what an account may borrow above its guarantee while another could claim. Pure.

Without reclaim (``preemption.enabled = false``) a loan lasts as long as the job that took it: lending every
unclaimed GPU lets an account with long jobs take a whole type while another account's guarantee there waits
behind them (issue 39, docs/history/issue-39-diagnosis.md mechanism 2). :class:`Borrowing` bounds the loan only
where someone could claim it — an account with jobs waiting for the type that holds less than its guarantee
there — and :func:`.limits.lend_limits` writes it as the per-account per-type GrpTRES limit Slurm enforces.
:func:`.limits.make_plan` applies it only while preemption is off: with reclaim, borrowed GPUs come back anyway.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

from .demand import Waiting


@dataclass(frozen=True)
class Borrowing:
    """A cap on what an account may borrow (``limits.borrow_gpus``, ``limits.borrow_fraction``): on a type where
    another account with jobs waiting holds less than its guarantee (it could claim the rest as GPUs free), an
    account may hold at most its guarantee plus ``max(gpus, ceil(fraction x guarantee))`` there. ``gpus`` < 0: no
    cap (lending is unbounded). Slurm enforces it as it does every limit here: per account and type (GrpTRES)."""

    gpus: int = -1
    fraction: float = 0.0

    @property
    def on(self) -> bool:
        return self.gpus >= 0

    def caps(self, guarantee: Mapping[str, Mapping[str, int]], used: Mapping[str, Mapping[str, int]],
             accounts: Iterable[str], types: Iterable[str], waiting: Mapping[str, Iterable[str]] | None = None
             ) -> dict[str, dict[str, int]]:
        """account -> type -> the most it may hold there, only on types where the cap applies to it: where an
        account with jobs waiting for the type (``waiting``: account -> the types its startable pending jobs can
        use, :func:`waiting_types`; None: every account, every type) holds less than its guarantee."""
        if not self.on:
            return {}
        accounts = list(accounts)
        types = list(types)
        wait = {a: set(types) for a in guarantee} if waiting is None else {a: set(t) for a, t in waiting.items()}
        short = {g: {a for a in guarantee
                     if g in wait.get(a, ()) and int(guarantee[a].get(g, 0)) > int(used.get(a, {}).get(g, 0))}
                 for g in types}
        out: dict[str, dict[str, int]] = {}
        for a in accounts:
            for g, who in short.items():
                if who - {a}:
                    n = int(guarantee.get(a, {}).get(g, 0))
                    out.setdefault(a, {})[g] = n + max(self.gpus, math.ceil(self.fraction * n - 1e-9))
        return out


def waiting_types(waiting: Mapping[str, Waiting], types: Iterable[str]) -> dict[str, set[str]]:
    """account -> the types its startable pending jobs can use (a typed job its type, an untyped one every type
    its class runs on)."""
    types = list(types)
    out: dict[str, set[str]] = {}
    for a, w in waiting.items():
        for i, (_n, t) in enumerate(w.jobs):
            can = w.types_of(i)
            out.setdefault(a, set()).update([t] if t is not None else (can if can is not None else types))
    return out
