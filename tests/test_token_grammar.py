"""One grammar for ``class=`` and ``fair:`` tokens (issue 30 item 7): ``x\\u00a0class=fast`` was class ``fast``
to the daemon (Python's ``\\s`` is Unicode) but the job name to the hook and to job_submit.lua (ASCII). One file
of vectors (tests/fixtures/token_grammar.tsv, both columns hex of UTF-8 bytes) is run here against the daemon
and the hook, and by tests/lua/test_token_grammar.lua against job_submit.lua."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from slurm_fair import jobrecord
from slurm_fair.daemon.plan.demand import job_class
from tests.conftest import job

REPO = Path(__file__).resolve().parents[1]
VECTORS = REPO / "tests" / "fixtures" / "token_grammar.tsv"


def _vectors() -> list[tuple[str, str | None, bool]]:
    out = []
    for line in VECTORS.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        comment, cls, flex = line.split("\t")
        out.append(("" if comment == "-" else bytes.fromhex(comment).decode(),
                    None if cls == "-" else bytes.fromhex(cls).decode(), flex == "1"))
    return out


@pytest.mark.parametrize("comment, cls, flex", _vectors())
def test_the_daemon_and_the_hook_read_the_same_tokens(comment, cls, flex):
    assert jobrecord.comment_class(comment) == cls  # the hook
    assert jobrecord.job_class(comment, "", "NAME") == (cls or "NAME")
    assert job_class(job(1, "a", name="NAME", comment=comment)) == (cls or "NAME")  # the daemon
    assert job(1, "a", comment=comment).flexible is flex


def test_job_submit_lua_reads_them_too():
    lua = shutil.which("lua5.1")
    if lua is None:
        pytest.skip("lua5.1 not installed (contrib/test-all.sh installs it and runs the Lua file itself)")
    r = subprocess.run([lua, "tests/lua/test_token_grammar.lua", "etc/job_submit.lua", str(VECTORS)], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip().endswith(" 0 failed"), r.stdout + r.stderr
