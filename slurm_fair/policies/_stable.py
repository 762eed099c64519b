"""Stable optima: among a policy's optimal allocations, the one nearest to last round's (issue 28, item 1).

The policies' LPs are degenerate: cooperative OEF (eq. 10) has many allocations with the same total throughput
(users of equal speeds can swap GPUs of two types, a group can take its share on either of two types...), and
the vertex a simplex returns depends on the order of the rows, on the rows constraint generation happened to
add, on the warm start. Nothing made the solver prefer last round's allocation, so a guarantee could move
from round to round while nothing it depends on moved (the issue: 925e2b's V100 guarantee 4 -> 3 -> 4 -> 2 ->
6 -> 0).

Second stage (lexicographic optimum): keep the first objective at its optimum value and minimize the L1
distance to the previous allocation::

    minimize    sum_{l, j known} t_lj
    subject to  t_lj >= x_lj - p_lj,  t_lj >= p_lj - x_lj        (L1 distance to the previous allocation p)
                sum_l S_l . x_l >= opt * (1 - STABLE_REL)          (the first stage's optimum, kept)
                capacity and every envy row of eq. 10               (constraint generation, as in the first stage)

Only rows (tenant, class) that the previous allocation knows get a distance term; a new class is free (its
``t`` has no column), a vanished one is simply absent. The result is optimal for eq. 10 up to ``STABLE_REL`` in the
objective (1e-12 relative plus the solver's 1e-9 feasibility tolerance; the tests check 1e-7) and, among those, nearest to ``p`` in L1. With ``p`` itself an
optimum of the same problem, the result is ``p``.

:class:`Previous` is the typed form of last round's allocation, kept in the policy's warm start as entries
``("x", tenant, class, gpu_type, gpus)`` (JSON-able; readers of the other warm entries skip them). The second
stage of cooperative OEF is :func:`._coop_fast.nearest` (on arrays, in the solver's module).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..model import Allocation, VirtualUsers

TAG = "x"


@dataclass(frozen=True)
class Previous:
    """Last round's fractional GPUs per (tenant, class) and GPU type."""

    x: Mapping[tuple[str, str], Mapping[str, float]]

    @classmethod
    def of(cls, alloc: Allocation) -> "Previous":
        vu = alloc.vu
        return cls({(t, c): {g: float(alloc.x[i, j]) for j, g in enumerate(vu.gpu_types)}
                    for i, (t, c) in enumerate(zip(vu.tenant, vu.cls))})

    def entries(self) -> tuple[tuple[str, str, str, str, float], ...]:
        """The warm-start entries ``("x", tenant, class, type, gpus)`` (zeros left out)."""
        return tuple((TAG, t, c, g, round(v, 12)) for (t, c), row in sorted(self.x.items())
                     for g, v in sorted(row.items()) if v > 0) + tuple(
            (TAG, t, c, "", 0.0) for (t, c), row in sorted(self.x.items()) if not any(v > 0 for v in row.values()))

    @classmethod
    def from_warm(cls, warm: Any) -> "Previous | None":
        """The ``("x", ...)`` entries of a warm start (None: it has none). Malformed entries are skipped."""
        out: dict[tuple[str, str], dict[str, float]] = {}
        for e in warm or ():
            if not (isinstance(e, (list, tuple)) and len(e) == 5 and e[0] == TAG):
                continue
            _, t, c, g, v = e
            if not (isinstance(t, str) and isinstance(c, str) and isinstance(g, str)):
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                continue
            row = out.setdefault((t, c), {})
            if g:
                row[g] = float(v)
        return cls(out) if out else None

    def array(self, vu: VirtualUsers) -> np.ndarray:
        """(n, k) previous GPUs of ``vu``'s rows; NaN on the rows of classes it does not know (new ones). A known
        class has 0 on a type it did not hold (or a type that is new)."""
        p = np.full((vu.n, vu.k), np.nan)
        for i, key in enumerate(zip(vu.tenant, vu.cls)):
            row = self.x.get(key)
            if row is not None:
                p[i] = [float(row.get(g, 0.0)) for g in vu.gpu_types]
        return p


def is_entry(e: Any) -> bool:
    """Whether a warm-start entry is one of :class:`Previous`'s."""
    return isinstance(e, (list, tuple)) and len(e) == 5 and e[0] == TAG
