"""Preemption cannot be dodged (issue 21 item 4), on the real testbed: a job made non-requeue-able during its grace
(``scontrol update jobid=N requeue=0``) is handled by the default rule, ``preemption.unrequeueable = "hold-back"``:
it keeps running, its account's a100 limit is lowered by its GPU, its account is held at what it runs on every type
while the job it was held back for waits (issue 30), and its account's next job is preempted in its place; an ``salloc`` allocation is counted as usage and never signalled, and under
``unrequeueable = "cancel"`` it is cancelled like a batch job (issue 30).

Set-up as in test_preemption.py (its config and CLI helpers): acct_a holds all four a100s, acct_b waits for one.
"""

from __future__ import annotations

import json
import subprocess
import time

from slurm_fair.store import Store
from slurm_fair.daemon.preemption.store import PreemptionStore

from .test_preemption import cli, write_config

IGNORE_USR1 = "trap '' USR1; sleep 600"  # a job that does not checkpoint: it keeps running after the signal


def _round(testbed, cfg, tmp_path) -> dict:
    cli(testbed, cfg, "daemon", "--once")
    with Store(tmp_path / "sf.sqlite") as store:
        r = store.round()
    assert r.status == "ok", r
    return r.details


def _rows(tmp_path) -> dict[int, dict]:
    with Store(tmp_path / "sf.sqlite") as store:
        return {r.job_id: r.as_row() for r in PreemptionStore(store).rows()}


def test_job_made_non_requeueable_during_its_grace_is_held_back(testbed, tmp_path):
    cfg = write_config(testbed, tmp_path)  # grace 5 s, min_runtime 0, unrequeueable = hold-back (the default)
    sleepers = [testbed.sbatch("acct_a", gpu_type="a100", name="sleeper", extra=["--requeue"],
                              command=IGNORE_USR1) for _ in range(3)]
    for j in sleepers:
        testbed.wait_state(j, "RUNNING")
    dodger = testbed.sbatch("acct_a", gpu_type="a100", name="dodger", extra=["--requeue"],
                            command=IGNORE_USR1)
    testbed.wait_state(dodger, "RUNNING")
    waiter = testbed.sbatch("acct_b", gpu_type="a100", name="waiter")
    assert testbed.job_state(waiter)[0] == "PENDING"
    testbed.wait_scheduled()

    d1 = _round(testbed, cfg, tmp_path)  # signals the newest acct_a job
    assert [s["job_id"] for s in d1["preemption"]["signalled"]] == [dodger]
    # the user dodges during the grace
    testbed.run(["scontrol", "update", f"jobid={dodger}", "requeue=0"])
    assert "Requeue=0" in testbed.run(["scontrol", "show", "job", str(dodger)]).stdout
    time.sleep(6)  # the grace (5 s) ends

    d2 = _round(testbed, cfg, tmp_path)
    pre = d2["preemption"]
    assert [h["job_id"] for h in pre["held-back"]] == [dodger] and pre["requeued"] == []
    assert [s["job_id"] for s in pre["signalled"]] == [sleepers[-1]]  # the next newest goes in its place
    rows = _rows(tmp_path)
    assert rows[dodger]["state"] == "held-back" and [s["step"] for s in rows[dodger]["steps"]] == [
        "signalled", "held-back"]
    assert "not requeue-able" in rows[dodger]["steps"][-1]["message"]
    # its account's a100 limit is lowered by its GPU at once, and (issue 30) acct_a is held across all its jobs
    # while acct_b waits: at most what it runs (4 a100), minus that GPU, in all, and nothing on the other types
    planned = d2["limits"]["acct_a"]
    lowered = pre["held_back_limits"]["accounts"]["acct_a"]
    assert lowered["a100"] == planned.get("a100", 4) - 1 and lowered["*"] == min(planned.get("*", 16) - 1, 3)
    written = testbed.gpu_limits()["acct_a"]
    assert written["a100"] == lowered["a100"] and written["v100"] == written["k80"] == 0, written
    assert testbed.job_state(dodger)[0] == "RUNNING"

    time.sleep(6)
    d3 = _round(testbed, cfg, tmp_path)  # the sleeper is requeued; the hold-back stays, in the round's limits now
    assert [r["job_id"] for r in d3["preemption"]["requeued"]] == [sleepers[-1]]
    assert d3["held_back"] == {"acct_a": {"a100": 1}}
    assert testbed.gpu_limits()["acct_a"]["a100"] == d3["limits"]["acct_a"].get("a100", 4) - 1
    testbed.wait_state(waiter, "RUNNING", timeout=60)  # acct_b got its a100 all the same
    ex = json.loads(cli(testbed, cfg, "explain", "acct_a", "--json").stdout)
    assert ex["held_back"] == {"a100": 1}
    assert {p["job_id"]: p["state"] for p in ex["preemptions"]}[dodger] == "held-back"
    text = cli(testbed, cfg, "explain", "acct_a").stdout
    assert "held back:     a100=1" in text and f"job {dodger} (1 a100, USR1): held-back" in text
    with Store(tmp_path / "sf.sqlite") as store:
        assert any(e.job_id == dodger and "held-back" in e.message for e in store.events(kind="preemption"))

    # the job ends (acct_b's job runs already): the hold-back ends
    testbed.run(["scancel", str(dodger)])
    testbed.wait_for(lambda: testbed.job_state(dodger)[0] not in ("RUNNING", "COMPLETING"), 30, what="ended")
    d4 = _round(testbed, cfg, tmp_path)
    assert d4["held_back"] == {"acct_a": {}} or d4["held_back"] == {}
    assert _rows(tmp_path)[dodger]["state"] == "gone"


def _three_sleepers(testbed, extra: list[str], command: str) -> list[int]:
    """Three 1-GPU a100 jobs of acct_a, running."""
    jobs = [testbed.sbatch("acct_a", gpu_type="a100", name="sleeper", extra=extra, command=command) for _ in range(3)]
    for j in jobs:
        testbed.wait_state(j, "RUNNING")
    return jobs


def _salloc(testbed) -> int:
    """An interactive allocation of acct_a on the fourth a100 (``salloc --no-shell``, job name ``interactive``):
    its job id once it runs."""
    alloc = subprocess.Popen(["salloc", "--no-shell", "-A", "acct_a", "--gres=gpu:a100:1", "-J", "interactive"],
                             env=testbed.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    alloc.communicate(timeout=60)
    return testbed.wait_for(lambda: [int(x) for x in testbed.run(
        ["squeue", "-h", "-n", "interactive", "-t", "R", "-o", "%i"]).stdout.split()], 30, what="salloc running")[0]


def test_salloc_allocation_is_counted_and_never_signalled(testbed, tmp_path):
    cfg = write_config(testbed, tmp_path)
    sleepers = _three_sleepers(testbed, ["--requeue"], IGNORE_USR1)
    try:
        inter = _salloc(testbed)
        waiter = testbed.sbatch("acct_b", gpu_type="a100", name="waiter")
        testbed.wait_scheduled()
        d = _round(testbed, cfg, tmp_path)
        assert d["in_use"]["acct_a"] == {"a100": 4}  # the allocation counts as usage
        pre = d["preemption"]
        assert [h["job_id"] for h in pre["held-back"]] == [inter]  # newest, not signalled: held back
        assert [s["job_id"] for s in pre["signalled"]] == [sleepers[-1]]
        assert "interactive allocation" in _rows(tmp_path)[inter]["reason"]
        assert testbed.job_state(inter)[0] == "RUNNING" and waiter
    finally:
        testbed.run(["scancel", "-n", "interactive"], check=False)


def test_no_requeue_at_submission_with_cancel_is_held_back_then_cancelled(testbed, tmp_path):
    """``--no-requeue`` at submission, ``unrequeueable = "cancel"``, acct_a holds all four a100s and has no other
    job above its guarantee that could be preempted in its place (the others are --no-requeue too): the newest is
    held back, then cancelled after cancel_grace while acct_b still waits, and acct_b's job starts."""
    cfg = write_config(testbed, tmp_path, unrequeueable="cancel", cancel_grace=3)
    jobs = [testbed.sbatch("acct_a", gpu_type="a100", name="norequeue", extra=["--no-requeue"], command=IGNORE_USR1)
            for _ in range(4)]
    for j in jobs:
        testbed.wait_state(j, "RUNNING")
    waiter = testbed.sbatch("acct_b", gpu_type="a100", name="waiter")
    testbed.wait_scheduled()
    d1 = _round(testbed, cfg, tmp_path)
    pre = d1["preemption"]
    assert [h["job_id"] for h in pre["held-back"]] == [jobs[-1]] and pre["signalled"] == []
    assert {s["job_id"] for s in pre["skipped"]} == set(jobs[:-1])  # at most the excess (1) is held back
    assert testbed.gpu_limits()["acct_a"]["a100"] == pre["held_back_limits"]["accounts"]["acct_a"]["a100"]
    time.sleep(4)  # cancel_grace
    d2 = _round(testbed, cfg, tmp_path)
    assert [c["job_id"] for c in d2["preemption"]["cancelled"]] == [jobs[-1]]
    rows = _rows(tmp_path)
    assert rows[jobs[-1]]["state"] == "cancelled" and [s["step"] for s in rows[jobs[-1]]["steps"]] == [
        "held-back", "cancelled"]
    testbed.wait_for(lambda: testbed.job_state(jobs[-1])[0] == "CANCELLED", 30, what="cancelled by slurm-fair")
    testbed.wait_state(waiter, "RUNNING", timeout=60)


def test_a_requeue_slurm_refuses_becomes_a_hold_back(testbed, tmp_path):
    """requeue=0 set between the round's snapshot and its requeue (the race the decision cannot see): Slurm refuses
    the requeue ("Requested operation is presently disabled"), and the job is held back instead of left running."""
    from slurm_fair import config as config_mod
    from slurm_fair.cluster import connect
    from slurm_fair.daemon.preemption.carry import run as preempt

    cfg = config_mod.load(write_config(testbed, tmp_path))
    jobs = [testbed.sbatch("acct_a", gpu_type="a100", name="sleeper", extra=["--requeue"], command=IGNORE_USR1)
            for _ in range(4)]
    for j in jobs:
        testbed.wait_state(j, "RUNNING")
    testbed.sbatch("acct_b", gpu_type="a100", name="waiter")
    testbed.wait_scheduled()
    cluster = connect(backend="cli", timeout=15, env=testbed.env)
    guarantees = {"acct_a": {"a100": 3}, "acct_b": {"a100": 1}}
    with Store(tmp_path / "sf.sqlite") as store:
        out = preempt(cluster, store, cfg, cluster.snapshot(), guarantees, None, time.time())
        assert [s["job_id"] for s in out.signalled] == [jobs[-1]]
        time.sleep(6)
        snap = cluster.snapshot()
        assert next(j for j in snap.jobs if j.job_id == jobs[-1]).requeue
        testbed.run(["scontrol", "update", f"jobid={jobs[-1]}", "requeue=0"])
        out = preempt(cluster, store, cfg, snap, guarantees, None, time.time())
        row = {r.job_id: r.as_row() for r in PreemptionStore(store).rows()}[jobs[-1]]
    assert [h["job_id"] for h in out.steps("held-back")] == [jobs[-1]] and out.requeued == []
    assert row["state"] == "held-back" and [s["step"] for s in row["steps"]] == ["signalled", "requeue-failed"]
    assert "presently disabled" in row["steps"][-1]["message"]
    assert testbed.job_state(jobs[-1])[0] == "RUNNING"


def test_salloc_allocation_is_cancelled_under_the_cancel_rule(testbed, tmp_path):
    """Issue 30 item 5: with ``unrequeueable = "cancel"`` an salloc allocation absorbed the hold-back and was never
    cancelled, so the waiting account waited for as long as the allocation lasted. Now it is cancelled once
    ``cancel_grace`` has passed with its account still over while someone waits."""
    cfg = write_config(testbed, tmp_path, unrequeueable="cancel", cancel_grace=3)
    # acct_a's batch jobs cannot be requeued either, so no requeue of one of them resolves the excess first
    _three_sleepers(testbed, ["--no-requeue"], "sleep 600")
    try:
        inter = _salloc(testbed)
        testbed.sbatch("acct_b", gpu_type="a100", name="waiter")
        testbed.wait_scheduled()
        d = _round(testbed, cfg, tmp_path)
        assert [h["job_id"] for h in d["preemption"]["held-back"]] == [inter]
        assert _rows(tmp_path)[inter]["requeue_at"] is not None  # it has a cancel time now
        time.sleep(4)
        _round(testbed, cfg, tmp_path)
        testbed.wait_for(lambda: testbed.job_state(inter)[0] not in ("RUNNING", "COMPLETING"), 30,
                         what="the allocation cancelled")
        assert _rows(tmp_path)[inter]["state"] == "cancelled"
    finally:
        testbed.run(["scancel", "-n", "interactive"], check=False)


def test_two_no_requeue_jobs_hold_their_account_on_every_type_until_the_owed_job_runs(testbed, tmp_path):
    """Issue 30 item 5, the attack: acct_a fills the four a100s with two 2-GPU ``--no-requeue`` jobs while acct_b
    waits for two (acct_a's guarantee is 2). One job is held back and the other is listed as held across all
    acct_a's jobs; the limits the daemon writes hold acct_a at what it runs on every type (its next job on v100,
    idle, stays pending; before, only a100 was lowered), and when the held-back job ends, acct_b's job — not
    acct_a's next a100 job — starts on the freed GPUs; the hold-back ends once acct_b's job runs."""
    cfg = write_config(testbed, tmp_path)  # unrequeueable = hold-back (the default)
    mine = [testbed.sbatch("acct_a", gpus=2, gpu_type="a100", name="norequeue", extra=["--no-requeue"])
            for _ in range(2)]
    for j in mine:
        testbed.wait_state(j, "RUNNING")
    waiter = testbed.sbatch("acct_b", gpus=2, gpu_type="a100", name="waiter")
    testbed.wait_scheduled()
    assert testbed.job_state(waiter)[0] == "PENDING"

    d1 = _round(testbed, cfg, tmp_path)
    pre = d1["preemption"]
    (held,) = [h["job_id"] for h in pre["held-back"]]
    (other,) = [j for j in mine if j != held]
    assert pre["signalled"] == [] and any(s["job_id"] == other and "held back across all its jobs" in s["reason"]
                                          for s in pre["skipped"])  # both jobs are accounted for
    assert _rows(tmp_path)[held]["for_job"] == waiter
    limits = testbed.gpu_limits()["acct_a"]
    assert limits["v100"] == limits["k80"] == 0 and limits["a100"] <= 2 and limits["*"] <= 2, limits

    # the dodger's next jobs: on the idle v100s, and on a100
    v100 = testbed.sbatch("acct_a", gpu_type="v100", name="elsewhere", extra=["--no-requeue"])
    nxt = testbed.sbatch("acct_a", gpus=2, gpu_type="a100", name="next", extra=["--no-requeue"])
    testbed.wait_scheduled()
    assert testbed.job_state(v100)[0] == "PENDING" and testbed.job_state(nxt)[0] == "PENDING"
    d2 = _round(testbed, cfg, tmp_path)
    assert d2["held_at"]["acct_a"] == {"a100": 2, "*": 2} and "acct_b" in d2["held_why"]["acct_a"]
    limits = testbed.gpu_limits()["acct_a"]
    assert limits["v100"] == 0 and limits["*"] <= 2, limits
    testbed.wait_scheduled()
    assert testbed.job_state(v100)[0] == "PENDING"
    text = cli(testbed, cfg, "explain", "acct_a").stdout
    assert "held across:" in text and "held back across all its jobs" in text

    # the held-back job ends first: the freed a100s are acct_b's
    testbed.run(["scancel", str(held)])
    testbed.wait_state(waiter, "RUNNING", timeout=60)
    testbed.wait_scheduled()
    assert testbed.job_state(nxt)[0] == "PENDING" and testbed.job_state(v100)[0] == "PENDING"
    # acct_b's job runs: the hold-back ends (gone: its job ended too), nothing is held any more
    d3 = _round(testbed, cfg, tmp_path)
    row = _rows(tmp_path)[held]
    assert row["state"] == "gone" and f"the job it was for ({waiter}, acct_b) has started" in row["steps"][-1]["message"]
    assert d3.get("held_at", {}) == {} and d3.get("held_back", {}) in ({}, {"acct_a": {}})
    # what the hold-back wrote was slurm-fair's: not kept as a limit someone else set (it was, before)
    assert "acct_a" not in d3.get("drift", {}), d3.get("drift")
    testbed.wait_state(v100, "RUNNING", timeout=60)  # idle v100s, nobody else waits for them


def test_a_hold_back_ends_after_hold_back_max(testbed, tmp_path):
    """Issue 41 item 4, the attack of issue 30 under the default rule: acct_a (guarantee 2 a100) runs two 2-GPU
    ``--no-requeue`` jobs on the four a100s while acct_b's 2-GPU job waits. The hold-back no longer lasts until the
    jobs end: once ``preemption.hold_back_max`` (3 s here, 14 400 s by default) has passed with acct_b still
    waiting, the held-back job is cancelled and acct_b's job starts — read from Slurm (squeue, sacct), not the
    store."""
    from .scenario import gpus_in_use

    cfg = write_config(testbed, tmp_path, hold_back_max=3)  # unrequeueable = hold-back (the default)
    mine = [testbed.sbatch("acct_a", gpus=2, gpu_type="a100", name="norequeue", extra=["--no-requeue"],
                           command=IGNORE_USR1) for _ in range(2)]
    for j in mine:
        testbed.wait_state(j, "RUNNING")
    waiter = testbed.sbatch("acct_b", gpus=2, gpu_type="a100", name="waiter")
    testbed.wait_scheduled()
    assert testbed.job_state(waiter)[0] == "PENDING" and gpus_in_use(testbed) == {"acct_a": {"a100": 4}}

    d1 = _round(testbed, cfg, tmp_path)
    (held,) = [h["job_id"] for h in d1["preemption"]["held-back"]]
    assert d1["preemption"]["signalled"] == [] and d1["preemption"]["cancelled"] == []
    assert "is cancelled 3 s" in cli(testbed, cfg, "why", str(held)).stdout  # `why` says when it ends
    time.sleep(4)  # hold_back_max
    testbed.wait_scheduled()
    assert testbed.job_state(held)[0] == "RUNNING"  # nothing ends it but slurm-fair's next round
    d2 = _round(testbed, cfg, tmp_path)
    assert [c["job_id"] for c in d2["preemption"]["cancelled"]] == [held]
    testbed.wait_state(waiter, "RUNNING", timeout=60)
    testbed.wait_scheduled()
    assert gpus_in_use(testbed) == {"acct_a": {"a100": 2}, "acct_b": {"a100": 2}}
    (other,) = [j for j in mine if j != held]
    assert testbed.job_state(other)[0] == "RUNNING"  # only the excess ended
    state = testbed.wait_for(lambda: testbed.run(["sacct", "-n", "-X", "-P", "-j", str(held), "-o", "State"]
                                                 ).stdout.split(), 30, what="sacct's record of the job")
    assert state[0].startswith("CANCELLED"), state
    assert _rows(tmp_path)[held]["state"] == "cancelled"
