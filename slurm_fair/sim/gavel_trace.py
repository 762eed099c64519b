"""Gavel's Philly-derived ``.trace`` files (one per virtual cluster) with Gavel's measured isolated throughputs ->
a :class:`~slurm_fair.sim.traces.Trace`: :func:`read_gavel` reads the files, :func:`parse_gavel` is its pure core.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Mapping

from ..errors import InputError
from ..profiling.shipped import GAVEL_GPU_TYPES, class_name, gavel_isolated
from .traces import Trace, TraceJob, check_gpus, check_submit, check_work, read_text, scaled_class, with_time_limits

GAVEL_COLUMNS = ("job type", "command", "steps argument", "needs-data-dir flag", "total steps", "arrival time",
                 "scale factor")


def _paths(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str | os.PathLike]:
    out = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not out:
        raise InputError("paths", paths, "no trace file given")
    return out


def read_gavel(paths: str | os.PathLike | Iterable[str | os.PathLike], throughputs_json: str | os.PathLike, *,
               accounts: str = "file", unmeasured: str = "error") -> Trace:
    """Gavel's ``.trace`` files (one per virtual cluster) with the isolated throughputs of Gavel's
    ``physical_cluster_throughputs.json``: see :func:`parse_gavel`."""
    files = {str(p): read_text(p) for p in _paths(paths)}
    json_name = str(throughputs_json)
    text = read_text(throughputs_json)
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
            gpus = check_gpus(f"{at} scale factor", scale.strip())
            work = check_work(f"{at} total steps", steps.strip())
            submit = check_submit(f"{at} arrival time", arrival.strip())
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
