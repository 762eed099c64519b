"""``slurm-fair report``'s realized fairness section (issue 39, item 1): what accounts received over the report's
window, from the hooks' job records, the rounds' weights and capacity and the store's profiles
(``daemon/realized_window.py``, computed by ``fairness/realized.py``'s one function). Works in shadow mode.

The window: ``--since`` (else the first round's start) to ``--until`` (else now). A job still running counts to
the window's end; a job the rounds saw pending at the window's end that has not started counts as waiting from its
submit time (``pending``). What is still not seen: :data:`NOT_SEEN`.
"""

from __future__ import annotations

from typing import Any

from ..config import Config
from ..daemon.realized_window import read
from ..errors import InputError
from ..store import Store

NOT_SEEN = ("jobs submitted and cancelled between two rounds are not seen, nor the waiting of jobs outside the "
            "managed partitions until they start; a job seen pending that left without a start record (cancelled "
            "while pending) is listed in left_out and its waiting is not counted; a job that started since the last "
            "round counts as pending until the next round ingests its start record")


def section(store: Store, since: float | None, until: float | None, first_round: float | None, now: float,
            cfg: Config | None = None) -> dict[str, Any]:
    """The ``realized`` part of the report: :meth:`~slurm_fair.fairness.live.LiveRealized.as_json` of [since or
    the first round's start, until or ``now``] and ``not_seen`` (what it cannot see), or ``{"error": why}`` when
    nothing can be computed (no round yet, no job, an empty window)."""
    t0 = since if since is not None else first_round
    t1 = until if until is not None else now
    if t0 is None:
        return {"error": "no round recorded yet: no window, weights or capacity"}
    try:
        out = read(store, float(t0), float(t1), cfg).as_json()
    except InputError as e:
        return {"error": str(e), "since": t0, "until": t1}
    except Exception as e:  # noqa: BLE001 - records the report cannot read: said, the rest of the report stands
        return {"error": f"{type(e).__name__}: {e}", "since": t0, "until": t1}
    out["not_seen"] = NOT_SEEN
    return out
