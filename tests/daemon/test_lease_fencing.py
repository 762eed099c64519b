"""The lease's bounds and fencing (daemon/leader.py, issue 40 item 7): a dead leader's lease is taken over within
2 periods, renewed between rounds by a heartbeat, and a daemon that lost it writes nothing more — neither into
Slurm nor the site limits it would record. Fake clocks throughout; one in-process daemon loop at the end."""

from __future__ import annotations

import os
import signal
import time

import pytest

from slurm_fair import config
from slurm_fair.cluster.errors import ClusterUnreachable
from slurm_fair.daemon import leader as L
from slurm_fair.daemon import service
from slurm_fair.daemon.round import run_round
from slurm_fair.sim.cluster import SimCluster, cluster_spec
from slurm_fair.sim.traces import TraceJob
from slurm_fair.store import Leader, Store

A = L.Me("ctl1", 100, "aaaa")
B = L.Me("ctl2", 200, "bbbb")


def lock_of(me: L.Me, acquired: float, expires: float) -> Leader:
    return Leader(me.host, me.pid, me.token, acquired, expires)


# ------------------------------------------------------------------------------------------------ pure rules


def test_lease_length_is_one_and_a_half_periods_and_at_least_twice_the_fencing_margin():
    assert L.fence_margin(30) == 35  # the default timeout plus 5 s of clock skew
    assert L.lease_length(300, 30) == 450  # the default period: 1.5 × 300 (was 3 × 300 = 900)
    assert L.lease_length(20, 10) == 30  # 1.5 × 20 = 2 × (10 + 5)
    assert L.lease_length(20, 30) == 70  # a timeout too long for the period: the margin decides


def test_heartbeat_renews_every_quarter_period():
    length, period = 450.0, 300.0
    lk = lock_of(A, 0, 1000 + length)  # renewed at 1000
    assert not L.renewal_due(lk, A, 1000, length, period)
    assert not L.renewal_due(lk, A, 1074.9, length, period)
    assert L.renewal_due(lk, A, 1075, length, period)  # 300 / 4 after the last renewal
    assert L.renewal_due(lk, B, 1001, length, period)  # not B's: due at once (the renewal says who holds it)
    assert L.renewal_due(None, A, 0, length, period)


def test_fence_needs():
    lk = lock_of(A, 0, 100)
    assert L.fence_needs(lk, A, 60, 35) == "ok"  # 40 s left ≥ 35
    assert L.fence_needs(lk, A, 65.1, 35) == "renew"  # less than the margin left
    assert L.fence_needs(lk, A, 500, 35) == "renew"  # expired, but still A's row: nobody took it
    assert L.fence_needs(lk, B, 60, 35) == "lost"
    assert L.fence_needs(lk, L.Me("ctl1", 100, "cccc"), 60, 35) == "lost"  # another process on A's host
    assert L.fence_needs(None, A, 0, 35) == "lost"


def _takeover_after_death(period: float, timeout: float, death: float) -> float:
    """A renews before its round at 0 and by heartbeat between rounds until it dies at ``death``; B (its host
    serving, asking every period / 4 or at the lease's expiry, as the daemon loop does) tries from then on.
    Returns when B holds the lease (fake clock, real store rules)."""
    import tempfile

    length = L.lease_length(period, timeout)
    with tempfile.TemporaryDirectory() as d, Store(os.path.join(d, "db.sqlite")) as st:
        t = 0.0
        L.acquire(st, A, t, length)
        while t < death:  # A's heartbeats (rounds renew too: a subset of these instants)
            if L.renewal_due(st.leader(), A, t, length, period):
                L.acquire(st, A, t, length)
            t += 0.1
        t = death
        while True:
            try:
                L.acquire(st, B, t, length)
                return t
            except L.LeaderHeld as e:
                t += min(period / L.HEARTBEATS, max(e.lock.expires - t, 0.0) + 0.2)


@pytest.mark.parametrize("period,timeout", [(300, 30), (20, 10), (60, 30)])
def test_a_dead_leaders_lease_is_taken_over_within_two_periods(period, timeout):
    worst = 0.0
    for k in range(40):
        death = period * (1 + k / 20)  # deaths spread over two periods of heartbeats
        worst = max(worst, _takeover_after_death(period, timeout, death) - death)
    assert worst <= 2 * period
    assert worst > L.lease_length(period, timeout) - period / L.HEARTBEATS - 0.2  # not earlier than it expires


# ------------------------------------------------------------------------------------- fencing, two handles


def test_fence_renews_its_own_row_and_refuses_once_another_took_it(tmp_path):
    db = tmp_path / "db.sqlite"
    with Store(db) as sa, Store(db) as sb:
        L.acquire(sa, A, 1000, 30)  # expires 1030
        assert L.fence(sa, A, 1010, 30, 15) == lock_of(A, 1000, 1030)  # 20 s left: nothing written
        assert L.fence(sa, A, 1020, 30, 15) == lock_of(A, 1000, 1050)  # 10 s left: renewed
        assert L.fence(sa, A, 1100, 30, 15) == lock_of(A, 1000, 1130)  # expired, untouched: renewed
        L.acquire(sb, B, 1131, 30)  # A stalled past its lease: B takes it
        with pytest.raises(L.LeaseLost, match="now held by ctl2"):
            L.fence(sa, A, 1132, 30, 15)
        assert sb.leader() == lock_of(B, 1131, 1161)  # the refusal wrote nothing


def test_a_fenced_cluster_writes_nothing_after_the_lease_changed_hands(tmp_path):
    calls = []

    class Recorder:
        def set_accounts_gpu_limits(self, limits):
            calls.append(("limits", dict(limits)))

        def snapshot(self):
            return "snap"

    db = tmp_path / "db.sqlite"
    clock = [1000.0]
    with Store(db) as sa, Store(db) as sb:
        L.acquire(sa, A, clock[0], 30)
        fc = L.FencedCluster(Recorder(), sa, A, 30, 15, clock=lambda: clock[0])
        fc.set_accounts_gpu_limits({"a": {"v100": 2}})
        assert calls == [("limits", {"a": {"v100": 2}})]
        clock[0] = 1040.0
        L.acquire(sb, B, clock[0], 30)
        assert fc.snapshot() == "snap"  # reads pass
        with pytest.raises(ClusterUnreachable):  # LeaseLost: the round stops at once
            fc.set_accounts_gpu_limits({"a": {"v100": 3}})
        assert calls == [("limits", {"a": {"v100": 2}})]


def _sim(tmp_path):
    thr = {"fast": {"k80": 1.0, "v100": 3.0}, "flat": {"k80": 1.0, "v100": 2.0}}
    jobs = [TraceJob(f"{a}{i}", 0.0, a, c, 1, 1e6) for i in range(4) for a, c in (("a", "fast"), ("b", "flat"))]
    cfg = config.from_dict({"daemon": {"database": str(tmp_path / "s.sqlite"), "dry_run": False}})
    cluster = SimCluster(cluster_spec("k80=2,v100=2", 2), {"a": 1, "b": 1}, thr, jobs, epoch=1.7e9)
    cluster.advance(0.0)
    return cfg, cluster


def test_a_round_whose_lease_was_lost_records_no_site_limit_and_writes_nothing(tmp_path, monkeypatch):
    cfg, sim = _sim(tmp_path)
    with Store(cfg.database_path) as st:
        recorded = []
        real_record = st.record_site_limits
        monkeypatch.setattr(st, "record_site_limits", lambda *a, **k: recorded.append(a) or real_record(*a, **k))
        now = sim.clock()
        L.acquire(st, B, now, 30)  # another daemon holds it
        factors = {j.job_id: j.site_factor for j in sim.jobs.values()}
        res = run_round(L.FencedCluster(sim, st, A, 30, 15, clock=lambda: now), st, cfg, "oef-coop", now=now)
        assert res.status == "unreachable" and "lease was lost" in res.message
        assert {j.job_id: j.site_factor for j in sim.jobs.values()} == factors  # no SiteFactor written
        assert recorded == [] and st.written() == {}  # no site limit recorded from its stale snapshot
        # the same round while A holds it writes (so the checks above are not vacuous)
        st.swap_leader(st.leader(), lock_of(A, now, now + 30))
        res = run_round(L.FencedCluster(sim, st, A, 30, 15, clock=lambda: now), st, cfg, "oef-coop", now=now)
        assert res.status == "ok" and res.factor_changes and len(recorded) == 1
        assert {j: sim.jobs[j].site_factor for j in res.factor_changes} == res.factor_changes


# ------------------------------------------------------------------------------- the daemon loop, in-process


def _cfg(tmp_path, host: str, period: float) -> str:
    p = tmp_path / f"{host}.toml"
    p.write_text(f'[daemon]\ndatabase = "sf.sqlite"\nhost_id = "{host}"\nperiod = {period}\n'
                 '[cluster]\ntimeout = 1\n[metrics]\nlisten = ""\n')
    return str(p)


def test_the_loop_waits_for_a_live_lease_and_takes_over_when_it_expires(tmp_path, capsys):
    with Store(tmp_path / "sf.sqlite") as st:  # ctl1 renewed its lease just now, then died
        t0 = time.time()
        st.swap_leader(None, lock_of(A, t0 - 100, t0 + 1.5))
    took = []

    def factory(cfg):  # called once this daemon holds the lease, before its first round
        took.append(time.time())
        os.kill(os.getpid(), signal.SIGTERM)  # stop after that round
        raise ClusterUnreachable("no cluster in this test")

    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:  # no exit 1 (as before): it waits
        assert service.serve(_cfg(tmp_path, "ctl2", 2), cluster_factory=factory, standby=lambda c, h: None) == 0
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert len(took) == 1 and t0 + 1.5 <= took[0] <= t0 + 1.5 + 0.5 + 0.5  # at expiry, within one wait step
    err = capsys.readouterr().err
    assert err.count("waiting here (no round) until it expires") == 1  # logged once per holder
    assert "lease taken (expired)" in err
    with Store(tmp_path / "sf.sqlite") as st:
        assert st.leader().host == "ctl2" and len(st.rounds(details=False)) == 1


def test_heartbeat_renews_between_rounds_and_says_when_the_lease_is_lost(tmp_path, capsys):
    cfg = config.load(_cfg(tmp_path, "ctl1", 2))
    me = L.Me("ctl1", os.getpid(), "aaaa")
    with Store(tmp_path / "sf.sqlite") as st:
        first, _ = L.acquire(st, me, time.time(), service._lease_length(cfg))
        assert service._heartbeat(st, me, cfg) and st.leader() == first  # not due yet: nothing written
        time.sleep(0.6)  # > period / 4
        assert service._heartbeat(st, me, cfg) and st.leader().expires > first.expires
        st.swap_leader(st.leader(), lock_of(B, time.time(), time.time() + 30))
        assert not service._heartbeat(st, me, cfg)
        assert st.leader().host == "ctl2"
    assert "lease lost" in capsys.readouterr().err


def test_with_only_on_primary_a_lock_file_held_by_another_daemon_is_waited_for(tmp_path, capsys):
    held = service.lock(tmp_path / "sf.sqlite")  # the other controller's daemon, through the shared storage
    calls = []

    def standby(cfg, host):
        calls.append(host)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return None  # this host serves

    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    cfg = _cfg(tmp_path, "ctl2", 2)
    try:
        with pytest.raises(service.AlreadyRunning):  # without only_on_primary: exit 1, as before
            service.serve(cfg, cluster_factory=lambda c: None, standby=standby)
        ha = tmp_path / "ha.toml"
        ha.write_text(open(cfg).read().replace("[cluster]", "only_on_primary = true\n[cluster]"))
        calls.clear()
        assert service.serve(str(ha), cluster_factory=lambda c: None, standby=standby) == 0
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        held.close()
    assert len(calls) == 3  # asked again and again, no round
    err = capsys.readouterr().err
    assert err.count("standby: another slurm-fair daemon holds") == 1
    with Store(tmp_path / "sf.sqlite") as st:
        assert st.rounds(details=False) == [] and st.leader() is None
