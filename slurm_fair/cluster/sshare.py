"""Slurm's own fair-share state from ``sshare -a -l -P`` (with its header line): every association of the tree with
its shares, raw and effective usage, Level FS and fair-share factor -> :class:`ShareRow`. Pure text parsing; a
line it cannot read raises :class:`~slurm_fair.cluster.errors.ParseError` naming the line and the field.

Read by column name, so ``sshare -l`` (Fair Tree: ``...|FairShare|LevelFS|GrpTRESMins|TRESRunMins``), the classic
layout (no LevelFS) and ``-o`` lists that keep Account, User, RawShares, NormShares, RawUsage, EffectvUsage and
FairShare all read (Slurm 22.05 and 24.11 print the same columns). The tree is in the Account column's leading
spaces: one per level below the root; a user row is indented one level below its account and names the account.
sshare prints an empty cell where a value does not apply (an account's FairShare under Fair Tree, the root's
Level FS), ``inf`` for a Level FS without usage and ``parent`` as the RawShares of ``Fairshare=parent``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import ParseError

SSHARE_ARGS = ("sshare", "-a", "-l", "-P")  # every association, long format, '|'-separated with a header
REQUIRED = ("Account", "User", "RawShares", "NormShares", "RawUsage", "EffectvUsage", "FairShare")


@dataclass(frozen=True)
class ShareRow:
    """One association as ``sshare -l`` shows it. ``account``: the account's name (a user row: its account);
    ``user``: "" for an account; ``parent``: the account above (an account row) or the user's account, "" for the
    root; ``depth``: 0 for the root. ``raw_shares`` None for ``Fairshare=parent``; ``fairshare`` None where sshare
    prints none (accounts under Fair Tree); ``level_fs`` None where none is printed or the column is absent;
    ``raw_usage`` is sshare's whole number (decayed billed TRES-seconds, truncated)."""

    account: str
    user: str
    parent: str
    depth: int
    raw_shares: int | None
    norm_shares: float
    raw_usage: int
    effective_usage: float
    fairshare: float | None
    level_fs: float | None

    @property
    def is_user(self) -> bool:
        return bool(self.user)

    @property
    def name(self) -> str:
        return self.user or self.account


def _whole(s: str) -> bool:
    return s.isascii() and s.isdigit()


def _float(cell: str, where: str, optional: bool) -> float | None:
    s = cell.strip()
    if not s:
        if optional:
            return None
        raise ParseError(f"{where}: empty")
    try:
        v = float(s)
    except ValueError:
        raise ParseError(f"{where}: not a number: {cell!r}") from None
    if math.isnan(v) or v < 0:
        raise ParseError(f"{where}: not a number >= 0: {cell!r}")
    return v


def parse_sshare(text: str) -> list[ShareRow]:
    """``sshare -a -l -P`` output (header first) -> one :class:`ShareRow` per association, in sshare's order (the
    tree depth-first). Raises ParseError for a missing column, a row with too few fields, a number that is not
    one, or an indentation that skips a level."""
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    if not lines:
        raise ParseError("sshare: no output (expected a header line, run with -P and without -n)")
    header = lines[0].split("|")
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise ParseError(f"sshare header: missing column(s) {missing} in {lines[0]!r}")
    col = {c: header.index(c) for c in header}
    rows: list[ShareRow] = []
    stack: list[str] = []  # the account at each depth above the current row
    for n, line in enumerate(lines[1:], 2):
        parts = line.split("|")
        if len(parts) < len(header):
            raise ParseError(f"sshare line {n}: expected {len(header)} '|'-separated fields, got {line!r}")
        cell = {c: parts[i] for c, i in col.items()}
        raw_acct = cell["Account"]
        account = raw_acct.strip()
        if not account:
            raise ParseError(f"sshare line {n}: empty Account in {line!r}")
        depth = len(raw_acct) - len(raw_acct.lstrip(" "))
        user = cell["User"].strip()
        where = f"sshare line {n} ({account}{'/' + user if user else ''})"
        if user:
            if depth < 1 or depth > len(stack) or stack[depth - 1] != account:
                raise ParseError(f"{where}: a user row must sit one level below its account {account!r}")
            parent = account
        else:
            if depth > len(stack):
                raise ParseError(f"{where}: indented {depth} levels below an account at depth {len(stack) - 1}")
            parent = stack[depth - 1] if depth else ""
            del stack[depth:]
            stack.append(account)
        shares = cell["RawShares"].strip()
        if shares.lower() == "parent":
            raw_shares = None
        elif _whole(shares):
            raw_shares = int(shares)
        elif not shares and depth == 0:
            raw_shares = None  # the root has no shares
        else:
            raise ParseError(f"{where}: RawShares: not a whole number: {shares!r}")
        usage = cell["RawUsage"].strip()
        if not _whole(usage):
            raise ParseError(f"{where}: RawUsage: not a whole number: {usage!r}")
        level_fs = _float(cell["LevelFS"], f"{where}: LevelFS", True) if "LevelFS" in cell else None
        rows.append(ShareRow(
            account=account, user=user, parent=parent, depth=depth, raw_shares=raw_shares,
            norm_shares=_float(cell["NormShares"], f"{where}: NormShares", False) or 0.0,
            raw_usage=int(usage),
            effective_usage=_float(cell["EffectvUsage"], f"{where}: EffectvUsage", False) or 0.0,
            fairshare=_float(cell["FairShare"], f"{where}: FairShare", True), level_fs=level_fs))
    return rows
