"""Accounts from ``sacctmgr -P -n show assoc format=cluster,account,user,fairshare,grptres,parentname``: shares,
GPU limits (GrpTRES), parents and users -> :class:`~slurm_fair.cluster.base.Account`. Pure text parsing; a line it
cannot read raises :class:`~slurm_fair.cluster.errors.ParseError`.
"""

from __future__ import annotations

from .base import ANY_GPU, Account
from .errors import ParseError

ASSOC_FORMAT = "cluster,account,user,fairshare,grptres,parentname"


def grptres_limits(text: str, where: str = "GrpTRES") -> dict[str, int]:
    """``gres/gpu:v100=2,gres/gpu=5,cpu=10`` -> {"v100": 2, ANY_GPU: 5} (non-GPU TRES ignored)."""
    limits: dict[str, int] = {}
    for entry in (text or "").split(","):
        key, eq, value = entry.strip().partition("=")
        if not key.startswith("gres/gpu") or key.startswith(("gres/gpumem", "gres/gpuutil")):
            continue
        if not eq or not value.isdigit():
            raise ParseError(f"{where}: bad GPU limit {entry!r} in {text!r}")
        if key == "gres/gpu":
            limits[ANY_GPU] = int(value)
        elif key.startswith("gres/gpu:"):
            limits[key[len("gres/gpu:"):]] = int(value)
        else:
            raise ParseError(f"{where}: bad GPU TRES {key!r} in {text!r}")
    return limits


def parse_assoc(text: str, cluster: str | None = None) -> list[Account]:
    """``sacctmgr -P -n show assoc format=cluster,account,user,fairshare,grptres,parentname`` -> Accounts.

    Account rows (empty user) give shares, GPU limits and the parent account (``root`` for a top-level one;
    output without the sixth column reads as no parent); user rows give ``users``. The ``root`` account is
    left out. ``fairshare=parent`` reads as 0. With ``cluster``, other clusters' rows are skipped."""
    shares: dict[str, int] = {}
    limits: dict[str, dict[str, int]] = {}
    parents: dict[str, str] = {}
    users: dict[str, list[str]] = {}
    order: list[str] = []
    columns = [0, 1, 2, 3, 4, 5]
    for n, line in enumerate((text or "").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|")
        if n == 1 and "Account" in parts:  # -P without -n: a header names the columns
            want = ("Cluster", "Account", "User", "Share", "GrpTRES")
            missing = [w for w in want if w not in parts]
            if missing:
                raise ParseError(f"sacctmgr header: missing column(s) {missing} in {line!r}")
            columns = [parts.index(w) for w in want] + ([parts.index("ParentName")] if "ParentName" in parts else [])
            continue
        if len(parts) <= max(columns[:5]):
            raise ParseError(f"sacctmgr line {n}: expected at least {max(columns[:5]) + 1} '|'-separated fields "
                             f"({ASSOC_FORMAT}), got {line!r}")
        clu, acct, user, share, grptres = (parts[c] for c in columns[:5])
        parent = parts[columns[5]] if len(columns) > 5 and len(parts) > columns[5] else ""
        if cluster and clu and clu != cluster:
            continue
        if not acct:
            raise ParseError(f"sacctmgr line {n}: empty account in {line!r}")
        if acct == "root":
            continue
        if acct not in order:
            order.append(acct)
        if user:
            users.setdefault(acct, [])
            if user not in users[acct]:
                users[acct].append(user)
            continue
        if share.isdigit():
            shares[acct] = int(share)
        elif share.lower() == "parent" or share == "":
            shares[acct] = 0
        else:
            raise ParseError(f"sacctmgr line {n}: account {acct}: bad fairshare {share!r}")
        limits[acct] = grptres_limits(grptres, f"sacctmgr line {n}: account {acct}: GrpTRES")
        parents[acct] = parent
    return [Account(name=a, shares=shares.get(a, 0), limits=limits.get(a, {}), users=tuple(users.get(a, ())),
                    parent=parents.get(a, "")) for a in order if a in shares]
