"""``slurm-fair preflight``: what a site must have before rounds can work, and what will override them.

Checks (each a :class:`Finding`; ``problem`` fails the command, ``note`` does not):

* slurmctld's configuration (``scontrol show config``): ``AccountingStorageEnforce`` includes ``limits`` (else
  no GrpTRES is enforced); ``AccountingStorageTRES`` lists ``gres/gpu`` and ``gres/gpu:<type>`` for every GPU
  type of the cluster (an untracked TRES cannot be limited); ``PriorityType = priority/multifactor`` (else
  SiteFactor is ignored); with a type map configured, ``JobSubmitPlugins`` includes ``lua`` (else untyped GPU
  requests escape the per-type limits); with a hook spool configured, ``PrologSlurmctld`` and
  ``EpilogSlurmctld`` run slurm-fair's hook (else no job records; a site program there is named with the
  ``hooks install --chain`` that keeps it; ``Prolog``/``Epilog`` likewise, as notes); the SiteFactor range
  against the sum of the site's ``PriorityWeight*`` (a problem above it, naming the range that keeps them in play); with
  hooks, the ``python3`` on the hooks' PATH is at least 3.9 (an older one writes no record).
* Files: the type map's folder exists and is writable by this process; ``job_submit.lua`` is next to
  ``slurm.conf`` and reads the map (it reads ``gpu_type_map.txt`` next to itself: the map is there, or a link
  there points to it — the systemd unit writes it in its state folder); the database's folder is writable; the
  status file's folder (``daemon.status_file``) is searchable by every user (a note: else ``slurm-fair why``
  cannot read it).
* Names in the configuration (:func:`named_in_config`, pure): every partition of ``cluster.partitions`` has GPU
  nodes in Slurm (a typo managed nothing and published a map of only its header), every account of
  ``limits.accounts``, ``tenants.map`` and the ``account:``/``partition:`` rules of ``preemption.checkpointing``
  exists; a problem names the key and the value. GPU types: the configuration names none itself; the types a
  site's ``profiling.nvml_map`` maps devices to that no node has are a note (a shared map may list devices the
  cluster lacks).
* Privileges: root, or an sacctmgr AdminLevel of Operator (or Administrator) for the user running it.
* What overrides slurm-fair: a QOS with a GPU limit below the capacity of its type (Slurm applies QOS limits
  before association limits, so it can hold back a job its account's guarantee would start) is a problem, with
  the fix (clear it, or name the QOS in ``limits.qos_accepted`` to keep it on purpose: then a note), and so is
  a partition whose QOS has one; notes: QOS limits that cannot bind (at or above the capacity), other partition
  QOS, accounts with GPU limits of their own (left alone or adopted, ``limits.site_limits``), parent accounts of
  the tree (never limited).

``check`` is pure (texts and a snapshot in, findings out); ``gather`` runs the Slurm commands.
"""

from __future__ import annotations

import glob as globmod
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..config import Config
from ..cluster.base import Snapshot
from ..cluster.ctld_config import WEIGHTS, parse_config, weights_sum  # noqa: F401 - parse_config, WEIGHTS: preflight's API
from ..cluster.sacctmgr import grptres_limits
from ..errors import InputError
from ..profiling import shipped as shipped_profiles
from . import plan as P
from . import status_file

PROBLEM, NOTE, OK = "problem", "note", "ok"


@dataclass(frozen=True)
class Finding:
    level: str  # problem | note | ok
    what: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"level": self.level, "what": self.what, "detail": self.detail}


def config_values(config: Mapping[str, str], key: str) -> list[str]:
    """Every value of ``key`` that is set: ``Key`` (22.05, one program) or ``Key[0]``, ``Key[1]``, … (24.11)."""
    indexed = sorted((int(k[len(key) + 1:-1]), v) for k, v in config.items()
                     if k.startswith(key + "[") and k.endswith("]") and k[len(key) + 1:-1].isdigit())
    values = [v for _, v in indexed] if indexed else [config.get(key, "")]
    return [v for v in values if v not in ("(null)", "")]


def qos_gpu_limits(text: str) -> dict[str, str]:
    """``sacctmgr -P -n show qos format=name,grptres,maxtres,maxtrespu,maxtrespa`` -> {qos: its GPU limits}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if not parts or not parts[0]:
            continue
        gpu = []
        for col, value in zip(("GrpTRES", "MaxTRES", "MaxTRESPU", "MaxTRESPA"), parts[1:]):
            try:
                lim = grptres_limits(value)
            except Exception:  # noqa: BLE001 - shown as it is
                lim = {"?": -1}
            if lim:
                gpu.append(f"{col}={','.join(e for e in value.split(',') if e.startswith('gres/gpu'))}")
        if gpu:
            out[parts[0]] = " ".join(gpu)
    return out


HOOK_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # the PATH the hook shim sets


def hook_python_version() -> str | None:
    """The version (``X.Y.Z``) of the ``python3`` the controller hooks run (the shim's PATH), None if none runs."""
    import subprocess

    try:
        r = subprocess.run(["python3", "-I", "-S", "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                           capture_output=True, text=True, timeout=10, env={"PATH": HOOK_PATH})
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def hook_python(version: str | None, cfg: Config) -> Finding | None:
    """The controller hooks need Python >= 3.9 as ``python3`` (an older one writes no record, issue 29): a
    problem when hooks are configured (``hooks.spool``) and it is older or missing; None without hooks."""
    if cfg.spool_path is None:
        return None
    try:
        have = tuple(int(x) for x in (version or "").split(".")[:2])
    except ValueError:
        have = ()
    if len(have) == 2 and have >= (3, 9):
        return Finding(OK, "python3 (hooks)", f"{version} on the hooks' PATH")
    return Finding(PROBLEM, "python3 (hooks)", (f"is {version}" if version else "not found on the hooks' PATH "
                   f"({HOOK_PATH})") + ": the hook shim needs Python >= 3.9 and writes no job record with an older "
                   "one; install python3 >= 3.9 there (e.g. python39 on RHEL 8, linked as /usr/local/bin/python3)")


def priority_weights(config: Mapping[str, str], cfg: Config) -> Finding:
    """The SiteFactor range (``priority.site_factor_min`` … ``max``) against the site's priority weights: each
    multifactor factor is at most 1, so a job's priority from them is at most the sum of the weights (TRES
    weights included); a SiteFactor range above that sum decides the order of GPU jobs over the site's
    fair-share, age and QOS factors: a problem, naming the range that keeps them in play. ``"auto"`` (the
    default) is that sum. A pilot (``limits.accounts``) uses no range: its jobs swap their own priorities."""
    total = weights_sum(config)
    what = "priority.site_factor_max"
    if cfg.limits.accounts:
        return Finding(OK, what, "a pilot (limits.accounts): its jobs' SiteFactors only swap their own priorities "
                       "among themselves, no other job changes place; the range applies once every account is managed")
    lo, hi, levels = P.factor_range(cfg, total)
    span = hi - lo
    if total == 0:
        return Finding(NOTE, what, f"the site's priority weights are all 0: SiteFactor alone orders pending jobs "
                       f"(range {lo}..{hi})")
    if cfg.priority.site_factor_max == "auto":
        return Finding(OK, what, f"auto: {hi} (site_factor_min + the sum of the site's priority weights, {total}; "
                       f"{levels} levels): SiteFactor weighs at most as much as all of them")
    if span > total:
        return Finding(PROBLEM, what, f"the SiteFactor range ({span}) is {span / total:.1f}x the sum of the site's "
                       f"priority weights ({total}): slurm-fair's order of GPU jobs would decide over fair-share, "
                       f"age and QOS; set priority.site_factor_max = \"auto\" (or at most {lo + total}: "
                       "SiteFactor then weighs as much as all of them"
                       + (f"; with priority.levels at most {total + 1}" if int(cfg.priority.levels) > total + 1
                          else "") + ")")
    return Finding(OK, what, f"the SiteFactor range ({span}) is within the sum of the site's priority weights "
                   f"({total}): their factors stay in play")


def qos_binds(limits: str, capacity: Mapping[str, int]) -> list[str]:
    """The GPU limit entries (``gres/gpu[:type]=N``) of a QOS's limits as :func:`qos_gpu_limits` shows them that
    are below the capacity of their type (``gres/gpu``: of all GPUs): the ones that can bind."""
    total = sum(int(v) for v in capacity.values())
    out = []
    for col in limits.split():
        _name, _, entries = col.partition("=")
        for e in entries.split(","):
            k, _, v = e.partition("=")
            if not k.startswith("gres/gpu") or not v.lstrip("-").isdigit():
                continue
            t = k.split(":", 1)[1] if ":" in k else None
            if int(v) >= 0 and int(v) < (total if t is None else int(capacity.get(t, 0))):
                out.append(e)
    return out


def partition_qos(text: str) -> dict[str, str]:
    """``scontrol show partition`` -> {partition: its QOS} for partitions that have one."""
    out: dict[str, str] = {}
    name = None
    for tok in text.split():
        k, _, v = tok.partition("=")
        if k == "PartitionName":
            name = v
        elif k == "QoS" and name and v not in ("N/A", "(null)", ""):
            out[name] = v
    return out


def runs_slurm_fair_hook(value: str) -> bool:
    """Whether a slurm.conf hook value (a path, or a glob for Prolog/Epilog) runs slurm-fair's shim (by its name,
    also through a link)."""
    paths = globmod.glob(value) if any(c in value for c in "*?[") else [value]
    return any(os.path.basename(os.path.realpath(p)) == "slurm-fair-hook" or os.path.basename(p) == "slurm-fair-hook"
               for p in paths)


def named_in_config(cfg: Config, snapshot: Snapshot, nvml: Mapping[str, str] | None = None) -> list[Finding]:
    """Partitions, accounts and GPU types the configuration names that Slurm does not have (module docstring).
    ``nvml``: a site's ``profiling.nvml_map`` (device -> GPU type; None: the shipped one, not checked). Pure."""
    out: list[Finding] = []
    parts = sorted(snapshot.partitions)
    accounts = {a.name for a in snapshot.accounts}
    types = set(snapshot.gpu_types())

    def missing(key: str, kind: str, names: Any, known: Any, where: str) -> None:
        bad = [n for n in dict.fromkeys(names) if n not in known]
        for n in bad:
            out.append(Finding(PROBLEM, key, f"{kind} {n!r} {where}"))
        if names and not bad:
            out.append(Finding(OK, key, ", ".join(dict.fromkeys(names))))

    shown = ", ".join(parts) or "none"
    missing("cluster.partitions", "partition", cfg.cluster.partitions, parts,
            "has no GPU node in Slurm (no such partition, or no GPU node in it; partitions with GPU nodes: "
            f"{shown})")
    missing("limits.accounts", "account", cfg.limits.accounts, accounts,
            "does not exist in Slurm's accounting (sacctmgr show account)")
    missing("tenants.map", "account", list(cfg.tenants.map), accounts,
            "does not exist in Slurm's accounting (sacctmgr show account)")
    rules = [r.partition(":") for r in cfg.preemption.checkpointing]
    missing("preemption.checkpointing", "account", [n for k, _, n in rules if k == "account"], accounts,
            "does not exist in Slurm's accounting (sacctmgr show account)")
    missing("preemption.checkpointing", "partition", [n for k, _, n in rules if k == "partition"], parts,
            f"has no GPU node in Slurm (partitions with GPU nodes: {shown})")
    if nvml is not None:
        absent = sorted({g for g in nvml.values() if g not in types})
        if absent:
            out.append(Finding(NOTE, "profiling.nvml_map", f"maps devices to GPU type(s) no node has: "
                               f"{', '.join(absent)} (Slurm's types: {', '.join(sorted(types)) or 'none'})"))
    return out


def _need(ok: bool, what: str, good: str, bad: str) -> Finding:
    return Finding(OK if ok else PROBLEM, what, good if ok else bad)


def check(config: Mapping[str, str], snapshot: Snapshot, cfg: Config, *, qos: Mapping[str, str],
          partitions: Mapping[str, str], slurm_conf: str | None, site: Mapping[str, Mapping[str, int]]) -> list[Finding]:
    """Every finding (module docstring), in this order: the names the config gives, Slurm's accounting and
    priority, the type map and job_submit.lua, the hooks, the state files, QOS and partitions, the accounts."""
    out: list[Finding] = []
    nvml = None
    if cfg.nvml_map_path is not None:
        try:
            nvml = shipped_profiles.nvml_map(str(cfg.nvml_map_path))
        except InputError as e:
            out.append(Finding(PROBLEM, "profiling.nvml_map", str(e)))
    out.extend(named_in_config(cfg, snapshot, nvml))
    out.extend(_accounting(config, snapshot, cfg))
    if cfg.type_map_path is not None:
        out.extend(_type_map(config, cfg, slurm_conf))
    if cfg.spool_path is not None:
        out.extend(_hooks(config))
    out.extend(_state_files(cfg))
    out.extend(_qos(snapshot, cfg, qos, partitions))
    out.extend(_accounts(snapshot, cfg, site))
    return out


def _accounting(config: Mapping[str, str], snapshot: Snapshot, cfg: Config) -> list[Finding]:
    """Limits enforced, the GPU TRES tracked, multifactor priority and its weights."""
    out: list[Finding] = []
    enforce = config.get("AccountingStorageEnforce", "")
    out.append(_need("limits" in enforce.split(","), "AccountingStorageEnforce", enforce,
                     f"is {enforce or 'empty'}: add 'limits' (and 'associations'), or no GrpTRES limit is enforced"))
    tracked = {t.strip() for t in config.get("AccountingStorageTRES", "").split(",")}
    types = sorted(t for t, c in snapshot.capacity().items() if c > 0)
    missing = [t for t in ["gres/gpu"] + [f"gres/gpu:{g}" for g in types] if t not in tracked]
    out.append(_need(not missing, "AccountingStorageTRES", f"tracks gres/gpu and {len(types)} GPU type(s)",
                     f"does not track {', '.join(missing)}: add them (an untracked TRES cannot be limited)"))
    prio = config.get("PriorityType", "")
    out.append(_need(prio == "priority/multifactor", "PriorityType", prio,
                     f"is {prio or 'unset'}: SiteFactor (slurm-fair's job order) needs priority/multifactor"))
    out.append(priority_weights(config, cfg))
    return out


def _type_map(config: Mapping[str, str], cfg: Config, slurm_conf: str | None) -> list[Finding]:
    """The lua plugin on, the map's folder writable, and job_submit.lua next to slurm.conf reading this map."""
    out: list[Finding] = []
    plugins = config.get("JobSubmitPlugins", "")
    out.append(_need("lua" in plugins.split(","), "JobSubmitPlugins", plugins,
                     f"is {plugins or 'unset'}: add lua (etc/job_submit.lua), or untyped GPU requests escape the "
                     "per-type limits"))
    folder = cfg.type_map_path.parent
    writable = folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)
    out.append(_need(writable, "submit.type_map", f"{cfg.type_map_path} (folder writable)",
                     f"{folder} is missing or not writable by this user: the map is never published"))
    if slurm_conf:
        script = Path(slurm_conf).parent / "job_submit.lua"
        seen = script.parent / "gpu_type_map.txt"  # where the script reads the map
        here = folder.resolve() == script.parent.resolve() and cfg.type_map_path.name == seen.name
        linked = seen.is_symlink() and Path(os.path.realpath(seen)) == Path(os.path.realpath(cfg.type_map_path))
        if not script.exists():
            out.append(_need(False, "job_submit.lua", "", f"{script} does not exist (etc/job_submit.lua goes next to "
                             "slurm.conf)"))
        else:
            out.append(_need(here or linked, "job_submit.lua", f"{script} reads the map "
                             + ("next to it" if here else f"through the link {seen}"),
                             f"{script} reads {seen}, which is not the map slurm-fair writes ({cfg.type_map_path}): "
                             f"write the map there, or link it: ln -s {cfg.type_map_path} {seen}"))
    return out


def _hooks(config: Mapping[str, str]) -> list[Finding]:
    """slurm-fair's hook run as PrologSlurmctld/EpilogSlurmctld (job records) and Prolog/Epilog (node side)."""
    out: list[Finding] = []
    for key, needed in (("PrologSlurmctld", True), ("EpilogSlurmctld", True), ("Prolog", False),
                        ("Epilog", False)):
        values = config_values(config, key)
        value = values[0] if len(values) == 1 else ",".join(values)
        if not values:
            if needed:
                out.append(_need(False, key, "", "not set: no job records (slurm-fair hooks install; "
                                 "slurm_fair/share/slurm.conf.hooks)"))
            else:
                out.append(Finding(NOTE, key, "not set: no node-side records (device indices)"))
        elif any(runs_slurm_fair_hook(v) for v in values):
            out.append(Finding(OK, key, value if len(values) == 1 else
                               f"{' and '.join(values)} (each {key} line runs, Slurm >= 24.11)"))
        else:
            fix = (f"add a line {key}=DEST/slurm-fair-hook (this Slurm runs every {key} line)" if len(values) > 1
                   else f"keep it by chaining: slurm-fair hooks install DEST --chain {key}={value}, then "
                   f"{key}=DEST/slurm-fair-hook" if not any(c in value for c in "*?[") else
                   "link the shim into that folder: ln -s DEST/slurm-fair-hook " + value.rsplit("/", 1)[0])
            if needed:
                out.append(_need(False, key, "", f"runs {value}, not slurm-fair's hook: no job records; {fix}"))
            else:
                out.append(Finding(NOTE, key, f"runs {value}, not slurm-fair's hook: no node-side records; {fix}"))
    return out


def _state_files(cfg: Config) -> list[Finding]:
    """The database's folder writable; the status file's folder searchable by every user."""
    out: list[Finding] = []
    db = cfg.database_path.parent
    out.append(_need(db.is_dir() and os.access(db, os.W_OK | os.X_OK), "daemon.database", str(cfg.database_path),
                     f"{db} is missing or not writable by this user"))
    if cfg.status_path is not None:
        why_not = status_file.searchable(cfg.status_path.parent)
        out.append(Finding(OK if not why_not else NOTE, "daemon.status_file",
                           f"{cfg.status_path} (every user can reach it: slurm-fair why)" if not why_not else
                           f"{why_not}: users cannot read {cfg.status_path.name} there, so slurm-fair why cannot "
                           "explain their jobs; make the folder world-searchable (the systemd unit's "
                           "StateDirectoryMode=0755) or set daemon.status_file elsewhere"))
    return out


def _qos(snapshot: Snapshot, cfg: Config, qos: Mapping[str, str], partitions: Mapping[str, str]) -> list[Finding]:
    """QOS GPU limits that bind before the accounts' (unless accepted), and the partitions' QOS."""
    out: list[Finding] = []
    cap = snapshot.capacity()
    accepted = set(cfg.limits.qos_accepted)
    binding = {name: qos_binds(lim, cap) for name, lim in qos.items()}
    for name, lim in sorted(qos.items()):
        if not binding[name]:
            out.append(Finding(NOTE, f"QOS {name}", f"{lim}: applied before account limits, at or above the "
                               "capacity: it cannot bind"))
        elif name in accepted:
            out.append(Finding(NOTE, f"QOS {name}", f"{lim}: applied before account limits, it wins over "
                               "slurm-fair (kept on purpose: limits.qos_accepted)"))
        else:
            clear = " ".join(col.split("=", 1)[0] + "=" + ",".join(e.split("=")[0] + "=-1" for e in
                                                               col.split("=", 1)[1].split(","))
                             for col in lim.split())
            out.append(Finding(PROBLEM, f"QOS {name}", f"{lim}: applied before account limits, it can hold back "
                               "a job its account's guarantee would start; clear it (sacctmgr modify qos "
                               f"{name} set {clear}) or keep it on purpose "
                               f"(limits.qos_accepted = [\"{name}\"])"))
    for part, q in sorted(partitions.items()):
        if binding.get(q) and q not in accepted:
            out.append(Finding(PROBLEM, f"partition {part}", f"QOS {q} has GPU limits that bind, applied to every "
                               "job there first (see QOS {q})".replace("{q}", q)))
        else:
            out.append(Finding(NOTE, f"partition {part}", f"QOS {q}: its limits apply to every job there first"))
    return out


def _accounts(snapshot: Snapshot, cfg: Config, site: Mapping[str, Mapping[str, int]]) -> list[Finding]:
    """Accounts with GPU limits of their own, parent accounts (never limited), and shadow mode."""
    out: list[Finding] = []
    mode = cfg.limits.site_limits
    for a in snapshot.accounts:
        own = site.get(a.name, a.limits)
        if own:
            shown = ",".join(("gres/gpu" if k == "*" else f"gres/gpu:{k}") + f"={v}" for k, v in sorted(own.items()))
            out.append(Finding(NOTE, f"account {a.name}", f"has GPU limits of its own ({shown}): "
                               + ("left alone" if mode == "respect" else "adopted, each an upper bound")
                               + f" (limits.site_limits = {mode}); rollback restores them"))
    parents = sorted(P.parent_accounts(snapshot))
    if parents:
        out.append(Finding(NOTE, "account tree", f"parents {', '.join(parents)} are never limited (their limit "
                           "would cap the whole subtree): slurm-fair manages the leaves"))
    if cfg.daemon.dry_run:
        out.append(Finding(NOTE, "daemon.dry_run", "true: shadow mode, rounds record what they would do and write "
                           "nothing; set it false to turn slurm-fair on"))
    return out


def gather(cluster: Any) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(slurmctld config, QOS GPU limits, partition QOS) from the Slurm commands (a CLI backend's ``_run``)."""
    config = parse_config(cluster._run(["scontrol", "show", "config"]))
    qos = qos_gpu_limits(cluster._run(["sacctmgr", "-P", "-n", "show", "qos",
                                       "format=name,grptres,maxtres,maxtrespu,maxtrespa"]))
    parts = partition_qos(cluster._run(["scontrol", "show", "partition"]))
    return config, qos, parts


def my_admin_level(cluster: Any, user: str) -> str:
    """``user``'s sacctmgr AdminLevel ("None" when the user is not in the accounting database)."""
    out = cluster._run(["sacctmgr", "-P", "-n", "show", "user", user, "format=user,adminlevel"])
    for line in out.splitlines():
        name, _, level = line.partition("|")
        if name == user:
            return level.strip() or "None"
    return "None"


def privilege(user: str, uid: int, level: str | None) -> Finding | None:
    """Whether this user may write limits (sacctmgr) and other users' SiteFactors (scontrol): root, or an
    AdminLevel of Operator or Administrator. None when the level was not looked up."""
    if uid == 0:
        return Finding(OK, "privileges", f"{user} (root)")
    if level is None:
        return None
    if level.lower() in ("operator", "administrator"):
        return Finding(OK, "privileges", f"{user}: AdminLevel {level}")
    return Finding(PROBLEM, "privileges", f"{user} has AdminLevel {level}: sacctmgr refuses its limit changes and "
                   f"scontrol its SiteFactor updates (as root: sacctmgr add user {user} account=<any> "
                   "adminlevel=Operator)")
