"""Safe on a real site, on the testbed: the site's own GPU limits are recorded before slurm-fair first changes
an account and ``slurm-fair rollback`` restores them exactly (and clears what slurm-fair set where there was
nothing, SiteFactors, the type map); an account with its own limits is left alone by default; every
``sacctmgr`` call names the cluster, so a slurmdbd shared with another cluster is not touched there."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path


from slurm_fair import config as config_mod
from slurm_fair.cluster.cli import CliCluster
from slurm_fair.store import Store

PY = [sys.executable, "-c", "from slurm_fair.cli import main; main()"]


def _grptres(testbed, account: str, cluster: str | None = None) -> str:
    where = [f"account={account}"] + ([f"cluster={cluster}"] if cluster else [])
    out = testbed.run(["sacctmgr", "-n", "-P", "show", "assoc", "where", *where, "format=account,user,grptres"]).stdout
    rows = [t for a, u, t in (line.split("|") for line in out.splitlines()) if a == account and not u]
    return rows[0] if rows else "<none>"


def _config(testbed, tmp_path: Path, **limits) -> Path:
    base = tomllib.loads(Path(testbed.env["SLURM_FAIR_CONFIG"]).read_text())
    base.setdefault("daemon", {}).update(database=str(tmp_path / "sf.sqlite"), dry_run=False, period=3)
    base["preemption"] = {"enabled": True, "min_runtime": 600}  # claims out of borrowed GPUs, nothing preempted
    base["limits"] = dict(limits)
    base["metrics"] = {"listen": ""}
    path = tmp_path / "slurm-fair.toml"
    path.write_text(config_mod.render(config_mod.from_dict(base).as_dict()))
    return path


def _sf(testbed, cfg, *args, check=True):
    r = subprocess.run([*PY, *args, "--config", str(cfg)], env=testbed.env, capture_output=True, text=True,
                       timeout=180)
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def _b_on_every_gpu_and_a_waits(testbed) -> None:
    """acct_b runs a 1-GPU job on every GPU; acct_a queues three V100 jobs (its claims come out of acct_b's)."""
    for t, n in (("a100", 4), ("v100", 6), ("k80", 6)):
        for _ in range(n):
            testbed.sbatch("acct_b", gpus=1, gpu_type=t, name="flat")
    testbed.wait_for(lambda: len(testbed.run(["squeue", "-h", "-t", "R"]).stdout.split("\n")) >= 16, 60,
                     what="acct_b on every GPU")
    for _ in range(3):
        testbed.sbatch("acct_a", gpus=1, gpu_type="v100", name="fast")
    testbed.wait_scheduled()  # acct_b on all 16 GPUs, acct_a's three pending: what the next round must see


def test_rollback_restores_the_site_limits_exactly_and_leaves_no_trace(testbed, tmp_path):
    cfg = _config(testbed, tmp_path, site_limits="adopt")
    c = config_mod.load(cfg)
    # the site's own limit on acct_b, set before slurm-fair ever ran
    testbed.sacctmgr("modify", "account", "where", "name=acct_b", "set", "GrpTRES=gres/gpu:a100=4,gres/gpu=16")
    site_b = _grptres(testbed, "acct_b")
    # a new database facing GPU limits writes none until the admin says whose they are (issue 29): the site's
    _sf(testbed, cfg, "limits", "adopt")
    _b_on_every_gpu_and_a_waits(testbed)
    _sf(testbed, cfg, "daemon", "--once")
    _sf(testbed, cfg, "daemon", "--once")
    # acct_a's waiting jobs claim V100s acct_b borrows: acct_b's limits changed, its site limit an upper bound
    now_b = _grptres(testbed, "acct_b")
    assert now_b != site_b and "gres/gpu:v100=3" in now_b and "gres/gpu:a100=4" in now_b, now_b
    with Store(c.database_path) as st:
        assert st.site_limits()["acct_b"] == {"a100": 4, "*": 16}
    assert c.type_map_path.exists()
    factors = testbed.run(["sprio", "-h", "-o", "%i|%S"]).stdout
    assert any(int(line.split("|")[1]) != 0 for line in factors.split()), factors

    # the daemon running: rollback refuses (the daemon would put its limits back)
    with Store(c.database_path) as st:
        n = len(st.rounds(limit=1000))
    proc = subprocess.Popen([*PY, "daemon", "--config", str(cfg)], env=testbed.env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        def more_rounds():
            with Store(c.database_path) as st:
                return len(st.rounds(limit=1000)) > n

        testbed.wait_for(more_rounds, 60, what="a round of the running daemon")
        r = _sf(testbed, cfg, "rollback", check=False)
        assert r.returncode != 0 and "stop the daemon first" in r.stderr, r.stdout + r.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=60)

    dry = json.loads(_sf(testbed, cfg, "rollback", "--dry-run", "--json").stdout)
    assert dry["dry_run"] and dry["limits"]["acct_b"] and _grptres(testbed, "acct_b") == now_b  # nothing done
    out = json.loads(_sf(testbed, cfg, "rollback", "--json").stdout)
    assert not out["failed"] and out["type_map"] == str(c.type_map_path)
    assert _grptres(testbed, "acct_b") == site_b  # the exact site value
    assert _grptres(testbed, "acct_a") == "" and _grptres(testbed, "acct_c") == ""
    assert not c.type_map_path.exists()
    factors = testbed.run(["sprio", "-h", "-o", "%i|%S"]).stdout
    assert all(int(line.split("|")[1]) == 0 for line in factors.split()), factors
    again = json.loads(_sf(testbed, cfg, "rollback", "--json").stdout)
    assert again["limits"] == {} and again["site_factors"] == [] and again["type_map"] is None  # idempotent


def test_an_account_with_its_own_limits_is_left_alone_by_default(testbed, tmp_path):
    cfg = _config(testbed, tmp_path)  # limits.site_limits = "respect"
    testbed.sacctmgr("modify", "account", "where", "name=acct_c", "set", "GrpTRES=gres/gpu:k80=2")
    _sf(testbed, cfg, "limits", "adopt")  # the site's own (a new database writes nothing until told)
    for t, n in (("a100", 4), ("v100", 6), ("k80", 6)):
        for _ in range(n):
            testbed.sbatch("acct_b", gpus=1, gpu_type=t, name="flat")
    testbed.sbatch("acct_c", gpus=1, gpu_type="v100", name="mid")
    testbed.wait_scheduled()
    _sf(testbed, cfg, "daemon", "--once")
    with Store(tmp_path / "sf.sqlite") as st:
        d = st.round().details
    assert d["left_alone"] == ["acct_c"] and _grptres(testbed, "acct_c") == "gres/gpu:k80=2"


def test_sacctmgr_calls_name_the_cluster(testbed):
    if testbed.run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"]).stdout.split().count("other"):
        testbed.sacctmgr("delete", "cluster", "other")
    testbed.sacctmgr("add", "cluster", "other")
    try:
        testbed.sacctmgr("add", "account", "acct_a", "cluster=other")
        cl = CliCluster(timeout=30, env=testbed.env)
        assert cl.cluster_name() == testbed.env.get("TESTBED_CLUSTER", "testbed")
        cl.set_accounts_gpu_limits({"acct_a": {"v100": 2}})
        assert _grptres(testbed, "acct_a", cl.cluster_name()) == "gres/gpu:v100=2"
        assert _grptres(testbed, "acct_a", "other") == ""  # the other cluster's association is untouched
        assert [a.name for a in cl.snapshot().accounts].count("acct_a") == 1
        assert all("cluster=" in " ".join(argv) for argv in cl.calls if argv[0] == "sacctmgr")
    finally:
        testbed.sacctmgr("delete", "cluster", "other", check=False)
        testbed.reset_limits()


def test_preflight_passes_on_the_testbed_and_names_what_is_missing(testbed, tmp_path):
    cfg = _config(testbed, tmp_path)
    r = _sf(testbed, cfg, "preflight", "--json", check=False)
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["ok"], out
    checks = {f["what"]: f["level"] for f in out["findings"]}
    assert {checks[k] for k in ("AccountingStorageEnforce", "AccountingStorageTRES", "PriorityType",
                                "JobSubmitPlugins", "job_submit.lua", "PrologSlurmctld", "EpilogSlurmctld", "Prolog",
                                "Epilog")} == {"ok"}
    # the clients' slurm.conf copied to a folder without job_submit.lua, and a QOS with a GPU limit: named
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "slurm.conf").write_text(Path(testbed.env["SLURM_CONF"]).read_text())
    testbed.sacctmgr("add", "qos", "sf_gpucap", "GrpTRES=gres/gpu=2")
    try:
        r = subprocess.run([*PY, "preflight", "--json", "--config", str(cfg)], capture_output=True, text=True,
                           timeout=120, env=dict(testbed.env, SLURM_CONF=str(conf / "slurm.conf")))
        out = json.loads(r.stdout)
        found = {f["what"]: f for f in out["findings"]}
        assert r.returncode == 1 and not out["ok"]
        assert found["job_submit.lua"]["level"] == "problem" and "does not exist" in found["job_submit.lua"]["detail"]
        # issue 29: a QOS GPU limit below the capacity binds before slurm-fair's limits: a problem, with the fix
        assert found["QOS sf_gpucap"]["level"] == "problem" and "GrpTRES=gres/gpu=2" in found["QOS sf_gpucap"]["detail"]
        assert "sacctmgr modify qos sf_gpucap set GrpTRES=gres/gpu=-1" in found["QOS sf_gpucap"]["detail"]
    finally:
        testbed.sacctmgr("delete", "qos", "sf_gpucap", check=False)


def test_a_limit_set_by_hand_is_kept_and_rollback_leaves_it(testbed, tmp_path):
    """Issue 29: an admin sets a GPU limit by hand on an account slurm-fair manages (during an incident); the
    rounds keep it (before: the next round wrote slurm-fair's value over it), ``status`` names it, and
    ``rollback`` leaves it while it takes back what slurm-fair wrote (before: it cleared it)."""
    cfg = _config(testbed, tmp_path)
    _b_on_every_gpu_and_a_waits(testbed)
    _sf(testbed, cfg, "daemon", "--once")
    written = _grptres(testbed, "acct_b")
    assert "gres/gpu:v100=3" in written, written  # acct_a's waiting jobs claim 3 of the V100s acct_b borrows
    # the admin's hand: acct_b's V100s down to 1 (everything else as slurm-fair wrote it)
    hand = ",".join("gres/gpu:v100=1" if item == "gres/gpu:v100=3" else item for item in written.split(","))
    testbed.sacctmgr("modify", "account", "where", "name=acct_b", "set", f"GrpTRES={hand}")
    assert "gres/gpu:v100=1" in _grptres(testbed, "acct_b")
    for _ in range(2):
        _sf(testbed, cfg, "daemon", "--once")
        assert "gres/gpu:v100=1" in _grptres(testbed, "acct_b"), _grptres(testbed, "acct_b")
    st = json.loads(_sf(testbed, cfg, "status", "--json").stdout)
    assert st["hand_set"] == {"acct_b": {"v100": 1}}, st["hand_set"]
    out = json.loads(_sf(testbed, cfg, "rollback", "--json").stdout)
    assert not out["failed"] and out["kept"] == {"acct_b": {"v100": 1}}, out
    assert _grptres(testbed, "acct_b") == "gres/gpu:v100=1"  # the rest (slurm-fair's) cleared: acct_b had none


def test_a_new_database_facing_gpu_limits_writes_none_until_told_whose_they_are(testbed, tmp_path):
    """Issue 29: after a restart with a lost database, slurm-fair's own old limits were taken for the site's (and
    respected for ever). A store with no record cannot tell a new install on a site with limits of its own from
    a lost database: its rounds write no limit, status says why, and `limits clear` (an earlier install's) or
    `limits adopt` (the site's) lets the rounds go on."""
    cfg = _config(testbed, tmp_path)
    testbed.sacctmgr("modify", "account", "where", "name=acct_b", "set", "GrpTRES=gres/gpu:v100=6,gres/gpu=16")
    _b_on_every_gpu_and_a_waits(testbed)  # the limit binds nothing yet; acct_a waits for V100s
    _sf(testbed, cfg, "daemon", "--once")
    assert _grptres(testbed, "acct_b") == "gres/gpu:v100=6,gres/gpu=16" and _grptres(testbed, "acct_a") == ""
    st = json.loads(_sf(testbed, cfg, "status", "--json").stdout)
    assert st["unrecorded"] == {"acct_b": {"v100": 6, "*": 16}}, st["unrecorded"]
    assert "NO LIMIT WRITTEN" in _sf(testbed, cfg, "status").stdout
    out = json.loads(_sf(testbed, cfg, "limits", "clear", "acct_b", "--json").stdout)
    assert out["limits"] == {"acct_b": {"v100": -1, "*": -1}} and not out["failed"]
    assert _grptres(testbed, "acct_b") == ""
    _sf(testbed, cfg, "daemon", "--once")
    st = json.loads(_sf(testbed, cfg, "status", "--json").stdout)
    assert st["unrecorded"] == {} and _grptres(testbed, "acct_b") != ""  # the rounds write again


def test_a_lost_database_beside_the_ownership_file_rolls_back_exactly_slurm_fairs_limits(testbed, tmp_path):
    """Issue 29: a lost database took with it what slurm-fair had written: rollback then said "no GPU limit to
    restore" and left every limit. The ownership file (limits.ownership_file, by default beside the database's
    folder) keeps it: a new database's rollback clears exactly slurm-fair's own limits and keeps a hand-set one."""
    cfg = _config(testbed, tmp_path)
    _b_on_every_gpu_and_a_waits(testbed)
    _sf(testbed, cfg, "daemon", "--once")
    written = _grptres(testbed, "acct_b")
    assert "gres/gpu:v100=3" in written, written
    own = tmp_path.parent / f"{tmp_path.name}-ownership" / "limits.json"  # "auto": not the database's folder
    assert [c["acct_b"]["v100"] for c in json.loads(own.read_text())["clusters"].values()] == [3]
    hand = ",".join("gres/gpu:v100=1" if item == "gres/gpu:v100=3" else item for item in written.split(","))
    testbed.sacctmgr("modify", "account", "where", "name=acct_b", "set", f"GrpTRES={hand}")
    assert any(testbed.gpu_limits()[a] for a in ("acct_a", "acct_c"))  # slurm-fair wrote more than acct_b's
    for p in tmp_path.glob("sf.sqlite*"):  # the database is lost
        p.unlink()
    out = json.loads(_sf(testbed, cfg, "rollback", "--json").stdout)
    assert not out["failed"] and out["unrecorded"] == {} and out["kept"] == {"acct_b": {"v100": 1}}, out
    assert {a: lim for a, lim in testbed.gpu_limits().items() if lim} == {"acct_b": {"v100": 1}}
    assert json.loads(own.read_text())["clusters"] == {}  # given back: nothing of slurm-fair's is left
