"""Preemption: slurm-fair's own checkpoint signal → grace → requeue, for reclaims and upgrade moves.

Slurm cannot move a running job to a preemptable QOS, so slurm-fair preempts itself, in steps across rounds.
One module per part of the idea:

* :mod:`.decide` — which steps a round takes for reclaims and open preemptions (pure);
* :mod:`.waiting` — the GPUs accounts under their share could start on each type (pure; read by decide);
* :mod:`.victims` — reclaim by the plan's claims: whose jobs are signalled for which waiting job, and when they
  are requeued; a job's minimum run before it may be preempted (pure);
* :mod:`.unrequeueable` — what happens to a job preemption would take but Slurm cannot requeue (pure);
* :mod:`.upgrade` — upgrade moves: a running job on a slow type moved to a faster idle one (pure);
* :mod:`.steps` — the typed steps a decision is made of (``Action``, ``Skip``, ``Decision``);
* :mod:`.carry` — the steps carried out on Slurm and recorded (signal, requeue, retype, cancel);
* :mod:`.record` — a preemption's typed record and its state machine (pure);
* :mod:`.store` — the store's ``preemptions`` table, read and written (:class:`~.store.PreemptionStore`).

:func:`wanted` is the one place that says whether a round runs preemption steps or upgrade moves.
"""

from __future__ import annotations

from ...cluster.base import Snapshot, supports_pending_retype
from ...config import Config


def wanted(cfg: Config, snapshot: Snapshot | None = None) -> bool:
    """The round has preemption steps to decide: reclaim is on (``preemption.enabled``), or upgrade moves are on
    and Slurm can retype the requeued job (``supports_pending_retype`` of the snapshot's ``slurm_version``; moves
    need no reclaim). ``snapshot`` None: the Slurm version is not checked — the daemon's wake-up for a grace that
    ends between rounds and the simulator's next round time have no snapshot at hand (the simulated Slurm,
    24.11.0, can retype)."""
    return bool(cfg.preemption.enabled) or (
        cfg.preemption.moves and (snapshot is None or supports_pending_retype(snapshot.slurm_version)))
