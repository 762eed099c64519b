"""The published type map fails open (issue 29): it always says what happens to an account without a line (a
``*`` line, else ``#@listed-only``), carries ``#@expires`` (``submit.max_age``, default 3 x ``daemon.period``),
and starts with its ``#@map`` identity line (job_submit.lua's cache key). Checked on the text and, where the
script decides, with the real etc/job_submit.lua run by lua5.1."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from slurm_fair import config
from slurm_fair.cluster.base import Account, Node, Snapshot
from slurm_fair.daemon import plan as P
from slurm_fair.daemon import type_map_file

REPO = Path(__file__).resolve().parents[2]
T = P.Target

needs_lua = pytest.mark.skipif(shutil.which("lua5.1") is None, reason="lua5.1 not installed (apt-get install lua5.1)")


def _submit(map_path: Path, jobs: list[dict[str, str]], clock: float | None = None) -> list[str]:
    """Load the real script as a module reading ``map_path`` and submit ``jobs``; per job its tres_per_node,
    then what the user was told."""
    script = map_path.parent / "slurm_fair_submit.lua"
    shutil.copy(REPO / "etc" / "job_submit.lua", script)
    lines = [
        "slurm = {SUCCESS = 0, ERROR = -1, log_info = function() end, log_error = function() end,",
        " log_user = function(f, ...) print('user: ' .. string.format(f, ...)) end}",
        f"local sf = dofile('{script}')",
        f"sf.map_file = '{map_path}'",
    ]
    if clock is not None:
        lines.append(f"sf.clock = function() return {int(clock)} end")
    for j in jobs:
        fields = ", ".join(f"{k} = '{v}'" for k, v in j.items())
        lines.append(f"do local j = {{{fields}}}; assert(sf.job_submit(j, {{}}, 0) == 0); print(j.tres_per_node) end")
    r = subprocess.run(["lua5.1", "-"], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def _defaults(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("* ") or ln == "#@listed-only"]


def test_empty_targets_still_say_what_happens_to_every_account():
    """``[cluster] partitions = ["gpu-typo"]`` gave no targets and a map of only its header, which rejected every
    untyped GPU job (a script of before issue 29 rejects a map without a ``*`` line; #@listed-only passes)."""
    text = type_map_file.render_map({}, map_id="x-1")
    assert _defaults(text) == ["#@listed-only"]
    assert type_map_file.NO_DEFAULT in text.splitlines()


def test_a_default_whose_types_the_script_would_refuse_falls_back_to_listed_only():
    text = type_map_file.render_map({"acct_a": T((("v100", 2),), "room"), "*": T((("bad type", 4),), "free")})
    assert _defaults(text) == ["#@listed-only"]
    assert "acct_a v100:2 room" in text.splitlines()


def test_a_default_line_is_kept_and_no_listed_only_added():
    text = type_map_file.render_map({"acct_a": T((("v100", 2),), "room"), "*": T((("k80", 0),), "no free GPU now")})
    assert _defaults(text) == ["* k80:0 no free GPU now"]
    pilot = type_map_file.render_map({"acct_a": T((("v100", 2),), "room")}, listed_only=True)
    assert _defaults(pilot) == ["#@listed-only"] and type_map_file.NO_DEFAULT not in pilot


def test_untyped_targets_of_a_cluster_with_gpus_always_have_a_default_line():
    nodes = (Node("v100-1", ("IDLE",), ("gpu",), {"v100": 2}, {}),)
    snap = Snapshot("22.05.8", 0.0, nodes, (), (Account("acct_a", 1, {}),), ("gpu",))
    cap = {"v100": 2}
    zero = {"acct_a": {"v100": 0}}
    for claims in ({}, {"acct_a": {"v100": 2}}):  # room, and none left
        plan = P.Plan(capacity=cap, accounts=("acct_a",), ideal_class={}, ideal=zero, deviation_before=zero,
                      real=zero, deviations=zero, extra=zero, limits={"acct_a": {"v100": 2}},
                      min_gpus={"acct_a": 0}, demand={"acct_a": 0}, claims=claims, lend=True)
        targets = P.untyped_targets(plan, snap)
        assert [ln for ln in _defaults(type_map_file.render_map(targets)) if ln.startswith("* v100:")], targets
    empty = Snapshot("22.05.8", 0.0, (), (), (Account("acct_a", 1, {}),), ())
    plan = P.Plan(capacity={}, accounts=("acct_a",), ideal_class={}, ideal={"acct_a": {}}, deviation_before={},
                  real={"acct_a": {}}, deviations={}, extra={}, limits={"acct_a": {}}, min_gpus={"acct_a": 0},
                  demand={"acct_a": 0}, claims={}, lend=True)
    assert P.untyped_targets(plan, empty) == {}
    assert _defaults(type_map_file.render_map(P.untyped_targets(plan, empty))) == ["#@listed-only"]


@needs_lua
def test_the_script_leaves_jobs_alone_under_an_empty_targets_map(tmp_path):
    path = tmp_path / "gpu_type_map.txt"
    type_map_file.write_type_map(path, {}, max_age=900)
    out = _submit(path, [{"account": "acct_a", "tres_per_node": "gres:gpu:1"}])
    assert out == ["gres:gpu:1"]  # unchanged, and nothing to say: no type is slurm-fair's to give


def test_identity_first_and_expires_written(tmp_path):
    path = tmp_path / "gpu_type_map.txt"
    assert type_map_file.write_type_map(path, {"*": T((("k80", 1),), "free")}, map_id="abc-7", taken_at=990.5, max_age=900,
                           now=1000.0)
    lines = path.read_text().splitlines()
    assert lines[0] == "#@map abc-7 990"
    assert "#@expires 1900" in lines
    assert path.stat().st_mtime == 1000.0
    type_map_file.write_type_map(path, {"*": T((("k80", 1),), "free")}, map_id="abc-8")  # no max_age: no #@expires
    assert not [ln for ln in path.read_text().splitlines() if ln.startswith("#@expires")]


def test_max_age_defaults_to_three_periods():
    assert type_map_file.max_age(config.from_dict({})) == 900.0
    assert type_map_file.max_age(config.from_dict({"daemon": {"period": 60}})) == 180.0
    assert type_map_file.max_age(config.from_dict({"daemon": {"period": 3}})) == 60.0  # at least a minute
    assert type_map_file.max_age(config.from_dict({"daemon": {"period": 60}, "submit": {"max_age": 45}})) == 45.0


@needs_lua
def test_the_script_ignores_the_map_once_it_expired(tmp_path):
    path = tmp_path / "gpu_type_map.txt"
    type_map_file.write_type_map(path, {"*": T((("k80", 4),), "free")}, taken_at=1000, max_age=900, now=1000.0)
    job = {"account": "acct_a", "tres_per_node": "gres:gpu:1"}
    assert _submit(path, [job], clock=1899)[-1] == "gres:gpu:k80:1"
    out = _submit(path, [job], clock=1901)
    assert out[-1] == "gres:gpu:1"
    assert "is stale (expired 1 s ago" in out[0]
