"""Row values in and out of SQLite: JSON columns and checked numbers (shared by the store's modules)."""

from __future__ import annotations

import json
from typing import Any

from ..errors import InputError


def _loads(value: str | None) -> Any:
    return None if value is None else json.loads(value)


def _json_default(o: Any) -> Any:
    if hasattr(o, "tolist"):  # numpy arrays and scalars
        return o.tolist()
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, default=_json_default)


def _int(value: Any, field: str = "value") -> int | None:
    """None, or an int (numpy integers, and floats with an integral value, are accepted)."""
    if value is None:
        return None
    if isinstance(value, float) and not value.is_integer():
        raise InputError(field, value, "must be an integer")
    return int(value)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
