"""job_submit.lua fails open on the real testbed (issue 29): with a map of garbage bytes, an empty map, a map of
only the daemon's header, a map without a ``*`` line, a broken line, an unreadable map, a stale map, or a job that
names --constraint/--nodelist/--exclude, ``sbatch --gres=gpu:1`` succeeds and the request stays untyped, with a
note (before: "Batch job submission failed: Unspecified error" for the broken maps).

The testbed's slurmctld reads the job_submit.lua that testbed.sh copied next to slurm.conf when it was set up;
the ``this_script`` fixture installs this checkout's script there (luac5.1 -p first, tmp + mv, a newer mtime:
slurmctld reloads a script whose mtime grew, on the next submission) and puts the testbed's own back after the
test (with a newer mtime again). The map next to it is restored too."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from slurm_fair.daemon import type_map_file

from .conftest import REPO_ROOT
from .test_job_submit import gpu_request, submit, typed

UNTYPED = re.compile(r"gpu:(a100|v100|k80)")


def _install(src_text: bytes, dest: Path, mtime: float) -> None:
    tmp = dest.parent / f".{dest.name}.fail-open.tmp"
    tmp.write_bytes(src_text)
    tmp.chmod(0o644)
    os.utime(tmp, (mtime, mtime))
    os.replace(tmp, dest)


@pytest.fixture
def this_script(testbed):
    """This checkout's etc/job_submit.lua in the testbed's etc; the testbed's script and map restored after."""
    etc = Path(testbed.env["SLURM_CONF"]).parent
    script, map_path = etc / "job_submit.lua", etc / "gpu_type_map.txt"
    if not script.exists():
        pytest.skip(f"no job_submit.lua in {etc} (testbed set up before the plugin was added)")
    if shutil.which("luac5.1"):
        testbed.run(["luac5.1", "-p", str(REPO_ROOT / "etc" / "job_submit.lua")])
    before_script, before_mtime = script.read_bytes(), script.stat().st_mtime
    before_map = map_path.read_bytes() if map_path.is_file() else None
    mine = max(time.time(), before_mtime) + 1
    _install((REPO_ROOT / "etc" / "job_submit.lua").read_bytes(), script, mine)
    try:
        yield map_path
    finally:
        if map_path.is_dir():
            map_path.rmdir()
        if before_map is None:
            map_path.unlink(missing_ok=True)
        else:
            _install(before_map, map_path, time.time())
        _install(before_script, script, max(time.time(), mine) + 1)


def _write(map_path: Path, text: str | bytes) -> None:
    if map_path.is_dir():
        map_path.rmdir()
    if isinstance(text, str):
        text = text.encode()
    _install(text, map_path, time.time())


def _passes_untyped(testbed, note: str, *opts: str) -> None:
    jid, r = submit(testbed, "--gres=gpu:1", *opts, check=False)
    assert r.returncode == 0 and jid is not None, f"sbatch failed: {r.stderr}"
    assert note in r.stderr and "untyped GPU request left unchanged" in r.stderr, r.stderr
    assert not UNTYPED.search(gpu_request(testbed.job(jid))), testbed.job(jid)


BAD_MAPS = [
    ("garbage bytes", b"\x00\x01\xff\xfe garbage \x80\x81\n\xc8\xc9 zz\n", "the GPU type map is broken"),
    ("empty", b"", "is empty"),
    ("only the daemon's header", type_map_file.HEADER.encode(), "no GPU type is known for account 'acct_a'"),
    ("no '*' line", b"acct_b k80\n", "no GPU type is known for account 'acct_a'"),
    ("a broken line", b"acct_a\n* k80\n", "line 1: expected 'ACCOUNT TYPES [REASON]'"),
    ("stale (#@expires in the past)", b"#@map t-1 1\n#@expires 1\n* k80:8\n", "is stale"),
]


def test_untyped_jobs_pass_unchanged_under_every_bad_map(testbed, this_script):
    _write(this_script, "* k80:8 test\n")  # first: the script under test types (it is the one slurmctld runs)
    jid, r = submit(testbed, "--gres=gpu:1")
    assert re.search(r"gres[:/]gpu:k80", gpu_request(testbed.job(jid))), (r.stderr, testbed.job(jid))
    for what, text, note in BAD_MAPS:
        _write(this_script, text)
        try:
            _passes_untyped(testbed, note)
        except AssertionError as e:
            raise AssertionError(f"{what}: {e}") from None
    _write(this_script, b"")
    this_script.unlink()
    this_script.mkdir()  # unreadable as a file
    _passes_untyped(testbed, "the GPU type map is broken")


def test_jobs_naming_nodes_or_features_are_left_alone(testbed, this_script):
    _write(this_script, "* k80:8 test\n")
    _passes_untyped(testbed, "the job names --exclude=", "--exclude=k80-1")
    _passes_untyped(testbed, "the job names --nodelist=", "--nodelist=a100-1")
    jid, r = submit(testbed, "--gpus=1")  # and a plain one is typed
    assert re.search(r"gres[:/]gpu:k80", gpu_request(testbed.job(jid))), r.stderr


def test_a_job_with_a_time_limit_is_typed_where_it_is_expected_to_finish_first(testbed, this_script):
    """Issue 28, typing by expected completion, in the real slurmctld (its job_desc.time_limit, in minutes):
    a class 5.6x slower on k80 than on v100, room only on k80 for 2 GPUs now, a v100 node expected to free in
    ~2 min: a 10-hour job is typed v100, a 1-minute job and a job without a time limit k80 (by room)."""
    now = int(time.time())
    _write(this_script, "\n".join([
        f"#@map t-soon {now}",
        f"#@soon k80 1:{now},2:{now},4:{now}",
        f"#@soon v100 1:{now + 120},2:{now + 120},4:{now + 120}",
        "acct_a k80:8:4,v100:0 test",
        "acct_a/rec v100,k80:0",
        "#@speed acct_a/rec v100:1000,k80:178",
        "* k80:8:4 test",
    ]) + "\n")
    jid, r = submit(testbed, "--gres=gpu:2", "--time=600", "--comment=class=rec")
    assert typed("v100").search(gpu_request(testbed.job(jid))), (r.stderr, testbed.job(jid))
    assert "expected to finish it sooner" in r.stderr, r.stderr
    jid, r = submit(testbed, "--gres=gpu:2", "--time=1", "--comment=class=rec")
    assert typed("k80").search(gpu_request(testbed.job(jid))), (r.stderr, testbed.job(jid))
    jid, r = submit(testbed, "--gres=gpu:2", "--comment=class=rec")  # the partition's default: none here
    assert typed("k80").search(gpu_request(testbed.job(jid))), (r.stderr, testbed.job(jid))
