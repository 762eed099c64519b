"""simulate(): the daemon's round code on the simulated cluster, end to end — every job finishes, metrics
agree with the jobs, policies differ where they should — and the `slurm-fair simulate` command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_fair.cli import main
from slurm_fair.errors import InputError
from slurm_fair.sim.cluster import cluster_spec
from slurm_fair.sim.engine import EPOCH, simulate
from slurm_fair.sim.csv_trace import write_csv
from slurm_fair.sim.synthetic_trace import generate
from slurm_fair.sim.traces import Trace, TraceJob
from slurm_fair.store import Store

GAVEL = Path("/work/shared/data/gavel")
THR = {"fast": {"k80": 1.0, "v100": 10.0}, "flat": {"k80": 1.0, "v100": 1.25}}


def two_tenants() -> Trace:
    # a's jobs gain 10x on a V100, b's 1.25x; 4 K80 + 4 V100; every job 1 GPU and 18000 steps (a: 30 min on a
    # V100, 5 h on a K80; b: 4 h on a V100, 5 h on a K80), one of each at 0 s, then one every 300 s for 2 hours
    jobs = [TraceJob(f"{a}{i}", 300.0 * i, a, cls, 1, 18000.0) for i in range(24) for a, cls in (("a", "fast"), ("b", "flat"))]
    return Trace(tuple(jobs), THR, "hand-made")


def test_every_job_finishes_and_the_metrics_add_up():
    r = simulate(two_tenants(), cluster_spec("k80=4,v100=4"), "oef-coop", round_s=300)
    assert r.finished == r.jobs == 48 and not r.round_errors
    jct = [row["jct"] for row in r.job_rows]
    assert r.mean_jct == pytest.approx(sum(jct) / 48) and r.makespan == pytest.approx(max(row["end"] for row in r.job_rows))
    # the normalized throughput integrates GPU-seconds x speed: recompute it from the job rows
    speed = {"fast": {"k80": 1.0, "v100": 10.0}, "flat": {"k80": 1.0, "v100": 1.25}}
    total = sum((row["end"] - row["start"]) * speed[row["class"]][row["types"][0]] for row in r.job_rows)
    assert r.total_throughput == pytest.approx(total / r.makespan)  # no requeue here: one run per job
    assert 0 < r.utilization <= 1 and r.max_rho >= r.mean_rho > 0


def test_cooperative_oef_gives_the_v100s_to_the_jobs_that_gain_most():
    r = simulate(two_tenants(), cluster_spec("k80=4,v100=4"), "oef-coop", round_s=300)
    on = {row["id"]: row["types"] for row in r.job_rows}
    # the daemon's limits and job_submit typing send a's jobs to the V100s; b gets V100s only while a has
    # nothing waiting for them (work conservation, and a capped class moves to idle faster GPUs), so an a job
    # that arrives while b holds them may have to take a K80 (no preemption here)
    assert sum(on[f"a{i}"] == ["v100"] for i in range(24)) >= 22
    eq = simulate(two_tenants(), cluster_spec("k80=4,v100=4"), "equal-share", round_s=300)
    assert r.total_throughput > eq.total_throughput and r.mean_jct < eq.mean_jct


def test_preemption_requeues_over_share_jobs():
    # b floods every GPU first; a arrives later: with preemption on, b's jobs are checkpointed and requeued
    jobs = [TraceJob(f"b{i}", 0.0, "b", "flat", 1, 36000.0) for i in range(8)]
    jobs += [TraceJob(f"a{i}", 600.0, "a", "fast", 1, 3600.0) for i in range(4)]
    tr = Trace(tuple(jobs), THR, "flood")
    on = simulate(tr, cluster_spec("k80=4,v100=4"), "oef-coop", round_s=300, preemption=True, restart_s=60)
    off = simulate(tr, cluster_spec("k80=4,v100=4"), "oef-coop", round_s=300, preemption=False)
    assert on.preemptions > 0 and off.preemptions == 0
    mean_a = {k: sum(row["jct"] for row in r.job_rows if row["account"] == "a") / 4 for k, r in (("on", on), ("off", off))}
    assert mean_a["on"] < mean_a["off"]


def test_generated_trace_under_several_policies_and_the_horizon():
    tr = generate(seed=3, jobs=40, accounts=3, rate=60.0, mean_duration=1800.0)
    nodes = cluster_spec("k80=8,p100=8,v100=8")
    for p in ("gavel", "bud", "hadar"):
        r = simulate(tr, nodes, p, round_s=300)
        assert r.finished == 40 and not r.round_errors, (p, r.round_errors)
    short = simulate(tr, nodes, "gavel", round_s=300, horizon=1800)
    assert short.finished < 40 and short.sim_seconds <= 1800 + 300


def test_simulate_command_json_csv_and_plots(tmp_path):
    tr = generate(seed=1, jobs=25, accounts=2, rate=60.0, mean_duration=1200.0)
    write_csv(tr, tmp_path / "t.csv", tmp_path / "p.csv")
    r = CliRunner().invoke(main, ["simulate", "--trace", str(tmp_path / "t.csv"), "--profiles", str(tmp_path / "p.csv"),
                                  "--cluster", "k80=8,v100=8", "--compare", "gavel,oef-noncoop", "--json",
                                  "--plot", str(tmp_path / "plots"), "--jobs-csv", str(tmp_path / "jobs.csv")])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert set(out["policies"]) == {"gavel", "oef-noncoop"}
    for s in out["policies"].values():
        assert {"total_throughput", "mean_jct", "p95_jct", "makespan", "max_rho"} <= set(s) and s["finished"] == 25
        assert s["fairness"]["real"]["rounds"] == s["rounds"] and s["fairness"]["errors"] == 0
    pngs = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert pngs == ["compare.png", "fairness.png", "jct-cdf.png", "shares-gavel.png", "shares-oef-noncoop.png"]
    assert all((tmp_path / "plots" / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)
    assert len((tmp_path / "jobs.csv").read_text().splitlines()) == 1 + 2 * 25
    table = CliRunner().invoke(main, ["simulate", "--generate", "15", "--cluster", "v100=8", "--policy", "gavel"])
    assert table.exit_code == 0 and "gavel" in table.output and "mean JCT s" in table.output
    assert "envy rounds i/r" in table.output


@pytest.mark.skipif(not GAVEL.exists(), reason="the shared Gavel data is not on this machine")
def test_simulate_a_gavel_trace():
    r = CliRunner().invoke(main, ["simulate", "--trace", str(GAVEL / "traces" / "795a4c.trace"), "--throughputs",
                                  str(GAVEL / "physical_cluster_throughputs.json"), "--cluster", "k80=4,p100=4,v100=4",
                                  "--policy", "oef-coop", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["policies"]["oef-coop"]["finished"] == 3


def test_a_job_that_can_never_fit_is_refused():
    tr = Trace((TraceJob("big", 0.0, "a", "fast-x8", 8, 10.0),), {"fast-x8": {"k80": 8.0, "v100": 80.0}}, "big")
    with pytest.raises(InputError, match="asks for 8 GPU"):
        simulate(tr, cluster_spec("k80=4,v100=4"), "gavel")


@pytest.mark.parametrize("args, field", [
    (["--generate", "5", "--cluster", "v100=0"], "--cluster"),
    (["--generate", "5", "--cluster", "v100=4", "--policy", "drf"], "policy"),
    (["--cluster", "v100=4"], "--trace"),
    (["--trace", "x.trace", "--cluster", "v100=4"], "--throughputs"),
    (["--trace", "x.csv", "--cluster", "v100=4"], "--profiles"),
    (["--generate", "5", "--cluster", "a100=4"], "capacity"),  # no shipped class runs on a100
])
def test_simulate_bad_input_is_a_clear_error(args, field):
    r = CliRunner().invoke(main, ["simulate", *args])
    assert r.exit_code == 2 and r.output.startswith(f"error: {field}"), r.output
    assert "Traceback" not in r.output


def test_fairness_per_round_is_recorded_and_matches_a_recomputation_from_the_store(tmp_path):
    # three accounts, one class each, each far more jobs than GPUs (no demand or type cap binds): a GPU of a
    # type is worth the class's speed there, so envy and shares can be recomputed by hand from the store
    thr = {"fast": {"k80": 1.0, "v100": 10.0}, "flat": {"k80": 1.0, "v100": 1.25}, "mid": {"k80": 1.0, "v100": 3.0}}
    jobs = [TraceJob(f"{a}{i}", 0.0, a, c, 1, 1e6) for i in range(20) for a, c in (("a", "fast"), ("b", "flat"), ("c", "mid"))]
    path = tmp_path / "sim.sqlite"
    r = simulate(Trace(tuple(jobs), thr, "fair"), cluster_spec("k80=4,v100=4"), "gavel", round_s=300, horizon=1800,
                 accounts={"a": 1, "b": 2, "c": 1}, store_path=path)
    assert len(r.timeline) == r.rounds == 7 and all(s["fairness"] for s in r.timeline)
    speed = {c: {g: v / min(row.values()) for g, v in row.items()} for c, row in thr.items()}
    cls = {"a": "fast", "b": "flat", "c": "mid"}
    w = {"a": 1.0, "b": 2.0, "c": 1.0}
    cap = {"k80": 4, "v100": 4}
    with Store(path) as store:
        for s in r.timeline:
            f = s["fairness"]
            assert f["ideal"]["compared"] == f["ideal"]["tenants"] == 3  # nobody at a cap: the hand values hold
            rows = {"ideal": {}, "real": {}}
            for p in store.placements(s["round"]):
                rows["ideal"].setdefault(p.account, {})[p.gpu_type] = p.ideal
                rows["real"].setdefault(p.account, {})[p.gpu_type] = p.real
            for side in ("ideal", "real"):
                x = rows[side]
                val = {(a, b): sum(speed[cls[a]][g] * x[b][g] for g in cap) * w[a] / w[b] for a in x for b in x}
                envy = [(a, b) for a in x for b in x if a != b and val[a, b] - val[a, a] > 1e-6 * max(1, val[a, b])]
                base = {a: sum(speed[cls[a]][g] * cap[g] for g in cap) * w[a] / sum(w.values()) for a in x}
                short = [a for a in x if base[a] - val[a, a] > 1e-6 * max(1, base[a])]
                assert f[side]["envy_pairs"] == len(envy), (s["round"], side)
                assert f[side]["max_envy"] == pytest.approx(max((val[a, b] - val[a, a] for a, b in envy), default=0.0))
                assert f[side]["si_violations"] == len(short)
                assert f[side]["min_si_ratio"] == pytest.approx(min(val[a, a] / base[a] for a in x))
    # gavel's placed GPUs are envied in some round here; the summary counts those rounds
    real = [s["fairness"]["real"] for s in r.timeline]
    assert r.fairness["real"]["rounds"] == 7
    assert r.fairness["real"]["rounds_with_envy"] == sum(c["envy_pairs"] > 0 for c in real)
    assert r.fairness["real"]["max_envy_pairs"] == max(c["envy_pairs"] for c in real)
    assert r.fairness["real"]["rounds_with_si_violation"] == sum(c["si_violations"] > 0 for c in real)
    with Store(path) as store:
        rows = store.round_series()
        # rounds are recorded on the simulated clock, so the deficits accumulate over the simulated time between
        # rounds (on the wall clock they saw 0 s between rounds: SiteFactor ranked accounts by name)
        assert [x.started - EPOCH for x in rows] == pytest.approx([s["time"] for s in r.timeline])
        assert all(x.finished >= x.started for x in rows)
        assert [store.round(x.id).details["dt"] for x in rows[1:]] == pytest.approx([300.0] * 6)
    with pytest.raises(InputError, match="store_path"):
        simulate(Trace(tuple(jobs), thr, "fair"), cluster_spec("k80=4,v100=4"), "gavel", store_path=path)


def test_a_small_simulation_matches_numbers_computed_by_hand():
    # one account, 2 K80 + 2 V100 (nodes of 2), three 1-GPU jobs of 36 000 steps at t=0; the class runs 1 step/s
    # on a K80 and 10 on a V100. Slurm starts all three at once, fastest free type first: two on the V100s
    # (3 600 s each), the third on a K80 (36 000 s; no preemption, so it stays there).
    jobs = tuple(TraceJob(f"j{i}", 0.0, "a", "fast", 1, 36000.0) for i in range(3))
    r = simulate(Trace(jobs, {"fast": {"k80": 1.0, "v100": 10.0}}, "by hand"), cluster_spec("k80=2,v100=2", node_size=2),
                 "oef-coop", round_s=300)
    assert r.finished == 3 and not r.round_errors and r.preemptions == 0
    assert sorted(row["jct"] for row in r.job_rows) == pytest.approx([3600.0, 3600.0, 36000.0])
    assert r.mean_jct == pytest.approx(14400.0) and r.median_jct == pytest.approx(3600.0)
    assert r.makespan == pytest.approx(36000.0)
    # normalized throughput: (3600 s x 10 + 3600 s x 10 + 36000 s x 1) / 36000 s = 3 K80-equivalents
    assert r.total_throughput == pytest.approx(3.0)
    # utilization: (3600 + 3600 + 36000) GPU-s / (4 GPUs x 36000 s) = 0.3
    assert r.utilization == pytest.approx(0.3)
    # finish-time fairness: T_isolated = 3600 s (best type), one account in the system: rho = 1, 1, 10
    assert r.max_rho == pytest.approx(10.0) and r.mean_rho == pytest.approx(4.0)


def test_a_newcomers_first_try_works_the_generator_draws_sizes_that_fit():
    """`simulate --generate 60 --cluster k80=4,v100=4` (the README's first try) used to end in a traceback: the
    generator drew 8-GPU jobs for a cluster with 4 of a type."""
    r = CliRunner().invoke(main, ["simulate", "--generate", "60", "--cluster", "k80=4,v100=4", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["policies"]["oef-coop"]["finished"] == 60
    cap = {"k80": 4, "v100": 2}
    small = generate(seed=0, jobs=400, accounts=3, rate=30.0, mean_duration=600.0, capacity=cap)
    assert {j.gpus for j in small.jobs} == {1, 2, 4}
    for j in small.jobs:  # every job fits a type its class runs on
        assert max((cap.get(t, 0) for t, v in small.throughput[j.cls].items() if v > 0), default=0) >= j.gpus
    roomy = generate(seed=0, jobs=400, accounts=3, rate=30.0, mean_duration=600.0,
                     capacity={"k80": 8, "p100": 8, "v100": 8})
    plain = generate(seed=0, jobs=400, accounts=3, rate=30.0, mean_duration=600.0)
    assert roomy.jobs == plain.jobs  # every draw fits: the same trace


def test_a_trace_job_that_can_never_fit_exits_2_with_the_error(tmp_path):
    trace, profiles = tmp_path / "t.csv", tmp_path / "p.csv"
    trace.write_text("submit_time,account,class,gpus,work\n0,a,big,1,100\n10,a,big,8,100\n")
    profiles.write_text("class,gpu_type,throughput\nbig,v100,1.0\n")
    r = CliRunner().invoke(main, ["simulate", "--trace", str(trace), "--profiles", str(profiles),
                                  "--cluster", "k80=4,v100=4"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert r.output.startswith("error: trace: asks for 8 GPU(s) of one type; the cluster has at most 4"), r.output


def test_rounds_with_moves_are_skipped_only_while_no_job_could_move():
    """With upgrade moves and nothing pending, a round can move a job only onto idle GPUs of a type faster for
    its class; while there are none, the engine skips to the next event (a Philly window ran every 300-s round
    through 700 simulated hours)."""
    from slurm_fair.sim.cluster import SimCluster, cluster_spec
    from slurm_fair.sim.engine import _could_move
    from slurm_fair.sim.traces import TraceJob

    thr = {"cnn": {"k80": 1.0, "v100": 4.0}, "rl": {"k80": 1.0}}
    jobs = [TraceJob("1", 0.0, "a", "cnn", 2, 1e9, "k80"), TraceJob("2", 0.0, "a", "cnn", 4, 1e9, "v100")]
    c = SimCluster(cluster_spec("k80=4,v100=4"), {"a": 1}, thr, jobs)
    c.advance(1.0)
    assert not _could_move(c)  # the V100s are all busy: job 1 has nowhere faster to go
    c.jobs[2].time_limit = None
    c.requeue_job(2)  # V100s idle (job 2 waits for its restart): job 1 could move there
    assert _could_move(c)
    only_k80 = SimCluster(cluster_spec("k80=4,v100=4"), {"a": 1}, thr, [TraceJob("1", 0.0, "a", "rl", 1, 1e9)])
    only_k80.advance(1.0)
    assert only_k80.jobs[1].state == "RUNNING" and not _could_move(only_k80)  # its class runs on K80 only
