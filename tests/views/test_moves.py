"""`slurm-fair why` and `explain` say when slurm-fair moved a job to a faster GPU type (an upgrade move), from the
preemption records in the store: from and to which type, when, and the time it was expected to save."""

from __future__ import annotations

import json
import os

import pytest

from slurm_fair import config
from slurm_fair.cli.why import _moves, _print
from slurm_fair.cluster.base import Account, Job, Node, Snapshot
from slurm_fair.daemon.preemption.upgrade import Upgrade
from slurm_fair.store import Store
from slurm_fair.views import explain
from slurm_fair.views.why import MoveFacts, explain_job, move_line, moves_from_records
from slurm_fair.daemon.preemption.store import PreemptionStore

T = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
REASON = Upgrade(42, "a", "k80", "v100", 1, 2940.0).reason


def job(jid=42, state="PENDING", gpu_type="v100", reason="Resources"):
    return Job(job_id=jid, name="train", account="a", user="alice", partition="gpu", state=state, reason=reason,
               priority=100, submit_time=int(T - 3600), start_time=None, gpus_per_node=1, nodes=1,
               gpu_type=gpu_type, comment="fair:flex fair:checkpoint", requeue=True)


def store_with_moves(path) -> Store:
    """Job 42: moved k80 -> v100 (signalled at T, requeued at T + 130); job 43: a move begun at T + 600 and
    resolved; job 44: a reclaim (no target type); job 45: a move in its grace."""
    st = Store(path)
    pid = PreemptionStore(st).add(job_id=42, account="a", gpu_type="k80", gpus=1, signal="USR1", reason=REASON, grace=120,
                                  now=T, target_type="v100")
    PreemptionStore(st).step(pid, "requeued", f"{REASON}; requeued as gres/gpu:v100", state="requeued", now=T + 130)
    pid = PreemptionStore(st).add(job_id=43, account="a", gpu_type="k80", gpus=2, signal="USR1", reason="upgrade move k80 "
                                  "-> v100: 2 idle v100 GPU(s), expected to finish 900 s sooner after the restart",
                                  grace=120, now=T + 600, target_type="v100")
    PreemptionStore(st).step(pid, "resolved", "resolved, not requeued: upgrade to v100 no longer possible (2 v100 GPU(s) "
                             "are not free any more)", state="resolved", now=T + 730)
    PreemptionStore(st).add(job_id=44, account="a", gpu_type="v100", gpus=1, signal="USR1", reason="over its guarantee",
                            grace=120, now=T + 50)
    PreemptionStore(st).add(job_id=45, account="a", gpu_type="k80", gpus=1, signal="USR1", reason=REASON, grace=120,
                            now=T + 900, target_type="v100")
    return st


def test_the_records_of_a_job_give_its_moves_and_each_says_when_from_to_and_why(tmp_path):
    with store_with_moves(tmp_path / "s.sqlite") as st:
        m42 = moves_from_records(PreemptionStore(st).rows(job_id=42))
        m43 = moves_from_records(PreemptionStore(st).rows(job_id=43))
        assert moves_from_records(PreemptionStore(st).rows(job_id=44)) == ()  # a reclaim is no move
        m45 = moves_from_records(PreemptionStore(st).rows(job_id=45))
    assert m42 == (MoveFacts(T, "k80", "v100", 1, "requeued", T + 130, REASON,
                             f"{REASON}; requeued as gres/gpu:v100"),)
    assert move_line(m42[0]) == (
        "slurm-fair moved it (1 k80 -> v100): checkpoint signal at 2027-01-15 08:00:00 UTC, requeued onto v100 at "
        "2027-01-15 08:02:10 UTC; why: upgrade move k80 -> v100: 1 idle v100 GPU(s), expected to finish 2940 s "
        "sooner after the restart")
    assert move_line(m43[0]) == (
        "slurm-fair began to move it (2 k80 -> v100) at 2027-01-15 08:10:00 UTC but did not: resolved (resolved, "
        "not requeued: upgrade to v100 no longer possible (2 v100 GPU(s) are not free any more)); why it began: "
        "upgrade move k80 -> v100: 2 idle v100 GPU(s), expected to finish 900 s sooner after the restart")
    assert move_line(m45[0]).startswith("slurm-fair is moving it (1 k80 -> v100): checkpoint signal sent at "
                                        "2027-01-15 08:15:00 UTC, it is requeued onto v100 when the grace ends")


def test_why_says_first_that_the_job_was_moved(tmp_path, capsys):
    with store_with_moves(tmp_path / "s.sqlite") as st:
        moves = moves_from_records(PreemptionStore(st).rows(job_id=42))
    ex = explain_job(job(), None, T + 200, status_error="no status file", moves=moves)
    assert ex.moves == moves and ex.details[0] == move_line(moves[0])
    plain = explain_job(job(), None, T + 200, status_error="no status file")
    assert ex.details[1:] == plain.details and ex.verdict == plain.verdict and plain.moves == ()
    _print(ex)
    text = capsys.readouterr().out
    assert "  - slurm-fair moved it (1 k80 -> v100): checkpoint signal at 2027-01-15 08:00:00 UTC" in text
    assert "expected to finish 2940 s sooner after the restart" in text


def test_the_cli_reads_the_moves_only_where_the_caller_may_open_the_database(tmp_path):
    db = tmp_path / "s.sqlite"
    store_with_moves(db).close()
    cfg = config.from_dict({"daemon": {"database": str(db)}})
    assert [m.to_type for m in _moves(cfg, 42)] == ["v100"]
    assert _moves(config.from_dict({"daemon": {"database": str(tmp_path / "none.sqlite")}}), 42) == []
    assert not (tmp_path / "none.sqlite").exists()  # never created by why


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any file")
def test_a_database_the_caller_may_not_write_is_left_alone(tmp_path):
    db = tmp_path / "s.sqlite"
    store_with_moves(db).close()
    db.chmod(0o400)  # readable, not writable: the store would migrate on open, so why leaves it alone
    try:
        assert _moves(config.from_dict({"daemon": {"database": str(db)}}), 42) == []
    finally:
        db.chmod(0o600)


def test_explain_lists_the_accounts_moves_and_marks_a_moved_pending_job(tmp_path):
    cfg = config.from_dict({"daemon": {"database": str(tmp_path / "s.sqlite")}})
    with store_with_moves(cfg.database_path) as st:
        rid = st.begin_round("oef-coop", "")
        st.finish_round(rid, "ok", details={"accounts": ["a"], "tenants": {"a": "a"}, "weights": {"a": 1.0}})
        snap = Snapshot("24.11.5", T + 200, (Node("v", ("MIXED",), ("gpu",), {"v100": 4, "k80": 4}, {}),),
                        (job(42), job(46, gpu_type="k80")), (Account("a", 1, {}),), ("gpu",))
        ex = explain.explain(st, cfg, "a", snap)
    assert [(m["job_id"], m["from_type"], m["to_type"], m["state"]) for m in ex["moves"]] == [
        (42, "k80", "v100", "requeued"), (43, "k80", "v100", "resolved"), (45, "k80", "v100", "signalled")]
    assert ex["moves"][0]["text"].startswith("slurm-fair moved it (1 k80 -> v100)")
    moved = {j["job_id"]: j["moved"] for j in ex["pending_jobs"]}
    assert moved[42] == ex["moves"][0]["text"] and moved[46] is None
    json.dumps(ex)  # plain JSON for --json
