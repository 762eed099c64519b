"""slurmctld's configuration as ``scontrol show config`` prints it: the sum of its priority weights, its SlurmUser.
Pure."""

from __future__ import annotations

import re
from typing import Mapping

#: the multifactor weights besides ``PriorityWeightTRES`` (a list ``CPU=500,GRES/gpu=1500``)
WEIGHTS = ("PriorityWeightAge", "PriorityWeightAssoc", "PriorityWeightFairShare", "PriorityWeightJobSize",
           "PriorityWeightPartition", "PriorityWeightQOS")


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config`` -> {Key: value} (the ``Key = value`` lines). A key Slurm lists by index
    (24.11: ``PrologSlurmctld[0] = …``, one per ``PrologSlurmctld=`` line of slurm.conf, each run) is kept as
    ``Key[0]``, ``Key[1]``, …; the first line of a key wins."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z][A-Za-z0-9_]*(?:\[\d+\])?)\s*=\s*(.*?)\s*$", line)
        if m and m.group(1) not in out:
            out[m.group(1)] = m.group(2)
    return out


def weights_sum(config: Mapping[str, str]) -> int:
    """The sum of the site's ``PriorityWeight*`` (TRES weights included): each multifactor factor is at most 1,
    so the highest priority Slurm's own factors can give a job (SiteFactor aside). Unset or unreadable: 0."""
    total = 0
    for k in WEIGHTS:
        v = config.get(k, "0").strip()
        total += int(v) if v.isdigit() else 0
    for item in config.get("PriorityWeightTRES", "").split(","):
        _k, _, v = item.partition("=")
        total += int(float(v)) if re.fullmatch(r"\d+(\.\d+)?", v.strip()) else 0
    return total


def slurm_user(config: Mapping[str, str]) -> tuple[str, int] | None:
    """``SlurmUser = slurm(64030)`` -> ("slurm", 64030): the user slurmctld and its PrologSlurmctld /
    EpilogSlurmctld run as. None when the line is missing or not in that form."""
    m = re.fullmatch(r"(\S*)\((\d+)\)", config.get("SlurmUser", "").strip())
    return (m.group(1), int(m.group(2))) if m else None
