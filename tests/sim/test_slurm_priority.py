"""The simulated Slurm's priority/multifactor and node weights (sim/slurm_priority.py, simulate's priority, billing,
node_weights, past_usage): hand-made traces where fair-share orders jobs as FIFO would not, and the reverse."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slurm_fair.cli import main
from slurm_fair.errors import InputError
from slurm_fair.sim.cluster import cluster_spec, node_order
from slurm_fair.sim.engine import simulate
from slurm_fair.sim.fairshare import Multifactor
from slurm_fair.sim.jobs import Run, SimJob
from slurm_fair.sim.slurm_priority import SlurmPriority
from slurm_fair.sim.traces import Trace, TraceJob


def starts(r) -> dict[str, float]:
    return {row["id"]: row["start"] for row in r.job_rows}


def queue_trace() -> Trace:
    # one 4-GPU V100 node; a0 holds it 0..1000 s; a1 (t=10) and b1 (t=20) wait for it
    thr = {"c4": {"v100": 1.0}}
    jobs = [TraceJob("a0", 0.0, "a", "c4", 4, 1000.0), TraceJob("a1", 10.0, "a", "c4", 4, 1000.0),
            TraceJob("b1", 20.0, "b", "c4", 4, 1000.0)]
    return Trace(tuple(jobs), thr, "hand-made")


def run(tr, spec="v100=4", **kw):
    r = simulate(tr, cluster_spec(spec), "gavel", round_s=300, dry_run=True, **kw)
    assert not r.round_errors and r.finished == len(tr.jobs)
    return r


def test_fairshare_starts_the_account_without_usage_first_fifo_does_not():
    fifo = starts(run(queue_trace()))
    assert fifo["a1"] == pytest.approx(1000) and fifo["b1"] == pytest.approx(2000)  # first come first served
    # the calculation at 300 s charges a for a0: b (no usage) has Level FS inf, factor 1; a 1/2
    fair = starts(run(queue_trace(), priority="fairshare"))
    assert fair["b1"] == pytest.approx(1000) and fair["a1"] == pytest.approx(2000)
    classic = starts(run(queue_trace(), priority="fairshare-classic"))
    assert classic["b1"] == pytest.approx(1000) and classic["a1"] == pytest.approx(2000)


def test_past_usage_decides_and_factors_change_only_every_calc_period():
    # b's history outweighs a0's run: a1 goes first again
    hist = starts(run(queue_trace(), priority="fairshare", past_usage={"b": 1e6}))
    assert hist["a1"] == pytest.approx(1000) and hist["b1"] == pytest.approx(2000)
    # no calculation between 0 and 5000 s: both keep the factor of t=0 (no usage: tied), submit time decides
    slow = starts(run(queue_trace(), priority="fairshare", slurm=Multifactor(calc_period=5000.0)))
    assert slow["a1"] == pytest.approx(1000) and slow["b1"] == pytest.approx(2000)


def test_billing_by_type_reorders_what_flat_billing_does_not():
    # a0 holds the V100 (1 GPU, weight 4 by type), b0 both K80 (2 GPUs, weight 1) for 1000 s; then a1 (t=10)
    # and b1 (t=20) wait for the K80s. Flat: a used 1000 GPU-s, b 2000 -> a1 first (FIFO's order too); by type:
    # a 4000, b 2000 -> b1 first.
    thr = {"c1": {"k80": 1.0, "v100": 4.0}, "c2": {"k80": 2.0, "v100": 8.0}}
    jobs = [TraceJob("a0", 0.0, "a", "c1", 1, 4000.0, "v100"), TraceJob("b0", 0.0, "b", "c2", 2, 2000.0, "k80"),
            TraceJob("a1", 10.0, "a", "c2", 2, 2000.0, "k80"), TraceJob("b1", 20.0, "b", "c2", 2, 2000.0, "k80")]
    tr = Trace(tuple(jobs), thr, "hand-made")
    flat = starts(simulate(tr, cluster_spec("k80=2,v100=1", node_size=2), "gavel", dry_run=True,
                           priority="fairshare"))
    assert flat["a1"] == pytest.approx(1000) and flat["b1"] == pytest.approx(2000)
    typed = starts(simulate(tr, cluster_spec("k80=2,v100=1", node_size=2), "gavel", dry_run=True,
                            priority="fairshare", billing="by-type"))
    assert typed["b1"] == pytest.approx(1000) and typed["a1"] == pytest.approx(2000)
    # the same with the site's own weights: V100 3x a K80
    own = starts(simulate(tr, cluster_spec("k80=2,v100=1", node_size=2), "gavel", dry_run=True,
                          priority="fairshare", billing={"GRES/gpu:k80": 1.0, "GRES/gpu:v100": 3.0}))
    assert own["b1"] == pytest.approx(1000) and own["a1"] == pytest.approx(2000)


def test_usage_is_decayed_and_charged_per_calc_period():
    d300 = (1 - 0.693 / 3600) ** 300
    m = Multifactor(half_life=3600.0, calc_period=300.0, billing_weights={"GRES/gpu:v100": 3.0})
    sp = SlurmPriority(m, {"a": 1, "b": 1}, {"b": 1000.0}, 0.0)
    j = SimJob(1, "j", "a", "c", 2, 1.0, 0.0, None, state="RUNNING")
    j.runs.append(Run(0.0, None, "v100", {"n": 2}))
    sp.calc(300.0, [j])
    assert sp.usage["a"] == pytest.approx(300 * d300 * 6)  # 300 s x D^300 x (2 GPUs x 3)
    assert sp.usage["b"] == pytest.approx(1000 * d300)
    j.runs[0].end = 450.0  # it ended 150 s into the next period
    sp.calc(600.0, [j])
    d150 = (1 - 0.693 / 3600) ** 150
    # Slurm charges the last 150 s at the job's end, and the calculation at 600 decays it with the rest (D^300)
    assert sp.usage["a"] == pytest.approx(300 * d300 * 6 * d300 + 150 * d150 * 6 * d300)
    assert sp.factor == {"a": 0.5, "b": 1.0}  # b's 1000 decayed stays below a's usage
    sp.calc(900.0, [j])  # nothing ran: decay only
    assert sp.usage["a"] == pytest.approx((300 * d300 * 6 * d300 + 150 * d150 * 6 * d300) * d300)


def test_node_weights_place_an_untyped_job_on_the_lowest_weight_type():
    thr = {"c": {"k80": 1.0, "v100": 4.0}}
    tr = Trace((TraceJob("j", 0.0, "a", "c", 1, 400.0),), thr, "hand-made")
    types = lambda r: {row["id"]: row["types"] for row in r.job_rows}["j"]  # noqa: E731
    assert types(run(tr, "k80=4,v100=4")) == ["v100"]  # today's rule: fastest type for its class
    assert types(run(tr, "k80=4,v100=4", node_weights=["k80", "v100"])) == ["k80"]
    assert types(run(tr, "k80=4,v100=4", node_weights=["v100"])) == ["v100"]  # k80 unnamed: after


def test_bad_arguments_name_the_field():
    tr = queue_trace()
    with pytest.raises(InputError, match="node_weights"):
        run(tr, node_weights=["a100"])
    with pytest.raises(InputError, match="past_usage"):
        run(tr, priority="fairshare", past_usage={"nobody": 1.0})
    with pytest.raises(InputError, match="past_usage"):
        run(tr, past_usage={"a": 1.0})  # FIFO has no usage
    with pytest.raises(InputError, match="billing"):
        run(tr, billing="by-type")  # FIFO bills nothing
    with pytest.raises(InputError, match="priority"):
        run(tr, priority="lifo")
    with pytest.raises(InputError, match="slurm"):
        run(tr, slurm=Multifactor())  # settings of a priority FIFO does not use
    with pytest.raises(InputError, match="TRESBillingWeights"):
        run(tr, priority="fairshare", billing={"CPU": 1.0})
    assert node_order(("k80", "p100", "v100"), ["v100", "k80"]) == ("v100", "k80", "p100")
    with pytest.raises(InputError, match="twice"):
        node_order(("k80",), ["k80", "k80"])


def test_the_command_passes_the_slurm_flags_through():
    args = ["simulate", "--generate", "12", "--seed", "3", "--gen-accounts", "3", "--rate", "20", "--cluster",
            "k80=8,v100=8", "--policy", "gavel", "--dry-run", "--json"]
    out = CliRunner().invoke(main, args + ["--priority", "fairshare", "--billing", "by-type",
                                           "--node-weights", "k80,v100"])
    assert out.exit_code == 0, out.output
    from slurm_fair.sim.synthetic_trace import generate

    tr = generate(seed=3, jobs=12, accounts=3, rate=20.0, mean_duration=3600.0, capacity={"k80": 8, "v100": 8})
    want = simulate(tr, cluster_spec("k80=8,v100=8"), "gavel", dry_run=True, priority="fairshare",
                    billing="by-type", node_weights=["k80", "v100"])
    got = json.loads(out.stdout)["policies"]["gavel"]
    assert got["mean_jct"] == pytest.approx(want.mean_jct) and got["makespan"] == pytest.approx(want.makespan)
    bad = CliRunner().invoke(main, args + ["--node-weights", "k80,a100"])
    assert bad.exit_code == 2 and "--node-weights" in bad.output and "a100" in bad.output
    bad = CliRunner().invoke(main, args + ["--billing", "by-type"])
    assert bad.exit_code == 2 and "--billing" in bad.output
    hist = CliRunner().invoke(main, args + ["--priority", "fairshare", "--past-usage", "acct-000=36000"])
    assert hist.exit_code == 0, hist.output
    want = simulate(tr, cluster_spec("k80=8,v100=8"), "gavel", dry_run=True, priority="fairshare",
                    past_usage={"acct-000": 36000.0})
    assert json.loads(hist.stdout)["policies"]["gavel"]["mean_jct"] == pytest.approx(want.mean_jct)
    for flags, word in ((["--priority", "fairshare", "--past-usage", "nobody=5"], "nobody"),
                        (["--priority", "fairshare", "--past-usage", "acct-000=-1"], "acct-000=-1"),
                        (["--past-usage", "acct-000=1"], "")):
        bad = CliRunner().invoke(main, args + flags)
        assert bad.exit_code == 2 and "--past-usage" in bad.output and word in bad.output
