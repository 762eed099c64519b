"""The house's shape (docs/architecture.md): the package reads top-down, no import runs back up a layer, and no
module imports itself around a cycle — lazy (function-level) and type-only imports included, since a cycle hidden
in a function is still a cycle. Read from the source with ``ast``; nothing is imported."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "slurm_fair"

#: top-level module or package -> layer; an import may only go to the same layer or a lower one
LAYERS = [
    {"errors", "validate", "stdio", "text", "catalog", "statefiles", "jobrecord", "hookinstall", "records",
     "stats", "plots"},
    {"config", "model", "store", "profiling", "cluster", "rounding"},
    {"fairness", "lp"},
    {"policies"},
    {"daemon"},
    {"sim", "views"},
    {"cli", "entry", "__init__"},
]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for mod, path in mods.items():
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                    name = ".".join(base + ([node.module] if node.module else []))
                else:
                    name = node.module or ""
                if name.split(".")[0] == "slurm_fair":
                    targets += [f"{name}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets += [a.name for a in node.names if a.name.split(".")[0] == "slurm_fair"]
            for t in targets:
                while t not in mods and "." in t:
                    t = t.rpartition(".")[0]
                if t != mod:
                    edges[mod].add(t)
    return edges


def _top(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_module_has_a_layer():
    assert {_top(m) for m in _modules()} - set(LAYER) == set()


def test_no_import_runs_back_up_a_layer():
    up = sorted(f"{a} -> {b}" for a, bs in _edges(_modules()).items() for b in bs
                if LAYER[_top(b)] > LAYER[_top(a)])
    assert up == []


def test_no_import_cycle():
    edges = _edges(_modules())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(_modules()):
        if v not in index:
            visit(v)
    assert cycles == []
    # and between top-level packages: a lateral import in one layer goes one way only
    pk = {(_top(a), _top(b)) for a, bs in edges.items() for b in bs if _top(a) != _top(b)}
    assert sorted((a, b) for a, b in pk if (b, a) in pk) == []


def test_no_module_is_over_600_lines():
    long = {str(p.relative_to(ROOT.parent)): n for p in ROOT.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600}
    assert long == {}


def test_no_import_inside_a_function_rebinds_one_of_its_parameters():
    """A module renamed to a word a parameter already uses (``why --status-file`` and ``daemon/status_file.py``)
    must not shadow the parameter: ``from ..daemon import status_file`` inside ``why_cmd(status_file=...)`` made
    the path a module."""
    bad = []
    for path in ROOT.rglob("*.py"):
        for f in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            params = {a.arg for a in f.args.posonlyargs + f.args.args + f.args.kwonlyargs}
            for node in ast.walk(f):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    bad += [f"{path.relative_to(ROOT.parent)}:{node.lineno} {f.name}({a.asname or a.name})"
                            for a in node.names if (a.asname or a.name.split(".")[0]) in params]
    assert bad == []
