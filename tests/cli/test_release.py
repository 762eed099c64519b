"""Issue 29, items 4 and 10: a real version (`--version`), `--config` before the subcommand, read-only commands
that create no database, and `preflight --json` that always prints a JSON document."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from packaging.version import Version

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
    # run from this git checkout: the version setuptools-scm gives it, above the last hand-set one (issue 40)
    assert slurm_fair.__version__ == slurm_fair.installed_version() == slurm_fair.source_tree_version()
    assert Version(slurm_fair.__version__) > Version("0.2.0"), slurm_fair.__version__


def test_pyproject_takes_its_version_from_git():
    """setuptools-scm derives the version at build time; 0.2.0 only where there is no git (a tarball)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert "setuptools-scm>=9.2" in project["build-system"]["requires"]  # 9.2: fallback_version is the base tag
    assert project["tool"]["setuptools_scm"] == {"fallback_version": "0.2.0"}
    assert "dynamic" not in project["tool"].get("setuptools", {})


def _git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "SETUPTOOLS_SCM", "VCS_VERSIONING"))}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid")
    return subprocess.run(["git", "-C", str(repo), "-c", "commit.gpgsign=false", *args], check=True,
                          capture_output=True, text=True, env=env, timeout=60).stdout.strip()


def test_a_source_tree_version_counts_the_commits(tmp_path):
    """0.2.1.devN+g<commit> with N commits and no tag; a tag vX.Y.Z is a release; no git: 0.2.0."""
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    assert slurm_fair.source_tree_version(tmp_path) == "0.2.0"  # not a git repository: fallback_version
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "pyproject.toml")
    seen = []
    for n in (1, 2, 3):
        _git(tmp_path, "commit", "-q", "--allow-empty", "-m", f"commit {n}")
        seen.append(slurm_fair.source_tree_version(tmp_path))
        assert seen[-1] == f"0.2.1.dev{n}+g{_git(tmp_path, 'rev-parse', '--short=9', 'HEAD')}", seen
    assert Version(seen[0]) < Version(seen[1]) < Version(seen[2])
    _git(tmp_path, "tag", "v0.3.0")
    assert slurm_fair.source_tree_version(tmp_path) == "0.3.0"
    _git(tmp_path, "commit", "-q", "--allow-empty", "-m", "after the release")
    assert slurm_fair.source_tree_version(tmp_path).startswith("0.3.1.dev1+g")
    # another project's tree, or none: unknown, never an error
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "other"\n')
    assert slurm_fair.source_tree_version(tmp_path) == slurm_fair.UNKNOWN_VERSION == "0+unknown"
    assert slurm_fair.source_tree_version(tmp_path / "missing") == slurm_fair.UNKNOWN_VERSION


class _Dist:
    def __init__(self, version: str, root: Path):
        self.version, self.root = version, root

    def locate_file(self, name: str) -> Path:
        return self.root / name


def test_installed_version_is_the_metadata_of_this_very_package_only(tmp_path):
    here = Path(slurm_fair.__file__).resolve().parent.parent
    not_a_tree = tmp_path / "no-source-tree"
    # an installed wheel (no source tree around the package): its metadata
    assert slurm_fair.installed_version(_Dist("9.9.9", here), root=not_a_tree) == "9.9.9"
    # another copy's metadata (an editable install of another checkout, a stale install): unknown
    assert slurm_fair.installed_version(_Dist("0.0.1", tmp_path), root=not_a_tree) == slurm_fair.UNKNOWN_VERSION
    # a source tree: its version from git, not the metadata written when it was installed
    assert slurm_fair.installed_version(_Dist("9.9.9", here)) == slurm_fair.source_tree_version()


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
