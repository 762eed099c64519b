"""Text from users, made safe to print: the one escaping rule of every CLI output (pure, no I/O).

Job names, comments, classes, accounts, wckeys and Slurm's messages can hold any character a user put there:
control characters (an escape sequence recolours or rewrites the terminal), line breaks (a forged line in a
table), U+FFFD for bytes that were not UTF-8 (Slurm's output is decoded once, at the backend, with U+FFFD for
stray bytes). :func:`printable` writes every character that ``str.isprintable`` refuses as its Python escape
(``\\x1b``, ``\\n``, ``\\u202e``); printable characters, U+FFFD included, stay as they are.
"""

from __future__ import annotations

from typing import Any

MAX_NAME = 120


def printable(text: Any, limit: int | None = MAX_NAME, backslash: bool = True) -> str:
    """``text`` (``str(text)`` for other values) safe to print on a terminal: every character that is not
    printable (control characters, escape sequences, line breaks, bidi overrides, lone surrogates) is written
    as its Python escape; with ``backslash`` the backslash too (so an escape in the output always means one in
    the input); at most ``limit`` characters (None: no bound), then ``…``. With ``backslash=False`` it is
    idempotent: ``printable(printable(x, b=False), b=False) == printable(x, b=False)``."""
    text = text if isinstance(text, str) else str(text)
    cut = text if limit is None else text[:limit]
    if cut.isprintable() and (not backslash or "\\" not in cut):
        out = cut
    else:
        out = "".join(c if c.isprintable() and (c != "\\" or not backslash)
                      else c.encode("unicode_escape", "backslashreplace").decode("ascii") for c in cut)
    return out + ("…" if limit is not None and len(text) > limit else "")
