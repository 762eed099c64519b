"""CSV traces: a trace CSV (submit time, account, class, GPUs, work; optionally a typed request and a time limit)
and a CSV of per-GPU profiles -> a :class:`~slurm_fair.sim.traces.Trace` (:func:`read_csv`, pure core
:func:`parse_csv`), and back (:func:`write_csv`, pure core :func:`render_csv`). Scaling is linear: a ``g``-GPU
job's throughput is ``g`` x the per-GPU throughput.
"""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path

from ..errors import InputError
from ..validate import gpu_type as _gpu_type_name
from ..validate import name as _name
from ..validate import number
from .traces import (SCALED_CLASS, Trace, TraceJob, check_base_class, check_gpus, check_runnable, check_submit,
                     check_throughput, check_work, read_text, scaled_class)

TRACE_COLUMNS = ("submit_time", "account", "class", "gpus", "work")  # a CSV trace's columns, in write order
TRACE_OPTIONAL = ("gpu_type", "time_limit")  # a typed request (empty = untyped); a limit in s (empty = none)
PROFILE_COLUMNS = ("class", "gpu_type", "throughput")  # steps/s per GPU


def read_csv(trace_csv: str | os.PathLike, profiles_csv: str | os.PathLike) -> Trace:
    """A CSV trace and its per-GPU profiles, both UTF-8 files: see :func:`parse_csv`."""
    return parse_csv(read_text(trace_csv), read_text(profiles_csv), trace_name=str(trace_csv),
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
        base = check_base_class(f"{at} class", row["class"])
        t = _gpu_type_name(f"{at} gpu_type", row["gpu_type"])
        thr = check_throughput(f"{at} throughput", row["throughput"])
        if (base, t) in first_line:
            raise InputError(f"{at} gpu_type", t, f"duplicate of line {first_line[base, t]} (class {base!r})")
        first_line[base, t] = n
        per_gpu.setdefault(base, {})[t] = thr
    jobs: list[TraceJob] = []
    throughput: dict[str, dict[str, float]] = {}
    for k, (n, row) in enumerate(_csv_rows(trace_name, trace_text, TRACE_COLUMNS, TRACE_OPTIONAL), 1):
        at = f"{trace_name} line {n}"
        submit = check_submit(f"{at} submit_time", row["submit_time"])
        account = _name(f"{at} account", row["account"])
        base = check_base_class(f"{at} class", row["class"])
        gpus = check_gpus(f"{at} gpus", row["gpus"])
        work = check_work(f"{at} work", row["work"])
        typed, limit = row.get("gpu_type", ""), row.get("time_limit", "")
        gpu_type = _gpu_type_name(f"{at} gpu_type", typed) if typed else None
        if base not in per_gpu:
            raise InputError(f"{at} class", base, f"has no profile row in {profiles_name}")
        cls = scaled_class(base, gpus)
        throughput[cls] = {t: v * gpus for t, v in per_gpu[base].items()}
        check_runnable(f"{at} gpu_type", cls, gpu_type, throughput, profiles_name)
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
        if scaled_class(base, g) != cls or base == cls and g > 1 or SCALED_CLASS.fullmatch(base):
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
