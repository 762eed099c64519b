"""The pure profiling core (hand-computed numbers), the report token, migration 6 and record_sample."""

from __future__ import annotations

import dataclasses

import sqlite_utils
import pytest

from slurm_fair.errors import InputError
from slurm_fair.profiling import client
from slurm_fair.profiling.core import Rules, check_sample, choose, effective, find_conflicts, flags, sample, update
from slurm_fair.store import ProfileValue, Store, migrate

R = Rules(min_throughput=0.01, max_throughput=1000.0, outlier_factor=3.0, outlier_after=3, average_weight=0.25,
          stale_after=100.0, conflict_margin=0.25, prefer_measured=False)


@pytest.mark.parametrize("value, problem", [
    (float("nan"), "finite"), (float("inf"), "finite"), ("fast", "finite"), ("", "empty"), (None, "empty"),
    (0, "> 0"), (-1.5, "> 0"), (0.001, "min_throughput"), (5000, "max_throughput"), (True, "finite"),
])
def test_check_sample_refuses_and_names_class_type_value(value, problem):
    with pytest.raises(InputError) as e:
        check_sample("cnn", "v100", value, R, known_types=["v100", "k80"])
    assert "'cnn'" in e.value.field and "'v100'" in e.value.field and problem in e.value.problem
    assert e.value.value == value or value != value  # NaN is not equal to itself


def test_check_sample_unknown_or_missing_type_and_text_numbers():
    with pytest.raises(InputError, match="unknown GPU type 'h100'"):
        check_sample("cnn", "h100", 2.0, R, known_types=["v100", "k80"])
    with pytest.raises(InputError, match="no GPU type"):
        check_sample("cnn", None, 2.0, R)
    assert check_sample("cnn", "k80", "12.5", R, known_types=["k80"]) == 12.5


def stored(fields):
    """The value the store holds after a sample stored ``fields``."""
    return ProfileValue("acct_a", "cnn", "v100", source="harvested", **fields)


def test_update_mean_then_moving_average_then_outliers():
    row, ok = update(None, 10.0, 1.0, R)
    assert ok and row == {"throughput": 10.0, "samples": 1, "rejected": 0, "updated": 1.0}
    row, ok = update(stored(row), 20.0, 2.0, R)  # weight max(0.25, 1/2) = 0.5: 15
    assert ok and row["throughput"] == 15.0 and row["samples"] == 2
    row, ok = update(stored(row), 30.0, 3.0, R)  # weight max(0.25, 1/3): 15 + 15/3 = 20
    assert ok and row["throughput"] == pytest.approx(20.0) and row["samples"] == 3
    row, ok = update(stored(row), 61.0, 4.0, R)  # 3 samples: 61 > 3 * 20 -> rejected, counted, nothing else changes
    assert not ok and row == {"throughput": pytest.approx(20.0), "samples": 3, "rejected": 1, "updated": 3.0}
    row, ok = update(stored(row), 6.0, 5.0, R)  # 6 < 20 / 3 -> rejected too
    assert not ok and row["rejected"] == 2
    row, ok = update(stored(row), 28.0, 6.0, R)  # weight max(0.25, 1/4) = 0.25: 20 + 8/4 = 22
    assert ok and row["throughput"] == pytest.approx(22.0) and row["samples"] == 4 and row["rejected"] == 2
    row, ok = update(stored(row), 32.0, 7.0, R)  # weight max(0.25, 1/5) = 0.25: 22 + 10/4 = 24.5
    assert ok and row["throughput"] == pytest.approx(24.5)


def test_flags_stale_and_single_only_for_measured_values():
    m = ProfileValue("acct_a", "cnn", "v100", 1.0, source="harvested", samples=1, updated=0.0)
    assert flags(m, 50.0, R) == {"stale": False, "single": True}
    assert flags(dataclasses.replace(m, samples=2), 101.0, R) == {"stale": True, "single": False}
    assert flags(dataclasses.replace(m, source="set"), 1e9, R) == {"stale": False, "single": False}


def row(source, thr, g="v100", account="acct_a", cls="cnn", updated=0.0, samples=1):
    return ProfileValue(account, cls, g, thr, samples=samples, source=source, updated=updated)


def test_choose_reported_wins_measured_fills_gaps_or_wins_when_preferred():
    rs = [row("imported", 5.0, updated=1), row("set", 6.0, updated=2), row("harvested", 9.0),
          row("measured", 8.0), row("shipped", 1.0)]
    assert choose(rs).throughput == 6.0  # newest reported
    assert choose(rs, prefer_measured=True).throughput == 8.0  # measured before harvested
    assert choose([row("harvested", 9.0), row("shipped", 1.0)]).source == "harvested"
    assert choose([row("shipped", 1.0)]).source == "shipped"
    eff = effective([row("set", 6.0), row("measured", 2.0, g="k80")])
    assert [(r.gpu_type, r.source) for r in eff] == [("k80", "measured"), ("v100", "set")]


def test_find_conflicts_compares_speedups_not_units():
    # honest tenant reporting in samples/s (x32): same speedups, no conflict
    honest = [row("set", 320.0, "v100"), row("set", 32.0, "k80"),
              row("measured", 10.0, "v100", samples=4), row("measured", 1.0, "k80", samples=3)]
    assert find_conflicts(honest, 0.25) == []
    # claims a 3x speedup on v100 where its jobs measured 1.5x (k80 is the measured slowest: reference)
    liar = [row("set", 3.0, "v100", account="acct_b"), row("set", 1.0, "k80", account="acct_b"),
            row("harvested", 1.5, "v100", account="acct_b", samples=5), row("harvested", 1.0, "k80", account="acct_b")]
    (c,) = find_conflicts(honest + liar, 0.25)
    assert (c["account"], c["class"], c["gpu_type"], c["reference"]) == ("acct_b", "cnn", "v100", "k80")
    assert (c["reported"], c["measured"], c["reported_speedup"], c["measured_speedup"], c["ratio"], c["samples"]) == (
        3.0, 1.5, 3.0, 1.5, 2.0, 5)
    # 1.2x vs 1.0x is within a 25% margin; understating (0.5x) beyond it is flagged too
    near = [row("set", 1.2, "v100"), row("set", 1.0, "k80"), row("measured", 1.0, "v100"), row("measured", 1.0, "k80")]
    assert find_conflicts(near, 0.25) == []
    under = [row("set", 0.5, "v100"), row("set", 1.0, "k80"), row("measured", 1.0, "v100"), row("measured", 1.0, "k80")]
    assert [c["ratio"] for c in find_conflicts(under, 0.25)] == [0.5]
    # one common type: nothing to compare; site-wide ("") reported values are not a tenant's report
    assert find_conflicts([row("set", 9.0), row("measured", 1.0)], 0.25) == []
    assert find_conflicts([dataclasses.replace(r, account="") for r in liar], 0.25) == []


def test_token_round_trip_keeps_other_tokens():
    c = client.with_tokens("class=cnn fair:flex note", [client.format_token(12.5, 1)])
    assert c == "class=cnn fair:flex note fair:tput=12.5@1"
    c = client.with_tokens(c + " fair:gpu=Tesla_K80", [client.format_token(0.000123456789, 2)])
    assert c == "class=cnn fair:flex note fair:gpu=Tesla_K80 fair:tput=0.000123457@2"
    assert client.parse_tokens(c) == {"tput": "0.000123457", "n": "2", "gpu": "Tesla K80"}
    assert client.parse_tokens("fair:profile,class=x;fair:tput=bad@x") == {"profile": "", "tput": "bad", "n": "x"}


@pytest.mark.parametrize("kw", [dict(steps=10), dict(seconds=2), dict(steps=10, seconds=0),
                                dict(steps=float("nan"), seconds=1), dict(throughput=-1),
                                dict(throughput=2, steps=1, seconds=1)])
def test_client_refuses_bad_numbers_before_any_slurm_call(kw):
    with pytest.raises(client.ReportError):
        client.throughput_of(**kw)


def test_report_outside_a_job_says_so(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(client.ReportError, match="SLURM_JOB_ID"):
        client.report(steps=10, seconds=2)


def test_migration_6_maps_old_sources_and_keeps_values(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite_utils.Database(path)
    migrate(db, upto=5)
    db["profiles"].insert_all([
        {"account": "", "class": "a", "gpu_type": "v100", "throughput": 2.0, "samples": 1, "source": "manual", "updated": 1.0},
        {"account": "", "class": "b", "gpu_type": "v100", "throughput": 3.0, "samples": 1, "source": "import:/x/p.csv", "updated": 1.0},
        {"account": "", "class": "c", "gpu_type": "k80", "throughput": 4.0, "samples": 1, "source": "gavel", "updated": 1.0},
        {"account": "x", "class": "d", "gpu_type": "k80", "throughput": 5.0, "samples": 2, "source": "measured", "updated": 1.0},
    ])
    db.close()
    with Store(path) as s:
        assert s.version >= 6
        got = [(r.cls, r.throughput, r.source, r.detail, r.rejected) for r in s.profile_values()]
        assert got == [("a", 2.0, "set", None, 0), ("b", 3.0, "imported", "/x/p.csv", 0),
                       ("c", 4.0, "shipped", None, 0), ("d", 5.0, "measured", None, 0)]


def test_record_sample_averages_rejects_and_keeps_reported_value():
    s = Store(":memory:")
    s.set_profile("cnn", "v100", 100.0, account="acct_a")
    for v, now in ((10.0, 1), (20.0, 2), (30.0, 3)):
        s.record_sample("acct_a", "cnn", "v100", "harvested", sample(v, now, R), now=now)
    r, ok = s.record_sample("acct_a", "cnn", "v100", "harvested", sample(500.0, 4, R), now=4)
    assert not ok and r.rejected == 1 and r.throughput == pytest.approx(20.0) and r.samples == 3
    vals = {r.source: r for r in s.profile_values()}
    assert vals["set"].throughput == 100.0 and vals["harvested"].updated == 3.0
    with pytest.raises(InputError):
        s.record_sample("acct_a", "cnn", "v100", "set", sample(1.0, 0.0, R))
    s.record_report({"job_id": 7, "n": 1, "time": 1.0, "status": "accepted"})
    s.record_report({"job_id": 7, "n": 1, "time": 2.0, "status": "refused"})  # ignored: taken once
    assert s.report_taken(7, 1) and not s.report_taken(7, 2)
    assert [r.status for r in s.profile_reports()] == ["accepted"]
