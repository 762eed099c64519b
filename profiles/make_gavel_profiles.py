#!/usr/bin/env python3
"""Regenerate slurm_fair/profiling/data/gavel-physical.csv (the shipped table) from Gavel's measured throughputs.

Usage: python3 profiles/make_gavel_profiles.py [physical_cluster_throughputs.json]

Input: Gavel's ``physical_cluster_throughputs.json`` (github.com/stanford-futuredata/gavel, MIT licence, see
GAVEL-LICENSE). Only the isolated throughput (key ``null``) of each job type with scale factor 1 on the
consolidated GPU types k80, p100 and v100 is used. A zero throughput (the job does not fit in that GPU's
memory, e.g. ResNet-50 with batch size 128) is left out: slurm-fair profiles must be > 0.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repository's slurm_fair, also when it is not installed

from slurm_fair.profiling.shipped import GAVEL_GPU_TYPES as GPU_TYPES, class_name, gavel_isolated  # noqa: E402

DEFAULT_SOURCE = Path("/work/shared/data/gavel/physical_cluster_throughputs.json")
OUTPUTS = (HERE.parent / "slurm_fair" / "profiling" / "data" / "gavel-physical.csv",)


def rows(data: dict) -> list[tuple[str, str, str, float]]:
    out = [("", class_name(job_type), gpu, thr)
           for (job_type, scale), by_gpu in gavel_isolated(data, "throughputs").items() if scale == 1
           for gpu, thr in by_gpu.items()]
    # group by class in a natural order (resnet50-bs16 before resnet50-bs128)
    def order(r):
        m = re.fullmatch(r"(.*?)(?:-bs(\d+))?", r[1])
        return (m.group(1), int(m.group(2) or 0), GPU_TYPES.index(r[2]))
    return sorted(out, key=order)


def render(data: dict) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["account", "class", "gpu_type", "throughput"])
    for account, cls, gpu, thr in rows(data):
        w.writerow([account, cls, gpu, repr(thr)])
    return buf.getvalue()


def main(argv: list[str]) -> int:
    source = Path(argv[1]) if len(argv) > 1 else DEFAULT_SOURCE
    text = render(json.loads(source.read_text()))
    for out in OUTPUTS:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(f"wrote {out} ({text.count(chr(10)) - 1} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
