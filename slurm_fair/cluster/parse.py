"""Pure parsers: Slurm JSON (22.05 ``openapi/v0.0.38`` and 24.11 ``data_parser/v0.0.42`` layouts) and
``sacctmgr -P`` text -> the dataclasses of :mod:`slurm_fair.cluster.base`.

No I/O here.  Every function takes text or decoded JSON and either returns dataclasses or raises
:class:`~slurm_fair.cluster.errors.ParseError` naming what it could not understand.

Layout differences handled (see shared/notes §B3):

* numbers: 22.05 plain int/null, 24.11 ``{"set": bool, "infinite": bool, "number": N}``;
* states: 22.05 ``"PENDING"`` / node ``"mixed"`` + ``state_flags``, 24.11 lists;
* GPU requests: ``gres:gpu:v100:2`` (22.05) vs ``gres/gpu:v100:2`` / ``gres/gpu=1`` (24.11), in
  ``tres_per_node`` (``--gres``, ``--gpus-per-node``), ``tres_per_job`` (``--gpus``), ``tres_per_task``,
  ``tres_per_socket``; ``tres_req_str`` as the fallback total;
* allocations: ``tres_alloc_str`` (``gres/gpu:v100=1``) and ``gres_detail`` (``gpu:v100:1(IDX:0)``);
* nodes: 22.05 ``sinfo --json`` ``nodes[]`` and 24.11 ``scontrol show node --json`` ``nodes[]``
  (24.11's ``sinfo --json`` is a grouped summary and is rejected with a hint).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Iterable, Mapping

from .base import ANY_GPU, Account, Job, Node
from .blocked import blocked_reason
from .errors import ClusterUnreachable, ParseError

# Untyped GPUs on a node whose gres.conf gives no type are counted under this name.
UNTYPED = "gpu"

_ACTIVE_STATES = ("PENDING", "RUNNING")

# stderr / JSON error texts that mean "slurmctld or slurmdbd did not answer"
UNREACHABLE_PHRASES = (
    "unable to contact slurm controller",
    "connection refused",
    "socket timed out",
    "unable to establish a connection",
    "unable to connect to database",
    "problem talking to the database",
    "persistent connection",
    "could not establish a configuration source",
    "zero bytes were transmitted",
    "communication connection failure",
    "connection timed out",
)


# ------------------------------------------------------------------------------------------------
# generic helpers
def load_json(text: str | bytes | Mapping[str, Any], what: str) -> dict[str, Any]:
    """Decode a command's JSON output; ``what`` names the command in errors."""
    if isinstance(text, Mapping):
        return dict(text)
    try:
        data = json.loads(text)
    except (ValueError, TypeError) as e:
        head = (text[:80] if isinstance(text, (str, bytes)) else repr(text))
        raise ParseError(f"{what}: output is not JSON ({e}); it starts with {head!r}") from None
    if not isinstance(data, dict):
        raise ParseError(f"{what}: expected a JSON object at the top, got {type(data).__name__}")
    errors = data.get("errors") or []
    if errors:
        if any(p in json.dumps(errors).lower() for p in UNREACHABLE_PHRASES):
            raise ClusterUnreachable(f"{what}: {errors!r}"[:500])
        raise ParseError(f"{what}: Slurm reported errors: {errors!r}"[:500])
    return data


def num(value: Any, field: str = "number") -> int | float | None:
    """A Slurm number in either layout: int, null, or ``{"set","infinite","number"}``.

    With the ``+complex`` data_parser flag (24.11) numbers are plain, infinite is ``"Infinity"`` and
    unset is null.  Returns an int, ``math.inf`` for infinite, or None for unset/null."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ParseError(f"{field}: expected a number, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.lower() in ("infinity", "infinite", "unlimited"):
        return math.inf  # 24.11 with the data_parser "+complex" flag
    if isinstance(value, dict) and "number" in value:
        if value.get("infinite"):
            return math.inf
        if not value.get("set", True):
            return None
        return num(value["number"], field)
    raise ParseError(f"{field}: expected a number, got {value!r}")


def _int(value: Any, field: str, default: int = 0) -> int:
    v = num(value, field)
    if v is None or v == math.inf:
        return default
    return int(v)


def _minutes(value: Any, field: str) -> int | None:
    """A time limit in minutes (either layout); None for unlimited, unset, or Slurm's NO_VAL/INFINITE."""
    v = num(value, field)
    if v is None or v == math.inf or v < 0 or v >= 0xFFFFFFFE:
        return None
    return int(v)


def _flag(value: Any, field: str, default: bool = False) -> bool:
    """A boolean field: true/false (both layouts), 0/1 (pyslurm), absent or null = ``default``."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "0", "1"):
        return value.lower() in ("true", "yes", "1")
    raise ParseError(f"{field}: expected true or false, got {value!r}")


def _str(rec: Mapping[str, Any], key: str, where: str) -> str:
    v = rec.get(key)
    if v is None:
        return ""
    if not isinstance(v, str):
        raise ParseError(f"{where}.{key}: expected a string, got {v!r}")
    return v


def _states(value: Any, flags: Any = None, where: str = "state") -> tuple[str, ...]:
    if isinstance(value, str):
        out = [value]
    elif isinstance(value, list) and all(isinstance(s, str) for s in value):
        out = list(value)
    else:
        raise ParseError(f"{where}: expected a string or a list of strings, got {value!r}")
    if flags:
        if not isinstance(flags, list):
            raise ParseError(f"{where}_flags: expected a list, got {flags!r}")
        out += [str(f) for f in flags]
    return tuple(s.upper() for s in out if s)


def slurm_version(meta: Mapping[str, Any]) -> str:
    """'22.05.8' from either envelope (``meta.Slurm`` with int parts, or ``meta.slurm`` with strings)."""
    s = meta.get("slurm") or meta.get("Slurm")
    if not isinstance(s, dict):
        raise ParseError(f"meta: no Slurm version block in {sorted(meta)}")
    if isinstance(s.get("release"), str) and s["release"]:
        return s["release"]
    v = s.get("version") or {}
    try:
        return f"{int(v['major']):02d}.{int(v['minor']):02d}.{int(v['micro'])}"
    except (KeyError, TypeError, ValueError):
        raise ParseError(f"meta.slurm.version: cannot read {v!r}") from None


_VERSION_RE = re.compile(r"\b(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version_output(text: str) -> str:
    """``slurm-wlm 22.05.8`` / ``slurm 24.11.5`` (``scontrol --version``) -> ``22.05.8``."""
    m = _VERSION_RE.search(text or "")
    if not m:
        raise ParseError(f"--version: no version number in {text.strip()[:100]!r}")
    return m.group(0)


# ------------------------------------------------------------------------------------------------
# GPU strings
def _parse_count(s: str, where: str) -> int:
    m = re.fullmatch(r"(\d+)([kKmMgG]?)", s)
    if not m:
        raise ParseError(f"{where}: bad GPU count {s!r}")
    mult = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}[m.group(2).lower()]
    return int(m.group(1)) * mult


def gpu_requests(spec: str, where: str = "tres") -> list[tuple[str | None, int]]:
    """GPU entries of a ``tres_per_*`` value -> [(type or None, count)].

    Accepts ``gres:gpu:2``, ``gres:gpu``, ``gres:gpu:v100``, ``gres:gpu:v100:2`` (22.05),
    ``gres/gpu:2``, ``gres/gpu:v100:2``, ``gres/gpu=1``, ``gres/gpu:v100=1`` (24.11) and bare ``gpu:2``;
    other entries (``cpu=4``, ``gres:mps:100``, ``license/...``) are ignored."""
    out: list[tuple[str | None, int]] = []
    if not spec or spec in ("N/A", "(null)"):
        return out
    for entry in spec.split(","):
        entry = entry.strip()
        if not entry:
            continue
        for prefix in ("gres:", "gres/"):
            if entry.startswith(prefix):
                entry = entry[len(prefix):]
                break
        name, _, rest = entry.partition(":")
        name, eq, eqcount = name.partition("=")
        if name != "gpu":
            continue
        gtype: str | None = None
        count = 1
        if eq:  # gres/gpu=1
            if rest:
                raise ParseError(f"{where}: cannot parse GPU entry {entry!r}")
            count = _parse_count(eqcount, where)
        elif rest:
            t, eq2, c2 = rest.partition("=")
            if eq2:  # gres/gpu:v100=1
                gtype, count = t, _parse_count(c2, where)
            else:
                parts = rest.split(":")
                if len(parts) == 1:
                    if parts[0].isdigit() or re.fullmatch(r"\d+[kKmMgG]", parts[0]):
                        count = _parse_count(parts[0], where)
                    else:
                        gtype = parts[0]
                elif len(parts) == 2:
                    gtype, count = parts[0], _parse_count(parts[1], where)
                else:
                    raise ParseError(f"{where}: cannot parse GPU entry {entry!r}")
        if gtype is not None and not re.fullmatch(r"[A-Za-z0-9_.\-]+", gtype):
            raise ParseError(f"{where}: bad GPU type {gtype!r} in {entry!r}")
        out.append((gtype, count))
    return out


def tres_gpus(tres: str, where: str = "tres") -> tuple[int, dict[str, int]]:
    """A TRES string (``cpu=1,gres/gpu=2,gres/gpu:v100=2``) -> (untyped total, {type: count})."""
    total = 0
    typed: dict[str, int] = {}
    if not tres or tres in ("N/A", "(null)"):
        return 0, typed
    for entry in tres.split(","):
        key, eq, value = entry.strip().partition("=")
        if not key.startswith("gres/gpu"):
            continue
        if not eq:
            raise ParseError(f"{where}: GPU entry without '=' in {tres!r}")
        count = _parse_count(value, where)
        if key == "gres/gpu":
            total += count
        elif key.startswith("gres/gpu:"):
            typed[key[len("gres/gpu:"):]] = typed.get(key[len("gres/gpu:"):], 0) + count
        # gres/gpumem, gres/gpuutil (24.11) are not GPUs
    return total, typed


_GRES_ITEM = re.compile(r"gpu(?::([A-Za-z0-9_.\-]+))?(?::(\d+[kKmMgG]?))?(?:\([^)]*\))?$")


def gres_gpus(gres: str | list[str] | None, where: str = "gres") -> dict[str, int]:
    """Node ``gres``/``gres_used`` or job ``gres_detail`` -> {type: count}.

    ``gpu:v100:2,gpu:k80:2``, ``gpu:v100:0(IDX:N/A),gpu:k80:1(IDX:2)``, ``gpu:a100:4(S:0-1)``,
    ``["gpu:v100:1(IDX:0)"]``, ``gres:gpu:v100:1(IDX:0)``; untyped GPUs count under ``UNTYPED``."""
    if gres is None:
        return {}
    items: list[str]
    if isinstance(gres, list):
        items = []
        for g in gres:
            if not isinstance(g, str):
                raise ParseError(f"{where}: expected strings, got {g!r}")
            items += _split_gres(g)
    elif isinstance(gres, str):
        items = _split_gres(gres)
    else:
        raise ParseError(f"{where}: expected a string or list, got {gres!r}")
    out: dict[str, int] = {}
    for item in items:
        for prefix in ("gres:", "gres/"):
            if item.startswith(prefix):
                item = item[len(prefix):]
        if item.split(":", 1)[0].split("(", 1)[0] != "gpu":
            continue  # other GRES (mps, shard, ...)
        m = _GRES_ITEM.match(item)
        if not m:
            raise ParseError(f"{where}: cannot parse GPU entry {item!r}")
        gtype, count = m.group(1), m.group(2)
        if gtype is not None and gtype.isdigit() and count is None:  # gpu:4 (untyped)
            gtype, count = None, gtype
        n = _parse_count(count, where) if count is not None else 1
        key = gtype or UNTYPED
        out[key] = out.get(key, 0) + n
    return out


def _split_gres(s: str) -> list[str]:
    """Split on commas that are not inside parentheses (``gpu:2(IDX:0,2)``)."""
    if s in ("", "N/A", "(null)"):
        return []
    items, depth, cur = [], 0, []
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    items.append("".join(cur))
    return [i.strip() for i in items if i.strip()]


# ------------------------------------------------------------------------------------------------
# jobs
def _job_gpu_request(rec: Mapping[str, Any], nodes: int, where: str) -> tuple[int, str | None]:
    """(GPUs in total, type or None) from the ``tres_per_*`` fields, falling back to ``tres_req_str``."""
    total = 0
    types: list[str] = []
    any_entry = False
    per_socket_seen = False
    for key in ("tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket"):
        spec = _str(rec, key, where)
        if not spec:
            continue
        if key == "tres_per_node":
            mult: int | None = nodes
        elif key == "tres_per_job":
            mult = 1
        elif key == "tres_per_task":
            mult = max(_int(rec.get("tasks"), f"{where}.tasks", 1), 1)
        else:
            mult = None
        for gtype, count in gpu_requests(spec, f"{where}.{key}"):
            any_entry = True
            if gtype:
                types.append(gtype)
            if mult is None:
                per_socket_seen = True
            else:
                total += count * mult
    if not any_entry or per_socket_seen:
        req_total, req_typed = tres_gpus(_str(rec, "tres_req_str", where), f"{where}.tres_req_str")
        # --gpus-per-socket (and anything we did not see above): trust Slurm's computed request
        total = max(total, req_total, sum(req_typed.values()))
        if not types:
            types = [t for t, c in req_typed.items() if c]
    gtype = None
    if types:
        distinct = sorted(set(types))
        gtype = distinct[0] if len(distinct) == 1 else ",".join(distinct)
    return total, gtype


def parse_job(rec: Mapping[str, Any], index: int = 0, now: float | None = None) -> Job:
    """One job record (``squeue --json`` / ``scontrol show job --json`` ``jobs[]``) -> Job. ``now``: the time
    a future ``eligible_time`` (begin time) is compared with (None: only Slurm's reason says so)."""
    where = f"jobs[{index}]"
    if not isinstance(rec, Mapping):
        raise ParseError(f"{where}: expected an object, got {type(rec).__name__}")
    try:
        job_id = _int(rec["job_id"], f"{where}.job_id", -1)
    except KeyError:
        raise ParseError(f"{where}: no job_id") from None
    if job_id < 0:
        raise ParseError(f"{where}.job_id: bad value {rec.get('job_id')!r}")
    where = f"job {job_id}"
    if "job_state" not in rec:
        raise ParseError(f"{where}: no job_state")
    states = _states(rec["job_state"], where=f"{where}.job_state")
    state = states[0] if states else ""
    node_count = _int(rec.get("node_count"), f"{where}.node_count", 1) or 1
    total, gtype = _job_gpu_request(rec, node_count, where)
    if total and node_count > 1:
        gpn = -(-total // node_count)  # --gpus=N over several nodes: per-node share, rounded up
    else:
        gpn = total
    allocated: dict[str, int] = {}
    if state == "RUNNING":
        untyped, typed = tres_gpus(_str(rec, "tres_alloc_str", where), f"{where}.tres_alloc_str")
        allocated = typed or gres_gpus(rec.get("gres_detail"), f"{where}.gres_detail")
        if not allocated and untyped:
            allocated = {UNTYPED: untyped}
    start = _int(rec.get("start_time"), f"{where}.start_time", 0)
    comment = rec.get("comment")
    if isinstance(comment, dict):  # never seen in squeue, but sacct has comment.{job,...}
        comment = comment.get("job") or ""
    wckey = rec.get("wckey")
    if isinstance(wckey, dict):
        wckey = wckey.get("wckey") or ""
    wckey = (wckey or "").lstrip("*") if isinstance(wckey, str) else ""
    reason = _str(rec, "state_reason", where)
    prio = num(rec.get("priority"), f"{where}.priority")
    priority = int(prio) if prio is not None and prio != math.inf else 0
    dependency = rec.get("dependency")
    resv = rec.get("resv_name")
    blocked = blocked_reason(
        state=state, reason=reason, priority=priority if prio is not None else None,
        hold=_flag(rec.get("hold"), f"{where}.hold"), dependency=dependency if isinstance(dependency, str) else "",
        eligible_time=_int(rec.get("eligible_time"), f"{where}.eligible_time", 0),
        reservation=resv if isinstance(resv, str) else "", now=now)
    host = rec.get("nodes")
    one_node = state == "RUNNING" and isinstance(host, str) and host and not any(c in host for c in ",[ ")
    return Job(
        job_id=job_id,
        name=_str(rec, "name", where),
        account=_str(rec, "account", where),
        user=_str(rec, "user_name", where) or str(rec.get("user_id", "")),
        partition=_str(rec, "partition", where),
        state=state,
        reason=reason,
        priority=priority,
        submit_time=_int(rec.get("submit_time"), f"{where}.submit_time", 0),
        start_time=start if (start and state != "PENDING") else None,
        gpus_per_node=gpn,
        nodes=node_count,
        gpu_type=gtype,
        gpus_allocated=allocated,
        comment=comment if isinstance(comment, str) else "",
        wckey=wckey,
        restart_count=_int(rec.get("restart_cnt"), f"{where}.restart_cnt", 0),
        site_factor=0,
        requeue=_flag(rec.get("requeue"), f"{where}.requeue"),
        time_limit=_minutes(rec.get("time_limit"), f"{where}.time_limit"),
        blocked=blocked,
        batch=_flag(rec.get("batch_flag"), f"{where}.batch_flag", default=True),
        node_gpus={host: sum(allocated.values())} if one_node else {},  # known for a job on one node only
    )


def parse_jobs(data: str | bytes | Mapping[str, Any], site_factors: Mapping[int, int] | None = None,
               what: str = "squeue --json", now: float | None = None) -> list[Job]:
    """PENDING and RUNNING jobs that request GPUs, from either layout.

    22.05 ``squeue --json`` ignores state filters and also lists finished jobs: they are dropped here.
    A pending array whose tasks are not split yet is ONE record (one Job, its per-task request).
    ``site_factors`` (job id -> SiteFactor, from ``sprio``) fills ``Job.site_factor``; ``now`` (the snapshot's
    time) is what a pending job's begin time is compared with (:func:`parse_job`)."""
    doc = load_json(data, what)
    jobs = doc.get("jobs")
    if not isinstance(jobs, list):
        raise ParseError(f"{what}: no 'jobs' list (keys: {sorted(doc)})")
    out = []
    for i, rec in enumerate(jobs):
        st = rec.get("job_state") if isinstance(rec, dict) else None
        if isinstance(st, str) and st not in _ACTIVE_STATES:  # 22.05: finished jobs; cheap skip
            continue
        if isinstance(st, list) and st and st[0] not in _ACTIVE_STATES:
            continue
        job = parse_job(rec, i, now)
        if job.state not in _ACTIVE_STATES or job.gpus <= 0:
            continue
        if site_factors and job.job_id in site_factors:
            job = _replace(job, site_factor=site_factors[job.job_id])
        out.append(job)
    return out


def _replace(job: Job, **kw: Any) -> Job:
    from dataclasses import replace

    return replace(job, **kw)


def parse_sprio(text: str) -> dict[int, int]:
    """``sprio -h -o '%i|%S'`` -> {job id: SiteFactor}."""
    out: dict[int, int] = {}
    for n, line in enumerate((text or "").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("Unable to find jobs"):
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 2:
            raise ParseError(f"sprio line {n}: expected 'jobid|site', got {line!r}")
        jid = parts[0].split("_", 1)[0]
        try:
            out[int(jid)] = int(parts[1])
        except ValueError:
            raise ParseError(f"sprio line {n}: not numbers: {line!r}") from None
    return out


# ------------------------------------------------------------------------------------------------
# nodes
def parse_node(rec: Mapping[str, Any], index: int = 0) -> Node:
    where = f"nodes[{index}]"
    if not isinstance(rec, Mapping) or not isinstance(rec.get("name"), str):
        raise ParseError(f"{where}: expected an object with a 'name', got {str(rec)[:80]!r}")
    where = f"node {rec['name']}"
    if "state" not in rec:
        raise ParseError(f"{where}: no state")
    state = _states(rec["state"], rec.get("state_flags"), f"{where}.state")
    parts = rec.get("partitions") or []
    if not isinstance(parts, list):
        raise ParseError(f"{where}.partitions: expected a list, got {parts!r}")
    gpus = gres_gpus(rec.get("gres"), f"{where}.gres")
    used = gres_gpus(rec.get("gres_used"), f"{where}.gres_used")
    if not gpus:  # some configurations only show the TRES
        _, gpus = tres_gpus(_str(rec, "tres", where), f"{where}.tres")
        _, used = tres_gpus(_str(rec, "tres_used", where), f"{where}.tres_used")
    return Node(name=rec["name"], state=state, partitions=tuple(str(p) for p in parts), gpus=gpus,
                gpus_allocated={t: used.get(t, 0) for t in gpus})


def parse_nodes(data: str | bytes | Mapping[str, Any], what: str = "nodes JSON",
                gpu_only: bool = True) -> list[Node]:
    """22.05 ``sinfo --json`` or 24.11 ``scontrol show node --json`` -> Nodes (GPU nodes only by default)."""
    doc = load_json(data, what)
    nodes = doc.get("nodes")
    if not isinstance(nodes, list):
        if "sinfo" in doc:
            raise ParseError(f"{what}: this is the grouped 'sinfo[]' layout of Slurm >= 23.02; "
                             "use 'scontrol show node --json' for per-node records")
        raise ParseError(f"{what}: no 'nodes' list (keys: {sorted(doc)})")
    out = [parse_node(rec, i) for i, rec in enumerate(nodes)]
    return [n for n in out if n.gpus] if gpu_only else out


# ------------------------------------------------------------------------------------------------
# accounts (sacctmgr -P -n show assoc format=cluster,account,user,fairshare,grptres)
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


def partitions_of(nodes: Iterable[Node]) -> tuple[str, ...]:
    seen: list[str] = []
    for n in nodes:
        for p in n.partitions:
            if p not in seen:
                seen.append(p)
    return tuple(seen)
