"""What every slurm-fair command shares: the --config and --json options and how errors are printed."""

from __future__ import annotations

import functools
import sqlite3
import sys
from typing import Any, Callable, NoReturn

import click

from ..errors import InputError, SlurmFairError

CONFIG_HELP = "Config file (default: $SLURM_FAIR_CONFIG, else /etc/slurm-fair/slurm-fair.toml)."


def config_option(f: Callable) -> Callable:
    return click.option("--config", "config_path", metavar="PATH", default=None, help=CONFIG_HELP)(f)


def json_option(f: Callable | None = None, *, help: str = "Print JSON instead of a table.") -> Callable:
    """The one ``--json`` flag (parameter ``as_json``): ``@json_option`` or ``@json_option(help=...)``."""
    deco = click.option("--json", "as_json", is_flag=True, help=help)
    return deco(f) if f is not None else deco


def fail(e: BaseException) -> NoReturn:
    """One line on stderr, no traceback: bad input exits 2, other slurm-fair and database errors exit 1."""
    if isinstance(e, sqlite3.OperationalError):  # e.g. "database is locked" after the busy timeout
        click.echo(f"error: database: {e}", err=True)
        sys.exit(1)
    click.echo(f"error: {e}", err=True)
    sys.exit(2 if isinstance(e, InputError) else 1)


def handle_errors(f: Callable) -> Callable:
    """Decorator: a SlurmFairError or database error raised by the command goes through :func:`fail`."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except (SlurmFairError, sqlite3.OperationalError) as e:
            fail(e)

    return wrapper


def decode_utf8(data: bytes, where: str) -> str:
    """``data`` as UTF-8 text, or an InputError naming ``where`` and the line of the first byte that is not
    UTF-8 (``error: f.csv line 3: not UTF-8 (save the file as UTF-8) (got b'\\xe9,k80,1')``)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise InputError(f"{where} line {line}", data[e.start:e.start + 8],
                         "not UTF-8 (save the file as UTF-8)") from None
