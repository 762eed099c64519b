"""Pure data model of a sharing problem and of an allocation (no I/O).

A *problem* is a set of GPU types with counts and a set of tenants (Slurm accounts). Each tenant has a
weight and one or more job classes; a class has a raw throughput per GPU type (any positive unit, missing
or 0 = cannot run there), an optional demand (most GPUs its jobs can use now, in all) and an optional
``type_demand`` {type: GPUs} (most GPUs *of that type* its jobs can use now).

Per-type demand rules: when ``type_demand`` is given, a type absent from it means 0 GPUs of that type; a
type with 0 (or no throughput) is *unusable* for the class. A class's effective total demand is the
smaller of ``demand`` and the sum of its per-type caps over its usable types (when ``demand`` is absent,
that sum alone). So every allocation obeys ``x[l][t] <= type_cap[l][t]`` and ``sum_t x[l][t] <= demand[l]``.

OEF works on *virtual users*: every class of every tenant is one, carrying an equal part of its tenant's
weight (OEF §4.2.4). Its *normalized throughput* on a type is the raw throughput divided by the raw
throughput on its own slowest usable type ("equivalent slowest GPUs", OEF §2.3); a type whose per-type cap
is 0 is not usable, so it neither counts as the slowest type nor gets any speed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping

import numpy as np

from .errors import InputError
from .validate import number


@dataclass(frozen=True)
class ClassJob:
    """One job of a class, for the policies that decide per job (themis, hadar)."""

    id: str
    gpus: int  # GPUs it runs on (all at once: a gang)
    remaining: float  # work left, in seconds on the class's slowest usable GPU type


DEFAULT_REMAINING = 3600.0  # seconds of work assumed for a job whose remaining work nobody knows


@dataclass(frozen=True)
class JobClass:
    name: str
    throughput: Mapping[str, float]
    demand: float | None = None  # GPUs; None = unlimited (or the sum of ``jobs``' GPUs when only they are given)
    type_demand: Mapping[str, float] | None = None  # GPUs per type; None = no per-type caps, absent type = 0
    jobs: tuple[ClassJob, ...] | None = None  # None = not given (see :meth:`job_list`)

    def job_list(self, usable_gpus: float) -> tuple[tuple[ClassJob, ...], bool]:
        """The class's jobs and whether they were made up: without ``jobs``, one 1-GPU job of
        ``DEFAULT_REMAINING`` seconds per GPU of demand (per usable GPU when the demand is unlimited)."""
        if self.jobs is not None:
            return self.jobs, False
        d = self.effective_demand()
        count = int(math.floor(min(d if d is not None else math.inf, usable_gpus) + 1e-9))
        return tuple(ClassJob(f"{self.name}#{i}", 1, DEFAULT_REMAINING) for i in range(count)), True

    def type_cap(self, gpu_type: str) -> float:
        """Most GPUs of ``gpu_type`` the class can use (``inf`` when it has no per-type caps)."""
        if self.type_demand is None:
            return math.inf
        return float(self.type_demand.get(gpu_type, 0.0))

    def effective_demand(self) -> float | None:
        """``demand``, or the sum of ``type_demand`` when only that is given, or the GPUs of ``jobs`` when
        only they are (None = unlimited)."""
        if self.demand is not None:
            return self.demand
        if self.type_demand is not None:
            return float(sum(self.type_demand.values()))
        if self.jobs is not None:
            return float(sum(j.gpus for j in self.jobs))
        return None


@dataclass(frozen=True)
class Tenant:
    name: str
    classes: tuple[JobClass, ...]
    weight: float = 1.0


@dataclass(frozen=True)
class VirtualUsers:
    """Array view of a problem: one row per (tenant, class)."""

    tenant: tuple[str, ...]  # tenant name of each row
    cls: tuple[str, ...]  # class name of each row
    weight: np.ndarray  # (n,) tenant weight / number of the tenant's classes
    raw: np.ndarray  # (n, k) raw throughput, 0 where the class cannot run
    speed: np.ndarray  # (n, k) normalized throughput (raw / raw on slowest usable type), 0 = unusable
    demand: np.ndarray  # (n,) GPUs, np.inf = unlimited; already <= the sum of the usable type caps
    type_cap: np.ndarray  # (n, k) most GPUs of each type, np.inf = uncapped; 0 wherever speed is 0
    capacity: np.ndarray  # (k,) GPUs per type
    gpu_types: tuple[str, ...]

    @property
    def n(self) -> int:
        return len(self.tenant)

    @property
    def k(self) -> int:
        return len(self.gpu_types)


@dataclass(frozen=True)
class Problem:
    gpu_types: Mapping[str, int]  # ordered: type -> GPU count
    tenants: tuple[Tenant, ...]

    def virtual_users(self) -> VirtualUsers:
        types = tuple(self.gpu_types)
        rows_t, rows_c, w, raw, dem, tcap = [], [], [], [], [], []
        for t in self.tenants:
            for c in t.classes:
                rows_t.append(t.name)
                rows_c.append(c.name)
                w.append(t.weight / len(t.classes))
                caps = [c.type_cap(g) for g in types]
                # a type capped at 0 is unusable: no throughput there (and not the slowest type)
                raw.append([float(c.throughput.get(g, 0.0) or 0.0) if cap > 0 else 0.0 for g, cap in zip(types, caps)])
                tcap.append(caps)
                d = c.effective_demand()
                dem.append(math.inf if d is None else float(d))
        n, k = len(rows_t), len(types)
        raw_a = np.array(raw, dtype=float).reshape(n, k)
        tcap_a = np.array(tcap, dtype=float).reshape(n, k)
        speed = np.zeros_like(raw_a)
        for i in range(raw_a.shape[0]):
            pos = raw_a[i][raw_a[i] > 0]
            if pos.size:
                speed[i] = raw_a[i] / pos.min()
        tcap_a[speed <= 0] = 0.0
        dem_a = np.minimum(np.array(dem, dtype=float), tcap_a.sum(axis=1)) if n else np.array(dem, dtype=float)
        return VirtualUsers(
            tenant=tuple(rows_t),
            cls=tuple(rows_c),
            weight=np.array(w, dtype=float),
            raw=raw_a,
            speed=speed,
            demand=dem_a,
            type_cap=tcap_a,
            capacity=np.array([float(self.gpu_types[g]) for g in types], dtype=float),
            gpu_types=types,
        )

    def tenant(self, name: str) -> Tenant:
        for t in self.tenants:
            if t.name == name:
                return t
        raise KeyError(name)


@dataclass(frozen=True)
class JobPlacement:
    """One job a per-job policy (``hadar``) admitted: the GPUs of each type its gang runs on, and the gang's
    normalized speed (that of its slowest type: every worker waits for the slowest one)."""

    tenant: str
    cls: str
    job: str  # ClassJob.id (made-up jobs: "<class>#<i>")
    gpus: tuple[tuple[str, int], ...]  # (GPU type, GPUs) for each type it uses, in the problem's type order
    speed: float  # normalized throughput of one worker of the gang: the smallest over the types it uses

    def as_dict(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "class": self.cls, "job": self.job, "gpus": dict(self.gpus),
                "speed": self.speed}


@dataclass(frozen=True)
class Allocation:
    """Fractional GPUs per virtual user (row) and GPU type (column) of ``problem``."""

    problem: Problem
    policy: str
    x: np.ndarray  # (n, k)
    solve_seconds: float = 0.0
    solver: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    # a warm start / state for the next solve of a similar problem (policies that take ``warm=``, JSON-able;
    # ``oef-coop``: its binding envy rows as pairs of (tenant, class) keys; ``themis``: held GPUs, lease age,
    # elapsed time and work done per app); empty for the others
    warm: Any = ()
    # market policies (``bud``): the price of one GPU of each type, in budget units (every tenant's budget is
    # its weight share of 1, split evenly among its classes); None for the others
    prices: Mapping[str, float] | None = None
    # per-job policies (``hadar``): the jobs admitted and where each runs (``x`` is their per-type sum plus the
    # idle GPUs handed out afterwards); empty for the others
    job_placements: tuple[JobPlacement, ...] = ()

    @cached_property
    def vu(self) -> VirtualUsers:
        """The problem's array view (computed once per allocation; the problem is immutable)."""
        return self.problem.virtual_users()

    def user_throughput(self) -> np.ndarray:
        """Normalized throughput of every virtual user."""
        return (self.x * self.vu.speed).sum(axis=1)

    def per_tenant(self) -> dict[str, dict[str, float]]:
        vu = self.vu
        out: dict[str, dict[str, float]] = {t.name: {g: 0.0 for g in vu.gpu_types} for t in self.problem.tenants}
        for i, tname in enumerate(vu.tenant):
            for j, g in enumerate(vu.gpu_types):
                out[tname][g] += float(self.x[i, j])
        return out

    def per_class(self) -> dict[str, dict[str, dict[str, float]]]:
        vu = self.vu
        out: dict[str, dict[str, dict[str, float]]] = {t.name: {} for t in self.problem.tenants}
        for i, (tname, cname) in enumerate(zip(vu.tenant, vu.cls)):
            out[tname][cname] = {g: float(self.x[i, j]) for j, g in enumerate(vu.gpu_types)}
        return out

    def tenant_throughput(self) -> dict[str, float]:
        vu = self.vu
        u = self.user_throughput()
        out = {t.name: 0.0 for t in self.problem.tenants}
        for i, tname in enumerate(vu.tenant):
            out[tname] += float(u[i])
        return out

    def total_throughput(self) -> float:
        return float(self.user_throughput().sum())

    def as_dict(self) -> dict[str, Any]:
        out = {
            "policy": self.policy,
            "solver": self.solver,
            "allocation": self.per_tenant(),
            "classes": self.per_class(),
            "throughput": self.tenant_throughput(),
            "total_throughput": self.total_throughput(),
            "solve_seconds": self.solve_seconds,
        }
        if self.prices is not None:
            out["prices"] = dict(self.prices)
        if self.job_placements:
            out["job_placements"] = [p.as_dict() for p in self.job_placements]
        return out


# --------------------------------------------------------------------------- parsing


# Documented ranges of a problem (beyond them the LPs lose precision or the input is a mistake)
MAX_GPUS = 1_000_000  # any GPU count: gpu_types, demand, type_demand
MAX_RATIO = 1e6  # largest/smallest positive throughput within one class, and largest/smallest tenant weight
# known keys of each object; "comment" (free text, ignored) is allowed in every one
PROBLEM_KEYS = ("gpu_types", "tenants", "comment")
TENANT_KEYS = ("name", "weight", "classes", "comment")
CLASS_KEYS = ("name", "throughput", "demand", "type_demand", "jobs", "comment")
JOB_KEYS = ("id", "gpus", "remaining", "comment")
MAX_REMAINING = 1e9  # seconds of work left in one job (about 31 years)


def _number(path: str, value: Any, *, positive: bool = False, allow_zero: bool = True,
            most: float | None = None) -> float:
    """A problem file's number: finite and >= 0 always, > 0 / != 0 / <= most as asked (``validate.number``)."""
    return number(path, value, positive=positive, nonzero=not allow_zero, nonneg=True, most=most)


def _name(path: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(path, value, "must be a non-empty string")
    return value


def _known_keys(path: str, obj: Mapping[str, Any], known: tuple[str, ...]) -> None:
    for key in obj:
        if key not in known:
            raise InputError(f"{path}.{key}" if path else str(key), key,
                             f"unknown key (known: {', '.join(known)})")


def _named_items(path: str, items: Any, known: tuple[str, ...]) -> list[tuple[str, dict]]:
    """A non-empty list of objects with unique ``name`` keys and only ``known`` keys, with their paths."""
    if not isinstance(items, list) or not items:
        raise InputError(path, items, "must be a non-empty list")
    seen: set[str] = set()
    out = []
    for i, item in enumerate(items):
        p = f"{path}[{i}]"
        if not isinstance(item, dict):
            raise InputError(p, item, "must be an object")
        _known_keys(p, item, known)
        name = _name(f"{p}.name", item.get("name"))
        if name in seen:
            raise InputError(f"{p}.name", name, "duplicate name")
        seen.add(name)
        out.append((p, item))
    return out


def _per_type(path: str, value: Any, gpu_types: Mapping[str, int], what: str,
              none_is_zero: bool = False, most: float | None = None) -> dict[str, float]:
    """An object {gpu_type: number >= 0} over known GPU types (``throughput``, ``type_demand``)."""
    if not isinstance(value, dict):
        raise InputError(path, value, f"must be an object {{gpu_type: {what}}}")
    out = {}
    for g, v in value.items():
        if g not in gpu_types:
            raise InputError(f"{path}.{g}", g, f"unknown GPU type (known: {', '.join(gpu_types)})")
        out[g] = _number(f"{path}.{g}", 0 if (v is None and none_is_zero) else v, most=most)
    return out


def _jobs(path: str, items: Any) -> tuple[ClassJob, ...]:
    if not isinstance(items, list):
        raise InputError(path, items, "must be a list of {id, gpus, remaining}")
    out, seen = [], set()
    for i, j in enumerate(items):
        p = f"{path}[{i}]"
        if not isinstance(j, dict):
            raise InputError(p, j, "must be an object {id, gpus, remaining}")
        _known_keys(p, j, JOB_KEYS)
        jid = j.get("id")
        if not isinstance(jid, str) or not jid.strip():
            raise InputError(f"{p}.id", jid, "must be a non-empty string")
        if jid in seen:
            raise InputError(f"{p}.id", jid, "duplicate job id in this class")
        seen.add(jid)
        gpus = _number(f"{p}.gpus", j.get("gpus"), positive=True, most=MAX_GPUS)
        if gpus != int(gpus):
            raise InputError(f"{p}.gpus", j.get("gpus"), "must be a whole number >= 1")
        rem = _number(f"{p}.remaining", j.get("remaining"), most=MAX_REMAINING)
        out.append(ClassJob(jid, int(gpus), rem))
    return tuple(out)


def problem_from_dict(data: Any) -> Problem:
    """Parse the documented input JSON shape; errors name the JSON path and the value. Unknown keys are
    errors; GPU counts are whole numbers <= MAX_GPUS; within a class the largest positive throughput is at
    most MAX_RATIO times the smallest; weights lie in [1/MAX_RATIO, MAX_RATIO] and the largest is at most
    MAX_RATIO times the smallest."""
    if not isinstance(data, dict):
        raise InputError("$", data, "must be an object with 'gpu_types' and 'tenants'")
    _known_keys("", data, PROBLEM_KEYS)
    gt = data.get("gpu_types")
    if not isinstance(gt, dict) or not gt:
        raise InputError("gpu_types", gt, "must be a non-empty object {type: count}")
    gpu_types: dict[str, int] = {}
    for g, cnt in gt.items():
        _name("gpu_types", g)
        v = _number(f"gpu_types.{g}", cnt, most=MAX_GPUS)
        if v != int(v):
            raise InputError(f"gpu_types.{g}", cnt, "must be a whole number >= 0")
        gpu_types[g] = int(v)
    tenants = []
    weights: list[tuple[str, float]] = []
    job_ids: dict[str, str] = {}  # job id -> where it was first given: a job belongs to one class of one tenant
    for p, t in _named_items("tenants", data.get("tenants"), TENANT_KEYS):
        weight = _number(f"{p}.weight", t.get("weight", 1), positive=True, most=MAX_RATIO)
        if weight < 1 / MAX_RATIO:
            raise InputError(f"{p}.weight", t.get("weight"), f"must be at least {1 / MAX_RATIO:g}")
        weights.append((f"{p}.weight", weight))
        classes = []
        for cp, c in _named_items(f"{p}.classes", t.get("classes"), CLASS_KEYS):
            tp = c.get("throughput")
            thr = _per_type(f"{cp}.throughput", tp, gpu_types, "throughput", none_is_zero=True)
            pos = [v for v in thr.values() if v > 0]
            if not pos:
                raise InputError(f"{cp}.throughput", tp, "needs a throughput > 0 on at least one GPU type")
            if max(pos) > MAX_RATIO * min(pos):
                raise InputError(f"{cp}.throughput", tp, f"the fastest type is more than {MAX_RATIO:g} times "
                                 "the slowest; at most that ratio within one class")
            demand = c.get("demand")
            if demand is not None:
                demand = _number(f"{cp}.demand", demand, most=MAX_GPUS)
            td = c.get("type_demand")
            type_demand = None if td is None else _per_type(f"{cp}.type_demand", td, gpu_types, "GPUs",
                                                            most=MAX_GPUS)
            jobs = None if c.get("jobs") is None else _jobs(f"{cp}.jobs", c["jobs"])
            for i, j in enumerate(jobs or ()):
                if j.id in job_ids:
                    raise InputError(f"{cp}.jobs[{i}].id", j.id, f"duplicate job id: also {job_ids[j.id]}")
                job_ids[j.id] = f"{cp}.jobs[{i}]"
            classes.append(JobClass(name=c["name"], throughput=thr, demand=demand, type_demand=type_demand,
                                    jobs=jobs))
        tenants.append(Tenant(name=t["name"], classes=tuple(classes), weight=weight))
    lo = min(weights, key=lambda w: w[1])
    hi = max(weights, key=lambda w: w[1])
    if hi[1] > MAX_RATIO * lo[1]:
        raise InputError(hi[0], hi[1], f"more than {MAX_RATIO:g} times the smallest weight ({lo[0]} = {lo[1]:g}); "
                         "weight ratios are at most that")
    return Problem(gpu_types=gpu_types, tenants=tuple(tenants))


def problem_to_dict(problem: Problem) -> dict[str, Any]:
    return {
        "gpu_types": dict(problem.gpu_types),
        "tenants": [
            {
                "name": t.name,
                "weight": t.weight,
                "classes": [
                    {
                        "name": c.name,
                        "throughput": dict(c.throughput),
                        **({} if c.demand is None else {"demand": c.demand}),
                        **({} if c.type_demand is None else {"type_demand": dict(c.type_demand)}),
                        **({} if c.jobs is None else {"jobs": [{"id": j.id, "gpus": j.gpus, "remaining": j.remaining}
                                                              for j in c.jobs]}),
                    }
                    for c in t.classes
                ],
            }
            for t in problem.tenants
        ],
    }
