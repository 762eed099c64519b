"""Job traces for the trace-driven simulator: Gavel's traces, CSV traces, synthetic traces.

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

Sources:

- :func:`read_gavel`: Gavel's Philly-derived ``.trace`` files with Gavel's measured throughputs (measured per
  scale factor, so not linear in the GPU count);
- :func:`read_csv`: a CSV trace and a CSV of per-GPU profiles (linear scaling: a job's throughput is the
  per-GPU throughput times its GPUs);
- :func:`generate`: a seeded synthetic trace (Poisson arrivals, Philly's GPU counts, exponential durations);
- :func:`write_csv` saves a trace in :func:`read_csv`'s format.

Everything but ``read_*``/``write_csv`` is a pure function of data (``parse_gavel``, ``parse_csv`` and
``render_csv`` are the pure cores of the readers and the writer). Bad input raises ``InputError`` whose field
names the file, the line and the column (``trace.csv line 7 gpus``).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..errors import InputError
from ..profiling.shipped import GAVEL_GPU_TYPES, class_name, gavel_isolated, load_shipped
from ..validate import gpu_type as _gpu_type_name
from ..validate import name as _name
from ..validate import number

GPUS_MAX = 1024  # most GPUs of one job
PHILLY_GPUS = (1, 2, 4, 8)  # GPUs per job in :func:`generate` ...
PHILLY_GPU_SHARES = (0.70, 0.10, 0.15, 0.05)  # ... and how often each occurs (Philly's job sizes)
TRACE_COLUMNS = ("submit_time", "account", "class", "gpus", "work")  # a CSV trace's columns, in write order
TRACE_OPTIONAL = ("gpu_type", "time_limit")  # a typed request (empty = untyped); a limit in s (empty = none)
LIMIT_FACTOR = 1.0  # a generated or Gavel job's time limit: its run time on its slowest type times this, ...
LIMIT_STEP = 3600.0  # ... rounded up to a multiple of this (seconds)
PROFILE_COLUMNS = ("class", "gpu_type", "throughput")  # steps/s per GPU
GAVEL_COLUMNS = ("job type", "command", "steps argument", "needs-data-dir flag", "total steps", "arrival time",
                 "scale factor")
_SCALED = re.compile(r".*-x\d+")


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


def _submit(field: str, value: Any) -> float:
    return number(field, value, nonneg=True, text=True)


def _work(field: str, value: Any) -> float:
    return number(field, value, positive=True, text=True)


def _throughput(field: str, value: Any) -> float:
    return number(field, value, positive=True, text=True)


def _gpus(field: str, value: Any) -> int:
    v = number(field, value, positive=True, most=GPUS_MAX, text=True)
    if v != int(v):
        raise InputError(field, value, "must be a whole number of GPUs")
    return int(v)


def _base_class(field: str, value: Any) -> str:
    value = _name(field, value)
    if _SCALED.fullmatch(value):
        raise InputError(field, value, "a class name ending in -x<digits> is reserved: a g-GPU job of class c "
                                       "has the class c-x<g>")
    return value


def _runnable(field: str, cls: str, gpu_type: str | None, throughput: Mapping[str, Mapping[str, float]],
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
                                     _throughput(f"throughput[{cls!r}][{t!r}]", v) for t, v in by_type.items()})
    return MappingProxyType(out)


def _checked_job(job: TraceJob) -> TraceJob:
    if not isinstance(job, TraceJob):
        raise InputError("jobs", job, "must hold TraceJob values")
    f = f"job {job.id!r}"
    return TraceJob(
        id=_name(f"{f} id", job.id), submit=_submit(f"{f} submit", job.submit),
        account=_name(f"{f} account", job.account), cls=_name(f"{f} cls", job.cls),
        gpus=_gpus(f"{f} gpus", job.gpus), work=_work(f"{f} work", job.work),
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
        _runnable(f"{f} gpu_type", j.cls, j.gpu_type, throughput, "the trace")
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


def _read_text(path: str | os.PathLike) -> str:
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


def _paths(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str | os.PathLike]:
    out = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not out:
        raise InputError("paths", paths, "no trace file given")
    return out


# ------------------------------------------------------------------------------------------ Gavel


def read_gavel(paths: str | os.PathLike | Iterable[str | os.PathLike], throughputs_json: str | os.PathLike, *,
               accounts: str = "file", unmeasured: str = "error") -> Trace:
    """Gavel's ``.trace`` files (one per virtual cluster) with the isolated throughputs of Gavel's
    ``physical_cluster_throughputs.json``: see :func:`parse_gavel`."""
    files = {str(p): _read_text(p) for p in _paths(paths)}
    json_name = str(throughputs_json)
    text = _read_text(throughputs_json)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{json_name} line {e.lineno}", text[e.pos:e.pos + 20], f"not JSON: {e.msg}") from None
    return parse_gavel(files, gavel_isolated(data, json_name), accounts=accounts, throughputs_name=json_name,
                       unmeasured=unmeasured)


UNMEASURED = ("error", "scale", "skip")


def _scaled(isolated: Mapping[tuple[str, int], Mapping[str, float]], job_type: str, gpus: int) -> dict[str, float]:
    """Throughput of ``job_type`` on ``gpus`` GPUs from the largest smaller measured scale factor, scaled
    linearly (``{}`` when none is measured)."""
    below = sorted(sf for jt, sf in isolated if jt == job_type and sf < gpus
                   and any(v > 0 for v in isolated[(jt, sf)].values()))
    if not below:
        return {}
    sf = below[-1]
    return {t: v * gpus / sf for t, v in isolated[(job_type, sf)].items() if v > 0}


def parse_gavel(files: Mapping[str, str], isolated: Mapping[tuple[str, int], Mapping[str, float]], *,
                accounts: str = "file", throughputs_name: str = "throughputs", unmeasured: str = "error") -> Trace:
    """A trace from Gavel trace texts (``{file name: text}``) and ``isolated`` throughputs
    (:func:`slurm_fair.profiling.shipped.gavel_isolated`: ``{(job type, scale factor): {gpu type: steps/s}}``).

    A line is tab-separated: job type, command, steps argument, needs-data-dir flag, total steps, arrival time (s),
    scale factor (GPUs); the command, steps argument and flag are not used. Job ``<file stem>-<line>``: submitted at
    the arrival time, ``work`` = total steps, ``gpus`` = scale factor, class ``scaled_class(class_name(job type),
    scale factor)``, e.g. ``resnet50-bs64-x4``, with Gavel's isolated throughput of ``(job type, scale factor)`` on
    each of k80, p100 and v100 where it is > 0 (the throughput of the whole job: Gavel measured each scale factor,
    it is not linear) and :func:`asked_limit`'s time limit. A job type with no positive throughput at its scale
    factor is an error (Gavel measured scale factors 1, 2, 4 and 8 only). ``accounts="file"``: the jobs of a file
    belong to the account ``acct-<file stem>`` (its virtual cluster); ``accounts="job"``: every job is its own
    account ``job-<n>``, ``n`` its position in the trace (1 = submitted first), as Gavel treats every job as a user.

    ``unmeasured``: what to do with a job whose (job type, scale factor) Gavel did not measure (the shared
    traces have 1548 such jobs of 15264: scale factors 7-64, and A3C, CycleGAN and Recommendation above 1):
    ``"error"`` (the default), ``"scale"`` (the throughput of the largest smaller measured scale factor, times
    the ratio of GPU counts: linear scaling, an optimistic assumption the source string counts) or ``"skip"``
    (leave the job out, counted in the source string)."""
    if unmeasured not in UNMEASURED:
        raise InputError("unmeasured", unmeasured, f"must be one of {', '.join(UNMEASURED)}")
    scaled = skipped = 0
    if accounts not in ("file", "job"):
        raise InputError("accounts", accounts, "must be 'file' or 'job'")
    if not files:
        raise InputError("files", files, "no trace file given")
    jobs: list[TraceJob] = []
    throughput: dict[str, Mapping[str, float]] = {}
    job_type_of: dict[str, str] = {}  # class -> the job type it was named from
    stems: dict[str, str] = {}
    for name, text in files.items():
        stem = Path(name).stem
        if stem in stems:
            raise InputError(name, stem, f"has the stem of {stems[stem]}; job ids and accounts are named after it")
        stems[stem] = name
        for n, line in enumerate(text.split("\n"), 1):
            line = line.removesuffix("\r")
            if not line.strip():
                continue
            at = f"{name} line {n}"
            cells = line.split("\t")
            if len(cells) != len(GAVEL_COLUMNS):
                raise InputError(at, line[:80], f"has {len(cells)} tab-separated columns, expected "
                                                f"{len(GAVEL_COLUMNS)}: {', '.join(GAVEL_COLUMNS)}")
            job_type, steps, arrival, scale = cells[0], cells[4], cells[5], cells[6]
            gpus = _gpus(f"{at} scale factor", scale.strip())
            work = _work(f"{at} total steps", steps.strip())
            submit = _submit(f"{at} arrival time", arrival.strip())
            base = class_name(job_type)
            if not base:
                raise InputError(f"{at} job type", job_type, "has no letter or digit to name a class after")
            thr = {t: v for t, v in isolated.get((job_type, gpus), {}).items() if v > 0}
            if not thr and unmeasured == "skip":
                skipped += 1
                continue
            if not thr and unmeasured == "scale":
                thr = _scaled(isolated, job_type, gpus)
                scaled += bool(thr)
            if not thr:
                measured = sorted(sf for jt, sf in isolated if jt == job_type)
                raise InputError(f"{at} job type", job_type,
                                 f"has no positive isolated throughput at scale factor {gpus} on "
                                 f"{', '.join(GAVEL_GPU_TYPES)} in {throughputs_name} (scale factors with one: "
                                 f"{', '.join(map(str, measured)) or 'none'}; `simulate --unmeasured scale` "
                                 "scales a smaller one linearly, `--unmeasured skip` leaves such jobs out)")
            cls = scaled_class(base, gpus)
            if job_type_of.setdefault(cls, job_type) != job_type:
                raise InputError(f"{at} job type", job_type,
                                 f"names the class {cls!r}, as does the job type {job_type_of[cls]!r}")
            throughput[cls] = thr
            jobs.append(TraceJob(f"{stem}-{n}", submit, f"acct-{stem}", cls, gpus, work))
    if not jobs:
        raise InputError(", ".join(files), "", "no jobs")
    source = f"gavel {', '.join(files)} with {throughputs_name} (accounts={accounts})"
    if scaled:
        source += f"; {scaled} job(s) at an unmeasured scale factor scaled linearly from a smaller one"
    if skipped:
        source += f"; {skipped} job(s) at an unmeasured scale factor left out"
    trace = with_time_limits(Trace(tuple(jobs), throughput, source))
    if accounts == "job":
        trace = replace(trace, jobs=tuple(replace(j, account=f"job-{k}") for k, j in enumerate(trace.jobs, 1)))
    return trace


# ------------------------------------------------------------------------------------------ CSV


def read_csv(trace_csv: str | os.PathLike, profiles_csv: str | os.PathLike) -> Trace:
    """A CSV trace and its per-GPU profiles, both UTF-8 files: see :func:`parse_csv`."""
    return parse_csv(_read_text(trace_csv), _read_text(profiles_csv), trace_name=str(trace_csv),
                     profiles_name=str(profiles_csv))


def _csv_rows(name: str, text: str, required: tuple[str, ...], optional: tuple[str, ...] = ()
              ) -> list[tuple[int, dict[str, str]]]:
    """The non-blank rows of a CSV text as ``(line, {column: stripped cell})``, after checking the header."""
    reader = csv.reader(io.StringIO(text, newline=""))
    known = required + optional
    try:
        header = [h.strip() for h in next(reader)]
        for i, h in enumerate(header):
            if h not in known:
                raise InputError(f"{name} line 1 {h}", h, f"unknown column (known: {', '.join(known)})")
            if h in header[:i]:
                raise InputError(f"{name} line 1 {h}", h, "duplicate column")
        for c in required:
            if c not in header:
                raise InputError(f"{name} line 1 {c}", ",".join(header),
                                 f"missing column (the header needs {','.join(required)})")
        rows = []
        for record in reader:
            if not any(c.strip() for c in record):
                continue  # blank line
            if len(record) != len(header):
                raise InputError(f"{name} line {reader.line_num}", ",".join(record),
                                 f"has {len(record)} columns, the header {len(header)}")
            rows.append((reader.line_num, dict(zip(header, (c.strip() for c in record)))))
    except StopIteration:
        raise InputError(f"{name} line 1", "", f"empty file; the header must be {','.join(required)}") from None
    except csv.Error as e:
        raise InputError(f"{name} line {reader.line_num}", "", f"not valid CSV: {e}") from None
    return rows


def parse_csv(trace_text: str, profiles_text: str, *, trace_name: str = "trace",
              profiles_name: str = "profiles") -> Trace:
    """A trace from CSV texts.

    The trace has the header ``submit_time,account,class,gpus,work`` (any order), optionally ``gpu_type`` and
    ``time_limit``: submit time in seconds (>= 0), account, base class, GPUs (whole, 1..1024), work in steps (> 0),
    a typed request (an empty cell = untyped) and a time limit in seconds (empty = none). The profiles have the
    header ``class,gpu_type,throughput``: steps/s of one job of the class *per GPU* (> 0), one row per (class, GPU
    type); a type without a row is one the class cannot run on. Scaling is assumed linear: a ``g``-GPU job's
    throughput is ``g`` x the per-GPU throughput, and its class is ``scaled_class(class, g)``. Every class of the
    trace needs a profile row; profiles of other classes are ignored. Job ids are ``job-<n>``, ``n`` counting the
    trace's data rows from 1."""
    per_gpu: dict[str, dict[str, float]] = {}
    first_line: dict[tuple[str, str], int] = {}
    for n, row in _csv_rows(profiles_name, profiles_text, PROFILE_COLUMNS):
        at = f"{profiles_name} line {n}"
        base = _base_class(f"{at} class", row["class"])
        t = _gpu_type_name(f"{at} gpu_type", row["gpu_type"])
        thr = _throughput(f"{at} throughput", row["throughput"])
        if (base, t) in first_line:
            raise InputError(f"{at} gpu_type", t, f"duplicate of line {first_line[base, t]} (class {base!r})")
        first_line[base, t] = n
        per_gpu.setdefault(base, {})[t] = thr
    jobs: list[TraceJob] = []
    throughput: dict[str, dict[str, float]] = {}
    for k, (n, row) in enumerate(_csv_rows(trace_name, trace_text, TRACE_COLUMNS, TRACE_OPTIONAL), 1):
        at = f"{trace_name} line {n}"
        submit = _submit(f"{at} submit_time", row["submit_time"])
        account = _name(f"{at} account", row["account"])
        base = _base_class(f"{at} class", row["class"])
        gpus = _gpus(f"{at} gpus", row["gpus"])
        work = _work(f"{at} work", row["work"])
        typed, limit = row.get("gpu_type", ""), row.get("time_limit", "")
        gpu_type = _gpu_type_name(f"{at} gpu_type", typed) if typed else None
        if base not in per_gpu:
            raise InputError(f"{at} class", base, f"has no profile row in {profiles_name}")
        cls = scaled_class(base, gpus)
        throughput[cls] = {t: v * gpus for t, v in per_gpu[base].items()}
        _runnable(f"{at} gpu_type", cls, gpu_type, throughput, profiles_name)
        jobs.append(TraceJob(f"job-{k}", submit, account, cls, gpus, work, gpu_type,
                             number(f"{at} time_limit", limit, positive=True, text=True) if limit else None))
    if not jobs:
        raise InputError(trace_name, "", "no jobs")
    return Trace(tuple(jobs), throughput, f"csv {trace_name} with {profiles_name}")


def render_csv(trace: Trace) -> tuple[str, str]:
    """The texts ``(trace CSV, profiles CSV)`` that :func:`parse_csv` reads back as ``trace`` (its jobs and
    its jobs' throughputs; ids become ``job-<n>`` in trace order). Exact for GPU counts that are powers of two,
    within float rounding otherwise. The CSV holds per-GPU throughputs, so every class of the trace must be
    ``scaled_class(base, gpus)`` and a base class's throughput must scale linearly with the GPUs; a trace that is
    not (Gavel's measured multi-GPU throughputs) raises InputError naming the class."""
    gpus_of = {j.cls: j.gpus for j in trace.jobs}
    base_of: dict[str, str] = {}  # class -> its base class
    per_gpu: dict[str, dict[str, float]] = {}
    seen_in: dict[str, str] = {}  # base class -> the class its per-GPU throughputs came from
    for cls in trace.classes():
        g = gpus_of[cls]
        base = base_of[cls] = cls.removesuffix(f"-x{g}") if g > 1 else cls
        if scaled_class(base, g) != cls or base == cls and g > 1 or _SCALED.fullmatch(base):
            raise InputError(f"class {cls!r}", cls, f"is not a base class plus -x<GPUs> for its {g}-GPU jobs")
        thr = {t: v / g for t, v in trace.throughput[cls].items()}
        if base in per_gpu:
            other = per_gpu[base]
            if other.keys() != thr.keys() or any(not math.isclose(thr[t], other[t], rel_tol=1e-9) for t in thr):
                raise InputError(f"class {cls!r}", dict(trace.throughput[cls]),
                                 f"per GPU {thr} differs from {other} of class {seen_in[base]!r}: the CSV format "
                                 "holds per-GPU throughputs, so it needs linear scaling")
        else:
            per_gpu[base], seen_in[base] = thr, cls
    typed = any(j.gpu_type is not None for j in trace.jobs)
    limited = any(j.time_limit is not None for j in trace.jobs)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(TRACE_COLUMNS + (("gpu_type",) if typed else ()) + (("time_limit",) if limited else ()))
    for j in trace.jobs:
        w.writerow([repr(float(j.submit)), j.account, base_of[j.cls], j.gpus, repr(float(j.work))]
                   + ([j.gpu_type or ""] if typed else [])
                   + ([repr(float(j.time_limit)) if j.time_limit is not None else ""] if limited else []))
    prof = io.StringIO()
    w = csv.writer(prof, lineterminator="\n")
    w.writerow(PROFILE_COLUMNS)
    for base in sorted(per_gpu):
        for t in sorted(per_gpu[base]):
            w.writerow([base, t, repr(per_gpu[base][t])])
    return out.getvalue(), prof.getvalue()


def write_csv(trace: Trace, trace_csv: str | os.PathLike, profiles_csv: str | os.PathLike) -> None:
    """Save ``trace`` as the two UTF-8 files :func:`read_csv` reads (see :func:`render_csv`)."""
    trace_text, profiles_text = render_csv(trace)
    Path(trace_csv).write_text(trace_text, encoding="utf-8")
    Path(profiles_csv).write_text(profiles_text, encoding="utf-8")


# ------------------------------------------------------------------------------------------ synthetic


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
        base = _base_class("classes class", c)
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
