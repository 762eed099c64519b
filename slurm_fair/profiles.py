"""Throughput profiles shipped with slurm-fair.

The package carries ``slurm_fair/data/gavel-physical.csv``: Gavel's measured throughputs (steps/s, one
GPU, no co-location) of 26 deep-learning job classes on K80, P100 and V100 GPUs. It is a byte-identical
copy of ``profiles/gavel-physical.csv`` in the repository (both are written by
``profiles/make_gavel_profiles.py``; a test checks they agree). Gavel measured no A100 (or other newer)
GPUs, and no numbers are invented for them: a (class, GPU type) pair without a profile falls back to the
daemon's rule for unprofiled types until a site measures it (``slurm-fair profiles set``).
"""

from __future__ import annotations

import csv
import io
from importlib import resources

SHIPPED = "gavel-physical.csv"


def shipped_csv() -> str:
    """The text of the packaged profiles CSV (header ``account,class,gpu_type,throughput``)."""
    return resources.files("slurm_fair").joinpath("data", SHIPPED).read_text(encoding="utf-8")


def parse(text: str) -> list[dict]:
    """Rows of a profiles CSV as dicts with ``throughput`` as float (no validation: see Store.import_csv)."""
    return [
        {"account": r["account"], "class": r["class"], "gpu_type": r["gpu_type"],
         "throughput": float(r["throughput"])}
        for r in csv.DictReader(io.StringIO(text))
    ]


def load_shipped() -> list[dict]:
    """The shipped default profiles: ``[{"account": "", "class": ..., "gpu_type": ..., "throughput": ...}]``."""
    return parse(shipped_csv())
