"""Fast exact solver for cooperative OEF (paper eq. 10, weighted form).

Problem, on arrays (no demands; the caller does any water-filling)::

    maximize    sum_l S_l . x_l
    subject to  sum_l x_lj <= c_j                          for every GPU type j
                x >= 0
                S_l . x_l / w_l >= S_l . x_i / w_i          for every ordered pair (l, i)   (envy-freeness)

``S`` (n x k) is the normalized throughput (0 = the user cannot run on that type), ``w`` (n,) the weights,
``c`` (k,) the GPU counts. The plain form has n(n-1) envy rows; only a few per user bind at the optimum
(about two per user with a nonzero dual in our instances). We do NOT rely on OEF's Thm 5.2 (users hold
adjacent types, envy only between "neighbours" in speed order): the optimum this solver returns need not
have that structure (the LP is degenerate and the paper's theorem is about a particular optimum), so every
one of the n(n-1) rows is checked at the end. We solve it by **constraint generation on one live HiGHS
model**:

0. Users with proportional speed vectors (one *direction*: S_l = a_l D_c) are merged into one user of weight
   sum w_l and split by weight afterwards (:func:`_merged_generation`, issue 31; same optimum value, proof
   there): a site with a few dozen job models solves an LP of a few dozen users whatever its tenant count.
   Without repeated directions nothing changes. The second stage (module ``nearest``) merges the users
   of one direction that also had one previous bundle per weight (exact, proof in ``nearest_merged``) and
   keeps the others apart, sharing one variable per direction (module ``classes``: m·n + n rows
   instead of n(n-1)).
1. Reductions that keep the optimum (proofs in the comments below): a user gets nothing on a type it
   cannot use (no column for S_lj = 0); some optimum uses all capacity of every usable type, and there
   the sum of l's envy rows is the weighted sharing-incentive row ``S_l . x_l >= (w_l / W) S_l . c``
   (Thm 5.1): a valid row with k non-zeros that we add from the start.
2. Seed the model with the envy rows between each user and its 8 most similar users (cosine of the
   speed vectors): they compete for the same types and are the ones left indifferent at the optimum. With
   ``seed=`` (warm start: the ``binding`` rows of an earlier solve of a similar problem, e.g. the daemon's
   previous round) those rows instead, and the similarity rows only for users the seed does not mention.
3. Solve; compute all n^2 values S_l . x_i with one matrix product; for each user add the 2 most violated
   envy rows not yet in the model, plus a *cycle* of envy rows through every group of users that hold
   one and the same single type (such rows imply all g(g-1) rows of the group: they value each other's
   bundles through that type only); take out rows whose slack is basic (the basis stays valid; a row
   comes out at most twice, so the loop is finite); re-solve the SAME model with dual simplex from the
   previous basis (no rebuild, presolve off after the first solve). Stop when no envy row is violated
   (> 1e-12). The result is then feasible for the full problem and optimal for a relaxation of it, hence
   optimal for the full problem.

4. If the generation fails (HiGHS ends a round without an optimum: nearly proportional speed vectors make the
   basis ill-conditioned, root cause and measurements in module ``fallback``), the same LP with every envy row
   is solved cold (:func:`.fallback.full_lp`, accepted only when exact to 1e-7); ``SolveInfo.fallback`` and the
   policy's notes say so. A failed second stage keeps the first stage's optimum, also noted.

Why it is still not instant at n = 1000: the optimum is very degenerate. Most users hold one type, and
the users holding the same type get equal shares per weight, so every envy row inside such a group is
tight (tens of thousands of tight rows at n = 500); the cycles and the deletion of basic rows keep the
model at a few rows per user, but dual simplex still needs tens of rounds of a few hundred pivots.

HiGHS runs with primal feasibility tolerance 1e-9 (weights scaled to <= 1, capacities as given), so envy
rows hold to ~1e-9 / w_l in the caller's units (a checker with tolerance 1e-6 never sees a violation). No
margin is added: identical users must get exactly equal value, and a margin would make that infeasible.

``solver``: ``None`` or ``"HIGHS"`` use the method above. The name of another cvxpy solver (``"ECOS"``,
``"CLARABEL"``, ``"SCS"``, ...) solves the plain form with all n(n-1) rows through cvxpy instead (slow;
for comparison and reporting only).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ...catalog import SOLVERS
from ...errors import InputError, SolverError
from ...stdio import new_highs
from . import classes as _cc
from . import fallback as _fb
from . import nearest as _cn
from .nearest import STABLE_REL, nearest  # noqa: F401  (the second stage; STABLE_REL re-exported)

#: cvxpy solvers accepted by name (plain form); HIGHS means the fast method of this module.
CVXPY_SOLVERS = tuple(n for n in SOLVERS if n != "HIGHS")  # the plain form through cvxpy (one list: catalog.SOLVERS)

_TOL = 1e-12  # envy violation (in units of S.x/w on the scaled problem) still accepted as satisfied
_SLACK = 1e-6  # an envy row this slack (times w_l) may be taken out of the model
_MAX_DROPS = 2  # times an envy row may be taken out of the model (finite loop)
_INMODEL_TOL = 1e-8  # violation of a row already in the model accepted as the solver's tolerance


@dataclass(frozen=True)
class SolveInfo:
    solver: str  # "HIGHS" (constraint generation) or the cvxpy solver name (plain form)
    method: str
    rounds: int  # LP solves
    envy_rows: int  # envy rows in the final model (plain form: n(n-1))
    seconds: float
    objective: float
    max_envy: float  # largest S_l.x_i/w_i - S_l.x_l/w_l over l != i (<= 0: envy-free)
    # envy rows (l, i) of the final model with a nonzero dual: the rows that pin the optimum down; a later
    # solve of a similar problem seeded with them (``seed=``) starts near the end (empty for the plain form)
    binding: tuple[tuple[int, int], ...] = ()
    seeded: int = 0  # envy rows taken from ``seed`` (0: cold start, similarity seeding only)
    # second stage (``previous=``, :mod:`..stable`): LP rounds it took (0: not run) and the L1 distance to the
    # previous allocation before and after it (on the rows the previous allocation knows)
    stable_rounds: int = 0
    moved_before: float = 0.0
    moved_after: float = 0.0
    fallback: str = ""  # what failed and the exact path that answered instead ("": none; module ``fallback``)


def _check(speed, weight, capacity) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    try:
        S = np.asarray(speed, dtype=float)
    except (TypeError, ValueError):
        raise InputError("speed", speed, "must be an n x k array of numbers") from None
    if S.ndim != 2:
        raise InputError("speed", getattr(S, "shape", speed), "must be a 2-D array (users x GPU types)")
    n, k = S.shape
    if not np.all(np.isfinite(S)) or np.any(S < 0):
        raise InputError("speed", S[~(np.isfinite(S) & (S >= 0))][:3].tolist(), "entries must be finite and >= 0")
    try:
        w = np.asarray(weight, dtype=float).reshape(-1)
        c = np.asarray(capacity, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        raise InputError("weight/capacity", (weight, capacity), "must be arrays of numbers") from None
    if w.shape != (n,):
        raise InputError("weight", w.shape, f"must have one entry per user (n = {n})")
    if not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise InputError("weight", w[~(np.isfinite(w) & (w > 0))][:3].tolist(), "weights must be finite and > 0")
    if c.shape != (k,):
        raise InputError("capacity", c.shape, f"must have one entry per GPU type (k = {k})")
    if not np.all(np.isfinite(c)) or np.any(c < 0):
        raise InputError("capacity", c[~(np.isfinite(c) & (c >= 0))][:3].tolist(), "must be finite and >= 0")
    return S, w, c


def envy_matrix(speed: np.ndarray, weight: np.ndarray, x: np.ndarray) -> np.ndarray:
    """V[l, i] = S_l.x_i / w_i - S_l.x_l / w_l (diagonal set to -inf); envy-free iff V <= 0."""
    U = speed @ x.T
    V = U / weight[None, :] - (np.diag(U) / weight)[:, None]
    np.fill_diagonal(V, -np.inf)
    return V


#: Users above which users of one speed direction are merged (``solve_with_info(merge=None)``). Below it the
#: per-user solver takes under a second and its optimum is kept: in the simulator (issue 28's benchmark, 90 %
#: load with preemption, seed 0) the merged optimum — two accounts' 8-GPU jobs of one job model given one
#: bundle per weight — let the guarantee of P100 swing between them round after round as each one's job started
#: and the other's waited (27 requeues instead of 12, and two jobs requeued for each other); merged at every
#: size, the benchmark's 90 % preempt cell lost its same-type goal (9 of 79 restarts before the job they were
#: for). A big site gets the merged solve's speed and that risk (docs/policies.md, docs/known-gaps.md).
MERGE_ABOVE = 200


def solve(speed, weight, capacity, solver: str | None = None) -> np.ndarray:
    """Optimal cooperative-OEF allocation x (n x k fractional GPUs)."""
    return solve_with_info(speed, weight, capacity, solver)[0]


def solve_with_info(
    speed, weight, capacity, solver: str | None = None, *, cuts_per_user: int = 2, max_rounds: int = 10_000, drop_slack: bool = True, neighbours: int = 8,
    first: str = "simplex", cycles: bool = True, drop_basic: bool = True, seed=None, seed_all: bool = False,
    previous: np.ndarray | None = None, aggregate: bool = True, merge: bool | None = None,
) -> tuple[np.ndarray, SolveInfo]:
    """``seed``: envy rows (l, i) to start from (pairs of user indices, e.g. the ``binding`` rows of an
    earlier solve of a similar problem); users in no seeded pair get the similarity seeding. Pairs out of
    range or with l == i are ignored. ``seed_all``: every user also gets the similarity seeding (the start is
    a superset of the cold start). The optimum does not depend on the seed, only the work to reach it.

    ``previous`` (n x k, NaN rows = unknown users; HIGHS only): a second stage returns, among the optima,
    the one nearest in L1 to it (:func:`nearest`): a stable tie-break toward last round.

    ``merge``: users of one speed direction are solved as one merged user and split by weight
    (:func:`_merged_generation`); ``aggregate`` without ``merge``: they share one variable t (module
    ``classes``); neither: every user its own envy rows (the solver before issue 31). Same optimum
    value in all three (proofs in the docstrings; tests/policies/test_coop_classes.py compares them), but not
    the same optimum: the merged one gives the users of a direction one bundle per weight. ``merge=None`` (the
    policy's default): merged above ``MERGE_ABOVE`` users, where the per-user solve is slow; every user its own
    envy rows below it, the solver and optimum of before issue 31 (see ``MERGE_ABOVE``)."""
    S, w, c = _check(speed, weight, capacity)
    if merge is None:  # the policy's default: the solver before issue 31 up to MERGE_ABOVE users
        merge = S.shape[0] > MERGE_ABOVE
        aggregate = aggregate and merge
    name = "HIGHS" if solver is None else str(solver).upper()
    t0 = time.perf_counter()
    binding: tuple = ()
    seeded = 0
    stable = (0, 0.0, 0.0)
    fell = ""
    if name == "HIGHS":
        gen = _merged_generation if aggregate and merge else _highs_generation
        method = "constraint generation, live HiGHS model, dual simplex warm start"
        try:
            x, rounds, rows, binding, seeded, model, unique = gen(
                S, w, c, cuts_per_user, max_rounds, drop_slack, neighbours, first, cycles, drop_basic,
                _seed_pairs(seed, S.shape[0]), seed_all, aggregate)
        except SolverError as exc:  # e.g. nearly proportional speeds (module fallback): the full LP, cold
            try:
                x = _fb.full_lp(S, w, c)
            except SolverError as exc2:
                raise SolverError(f"{exc}; then {exc2}") from exc
            rounds, rows, model, unique = 1, S.shape[0] * (S.shape[0] - 1), None, False
            fell = f"row generation failed ({exc}); solved by the full LP (fallback)"
            method = "full LP, every envy row, HiGHS cold (fallback)"
        if previous is not None and model is not None:
            p = np.asarray(previous, dtype=float).reshape(S.shape)
            known = ~np.isnan(p).any(axis=1)
            before = float(np.abs(x - np.nan_to_num(p))[known].sum())
            srounds = 0
            # skipped where the first stage returned the previous allocation, or its optimum is the only one
            if before > 1e-9 * max(1, int(known.sum()) * S.shape[1]) and not unique:
                try:
                    if aggregate and merge:
                        x2, srounds = _cn.nearest_merged(S, w, c, x, p, cuts_per_user, model)
                    else:
                        x2, srounds = nearest(S, w, c, x, p, model, cuts_per_user, aggregate=aggregate)
                    x = x2
                except SolverError as exc:  # the first stage's optimum stands (an optimum, not the nearest)
                    fell = f"second stage failed ({exc}); the first stage's optimum kept"
            stable = (srounds, before, float(np.abs(x - np.nan_to_num(p))[known].sum()))
    elif name in CVXPY_SOLVERS:
        x = plain_lp(S, w, c, name)
        rounds, rows = 1, S.shape[0] * (S.shape[0] - 1)
        method = "plain form, all n(n-1) envy rows, cvxpy"
    else:
        raise InputError("solver", solver, f"unknown solver (use HIGHS or one of {', '.join(CVXPY_SOLVERS)})")
    seconds = time.perf_counter() - t0
    n = S.shape[0]
    viol = _cc.max_envy(S, w, x)  # envy_matrix(S, w, x).max() by directions (m x n, not n x n)
    info = SolveInfo(name, method, rounds, rows, seconds, float(np.sum(S * x)), viol, binding, seeded, *stable,
                     fallback=fell)
    return x, info


def _seed_pairs(seed, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``seed`` as two index arrays (valid, distinct, deduplicated pairs), or None without a seed."""
    if seed is None:
        return None
    a = np.asarray(list(seed), dtype=np.int64).reshape(-1, 2) if len(seed) else np.zeros((0, 2), dtype=np.int64)
    ok = (a[:, 0] >= 0) & (a[:, 0] < n) & (a[:, 1] >= 0) & (a[:, 1] < n) & (a[:, 0] != a[:, 1])
    code = np.unique(a[ok, 0] * n + a[ok, 1])
    return code // n, code % n


# --------------------------------------------------------------------------------------------------
# Constraint generation on a live HiGHS model
# --------------------------------------------------------------------------------------------------


def _highs_generation(S, w, c, cuts_per_user, max_rounds, drop_slack, neighbours, first, cycles, drop_basic, seed=None,
                      seed_all=False, aggregate=True):
    n, k = S.shape
    x_out = np.zeros((n, k))
    cmax = float(c.max()) if k else 0.0
    none = _cc.EnvyModel(None, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    if n == 0 or k == 0 or cmax <= 0:
        return x_out, 0, 0, (), 0, none, True
    # Weights scaled to <= 1 (only ratios matter for envy). Capacities are NOT scaled: HiGHS' feasibility
    # tolerance then bounds the envy violation in the caller's units (scaling c down to 1 multiplied the
    # final violation by max c, ~1e-6 at 2000 GPUs).
    cs = c
    ws = w / w.max()
    # Columns only where the user can use the type and the type exists. Dropping x_lj with S_lj = 0 keeps
    # the optimum: it gives l nothing and can only make others envy l.
    usable = (S > 0) & (cs > 0)[None, :]
    vl, vj = np.nonzero(usable)  # row-major: grouped by user
    nv = int(vl.size)
    if nv == 0:
        return x_out, 0, 0, (), 0, none, True
    var = np.full((n, k), -1, dtype=np.int32)
    var[vl, vj] = np.arange(nv, dtype=np.int32)
    has = usable.any(axis=1)
    # Enviers: one per direction of the speed vectors (on the usable types), users of one direction share a
    # variable t_e (module classes: same feasible set, same optimum); without repeated directions the
    # rows are exactly the per-user rows.
    dirs = _cc.directions(np.where(usable, S, 0.0), has, nv, aggregate)
    m_env = dirs.m

    h, inf, nt, first_envy_row = _model(S, cs, ws, vl, vj, var, has, dirs)
    rowof = np.full((m_env, n), -1, dtype=np.int32)  # model row of the envy row (e, i), -1 = not in the model
    dropped = np.zeros((m_env, n), dtype=np.uint8)  # times the row (e, i) was taken out again
    pl = np.zeros(0, dtype=np.int64)  # pairs (envier, user) of the envy rows in model order
    pi = np.zeros(0, dtype=np.int64)
    code, seeded = _first_pairs(S, dirs, has, neighbours, seed, seed_all)
    sl, si = code // n, code % n
    if sl.size:
        rowof[sl, si] = first_envy_row + np.arange(sl.size, dtype=np.int32)
        pl, pi = sl.astype(np.int64), si.astype(np.int64)
        _cc.add_rows(h, dirs, ws, var, pl, pi, inf)
    X = np.zeros((n, k))
    rows = 0
    rounds = 0
    h.setOptionValue("solver", first)  # "ipm" (with crossover, so a basis exists) or "simplex"
    # candidates per round: the most violated rows of every envier, cuts_per_user of them per user it stands for
    budget = np.minimum(max(1, int(cuts_per_user)) * dirs.size, n - 1)
    while True:
        rounds += 1
        sol = _cc.solved(h, "cooperative OEF", rounds)
        colv = np.asarray(sol.col_value)
        X[vl, vj] = colv[:nv]
        np.maximum(X, 0.0, out=X)
        if n == 1:
            break
        V = _cc.violations(dirs, ws, X, colv[nv:nv + nt])
        li, ii = _candidates(V, budget)
        if cycles and li.size:
            li, ii = _cycle_rows(X, dirs, li, ii)
        new = rowof[li, ii] < 0
        li, ii = li[new], ii[new]
        if li.size == 0:
            li, ii = np.nonzero((V > _TOL) & (rowof < 0))  # violated rows outside the top m of their envier
            if li.size == 0:
                # only rows of the model can be violated, within the solver's feasibility tolerance: a row
                # S_l.x_l - (w_l/w_i) S_l.x_i >= 0 held to 1e-9 is V[l, i] <= 1e-9 / w_l (w scaled to <= 1;
                # a merged user of small weight next to one of large weight has a small w_l); a t row to 1e-9
                rowv = float((V * np.where(dirs.tcol < 0, ws[dirs.first], 1.0)[:, None]).max())
                if rowv > _INMODEL_TOL:
                    raise SolverError(f"cooperative OEF: HiGHS left an envy row violated by {rowv:.3g}")
                break
        if rounds >= max_rounds:
            raise SolverError(f"cooperative OEF: no convergence after {rounds} rounds")
        if drop_slack and pl.size:
            pl, pi = _drop_slack(h, sol, drop_basic, first_envy_row, dirs, ws, pl, pi, rowof, dropped)
        rowof[li, ii] = first_envy_row + pl.size + np.arange(li.size, dtype=np.int32)
        pl, pi = np.concatenate([pl, li]), np.concatenate([pi, ii])
        _cc.add_rows(h, dirs, ws, var, li, ii, inf)
        rows += li.size
        if rounds == 1:
            h.setOptionValue("presolve", "off")
            h.setOptionValue("solver", "simplex")
    rows = int(pl.size)
    x_out = X.copy()
    binding: tuple = ()
    if pl.size:
        dual = np.asarray(h.getSolution().row_dual)[first_envy_row:first_envy_row + pl.size]
        nz = np.abs(dual) > 1e-12
        binding = tuple(_cc.user_pairs(dirs, pl[nz], pi[nz]))
    return x_out, rounds, rows, binding, seeded, _cc.EnvyModel(dirs, pl, pi), _unique(h)


def _model(S, cs, ws, vl, vj, var, has, dirs):
    """The HiGHS model of eq. 10 before any envy row: a column per usable (user, type) pair (and the t columns of
    module ``classes``), capacity rows, weighted sharing-incentive rows and the membership rows. Returns (model,
    HiGHS' infinity, t columns, index of the first envy row)."""
    import highspy

    k = S.shape[1]
    nv = int(vl.size)
    h = new_highs()
    h.setOptionValue("primal_feasibility_tolerance", 1e-9)
    h.setOptionValue("dual_feasibility_tolerance", 1e-9)
    inf = highspy.kHighsInf
    h.addCols(
        nv, S[vl, vj].astype(float), np.zeros(nv), np.full(nv, inf), 0,
        np.zeros(nv, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0),
    )
    nt = _cc.add_t_columns(h, dirs, inf)
    h.changeObjectiveSense(highspy.ObjSense.kMaximize)

    # Capacity rows.
    order = np.argsort(vj, kind="stable").astype(np.int32)
    starts = np.searchsorted(vj[order], np.arange(k)).astype(np.int32)
    h.addRows(k, np.full(k, -inf), cs.astype(float), nv, starts, order, np.ones(nv))

    # Weighted sharing-incentive rows S_l.x_l >= (w_l/W) S_l.c. Valid at an optimum: leftover capacity of a
    # type can be handed to the users able to use it in proportion to their weights without creating envy
    # (both sides of every envy row involving two such users rise by the same amount), so some optimum
    # uses all capacity of every usable type; summing l's envy rows over all i (weighted by w_i/w_l) then
    # gives this row. Relaxed by 1e-9 relative so rounding never makes it bind harder than it should.
    W = float(ws.sum())
    users = np.nonzero(has)[0]
    si_rhs = (ws[users] / W) * (S[users] @ cs) * (1.0 - 1e-9)
    ustarts = np.searchsorted(vl, users).astype(np.int32)
    h.addRows(users.size, si_rhs, np.full(users.size, inf), nv, ustarts, np.arange(nv, dtype=np.int32), S[vl, vj])
    nmember = _cc.add_member_rows(h, dirs, ws, var, inf)  # D_e.x_l >= w_l t_e: never taken out
    return h, inf, nt, k + users.size + nmember


def _first_pairs(S, dirs, has, neighbours, seed, seed_all):
    """The envy rows the model starts with, as codes envier * n + user: the rows within each direction, the
    ``seed`` pairs, and for the users no seed mentions (everyone with ``seed_all``) the rows toward the users
    with the most similar speed profiles. Returns (codes, rows taken from the seed)."""
    n = S.shape[0]
    seeded = 0
    q = min(int(neighbours), n - 1)
    ie, ii0 = _cc.intra_pairs(dirs)
    codes = [ie * n + ii0]
    fresh = has.copy()  # users that get the similarity seeding
    if seed is not None:
        sl, si = seed
        keep = has[sl] & has[si]
        sl, si = sl[keep], si[keep]
        seeded = int(sl.size)
        codes.append(_cc.class_pairs(dirs, sl, si))
        if not seed_all:
            fresh[sl] = False
            fresh[si] = False
    fe = np.unique(dirs.cls[fresh]) if fresh.any() else np.zeros(0, dtype=np.int64)
    fe = fe[fe >= 0]
    if q > 0 and fe.size:
        # Seed: envy rows between users with similar speed profiles (they compete for the same types, and
        # at the optimum they are the ones left indifferent between their bundles). With a seed, only for
        # the users it does not mention (new users, or everyone when too much changed to keep any pair).
        P = S / np.maximum(np.linalg.norm(S, axis=1, keepdims=True), 1e-300)
        sim = P[dirs.first[fe]] @ P.T
        sim[np.repeat(np.arange(fe.size), dirs.size[fe]), np.concatenate([dirs.members(int(e)) for e in fe])] = -np.inf
        qq = min(q, n - 1)
        nb = np.argpartition(-sim, qq - 1, axis=1)[:, :qq]
        le = np.repeat(fe, qq)
        ii = nb.ravel()
        ok = has[ii] & (sim[np.repeat(np.arange(fe.size), qq), ii] > -np.inf)
        codes.append(le[ok] * n + ii[ok])
    code = np.unique(np.concatenate(codes))
    return code, seeded


def _cycle_rows(X, dirs, li, ii):
    """The candidate envy rows ``li``, ``ii`` plus, for each group of users holding one and the same single type
    in ``X``, the rows of one cycle through the group (the comment below says why)."""
    n = X.shape[0]
    # Users holding one and the same single type envy each other only through that type, so a
    # cycle of g envy rows through such a group implies all g(g-1) of its rows (and at the optimum
    # they are all tight: the group shares the type equally per weight). Add the cycle rows (as the
    # rows of the users' enviers: with the membership rows they imply the users' own rows).
    held = X > 0
    single = held.sum(axis=1) == 1
    su = np.nonzero(single)[0]
    if su.size > 1:
        st = held[su].argmax(axis=1)
        o = np.lexsort((su, st))
        su, st = su[o], st[o]
        nxt = np.empty_like(su)
        nxt[:-1] = su[1:]
        first = np.r_[0, np.nonzero(np.diff(st))[0] + 1]
        last = np.r_[first[1:] - 1, su.size - 1]
        nxt[last] = su[first]  # close each group's cycle
        cyc = nxt != su
        li = np.concatenate([li, dirs.cls[su[cyc]]])
        ii = np.concatenate([ii, nxt[cyc]])
        pair = np.unique(li * n + ii)
        li, ii = pair // n, pair % n
    return li, ii


def _drop_slack(h, sol, drop_basic, first_envy_row, dirs, ws, pl, pi, rowof, dropped):
    """Take envy rows out of the model (``rowof`` and ``dropped`` in place); returns the pairs left, in model order."""
    import highspy

    basic = highspy.HighsBasisStatus.kBasic
    # Take out envy rows whose slack is basic (tight but redundant ones included: deleting them keeps
    # the basis valid and optimal), so that the model stays near the rows that bind. A row comes out
    # at most twice, which rules out cycling.
    if drop_basic:
        st = h.getBasis().row_status
        out = np.fromiter((b == basic for b in st[first_envy_row:]), dtype=bool, count=pl.size)
    else:
        act = np.asarray(sol.row_value)[first_envy_row:]
        out = act > _SLACK * np.where(dirs.tcol[pl] < 0, ws[dirs.first[pl]], 1.0)
    out &= dropped[pl, pi] < _MAX_DROPS
    if out.any():
        idx = (first_envy_row + np.nonzero(out)[0]).astype(np.int32)
        h.deleteRows(idx.size, idx)
        dropped[pl[out], pi[out]] += 1
        rowof[pl[out], pi[out]] = -1
        pl, pi = pl[~out], pi[~out]
        rowof[pl, pi] = first_envy_row + np.arange(pl.size, dtype=np.int32)
    return pl, pi


def _merged_generation(S, w, c, cuts_per_user, max_rounds, drop_slack, neighbours, first, cycles, drop_basic,
                       seed=None, seed_all=False, aggregate=True):
    """Eq. 10 with the users of one speed direction merged into one user, then split by weight (issue 31).

    Let users l of direction c have S_l = a_l D_c (a_l > 0) and weights w_l, W_c = sum w_l. The merged problem
    has one user per direction with speed (sum_l a_l w_l / W_c) D_c and weight W_c. **Same optimum value:**
    (1) a feasible x of eq. 10 gives y_c = sum_l x_l, feasible for the merged problem: c's users do not envy each
    other, so D_c.x_l / w_l = t_c for all of them (one common value), and for any other user i,
    D_c.x_l >= w_l D_c.x_i / w_i summed over l gives D_c.y_c / W_c >= D_c.x_i / w_i (and for i merged too, sum
    over i's users as well); any user i envies y_c no more than the x_l: S_i.y_c / W_c is a weighted mean of the
    S_i.x_l / w_l. Its objective: sum_l a_l D_c.x_l = t_c sum_l a_l w_l = (sum_l a_l w_l / W_c) D_c.y_c, the
    merged objective of y. (2) A feasible y of the merged problem split by weight, x_l = (w_l / W_c) y_c, is
    feasible for eq. 10: every l of c has D_c.x_l / w_l = D_c.y_c / W_c and every user values x_l per weight as
    y_c per weight, so every envy row of x is a merged envy row of y (or, inside c, an equality); capacities
    are unchanged; the objective is the same sum as in (1). So the optima have the same value, and the split of
    a merged optimum is an optimum of eq. 10 (the one where identical users get identical bundles per weight;
    eq. 10 has others when they are not unique, the second stage :func:`nearest` searches all of them).

    Without repeated directions this is :func:`_highs_generation` itself (same rows, same optimum vertex). The
    binding rows returned are user pairs of the directions' first users; the model returned for the second
    stage is in the t form (module ``classes``) with the class rows (e, i) for every user i of a
    direction that bound e in the merged problem."""
    n, k = S.shape
    usable = (S > 0) & (c > 0)[None, :]
    has = usable.any(axis=1)
    Su = np.where(usable, S, 0.0)
    nv = int(usable.sum())
    dirs = _cc.directions(Su, has, nv, aggregate)
    if dirs.groups == 0:
        return _highs_generation(S, w, c, cuts_per_user, max_rounds, drop_slack, neighbours, first, cycles,
                                 drop_basic, seed, seed_all, aggregate=False)
    users = np.nonzero(has)[0]
    e_of = dirs.cls[users]
    alpha = Su[users].max(axis=1) / dirs.D[e_of].max(axis=1)
    Wm = np.bincount(e_of, weights=w[users], minlength=dirs.m)
    Sm = dirs.D * (np.bincount(e_of, weights=alpha * w[users], minlength=dirs.m) / Wm)[:, None]
    mseed = None
    if seed is not None:
        sl, si = seed
        ok = (dirs.cls[sl] >= 0) & (dirs.cls[si] >= 0) & (dirs.cls[sl] != dirs.cls[si])
        code = np.unique(dirs.cls[sl[ok]] * dirs.m + dirs.cls[si[ok]])
        mseed = (code // dirs.m, code % dirs.m)
    xm, rounds, rows, mbind, seeded, _, _ = _highs_generation(
        Sm, Wm, c, cuts_per_user, max_rounds, drop_slack, neighbours, first, cycles, drop_basic, mseed, seed_all,
        aggregate=False)
    x = np.zeros((n, k))
    x[users] = xm[e_of] * (w[users] / Wm[e_of])[:, None]
    binding = tuple((int(dirs.first[a]), int(dirs.first[b])) for a, b in mbind)
    if mbind:
        mb = np.asarray(mbind, dtype=np.int64)
        pe = np.repeat(mb[:, 0], dirs.size[mb[:, 1]])
        pi = np.concatenate([dirs.members(int(f)) for f in mb[:, 1]])
    else:
        pe = pi = np.zeros(0, dtype=np.int64)
    return x, rounds, rows, binding, (int(seed[0].size) if seed is not None else 0), _cc.EnvyModel(dirs, pe, pi), False


def _candidates(V: np.ndarray, budget: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The violated (> _TOL) rows among the ``budget[e]`` most violated of every envier e (row of ``V``)."""
    M = int(budget.max()) if budget.size else 0
    if M <= 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z
    if M == 1:
        li, ii = np.arange(V.shape[0]), V.argmax(axis=1)
    else:
        top = np.argpartition(-V, M - 1, axis=1)[:, :M]
        if budget.min() < M:  # keep each envier's own budget of its most violated rows
            top = np.take_along_axis(top, np.argsort(-np.take_along_axis(V, top, axis=1), axis=1, kind="stable"), axis=1)
            keep = np.arange(M)[None, :] < budget[:, None]
            li, ii = np.nonzero(keep)[0], top[keep]
        else:
            li, ii = np.repeat(np.arange(V.shape[0]), M), top.ravel()
    viol = V[li, ii] > _TOL
    return li[viol], ii[viol]


def _unique(h) -> bool:
    """Whether the model's optimum is certainly its only one: dual nondegenerate (every nonbasic column and
    every nonbasic row has a nonzero reduced cost / dual; sufficient, not necessary). The model is a relaxation
    of eq. 10 (some envy rows), so its only optimum is eq. 10's only one too (any other optimum of eq. 10 would be
    one of the relaxation: feasible there with the same objective)."""
    import highspy

    basic = highspy.HighsBasisStatus.kBasic
    b, sol = h.getBasis(), h.getSolution()
    cb = np.fromiter((v == basic for v in b.col_status), dtype=bool)
    rb = np.fromiter((v == basic for v in b.row_status), dtype=bool)
    cd, rd = np.abs(np.asarray(sol.col_dual)), np.abs(np.asarray(sol.row_dual))
    return bool(np.all(cd[~cb] > 1e-9) and np.all(rd[~rb] > 1e-9))


# --------------------------------------------------------------------------------------------------
# Plain form through cvxpy (for comparison / reporting)
# --------------------------------------------------------------------------------------------------


def plain_lp(S, w, c, solver: str | None = None) -> np.ndarray:
    """Eq. 10 without caps as ONE cvxpy LP with every one of the n(n-1) envy rows (the textbook form, the
    reference for the constraint generation above; ``oef-coop --solver NAME`` runs it). Solved through
    :func:`slurm_fair.lp.solve`: any status but optimal is a SolverError."""
    import cvxpy as cp

    from ... import lp

    S, w, c = (np.asarray(v, dtype=float) for v in (S, w, c))
    n, k = S.shape
    x = cp.Variable((n, k), nonneg=True)
    cons = [cp.sum(x, axis=0) <= c]
    if n > 1:
        U = S @ x.T  # U[l, i] = S_l . x_i
        li, ii = np.nonzero(~np.eye(n, dtype=bool))
        own = cp.diag(U)
        cons.append(cp.multiply(own[li], 1.0 / w[li]) >= cp.multiply(U[li, ii], 1.0 / w[ii]))
    prob = cp.Problem(cp.Maximize(cp.sum(cp.multiply(S, x))), cons)
    lp.solve(prob, solver, what="cooperative OEF (eq. 10, plain form)")
    return np.maximum(np.asarray(x.value, dtype=float), 0.0)
