"""Bad input never gives a traceback (issue 10, item 2): unknown keys, non-finite and huge numbers, the
documented ranges, deep JSON, non-UTF-8 files, a NUL in daemon.database; plus a hypothesis fuzz of
``slurm-fair solve`` and ``slurm-fair profiles import`` asserting exit 0, or exit 2 with an ``error:`` line
(``SLURM_FAIR_HYPOTHESIS_EXAMPLES=N`` for a soak with fresh random examples)."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_fair import config as config_mod
from slurm_fair.cli import main
from slurm_fair.errors import InputError
from slurm_fair.model import problem_from_dict
from slurm_fair.store import Store
from slurm_fair.profiling.core import effective
from slurm_fair.daemon.preemption.store import PreemptionStore

SOAK = os.environ.get("SLURM_FAIR_HYPOTHESIS_EXAMPLES")
SETTINGS = settings(max_examples=int(SOAK or "40"), deadline=None, derandomize=not SOAK,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def base() -> dict:
    return {"gpu_types": {"k80": 4, "v100": 4},
            "tenants": [{"name": "a", "weight": 1, "classes": [{"name": "c", "throughput": {"k80": 1, "v100": 3}}]},
                        {"name": "b", "classes": [{"name": "c", "throughput": {"k80": 1, "v100": 1.5}}]}]}


def solve(text: str | bytes):
    return CliRunner().invoke(main, ["solve", "-p", "oef-noncoop", "-i", "-", "--json"], input=text)


def assert_error(r, *parts: str) -> None:
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    assert isinstance(r.exception, SystemExit), r.exception
    line = r.stderr.strip()
    assert line.startswith("error: ") and "Traceback" not in r.output, r.output
    for p in parts:
        assert p in line, (p, line)


@pytest.mark.parametrize("path, key", [
    ((), "gpu_type"),
    (("tenants", 0), "weigth"),
    (("tenants", 1, "classes", 0), "demnd"),
])
def test_unknown_keys_are_errors_with_their_json_path(path, key):
    p = base()
    obj = p
    for k in path:
        obj = obj[k]
    obj[key] = 3
    where = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).lstrip(".")
    r = solve(json.dumps(p))
    assert_error(r, f"error: {where + '.' if where else ''}{key}: unknown key (known: ", f"(got '{key}')")


@pytest.mark.parametrize("count, problem", [
    ("NaN", "must be a finite number (got nan)"),
    ("Infinity", "must be a finite number (got inf)"),
    ("-Infinity", "must be a finite number (got -inf)"),
    ("1e400", "must be a finite number (got inf)"),
    ("1" + "0" * 400, "must be a finite number"),
    ("1000001", "must be at most 1e+06 (got 1000001)"),
    ("2.5", "must be a whole number >= 0 (got 2.5)"),
])
def test_gpu_counts_nan_infinity_and_huge_are_clear_errors(count, problem):
    text = json.dumps(base()).replace('"k80": 4', f'"k80": {count}', 1)
    assert_error(solve(text), "error: gpu_types.k80: ", problem)


def test_documented_ranges_are_enforced_and_their_limits_accepted():
    p = base()
    p["tenants"][0]["classes"][0]["throughput"] = {"k80": 1, "v100": 1e6}  # exactly the limit: fine
    p["tenants"][0]["weight"] = 1e6
    p["tenants"][1]["weight"] = 1
    p["tenants"][1]["classes"][0]["demand"] = 1e6
    p["tenants"][1]["classes"][0]["type_demand"] = {"k80": 1e6}
    r = solve(json.dumps(p))
    assert r.exit_code == 0, r.output
    p["tenants"][0]["classes"][0]["throughput"]["v100"] = 1.1e6
    assert_error(solve(json.dumps(p)), "error: tenants[0].classes[0].throughput: the fastest type is more than 1e+06")
    p = base()
    p["tenants"][0]["weight"] = 1e6
    p["tenants"][1]["weight"] = 0.5
    assert_error(solve(json.dumps(p)), "error: tenants[0].weight: more than 1e+06 times the smallest weight "
                 "(tenants[1].weight = 0.5)")
    for w, problem in ((1e-300, "must be at least 1e-06 (got 1e-300)"), (2e6, "must be at most 1e+06")):
        p = base()
        p["tenants"][1]["weight"] = w
        assert_error(solve(json.dumps(p)), f"error: tenants[1].weight: {problem}")
    for field, value in (("demand", 2e6), ("type_demand", {"v100": 2e6})):
        p = base()
        p["tenants"][0]["classes"][0][field] = value
        assert_error(solve(json.dumps(p)), "must be at most 1e+06")


def test_deep_json_and_non_utf8_input_are_clear_errors():
    assert_error(solve("[" * 200_000), "error: --input: invalid JSON: nested too deeply")
    assert_error(solve(b'{"gpu_types": {"caf\xe9": 1}}'), "error: <stdin> line 1: not UTF-8")
    assert_error(solve("9" * 5000), "error: --input: invalid JSON")


def test_problem_from_dict_names_the_path_of_an_unknown_key():
    p = base()
    p["tenants"][0]["classes"][0]["type_demnad"] = {"k80": 1}
    with pytest.raises(InputError) as e:
        problem_from_dict(p)
    assert e.value.field == "tenants[0].classes[0].type_demnad"


def test_nul_in_daemon_database_is_a_config_error(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[daemon]\ndatabase = "a\\u0000b.sqlite"\n')
    with pytest.raises(InputError, match="daemon.database: must be a path without NUL"):
        config_mod.load(f)
    r = CliRunner().invoke(main, ["config", "check", "--config", str(f)])
    assert r.exit_code == 2 and r.stderr.startswith("error: daemon.database: "), r.output


@pytest.fixture
def profiles_cfg(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[daemon]\ndatabase = "db.sqlite"\n')
    with Store(tmp_path / "db.sqlite") as s:
        s.set_profile("keep", "v100", 2.5)
    return cfg


def import_profiles(cfg, data: bytes):
    return CliRunner().invoke(main, ["profiles", "import", "-", "--config", str(cfg)], input=data)


def stored(cfg) -> list[tuple]:
    with Store(cfg.parent / "db.sqlite") as s:
        return [(r.account, r.cls, r.gpu_type, r.throughput) for r in effective(s.profile_values())]


def test_latin1_and_binary_profiles_are_refused_naming_the_line_and_nothing_is_stored(profiles_cfg):
    before = stored(profiles_cfg)
    latin1 = "account,class,gpu_type,throughput\n,cnn,v100,2\n,café,k80,1\n".encode("latin-1")
    assert_error(import_profiles(profiles_cfg, latin1), "error: <stdin> line 3: not UTF-8")
    assert_error(import_profiles(profiles_cfg, bytes(range(256)) * 4), "not UTF-8")
    assert stored(profiles_cfg) == before
    r = CliRunner().invoke(main, ["profiles", "import", str(profiles_cfg.parent / "x.csv"), "--config",
                                  str(profiles_cfg)])
    assert r.exit_code == 2  # a missing file: click's own usage error, no traceback
    assert stored(profiles_cfg) == before


# ------------------------------------------------------------------------------------------- fuzz

NASTY = st.one_of(
    st.sampled_from([0, 1, 2, -1, 0.5, 1e6, 1e7, 1e-300, 5e-324, float("nan"), float("inf"), -float("inf"),
                     10 ** 400, True, None, "", "1", [], {}, [1], {"k80": 1}]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-10, max_value=10 ** 7),
    st.text(max_size=4),
)
KEYS = st.sampled_from(["name", "weight", "classes", "throughput", "demand", "type_demand", "gpu_types",
                        "tenants", "k80", "v100", "weigth", ""])


@st.composite
def mutated_problems(draw):
    """The base problem with a few random edits: a value replaced by a nasty one, a key added or removed,
    the text truncated, or deep nesting; returned as the bytes of the input file."""
    p = base()
    if draw(st.booleans()):
        p["gpu_types"]["a100"] = draw(st.integers(0, 8))
        p["tenants"].append({"name": "c", "weight": draw(st.floats(0.1, 10)),
                             "classes": [{"name": "x", "throughput": {"a100": 2, "k80": 1},
                                          "demand": draw(st.integers(0, 6))}]})
    for _ in range(draw(st.integers(0, 3))):
        # walk to a random object in the tree
        obj = p
        for _depth in range(draw(st.integers(0, 4))):
            children = [v for v in (obj.values() if isinstance(obj, dict) else obj) if isinstance(v, (dict, list))]
            if not children:
                break
            obj = draw(st.sampled_from(children))
        if isinstance(obj, dict):
            action = draw(st.sampled_from(["set", "add", "del"]))
            if action == "del" and obj:
                del obj[draw(st.sampled_from(sorted(obj)))]
            elif action == "set" and obj:
                obj[draw(st.sampled_from(sorted(obj)))] = draw(NASTY)
            else:
                obj[draw(KEYS)] = draw(NASTY)
        elif isinstance(obj, list) and obj:
            obj[draw(st.integers(0, len(obj) - 1))] = draw(NASTY)
    text = json.dumps(p, allow_nan=True)
    tail = draw(st.sampled_from(["none", "none", "none", "truncate", "deep", "bytes"]))
    if tail == "truncate":
        text = text[:draw(st.integers(0, len(text)))]
    elif tail == "deep":
        n = draw(st.sampled_from([10, 1000, 100_000]))
        text = "[" * n + "]" * n
    data = text.encode()
    if tail == "bytes":
        data = data[:draw(st.integers(0, len(data)))] + draw(st.binary(max_size=8))
    return data


@SETTINGS
@given(data=mutated_problems(), policy=st.sampled_from(["oef-noncoop", "oef-coop", "equal-share",
                                                         "max-throughput", "gavel", "gandiva-fair"]))
def test_fuzz_solve_never_tracebacks(data, policy):
    r = CliRunner().invoke(main, ["solve", "-p", policy, "-i", "-", "--json"], input=data)
    assert isinstance(r.exception, (SystemExit, type(None))), (data, r.output, repr(r.exception))
    assert r.exit_code in (0, 2), (data, r.exit_code, r.output)
    if r.exit_code == 2:
        assert r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1, (data, r.output)
    else:
        json.loads(r.stdout)


CELL = st.one_of(
    st.sampled_from(["", "cnn", "v100", "k80", "acct_a", "1", "2.5", "0", "-1", "nan", "inf", "1e400", "1e-400",
                     "x" * 300, "a b", '"q,uoted"', "\t", "c\x00n", "caf\u00e9"]),
    st.text(max_size=6),
)


@st.composite
def csv_files(draw):
    header = draw(st.sampled_from(["account,class,gpu_type,throughput", "account,class,gpu_type,throughput",
                                   "account,class,throughput", ""]))
    rows = [",".join(draw(st.lists(CELL, min_size=3, max_size=5))) for _ in range(draw(st.integers(0, 4)))]
    text = "\n".join([header, *rows]) + draw(st.sampled_from(["", "\n", "\r\n"]))
    encoding = draw(st.sampled_from(["utf-8", "utf-8", "latin-1", "binary"]))
    if encoding == "binary":
        return draw(st.binary(max_size=64))
    return text.encode(encoding, errors="replace")


@SETTINGS
@given(data=csv_files())
def test_fuzz_profiles_import_never_tracebacks_and_keeps_what_was_stored(profiles_cfg, data):
    r = import_profiles(profiles_cfg, data)
    assert isinstance(r.exception, (SystemExit, type(None))), (data, r.output, repr(r.exception))
    assert r.exit_code in (0, 2), (data, r.exit_code, r.output)
    assert ("", "keep", "v100", 2.5) in stored(profiles_cfg)
    if r.exit_code == 2:
        assert r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1, (data, r.output)


# ---- terminal escapes: every user-settable string a command prints is escaped (slurm_fair.text.printable)

HOSTILE = "\x1b]0;owned\x07\x1b[2J\rcls\nACCOUNT  forged\u202e\ufffd"


def test_printable_escapes_control_characters_and_is_idempotent_without_backslashes():
    from slurm_fair.text import printable
    out = printable(HOSTILE, None)
    assert out.isprintable() and "\\x1b" in out and "\\n" in out and "\\u202e" in out and "\ufffd" in out
    once = printable(HOSTILE, None, backslash=False)
    assert printable(once, None, backslash=False) == once
    assert printable("a\\b") == "a\\\\b" and printable("a\\b", backslash=False) == "a\\b"
    assert printable("x" * 200, 10) == "x" * 10 + "…" and printable(3) == "3"


def test_shares_history_explain_and_status_print_no_control_character(tmp_path, monkeypatch):
    from slurm_fair.cli import admin

    db = tmp_path / "sf.sqlite"
    cfg = tmp_path / "sf.toml"
    cfg.write_text(f'[daemon]\ndatabase = "{db}"\n')
    with Store(db) as store:
        rid = store.begin_round("oef-coop", now=1.0)
        store.record_shares(rid, [{"account": "acct_a", "class": HOSTILE, "gpu_type": "v100", "ideal": 2.0, "real": 2}])
        store.record_placements(rid, [{"account": "acct_a", "gpu_type": "v100", "ideal": 2.0, "real": 2, "limit": 2}])
        store.finish_round(rid, "ok", n_accounts=1, details={"accounts": ["acct_a", HOSTILE]})
        bad = store.begin_round("oef-coop", now=2.0)
        store.finish_round(bad, "error", message="squeue: job name " + HOSTILE)
        PreemptionStore(store).add(job_id=7, account="acct_a", gpu_type="v100", gpus=1, signal="USR1", reason=HOSTILE,
                                   grace=60, now=3.0)
    monkeypatch.setattr(admin, "_snapshot", lambda cfg: (None, "Slurm says " + HOSTILE))
    for args in (["shares"], ["history"], ["explain", "acct_a"], ["explain", HOSTILE], ["status"]):
        r = CliRunner().invoke(main, [*args, "--config", str(cfg)])
        assert r.exit_code == 0, (args, r.output, r.exception)
        lines = r.output.split("\n")
        assert all(ln.isprintable() for ln in lines), (args, [ln for ln in lines if not ln.isprintable()])
        assert "\x1b" not in r.output and "\r" not in r.output
    r = CliRunner().invoke(main, ["shares", "--config", str(cfg)])
    assert "\\x1b]0;owned\\x07" in r.output and "\ufffd" in r.output
    assert not any(ln.startswith("ACCOUNT  forged") for ln in r.output.split("\n"))


@pytest.mark.parametrize("value", ["[" * 5000 + "]" * 5000, "[" * 100000 + "]" * 100000, "{a=" * 2000 + "1" + "}" * 2000])
def test_config_check_on_a_deeply_nested_toml_value_is_a_clear_error(tmp_path, value):
    cfg = tmp_path / "deep.toml"
    cfg.write_text(f"[daemon]\nx = {value}\n")
    r = CliRunner().invoke(main, ["config", "check", "--config", str(cfg)])
    assert_error(r, "config: invalid TOML: a value nested too deeply", str(cfg))
    assert len(r.stderr) < 1000  # the value is not printed whole
    with pytest.raises(InputError):
        config_mod.load(str(cfg))


def test_a_job_id_given_twice_in_a_problem_is_refused_naming_it():
    p = base()
    p["tenants"][0]["classes"][0]["jobs"] = [{"id": "42", "gpus": 1, "remaining": 60}]
    p["tenants"][1]["classes"][0]["jobs"] = [{"id": "7", "gpus": 1, "remaining": 60},
                                             {"id": "42", "gpus": 2, "remaining": 60}]
    with pytest.raises(InputError, match=r"tenants\[1\]\.classes\[0\]\.jobs\[1\]\.id: duplicate job id: also "
                                         r"tenants\[0\]\.classes\[0\]\.jobs\[0\] \(got '42'\)"):
        problem_from_dict(p)
    assert_error(solve(json.dumps(p)), "tenants[1].classes[0].jobs[1].id", "duplicate job id", "'42'")
