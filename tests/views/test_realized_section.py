"""``slurm-fair report``'s realized fairness section and the realized series of ``/metrics``, read from a store that
holds the hand-worked schedule of tests/fairness/test_live.py as the hooks record it (start and end records with
Slurm's times), two dry-run rounds that weighed the accounts and saw the capacity, and acct_a's profile: the same
numbers come out of the store, the report's JSON and table, and the metrics."""

from __future__ import annotations

import datetime
import json

import pytest
from click.testing import CliRunner

from slurm_fair.cli import main
from slurm_fair.daemon import metrics as M
from slurm_fair.daemon.realized_window import read
from slurm_fair.store import Store
from slurm_fair.views import report

# job -> (account, class, GPUs per type, submit, start, end or None)
JOBS = {1: ("acct_b", "y", {"fast": 3}, 1000, 1000, 1100), 2: ("acct_b", "y", {"slow": 1}, 1000, 1000, 1030),
        3: ("acct_a", "x", {"fast": 1}, 1000, 1040, 1070), 4: ("acct_a", "x", {"slow": 1}, 1020, 1070, None)}
BASE = 1_700_000_000.0  # the schedule's times are BASE + these


def _records():
    out = []
    for job, (acct, cls, gpus, submit, start, end) in JOBS.items():
        for event, ctx, t in (("start", "prolog_slurmctld", start), ("end", "epilog_slurmctld", end)):
            if t is None:
                continue
            out.append({"job_id": job, "restart_count": 0, "event": event, "context": ctx, "node": "",
                        "time": BASE + t + 0.4, "start_time": BASE + start,
                        "end_time": BASE + end if event == "end" else None, "account": acct, "class": cls,
                        "gpus": gpus, "gpu_count": sum(gpus.values()), "gpu_info": "scontrol -d show job",
                        "submit_time": BASE + submit})
    return out


@pytest.fixture()
def store_path(tmp_path):
    path = tmp_path / "sf.sqlite"
    with Store(path) as st:
        details = {"tenants": {"acct_a": "acct_a", "acct_b": "acct_b"}, "weights": {"acct_a": 1.0, "acct_b": 3.0},
                   "capacity": {"fast": 4, "slow": 4}, "accounts": ["acct_a", "acct_b"]}
        for t in (1005, 1065):
            rid = st.begin_round("oef-coop", "", now=BASE + t)
            st.finish_round(rid, "dry-run", details=details, finished=BASE + t + 1)
        st.upsert_job_records(_records())
        st.set_profile("x", "fast", 30.0, account="acct_a")
        st.set_profile("x", "slow", 10.0, account="acct_a")
    return path


def test_the_store_gives_the_hand_worked_numbers(store_path):
    with Store(store_path) as st:
        live = read(st, BASE + 1000, BASE + 1100)
        rep = report.load(st, BASE + 1000, BASE + 1100, now=BASE + 5000)
    acc = {a.account: a for a in live.realized.accounts}
    assert acc["acct_a"].ratio == pytest.approx(9 / 26) and acc["acct_b"].ratio is None
    assert acc["acct_a"].throughput_share == pytest.approx(120 / 450)
    assert live.realized.account_envy_share("acct_a") == pytest.approx(0.4)
    r = rep["realized"]
    assert (r["since"], r["until"]) == (BASE + 1000, BASE + 1100)
    a = r["accounts"]["acct_a"]
    assert (a["weight"], a["ratio"], a["worst_episode_ratio"], a["episodes"], a["backlogged_s"]) == (
        1.0, pytest.approx(9 / 26), pytest.approx(9 / 26), 1, pytest.approx(70))
    assert a["mean_jct"] == pytest.approx(70) and r["accounts"]["acct_b"]["mean_jct"] == pytest.approx(65)
    assert r["unprofiled"] == ["y"] and r["left_out"] == [] and r["pending"] == [] and "cancelled" in r["not_seen"]


def test_without_until_the_window_runs_to_now_and_the_open_run_counts_to_it(store_path):
    """No --since: from the first round's start (1005); now = 1200: acct_a's open run (slow, speed 1) counts to
    1200: 1 x 130 on top of A1's 90; acct_b's B1 3 x 95 (from 1005) + B2 25 = 310."""
    with Store(store_path) as st:
        r = report.load(st, None, None, now=BASE + 1200)["realized"]
    assert (r["since"], r["until"]) == (BASE + 1005, BASE + 1200)
    assert r["accounts"]["acct_a"]["throughput"] == pytest.approx(90 + 130)
    assert r["accounts"]["acct_b"]["throughput"] == pytest.approx(285 + 25)


def test_the_report_prints_it(store_path):
    since, until = (datetime.datetime.fromtimestamp(BASE + t).isoformat(timespec="seconds") for t in (1000, 1100))
    r = CliRunner().invoke(main, ["report", "--database", str(store_path), "--since", since, "--until", until])
    assert r.exit_code == 0, r.output
    row = next(ln.split() for ln in r.output.splitlines() if ln.startswith("acct_a ") and len(ln.split()) == 12)
    assert row == ["acct_a", "1.00", "0.35", "0.35", "1", "70s", "70s", "70s", "0.40", "1", "70s", "0.27"]
    assert "no profile (speed 1 on every type): y\n" in r.output
    assert "not seen: jobs submitted and cancelled between two rounds" in r.output
    j = json.loads(CliRunner().invoke(main, ["report", "--database", str(store_path), "--since", since, "--until",
                                             until, "--json"]).output)
    assert j["realized"]["accounts"]["acct_a"]["ratio"] == pytest.approx(9 / 26)


def test_no_capacity_recorded_is_said_not_raised(tmp_path):
    with Store(tmp_path / "s.sqlite") as st:
        rid = st.begin_round("oef-coop", "", now=BASE)
        st.finish_round(rid, "error", details={}, finished=BASE + 1)
        st.upsert_job_records(_records())
        r = report.load(st, BASE, BASE + 100, now=BASE + 200)["realized"]
    assert "no round up to the window's end recorded the GPUs per type" in r["error"]


def test_metrics_export_the_window_per_account(store_path):
    with Store(store_path) as st:
        inp = M.read_inputs(st, now=BASE + 1100)  # the last 24 h: from before the first round
    fams = {f.name: f for f in M.families(inp)}
    assert inp.realized is not None and inp.realized.realized.t1 == BASE + 1100
    ratio = dict(fams["slurm_fair_realized_share_ratio"].samples)
    # the last 24 h hold the whole schedule: the same numbers as the report's window [1000, 1100]
    assert ratio == {("acct_a",): pytest.approx(9 / 26)}  # acct_b: no episode, no sample
    assert dict(fams["slurm_fair_realized_envy_share"].samples)[("acct_a",)] == pytest.approx(0.4)
    assert dict(fams["slurm_fair_realized_backlogged_seconds"].samples)[("acct_b",)] == 0.0
    assert dict(fams["slurm_fair_realized_throughput_share"].samples)[("acct_b",)] == pytest.approx(330 / 450)
    assert fams["slurm_fair_realized_compute_seconds"].samples[0][1] >= 0


def test_metrics_without_a_store_history_have_no_realized_samples(tmp_path):
    with Store(tmp_path / "s.sqlite") as st:
        inp = M.read_inputs(st)
    assert inp.realized is None
    fams = {f.name: f for f in M.families(inp)}
    assert fams["slurm_fair_realized_share_ratio"].samples == ()


def test_the_exporter_computes_realized_fairness_at_most_every_ten_minutes(store_path, monkeypatch):
    """One refresh a round, but the sweep over a day of jobs only when REALIZED_EVERY_S have passed: a refresh in
    between serves the last values (and their compute seconds) without reading the job records again."""
    calls = []
    real = M.read_realized
    monkeypatch.setattr(M, "read_realized", lambda *a, **k: calls.append(a[1:3]) or real(*a, **k))
    exporter = M.Exporter()
    with Store(store_path) as st:
        exporter.refresh(st, now=BASE + 1100)
        exporter.refresh(st, now=BASE + 1100 + M.REALIZED_EVERY_S - 1)
        assert len(calls) == 1
        text = _scrape(exporter)
        assert 'slurm_fair_realized_share_ratio{account="acct_a"} 0.346' in text
        exporter.refresh(st, now=BASE + 1100 + M.REALIZED_EVERY_S)
    assert calls == [(BASE + 1100 - M.METRICS_WINDOW_S, BASE + 1100),
                     (BASE + 1100 + M.REALIZED_EVERY_S - M.METRICS_WINDOW_S, BASE + 1100 + M.REALIZED_EVERY_S)]


def _scrape(exporter) -> str:
    from prometheus_client import generate_latest

    return generate_latest(exporter.registry).decode()


def test_a_window_without_a_round_of_its_own_is_weighed_by_the_round_before(store_path):
    """[1070, 1100]: no round started in it; the newest before (1065) weighs the accounts. acct_a's A2 runs on slow
    from 1070 (1 x 30 of acct_a's 30 + acct_b's B1 3 x 30 = 120); nobody is backlogged."""
    since, until = (datetime.datetime.fromtimestamp(BASE + t).isoformat(timespec="seconds") for t in (1070, 1100))
    with Store(store_path) as st:
        r = report.load(st, BASE + 1070, BASE + 1100, now=BASE + 5000)
    assert r["rounds"] == 0 and r["realized"]["accounts"]["acct_a"]["throughput_share"] == pytest.approx(30 / 120)
    out = CliRunner().invoke(main, ["report", "--database", str(store_path), "--since", since, "--until", until])
    assert out.exit_code == 0 and "no rounds between" in out.output and "realized fairness from" in out.output


def test_a_type_without_a_profile_value_is_said(store_path):
    """acct_a's x loses its slow value: the daemon's lookup assumes its slowest known there (fast's 30: speed 1 on
    both), and the report says so."""
    with Store(store_path) as st:
        st.delete_profiles("x", account="acct_a", gpu_type="slow")
    since, until = (datetime.datetime.fromtimestamp(BASE + t).isoformat(timespec="seconds") for t in (1000, 1100))
    out = CliRunner().invoke(main, ["report", "--database", str(store_path), "--since", since, "--until", until])
    assert out.exit_code == 0, out.output
    assert "speed assumed (the class's slowest known, no profile there): acct_a/x on slow" in out.output


def test_an_account_whose_jobs_never_start_is_read_from_the_rounds_sightings(tmp_path):
    """acct_b's jobs 1 and 2 above; capacity fast 4, slow 4; weights 1 and 1 (acct_a's share: fast 2, slow 2).
    Pending jobs as in tests/fairness/test_live.py, through the store: dry-run rounds every 10 s
    from 1020 to 1090 saw acct_a's job 11 pending each time (it never started) and job 12 from 1040 to 1060 (then
    it left without a start record). acct_a is backlogged from 1010 (job 11's submit) to the window's end: received
    0 of 3 x 90 = 270 (its share of fast at speed 3, capped by its demand of 1 GPU), censored; job 12 is left out."""
    from slurm_fair.store import PendingJob

    details = {"tenants": {"acct_a": "acct_a", "acct_b": "acct_b"}, "weights": {"acct_a": 1.0, "acct_b": 1.0},
               "capacity": {"fast": 4, "slow": 4}}
    with Store(tmp_path / "sf.sqlite") as st:
        for t in range(1020, 1100, 10):
            rid = st.begin_round("oef-coop", "", now=BASE + t)
            seen = [PendingJob(11, "acct_a", "x", 1, None, BASE + 1010, "", BASE + t, BASE + t)]
            if 1040 <= t <= 1060:
                seen.append(PendingJob(12, "acct_a", "x", 1, "fast", BASE + 1030, "", BASE + t, BASE + t))
            st.record_pending(seen)
            st.finish_round(rid, "dry-run", details=details, finished=BASE + t + 1)
        st.upsert_job_records([r for r in _records() if r["job_id"] in (1, 2)])  # acct_b's jobs, as above
        st.set_profile("x", "fast", 30.0, account="acct_a")
        st.set_profile("x", "slow", 10.0, account="acct_a")
        live = read(st, BASE + 1000, BASE + 1100)
        r = report.load(st, BASE + 1000, BASE + 1100, now=BASE + 5000)["realized"]
    ep = next(e for e in live.realized.episodes if e.account == "acct_a")
    assert (ep.start, ep.end, ep.censored) == (BASE + 1010, BASE + 1100, True)
    assert ep.received == 0 and ep.entitled == pytest.approx(270) and ep.time_to_fair_share is None
    assert r["pending"] == [11] and r["accounts"]["acct_a"]["ratio"] == 0.0
    assert [(x["job"], x["gpu_seconds"]) for x in r["left_out"]] == [(12, 0.0)]
    assert r["accounts"]["acct_a"]["time_to_fair_share"]["censored"] == 1


def test_a_window_long_after_the_last_round_does_not_guess_who_still_waits(tmp_path):
    """The last round (at 1000) saw job 11 pending; a window ending three daemon periods later (default 300 s)
    cannot say whether it still waited: it is left out, not counted as backlog."""
    from slurm_fair.fairness.live import NO_SIGHTING
    from slurm_fair.store import PendingJob

    details = {"tenants": {"acct_a": "acct_a"}, "weights": {"acct_a": 1.0}, "capacity": {"fast": 4}}
    with Store(tmp_path / "sf.sqlite") as st:
        rid = st.begin_round("oef-coop", "", now=BASE + 1000)
        st.record_pending([PendingJob(11, "acct_a", "x", 1, None, BASE + 990, "", BASE + 1000, BASE + 1000)])
        st.finish_round(rid, "dry-run", details=details, finished=BASE + 1001)
        near = read(st, BASE + 900, BASE + 1500)  # 500 s after the round: within two periods
        far = read(st, BASE + 900, BASE + 1901)  # 901 s after it
    assert near.live.pending == (11,) and near.realized.episodes[0].end == BASE + 1500
    assert far.live.pending == () and [x.why for x in far.live.left_out] == [NO_SIGHTING]
    assert far.realized.episodes == ()
