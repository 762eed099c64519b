"""The documentation names only what exists: every module, repository file and ``slurm-fair`` command a page
names, and every relative link (to a file, and to a heading by its ``#anchor``).

Like ``tests/test_config.py``'s check that ``docs/config-reference.md`` is the generated reference, this reads
the pages as they are in the repository. Pages: README.md and docs/*.md; docs/history/ is left out (it describes
the past, and names modules and options that were removed). A failure names the page, the line and the name.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import click
import pytest

from slurm_fair.cli import main as cli_main

REPO = Path(__file__).resolve().parent.parent
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])  # glob("*.md"): docs/history/ not included

# Top-level folders whose paths a page may name as repository paths (``benchmarks/vs_slurm.py``, ``etc/...``).
ROOTS = ("slurm_fair", "tests", "benchmarks", "contrib", "etc", "hooks", "profiles", "docs", ".ci")
# Names written like paths that are not files of this repository, and why.
NOT_FILES = {
    "gandiva.py",  # a module of Gavel's repository (docs/policies.md compares with it), not of this one
}

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_REPO_PATH = re.compile(r"(?<![\w./~-])((?:%s)/[\w./-]*[\w/])" % "|".join(re.escape(r) for r in ROOTS))
_MODULE_PATH = re.compile(r"^[\w./-]*[\w]\.py$|^[\w][\w/]*/$")  # a code span that is a module path or a folder
_DOTTED = re.compile(r"(?<![\w.])slurm_fair(?:\.[A-Za-z_]\w*)+")
# A command as a page writes it to be typed: a code span or a code line that starts with it (``$ `` allowed).
_COMMAND = re.compile(r"^\s*(?:\$\s+|sudo\s+)*slurm-fair((?:\s+[a-z][a-z-]*(?![\w.])){1,2})")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_PLACEHOLDER = re.compile(r"[*{}<>]|\.\.\.|NN|XXX")


def _files() -> list[str]:
    """Every file and folder under the repository's roots, as repository-relative paths."""
    out = [root + "/" for root in ROOTS if (REPO / root).is_dir()]
    for root in ROOTS:
        base = REPO / root
        if base.exists():
            for p in base.rglob("*"):
                if "__pycache__" not in p.parts:
                    out.append(p.relative_to(REPO).as_posix() + ("/" if p.is_dir() else ""))
    return out


FILES = _files()
FILE_SET = set(FILES)


def _lines(page: Path):
    """(line number, text, inside a fenced code block) for each line of a page."""
    fenced = False
    for n, line in enumerate(page.read_text().splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        yield n, line, fenced


def _where(page: Path, n: int) -> str:
    return f"{page.relative_to(REPO) if page.is_relative_to(REPO) else page}:{n}"


def _exists(path: str) -> bool:
    """A repository path: exists as written (a folder may be written with or without its slash)."""
    path = path.rstrip(".")
    return path in FILE_SET or path + "/" in FILE_SET or path.rstrip("/") in FILE_SET


def _module_exists(name: str) -> bool:
    """A module path as the pages write it in code spans: from the repository root, from ``slurm_fair/``, or
    relative to one of its packages (``plan/backfill.py``, ``round.py``): some file's path ends with it."""
    if _exists(name) or _exists("slurm_fair/" + name):
        return True
    tail = "/" + name
    return any(f.endswith(tail) or f.endswith(tail.rstrip("/") + "/") for f in FILES)


def _dotted_exists(name: str) -> bool:
    """``slurm_fair.a.b.attr``: the longest importable module prefix, and the first name after it on it."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            mod = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        return i == len(parts) or hasattr(mod, parts[i])
    return False


def _commands() -> dict[str, set[str] | None]:
    """The ``slurm-fair`` commands: name -> subcommand names (None for a command that is not a group)."""
    return {name: (set(cmd.commands) if isinstance(cmd, click.Group) else None)
            for name, cmd in cli_main.commands.items()}


def _page_names(page: Path):
    """(line, kind, name, exists) for every repository path, module path, dotted module and command named."""
    commands = _commands()
    for n, line, fenced in _lines(page):
        for m in _REPO_PATH.finditer(line):
            name = m.group(1)
            if not _PLACEHOLDER.search(name) and name not in NOT_FILES:
                yield n, "file", name, _exists(name)
        spans = [line] if fenced else _CODE_SPAN.findall(line)
        for span in spans:
            if not fenced and _MODULE_PATH.match(span) and not _PLACEHOLDER.search(span) \
                    and not _REPO_PATH.match(span) and not span.startswith("/") and span not in NOT_FILES:
                yield n, "module", span, _module_exists(span)
            for m in _COMMAND.finditer(span):
                words = m.group(1).split()
                if words[0] not in commands:
                    yield n, "command", f"slurm-fair {words[0]}", False
                    continue
                subs = commands[words[0]]
                if subs is not None and len(words) > 1:
                    yield n, "command", f"slurm-fair {words[0]} {words[1]}", words[1] in subs
                else:
                    yield n, "command", f"slurm-fair {words[0]}", True
        for m in _DOTTED.finditer(line):
            yield n, "module", m.group(0), _dotted_exists(m.group(0))


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line, fenced in _lines(page):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m and not fenced:
            a = _anchor(m.group(1))
            k = seen.get(a, 0)
            out.add(a if k == 0 else f"{a}-{k}")
            seen[a] = k + 1
    return out


def _page_links(page: Path):
    """(line, link, problem or None) for every relative link of a page."""
    for n, line, fenced in _lines(page):
        if fenced:
            continue
        for m in _LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            link = m.group(1)
            if re.match(r"^[a-z]+:", link):
                continue  # https:, mailto: — not checked here
            path, _, frag = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                yield n, link, "no such file"
            elif frag and target.suffix == ".md" and frag not in _anchors(target):
                yield n, link, f"no heading #{frag} in {target.name}"
            else:
                yield n, link, None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_named_modules_files_and_commands_exist(page):
    missing = [f"{_where(page, n)}: {kind} {name!r} does not exist"
               for n, kind, name, ok in _page_names(page) if not ok]
    assert not missing, "the page names what is not there:\n" + "\n".join(missing)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_resolve(page):
    broken = [f"{_where(page, n)}: link {link!r}: {why}" for n, link, why in _page_links(page) if why]
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_check_sees_names(tmp_path):
    """The checks find what they should: a missing module, file, command and anchor are each reported."""
    page = tmp_path / "probe.md"
    page.write_text("# A heading\n\n`daemon/round.py` and `daemon/no_such_module.py`, `slurm-fair solve`, "
                    "`slurm-fair no-such-command`, `slurm-fair config nosuch`, benchmarks/no_such.py, "
                    "`slurm_fair.rounding.place`, `slurm_fair.rounding.no_such`.\n"
                    "[ok](#a-heading) [bad](#no-heading) [gone](no-such-page.md)\n")
    found = {(kind, name) for _, kind, name, ok in _page_names(page) if not ok}
    assert found == {("module", "daemon/no_such_module.py"), ("command", "slurm-fair no-such-command"),
                     ("command", "slurm-fair config nosuch"), ("file", "benchmarks/no_such.py"),
                     ("module", "slurm_fair.rounding.no_such")}
    assert {link for _, link, why in _page_links(page) if why} == {"#no-heading", "no-such-page.md"}
