"""A round records the pending GPU jobs it sees (daemon/round_record.record_pending, table ``pending_jobs``): in
dry-run (shadow) rounds and applying rounds alike, first sighting kept, last updated; a failure to record them
never fails the round."""

from __future__ import annotations

from slurm_fair import config
from slurm_fair.daemon import plan as P
from slurm_fair.daemon.round import run_round
from slurm_fair.daemon.round_record import PENDING_ERROR
from slurm_fair.sim.cluster import SimCluster, cluster_spec
from slurm_fair.sim.traces import TraceJob
from slurm_fair.store import PendingJob, Store

THR = {"fast": {"k80": 1.0, "v100": 3.0}, "flat": {"k80": 1.0, "v100": 2.0}}
EPOCH = 1.7e9


def _setup(tmp_path, dry_run):
    # 4 GPUs; a submits six 1-GPU jobs at 0 (four start), b four 2-GPU jobs at 5: six wait
    jobs = ([TraceJob(f"a{i}", 0.0, "a", "fast", 1, 1e6) for i in range(6)]
            + [TraceJob(f"b{i}", 5.0, "b", "flat", 2, 1e6) for i in range(4)])
    cfg = config.from_dict({"daemon": {"database": str(tmp_path / "s.sqlite"), "dry_run": dry_run},
                            "hooks": {"spool": str(tmp_path / "sp")}})
    cluster = SimCluster(cluster_spec("k80=2,v100=2", 2), {"a": 1, "b": 1}, THR, jobs, epoch=EPOCH)
    return cfg, cluster


def _expected(cluster, cfg, now, first=None):
    snap = cluster.snapshot()
    return [PendingJob(j.job_id, j.account, P.job_class(j, cfg.classes.order), j.gpus, j.gpu_type,
                       float(j.submit_time), j.blocked, (first or {}).get(j.job_id, now), now)
            for j in sorted(snap.jobs, key=lambda j: j.job_id) if j.pending and j.gpus > 0]


def _check_two_rounds(tmp_path, dry_run):
    cfg, cluster = _setup(tmp_path, dry_run)
    with Store(cfg.database_path) as store:
        cluster.advance(10.0)
        t1 = cluster.clock()
        want1 = _expected(cluster, cfg, t1)
        res = run_round(cluster, store, cfg, "oef-coop", now=t1)
        assert res.status == ("dry-run" if dry_run else "ok"), res.message
        assert len(want1) == 6 and {p.account for p in want1} == {"a", "b"}
        assert {p.gpus for p in want1 if p.account == "b"} == {2}
        got = store.pending_jobs()
        # the jobs still pending after the round: those it saw, as it saw them (round 1 may start some)
        assert got == want1
        cluster.advance(20.0)
        t2 = cluster.clock()
        want2 = _expected(cluster, cfg, t2, first={p.job_id: p.first_seen for p in got})
        run_round(cluster, store, cfg, "oef-coop", now=t2)
        still = {p.job_id for p in want2}
        after = store.pending_jobs()
        assert [p for p in after if p.job_id in still] == want2  # seen again: first sighting kept, last is t2
        assert [p for p in after if p.job_id not in still] == [p for p in got if p.job_id not in still]


def test_a_dry_run_round_records_the_pending_jobs_it_sees(tmp_path):
    _check_two_rounds(tmp_path, dry_run=True)


def test_an_applying_round_records_them_too(tmp_path):
    _check_two_rounds(tmp_path, dry_run=False)


def test_a_failure_to_record_them_never_fails_the_round(tmp_path, monkeypatch):
    cfg, cluster = _setup(tmp_path, True)
    with Store(cfg.database_path) as store:
        monkeypatch.setattr(store, "record_pending", lambda jobs: 1 / 0)
        cluster.advance(10.0)
        res = run_round(cluster, store, cfg, "oef-coop", now=cluster.clock())
        assert res.status == "dry-run"
        assert "recording the pending jobs failed: ZeroDivisionError" in res.message
        (ev,) = store.events(kind=PENDING_ERROR)
        assert ev.round_id == res.round_id and "ZeroDivisionError" in ev.message
        assert store.round(res.round_id).details["capacity"]  # the rest of the round was recorded
