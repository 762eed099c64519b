"""Issue 29, items 4 and 10: a real version (`--version`), `--config` before the subcommand, read-only commands
that create no database, and `preflight --json` that always prints a JSON document."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

import slurm_fair
from slurm_fair.cli import main
from slurm_fair.cluster.errors import ClusterUnreachable
from slurm_fair.sim.cluster import SimCluster, cluster_spec
from slurm_fair.store import MissingDatabase, Store, open_existing

REPO = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path) -> tuple[Path, Path]:
    """A config whose database is in a folder that does not exist yet; returns (config, database)."""
    db = tmp_path / "state" / "slurm-fair.sqlite"
    cfg = tmp_path / "slurm-fair.toml"
    cfg.write_text(f'[daemon]\ndatabase = "{db}"\n')
    return cfg, db


# ------------------------------------------------------------------------------------------- version


def test_version_prints_the_package_version():
    r = CliRunner().invoke(main, ["--version"])
    assert r.exit_code == 0, r.output
    assert r.output == f"slurm-fair {slurm_fair.installed_version()}\n"
    assert re.fullmatch(r"\d+\.\d+\.\d+", slurm_fair.__version__)
    assert slurm_fair.__version__ != "0.1.0"  # the version of the 464 commits before releases existed


def test_pyproject_takes_its_version_from_the_package():
    """One place of truth: the wheel's metadata is built from slurm_fair.__version__."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "slurm_fair.__version__"}


class _Dist:
    def __init__(self, version: str, root: Path):
        self.version, self.root = version, root

    def locate_file(self, name: str) -> Path:
        return self.root / name


def test_installed_version_is_the_metadata_of_this_very_package_only(tmp_path):
    here = Path(slurm_fair.__file__).resolve().parent.parent
    assert slurm_fair.installed_version(_Dist("9.9.9", here)) == "9.9.9"  # an installed wheel: its metadata
    # another copy's metadata (an editable install of another checkout, a stale install): this package's own
    assert slurm_fair.installed_version(_Dist("0.0.1", tmp_path)) == slurm_fair.__version__


# ------------------------------------------------------------------------------------------- --config placement


@pytest.mark.parametrize("before", [True, False])
def test_config_is_accepted_before_and_after_the_subcommand(tmp_path, before):
    cfg, _db = _config(tmp_path)
    cfg.write_text(cfg.read_text() + "[daemon.unknown]\n")  # only this file makes `config check` fail
    args = ["--config", str(cfg), "config", "check"] if before else ["config", "check", "--config", str(cfg)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    assert str(cfg) in r.output or "unknown" in r.output


def test_config_given_twice_with_two_values_is_refused(tmp_path):
    cfg, _db = _config(tmp_path)
    r = CliRunner().invoke(main, ["--config", str(cfg), "history", "--config", str(tmp_path / "other.toml")])
    assert r.exit_code == 2
    assert "given twice" in r.output and str(cfg) in r.output


# ------------------------------------------------------------------------------------------- no database created


def test_history_without_a_database_says_so_and_creates_nothing(tmp_path):
    cfg, db = _config(tmp_path)
    for args in (["--config", str(cfg), "history"], ["history", "--json", "--config", str(cfg)]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 1, r.output
        assert f"no database at {db}" in r.stderr and r.stdout == ""
    assert not db.parent.exists()


def test_history_reads_an_existing_database(tmp_path):
    cfg, db = _config(tmp_path)
    Store(db).close()
    r = CliRunner().invoke(main, ["--config", str(cfg), "history", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == []


def test_open_existing_refuses_a_missing_database(tmp_path):
    with pytest.raises(MissingDatabase, match="no database at"):
        open_existing(tmp_path / "nowhere" / "db.sqlite")
    assert not (tmp_path / "nowhere").exists()


def test_rollback_dry_run_without_a_database_creates_nothing(tmp_path, monkeypatch):
    cfg, db = _config(tmp_path)
    cluster = SimCluster(cluster_spec("k80=2,v100=2"), {"a": 1, "b": 1}, {"c": {"k80": 1.0, "v100": 2.0}}, [])
    cluster.limits["a"] = {"v100": 2}  # a limit in Slurm that nothing recorded as slurm-fair's
    monkeypatch.setattr("slurm_fair.cluster.connect", lambda **_kw: cluster)
    r = CliRunner().invoke(main, ["--config", str(cfg), "rollback", "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["dry_run"] is True and out["limits"] == {} and out["failed"] == {}
    assert f"no database at {db}" in r.stderr
    assert not db.parent.exists() and cluster.limits["a"] == {"v100": 2}


# ------------------------------------------------------------------------------------------- preflight --json


def test_preflight_json_prints_a_document_when_slurm_cannot_be_reached(tmp_path, monkeypatch):
    cfg, db = _config(tmp_path)

    def unreachable(self):
        raise ClusterUnreachable("sinfo: command not found")

    monkeypatch.setattr("slurm_fair.cluster.cli.CliCluster.snapshot", unreachable)
    r = CliRunner().invoke(main, ["preflight", "--json", "--config", str(cfg)])
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert doc == {"ok": False, "slurm_version": None, "findings": [], "error": "sinfo: command not found"}
    assert not db.parent.exists()


def test_preflight_json_prints_a_document_for_a_bad_config(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[daemon]\nperiod = -1\n")
    r = CliRunner().invoke(main, ["--config", str(cfg), "preflight", "--json"])
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and "period" in doc["error"]
