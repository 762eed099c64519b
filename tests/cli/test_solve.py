"""``slurm-fair solve`` end to end: click CliRunner and the installed console script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_fair.cli import main
from slurm_fair.cli.table import render

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "etc" / "examples"
PAPER = str(EXAMPLES / "paper-3.1.json")
PROPS = {"sharing_incentive", "envy_free", "pareto_efficient", "equal_throughput", "strategy_proof_probe", "adjacent_types"}


def invoke(*args, input=None):
    return CliRunner().invoke(main, list(args), input=input)


def test_help_documents_the_options():
    r = invoke("solve", "--help")
    assert r.exit_code == 0
    for word in ("--policy", "--input", "--json", "--solver", "--check", "oef-coop", "standard input"):
        assert word in r.output


def test_paper_eq6_cooperative_json():
    r = invoke("solve", "--policy", "oef-coop", "--input", PAPER, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["policy"] == "oef-coop"
    a = out["allocation"]
    assert [[a["u1"]["gpu1"], a["u1"]["gpu2"]], [a["u2"]["gpu1"], a["u2"]["gpu2"]]] == [
        pytest.approx([1, 0.25], abs=1e-5),
        pytest.approx([0, 0.75], abs=1e-5),
    ]
    assert out["classes"]["u1"]["job"]["gpu2"] == pytest.approx(0.25, abs=1e-5)
    assert out["throughput"] == {"u1": pytest.approx(1.5, abs=1e-5), "u2": pytest.approx(3.75, abs=1e-5)}
    assert out["total_throughput"] == pytest.approx(5.25, abs=1e-5)
    assert out["solve_seconds"] >= 0
    assert "properties" not in out


def test_paper_eq6_cooperative_check_json():
    r = invoke("solve", "-p", "oef-coop", "-i", PAPER, "--json", "--check")
    assert r.exit_code == 0, r.output
    props = json.loads(r.output)["properties"]
    assert PROPS <= set(props)
    # Theorem 5.1: cooperative OEF is envy-free, sharing-incentive, Pareto-efficient; §3.1: it is not
    # strategy-proof (u1 reporting 4 instead of 2 on gpu2 raises its true throughput 1.5 -> 1.75)
    assert props["envy_free"] is True
    assert props["sharing_incentive"] is True
    assert props["pareto_efficient"] is True
    assert props["adjacent_types"] is True
    assert props["equal_throughput"] is False
    assert props["strategy_proof_probe"] is False
    detail = json.loads(r.output)["property_details"]["strategy_proof_probe"]["detail"]
    assert "u1" in detail


def test_paper_eq6_table_output():
    r = invoke("solve", "-p", "oef-coop", "-i", PAPER, "--check")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith("policy: oef-coop")
    assert "solve time:" in lines[0]
    row = next(line for line in lines if line.startswith("u1 "))
    assert row.split() == ["u1", "1.000", "0.250", "1.250", "1.500"]
    total = next(line for line in lines if line.startswith("total"))
    assert total.split()[-1] == "5.250"
    prop = {line.split()[0]: line.split()[1] for line in lines if line.split() and line.split()[0] in PROPS}
    assert prop["envy_free"] == "yes" and prop["strategy_proof_probe"] == "NO"


def test_noncooperative_oef_weighted_example_and_probe():
    r = invoke("solve", "-p", "oef-noncoop", "-i", str(EXAMPLES / "paper-4.2.3-weighted.json"), "--json", "--check")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    a = out["allocation"]
    assert a["u1"]["gpu1"] == pytest.approx(1, abs=1e-5)
    assert a["u1"]["gpu2"] == pytest.approx(1 / 3, abs=1e-5)
    assert a["u2"]["gpu2"] == pytest.approx(2 / 3, abs=1e-5)
    assert out["throughput"]["u2"] == pytest.approx(2 * out["throughput"]["u1"], rel=1e-5)
    # Theorem 5.4 (no gain from inflating fast types) and eq. 9c; sandbagging (over-reporting the slowest
    # type) pays, outside the theorem's lie model, and the probe says so
    assert out["properties"]["strategy_proof_probe"] is False
    detail = out["property_details"]["strategy_proof_probe"]["detail"]
    assert "inflating fast types: no gain from" in detail
    assert "sandbagging the fast ones): u" in detail and "its slowest type" in detail
    assert "strategy-proof against inflating fast types (Thm 5.4's lie model); not against sandbagging them" in detail
    assert out["properties"]["equal_throughput"] is True
    assert out["properties"]["pareto_efficient"] is True


def test_noncooperative_oef_multiclass_example():
    r = invoke("solve", "-p", "oef-noncoop", "-i", str(EXAMPLES / "paper-4.2.4-multiclass.json"), "--json")
    assert r.exit_code == 0, r.output
    c = json.loads(r.output)["classes"]
    t = 45 / 37
    assert c["u1"]["resnet"]["gpu2"] == pytest.approx((t - 1) / 2, abs=1e-4)
    assert c["u1"]["bert"]["gpu2"] == pytest.approx(t / 3, abs=1e-4)
    assert c["u2"]["lm"]["gpu2"] == pytest.approx(t / 5, abs=1e-4)


def test_three_types_example_from_stdin_all_policies_feasible():
    text = (EXAMPLES / "a100-v100-k80.json").read_text()
    for policy in ("oef-noncoop", "oef-coop", "max-throughput", "equal-share", "gavel", "gandiva-fair"):
        r = invoke("solve", "-p", policy, "-i", "-", "--json", input=text)
        assert r.exit_code == 0, (policy, r.output)
        out = json.loads(r.output)
        for g, cap in {"a100": 4, "v100": 6, "k80": 6}.items():
            assert sum(row[g] for row in out["allocation"].values()) <= cap + 1e-6, policy
        assert sum(out["classes"]["acct_c"]["cyclegan"].values()) <= 2 + 1e-6, policy  # its demand


def test_table_shows_classes_of_multiclass_tenants():
    r = invoke("solve", "-p", "oef-noncoop", "-i", str(EXAMPLES / "a100-v100-k80.json"))
    assert r.exit_code == 0, r.output
    assert "class" in r.output.splitlines()[2]
    assert any(line.split()[:1] == ["cyclegan"] for line in r.output.splitlines())


# --------------------------------------------------------------------------- errors


def test_bad_field_names_field_and_value(tmp_path):
    bad = json.loads(Path(PAPER).read_text())
    bad["tenants"][1]["weight"] = -3
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad))
    r = invoke("solve", "-p", "oef-coop", "-i", str(p))
    assert r.exit_code == 2
    assert r.output.strip() == "error: tenants[1].weight: must be > 0 (got -3)"


def test_unknown_gpu_type_in_throughput(tmp_path):
    bad = json.loads(Path(PAPER).read_text())
    bad["tenants"][0]["classes"][0]["throughput"]["h100"] = 9
    r = invoke("solve", "-p", "oef-coop", "-i", "-", input=json.dumps(bad))
    assert r.exit_code == 2
    assert r.output.startswith("error: tenants[0].classes[0].throughput.h100: unknown GPU type")
    assert "(got 'h100')" in r.output


def test_unknown_policy():
    r = invoke("solve", "-p", "fifo", "-i", PAPER)
    assert r.exit_code == 2
    assert r.output.startswith("error: policy: unknown policy")
    assert "(got 'fifo')" in r.output


def test_missing_file_and_invalid_json(tmp_path):
    r = invoke("solve", "-i", str(tmp_path / "nope.json"))
    assert r.exit_code == 2
    assert r.output.startswith("error: --input: cannot read file") and "nope.json" in r.output
    p = tmp_path / "broken.json"
    p.write_text('{"gpu_types": {"a": 1},\n "tenants": [}')
    r = invoke("solve", "-i", str(p))
    assert r.exit_code == 2
    assert "error: --input: invalid JSON" in r.output and "line 2" in r.output
    assert "Traceback" not in r.output


def test_missing_input_option_is_a_usage_error():
    r = invoke("solve")
    assert r.exit_code == 2
    assert "--input" in r.output


# --------------------------------------------------------------------------- the installed console script


def _console_script() -> str:
    here = Path(sys.executable).parent / "slurm-fair"
    if here.exists():
        return str(here)
    found = shutil.which("slurm-fair")
    assert found, "the slurm-fair console script is not installed (pip install -e .)"
    return found


def test_installed_console_script_subprocess():
    exe = _console_script()
    p = subprocess.run(
        [exe, "solve", "--policy", "oef-coop", "--input", PAPER, "--json", "--check"],
        capture_output=True, text=True, timeout=120, env={**os.environ},
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["total_throughput"] == pytest.approx(5.25, abs=1e-5)
    assert out["properties"]["envy_free"] is True
    p = subprocess.run([exe, "solve", "--input", "/nonexistent/x.json"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr.startswith("error: --input: cannot read file")
    assert "Traceback" not in p.stderr



@pytest.mark.parametrize("solver", [None, "HIGHS"])
def test_every_policy_json_through_the_console_script_is_pure_json(solver):
    """stdout of the installed script is exactly the JSON document: solver libraries that print from C
    (highspy's "Running HiGHS …" banner on fd 1) must not reach it."""
    from slurm_fair import policies

    exe = _console_script()
    for name in policies.names():
        args = [exe, "solve", "--policy", name, "--input", PAPER, "--json"] + (["--solver", solver] if solver else [])
        p = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, (name, p.stderr)
        out = json.loads(p.stdout)  # raises if anything but the document is on stdout
        assert out["policy"] == name
        assert "Running HiGHS" not in p.stderr  # silenced at the source, not just moved


def test_c_level_prints_go_to_stderr_under_the_console_script():
    """protect_stdout(): what C code writes to fd 1 lands on stderr, sys.stdout still reaches stdout."""
    code = (
        "import os, sys\n"
        "from slurm_fair.stdio import protect_stdout\n"
        "protect_stdout()\n"
        "os.write(1, b'from-c\\n')\n"
        "print('from-python')\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "from-python\n"
    assert p.stderr == "from-c\n"


# --------------------------------------------------------------------------- table renderer


def test_render_aligns_numbers_right_and_text_left():
    s = render(["name", "gpus", "note"], [["a", "1.5", "x"], ["longer", "10.25", ""], ["b", "-", None]])
    assert s.splitlines() == [
        "name     gpus  note",
        "------  -----  ----",
        "a         1.5  x",
        "longer  10.25",
        "b           -",
    ]


def test_render_explicit_right_and_short_rows():
    s = render(["k", "v"], [["x", "1"], ["y"]], right=())
    assert s.splitlines() == ["k  v", "-  -", "x  1", "y"]
    assert render(["a", "b"], [], right=[1]).splitlines() == ["a  b", "-  -"]


def test_unknown_solver_is_an_input_error():
    r = invoke("solve", "-p", "oef-noncoop", "-i", PAPER, "--solver", "BOGUS")
    assert r.exit_code == 2
    assert r.output.startswith("error: solver: ") and "(got 'BOGUS')" in r.output


def test_solver_choice_gives_the_same_allocation():
    outs = []
    for solver in ("ECOS", "HIGHS"):
        r = invoke("solve", "-p", "oef-noncoop", "-i", PAPER, "--solver", solver, "--json")
        assert r.exit_code == 0, r.output
        outs.append(json.loads(r.output))
    assert outs[0]["total_throughput"] == pytest.approx(outs[1]["total_throughput"], abs=1e-5)
    # eq. 9 on eq. 6: u1 = 1 + 2a = u2 = 5(1 - a) -> a = 4/7, both 15/7
    assert outs[1]["throughput"]["u1"] == pytest.approx(15 / 7, abs=1e-5)


def test_type_demand_example_check_table_and_json():
    path = str(EXAMPLES / "type-demand.json")
    r = invoke("solve", "-p", "oef-coop", "-i", path, "--check")
    assert r.exit_code == 0, r.output
    assert "demand capped" in r.output and "a100<=3" in r.output  # the note names the class and its caps
    assert "every class within its demand and its per-type caps" in r.output
    assert "uncapped class(es)" in r.output
    r = invoke("solve", "-p", "oef-coop", "-i", path, "--check", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert set(out["properties"]) == PROPS | {"capacity", "demand"}  # the JSON keys stay the same
    assert out["properties"]["demand"] is True and out["properties"]["envy_free"] is True
    assert "at their demand or type caps not compared" in out["property_details"]["envy_free"]["detail"]
    assert out["classes"]["acct_b"]["lm-bs5"]["a100"] == 0 and out["classes"]["acct_b"]["lm-bs5"]["v100"] <= 3 + 1e-9


def test_bad_type_demand_is_a_clear_input_error():
    bad = {"gpu_types": {"v100": 1}, "tenants": [{"name": "a", "classes": [
        {"name": "c", "throughput": {"v100": 1}, "type_demand": {"v100": -2}}]}]}
    r = invoke("solve", "-i", "-", input=json.dumps(bad))
    assert r.exit_code == 2
    assert "error: tenants[0].classes[0].type_demand.v100: must be >= 0 (got -2)" in r.output
    assert "Traceback" not in r.output
