"""Synthetic traces: :func:`generate` draws a seeded trace (Poisson arrivals, Philly's GPU counts, exponential
durations) over job classes, by default the shipped profiles (:func:`shipped_classes`, Gavel's measurements).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..errors import InputError
from ..profiling.shipped import load_shipped
from ..validate import gpu_type as _gpu_type_name
from ..validate import number
from .traces import Trace, TraceJob, check_base_class, scaled_class, with_time_limits

PHILLY_GPUS = (1, 2, 4, 8)  # GPUs per job in :func:`generate` ...
PHILLY_GPU_SHARES = (0.70, 0.10, 0.15, 0.05)  # ... and how often each occurs (Philly's job sizes)


def _count(field: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise InputError(field, value, f"must be a whole number >= {least}")
    return int(value)


def _per_gpu_classes(classes: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """``classes`` checked: base class -> GPU type -> steps/s per GPU, 0 (cannot run there) left out."""
    if not isinstance(classes, Mapping) or not classes:
        raise InputError("classes", classes, "must be a non-empty mapping {class: {gpu type: steps/s per GPU}}")
    out = {}
    for c, by_type in classes.items():
        base = check_base_class("classes class", c)
        if not isinstance(by_type, Mapping):
            raise InputError(f"classes[{c!r}]", by_type, "must be a mapping {gpu type: steps/s per GPU}")
        thr = {_gpu_type_name(f"classes[{c!r}] gpu type", t): number(f"classes[{c!r}][{t!r}]", v, nonneg=True)
               for t, v in by_type.items()}
        out[base] = {t: v for t, v in thr.items() if v > 0}
        if not out[base]:
            raise InputError(f"classes[{c!r}]", dict(by_type), "has no throughput > 0 on any GPU type")
    return out


def shipped_classes() -> dict[str, dict[str, float]]:
    """The shipped default profiles (Gavel's measurements, ``slurm_fair.profiling.shipped.load_shipped``) as
    ``{class: {gpu type: steps/s per GPU}}``."""
    out: dict[str, dict[str, float]] = {}
    for r in load_shipped():
        if r["account"] == "":
            out.setdefault(r["class"], {})[r["gpu_type"]] = r["throughput"]
    return out


def generate(*, seed: int, jobs: int, accounts: int, classes: Mapping[str, Mapping[str, float]] | None = None,
             rate: float, mean_duration: float, capacity: Mapping[str, int] | None = None) -> Trace:
    """A synthetic trace, the same for the same arguments (numpy ``default_rng(seed)``).

    ``jobs`` jobs arrive as a Poisson process of ``rate`` jobs per hour (independent exponential gaps; the first
    job arrives one gap after 0). Each job draws, independently: its GPU count as in Philly (1 GPU 70 %, 2 GPUs
    10 %, 4 GPUs 15 %, 8 GPUs 5 %), a duration from an **exponential** distribution with mean
    ``mean_duration`` seconds (how long it runs on its slowest usable GPU type), its account uniformly among
    ``acct-000`` ... (``accounts`` of them) and its base class uniformly among ``classes`` ({class: {gpu type:
    steps/s per GPU}}, 0 = cannot run there; default :func:`shipped_classes`). As in :func:`parse_csv`, scaling
    is linear: a ``g``-GPU job has the class ``scaled_class(base, g)`` and ``g`` x the per-GPU throughput, and
    its work is its duration times its throughput on its slowest usable type. Jobs are ``job-<n>`` in arrival
    order, untyped, with :func:`asked_limit`'s time limit.

    ``capacity`` ({gpu type: GPUs in the cluster}): draw only jobs that fit it some day: base classes that run
    on none of its types are left out, and a GPU count larger than the most GPUs of one type the class runs on
    is drawn again among the Philly sizes that fit (so the sizes that fit keep their relative shares; a trace
    whose every draw fits is the same as without ``capacity``). InputError when no class runs on the cluster."""
    seed = _count("seed", seed, 0)
    jobs = _count("jobs", jobs, 1)
    accounts = _count("accounts", accounts, 1)
    rate = number("rate", rate, positive=True)
    mean_duration = number("mean_duration", mean_duration, positive=True)
    per_gpu = _per_gpu_classes(shipped_classes() if classes is None else classes)
    fit: dict[str, int] = {}
    if capacity is not None:
        cap = {str(t): int(n) for t, n in capacity.items()}
        fit = {c: max((cap.get(t, 0) for t, v in thr.items() if v > 0), default=0) for c, thr in per_gpu.items()}
        per_gpu = {c: thr for c, thr in per_gpu.items() if fit[c] >= min(PHILLY_GPUS)}
        if not per_gpu:
            raise InputError("capacity", dict(sorted(cap.items())),
                             "no class runs on the cluster's GPU types (classes run on: "
                             + ", ".join(sorted({t for thr in _per_gpu_classes(shipped_classes() if classes is None
                                                                                 else classes).values()
                                                 for t, v in thr.items() if v > 0})) + ")")
    names = sorted(per_gpu)  # the draw does not depend on the mapping's order
    rng = np.random.default_rng(seed)
    submit = np.cumsum(rng.exponential(3600.0 / rate, jobs))
    gpus = rng.choice(PHILLY_GPUS, size=jobs, p=PHILLY_GPU_SHARES)
    # a draw of exactly 0 (probability ~2**-53) would make a job of no work: the smallest positive float instead
    duration = np.maximum(rng.exponential(mean_duration, jobs), np.finfo(float).tiny)
    account = rng.integers(accounts, size=jobs)
    base = rng.integers(len(names), size=jobs)
    width = max(3, len(str(accounts - 1)))
    throughput: dict[str, dict[str, float]] = {}
    out = []
    for i in range(jobs):
        g, c = int(gpus[i]), names[base[i]]
        if fit and g > fit[c]:  # a size the cluster cannot hold: drawn again among the sizes that fit
            sizes = [s for s in PHILLY_GPUS if s <= fit[c]]
            shares = np.array([PHILLY_GPU_SHARES[PHILLY_GPUS.index(s)] for s in sizes])
            g = int(rng.choice(sizes, p=shares / shares.sum()))
        cls = scaled_class(c, g)
        thr = throughput.setdefault(cls, {t: v * g for t, v in per_gpu[c].items()})
        out.append(TraceJob(f"job-{i + 1}", float(submit[i]), f"acct-{int(account[i]):0{width}d}", cls, g,
                            float(duration[i]) * min(thr.values())))
    source = (f"generate(seed={seed}, jobs={jobs}, accounts={accounts}, "
              f"classes={'shipped' if classes is None else len(names)}, rate={rate:g}, "
              f"mean_duration={mean_duration:g}"
              + (f", capacity={','.join(f'{t}={n}' for t, n in sorted(capacity.items()))}" if capacity is not None
                 else "") + ")")
    return with_time_limits(Trace(tuple(out), throughput, source))
