"""ONE contract suite for every Cluster backend, against the real testbed (Slurm 22.05 or 24.11).

Each test runs once per backend; a backend that cannot be used here (pyslurm not installed or not
matching the cluster's Slurm) is skipped with the reason ``connect()`` gives.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from slurm_fair.cluster import ANY_GPU, CLEAR, ClusterUnreachable, Unsupported, connect
from slurm_fair.cluster.base import supports_pending_retype

from .conftest import ACCOUNTS, GPUS, USER_ACCOUNT

BACKENDS = ("cli", "pyslurm")


@pytest.fixture(params=BACKENDS)
def cluster(request, testbed):
    try:
        c = connect(backend=request.param, timeout=30, env=testbed.env)
        c.version()
    except Unsupported as e:
        pytest.skip(f"backend {request.param}: {e}")
    return c


def _calls(cluster, program: str) -> int | None:
    calls = getattr(cluster, "calls", None)
    return None if calls is None else sum(1 for c in calls if c[0] == program)


def _job(cluster, job_id):
    return next((j for j in cluster.snapshot().jobs if j.job_id == job_id), None)


def test_snapshot_topology_matches_testbed(cluster, testbed):
    snap = cluster.snapshot()
    assert snap.slurm_version.startswith(testbed.slurm_series + ".")
    assert snap.slurm_version == cluster.version()
    assert {n.name: dict(n.gpus) for n in snap.nodes} == GPUS
    assert all(n.usable and n.partitions == ("gpu",) for n in snap.nodes)
    assert snap.partitions == ("gpu",)
    assert {t: (u.total, u.allocated, u.unusable) for t, u in snap.gpu_types().items()} == {
        "a100": (4, 0, 0), "k80": (6, 0, 0), "v100": (6, 0, 0)}
    accts = {a.name: a for a in snap.accounts}
    assert {a: accts[a].shares for a in ACCOUNTS} == ACCOUNTS
    for user, acct in USER_ACCOUNT.items():
        assert user in accts[acct].users and accts[acct].limits == {}
    assert snap.jobs == ()
    assert abs(snap.taken_at - time.time()) < 60


def test_drained_node_is_unusable(cluster, testbed):
    testbed.run(["scontrol", "update", "nodename=k80-1", "state=drain", "reason=contract-test"])
    try:
        snap = cluster.snapshot()
        node = next(n for n in snap.nodes if n.name == "k80-1")
        assert "DRAIN" in node.state and not node.usable
        assert snap.gpu_types()["k80"].unusable == 4 and snap.capacity()["k80"] == 2
    finally:
        testbed.run(["scontrol", "update", "nodename=k80-1", "state=resume"])


def test_pending_and_running_jobs(cluster, testbed):
    run = testbed.sbatch(account="acct_a", gpus=2, gpu_type="v100", name="ct-run", comment="fair:class=resnet50")
    held = testbed.sbatch(account="acct_b", gpus=3, via="gpus", name="ct-held", extra=["--hold"])
    cpu = testbed.sbatch(account="acct_c", gpus=0, name="ct-cpu")
    testbed.wait_state(run, "RUNNING")
    snap = cluster.snapshot()
    jobs = {j.job_id: j for j in snap.jobs}
    assert cpu not in jobs  # no GPUs -> not a slurm-fair job
    r = jobs[run]
    assert (r.account, r.user, r.state, r.gpus, r.gpu_type, r.comment, r.name) == (
        "acct_a", "alice", "RUNNING", 2, "v100", "fair:class=resnet50", "ct-run")
    assert dict(r.gpus_allocated) == {"v100": 2} and r.start_time and r.partition == "gpu"
    h = jobs[held]
    assert (h.account, h.user, h.state, h.reason, h.gpus, h.gpu_type) == (
        "acct_b", "bob", "PENDING", "JobHeldUser", 3, None)
    assert h.start_time is None and dict(h.gpus_allocated) == {}
    assert snap.gpu_types()["v100"].allocated == 2


def test_wckey_is_read(cluster, testbed):
    j = testbed.sbatch(account="acct_c", user="root", gpus=1, gpu_type="k80", wckey="ct_wckey", extra=["--hold"])
    assert _job(cluster, j).wckey == "ct_wckey"


def test_typed_limit_makes_a_real_job_pend_and_clearing_releases_it(cluster, testbed):
    cluster.set_accounts_gpu_limits({"acct_a": {"v100": 1}})
    assert dict(cluster.snapshot().account("acct_a").limits) == {"v100": 1}
    first = testbed.sbatch(account="acct_a", gpus=1, gpu_type="v100", name="ct-lim1")
    testbed.wait_state(first, "RUNNING")
    second = testbed.sbatch(account="acct_a", gpus=1, gpu_type="v100", name="ct-lim2")
    testbed.wait_for(lambda: testbed.job_state(second) == ("PENDING", "AssocGrpGRES"), 30,
                     what="second job pending AssocGrpGRES")
    assert _job(cluster, second).reason == "AssocGrpGRES"

    cluster.set_accounts_gpu_limits({"acct_a": {"v100": CLEAR}})
    assert dict(cluster.snapshot().account("acct_a").limits) == {}
    testbed.wait_state(second, "RUNNING", timeout=60)


def test_batched_limits_for_several_accounts(cluster, testbed):
    before = _calls(cluster, "sacctmgr")
    cluster.set_accounts_gpu_limits({
        "acct_a": {"k80": 2, ANY_GPU: 5},
        "acct_b": {ANY_GPU: 5, "k80": 2},
        "acct_c": {"a100": 1},
    })
    if before is not None:
        assert _calls(cluster, "sacctmgr") - before == 2  # acct_a and acct_b share one call
    snap = cluster.snapshot()
    assert dict(snap.account("acct_a").limits) == {"k80": 2, ANY_GPU: 5}
    assert dict(snap.account("acct_b").limits) == {"k80": 2, ANY_GPU: 5}
    assert dict(snap.account("acct_c").limits) == {"a100": 1}
    # only the given keys change; CLEAR removes one
    cluster.set_accounts_gpu_limits({"acct_a": {ANY_GPU: CLEAR}, "acct_b": {ANY_GPU: CLEAR}})
    snap = cluster.snapshot()
    assert dict(snap.account("acct_a").limits) == {"k80": 2}
    assert dict(snap.account("acct_b").limits) == {"k80": 2}
    assert dict(snap.account("acct_c").limits) == {"a100": 1}


def test_site_factor_in_sprio_and_snapshot(cluster, testbed):
    cluster.set_accounts_gpu_limits({"acct_a": {"v100": 0}})  # pending, not held: sprio lists them
    ids = [testbed.sbatch(account="acct_a", gpus=1, gpu_type="v100", name=f"ct-site{i}") for i in range(3)]
    for j in ids:
        testbed.wait_for(lambda j=j: testbed.job_state(j) == ("PENDING", "AssocGrpGRES"), 30, what=f"{j} pending")
    before = _calls(cluster, "scontrol")
    cluster.set_site_factors({ids[0]: 500, ids[1]: 500, ids[2]: 7})
    if before is not None:
        assert _calls(cluster, "scontrol") - before == 2  # one call per value
    out = testbed.run(["sprio", "-h", "-o", "%i|%S"]).stdout
    sprio = dict(line.split("|") for line in out.split())
    assert [int(sprio[str(j)]) for j in ids] == [500, 500, 7]
    jobs = {j.job_id: j for j in cluster.snapshot().jobs}
    assert [jobs[j].site_factor for j in ids] == [500, 500, 7]
    assert jobs[ids[0]].priority > jobs[ids[2]].priority


def test_retype_pending_job(cluster, testbed):
    gres_job = testbed.sbatch(account="acct_c", gpus=1, gpu_type="v100", name="ct-retype", extra=["--hold"])
    gpus_job = testbed.sbatch(account="acct_c", gpus=2, gpu_type="v100", via="gpus", name="ct-retype2",
                              extra=["--hold"])
    if not supports_pending_retype(cluster.version()):
        with pytest.raises(Unsupported, match=r"23\.02\.6") as e:
            cluster.set_job_gpu_type(gres_job, "k80", 1)
        assert cluster.version() in str(e.value)
        assert _job(cluster, gres_job).gpu_type == "v100"  # untouched
        return
    cluster.set_job_gpu_type(gres_job, "k80", 1)
    cluster.set_job_gpu_type(gpus_job, "a100", 2)
    jobs = {j.job_id: j for j in cluster.snapshot().jobs}
    assert (jobs[gres_job].gpu_type, jobs[gres_job].gpus) == ("k80", 1)
    assert (jobs[gpus_job].gpu_type, jobs[gpus_job].gpus) == ("a100", 2)
    assert "v100" not in testbed.job(gres_job).get("TresPerNode", "")
    testbed.run(["scontrol", "release", str(gres_job), str(gpus_job)])
    testbed.wait_state(gres_job, "RUNNING")
    testbed.wait_state(gpus_job, "RUNNING")
    jobs = {j.job_id: j for j in cluster.snapshot().jobs}
    assert dict(jobs[gres_job].gpus_allocated) == {"k80": 1}
    assert dict(jobs[gpus_job].gpus_allocated) == {"a100": 2}


def test_signal_batch_shell_and_requeue(cluster, testbed):
    marker = testbed.jobdir / f"ct-signal-{time.time_ns()}"
    script = (f"trap 'echo got-usr1 >> {marker}' USR1; echo started >> {marker}; "
              "while true; do sleep 1; done")
    j = testbed.sbatch(account="acct_b", gpus=1, gpu_type="k80", name="ct-signal", command=script)
    testbed.wait_state(j, "RUNNING")
    testbed.wait_for(lambda: marker.exists() and "started" in marker.read_text(), 30, what="job started")
    cluster.signal_job(j, "USR1")
    testbed.wait_for(lambda: "got-usr1" in marker.read_text(), 30, what="USR1 handled by the batch shell")
    assert testbed.job_state(j)[0] == "RUNNING"  # the trap kept it alive

    cluster.requeue_job(j)
    job = testbed.wait_for(lambda: (x := _job(cluster, j)) and x.restart_count == 1 and x, 60,
                           what="requeued job with restart_count 1")
    assert job.state in ("PENDING", "RUNNING")
    testbed.wait_for(lambda: marker.read_text().count("started") == 2, 90, what="job restarted")


def test_unreachable_controller_raises_within_timeout(cluster, testbed, tmp_path):
    if cluster.name != "cli":
        pytest.skip("SLURM_CONF redirection applies to the CLI backend's child processes only")
    conf_dir = Path(testbed.env["SLURM_CONF"]).parent
    dead = tmp_path / "etc"
    shutil.copytree(conf_dir, dead)
    text = (dead / "slurm.conf").read_text().splitlines()
    text = ["SlurmctldPort=9" if line.startswith("SlurmctldPort=") else
            "AccountingStoragePort=9" if line.startswith("AccountingStoragePort=") else line for line in text]
    (dead / "slurm.conf").write_text("\n".join(text) + "\n")
    tmp_path.chmod(0o755)
    env = dict(testbed.env, SLURM_CONF=str(dead / "slurm.conf"))
    for timeout in (3.0, 30.0):
        c = connect(backend="cli", timeout=timeout, env=env)
        t0 = time.monotonic()
        with pytest.raises(ClusterUnreachable):
            c.snapshot()
        assert time.monotonic() - t0 < timeout + 3
