"""Typing untyped GPU requests: the pure targets/retype rules (daemon/plan.py), the map writer
(daemon/type_map_file.py) and Job.flexible. The Lua side is tested in tests/lua/ (test_job_submit_lua.py)."""

from __future__ import annotations

import stat
from dataclasses import replace as _replace
import subprocess
import shutil
import time
from pathlib import Path

import pytest

from slurm_fair.cluster.base import ANY_GPU, Account, Job, Node, Snapshot
from slurm_fair.daemon import plan as P
from slurm_fair import statefiles
from slurm_fair.daemon import type_map_file
from slurm_fair.daemon.plan.backfill import queue_starts, snapshot_plan
from slurm_fair.daemon.plan.typemap import frees_in, untyped_room, worth_moving

REPO = Path(__file__).resolve().parents[2]


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


def plan(limits, real=None, claims=None, lend=False):
    """A plan with these limits (missing types: 0 under hard caps, no limit when lending), guarantees and claims."""
    cap = {"a100": 4, "k80": 4, "v100": 4}
    accounts = sorted(set(limits) | set(real or {}))
    if lend:
        full = {a: dict(limits.get(a, {})) for a in accounts}
    else:
        full = {a: {g: limits.get(a, {}).get(g, 0) for g in cap} | {ANY_GPU: sum(limits.get(a, {}).values())}
                for a in accounts}
    zero = {a: {g: 0 for g in cap} for a in accounts}
    guar = {a: {g: (real or {}).get(a, {}).get(g, 0) for g in cap} for a in accounts}
    return P.Plan(capacity=cap, accounts=tuple(accounts), ideal_class={}, ideal=zero, deviation_before=zero,
                  real=guar, deviations=zero, extra=zero, limits=full, min_gpus={a: 0 for a in accounts},
                  demand={a: 0 for a in accounts}, claims=claims or {}, lend=lend)


# ------------------------------------------------------------------------------------------- Job.flexible


def test_flexible_is_the_comment_token():
    assert job(1, "a", comment="fair:flex").flexible
    assert job(1, "a", comment="class=cnn fair:flex").flexible
    assert job(1, "a", comment="class=cnn,fair:flex;x").flexible
    assert not job(1, "a", comment="").flexible
    assert not job(1, "a", comment="fair:flexible").flexible
    assert not job(1, "a", comment="unfair:flex").flexible


# ------------------------------------------------------------------------------------------- targets


THR = {"acct_a": {"cnn": {"a100": 12.0, "v100": 8.0, "k80": 1.0}}, "acct_b": {"rl": {"a100": 1.2, "v100": 1.1, "k80": 1.0}}}


def test_free_room_fastest_first_with_rooms_and_the_largest_job_that_fits():
    # idle: a100 4, v100 3 (one allocated), k80 4; acct_b's pending 2-GPU v100 job will take 2 of the V100s
    jobs = [job(1, "acct_b", 2, "v100")]
    p = plan({}, real={"acct_a": {}, "acct_b": {}}, lend=True)
    t = P.untyped_targets(p, snap(jobs), THR)
    assert t["acct_a"].types == (("a100", 4), ("v100", 1), ("k80", 4))
    assert t["acct_a"].blocks == {"a100": 4, "v100": 1, "k80": 4}
    assert t["acct_a"].reason == "room: a100 4 (free), v100 1 (free), k80 4 (free)"
    assert t["acct_b"].first == "a100" and t["*"].types[0] == ("a100", 4)  # ties: most room, then name


def test_a_limit_bounds_free_room_and_guaranteed_room_counts_when_preemption_reclaims():
    # v100 busy with acct_b's borrowed jobs; acct_a is guaranteed 4 V100s and limited to 1 A100 (claims)
    jobs = [job(1, "acct_b", 3, "v100", "RUNNING", alloc={"v100": 3})]
    busy = (NODES[0], Node("v100-1", ("ALLOCATED",), ("gpu",), {"v100": 4}, {"v100": 4}), NODES[2])
    s = Snapshot("22.05.8", 0.0, busy, tuple(jobs), (), ("gpu",))
    p = plan({"acct_a": {"a100": 1}}, real={"acct_a": {"v100": 4}, "acct_b": {}}, lend=True)
    t = P.untyped_targets(p, s, THR)  # no preemption: types with free GPUs first
    assert t["acct_a"].types == (("a100", 1), ("k80", 4), ("v100", 4))
    assert t["acct_a"].blocks == {"a100": 4, "k80": 4}  # guaranteed room has no block: reclaim makes room
    r = P.untyped_targets(p, s, THR, reclaim=True)  # preemption on: the fastest type first
    assert r["acct_a"].types == (("a100", 1), ("v100", 4), ("k80", 4))


def test_no_room_anywhere_the_type_of_its_largest_guarantee():
    jobs = [job(i, "acct_c", 4, g, "RUNNING", alloc={g: 4}) for i, g in enumerate(("a100", "k80"), 1)]
    jobs.append(job(3, "acct_c", 3, "v100", "RUNNING", alloc={"v100": 3}))  # with NODES' allocated one: full
    p = plan({}, real={"acct_a": {"k80": 1, "v100": 2}, "acct_c": {"a100": 4}}, lend=True)
    nodes = tuple(Node(n.name, ("ALLOCATED",), n.partitions, n.gpus, dict(n.gpus)) for n in NODES)
    s = Snapshot("22.05.8", 0.0, nodes, tuple(jobs), (), ("gpu",))
    t = P.untyped_targets(p, s, THR)
    assert t["acct_a"].types == (("v100", 2), ("k80", 1))  # guaranteed room, busy: listed, fastest first
    assert t["acct_c"].types == (("a100", 0),) and t["acct_c"].reason.startswith("no room on any type now")


def test_class_lines_order_types_per_class_and_site_wide():
    p = plan({}, real={"acct_a": {}}, lend=True)
    thr = {"acct_a": {"cnn": {"a100": 12.0, "v100": 8.0, "k80": 1.0}, "bad name": {"k80": 2.0, "v100": 1.0}}}
    t = P.untyped_targets(p, snap(), thr, class_speed={"rl": {"k80": 1.0, "v100": 1.1}, "x y": {"k80": 1.0}})
    assert [g for g, _ in t["acct_a/cnn"].types] == ["a100", "v100", "k80"]
    assert [g for g, _ in t["*/rl"].types] == ["v100", "k80"]  # a type the class has no value on is left out
    assert not any(k.endswith(("bad name", "x y")) for k in t)  # names job_submit.lua cannot read


def test_only_types_every_class_of_the_account_can_run_on():
    thr = {"acct_a": {"cnn": {"a100": 12.0, "v100": 8.0}, "rl": {"v100": 1.1, "k80": 1.0, "a100": 1.2}}}
    t = P.untyped_targets(plan({}, real={"acct_a": {}}, lend=True), snap(), thr)
    assert [g for g, _ in t["acct_a"].types] == ["a100", "v100"]


def test_default_line_by_the_site_speed_and_empty_cluster():
    p = plan({}, real={"acct_a": {}}, lend=True, claims={"acct_a": {"a100": 3}})
    t = P.untyped_targets(p, snap(), {}, site_speed={"a100": 5.0, "v100": 3.0, "k80": 1.0})
    assert t["*"].types == (("a100", 1), ("v100", 3), ("k80", 4))  # a100: 3 of 4 claimed
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


def test_retype_moves_flexible_jobs_that_cannot_start_to_a_type_where_they_can():
    # idle: a100 4, v100 3, k80 4; acct_a may use 2 V100s more (limit 3, one running) and 3 K80s
    jobs = [job(1, "acct_a", 1, "v100", "RUNNING", alloc={"v100": 1}),
            job(2, "acct_a", 1, "v100", submit=10, comment="fair:flex"),  # fits (limit room 2)
            job(3, "acct_a", 2, "v100", submit=20, comment="fair:flex"),  # no limit room left: moves
            job(4, "acct_a", 1, "v100", submit=30),  # typed by the user: never moved
            job(5, "acct_a", 2, "v100", submit=40, comment="fair:flex"),  # no room, k80 has 1 left only
            job(6, "acct_a", 1, "v100", submit=50, comment="fair:flex", reason="JobHeldUser")]  # held: skipped
    p = plan({"acct_a": {"v100": 3, "k80": 3}})
    moves = P.retype_moves(p, snap(jobs))
    assert moves == [P.Retype(3, "acct_a", "v100", "k80", 2)]
    after = P.with_retypes(snap(jobs), moves)
    assert [j.gpu_type for j in after.jobs if j.job_id == 3] == ["k80"]
    assert P.retype_moves(p, snap(jobs), max_moves=0) == []
    # only to types the job's class is known to run on
    assert P.retype_moves(p, snap(jobs), runs_on=lambda j: ["v100", "a100"]) == []


def test_retype_moves_give_a_freed_type_to_the_job_that_has_waited_longest_first():
    """Issue 39: 4 idle K80s and two flexible V100 jobs that cannot start (no V100 limit room) and may move there:
    the one submitted first gets them, whatever its class loses on K80 (ranked by loss first, a later job of a
    class that loses less took them)."""
    thr = {"acct_a": {"cnn": {"v100": 10.0, "k80": 1.0}, "rl": {"v100": 1.1, "k80": 1.0}}}
    jobs = [_replace(job(1, "acct_a", 4, "v100", submit=10, comment="fair:flex"), name="cnn"),
            _replace(job(2, "acct_a", 4, "v100", submit=500, comment="fair:flex"), name="rl")]
    p = plan({"acct_a": {"v100": 0, "k80": 4}}, lend=False)
    # with no time limit only a loss of at most BLIND_MAX_LOSS pays: cnn (10x) may not move, rl (1.1x) may
    assert P.retype_moves(p, snap(jobs), throughput=thr) == [P.Retype(2, "acct_a", "v100", "k80", 4)]
    thr["acct_a"]["mid"] = {"v100": 1.4, "k80": 1.0}
    both = [_replace(jobs[0], name="mid"), jobs[1]]  # both gain; job 1's class loses more (1.4x against 1.1x)
    assert P.retype_moves(p, snap(both), throughput=thr) == [P.Retype(1, "acct_a", "v100", "k80", 4)]
    swapped = [_replace(both[0], submit_time=900), both[1]]  # now job 2 has waited longer
    assert P.retype_moves(p, snap(swapped), throughput=thr) == [P.Retype(2, "acct_a", "v100", "k80", 4)]


# ------------------------------------------------------------------------------------------- publish


def test_render_map_default_in_the_head_accounts_sorted_and_never_broken():
    T = P.Target
    text = type_map_file.render_map({"*": T((("a100", 4),), "most idle", {"a100": 4}),
                               "acct_b": T((("k80", 2), ("v100", 0)), "why\nnot", {}, (0, 1)),
                               "acct_a": T((("v100", 1),), ""),
                               "bad name": T((("v100", 1),), "x"), "acct_c": T((("gpu:x", 1),), "x"),
                               "acct_d": T((("2", 1),), "x"), "acct_a/cnn": T((("v100", 0), ("k80", 0)), "c"),
                               "*/rl": T((("k80", 0),), "c"), "acct_a/x y": T((("k80", 0),), "c")},
                              ("name",))
    body = [ln for ln in text.splitlines() if not ln.startswith("#")]
    # the '*' and '*/CLASS' lines in the head (read for every job), then each account's section, in name order
    assert body == ["@classes name", "* a100:4:4 most idle", "*/rl k80", "acct_a v100:1", "acct_a/cnn v100,k80",
                    "acct_b k80:2|v100:0 why not"]


def test_partition_types_are_the_gpu_types_of_each_partitions_nodes():
    nodes = (Node("a100-1", ("IDLE",), ("p1", "gpu"), {"a100": 4}, {}),
             Node("v100-1", ("DOWN",), ("p2", "gpu"), {"v100": 4}, {}),  # down nodes count: Slurm accepts the type
             Node("mixed-1", ("MIXED",), ("p2",), {"v100": 2, "k80": 2}, {"k80": 1}),
             Node("none-1", ("IDLE",), ("p3",), {"k80": 0}, {}))
    snapshot = Snapshot("22.05.8", 0.0, nodes, (), (), ("p1", "gpu", "p2", "p3"))
    assert P.partition_types(snapshot) == (P.PartitionTypes("gpu", ("a100", "v100")),
                                           P.PartitionTypes("p1", ("a100",)),
                                           P.PartitionTypes("p2", ("k80", "v100")))
    assert P.partition_types(snap()) == (P.PartitionTypes("gpu", ("a100", "k80", "v100")),)


def test_render_map_partition_lines_after_classes_sorted_and_never_broken():
    T, PT = P.Target, P.PartitionTypes
    parts = (PT("p2", ("v100", "k80")), PT("p1", ("a100",)), PT("bad part", ("a100",)), PT("p3", ("gpu:x", "2")),
             PT("p4", ("k80", "bad type", "k80")))
    text = type_map_file.render_map({"acct_a": T((("a100", 2), ("v100", 1)), "room"), "*": T((("k80", 1),), "free")},
                              ("comment",), parts)
    lines = text.splitlines()
    assert [ln for ln in lines if not ln.startswith(("# ", "#@index ", "#@at ", "#@types "))] == [
        "@classes comment", "#@partition p1 a100", "#@partition p2 k80,v100", "#@partition p4 k80",
        "* k80:1 free", "acct_a a100:2,v100:1 room"]
    # without partitions: no partition line (a map as before)
    assert not [ln for ln in type_map_file.render_map({"*": T((("k80", 1),), "free")}).splitlines()
                if ln.startswith("#@partition")]


def test_write_map_atomic_mode_mtime_and_only_on_change(tmp_path):
    p = tmp_path / "gpu_type_map.txt"
    assert statefiles.write_public(p, "acct_a v100\n", now=1_000_000_000.0)
    st = p.stat()
    assert stat.S_IMODE(st.st_mode) == 0o644 and st.st_mtime == 1_000_000_000.0
    assert not statefiles.write_public(p, "acct_a v100\n", now=2_000_000_000.0)  # same content: untouched
    assert p.stat().st_mtime == 1_000_000_000.0
    assert statefiles.write_public(p, "acct_a k80\n")
    assert p.read_text() == "acct_a k80\n"
    assert [x.name for x in tmp_path.iterdir()] == ["gpu_type_map.txt"]  # no temp file left
    with pytest.raises(OSError):
        statefiles.write_public(tmp_path / "missing" / "m.txt", "x\n")


@pytest.mark.skipif(shutil.which("lua5.1") is None, reason="lua5.1 not installed (apt-get install lua5.1)")
def test_published_map_is_what_job_submit_lua_reads(tmp_path):
    """The daemon's output parsed by the real script (loaded as a module): the same entries, reasons and
    partitions included."""
    targets = {"acct_a": P.Target((("v100", 1), ("k80", 2)), "room: v100 1 (free), k80 2 (free)", {"v100": 1}),
               "acct_a/rl": P.Target((("k80", 0), ("v100", 0)), "class order"),
               "*": P.Target((("a100", 4),), "free GPUs no waiting account's guarantee holds")}
    parts = (P.PartitionTypes("gpu", ("a100", "k80", "v100")), P.PartitionTypes("old", ("k80",)))
    type_map_file.write_type_map(tmp_path / "gpu_type_map.txt", targets, partitions=parts)
    shutil.copy(REPO / "etc" / "job_submit.lua", tmp_path / "slurm_fair_submit.lua")
    probe = (
        "slurm = {SUCCESS = 0, ERROR = -1, log_info = function() end, log_error = function() end,"
        " log_user = function(f, ...) print(string.format(f, ...)) end}\n"
        f"local sf = dofile('{tmp_path}/slurm_fair_submit.lua')\n"
        "assert(slurm_job_submit == nil and slurm_fair_submit == nil, 'a module defines no globals')\n"
        "local default = {gpu = {flag_default = 1}, old = {flag_default = 0}}\n"
        "for _, a in ipairs({{'acct_a', 'x'}, {'acct_a', 'x'}, {'acct_a', 'rl'}, {'acct_z', 'x'},\n"
        "                    {'acct_a', 'y', 'old'}}) do\n"
        "  local j = {account = a[1], name = a[2], partition = a[3], tres_per_job = 'gres:gpu:1'}\n"
        "  assert(sf.job_submit(j, default, 0) == 0); print(j.tres_per_job, j.comment)\n"
        "end\n")
    r = subprocess.run(["lua5.1", "-"], input=probe, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "slurm-fair: untyped GPU request given type 'v100' (account acct_a: room: v100 1 (free), k80 2 (free))",
        "gres:gpu:v100:1\tfair:flex",
        "slurm-fair: untyped GPU request given type 'k80' (account acct_a: room: v100 1 (free), k80 2 (free))",
        "gres:gpu:k80:1\tfair:flex",  # v100's room of 1 is used
        "slurm-fair: untyped GPU request given type 'k80' (account acct_a: room: v100 1 (free), k80 2 (free))",
        "gres:gpu:k80:1\tfair:flex",  # class rl: k80 first (one left)
        "slurm-fair: untyped GPU request given type 'a100' (account acct_z: no entry for the account; "
        "default: free GPUs no waiting account's guarantee holds)",
        "gres:gpu:a100:1\tfair:flex",
        "slurm-fair: untyped GPU request given type 'k80' (account acct_a: every type's room in the map is used by "
        "earlier submissions; waits for k80)",
        "gres:gpu:k80:1\tfair:flex",  # partition old has only k80, whose room is used up: it waits there
    ]


def test_flexible_note_says_whether_slurm_can_retype():
    jobs = [job(7, "acct_a", 1, "v100", comment="class=cnn fair:flex"), job(8, "acct_a", 1, "v100")]
    old = P.flexible_note(snap(jobs, "22.05.8"), "acct_a")
    assert "fair:flex) 7:" in old and "cannot change a pending job's GPU type" in old
    assert "moves them" in P.flexible_note(snap(jobs, "24.11.5"), "acct_a")
    assert P.flexible_note(snap(jobs), "acct_b") is None and P.flexible_note(None, "acct_a") is None


# ------------------------------------------------------------------------------------------- exploration


def test_explore_puts_a_type_a_reporting_class_has_no_profile_on_first_if_its_line_has_room():
    p = plan({}, real={"acct_a": {}, "acct_b": {}}, lend=True)
    t = P.untyped_targets(p, snap(), THR)
    assert t["acct_a"].first == "a100"
    src = {"acct_a": {"cnn": {"v100": P.SRC_ACCOUNT, "k80": P.SRC_ASSUMED, "a100": P.SRC_ACCOUNT}},
           "acct_b": {"rl": {"v100": P.SRC_ACCOUNT, "k80": P.SRC_ASSUMED}}}
    e = P.explore_targets(t, p, snap(), src, {("acct_a", "cnn")})  # acct_b's class never reported: left alone
    assert e["acct_a"].types == (("k80", 4), ("a100", 4), ("v100", 3))
    assert e["acct_a"].reason.startswith("explore: class cnn has no profile on k80 (room 4); room: a100 4")
    assert e["acct_b"] == t["acct_b"] and e["*"] == t["*"]
    # no room on the unprofiled type (a pending typed k80 job of 4 takes every idle K80): no exploring
    t2 = P.untyped_targets(p, snap([job(2, "acct_b", 4, "k80")]), THR)
    assert P.explore_targets(t2, p, snap(), src, {("acct_a", "cnn")}) == t2


def test_explore_plan_moves_one_unused_gpu_of_a_hard_cap_to_an_unprofiled_type_nobody_holds():
    src = {"acct_a": {"cnn": {"v100": P.SRC_ACCOUNT, "k80": P.SRC_ASSUMED, "a100": P.SRC_ASSUMED}}}
    # acct_a: v100 limit 3 with 1 running (room 2), nothing on k80/a100; acct_b holds all 4 a100
    p = plan({"acct_a": {"v100": 3}, "acct_b": {"a100": 4}})
    jobs = [job(1, "acct_a", 1, "v100", "RUNNING", alloc={"v100": 1})]
    p2, moves = P.explore_plan(p, snap(jobs), src, {("acct_a", "cnn")})
    assert moves == [{"account": "acct_a", "class": "cnn", "from": "v100", "to": "k80"}]  # a100: all held
    assert p2.limits["acct_a"] == {"v100": 2, "k80": 1, "a100": 0, ANY_GPU: 3} and p2.limits["acct_b"] == p.limits["acct_b"]
    t = P.explore_targets(P.untyped_targets(p2, snap(jobs)), p2, snap(jobs), src, {("acct_a", "cnn")})
    assert t["acct_a"].first == "k80" and t["acct_a"].reason.startswith("explore: class cnn has no profile on k80")
    # nothing moves for a class that never reported, or without unused room, or when limits lend
    assert P.explore_plan(p, snap(jobs), src, set())[1] == []
    full = [job(1, "acct_a", 3, "v100", "RUNNING", alloc={"v100": 3})]
    assert P.explore_plan(p, snap(full), src, {("acct_a", "cnn")})[1] == []
    assert P.explore_plan(plan({}, real={"acct_a": {}}, lend=True), snap(jobs), src, {("acct_a", "cnn")})[1] == []


def test_render_map_listed_only_for_a_pilot():
    T = P.Target
    text = type_map_file.render_map({"acct_a": T((("v100", 2),), "room")}, ("comment",), listed_only=True)
    assert [x for x in text.splitlines() if not x.startswith(("# ", "#@index ", "#@at ", "#@types "))] == [
        "@classes comment", "#@listed-only", "acct_a v100:2 room"]
    assert "#@listed-only" not in type_map_file.render_map({"acct_a": T((("v100", 2),), "room"), "*": T((("k80", 1),), "")})


# ------------------------------------------------------------------------------------------- map identity, untyped room


def test_the_map_id_changes_only_when_the_content_does(tmp_path):
    """Issue 40 item 4: each poll publishes the map again (a new snapshot time, a new ``#@expires``, new
    ``#@soon`` times), but its ``#@map ID`` is the hash of the content, so slurmctld parses it again only when
    the content changed; what carries time is read fresh (the first lines, before ``#@index``)."""
    T = P.Target
    targets = {"acct_a": T((("v100", 1),), "room", soon={"v100": {1: 1500}}), "*": T((("k80", 2),), "free")}
    text = type_map_file.render_map(targets, map_id="abc-1")
    assert text.splitlines()[0] == "#@map abc-1"  # first: job_submit.lua caches the parsed map by this line
    with pytest.raises(ValueError, match="map_id"):
        type_map_file.render_map(targets, map_id="a b")
    path = tmp_path / "gpu_type_map.txt"

    def poll(tg, taken_at, soon_at=1500):
        tg = {k: (T(v.types, v.reason, soon={"v100": {1: soon_at}}) if k == "acct_a" else v) for k, v in tg.items()}
        changed = type_map_file.write_type_map(path, tg, taken_at=taken_at, max_age=900, now=taken_at + 2)
        lines = path.read_text().splitlines()
        return changed, lines[0].split()[1], lines

    changed, id1, lines1 = poll(targets, 1000)
    assert changed and lines1[:4] == [f"#@map {id1} 1000", "#@expires 1902", "#@soon v100 1:1500", lines1[3]]
    assert lines1[3].startswith("#@index ")
    changed, id2, lines2 = poll(targets, 1010, soon_at=1520)  # the next poll: nothing changed but the time
    assert changed and id2 == id1  # rewritten (fresh lines), the same identity
    assert lines2[:3] == [f"#@map {id1} 1010", "#@expires 1912", "#@soon v100 1:1520"] and lines2[3:] == lines1[3:]
    assert id1 == type_map_file.content_id("\n".join(lines1[3:]) + "\n")  # the hash of the index line on
    more = dict(targets, acct_a=T((("v100", 2),), "room"))  # one room more: a new identity
    _c, id3, _l = poll(more, 1020)
    assert id3 != id1
    _c, id4, _l = poll(dict(targets, acct_a=T((("v100", 1),), "other reason")), 1030)
    assert id4 not in (id1, id3)  # a reason is content too (the user is told it)
    _c, id5, _l = poll(targets, 1040)
    assert id5 == id1  # back to the first content: its identity (the snapshot time keeps spent rooms apart)


def test_the_index_gives_each_accounts_section():
    """The layout job_submit.lua reads without parsing every line: ``#@index G I N`` then G bytes of head, I bytes
    of ``#@at ACCOUNT OFFSET LENGTH`` lines, and each account's section at OFFSET bytes from the end of the index
    (an account's lines grouped even where ``acct-x`` sorts between ``acct`` and ``acct/cls``; byte offsets,
    a reason of non-ASCII text included)."""
    T = P.Target
    targets = {"acct": T((("v100", 1),), "grüße", untyped=2), "acct-x": T((("k80", 2),), "x"),
               "acct/cnn": T((("v100", 0), ("k80", 0)), "c", speeds={"v100": 1000, "k80": 400}),
               "*": T((("k80", 2),), "free"), "*/rl": T((("k80", 0),), "c")}
    data = type_map_file.render_map(targets, map_id=type_map_file.CONTENT_ID, taken_at=1000).encode()
    lines = data.split(b"\n")
    assert lines[1].startswith(b"#@index ")
    g, i, n = (int(x) for x in lines[1].split()[1:])
    base = len(lines[0]) + 1 + len(lines[1]) + 1
    head, index = data[base:base + g].decode(), data[base + g:base + g + i].decode()
    assert "* k80:2 free" in head.splitlines() and "*/rl k80" in head.splitlines()
    assert "#@types k80,v100" in head.splitlines()
    body = base + g + i
    sections = {}
    for ln in index.splitlines():
        _at, acct, off, size = ln.split()
        sections[acct] = data[body + int(off):body + int(off) + int(size)].decode()
    assert n == 2 and sections == {
        "acct": "acct v100:1 grüße\n#@untyped acct 2\nacct/cnn v100,k80\n#@speed acct/cnn v100:1000,k80:400\n",
        "acct-x": "acct-x k80:2 x\n"}


def test_untyped_room_is_the_room_every_types_limit_leaves():
    # acct_a limits: a100 2, v100 3, k80 4, total 9 (hard caps); in use: v100 1; typed pending: k80 1
    p = plan({"acct_a": {"a100": 2, "v100": 3, "k80": 4}})
    types = ["a100", "v100", "k80"]
    # types whose limit is below their capacity (4): a100 2-0-0 = 2, v100 3-1 = 2 -> 2 (k80's limit 4 is its
    # capacity: untyped jobs cannot exceed it there); total 9-1-1 = 7 -> 2
    assert untyped_room(p, "acct_a", types, {"v100": 1}, {"k80": 1}, 0, True) == 2
    assert untyped_room(p, "acct_a", types, {"v100": 1}, {"k80": 1}, 1, True) == 1  # 1 GPU pending untyped
    assert untyped_room(p, "acct_a", types, {"v100": 1}, {"k80": 1}, 5, True) == 0
    assert untyped_room(p, "acct_a", types, {}, {}, 0, False) == 0  # a class cannot run on some type
    # lending: no per-type limit -> capacity (4 each); a total of 3 binds
    lend = plan({"acct_a": {ANY_GPU: 3}}, lend=True)
    assert untyped_room(lend, "acct_a", types, {"a100": 1}, {}, 0, True) == 2
    lend = plan({"acct_a": {"v100": 1}}, lend=True)  # another account's claim leaves it 1 V100: at most 1
    assert untyped_room(lend, "acct_a", types, {}, {}, 0, True) == 1
    # nobody else claims anything: every GPU of the cluster less what it holds (a flood's newcomer, issue 28)
    assert untyped_room(plan({"acct_a": {}}, lend=True), "acct_a", types, {}, {}, 0, True) == 12
    assert untyped_room(plan({"acct_a": {}}, lend=True), "acct_a", types, {"k80": 4}, {"v100": 1}, 2, True) == 5


def test_targets_carry_the_untyped_room_and_the_map_writes_it():
    # idle: a100 4, v100 3, k80 4; lending, nobody else claims: acct_a's limits are the capacity (4 each)
    jobs = [job(1, "acct_a", 1, "v100", "RUNNING", alloc={"v100": 1}), job(2, "acct_a", 2, "k80"),
            job(3, "acct_a", 1, None)]  # pending: 2 typed k80, 1 untyped
    p = plan({"acct_a": {}, "acct_b": {"a100": 1}}, lend=True)
    t = P.untyped_targets(p, snap(jobs), {"acct_a": {"cnn": {"a100": 3.0, "v100": 2.0, "k80": 1.0}},
                                          "acct_b": {"rl": {"a100": 1.0}}})
    # no type's limit is below its capacity: only the total binds, 12 - 1 in use - 2 typed pending - 1 untyped
    assert t["acct_a"].untyped == 8
    assert t["acct_b"].untyped == 0  # rl runs on a100 only: Slurm might give an untyped job a K80
    text = type_map_file.render_map(t, map_id="x-1")
    assert "#@untyped acct_a 8" in text.splitlines() and "#@untyped acct_b" not in text
    assert "#@free a100:4,k80:2,v100:3" in text.splitlines()  # idle less acct_a's typed pending k80 job's 2
    assert t["acct_a"].as_json()["untyped"] == 8


@pytest.mark.skipif(shutil.which("lua5.1") is None, reason="lua5.1 not installed (apt-get install lua5.1)")
def test_a_new_publication_of_the_same_rooms_starts_unspent_in_job_submit_lua(tmp_path):
    """The issue's testbed failure: the controller's Lua state had spent the rooms of a map whose text a new
    daemon published again, and typed a flood onto one type of an idle cluster. Rooms are spent per map
    identity and snapshot time (``#@map ID T``): a publication from a later snapshot starts unspent (but for
    what was handed out since T), even with the same content (the same ID); a job that fits no room stays untyped
    within #@untyped."""
    path = tmp_path / "gpu_type_map.txt"
    targets = {"acct_a": P.Target((("v100", 1), ("k80", 1)), "room", {"v100": 1, "k80": 1}, (), 1)}
    now = int(time.time())
    type_map_file.write_type_map(path, targets, taken_at=now - 100)
    shutil.copy(REPO / "etc" / "job_submit.lua", tmp_path / "slurm_fair_submit.lua")
    again = tmp_path / "next.txt"  # the next publication of the same rooms (a later snapshot), copied over the map
    again.write_text(type_map_file.render_map(targets, map_id=type_map_file.CONTENT_ID, taken_at=now + 100))
    assert again.read_text().splitlines()[0].split()[1] == path.read_text().splitlines()[0].split()[1]  # same id
    probe = (
        "slurm = {SUCCESS = 0, ERROR = -1, log_info = function() end, log_error = function() end,"
        " log_user = function() end}\n"
        f"local sf = dofile('{tmp_path}/slurm_fair_submit.lua')\n"
        "local function sub() local j = {account = 'acct_a', tres_per_job = 'gres:gpu:1'}\n"
        "  assert(sf.job_submit(j, {}, 0) == 0); print(j.tres_per_job) end\n"
        "sub(); sub(); sub(); sub()\n"
        f"local f = io.open('{again}'); local text = f:read('*a'); f:close()\n"
        f"f = io.open('{path}', 'w'); f:write(text); f:close()\n"
        "sub(); sub()\n")
    r = subprocess.run(["lua5.1", "-"], input=probe, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "gres:gpu:v100:1", "gres:gpu:k80:1",  # the rooms
        "gres:gpu:1",  # no room left: untyped (#@untyped acct_a 1)
        "gres:gpu:v100:1",  # untyped room used too: the first type, as before
        "gres:gpu:v100:1", "gres:gpu:k80:1"]  # the next publication: its rooms unspent


def test_the_simulated_job_submit_counts_per_publication_and_leaves_no_room_jobs_untyped():
    """sim/cluster.py mirrors the script: each set_type_map call is a publication (rooms start unspent unless the
    same map_id is given again); past every room a job stays untyped within the account's untyped room."""
    from slurm_fair.sim.cluster import SimCluster, cluster_spec
    from slurm_fair.sim.traces import TraceJob

    thr = {"cnn": {"k80": 1.0, "v100": 4.0}, "rl": {"v100": 1.0}}
    jobs = [TraceJob(str(i), float(t), "a", cls, 1, 1e6) for i, (t, cls) in
            enumerate([(1, "cnn"), (1, "cnn"), (1, "cnn"), (1, "rl"), (1, "cnn"), (2, "cnn"), (3, "cnn")], 1)]
    c = SimCluster(cluster_spec("k80=4,v100=4"), {"a": 1}, thr, jobs)
    line = {"a": P.Target((("v100", 1), ("k80", 0)), "room", {}, (), 2)}
    c.set_type_map(line, map_id="m-1")
    c.advance(1.0)
    got = [c.jobs[i].requested for i in range(1, 6)]
    # v100's room 1; then two untyped (room 2); rl runs on v100 only: typed there; untyped room used: v100
    assert got == ["v100", None, None, "v100", "v100"]
    c.set_type_map(line, map_id="m-1")  # the same publication read again: still spent
    c.advance(2.0)
    assert c.jobs[6].requested == "v100"
    c.set_type_map(line)  # a new publication: unspent
    c.advance(3.0)
    assert (c.jobs[7].requested, c.jobs[7].flex) == ("v100", True)


# ------------------------------------------------------------------------------------------- who gets a slow GPU

H = 3600.0
SLOW_NODES = (Node("p100-1", ("ALLOCATED",), ("gpu",), {"p100": 4}, {"p100": 4}),
              Node("k80-1", ("IDLE",), ("gpu",), {"k80": 4}, {}))
# the Philly resnet18 class: 6.8x slower on K80 than on P100; "lm" loses 10 % there, "cnn" half
SLOW_THR = {"acct_a": {"resnet18": {"p100": 6.8, "k80": 1.0}, "lm": {"p100": 1.1, "k80": 1.0},
                       "cnn": {"p100": 2.0, "k80": 1.0}}}


def slow_snap(waiting, limit_min=240, now=H):
    """p100-1 busy with four 1-GPU jobs started at 0 with ``limit_min`` (they end at 4 h; None: no limit), k80-1
    idle; the snapshot at ``now`` (1 h: P100s free in 3 h)."""
    running = [_replace(job(100 + i, "acct_b", 1, "p100", "RUNNING", alloc={"p100": 1}), start_time=0,
                        time_limit=limit_min) for i in range(4)]
    return Snapshot("24.11.5", now, SLOW_NODES, tuple(running) + tuple(waiting),
                    (Account("acct_a", 1, {}), Account("acct_b", 1, {})), ("gpu",))


def flex(jid, cls, limit_min, gpus=1, site_factor=0):
    return _replace(job(jid, "acct_a", gpus, "p100", comment=f"class={cls} fair:flex", submit=jid),
                    time_limit=limit_min, site_factor=site_factor)


def slow_plan():
    return P.Plan(capacity={"p100": 4, "k80": 4}, accounts=("acct_a", "acct_b"), ideal_class={}, ideal={},
                  deviation_before={}, real={}, deviations={}, extra={}, limits={}, min_gpus={}, demand={}, claims={},
                  lend=True)


def test_frees_in_from_start_and_time_limit_and_never_soon_when_unknown():
    s = slow_snap([])
    assert frees_in(s, "p100", 1) == 3 * H and frees_in(s, "p100", 4) == 3 * H
    assert frees_in(s, "p100", 5) == float("inf")  # only 4 GPUs on p100 end
    assert frees_in(s, "p100", 0) == 0.0 and frees_in(s, "p100", 1, account="acct_a") == float("inf")
    assert frees_in(slow_snap([], limit_min=None), "p100", 1) == float("inf")  # unknown limits: not soon


def test_worth_moving_hand_worked():
    # resnet18, 24 h limit, own type frees in 3 h: 3 + 24 = 27 h vs 1.2 x 6.8 x 24 = 195.8 h on K80: stay
    assert not worth_moving(6.8, 3 * H, 24 * 60)
    # lm, 1 h limit: 3 + 1 = 4 h vs 1.2 x 1.1 x 1 = 1.32 h: move
    assert worth_moving(1.1, 3 * H, 60)
    # cnn (2x slower), 3 h limit, own type in 3 h: 6 h vs 7.2 h: stay; in 5 h: 8 h vs 7.2 h: move
    assert not worth_moving(2.0, 3 * H, 180) and worth_moving(2.0, 5 * H, 180)
    assert worth_moving(6.8, float("inf"), 24 * 60)  # its own type never frees as far as is known
    assert worth_moving(0.5, 0.0, None)  # a faster type: always
    assert worth_moving(1.5, float("inf"), None) and not worth_moving(1.6, float("inf"), None)  # no horizon


def test_the_resnet18_case_stays_for_its_own_type_and_the_slow_gpu_goes_to_the_job_that_loses_least():
    """Philly (issue 28): a 1-GPU resnet18 (6.8x slower on K80) waited for P100, was moved to K80 and ran 9 416 h
    instead of 1 383 h. Its P100s free in 3 h: it stays; the K80s go to the jobs that lose least there, before
    a higher-priority job that loses more."""
    r18 = flex(1, "resnet18", 1440 * 60, site_factor=100)  # 1 440 h: the run on P100 is its horizon
    lm = flex(2, "lm", 60)
    cnn = flex(3, "cnn", 30, site_factor=50)
    moves = P.retype_moves(slow_plan(), slow_snap([r18, lm, cnn]), throughput=SLOW_THR)
    assert [(m.job_id, m.new_type) for m in moves] == [(2, "k80"), (3, "k80")]  # lm (loss 1.1) first, then cnn
    # one K80 left idle: it goes to lm (loses 10 %), not to cnn (higher priority, loses half)
    busy = (SLOW_NODES[0], Node("k80-1", ("MIXED",), ("gpu",), {"k80": 4}, {"k80": 3}))
    s = slow_snap([r18, lm, cnn])
    s = _replace(s, nodes=busy)
    assert [m.job_id for m in P.retype_moves(slow_plan(), s, throughput=SLOW_THR)] == [2]
    # when its own type's running jobs have no known limit, resnet18 is not made to wait "soon": it moves
    s = slow_snap([r18], limit_min=None)
    assert [m.job_id for m in P.retype_moves(slow_plan(), s, throughput=SLOW_THR)] == [1]
    # without its own time limit there is no horizon: a 6.8x loss is never taken, a 10 % one is
    blind = [_replace(r18, time_limit=None), _replace(lm, time_limit=None)]
    assert [m.job_id for m in P.retype_moves(slow_plan(), slow_snap(blind, limit_min=None),
                                             throughput=SLOW_THR)] == [2]


def test_the_simulated_job_submit_hands_out_a_shared_free_pool_once():
    """Two accounts' free rooms on the same idle GPUs (sim/cluster.py, as #@free in job_submit.lua)."""
    from slurm_fair.sim.cluster import SimCluster, cluster_spec
    from slurm_fair.sim.traces import TraceJob

    thr = {"cnn": {"k80": 1.0, "v100": 4.0}}
    jobs = [TraceJob(str(i), 1.0, acct, "cnn", 1, 1e6) for i, acct in enumerate(["a", "a", "b", "b"], 1)]
    c = SimCluster(cluster_spec("k80=4,v100=4"), {"a": 1, "b": 1}, thr, jobs)
    pool = {"v100": 2, "k80": 4}
    line = P.Target((("v100", 2), ("k80", 4)), "room", {"v100": 2, "k80": 4}, (), 0, pool)
    c.set_type_map({"a": line, "b": line})
    c.advance(1.0)
    assert [c.jobs[i].requested for i in range(1, 5)] == ["v100", "v100", "k80", "k80"]


def test_the_simulated_job_submit_after_an_untyped_job_still_counts_the_pool():
    """A job left untyped, then a later one typed: the pool's count is a mapping (a regression: it was shadowed)."""
    from slurm_fair.sim.cluster import SimCluster, cluster_spec
    from slurm_fair.sim.traces import TraceJob

    thr = {"cnn": {"k80": 1.0, "v100": 4.0}}
    jobs = [TraceJob(str(i), 1.0, "a", "cnn", g, 1e6) for i, g in enumerate([2, 1], 1)]
    c = SimCluster(cluster_spec("k80=4,v100=4"), {"a": 1}, thr, jobs)
    c.set_type_map({"a": P.Target((("v100", 1),), "room", {"v100": 1}, (), 4, {"v100": 1})})
    c.advance(1.0)
    assert [c.jobs[i].requested for i in (1, 2)] == [None, "v100"]


def test_class_lines_mark_the_types_a_class_is_slow_on_and_such_a_job_is_never_left_untyped():
    """Philly's resnet18 (6.8x slower on K80): its class line writes k80:0, so the script never leaves it untyped
    where Slurm might start it on a K80; the simulated job_submit does the same."""
    from slurm_fair.sim.cluster import SimCluster, cluster_spec
    from slurm_fair.sim.traces import TraceJob

    thr = {"acct_a": {"resnet18": {"a100": 8.0, "v100": 6.8, "k80": 1.0}, "lm": {"a100": 1.2, "v100": 1.1, "k80": 1.0}}}
    p = plan({"acct_a": {}}, lend=True)
    t = P.untyped_targets(p, snap(), thr)
    assert t["acct_a/resnet18"].slow == {"k80"} and t["acct_a/lm"].slow == frozenset()
    text = type_map_file.render_map(t)
    assert "acct_a/resnet18 a100,v100,k80:0" in text.splitlines() and "acct_a/lm a100,v100,k80" in text.splitlines()
    sim_thr = {c: dict(r) for c, r in thr["acct_a"].items()}
    jobs = [TraceJob(str(i), 1.0, "acct_a", cls, 1, 1e6) for i, cls in enumerate(["resnet18", "lm"], 1)]
    c = SimCluster(cluster_spec("k80=4,v100=4,a100=4"), {"acct_a": 1}, sim_thr, jobs)
    full = P.Target((("a100", 0), ("v100", 0), ("k80", 0)), "no room", {}, (), 4)
    c.set_type_map({"acct_a": full, "acct_a/resnet18": t["acct_a/resnet18"], "acct_a/lm": t["acct_a/lm"]})
    c.advance(1.0)
    assert [c.jobs[i].requested for i in (1, 2)] == ["a100", None]


def test_a_job_behind_others_waits_for_its_own_type_as_backfill_plans_the_queue():
    """90 % seed 1 (issue 28): an 8-GPU job behind another 8-GPU job on a 12-GPU type its running jobs hold. The
    running jobs alone never free the 16 GPUs the two need (``frees_in`` said ``inf``, so the job was moved to
    K80, 6.8x slower); backfill's plan of the queue starts the first at 1 h (for 1 h) and this one at 2 h: it
    stays for P100. Where nothing known frees its own type, it still moves."""
    nodes = (Node("p100-1", ("ALLOCATED",), ("gpu",), {"p100": 4}, {"p100": 4}),
             Node("p100-2", ("ALLOCATED",), ("gpu",), {"p100": 4}, {"p100": 4}),
             Node("p100-3", ("ALLOCATED",), ("gpu",), {"p100": 4}, {"p100": 4}),
             Node("k80-1", ("IDLE",), ("gpu",), {"k80": 4}, {}), Node("k80-2", ("IDLE",), ("gpu",), {"k80": 4}, {}))
    running = [_replace(job(100 + i, "acct_b", 4, "p100", "RUNNING", alloc={"p100": 4}), start_time=0,
                        time_limit=120, node_gpus={f"p100-{i + 1}": 4}) for i in range(3)]
    ahead = _replace(job(10, "acct_b", 8, "p100", submit=1), time_limit=60, site_factor=10)
    r18 = _replace(flex(1, "resnet18", 24 * 60, gpus=8), gpus_per_node=8)
    p = P.Plan(capacity={"p100": 12, "k80": 8}, accounts=("acct_a", "acct_b"), ideal_class={}, ideal={},
               deviation_before={}, real={}, deviations={}, extra={}, limits={}, min_gpus={}, demand={}, claims={},
               lend=True)
    s = Snapshot("24.11.5", H, nodes, tuple(running) + (ahead, r18),
                 (Account("acct_a", 1, {}), Account("acct_b", 1, {})), ("gpu",))
    assert frees_in(s, "p100", 8 + 8) == float("inf")  # what the move used to wait for
    assert queue_starts(snapshot_plan(s), [(10, "p100", 8, 3600.0), (1, "p100", 8, 86400.0)]) == {10: H, 1: 2 * H}
    assert P.retype_moves(p, s, throughput=SLOW_THR) == []
    forever = _replace(s, jobs=tuple(_replace(j, time_limit=None) for j in running) + (ahead, r18))
    assert [(m.job_id, m.new_type) for m in P.retype_moves(p, forever, throughput=SLOW_THR)] == [(1, "k80")]


@pytest.mark.skipif(shutil.which("lua5.1") is None, reason="lua5.1 not installed (apt-get install lua5.1)")
def test_job_submit_lua_reads_the_daemons_indexed_map_as_the_same_map_read_whole(tmp_path):
    """The writer and the script agree on the layout: for every account of a map the daemon's renderer wrote
    (classes, speeds, untyped room, tiers, a '*' and a '*/CLASS' line, a name with pattern characters), the
    script reading it through the index (head and the account's section alone) types a burst of jobs exactly
    as it does reading the same map whole (the index line taken out: an older daemon's map), and reads only the
    sections of the accounts that submitted."""
    T = P.Target
    targets = {"*": T((("k80", 4), ("v100", 1)), "free", {"k80": 4}), "*/rl": T((("k80", 0), ("v100", 0)), "c"),
               "acct_a": T((("a100", 1), ("v100", 2), ("k80", 1)), "room a", {"a100": 1}, (0, 0, 1), untyped=1),
               "acct_a/cnn": T((("v100", 0), ("a100", 0)), "c", slow=frozenset({"a100"})),
               "acct.b-1": T((("v100", 3),), "room b"), "acct_c": T((("a100", 2), ("k80", 1)), "room c"),
               "acct_c/rl": T((("k80", 0),), "c")}
    text = type_map_file.render_map(targets, ("comment",), (P.PartitionTypes("gpu", ("a100", "k80", "v100")),),
                                    map_id=type_map_file.CONTENT_ID, taken_at=1000, expires=4_000_000_000)
    (tmp_path / "indexed.txt").write_text(text)
    (tmp_path / "whole.txt").write_text("".join(ln for ln in text.splitlines(True) if not ln.startswith("#@index ")))
    accounts = ["acct_a", "acct.b-1", "acct_c", "acct_none", "acctXb-1"]
    probe = (
        "slurm = {SUCCESS = 0, ERROR = -1, log_info = function() end, log_user = function() end,"
        " log_error = function(...) print('ERROR', string.format(...)) end}\n"
        f"local sf = dofile('{REPO}/etc/job_submit.lua')\n"
        "sf.clock = function() return 2000 end\n"
        "local out = {}\n"
        "for _, a in ipairs({'" + "','".join(accounts) + "'}) do for _, c in ipairs({'', 'class=cnn', 'class=rl'}) do"
        " for _ = 1, 3 do local j = {account = a, tres_per_node = 'gres:gpu:1', comment = c}\n"
        "  assert(sf.job_submit(j, {gpu = {flag_default = 1}}, 0) == 0); out[#out + 1] = j.tres_per_node end end end\n"
        "local read = {} for a, v in pairs(sf.cache.map.loaded or {}) do read[#read + 1] = a end table.sort(read)\n"
        "print(table.concat(out, ' ')) print(table.concat(read, ' '))\n")
    runs = {}
    for form in ("indexed", "whole"):
        r = subprocess.run(["lua5.1", "-", str(tmp_path / f"{form}.txt")], input=probe.replace(
            "sf.clock =", f"sf.map_file = '{tmp_path / form}.txt'\nsf.clock ="), capture_output=True, text=True,
            timeout=30)
        assert r.returncode == 0 and "ERROR" not in r.stdout, r.stdout + r.stderr
        runs[form] = r.stdout.splitlines()
    assert runs["indexed"][0] == runs["whole"][0]
    assert runs["indexed"][0].split()[:3] == ["gres:gpu:a100:1", "gres:gpu:v100:1", "gres:gpu:v100:1"]
    assert runs["indexed"][1] == "acct.b-1 acctXb-1 acct_a acct_c acct_none"  # each read once (none: no section)
    assert runs["whole"][1] == ""  # read whole: no sections


def test_a_poll_in_which_nothing_changed_publishes_the_same_map_id(tmp_path):
    """The daemon's own path (a round, then service.refresh_type_map from each poll's snapshot): polls 10 s apart
    on a cluster where nothing started or ended rewrite the map (a new snapshot time T and #@expires) under the
    same ``#@map ID``; a poll after a job arrived (its account's untyped room changes) publishes a new ID."""
    from slurm_fair import config
    from slurm_fair.daemon import service
    from slurm_fair.daemon.round import run_round
    from slurm_fair.sim.cluster import SimCluster, cluster_spec
    from slurm_fair.sim.traces import TraceJob
    from slurm_fair.store import Store

    thr = {"fast": {"k80": 1.0, "v100": 3.0}, "flat": {"k80": 1.0, "v100": 2.0}}
    jobs = [TraceJob(f"{a}{i}", 0.0, a, c, 1, 1e6) for i in range(2) for a, c in (("a", "fast"), ("b", "flat"))]
    jobs.append(TraceJob("late", 25.0, "a", "fast", 1, 1e6))
    path = tmp_path / "gpu_type_map.txt"
    cfg = config.from_dict({"daemon": {"database": str(tmp_path / "s.sqlite"), "dry_run": False},
                            "submit": {"type_map": str(path)}})
    cluster = SimCluster(cluster_spec("k80=4,v100=4", 2), {"a": 1, "b": 1}, thr, jobs, epoch=1.7e9)
    cluster.advance(0.0)
    with Store(cfg.database_path) as store:
        res = run_round(cluster, store, cfg, "oef-coop", now=cluster.clock())
    assert res.status == "ok" and path.exists()
    first = []
    for t in (5.0, 15.0, 30.0):
        cluster.advance(t)
        assert service.refresh_type_map(res, cluster.snapshot(), cfg)  # rewritten every poll (T, #@expires)
        first.append(path.read_text().splitlines()[0].split())
    (_m, id1, t1), (_m2, id2, t2), (_m3, id3, _t3) = first
    assert id1 == id2 and int(t2) == int(t1) + 10  # nothing changed: the same identity, a later snapshot
    assert id3 != id1  # the late job arrived (pending): the content changed
