"""[profiling] measured_speeds (issue 22): a class with measurements gets its speeds from measurements only, so a
tenant cannot sandbag its fast GPU types by reporting a high value on a type its jobs never ran on (speeds are
normalized to the slowest type; non-cooperative OEF rewards sandbagging: tests/fairness/test_fairness_check.py)."""

from __future__ import annotations

from slurm_fair import config
from slurm_fair.daemon import bounded
from slurm_fair.daemon.plan.problem import lookup_throughput
from slurm_fair.profiling.core import find_conflicts
from slurm_fair.profiling.trust import effective_values, measured_only
from slurm_fair.store import ProfileValue, Store


def row(account, cls, g, source, v):
    return ProfileValue(account, cls, g, v, samples=1, source=source, updated=0.0, rejected=0)


SHIPPED = [{"account": "", "class": "cnn", "gpu_type": "k80", "throughput": 1.0},
           {"account": "", "class": "cnn", "gpu_type": "v100", "throughput": 4.0}]
# acct's cnn jobs ran on v100 only (measured 4 steps/s there); acct reports 2 on k80, twice the shipped 1:
# its v100 speedup would read 4 / 2 = 2 instead of 4 (sandbagging the v100)
SANDBAG = [row("acct", "cnn", "v100", "harvested", 4.0), row("acct", "cnn", "k80", "set", 2.0)]


def _speeds(values, measured_speeds):
    rows, _ = effective_values(values, 0.25, "flag", False, measured_speeds)
    thr, src = lookup_throughput(rows, SHIPPED, "acct", "cnn", ["k80", "v100"])
    return {g: thr[g] / min(thr.values()) for g in thr}, src


def test_a_reported_value_on_a_type_never_run_on_cannot_sandbag_the_measured_ones():
    # no conflict can show: no type has both a reported and a measured value
    assert find_conflicts(SANDBAG, 0.25) == []
    speeds, src = _speeds(SANDBAG, measured_speeds=False)
    assert speeds == {"k80": 1.0, "v100": 2.0}  # the old rule: the reported k80 wins, v100 reads 2x
    speeds, src = _speeds(SANDBAG, measured_speeds=True)
    assert speeds == {"k80": 1.0, "v100": 4.0}  # measured v100 (4) over the shipped k80 prior (1)
    assert src["k80"] == "shipped" and src["v100"] == "account"


def test_measured_values_win_on_every_type_and_a_profiling_run_counts_too():
    values = [row("acct", "cnn", "k80", "measured", 1.1), row("acct", "cnn", "v100", "set", 3.0),
              row("acct", "cnn", "v100", "harvested", 4.2), row("acct", "cnn", "k80", "imported", 5.0)]
    kept, dropped = measured_only(values)
    assert {(r.gpu_type, r.source) for r in dropped} == {("v100", "set"), ("k80", "imported")}
    used = {r.gpu_type: (r.source, r.throughput) for r in effective_values(values, 0.25, "flag", False, True)[0]}
    assert used == {"k80": ("measured", 1.1), "v100": ("harvested", 4.2)}


def test_a_class_without_measurements_and_site_wide_values_keep_their_reported_values():
    values = [row("acct", "rnn", "k80", "set", 1.0), row("acct", "rnn", "v100", "set", 3.0),  # nothing measured
              row("", "cnn", "k80", "set", 0.9),  # the site's own value for cnn: not a tenant's
              row("acct", "cnn", "v100", "harvested", 4.0), row("other", "cnn", "k80", "set", 2.0)]
    used = {(r.account, r.cls, r.gpu_type): r.source
            for r in effective_values(values, 0.25, "flag", False, True)[0]}
    assert used[("acct", "rnn", "k80")] == "set" and used[("acct", "rnn", "v100")] == "set"
    assert used[("", "cnn", "k80")] == "set"
    assert used[("other", "cnn", "k80")] == "set"  # other has no measurement of cnn: its report stands
    assert ("acct", "cnn", "k80") not in used


def test_the_rounds_use_measured_speeds_by_default_and_the_key_turns_it_off():
    s = Store(":memory:")
    for r in SANDBAG:
        s.set_profile(r.cls, r.gpu_type, r.throughput, account=r.account, source=r.source)
    assert config.from_dict({}).profiling.measured_speeds is True
    on = {(r.account, r.gpu_type): r.source for r in bounded.round_profiles(s, config.from_dict({}))}
    off = {(r.account, r.gpu_type): r.source
           for r in bounded.round_profiles(s, config.from_dict({"profiling": {"measured_speeds": False}}))}
    assert on == {("acct", "v100"): "harvested"}
    assert off == {("acct", "v100"): "harvested", ("acct", "k80"): "set"}
