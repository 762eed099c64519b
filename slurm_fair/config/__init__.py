"""slurm-fair configuration: one TOML file, parsed with :mod:`tomllib` into frozen dataclasses.

Every key is declared once, as a field of its section's dataclass (``sections.py``: default, validator,
comment); the validation (:func:`from_dict`), the commented default file (:func:`render_default`, shipped as
``etc/slurm-fair.toml``) and the reference page (:func:`render_reference`, ``docs/config-reference.md``) are
derived from those fields. Validators are in ``checks.py``. Errors are :class:`~slurm_fair.errors.InputError`
naming the key, e.g. ``daemon.period``.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Mapping

from ..catalog import SOLVERS
from ..errors import InputError
from .checks import (BACKENDS, CLASS_SOURCES, LOG_LEVELS, METRICS_OFF, ON_CONFLICT, SITE_LIMIT_MODES,
                     UNREQUEUEABLE_ACTIONS, parse_listen)
from .sections import (SECTION_DOCS, SECTIONS, SPEC, ClassesConfig, ClusterConfig, Config, DaemonConfig, HooksConfig,
                       Key, LimitsConfig, MetricsConfig, PolicyConfig, PreemptionConfig, PriorityConfig,
                       ProfilingConfig, StoreConfig, SubmitConfig, TenantsConfig)

__all__ = [
    "BACKENDS", "CLASS_SOURCES", "DEFAULT_PATH", "ENV_VAR", "LOG_LEVELS", "METRICS_OFF", "ON_CONFLICT", "SECTIONS",
    "SECTION_DOCS", "SITE_LIMIT_MODES", "SOLVERS", "SPEC", "STATUS_NAME", "UNREQUEUEABLE_ACTIONS", "ClassesConfig",
    "ClusterConfig", "Config", "DaemonConfig", "HooksConfig", "Key", "LimitsConfig", "MetricsConfig", "PolicyConfig",
    "PreemptionConfig", "PriorityConfig", "ProfilingConfig", "StoreConfig", "SubmitConfig", "TenantsConfig",
    "from_dict", "load", "parse_listen", "render", "render_default", "render_reference", "resolve_path",
]

DEFAULT_PATH = Path("/etc/slurm-fair/slurm-fair.toml")
ENV_VAR = "SLURM_FAIR_CONFIG"
STATUS_NAME = "status.json"  # the status file's name beside the database (daemon.status_file = "")
# limits.ownership_file = "auto": <the database's folder><suffix>/<name> (/var/lib/slurm-fair-ownership/limits.json)
OWNERSHIP_DIR_SUFFIX = "-ownership"
OWNERSHIP_NAME = "limits.json"


def resolve_path(explicit: str | os.PathLike | None) -> Path:
    """``--config`` value, else ``$SLURM_FAIR_CONFIG``, else ``/etc/slurm-fair/slurm-fair.toml``."""
    if explicit:
        return Path(explicit)
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    return DEFAULT_PATH


def from_dict(data: Mapping[str, Any], source: str = "defaults", base: Path | None = None) -> Config:
    """Validate a parsed TOML document. ``base`` is the folder relative database paths start from."""
    if not isinstance(data, Mapping):
        raise InputError("config", data, "must be a table")
    for section in data:
        if section not in SPEC:
            raise InputError(section, data[section], f"unknown section (known: {', '.join(SPEC)})")
    sections = {}
    for section, keys in SPEC.items():
        raw = data.get(section, {})
        if not isinstance(raw, Mapping):
            raise InputError(section, raw, "must be a table")
        for key in raw:
            if key not in keys:
                raise InputError(f"{section}.{key}", raw[key], f"unknown key (known: {', '.join(keys)})")
        values = {}
        for key, spec in keys.items():
            v = raw.get(key, spec.default)
            values[key] = spec.check(f"{section}.{key}", v)
        sections[section] = SECTIONS[section](**values)
    pr = sections["priority"]
    if pr.site_factor_max != "auto" and pr.site_factor_min >= pr.site_factor_max:
        raise InputError(
            "priority.site_factor_max", pr.site_factor_max,
            f"must be greater than priority.site_factor_min ({pr.site_factor_min})",
        )
    if pr.site_factor_max != "auto" and pr.levels > pr.site_factor_max - pr.site_factor_min + 1:
        raise InputError(
            "priority.levels", pr.levels,
            f"more levels than distinct values in [{pr.site_factor_min}, {pr.site_factor_max}]",
        )
    pf = sections["profiling"]
    if pf.max_throughput <= pf.min_throughput:
        raise InputError("profiling.max_throughput", pf.max_throughput,
                         f"must be greater than profiling.min_throughput ({pf.min_throughput:g})")
    if sections["preemption"].enabled and not sections["limits"].manage:
        raise InputError("preemption.enabled", True, "needs limits.manage = true (preemption enforces the limits)")
    db = Path(sections["daemon"].database).expanduser()
    if not db.is_absolute():
        db = Path(os.path.normpath((base or Path.cwd()) / db))
    status = None
    if sections["daemon"].publish_status:
        status = _optional_path(sections["daemon"].status_file, base) or db.parent / STATUS_NAME
    owned = sections["limits"].ownership_file
    owned_path = (db.parent.with_name(db.parent.name + OWNERSHIP_DIR_SUFFIX) / OWNERSHIP_NAME if owned == "auto"
                  else _optional_path(owned, base))
    return Config(**sections, source=source, database_path=db, ownership_path=owned_path,
                  spool_path=_optional_path(sections["hooks"].spool, base),
                  type_map_path=_optional_path(sections["submit"].type_map, base),
                  nvml_map_path=_optional_path(sections["profiling"].nvml_map, base),
                  status_path=status)


def _optional_path(value: str, base: Path | None) -> Path | None:
    """A path key that may be "" (off), resolved like daemon.database: relative to the config file's folder."""
    if not value:
        return None
    path = Path(value).expanduser()
    return path if path.is_absolute() else Path(os.path.normpath((base or Path.cwd()) / path))


def load(path: str | os.PathLike | None = None) -> Config:
    """Read and validate the config file.

    ``path`` None means :func:`resolve_path` (``$SLURM_FAIR_CONFIG`` or the default path). Only a missing
    file at the built-in default path falls back to defaults (``Config.source == "defaults"``); a missing
    file that was asked for (``path`` or ``$SLURM_FAIR_CONFIG``) is an error.
    """
    p = resolve_path(path)
    if not p.exists():
        if path is None and p == DEFAULT_PATH and not os.environ.get(ENV_VAR):
            return from_dict({}, source="defaults")
        raise InputError("config", str(p), "file not found")
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError("config", str(p), f"cannot read: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise InputError("config", str(p), f"not UTF-8 text: {e}") from e
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError("config", str(p), f"invalid TOML: {e}") from e
    except RecursionError:
        raise InputError("config", str(p), "invalid TOML: a value nested too deeply") from None
    except ValueError as e:  # e.g. an integer literal longer than Python's digit limit
        raise InputError("config", str(p), f"invalid TOML: {e}") from None
    return from_dict(data, source=str(p), base=p.resolve().parent)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot render {v!r} as TOML")


def _toml_key(k: str) -> str:
    if k and all(c.isalnum() or c in "_-" for c in k):
        return k
    return _toml_value(k)


def render(cfg_dict: Mapping[str, Mapping[str, Any]], header: bool = True) -> str:
    """A commented TOML file with the given values (section -> key -> value)."""
    lines: list[str] = []
    if header:
        lines += [
            "# slurm-fair configuration (TOML).",
            "#",
            "# Looked up at: --config PATH, else $SLURM_FAIR_CONFIG, else /etc/slurm-fair/slurm-fair.toml.",
            "# Every key is optional; the values below are the defaults. Unknown keys are errors.",
            "# Check a file with: slurm-fair config check --config PATH",
        ]
    for section, keys in SPEC.items():
        lines += ["", f"# {SECTION_DOCS[section]}", f"[{section}]"]
        for key, spec in keys.items():
            for doc_line in spec.doc.splitlines():
                lines.append(f"# {doc_line}")
            lines.append(f"{key} = {_toml_value(cfg_dict[section][key])}")
    return "\n".join(lines) + "\n"


def render_default() -> str:
    """The fully commented default configuration file (``etc/slurm-fair.toml`` equals this)."""
    return render({s: {k: spec.default for k, spec in keys.items()} for s, keys in SPEC.items()})


def render_reference() -> str:
    """The reference page of every section and key (``docs/config-reference.md`` equals this)."""
    out = ["# Configuration reference", "",
           "[← README](../README.md) · [all pages](../README.md#documentation) · "
           "[configuration and state](configuration.md)", "",
           "Generated from the section dataclasses (`slurm_fair/config/sections.py`) by "
           "`slurm_fair.config.render_reference()`; a unit test keeps this page equal to it. Every key is optional; "
           "unknown keys are errors. The commented template with the same defaults: "
           "[`etc/slurm-fair.toml`](../etc/slurm-fair.toml) (`slurm-fair config default`)."]
    for name, keys in SPEC.items():
        out += ["", f"## [{name}]", "", SECTION_DOCS[name], "", "| key | default | meaning |", "|---|---|---|"]
        for k, spec in keys.items():
            doc = " ".join(line.strip() for line in spec.doc.splitlines()).replace("|", "\\|")
            out.append(f"| `{k}` | `{_toml_value(spec.default)}` | {doc} |")
    return "\n".join(out) + "\n"
