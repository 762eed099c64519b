"""The GPU type map file that ``etc/job_submit.lua`` reads to type untyped GPU requests: render it and publish it.

The decision is :func:`slurm_fair.daemon.plan.untyped_targets` (pure); this module only renders and writes.
The round and the daemon's polls both publish through :func:`publish_type_map`.

Rules:

* Format (what the Lua script parses), in this order: the identity line ``#@map ID T`` (below), the fresh lines —
  ``#@expires EPOCH`` (below) and ``#@soon`` lines (below) —, ``#@index G I N``, then G bytes of head: ``#``
  comment lines, an ``@classes`` line (where a job's class is read), ``#@free`` (below), ``#@listed-only``
  (below), ``#@partition NAME TYPE,...`` lines (the GPU types each partition's nodes have,
  :func:`.plan.partition_types`; job_submit.lua types a job only among the types of its partitions; to a script
  older than these lines they are comments, so it types as before), the ``* TYPE:ROOM[:BLOCK],... REASON`` line
  (the default), the ``*/CLASS`` lines and ``#@types TYPE,...`` (every type of the account lines); I bytes of
  index, ``#@at ACCOUNT OFFSET LENGTH`` per account (N); then each account's section, OFFSET bytes after the
  index, in account order: its ``ACCOUNT TYPE:ROOM[:BLOCK],... REASON`` line, its ``#@untyped``, its
  ``ACCOUNT/CLASS TYPE[:0],...`` class lines (``:0``: a type the class runs on at under half its best speed,
  never left to chance by an untyped request) with their ``#@speed``. The types of a line are in the order
  job_submit.lua hands them out, each with the GPUs it may give there and the largest job that fits there now
  (:class:`~.plan.Target`); ``|`` instead of ``,`` starts the next tier (class lines reorder within a tier only).
  Partitions, accounts and types that the script would refuse (anything but ``[A-Za-z0-9_.-]``) are left out,
  so a published map is never "broken"; reasons are flattened to one line of printable text. The script reads
  the head once per content and an account's section when one of its jobs needs it (the first parse after a
  change costs it well under a millisecond at 1 000 accounts x 20 classes, instead of ~300 ms for the whole
  map); the index lines are comments to an older script, which parses the whole map as before.
* Writing is atomic (:func:`slurm_fair.statefiles.write_public`): a temporary file in the same folder, ``fsync``,
  mode 0644, mtime set explicitly to now, then ``os.replace`` over the map. A submission reads either the old
  or the new map, never half.
* Identity: ``#@map ID T``: ID is the hash of everything from the ``#@index`` line on (:func:`content_id`), so it
  changes only when the content does; a poll that changes nothing publishes the same ID and job_submit.lua reads
  only the fresh lines again (issue 40). T is the time of the snapshot the map was computed from; job_submit.lua
  counts the rooms it hands out per ``ID T`` (not per map text): a map computed from a fresh snapshot already
  counts the jobs typed before it (pending typed jobs hold their room), so its rooms start unspent, and a new
  daemon's first map never inherits what the controller's Lua state spent against an earlier map with the same
  text (issue 28) — but for the jobs typed between the snapshot and the publication, which it did not see: the
  script still counts what it handed out from T on. To a script older than this line it is a comment.
* What is not content: what carries time and changes with every publication — T, ``#@expires`` (staleness: the
  script reads it again with every publication, without a new ID) and ``#@soon`` (absolute times of expected
  starts, which move with the clock and with running jobs past their expected end).
* ``#@free TYPE:N,...`` (:attr:`.plan.Target.pool`): the GPUs idle per type for everyone (less what pending
  typed jobs will take); the script hands out free room (entries with a BLOCK) on a type to all accounts
  together at most that many GPUs per map; a comment to older scripts.
* ``#@soon TYPE SIZE:EPOCH,...`` (:attr:`.plan.Target.soon`, :func:`.plan.backfill.expected_starts`): per GPU
  type, when a job of SIZE GPUs could start there as Slurm's backfill plans it from the running jobs' time
  limits; ``#@speed ACCOUNT/CLASS TYPE:PERMILLE,...`` (:attr:`.plan.Target.speeds`): the class's speed on each
  type in thousandths of its best. With both, the script does not type a job with a time limit onto a type
  slow for its class (under half its best) when another type is expected to finish it sooner, waiting
  included (docs/typing.md). Comments to older scripts.
* ``#@untyped ACCOUNT N`` (:attr:`.plan.Target.untyped`): the GPUs of untyped requests the account may leave
  untyped when no type of its line has room for a job (Slurm then gives it whichever type frees first; only the
  account's total ``gres/gpu`` limit binds it); a comment to older scripts.
* The identity line comes first: job_submit.lua keeps the parsed map in its Lua state keyed by that line and
  the file's size, so an untyped submission reads one line of the file and reads more only once per publication.
* ``#@expires EPOCH``: the publication time plus ``submit.max_age`` (:func:`max_age`: 0 = 3 x
  ``daemon.period``, at least 60 s); past it the script ignores the map (the daemon stopped publishing: a dead daemon's rooms
  must not keep typing jobs) and leaves untyped requests as they are. A comment to older scripts.
* A map always says what happens to an account without a line: a ``*`` line, or — only when no ``*`` line can
  be written because the targets name no GPU type the script accepts (no GPU node in the managed partitions)
  — ``#@listed-only`` (such accounts' requests are left as they are, by this script and older ones: a map of
  only its header made older scripts reject every untyped GPU job).
* The file is rewritten only when its text would change; with T and ``#@expires`` that is every publication
  (under the same ID while the content is the same).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..statefiles import write_public

if TYPE_CHECKING:  # the planning code (numpy) is imported by the round and the poll, not by this module
    from ..config import Config
    from .plan import PartitionTypes, PartitionView, Target

_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
HEADER = (
    "# slurm-fair GPU type map, rewritten by the daemon each round: do not edit.\n"
    "# Read by job_submit.lua (head once per #@map ID, sections when needed): ACCOUNT TYPE:ROOM,... REASON;\n"
    "# '*' = accounts without a line;\n"
    "# '#@partition NAME TYPE,...': a job is typed only among the GPU types of its partitions.\n"
)


CONTENT_ID = "#content"  # render_map's map_id for "the hash of the content" (what the daemon publishes)


def _valid_type(g: str) -> bool:
    return bool(_NAME.fullmatch(g)) and not g.isdigit()


def max_age(cfg: Any) -> float:
    """Seconds a published map stays valid: ``submit.max_age``, or when it is 0 three rounds (3 x
    ``daemon.period``) and at least a minute (a one-shot round of a short test period is not stale at once)."""
    return float(cfg.submit.max_age) or max(3.0 * float(cfg.daemon.period), 60.0)


NO_DEFAULT = ("# no '*' line: the targets name no GPU type (no GPU node in the managed partitions?): "
              "untyped requests are left as they are")


def _section_lines(k: str, tg: Target) -> list[str]:
    """The map lines of one target key (account, ``*``, ``ACCOUNT/CLASS`` or ``*/CLASS``); [] for one the script
    would refuse."""
    from .plan import DEFAULT_TARGET
    types = [(g, int(n)) for g, n in tg.types if _valid_type(g) and int(n) >= 0]
    acct, _, cls = k.partition("/")
    if (acct != DEFAULT_TARGET and not _NAME.fullmatch(acct)) or (cls and not _NAME.fullmatch(cls)) or not types:
        return []
    if cls:  # TYPE:0: slow for the class (never left untyped where it could land there)
        out = [f"{k} {','.join(g + (':0' if g in tg.slow else '') for g, _n in types)}"]
        speeds = [f"{g}:{int(tg.speeds[g])}" for g, _n in types if g in tg.speeds and 0 < int(tg.speeds[g]) <= 1000]
        if speeds:
            out.append(f"#@speed {k} {','.join(speeds)}")
        return out
    why = " ".join("".join(ch if ch.isprintable() else " " for ch in (tg.reason or "")).split())
    tier = dict(zip((g for g, _n in tg.types), tg.tiers)) if tg.tiers else {}
    field = ""
    for i, (g, n) in enumerate(types):
        if i:
            field += "|" if tier.get(g, 0) != tier.get(types[i - 1][0], 0) else ","
        field += f"{g}:{n}" + (f":{int(tg.blocks[g])}" if g in tg.blocks else "")
    out = [f"{k} {field} {why}".rstrip()]
    if tg.untyped > 0 and acct != DEFAULT_TARGET:
        out.append(f"#@untyped {k} {int(tg.untyped)}")
    return out


def _block(lines: Sequence[str]) -> str:
    return "".join(ln + "\n" for ln in lines)


def content_id(content: str) -> str:
    """The map's identity: a hash of its content (everything but the fresh lines: ``#@map``, ``#@expires``,
    ``#@soon``), so that it changes only when the content does."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()[:16]


def render_map(targets: Mapping[str, Target], class_order: Sequence[str] = ("comment", "wckey", "name"),
               partitions: Sequence[PartitionTypes] = (), listed_only: bool = False, map_id: str | None = None,
               taken_at: float | None = None, expires: float | None = None) -> str:
    """The map file's text for ``{account: Target}`` (``"*"`` = default line; ``account/class`` keys are class
    lines: the order of types alone), the ``@classes`` line (``classes.order``) and one
    ``#@partition NAME TYPE,...`` line per partition (by name; a partition or type the script would refuse is
    left out: untyped jobs in a partition without a line pass unchanged), in the layout of the module docstring.
    ``listed_only`` (a pilot, ``limits.accounts``) adds ``#@listed-only``: job_submit.lua leaves the untyped
    requests of accounts without a line as they are (instead of refusing them when there is no ``*`` line).
    ``map_id`` adds ``#@map ID [T]`` as the first line: :data:`CONTENT_ID` (what the daemon writes) the hash of
    the content (:func:`content_id`), else a token of ``[A-Za-z0-9_.-]`` as given; with ``taken_at`` the time
    its snapshot was taken (unix seconds, rounded down: what the script handed out from then on still counts
    against this map, the snapshot did not see it). ``expires`` (unix seconds) adds ``#@expires EPOCH``; an
    account line's :attr:`~.plan.Target.untyped` room adds ``#@untyped ACCOUNT N``. Without a ``*`` line to
    write (and not ``listed_only``) the map gets ``#@listed-only`` (module docstring)."""
    from .plan import DEFAULT_TARGET
    if map_id is not None and map_id != CONTENT_ID and not _NAME.fullmatch(map_id):
        raise ValueError(f"map_id: {map_id!r} is not a token of [A-Za-z0-9_.-]")
    fresh = []
    if expires is not None:
        fresh.append(f"#@expires {int(expires)}")
    soon = next((tg.soon for tg in targets.values() if tg.soon), {})
    for g, row in sorted(soon.items()):
        cells = [f"{int(n)}:{int(at)}" for n, at in sorted(row.items()) if int(n) > 0 and int(at) >= 0]
        if _valid_type(g) and cells:
            fresh.append(f"#@soon {g} {','.join(cells)}")
    glob = [HEADER.rstrip("\n"), "@classes " + ",".join(class_order)]
    pool = next((tg.pool for tg in targets.values() if tg.pool), {})
    cells = [f"{g}:{int(n)}" for g, n in sorted(pool.items()) if _valid_type(g) and int(n) >= 0]
    if cells:
        glob.append("#@free " + ",".join(cells))
    listed_at = len(glob)
    for part in sorted(partitions, key=lambda p: p.name):
        types = sorted({g for g in part.types if _valid_type(g)})
        if _NAME.fullmatch(part.name) and types:
            glob.append(f"#@partition {part.name} {','.join(types)}")
    default = _section_lines(DEFAULT_TARGET, targets[DEFAULT_TARGET]) if DEFAULT_TARGET in targets else []
    if listed_only:
        glob.insert(listed_at, "#@listed-only")
    elif not default:
        glob[listed_at:listed_at] = [NO_DEFAULT, "#@listed-only"]
    sections: dict[str, list[str]] = {}
    for k in sorted(targets, key=lambda k: k.partition("/")[::2]):  # an account, then its class lines
        if k == DEFAULT_TARGET:
            continue
        lines = _section_lines(k, targets[k])
        if lines:
            sections.setdefault(k.partition("/")[0], []).extend(lines)
    shared = default + sections.pop(DEFAULT_TARGET, [])  # '*' and '*/CLASS' lines: read with the head
    kinds = sorted({g for k, tg in targets.items() if "/" not in k and _section_lines(k, tg)
                    for g, n in tg.types if _valid_type(g) and int(n) >= 0})  # what #@untyped may leave to Slurm
    if kinds:
        shared.append("#@types " + ",".join(kinds))
    head = _block(glob + shared)
    index, body, at = [], [], 0
    for acct, lines in sections.items():
        block = _block(lines)
        size = len(block.encode("utf-8"))
        index.append(f"#@at {acct} {at} {size}")
        body.append(block)
        at += size
    index_text = _block(index)
    content = (f"#@index {len(head.encode('utf-8'))} {len(index_text.encode('utf-8'))} {len(index)}\n"
               + head + index_text + "".join(body))
    first = ""
    if map_id is not None:
        ident = content_id(content) if map_id == CONTENT_ID else map_id
        first = _block([f"#@map {ident}" + (f" {int(taken_at)}" if taken_at is not None else "")])
    return first + _block(fresh) + content


def write_type_map(path: str | os.PathLike, targets: Mapping[str, Target],
            class_order: Sequence[str] = ("comment", "wckey", "name"),
            partitions: Sequence[PartitionTypes] = (), listed_only: bool = False,
            map_id: str | None = None, taken_at: float | None = None, max_age: float | None = None,
            now: float | None = None) -> bool:
    """Render and write the map (identity ``map_id``, default the hash of its content: :func:`content_id`) for a
    snapshot taken at ``taken_at``, valid ``max_age`` seconds from ``now`` (default the time of writing; None:
    no ``#@expires``); True if the file changed (with ``taken_at`` or ``max_age``, every publication: its fresh
    lines change; the identity changes only with the content)."""
    t = time.time() if now is None else now
    return write_public(path, render_map(targets, class_order, partitions, listed_only,
                                      CONTENT_ID if map_id is None else map_id, taken_at,
                                      None if max_age is None else t + max_age), now=t)


def publish_type_map(cfg: Config, targets: Mapping[str, Target], view: PartitionView) -> bool:
    """Publish the map of ``targets`` at ``submit.type_map`` (``cfg.type_map_path``, not None): the
    ``#@partition`` lines of the managed partitions (``view.types``), ``@listed-only`` for a pilot
    (``limits.accounts``), the snapshot's time and ``#@expires`` :func:`max_age` from now. What the round
    (``daemon/round.py``) and each poll between rounds (``daemon/service.py``) call; True if the file changed.
    Raises OSError when it cannot be written."""
    return write_type_map(cfg.type_map_path, targets, cfg.classes.order, view.types, bool(cfg.limits.accounts),
                          taken_at=view.whole.taken_at, max_age=max_age(cfg))
