"""Issue 40, item 6: commands that only read (status, shares, explain, history, report, profiles list and export,
rollback --dry-run, apply without --commit) never create the database or its folder, nor SQLite's side files, nor
change its mode; a missing database is an error naming the path (status, explain and apply: a note, then Slurm's
view alone). Writers are unchanged."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest
import sqlite_utils
from click.testing import CliRunner

from slurm_fair.cli import main
from slurm_fair import config as config_mod
from slurm_fair.daemon.round import run_round
from slurm_fair.sim.cluster import SimCluster, cluster_spec
from slurm_fair.sim.traces import TraceJob
from slurm_fair.store import Store, StoreError, migrate, open_existing
from slurm_fair.store.base import read_only_uri
from slurm_fair.store.schema import MIGRATIONS


def _config(tmp_path: Path) -> tuple[Path, Path]:
    db = tmp_path / "state" / "slurm-fair.sqlite"
    cfg = tmp_path / "slurm-fair.toml"
    cfg.write_text(f'[daemon]\ndatabase = "{db}"\n')
    return cfg, db


@pytest.fixture
def no_slurm(monkeypatch):
    """status and explain look at Slurm first: here it does not answer (they fall back to the last round)."""
    monkeypatch.setattr("slurm_fair.cli.admin._snapshot", lambda cfg: (None, "no Slurm in this test"))


@pytest.mark.parametrize("args", [["shares"], ["history"], ["profiles", "export"]])
def test_a_reader_without_a_database_fails_naming_it_and_creates_nothing(tmp_path, no_slurm, args):
    cfg, db = _config(tmp_path)
    r = CliRunner().invoke(main, ["--config", str(cfg), *args])
    assert r.exit_code == 1, r.output
    assert f"no database at {db}" in r.stderr and "nothing was created" in r.stderr
    assert not db.parent.exists()  # neither the database nor its folder


@pytest.mark.parametrize("args, code", [(["status"], 0), (["explain", "acct_a"], 2)])
def test_status_and_explain_without_a_database_show_slurm_alone_and_create_nothing(tmp_path, no_slurm, args, code):
    """They show what Slurm says too: without a database a note names it and an empty store stands in (here Slurm
    does not answer either, so explain knows no acct_a: exit 2; on the testbed it explains the account)."""
    cfg, db = _config(tmp_path)
    r = CliRunner().invoke(main, ["--config", str(cfg), *args])
    assert r.exit_code == code, r.output
    if code:
        assert "unknown account (known: none)" in r.stderr
    assert f"no database at {db}" in r.stderr and "showing Slurm's view only" in r.stderr
    assert not db.parent.exists()  # neither the database nor its folder


def test_profiles_list_without_a_database_lists_none_and_creates_nothing(tmp_path):
    cfg, db = _config(tmp_path)
    r = CliRunner().invoke(main, ["profiles", "list", "--config", str(cfg)])
    assert r.exit_code == 0, r.output
    assert f"no database at {db}" in r.stderr and "no profiles" in r.stdout
    assert not db.parent.exists()


def _recorded(db: Path) -> int:
    """A database the daemon left (one ok round), closed: SQLite removed its -wal and -shm; mode 0640."""
    with Store(db) as st:
        rid = st.begin_round("oef-coop", now=1000.0)
        st.finish_round(rid, "ok", n_accounts=0, n_changes=0, message="hand-made")
    os.chmod(db, 0o640)
    assert sorted(p.name for p in db.parent.iterdir()) == [db.name]
    return rid


@pytest.mark.parametrize("args", [["status", "--json"], ["shares", "--json"], ["explain", "acct_a", "--json"],
                                  ["history", "--json"], ["report", "--json"], ["profiles", "list"],
                                  ["profiles", "export"]])
def test_a_reader_leaves_an_existing_database_as_it_was(tmp_path, no_slurm, args):
    cfg, db = _config(tmp_path)
    rid = _recorded(db)
    before = db.stat()
    r = CliRunner().invoke(main, ["--config", str(cfg), *args] if args[0] != "profiles"
                           else [*args, "--config", str(cfg)])
    if args[0] == "explain":  # it read the database: no round placed acct_a, so it is unknown there
        assert r.exit_code == 2 and "unknown account (known: none)" in r.output, r.output
    else:
        assert r.exit_code == 0, r.output
    if args[0] == "history":
        assert [row["id"] for row in json.loads(r.stdout)] == [rid]
    if args[0] == "shares":
        assert json.loads(r.stdout)["round"] == rid
    after = db.stat()
    assert sorted(p.name for p in db.parent.iterdir()) == [db.name]  # no -wal, no -shm left behind
    assert stat.S_IMODE(after.st_mode) == 0o640 and after.st_mtime_ns == before.st_mtime_ns
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)


def test_rollback_dry_run_reads_an_existing_database_read_only(tmp_path, monkeypatch):
    cfg, db = _config(tmp_path)
    _recorded(db)
    before = db.stat().st_mtime_ns
    cluster = SimCluster(cluster_spec("k80=2,v100=2"), {"a": 1, "b": 1}, {"c": {"k80": 1.0, "v100": 2.0}}, [])
    monkeypatch.setattr("slurm_fair.cluster.connect", lambda **_kw: cluster)
    r = CliRunner().invoke(main, ["--config", str(cfg), "rollback", "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["dry_run"] is True
    assert sorted(p.name for p in db.parent.iterdir()) == [db.name] and db.stat().st_mtime_ns == before


def test_a_reader_sees_what_an_open_writer_committed(tmp_path):
    """While the daemon has the database open (its -wal exists), a reader opens it read-only, not immutable, and
    sees every committed round, the ones still in the WAL included."""
    db = tmp_path / "db.sqlite"
    with Store(db) as writer:
        writer.finish_round(writer.begin_round("oef-coop", now=1.0), "ok")
        assert os.path.exists(f"{db}-wal")
        assert read_only_uri(str(db)) == f"file:{db}?mode=ro"
        writer.finish_round(writer.begin_round("oef-coop", now=2.0), "error", message="second")
        with open_existing(db) as reader:
            assert [(r.status, r.message) for r in reader.rounds(details=False)] == [("error", "second"),
                                                                                      ("ok", None)]
            with pytest.raises(sqlite3.OperationalError, match="readonly"):
                reader.db.execute("delete from rounds")
    assert read_only_uri(str(db)) == f"file:{db}?mode=ro&immutable=1"  # closed: no -wal, nothing to lock


def test_a_reader_refuses_an_older_schema_and_migrates_nothing(tmp_path):
    db = tmp_path / "old.sqlite"
    conn = sqlite_utils.Database(sqlite3.connect(db))
    migrate(conn, upto=2)
    conn.close()
    with pytest.raises(StoreError, match=f"schema version 2, this slurm-fair reads version {len(MIGRATIONS)}: "
                                         "start the daemon once to migrate it"):
        open_existing(db)
    conn = sqlite3.connect(db)
    assert conn.execute("select max(version) from schema_version").fetchone() == (2,)
    conn.close()


THR = {"fast": {"k80": 1.0, "v100": 3.0}, "flat": {"k80": 1.0, "v100": 2.0}}


@pytest.fixture
def busy(monkeypatch):
    """A simulated Slurm with 4 GPUs and 8 one-GPU jobs of two accounts: a's 4 run, b's 4 wait, so a round has
    SiteFactors to write; `apply` reaches it through slurm_fair.cluster.connect."""
    jobs = [TraceJob(f"{a}{i}", 0.0, a, c, 1, 1e6) for i in range(4) for a, c in (("a", "fast"), ("b", "flat"))]
    cluster = SimCluster(cluster_spec("k80=2,v100=2", 2), {"a": 1, "b": 1}, THR, jobs, epoch=1.7e9)
    cluster.advance(0.0)
    monkeypatch.setattr("slurm_fair.cluster.connect", lambda **_kw: cluster)
    return cluster


def _limits_in(cluster: SimCluster) -> dict:
    return {a.name: dict(a.limits) for a in cluster.snapshot().accounts}


def test_apply_without_commit_and_without_a_database_plans_and_creates_nothing(tmp_path, busy):
    cfg, db = _config(tmp_path)
    before = _limits_in(busy)
    r = CliRunner().invoke(main, ["--config", str(cfg), "apply", "--json"])
    assert r.exit_code == 0, r.output
    assert f"no database at {db}" in r.stderr and "planning as the first round of a new database would" in r.stderr
    out = json.loads(r.stdout)
    # it planned: each account's share (a round on a new database), SiteFactors for b's waiting jobs
    assert out["ideal"] == {"a": {"k80": 2.0, "v100": 0.0}, "b": {"k80": 0.0, "v100": 2.0}}
    assert out["site_factor_changes"]
    assert not db.parent.exists()  # neither the database nor its folder
    assert _limits_in(busy) == before  # nor anything in Slurm


def test_apply_without_commit_reads_an_existing_database_read_only(tmp_path, busy):
    """The daemon's database after one recorded round (closed, mode 0640): a dry run plans from it and leaves
    the file, its mode, owner and folder as they were (a writable open sets the mode to 0600)."""
    cfg, db = _config(tmp_path)
    with Store(db) as st:
        res = run_round(busy, st, config_mod.load(str(cfg)), "oef-coop", dry_run=True, now=busy.clock())
        assert res.status == "dry-run"
        n_rounds = len(st.rounds(details=False))
    os.chmod(db, 0o640)
    before, files = db.stat(), sorted(p.name for p in db.parent.iterdir())  # the database and the status file
    for args in (["apply"], ["apply", "--dry-run", "--json"]):
        r = CliRunner().invoke(main, ["--config", str(cfg), *args])
        assert r.exit_code == 0, r.output
        assert "no database" not in r.stderr
    assert "dry run (policy oef-coop): nothing was changed" in CliRunner().invoke(
        main, ["--config", str(cfg), "apply"]).stdout
    after = db.stat()
    assert sorted(p.name for p in db.parent.iterdir()) == files == [db.name, "status.json"]  # no -wal, no -shm
    assert stat.S_IMODE(after.st_mode) == 0o640 and after.st_mtime_ns == before.st_mtime_ns
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
    with open_existing(db) as st:
        assert len(st.rounds(details=False)) == n_rounds


def test_profiles_export_reads_the_profiles_from_a_read_only_database(tmp_path):
    cfg, db = _config(tmp_path)
    csv_in = tmp_path / "in.csv"
    csv_in.write_text("account,class,gpu_type,throughput\n,lm-bs10,v100,81.6516\n")
    assert CliRunner().invoke(main, ["profiles", "import", str(csv_in), "--config", str(cfg)]).exit_code == 0
    os.chmod(db, 0o640)
    before = db.stat()
    r = CliRunner().invoke(main, ["profiles", "export", "--config", str(cfg)])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[1:] == [",lm-bs10,v100,81.6516"]
    assert sorted(p.name for p in db.parent.iterdir()) == [db.name]
    assert stat.S_IMODE(db.stat().st_mode) == 0o640 and db.stat().st_mtime_ns == before.st_mtime_ns
