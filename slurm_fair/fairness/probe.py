"""The strategy-proofness probe: re-solve with false reports and see whether the liar's TRUE throughput rises.

Two lie models (``KINDS``), both on one class's raw throughput (what a tenant reports):

* ``inflate``: a class inflates its throughput on one usable type other than its slowest, or on all of those
  at once, by a factor. Every normalized speedup it reports is >= the truth: OEF §2.3.1's and Theorem 5.4's
  lie model (the slowest type stays at 1).
* ``sandbag``: a class over-reports its *slowest* usable type by a factor. Speeds are normalized to each
  class's slowest type, so this lowers every other normalized speedup: sandbagging the fast types. Theorem
  5.4 does not cover it, and non-cooperative OEF is not strategy-proof against it (``CLAIMS``).

Cost: each false report is one re-solve. The probe tries at most ``sample`` of them (default
:func:`budget`: ``max(2, WORK // classes)``, so a large problem gets 2 and a small one every lie); when that
is fewer than all, the classes are drawn in a seeded random order and each drawn class tries its most telling
lies first (the largest factor: all fast types inflated, then the slowest type over-reported), two per class
before any class gets a third. The result's detail says how many were tried out of how many.

Time (``budget_s``, ``solve --check-budget``, issue 41): before each re-solve the probe predicts its end from the
longest solve seen so far (the honest solve's time to start with) and stops rather than pass the budget; the
detail then says so ("stopped by the time budget ... after N of M false reports"), and with none tried the value
is None ("not run"). Measured: gandiva-fair on 300 GPU types and 5 classes solves in ~4 s, so the 120 re-solves
of the default sample took ~8 minutes; with the CLI's default budget it stops within it.
"""

from __future__ import annotations

from ..catalog import PROBE_WORK

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..model import Allocation, Problem, Tenant
from .values import PropertyResult, _fmt, _tol

Solve = Callable[[Problem], Allocation]

FACTORS = (1.25, 1.5, 2.0)
KINDS = ("inflate", "sandbag")
KIND_TEXT = {"inflate": "inflating fast types", "sandbag": "over-reporting the slowest type (sandbagging the fast ones)"}
SAMPLE = None  # default ``sample``: None = :func:`budget` (``solve --check-sample``)
WORK = PROBE_WORK  # the default budget: re-solves x virtual users (classes)
SEED = 0
STOPPED = "stopped by the time budget"  # in the detail of a probe that did not try all it planned

# What a policy promises about strategy-proofness, shown with its probe result (policies named by
# ``Allocation.policy``). The probe reports what it finds either way.
CLAIMS = {
    "oef-noncoop": "strategy-proof against inflating fast types (Thm 5.4's lie model); not against sandbagging "
                   "them (over-reporting the slowest type), and not claimed when demands or type caps bind",
}


@dataclass(frozen=True)
class Lie:
    """One false report: class ``cls`` of ``tenant`` multiplies its raw throughput by ``factors`` per type."""

    tenant: str
    cls: str
    kind: str
    what: str
    factors: tuple[tuple[str, float], ...]

    def apply(self, problem: Problem) -> Problem:
        return _lie(problem, self.tenant, self.cls, dict(self.factors))


def _lie(problem: Problem, tenant: str, cls: str, factors: dict[str, float]) -> Problem:
    """``problem`` with the raw throughput of one class multiplied by ``factors`` per GPU type."""
    tenants = []
    for t in problem.tenants:
        if t.name == tenant:
            classes = tuple(
                dataclasses.replace(c, throughput={g: v * factors.get(g, 1.0) for g, v in c.throughput.items()}) if c.name == cls else c
                for c in t.classes
            )
            t = Tenant(t.name, classes, t.weight)
        tenants.append(t)
    return dataclasses.replace(problem, tenants=tuple(tenants))


def class_lies(problem: Problem, tenant: Tenant, c, factors: Sequence[float] = FACTORS,
               kinds: Sequence[str] = KINDS) -> list[Lie]:
    """Every false report of class ``c`` of ``tenant`` under ``kinds``, the most telling first: by factor,
    largest first; for each factor all fast types inflated, the slowest over-reported, then each fast type
    alone (fastest first; a class with one fast type has only that one). A class with one usable type
    has none (scaling its only type changes no normalized speed)."""
    order = list(problem.gpu_types)
    usable = [g for g in order if (c.throughput.get(g) or 0) > 0 and c.type_cap(g) > 0]
    if len(usable) < 2:
        return []
    slowest = min(usable, key=lambda g: (c.throughput[g], order.index(g)))
    rest = sorted((g for g in usable if g != slowest), key=lambda g: (-c.throughput[g], order.index(g)))
    out = []
    for f in sorted(factors, reverse=True):
        if "inflate" in kinds and len(rest) > 1:
            out.append(Lie(tenant.name, c.name, "inflate", f"x{f:g} on all but {slowest}", tuple((g, f) for g in rest)))
        if "sandbag" in kinds:
            out.append(Lie(tenant.name, c.name, "sandbag", f"x{f:g} on {slowest}, its slowest type", ((slowest, f),)))
        if "inflate" in kinds:
            out.extend(Lie(tenant.name, c.name, "inflate", f"x{f:g} on {g}", ((g, f),)) for g in rest)
    return out


def lies(problem: Problem, factors: Sequence[float] = FACTORS, tenants: Sequence[str] | None = None,
         few: bool = False, kinds: Sequence[str] = ("inflate",)):
    """Yield (tenant, class, description, lying problem), by default for over-reported *speedups* only (OEF
    §2.3.1: every element of the reported speedup vector >= the truth): each class inflates its throughput on
    one usable type other than its slowest, and on all of those at once, by each factor. ``kinds`` with
    ``"sandbag"`` adds, per factor, the slowest type over-reported (lower normalized speedups on the others).
    ``tenants``: only these; ``few``: of the single-type inflations only the fastest type's."""
    only = None if tenants is None else set(tenants)
    order = list(problem.gpu_types)
    for t in problem.tenants:
        if only is not None and t.name not in only:
            continue
        for c in t.classes:
            usable = [g for g in order if (c.throughput.get(g) or 0) > 0 and c.type_cap(g) > 0]
            if not usable:
                continue
            slowest = min(usable, key=lambda g: (c.throughput[g], order.index(g)))
            rest = [g for g in usable if g != slowest]
            single = rest
            if few and len(rest) > 1:
                single = [max(rest, key=lambda g: (c.throughput[g], -order.index(g)))]
            for f in factors:
                if "inflate" in kinds:
                    for g in single:
                        yield t.name, c.name, f"x{f:g} on {g}", _lie(problem, t.name, c.name, {g: f})
                    if len(rest) > 1:
                        yield t.name, c.name, f"x{f:g} on all but {slowest}", _lie(problem, t.name, c.name, {g: f for g in rest})
                if "sandbag" in kinds and rest:
                    yield t.name, c.name, f"x{f:g} on {slowest}, its slowest type", _lie(problem, t.name, c.name, {slowest: f})


def sample_tenants(problem: Problem, sample: int | None, seed: int = SEED) -> list[str] | None:
    """``sample`` tenants drawn with a fixed seed (the same problem always gets the same ones), in problem order;
    None (all) when ``sample`` is None or covers them."""
    names = [t.name for t in problem.tenants]
    if sample is None or sample >= len(names):
        return None
    pick = set(np.random.default_rng(seed).choice(len(names), size=sample, replace=False).tolist())
    return [n for i, n in enumerate(names) if i in pick]


def budget(problem: Problem) -> int:
    """The default number of false reports (re-solves) the probe tries: ``max(2, WORK // classes)``."""
    return max(2, WORK // max(1, problem.virtual_users().n))


def _count(problem: Problem, c, factors: Sequence[float], kinds: Sequence[str]) -> int:
    """``len(class_lies(...))`` without building them."""
    usable = sum(1 for g in problem.gpu_types if (c.throughput.get(g) or 0) > 0 and c.type_cap(g) > 0)
    if usable < 2:
        return 0
    rest = usable - 1
    per = (("inflate" in kinds) * ((rest > 1) + rest)) + ("sandbag" in kinds)
    return len(factors) * per


def schedule(problem: Problem, sample: int, factors: Sequence[float] = FACTORS, kinds: Sequence[str] = KINDS,
             seed: int = SEED) -> tuple[list[Lie], int]:
    """(the false reports the probe tries, how many there are in all). All of them when ``sample`` covers them;
    else classes in a seeded random order, two lies each (their first: :func:`class_lies`) per pass, until
    ``sample`` are taken (only the classes drawn have their lies built)."""
    pairs = [(t, c) for t in problem.tenants for c in t.classes]
    counts = [_count(problem, c, factors, kinds) for _t, c in pairs]
    total = sum(counts)
    if sample >= total:
        return [lie for t, c in pairs for lie in class_lies(problem, t, c, factors, kinds)], total
    perm = [int(i) for i in np.random.default_rng(seed).permutation(len(pairs)) if counts[i]]
    built: dict[int, list[Lie]] = {}
    out: list[Lie] = []
    depth = 0
    while len(out) < sample:
        for i in perm:
            if counts[i] <= depth:
                continue
            if i not in built:
                built[i] = class_lies(problem, *pairs[i], factors, kinds)
            out.extend(built[i][depth:depth + 2][: sample - len(out)])
            if len(out) >= sample:
                break
        depth += 2
    return out, total


def _tenant_true(speed: np.ndarray, tenant: Sequence[str], a: Allocation) -> dict[str, float]:
    """Each tenant's TRUE normalized throughput in ``a`` (an allocation of the problem or of a lie about it, whose
    virtual users are the same, in the same order): ``speed``, ``tenant`` are the true problem's."""
    u = (np.asarray(a.x, dtype=float) * speed).sum(axis=1)
    out: dict[str, float] = {}
    for i, t in enumerate(tenant):
        out[t] = out.get(t, 0.0) + float(u[i])
    return out


def strategy_proof_probe(alloc: Allocation, solve: Solve | None, factors: Sequence[float] = FACTORS,
                         sample: int | None = SAMPLE, kinds: Sequence[str] = KINDS, budget_s: float | None = None,
                         clock: Callable[[], float] = time.monotonic) -> PropertyResult:
    """Re-solve with false reports (module docstring: both lie models); the liar's TRUE throughput must not rise.

    ``solve(problem) -> Allocation`` is the mechanism under test (e.g. ``lambda p: policies.solve(name, p)``),
    the policy that produced ``alloc``: the honest outcome is ``alloc`` itself (a policy is a pure function of
    its problem, so re-solving it would give it again). A probe, not a proof: it tries at most ``sample``
    false reports (None: :func:`budget`; 0: the probe does not run, value None), each one re-solve, and the
    detail says how many of how many, per lie model; for a policy in ``CLAIMS`` it also says what the policy
    promises. ``budget_s`` (None: no limit): seconds the probe may take (module docstring; ``clock`` reads
    the time, a parameter for tests).
    """
    if solve is None:
        return PropertyResult("strategy_proof_probe", None, "no solver given to re-solve with false reports")
    if sample == 0:
        return PropertyResult("strategy_proof_probe", None, "not run (--check-sample 0)")
    problem = alloc.problem
    vu = problem.virtual_users()
    n = max(2, WORK // max(1, vu.n)) if sample is None else int(sample)  # budget(problem)
    tried, total = schedule(problem, n, factors, kinds)
    honest = _tenant_true(vu.speed, vu.tenant, alloc)
    count = {k: 0 for k in kinds}
    worst: dict[str, tuple[float, Lie, float]] = {}
    start = clock()
    longest = max(0.0, float(alloc.solve_seconds or 0.0))  # a re-solve's expected time: the longest one so far
    done = 0
    for lie in tried:
        if budget_s is not None and clock() - start + longest > budget_s:
            break
        t0 = clock()
        lied = solve(lie.apply(problem))
        longest = max(longest, clock() - t0)
        done += 1
        count[lie.kind] += 1
        got = _tenant_true(vu.speed, vu.tenant, lied)[lie.tenant]
        gain = got - honest[lie.tenant]
        if gain > _tol(honest[lie.tenant]) and gain > worst.get(lie.kind, (0.0,))[0]:
            worst[lie.kind] = (gain, lie, got)
    parts = []
    for k in kinds:
        if k in worst:
            gain, lie, got = worst[k]
            cls = f" class {lie.cls}" if len(problem.tenant(lie.tenant).classes) > 1 else ""
            parts.append(f"{KIND_TEXT[k]}: {lie.tenant} gains by reporting{cls} {lie.what}: true throughput "
                         f"{_fmt(honest[lie.tenant])} -> {_fmt(got)}")
        elif count[k]:
            parts.append(f"{KIND_TEXT[k]}: no gain from {count[k]} false reports")
    stop = ""
    if done < len(tried):
        stop = (f" ({STOPPED} of {budget_s:g} s after {done} of {len(tried)} false reports, "
                f"{clock() - start:.1f} s; a re-solve takes up to {longest:.2g} s)")
        if not done:
            return PropertyResult("strategy_proof_probe", None, "not run: one re-solve would pass the time budget"
                                  + stop, None)
    if not parts:
        parts.append("no false report to try (every class has a single usable GPU type)")
    scope = ""
    if len(tried) < total:
        classes = len({(lie.tenant, lie.cls) for lie in tried})
        scope = (f" (tried {len(tried)} of {total} false reports: {classes} class(es) drawn with seed {SEED}, "
                 f"--check-sample {n})")
    claim = f" [{alloc.policy}: {CLAIMS[alloc.policy]}]" if alloc.policy in CLAIMS else ""
    top = max((w[0] for w in worst.values()), default=0.0)
    return PropertyResult("strategy_proof_probe", not worst, "; ".join(parts) + stop + scope + claim, top)
