#!/usr/bin/env python3
"""Write slurm_fair/profiling/data/gandiva-fair-table1.csv (the shipped table) from Gandiva_fair's Table 1.

Source: Chaudhary et al., "Balancing Efficiency and Fairness in Heterogeneous GPU Clusters for Deep Learning"
(Gandiva_fair), EuroSys 2020, Table 1: time per mini-batch on a K80 in milliseconds, and the speedup on P40,
P100 and V100 as a percentage (K80 time / that GPU's time x 100; PyTorch 0.4, FP32, the models' default
mini-batch sizes). Conversion: throughput on K80 = 1000 / ms (mini-batches per second); on another GPU =
K80 throughput x percentage / 100. Class names as for Gavel's table (slurm_fair.profiling.shipped.class_name).

Usage: python3 profiles/make_gandiva_fair_profiles.py
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from slurm_fair.profiling.shipped import class_name  # noqa: E402

# job, K80 ms per mini-batch, P40 %, P100 %, V100 % (Table 1, verbatim)
TABLE1 = (
    ("VAE", 11.5, 117, 119, 125),
    ("SuperResolution", 207.5, 143, 173, 187),
    ("DCGAN", 183.4, 434, 431, 642),
    ("GRU", 48.4, 300, 358, 481),
    ("LSTM", 48.9, 310, 358, 481),
    ("ResNet-50", 134, 317, 334, 514),
    ("ResNext-50", 2005.7, 370, 412, 633),
)
OUTPUTS = (HERE.parent / "slurm_fair" / "profiling" / "data" / "gandiva-fair-table1.csv",)


def csv_text() -> str:
    lines = ["account,class,gpu_type,throughput"]
    for job, ms, *pcts in TABLE1:
        k80 = 1000.0 / ms
        lines.append(f",{class_name(job)},k80,{k80:.6g}")
        for gpu, pct in zip(("p40", "p100", "v100"), pcts):
            lines.append(f",{class_name(job)},{gpu},{k80 * pct / 100:.6g}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    text = csv_text()
    for out in OUTPUTS:
        out.write_text(text, encoding="utf-8")
        print(f"wrote {out}")
