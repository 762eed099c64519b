"""Which slurmctld serves the cluster now: ``scontrol ping``, parsed (``daemon.only_on_primary``).

``scontrol ping`` prints one line per ``SlurmctldHost`` in slurm.conf order, ``Slurmctld(ROLE) at HOST is
UP|DOWN`` (ROLE: ``primary``, ``backup`` when there is one backup, ``backup1``, ``backup2``… when there are more;
HOST: the SlurmctldHost name, not its address), then, run as root with one DOWN, a ``** RESTORE SLURMCTLD DAEMON
TO SERVICE **`` banner; it exits 1 only when none answers. The same text on Slurm 22.05 (``_ping_slurmctld``)
and 24.11 (``_print_ping``, which adds ``--json``), read in both releases' ``src/scontrol/scontrol.c``; the
one-controller lines were captured on the 22.05 and 24.11 testbeds.

A backup slurmctld takes control while every controller before it is down and gives it back when the primary
returns, so the controller that serves is the first one UP. :func:`parse_ping` and :func:`serving` are pure;
:func:`ping` runs the command (an argument list)."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from typing import Mapping, Sequence

from .errors import ClusterUnreachable, CommandFailed, ParseError

_LINE = re.compile(r"Slurmctld\((primary|backup\d*)\) at (\S+) is (UP|DOWN)")


@dataclass(frozen=True)
class Controller:
    """One SlurmctldHost as ``scontrol ping`` reports it."""

    role: str  # primary | backup | backupN
    host: str
    up: bool


def parse_ping(text: str) -> tuple[Controller, ...]:
    """The controllers in ``scontrol ping``'s output, in its order (slurm.conf's). Lines that are not a
    controller's (the RESTORE banner) are skipped; no controller line at all is a ParseError quoting the text."""
    out = tuple(Controller(m.group(1), m.group(2), m.group(3) == "UP")
                for m in (_LINE.fullmatch(line.strip()) for line in text.splitlines()) if m)
    if not out:
        raise ParseError(f"scontrol ping: no 'Slurmctld(...) at HOST is UP|DOWN' line in {text.strip()[:300]!r}")
    return out


def short(host: str) -> str:
    """A host name compared as Slurm's SlurmctldHost names are usually written: before the first dot,
    lower case."""
    return host.split(".", 1)[0].lower()


def serving(controllers: Sequence[Controller]) -> Controller | None:
    """The controller that serves the cluster: the first one UP (None: none answers)."""
    return next((c for c in controllers if c.up), None)


def standby_reason(controllers: Sequence[Controller], host: str) -> str | None:
    """None when ``host`` is the serving controller; else why a daemon on ``host`` stands by."""
    s = serving(controllers)
    if s is None:
        return "no slurmctld answers scontrol ping"
    if short(s.host) == short(host):
        return None
    mine = next((c for c in controllers if short(c.host) == short(host)), None)
    where = (f"this host ({host}) is slurmctld {mine.role}, {'UP' if mine.up else 'DOWN'}" if mine is not None
             else f"this host ({host}) is no SlurmctldHost")
    return f"slurmctld {s.role} at {s.host} serves the cluster; {where}"


def ping(timeout: float = 30.0, env: Mapping[str, str] | None = None) -> tuple[Controller, ...]:
    """Run ``scontrol ping`` and parse it. ClusterUnreachable on a timeout, CommandFailed when it cannot run
    or prints no controller line."""
    argv = ["scontrol", "ping"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, encoding="utf-8", errors="replace",
                              timeout=timeout, env=None if env is None else dict(env), stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise CommandFailed(argv, 127, "scontrol: command not found (is the Slurm client installed and on PATH?)"
                            ) from None
    except subprocess.TimeoutExpired:
        raise ClusterUnreachable(f"scontrol ping: no answer within {timeout:g} s") from None
    except OSError as e:  # not executable, too many processes...
        raise CommandFailed(argv, 126, f"scontrol: cannot run it: {e.strerror or e}") from None
    try:
        return parse_ping(proc.stdout)  # exit 1 = every controller DOWN: the lines still say so
    except ParseError:
        raise CommandFailed(argv, proc.returncode, proc.stderr or proc.stdout) from None
