"""The hook recorder (slurm_fair/jobrecord.py): record format, atomic writes, never failing a job."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_fair import hookinstall, jobrecord

REPO = Path(__file__).resolve().parent.parent
SHIM = REPO / "hooks" / "slurm-fair-hook"

SCONTROL_2205 = """JobId=42 JobName=my job
   UserId=alice(1001) GroupId=alice(1001) MCS_label=N/A
   Priority=10000 Nice=0 Account=acct_a QOS=normal WCKey=*wk
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=1 BatchFlag=1 Reboot=0 ExitCode=0:0
   RunTime=00:00:06 TimeLimit=365-00:00:00 TimeMin=N/A
   StartTime=2026-11-23T20:45:01 EndTime=2027-11-23T20:45:01 Deadline=N/A
   TRES=cpu=1,node=1,billing=1,gres/gpu=3,gres/gpu:a100=1,gres/gpu:v100=1
   Comment=x class=cnn 
   StdErr=/dev/null
"""


def _install(tmp_path: Path, scontrol: str = "", extra: str = "") -> Path:
    dest = tmp_path / "hooks"
    hookinstall.install(str(dest), str(tmp_path / "spool"))
    if scontrol or extra:
        with open(dest / "hooks.conf", "a") as f:
            f.write((f"scontrol={scontrol}\n" if scontrol else "") + extra)
    return dest


def _fake_scontrol(tmp_path: Path, body: str) -> Path:
    exe = tmp_path / "scontrol"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(0o755)
    return exe


def test_parse_scontrol_keeps_spaces_in_name_and_comment():
    f = jobrecord.parse_scontrol(SCONTROL_2205)
    assert f["JobName"] == "my job" and f["Comment"] == "x class=cnn" and f["Account"] == "acct_a"
    assert f["Restarts"] == "1" and f["WCKey"] == "*wk"


def test_gpus_from_tres_typed_untyped_and_none():
    assert jobrecord.gpus_from_tres("cpu=1,gres/gpu=3,gres/gpu:a100=1,gres/gpu:v100=1") == ({"a100": 1, "v100": 1}, 3)
    assert jobrecord.gpus_from_tres("cpu=1,gres/gpu:k80=2") == ({"k80": 2}, 2)
    assert jobrecord.gpus_from_tres("cpu=1,node=1") == ({}, 0)


@pytest.mark.parametrize("comment, wckey, name, want", [
    ("x class=cnn y", "wk", "n", "cnn"), ("myclass=a", "*wk", "n", "wk"), ("", "", "n", "n"),
    (",class=q;r", "", "", "q"), ("", "", "", ""),
])
def test_job_class_matches_plan_default_order(comment, wckey, name, want):
    from types import SimpleNamespace

    from slurm_fair.daemon.plan import DEFAULT_CLASS, job_class

    assert jobrecord.job_class(comment, wckey, name) == want
    # the daemon's rule gives the same answer (DEFAULT_CLASS where the hook leaves it empty)
    assert job_class(SimpleNamespace(comment=comment, wckey=wckey, name=name)) == (want or DEFAULT_CLASS)


def test_to_json_round_trips_through_json():
    v = {"a": 'x"\\\n\x01é\udcff', "b": None, "c": 1.5, "d": True, "e": {"z": [1, 2]}, "f": float("nan")}
    back = json.loads(jobrecord.to_json(v))
    assert back == {**v, "f": None}


def test_controller_start_record_from_env_and_scontrol(tmp_path):
    exe = _fake_scontrol(tmp_path, f"cat <<'EOF'\n{SCONTROL_2205}EOF\n")
    env = {"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_JOB_ID": "42", "SLURM_JOB_ACCOUNT": "acct_a",
           "SLURM_JOB_USER": "alice", "SLURM_JOB_UID": "1001", "SLURM_JOB_PARTITION": "gpu",
           "SLURM_JOB_RESTART_COUNT": "1", "SLURM_JOB_NAME": "my job", "SLURM_JOB_NODELIST": "a100-1"}
    now = time.mktime((2026, 11, 23, 20, 45, 2, 0, 0, -1))
    rec = jobrecord.build_record(env, {"scontrol": str(exe)}, now=now)
    assert rec["event"] == "start" and rec["job_id"] == 42 and rec["restart_count"] == 1
    assert rec["account"] == "acct_a" and rec["user"] == "alice" and rec["uid"] == 1001
    assert rec["gpus"] == {"a100": 1, "v100": 1} and rec["gpu_count"] == 3 and rec["gpu_info"] == "scontrol TRES"
    assert rec["class"] == "cnn"
    assert rec["start_time"] == now - 1 and rec["end_time"] is None  # EndTime in the future: not an end


def test_controller_epilog_of_a_requeued_run_is_filed_under_the_previous_restart(tmp_path):
    out = SCONTROL_2205.replace("RunTime=00:00:06", "RunTime=00:00:00").replace(
        "EndTime=2027-11-23T20:45:01", "EndTime=Unknown").replace("JobState=RUNNING", "JobState=COMPLETING")
    exe = _fake_scontrol(tmp_path, f"cat <<'EOF'\n{out}EOF\n")
    env = {"SLURM_SCRIPT_CONTEXT": "epilog_slurmctld", "SLURM_JOB_ID": "42", "SLURM_JOB_RESTART_COUNT": "1",
           "SLURM_JOB_EXIT_CODE2": "0:15", "SLURM_JOB_EXIT_CODE": "15"}
    rec = jobrecord.build_record(env, {"scontrol": str(exe)})
    assert rec["restart_count"] == 0 and rec["requeued"] is True
    assert rec["start_time"] is None and rec["end_time"] is None  # Slurm's times are of the next run
    assert (rec["exit_code"], rec["exit_signal"], rec["exit_status"]) == (0, 15, 15)


def test_scontrol_failure_records_without_gpus_and_says_why(tmp_path):
    exe = _fake_scontrol(tmp_path, "echo 'slurm_load_jobs error: Invalid job id' >&2; exit 1\n")
    env = {"SLURM_SCRIPT_CONTEXT": "epilog_slurmctld", "SLURM_JOB_ID": "7", "SLURM_JOB_EXIT_CODE2": "3:0"}
    rec = jobrecord.build_record(env, {"scontrol": str(exe)})
    assert rec["gpus"] == {} and rec["gpu_count"] is None
    assert rec["gpu_info"].startswith("none: scontrol exited 1: slurm_load_jobs error")
    assert rec["exit_code"] == 3 and rec["event"] == "end"


def test_scontrol_timeout_is_enforced(tmp_path):
    exe = _fake_scontrol(tmp_path, "exec sleep 10\n")
    t0 = time.monotonic()
    rec = jobrecord.build_record({"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_JOB_ID": "7"},
                                 {"scontrol": str(exe), "scontrol_timeout": "0.3"})
    assert time.monotonic() - t0 < 3
    assert rec["gpu_info"] == "none: scontrol timed out after 0.3 s"


def test_slurmd_record_has_node_and_device_indices_and_no_scontrol(tmp_path):
    env = {"SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_ID": "5", "SLURMD_NODENAME": "mixed-1",
           "SLURM_JOB_GPUS": "2,3", "CUDA_VISIBLE_DEVICES": "0,1"}
    rec = jobrecord.build_record(env, {"scontrol": "/nonexistent/scontrol"})
    assert rec["node"] == "mixed-1" and rec["gpu_indices"] == "2,3" and rec["gpu_count"] == 2
    assert jobrecord.record_name(rec) == "5.0.start.prolog_slurmd.mixed-1.json"


@pytest.mark.parametrize("env", [{}, {"SLURM_SCRIPT_CONTEXT": "task_prolog", "SLURM_JOB_ID": "1"},
                                 {"SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_ID": "x"}])
def test_broken_environment_raises_in_build_but_hook_returns_0_and_logs(tmp_path, env):
    with pytest.raises(ValueError):
        jobrecord.build_record(env, {})
    dest = _install(tmp_path)
    assert jobrecord.hook(str(dest / "hooks.conf"), env=env) == 0
    assert not list((tmp_path / "spool").iterdir())
    assert "record not written: ValueError" in (tmp_path / "spool.log").read_text()


def test_write_record_is_atomic_and_leaves_no_temp_file(tmp_path):
    rec = {"job_id": 1, "restart_count": 0, "event": "end", "context": "epilog_slurmctld", "node": "", "x": "é"}
    path = jobrecord.write_record(str(tmp_path / "sp"), rec)
    assert os.listdir(tmp_path / "sp") == ["1.0.end.epilog_slurmctld.json"]
    assert json.loads(Path(path).read_text()) == rec
    rec["x"] = "second"
    jobrecord.write_record(str(tmp_path / "sp"), rec)  # a rerun replaces, never appends
    assert json.loads(Path(path).read_text())["x"] == "second"


def test_shim_exits_0_fast_with_unwritable_spool_and_broken_env(tmp_path):
    dest = _install(tmp_path)
    (dest / "hooks.conf").write_text("spool=/proc/slurm-fair-cannot-write\n")
    env = {"SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_ID": "9"}  # no PATH, as Slurm runs hooks
    for e in (env, {}, {"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_JOB_ID": "9"}):
        t0 = time.monotonic()
        r = subprocess.run([str(dest / jobrecord.SHIM_NAME)], env=e, capture_output=True, text=True, timeout=20)
        assert r.returncode == 0, r.stderr
        assert time.monotonic() - t0 < 5


def test_shim_writes_a_record_and_install_writes_conf(tmp_path):
    dest = tmp_path / "h"
    lines = hookinstall.install(str(dest), str(tmp_path / "spool"), slurm_conf="/etc/x/slurm.conf")
    assert lines.splitlines() == [f"{k}={dest}/slurm-fair-hook" for k in ("PrologSlurmctld", "EpilogSlurmctld")]
    # node hooks are opt-in (issue 29: a node without the shim fails its prolog and drains)
    assert hookinstall.install(str(dest), str(tmp_path / "spool"), slurm_conf="/etc/x/slurm.conf",
                               node_hooks=True).splitlines() == [
        f"{k}={dest}/slurm-fair-hook" for k in ("PrologSlurmctld", "EpilogSlurmctld", "Prolog", "Epilog")]
    assert stat.S_IMODE((dest / "slurm-fair-hook").stat().st_mode) == 0o755
    assert jobrecord.read_conf(str(dest / "hooks.conf")) == {"spool": str(tmp_path / "spool"),
                                                             "slurm_conf": "/etc/x/slurm.conf"}
    env = {"SLURM_SCRIPT_CONTEXT": "epilog_slurmd", "SLURM_JOB_ID": "11", "SLURMD_NODENAME": "n1",
           "SLURM_JOB_EXIT_CODE2": "1:0", "SLURM_JOB_RESTART_COUNT": "2"}
    r = subprocess.run([str(dest / "slurm-fair-hook")], env=env, capture_output=True, timeout=20)
    assert r.returncode == 0
    rec = json.loads((tmp_path / "spool" / "11.2.end.epilog_slurmd.n1.json").read_text())
    assert rec["exit_code"] == 1 and rec["v"] == jobrecord.FORMAT_VERSION


def test_install_rejects_relative_paths(tmp_path):
    with pytest.raises(ValueError, match="DEST: must be an absolute path"):
        hookinstall.install("rel", str(tmp_path))
    with pytest.raises(ValueError, match="--spool: must be an absolute path"):
        hookinstall.install(str(tmp_path / "h"), "spool")


def test_runs_by_path_with_isolated_python_and_imports_no_package():
    code = ("import sys, runpy; sys.argv = ['jobrecord.py']; "
            "runpy.run_path(%r); "
            "print(sorted(k for k in sys.modules if k.startswith(('slurm_fair', 'numpy', 'json', 'subprocess'))))"
            % str(REPO / "slurm_fair" / "jobrecord.py"))
    r = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
    r = subprocess.run([sys.executable, "-I", "-S", str(REPO / "slurm_fair" / "jobrecord.py")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "usage: jobrecord.py hook CONF" in r.stderr


def test_the_installer_runs_by_path_too_as_the_testbed_runs_it(tmp_path):
    """hookinstall.py (split from jobrecord.py so the hook file holds only what a hook call needs) installs from
    an isolated python without the package: the testbed's chroot has none."""
    dest = tmp_path / "hooks"
    r = subprocess.run([sys.executable, "-I", "-S", str(REPO / "slurm_fair" / "hookinstall.py"), "install", str(dest),
                        "--spool", str(tmp_path / "spool")], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout == hookinstall.slurm_conf_lines(str(dest))
    assert (dest / "jobrecord.py").read_bytes() == (REPO / "slurm_fair" / "jobrecord.py").read_bytes()
    assert "spool=" + str(tmp_path / "spool") in (dest / "hooks.conf").read_text()
    r = subprocess.run([sys.executable, "-I", "-S", str(REPO / "slurm_fair" / "hookinstall.py"), "install"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "DEST: must be an absolute path" in r.stderr


def test_cli_hooks_install(tmp_path):
    from click.testing import CliRunner

    from slurm_fair.cli import main

    r = CliRunner().invoke(main, ["hooks", "install", str(tmp_path / "h"), "--spool", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    assert f"PrologSlurmctld={tmp_path}/h/slurm-fair-hook" in r.output
    r = CliRunner().invoke(main, ["hooks", "install", "relative/dir"])
    assert r.exit_code == 2 and "error: DEST: must be an absolute path (got 'relative/dir')" in r.output


def _site_program(path: Path, rc: int) -> Path:
    """A site hook that writes its context, job id and arguments to ``<path>.out`` and exits ``rc``."""
    path.write_text("#!/bin/sh\n"
                    f'echo "$SLURM_SCRIPT_CONTEXT $SLURM_JOB_ID $*" >> "{path}.out"\n'
                    f"exit {rc}\n")
    path.chmod(0o755)
    return path


def test_chained_site_hook_runs_after_the_record_with_its_exit_status(tmp_path):
    site = _site_program(tmp_path / "site-prolog", 3)
    dest = tmp_path / "h"
    hookinstall.install(str(dest), str(tmp_path / "spool"), chain={"PrologSlurmctld": str(site)})
    assert hookinstall.chained(str(dest)) == {"prolog_slurmctld": str(site)}
    env = {"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_JOB_ID": "21"}
    r = subprocess.run([str(dest / "slurm-fair-hook"), "a1"], env=env, capture_output=True, timeout=20)
    assert r.returncode == 3  # the site's own status: its way of requeueing a job is kept
    assert (tmp_path / "site-prolog.out").read_text() == "prolog_slurmctld 21 a1\n"
    assert (tmp_path / "spool" / "21.0.start.prolog_slurmctld.json").exists()  # recorded first
    # other contexts have no chain: exit 0 as before
    r = subprocess.run([str(dest / "slurm-fair-hook")], env={"SLURM_SCRIPT_CONTEXT": "epilog_slurmctld",
                                                           "SLURM_JOB_ID": "21"}, capture_output=True, timeout=20)
    assert r.returncode == 0 and (tmp_path / "site-prolog.out").read_text().count("\n") == 1


def test_reinstall_keeps_chains_and_key_equals_nothing_removes_one(tmp_path):
    pro = _site_program(tmp_path / "p", 0)
    epi = _site_program(tmp_path / "e", 0)
    dest = tmp_path / "h"
    hookinstall.install(str(dest), str(tmp_path / "s"), chain={"Prolog": str(pro), "epilog_slurmd": str(epi)})
    hookinstall.install(str(dest), str(tmp_path / "s"))  # an upgrade: the site's hooks keep running
    assert hookinstall.chained(str(dest)) == {"prolog_slurmd": str(pro), "epilog_slurmd": str(epi)}
    hookinstall.install(str(dest), str(tmp_path / "s"), chain={"Prolog": ""})
    assert hookinstall.chained(str(dest)) == {"epilog_slurmd": str(epi)}


@pytest.mark.parametrize("key,program,field", [
    ("Prologue", "/bin/true", "is not one of PrologSlurmctld"),
    ("Prolog", "/etc/slurm/prolog.d/*", "not a pattern"),
    ("Prolog", "relative", "must be one absolute path"),
    ("Epilog", "/nonexistent/site-epilog", "not an executable file"),
])
def test_chain_rejects_bad_input_before_writing_anything(tmp_path, key, program, field):
    dest = tmp_path / "h"
    with pytest.raises(ValueError, match="--chain: .*" + field.replace("*", r"\*")):
        hookinstall.install(str(dest), str(tmp_path / "s"), chain={key: program})
    assert not dest.exists()


def test_chain_refuses_the_shim_itself(tmp_path):
    dest = tmp_path / "h"
    hookinstall.install(str(dest), str(tmp_path / "s"))
    with pytest.raises(ValueError, match="slurm-fair's own hook"):
        hookinstall.install(str(dest), str(tmp_path / "s"), chain={"Epilog": str(dest / "slurm-fair-hook")})


def test_shim_linked_from_a_prolog_folder_finds_its_own_folder(tmp_path):
    dest = tmp_path / "h"
    hookinstall.install(str(dest), str(tmp_path / "spool"))
    pd = tmp_path / "prolog.d"
    pd.mkdir()
    (pd / "50-slurm-fair").symlink_to(dest / "slurm-fair-hook")
    env = {"SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_ID": "5", "SLURMD_NODENAME": "n2"}
    r = subprocess.run([str(pd / "50-slurm-fair")], env=env, capture_output=True, timeout=20)
    assert r.returncode == 0
    assert (tmp_path / "spool" / "5.0.start.prolog_slurmd.n2.json").exists()


def test_uninstall_gives_back_the_chained_lines_and_leaves_no_trace(tmp_path):
    site = _site_program(tmp_path / "site-epilogctld", 0)
    dest = tmp_path / "h"
    hookinstall.install(str(dest), str(tmp_path / "spool"), chain={"EpilogSlurmctld": str(site)})
    subprocess.run([str(dest / "slurm-fair-hook")], env={"SLURM_SCRIPT_CONTEXT": "epilog_slurmctld",
                                                         "SLURM_JOB_ID": "8"}, capture_output=True, timeout=20)
    want = ["# PrologSlurmctld= (remove the line)", f"EpilogSlurmctld={site}",
            "# Prolog= (remove the line)", "# Epilog= (remove the line)"]
    assert hookinstall.uninstall(str(dest), dry_run=True).splitlines() == want
    assert (dest / "slurm-fair-hook").exists()
    assert hookinstall.uninstall(str(dest)).splitlines() == want
    assert not dest.exists()  # the folder held only what install put there (and the bytecode cache)
    assert (tmp_path / "spool" / "8.0.end.epilog_slurmctld.json").exists()  # records are kept
    with pytest.raises(ValueError, match="DEST: no slurm-fair-hook"):
        hookinstall.uninstall(str(dest))


def test_cli_hooks_chain_and_uninstall(tmp_path):
    from click.testing import CliRunner

    from slurm_fair.cli import main

    site = _site_program(tmp_path / "site", 0)
    d = str(tmp_path / "h")
    r = CliRunner().invoke(main, ["hooks", "install", d, "--spool", str(tmp_path / "s"),
                                  "--chain", f"PrologSlurmctld={site}"])
    assert r.exit_code == 0, r.output
    assert f"# prolog_slurmctld: runs {site} after the record" in r.output
    r = CliRunner().invoke(main, ["hooks", "install", d, "--chain", "PrologSlurmctld"])
    assert r.exit_code == 2 and "--chain: expected KEY=PROGRAM (got 'PrologSlurmctld')" in r.output
    r = CliRunner().invoke(main, ["hooks", "uninstall", d, "--dry-run"])
    assert r.exit_code == 0 and f"PrologSlurmctld={site}" in r.output and Path(d).exists()
    r = CliRunner().invoke(main, ["hooks", "uninstall", d])
    assert r.exit_code == 0 and "removed the hooks" in r.output and not Path(d).exists()


def test_stray_bytes_in_the_environment_become_replacement_characters(tmp_path):
    exe = _fake_scontrol(tmp_path, f"cat <<'EOF'\n{SCONTROL_2205}EOF\n")
    name = os.fsdecode(b"bad\xff\x1b[31mname")  # how os.environ holds a job name that is not UTF-8
    assert "\udcff" in name
    env = {"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_JOB_ID": "42", "SLURM_JOB_NAME": name,
           "SLURM_JOB_ACCOUNT": "acct_a"}
    rec = jobrecord.build_record(env, {"scontrol": str(exe)})
    assert rec["job_name"] == "bad\ufffd\x1b[31mname"
    text = jobrecord.to_json(rec)
    text.encode("utf-8")  # valid UTF-8: storable
    assert json.loads(text)["job_name"] == "bad\ufffd\x1b[31mname"
    assert jobrecord.clean_text("plain") == "plain" and jobrecord.clean_text("\ud800x\udfff") == "\ufffdx\ufffd"


def test_submit_time_is_slurms_and_never_in_the_future(tmp_path):
    out = SCONTROL_2205.replace("   StartTime=", "   SubmitTime=2026-11-23T20:40:00 EligibleTime=2026-11-23T20:40:00\n"
                                "   StartTime=")
    exe = _fake_scontrol(tmp_path, f"cat <<'EOF'\n{out}EOF\n")
    env = {"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_JOB_ID": "42", "SLURM_JOB_RESTART_COUNT": "1"}
    now = time.mktime((2026, 11, 23, 20, 45, 2, 0, 0, -1))
    rec = jobrecord.build_record(env, {"scontrol": str(exe)}, now=now)
    assert rec["submit_time"] == time.mktime((2026, 11, 23, 20, 40, 0, 0, 0, -1)) == now - 302
    # a clock far behind Slurm's (the SubmitTime would be in the future): not recorded
    assert jobrecord.build_record(env, {"scontrol": str(exe)}, now=now - 3600)["submit_time"] is None
    # no SubmitTime in the output (or scontrol failed): None, the record is still written
    exe2 = _fake_scontrol(tmp_path, f"cat <<'EOF'\n{SCONTROL_2205}EOF\n")
    assert jobrecord.build_record(env, {"scontrol": str(exe2)}, now=now)["submit_time"] is None


# ---- scontrol text a user can put line breaks into (real captures: tests/fixtures/slurm-json/<v>/scontrol_job.txt)

FIX = REPO / "tests" / "fixtures" / "slurm-json"


def _captured(version: str) -> list[str]:
    text = (FIX / version / "scontrol_job.txt").read_text()
    chunks = [c if c.startswith("JobId=") else "JobId=" + c for c in text.split("\nJobId=") if c.strip()]
    return chunks if text.startswith("JobId=") else []


def _gpu_job(version: str) -> str:
    """A captured job that got typed GPUs, none of them a100 (the type the forged payloads claim)."""
    key = "TRES=" if version == "22.05" else "AllocTRES="
    return next(c for c in _captured(version) if f"   {key}" in c and "gres/gpu:" in (line := c.split(f"   {key}")[1]
                                                                                   .split("\n")[0]) and "a100" not in line)


@pytest.mark.parametrize("version", ["22.05", "24.11", "26.05"])
def test_every_captured_job_parses_with_no_problem(version):
    jobs = _captured(version)
    assert len(jobs) >= 12
    for chunk in jobs:
        name = chunk.split(" JobName=", 1)[1].split("\n", 1)[0]
        for given in (name, None):
            fields, problem = jobrecord.parse_scontrol_checked(chunk, given)
            assert problem == "" and fields["JobName"] == name and fields["JobState"], (chunk, problem)
            assert fields["Account"].startswith("acct_") and fields["Restarts"].isdigit()
            key = "TRES" if version == "22.05" else "AllocTRES"
            assert fields[key] == chunk.split(f"   {key}=")[1].split("\n")[0]


FORGED = "gres/gpu=8,gres/gpu:a100=8"


def _forge(chunk: str, where: str, payload: str) -> tuple[str, str]:
    """(text, the job name) with ``payload`` put where a user can: the name, the comment, the work dir, the
    output path, or the wckey (the end of the Priority line)."""
    name = chunk.split(" JobName=", 1)[1].split("\n", 1)[0]
    if where == "name":
        return chunk.replace(f" JobName={name}\n", f" JobName={name}{payload}\n", 1), name + payload
    if where == "wckey":
        line = next(ln for ln in chunk.split("\n") if ln.startswith("   Priority="))
        return chunk.replace(line, line + " WCKey=*w" + payload, 1), name
    key = {"comment": "   WorkDir=", "workdir": "   WorkDir=", "stdout": "   StdOut="}[where]
    line = next(ln for ln in chunk.split("\n") if ln.startswith(key))
    new = line + payload if where != "comment" else line + "\n   Comment=x" + payload
    return chunk.replace(line, new, 1), name


PAYLOADS = [
    f"\n   AllocTRES={FORGED}",  # 22.05 prints no AllocTRES line: the issue's example
    f"\n   TRES={FORGED}\n   AllocTRES={FORGED}",
    f"\n   NumNodes=1\n   ReqTRES=x\n   AllocTRES={FORGED}",
    f"\n   UserId=root(0)\n   Priority=1 Account=victim\n   JobState=RUNNING\n   Requeue=1 Restarts=0\n"
    f"   NumNodes=1\n   TRES={FORGED}\n   ReqTRES=x\n   AllocTRES={FORGED}\n   Features=(null)",  # a whole header
    f"\n   Features=(null)\nJobId=9 JobName=y\n   UserId=root(0)\n   TRES={FORGED}",
    f" AllocTRES={FORGED} TRES={FORGED} Account=victim",  # no line break: tokens after the value
    f"\n   SLUID=sX\n   UserId=root(0)\n   AllocTRES={FORGED}",  # 26.05's first line, forged
]


def test_26_05_sluid_line_before_userid_is_slurms_own():
    """Slurm 26.05 writes ``SLUID=`` (the job's Slurm-wide id) between the name and ``UserId=``: the header is
    still trusted there (before, the hook read no GPUs and no times from any 26.05 job), and only there."""
    chunk = _gpu_job("26.05")
    assert chunk.split("\n")[1].startswith("   SLUID=") and chunk.split("\n")[2].startswith("   UserId=")
    fields, problem = jobrecord.parse_scontrol_checked(chunk, None)
    assert problem == "" and fields["SubmitTime"].startswith("20") and fields["Account"].startswith("acct_")
    assert jobrecord.gpus_from_tres(fields["AllocTRES"])[1] >= 1
    lines = chunk.split("\n")
    swapped = "\n".join([lines[0], lines[2], lines[1], *lines[3:]])  # SLUID after UserId: not Slurm's order
    fields, problem = jobrecord.parse_scontrol_checked(swapped, None)
    assert "SLUID line where Slurm writes none" in problem and "AllocTRES" not in fields
    no_user = "\n".join([lines[0], lines[1], *lines[3:]])  # SLUID, then not UserId
    fields, problem = jobrecord.parse_scontrol_checked(no_user, None)
    assert problem and "AllocTRES" not in fields


@pytest.mark.parametrize("version", ["22.05", "24.11", "26.05"])
@pytest.mark.parametrize("where", ["name", "comment", "workdir", "stdout", "wckey"])
@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_line_break_in_a_user_field_never_forges_a_field(version, where, payload):
    chunk = _gpu_job(version)
    real, _ = jobrecord.parse_scontrol_checked(chunk, None)
    text, name = _forge(chunk, where, payload)
    for given in (name, None):
        fields, problem = jobrecord.parse_scontrol_checked(text, given)
        typed, count = jobrecord.gpus_from_tres(fields.get("AllocTRES") or fields.get("TRES") or "")
        assert count != 8 and "a100" not in typed and fields.get("Account") in (None, real["Account"]), (text, fields)
        if problem:  # refused as a whole: no header field at all
            assert not {"TRES", "AllocTRES", "Account", "JobState", "Restarts"} & set(fields)
        else:
            for k in ("TRES", "AllocTRES", "Account", "JobState", "Restarts", "StartTime"):
                assert fields.get(k) == real.get(k)
    if where == "name":  # the hook knows the name: nothing is lost, the name keeps its line breaks
        fields, problem = jobrecord.parse_scontrol_checked(text, name)
        assert problem == "" and fields["JobName"] == name and fields == {**real, "JobName": name}


def test_hook_record_with_a_forged_line_in_the_name_and_stray_bytes(tmp_path):
    chunk = _gpu_job("22.05")
    raw_name = b"x\xff\n   AllocTRES=gres/gpu=8"
    name = chunk.split(" JobName=", 1)[1].split("\n", 1)[0]
    out = tmp_path / "out.txt"
    out.write_bytes(chunk.encode().replace(f" JobName={name}\n".encode(), b" JobName=" + raw_name + b"\n", 1))
    exe = _fake_scontrol(tmp_path, f"cat '{out}'\n")
    env = {"SLURM_SCRIPT_CONTEXT": "epilog_slurmctld", "SLURM_JOB_ID": "3", "SLURM_JOB_NAME": os.fsdecode(raw_name)}
    rec = jobrecord.build_record(env, {"scontrol": str(exe)})
    assert rec["gpus"] == {"v100": 1} and rec["gpu_count"] == 1 and rec["gpu_info"] == "scontrol TRES"
    assert rec["job_name"] == rec["class"] == "x\ufffd\n   AllocTRES=gres/gpu=8"  # its comment has no class= token
    json.loads(jobrecord.to_json(rec))
    # without SLURM_JOB_NAME the same text is refused: no GPUs, and the record says why
    rec = jobrecord.build_record({k: v for k, v in env.items() if k != "SLURM_JOB_NAME"}, {"scontrol": str(exe)})
    assert rec["gpus"] == {} and rec["gpu_info"].startswith("none: scontrol: a AllocTRES line where Slurm writes none")


def test_the_hook_logs_a_refused_environment_with_stray_bytes_and_returns_0(tmp_path):
    conf = tmp_path / "hooks.conf"
    conf.write_text(f"spool={tmp_path / 'spool'}\nlog={tmp_path / 'hook.log'}\n")
    env = {"SLURM_SCRIPT_CONTEXT": os.fsdecode(b"prolog_slurmctld\xff"), "SLURM_JOB_ID": os.fsdecode(b"4\xfe")}
    assert jobrecord.hook(str(conf), env) == 0  # the log line used to raise UnicodeEncodeError out of the hook
    line = (tmp_path / "hook.log").read_text()
    assert "job 4\\udcfe prolog_slurmctld\\udcff: record not written: ValueError: SLURM_SCRIPT_CONTEXT" in line


def test_the_spool_for_two_users_is_slurmusers_with_the_daemons_group_2770(tmp_path):
    """Issue 29 item 8: hooks install created the spool root-owned 0755, so SlurmUser (which runs the controller
    hooks) could not write it. With --owner/--group: SlurmUser's, the daemon's group, 2770; a record the hook
    writes there inherits the group, so the daemon can read and remove it."""
    import grp
    import pwd

    owner = pwd.getpwnam("nobody")
    group = grp.getgrgid(owner.pw_gid)
    spool = tmp_path / "spool"
    hookinstall.install(str(tmp_path / "h"), str(spool), owner="nobody", group=group.gr_name)
    st = spool.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (owner.pw_uid, group.gr_gid, 0o2770)
    with pytest.raises(ValueError, match="--owner: no such user"):
        hookinstall.install(str(tmp_path / "h"), str(tmp_path / "s2"), owner="no-such-user-here")
    with pytest.raises(ValueError, match="--group: no such group"):
        hookinstall.install(str(tmp_path / "h"), str(tmp_path / "s3"), group="no-such-group-here")
    plain = tmp_path / "plain"
    hookinstall.install(str(tmp_path / "h"), str(plain))
    assert stat.S_IMODE(plain.stat().st_mode) == 0o755  # one user runs hooks and daemon: as before


def test_the_temporary_record_file_never_follows_a_planted_link(tmp_path, monkeypatch):
    """Issue 30 item 8: the temporary file was ``.<record>.<pid>.tmp`` opened with O_TRUNC: a symlink planted
    there under that name was followed. Now its name is random and it is created new, never through a link."""
    spool = tmp_path / "spool"
    spool.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    rec = {"job_id": 7, "restart_count": 0, "event": "start", "context": "prolog_slurmctld"}
    name = jobrecord.record_name(rec)
    (spool / f".{name}.{os.getpid()}.tmp").symlink_to(victim)  # the old, guessable name
    monkeypatch.setattr(os, "urandom", lambda n: b"\x00" * n)
    (spool / f".{name}.{os.getpid()}.{'00' * 8}.tmp").symlink_to(victim)  # even the exact new name
    with pytest.raises(OSError):
        jobrecord.write_record(str(spool), rec)
    assert victim.read_text() == "keep me\n"
    monkeypatch.undo()
    path = jobrecord.write_record(str(spool), rec)
    assert json.loads(Path(path).read_text())["job_id"] == 7 and victim.read_text() == "keep me\n"
