"""slurm-fair profiles … and slurm-fair config check, through click's runner and one real subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_fair.profiling import shipped as profiles
from slurm_fair.cli import main
from slurm_fair.store import Store
from slurm_fair.profiling.core import effective


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_FAIR_CONFIG", raising=False)
    p = tmp_path / "slurm-fair.toml"
    p.write_text('[daemon]\ndatabase = "state/fair.sqlite"\n')
    return p


def run(*args, input=None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def db_rows(cfg):
    with Store(cfg.parent / "state" / "fair.sqlite") as s:
        return effective(s.profile_values())


def test_set_list_delete(cfg):
    r = run("profiles", "list", "--config", str(cfg))
    assert r.exit_code == 0 and "no profiles" in r.output
    r = run("profiles", "set", "resnet50-bs64", "a100", "9.5", "--config", str(cfg))
    assert r.exit_code == 0, r.output
    r = run("profiles", "set", "resnet50-bs64", "a100", "11", "--account", "acct_a", "--config", str(cfg))
    assert r.exit_code == 0, r.output
    assert [(x.account, x.throughput, x.source) for x in db_rows(cfg)] == [
        ("", 9.5, "set"), ("acct_a", 11.0, "set")]

    r = run("profiles", "list", "--config", str(cfg))
    lines = r.output.splitlines()
    assert lines[0].split() == ["ACCOUNT", "CLASS", "GPU_TYPE", "THROUGHPUT", "SPEEDUP", "SAMPLES", "SOURCE",
                                "USED", "FLAGS"]
    assert lines[1].split() == ["*", "resnet50-bs64", "a100", "9.5", "1.00", "1", "set", "*"]
    assert lines[2].split() == ["acct_a", "resnet50-bs64", "a100", "11", "1.00", "1", "set", "*"]

    r = run("profiles", "list", "--json", "--account", "acct_a", "--config", str(cfg))
    got = json.loads(r.output)
    assert [(x["account"], x["class"], x["gpu_type"], x["throughput"]) for x in got] == [
        ("acct_a", "resnet50-bs64", "a100", 11.0)]

    r = run("profiles", "delete", "resnet50-bs64", "--account", "acct_a", "--config", str(cfg))
    assert r.exit_code == 0 and "deleted 1" in r.output
    r = run("profiles", "delete", "resnet50-bs64", "--gpu-type", "v100", "--config", str(cfg))
    assert r.exit_code == 1 and "deleted 0" in r.output
    assert [x.account for x in db_rows(cfg)] == [""]


def test_set_bad_throughput_exits_2_naming_the_field(cfg):
    r = CliRunner().invoke(main, ["profiles", "set", "lm-bs10", "v100", "fast", "--config", str(cfg)])
    assert r.exit_code == 2
    assert "throughput" in r.stderr and "'fast'" in r.stderr
    assert db_rows(cfg) == []


def test_import_export_round_trip(cfg, tmp_path):
    csv_in = tmp_path / "in.csv"
    csv_in.write_text("account,class,gpu_type,throughput\n,lm-bs10,v100,81.6516\nacct_b,lm-bs10,k80,20\n")
    r = run("profiles", "import", str(csv_in), "--config", str(cfg))
    assert r.exit_code == 0 and "imported 2" in r.output
    out = tmp_path / "out.csv"
    r = run("profiles", "export", str(out), "--config", str(cfg))
    assert r.exit_code == 0
    r = run("profiles", "export", "--config", str(cfg))  # stdout
    assert r.output == out.read_text()
    def key(x):
        return x["account"], x["class"], x["gpu_type"]

    assert sorted(profiles.parse(out.read_text()), key=key) == sorted(profiles.parse(csv_in.read_text()), key=key)
    # read back from stdin into another database
    other = tmp_path / "other.toml"
    other.write_text('[daemon]\ndatabase = "other.sqlite"\n')
    r = run("profiles", "import", "-", "--config", str(other), input=out.read_text())
    assert r.exit_code == 0 and "imported 2" in r.output
    r2 = run("profiles", "export", "--config", str(other))
    assert r2.output == out.read_text()


def test_import_bad_row_exits_2_and_writes_nothing(cfg, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("account,class,gpu_type,throughput\n,a,v100,1\n,b,k80,0\n")
    r = CliRunner().invoke(main, ["profiles", "import", str(bad), "--config", str(cfg)])
    assert r.exit_code == 2
    assert "line 3 throughput" in r.stderr and "'0'" in r.stderr
    assert db_rows(cfg) == []


@pytest.mark.parametrize("value", ["1e300", "nan", "inf", "-inf", "-1", "0", "1e8", "1e-7"])
def test_import_refuses_a_throughput_a_job_report_could_not_have_and_keeps_what_is_stored(cfg, tmp_path, value):
    """Issue 41 item 8: `profiles import` took 1e300. Now every throughput must be a finite number within
    [profiling] min_throughput..max_throughput (default 1e-06..1e+07, as a job's report); one bad row refuses
    the whole file and what was stored stays."""
    good = tmp_path / "good.csv"
    good.write_text("account,class,gpu_type,throughput\n,cnn,v100,12\n")
    assert run("profiles", "import", str(good), "--config", str(cfg)).exit_code == 0
    bad = tmp_path / "bad.csv"
    bad.write_text(f"account,class,gpu_type,throughput\n,cnn,v100,30\nacct_a,lm,k80,{value}\n")
    r = CliRunner().invoke(main, ["profiles", "import", str(bad), "--config", str(cfg)])
    assert r.exit_code == 2
    assert "line 3 throughput of class 'lm' on GPU type 'k80'" in r.stderr and repr(value) in r.stderr
    assert [(x.account, x.cls, x.throughput) for x in db_rows(cfg)] == [("", "cnn", 12.0)]  # all or nothing
    r = CliRunner().invoke(main, ["profiles", "set", "--config", str(cfg), "--", "lm", "k80", value])
    assert r.exit_code == 2 and "class 'lm' on GPU type 'k80'" in r.stderr
    assert len(db_rows(cfg)) == 1


def test_import_bounds_follow_the_config(cfg, tmp_path):
    cfg.write_text(cfg.read_text() + "[profiling]\nmax_throughput = 1000\n")
    f = tmp_path / "in.csv"
    f.write_text("account,class,gpu_type,throughput\n,cnn,v100,5000\n")
    r = CliRunner().invoke(main, ["profiles", "import", str(f), "--config", str(cfg)])
    assert r.exit_code == 2 and "max_throughput [1e-06, 1000]" in r.stderr
    f.write_text("account,class,gpu_type,throughput\n,cnn,v100,999\n")
    assert run("profiles", "import", str(f), "--config", str(cfg)).exit_code == 0


def test_import_shipped(cfg):
    r = run("profiles", "import", "--shipped", "--config", str(cfg))
    assert r.exit_code == 0 and "imported 77" in r.output
    rows = db_rows(cfg)
    assert len(rows) == len(profiles.load_shipped()) and {x.source for x in rows} == {"shipped"}
    r = run("profiles", "import", "--shipped", "gandiva-fair", "--config", str(cfg))
    assert r.exit_code == 0 and "imported 28" in r.output
    r = CliRunner().invoke(main, ["profiles", "import", "--shipped", "nope", "--config", str(cfg)])
    assert r.exit_code == 2 and "--shipped" in r.stderr and "'nope'" in r.stderr
    r = CliRunner().invoke(main, ["profiles", "import", "--config", str(cfg)])
    assert r.exit_code == 2 and "--shipped" in r.stderr


def test_config_check_prints_effective_config_and_source(cfg):
    r = run("config", "check", "--config", str(cfg))
    assert r.exit_code == 0
    assert r.output.splitlines()[0] == f"# source: {cfg}"
    assert f"# database: {cfg.parent / 'state' / 'fair.sqlite'}" in r.output
    assert 'database = "state/fair.sqlite"' in r.output and "period = 300" in r.output
    r = run("config", "check", "--json", "--config", str(cfg))
    data = json.loads(r.output)
    assert data["source"] == str(cfg) and data["config"]["policy"]["name"] == "oef-coop"


def test_config_check_uses_env_var(cfg, monkeypatch):
    monkeypatch.setenv("SLURM_FAIR_CONFIG", str(cfg))
    r = run("config", "check", "--json")
    assert json.loads(r.output)["database_path"] == str(cfg.parent / "state" / "fair.sqlite")


@pytest.mark.parametrize("text, key", [
    ("[daemon]\nperiod = -1\n", "daemon.period"),
    ('[policy]\nname = "fifo"\n', "policy.name"),
    ("[limits]\nmanaged = true\n", "limits.managed"),
])
def test_config_check_errors_name_the_key_and_exit_2(tmp_path, text, key):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    r = CliRunner().invoke(main, ["config", "check", "--config", str(p)])
    assert r.exit_code == 2
    assert r.stderr.startswith(f"error: {key}:")


def test_missing_config_file_exits_2(tmp_path):
    r = CliRunner().invoke(main, ["profiles", "list", "--config", str(tmp_path / "nope.toml")])
    assert r.exit_code == 2 and "file not found" in r.stderr


def test_config_default_is_the_shipped_file():
    r = run("config", "default")
    assert r.output == (Path(__file__).resolve().parents[2] / "etc" / "slurm-fair.toml").read_text()


def test_every_command_has_help():
    for args in (["profiles"], ["profiles", "list"], ["profiles", "import"], ["profiles", "export"],
                 ["profiles", "set"], ["profiles", "delete"], ["config"], ["config", "check"]):
        r = run(*args, "--help")
        assert r.exit_code == 0 and "Usage:" in r.output
        if args[-1] not in ("profiles", "config"):
            assert "--config" in r.output


def test_console_script_subprocess(cfg, tmp_path):
    exe = shutil.which("slurm-fair", path=str(Path(sys.executable).parent)) or shutil.which("slurm-fair")
    if exe is None:
        pytest.skip("the slurm-fair console script is not installed (pip install -e .)")
    env = {**os.environ, "SLURM_FAIR_CONFIG": str(cfg)}
    p = subprocess.run([exe, "profiles", "import", "--shipped"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert "imported 77" in p.stdout
    p = subprocess.run([exe, "profiles", "list", "--class", "a3c", "--json"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert {x["gpu_type"] for x in json.loads(p.stdout)} == {"k80", "p100", "v100"}
    p = subprocess.run([exe, "config", "check", "--config", str(tmp_path / "absent.toml")], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "file not found" in p.stderr
