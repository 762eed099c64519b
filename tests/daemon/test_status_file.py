"""The public status file (slurm_fair/daemon/status_file.py): what a round writes, its format, reading it back."""

from __future__ import annotations

import json
import os
import stat

import pytest

from slurm_fair import config
from slurm_fair.daemon import status_file
from slurm_fair.daemon.round import limits_after, run_round
from slurm_fair.sim.cluster import SimCluster, cluster_spec
from slurm_fair.sim.traces import TraceJob
from slurm_fair.store import Store

THR = {"fast": {"k80": 1.0, "v100": 3.0}, "flat": {"k80": 1.0, "v100": 2.0}}


def _round(tmp_path, **daemon):
    jobs = [TraceJob(f"{a}{i}", 0.0, a, c, 1, 1e6) for i in range(4) for a, c in (("a", "fast"), ("b", "flat"))]
    cfg = config.from_dict({"daemon": {"database": str(tmp_path / "s.sqlite"), "dry_run": False, **daemon}})
    store = Store(cfg.database_path)
    cluster = SimCluster(cluster_spec("k80=2,v100=2", 2), {"a": 1, "b": 1}, THR, jobs, epoch=1.7e9)
    cluster.advance(0.0)
    return cfg, store, cluster, run_round(cluster, store, cfg, "oef-coop", now=cluster.clock())


def test_a_round_writes_the_status_file_beside_the_database(tmp_path):
    cfg, store, cluster, res = _round(tmp_path)
    path = tmp_path / "status.json"
    assert cfg.status_path == path and res.status == "ok"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    details = store.round(res.round_id).details
    assert details["status_file"] == str(path)
    # pytest's temporary folders are private (0700): the round says users could not read the file
    assert details["status_file_private"] == status_file.world_readable(path) + ": users cannot run slurm-fair why"
    assert "is not searchable by other users (mode 700)" in details["status_file_private"]
    st = status_file.read_status(path)
    assert st == res.public  # what it wrote reads back the same
    plan = res.plan
    assert st.round == res.round_id and st.round_status == "ok" and not st.dry_run and st.lend
    assert set(st.accounts) == {"a", "b"}
    for a in ("a", "b"):
        assert st.accounts[a].guarantee == {g: n for g, n in plan.real[a].items() if n}
        assert st.accounts[a].managed
        assert sum(st.accounts[a].in_use.values()) + st.accounts[a].pending_gpus == 4
    assert {g: t.capacity for g, t in st.types.items()} == {"k80": 2, "v100": 2}
    assert all(t.idle == 0 for t in st.types.values())  # 8 jobs, 4 GPUs: all busy
    assert st.stale_after == 2 * cfg.daemon.period + 60 and not st.stale(st.written + 60)
    assert st.stale(st.written + st.stale_after + 1)
    # the text: sorted keys, one line per account, only numbers and admin-set names
    text = path.read_text()
    assert text.count("\n") == 1 + 2 + 1 and '"accounts": {\n  "a": {' in text
    assert json.loads(text)["format"] == status_file.FORMAT
    store.close()


def test_the_status_file_is_written_in_shadow_mode_and_can_be_turned_off(tmp_path):
    cfg, store, _c, res = _round(tmp_path, dry_run=True)
    st = status_file.read_status(tmp_path / "status.json")
    assert res.status == "dry-run" and st.dry_run and not any(a.managed for a in st.accounts.values())
    store.close()
    cfg, store, _c, res = _round(tmp_path / "off", publish_status=False)
    assert cfg.status_path is None and res.public is None and not (tmp_path / "off" / "status.json").exists()
    store.close()


def test_a_status_file_that_cannot_be_written_never_stops_the_round(tmp_path):
    (tmp_path / "file").write_text("x")
    cfg, store, _c, res = _round(tmp_path, status_file=str(tmp_path / "file" / "status.json"))
    row = store.round(res.round_id)
    assert res.status == "ok" and row.status == "ok"
    assert row.details["status_file_error"].startswith(str(tmp_path / "file" / "status.json"))
    assert [e.kind for e in store.events(kind="status-file")] == ["status-file"]
    store.close()


def test_a_poll_refreshes_use_and_keeps_the_rounds_decisions(tmp_path):
    cfg, store, cluster, res = _round(tmp_path)
    cluster.advance(cluster.clock() + 10.0)
    snap = cluster.snapshot()
    new = status_file.refreshed(res.public, snap, res.decisions, cfg)
    assert new.round == res.public.round and new.type_order == res.public.type_order
    assert {a: v.guarantee for a, v in new.accounts.items()} == {a: v.guarantee for a, v in res.public.accounts.items()}
    assert new.written == snap.taken_at
    store.close()


def test_limits_after_applies_changes_and_clears():
    cur = {"a": {"k80": 2, "*": 4}, "b": {}}
    assert limits_after(cur, {"a": {"k80": -1, "v100": 1}, "c": {"*": 0}}) == {
        "a": {"*": 4, "v100": 1}, "b": {}, "c": {"*": 0}}
    assert cur == {"a": {"k80": 2, "*": 4}, "b": {}}  # not changed in place


def _status(**kw) -> status_file.PublicStatus:
    base = dict(written=100.0, round=3, round_time=99.0, round_status="ok", period=60.0, stale_after=180.0,
                policy="oef-coop", dry_run=False, manage_limits=True, lend=True, retype=False,
                preemption=status_file.PreemptionStatus(True, 120.0, 600.0, "USR1"),
                types={"k80": status_file.TypeStatus(4, 1, 1, 2)},
                accounts={"acct_a": status_file.AccountStatus({"k80": 2}, {"k80": 1}, {"k80": 1}, {"k80": 3, "*": 3}, 2,
                                                         True)},
                type_order={"*": ("k80",), "acct_a": ("k80",)})
    base.update(kw)
    return status_file.PublicStatus(**base)


def test_render_and_parse_round_trip_and_zero_limits_are_kept():
    st = _status(accounts={"x": status_file.AccountStatus(limits={"k80": 0, "*": 0})})
    assert status_file.parse(status_file.render(st)) == st
    assert status_file.parse(status_file.render(_status(accounts={}))) == _status(accounts={})


@pytest.mark.parametrize("change, field", [
    (lambda d: d.update(format=2), "format: 2 is not a format this slurm-fair reads"),
    (lambda d: d.pop("written"), "written: missing"),
    (lambda d: d.update(dry_run="no"), "dry_run: wrong type"),
    (lambda d: d.update(written=float("inf")), "written: must be a finite number"),
    (lambda d: d["accounts"]["acct_a"]["in_use"].update(k80="1"), "accounts.acct_a.in_use.k80: must be an integer"),
    (lambda d: d["accounts"].update({"x\x1b[31m": {}}), "bad account entry"),
    (lambda d: d["types"]["k80"].pop("idle"), "types.k80.idle: missing"),
    (lambda d: d["type_order"].update({"*": "k80"}), "type_order.*: must be a list of GPU types"),
])
def test_a_bad_file_names_the_field(change, field):
    d = json.loads(status_file.render(_status()))
    change(d)
    with pytest.raises(status_file.StatusFileError, match=field.replace("*", r"\*").replace("[", r"\[")):
        status_file.parse(json.dumps(d))


def test_read_status_says_why_a_file_is_unusable(tmp_path, monkeypatch):
    with pytest.raises(status_file.StatusFileError, match="no such file"):
        status_file.read_status(tmp_path / "none.json")
    (tmp_path / "bad.json").write_bytes(b"\xff{")
    with pytest.raises(status_file.StatusFileError, match="not UTF-8"):
        status_file.read_status(tmp_path / "bad.json")
    (tmp_path / "big.json").write_text(" " * 200)
    monkeypatch.setattr(status_file, "MAX_READ_BYTES", 100)
    with pytest.raises(status_file.StatusFileError, match="larger than 100 bytes"):
        status_file.read_status(tmp_path / "big.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(status_file.StatusFileError, match="must be a JSON object"):
        status_file.read_status(tmp_path / "list.json")


def test_world_readable_names_the_private_folder(tmp_path):
    d = tmp_path / "private"
    d.mkdir(mode=0o750)
    os.chmod(d, 0o750)
    f = d / "status.json"
    f.write_text("{}")
    os.chmod(f, 0o644)
    assert status_file.world_readable(f) == f"the folder {d} is not searchable by other users (mode 750)"
    os.chmod(d, 0o755)
    os.chmod(f, 0o600)
    assert status_file.world_readable(f) == f"{f} is not readable by other users (mode 600)"


def test_the_daemon_rewrites_the_file_from_each_poll(tmp_path):
    from slurm_fair.daemon.service import refresh_status

    cfg, store, cluster, res = _round(tmp_path)
    before = status_file.read_status(cfg.status_path)
    cluster.advance(cluster.clock() + 30.0)
    assert refresh_status(res, cluster.snapshot(), cfg)
    after = status_file.read_status(cfg.status_path)
    assert after.written > before.written and after.round == before.round and after == res.public
    assert not refresh_status(None, cluster.snapshot(), cfg)  # no round yet: nothing to publish
    (tmp_path / "status.json").unlink()
    (tmp_path / "status.json").mkdir()  # cannot be replaced: logged, not raised
    assert not refresh_status(res, cluster.snapshot(), cfg)
    store.close()
