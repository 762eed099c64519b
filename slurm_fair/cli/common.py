"""What every slurm-fair command shares: the --config and --json options and how errors are printed."""

from __future__ import annotations

import functools
import sqlite3
import sys
from typing import Any, Callable, NoReturn

import click

from ..errors import InputError, SlurmFairError

CONFIG_HELP = "Config file (default: $SLURM_FAIR_CONFIG, else /etc/slurm-fair/slurm-fair.toml)."


def config_from_group(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """``--config`` may also come before the subcommand (``slurm-fair --config F status``): the group's value is
    taken when the subcommand has none; two different values are refused."""
    above = None
    parent = ctx.parent
    while parent is not None:
        above = parent.params.get("config_path") or above
        parent = parent.parent
    if value is not None and above is not None and value != above:
        raise click.BadParameter(f"given twice, as {above!r} before the command and {value!r} after it",
                                 ctx=ctx, param_hint="--config")
    return value if value is not None else above


def config_option(f: Callable) -> Callable:
    return click.option("--config", "config_path", metavar="PATH", default=None, help=CONFIG_HELP,
                        callback=config_from_group)(f)


def group_config_option(f: Callable) -> Callable:
    """``--config`` on the ``slurm-fair`` group itself: passed down to the subcommand's own ``--config``."""
    return click.option("--config", "config_path", metavar="PATH", default=None, expose_value=True,
                        help=CONFIG_HELP + " Accepted before the command too.")(f)


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
