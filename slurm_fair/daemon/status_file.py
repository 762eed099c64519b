"""The public status file: what every user may read about slurm-fair's last round, without the database.

``slurm-fair why JOBID`` (run by any user) combines it with the job's own record from Slurm. The daemon writes it
each round and again at each poll between rounds (``daemon.publish_status``, path ``daemon.status_file``,
default ``status.json`` beside the database).

Rules:

* **Only numbers per account and GPU type** (and the names of accounts and types, which the admins set): no job,
  no user, no string a user can set. Account and type names that are not ``[A-Za-z0-9_.-]+`` are left out, and at
  most :data:`MAX_ACCOUNTS` accounts are listed (by name), so the file stays small and plain.
* **Format** (JSON, ``format`` = :data:`FORMAT`): ``written`` (when the numbers were observed, epoch seconds),
  ``round``/``round_time``/``round_status`` (the round whose decisions it shows), ``period`` and ``stale_after``
  (seconds after ``written`` a reader calls it stale), ``policy``, ``dry_run``, ``manage_limits``, ``lend``,
  ``retype`` (Slurm can move pending jobs to another type), ``preemption`` {enabled, grace, min_runtime,
  signal, unrequeueable, ends_after (seconds a held-back job runs before it is cancelled; 0: never)}; ``types``: per GPU type {capacity, idle, largest_idle_block, lendable}; ``accounts``: per account
  {guarantee, claims, in_use (per type), limits (per type, ``*`` = the gres/gpu total, as Slurm has them),
  pending_gpus, managed, held_across (held back across all its jobs: preemption.unrequeueable)};
  ``type_order``: per account (``*`` = the default) the types its untyped jobs are given, in order (the type
  map's).
* **Writing** is atomic (:func:`slurm_fair.statefiles.write_public`: temporary file in the same folder, fsync,
  mode 0644, rename: a reader sees the old or the new file, never half) and never stops a round: a failure is
  recorded on the round.
* **Reading** (:func:`read_status`) never follows more than :data:`MAX_READ_BYTES` and names the field of a bad
  value (:class:`StatusFileError`).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ..config import Config
from ..cluster.base import ANY_GPU, Snapshot, supports_pending_retype
from ..errors import SlurmFairError
from ..statefiles import write_public
from .preemption.unrequeueable import end_after

if TYPE_CHECKING:  # the planning code (numpy) is imported where a status is built, not where one is read
    from . import plan as P

FORMAT = 1
MAX_ACCOUNTS = 20_000
MAX_READ_BYTES = 64 << 20
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")


class StatusFileError(SlurmFairError):
    """The status file cannot be read or is not a slurm-fair status file (names the field and value)."""


@dataclass(frozen=True)
class TypeStatus:
    capacity: int  # usable GPUs of the type in the managed partitions
    idle: int  # free now
    largest_idle_block: int  # most free on one node
    lendable: int  # not held by any account's claim (the round's)


@dataclass(frozen=True)
class AccountStatus:
    guarantee: Mapping[str, int] = field(default_factory=dict)  # the rounded share per type (the round's)
    claims: Mapping[str, int] = field(default_factory=dict)  # of it, held for its waiting jobs (the round's)
    in_use: Mapping[str, int] = field(default_factory=dict)  # GPUs its running jobs hold now
    limits: Mapping[str, int] = field(default_factory=dict)  # GrpTRES in Slurm now (type or "*"); absent = none
    pending_gpus: int = 0  # GPUs of its pending GPU jobs now
    managed: bool = False  # slurm-fair sets this account's limits (not left alone, limits.manage, not dry run)
    # held back across all its jobs: a job preemption would take cannot be requeued, and the demand it owes waits
    # (daemon/preemption/unrequeueable.py, issue 30): its pending GPU jobs wait until that demand runs
    held_across: bool = False
    # the site's GPU limits (type or "*") that hold its jobs (issue 41): not slurm-fair's, which it never lifts — a
    # job one of them holds is not demand (plan/binding.py); absent in a file of an earlier version
    site_limits: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PreemptionStatus:
    enabled: bool = False
    grace: float = 0.0
    min_runtime: float = 0.0
    signal: str = ""
    unrequeueable: str = ""  # preemption.unrequeueable ("" in a file from before issue 41)
    ends_after: float = 0.0  # seconds a held-back job runs before it is cancelled (0: never; unrequeueable.end_after)


@dataclass(frozen=True)
class PublicStatus:
    written: float
    round: int | None
    round_time: float
    round_status: str
    period: float
    stale_after: float
    policy: str
    dry_run: bool
    manage_limits: bool
    lend: bool
    retype: bool
    preemption: PreemptionStatus
    types: Mapping[str, TypeStatus]
    accounts: Mapping[str, AccountStatus]
    type_order: Mapping[str, tuple[str, ...]]
    truncated: int = 0  # accounts left out beyond MAX_ACCOUNTS
    format: int = FORMAT

    def account(self, name: str) -> AccountStatus:
        """The account's numbers (all zero for an account the file does not list: no guarantee, nothing used)."""
        return self.accounts.get(name) or AccountStatus()

    def age(self, now: float) -> float:
        return max(0.0, now - self.written)

    def stale(self, now: float) -> bool:
        return self.age(now) > self.stale_after


def stale_after(period: float) -> float:
    """Seconds after which a reader calls the file stale: two periods and a minute (a poll refreshes it every few
    seconds while the daemon runs; a round rewrites it every period)."""
    return 2 * float(period) + 60.0


# --------------------------------------------------------------------------------------------- building


def _counts(row: Mapping[str, Any] | None, *, limits: bool = False) -> dict[str, int]:
    """Per type counts with plain type names only (``?``, an unknown type, is left out) and no zeros; ``limits``:
    ``*`` (the gres/gpu total) kept, and zeros too (a limit of 0 holds everything back)."""
    return {str(g): int(n) for g, n in sorted((row or {}).items())
            if ((limits and g == ANY_GPU) or (_NAME.fullmatch(str(g)) and not str(g).isdigit()))
            and (limits or int(n) != 0)}


def _types(snapshot: Snapshot, cfg: Config, plan: P.Plan) -> dict[str, TypeStatus]:
    from . import plan as P

    free = P.FreeGPUs.of(snapshot, cfg.cluster.partitions)
    idle = free.totals()
    lendable = plan.lendable()
    out = {}
    for g, cap in sorted(plan.capacity.items()):
        if not _NAME.fullmatch(g):
            continue
        block = max((row.get(g, 0) for row in free.free.values()), default=0)
        out[g] = TypeStatus(capacity=int(cap), idle=int(idle.get(g, 0)), largest_idle_block=int(block),
                            lendable=int(lendable.get(g, cap)))
    return out


def build_status(snapshot: Snapshot, decisions: P.Decisions, cfg: Config, *, round_id: int | None, round_time: float,
                 round_status: str, dry_run: bool, limits: Mapping[str, Mapping[str, int]] | None = None
                 ) -> PublicStatus:
    """The status of a round (its decisions) observed in ``snapshot`` (the round's, or a later poll's). ``limits``:
    the accounts' GPU limits in Slurm (default: the snapshot's; a round passes them as it left them). The site
    limits that hold each account's jobs are the round's (``decisions.site_bounds``)."""
    from . import plan as P

    plan = decisions.plan
    in_use = P.gpus_in_use(snapshot)
    pending = P.pending_gpus(snapshot, cfg.cluster.partitions, cfg.limits.accounts)
    live = {a.name: dict(a.limits) for a in snapshot.accounts} if limits is None else limits
    managed = (set(decisions.planned) - set(decisions.left_alone)) if (cfg.limits.manage and not dry_run) else set()
    names = sorted(a for a in set(plan.accounts) | set(in_use) | set(pending) if _NAME.fullmatch(a)
                   and a not in P.NEVER_MANAGED)
    accounts = {
        a: AccountStatus(guarantee=_counts(plan.real.get(a)), claims=_counts(plan.claims.get(a)),
                         in_use=_counts(in_use.get(a)), limits=_counts(live.get(a), limits=True),
                         pending_gpus=int(pending.get(a, 0)), managed=a in managed,
                         held_across=a in decisions.held_why,
                         site_limits=_counts(decisions.site_bounds.get(a), limits=True))
        for a in names[:MAX_ACCOUNTS]
    }
    order = {k: tuple(g for g, _n in t.types if _NAME.fullmatch(g))
             for k, t in sorted(decisions.targets.items()) if k == P.DEFAULT_TARGET or k in accounts}
    pre = cfg.preemption
    return PublicStatus(
        written=float(snapshot.taken_at), round=round_id, round_time=float(round_time), round_status=round_status,
        period=float(cfg.daemon.period), stale_after=stale_after(cfg.daemon.period), policy=str(cfg.policy.name),
        dry_run=bool(dry_run), manage_limits=bool(cfg.limits.manage), lend=bool(plan.lend),
        retype=supports_pending_retype(snapshot.slurm_version),
        preemption=PreemptionStatus(enabled=bool(pre.enabled), grace=float(pre.grace),
                                    min_runtime=float(pre.min_runtime), signal=str(pre.signal),
                                    unrequeueable=str(pre.unrequeueable), ends_after=end_after(pre)),
        types=_types(snapshot, cfg, plan), accounts=accounts, type_order=order,
        truncated=max(0, len(names) - MAX_ACCOUNTS))


def refreshed(status: PublicStatus, snapshot: Snapshot, decisions: P.Decisions, cfg: Config) -> PublicStatus:
    """``status`` with what a later poll's snapshot shows (GPUs in use, idle, pending, limits in Slurm); the round's
    guarantees, claims and type order stay."""
    new = build_status(snapshot, decisions, cfg, round_id=status.round, round_time=status.round_time,
                       round_status=status.round_status, dry_run=status.dry_run)
    return replace(new, type_order=status.type_order)


# --------------------------------------------------------------------------------------------- text


def render(status: PublicStatus) -> str:
    """The file's text: one JSON object, keys sorted, one line per account (small diffs, readable)."""
    d = asdict(status)
    d["type_order"] = {k: list(v) for k, v in status.type_order.items()}
    accounts = d.pop("accounts")
    head = json.dumps(d, sort_keys=True, allow_nan=False)
    body = ",\n".join(f"  {json.dumps(a)}: {json.dumps(v, sort_keys=True)}" for a, v in accounts.items())
    if not accounts:
        return head[:-1] + ', "accounts": {}}\n'
    return head[:-1] + ', "accounts": {\n' + body + "\n}}\n"


def _need(d: Mapping[str, Any], key: str, types: tuple[type, ...], where: str) -> Any:
    if key not in d:
        raise StatusFileError(f"{where}{key}: missing")
    v = d[key]
    if (isinstance(v, bool) and bool not in types) or not isinstance(v, types):
        raise StatusFileError(f"{where}{key}: wrong type (got {v!r:.80})")
    if isinstance(v, float) and not math.isfinite(v):
        raise StatusFileError(f"{where}{key}: must be a finite number (got {v!r})")
    return v


def _count_map(v: Any, where: str, *, any_ok: bool = False) -> dict[str, int]:
    if not isinstance(v, Mapping):
        raise StatusFileError(f"{where}: must be an object (got {v!r:.80})")
    out = {}
    for k, n in v.items():
        if not (_NAME.fullmatch(k) or (any_ok and k == ANY_GPU)):
            raise StatusFileError(f"{where}: bad GPU type {k!r:.80}")
        if isinstance(n, bool) or not isinstance(n, int):
            raise StatusFileError(f"{where}.{k}: must be an integer (got {n!r:.80})")
        out[k] = n
    return out


NUM = (int, float)


def parse(text: str) -> PublicStatus:
    """A status file's text -> PublicStatus; StatusFileError naming the field of anything that is not right."""
    try:
        d = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise StatusFileError(f"not JSON: {e}") from None
    if not isinstance(d, dict):
        raise StatusFileError(f"must be a JSON object (got {type(d).__name__})")
    fmt = _need(d, "format", (int,), "")
    if fmt != FORMAT:
        raise StatusFileError(f"format: {fmt!r} is not a format this slurm-fair reads ({FORMAT}); "
                              "is the daemon another version?")
    rnd = d.get("round")
    if rnd is not None and (isinstance(rnd, bool) or not isinstance(rnd, int)):
        raise StatusFileError(f"round: must be an integer or null (got {rnd!r:.80})")
    pre = _need(d, "preemption", (dict,), "")
    types = {}
    for g, t in _need(d, "types", (dict,), "").items():
        if not _NAME.fullmatch(g) or not isinstance(t, dict):
            raise StatusFileError(f"types.{g!s:.40}: bad GPU type entry")
        types[g] = TypeStatus(**{k: int(_need(t, k, (int,), f"types.{g}.")) for k in
                                 ("capacity", "idle", "largest_idle_block", "lendable")})
    accounts = {}
    for a, v in _need(d, "accounts", (dict,), "").items():
        w = f"accounts.{a!s:.40}"
        if not _NAME.fullmatch(a) or not isinstance(v, dict):
            raise StatusFileError(f"{w}: bad account entry")
        accounts[a] = AccountStatus(
            guarantee=_count_map(_need(v, "guarantee", (dict,), w + "."), w + ".guarantee"),
            claims=_count_map(_need(v, "claims", (dict,), w + "."), w + ".claims"),
            in_use=_count_map(_need(v, "in_use", (dict,), w + "."), w + ".in_use"),
            limits=_count_map(_need(v, "limits", (dict,), w + "."), w + ".limits", any_ok=True),
            pending_gpus=_need(v, "pending_gpus", (int,), w + "."), managed=_need(v, "managed", (bool,), w + "."),
            held_across=v.get("held_across", False) is True,  # absent in a file of an earlier version
            site_limits=_count_map(v.get("site_limits", {}), w + ".site_limits", any_ok=True))
    order = {}
    for k, v in _need(d, "type_order", (dict,), "").items():
        if not isinstance(v, list) or not all(isinstance(g, str) and _NAME.fullmatch(g) for g in v):
            raise StatusFileError(f"type_order.{k!s:.40}: must be a list of GPU types")
        order[k] = tuple(v)
    return PublicStatus(
        written=float(_need(d, "written", NUM, "")), round=rnd, round_time=float(_need(d, "round_time", NUM, "")),
        round_status=_need(d, "round_status", (str,), ""), period=float(_need(d, "period", NUM, "")),
        stale_after=float(_need(d, "stale_after", NUM, "")), policy=_need(d, "policy", (str,), ""),
        dry_run=_need(d, "dry_run", (bool,), ""), manage_limits=_need(d, "manage_limits", (bool,), ""),
        lend=_need(d, "lend", (bool,), ""), retype=_need(d, "retype", (bool,), ""),
        preemption=PreemptionStatus(enabled=_need(pre, "enabled", (bool,), "preemption."),
                                    grace=float(_need(pre, "grace", NUM, "preemption.")),
                                    min_runtime=float(_need(pre, "min_runtime", NUM, "preemption.")),
                                    signal=_need(pre, "signal", (str,), "preemption."),
                                    # optional: files written before issue 41 lack them
                                    unrequeueable=_need(pre, "unrequeueable", (str,), "preemption.")
                                    if "unrequeueable" in pre else "",
                                    ends_after=float(_need(pre, "ends_after", NUM, "preemption."))
                                    if "ends_after" in pre else 0.0),
        types=types, accounts=accounts, type_order=order, truncated=int(d.get("truncated") or 0), format=fmt)


# --------------------------------------------------------------------------------------------- files


def write_status(path: str | os.PathLike, status: PublicStatus) -> None:
    """Write the file atomically, mode 0644 (module docstring). Raises OSError."""
    write_public(path, render(status), now=status.written)


def read_status(path: str | os.PathLike) -> PublicStatus:
    """Read and check a status file; StatusFileError saying why it cannot be used (missing, unreadable, too big,
    not a status file)."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            data = f.read(MAX_READ_BYTES + 1)
    except FileNotFoundError:
        raise StatusFileError(f"{p}: no such file (is the slurm-fair daemon running, with daemon.publish_status "
                              "on?)") from None
    except OSError as e:
        raise StatusFileError(f"{p}: cannot read: {e.strerror or e}") from None
    if len(data) > MAX_READ_BYTES:
        raise StatusFileError(f"{p}: larger than {MAX_READ_BYTES} bytes: not a slurm-fair status file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise StatusFileError(f"{p}: not UTF-8 text (byte {e.start})") from None
    try:
        return parse(text)
    except StatusFileError as e:
        raise StatusFileError(f"{p}: {e}") from None


def searchable(folder: str | os.PathLike) -> str:
    """"" when every user can reach files in ``folder`` (it and every folder above it o+x), else why not."""
    d = Path(folder).absolute()
    try:
        for x in (d, *d.parents):
            if not os.stat(x).st_mode & 0o001:
                return f"the folder {x} is not searchable by other users (mode {os.stat(x).st_mode & 0o777:o})"
    except OSError as e:
        return f"{d}: {e.strerror or e}"
    return ""


def world_readable(path: str | os.PathLike) -> str:
    """"" when every user can read ``path`` (the file o+r, every folder above it o+x), else why not."""
    p = Path(path).absolute()
    try:
        if not os.stat(p).st_mode & 0o004:
            return f"{p} is not readable by other users (mode {os.stat(p).st_mode & 0o777:o})"
    except OSError as e:
        return f"{p}: {e.strerror or e}"
    return searchable(p.parent)
