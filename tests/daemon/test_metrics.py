"""The daemon's Prometheus endpoint: values computed from a round recorded in a real store, served over real
HTTP on loopback and parsed with prometheus_client's own parser; a port that is taken never stops the daemon
(in-process and as a real daemon process without Slurm)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slurm_fair import config
from slurm_fair.daemon import metrics as M
from slurm_fair.daemon.service import start_metrics
from slurm_fair.store import Store, StoreError
from slurm_fair.daemon.preemption.store import PreemptionStore

CAPACITY = {"a100": 4, "v100": 6}
IDEAL = {"acct_a": {"a100": 1.25, "v100": 4.5}, "acct_b": {"a100": 2.75, "v100": 1.5}}
REAL = {"acct_a": {"a100": 1, "v100": 5}, "acct_b": {"a100": 3, "v100": 1}}
LIMIT = {"acct_a": {"a100": 1, "v100": 5}, "acct_b": {"a100": 3, "v100": 2}}
DEV = {"acct_a": {"a100": 0.25, "v100": -0.5}, "acct_b": {"a100": -0.25, "v100": 0.5}}
IN_USE = {"acct_a": {"v100": 2}, "root": {"a100": 1}, "acct_x": {"?": 1}}
PENDING = {"acct_a": 3}


def record_ok_round(store: Store, ideal=IDEAL, pending=PENDING) -> int:
    """A round written with the store API the way daemon/round.py writes one."""
    rid = store.begin_round("oef-noncoop", "")
    details = {"policy": "oef-noncoop", "capacity": CAPACITY, "accounts": sorted(ideal), "ideal": ideal,
               "real": REAL, "limits": LIMIT, "deviations": DEV, "pending_gpus": pending, "in_use": IN_USE,
               "not_demand": {"acct_b": {"held": 6, "dependency": 1}, "root": {"held": 1}}}
    with store.transaction():
        store.record_shares(rid, [{"account": a, "class": "c", "gpu_type": g, "ideal": v, "real": None}
                                  for a, row in ideal.items() for g, v in row.items()])
        store.record_placements(rid, [{"account": a, "gpu_type": g, "ideal": ideal[a][g], "deviation_before": 0.0,
                                       "real": REAL[a][g], "limit": LIMIT[a][g]} for a in ideal for g in CAPACITY])
        store.save_deviations(rid, DEV)
        store.finish_round(rid, "ok", solve_seconds=0.125, n_accounts=len(ideal), n_changes=4, message="",
                           details=details, total_throughput=9.0)
    return rid


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "sf.sqlite")
    yield s
    s.close()


def scrape(port: int, host: str = "127.0.0.1") -> dict[tuple[str, frozenset], float]:
    """GET /metrics with a plain HTTP client; sample (name, labels) -> value."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def at(values, name, **labels):
    return values[(name, frozenset(labels.items()))]


def test_endpoint_serves_what_the_rounds_recorded(store):
    rid = record_ok_round(store)
    p1 = PreemptionStore(store).add(job_id=11, account="acct_b", gpu_type="v100", gpus=1, signal="USR1", reason="over",
                                    grace=120, round_id=rid)
    PreemptionStore(store).step(p1, "requeued", "grace over", state="requeued", round_id=rid)
    PreemptionStore(store).add(job_id=12, account="acct_b", gpu_type="v100", gpus=1, signal="USR1", reason="over",
                               grace=120, round_id=rid)
    PreemptionStore(store).add(job_id=13, account="acct_a", gpu_type="a100", gpus=2, signal="USR1", reason="over",
                               grace=120, round_id=rid, ok=False, message="scancel failed")
    time.sleep(0.01)
    bad = store.begin_round("oef-noncoop", "")
    store.finish_round(bad, "unreachable", solve_seconds=0.0, message="observe: no answer")
    good, latest = store.round(rid), store.round(bad)

    exporter = start_metrics(config.from_dict({}), store, port=0)  # metrics.listen's host, any free port
    assert exporter is not None
    try:
        v = scrape(exporter.port)
    finally:
        exporter.close()
    for a in IDEAL:
        for g in CAPACITY:
            assert at(v, "slurm_fair_share_gpus", account=a, gpu_type=g) == IDEAL[a][g]
            assert at(v, "slurm_fair_rounded_share_gpus", account=a, gpu_type=g) == REAL[a][g]
            assert at(v, "slurm_fair_limit_gpus", account=a, gpu_type=g) == LIMIT[a][g]
            assert at(v, "slurm_fair_deviation_gpus", account=a, gpu_type=g) == DEV[a][g]
    # usage: every managed account and type (0 when idle), accounts the round saw running too, never root
    assert at(v, "slurm_fair_usage_gpus", account="acct_a", gpu_type="v100") == 2
    assert at(v, "slurm_fair_usage_gpus", account="acct_b", gpu_type="a100") == 0
    assert at(v, "slurm_fair_usage_gpus", account="acct_x", gpu_type="?") == 1
    assert not any(k[0] == "slurm_fair_usage_gpus" and ("account", "root") in k[1] for k in v)
    assert at(v, "slurm_fair_pending_gpus", account="acct_a") == 3
    assert at(v, "slurm_fair_pending_gpus", account="acct_b") == 0
    # pending jobs that are not demand (issue 21 item 2), per reason; never root
    assert at(v, "slurm_fair_not_demand_gpus", account="acct_b", reason="held") == 6
    assert at(v, "slurm_fair_not_demand_gpus", account="acct_b", reason="dependency") == 1
    assert not any(k[0] == "slurm_fair_not_demand_gpus" and ("account", "root") in k[1] for k in v)
    assert at(v, "slurm_fair_capacity_gpus", gpu_type="v100") == 6
    assert at(v, "slurm_fair_shares_round_timestamp_seconds") == good.finished
    # the newest finished round: its status, timings
    assert at(v, "slurm_fair_round_status", status="unreachable") == 1
    assert sum(at(v, "slurm_fair_round_status", status=s) for s in M.FINISHED_STATUSES) == 1
    assert at(v, "slurm_fair_round_seconds") == pytest.approx(latest.finished - latest.started)
    assert at(v, "slurm_fair_solve_seconds") == 0.0
    assert at(v, "slurm_fair_last_round_timestamp_seconds") == latest.finished
    assert {s: at(v, "slurm_fair_rounds_total", status=s) for s in M.FINISHED_STATUSES} == {
        "ok": 1, "dry-run": 0, "unreachable": 1, "solver-failed": 0, "error": 0}
    assert at(v, "slurm_fair_preemptions_total", account="acct_b", gpu_type="v100") == 2
    assert at(v, "slurm_fair_preemptions_total", account="acct_a", gpu_type="a100") == 1  # the failed signal
    assert at(v, "slurm_fair_preemption_requeues_total", account="acct_b", gpu_type="v100") == 1
    assert at(v, "slurm_fair_preemptions_open", account="acct_b", gpu_type="v100") == 1
    assert at(v, "slurm_fair_preemptions_open", account="acct_a", gpu_type="a100") == 0
    # a private registry: nothing but slurm-fair's metrics (no process_ / python_ collectors)
    assert {n for n, _ in v} and all(n.startswith("slurm_fair_") for n, _ in v)


def test_a_scrape_sees_the_snapshot_of_the_last_refresh(store):
    exporter = start_metrics(config.from_dict({}), store, port=0)
    assert exporter is not None
    port = exporter.port
    try:
        empty = scrape(port)  # no round yet: counters at 0, no per-account series
        assert at(empty, "slurm_fair_rounds_total", status="ok") == 0
        assert not any(n == "slurm_fair_share_gpus" for n, _ in empty)
        record_ok_round(store, pending={"acct_a": 7})
        assert scrape(port) == empty  # the store changed; the snapshot changes with the daemon's refresh
        exporter.refresh(store)
        after = scrape(port)
        assert at(after, "slurm_fair_rounds_total", status="ok") == 1
        assert at(after, "slurm_fair_round_status", status="ok") == 1
        assert at(after, "slurm_fair_pending_gpus", account="acct_a") == 7
        assert at(after, "slurm_fair_solve_seconds") == 0.125
    finally:
        exporter.close()
    assert exporter.port is None
    again = M.Exporter()  # closing released the port: the daemon's next start can bind it
    assert again.serve("127.0.0.1", port) == port
    again.close()


def test_families_of_an_empty_store_are_well_formed():
    fams = M.families(M.Inputs())
    names = [f.name for f in fams]
    assert len(names) == len(set(names)) and all(n.startswith("slurm_fair_") for n in names)
    for f in fams:
        assert f.kind in ("gauge", "counter") and (f.kind == "counter") == f.name.endswith("_total")
        assert all(len(labels) == len(f.labels) for labels, _ in f.samples)
    byname = {f.name: f for f in fams}
    assert byname["slurm_fair_round_status"].samples == tuple(((s,), 0.0) for s in M.FINISHED_STATUSES)
    assert byname["slurm_fair_share_gpus"].samples == ()


def _taken_port() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s


def test_a_taken_port_is_logged_and_recorded_and_does_not_raise(store, capsys):
    holder = _taken_port()
    port = holder.getsockname()[1]
    try:
        cfg = config.from_dict({"metrics": {"listen": f"127.0.0.1:{port}"}})
        assert start_metrics(cfg, store) is None
    finally:
        holder.close()
    err = capsys.readouterr().err
    assert f"cannot serve metrics on 127.0.0.1:{port}" in err and "running without metrics" in err
    ev = store.events(kind="metrics")
    assert len(ev) == 1 and ev[0].data["port"] == port and "in use" in ev[0].data["error"]
    # off: nothing bound, nothing recorded
    assert start_metrics(config.from_dict({"metrics": {"listen": ""}}), store) is None
    assert len(store.events(kind="metrics")) == 1


def test_ipv6_loopback(store):
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    try:
        probe = socket.socket(socket.AF_INET6)
        probe.bind(("::1", 0))
        probe.close()
    except OSError:
        pytest.skip("no IPv6 loopback here")
    record_ok_round(store)
    exporter = start_metrics(config.from_dict({"metrics": {"listen": "[::1]:9817"}}), store, port=0)
    assert exporter is not None
    try:
        v = scrape(exporter.port, host="[::1]")
    finally:
        exporter.close()
    assert at(v, "slurm_fair_limit_gpus", account="acct_b", gpu_type="v100") == 2


# ------------------------------------------------------------------------------------- the daemon process


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _daemon(tmp_path, port: int) -> subprocess.Popen:
    """The real daemon, period 1 s, with no Slurm on PATH: every round fails to observe and is recorded."""
    cfg = tmp_path / "sf.toml"
    cfg.write_text(f'[daemon]\nperiod = 1\ndatabase = "sf.sqlite"\n[cluster]\nbackend = "cli"\ntimeout = 5\n'
                   f'[metrics]\nlisten = "127.0.0.1:{port}"\n')
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"} | {"PATH": str(empty)}
    return subprocess.Popen([sys.executable, "-c", "from slurm_fair.cli import main; main()", "daemon",
                             "--config", str(cfg)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _stop(proc: subprocess.Popen) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, err


def _wait(pred, timeout=60.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = pred()
        except OSError:  # not listening yet
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_daemon_process_serves_metrics_of_its_rounds(tmp_path):
    port = free_port()
    proc = _daemon(tmp_path, port)
    try:
        v = _wait(lambda: (x := scrape(port)) and sum(at(x, "slurm_fair_rounds_total", status=s)
                                                      for s in M.FINISHED_STATUSES) >= 2 and x)
    finally:
        rc, err = _stop(proc)
    assert rc == 0, err
    assert f"metrics: serving http://127.0.0.1:{port}/metrics" in err
    with Store(tmp_path / "sf.sqlite") as st:
        counts = st.round_counts()
        latest = st.last_finished_round()
    assert latest.status in ("error", "unreachable")
    failed = sum(at(v, "slurm_fair_rounds_total", status=s) for s in ("error", "unreachable"))
    assert 2 <= failed <= counts.get("error", 0) + counts.get("unreachable", 0)  # the daemon ran on
    assert at(v, "slurm_fair_rounds_total", status="ok") == 0
    assert sum(at(v, "slurm_fair_round_status", status=s) for s in ("error", "unreachable")) == 1


def _n_rounds(db: Path) -> int:
    try:
        with Store(db) as st:
            return len(st.rounds(limit=10, details=False))
    except StoreError:  # the daemon is creating it (migrations, WAL switch) right now
        return 0


def test_daemon_process_with_its_port_taken_runs_its_rounds(tmp_path):
    holder = _taken_port()
    port = holder.getsockname()[1]
    try:
        proc = _daemon(tmp_path, port)
        db = tmp_path / "sf.sqlite"
        try:
            _wait(lambda: db.exists() and _n_rounds(db) >= 2)
            assert proc.poll() is None
        finally:
            rc, err = _stop(proc)
    finally:
        holder.close()
    assert rc == 0, err
    assert f"cannot serve metrics on 127.0.0.1:{port}" in err
    with Store(tmp_path / "sf.sqlite") as st:
        ev = st.events(kind="metrics")
        assert len(ev) == 1 and "running without metrics" in ev[0].message
