"""Row values in and out of SQLite: JSON columns, checked numbers, and rows as records (column ``class`` is the
field ``cls``) and back (shared by the store's modules)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

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


def as_row(record: Any) -> dict[str, Any]:
    """A store record as its table's row (for JSON output): its fields in order, ``cls`` named ``class`` as the
    column is."""
    return {("class" if k == "cls" else k): v for k, v in dataclasses.asdict(record).items()}


def _fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row's values keyed as its record's fields (the column ``class`` is the field ``cls``)."""
    return {("cls" if k == "class" else k): v for k, v in row.items()}
