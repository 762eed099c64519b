"""The ownership file (issue 29, slurm_fair/daemon/ownership.py): what slurm-fair last wrote per cluster, account
and GPU limit, kept outside the database's folder, so that a new database tells slurm-fair's own limits from the
site's; a corrupt file is an error naming it, never a crashed round."""

from __future__ import annotations

import json
import os
import stat

import pytest

from slurm_fair import config
from slurm_fair.cluster.base import ANY_GPU, CLEAR
from slurm_fair.daemon import ownership as O
from slurm_fair.daemon import plan as P
from slurm_fair.daemon import unrecorded as U
from slurm_fair.daemon.rollback import plan_rollback
from slurm_fair.daemon.round import run_round
from slurm_fair.policies import get as get_policy
from slurm_fair.sim.cluster import SimCluster, cluster_spec
from slurm_fair.sim.traces import TraceJob
from slurm_fair.store import Store
from tests.conftest import CFG, job, snap


def test_the_file_round_trips_and_a_bad_one_names_itself():
    clusters = {"tb": {"acct_b": {"v100": 3, ANY_GPU: 8, "k80": CLEAR}}, "other": {"x": {"a100": 1}}}
    assert O.parse(O.render(clusters), "f") == clusters
    for text, why in (("{not json", "not valid JSON"), ('{"format": 2, "clusters": {}}', "format 1"),
                      ('{"format": 1, "clusters": {"tb": {"a": {"v100": "3"}}}}', "is not a limit"),
                      ('{"format": 1, "clusters": {"tb": {"a": {"v100": -5}}}}', "is not a limit"),
                      ('{"format": 1, "clusters": {"tb": []}}', "expected an object")):
        with pytest.raises(O.OwnershipError, match=f"ownership file /x/limits.json: .*{why}"):
            O.parse(text, "/x/limits.json")


def test_what_slurm_fair_wrote_is_the_file_updated_by_the_database():
    owned = {"a": {"v100": 3, ANY_GPU: 8}, "b": {"k80": 1}}
    assert O.merged(owned, {"a": {"v100": 2}, "c": {"a100": CLEAR}}) == {
        "a": {"v100": 2, ANY_GPU: 8}, "b": {"k80": 1}, "c": {"a100": CLEAR}}
    up = O.updated({"tb": owned, "other": {"z": {"v100": 1}}}, "tb", {"a": {"k80": 0}}, forget=["b"])
    assert up == {"tb": {"a": {"v100": 3, ANY_GPU: 8, "k80": 0}}, "other": {"z": {"v100": 1}}}
    # slurm-fair's own (equal to its record) is not the site's; a value set since is
    assert O.site_part({"a": {"v100": 3, ANY_GPU: 5}, "n": {"k80": 2}}, owned) == {"a": {ANY_GPU: 5}, "n": {"k80": 2}}


def test_save_is_atomic_private_and_a_corrupt_file_is_never_overwritten(tmp_path):
    path = tmp_path / "own" / "limits.json"
    assert O.load(path) == O.Owned(path)  # missing: an empty record, no error
    assert O.record(path, "tb", {"a": {"v100": 3}}) is None
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640 and stat.S_IMODE(os.stat(path.parent).st_mode) == 0o750
    assert O.load(path).of("tb") == {"a": {"v100": 3}} and O.load(path).of("other") == {}
    assert O.record(path, "tb", {"b": {ANY_GPU: 4}}) is None and O.record(path, "tb", {}, forget=["a"]) is None
    assert json.loads(path.read_text())["clusters"] == {"tb": {"b": {ANY_GPU: 4}}}
    assert [p.name for p in path.parent.iterdir()] == ["limits.json"]  # no temporary file left
    path.write_bytes(b"\x00garbage")
    got = O.load(path)
    assert got.clusters == {} and got.error.startswith(f"ownership file {path}: ")
    err = O.record(path, "tb", {"a": {"v100": 1}})
    assert err.startswith(f"ownership file {path}: ") and "not updated" in err
    assert path.read_bytes() == b"\x00garbage"  # left for the admin to look at
    path.unlink()
    path.mkdir()  # unreadable as a file
    assert O.load(path).error.startswith(f"ownership file {path}: cannot read")


class _Named:
    def __init__(self, name=None, error=None):
        self.name, self.error = name, error

    def cluster_name(self):
        if self.error:
            raise self.error
        return self.name


def test_records_are_per_cluster_and_an_unknown_cluster_name_is_named(tmp_path):
    path = tmp_path / "limits.json"
    O.record(path, "tb", {"a": {"v100": 3}})
    assert O.load_for(_Named("tb"), path)[0].of("tb") == {"a": {"v100": 3}}
    assert O.load_for(_Named("tb2"), path)[0].of("tb2") == {}
    owned, key = O.load_for(_Named(error=RuntimeError("scontrol failed")), path)
    assert key is None and "cluster's name is unknown: scontrol failed" in owned.error
    assert O.load_for(_Named("tb"), None) == (O.Owned(None), None)  # off


def _decide(s, written, managed=frozenset(), site=None):
    return P.decide(s, CFG, lambda problem: get_policy("equal-share")(problem), profiles=[], shipped=[],
                    deviations={}, deficits={}, managed_before=set(managed), last_ok_started=None, now=0.0,
                    empty_alloc=None, written=written, site=site or {})


def test_a_new_database_beside_the_file_manages_its_own_limits_and_keeps_the_sites():
    """Before: a new database facing slurm-fair's old limits wrote none (NO LIMIT WRITTEN) until the admin said
    whose they were. With the file: a limit equal to what slurm-fair wrote is its own, any other the site's."""
    jobs = [job(i, "acct_b", gpu_type="v100", state="RUNNING", alloc={"v100": 1}) for i in range(1, 5)]
    jobs += [job(10 + i, "acct_a", gpu_type="v100", reason="Resources") for i in range(3)]
    first = _decide(snap(jobs), {}, {"acct_a", "acct_b"})
    wrote = {a: dict(ch) for a, ch in first.changes.items()}
    # the database is lost; in Slurm: what slurm-fair wrote, and acct_c's total lowered by hand since
    hand = {**wrote, "acct_c": {**wrote["acct_c"], ANY_GPU: 1}}
    assert _decide(snap(jobs, limits=hand), {}).unrecorded  # no record at all: nothing written (as before)
    d = _decide(snap(jobs, limits=hand), O.merged(wrote, {}))
    assert d.unrecorded == {}
    assert d.drift == {"acct_c": {ANY_GPU: 1}}  # shown as set by hand, kept
    assert "acct_b" not in d.left_alone and "acct_a" not in d.left_alone  # slurm-fair's own: managed again
    assert "acct_c" in d.left_alone and d.planned["acct_c"] == {ANY_GPU: 1}  # the site's (respect)
    assert d.site_now["acct_b"] == {} and d.site_now["acct_c"] == {ANY_GPU: 1}  # what a round records as site


def test_rollback_and_limits_clear_take_back_only_what_the_file_says_slurm_fair_wrote(tmp_path):
    s = snap(limits={"acct_a": {"v100": 2, ANY_GPU: 4}, "acct_b": {"k80": 1}, "acct_c": {"a100": 3}})
    owned = {"acct_a": {"v100": 2, ANY_GPU: 6}, "acct_b": {"k80": 1}}  # acct_a's total set by hand since
    rb = plan_rollback(s, {}, set(), None, CFG, O.merged(owned, {}))  # a new, empty database
    assert rb.limits == {"acct_a": {"v100": CLEAR}, "acct_b": {"k80": CLEAR}}
    assert rb.kept == {"acct_a": {ANY_GPU: 4}} and "acct_c" not in rb.accounts  # acct_c: never slurm-fair's
    changes, kept = U.plan_clear(s, ["acct_a", "acct_c"], owned)
    assert changes == {"acct_a": {"v100": CLEAR}, "acct_c": {"a100": CLEAR}} and kept == {"acct_a": {ANY_GPU: 4}}
    assert U.plan_adopt(s, owned) == {"acct_a": {ANY_GPU: 4}, "acct_c": {"a100": 3}}


THR = {"fast": {"k80": 1.0, "v100": 3.0}, "flat": {"k80": 1.0, "v100": 2.0}}


def _sim_round(tmp_path, cfg):
    jobs = [TraceJob(f"{a}{i}", 0.0, a, c, 1, 1e6) for i in range(4) for a, c in (("a", "fast"), ("b", "flat"))]
    cluster = SimCluster(cluster_spec("k80=2,v100=2", 2), {"a": 1, "b": 1}, THR, jobs, epoch=1.7e9)
    cluster.advance(0.0)
    with Store(cfg.database_path) as store:
        res = run_round(cluster, store, cfg, "oef-coop", now=cluster.clock())
        return res, store.round(res.round_id).details, store.written(), store.events()


def test_a_round_keeps_the_file_and_a_corrupt_one_is_named_not_fatal(tmp_path):
    cfg = config.from_dict({"daemon": {"database": str(tmp_path / "db" / "s.sqlite"), "dry_run": False},
                            "limits": {"lend": False}})  # hard caps: the round writes limits
    assert cfg.ownership_path == tmp_path / "db-ownership" / "limits.json"
    res, details, written, _ev = _sim_round(tmp_path, cfg)
    assert res.status == "ok" and res.limit_changes and "ownership_error" not in details
    assert O.load(cfg.ownership_path).of("") == written  # the simulator names no cluster: under "-"
    cfg.ownership_path.write_text("{broken")
    (tmp_path / "db" / "s.sqlite").unlink()
    res, details, _w, events = _sim_round(tmp_path, cfg)
    assert res.status == "ok"  # the round went on, as with no record
    assert details["ownership_error"].startswith(f"ownership file {cfg.ownership_path}: not valid JSON")
    assert str(cfg.ownership_path) in res.message
    assert any(e.kind == "ownership" and str(cfg.ownership_path) in e.message for e in events)
    assert cfg.ownership_path.read_text() == "{broken"
