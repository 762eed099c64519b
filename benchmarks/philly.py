"""Philly-like sharing problems with binding demands (issue 9), for tests and ``solver_scaling.py``.

Per class, demand in GPUs: 1 (50 %), 2 (20 %), 4 (15 %), 8 (10 %), 32 (5 %); 1-2 classes per tenant; tenant
weight 1 (2 for one tenant in five); GPU capacity about half the total demand, spread over the types at random
(at least 1 GPU each). Speeds: GPU types sorted slow -> fast, per-type speed-up ratios uniform in [1, 2.5)
per class (``random``: every class has its own speed vector), or Gavel's measured K80/P100/V100 throughputs of a
random job class (``gavel``, k <= 3), or (``models``, issue 31) one of a fixed table of ``MODELS`` = 40 job models
drawn once (seed 31) like ``random`` on the k types: a site with a few dozen job models for its tenants, where
many classes share one speed vector.
``type_demand``: each class asks for 1-3 random types, each capped at its demand.
"""

from __future__ import annotations

import numpy as np

from slurm_fair.model import JobClass, Problem, Tenant

SIZES = np.array([1, 2, 4, 8, 32])
PROBS = np.array([0.5, 0.2, 0.15, 0.1, 0.05])
MODELS = 40  # job models of the ``models`` family


def model_table(k: int, models: int = MODELS) -> np.ndarray:
    """The ``models`` family's fixed speed table (models x k): GPU types slow -> fast, speed-up ratios uniform in
    [1, 2.5) per model, drawn once with seed 31 (the same table for every instance with these k)."""
    r = np.random.default_rng([31, k, models]).uniform(1.0, 2.5, (models, k))
    r[:, 0] = 1.0
    return np.cumprod(r, axis=1)


def _gavel_rows() -> list[dict[str, float]]:
    from slurm_fair.profiling.shipped import load_shipped

    by: dict[str, dict[str, float]] = {}
    for r in load_shipped():
        by.setdefault(r["class"], {})[r["gpu_type"]] = r["throughput"]
    return [v for v in by.values() if len(v) == 3]


def instance(tenants: int, k: int = 10, seed: int = 0, speeds: str = "random", type_demand: bool = False) -> Problem:
    rng = np.random.default_rng([seed, tenants, k, int(type_demand)])
    if speeds == "gavel":
        gt = ["k80", "p100", "v100"][:k]
        rows = _gavel_rows()
    elif speeds == "models":
        gt = [f"g{j:02d}" for j in range(k)]
        table = model_table(k)
    elif speeds != "random":
        raise ValueError(f"speeds: {speeds!r} (random, gavel or models)")
    else:
        gt = [f"g{j:02d}" for j in range(k)]
    out, total = [], 0.0
    for t in range(tenants):
        classes = []
        for c in range(int(rng.integers(1, 3))):
            d = float(rng.choice(SIZES, p=PROBS))
            total += d
            if speeds == "gavel":
                row = rows[int(rng.integers(len(rows)))]
                thr = {g: float(row[g]) for g in gt}
            elif speeds == "models":
                thr = {g: float(v) for g, v in zip(gt, table[int(rng.integers(len(table)))])}
            else:
                r = rng.uniform(1.0, 2.5, k)
                r[0] = 1.0
                thr = {g: float(v) for g, v in zip(gt, np.cumprod(r))}
            td = None
            if type_demand:
                ask = rng.choice(k, size=int(rng.integers(1, min(3, k) + 1)), replace=False)
                td = {gt[j]: d for j in ask}
            classes.append(JobClass(f"c{c}", thr, d, td))
        out.append(Tenant(f"t{t:04d}", tuple(classes), 2.0 if rng.random() < 0.2 else 1.0))
    cap = max(k, int(round(total / 2)))
    share = rng.dirichlet(np.ones(k) * 2.0)
    counts = np.maximum(1, np.floor(share * (cap - k)).astype(int) + 1)
    return Problem(dict(zip(gt, (int(v) for v in counts))), tuple(out))


def changed(p: Problem, frac: float, seed: int, type_demand: bool = False, speeds: str = "random") -> Problem:
    """``p`` with a fraction ``frac`` of its tenants re-drawn (speeds and demands, names kept) from another seed
    (of the same ``speeds`` family): the next round of a daemon where that many tenants' jobs changed."""
    import dataclasses

    other = instance(len(p.tenants), len(p.gpu_types), seed + 1000, speeds=speeds, type_demand=type_demand)
    rng = np.random.default_rng([seed, 98])
    ch = set(rng.choice(len(p.tenants), max(1, int(round(frac * len(p.tenants)))), replace=False).tolist())
    tenants = tuple(dataclasses.replace(other.tenants[i], name=t.name) if i in ch else t for i, t in enumerate(p.tenants))
    return dataclasses.replace(p, tenants=tenants)
