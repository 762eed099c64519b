"""Typing untyped GPU requests: the pure targets/retype rules (daemon/plan.py), the map writer
(daemon/publish.py) and Job.flexible. The Lua side is tested in tests/lua/ (test_job_submit_lua.py)."""

from __future__ import annotations

import stat
import subprocess
import shutil
from pathlib import Path

import pytest

from slurm_fair.cluster.base import ANY_GPU, Account, Job, Node, Snapshot
from slurm_fair.daemon import plan as P
from slurm_fair.daemon import publish

REPO = Path(__file__).resolve().parent.parent


def job(jid, account, gpus=1, gpu_type=None, state="PENDING", comment="", submit=1000, alloc=None, reason=""):
    return Job(job_id=jid, name="j", account=account, user="u", partition="gpu", state=state, reason=reason,
               priority=1, submit_time=submit, start_time=None if state == "PENDING" else submit + 1,
               gpus_per_node=gpus, nodes=1, gpu_type=gpu_type, gpus_allocated=alloc or {}, comment=comment)


NODES = (
    Node("a100-1", ("IDLE",), ("gpu",), {"a100": 4}, {}),
    Node("v100-1", ("MIXED",), ("gpu",), {"v100": 4}, {"v100": 1}),
    Node("k80-1", ("IDLE",), ("gpu",), {"k80": 4}, {}),
)


def snap(jobs=(), version="22.05.8"):
    accts = tuple(Account(a, 1, {}) for a in ("acct_a", "acct_b", "acct_c"))
    return Snapshot(version, 0.0, NODES, tuple(jobs), accts, ("gpu",))


def plan(limits):
    cap = {"a100": 4, "k80": 4, "v100": 4}
    full = {a: {g: row.get(g, 0) for g in cap} | {ANY_GPU: sum(row.values())} for a, row in limits.items()}
    zero = {a: {g: 0 for g in cap} for a in limits}
    return P.Plan(capacity=cap, accounts=tuple(sorted(limits)), ideal_class={}, ideal=zero, deviation_before=zero,
                  real=zero, deviations=zero, extra=zero, limits=full, min_gpus={a: 0 for a in limits},
                  demand={a: 0 for a in limits})


# ------------------------------------------------------------------------------------------- Job.flexible


def test_flexible_is_the_comment_token():
    assert job(1, "a", comment="fair:flex").flexible
    assert job(1, "a", comment="class=cnn fair:flex").flexible
    assert job(1, "a", comment="class=cnn,fair:flex;x").flexible
    assert not job(1, "a", comment="").flexible
    assert not job(1, "a", comment="fair:flexible").flexible
    assert not job(1, "a", comment="unfair:flex").flexible


# ------------------------------------------------------------------------------------------- targets


def test_target_is_the_type_with_most_room_after_use_and_typed_pending():
    jobs = [job(1, "acct_a", 1, "v100", "RUNNING", alloc={"v100": 1}),
            job(2, "acct_a", 2, "v100"),  # pending typed for v100: takes room there
            job(3, "acct_a", 1, None)]  # untyped pending: takes no type's room
    t = P.untyped_targets(plan({"acct_a": {"v100": 4, "k80": 2}, "acct_b": {"a100": 3}}), snap(jobs))
    assert t["acct_a"] == ("k80", "most room in its share: limit 2, in use 0, pending 0")  # v100 room 4-1-2=1
    assert t["acct_b"] == ("a100", "most room in its share: limit 3, in use 0, pending 0")


def test_ties_go_to_the_faster_type_for_the_account_then_the_name():
    p = plan({"acct_a": {"v100": 2, "k80": 2}, "acct_b": {"v100": 2, "k80": 2}})
    thr = {"acct_a": {"cnn": {"k80": 1.0, "v100": 8.0}, "rl": {"k80": 1.0, "v100": 1.1}}}
    t = P.untyped_targets(p, snap(), thr)
    assert t["acct_a"][0] == "v100"
    assert t["acct_b"][0] == "k80"  # no speeds known: by name


def test_no_room_anywhere_falls_back_to_the_default_type():
    jobs = [job(1, "acct_a", 2, "k80", "RUNNING", alloc={"k80": 2})]
    p = plan({"acct_a": {"k80": 2}, "acct_b": {"v100": 4, "k80": 2}})
    t = P.untyped_targets(p, snap(jobs))
    # a100: nobody's limit holds any of its 4 GPUs
    assert t["*"] == ("a100", "most GPUs not held by any account's limit (4 of 4)")
    assert t["acct_a"] == ("a100", "no room in its share now; most GPUs not held by any account's limit (4 of 4)")


def test_default_when_every_gpu_is_held_uses_idle_gpus_then_name():
    p = plan({"acct_a": {"a100": 4, "k80": 4}, "acct_b": {"v100": 4}})
    # nothing unallocated: idle now a100 4, k80 4, v100 3 (one allocated) -> a100 by name
    assert P.default_target(p, {"a100": 4, "k80": 4, "v100": 3}) == ("a100", "most idle GPUs now (4 of 4)")
    assert P.default_target(p, {"a100": 1, "k80": 4, "v100": 3})[0] == "k80"


def test_default_when_every_gpu_is_held_and_busy_goes_where_typed_jobs_ask_least():
    # one account's untyped flood holds every GPU (limits cover all, nothing idle): newcomers' untyped jobs
    # should go where typed demand contends least, not to the first name (a100, the scarcest type here)
    p = plan({"acct_a": {"a100": 4, "k80": 4, "v100": 4}})
    none_idle = {"a100": 0, "k80": 0, "v100": 0}
    assert P.default_target(p, none_idle, {}) == ("a100", "fewest GPUs asked for by typed jobs (0 of 4)")
    assert P.default_target(p, none_idle, {"a100": 3, "k80": 1})[0] == "v100"
    jobs = [job(1, "acct_b", 2, "a100"), job(2, "acct_b", 1, "k80", "RUNNING", alloc={"k80": 1})]
    assert P.typed_claims(snap(jobs)) == {"a100": 2, "k80": 1}
    empty = P.Plan(capacity={}, accounts=(), ideal_class={}, ideal={}, deviation_before={}, real={},
                   deviations={}, extra={}, limits={}, min_gpus={}, demand={})
    assert P.untyped_targets(empty, snap()) == {}


def test_flexible_as_untyped_only_changes_pending_flexible_jobs():
    jobs = [job(1, "acct_a", 1, "v100", comment="fair:flex"),
            job(2, "acct_a", 1, "v100", "RUNNING", comment="fair:flex", alloc={"v100": 1}),
            job(3, "acct_a", 1, "k80")]
    s = P.flexible_as_untyped(snap(jobs))
    assert [j.gpu_type for j in s.jobs] == [None, "v100", "k80"]


# ------------------------------------------------------------------------------------------- retype


def test_retype_moves_flexible_jobs_that_no_longer_fit_to_a_type_with_room():
    jobs = [job(1, "acct_a", 1, "v100", "RUNNING", alloc={"v100": 1}),
            job(2, "acct_a", 1, "v100", submit=10, comment="fair:flex"),  # fits (limit 2, 1 in use)
            job(3, "acct_a", 2, "v100", submit=20, comment="fair:flex"),  # no room: moves
            job(4, "acct_a", 1, "v100", submit=30),  # typed by the user: never moved
            job(5, "acct_a", 2, "v100", submit=40, comment="fair:flex"),  # no room, k80 has 1 left only
            job(6, "acct_a", 1, "v100", submit=50, comment="fair:flex", reason="JobHeldUser")]  # held: skipped
    p = plan({"acct_a": {"v100": 2, "k80": 3}})
    moves = P.retype_moves(p, snap(jobs))
    assert moves == [P.Retype(3, "acct_a", "v100", "k80", 2)]
    after = P.with_retypes(snap(jobs), moves)
    assert [j.gpu_type for j in after.jobs if j.job_id == 3] == ["k80"]
    assert P.retype_moves(p, snap(jobs), max_moves=0) == []


# ------------------------------------------------------------------------------------------- publish


def test_render_map_sorted_default_last_and_never_broken():
    text = publish.render_map({"*": ("a100", "most idle"), "acct_b": ("k80", "why\nnot"), "acct_a": ("v100", ""),
                               "bad name": ("v100", "x"), "acct_c": ("gpu:x", "x"), "acct_d": ("2", "x")})
    body = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert body == ["acct_a v100", "acct_b k80 why not", "* a100 most idle"]


def test_write_map_atomic_mode_mtime_and_only_on_change(tmp_path):
    p = tmp_path / "gpu_type_map.txt"
    assert publish.write_map(p, "acct_a v100\n", now=1_000_000_000.0)
    st = p.stat()
    assert stat.S_IMODE(st.st_mode) == 0o644 and st.st_mtime == 1_000_000_000.0
    assert not publish.write_map(p, "acct_a v100\n", now=2_000_000_000.0)  # same content: untouched
    assert p.stat().st_mtime == 1_000_000_000.0
    assert publish.write_map(p, "acct_a k80\n")
    assert p.read_text() == "acct_a k80\n"
    assert [x.name for x in tmp_path.iterdir()] == ["gpu_type_map.txt"]  # no temp file left
    with pytest.raises(OSError):
        publish.write_map(tmp_path / "missing" / "m.txt", "x\n")


@pytest.mark.skipif(shutil.which("lua5.1") is None, reason="lua5.1 not installed (apt-get install lua5.1)")
def test_published_map_is_what_job_submit_lua_reads(tmp_path):
    """The daemon's output parsed by the real script: the same entries, reasons included."""
    targets = {"acct_a": ("v100", "most room in its share: limit 4, in use 1, pending 0"),
               "*": ("a100", "most GPUs not held by any account's limit (4 of 4)")}
    publish.publish(tmp_path / "gpu_type_map.txt", targets)
    shutil.copy(REPO / "etc" / "job_submit.lua", tmp_path / "job_submit.lua")
    probe = (
        "slurm = {SUCCESS = 0, ERROR = -1, log_info = function() end, log_error = function() end,"
        " log_user = function(f, ...) print(string.format(f, ...)) end}\n"
        f"dofile('{tmp_path}/job_submit.lua')\n"
        "for _, a in ipairs({'acct_a', 'acct_z'}) do\n"
        "  local j = {account = a, tres_per_job = 'gres:gpu:1'}\n"
        "  assert(slurm_job_submit(j, {}, 0) == 0); print(j.tres_per_job, j.comment)\n"
        "end\n")
    r = subprocess.run(["lua5.1", "-"], input=probe, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "slurm-fair: untyped GPU request given type 'v100' (account acct_a: most room in its share: "
        "limit 4, in use 1, pending 0)",
        "gres:gpu:v100:1\tfair:flex",
        "slurm-fair: untyped GPU request given type 'a100' (account acct_z: no entry for the account; "
        "default: most GPUs not held by any account's limit (4 of 4))",
        "gres:gpu:a100:1\tfair:flex",
    ]


def test_flexible_note_says_whether_slurm_can_retype():
    jobs = [job(7, "acct_a", 1, "v100", comment="class=cnn fair:flex"), job(8, "acct_a", 1, "v100")]
    old = P.flexible_note(snap(jobs, "22.05.8"), "acct_a")
    assert "fair:flex) 7:" in old and "cannot change a pending job's GPU type" in old
    assert "moves them" in P.flexible_note(snap(jobs, "24.11.5"), "acct_a")
    assert P.flexible_note(snap(jobs), "acct_b") is None and P.flexible_note(None, "acct_a") is None


# ------------------------------------------------------------------------------------------- exploration


def test_explore_steers_a_reporting_class_to_a_type_it_has_no_profile_on_within_its_share():
    p = plan({"acct_a": {"v100": 3, "k80": 1, "a100": 2}, "acct_b": {"v100": 2, "k80": 2}})
    t = P.untyped_targets(p, snap())
    assert t["acct_a"][0] == "v100" and t["acct_b"][0] in ("k80", "v100")
    src = {"acct_a": {"cnn": {"v100": P.SRC_ACCOUNT, "k80": P.SRC_ASSUMED, "a100": P.SRC_ASSUMED}},
           "acct_b": {"rl": {"v100": P.SRC_ACCOUNT, "k80": P.SRC_ASSUMED}}}
    e = P.explore_targets(t, p, snap(), src, {("acct_a", "cnn")})  # acct_b's class never reported: left alone
    assert e["acct_a"] == ("a100", "explore: class cnn has no profile on a100 (room in its share: 2)")
    assert e["acct_b"] == t["acct_b"] and e["*"] == t["*"]
    # no room on the unprofiled types (a running a100 job and a pending typed k80 job): no exploring
    jobs = [job(1, "acct_a", 2, "a100", "RUNNING", alloc={"a100": 2}), job(2, "acct_a", 1, "k80")]
    t2 = P.untyped_targets(p, snap(jobs))
    assert P.explore_targets(t2, p, snap(jobs), src, {("acct_a", "cnn")}) == t2
    # the usual target is already unprofiled: kept, and the reason says why
    src_v = {"acct_a": {"cnn": {"v100": P.SRC_ASSUMED, "k80": P.SRC_ACCOUNT, "a100": P.SRC_ASSUMED}}}
    assert P.explore_targets(t, p, snap(), src_v, {("acct_a", "cnn")})["acct_a"] == (
        "v100", "explore: class cnn has no profile on v100; " + t["acct_a"][1])


def test_explore_plan_moves_one_unused_gpu_of_a_limit_to_an_unprofiled_type_nobody_holds():
    src = {"acct_a": {"cnn": {"v100": P.SRC_ACCOUNT, "k80": P.SRC_ASSUMED, "a100": P.SRC_ASSUMED}}}
    # acct_a: v100 limit 3 with 1 running (room 2), nothing on k80/a100; acct_b holds all 4 a100
    p = plan({"acct_a": {"v100": 3}, "acct_b": {"a100": 4}})
    jobs = [job(1, "acct_a", 1, "v100", "RUNNING", alloc={"v100": 1})]
    p2, moves = P.explore_plan(p, snap(jobs), src, {("acct_a", "cnn")})
    assert moves == [{"account": "acct_a", "class": "cnn", "from": "v100", "to": "k80"}]  # a100: all held
    assert p2.limits["acct_a"] == {"v100": 2, "k80": 1, "a100": 0, ANY_GPU: 3} and p2.limits["acct_b"] == p.limits["acct_b"]
    t = P.explore_targets(P.untyped_targets(p2, snap(jobs)), p2, snap(jobs), src, {("acct_a", "cnn")})
    assert t["acct_a"][0] == "k80" and t["acct_a"][1].startswith("explore: class cnn has no profile on k80")
    # nothing moves for a class that never reported, or without unused room
    assert P.explore_plan(p, snap(jobs), src, set())[1] == []
    full = [job(1, "acct_a", 3, "v100", "RUNNING", alloc={"v100": 3})]
    assert P.explore_plan(p, snap(full), src, {("acct_a", "cnn")})[1] == []
