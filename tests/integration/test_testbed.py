"""The testbed itself: topology, accounts, GPU jobs, typed limits and the site factor, on real Slurm."""

from __future__ import annotations

import re

import pytest

from tests.integration.conftest import ACCOUNTS, GPUS, NODES, USER_ACCOUNT

pytestmark = pytest.mark.integration


def _gres(text: str) -> dict[str, int]:
    """'gpu:v100:2(S:0),gpu:k80:2' -> {'v100': 2, 'k80': 2}."""
    out: dict[str, int] = {}
    for item in text.split(","):
        item = re.sub(r"\(.*?\)", "", item).strip()
        parts = item.split(":")
        if len(parts) == 3 and parts[0] == "gpu":
            out[parts[1]] = out.get(parts[1], 0) + int(parts[2])
    return out


def test_nodes_and_gpu_types(testbed):
    sinfo = testbed.run(["sinfo", "-h", "-N", "-o", "%N|%t|%P"]).stdout.split()
    states = {line.split("|")[0]: line.split("|")[1] for line in sinfo}
    assert sorted(states) == sorted(NODES)
    assert all(s in ("idle", "mix", "alloc", "comp") for s in states.values()), states  # none down/drained
    assert {line.split("|")[2] for line in sinfo} == {"gpu*"}

    gres = {}
    for line in testbed.run(["scontrol", "show", "node", "-o"]).stdout.splitlines():
        name = re.search(r"NodeName=(\S+)", line).group(1)
        gres[name] = _gres(re.search(r"\bGres=(\S+)", line).group(1))
    assert gres == GPUS


def test_accounts_fairshare_and_users(testbed):
    out = testbed.run(["sacctmgr", "-n", "-P", "show", "assoc", "format=account,user,fairshare"]).stdout
    rows = [line.split("|") for line in out.splitlines() if line]
    shares = {a: int(s) for a, u, s in rows if u == "" and a in ACCOUNTS}
    assert shares == ACCOUNTS
    users = {(a, u) for a, u, _ in rows if u}
    for user, acct in USER_ACCOUNT.items():
        assert (acct, user) in users
        assert {a for a, u in users if u == user} == {acct}
    assert {a for a, u in users if u == "root"} >= set(ACCOUNTS)


def test_typed_gpu_job_runs_on_matching_node_and_completes(testbed):
    job = testbed.sbatch(account="acct_a", gpus=1, gpu_type="v100", name="v100-probe",
                         command='echo "gpus=$CUDA_VISIBLE_DEVICES user=$(id -un)"')
    info = testbed.wait_state(job, "COMPLETED", timeout=60)
    assert info["NodeList"] in ("v100-1", "mixed-1")
    assert info["UserId"].startswith("alice(")
    assert info["Account"] == "acct_a"
    out = (testbed.jobdir / f"slurm-{job}.out").read_text()
    assert re.fullmatch(r"gpus=\d user=alice\n", out), out


def test_typed_grptres_limit_makes_job_pend(testbed):
    testbed.sacctmgr("modify", "account", "where", "name=acct_b", "set", "GrpTRES=gres/gpu:v100=1")
    first = testbed.sbatch(account="acct_b", gpus=1, gpu_type="v100", name="lim-1")
    testbed.wait_state(first, "RUNNING", timeout=60)
    second = testbed.sbatch(account="acct_b", gpus=1, gpu_type="v100", name="lim-2")
    testbed.wait_for(lambda: testbed.job_state(second) == ("PENDING", "AssocGrpGRES"), 60,
                     what="second v100 job pending on AssocGrpGRES")
    # a k80 job of the same account is not held back by the v100 limit
    k80 = testbed.sbatch(account="acct_b", gpus=1, gpu_type="k80", name="lim-k80")
    testbed.wait_state(k80, "RUNNING", timeout=60)
    # lifting the limit lets the pending job start
    testbed.sacctmgr("modify", "account", "where", "name=acct_b", "set", "GrpTRES=gres/gpu:v100=-1")
    testbed.wait_state(second, "RUNNING", timeout=60)


def test_site_factor_shows_in_sprio(testbed):
    # keep the job pending with a zero k80 limit, then give it a site factor
    testbed.sacctmgr("modify", "account", "where", "name=acct_c", "set", "GrpTRES=gres/gpu:k80=0")
    job = testbed.sbatch(account="acct_c", gpus=1, gpu_type="k80", name="site")
    testbed.wait_for(lambda: testbed.job_state(job)[0] == "PENDING", 30, what="job pending")
    testbed.run(["scontrol", "update", f"jobid={job}", "sitefactor=4321"])

    def sprio_site() -> tuple[int, int] | None:
        r = testbed.run(["sprio", "-h", "-j", str(job), "-o", "%i %S %Y"], check=False)
        fields = r.stdout.split()
        if len(fields) == 3 and fields[0] == str(job) and int(fields[1]) == 4321:
            return int(fields[1]), int(fields[2])
        return None

    # priorities stay at 1 until the first PriorityCalcPeriod pass (~60 s after slurmctld start)
    site, prio = testbed.wait_for(sprio_site, 120, interval=1, what="SITE=4321 in sprio")
    assert site == 4321
    testbed.wait_for(lambda: int(testbed.job(job).get("Priority", "0")) >= 4321, 120, interval=1,
                     what="job priority to include the site factor")


def test_gpus_option_and_account_enforcement(testbed):
    job = testbed.sbatch(account="acct_c", gpus=1, gpu_type="a100", via="gpus", name="gpus-a100",
                         command="echo $SLURM_JOB_ACCOUNT")
    info = testbed.wait_state(job, "COMPLETED", timeout=60)
    assert info["NodeList"] == "a100-1"
    assert info["UserId"].startswith("carol(")
    # associations are enforced: alice has no association with acct_b
    with pytest.raises(AssertionError, match="Invalid account"):
        testbed.sbatch(account="acct_b", user="alice", gpus=1, gpu_type="k80", name="wrong-acct")


def test_env_file_and_slurm_fair_config(testbed):
    import tomllib

    env = testbed.env
    assert env["SLURM_FAIR_TESTBED_RELEASE"] == testbed.release
    cfg = tomllib.loads(open(env["SLURM_FAIR_CONFIG"]).read())
    assert cfg["cluster"]["backend"] == "cli"
    assert cfg["daemon"]["database"].startswith(env["SLURM_FAIR_TESTBED"])
    assert cfg["daemon"]["period"] > 0
    assert testbed.slurm_version[:2] == {"bookworm": (22, 5), "trixie": (24, 11), "forky": (26, 5)}[testbed.release]
