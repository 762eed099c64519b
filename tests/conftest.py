"""Shared builders of the unit tests (imported as ``from tests.conftest import ...``): hand-built Slurm snapshots
for the planning tests, small problems from speed matrices for the policy tests, hypothesis strategies of random
problems for the property tests, and the real Slurm JSON captures of the parser tests. The tests themselves live
in folders mirroring ``slurm_fair/``'s packages (``tests/policies/``, ``tests/daemon/``, ...; ``tests/integration/``
runs against the real testbed)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from slurm_fair import config
from slurm_fair.cluster.base import Account, Job, Node, Snapshot
from slurm_fair.model import JobClass, Problem, Tenant

REPO = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------- snapshots (daemon/plan tests)

CFG = config.from_dict({})


def job(jid, account, gpus=1, gpu_type=None, state="PENDING", name="j", comment="", wckey="", submit=1000,
        partition="gpu", alloc=None, site_factor=0, reason=""):
    return Job(job_id=jid, name=name, account=account, user="u", partition=partition, state=state, reason=reason,
               priority=1, submit_time=submit, start_time=None if state == "PENDING" else submit + 1,
               gpus_per_node=gpus, nodes=1, gpu_type=gpu_type, gpus_allocated=alloc or {}, comment=comment,
               wckey=wckey, site_factor=site_factor)


NODES = (
    Node("v100-1", ("IDLE",), ("gpu",), {"v100": 4}, {}),
    Node("k80-1", ("IDLE",), ("gpu",), {"k80": 4}, {}),
)


def snap(jobs=(), nodes=NODES, accounts=None, limits=None):
    accounts = accounts or {"acct_a": 1, "acct_b": 1, "acct_c": 2}
    limits = limits or {}
    accts = tuple(Account(a, s, limits.get(a, {})) for a, s in accounts.items())
    return Snapshot("22.05.8", 0.0, tuple(nodes), tuple(jobs), accts, ("gpu",))


# --------------------------------------------------------------------------- problems from speed matrices


def matrix_problem(
    rows: Sequence[Sequence[float]],
    capacity: Sequence[int] = (1, 1),
    weights: Sequence[float] | None = None,
    demands: Sequence[float | None] | None = None,
) -> Problem:
    """One tenant ``u1..un`` with one class ``c`` per row; GPU types ``g1..gk`` with ``capacity``."""
    types = [f"g{j + 1}" for j in range(len(capacity))]
    tenants = []
    for i, row in enumerate(rows):
        demand = None if demands is None else demands[i]
        cls = JobClass("c", {g: float(v) for g, v in zip(types, row)}, demand)
        tenants.append(Tenant(f"u{i + 1}", (cls,), 1.0 if weights is None else float(weights[i])))
    return Problem(dict(zip(types, capacity)), tuple(tenants))


def classes_problem(
    tenants: Sequence[tuple[str, float, Sequence[Sequence[float]]]],
    capacity: Sequence[int] = (1, 1),
) -> Problem:
    """Tenants given as (name, weight, [speed row per class]); classes are named ``c1..``."""
    types = [f"g{j + 1}" for j in range(len(capacity))]
    out = []
    for name, weight, rows in tenants:
        classes = tuple(
            JobClass(f"c{m + 1}", {g: float(v) for g, v in zip(types, row)}) for m, row in enumerate(rows)
        )
        out.append(Tenant(name, classes, float(weight)))
    return Problem(dict(zip(types, capacity)), tuple(out))


# --------------------------------------------------------------------------- random problems (hypothesis)

# SLURM_FAIR_HYPOTHESIS_EXAMPLES=500 for a long soak with fresh random examples; the default keeps this file
# well under 60 s and is derandomized, so CI runs the same examples every time (soaks find new ones).
SOAK = os.environ.get("SLURM_FAIR_HYPOTHESIS_EXAMPLES")
EXAMPLES = int(SOAK or "20")
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=not SOAK,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def problems(draw, min_n=2, max_n=5, integer_weights=False, demands=False, max_classes=1, type_caps=False):
    k = draw(st.integers(2, 3))
    types = [f"g{j}" for j in range(k)]
    cap = {g: draw(st.integers(1, 6)) for g in types}
    tenants = []
    for i in range(draw(st.integers(min_n, max_n))):
        classes = []
        for c in range(draw(st.integers(1, max_classes))):
            raw = [draw(st.sampled_from([0.0, 1.0, 1.5, 2.0, 3.0, 4.5, 7.0, 10.0])) for _ in types]
            if not any(raw):
                raw[draw(st.integers(0, k - 1))] = 1.0
            dem = draw(st.one_of(st.none(), st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5, 8.0]))) if demands else None
            td = None
            if type_caps and draw(st.booleans()):
                # per-type caps; a type left out of type_demand is capped at 0
                td = {g: draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0])) for g in types if draw(st.booleans())}
            classes.append(JobClass(f"c{c}", dict(zip(types, raw)), dem, td))
        w = draw(st.integers(1, 3)) if integer_weights else draw(st.sampled_from([0.5, 1.0, 1.0, 2.0, 3.7]))
        tenants.append(Tenant(f"t{i}", tuple(classes), float(w)))
    return Problem(cap, tuple(tenants))


# --------------------------------------------------------------------------- real Slurm JSON captures

SLURM_JSON = Path(__file__).resolve().parent / "fixtures" / "slurm-json"
VERSIONS = ("22.05", "24.11")


def text(version: str, name: str) -> str:
    """A capture of Slurm ``version``'s JSON output (tests/fixtures/slurm-json/VERSION/NAME)."""
    return (SLURM_JSON / version / name).read_text()
