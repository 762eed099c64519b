"""The store's preemptions table through :class:`PreemptionStore`: a record's steps, the reads (typed)."""

from __future__ import annotations

import pytest

from slurm_fair.daemon.preemption.record import COLUMNS
from slurm_fair.daemon.preemption.store import PreemptionStore, PreemptionTotal, StateCount
from slurm_fair.errors import InputError
from slurm_fair.store import Store


@pytest.fixture
def ps():
    with Store(":memory:") as store:
        yield PreemptionStore(store)


def test_preemption_lifecycle_steps_and_queries(ps):
    pid = ps.add(job_id=42, account="acct_a", user="alice", gpu_type="a100", gpus=1, signal="USR1",
                 reason="over share", grace=120, round_id=None, now=1000.0)
    assert ps.next_due() == 1120.0
    [p] = ps.rows(account="acct_a")
    assert (p.state, p.signalled_at, p.requeue_at, p.finished_at) == ("signalled", 1000.0, 1120.0, None)
    assert [s.step for s in p.steps] == ["signalled"] and p.steps[0].message == "sent USR1"
    ps.step(pid, "requeued", "grace over", state="requeued", now=1130.0)
    [p] = ps.rows(job_id=42)
    assert (p.state, p.requeued_at, p.finished_at) == ("requeued", 1130.0, 1130.0)
    assert [s.step for s in p.steps] == ["signalled", "requeued"]
    assert list(p.as_row()) == list(COLUMNS) and p.as_row()["steps"][1]["step"] == "requeued"  # the table's row
    assert ps.next_due() is None
    failed = ps.add(job_id=43, account="acct_b", gpu_type="v100", gpus=2, signal="USR1", reason="r",
                    grace=120, ok=False, message="scancel: invalid job id", now=1200.0)
    f = ps.rows(job_id=43)[0]
    assert (f.id, f.state, f.signalled_at, f.steps[0].step) == (failed, "failed", None, "signal-failed")
    assert set(ps.counts()) == {StateCount("requeued", 1), StateCount("failed", 1)}
    assert [p.job_id for p in ps.history(since=1125.0)] == [42, 43]  # requeued at 1130, created 1200
    assert ps.history(since=5000.0) == []
    assert ps.rows(account="acct_c") == []
    with pytest.raises(InputError, match="state"):
        ps.step(pid, "x", state="bogus")
    with pytest.raises(InputError, match="preemption_id"):
        ps.step(999, "x")
    assert ps.totals() == [PreemptionTotal("acct_a", "a100", 1, 1, 0), PreemptionTotal("acct_b", "v100", 1, 0, 0)]


def test_the_records_columns_are_the_tables_in_its_order():
    """``PreemptionRecord.as_row`` (what ``explain --json`` prints) writes the table's columns in the table's order."""
    with Store(":memory:") as store:
        assert tuple(store.db["preemptions"].columns_dict) == COLUMNS
