"""Validators of config values: ``(key, value) -> normalised value``, or InputError(key, value, problem) naming the
key. The section dataclasses (``sections.py``) name one per key."""

from __future__ import annotations

import ipaddress
import re
from types import MappingProxyType
from typing import Any, Callable

from ..catalog import POLICIES, SOLVERS
from ..errors import InputError
from ..validate import number

BACKENDS = ("auto", "cli", "pyslurm")
LOG_LEVELS = ("debug", "info", "warning", "error")
ON_CONFLICT = ("flag", "ignore-tenant", "fallback")  # profiling.on_conflict (profiling/trust.py)
CLASS_SOURCES = ("comment", "wckey", "name")
SITE_LIMIT_MODES = ("respect", "adopt")
UNREQUEUEABLE_ACTIONS = ("hold-back", "cancel", "ignore")  # daemon/preemption/unrequeueable.py



# --------------------------------------------------------------------------------------------
# validators: (key, value) -> normalised value, or InputError(key, value, problem)


def _number(key: str, v: Any, *, positive: bool = False, nonneg: bool = False) -> float | int:
    number(key, v, positive=positive, nonneg=nonneg)  # the one check (validate.py); TOML integers stay integers
    return v


def _positive(key: str, v: Any) -> float | int:
    return _number(key, v, positive=True)


def _nonneg(key: str, v: Any) -> float | int:
    return _number(key, v, nonneg=True)


def _int(key: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise InputError(key, v, "must be an integer")
    return v


def _int_or_auto(key: str, v: Any) -> int | str:
    """An integer, or "auto" (a value slurm-fair derives at run time)."""
    if v == "auto":
        return v
    if isinstance(v, bool) or not isinstance(v, int):
        raise InputError(key, v, 'must be an integer or "auto"')
    return v


def _pos_int(key: str, v: Any) -> int:
    v = _int(key, v)
    if v < 1:
        raise InputError(key, v, "must be >= 1")
    return v


def _cap_gpus(key: str, v: Any) -> int:
    v = _int(key, v)
    if v < -1:
        raise InputError(key, v, "must be -1 (no cap) or >= 0")
    return v


def _nonneg_int(key: str, v: Any) -> int:
    v = _int(key, v)
    if v < 0:
        raise InputError(key, v, "must be >= 0")
    return v


def _bool(key: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise InputError(key, v, "must be true or false")
    return v


def _nonempty_str(key: str, v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise InputError(key, v, "must be a non-empty string")
    return v


def _db_path(key: str, v: Any) -> str:
    v = _nonempty_str(key, v)
    if any(c in v for c in "\0\n\r"):
        raise InputError(key, v, "must be a path without NUL characters or line breaks")
    return v


def _choice(choices: tuple[str, ...], *, lower: bool = True) -> Callable[[str, Any], str]:
    def check(key: str, v: Any) -> str:
        if not isinstance(v, str) or (v.lower() if lower else v) not in choices:
            raise InputError(key, v, f"must be one of {', '.join(choices)}")
        return v.lower() if lower else v

    return check


def _signal(key: str, v: Any) -> str:
    """A signal name as scancel takes it (USR1, SIGUSR1, TERM) or a number; normalised to upper case."""
    if not isinstance(v, str) or not re.fullmatch(r"(SIG)?[A-Z][A-Z0-9+]*|\d+", v.strip().upper()):
        raise InputError(key, v, 'must be a signal name like "USR1" or "SIGTERM", or a signal number')
    return v.strip().upper()


METRICS_OFF = ""  # metrics.listen = "" serves no /metrics
_HOSTNAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")


def parse_listen(key: str, v: Any) -> tuple[str, int] | None:
    """``"HOST:PORT"`` (HOST an IPv4 address, a host name, or an IPv6 address in brackets: ``"[::1]:9817"``;
    PORT 1..65535) -> (host, port), host without brackets; ``""`` -> None (off)."""
    if not isinstance(v, str):
        raise InputError(key, v, 'must be a string "HOST:PORT" (e.g. "127.0.0.1:9817"), or "" for off')
    if v == METRICS_OFF:
        return None
    if v.startswith("["):
        host, sep, port = v[1:].partition("]:")
        if not sep:
            raise InputError(key, v, 'an IPv6 address needs brackets and a port: "[::1]:9817"')
        try:
            if ipaddress.ip_address(host).version != 6:
                raise ValueError(host)
        except ValueError:
            raise InputError(key, v, f"{host!r} in brackets is not an IPv6 address") from None
    else:
        host, sep, port = v.rpartition(":")
        if not sep or not host:
            raise InputError(key, v, 'must be "HOST:PORT" (e.g. "127.0.0.1:9817"), or "" for off')
        if ":" in host:
            raise InputError(key, v, 'an IPv6 address must be in brackets: "[::1]:9817"')
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            if re.fullmatch(r"[0-9.]+", host) or not _HOSTNAME.fullmatch(host):
                raise InputError(key, v, f"{host!r} is neither an IPv4 address nor a host name") from None
    if not re.fullmatch(r"[0-9]{1,5}", port) or not 1 <= int(port) <= 65535:
        raise InputError(key, v, f"port {port!r} must be a number in 1..65535")
    return host, int(port)


def _listen(key: str, v: Any) -> str:
    parse_listen(key, v)
    return v


def _knob_f(key: str, v: Any) -> float:
    f = _number(key, v, nonneg=True)
    if f >= 1:
        raise InputError(key, v, "must be in [0, 1)")
    return f


def _gt1(key: str, v: Any) -> float:
    f = _number(key, v, positive=True)
    if f <= 1:
        raise InputError(key, v, "must be > 1")
    return f


def _weight(key: str, v: Any) -> float:
    f = _number(key, v, positive=True)
    if f > 1:
        raise InputError(key, v, "must be in (0, 1]")
    return f


def _policy(key: str, v: Any) -> str:
    names = list(POLICIES)
    if not isinstance(v, str) or v not in names:
        raise InputError(key, v, f"unknown policy (known: {', '.join(names)})")
    return v


def _solver(key: str, v: Any) -> str:
    if not isinstance(v, str) or (v and v.upper() not in SOLVERS):
        raise InputError(key, v, f'must be "" (default) or one of {", ".join(SOLVERS)}')
    return v.upper()


def _path_or_empty(key: str, v: Any) -> str:
    if not isinstance(v, str) or v != v.strip() or any(c in v for c in "\n\r\0"):
        raise InputError(key, v, "must be a path without surrounding spaces or line breaks, or \"\"")
    return v


def _host_id(key: str, v: Any) -> str:
    if not isinstance(v, str) or (v and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}", v)):
        raise InputError(key, v, 'must be "" (this machine\'s host name) or a host name (letters, digits, . _ -)')
    return v


def _str_list(key: str, v: Any) -> tuple[str, ...]:
    if not isinstance(v, list):
        raise InputError(key, v, "must be a list of strings")
    for i, item in enumerate(v):
        if not isinstance(item, str) or not item.strip():
            raise InputError(f"{key}[{i}]", item, "must be a non-empty string")
    if len(set(v)) != len(v):
        raise InputError(key, v, "has duplicate entries")
    return tuple(v)


UPGRADE_MODES = ("checkpointing", "all", "off")
CHECKPOINT_RULE_KINDS = ("account", "partition", "class")


def _upgrade_mode(key: str, v: Any) -> str:
    """preemption.upgrade: one of UPGRADE_MODES; true / false (the key's older form) mean "all" / "off"."""
    if isinstance(v, bool):
        return "all" if v else "off"
    return _choice(UPGRADE_MODES)(key, v)


def _checkpoint_rules(key: str, v: Any) -> tuple[str, ...]:
    """preemption.checkpointing: "KIND:NAME" entries, KIND one of CHECKPOINT_RULE_KINDS."""
    rules = _str_list(key, v)
    for i, r in enumerate(rules):
        kind, sep, name = r.partition(":")
        if not sep or kind not in CHECKPOINT_RULE_KINDS or not name.strip() or name != name.strip():
            raise InputError(f"{key}[{i}]", r, f"must be KIND:NAME with KIND one of {', '.join(CHECKPOINT_RULE_KINDS)} "
                             '(e.g. "account:physics")')
    return rules


def _class_order(key: str, v: Any) -> tuple[str, ...]:
    order = _str_list(key, v)
    if not order:
        raise InputError(key, v, "must name at least one source")
    for i, item in enumerate(order):
        if item not in CLASS_SOURCES:
            raise InputError(f"{key}[{i}]", item, f"must be one of {', '.join(CLASS_SOURCES)}")
    return order


def _tenant_map(key: str, v: Any) -> dict[str, str]:
    if not isinstance(v, dict):
        raise InputError(key, v, "must be a table of account = \"tenant\"")
    for acct, tenant in v.items():
        if not acct.strip():
            raise InputError(key, acct, "account name must not be empty")
        if not isinstance(tenant, str) or not tenant.strip():
            raise InputError(f"{key}.{acct}", tenant, "must be a non-empty tenant name")
    return MappingProxyType(dict(v))


def _weights(key: str, v: Any) -> dict[str, float]:
    if not isinstance(v, dict):
        raise InputError(key, v, "must be a table of tenant = weight")
    out = {}
    for tenant, w in v.items():
        if not tenant.strip():
            raise InputError(key, tenant, "tenant name must not be empty")
        out[tenant] = float(_positive(f"{key}.{tenant}", w))
    return MappingProxyType(out)


