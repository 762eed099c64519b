"""Slurm's ``priority/multifactor`` as a site runs it (issue 39): fair-share factors (Fair Tree, the default since
19.05, and the classic formula of ``PriorityFlags=NO_FAIR_TREE``), usage decay, TRES billing of GPUs, the age
factor and a job's priority. Pure functions of typed data; the simulated Slurm (:mod:`.cluster`) uses them.

Sources: Slurm's pages ``fair_tree.html``, ``classic_fair_share.html``, ``priority_multifactor.html``,
``tres.html`` and slurm.conf(5); where a page leaves a detail open (tie handling, the decay factor, rounding),
what Slurm's ``priority/multifactor`` plugin does, as said at each function.

**The association tree** (:class:`Assoc`): the root, its children (accounts), theirs (sub-accounts or users).
A node without children is a *user* association; a node with children an account. A user's ``usage`` is its
raw usage (decayed, billed TRES-seconds, what ``sshare -l`` shows as RawUsage); an account's usage is the sum
of its subtree's unless its own ``usage`` is given (> 0): then that (Slurm divides by the account's own raw
usage, which may include usage of users since removed). The root's name is not part of any key.

**Keys**: every function returns a dict keyed by the association's *path* below the root, its names joined by
``/``: ``"account/user"`` for a user under a top-level account, ``"account/sub/user"`` deeper, ``"account"`` for
an account (:func:`level_fs` only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..errors import InputError
from ..fairness.realized import speeds_from_throughput

DAY = 86400.0
GRES_GPU = "gres/gpu"  # the TRES of every GPU; "gres/gpu:<type>" the TRES of one type (case-insensitive prefix)


@dataclass(frozen=True)
class Assoc:
    """An association: ``name``, raw ``shares`` (sacctmgr's Fairshare=), raw ``usage`` (a user's; an account's
    only when given, see the module docstring) and its ``children``."""

    name: str
    shares: float
    usage: float = 0.0
    children: tuple["Assoc", ...] = ()

    def __post_init__(self) -> None:
        for fld, v in (("shares", self.shares), ("usage", self.usage)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise InputError(f"assoc {self.name!r}.{fld}", v, "must be a finite number >= 0")
        if not self.name or "/" in self.name:
            raise InputError("assoc.name", self.name, "must be a non-empty name without '/'")
        names = [c.name for c in self.children]
        if len(set(names)) != len(names):
            raise InputError(f"assoc {self.name!r}.children", names, "names must be unique among siblings")


def raw_usage(a: Assoc) -> float:
    """The association's raw usage: a user's own; an account's own when given (> 0), else its subtree's sum."""
    if not a.children or a.usage > 0:
        return float(a.usage)
    return sum(raw_usage(c) for c in a.children)


def _users(a: Assoc) -> int:
    return 1 if not a.children else sum(_users(c) for c in a.children)


def _level(children: Sequence[Assoc], parent_usage: float) -> list[tuple[Assoc, float, float]]:
    """(child, its Level FS, its raw usage) for each child: S = shares / the siblings' shares, U = usage / the
    parent's usage (0 when the parent has none); Level FS = S / U, infinite when U = 0, and 0 when S = 0
    (Slurm's ``_calc_assoc_fs``)."""
    total = sum(float(c.shares) for c in children)
    out = []
    for c in children:
        u = raw_usage(c)
        s = c.shares / total if total > 0 else 0.0
        eff = u / parent_usage if parent_usage > 0 else 0.0
        lfs = 0.0 if s == 0 else (math.inf if eff == 0 else s / eff)
        out.append((c, lfs, u))
    return out


def level_fs(root: Assoc) -> dict[str, float]:
    """Fair Tree's Level FS of every association below the root (accounts and users; ``sshare -l``'s "Level FS"),
    keyed by path: (shares / the siblings' shares) / (usage / the parent's usage); inf without usage."""
    out: dict[str, float] = {}

    def walk(a: Assoc, prefix: str) -> None:
        for c, lfs, _u in _level(a.children, raw_usage(a)):
            path = prefix + c.name
            out[path] = lfs
            walk(c, path + "/")

    walk(root, "")
    return out


def fair_tree(root: Assoc) -> dict[str, float]:
    """Fair Tree's fair-share factor of every user association, keyed ``"account/user"`` (the path, module
    docstring). At each level the siblings are sorted by Level FS, highest first (users before accounts on
    equal Level FS; otherwise the tree's order), and visited depth-first; the k-th user visited (k = 0, 1, …)
    gets rank N − k, N = the number of users, and factor rank / N — so every user under a higher-ranked
    account outranks every user under a lower one. Ties, as Slurm's ``fair_tree.c`` does them: a user with the
    same Level FS as the sibling visited before it gets the rank of the user visited last (sibling users tie;
    the first user of an account tied with its previous sibling ties with the user visited last, e.g. a user
    whose Level FS equals a sibling account's highest user). Slurm's documented merging of tied sibling accounts'
    children is not done by its code (``_count_tied_accounts`` stops at the next account), so not here either.
    A tree without users gives {}."""
    n = _users(root) if root.children else 0
    out: dict[str, float] = {}
    rank = rnt = n

    def walk(children: Sequence[Assoc], parent_usage: float, prefix: str, account_tied: bool) -> None:
        nonlocal rank, rnt
        rows = sorted(_level(children, parent_usage), key=lambda r: (-r[1], bool(r[0].children)))
        prev: float | None = None
        for i, (c, lfs, u) in enumerate(rows):
            tied = True if (i == 0 and account_tied) else (prev is not None and prev == lfs)
            if not c.children:
                if not tied:
                    rank = rnt
                out[prefix + c.name] = rank / n
                rnt -= 1
            else:
                walk(c.children, u, prefix + c.name + "/", tied)
            prev = lfs

    if n:
        walk(root.children, raw_usage(root), "", False)
    return out


def classic(root: Assoc, dampening: float = 1.0) -> dict[str, float]:
    """The classic fair-share factor (``PriorityFlags=NO_FAIR_TREE``) of every user association, keyed by path:
    F = 2^(−U_E / S / d) (``classic_fair_share.html``; d = FairShareDampeningFactor, default 1), with

    * S, the normalized shares: the product, from the user up to the root's children, of shares / the siblings'
      shares;
    * U_A, the normalized usage: the association's raw usage / the root's (the whole cluster's; 0 without any);
    * U_E, the effective usage: U_A for the accounts just under the root; below them
      U_E = U_A + (U_E(parent) − U_A) × shares / the siblings' shares (the parent's usage propagates to its
      children in proportion to their shares; U_E(parent) when the siblings have no shares).

    A user with S = 0 gets 0."""
    if not (isinstance(dampening, (int, float)) and dampening > 0):
        raise InputError("dampening", dampening, "must be a number > 0 (FairShareDampeningFactor)")
    total = raw_usage(root)
    out: dict[str, float] = {}

    def walk(a: Assoc, prefix: str, s_parent: float, ue_parent: float | None) -> None:
        level = sum(float(c.shares) for c in a.children)
        for c in a.children:
            ua = raw_usage(c) / total if total > 0 else 0.0
            frac = c.shares / level if level > 0 else 0.0
            if ue_parent is None:
                ue = ua
            elif level <= 0:
                ue = ue_parent
            else:
                ue = ua + (ue_parent - ua) * frac
            s = s_parent * frac
            path = prefix + c.name
            if c.children:
                walk(c, path + "/", s, ue)
            else:
                out[path] = 0.0 if s <= 0 else 2.0 ** (-ue / s / dampening)

    walk(root, "", 1.0, None)
    return out


def decay(usage: float, dt: float, half_life: float) -> float:
    """``usage`` after ``dt`` seconds of decay with ``PriorityDecayHalfLife`` = ``half_life`` seconds, as Slurm's
    decay thread applies it: × D^dt with D = 1 − 0.693 / half_life per second (within 0.5 % of 2^(−dt/half_life)
    for half-lives of a minute or more). ``half_life`` = 0: no decay (Slurm's 0)."""
    if not half_life > 0:
        if half_life == 0:
            return usage
        raise InputError("half_life", half_life, "must be >= 0 seconds (PriorityDecayHalfLife; 0: no decay)")
    if dt < 0:
        raise InputError("dt", dt, "must be >= 0 seconds")
    return usage * decay_factor(half_life) ** dt


def decay_factor(half_life: float) -> float:
    """Slurm's per-second decay factor D = 1 − 0.693 / half_life (1 for half_life = 0)."""
    return 1.0 if half_life == 0 else 1.0 - 0.693 / half_life


def new_usage(seconds: float, billing_value: float, half_life: float) -> float:
    """Usage a job adds for ``seconds`` run since the last calculation, billed ``billing_value`` per second: Slurm's
    ``_apply_new_usage`` adds run × D^run × billing (the new usage is decayed over its own period)."""
    if seconds <= 0:
        return 0.0
    return seconds * decay_factor(half_life) ** seconds * billing_value


def _weight_key(key: str) -> str:
    k = str(key).strip()
    if k.lower().startswith(GRES_GPU):
        return GRES_GPU + k[len(GRES_GPU):]
    raise InputError("TRESBillingWeights", key, "the simulator bills GPUs only: keys GRES/gpu or GRES/gpu:<type>")


def billing(gpus: int, gpu_type: str, weights: Mapping[str, float], max_tres: bool = False) -> float:
    """The billing TRES of a job holding ``gpus`` GPUs of ``gpu_type``, from ``TRESBillingWeights`` ``weights``
    (``{"GRES/gpu": w}`` weighs every GPU, ``{"GRES/gpu:<type>": w}`` the GPUs of one type; the prefix is
    case-insensitive, a type not named weighs 0). The job's weighted TRES are ``gpus × w(GRES/gpu)`` and
    ``gpus × w(GRES/gpu:<type>)``; by default they are summed (a site that weighs both counts a typed GPU twice,
    as tres.html warns), with ``PriorityFlags=MAX_TRES`` (``max_tres``) the largest node-level weighted TRES
    counts — the simulator has no CPUs or memory (weight 0), so with GPUs only MAX_TRES is the larger of those
    two, and equals the sum whenever one weight applies. Flat billing, 1 per GPU: ``{"GRES/gpu": 1}``."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise InputError("gpus", gpus, "must be a whole number >= 0")
    w = {_weight_key(k): float(v) for k, v in weights.items()}
    for k, v in w.items():
        if not (math.isfinite(v) and v >= 0):
            raise InputError(f"TRESBillingWeights {k}", v, "must be a finite number >= 0")
    parts = [gpus * w.get(GRES_GPU, 0.0), gpus * w.get(f"{GRES_GPU}:{gpu_type}", 0.0)]
    return max(parts) if max_tres else sum(parts)


def speed_weights(throughput: Mapping[str, Mapping[str, float]], types: Sequence[str]) -> dict[str, float]:
    """Billing weights per GPU type as an informed site sets them: proportional to the type's mean speed over
    the classes (each class's rate on the type over its rate on its own slowest of ``types``,
    :func:`~slurm_fair.fairness.realized.speeds_from_throughput`; classes that cannot run
    on the type are left out of its mean), the slowest type = 1. Keys ``GRES/gpu:<type>``. A type no class runs
    on weighs 1."""
    speeds = speeds_from_throughput(throughput, types)
    mean: dict[str, float] = {}
    for t in types:
        rel = [row[t] for row in speeds.values() if row[t] > 0]
        mean[t] = sum(rel) / len(rel) if rel else 0.0
    low = min((v for v in mean.values() if v > 0), default=1.0)
    return {f"GRES/gpu:{t}": (v / low if v > 0 else 1.0) for t, v in mean.items()}


def types_by_speed(throughput: Mapping[str, Mapping[str, float]], types: Sequence[str]) -> tuple[str, ...]:
    """``types`` slowest first by :func:`speed_weights` (ties by name): a node Weight order that fills the slow
    GPUs first (reversed: the fast ones first)."""
    w = speed_weights(throughput, types)
    return tuple(sorted(types, key=lambda t: (w[f"GRES/gpu:{t}"], t)))


def age_factor(waited: float, max_age: float = 7 * DAY) -> float:
    """Slurm's age factor: the time the job has been eligible and waiting over ``PriorityMaxAge``, at most 1
    (0 for a job not yet eligible)."""
    if not max_age > 0:
        raise InputError("max_age", max_age, "must be > 0 seconds (PriorityMaxAge)")
    return min(max(waited, 0.0) / max_age, 1.0)


@dataclass(frozen=True)
class PriorityWeights:
    """``PriorityWeightFairshare`` and ``PriorityWeightAge``: the testbed's (10000 and 1000; Slurm's own defaults
    are 0, which would make fair-share do nothing). The other weights (job size, partition, QOS, TRES) are 0."""

    fairshare: float = 10000.0
    age: float = 1000.0


@dataclass(frozen=True)
class Multifactor:
    """The ``priority/multifactor`` settings the simulated Slurm uses: ``weights``; ``half_life``
    (PriorityDecayHalfLife, Slurm's default 7 days), ``calc_period`` (PriorityCalcPeriod, Slurm's default 5
    minutes), ``max_age`` (PriorityMaxAge, default 7 days), all in seconds; ``fair_tree`` (False:
    ``PriorityFlags=NO_FAIR_TREE``, the classic formula); ``max_tres`` (``PriorityFlags=MAX_TRES``);
    ``billing_weights`` (TRESBillingWeights, :func:`billing`; default flat, 1 per GPU)."""

    weights: PriorityWeights = PriorityWeights()
    half_life: float = 7 * DAY
    calc_period: float = 300.0
    max_age: float = 7 * DAY
    fair_tree: bool = True
    max_tres: bool = False
    billing_weights: Mapping[str, float] = field(default_factory=lambda: {"GRES/gpu": 1.0})

    def __post_init__(self) -> None:
        for fld in ("half_life", "calc_period", "max_age"):
            v = getattr(self, fld)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (
                    fld != "half_life" and v == 0):
                raise InputError(fld, v, "must be a finite number of seconds > 0" + (" (or 0: no decay)"
                                                                                       if fld == "half_life" else ""))
        billing(0, "", self.billing_weights)  # validates the keys and weights


def factors(root: Assoc, fair_tree_flag: bool = True) -> dict[str, float]:
    """The fair-share factor of every user association: :func:`fair_tree`, or :func:`classic` when
    ``fair_tree_flag`` is False."""
    return fair_tree(root) if fair_tree_flag else classic(root)


def priority(fairshare: float, waited: float, weights: PriorityWeights, max_age: float = 7 * DAY,
             site_factor: int = 0) -> int:
    """A job's priority: PriorityWeightFairshare × its fair-share factor + PriorityWeightAge × its age factor
    (:func:`age_factor`) + its SiteFactor, truncated to a whole number and at least 1, as Slurm keeps it (0 is
    a held job). Other factors (job size, partition, QOS, TRES, nice) are 0."""
    p = weights.fairshare * fairshare + weights.age * age_factor(waited, max_age) + site_factor
    return max(int(math.floor(p)), 1)
