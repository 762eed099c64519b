"""The preemption state machine (slurm_fair/daemon/preemption/record.py): what each step does to a record, and the store
keeping exactly that."""

from __future__ import annotations

import dataclasses

import pytest

from slurm_fair.daemon.preemption import record as P
from slurm_fair.errors import InputError
from slurm_fair.store import Store
from slurm_fair.daemon.preemption.store import PreemptionStore

JOB = {"job_id": 7, "account": "a", "gpu_type": "v100", "gpus": 2, "reason": "over its guarantee", "now": 1000.0}


def test_a_signal_opens_the_preemption_until_the_grace_ends_then_a_requeue_closes_it():
    r = P.signal_sent(**JOB, signal="USR1", grace=120)
    assert (r.state, r.signalled_at, r.requeue_at, r.finished_at, r.open) == ("signalled", 1000.0, 1120.0, None, True)
    assert [(s.step, s.message) for s in r.steps] == [("signalled", "sent USR1")]
    q = P.advance(r, "requeued", "grace over", state=P.REQUEUED, now=1121.0, round_id=3)
    assert (q.state, q.requeued_at, q.finished_at, q.open) == ("requeued", 1121.0, 1121.0, False)
    assert q.requeue_at == 1120.0 and [s.step for s in q.steps] == ["signalled", "requeued"]
    assert r.state == "signalled"  # records are values: the old one is unchanged


def test_held_back_stays_open_and_a_step_without_a_state_only_adds_to_the_history():
    h = P.held_back(**JOB, message="cannot be requeued", due=None)
    assert (h.state, h.signalled_at, h.requeue_at, h.open) == ("held-back", None, None, True)
    h2 = P.advance(h, "cancel-planned", state=None, now=1100.0, due=2800.0)
    assert (h2.state, h2.requeue_at, h2.finished_at) == ("held-back", 2800.0, None)
    gone = P.advance(h2, "gone", "ended", state=P.GONE, now=1200.0)
    assert (gone.finished_at, gone.requeued_at, gone.open) == (1200.0, None, False)
    f = P.signal_failed(**JOB, signal="USR1", message="scancel: invalid job")
    assert (f.state, f.signalled_at, f.requeue_at, f.finished_at) == ("failed", None, None, 1000.0)
    with pytest.raises(InputError, match="state"):
        P.advance(f, "x", state="bogus", now=1.0)


def test_the_store_keeps_the_records_the_state_machine_makes(tmp_path):
    with Store(tmp_path / "s.sqlite") as st:
        pid = PreemptionStore(st).add(**{k: v for k, v in JOB.items() if k != "now"}, signal="USR1", grace=120,
                                      now=1000.0, round_id=1, target_type="a100")
        PreemptionStore(st).step(pid, "requeued", "grace over", state="requeued", now=1130.0, round_id=2)
        [rec] = PreemptionStore(st).history(since=0.0)
        want = P.advance(P.signal_sent(**JOB, signal="USR1", grace=120, round_id=1, target_type="a100"),
                         "requeued", "grace over", state="requeued", now=1130.0, round_id=2)
        assert rec == dataclasses.replace(want, id=pid)
        assert P.PreemptionRecord.from_row({**rec.to_row(), "gpu_type": None, "gpus": None}).gpu_type == ""
