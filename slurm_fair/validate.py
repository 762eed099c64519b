"""The one number check for every input (problem files, config, profiles, traces): a finite number, with the
bound the field documents, or an ``InputError`` naming the field and the value; and the one check of the names
that go into CSV files (accounts, classes, GPU types). Stdlib only (the hooks' path may use it)."""

from __future__ import annotations

import math
from typing import Any

from .errors import InputError


def number(field: str, value: Any, *, positive: bool = False, nonneg: bool = False, nonzero: bool = False,
           most: float | None = None, text: bool = False) -> float:
    """``value`` as a float. Refused: booleans, non-numbers (strings too unless ``text``), NaN, ±inf and
    integers too large for a float ("must be a finite number"); then, as asked, <= 0 (``positive``), < 0
    (``nonneg``), == 0 (``nonzero``), > ``most``."""
    if isinstance(value, bool) or not (isinstance(value, (int, float)) or (text and isinstance(value, str))):
        raise InputError(field, value, "must be a finite number")
    try:
        v = float(value)  # a huge integer overflows here
    except (OverflowError, ValueError):
        raise InputError(field, value, "must be a finite number") from None
    if not math.isfinite(v):
        raise InputError(field, value, "must be a finite number")
    if positive and v <= 0:
        raise InputError(field, value, "must be > 0")
    if nonzero and v == 0:
        raise InputError(field, value, "must not be 0")
    if nonneg and v < 0:
        raise InputError(field, value, "must be >= 0")
    if most is not None and v > most:
        raise InputError(field, value, f"must be at most {most:g}")
    return v


def name(field: str, value: Any, *, allow_empty: bool = False) -> str:
    """An account or class name as a CSV cell holds it: a printable string, non-empty (unless ``allow_empty``),
    without surrounding spaces, commas, tabs or line breaks."""
    if not isinstance(value, str):
        raise InputError(field, value, "must be a string")
    if value == "" and allow_empty:
        return value
    if not value or value != value.strip() or any(c in value for c in ",\n\r\t") or not value.isprintable():
        raise InputError(
            field, value, "must be non-empty, without surrounding spaces, commas, tabs or line breaks"
        )
    return value


def gpu_type(field: str, value: Any) -> str:
    """A GPU type name: a :func:`name` without whitespace, ':' or '='."""
    value = name(field, value)
    if any(c.isspace() or c in ":=" for c in value):
        raise InputError(field, value, "a GPU type has no spaces, ':' or '='")
    return value
