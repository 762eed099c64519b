"""`slurm-fair report` and views.report: the numbers of a window of recorded rounds, checked against the
store's own rows (a small simulation keeps its store) and against hand-made rows."""

from __future__ import annotations

import datetime
import json
import statistics

import pytest
from click.testing import CliRunner

from slurm_fair.cli import main
from slurm_fair.views import report
from slurm_fair.errors import InputError
from slurm_fair.sim.cluster import cluster_spec
from slurm_fair.sim.engine import EPOCH, simulate
from slurm_fair.sim.traces import Trace, TraceJob
from slurm_fair.store import JobRun, Placement, RoundPoint, Store
from slurm_fair.daemon.preemption.store import PreemptionStore

THR = {"fast": {"k80": 1.0, "v100": 10.0}, "flat": {"k80": 1.0, "v100": 1.25}}


@pytest.fixture(scope="module")
def sim_store(tmp_path_factory):
    """A store kept by a short simulation (oef-coop, 2 accounts, 4 K80 + 4 V100, 300 s rounds, 40 min), plus
    two jobs' hook records and one preemption written into it by hand (the hook records the simulation wrote
    itself, sim/hooks.py, are removed first: the job numbers below are worked by hand from these two)."""
    path = tmp_path_factory.mktemp("report") / "sim.sqlite"
    jobs = [TraceJob(f"{a}{i}", 300.0 * i, a, c, 1, 9000.0) for i in range(8) for a, c in (("a", "fast"), ("b", "flat"))]
    r = simulate(Trace(tuple(jobs), THR, "report"), cluster_spec("k80=4,v100=4"), "oef-coop", round_s=300,
                 horizon=2400, store_path=path)
    assert r.rounds >= 5 and not r.round_errors
    with Store(path) as store:
        assert store.job_runs()  # the simulated hooks' records: removed, the report's job numbers are hand-made
        with store.db.conn:
            store.db.execute("delete from job_records")
        # job 1: submitted at 500 s, one run 600 s -> 1800 s; job 2 (no submit time recorded): two runs (requeued),
        # 900 -> 1200 and 1500 -> 2100 (1200 s in all)
        recs = []
        for job, restart, start, end in ((1, 0, 600.0, 1800.0), (2, 0, 900.0, 1200.0), (2, 1, 1500.0, 2100.0)):
            for event, ctx, t in (("start", "prolog_slurmctld", start), ("end", "epilog_slurmctld", end)):
                recs.append({"job_id": job, "restart_count": restart, "event": event, "context": ctx, "node": "",
                             "time": EPOCH + t, "start_time": EPOCH + start, "end_time": EPOCH + end if event == "end" else None,
                             "account": "a" if job == 1 else "b", "class": "c", "gpus": {"v100": 1}, "gpu_count": 1,
                             "gpu_info": "scontrol", "submit_time": EPOCH + 500.0 if job == 1 else None})
        store.upsert_job_records(recs)
        PreemptionStore(store).add(job_id=7, account="b", gpu_type="v100", gpus=1, signal="USR1", reason="over share",
                                   grace=60, now=EPOCH + 700)
    return path


def run(*args):
    return CliRunner().invoke(main, ["report", *args])


def test_json_numbers_are_the_stores_rows(sim_store):
    r = run("--database", str(sim_store), "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    with Store(sim_store) as store:
        rounds = list(store.db["rounds"].rows_where(order_by="id"))
        details = {x["id"]: json.loads(x["details"]) for x in rounds}
        places = {x["id"]: store.placements(x["id"]) for x in rounds}
    assert rep["rounds"] == len(rounds) and rep["statuses"] == {"ok": len(rounds)}
    assert rep["first"] == rounds[0]["started"] and rep["last"] == rounds[-1]["started"]
    pol = rep["policies"]["oef-coop"]
    assert pol["rounds"] == len(rounds)
    assert pol["mean_total_throughput"] == pytest.approx(statistics.fmean(x["total_throughput"] for x in rounds))
    assert pol["mean_round_seconds"] == pytest.approx(statistics.fmean(x["finished"] - x["started"] for x in rounds))
    # per round: GPUs placed per account = the sum over types of the placement rows; fairness = the details'
    for s, x in zip(rep["timeline"], rounds):
        assert s["round"] == x["id"] and s["time"] == x["started"]
        for a in ("a", "b"):
            assert s["real"][a] == sum(p.real for p in places[x["id"]] if p.account == a)
            assert s["limit"][a] == sum(p.limit for p in places[x["id"]] if p.account == a)
        assert s["fairness"] == details[x["id"]]["fairness"]
        assert s["throughput_real"] == pytest.approx(details[x["id"]]["throughput"]["real"])
    for a in ("a", "b"):
        reals = [sum(p.real for p in places[x["id"]] if p.account == a) for x in rounds]
        assert rep["accounts"][a]["mean_real"] == pytest.approx(statistics.fmean(reals))
    real = [details[x["id"]]["fairness"]["real"] for x in rounds]
    assert rep["fairness"]["real"]["rounds_with_envy"] == sum(f["envy_pairs"] > 0 for f in real)
    assert rep["fairness"]["real"]["max_si_violations"] == max(f["si_violations"] for f in real)
    # the hand-made hook records: job 1 1200 s, job 2 from its first start to its last end 1200 s
    assert rep["jobs"]["measured"] == "start_to_end" and rep["jobs"]["count"] == 2
    assert rep["jobs"]["times"] == [1200.0, 1200.0] and pol["jobs"]["count"] == 2
    assert rep["jobs"]["by_account"]["b"]["mean_s"] == 1200.0
    # queue wait and JCT: job 1 waited 100 s and completed 1300 s after its submission; job 2 has no submit time
    assert rep["waits"]["by_account"] == {
        "a": {"v100": {"jobs": 1, "with_submit": 1, "wait_mean_s": 100.0, "wait_p50_s": 100.0, "wait_p95_s": 100.0,
                       "wait_max_s": 100.0, "jct_mean_s": 1300.0, "run_mean_s": 1200.0}},
        "b": {"v100": {"jobs": 1, "with_submit": 0, "wait_mean_s": None, "wait_p50_s": None, "wait_p95_s": None,
                       "wait_max_s": None, "jct_mean_s": None, "run_mean_s": 1200.0}}}
    assert (rep["waits"]["jobs"], rep["waits"]["with_submit"]) == (2, 1)
    assert rep["preemptions"] == {"total": 1, "by_state": {"signalled": 1}, "by_account": {"b": 1}}


def test_the_window_selects_rounds_jobs_and_preemptions(sim_store):
    iso = lambda t: datetime.datetime.fromtimestamp(EPOCH + t, tz=datetime.timezone.utc).isoformat()  # noqa: E731
    rep = json.loads(run("--database", str(sim_store), "--json", "--until", iso(600)).output)
    assert [round(s["time"] - EPOCH) for s in rep["timeline"]] == [0, 300, 600]
    assert rep["jobs"]["count"] == 0 and rep["preemptions"]["total"] == 0  # they end / happen later
    rep = json.loads(run("--database", str(sim_store), "--json", "--since", iso(650), "--until", iso(1900)).output)
    assert [round(s["time"] - EPOCH) for s in rep["timeline"]] == [900, 1200, 1500, 1800]
    assert rep["jobs"]["count"] == 1 and rep["preemptions"]["total"] == 1  # job 1 ended at 1800 s


def test_table_plots_and_empty_windows(sim_store, tmp_path):
    r = run("--database", str(sim_store), "--plot", str(tmp_path / "plots"))
    assert r.exit_code == 0, r.output
    assert "oef-coop" in r.output and "ENVY ROUNDS I/R" in r.output and "run time, first start to last end" in r.output
    # the queue wait table: one row per account and GPU type, durations with their unit
    head = next(ln for ln in r.output.splitlines() if ln.startswith("ACCOUNT  GPU TYPE"))
    assert head.split() == ["ACCOUNT", "GPU", "TYPE", "JOBS", "WITH", "SUBMIT", "WAIT", "MEAN", "WAIT", "P50", "WAIT",
                            "P95", "JCT", "MEAN"]
    rows = {ln.split()[0]: ln.split()[1:] for ln in r.output.splitlines() if ln.startswith(("a ", "b "))
            and "v100" in ln}
    assert rows["a"] == ["v100", "1", "1", "1.7m", "1.7m", "1.7m", "21.7m"] and rows["b"] == ["v100", "1", "0", "-", "-",
                                                                                          "-", "-"]
    pngs = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert pngs == ["compare.png", "fairness.png", "jct-cdf.png", "shares-oef-coop.png"]
    for p in pngs:
        data = (tmp_path / "plots" / p).read_bytes()
        assert len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"
    # the simulated rounds are in 2023: the last two hours hold none
    r = run("--database", str(sim_store), "--since", "2h")
    assert r.exit_code == 0 and r.output.startswith("no rounds between") and "nothing to report" in r.output
    r = run("--database", str(sim_store), "--since", "2h", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["rounds"] == 0
    Store(tmp_path / "empty.sqlite").close()
    r = run("--database", str(tmp_path / "empty.sqlite"))
    assert r.exit_code == 0 and r.output == "no rounds in the store: nothing to report\n"
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[daemon]\ndatabase = "{tmp_path / "none.sqlite"}"\n')
    r = run("--config", str(cfg))
    assert r.exit_code == 0 and "no store at" in r.output and not (tmp_path / "none.sqlite").exists()


@pytest.mark.parametrize("args, field", [
    (["--since", "yesterday"], "--since"),
    (["--until", "2h30"], "--until"),
    (["--since", "1h", "--until", "3h"], "--until"),
    (["--database", "/nonexistent/x.sqlite"], "--database"),
])
def test_bad_input_is_a_clear_error(args, field, sim_store):
    r = run(*(["--database", str(sim_store)] if "--database" not in args else []), *args)
    assert r.exit_code == 2 and r.output.startswith(f"error: {field}"), r.output


def test_parse_when():
    now = 1_800_000_000.0
    assert report.parse_when("--since", None, now) is None
    assert report.parse_when("--since", "90m", now) == now - 5400
    assert report.parse_when("--since", "1.5d", now) == now - 1.5 * 86400
    assert report.parse_when("--since", "2w", now) == now - 14 * 86400
    assert report.parse_when("--since", "2026-11-25T12:00:00Z", now) == datetime.datetime(
        2026, 11, 25, 12, tzinfo=datetime.timezone.utc).timestamp()
    assert report.parse_when("--since", "2026-11-25", now) == datetime.datetime(2026, 11, 25).timestamp()
    with pytest.raises(InputError, match="--until"):
        report.parse_when("--until", "soon", now)


def _counts(envy, si):
    return {"tenants": 2, "classes": 2, "compared": 2, "envy_pairs": envy, "max_envy": float(envy),
            "si_violations": si, "min_si_ratio": 1.0 - 0.1 * si}


def test_report_groups_rounds_and_jobs_by_policy():
    rounds = [
        RoundPoint(1, 0.0, 2.0, "gavel", "ok", 1.0, 10.0, None, None,
                   {"fairness": {"ideal": _counts(0, 0), "real": _counts(1, 1)}, "throughput": {"real": {"a": 4.0}}}),
        RoundPoint(2, 100.0, 104.0, "gavel", "error", None, None, None, None, {"fairness": None, "throughput": None}),
        RoundPoint(3, 200.0, 201.0, "oef-coop", "ok", 0.5, 14.0, None, None,
                   {"fairness": {"ideal": _counts(0, 0), "real": _counts(0, 2)}, "throughput": None}),
        RoundPoint(4, 300.0, 301.0, "oef-coop", "ok", 0.5, 12.0, None, None,
                   {"fairness": {"error": "ValueError: x"}, "throughput": None}),
    ]
    placements = [Placement(1, "a", g, 1.5, None, 2, 2) for g in ("k80", "v100")]
    placements += [Placement(3, "a", "k80", 0.5, None, 0, 1)]
    runs = [JobRun(1, 0, "a", "x", 10.0, None, 150.0, {}, None),  # ends under gavel (round 2 started at 100)
            JobRun(2, 0, "b", "x", 50.0, None, 250.0, {}, None),  # under oef-coop
            JobRun(3, 0, "b", "x", 60.0, None, None, {}, None)]  # still running: not counted
    rep = report.report(rounds, placements, runs, [])
    g, o = rep["policies"]["gavel"], rep["policies"]["oef-coop"]
    assert (g["rounds"], g["ok_rounds"], o["rounds"], o["ok_rounds"]) == (2, 1, 2, 2)
    assert g["mean_round_seconds"] == 3.0 and g["mean_total_throughput"] == 10.0 and o["mean_total_throughput"] == 13.0
    assert g["fairness"]["real"] == {"rounds": 1, "rounds_with_envy": 1, "max_envy_pairs": 1, "mean_envy_pairs": 1.0,
                                     "max_envy": 1.0, "rounds_with_si_violation": 1, "max_si_violations": 1,
                                     "min_si_ratio": pytest.approx(0.9)}
    assert o["fairness"]["real"]["rounds"] == 1 and o["fairness"]["errors"] == 1
    assert o["fairness"]["real"]["rounds_with_envy"] == 0 and o["fairness"]["real"]["max_si_violations"] == 2
    assert g["jobs"]["count"] == 1 and g["jobs"]["mean_s"] == 140.0 and o["jobs"]["mean_s"] == 200.0
    assert rep["jobs"]["by_policy"] == {"gavel": [140.0], "oef-coop": [200.0]}
    # account a was placed in rounds 1 and 3: 4 GPUs then 0 (ideal 3 then 0.5)
    assert rep["accounts"]["a"] == {"rounds": 2, "mean_ideal": 1.75, "mean_real": 2.0, "mean_limit": 2.5,
                                    "mean_throughput_ideal": 0.0, "mean_throughput_real": 2.0}
    assert rep["timeline"][1]["real"] == {} and rep["statuses"] == {"ok": 3, "error": 1}
