"""The simulator's trace layer: Gavel traces, CSV traces, the generator, and every bad input as an InputError."""

from __future__ import annotations

import ast
import json
import math
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_fair.profiling import shipped as profiles
from slurm_fair.errors import InputError
from slurm_fair.sim import csv_trace, gavel_trace, synthetic_trace
from slurm_fair.sim import traces as T
from slurm_fair.sim.traces import Trace, TraceJob

GAVEL = Path("/work/shared/data/gavel")
GAVEL_JSON = GAVEL / "physical_cluster_throughputs.json"
needs_gavel = pytest.mark.skipif(not GAVEL_JSON.exists(), reason=f"Gavel data not present under {GAVEL}")


def _gavel_nulls() -> dict[tuple[str, int], dict[str, float]]:
    """(job type, scale factor) -> {gpu: isolated steps/s} straight from the JSON (independent of the package)."""
    data = json.loads(GAVEL_JSON.read_text())
    out: dict[tuple[str, int], dict[str, float]] = {}
    for gpu in ("k80", "p100", "v100"):
        for key, entry in data[gpu].items():
            out.setdefault(ast.literal_eval(key), {})[gpu] = entry["null"]
    return out


def _lines(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text().splitlines()]


# ------------------------------------------------------------------------------------------ Gavel, real files


@needs_gavel
def test_gavel_file_accounts_per_file():
    path = GAVEL / "traces" / "ed69ec.trace"
    lines = _lines(path)
    trace = gavel_trace.read_gavel(path, GAVEL_JSON)
    assert len(trace.jobs) == len(lines) == 951
    assert trace.accounts() == ("acct-ed69ec",)
    assert [j.submit for j in trace.jobs] == sorted(float(c[5]) for c in lines)
    job_type, _, _, _, steps, arrival, scale = lines[0]
    first = next(j for j in trace.jobs if j.id == "ed69ec-1")
    slowest = float(steps) / min(trace.throughput["transformer-bs128"].values())  # seconds on its slowest type
    limit = math.ceil(slowest / 3600) * 3600.0
    assert first == TraceJob("ed69ec-1", float(arrival), "acct-ed69ec", "transformer-bs128", int(scale), float(steps),
                             None, limit)
    assert all(j.time_limit >= j.work / min(trace.throughput[j.cls].values()) and j.time_limit % 3600 == 0
               for j in trace.jobs)
    assert profiles.class_name(job_type) == "transformer-bs128"
    nulls = _gavel_nulls()
    assert dict(trace.throughput["transformer-bs128"]) == nulls[(job_type, 1)]
    for c in lines:  # every job's class carries the JSON's throughputs of its job type
        assert dict(trace.throughput[profiles.class_name(c[0])]) == {g: v for g, v in nulls[(c[0], 1)].items() if v > 0}
    assert trace.classes() == tuple(sorted({profiles.class_name(c[0]) for c in lines}))
    assert trace.gpu_types() == ("k80", "p100", "v100")
    assert nulls[("ResNet-50 (batch size 128)", 1)]["k80"] == 0  # does not fit on a K80: left out, not 0
    assert set(trace.throughput["resnet50-bs128"]) == {"p100", "v100"}


@needs_gavel
def test_gavel_files_accounts_per_job():
    paths = [GAVEL / "traces" / "ed69ec.trace", GAVEL / "traces" / "795a4c.trace"]
    by_file = gavel_trace.read_gavel(paths, GAVEL_JSON)
    by_job = gavel_trace.read_gavel(paths, GAVEL_JSON, accounts="job")
    n = sum(len(_lines(p)) for p in paths)
    assert len(by_job.jobs) == len(by_file.jobs) == n
    assert by_file.accounts() == ("acct-795a4c", "acct-ed69ec")
    assert [j.account for j in by_job.jobs] == [f"job-{k}" for k in range(1, n + 1)]
    assert [replace(j, account="") for j in by_job.jobs] == [replace(j, account="") for j in by_file.jobs]
    assert by_job.throughput == by_file.throughput
    # both files start at 0.0: the tie is broken by the job id
    assert [j.id for j in by_job.jobs[:2]] == ["795a4c-1", "ed69ec-1"]


@needs_gavel
def test_gavel_scale_factors_name_classes_and_use_measured_throughputs(tmp_path):
    nulls = _gavel_nulls()
    measured = {k for k, by in nulls.items() if any(v > 0 for v in by.values())}
    src = GAVEL / "traces" / "0e4a51.trace"
    multi = [c for c in _lines(src) if int(c[6]) > 1 and (c[0], int(c[6])) in measured]
    assert {int(c[6]) for c in multi} == {2, 4, 8}
    path = tmp_path / "multi.trace"
    path.write_text("".join("\t".join(c) + "\n" for c in multi))
    trace = gavel_trace.read_gavel(path, GAVEL_JSON)
    assert len(trace.jobs) == len(multi)
    for job in trace.jobs:
        c = multi[int(job.id.rsplit("-", 1)[1]) - 1]
        sf = int(c[6])
        assert job.cls == f"{profiles.class_name(c[0])}-x{sf}" and job.gpus == sf and job.work == float(c[4])
        assert dict(trace.throughput[job.cls]) == {g: v for g, v in nulls[(c[0], sf)].items() if v > 0}
    # the CSV format holds per-GPU throughputs; Gavel's measured multi-GPU ones are not linear
    with pytest.raises(InputError, match="linear"):
        csv_trace.render_csv(trace)


@needs_gavel
def test_gavel_job_type_never_measured_at_its_scale_factor_is_an_error():
    nulls = _gavel_nulls()
    path = GAVEL / "traces" / "0e4a51.trace"
    line, cells = next((n, c) for n, c in enumerate(_lines(path), 1)
                       if not any(v > 0 for v in nulls.get((c[0], int(c[6])), {}).values()))
    with pytest.raises(InputError) as e:
        gavel_trace.read_gavel(path, GAVEL_JSON)
    assert e.value.field == f"{path} line {line} job type"
    assert e.value.value == cells[0]
    assert f"scale factor {int(cells[6])}" in e.value.problem


# ------------------------------------------------------------------------------------------ CSV


def test_csv_round_trip_of_a_generated_trace(tmp_path):
    trace = synthetic_trace.generate(seed=7, jobs=400, accounts=5, rate=30.0, mean_duration=1800.0)
    usable = trace.throughput[trace.jobs[3].cls]
    typed_type = sorted(usable)[0]
    jobs = list(trace.jobs)
    jobs[3] = replace(jobs[3], gpu_type=typed_type)  # one typed request
    trace = replace(trace, jobs=tuple(jobs))
    csv_trace.write_csv(trace, tmp_path / "t.csv", tmp_path / "p.csv")
    assert (tmp_path / "t.csv").read_text().splitlines()[0] == "submit_time,account,class,gpus,work,gpu_type,time_limit"
    assert (tmp_path / "p.csv").read_text().splitlines()[0] == "class,gpu_type,throughput"
    back = csv_trace.read_csv(tmp_path / "t.csv", tmp_path / "p.csv")
    assert back.jobs == trace.jobs
    assert back.throughput == {c: trace.throughput[c] for c in trace.classes()}
    assert back.jobs[3].gpu_type == typed_type
    assert back.source == f"csv {tmp_path / 't.csv'} with {tmp_path / 'p.csv'}"


def test_time_limits_a_user_would_ask_for():
    # 9000 steps at 1 step/s on the slowest type (k80): 2.5 h, rounded up to 3 h; a whole number of hours stays
    assert T.asked_limit(9000.0, {"k80": 1.0, "v100": 4.0}) == 3 * 3600.0
    assert T.asked_limit(7200.0, {"k80": 1.0, "v100": 4.0}) == 2 * 3600.0
    assert T.asked_limit(1.0, {"k80": 1.0}) == 3600.0  # never under an hour
    thr = {"c": {"k80": 1.0, "v100": 4.0}}
    trace = T.with_time_limits(Trace((TraceJob("a", 0, "x", "c", 1, 9000.0),
                                      TraceJob("b", 0, "x", "c", 1, 9000.0, None, 60.0 * 600)), thr, "t"))
    assert [j.time_limit for j in trace.jobs] == [3 * 3600.0, 60.0 * 600]  # a limit given is kept
    # a limit shorter than the run time on the slowest type the job may run on: refused (the simulator does not
    # kill jobs at their limit); a typed job only needs its own type's run time
    with pytest.raises(InputError) as e:
        Trace((TraceJob("a", 0, "x", "c", 1, 9000.0, None, 8999.0),), thr, "t")
    assert e.value.field == "job 'a' time_limit" and "shorter" in e.value.problem
    assert Trace((TraceJob("a", 0, "x", "c", 1, 9000.0, "v100", 2250.0),), thr, "t").jobs[0].time_limit == 2250.0
    with pytest.raises(InputError):
        Trace((TraceJob("a", 0, "x", "c", 1, 9000.0, None, 0.0),), thr, "t")
    gen = synthetic_trace.generate(seed=1, jobs=50, accounts=2, rate=10.0, mean_duration=3600.0)
    assert all(j.time_limit == T.asked_limit(j.work, gen.throughput[j.cls]) for j in gen.jobs)


def test_csv_time_limit_column():
    trace = csv_trace.parse_csv("submit_time,account,class,gpus,work,time_limit\n0,a,m,1,10,60\n1,a,m,1,10,\n",
                        "class,gpu_type,throughput\nm,k80,1\n")
    assert [j.time_limit for j in trace.jobs] == [60.0, None]
    with pytest.raises(InputError) as e:
        csv_trace.parse_csv("submit_time,account,class,gpus,work,time_limit\n0,a,m,1,10,soon\n",
                    "class,gpu_type,throughput\nm,k80,1\n", trace_name="t.csv")
    assert e.value.field == "t.csv line 2 time_limit"


def test_csv_linear_scaling_and_free_column_order():
    trace = csv_trace.parse_csv(
        "gpus,work,class,account,submit_time,gpu_type\n4,100,m,a,5,\n1,10,m,b,0,v100\n\n2,7,n,a,5,k80\n",
        "throughput,class,gpu_type\n1.5,m,k80\n2.5,m,v100\n3,n,k80\n3,unused,k80\n",
    )
    assert [j.id for j in trace.jobs] == ["job-2", "job-1", "job-3"]  # by submit, then id
    assert trace.jobs[0] == TraceJob("job-2", 0.0, "b", "m", 1, 10.0, "v100")
    assert trace.jobs[1] == TraceJob("job-1", 5.0, "a", "m-x4", 4, 100.0, None)
    assert trace.throughput == {"m": {"k80": 1.5, "v100": 2.5}, "m-x4": {"k80": 6.0, "v100": 10.0},
                                "n-x2": {"k80": 6.0}}
    assert trace.accounts() == ("a", "b") and trace.classes() == ("m", "m-x4", "n-x2")
    assert trace.gpu_types() == ("k80", "v100")


# ------------------------------------------------------------------------------------------ generator


def test_generator_is_deterministic():
    a = synthetic_trace.generate(seed=3, jobs=300, accounts=4, rate=12.0, mean_duration=600.0)
    b = synthetic_trace.generate(seed=3, jobs=300, accounts=4, rate=12.0, mean_duration=600.0)
    c = synthetic_trace.generate(seed=4, jobs=300, accounts=4, rate=12.0, mean_duration=600.0)
    assert a == b
    assert a.jobs != c.jobs
    assert [j.id for j in a.jobs] == [f"job-{k}" for k in range(1, 301)]


def test_generator_distributions():
    n, rate, mean, accounts = 20_000, 40.0, 5000.0, 8
    trace = synthetic_trace.generate(seed=11, jobs=n, accounts=accounts, rate=rate, mean_duration=mean)
    sizes = Counter(j.gpus for j in trace.jobs)
    assert set(sizes) == {1, 2, 4, 8}
    for gpus, share in {1: 0.70, 2: 0.10, 4: 0.15, 8: 0.05}.items():  # Philly's job sizes
        assert sizes[gpus] / n == pytest.approx(share, abs=0.015)
    assert n / trace.jobs[-1].submit * 3600 == pytest.approx(rate, rel=0.03)
    # durations: work over the job's throughput on its slowest usable type
    durations = [j.work / min(trace.throughput[j.cls].values()) for j in trace.jobs]
    assert sum(durations) / n == pytest.approx(mean, rel=0.03)
    assert sorted(durations)[n // 2] == pytest.approx(mean * math.log(2), rel=0.05)  # exponential median
    per_account = Counter(j.account for j in trace.jobs)
    assert sorted(per_account) == [f"acct-{i:03d}" for i in range(accounts)]
    assert all(c / n == pytest.approx(1 / accounts, abs=0.015) for c in per_account.values())
    # the default classes are the shipped profiles, scaled linearly with the GPUs
    shipped: dict[str, dict[str, float]] = {}
    for r in profiles.load_shipped():
        shipped.setdefault(r["class"], {})[r["gpu_type"]] = r["throughput"]
    assert synthetic_trace.shipped_classes() == shipped
    for j in trace.jobs:
        base = j.cls.removesuffix(f"-x{j.gpus}") if j.gpus > 1 else j.cls
        assert dict(trace.throughput[j.cls]) == {t: v * j.gpus for t, v in shipped[base].items()}
    assert len({j.cls.split("-x")[0] for j in trace.jobs}) == len(shipped)


def test_generator_with_given_classes():
    classes = {"b": {"x": 2.0, "y": 0.0}, "a": {"x": 1.0, "y": 4.0}}
    trace = synthetic_trace.generate(seed=5, jobs=200, accounts=2, classes=classes, rate=60.0, mean_duration=100.0)
    again = synthetic_trace.generate(seed=5, jobs=200, accounts=2, classes=dict(reversed(classes.items())), rate=60.0,
                       mean_duration=100.0)
    assert trace.jobs == again.jobs  # the mapping's order does not change the draw
    for j in trace.jobs:
        base = j.cls.split("-x")[0]
        want = {"b": {"x": 2.0}, "a": {"x": 1.0, "y": 4.0}}[base]
        assert dict(trace.throughput[j.cls]) == {t: v * j.gpus for t, v in want.items()}
    assert trace.gpu_types() == ("x", "y")
    assert trace.source.startswith("generate(seed=5, jobs=200, accounts=2, classes=2,")


# ------------------------------------------------------------------------------------------ the Trace value


def test_trace_sorts_jobs_naturally_and_freezes_throughput():
    jobs = (TraceJob("t-10", 1.0, "a", "c", 1, 1.0), TraceJob("t-9", 1.0, "a", "c", 1, 1.0),
            TraceJob("t-11", 0.5, "a", "c", 1, 1.0))
    trace = Trace(jobs, {"c": {"k80": 1.0}, "spare": {"v100": 2.0}}, "test")
    assert [j.id for j in trace.jobs] == ["t-11", "t-9", "t-10"]
    assert trace.classes() == ("c",) and trace.gpu_types() == ("k80",)
    with pytest.raises(TypeError):
        trace.throughput["c"]["k80"] = 2.0  # type: ignore[index]


@pytest.mark.parametrize("jobs, throughput, field", [
    ((TraceJob("a", 0, "x", "c", 1, 1.0), TraceJob("a", 1, "x", "c", 1, 1.0)), {"c": {"t": 1}}, "job 'a' id"),
    ((TraceJob("a", 0, "x", "d", 1, 1.0),), {"c": {"t": 1}}, "job 'a' cls"),
    ((TraceJob("a", 0, "x", "c", 1, 1.0, "u"),), {"c": {"t": 1}}, "job 'a' gpu_type"),
    ((TraceJob("a", 0, "x", "c", 1, 1.0), TraceJob("b", 1, "x", "c", 2, 1.0)), {"c": {"t": 1}}, "job 'b' gpus"),
    ((TraceJob("a", -1, "x", "c", 1, 1.0),), {"c": {"t": 1}}, "job 'a' submit"),
    ((TraceJob("a", 0, "x", "c", 1, math.inf),), {"c": {"t": 1}}, "job 'a' work"),
    ((TraceJob("a", 0, "x", "c", 1, 1.0),), {"c": {"t": 0}}, "throughput['c']['t']"),
    ((TraceJob("a", 0, "x", "c", 1, 1.0),), {"c": {}}, "throughput['c']"),
])
def test_trace_invariants(jobs, throughput, field):
    with pytest.raises(InputError) as e:
        Trace(jobs, throughput, "test")
    assert e.value.field == field


# ------------------------------------------------------------------------------------------ bad input

TRACE_OK = "submit_time,account,class,gpus,work\n0,a,m,1,10\n"
PROFILES_OK = "class,gpu_type,throughput\nm,k80,1.5\n"


@pytest.mark.parametrize("trace_text, profiles_text, file, field", [
    ("submit_time,account,class,gpus,work\n0,a,m,two,10\n", PROFILES_OK, "t.csv", "line 2 gpus"),
    ("submit_time,account,class,gpus,work\n0,a,m,1.5,10\n", PROFILES_OK, "t.csv", "line 2 gpus"),
    ("submit_time,account,class,gpus,work\n0,a,m,0,10\n", PROFILES_OK, "t.csv", "line 2 gpus"),
    ("submit_time,account,class,gpus,work\n0,a,m,1025,10\n", PROFILES_OK, "t.csv", "line 2 gpus"),
    ("submit_time,account,class,gpus,work\n0,a,m,1,nan\n", PROFILES_OK, "t.csv", "line 2 work"),
    ("submit_time,account,class,gpus,work\n0,a,m,1,0\n", PROFILES_OK, "t.csv", "line 2 work"),
    ("submit_time,account,class,gpus,work\n-1,a,m,1,10\n", PROFILES_OK, "t.csv", "line 2 submit_time"),
    ("submit_time,account,class,gpus,work\ninf,a,m,1,10\n", PROFILES_OK, "t.csv", "line 2 submit_time"),
    ("submit_time,account,class,gpus\n0,a,m,1\n", PROFILES_OK, "t.csv", "line 1 work"),
    ("submit_time,account,class,gpus,work,priority\n0,a,m,1,10,3\n", PROFILES_OK, "t.csv", "line 1 priority"),
    ("submit_time,account,class,gpus,work,work\n0,a,m,1,10,3\n", PROFILES_OK, "t.csv", "line 1 work"),
    ("submit_time,account,class,gpus,work\n0,a,q,1,10\n", PROFILES_OK, "t.csv", "line 2 class"),
    ("submit_time,account,class,gpus,work\n0,a,m-x4,1,10\n", PROFILES_OK, "t.csv", "line 2 class"),
    ("submit_time,account,class,gpus,work\n0,,m,1,10\n", PROFILES_OK, "t.csv", "line 2 account"),
    ("submit_time,account,class,gpus,work,gpu_type\n0,a,m,1,10,v100\n", PROFILES_OK, "t.csv", "line 2 gpu_type"),
    ("submit_time,account,class,gpus,work\n0,a,m,1\n", PROFILES_OK, "t.csv", "line 2"),
    ("", PROFILES_OK, "t.csv", "line 1"),
    ("submit_time,account,class,gpus,work\n", PROFILES_OK, "t.csv", ""),
    (TRACE_OK, "class,gpu_type,throughput\nm,k80,0\n", "p.csv", "line 2 throughput"),
    (TRACE_OK, "class,gpu_type,throughput\nm,k80,NaN\n", "p.csv", "line 2 throughput"),
    (TRACE_OK, "class,gpu_type,throughput\nm,k80,-2\n", "p.csv", "line 2 throughput"),
    (TRACE_OK, "class,gpu_type,throughput\nm,k80,1\nm,k80,2\n", "p.csv", "line 3 gpu_type"),
    (TRACE_OK, "class,gpu_type,throughput\nm,k 80,1\n", "p.csv", "line 2 gpu_type"),
    (TRACE_OK, "class,gpu_type,throughput,account\nm,k80,1,\n", "p.csv", "line 1 account"),
    (TRACE_OK, "class,throughput\nm,1\n", "p.csv", "line 1 gpu_type"),
])
def test_bad_csv(tmp_path, trace_text, profiles_text, file, field):
    (tmp_path / "t.csv").write_text(trace_text)
    (tmp_path / "p.csv").write_text(profiles_text)
    with pytest.raises(InputError) as e:
        csv_trace.read_csv(tmp_path / "t.csv", tmp_path / "p.csv")
    assert e.value.field == f"{tmp_path / file} {field}".rstrip()


@pytest.mark.parametrize("file", ["t.csv", "p.csv"])
def test_csv_that_is_not_utf8(tmp_path, file):
    (tmp_path / "t.csv").write_text(TRACE_OK)
    (tmp_path / "p.csv").write_text(PROFILES_OK)
    path = tmp_path / file
    path.write_bytes(path.read_bytes() + b"caf\xe9,k80,1\n")
    with pytest.raises(InputError) as e:
        csv_trace.read_csv(tmp_path / "t.csv", tmp_path / "p.csv")
    assert e.value.field == f"{path} line 3" and "UTF-8" in e.value.problem


def test_missing_file(tmp_path):
    (tmp_path / "p.csv").write_text(PROFILES_OK)
    with pytest.raises(InputError) as e:
        csv_trace.read_csv(tmp_path / "nope.csv", tmp_path / "p.csv")
    assert e.value.field == str(tmp_path / "nope.csv") and "cannot be read" in e.value.problem


LINE = "{jt}\tpython3 train.py\t--steps\t1\t{steps}\t{arrival}\t{sf}\n"
JSON_OK = {gpu: {"('Model (batch size 8)', 1)": {"null": 2.0}, "('Model (batch size 8)', 2)": {"null": 3.0},
                 "('Zero', 1)": {"null": 0.0}}
           for gpu in ("k80", "p100", "v100")}


def _gavel_line(jt="Model (batch size 8)", steps="100", arrival="0.000000", sf="1"):
    return LINE.format(jt=jt, steps=steps, arrival=arrival, sf=sf)


def test_gavel_synthetic_ok(tmp_path):
    (tmp_path / "vc.trace").write_text(_gavel_line() + _gavel_line(sf="2", arrival="3.5"))
    (tmp_path / "t.json").write_text(json.dumps(JSON_OK))
    trace = gavel_trace.read_gavel([tmp_path / "vc.trace"], tmp_path / "t.json")
    assert trace.jobs == (TraceJob("vc-1", 0.0, "acct-vc", "model-bs8", 1, 100.0, None, 3600.0),
                          TraceJob("vc-2", 3.5, "acct-vc", "model-bs8-x2", 2, 100.0, None, 3600.0))
    assert trace.throughput == {"model-bs8": dict.fromkeys(("k80", "p100", "v100"), 2.0),
                                "model-bs8-x2": dict.fromkeys(("k80", "p100", "v100"), 3.0)}


@pytest.mark.parametrize("text, field", [
    (_gavel_line(steps="many"), "line 1 total steps"),
    (_gavel_line(steps="0"), "line 1 total steps"),
    (_gavel_line(arrival="nan"), "line 1 arrival time"),
    (_gavel_line(arrival="-5"), "line 1 arrival time"),
    (_gavel_line(sf="0"), "line 1 scale factor"),
    (_gavel_line(sf="1.5"), "line 1 scale factor"),
    (_gavel_line() + _gavel_line(sf="4"), "line 2 job type"),  # never measured at 4 GPUs
    (_gavel_line(jt="Unknown"), "line 1 job type"),
    (_gavel_line(jt="Zero"), "line 1 job type"),  # zero throughput everywhere
    (_gavel_line(jt="!!"), "line 1 job type"),
    (_gavel_line() + "only\ttwo\n", "line 2"),
    ("", ""),
])
def test_bad_gavel_trace(tmp_path, text, field):
    (tmp_path / "vc.trace").write_text(text)
    (tmp_path / "t.json").write_text(json.dumps(JSON_OK))
    with pytest.raises(InputError) as e:
        gavel_trace.read_gavel(tmp_path / "vc.trace", tmp_path / "t.json")
    assert e.value.field == f"{tmp_path / 'vc.trace'} {field}".rstrip()


def test_gavel_trace_that_is_not_utf8(tmp_path):
    (tmp_path / "vc.trace").write_bytes(_gavel_line().encode() + _gavel_line(jt="Caf\xe9").encode("latin-1"))
    (tmp_path / "t.json").write_text(json.dumps(JSON_OK))
    with pytest.raises(InputError) as e:
        gavel_trace.read_gavel(tmp_path / "vc.trace", tmp_path / "t.json")
    assert e.value.field == f"{tmp_path / 'vc.trace'} line 2" and "UTF-8" in e.value.problem


@pytest.mark.parametrize("content, field", [
    (b"{not json", "line 1"),
    (b"[1, 2]", ""),
    (b'{"k80": {"(\'Model (batch size 8)\', 1)": {"null": NaN}}}', "k80[('Model (batch size 8)', 1)].null"),
    (b'{"k80": {"(\'Model (batch size 8)\', 1)": {"null": "fast"}}}', "k80[('Model (batch size 8)', 1)].null"),
    (b'{"k80": {"(\'Model (batch size 8)\', 1)": {"null": -1}}}', "k80[('Model (batch size 8)', 1)].null"),
    (b'{"k80": {"Model": {"null": 1}}}', "k80"),
    (b'{"k80": {"(\'Model\', 0)": {"null": 1}}}', "k80"),
    (b'{"k80": {"(\'Model\', 1)": 1}}', "k80[('Model', 1)]"),
    (b'{"k80": []}', "k80"),
    (b'{"k80": {"\xe9": 1}}', "line 1"),
])
def test_bad_gavel_json(tmp_path, content, field):
    (tmp_path / "vc.trace").write_text(_gavel_line())
    (tmp_path / "t.json").write_bytes(content)
    with pytest.raises(InputError) as e:
        gavel_trace.read_gavel(tmp_path / "vc.trace", tmp_path / "t.json")
    assert e.value.field == f"{tmp_path / 't.json'} {field}".rstrip()


def test_bad_gavel_arguments(tmp_path):
    (tmp_path / "vc.trace").write_text(_gavel_line())
    (tmp_path / "t.json").write_text(json.dumps(JSON_OK))
    with pytest.raises(InputError) as e:
        gavel_trace.read_gavel(tmp_path / "vc.trace", tmp_path / "t.json", accounts="user")
    assert e.value.field == "accounts"
    with pytest.raises(InputError) as e:
        gavel_trace.read_gavel([], tmp_path / "t.json")
    assert e.value.field == "paths"
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "vc.trace").write_text(_gavel_line())
    with pytest.raises(InputError) as e:  # two files with one stem would give two jobs the same id
        gavel_trace.read_gavel([tmp_path / "vc.trace", tmp_path / "other" / "vc.trace"], tmp_path / "t.json")
    assert e.value.field == str(tmp_path / "other" / "vc.trace")


@pytest.mark.parametrize("change, field", [
    ({"seed": -1}, "seed"),
    ({"seed": 1.5}, "seed"),
    ({"jobs": 0}, "jobs"),
    ({"accounts": True}, "accounts"),
    ({"rate": 0.0}, "rate"),
    ({"mean_duration": math.nan}, "mean_duration"),
    ({"classes": {}}, "classes"),
    ({"classes": {"m": {"k80": 0.0}}}, "classes['m']"),
    ({"classes": {"m": {"k80": -1.0}}}, "classes['m']['k80']"),
    ({"classes": {"m-x2": {"k80": 1.0}}}, "classes class"),
    ({"classes": {"m": {"k 80": 1.0}}}, "classes['m'] gpu type"),
])
def test_bad_generator_arguments(change, field):
    args = dict(seed=1, jobs=10, accounts=2, rate=10.0, mean_duration=60.0) | change
    with pytest.raises(InputError) as e:
        synthetic_trace.generate(**args)
    assert e.value.field == field


def test_render_refuses_classes_not_named_after_their_gpus():
    trace = Trace((TraceJob("a", 0.0, "x", "c", 2, 1.0),), {"c": {"k80": 2.0}}, "test")
    with pytest.raises(InputError) as e:
        csv_trace.render_csv(trace)
    assert e.value.field == "class 'c'"
