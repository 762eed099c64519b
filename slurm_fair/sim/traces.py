"""Job traces for the trace-driven simulator: the records (:class:`Trace`, :class:`TraceJob`), the time limit a
user asks for, and the checks every job and throughput passes whichever source it came from. The sources, one
module each:

- :mod:`.gavel_trace`: Gavel's Philly-derived ``.trace`` files with Gavel's measured throughputs (measured per
  scale factor, so not linear in the GPU count);
- :mod:`.csv_trace`: a CSV trace and a CSV of per-GPU profiles (linear scaling: a job's throughput is the
  per-GPU throughput times its GPUs), read and written;
- :mod:`.synthetic_trace`: a seeded synthetic trace (Poisson arrivals, Philly's GPU counts, exponential durations).

A :class:`Trace` is a tuple of jobs (:class:`TraceJob`: when it is submitted, by which account, of which class,
on how many GPUs, how much work in steps, optionally its time limit) and the throughput of every job class on every
GPU type it can run on.

**Time limits** (what Slurm's backfill plans with): a job's limit is never shorter than its run time on the slowest
type it may run on (its typed request, else any type of its class), so it never ends by its limit, not even after a
requeue (it restarts from its checkpoint, and the limit counts from its latest start); the simulator does not kill
jobs at their limit. Generated and Gavel traces get the limit a user would ask for (:func:`asked_limit`): the
job's run time on its class's slowest type times ``LIMIT_FACTOR`` (1), rounded up to a whole hour.

**Throughput is per job.** ``trace.throughput[cls][gpu_type]`` is the steps/s of one whole job of class ``cls``
on that GPU type, with all its GPUs (a job of ``work`` steps alone on type ``t`` takes ``work / throughput``
seconds). Since a job's throughput depends on how many GPUs it has, a class fixes the GPU count: the class of a
job of base class ``c`` on ``g`` > 1 GPUs is ``c-x<g>`` (:func:`scaled_class`), e.g. ``resnet50-bs64-x4``; all
jobs of a class have the same ``gpus``. Class names ending in ``-x<digits>`` are therefore reserved: a CSV or a
``classes`` mapping that uses one as a base class is refused.

Everything but the ``read_*``/``write_csv`` functions and :func:`read_text` is a pure function of data
(``parse_gavel``, ``parse_csv`` and ``render_csv`` are the pure cores of the readers and the writer). Bad input
raises ``InputError`` whose field names the file, the line and the column (``trace.csv line 7 gpus``).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from ..errors import InputError
from ..validate import gpu_type as _gpu_type_name
from ..validate import name as _name
from ..validate import number

GPUS_MAX = 1024  # most GPUs of one job
LIMIT_FACTOR = 1.0  # a generated or Gavel job's time limit: its run time on its slowest type times this, ...
LIMIT_STEP = 3600.0  # ... rounded up to a multiple of this (seconds)
SCALED_CLASS = re.compile(r".*-x\d+")  # a scaled class's name (reserved: no base class may look like it)


@dataclass(frozen=True)
class TraceJob:
    id: str
    submit: float  # seconds from the trace start
    account: str
    cls: str  # job class (fixes the GPU count, see the module docstring)
    gpus: int  # GPUs per job, >= 1, all at once
    work: float  # steps, > 0
    gpu_type: str | None = None  # a typed request; None = any type its class can run on
    time_limit: float | None = None  # seconds (module docstring); None = the partition's DefaultTime


@dataclass(frozen=True)
class Trace:
    """Jobs sorted by submit time, then id (runs of digits compared as numbers: ``t-9`` before ``t-10``), and
    ``throughput``: class -> GPU type -> steps/s of one whole job (absent = cannot run there). Construction
    sorts the jobs, freezes the mappings and checks the invariants (InputError naming the job): finite numbers
    in range, unique ids, every job's class in ``throughput`` with a throughput > 0 somewhere, one GPU count per
    class, a typed request only for a type its class can run on. ``throughput`` may hold classes no job uses."""

    jobs: tuple[TraceJob, ...]
    throughput: Mapping[str, Mapping[str, float]]
    source: str

    def __post_init__(self) -> None:
        throughput = _checked_throughput(self.throughput)
        jobs = tuple(sorted((_checked_job(j) for j in self.jobs), key=_order))
        _check_together(jobs, throughput)
        object.__setattr__(self, "jobs", jobs)
        object.__setattr__(self, "throughput", throughput)

    def accounts(self) -> tuple[str, ...]:
        """The accounts that submit jobs, sorted."""
        return tuple(sorted({j.account for j in self.jobs}))

    def classes(self) -> tuple[str, ...]:
        """The classes of the jobs, sorted."""
        return tuple(sorted({j.cls for j in self.jobs}))

    def gpu_types(self) -> tuple[str, ...]:
        """The GPU types some job can run on, sorted."""
        return tuple(sorted({t for c in self.classes() for t in self.throughput[c]}))


def asked_limit(work: float, throughput: Mapping[str, float]) -> float:
    """The time limit (s) a user asks for a job of ``work`` steps whose class runs at ``throughput`` ({type:
    steps/s}): its run time on the slowest type times ``LIMIT_FACTOR``, rounded up to a multiple of ``LIMIT_STEP``."""
    return max(1.0, math.ceil(LIMIT_FACTOR * work / min(throughput.values()) / LIMIT_STEP - 1e-9)) * LIMIT_STEP


def with_time_limits(trace: Trace) -> Trace:
    """``trace`` with :func:`asked_limit` for every job that has no time limit."""
    return replace(trace, jobs=tuple(j if j.time_limit is not None else
                                     replace(j, time_limit=asked_limit(j.work, trace.throughput[j.cls]))
                                     for j in trace.jobs))


def scaled_class(base: str, gpus: int) -> str:
    """The class of a ``gpus``-GPU job of class ``base``: ``base`` itself for one GPU, else ``base-x<gpus>``."""
    return base if gpus == 1 else f"{base}-x{gpus}"


# ------------------------------------------------------------------------------------------ checks


def check_submit(field: str, value: Any) -> float:
    return number(field, value, nonneg=True, text=True)


def check_work(field: str, value: Any) -> float:
    return number(field, value, positive=True, text=True)


def check_throughput(field: str, value: Any) -> float:
    return number(field, value, positive=True, text=True)


def check_gpus(field: str, value: Any) -> int:
    v = number(field, value, positive=True, most=GPUS_MAX, text=True)
    if v != int(v):
        raise InputError(field, value, "must be a whole number of GPUs")
    return int(v)


def check_base_class(field: str, value: Any) -> str:
    value = _name(field, value)
    if SCALED_CLASS.fullmatch(value):
        raise InputError(field, value, "a class name ending in -x<digits> is reserved: a g-GPU job of class c "
                                       "has the class c-x<g>")
    return value


def check_runnable(field: str, cls: str, gpu_type: str | None, throughput: Mapping[str, Mapping[str, float]],
              where: str) -> None:
    """A job of ``cls`` typed to ``gpu_type`` can run: its class has a throughput there (or it is untyped)."""
    if gpu_type is not None and gpu_type not in throughput[cls]:
        raise InputError(field, gpu_type, f"class {cls!r} has no throughput on {gpu_type} in {where}")


def _checked_throughput(throughput: Mapping[str, Mapping[str, float]]) -> Mapping[str, Mapping[str, float]]:
    if not isinstance(throughput, Mapping):
        raise InputError("throughput", throughput, "must be a mapping {class: {gpu type: steps/s}}")
    out = {}
    for cls, by_type in throughput.items():
        _name("throughput class", cls)
        if not isinstance(by_type, Mapping) or not by_type:
            raise InputError(f"throughput[{cls!r}]", by_type, "must be a non-empty mapping {gpu type: steps/s}")
        out[cls] = MappingProxyType({_gpu_type_name(f"throughput[{cls!r}] gpu type", t):
                                     check_throughput(f"throughput[{cls!r}][{t!r}]", v) for t, v in by_type.items()})
    return MappingProxyType(out)


def _checked_job(job: TraceJob) -> TraceJob:
    if not isinstance(job, TraceJob):
        raise InputError("jobs", job, "must hold TraceJob values")
    f = f"job {job.id!r}"
    return TraceJob(
        id=_name(f"{f} id", job.id), submit=check_submit(f"{f} submit", job.submit),
        account=_name(f"{f} account", job.account), cls=_name(f"{f} cls", job.cls),
        gpus=check_gpus(f"{f} gpus", job.gpus), work=check_work(f"{f} work", job.work),
        gpu_type=None if job.gpu_type is None else _gpu_type_name(f"{f} gpu_type", job.gpu_type),
        time_limit=None if job.time_limit is None else number(f"{f} time_limit", job.time_limit, positive=True,
                                                              text=True),
    )


def _check_together(jobs: Sequence[TraceJob], throughput: Mapping[str, Mapping[str, float]]) -> None:
    ids: set[str] = set()
    gpus_of: dict[str, int] = {}
    for j in jobs:
        f = f"job {j.id!r}"
        if j.id in ids:
            raise InputError(f"{f} id", j.id, "duplicate job id")
        ids.add(j.id)
        if j.cls not in throughput:
            raise InputError(f"{f} cls", j.cls, "class has no throughput")
        check_runnable(f"{f} gpu_type", j.cls, j.gpu_type, throughput, "the trace")
        slowest = j.work / min(v for t, v in throughput[j.cls].items() if j.gpu_type in (None, t))
        if j.time_limit is not None and j.time_limit < slowest * (1 - 1e-9):
            raise InputError(f"{f} time_limit", j.time_limit, f"is shorter than the job's {slowest:.0f} s on its "
                             "slowest type (the simulator does not kill a job at its limit)")
        if gpus_of.setdefault(j.cls, j.gpus) != j.gpus:
            raise InputError(f"{f} gpus", j.gpus, f"other jobs of class {j.cls!r} have {gpus_of[j.cls]} GPUs; "
                                                  "a class's throughput is per job, so it fixes the GPU count")


def _natural(text: str) -> tuple:
    parts = re.split(r"(\d+)", text)  # str, digits, str, digits, ..., str: the types alternate the same way
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts))


def _order(job: TraceJob) -> tuple:
    return job.submit, _natural(job.id), job.id


# ------------------------------------------------------------------------------------------ files


def read_text(path: str | os.PathLike) -> str:
    """A file's text as UTF-8 (a leading byte-order mark is dropped), or InputError naming the file."""
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise InputError(name, name, f"cannot be read: {e.strerror or e}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise InputError(f"{name} line {line}", data[e.start:e.start + 4],
                         f"is not UTF-8 text (byte {e.start})") from None
