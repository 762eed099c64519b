"""The ownership file: which GPU limits in Slurm are slurm-fair's, kept where a lost database cannot take it
with it (issue 29; ``[limits] ownership_file``, docs/daemon.md "Whose limit is it").

* **What**: per cluster (Slurm's ``ClusterName``), account and GPU limit key (``"*"`` = ``gres/gpu``, else the
  type), the value slurm-fair last wrote there (-1: it cleared the limit) — the database's ``written`` table,
  kept a second time outside the database's folder.
* **When**: every round that changes limits, ``rollback`` and ``limits clear`` rewrite it (the accounts they
  gave back leave it) — atomically: a temporary file in the same folder, then ``os.replace``; mode 0640.
* **Use**: what slurm-fair wrote is the file's record updated by the database's (:func:`merged`: the database
  wins key by key). A new database beside an old file therefore knows slurm-fair's own limits: a value in Slurm
  equal to the file's is slurm-fair's (the rounds manage it, ``rollback`` and ``limits clear`` take it back),
  any other value is the site's (kept, shown as set by hand).
* **Errors**: a file that cannot be read or parsed is an :class:`OwnershipError` naming it; :func:`load` turns it
  into ``Owned.error`` (the round records it and goes on as with no record) and the file is never overwritten
  while it is unreadable (the admin moves it away). A missing file is an empty record.

:func:`parse`, :func:`render`, :func:`merged`, :func:`updated` and :func:`site_part` are pure; :func:`load` and
:func:`save` do the I/O.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import SlurmFairError
from ..statefiles import make_dirs

FORMAT = 1
FILE_MODE = 0o640
UNNAMED = "-"  # the cluster key of a backend that names no cluster (the simulator, test doubles)
MAX_BYTES = 64 * 1024 * 1024  # a larger file is refused (not read into memory)

Written = dict[str, dict[str, int]]  # account -> key -> value slurm-fair last wrote


class OwnershipError(SlurmFairError):
    """The ownership file cannot be read, parsed or written (the message names it)."""


@dataclass(frozen=True)
class Owned:
    """The ownership file as read: ``clusters`` cluster -> account -> key -> value; ``error`` why it could not
    be read (then ``clusters`` is empty and the file must not be overwritten)."""

    path: Path | None
    clusters: dict[str, Written] = field(default_factory=dict)
    error: str | None = None

    def of(self, cluster: str) -> Written:
        return {a: dict(v) for a, v in self.clusters.get(cluster or UNNAMED, {}).items()}


def parse(text: str, path: Any = "ownership file") -> dict[str, Written]:
    """cluster -> account -> key -> value from the file's text; OwnershipError naming ``path`` otherwise."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise OwnershipError(f"ownership file {path}: not valid JSON ({e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("clusters"), dict):
        raise OwnershipError(f"ownership file {path}: not a slurm-fair ownership file of format {FORMAT} "
                             '(expected {"format": 1, "clusters": {...}})')
    out: dict[str, Written] = {}
    for cluster, accounts in data["clusters"].items():
        if not isinstance(accounts, dict):
            raise OwnershipError(f"ownership file {path}: cluster {cluster!r}: expected an object of accounts")
        for account, keys in accounts.items():
            if not isinstance(keys, dict):
                raise OwnershipError(f"ownership file {path}: {cluster}/{account}: expected an object of limits")
            for k, v in keys.items():
                if isinstance(v, bool) or not isinstance(v, int) or v < -1:
                    raise OwnershipError(f"ownership file {path}: {cluster}/{account}/{k}: {v!r} is not a "
                                         "limit (an integer >= -1)")
                out.setdefault(cluster, {}).setdefault(account, {})[k] = v
    return out


def render(clusters: Mapping[str, Mapping[str, Mapping[str, int]]]) -> str:
    """The file's text (stable: sorted keys), empty clusters and accounts left out."""
    body = {c: {a: {k: int(v) for k, v in sorted(keys.items())} for a, keys in sorted(accts.items()) if keys}
            for c, accts in sorted(clusters.items())}
    body = {c: accts for c, accts in body.items() if accts}
    return json.dumps({"format": FORMAT, "written_by": "slurm-fair", "clusters": body}, indent=1,
                      sort_keys=True) + "\n"


def merged(owned: Mapping[str, Mapping[str, int]], written: Mapping[str, Mapping[str, int]]) -> Written:
    """What slurm-fair last wrote: the file's record (``owned``, one cluster's) updated key by key by the
    database's (``written``)."""
    out = {a: dict(v) for a, v in owned.items()}
    for a, keys in written.items():
        out.setdefault(a, {}).update({k: int(v) for k, v in keys.items()})
    return {a: v for a, v in out.items() if v}


def updated(clusters: Mapping[str, Mapping[str, Mapping[str, int]]], cluster: str,
            written: Mapping[str, Mapping[str, int]], forget: Iterable[str] = ()) -> dict[str, Written]:
    """``clusters`` with ``cluster``'s record updated by ``written`` (account -> key -> the value just written)
    and the accounts in ``forget`` (given back: rollback, limits clear) dropped."""
    out = {c: {a: dict(v) for a, v in accts.items()} for c, accts in clusters.items()}
    name = cluster or UNNAMED
    mine = merged(out.get(name, {}), written)
    for a in set(forget):
        mine.pop(a, None)
    out[name] = mine
    return out


def site_part(current: Mapping[str, Mapping[str, int]], written: Mapping[str, Mapping[str, int]]) -> Written:
    """The accounts' GPU limits now without the ones slurm-fair wrote as they are (equal to ``written``): what
    the site set itself."""
    out: Written = {}
    for a, lim in current.items():
        mine = written.get(a, {})
        out[a] = {k: int(v) for k, v in lim.items() if k not in mine or int(mine[k]) != int(v)}
    return out


def load(path: Path | None) -> Owned:
    """Read the file (``path`` None: off). Never raises: a file that cannot be read is ``Owned.error``."""
    if path is None:
        return Owned(None)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return Owned(path)
    except OSError as e:
        return Owned(path, error=f"ownership file {path}: cannot read: {e.strerror or e}")
    if len(raw) > MAX_BYTES:
        return Owned(path, error=f"ownership file {path}: larger than {MAX_BYTES} bytes")
    try:
        return Owned(path, parse(raw.decode("utf-8"), path))
    except UnicodeDecodeError as e:
        return Owned(path, error=f"ownership file {path}: not UTF-8 text ({e})")
    except OwnershipError as e:
        return Owned(path, error=str(e))


def save(path: Path, clusters: Mapping[str, Mapping[str, Mapping[str, int]]]) -> None:
    """Write the file atomically (a temporary file in its folder, fsynced, then renamed over it), mode 0640;
    its folder is created (0750) if missing. OwnershipError naming the file on failure."""
    path = Path(path)
    try:
        make_dirs(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            os.fchmod(fd, FILE_MODE)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(render(clusters))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as e:
        raise OwnershipError(f"ownership file {path}: cannot write: {e.strerror or e}") from None
    except SlurmFairError as e:
        raise OwnershipError(f"ownership file {path}: cannot write: {e}") from None


def record(path: Path | None, cluster: str, written: Mapping[str, Mapping[str, int]],
           forget: Iterable[str] = ()) -> str | None:
    """Add what was just written (and drop ``forget``) to the file; returns None, or why the file was not
    updated (unreadable: left as it is; a write that failed). Never raises."""
    forget = list(forget)
    if path is None or (not written and not forget):
        return None
    have = load(path)
    if have.error is not None:
        return have.error + "; not updated (move it away: slurm-fair writes a new one)"
    mine = have.of(cluster)
    if not any(a in mine for a in forget) and all(mine.get(a, {}).get(k) == int(v) for a, ch in written.items()
                                                  for k, v in ch.items()):
        return None  # nothing new: the file is not rewritten
    try:
        save(path, updated(have.clusters, cluster, written, forget))
    except OwnershipError as e:
        return str(e)
    return None


def load_for(cluster: Any, path: Path | None) -> tuple[Owned, str | None]:
    """The file (:func:`load`) and the cluster's name its records are under (None, with ``Owned.error`` set,
    when Slurm does not say it: nothing is then read from or written to the file). Never raises."""
    if path is None:
        return Owned(None), None
    try:
        name = cluster.cluster_name() or UNNAMED
    except Exception as e:  # noqa: BLE001 - the round goes on as with no record
        return Owned(path, error=f"ownership file {path}: not used, the cluster's name is unknown: {e}"), None
    return load(path), name
