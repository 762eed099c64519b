"""PyslurmCluster: the Cluster interface with jobs and nodes read in-process through pyslurm.

Optional.  PyPI only has pyslurm 25.11; for another Slurm release pyslurm's matching branch must be built
from source (docs/slurm-backends.md: "Optional: the in-process pyslurm backend").  pyslurm's major.minor must
equal the running Slurm's, which is checked *before* ``import pyslurm``: importing it runs libslurm's
``slurm_init``, which aborts the whole process on a slurm.conf it cannot read.

What goes through pyslurm: the job table and the node table (one RPC each, no JSON, no child process),
the controller's version and cluster name.  What does not, because pyslurm 22.5 is broken or lacks it
(measured, see the Slurm 22.05 notes §7), and is delegated to a CliCluster (composition, same commands):

* accounts (shares, GrpTRES) and limit changes: ``pyslurm.db.Associations.modify`` raises on 22.5
  -> ``sacctmgr``;
* SiteFactor: not in pyslurm's job record -> ``sprio`` (read) and batched ``scontrol update`` (write);
* the typed job request and allocation: the new API's ``gres_per_node``/``allocated_gres`` are empty for
  ``--gpus=type:N`` jobs and for nodes, so the legacy ``pyslurm.job()``/``pyslurm.node()`` dicts are used,
  whose raw ``tres_*``/``gres_used`` strings go through the CLI backend's parser;
* retyping (Unsupported before 23.02.6 anyway), signals and requeue -> the CLI backend.

sacctmgr and sprio run while the in-process reads happen, so a snapshot still costs one round trip.
In-process calls run in a daemon thread bounded by ``timeout``; a call that does not return in time
raises ClusterUnreachable (the thread is left to finish on its own; libslurm has its own MessageTimeout).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import pwd
import sys
import threading
import time
from typing import Any, Callable, Mapping, TypeVar

from . import parse, sacctmgr, slurm_json
from .base import Cluster, Job, Snapshot, version_tuple
from .cli import CliCluster
from .errors import ClusterUnreachable, CommandFailed, ParseError, Unsupported

T = TypeVar("T")

DEFAULT_CONF = "/etc/slurm/slurm.conf"
_lock = threading.Lock()  # libslurm keeps global state: one in-process call at a time
_loaded_conf: str | None = None  # the slurm.conf libslurm was initialised with in this process


def _major(v: str) -> tuple[int, ...]:
    return version_tuple(v)[:2]


def _conf_path(env: Mapping[str, str]) -> str:
    return env.get("SLURM_CONF") or DEFAULT_CONF


def unavailable_reason(cli: CliCluster) -> str | None:
    """Why pyslurm cannot serve the cluster ``cli`` talks to, or None if it can.  Does not import pyslurm."""
    if importlib.util.find_spec("pyslurm") is None:
        return ("'import pyslurm' fails (not installed); PyPI only has pyslurm 25.11, which builds only "
                "against Slurm 25.11 — build the branch matching your Slurm from source")
    try:
        have = importlib.metadata.version("pyslurm")
    except importlib.metadata.PackageNotFoundError:
        return "pyslurm is importable but has no package metadata, so its Slurm release cannot be checked"
    conf = _conf_path(cli.env)
    if not os.path.isfile(conf):
        return f"slurm.conf {conf!r} does not exist (set SLURM_CONF); libslurm would abort the process"
    running = cli.version()
    if _major(have) != _major(running):
        return (f"pyslurm {have} is built for Slurm {'.'.join(map(str, _major(have)))}, but this cluster runs "
                f"Slurm {running}; pyslurm's major.minor must match")
    if _loaded_conf is not None and _loaded_conf != os.path.realpath(conf):
        return (f"libslurm in this process is already initialised with {_loaded_conf}; it cannot switch to "
                f"{conf} (use one cluster per process, or backend='cli')")
    return None


def _import_pyslurm(conf: str) -> Any:
    """Import pyslurm with libslurm initialised from ``conf`` (slurm_init reads $SLURM_CONF at import)."""
    global _loaded_conf
    with _lock:
        if _loaded_conf is None:
            if "pyslurm" in sys.modules:  # imported by someone else: initialised from $SLURM_CONF then
                conf = _conf_path(os.environ)
            else:
                os.environ["SLURM_CONF"] = conf  # libslurm reads it with getenv(); it must stay set
        module = importlib.import_module("pyslurm")
        if _loaded_conf is None:
            _loaded_conf = os.path.realpath(conf)
    return module


class PyslurmCluster(Cluster):
    """In-process backend; build it with ``connect("pyslurm")`` (or ``PyslurmCluster(timeout, env)``,
    which raises Unsupported with the reason when pyslurm cannot serve this cluster)."""

    name = "pyslurm"

    def __init__(self, timeout: float = 30.0, env: Mapping[str, str] | None = None):
        self._cli = CliCluster(timeout=timeout, env=env)
        self.timeout = self._cli.timeout
        why = unavailable_reason(self._cli)
        if why:
            raise Unsupported(f"pyslurm backend unavailable: {why}; use backend='cli'")
        conf = _conf_path(self._cli.env)
        self._ps = _import_pyslurm(conf)
        if _loaded_conf != os.path.realpath(conf):
            raise Unsupported(f"pyslurm backend unavailable: pyslurm was imported elsewhere with {_loaded_conf}, "
                              f"not {conf}; use backend='cli'")
        api = ".".join(map(str, self._ps.slurm_api_version()))
        running = self._cli.version()
        if _major(api) != _major(running):
            raise Unsupported(f"pyslurm backend unavailable: pyslurm is linked against libslurm {api}, but this "
                              f"cluster runs Slurm {running}; use backend='cli'")
        ctl = self._call("slurm_load_ctl_conf", lambda: self._ps.config().get())
        self._version = str(ctl.get("version") or running)
        if _major(self._version) != _major(running):
            raise Unsupported(f"pyslurm backend unavailable: slurmctld runs {self._version}, the Slurm clients "
                              f"{running}; use backend='cli'")
        self._cluster_name = ctl.get("cluster_name") or None

    @property
    def calls(self) -> list[list[str]]:
        """Slurm commands run by the delegated CLI backend (in-process calls are not listed)."""
        return self._cli.calls

    # -- in-process calls ----------------------------------------------------------------------
    def _call(self, what: str, fn: Callable[[], T]) -> T:
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                with _lock:
                    box["value"] = fn()
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                box["error"] = e

        t = threading.Thread(target=target, name=f"pyslurm-{what}", daemon=True)
        t.start()
        t.join(self.timeout)
        if t.is_alive():
            raise ClusterUnreachable(f"pyslurm {what}: no answer within {self.timeout:g} s "
                                     "(is slurmctld up? check SLURM_CONF)")
        err = box.get("error")
        if err is not None:
            msg = " ".join(str(a) for a in getattr(err, "args", ()) if isinstance(a, str)) or str(err)
            if any(p in msg.lower() for p in slurm_json.UNREACHABLE_PHRASES):
                raise ClusterUnreachable(f"pyslurm {what}: {msg}") from err
            raise CommandFailed(["pyslurm", what], 1, f"{type(err).__name__}: {msg}") from err
        return box["value"]

    # -- observation ---------------------------------------------------------------------------
    def cluster_name(self) -> str:
        return self._cluster_name or self._cli.cluster_name()

    def priority_weights(self) -> int | None:
        return self._cli.priority_weights()

    def slurm_user(self) -> tuple[str, int] | None:
        return self._cli.slurm_user()

    def version(self) -> str:
        return self._version

    def snapshot(self) -> Snapshot:
        cli = self._cli
        assoc_argv = ["sacctmgr", "-P", "-n", "show", "assoc", *(["where", f"cluster={self._cluster_name}"]
                                                                  if self._cluster_name else []),
                      f"format={sacctmgr.ASSOC_FORMAT}"]
        sprio_argv = ["sprio", "-h", "-o", "%i|%S"]
        deadline = time.monotonic() + self.timeout
        procs = [(a, cli._start(a)) for a in (assoc_argv, sprio_argv)]
        try:
            raw_jobs = self._call("slurm_load_jobs", lambda: self._ps.job().get())
            raw_nodes = self._call("slurm_load_node", lambda: self._ps.node().get())
            assoc_out = cli._finish(assoc_argv, procs[0][1], deadline)
            try:
                sprio_out = cli._finish(sprio_argv, procs[1][1], deadline)
            except CommandFailed as e:
                if "priority plugin" not in e.stderr.lower():  # not multifactor: no SiteFactor exists
                    raise
                sprio_out = ""
        finally:
            for _, proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
        site = parse.parse_sprio(sprio_out)
        jobs = parse.parse_jobs({"jobs": [_job_record(r) for r in raw_jobs.values()]}, site_factors=site,
                                what="pyslurm.job().get()", now=time.time())
        nodes = parse.parse_nodes({"nodes": [_node_record(r) for r in raw_nodes.values()]},
                                  what="pyslurm.node().get()")
        accounts = sacctmgr.parse_assoc(assoc_out, cluster=self._cluster_name)
        return Snapshot(slurm_version=self._version, taken_at=time.time(), nodes=tuple(nodes),
                        jobs=tuple(jobs), accounts=tuple(accounts), partitions=parse.partitions_of(nodes))

    # -- actions: delegated to the CLI backend (see the module docstring for why) ---------------
    def set_accounts_gpu_limits(self, limits: Mapping[str, Mapping[str, int]]) -> None:
        self._cli.set_accounts_gpu_limits(limits)

    def set_site_factors(self, factors: Mapping[int, int]) -> None:
        self._cli.set_site_factors(factors)

    def set_job_gpu_type(self, job_id: int, gpu_type: str, gpus_per_node: int) -> None:
        self._cli.set_job_gpu_type(job_id, gpu_type, gpus_per_node)

    def signal_job(self, job_id: int, signal: str) -> None:
        self._cli.signal_job(job_id, signal)

    def requeue_job(self, job_id: int) -> None:
        self._cli.requeue_job(job_id)

    def cancel_job(self, job_id: int) -> None:
        self._cli.cancel_job(job_id)

    def job_info(self, job_id: int) -> Job | None:
        return self._cli.job_info(job_id)


_users: dict[int, str] = {}


def _user_name(uid: Any) -> str:
    """uid -> login name, as squeue shows it (resolved locally, cached); the number if unknown."""
    if not isinstance(uid, int):
        return str(uid or "")
    if uid not in _users:
        try:
            _users[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            _users[uid] = str(uid)
    return _users[uid]


def _job_record(r: Mapping[str, Any]) -> dict[str, Any]:
    """A legacy ``pyslurm.job().get()`` value -> the ``squeue --json`` field names parse_job reads."""
    if not isinstance(r, Mapping):
        raise ParseError(f"pyslurm.job().get(): expected dicts, got {type(r).__name__}")
    rec = dict(r)
    rec["node_count"] = r.get("num_nodes")
    rec["tasks"] = r.get("num_tasks")
    rec["user_name"] = _user_name(r.get("user_id"))
    return rec


def _node_record(r: Mapping[str, Any]) -> dict[str, Any]:
    """A legacy ``pyslurm.node().get()`` value (state 'IDLE+DRAIN', gres as lists) -> parse_node's fields."""
    if not isinstance(r, Mapping):
        raise ParseError(f"pyslurm.node().get(): expected dicts, got {type(r).__name__}")
    rec = dict(r)
    state = r.get("state")
    if isinstance(state, str):
        rec["state"] = [s for s in state.split("+") if s]
    rec["partitions"] = list(r.get("partitions") or [])
    rec["gres"] = list(r.get("gres") or [])
    rec["gres_used"] = list(r.get("gres_used") or [])
    return rec
