"""`slurm-fair why JOBID` (slurm_fair/views/why.py): the explanation of a job from Slurm's view of it and the
public status file, case by case; and that the command never prints a user's bytes raw."""

from __future__ import annotations

import dataclasses
import json

import click
import pytest
from click.testing import CliRunner

from slurm_fair.cli import main
from slurm_fair.cli.why import _print
from slurm_fair.cluster.base import Job
from slurm_fair.daemon.status_file import AccountStatus, PreemptionStatus, PublicStatus, TypeStatus
from slurm_fair.views.why import VERDICTS, explain_job, printable

NOW = 1_800_000_000.0


def job(state="PENDING", reason="Resources", account="acct_a", gpus=1, gpu_type="k80", allocated=None, **kw):
    return Job(job_id=kw.pop("job_id", 42), name=kw.pop("name", "train"), account=account, user="alice",
               partition="gpu", state=state, reason=reason, priority=100, submit_time=int(NOW - 600),
               start_time=int(NOW - 60) if state == "RUNNING" else None, gpus_per_node=gpus, nodes=1,
               gpu_type=gpu_type, gpus_allocated=allocated or {}, **kw)


def status(accounts, *, preemption=False, lend=True, dry_run=False, written=NOW - 5, idle=0, retype=False,
           order=None):
    return PublicStatus(
        written=written, round=7, round_time=written - 1, round_status="dry-run" if dry_run else "ok", period=60.0,
        stale_after=180.0, policy="oef-coop", dry_run=dry_run, manage_limits=True, lend=lend, retype=retype,
        preemption=PreemptionStatus(preemption, 120.0, 600.0, "USR1"),
        types={"k80": TypeStatus(capacity=6, idle=idle, largest_idle_block=idle, lendable=2),
               "v100": TypeStatus(capacity=4, idle=0, largest_idle_block=0, lendable=4)},
        accounts=accounts, type_order=order or {"*": ("v100", "k80")})


def acct(guarantee=None, claims=None, in_use=None, limits=None, pending=0, managed=True):
    return AccountStatus(guarantee=guarantee or {}, claims=claims or {}, in_use=in_use or {}, limits=limits or {},
                         pending_gpus=pending, managed=managed)


def text(ex) -> str:
    return " ".join((ex.summary, *ex.details, *ex.changes, *ex.notes))


def test_pending_on_its_accounts_limit():
    st = status({"acct_a": acct({"k80": 2}, in_use={"k80": 2}, limits={"k80": 2, "*": 6}, pending=1),
                 "acct_b": acct({"k80": 4}, claims={"k80": 4}, in_use={}, pending=4)})
    ex = explain_job(job(reason="AssocGrpGRES"), st, NOW)
    assert ex.verdict == "limit"
    assert ex.summary == ("it waits on its account's GPU limit (AssocGrpGRES): account acct_a — it may hold at most 2 "
                          "k80 GPU(s) (GrpTRES gres/gpu:k80=2) and holds 2")
    (k80,) = ex.types
    assert (k80.guarantee, k80.in_use, k80.claims, k80.limit, k80.idle) == (2, 2, 0, 2, 0)
    assert k80.others_claims == {"acct_b": 4} and k80.others_guarantee == {"acct_b": 4} and ex.total_limit == 6
    assert ("k80: the limit is the type's GPUs minus those held for other accounts' waiting jobs under their "
            "guarantees (acct_b 4)") in ex.details
    assert "k80: the account holds 2, at or above its guarantee of 2" in ex.details
    assert ex.changes[0] == "a job of account acct_a ending (it frees room under the limit)"
    assert any("other accounts' waiting jobs starting or going away" in c for c in ex.changes)
    assert any(c.startswith("slurm-fair's next round (every 60 s") for c in ex.changes)
    assert ex.notes == () and ex.status.available and not ex.status.stale


def test_slurm_shows_resources_but_the_limit_holds_it_too():
    # measured on 24.11.5: a job at its account's k80 limit while no k80 is free shows Resources, not AssocGrpGRES
    st = status({"acct_a": acct({"k80": 2}, in_use={"k80": 2}, limits={"k80": 2}, pending=2)}, lend=False)
    ex = explain_job(job(reason="Resources"), st, NOW)
    assert ex.verdict == "limit"
    assert ex.summary == ("it waits on its account's GPU limit (Slurm shows Resources now; the limit holds it "
                          "whatever GPUs are free): account acct_a — it may hold at most 2 k80 GPU(s) (GrpTRES "
                          "gres/gpu:k80=2) and holds 2")
    assert explain_job(job(reason="None"), st, NOW).verdict == "limit"  # right after a job update (24.11)
    # room under the limit: Slurm's reason stands
    st = status({"acct_a": acct({"k80": 3}, in_use={"k80": 2}, limits={"k80": 3})})
    assert explain_job(job(reason="Resources"), st, NOW).verdict == "resources"
    # an untyped job is held by the limits only when every type's (or the total) is reached
    st = status({"acct_a": acct({"k80": 2}, in_use={"k80": 2}, limits={"k80": 2})})
    assert explain_job(job(reason="Priority", gpu_type=None), st, NOW).verdict == "priority"


def test_pending_on_the_total_limit_and_under_hard_caps():
    st = status({"acct_a": acct({"k80": 1, "v100": 1}, in_use={"v100": 1, "k80": 1}, limits={"*": 2})}, lend=False)
    ex = explain_job(job(reason="AssocGrpGRES", gpu_type=None), st, NOW)  # an untyped job: every type
    assert ex.verdict == "limit" and [t.gpu_type for t in ex.types] == ["k80", "v100"]
    assert "it may hold at most 2 GPU(s) in all (GrpTRES gres/gpu=2) and holds 2" in ex.summary
    assert any(d.startswith("limits are hard caps here (limits.lend = false)") for d in ex.details)
    assert "it asked for any GPU type: Slurm may start it on any of them" in ex.details
    assert "new untyped jobs of acct_a are given, in order: v100, k80" in ex.details
    assert any(d.startswith("a new untyped job no type has room for (and not left untyped) is given the type expected "
                            "to start it first")
               and d.endswith("after their class's recorded run time, at most their time limits")
               for d in ex.details)


def test_pending_on_resources_while_another_account_borrows():
    accounts = {"acct_a": acct({"k80": 3}, in_use={"k80": 1}, pending=2),
                "acct_b": acct({"k80": 3}, in_use={"k80": 5})}
    ex = explain_job(job(reason="Resources", gpus=2), status(accounts, preemption=True), NOW)
    assert ex.verdict == "resources"
    assert ex.summary == "no limit holds it back; it waits for free GPUs of its type(s) (Resources)"
    assert "idle GPUs now: k80 0" in ex.details
    assert "k80: acct_b 2 above its guarantee (borrowed while nobody needed them)" in ex.details
    assert ex.types[0].borrowers == {"acct_b": 2}
    assert any(c.startswith("k80: preemption is on and account acct_a is under its guarantee (1 of 3): slurm-fair "
                            "reclaims borrowed GPUs — the newest borrowing jobs get signal USR1 and are requeued "
                            "after 120 s") for c in ex.changes)
    # preemption off: the borrowed GPUs come back only as those jobs end
    ex = explain_job(job(reason="Resources", gpus=2), status(accounts), NOW)
    assert "k80: borrowed GPUs come back when those jobs end (preemption is off)" in ex.changes
    # above its own guarantee already: no reclaim for it
    accounts["acct_a"] = acct({"k80": 1}, in_use={"k80": 1})
    ex = explain_job(job(reason="Resources"), status(accounts, preemption=True), NOW)
    assert any("reclaimed only for an account under its guarantee; acct_a holds 1 of its guarantee of 1" in c
               for c in ex.changes)


def test_pending_on_priority_and_on_a_block_no_node_has():
    st = status({"acct_a": acct({"k80": 4})}, idle=3)
    ex = explain_job(job(reason="Priority", site_factor=1234), st, NOW)
    assert ex.verdict == "priority" and "SiteFactor (1234 for this job" in ex.summary
    ex = explain_job(job(reason="Resources", gpus=4), st, NOW)
    assert "no node has 4 idle GPUs of its type(s) (the job needs them on one node)" in ex.details


@pytest.mark.parametrize("reason, verdict, change", [
    ("JobHeldUser", "held", "release it: scontrol release 42"),
    ("JobHeldAdmin", "held", "ask your administrators to release it"),
    ("Dependency", "dependency", "the jobs it depends on ending as required"),
    ("DependencyNeverSatisfied", "dependency", "cancel it (scancel 42)"),
    ("BeginTime", "begin-time", "its begin time passing"),
])
def test_held_dependency_and_begin_time(reason, verdict, change):
    ex = explain_job(job(reason=reason), status({"acct_a": acct({"k80": 2})}), NOW)
    assert ex.verdict == verdict and ex.changes[0].startswith(change)
    assert any(d.startswith("it is not counted as demand") and "SiteFactor or preemption" in d for d in ex.details)


@pytest.mark.parametrize("reason, blocked, verdict, change", [
    ("Priority", "held", "held", "release it: scontrol release 42"),  # priority 0 / hold flag, reason not yet set
    ("Reservation", "reservation", "reservation", "its reservation starting"),
    ("ReqNodeNotAvail", "reservation", "reservation", "its reservation starting"),
    ("Priority", "begin-time", "begin-time", "its begin time passing"),  # eligible_time in the future
])
def test_blocked_from_slurms_other_fields(reason, blocked, verdict, change):
    """The backend's ``Job.blocked`` (cluster/blocked.py) decides where Slurm's reason alone does not."""
    ex = explain_job(job(reason=reason, blocked=blocked), status({"acct_a": acct({"k80": 2})}), NOW)
    assert ex.verdict == verdict and ex.changes[0].startswith(change)
    assert any(d.startswith("it is not counted as demand") for d in ex.details)


def test_running_on_borrowed_gpus_could_be_preempted():
    accounts = {"acct_a": acct({"k80": 2}, in_use={"k80": 4})}
    run = job(state="RUNNING", reason="None", allocated={"k80": 1}, requeue=True)
    ex = explain_job(run, status(accounts, preemption=True), NOW)
    assert ex.verdict == "running-borrowed" and ex.summary == "it runs on 1 k80, partly or wholly on borrowed GPUs"
    assert ex.details == ("k80: account acct_a holds 4, 2 above its guarantee of 2: its newest jobs there run on "
                          "borrowed GPUs",)
    assert ex.changes[0].startswith("if another account waits under its guarantee of k80, slurm-fair may reclaim "
                                    "borrowed GPUs: the newest borrowing jobs get signal USR1")
    assert "ran less than 600 s is not picked" in ex.changes[0]
    no_requeue = dataclasses.replace(run, requeue=False)
    assert explain_job(no_requeue, status(accounts, preemption=True), NOW).changes == (  # a status from before 41
        "it cannot be requeued (--no-requeue or an interactive allocation), so slurm-fair never preempts it",)
    # issue 41: under the default hold-back, why says when the job is ended
    bounded = dataclasses.replace(status(accounts, preemption=True),
                                  preemption=PreemptionStatus(True, 120.0, 600.0, "USR1", "hold-back", 14400.0))
    ch = explain_job(no_requeue, bounded, NOW).changes[0]
    assert "its account is held back" in ch and "is cancelled 14400 s (4 h) after the hold-back began" in ch
    forever = dataclasses.replace(bounded, preemption=PreemptionStatus(True, 120.0, 600.0, "USR1", "hold-back", 0.0))
    assert "runs on until it ends" in explain_job(no_requeue, forever, NOW).changes[0]
    assert explain_job(run, status(accounts), NOW).changes == ("preemption is off: it runs to its end",)
    within = explain_job(run, status({"acct_a": acct({"k80": 4}, in_use={"k80": 4})}, preemption=True), NOW)
    assert within.verdict == "running" and within.summary == ("it runs on 1 k80, within its account's guarantee: "
                                                              "slurm-fair does not preempt it")


def test_unknown_job():
    ex = explain_job(None, status({}), NOW, job_id=99)
    assert ex.verdict == "unknown" and ex.job is None and ex.job_id == 99
    assert ex.summary.startswith("Slurm does not know job 99")


def test_stale_or_missing_status_keeps_slurms_view():
    st = status({"acct_a": acct({"k80": 2}, in_use={"k80": 2}, limits={"k80": 2})}, written=NOW - 3600)
    ex = explain_job(job(reason="AssocGrpGRES"), st, NOW)
    assert ex.verdict == "limit" and ex.status.stale and ex.status.age_s == pytest.approx(3600)
    assert ex.notes[0].startswith("slurm-fair's status is 60 min old (round 7): the daemon writes it every round "
                                  "and poll, so it may be stopped or failing")
    ex = explain_job(job(reason="AssocGrpGRES"), None, NOW, status_error="/x/status.json: no such file")
    assert ex.verdict == "limit" and not ex.status.available
    assert ex.notes == ("slurm-fair's status is unavailable (/x/status.json: no such file): only what Slurm says is "
                        "shown",)
    assert [(t.gpu_type, t.guarantee, t.limit) for t in ex.types] == [("k80", None, None)]
    assert "the limit's numbers are not in slurm-fair's status" in ex.summary


def test_shadow_mode_and_limits_slurm_fair_does_not_set():
    ex = explain_job(job(reason="AssocGrpGRES"), status({"acct_a": acct(limits={"k80": 0}, managed=False)},
                                                        dry_run=True), NOW)
    assert any(n.startswith("slurm-fair runs in shadow mode (dry run)") for n in ex.notes)
    ex = explain_job(job(reason="AssocGrpGRES"), status({"acct_a": acct(limits={"k80": 0}, managed=False)}), NOW)
    assert any(n.startswith("slurm-fair does not set this account's limits") for n in ex.notes)


def test_type_map_choice_of_a_flexible_job():
    flex = job(reason="Resources", comment="class=cnn fair:flex")
    assert flex.flexible
    ex = explain_job(flex, status({"acct_a": acct()}, order={"acct_a": ("k80", "v100")}, retype=True), NOW)
    assert ex.details[:3] == ("its GPU type k80 was chosen at submission by slurm-fair's type map (the job asked for "
                              "any GPU)", "slurm-fair may move it to another type with room while it waits",
                              "new untyped jobs of acct_a are given, in order: k80, v100")
    ex = explain_job(flex, status({"acct_a": acct()}), NOW)
    assert ex.details[1].startswith("this Slurm cannot move a pending job to another type (Slurm < 23.02.6)")


@pytest.mark.parametrize("j, verdict", [
    (job(gpus=0, gpu_type=None), "not-gpu"),
    (job(state="COMPLETED", reason="None"), "finished"),
    (job(reason="QOSGrpGRES"), "qos"),
    (job(reason="ReqNodeNotAvail"), "other"),
    (job(reason="None"), "resources"),
])
def test_other_states_and_reasons(j, verdict):
    ex = explain_job(j, status({"acct_a": acct()}), NOW)
    assert ex.verdict == verdict and verdict in VERDICTS and ex.summary


def test_a_users_bytes_are_never_printed_raw():
    evil = "x\x1b[2J\x1b]0;pwned\x07\n\r\\" + "\ufffd" + "é" * 200
    assert printable("a\x1b[31mb\\c\n") == "a\\x1b[31mb\\\\c\\n"
    assert printable("é" * 5, limit=3) == "ééé…"
    ex = explain_job(job(name=evil, comment="\x1b[31m class=\x07 fair:flex"), status({"acct_a": acct()}), NOW)
    assert ex.job.name.startswith("x\\x1b[2J\\x1b]0;pwned\\x07\\n\\r\\\\\ufffdé") and ex.job.name.endswith("…")
    assert ex.job.name.count("é") < 200  # bounded
    out = []
    cmd = click.Command("t", callback=lambda: _print(ex))
    r = CliRunner().invoke(cmd, [])
    out.append(r.output)
    out.append(json.dumps(dataclasses.asdict(ex)))
    for o in out:
        assert "\x1b" not in o and "\x07" not in o and "\r" not in o
        assert all(c.isprintable() or c == "\n" for c in o)
    assert "fair:flex" not in out[0] and "class=" not in out[0]  # the comment is never shown


def test_the_command_refuses_a_bad_job_id_naming_it():
    for bad in ("abc", "0", " ", "12_4", "١٢", "1e3"):
        r = CliRunner().invoke(main, ["why", bad])
        assert r.exit_code == 2 and r.output.startswith("error: JOBID: must be a job id"), (bad, r.output)


def test_a_begin_time_due_within_a_round_is_said_to_count_as_the_round_counts_it():
    """A requeued job waits out its begin time (121 s by default; 30 s here, the status file's round is 60 s): the round counts it as demand (daemon/plan/binding.py), and
    ``why`` says so; one moved a year ahead is not counted."""
    st = status({"acct_a": acct({"k80": 2})})
    due = explain_job(dataclasses.replace(job(reason="BeginTime", blocked="begin-time"), begin_time=int(NOW + 30),
                                          restart_count=1), st, NOW)
    assert due.verdict == "begin-time"
    assert any(d.startswith("it is counted as demand: its begin time is due within a round") for d in due.details)
    later = explain_job(dataclasses.replace(job(reason="BeginTime", blocked="begin-time"),
                                            begin_time=int(NOW + 365 * 86400), restart_count=1), st, NOW)
    assert any(d.startswith("it is not counted as demand") for d in later.details)
