"""The pure core of profiling: which values are acceptable, how samples update a profile, which value the
policies use, and where a tenant's reported profile contradicts what its jobs measured. No I/O.

Rules (each implemented below):

* **Sources** of a stored profile value: ``set`` (``profiles set``), ``imported`` (``profiles import FILE``),
  ``shipped`` (``profiles import --shipped``), ``measured`` (a ``profile submit`` job) and ``harvested``
  (a report from an ordinary running job). ``set``/``imported`` are *reported* (typed in by a person);
  ``measured``/``harvested`` are *measured*. Values of different sources are kept side by side.
* **Validation** (:func:`check_sample`): a throughput must be a finite number within
  ``[profiling] min_throughput .. max_throughput`` and the GPU type one the cluster has; otherwise an
  ``InputError`` naming the class, the GPU type and the value.
* **Update** (:func:`update`): the stored value is a moving average: the plain mean of the first samples,
  then an exponential average giving each new sample the weight ``average_weight`` (weight
  ``max(average_weight, 1/n)`` for the n-th sample). Once a value has ``outlier_after`` samples, a sample more
  than ``outlier_factor`` times above or below it is *rejected*: counted in ``rejected``, the value unchanged.
* **Flags** (:func:`flags`): a measured value is ``stale`` when its last sample is older than ``stale_after``
  seconds and ``single`` when it rests on one sample. Stale values are still used (a stale measurement beats
  none) but shown as such.
* **Effective value** (:func:`effective`), per (account, class, GPU type): with ``prefer_measured`` on, the
  measured value when there is one; otherwise the newest reported value (``set`` or ``imported``); then the
  measured value (it fills types nobody reported); then a stored ``shipped`` value. The measured value is
  the ``measured`` one (a controlled profiling run) if any, else the ``harvested`` one.
* **Conflicts** (:func:`find_conflicts`): for an account's own reported profile of a class and its measured
  one, both are turned into *speedups* relative to a common reference type (the type, among those with both
  values, where the measured throughput is lowest). A type whose reported speedup differs from the measured
  one by a factor beyond ``1 + margin`` (either way) is a conflict. Speedups, not absolute numbers: a tenant
  may count in samples/s where the agent counts steps/s, and what wins GPUs under OEF is the ratio between
  types, not the unit. With fewer than two such types nothing can be compared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

from ..errors import InputError
from ..store.profiles import ProfileValue

SOURCES = ("imported", "set", "measured", "harvested", "shipped")
REPORTED = ("set", "imported")
MEASURED = ("measured", "harvested")


@dataclass(frozen=True)
class Rules:
    """The ``[profiling]`` knobs the pure functions need (``from_config``: the config's values; its defaults are
    ``config.ProfilingConfig``'s)."""

    min_throughput: float
    max_throughput: float
    outlier_factor: float
    outlier_after: int
    average_weight: float
    stale_after: float
    conflict_margin: float
    prefer_measured: bool

    @classmethod
    def from_config(cls, p: Any) -> "Rules":
        return cls(min_throughput=float(p.min_throughput), max_throughput=float(p.max_throughput),
                   outlier_factor=float(p.outlier_factor), outlier_after=int(p.outlier_after),
                   average_weight=float(p.average_weight), stale_after=float(p.stale_after),
                   conflict_margin=float(p.conflict_margin), prefer_measured=bool(p.prefer_measured))


def check_sample(cls: str, gpu_type: str | None, value: Any, rules: Rules,
                 known_types: Iterable[str] | None = None) -> float:
    """``value`` (a number, or its text) as a float, or an InputError naming class, type and value."""
    field = f"throughput of class {cls!r} on GPU type {gpu_type!r}"
    if not gpu_type:
        raise InputError(field, value, "no GPU type: Slurm allocated none and NVML named none")
    if known_types is not None:
        known = sorted(set(known_types))
        if gpu_type not in known:
            raise InputError(field, value, f"unknown GPU type {gpu_type!r} (the cluster has: {', '.join(known)})")
    if value is None or (isinstance(value, str) and not value.strip()):
        raise InputError(field, value, "empty")
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InputError(field, value, "must be a finite number")
    try:
        v = float(value)
    except (ValueError, OverflowError):
        raise InputError(field, value, "must be a finite number") from None
    if not math.isfinite(v):
        raise InputError(field, value, "must be a finite number")
    if v <= 0:
        raise InputError(field, value, "must be > 0")
    if not rules.min_throughput <= v <= rules.max_throughput:
        raise InputError(field, value, f"outside [profiling] min_throughput..max_throughput "
                                       f"[{rules.min_throughput:g}, {rules.max_throughput:g}]")
    return v


def sample(value: float, now: float, rules: Rules):
    """The rule for one sample as ``Store.record_sample`` takes it: ``take(old value) -> (new fields, accepted?)``
    by :func:`update` (the moving average with its outlier check)."""
    return lambda old: update(old, float(value), now, rules)


def update(row: ProfileValue | None, value: float, now: float, rules: Rules) -> tuple[dict, bool]:
    """(the profile value's new fields after one sample, accepted?); ``row`` None: no value yet. A rejected sample
    leaves throughput/samples/updated and adds 1 to ``rejected``."""
    if row is None or not row.samples:
        return {"throughput": float(value), "samples": 1, "rejected": int(row.rejected or 0) if row else 0,
                "updated": float(now)}, True
    avg, n = float(row.throughput), int(row.samples)
    rejected = int(row.rejected or 0)
    if n >= rules.outlier_after and (value > avg * rules.outlier_factor or value < avg / rules.outlier_factor):
        return {"throughput": avg, "samples": n, "rejected": rejected + 1, "updated": row.updated}, False
    w = max(rules.average_weight, 1.0 / (n + 1))
    return {"throughput": avg + w * (value - avg), "samples": n + 1, "rejected": rejected,
            "updated": float(now)}, True


def flags(row: ProfileValue, now: float, rules: Rules) -> dict[str, bool]:
    """``{"stale": ..., "single": ...}`` of a stored value (only measured values can be either)."""
    measured = row.source in MEASURED
    updated = row.updated
    return {"stale": bool(measured and updated is not None and now - float(updated) > rules.stale_after),
            "single": bool(measured and int(row.samples or 0) == 1)}


def _key(r: ProfileValue) -> tuple[str, str, str]:
    return (r.account or "", r.cls, r.gpu_type)


def _pick(rows: list[ProfileValue], sources: tuple[str, ...], newest: bool) -> ProfileValue | None:
    cands = [r for r in rows if r.source in sources]
    if not cands:
        return None
    if newest:
        return max(cands, key=lambda r: float(r.updated or 0.0))
    return min(cands, key=lambda r: sources.index(r.source))


def choose(rows: list[ProfileValue], prefer_measured: bool = False) -> ProfileValue | None:
    """The row the policies use among the rows of one (account, class, type) (module docstring)."""
    reported = _pick(rows, REPORTED, newest=True)
    measured = _pick(rows, MEASURED, newest=False)
    if prefer_measured and measured is not None:
        return measured
    return reported or measured or _pick(rows, ("shipped",), newest=True)


def effective(rows: Iterable[ProfileValue], prefer_measured: bool = False) -> list[ProfileValue]:
    """One value per (account, class, GPU type): the one :func:`choose` picks (sorted by key)."""
    groups: dict[tuple[str, str, str], list[ProfileValue]] = {}
    for r in rows:
        groups.setdefault(_key(r), []).append(r)
    out = []
    for k in sorted(groups):
        r = choose(groups[k], prefer_measured)
        if r is not None:
            out.append(r)
    return out


def find_conflicts(rows: Iterable[ProfileValue], margin: float) -> list[dict]:
    """Where an account's reported profile of a class contradicts its measured one (module docstring).

    One dict per conflicting (account, class, GPU type): ``account, class, gpu_type, reference`` (the type
    speedups are relative to), ``reported`` and ``measured`` (throughputs), ``reported_speedup``,
    ``measured_speedup``, ``ratio`` (reported speedup / measured speedup) and ``samples`` (of the measured
    value), sorted by account, class, type."""
    groups: dict[tuple[str, str], dict[str, list[ProfileValue]]] = {}
    for r in rows:
        if r.account:
            groups.setdefault((r.account, r.cls), {}).setdefault(r.gpu_type, []).append(r)
    out = []
    for (account, cls), per_type in sorted(groups.items()):
        rep: dict[str, ProfileValue] = {}
        meas: dict[str, ProfileValue] = {}
        for g, rs in per_type.items():
            a, b = _pick(rs, REPORTED, newest=True), _pick(rs, MEASURED, newest=False)
            if a is not None and b is not None:
                rep[g], meas[g] = a, b
        if len(rep) < 2:
            continue
        ref = min(sorted(meas), key=lambda g: float(meas[g].throughput))
        for g in sorted(rep):
            if g == ref:
                continue
            rs = float(rep[g].throughput) / float(rep[ref].throughput)
            ms = float(meas[g].throughput) / float(meas[ref].throughput)
            ratio = rs / ms
            if ratio > 1.0 + margin or ratio < 1.0 / (1.0 + margin):
                out.append({"account": account, "class": cls, "gpu_type": g, "reference": ref,
                            "reported": float(rep[g].throughput), "measured": float(meas[g].throughput),
                            "reported_speedup": rs, "measured_speedup": ms, "ratio": ratio,
                            "samples": int(meas[g].samples or 0)})
    return out
