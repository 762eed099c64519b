"""Envy rows of cooperative OEF (eq. 10) aggregated over users with proportional speed vectors (issue 31).

Users l whose speed vectors point the same way (S_l = a_l D_c, a_l > 0, for one direction D_c) have the same envy
rows up to a positive factor: "S_l.x_l/w_l >= S_l.x_i/w_i for all i" is, divided by a_l, "D_c.x_l/w_l >= D_c.x_i/w_i
for all i". For a direction c with g >= 2 users we introduce one variable t_c and replace the g·n rows of its users
by

    D_c.x_l - w_l t_c >= 0          for every user l of c                  (membership rows, always in the model)
    t_c - D_c.x_i / w_i >= 0        for every user i (l's of c included)   (class envy rows, generated lazily)

**Same feasible set (projected on x), hence the same optimum.** If x satisfies every original row, t_c =
max_i D_c.x_i/w_i satisfies the class rows by definition and the membership rows because every user l of c has
D_c.x_l/w_l >= D_c.x_i/w_i for all i, its maximum included. Conversely, if (x, t) satisfies both families, then for
every l of c and every i: D_c.x_l/w_l >= t_c >= D_c.x_i/w_i, which is l's original row (i, times a_l). The objective
depends on x only. So the n(n-1) original rows become m·n class rows plus g membership rows (m: directions),
and the separation oracle is one m x n matrix product (:func:`violations`). A direction with one user keeps its
rows in the original form (no variable): "S_l.x_l - (w_l/w_i) S_l.x_i >= 0", exactly today's rows.

Directions are found by rounding each speed vector divided by its largest entry to 12 decimals: vectors that are
proportional to 1e-12 are merged (the class rows then use the first user's vector, an error of ~1e-12 relative on
the other users' rows, far below HiGHS' 1e-9 feasibility tolerance and the checker's 1e-6), vectors that are not
are never merged. A rounding boundary between two nearly proportional vectors only splits them (less aggregation,
same optimum).

An envy row is named (e, i): envier e (a direction index) and envied user i. Pure numpy in and out, apart from
the HiGHS model ``h`` the row builders write into and :func:`solved`, one round of either stage's loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import SolverError


def solved(h, what: str, rounds: int):
    """Run the HiGHS model ``h`` (one round of a row-generation loop); its solution when HiGHS reached the optimum,
    else SolverError naming ``what`` and the round."""
    import highspy

    h.run()
    status = h.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise SolverError(f"{what}: HiGHS ended with {h.modelStatusToString(status)} in round {rounds}")
    return h.getSolution()


@dataclass(frozen=True)
class Directions:
    """The enviers of an eq. 10 problem: one per direction of the speed vectors (users with no usable type: none)."""

    cls: np.ndarray  # (n,) envier of each user; -1: the user has no usable column (it envies nobody)
    D: np.ndarray  # (m, k) the direction of each envier: its first user's speed vector
    first: np.ndarray  # (m,) its first user
    size: np.ndarray  # (m,) its number of users
    tcol: np.ndarray  # (m,) model column of t_e (-1: one user, original rows, no variable)
    order: np.ndarray  # users sorted by envier (those with cls -1 left out)
    start: np.ndarray  # (m + 1,) envier e's users are order[start[e]:start[e + 1]]

    @property
    def m(self) -> int:
        return int(self.first.size)

    @property
    def groups(self) -> int:
        return int(np.count_nonzero(self.size > 1))

    def members(self, e: int) -> np.ndarray:
        return self.order[self.start[e]:self.start[e + 1]]


def directions(S: np.ndarray, has: np.ndarray, first_tcol: int, aggregate: bool = True) -> Directions:
    """The directions of the rows of ``S`` with ``has`` (the users with a usable column); t columns numbered
    from ``first_tcol``. ``aggregate=False``: one envier per user (today's rows, no t variable)."""
    n = S.shape[0]
    users = np.nonzero(has)[0]
    cls = np.full(n, -1, dtype=np.int64)
    if aggregate and users.size:
        P = np.round(S[users] / S[users].max(axis=1, keepdims=True), 12)
        _, inv = np.unique(P, axis=0, return_inverse=True)
        inv = np.asarray(inv).reshape(-1)
        # number enviers by their first user (stable, so the order is the users' order as without aggregation)
        firsts = np.full(int(inv.max()) + 1, n, dtype=np.int64)
        np.minimum.at(firsts, inv, users)
        rank = np.empty_like(firsts)
        rank[np.argsort(firsts, kind="stable")] = np.arange(firsts.size)
        cls[users] = rank[inv]
    else:
        cls[users] = np.arange(users.size)
    m = int(cls.max()) + 1 if users.size else 0
    order = users[np.argsort(cls[users], kind="stable")]
    size = np.bincount(cls[users], minlength=m).astype(np.int64)
    start = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(size, out=start[1:])
    first = order[start[:-1]] if m else np.zeros(0, dtype=np.int64)
    tcol = np.full(m, -1, dtype=np.int64)
    grp = np.nonzero(size > 1)[0]
    tcol[grp] = first_tcol + np.arange(grp.size)
    return Directions(cls, S[first].astype(float), first, size, tcol, order, start)


def add_t_columns(h, dirs: Directions, inf: float) -> int:
    """One free-valued (>= 0) column t_e with cost 0 per direction of two users or more; returns their number."""
    nt = dirs.groups
    if nt:
        h.addCols(nt, np.zeros(nt), np.zeros(nt), np.full(nt, inf), 0, np.zeros(nt, dtype=np.int32),
                  np.zeros(0, dtype=np.int32), np.zeros(0))
    return nt


def add_member_rows(h, dirs: Directions, ws: np.ndarray, var: np.ndarray, inf: float) -> int:
    """D_e.x_l - w_l t_e >= 0 for every user l of a direction e with a t column; returns the number of rows."""
    grp = np.nonzero(dirs.tcol >= 0)[0]
    if grp.size == 0:
        return 0
    ls = np.concatenate([dirs.members(int(e)) for e in grp])
    es = dirs.cls[ls]
    idx = np.concatenate([var[ls], dirs.tcol[es][:, None]], axis=1)
    val = np.concatenate([dirs.D[es], -ws[ls][:, None]], axis=1)
    _add(h, idx, val, inf)
    return int(ls.size)


def intra_pairs(dirs: Directions) -> tuple[np.ndarray, np.ndarray]:
    """The class rows (e, i) with i a user of e, for every direction with a t column (all tight at any feasible
    point: with the membership rows they make the users of e equal per weight in D_e's eyes)."""
    grp = np.nonzero(dirs.tcol >= 0)[0]
    if grp.size == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z
    ii = np.concatenate([dirs.members(int(e)) for e in grp])
    return dirs.cls[ii], ii


def add_rows(h, dirs: Directions, ws: np.ndarray, var: np.ndarray, pe: np.ndarray, pi: np.ndarray, inf: float) -> None:
    """The class envy rows (e, i): t_e - D_e.x_i / w_i >= 0 (t column) or, for a direction of one user l,
    S_l.x_l - (w_l/w_i) S_l.x_i >= 0."""
    if pe.size == 0:
        return
    k = dirs.D.shape[1]
    t = dirs.tcol[pe]
    single = t < 0
    own = dirs.first[pe]
    # own part: k entries (single: S_l on x_l; group: 1 on t_e, the rest dropped)
    own_idx = np.where(single[:, None], var[own], -1)
    own_val = np.where(single[:, None], dirs.D[pe], 0.0)
    own_idx[~single, 0] = t[~single]
    own_val[~single, 0] = 1.0
    ratio = np.where(single, ws[own] / ws[pi], 1.0 / ws[pi])
    idx = np.concatenate([own_idx, var[pi]], axis=1)
    val = np.concatenate([own_val, -ratio[:, None] * dirs.D[pe]], axis=1)
    del k
    _add(h, idx, val, inf)


def _add(h, idx: np.ndarray, val: np.ndarray, inf: float) -> None:
    """Rows ``sum val * col[idx] >= 0`` (entries with idx < 0 or val == 0 left out)."""
    p = idx.shape[0]
    ok = (idx >= 0) & (val != 0)
    counts = ok.sum(axis=1)
    starts = np.zeros(p, dtype=np.int32)
    np.cumsum(counts[:-1], out=starts[1:])
    h.addRows(p, np.zeros(p), np.full(p, inf), int(counts.sum()), starts, idx[ok].astype(np.int32),
              val[ok].astype(float))


def violations(dirs: Directions, ws: np.ndarray, X: np.ndarray, t: np.ndarray) -> np.ndarray:
    """V[e, i]: how much class row (e, i) is violated at (X, t) (> 0: violated), in units of D_e.x/w; -inf for a
    direction of one user l and i = l. ``t``: the values of the t columns (in order)."""
    U = dirs.D @ X.T  # m x n
    V = U / ws[None, :]
    single = dirs.tcol < 0
    own = np.empty(dirs.m)
    own[single] = U[single, dirs.first[single]] / ws[dirs.first[single]]
    own[~single] = t
    V -= own[:, None]
    se = np.nonzero(single)[0]
    V[se, dirs.first[se]] = -np.inf
    return V


def max_envy(S: np.ndarray, w: np.ndarray, x: np.ndarray) -> float:
    """max over l != i of S_l.x_i / w_i - S_l.x_l / w_l (what ``fast.envy_matrix(...).max()`` gives) by
    directions: S_l = a_l D_c, so the row of l is a_l times the row of its direction c in D (x / w)^T (m x n
    instead of n x n); the best other bundle of l is its direction's best column, or the second best where that
    column is l's own. The same numbers, summed in another order (1e-16 relative)."""
    n = S.shape[0]
    if n < 2:
        return 0.0
    has = S.max(axis=1) > 0
    best = 0.0 if not has.all() else -np.inf  # a user that values nothing envies nobody: 0
    if not has.any():
        return best
    d = directions(S, has, 0)
    M = d.D @ (x / w[:, None]).T  # m x n
    if n > 2:
        top = np.argpartition(-M, 1, axis=1)[:, :2]
        v = np.take_along_axis(M, top, axis=1)
        o = np.argsort(-v, axis=1, kind="stable")
        top, v = np.take_along_axis(top, o, axis=1), np.take_along_axis(v, o, axis=1)
    else:
        o = np.argsort(-M, axis=1, kind="stable")
        top, v = o, np.take_along_axis(M, o, axis=1)
    users = np.nonzero(has)[0]
    e = d.cls[users]
    other = np.where(top[e, 0] == users, v[e, 1], v[e, 0])
    a = S[users].max(axis=1) / d.D[e].max(axis=1)
    return float(max(best, (a * (other - M[e, users])).max()))


def user_pairs(dirs: Directions, pe: np.ndarray, pi: np.ndarray) -> list[tuple[int, int]]:
    """Class rows (e, i) as the original user pairs (l, i) they stand for (every user l of e, l != i)."""
    out: list[tuple[int, int]] = []
    for e, i in zip(pe.tolist(), pi.tolist()):
        out.extend((int(l), i) for l in dirs.members(e).tolist() if l != i)
    return out


def class_pairs(dirs: Directions, sl: np.ndarray, si: np.ndarray) -> np.ndarray:
    """User pairs (l, i) as codes e * n + i of the class rows they fall under (users without an envier dropped)."""
    n = dirs.cls.size
    e = dirs.cls[sl]
    ok = e >= 0
    return e[ok] * n + si[ok]


@dataclass(frozen=True)
class EnvyModel:
    """A first stage's final envy rows (envier, user) and its directions (None: no model was built), where the
    second stage (:func:`.nearest.nearest`) starts."""

    dirs: Directions | None
    pe: np.ndarray
    pi: np.ndarray
