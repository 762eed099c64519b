"""Configuration loading and validation."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest

from slurm_fair import config, policies
from slurm_fair.errors import InputError

REPO = Path(__file__).resolve().parent.parent


def write(tmp_path, text: str) -> Path:
    p = tmp_path / "slurm-fair.toml"
    p.write_text(text)
    return p


def test_defaults(tmp_path):
    cfg = config.load(write(tmp_path, ""))
    assert cfg.daemon.period == 300
    assert cfg.daemon.early_round_after == 30
    assert cfg.daemon.dry_run is True  # shadow mode until the admin turns it off
    assert cfg.daemon.log_level == "info"
    assert cfg.policy.name == "oef-coop" and cfg.policy.solver == ""
    assert (cfg.cluster.backend, cfg.cluster.timeout, cfg.cluster.partitions) == ("auto", 30, ())
    assert cfg.classes.order == ("comment", "wckey", "name")
    assert dict(cfg.tenants.map) == {} and dict(cfg.tenants.weights) == {}
    assert (cfg.priority.site_factor_min, cfg.priority.site_factor_max, cfg.priority.levels) == (0, "auto", 10000)
    assert cfg.limits.manage is True and cfg.limits.accounts == ()
    assert cfg.database_path == Path("/var/lib/slurm-fair/slurm-fair.sqlite")
    assert cfg.source == str(tmp_path / "slurm-fair.toml")


def test_spec_and_dataclasses_agree():
    """Each key is declared once (a section field); SPEC, the defaults and the TOML defaults all come from it."""
    cfg = config.Config()
    assert cfg.as_dict() == config.from_dict({}).as_dict()
    assert list(config.SPEC) == [f.name for f in dataclasses.fields(config.Config) if "section" in f.metadata]
    for section, keys in config.SPEC.items():
        names = [f.name for f in dataclasses.fields(getattr(cfg, section))]
        assert names == list(keys), section
        for key, spec in keys.items():
            got = cfg.as_dict()[section][key]
            assert got == spec.default, f"{section}.{key}"


def test_the_config_needs_neither_the_policies_nor_cvxpy():
    """config validates policy.name and policy.solver against catalog.py (a leaf), not against the policies."""
    import subprocess
    import sys

    code = ("import sys; import slurm_fair.config as c; c.from_dict({'policy': {'name': 'gavel', 'solver': 'ECOS'}}); "
            "print(sorted(m for m in sys.modules if m.startswith(('slurm_fair.policies', 'cvxpy', 'numpy'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.strip() == "[]"
    from slurm_fair import catalog, policies

    assert policies.names() == list(catalog.POLICIES)
    for name in catalog.POLICIES:
        assert callable(policies.get(name))


def test_the_reference_page_is_generated_from_the_fields():
    assert (REPO / "docs" / "config-reference.md").read_text() == config.render_reference()
    page = config.render_reference()
    for section, keys in config.SPEC.items():
        assert f"## [{section}]" in page
        for key in keys:
            assert f"| `{key}` |" in page


def test_repo_file_is_render_default_and_parses_to_defaults():
    assert (REPO / "etc" / "slurm-fair.toml").read_text() == config.render_default()
    parsed = tomllib.loads(config.render_default())
    assert config.from_dict(parsed).as_dict() == config.Config().as_dict()
    # fully commented: every key has a comment line right above it
    lines = config.render_default().splitlines()
    for i, line in enumerate(lines):
        if " = " in line and not line.startswith("#"):
            assert lines[i - 1].startswith("# "), line


def test_full_file(tmp_path):
    cfg = config.load(write(tmp_path, """
[daemon]
period = 60.5
early_round_after = 0
database = "state/db.sqlite"
dry_run = true
log_level = "DEBUG"
[policy]
name = "gavel"
solver = "highs"
[cluster]
backend = "cli"
timeout = 5
partitions = ["gpu", "debug"]
[classes]
order = ["wckey"]
[tenants]
map = {acct_a = "physics", acct_b = "physics"}
weights = {physics = 2}
[priority]
site_factor_min = -10
site_factor_max = 10
levels = 21
[limits]
manage = false
accounts = ["acct_a"]
"""))
    assert cfg.daemon.period == 60.5 and cfg.daemon.dry_run and cfg.daemon.log_level == "debug"
    assert cfg.database_path == tmp_path / "state" / "db.sqlite"
    assert (cfg.policy.name, cfg.policy.solver) == ("gavel", "HIGHS")
    assert cfg.cluster.partitions == ("gpu", "debug") and cfg.cluster.backend == "cli"
    assert cfg.classes.order == ("wckey",)
    assert dict(cfg.tenants.map) == {"acct_a": "physics", "acct_b": "physics"}
    assert dict(cfg.tenants.weights) == {"physics": 2.0}
    assert cfg.limits.accounts == ("acct_a",) and cfg.limits.manage is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.daemon.period = 1
    with pytest.raises(TypeError):
        cfg.tenants.map["x"] = "y"


def test_relative_database_is_relative_to_the_config_file_not_cwd(tmp_path, monkeypatch):
    sub = tmp_path / "conf"
    sub.mkdir()
    p = sub / "c.toml"
    p.write_text('[daemon]\ndatabase = "../var/fair.sqlite"\n')
    monkeypatch.chdir(tmp_path)
    cfg = config.load("conf/c.toml")
    assert cfg.database_path == (tmp_path / "var" / "fair.sqlite")
    p.write_text('[daemon]\ndatabase = "/abs/fair.sqlite"\n')
    assert config.load(p).database_path == Path("/abs/fair.sqlite")


def test_hooks_spool_empty_means_no_ingestion_and_relative_is_relative_to_the_file(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("")
    assert config.load(p).spool_path is None
    p.write_text('[hooks]\nspool = "spool/records"\n')
    assert config.load(p).spool_path == tmp_path / "spool" / "records"
def test_type_map_path_resolved_relative_to_the_config_file(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('[submit]\ntype_map = "etc/gpu_type_map.txt"\n')
    assert config.load(p).type_map_path == tmp_path / "etc" / "gpu_type_map.txt"
    p.write_text('[submit]\ntype_map = ""\n')
    assert config.load(p).type_map_path is None


BAD = [
    ("daemon", "period", "0"),
    ("daemon", "period", '"300"'),
    ("daemon", "period", "true"),
    ("daemon", "period", "nan"),
    ("daemon", "early_round_after", "-1"),
    ("daemon", "database", '""'),
    ("daemon", "database", "3"),
    ("daemon", "dry_run", '"yes"'),
    ("daemon", "log_level", '"loud"'),
    ("daemon", "publish_status", '"on"'),
    ("daemon", "host_id", '"ctl 1"'),
    ("daemon", "host_id", "3"),
    ("daemon", "only_on_primary", '"yes"'),
    ("daemon", "status_file", "3"),
    ("daemon", "status_file", '"  "'),
    ("policy", "name", '"oef"'),
    ("policy", "solver", '"GUROBI"'),
    ("policy", "themis_f", "1.0"),
    ("policy", "themis_lease", "0"),
    ("policy", "themis_work_conserving", '"yes"'),
    ("policy", "partition_above", "-1"),
    ("policy", "partition_parts", "0"),
    ("policy", "stable", "\"yes\""),
    ("cluster", "backend", '"rest"'),
    ("cluster", "timeout", "0"),
    ("cluster", "partitions", '"gpu"'),
    ("cluster", "partitions", '["gpu", "gpu"]'),
    ("classes", "order", "[]"),
    ("classes", "order", '"comment"'),
    ("tenants", "map", '"acct_a"'),
    ("tenants", "weights", "[1]"),
    ("priority", "site_factor_min", "0.5"),
    ("priority", "site_factor_max", '"1"'),
    ("priority", "levels", "0"),
    ("priority", "age_floor", "-1"),
    ("limits", "manage", "1"),
    ("limits", "lend", "\"yes\""),
    ("limits", "site_limits", "\"keep\""),
    ("limits", "borrow_gpus", "-2"),
    ("limits", "borrow_gpus", "1.5"),
    ("limits", "borrow_fraction", "-0.5"),
    ("limits", "accounts", "[1]"),
    ("limits", "qos_accepted", "\"cap\""),
    ("limits", "ownership_file", "1"),
    ("limits", "ownership_file", '"x\\n"'),
    ("hooks", "spool", "1"),
    ("hooks", "spool", '" /var/spool "'),
    ("submit", "type_map", "3"),
    ("submit", "type_map", '"  "'),
    ("submit", "max_age", "-1"),
    ("preemption", "enabled", '"yes"'),
    ("preemption", "grace", "-1"),
    ("preemption", "grace", '"120"'),
    ("preemption", "min_runtime", "-5"),
    ("preemption", "signal", '"USR 1"'),
    ("preemption", "signal", "10"),
    ("preemption", "signal", '""'),
    ("preemption", "max_jobs_per_round", "0"),
    ("preemption", "max_jobs_per_round", "1.5"),
    ("preemption", "max_requeues_per_day", "0"),
    ("preemption", "upgrade", "2"),
    ("preemption", "upgrade", '"some"'),
    ("preemption", "checkpointing", '["acct:x"]'),
    ("preemption", "checkpointing", '["account:"]'),
    ("preemption", "upgrade_cost", "-1"),
    ("preemption", "unrequeueable", "\"requeue\""),
    ("preemption", "cancel_grace", "-1"),
    ("preemption", "hold_back_max", "-1"),
    ("profiling", "min_throughput", "0"),
    ("profiling", "min_throughput", "nan"),
    ("profiling", "max_throughput", "1e-9"),  # below min_throughput
    ("profiling", "max_throughput", "-1"),
    ("profiling", "outlier_factor", "1"),
    ("profiling", "outlier_factor", '"3"'),
    ("profiling", "outlier_after", "0"),
    ("profiling", "outlier_after", "2.5"),
    ("profiling", "average_weight", "0"),
    ("profiling", "average_weight", "1.5"),
    ("profiling", "stale_after", "0"),
    ("profiling", "conflict_margin", "-0.1"),
    ("profiling", "prefer_measured", '"yes"'),
    ("profiling", "measured_speeds", "1"),
    ("profiling", "explore", "1"),
    ("profiling", "nvml_map", "3"),
    ("profiling", "nvml_map", '" map.csv"'),
    ("profiling", "trusted_users", '"root"'),
    ("profiling", "trusted_users", '["a", "a"]'),
    ("profiling", "max_change_factor", "1"),
    ("profiling", "new_class_range", "1"),
    ("profiling", "new_class_ratio", "0.5"),
    ("profiling", "change_window", "0"),
    ("profiling", "shared_classes", '[""]'),
    ("profiling", "on_conflict", '"drop"'),
    ("profiling", "max_classes_per_account", "0"),
    ("store", "retention_days", "-1"),
    ("store", "retention_days", '"90"'),
    ("store", "profile_days", "-1"),
    ("metrics", "listen", "9817"),
    ("metrics", "listen", '"off"'),
    ("metrics", "listen", '"127.0.0.1"'),
    ("metrics", "listen", '"127.0.0.1:0"'),
    ("metrics", "listen", '"127.0.0.1:65536"'),
    ("metrics", "listen", '"127.0.0.1:98x7"'),
    ("metrics", "listen", '":9817"'),
    ("metrics", "listen", '"::1:9817"'),
    ("metrics", "listen", '"[::1]"'),
    ("metrics", "listen", '"[127.0.0.1]:9817"'),
    ("metrics", "listen", '"300.1.1.1:9817"'),
    ("metrics", "listen", '"bad_host:9817"'),
    ("metrics", "listen", '" 127.0.0.1:9817"'),
]


def test_every_key_has_a_bad_value_case():
    assert {(s, k) for s, k, _ in BAD} == {(s, k) for s, keys in config.SPEC.items() for k in keys}


@pytest.mark.parametrize("section, key, value", BAD)
def test_bad_value_names_the_key(tmp_path, section, key, value):
    with pytest.raises(InputError) as e:
        config.load(write(tmp_path, f"[{section}]\n{key} = {value}\n"))
    assert e.value.field.startswith(f"{section}.{key}")
    assert f"{section}.{key}" in str(e.value)


@pytest.mark.parametrize("text, field", [
    ('[classes]\norder = ["comment", "jobid"]\n', "classes.order[1]"),
    ('[cluster]\npartitions = ["gpu", ""]\n', "cluster.partitions[1]"),
    ('[tenants]\nmap = {acct_a = ""}\n', "tenants.map.acct_a"),
    ("[tenants]\nweights = {physics = 0}\n", "tenants.weights.physics"),
    ("[tenants]\nweights = {physics = \"2\"}\n", "tenants.weights.physics"),
    ("[priority]\nsite_factor_min = 5\nsite_factor_max = 5\n", "priority.site_factor_max"),
    ("[priority]\nsite_factor_min = 0\nsite_factor_max = 9\nlevels = 11\n", "priority.levels"),
])
def test_nested_and_cross_key_errors(tmp_path, text, field):
    with pytest.raises(InputError) as e:
        config.load(write(tmp_path, text))
    assert e.value.field == field


def test_every_policy_name_is_accepted(tmp_path):
    for name in policies.names():
        assert config.load(write(tmp_path, f'[policy]\nname = "{name}"\n')).policy.name == name


@pytest.mark.parametrize("text, field", [
    ("[daemon]\nperiode = 3\n", "daemon.periode"),
    ("[deamon]\nperiod = 3\n", "deamon"),
    ("period = 3\n", "period"),
    ("daemon = 3\n", "daemon"),
])
def test_unknown_keys_and_sections_are_rejected(tmp_path, text, field):
    with pytest.raises(InputError) as e:
        config.load(write(tmp_path, text))
    assert e.value.field == field
    assert "unknown" in e.value.problem or "table" in e.value.problem


def test_invalid_toml(tmp_path):
    p = write(tmp_path, "[daemon\nperiod = \n")
    with pytest.raises(InputError) as e:
        config.load(p)
    assert e.value.field == "config" and e.value.value == str(p) and "invalid TOML" in e.value.problem


def test_resolution_order(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_FAIR_CONFIG", raising=False)
    assert config.resolve_path(None) == Path("/etc/slurm-fair/slurm-fair.toml")
    monkeypatch.setenv("SLURM_FAIR_CONFIG", str(tmp_path / "env.toml"))
    assert config.resolve_path(None) == tmp_path / "env.toml"
    assert config.resolve_path(str(tmp_path / "x.toml")) == tmp_path / "x.toml"
    (tmp_path / "env.toml").write_text("[daemon]\nperiod = 7\n")
    cfg = config.load()
    assert cfg.daemon.period == 7 and cfg.source == str(tmp_path / "env.toml")


def test_missing_files(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_FAIR_CONFIG", raising=False)
    with pytest.raises(InputError) as e:
        config.load(tmp_path / "nope.toml")
    assert (e.value.field, e.value.problem) == ("config", "file not found")
    monkeypatch.setenv("SLURM_FAIR_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(InputError, match="file not found"):
        config.load()
    monkeypatch.delenv("SLURM_FAIR_CONFIG")
    if config.DEFAULT_PATH.exists():
        pytest.skip("this machine has a real /etc/slurm-fair/slurm-fair.toml")
    cfg = config.load()
    assert cfg.source == "defaults"
    assert cfg.as_dict() == config.Config().as_dict()


def test_render_round_trips_non_default_values(tmp_path):
    text = '[tenants]\nmap = {acct_a = "phys \\"x\\""}\nweights = {"phys \\"x\\"" = 1.5}\n'
    cfg = config.load(write(tmp_path, text))
    again = config.load(write(tmp_path, config.render(cfg.as_dict())))
    assert again.as_dict() == cfg.as_dict()


def test_preemption_section_defaults_and_normalised_signal(tmp_path):
    cfg = config.load(write(tmp_path, "[daemon]\nperiod = 5\n"))
    assert (cfg.preemption.enabled, cfg.preemption.grace, cfg.preemption.min_runtime, cfg.preemption.signal,
            cfg.preemption.max_jobs_per_round) == (False, 120, 600, "USR1", 10)
    cfg = config.load(write(tmp_path, '[preemption]\nenabled = true\ngrace = 0\nsignal = "sigterm"\n'))
    assert cfg.preemption.enabled and cfg.preemption.grace == 0 and cfg.preemption.signal == "SIGTERM"
    assert config.load(write(tmp_path, '[preemption]\nsignal = "12"\n')).preemption.signal == "12"


def test_config_accepts_every_solver_the_command_line_accepts():
    """One list of solver names: whatever ``--solver`` takes, ``policy.solver`` in the config takes too."""
    from slurm_fair import lp
    from slurm_fair.config import SOLVERS

    assert tuple(lp.KNOWN_SOLVERS) == SOLVERS
    for name in SOLVERS:
        cfg = config.from_dict({"policy": {"solver": name.lower()}})
        assert cfg.policy.solver == name


@pytest.mark.parametrize("listen, address", [
    ("127.0.0.1:9817", ("127.0.0.1", 9817)),
    ("[::1]:9817", ("::1", 9817)),
    ("0.0.0.0:1", ("0.0.0.0", 1)),
    ("[::]:65535", ("::", 65535)),
    ("metrics-host.example.org:9100", ("metrics-host.example.org", 9100)),
    ("", None),
])
def test_metrics_listen_addresses(tmp_path, listen, address):
    assert config.Config().metrics.address == ("127.0.0.1", 9817)  # loopback by default
    cfg = config.load(write(tmp_path, f'[metrics]\nlisten = "{listen}"\n'))
    assert cfg.metrics.listen == listen and cfg.metrics.address == address


def test_status_file_defaults_beside_the_database_and_can_be_moved_or_turned_off(tmp_path):
    cfg = config.from_dict({"daemon": {"database": "state/sf.sqlite"}}, base=tmp_path)
    assert cfg.status_path == tmp_path / "state" / config.STATUS_NAME
    cfg = config.from_dict({"daemon": {"status_file": "pub/status.json"}}, base=tmp_path)
    assert cfg.status_path == tmp_path / "pub" / "status.json"
    assert config.from_dict({"daemon": {"publish_status": False, "status_file": "/x.json"}}).status_path is None


def test_the_ownership_file_is_beside_the_database_folder_by_default_and_can_be_set_or_off(tmp_path):
    """Issue 29: what slurm-fair wrote is kept where a lost database cannot take it along: by default not in the
    database's folder but in a folder beside it; a path of its own (relative to the config) or "" (off)."""
    assert config.from_dict({}).ownership_path == Path("/var/lib/slurm-fair-ownership/limits.json")
    cfg = config.from_dict({"daemon": {"database": str(tmp_path / "db" / "sf.sqlite")}})
    assert cfg.ownership_path == tmp_path / "db-ownership" / "limits.json"
    assert cfg.ownership_path.parent != cfg.database_path.parent
    own = config.from_dict({"limits": {"ownership_file": "own/limits.json"}}, base=tmp_path)
    assert own.ownership_path == tmp_path / "own" / "limits.json"
    assert config.from_dict({"limits": {"ownership_file": ""}}).ownership_path is None
