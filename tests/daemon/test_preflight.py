"""slurm-fair preflight's checks (daemon/preflight.py) on texts shaped like Slurm's output."""

from __future__ import annotations

from pathlib import Path

from slurm_fair import config
from slurm_fair.cluster.base import Account, Node, Snapshot
from slurm_fair.daemon import preflight as PF

GOOD = """Configuration data as of 2026-11-26T09:00:00
AccountingStorageEnforce = associations,limits,qos
AccountingStorageTRES   = cpu,mem,gres/gpu,gres/gpu:a100,gres/gpu:v100
ClusterName             = lab
JobSubmitPlugins        = lua
PriorityType            = priority/multifactor
PrologSlurmctld         = /etc/slurm/hooks/slurm-fair-hook
EpilogSlurmctld         = /etc/slurm/hooks/slurm-fair-hook
"""
BAD = """AccountingStorageEnforce = associations
AccountingStorageTRES   = cpu,mem,gres/gpu
JobSubmitPlugins        = (null)
PriorityType            = priority/basic
PrologSlurmctld         = (null)
EpilogSlurmctld         = (null)
"""
NODES = (Node("a", ("IDLE",), ("gpu",), {"a100": 4}, {}), Node("v", ("IDLE",), ("gpu",), {"v100": 4}, {}))


def snap(accounts=()):
    return Snapshot("22.05.8", 0.0, NODES, (), tuple(accounts), ("gpu",))


def cfg(tmp_path, **daemon):
    (tmp_path / "etc").mkdir(exist_ok=True)
    return config.from_dict({"daemon": {"database": str(tmp_path / "db" / "s.sqlite"), **daemon},
                             "submit": {"type_map": str(tmp_path / "etc" / "gpu_type_map.txt")},
                             "hooks": {"spool": str(tmp_path / "spool")}})


def test_a_ready_site_has_no_problem_and_notes_what_overrides_it(tmp_path):
    (tmp_path / "db").mkdir()
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "job_submit.lua").write_text("-- script\n")
    found = PF.check(PF.parse_config(GOOD), snap([Account("dept", 1, {}, (), "root"),
                                                  Account("kid", 1, {"v100": 2}, ("u",), "dept")]),
                     cfg(tmp_path, dry_run=False), qos=PF.qos_gpu_limits("normal||||\ncap|gres/gpu=40|||\n"),
                     partitions=PF.partition_qos("PartitionName=gpu\n   AllocNodes=ALL Default=YES QoS=capq\n"
                                                 "PartitionName=cpu QoS=N/A"),
                     slurm_conf=str(tmp_path / "etc" / "slurm.conf"), site={})
    assert not [f for f in found if f.level == PF.PROBLEM], found
    notes = {f.what: f.detail for f in found if f.level == PF.NOTE}
    assert notes["QOS cap"].startswith("GrpTRES=gres/gpu=40: applied before account limits, at or above the "
                                       "capacity: it cannot bind")
    assert notes["partition gpu"].startswith("QOS capq") and "partition cpu" not in notes
    assert "has GPU limits of its own (gres/gpu:v100=2): left alone" in notes["account kid"]
    assert "parents dept are never limited" in notes["account tree"]


def test_every_missing_prerequisite_is_named(tmp_path):
    found = PF.check(PF.parse_config(BAD), snap(), cfg(tmp_path), qos={}, partitions={},
                     slurm_conf=str(tmp_path / "etc" / "slurm.conf"), site={})
    problems = {f.what: f.detail for f in found if f.level == PF.PROBLEM}
    assert set(problems) == {"AccountingStorageEnforce", "AccountingStorageTRES", "PriorityType", "JobSubmitPlugins",
                             "job_submit.lua", "PrologSlurmctld", "EpilogSlurmctld", "daemon.database"}
    assert "add 'limits'" in problems["AccountingStorageEnforce"]
    assert problems["AccountingStorageTRES"].startswith("does not track gres/gpu:a100, gres/gpu:v100")
    assert "does not exist" in problems["job_submit.lua"]
    assert problems["PrologSlurmctld"].startswith("not set: no job records")
    assert any(f.what == "daemon.dry_run" and "shadow mode" in f.detail for f in found)


def test_the_map_may_live_in_the_daemons_folder_through_a_link_next_to_job_submit_lua(tmp_path):
    (tmp_path / "db").mkdir()
    etc = tmp_path / "slurm"
    etc.mkdir()
    (etc / "job_submit.lua").write_text("-- script\n")
    c = config.from_dict({"daemon": {"database": str(tmp_path / "db" / "s.sqlite"), "dry_run": False},
                          "submit": {"type_map": str(tmp_path / "db" / "gpu_type_map.txt")},
                          "hooks": {"spool": str(tmp_path / "spool")}})

    def lua_check():
        found = PF.check(PF.parse_config(GOOD), snap(), c, qos={}, partitions={}, slurm_conf=str(etc / "slurm.conf"),
                         site={})
        return next(f for f in found if f.what == "job_submit.lua")

    bad = lua_check()
    assert bad.level == PF.PROBLEM and f"ln -s {tmp_path / 'db' / 'gpu_type_map.txt'} {etc / 'gpu_type_map.txt'}" in bad.detail
    (etc / "gpu_type_map.txt").symlink_to(tmp_path / "db" / "gpu_type_map.txt")
    good = lua_check()
    assert good.level == PF.OK and "through the link" in good.detail


def test_a_site_hook_in_slurm_fairs_place_is_named_with_the_chain_that_keeps_it(tmp_path):
    (tmp_path / "db").mkdir()
    c = config.from_dict({"daemon": {"database": str(tmp_path / "db" / "s.sqlite")},
                          "hooks": {"spool": str(tmp_path / "spool")}})
    pd = tmp_path / "prolog.d"
    pd.mkdir()
    (pd / "50-slurm-fair").symlink_to(tmp_path / "hooks" / "slurm-fair-hook")  # a link into a Prolog folder
    text = GOOD.replace("PrologSlurmctld         = /etc/slurm/hooks/slurm-fair-hook",
                        "PrologSlurmctld         = /etc/slurm/site_prolog.sh") + (
        f"Prolog                  = {pd}/*\nEpilog                  = /etc/slurm/epilog.d/*\n")
    found = {f.what: f for f in PF.check(PF.parse_config(text), snap(), c, qos={}, partitions={}, slurm_conf=None,
                                         site={})}
    assert found["PrologSlurmctld"].level == PF.PROBLEM
    assert ("runs /etc/slurm/site_prolog.sh, not slurm-fair's hook: no job records; keep it by chaining: "
            "slurm-fair hooks install DEST --chain PrologSlurmctld=/etc/slurm/site_prolog.sh") in found["PrologSlurmctld"].detail
    assert found["EpilogSlurmctld"].level == PF.OK
    assert found["Prolog"].level == PF.OK  # the folder holds a link to the shim
    assert found["Epilog"].level == PF.NOTE and "ln -s DEST/slurm-fair-hook /etc/slurm/epilog.d" in found["Epilog"].detail


def test_privileges_root_or_operator():
    assert PF.privilege("root", 0, None).level == PF.OK
    assert PF.privilege("slurm-fair", 990, "Operator").level == PF.OK
    assert PF.privilege("slurm-fair", 990, "Administrator").level == PF.OK
    f = PF.privilege("slurm-fair", 990, "None")
    assert f.level == PF.PROBLEM and "sacctmgr add user slurm-fair account=<any> adminlevel=Operator" in f.detail
    assert PF.privilege("slurm-fair", 990, None) is None


def test_a_status_file_users_cannot_reach_is_a_note(tmp_path):
    import os

    (tmp_path / "db").mkdir()
    os.chmod(tmp_path / "db", 0o750)
    found = PF.check(PF.parse_config(GOOD), snap(), cfg(tmp_path, dry_run=False), qos={}, partitions={},
                     slurm_conf=None, site={})
    (f,) = [f for f in found if f.what == "daemon.status_file"]
    assert f.level == PF.NOTE and f.detail.startswith(f"the folder {tmp_path / 'db'} is not searchable by other "
                                                      "users (mode 750): users cannot read status.json there")
    import shutil
    import tempfile

    pub = Path(tempfile.mkdtemp(prefix="sf-status-", dir="/tmp"))  # /tmp and / are world-searchable
    try:
        os.chmod(pub, 0o755)
        c = config.from_dict({"daemon": {"database": str(tmp_path / "db" / "s.sqlite"),
                                         "status_file": str(pub / "s.json")}})
        (f,) = [f for f in PF.check(PF.parse_config(GOOD), snap(), c, qos={}, partitions={}, slurm_conf=None,
                                    site={}) if f.what == "daemon.status_file"]
        assert f.level == PF.OK and f.detail == f"{pub / 's.json'} (every user can reach it: slurm-fair why)"
    finally:
        shutil.rmtree(pub)


def test_slurm_24_11_lists_hook_keys_by_index_and_runs_each_line(tmp_path):
    # scontrol show config on 24.11.5 (measured on the trixie testbed): one indexed entry per slurm.conf line
    (tmp_path / "db").mkdir()
    c = config.from_dict({"daemon": {"database": str(tmp_path / "db" / "s.sqlite")},
                          "hooks": {"spool": str(tmp_path / "spool")}})
    base = GOOD.replace("PrologSlurmctld         = /etc/slurm/hooks/slurm-fair-hook\n", "").replace(
        "EpilogSlurmctld         = /etc/slurm/hooks/slurm-fair-hook\n", "")
    text = base + ("EpilogSlurmctld[0]      = /testbed/hooks/slurm-fair-hook\n"
                   "Prolog[0]               = /testbed/hooks/slurm-fair-hook\n"
                   "PrologEpilogTimeout     = 65534\n"
                   "PrologSlurmctld[0]      = /etc/slurm/site_prolog.sh\n"
                   "PrologSlurmctld[1]      = /testbed/hooks/slurm-fair-hook\n"
                   "SlurmctldHost[0]        = vm(127.0.0.1)\n")
    parsed = PF.parse_config(text)
    assert PF.config_values(parsed, "PrologSlurmctld") == ["/etc/slurm/site_prolog.sh", "/testbed/hooks/slurm-fair-hook"]
    assert PF.config_values(parsed, "Epilog") == [] and PF.config_values(parsed, "ClusterName") == ["lab"]
    found = {f.what: f for f in PF.check(parsed, snap(), c, qos={}, partitions={}, slurm_conf=None, site={})}
    assert found["PrologSlurmctld"].level == PF.OK and "each PrologSlurmctld line runs" in found["PrologSlurmctld"].detail
    assert found["EpilogSlurmctld"].level == PF.OK and found["EpilogSlurmctld"].detail == "/testbed/hooks/slurm-fair-hook"
    assert found["Prolog"].level == PF.OK and found["Epilog"].level == PF.NOTE
    two_site = base + "PrologSlurmctld[0]      = /a.sh\nPrologSlurmctld[1]      = /b.sh\n"
    found = {f.what: f for f in PF.check(PF.parse_config(two_site), snap(), c, qos={}, partitions={},
                                         slurm_conf=None, site={})}
    assert found["PrologSlurmctld"].level == PF.PROBLEM
    assert "add a line PrologSlurmctld=DEST/slurm-fair-hook" in found["PrologSlurmctld"].detail


def test_a_qos_gpu_limit_that_can_bind_is_a_problem_with_its_fix_unless_kept_on_purpose(tmp_path):
    """Issue 29 item 7: Slurm applies QOS limits before account limits; one below a type's capacity can hold back
    a job its account's guarantee would start (before: only a note)."""
    (tmp_path / "db").mkdir()
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "job_submit.lua").write_text("-- script\n")
    qos = PF.qos_gpu_limits("normal||||\ncap|gres/gpu=4||gres/gpu:v100=2|\nwide|gres/gpu=40|||\n")
    parts = PF.partition_qos("PartitionName=gpu QoS=cap\nPartitionName=big QoS=wide")

    def run(c):
        return {f.what: f for f in PF.check(PF.parse_config(GOOD), snap(), c, qos=qos, partitions=parts,
                                            slurm_conf=str(tmp_path / "etc" / "slurm.conf"), site={})}

    found = run(cfg(tmp_path, dry_run=False))
    assert found["QOS cap"].level == PF.PROBLEM
    assert "sacctmgr modify qos cap set GrpTRES=gres/gpu=-1 MaxTRESPU=gres/gpu:v100=-1" in found["QOS cap"].detail
    assert 'limits.qos_accepted = ["cap"]' in found["QOS cap"].detail
    assert found["partition gpu"].level == PF.PROBLEM and found["partition big"].level == PF.NOTE
    assert found["QOS wide"].level == PF.NOTE
    c = config.from_dict({**cfg(tmp_path, dry_run=False).as_dict(), "limits": {"qos_accepted": ["cap"]}})
    kept = run(c)
    assert kept["QOS cap"].level == PF.NOTE and "kept on purpose" in kept["QOS cap"].detail
    assert kept["partition gpu"].level == PF.NOTE


WEIGHTS = "PriorityWeightAge = 1000\nPriorityWeightFairShare = 10000\nPriorityWeightQOS = 10000\n" \
          "PriorityWeightTRES = CPU=500,GRES/gpu=1500\n"


def with_priority(tmp_path, **priority):
    return config.from_dict({**cfg(tmp_path).as_dict(), "priority": priority})


def test_a_site_factor_range_that_swamps_the_sites_priority_weights_is_a_problem(tmp_path):
    """Issue 40 item 2: 0-100 000 against weights of 23 000 in all decides the order over fair-share, age and
    QOS: a problem (issue 29 made it a note), with the fix."""
    f = PF.priority_weights(PF.parse_config(GOOD + WEIGHTS), with_priority(tmp_path, site_factor_max=100000))
    assert f.level == PF.PROBLEM and "sum of the site's priority weights (23000)" in f.detail
    assert 'priority.site_factor_max = "auto" (or at most 23000' in f.detail
    narrow = with_priority(tmp_path, site_factor_max=20000)
    assert PF.priority_weights(PF.parse_config(GOOD + WEIGHTS), narrow).level == PF.OK
    assert PF.priority_weights(PF.parse_config(GOOD + WEIGHTS), with_priority(tmp_path, site_factor_max=23000)).level \
        == PF.OK  # as much as all of them: the limit itself
    assert "all 0" in PF.priority_weights(PF.parse_config(GOOD), with_priority(tmp_path, site_factor_max=100000)).detail
    # the whole check fails on it
    problems = [x for x in PF.check(PF.parse_config(GOOD + WEIGHTS), snap(), with_priority(tmp_path, site_factor_max=100000),
                                    qos={}, partitions={}, slurm_conf=None, site={}) if x.level == PF.PROBLEM]
    assert "priority.site_factor_max" in {x.what for x in problems}


def test_the_default_range_is_the_sum_of_the_sites_weights(tmp_path):
    f = PF.priority_weights(PF.parse_config(GOOD + WEIGHTS), cfg(tmp_path))
    assert f.level == PF.OK and f.detail.startswith("auto: 23000 (") and "10000 levels" in f.detail
    few = PF.priority_weights(PF.parse_config(GOOD + "PriorityWeightAge = 99\n"), cfg(tmp_path))
    assert few.level == PF.OK and "auto: 99 (" in few.detail and "100 levels" in few.detail  # one per value
    assert PF.priority_weights(PF.parse_config(GOOD), cfg(tmp_path)).level == PF.NOTE  # all 0: 0..100000


def test_a_pilot_uses_no_range(tmp_path):
    pilot = config.from_dict({**cfg(tmp_path).as_dict(), "priority": {"site_factor_max": 100000},
                              "limits": {"accounts": ["acct_a"]}})
    f = PF.priority_weights(PF.parse_config(GOOD + WEIGHTS), pilot)
    assert f.level == PF.OK and "swap their own priorities" in f.detail


def test_the_controllers_python3_for_the_hooks_is_checked(tmp_path):
    """Issue 29 item 8: on a python3 older than 3.9 (RHEL 8's is 3.6) the hooks write no record."""
    c = cfg(tmp_path)
    assert PF.hook_python("3.11.2", c).level == PF.OK
    old = PF.hook_python("3.6.15", c)
    assert old.level == PF.PROBLEM and "is 3.6.15" in old.detail and ">= 3.9" in old.detail
    assert PF.hook_python(None, c).level == PF.PROBLEM
    no_hooks = config.from_dict({**c.as_dict(), "hooks": {"spool": ""}})
    assert PF.hook_python("3.6.15", no_hooks) is None
    assert PF.hook_python_version() is not None  # this machine's python3 answers
