"""sim/outcome.py: job-level comparison and requeue counts, on hand-worked runs."""

from __future__ import annotations

import pytest

from slurm_fair.sim.jobs import Run as _Run
from slurm_fair.sim.outcome import extremes, job_deltas, restarts


def Run(start, end, gpu_type, how):  # noqa: N802 - the simulator's run record, nodes left out
    return _Run(start, end, gpu_type, {}, how)


def _row(i, jct, types=("v100",), restarts_=0):
    return {"id": i, "account": "a", "class": "c", "gpus": 1, "jct": jct, "types": list(types), "restarts": restarts_}


def test_job_deltas_match_by_id_and_sort_largest_loss_first():
    base = [_row("j1", 100.0), _row("j2", 50.0), _row("j3", 80.0), _row("j4", 10.0)]
    here = [_row("j2", 150.0, ("k80",)), _row("j1", 40.0), _row("j3", None), _row("j5", 1.0)]
    ds = job_deltas(base, here)
    assert [d.job for d in ds] == ["j2", "j1", "j3"]  # j4 did not run here, j5 not in the baseline
    assert ds[0].delta == 100.0 and ds[0].types == ("k80",) and ds[0].base_types == ("v100",)
    assert ds[1].delta == -60.0
    assert ds[2].delta is None  # did not finish here
    lost, gained = extremes(ds, n=5)
    assert [d.job for d in lost] == ["j2"] and [d.job for d in gained] == ["j1"]


def test_restarts_count_same_type_and_the_claimant_that_had_not_started():
    runs = {
        # requeued from v100 at 100, restarted on v100 at 160: same type; its claimant c1 started at 200 (later)
        "v1": [Run(0, 100, "v100", "requeue"), Run(160, 400, "v100", "done")],
        # requeued from v100 at 100, restarted on k80: not the same type
        "v2": [Run(0, 100, "v100", "requeue"), Run(170, 500, "k80", "done")],
        # requeued twice on p100; the second time its claimant c2 had started before the restart
        "v3": [Run(0, 50, "p100", "requeue"), Run(110, 300, "p100", "requeue"), Run(400, 900, "p100", "done")],
        # requeued and still waiting to restart
        "v4": [Run(0, 70, "k80", "requeue")],
        "c1": [Run(200, 900, "v100", "done")],
        "c2": [Run(310, 800, "p100", "done")],
    }
    first = {j: (rs[0].start if rs else None) for j, rs in runs.items()}
    claim = {("v1", 100.0): "c1", ("v3", 300.0): "c2"}
    r = restarts(runs, first, claim)
    assert r.jobs == 6
    assert r.requeues == 5  # v1, v2, v3 twice, v4
    assert r.same_type == 3  # v1, v3 twice
    assert r.known_claimant == 2  # v1's and v3's second
    assert r.same_type_before_claimant == 1  # v1: c1 started at 200, after v1's restart at 160
    assert r.most_per_job == 2
    assert r.per_job == pytest.approx(5 / 6)
    assert r.same_type_share == pytest.approx(3 / 5)
