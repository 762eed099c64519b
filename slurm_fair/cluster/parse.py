"""Pure parsers of Slurm's job and node records (22.05 ``openapi/v0.0.38`` and 24.11 ``data_parser/v0.0.42``
JSON layouts) and of ``sprio`` -> the dataclasses of :mod:`slurm_fair.cluster.base`.

No I/O here.  Every function takes text or decoded JSON and either returns dataclasses or raises
:class:`~slurm_fair.cluster.errors.ParseError` naming what it could not understand. Beside it, by idea:
:mod:`~slurm_fair.cluster.slurm_json` (a value in either layout, the envelope, the version),
:mod:`~slurm_fair.cluster.gres` (GPU request, TRES and GRES strings) and :mod:`~slurm_fair.cluster.sacctmgr`
(accounts from ``sacctmgr`` text).

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

import math
from typing import Any, Iterable, Mapping

from .base import Job, Node
from .blocked import blocked_reason
from .errors import ParseError
from .gres import UNTYPED, gpu_requests, gres_gpus, tres_gpus
from .slurm_json import as_flag, as_int, as_minutes, as_states, as_str, load_json, num

_ACTIVE_STATES = ("PENDING", "RUNNING")


# ------------------------------------------------------------------------------------------------
# jobs
def _job_gpu_request(rec: Mapping[str, Any], nodes: int, where: str) -> tuple[int, str | None]:
    """(GPUs in total, type or None) from the ``tres_per_*`` fields, falling back to ``tres_req_str``."""
    total = 0
    types: list[str] = []
    any_entry = False
    per_socket_seen = False
    for key in ("tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket"):
        spec = as_str(rec, key, where)
        if not spec:
            continue
        if key == "tres_per_node":
            mult: int | None = nodes
        elif key == "tres_per_job":
            mult = 1
        elif key == "tres_per_task":
            mult = max(as_int(rec.get("tasks"), f"{where}.tasks", 1), 1)
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
        req_total, req_typed = tres_gpus(as_str(rec, "tres_req_str", where), f"{where}.tres_req_str")
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
        job_id = as_int(rec["job_id"], f"{where}.job_id", -1)
    except KeyError:
        raise ParseError(f"{where}: no job_id") from None
    if job_id < 0:
        raise ParseError(f"{where}.job_id: bad value {rec.get('job_id')!r}")
    where = f"job {job_id}"
    if "job_state" not in rec:
        raise ParseError(f"{where}: no job_state")
    states = as_states(rec["job_state"], where=f"{where}.job_state")
    state = states[0] if states else ""
    node_count = as_int(rec.get("node_count"), f"{where}.node_count", 1) or 1
    total, gtype = _job_gpu_request(rec, node_count, where)
    if total and node_count > 1:
        gpn = -(-total // node_count)  # --gpus=N over several nodes: per-node share, rounded up
    else:
        gpn = total
    allocated: dict[str, int] = {}
    if state == "RUNNING":
        untyped, typed = tres_gpus(as_str(rec, "tres_alloc_str", where), f"{where}.tres_alloc_str")
        allocated = typed or gres_gpus(rec.get("gres_detail"), f"{where}.gres_detail")
        if not allocated and untyped:
            allocated = {UNTYPED: untyped}
    start = as_int(rec.get("start_time"), f"{where}.start_time", 0)
    comment = rec.get("comment")
    if isinstance(comment, dict):  # never seen in squeue, but sacct has comment.{job,...}
        comment = comment.get("job") or ""
    wckey = rec.get("wckey")
    if isinstance(wckey, dict):
        wckey = wckey.get("wckey") or ""
    wckey = (wckey or "").lstrip("*") if isinstance(wckey, str) else ""
    reason = as_str(rec, "state_reason", where)
    prio = num(rec.get("priority"), f"{where}.priority")
    priority = int(prio) if prio is not None and prio != math.inf else 0
    dependency = rec.get("dependency")
    resv = rec.get("resv_name")
    eligible = as_int(rec.get("eligible_time"), f"{where}.eligible_time", 0)
    blocked = blocked_reason(
        state=state, reason=reason, priority=priority if prio is not None else None,
        hold=as_flag(rec.get("hold"), f"{where}.hold"), dependency=dependency if isinstance(dependency, str) else "",
        eligible_time=eligible, reservation=resv if isinstance(resv, str) else "", now=now)
    host = rec.get("nodes")
    one_node = state == "RUNNING" and isinstance(host, str) and host and not any(c in host for c in ",[ ")
    return Job(
        job_id=job_id,
        name=as_str(rec, "name", where),
        account=as_str(rec, "account", where),
        user=as_str(rec, "user_name", where) or str(rec.get("user_id", "")),
        partition=as_str(rec, "partition", where),
        state=state,
        reason=reason,
        priority=priority,
        submit_time=as_int(rec.get("submit_time"), f"{where}.submit_time", 0),
        start_time=start if (start and state != "PENDING") else None,
        gpus_per_node=gpn,
        nodes=node_count,
        gpu_type=gtype,
        gpus_allocated=allocated,
        comment=comment if isinstance(comment, str) else "",
        wckey=wckey,
        restart_count=as_int(rec.get("restart_cnt"), f"{where}.restart_cnt", 0),
        site_factor=0,
        requeue=as_flag(rec.get("requeue"), f"{where}.requeue"),
        time_limit=as_minutes(rec.get("time_limit"), f"{where}.time_limit"),
        blocked=blocked,
        batch=as_flag(rec.get("batch_flag"), f"{where}.batch_flag", default=True),
        node_gpus={host: sum(allocated.values())} if one_node else {},  # known for a job on one node only
        # the begin time of a pending job (0 in Slurm: held, or not set: not known)
        begin_time=eligible if (state == "PENDING" and eligible > 0) else None,
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
    state = as_states(rec["state"], rec.get("state_flags"), f"{where}.state")
    parts = rec.get("partitions") or []
    if not isinstance(parts, list):
        raise ParseError(f"{where}.partitions: expected a list, got {parts!r}")
    gpus = gres_gpus(rec.get("gres"), f"{where}.gres")
    used = gres_gpus(rec.get("gres_used"), f"{where}.gres_used")
    if not gpus:  # some configurations only show the TRES
        _, gpus = tres_gpus(as_str(rec, "tres", where), f"{where}.tres")
        _, used = tres_gpus(as_str(rec, "tres_used", where), f"{where}.tres_used")
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


def partitions_of(nodes: Iterable[Node]) -> tuple[str, ...]:
    seen: list[str] = []
    for n in nodes:
        for p in n.partitions:
            if p not in seen:
                seen.append(p)
    return tuple(seen)
