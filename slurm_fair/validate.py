"""The one number check for every input (problem files, config, profiles): a finite number, with the bound the
field documents, or an ``InputError`` naming the field and the value. Stdlib only (the hooks' path may use it)."""

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
