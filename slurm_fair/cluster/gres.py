"""GPU strings -> counts by type: a job's request (``tres_per_node``, ``tres_per_job``, ... in the 22.05 ``gres:gpu:``
and the 24.11 ``gres/gpu`` spellings), a TRES string (``gres/gpu:v100=2``) and a node's or an allocation's GRES
(``gpu:v100:2(IDX:0,1)``). Pure; a string it cannot read raises :class:`~slurm_fair.cluster.errors.ParseError`.
"""

from __future__ import annotations

import re

from .errors import ParseError

# Untyped GPUs on a node whose gres.conf gives no type are counted under this name.
UNTYPED = "gpu"


def _parse_count(s: str, where: str) -> int:
    m = re.fullmatch(r"(\d+)([kKmMgG]?)", s)
    if not m:
        raise ParseError(f"{where}: bad GPU count {s!r}")
    mult = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}[m.group(2).lower()]
    return int(m.group(1)) * mult


def gpu_requests(spec: str, where: str = "tres") -> list[tuple[str | None, int]]:
    """GPU entries of a ``tres_per_*`` value -> [(type or None, count)].

    Accepts ``gres:gpu:2``, ``gres:gpu``, ``gres:gpu:v100``, ``gres:gpu:v100:2`` (22.05),
    ``gres/gpu:2``, ``gres/gpu:v100:2``, ``gres/gpu=1``, ``gres/gpu:v100=1`` (24.11) and bare ``gpu:2``;
    other entries (``cpu=4``, ``gres:mps:100``, ``license/...``) are ignored."""
    out: list[tuple[str | None, int]] = []
    if not spec or spec in ("N/A", "(null)"):
        return out
    for entry in spec.split(","):
        entry = entry.strip()
        if not entry:
            continue
        for prefix in ("gres:", "gres/"):
            if entry.startswith(prefix):
                entry = entry[len(prefix):]
                break
        name, _, rest = entry.partition(":")
        name, eq, eqcount = name.partition("=")
        if name != "gpu":
            continue
        gtype: str | None = None
        count = 1
        if eq:  # gres/gpu=1
            if rest:
                raise ParseError(f"{where}: cannot parse GPU entry {entry!r}")
            count = _parse_count(eqcount, where)
        elif rest:
            t, eq2, c2 = rest.partition("=")
            if eq2:  # gres/gpu:v100=1
                gtype, count = t, _parse_count(c2, where)
            else:
                parts = rest.split(":")
                if len(parts) == 1:
                    if parts[0].isdigit() or re.fullmatch(r"\d+[kKmMgG]", parts[0]):
                        count = _parse_count(parts[0], where)
                    else:
                        gtype = parts[0]
                elif len(parts) == 2:
                    gtype, count = parts[0], _parse_count(parts[1], where)
                else:
                    raise ParseError(f"{where}: cannot parse GPU entry {entry!r}")
        if gtype is not None and not re.fullmatch(r"[A-Za-z0-9_.\-]+", gtype):
            raise ParseError(f"{where}: bad GPU type {gtype!r} in {entry!r}")
        out.append((gtype, count))
    return out


def tres_gpus(tres: str, where: str = "tres") -> tuple[int, dict[str, int]]:
    """A TRES string (``cpu=1,gres/gpu=2,gres/gpu:v100=2``) -> (untyped total, {type: count})."""
    total = 0
    typed: dict[str, int] = {}
    if not tres or tres in ("N/A", "(null)"):
        return 0, typed
    for entry in tres.split(","):
        key, eq, value = entry.strip().partition("=")
        if not key.startswith("gres/gpu"):
            continue
        if not eq:
            raise ParseError(f"{where}: GPU entry without '=' in {tres!r}")
        count = _parse_count(value, where)
        if key == "gres/gpu":
            total += count
        elif key.startswith("gres/gpu:"):
            typed[key[len("gres/gpu:"):]] = typed.get(key[len("gres/gpu:"):], 0) + count
        # gres/gpumem, gres/gpuutil (24.11) are not GPUs
    return total, typed


_GRES_ITEM = re.compile(r"gpu(?::([A-Za-z0-9_.\-]+))?(?::(\d+[kKmMgG]?))?(?:\([^)]*\))?$")


def gres_gpus(gres: str | list[str] | None, where: str = "gres") -> dict[str, int]:
    """Node ``gres``/``gres_used`` or job ``gres_detail`` -> {type: count}.

    ``gpu:v100:2,gpu:k80:2``, ``gpu:v100:0(IDX:N/A),gpu:k80:1(IDX:2)``, ``gpu:a100:4(S:0-1)``,
    ``["gpu:v100:1(IDX:0)"]``, ``gres:gpu:v100:1(IDX:0)``; untyped GPUs count under ``UNTYPED``."""
    if gres is None:
        return {}
    items: list[str]
    if isinstance(gres, list):
        items = []
        for g in gres:
            if not isinstance(g, str):
                raise ParseError(f"{where}: expected strings, got {g!r}")
            items += _split_gres(g)
    elif isinstance(gres, str):
        items = _split_gres(gres)
    else:
        raise ParseError(f"{where}: expected a string or list, got {gres!r}")
    out: dict[str, int] = {}
    for item in items:
        for prefix in ("gres:", "gres/"):
            if item.startswith(prefix):
                item = item[len(prefix):]
        if item.split(":", 1)[0].split("(", 1)[0] != "gpu":
            continue  # other GRES (mps, shard, ...)
        m = _GRES_ITEM.match(item)
        if not m:
            raise ParseError(f"{where}: cannot parse GPU entry {item!r}")
        gtype, count = m.group(1), m.group(2)
        if gtype is not None and gtype.isdigit() and count is None:  # gpu:4 (untyped)
            gtype, count = None, gtype
        n = _parse_count(count, where) if count is not None else 1
        key = gtype or UNTYPED
        out[key] = out.get(key, 0) + n
    return out


def _split_gres(s: str) -> list[str]:
    """Split on commas that are not inside parentheses (``gpu:2(IDX:0,2)``)."""
    if s in ("", "N/A", "(null)"):
        return []
    items, depth, cur = [], 0, []
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    items.append("".join(cur))
    return [i.strip() for i in items if i.strip()]
