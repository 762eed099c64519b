"""Values as Slurm's JSON writes them, in both layouts it has used: 22.05 ``openapi/v0.0.38`` (plain ints and
null, a state as one string) and 24.11 ``data_parser/v0.0.42`` (``{"set", "infinite", "number"}`` objects, states
as lists); the envelope (``errors``, ``meta.slurm``) and the version string. No I/O here: every function takes
decoded JSON or text and returns a value or raises :class:`~slurm_fair.cluster.errors.ParseError`.

Used by the record parsers (:mod:`slurm_fair.cluster.parse`) and the CLI backend.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Mapping

from .errors import ClusterUnreachable, ParseError

# stderr / JSON error texts that mean "slurmctld or slurmdbd did not answer"
UNREACHABLE_PHRASES = (
    "unable to contact slurm controller",
    "connection refused",
    "socket timed out",
    "unable to establish a connection",
    "unable to connect to database",
    "problem talking to the database",
    "persistent connection",
    "could not establish a configuration source",
    "zero bytes were transmitted",
    "communication connection failure",
    "connection timed out",
)


def load_json(text: str | bytes | Mapping[str, Any], what: str) -> dict[str, Any]:
    """Decode a command's JSON output; ``what`` names the command in errors."""
    if isinstance(text, Mapping):
        return dict(text)
    try:
        data = json.loads(text)
    except (ValueError, TypeError) as e:
        head = (text[:80] if isinstance(text, (str, bytes)) else repr(text))
        raise ParseError(f"{what}: output is not JSON ({e}); it starts with {head!r}") from None
    if not isinstance(data, dict):
        raise ParseError(f"{what}: expected a JSON object at the top, got {type(data).__name__}")
    errors = data.get("errors") or []
    if errors:
        if any(p in json.dumps(errors).lower() for p in UNREACHABLE_PHRASES):
            raise ClusterUnreachable(f"{what}: {errors!r}"[:500])
        raise ParseError(f"{what}: Slurm reported errors: {errors!r}"[:500])
    return data


def num(value: Any, field: str = "number") -> int | float | None:
    """A Slurm number in either layout: int, null, or ``{"set","infinite","number"}``.

    With the ``+complex`` data_parser flag (24.11) numbers are plain, infinite is ``"Infinity"`` and
    unset is null.  Returns an int, ``math.inf`` for infinite, or None for unset/null."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ParseError(f"{field}: expected a number, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.lower() in ("infinity", "infinite", "unlimited"):
        return math.inf  # 24.11 with the data_parser "+complex" flag
    if isinstance(value, dict) and "number" in value:
        if value.get("infinite"):
            return math.inf
        if not value.get("set", True):
            return None
        return num(value["number"], field)
    raise ParseError(f"{field}: expected a number, got {value!r}")


def as_int(value: Any, field: str, default: int = 0) -> int:
    """An integer field in either layout; ``default`` when it is unset or infinite."""
    v = num(value, field)
    if v is None or v == math.inf:
        return default
    return int(v)


def as_minutes(value: Any, field: str) -> int | None:
    """A time limit in minutes (either layout); None for unlimited, unset, or Slurm's NO_VAL/INFINITE."""
    v = num(value, field)
    if v is None or v == math.inf or v < 0 or v >= 0xFFFFFFFE:
        return None
    return int(v)


def as_flag(value: Any, field: str, default: bool = False) -> bool:
    """A boolean field: true/false (both layouts), 0/1 (pyslurm), absent or null = ``default``."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "0", "1"):
        return value.lower() in ("true", "yes", "1")
    raise ParseError(f"{field}: expected true or false, got {value!r}")


def as_str(rec: Mapping[str, Any], key: str, where: str) -> str:
    """``rec[key]`` as a string, "" when it is absent or null."""
    v = rec.get(key)
    if v is None:
        return ""
    if not isinstance(v, str):
        raise ParseError(f"{where}.{key}: expected a string, got {v!r}")
    return v


def as_states(value: Any, flags: Any = None, where: str = "state") -> tuple[str, ...]:
    """A state (22.05: one string, 24.11: a list) and its ``state_flags``, upper case."""
    if isinstance(value, str):
        out = [value]
    elif isinstance(value, list) and all(isinstance(s, str) for s in value):
        out = list(value)
    else:
        raise ParseError(f"{where}: expected a string or a list of strings, got {value!r}")
    if flags:
        if not isinstance(flags, list):
            raise ParseError(f"{where}_flags: expected a list, got {flags!r}")
        out += [str(f) for f in flags]
    return tuple(s.upper() for s in out if s)


def slurm_version(meta: Mapping[str, Any]) -> str:
    """'22.05.8' from either envelope (``meta.Slurm`` with int parts, or ``meta.slurm`` with strings)."""
    s = meta.get("slurm") or meta.get("Slurm")
    if not isinstance(s, dict):
        raise ParseError(f"meta: no Slurm version block in {sorted(meta)}")
    if isinstance(s.get("release"), str) and s["release"]:
        return s["release"]
    v = s.get("version") or {}
    try:
        return f"{int(v['major']):02d}.{int(v['minor']):02d}.{int(v['micro'])}"
    except (KeyError, TypeError, ValueError):
        raise ParseError(f"meta.slurm.version: cannot read {v!r}") from None


_VERSION_RE = re.compile(r"\b(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version_output(text: str) -> str:
    """``slurm-wlm 22.05.8`` / ``slurm 24.11.5`` (``scontrol --version``) -> ``22.05.8``."""
    m = _VERSION_RE.search(text or "")
    if not m:
        raise ParseError(f"--version: no version number in {text.strip()[:100]!r}")
    return m.group(0)
