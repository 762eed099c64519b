"""Runs the offline Lua tests of etc/job_submit.lua and the site example (tests/lua/) so pytest counts them.

Needs ``lua5.1`` and ``luac5.1`` (Debian package ``lua5.1``, installed by contrib/test-all.sh); without them
the tests are skipped with the reason.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "etc" / "job_submit.lua"
SITE_EXAMPLE = REPO / "slurm_fair" / "share" / "job_submit_site_example.lua"
LUA_TESTS = REPO / "tests" / "lua" / "test_job_submit.lua"
LUA_PARTITION_TESTS = REPO / "tests" / "lua" / "test_partitions.lua"
LUA_FAIL_OPEN_TESTS = REPO / "tests" / "lua" / "test_fail_open.lua"
LUA_MAP_INDEX_TESTS = REPO / "tests" / "lua" / "test_map_index.lua"

needs_lua = pytest.mark.skipif(shutil.which("lua5.1") is None or shutil.which("luac5.1") is None,
                               reason="lua5.1/luac5.1 not installed (apt-get install lua5.1)")


@needs_lua
def test_scripts_compile():
    r = subprocess.run(["luac5.1", "-p", str(SCRIPT), str(SITE_EXAMPLE)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


def _run_lua(*argv: Path) -> tuple[int, list[str]]:
    """Run a Lua test file; (cases passed, failures), after checking it ended with no failure."""
    r = subprocess.run(["lua5.1", *map(str, argv)], capture_output=True, text=True, timeout=60, cwd=REPO)
    m = re.search(r"^(\d+) passed, (\d+) failed$", r.stdout, re.M)
    assert m, r.stdout + r.stderr
    failures = [line for line in r.stdout.splitlines() if line.startswith("FAIL")]
    assert (int(m.group(2)), failures, r.returncode) == (0, [], 0)
    return int(m.group(1)), failures


@needs_lua
def test_offline_lua_cases_pass():
    passed, _ = _run_lua(LUA_TESTS, SCRIPT)
    assert passed >= 30  # the cases listed in tests/lua/test_job_submit.lua all ran


@needs_lua
def test_offline_partition_and_module_cases_pass():
    passed, _ = _run_lua(LUA_PARTITION_TESTS, SCRIPT, SITE_EXAMPLE)
    assert passed >= 20  # the cases listed in tests/lua/test_partitions.lua all ran


@needs_lua
def test_offline_fail_open_and_cache_cases_pass():
    passed, _ = _run_lua(LUA_FAIL_OPEN_TESTS, SCRIPT)
    assert passed >= 19  # the cases listed in tests/lua/test_fail_open.lua all ran


@needs_lua
def test_offline_indexed_map_cases_pass():
    passed, _ = _run_lua(LUA_MAP_INDEX_TESTS, SCRIPT)
    assert passed >= 15  # the cases listed in tests/lua/test_map_index.lua all ran
