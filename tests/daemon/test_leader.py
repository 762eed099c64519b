"""The daemon's leader lock (daemon/leader.py, store table ``lease``): one daemon per cluster, whichever host it is on."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_fair import config
from slurm_fair.cluster.errors import ClusterUnreachable
from slurm_fair.daemon import leader as L
from slurm_fair.daemon import service
from slurm_fair.store import MIGRATIONS, Leader, Store

A = L.Me("ctl1", 100, "aaaa")
B = L.Me("ctl2", 200, "bbbb")


def lock_of(me: L.Me, acquired: float, expires: float) -> Leader:
    return Leader(me.host, me.pid, me.token, acquired, expires)


# ------------------------------------------------------------------------------------------------ pure rules


def test_may_hold():
    live = lock_of(A, 0, 900)
    assert L.may_hold(None, B, 10) == L.Verdict(True, "free")
    assert L.may_hold(live, A, 10) == L.Verdict(True, "mine")
    assert L.may_hold(live, B, 10) == L.Verdict(False, "held")
    assert L.may_hold(live, B, 899.9) == L.Verdict(False, "held")
    assert L.may_hold(live, B, 900) == L.Verdict(True, "expired")
    # same host, another process (a restart): this process holds the flock, so that holder has stopped
    assert L.may_hold(live, L.Me("ctl1", 101, "cccc"), 10) == L.Verdict(True, "same host")
    # same pid and host but another token is another process (pid reused): still the same host
    assert L.may_hold(live, L.Me("ctl1", 100, "dddd"), 10).why == "same host"


def test_renewed_keeps_acquired_only_for_its_holder():
    mine = lock_of(A, 5, 905)
    assert L.renewed(mine, A, 300, 900) == lock_of(A, 5, 1200)
    assert L.renewed(mine, B, 1000, 900) == lock_of(B, 1000, 1900)
    assert L.renewed(None, B, 7, 30) == lock_of(B, 7, 37)


def test_describe_names_holder_and_expiry():
    assert L.describe(lock_of(A, 0, 86400 + 3600), 86400) == \
        "ctl1 (pid 100, id aaaa) until 1970-01-02 01:00:00 UTC (in 3600 s)"


def test_whoami_defaults_to_the_host_name():
    import socket

    me = L.whoami("")
    assert me.host == socket.gethostname() and me.pid == os.getpid() and len(me.token) == 12
    assert L.whoami("ctl9").host == "ctl9" and L.whoami("x").token != L.whoami("x").token


# ------------------------------------------------------------------------------- two store handles, one file


def test_migration_13_creates_the_lease_table(tmp_path):
    with Store(tmp_path / "db.sqlite") as st:
        assert st.version == len(MIGRATIONS) >= 13
        assert st.leader() is None
        assert "lease" in st.db.table_names()


def test_two_hosts_on_one_database(tmp_path):
    db = tmp_path / "db.sqlite"
    with Store(db) as sa, Store(db) as sb:
        held, why = L.acquire(sa, A, 1000, 900)
        assert (held, why) == (lock_of(A, 1000, 1900), "free")
        assert sb.leader() == held  # the other handle (host) sees it
        with pytest.raises(L.LeaderHeld) as e:
            L.acquire(sb, B, 1500, 900)
        assert "ctl1 (pid 100, id aaaa) until 1970-01-01 00:31:40 UTC (in 400 s)" in str(e.value)
        assert "refusing to run rounds" in str(e.value)
        assert sa.leader() == held  # the refusal wrote nothing
        assert L.acquire(sa, A, 1800, 900) == (lock_of(A, 1000, 2700), "mine")  # renewed every round
        with pytest.raises(L.LeaderHeld):
            L.acquire(sb, B, 2699, 900)
        # A stops renewing (host down): B takes over once it expired, and A may not come back while B's is live
        assert L.acquire(sb, B, 2700, 900) == (lock_of(B, 2700, 3600), "expired")
        with pytest.raises(L.LeaderHeld, match="ctl2"):
            L.acquire(sa, A, 2750, 900)
        # a clean stop gives it up: the other host takes it at once
        assert L.release(sa, A, 2800) is False  # not A's
        assert L.release(sb, B, 2800) is True
        assert sa.leader() == lock_of(B, 2700, 2800)
        assert L.acquire(sa, A, 2801, 900)[1] == "expired"


def test_swap_is_refused_when_the_row_changed_since_it_was_read(tmp_path):
    db = tmp_path / "db.sqlite"
    with Store(db) as sa, Store(db) as sb:
        seen_by_b = sb.leader()  # None
        assert sa.swap_leader(None, lock_of(A, 0, 900))
        assert not sb.swap_leader(seen_by_b, lock_of(B, 0, 900))  # B decided on a stale read: nothing written
        assert sb.leader() == lock_of(A, 0, 900)


def test_check_free_for_rollback(tmp_path):
    with Store(tmp_path / "db.sqlite") as st:
        L.check_free(st, B, 0, "rollback refused")  # no lease
        L.acquire(st, A, 0, 900)
        with pytest.raises(L.LeaderHeld, match="^rollback refused: .*ctl1"):
            L.check_free(st, B, 10, "rollback refused")
        L.check_free(st, L.Me("ctl1", 5, "eeee"), 10, "rollback refused")  # same host: the flock decides
        L.check_free(st, B, 900, "rollback refused")  # expired


# ------------------------------------------------------------------------------- the daemon loop, in-process


def _cfg(tmp_path: Path, host: str, **daemon: object) -> str:
    p = tmp_path / f"{host}.toml"
    daemon.setdefault("period", 60)
    extra = "".join(f"{k} = {str(v).lower() if isinstance(v, bool) else v}\n" for k, v in daemon.items())
    p.write_text(f'[daemon]\ndatabase = "sf.sqlite"\nhost_id = "{host}"\n{extra}'
                 '[metrics]\nlisten = ""\n')
    return str(p)


def _unreachable(cfg):
    raise ClusterUnreachable("no cluster in this test")


def test_serve_once_takes_the_leader_lock_and_another_host_is_refused(tmp_path):
    assert service.serve(_cfg(tmp_path, "ctl1"), once=True, cluster_factory=_unreachable) == 0
    with Store(tmp_path / "sf.sqlite") as st:
        held = st.leader()
        assert held.host == "ctl1" and held.pid == os.getpid()
        assert held.expires == pytest.approx(time.time() + 1.5 * 60, abs=10)  # 1.5 periods
        assert [r.status for r in st.rounds(details=False)] == ["unreachable"]
    with pytest.raises(L.LeaderHeld, match="lease is held by the slurm-fair daemon on ctl1"):
        service.serve(_cfg(tmp_path, "ctl2"), once=True, cluster_factory=_unreachable)
    with Store(tmp_path / "sf.sqlite") as st:
        assert len(st.rounds(details=False)) == 1  # the refused daemon recorded no round
        assert st.leader() == held


def test_standby_runs_no_round_and_leaves_the_database_alone(tmp_path):
    calls = []

    def factory(cfg):
        calls.append(cfg)
        raise ClusterUnreachable("no cluster in this test")

    assert service.serve(_cfg(tmp_path, "ctl1"), once=True, cluster_factory=factory) == 0
    db = tmp_path / "sf.sqlite"
    before = db.stat().st_mtime_ns
    assert service.serve(_cfg(tmp_path, "ctl1", only_on_primary=True), once=True, cluster_factory=factory,
                         standby=lambda cfg, host: f"slurmctld backup at ctl2 serves; {host} is primary, DOWN") == 0
    assert len(calls) == 1  # the standby round never looked at the cluster
    assert db.stat().st_mtime_ns == before  # nor opened the database (it may be on the other host's storage)
    with Store(db) as st:
        assert len(st.rounds(details=False)) == 1
    # ctl1's --once lease stays live: ctl2, now serving, is refused until it expires
    with pytest.raises(L.LeaderHeld, match="held by the slurm-fair daemon on ctl1"):
        service.serve(_cfg(tmp_path, "ctl2", only_on_primary=True), once=True, cluster_factory=factory,
                      standby=lambda cfg, host: None)


def test_a_daemon_that_goes_standby_gives_the_leader_lock_up(tmp_path):
    seen = []

    def standby(cfg, host):
        seen.append(host)
        if len(seen) == 1:
            return None  # this host serves: a round
        if len(seen) == 3:
            service.lock(tmp_path / "sf.sqlite").close()  # standing by, it holds no flock (AlreadyRunning if it did)
            os.kill(os.getpid(), signal.SIGTERM)  # stop after one standby
        return "slurmctld backup at ctl2 serves the cluster"

    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        assert service.serve(_cfg(tmp_path, "ctl1", period=0.5, only_on_primary=True),
                             cluster_factory=_unreachable, standby=standby) == 0
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert len(seen) == 3
    with Store(tmp_path / "sf.sqlite") as st:
        assert st.leader().host == "ctl1" and st.leader().expires <= time.time()  # given up when it went standby
        assert len(st.rounds(details=False)) == 1
    # so the other host's daemon takes it at once
    assert service.serve(_cfg(tmp_path, "ctl2", only_on_primary=True), once=True, cluster_factory=_unreachable,
                         standby=lambda cfg, host: None) == 0
    with Store(tmp_path / "sf.sqlite") as st:
        assert st.leader().host == "ctl2" and len(st.rounds(details=False)) == 2


def test_standby_reason_asks_scontrol_only_with_only_on_primary(tmp_path, monkeypatch):
    def no_ping(**kw):
        raise AssertionError("scontrol ping run")

    monkeypatch.setattr(service.ping_mod, "ping", no_ping)
    assert service.standby_reason(config.load(_cfg(tmp_path, "ctl1")), "ctl1") is None
    on = config.load(_cfg(tmp_path, "ctl1", only_on_primary=True))
    monkeypatch.setattr(service.ping_mod, "ping", lambda **kw: service.ping_mod.parse_ping(
        "Slurmctld(primary) at ctl1 is UP\nSlurmctld(backup) at ctl2 is UP\n"))
    assert service.standby_reason(on, "ctl1") is None
    assert service.standby_reason(on, "ctl2").startswith("slurmctld primary at ctl1 serves the cluster")

    def fails(**kw):
        raise ClusterUnreachable("scontrol ping: no answer within 5 s")

    monkeypatch.setattr(service.ping_mod, "ping", fails)
    assert service.standby_reason(on, "ctl1") == "cannot tell which slurmctld serves: scontrol ping: no answer within 5 s"


# ------------------------------------------------------------------------------- real processes, two "hosts"


def _env(tmp_path: Path) -> dict:
    empty = tmp_path / "bin"
    empty.mkdir(exist_ok=True)  # no Slurm on PATH: every round is recorded as unreachable/error
    return {k: v for k, v in os.environ.items() if k != "SLURM_CONF"} | {"PATH": str(empty)}


def _cli(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from slurm_fair.cli import main; main()", *args],
                          env=_env(tmp_path), capture_output=True, text=True, timeout=timeout)


def test_two_daemon_processes_on_two_hosts(tmp_path):
    ctl1, ctl2 = _cfg(tmp_path, "ctl1"), _cfg(tmp_path, "ctl2")
    first = _cli(tmp_path, "daemon", "--once", "--config", ctl1)
    # no Slurm client here: the round is recorded error, so --once exits 3 (a failed round, not a refusal)
    assert first.returncode == 3, first.stderr
    assert "status=error" in first.stderr and "scontrol" in first.stderr
    assert "host ctl1" in first.stderr and "lease taken (free)" in first.stderr
    second = _cli(tmp_path, "daemon", "--once", "--config", ctl2)
    assert second.returncode == 1
    assert "refusing to run rounds: the database's lease is held by the slurm-fair daemon on ctl1 (pid" in second.stderr
    assert re.search(r"UTC \(in [5-9]\d s\)", second.stderr)  # expires 1.5 periods (90 s) after the first's round
    # rollback on the other host is refused too; read-only commands ignore the lease
    rb = _cli(tmp_path, "rollback", "--config", ctl2)
    assert rb.returncode == 1 and "rollback refused: the database's lease is held by" in rb.stderr
    hist = _cli(tmp_path, "history", "--config", ctl2)
    assert hist.returncode == 0, hist.stderr
    # the same host again (a restart): taken over at once
    again = _cli(tmp_path, "daemon", "--once", "--config", ctl1)
    assert again.returncode == 3 and "lease taken (same host)" in again.stderr
    with Store(tmp_path / "sf.sqlite") as st:
        assert len(st.rounds(details=False)) == 2


def test_a_daemon_stopped_by_sigterm_gives_the_leader_lock_up(tmp_path):
    ctl1 = _cfg(tmp_path, "ctl1")
    proc = subprocess.Popen([sys.executable, "-c", "from slurm_fair.cli import main; main()", "daemon",
                             "--config", ctl1], env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    db = tmp_path / "sf.sqlite"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if db.exists() and Store(db).leader() is not None:
                    break
            except (sqlite3.Error, Exception):  # being created right now
                pass
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() else ""
            time.sleep(0.2)
        refused = _cli(tmp_path, "daemon", "--once", "--config", _cfg(tmp_path, "ctl2"))
        assert refused.returncode == 1, refused.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "lease given up" in err
    taken = _cli(tmp_path, "daemon", "--once", "--config", _cfg(tmp_path, "ctl2"))
    assert taken.returncode == 3 and "lease taken (expired)" in taken.stderr  # 3: its round failed (no Slurm here)


def test_release_gives_up_a_live_leader_lock_of_this_host_only(tmp_path):
    with Store(tmp_path / "db.sqlite") as st:
        L.acquire(st, A, 0, 900)
        assert L.release(st, B, 10) is False  # another host's: not ours to give up
        restarted = L.Me("ctl1", 101, "ffff")  # a later process on ctl1 (the one before crashed)
        assert L.release(st, restarted, 10) is True
        assert st.leader() == lock_of(A, 0, 10)  # expired now, still naming who held it
        assert L.release(st, restarted, 20) is False  # nothing live to give up


class _Broken:
    """A cluster whose snapshot fails with an error that is not a ClusterError: the round is recorded ``error``."""

    def snapshot(self):
        raise RuntimeError("a bug in this test's cluster")


def test_serve_once_exits_3_after_a_round_recorded_error_and_1_when_another_host_holds_the_lease(tmp_path):
    assert service.serve(_cfg(tmp_path, "ctl1"), once=True, cluster_factory=lambda cfg: _Broken()) == 3
    with Store(tmp_path / "sf.sqlite") as st:
        rounds = st.rounds(details=False)
        assert [r.status for r in rounds] == ["error"] and "a bug in this test's cluster" in rounds[0].message
    # an unreachable cluster is recorded, nothing changed: exit 0 (the first test); another host's lease: exit 1
    with pytest.raises(L.LeaderHeld):
        service.serve(_cfg(tmp_path, "ctl2"), once=True, cluster_factory=lambda cfg: _Broken())
    with Store(tmp_path / "sf.sqlite") as st:
        assert len(st.rounds(details=False)) == 1


def test_daemon_once_cli_exit_status_is_3_after_a_failed_round(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from slurm_fair.cli.admin import daemon_cmd

    real = service.serve
    monkeypatch.setattr(service, "serve", lambda path, once, dry_run: real(path, once=once, dry_run=dry_run,
                                                                            cluster_factory=lambda cfg: _Broken()))
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        r = CliRunner().invoke(daemon_cmd, ["--config", _cfg(tmp_path, "ctl1"), "--once"])
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert r.exit_code == 3, r.output
