"""Harvesting reports from job comments and end records into the store (a hand-built snapshot: pure data)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from slurm_fair import config
from slurm_fair.cluster.base import Account, Job, Node, Snapshot
from slurm_fair.daemon.harvest import harvest
from slurm_fair.profiling import agent
from slurm_fair.store import Store

NODES = (Node("v100-1", ("MIXED",), ("gpu",), {"v100": 4}, {}), Node("k80-1", ("IDLE",), ("gpu",), {"k80": 4}, {}))


def job(jid, comment, alloc, account="acct_a", state="RUNNING", gpus=1):
    return Job(job_id=jid, name="j", account=account, user="u", partition="gpu", state=state, reason="",
               priority=1, submit_time=1, start_time=2, gpus_per_node=gpus, nodes=1, gpu_type=None,
               gpus_allocated=alloc, comment=comment)


def snap(*jobs):
    return Snapshot("22.05.8", 0.0, NODES, tuple(jobs), (Account("acct_a", 1, {}),), ("gpu",))


CFG = config.from_dict({"profiling": {"max_throughput": 1000.0}})


def values(store):
    return {(r.account, r.cls, r.gpu_type, r.source): (r.throughput, r.samples, r.rejected)
            for r in store.profile_values()}


def test_running_jobs_reports_taken_once_per_number_per_gpu_and_by_source():
    s = Store(":memory:")
    jobs = [job(1, "class=cnn fair:tput=10@1", {"v100": 1}),
            # 4 steps/s per GPU; fair:profile on two GPUs is not a profiling run (one GPU): a job report
            job(2, "class=cnn fair:profile fair:tput=8@3", {"k80": 2}, gpus=2),
            job(3, "class=cnn fair:tput=10@1", {}, state="PENDING"),  # not running: ignored
            job(4, "class=rnn fair:profile fair:tput=6@1", {"k80": 1})]  # a profiling run
    assert harvest(s, snap(*jobs), CFG, None, now=100.0) == {"accepted": 3, "rejected": 0, "refused": 0}
    assert values(s) == {("acct_a", "cnn", "v100", "harvested"): (10.0, 1, 0),
                         ("acct_a", "cnn", "k80", "harvested"): (4.0, 1, 0),
                         ("acct_a", "rnn", "k80", "measured"): (6.0, 1, 0)}
    assert harvest(s, snap(*jobs), CFG, None, now=200.0) == {"accepted": 0, "rejected": 0, "refused": 0}
    jobs[0] = job(1, "class=cnn fair:tput=20@2", {"v100": 1})
    harvest(s, snap(*jobs), CFG, None, now=300.0)
    assert values(s)[("acct_a", "cnn", "v100", "harvested")] == (15.0, 2, 0)


@pytest.mark.parametrize("comment, alloc, why", [
    ("class=cnn fair:tput=5000@1", {"v100": 1}, "max_throughput"),
    ("class=cnn fair:tput=nan@1", {"v100": 1}, "not a plain number"),
    ("class=cnn fair:tput=-3@1", {"v100": 1}, "not a plain number"),
    ("class=cnn fair:tput=0@1", {"v100": 1}, "> 0"),
    ("class=cnn fair:tput=\u0663@1", {"v100": 1}, "ASCII digits"),  # Arabic-Indic 3: float() takes it
    ("class=cnn fair:tput=1_0@1", {"v100": 1}, "ASCII digits"),
    ("class=cnn fair:tput=5@\u00b2", {"v100": 1}, "whole number"),  # '²'.isdigit() is True, int('²') raises
    ("class=cnn fair:tput=5@\u0663", {"v100": 1}, "whole number"),  # int('٣') is 3
    ("class=cnn fair:tput=5@0", {"v100": 1}, "whole number"),
    ("class=cnn fair:tput=5@99999999999", {"v100": 1}, "whole number"),
    ("class=cnn fair:tput=@1", {"v100": 1}, "empty"),
    ("class=cnn fair:tput=3@x", {"v100": 1}, "whole number"),
    ("class=cnn fair:tput=3@1", {"v100": 1, "k80": 1}, "several GPU types"),
    ("class=cnn fair:tput=3@1", {}, "held no GPU"),
    # issue 30: a CPU-only job named a GPU in its comment to plant a speed there
    ("class=evil fair:tput=9000000@1 fair:gpu=Tesla_V100-SXM2-16GB", {}, "never one its comment names"),
])
def test_bad_reports_are_refused_with_an_event_and_change_no_profile(comment, alloc, why):
    s = Store(":memory:")
    s.set_profile("cnn", "v100", 7.0, account="acct_a")
    assert harvest(s, snap(job(5, comment, alloc)), CFG, 9, now=1.0)["refused"] == 1
    assert values(s) == {("acct_a", "cnn", "v100", "set"): (7.0, 1, 0)}
    (e,) = s.events(kind="profile-report-refused")
    assert why in e.message and e.job_id == 5 and e.round_id == 9
    assert harvest(s, snap(job(5, comment, alloc)), CFG, 10, now=2.0)["refused"] == 0  # taken once


def test_a_bad_token_is_skipped_and_every_later_job_is_still_harvested():
    s = Store(":memory:")
    jobs = [job(1, "class=a fair:tput=5@\u00b2", {"v100": 1}), job(2, "class=b fair:tput=\u00b2@1", {"v100": 1}),
            job(3, "class=c fair:tput=6@1", {"v100": 1})]
    s.upsert_job_records([{"v": 1, "event": "end", "context": "epilog_slurmctld", "job_id": 9, "restart_count": 0,
                           "time": 5.0, "account": "acct_a", "class": "d", "gpus": {"v100": "\u00b2"},
                           "fair_tokens": "fair:tput=4@1"}])  # GPU counts not what the hook writes
    out = harvest(s, snap(*jobs), CFG, 4, now=10.0)
    assert out == {"accepted": 1, "rejected": 0, "refused": 3, "read": 1}, out  # job 9: no GPU type (its counts are not ints)
    assert values(s) == {("acct_a", "c", "v100", "harvested"): (6.0, 1, 0)}
    assert {e.job_id for e in s.events(kind="profile-report-refused")} == {1, 2, 9}
    assert not s.events(kind="profile-harvest-error")


def test_report_grammar_is_ascii_only():
    from slurm_fair.profiling.client import ascii_int, ascii_number
    assert [ascii_number(t) for t in ("12.5", ".5", "5.", "1.2e+03", "1E-3")] == [12.5, 0.5, 5.0, 1200.0, 0.001]
    for bad in ("", "nan", "inf", "-1", "+1", "1_0", "\u0663", "\u00b2", "1.2.3", "e5", "1e", "1e+", ".", "1 ", "9" * 41):
        assert ascii_number(bad) is None, bad
    assert [ascii_int(t) for t in ("1", "01", "1000000000")] == [1, 1, 10 ** 9]
    for bad in ("", "0", "\u00b2", "\u0663", "10000000000", "-1", "1.0"):
        assert ascii_int(bad) is None, bad


def test_the_type_is_the_one_the_job_held_never_a_named_one_and_outliers_are_rejected():
    s = Store(":memory:")
    # issue 30: the GPU name a comment gives (fair:gpu=) never chooses the type: a job that held none is refused
    assert harvest(s, snap(job(1, "class=x fair:tput=3@1 fair:gpu=Tesla_V100-SXM2-16GB", {})), CFG, None,
                   now=0.5)["refused"] == 1
    harvest(s, snap(job(1, "class=x fair:tput=3@2 fair:gpu=Tesla_V100-SXM2-16GB", {"k80": 1})), CFG, None, now=1.0)
    assert values(s) == {("acct_a", "x", "k80", "harvested"): (3.0, 1, 0)}  # the type it held, not the named one
    for n, v in ((3, 3.0), (4, 3.0)):
        harvest(s, snap(job(1, f"class=x fair:tput={v}@{n}", {"k80": 1})), CFG, None, now=float(n))
    assert harvest(s, snap(job(1, "class=x fair:tput=30@5", {"k80": 1})), CFG, None, now=5.0)["rejected"] == 1
    assert values(s) == {("acct_a", "x", "k80", "harvested"): (3.0, 3, 1)}
    assert len(s.events(kind="profile-report-rejected")) == 1


def test_end_records_of_ended_jobs_are_harvested():
    s = Store(":memory:")
    rec = {"v": 1, "event": "end", "context": "epilog_slurmctld", "job_id": 77, "restart_count": 0, "time": 5.0,
           "account": "acct_a", "class": "demo", "gpus": {"v100": 1}, "gpu_count": 1,
           "fair_tokens": "fair:profile fair:tput=20@1"}
    s.upsert_job_records([rec])
    assert harvest(s, snap(), CFG, None)["accepted"] == 1
    assert values(s) == {("acct_a", "demo", "v100", "measured"): (20.0, 1, 0)}


def test_batch_script_and_sbatch_argv_carry_no_user_words():
    argv = ["python", "train.py", "--name", "a b; rm -rf / $(x) `y`"]
    settings = json.loads(agent.job_settings(argv, 30.0, None, r"rate=(\d+)"))
    assert settings["argv"] == argv
    script = agent.batch_script("/opt/py 3/bin/python")
    assert "train.py" not in script and "'/opt/py 3/bin/python'" in script
    sb = agent.sbatch_argv("acct_a", "cnn", "v100", seconds=30.0, partition="gpu")
    assert sb[:2] == ["sbatch", "--parsable"] and "--gres=gpu:v100:1" in sb and "--partition=gpu" in sb
    assert "--comment=class=cnn fair:profile" in sb and "--time=2" in sb


def run_local(*args, env=None):
    return subprocess.run([sys.executable, "-c", "from slurm_fair.entry import console_main; console_main()",
                           "profile", "run", *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", **(env or {})})


def test_profile_run_outside_a_job_bounds_time_and_measures_regex_or_steps():
    loop = "import time\nfor i in range(1000):\n    print(f'it {i} speed=2.5', flush=True); time.sleep(0.1)"
    r = run_local("--seconds", "1", "--metric-regex", r"speed=([0-9.]+)", "--", sys.executable, "-c", loop)
    assert r.returncode == 0, r.stderr
    assert "stopped after the time bound" in r.stdout and "throughput 2.5 steps/s (metric regex" in r.stdout
    assert "NVML" in r.stdout  # says what it found (this machine: no GPU)
    r = run_local("--steps", "50", "--", sys.executable, "-c", "import time; time.sleep(0.5)")
    assert r.returncode == 0 and "50 steps in" in r.stdout
    tput = float(r.stdout.split("throughput ")[1].split()[0])
    assert 20 < tput < 100  # 50 steps in a bit over 0.5 s
    r = run_local("--steps", "50", "--", sys.executable, "-c", "raise SystemExit(3)")
    assert r.returncode == 1 and "no throughput measured" in r.stderr  # a failed command measures nothing
    r = run_local("--", "/nonexistent/cmd")
    assert r.returncode == 2 and "cannot run" in r.stderr
    env = {agent.ENV: json.dumps({"argv": [sys.executable, "-c", "print('v=4')"], "seconds": 5, "regex": "v=(\\d)"})}
    r = run_local(env=env)
    assert r.returncode == 0 and "throughput 4 steps/s" in r.stdout


def test_job_side_imports_stay_light():
    code = ("import sys, slurm_fair; slurm_fair.report; import slurm_fair.entry, slurm_fair.profiling.agent; "
            "print(sorted(m for m in ('numpy', 'cvxpy', 'scipy', 'sqlite_utils', 'click') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "[]", r.stderr


@pytest.mark.parametrize("args, field", [
    (["--seconds", "5", "--steps", "10"], "--seconds"),
    (["--seconds", "0"], "--seconds"),
    (["--steps", "-1"], "--steps"),
    (["--metric-regex", "rate=(["], "--metric-regex"),
])
def test_profile_submit_refuses_bad_options_before_touching_slurm(tmp_path, args, field):
    from click.testing import CliRunner

    from slurm_fair.cli import main

    cfg = tmp_path / "c.toml"
    cfg.write_text('[daemon]\ndatabase = "x.sqlite"\n')
    r = CliRunner().invoke(main, ["profile", "submit", "--config", str(cfg), "--account", "a", "--class", "c",
                                  *args, "--", "true"])
    assert r.exit_code == 2 and field in r.stderr


def test_profile_report_command_outside_a_job_exits_2_saying_why():
    r = subprocess.run([sys.executable, "-c", "from slurm_fair.entry import console_main; console_main()",
                        "profile", "report", "--throughput", "3"], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 2 and "SLURM_JOB_ID" in r.stderr
    r = subprocess.run([sys.executable, "-c", "from slurm_fair.entry import console_main; console_main()",
                        "profile", "report", "--steps", "3"], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "5"})
    assert r.returncode == 2 and "give steps and seconds" in r.stderr


def test_a_flood_of_reports_is_taken_a_bounded_part_a_round_and_taken_ones_cost_no_lookup_each():
    """Issue 30 item 4: 20 000 end records with reports made the first harvest take 60 s and every round of that
    day 1.5 s more. Now a round takes at most MAX_REPORTS_PER_ROUND new reports (the rest wait), and the ones
    taken are filtered out in one query per 500 jobs."""
    from slurm_fair.daemon import harvest as H

    s = Store(":memory:")
    recs = [{"v": 1, "event": "end", "context": "epilog_slurmctld", "job_id": 1000 + i, "restart_count": 0,
             "time": 5.0, "account": "acct_a", "class": "c", "gpus": {"v100": 1}, "gpu_count": 1,
             "fair_tokens": "fair:tput=20@1"} for i in range(2 * H.MAX_REPORTS_PER_ROUND + 10)]
    s.upsert_job_records(recs)
    first = harvest(s, snap(), CFG, 1, now=10.0)
    assert first["deferred"] == H.MAX_REPORTS_PER_ROUND + 10
    assert first["accepted"] + first["rejected"] + first["refused"] == H.MAX_REPORTS_PER_ROUND
    second = harvest(s, snap(), CFG, 2, now=20.0)
    assert second["deferred"] == 10
    third = harvest(s, snap(), CFG, 3, now=30.0)
    assert "deferred" not in third and sum(third[k] for k in ("accepted", "rejected", "refused")) == 10
    assert harvest(s, snap(), CFG, 4, now=40.0) == {"accepted": 0, "rejected": 0, "refused": 0}
    assert len(s.profile_reports(limit=10 ** 6)) == len(recs)  # every one taken once


def test_a_flood_of_bad_reports_writes_a_bounded_number_of_events_a_day_and_keeps_every_report():
    """Issue 30 item 4: every refused report was an event of its own (a flood of CPU-only end records wrote one
    each). Now an account's first EVENTS_PER_DAY of a kind a day are written one by one, the rest are counted in
    one ``…-more`` event of that kind a day; another account's events are not used up; profile_reports keeps every
    report with its status."""
    from slurm_fair.daemon import harvest as H

    s = Store(":memory:")
    bad = [{"v": 1, "event": "end", "context": "epilog_slurmctld", "job_id": 5000 + i, "restart_count": 0,
            "time": 5.0, "account": "flood", "class": "c", "gpus": {}, "gpu_count": 0,
            "fair_tokens": "fair:tput=9000000@1"} for i in range(300)]
    other = [{**bad[0], "job_id": 9000, "account": "acct_a"}]
    s.upsert_job_records(bad + other)
    rounds = [harvest(s, snap(), CFG, r, now=10.0 * r) for r in (1, 2)]
    assert sum(r["refused"] for r in rounds) == 301
    one_by_one = s.events(kind="profile-report-refused", limit=10 ** 4)
    assert len([e for e in one_by_one if e.account == "flood"]) == H.EVENTS_PER_DAY
    assert [e.job_id for e in one_by_one if e.account == "acct_a"] == [9000]
    (more,) = s.events(kind="profile-report-refused-more", limit=10 ** 4)
    assert more.account == "flood" and more.data["count"] == 300 - H.EVENTS_PER_DAY
    assert "held no GPU" in more.message
    assert sum(r.status == "refused" for r in s.profile_reports(limit=10 ** 6)) == 301
    # a day later: one by one again
    s.upsert_job_records([{**bad[0], "job_id": 7000}])
    harvest(s, snap(), CFG, 3, now=10.0 + H.DAY + 1)
    assert len([e for e in s.events(kind="profile-report-refused", limit=10 ** 4) if e.account == "flood"]) \
        == H.EVENTS_PER_DAY + 1
