"""Throughput profiles shipped with slurm-fair.

The package carries ``slurm_fair/profiling/data/gavel-physical.csv``: Gavel's measured throughputs (steps/s,
one GPU, no co-location) of 26 deep-learning job classes on K80, P100 and V100 GPUs, written by
``profiles/make_gavel_profiles.py`` (the repository's ``profiles/`` holds the generators, their sources and
licence; the tables themselves are kept once, here). Gavel measured no A100 (or other newer)
GPUs, and no numbers are invented for them: a (class, GPU type) pair without a profile falls back to the
daemon's rule for unprofiled types until a site measures it (``slurm-fair profiles set``).
"""

from __future__ import annotations

import ast
import csv
import functools
import io
import re
from importlib import resources
from typing import Any

from ..errors import InputError
from ..validate import gpu_type, number

SHIPPED = "gavel-physical.csv"
# shipped tables by name (``profiles import --shipped NAME``); the daemon's built-in fallback is gavel's only
SHIPPED_TABLES = {"gavel": SHIPPED, "gandiva-fair": "gandiva-fair-table1.csv"}
NVML_MAP = "nvml-gpu-types.csv"  # NVML device name -> GRES type (site-editable copy: [profiling] nvml_map)
GAVEL_GPU_TYPES = ("k80", "p100", "v100")  # Gavel's consolidated GPU types (``*_unconsolidated`` are not used)


def shipped_csv(name: str = "gavel") -> str:
    """The text of a packaged profiles CSV (header ``account,class,gpu_type,throughput``): ``gavel`` (Gavel's
    K80/P100/V100 measurements) or ``gandiva-fair`` (Gandiva_fair's Table 1, K80/P40/P100/V100)."""
    if name not in SHIPPED_TABLES:
        raise InputError("--shipped", name, f"unknown shipped table (known: {', '.join(SHIPPED_TABLES)})")
    return resources.files("slurm_fair.profiling").joinpath("data", SHIPPED_TABLES[name]).read_text(encoding="utf-8")


def _norm_device(name: str) -> str:
    return " ".join(name.replace("_", " ").split()).casefold()


def nvml_map(path: str | None = None) -> dict[str, str]:
    """NVML device name (normalised: case, ``_`` as space, runs of spaces) -> GRES type, from the CSV at
    ``path`` (header ``nvml_name,gpu_type``) or the shipped one. Bad rows raise InputError naming the line."""
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                text, where = f.read(), str(path)
        except OSError as e:
            raise InputError("profiling.nvml_map", str(path), f"cannot read: {e.strerror or e}") from None
    else:
        text, where = resources.files("slurm_fair.profiling").joinpath("data", NVML_MAP).read_text(encoding="utf-8"), NVML_MAP
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or [h.strip() for h in header] != ["nvml_name", "gpu_type"]:
        raise InputError(f"{where} line 1", ",".join(header or []), "the header must be exactly nvml_name,gpu_type")
    out: dict[str, str] = {}
    for record in reader:
        if not record or all(not c.strip() for c in record):
            continue
        if len(record) != 2 or not record[0].strip():
            raise InputError(f"{where} line {reader.line_num}", ",".join(record), "expected: nvml_name,gpu_type")
        out[_norm_device(record[0])] = gpu_type(f"{where} line {reader.line_num} gpu_type", record[1].strip())
    return out


def gpu_type_of_device(device: str | None, mapping: dict[str, str]) -> str | None:
    """The GRES type of an NVML device name (``_`` may stand for spaces), None if the map has none."""
    return mapping.get(_norm_device(device)) if device else None


def parse(text: str) -> list[dict]:
    """Rows of a profiles CSV as dicts with ``throughput`` as float (no validation: see Store.import_csv)."""
    return [
        {"account": r["account"], "class": r["class"], "gpu_type": r["gpu_type"],
         "throughput": float(r["throughput"])}
        for r in csv.DictReader(io.StringIO(text))
    ]


@functools.cache
def _shipped_rows() -> tuple[dict, ...]:
    return tuple(parse(shipped_csv()))  # the packaged file does not change while the process runs


def load_shipped() -> list[dict]:
    """The shipped default profiles: ``[{"account": "", "class": ..., "gpu_type": ..., "throughput": ...}]``
    (fresh dicts each call: callers may change them; the CSV is parsed once per process)."""
    return [dict(r) for r in _shipped_rows()]


def class_name(job_type: str) -> str:
    """A Gavel job type as a slurm-fair class name: 'ResNet-50 (batch size 64)' -> 'resnet50-bs64',
    'CycleGAN' -> 'cyclegan' (lower case, letters and digits only, the batch size as ``-bsN``). The result is
    empty when the job type has no letter or digit (callers refuse that)."""
    m = re.fullmatch(r"(.*?)(?: \(batch size (\d+)\))?", job_type, flags=re.DOTALL)
    assert m is not None  # the pattern matches every string
    model = re.sub(r"[^a-z0-9]", "", m.group(1).lower())
    return f"{model}-bs{m.group(2)}" if m.group(2) and model else model


def gavel_isolated(data: Any, source: str) -> dict[tuple[str, int], dict[str, float]]:
    """The isolated throughputs of Gavel's throughputs JSON (layout ``gpu -> "('<job type>', <scale
    factor>)" -> {"null": steps/s, ...}``): ``{(job type, scale factor): {gpu type: steps/s}}`` over
    ``GAVEL_GPU_TYPES`` only. A throughput of 0 (the job does not fit in that GPU's memory) is left out, as is a
    missing ``null`` entry. The throughput is that of the whole job (all its ``scale factor`` GPUs together).
    Bad layout or numbers raise ``InputError`` naming ``source`` and the key."""
    if not isinstance(data, dict):
        raise InputError(source, type(data).__name__, "must be a JSON object {gpu type: {job key: ...}}")
    out: dict[tuple[str, int], dict[str, float]] = {}
    for gpu in GAVEL_GPU_TYPES:
        section = data.get(gpu, {})
        if not isinstance(section, dict):
            raise InputError(f"{source} {gpu}", type(section).__name__, "must be a JSON object")
        for key, entry in section.items():
            field = f"{source} {gpu}[{key}]"
            try:
                parsed = ast.literal_eval(key)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                parsed = None
            if not (isinstance(parsed, tuple) and len(parsed) == 2 and isinstance(parsed[0], str)
                    and isinstance(parsed[1], int) and not isinstance(parsed[1], bool) and parsed[1] >= 1):
                raise InputError(f"{source} {gpu}", key, "a key must be \"('<job type>', <scale factor >= 1>)\"")
            if not isinstance(entry, dict):
                raise InputError(field, entry, "must be a JSON object with a \"null\" entry")
            if "null" not in entry:
                continue
            thr = number(f"{field}.null", entry["null"], nonneg=True)
            if thr > 0:
                out.setdefault(parsed, {})[gpu] = thr
    return out
