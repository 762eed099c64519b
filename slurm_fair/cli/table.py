"""A small plain-text table renderer shared by the CLI modules (no I/O)."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from ..text import printable


def _is_number(cell: str) -> bool:
    try:
        float(cell.replace(",", ""))
    except ValueError:
        return False
    return True


def render(header: Sequence[Any], rows: Iterable[Sequence[Any]], right: Iterable[int] | None = None) -> str:
    """Render ``rows`` under ``header`` as aligned columns separated by two spaces, with a dashed rule.

    ``right``: indices of right-aligned columns; None = every column whose body cells are all numbers
    (empty cells and "-" ignored). Cells are converted with ``str``; None prints as empty. Rows shorter than
    the header are padded. Trailing spaces are stripped. Every cell is escaped by
    :func:`slurm_fair.text.printable` (control characters and line breaks as escapes: a job name or class
    never moves the cursor or forges a row).
    """
    head = ["" if h is None else printable(h, None, backslash=False) for h in header]
    body = [["" if c is None else printable(c, None, backslash=False) for c in r] for r in rows]
    ncol = max([len(head), *[len(r) for r in body]]) if body or head else 0
    head += [""] * (ncol - len(head))
    for r in body:
        r += [""] * (ncol - len(r))
    if right is None:
        right_set = {
            j
            for j in range(ncol)
            if any(r[j] not in ("", "-") for r in body) and all(r[j] in ("", "-") or _is_number(r[j]) for r in body)
        }
    else:
        right_set = set(right)
    widths = [max([len(head[j]), *[len(r[j]) for r in body]]) for j in range(ncol)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if j in right_set else c.ljust(w) for j, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = [line(head), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in body]
    return "\n".join(out)
