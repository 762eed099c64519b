"""slurm-fair configuration: one TOML file, parsed with :mod:`tomllib` into frozen dataclasses.

Every key is described once, in :data:`SPEC` (default, comment, validator); the dataclasses, the
validation and the commented default file (:func:`render_default`, shipped as ``etc/slurm-fair.toml``)
are all derived from or checked against it. Errors are :class:`~slurm_fair.errors.InputError` naming the
key, e.g. ``daemon.period``.
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from types import MappingProxyType
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from .errors import InputError
from .validate import number

DEFAULT_PATH = Path("/etc/slurm-fair/slurm-fair.toml")
ENV_VAR = "SLURM_FAIR_CONFIG"
STATUS_NAME = "status.json"  # the status file's name beside the database (daemon.status_file = "")

SOLVERS = ("ECOS", "HIGHS", "CLARABEL", "SCIPY")  # cvxpy solvers by name; lp.py maps them (one list for CLI and config)
BACKENDS = ("auto", "cli", "pyslurm")
LOG_LEVELS = ("debug", "info", "warning", "error")
ON_CONFLICT = ("flag", "ignore-tenant", "fallback")  # profiling.on_conflict (profiling/trust.py)
CLASS_SOURCES = ("comment", "wckey", "name")
SITE_LIMIT_MODES = ("respect", "adopt")
UNREQUEUEABLE_ACTIONS = ("hold-back", "cancel", "ignore")  # daemon/unrequeueable.py


# --------------------------------------------------------------------------------------------
# validators: (key, value) -> normalised value, or InputError(key, value, problem)


def _number(key: str, v: Any, *, positive: bool = False, nonneg: bool = False) -> float | int:
    number(key, v, positive=positive, nonneg=nonneg)  # the one check (validate.py); TOML integers stay integers
    return v


def _positive(key: str, v: Any) -> float | int:
    return _number(key, v, positive=True)


def _nonneg(key: str, v: Any) -> float | int:
    return _number(key, v, nonneg=True)


def _int(key: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise InputError(key, v, "must be an integer")
    return v


def _pos_int(key: str, v: Any) -> int:
    v = _int(key, v)
    if v < 1:
        raise InputError(key, v, "must be >= 1")
    return v


def _nonneg_int(key: str, v: Any) -> int:
    v = _int(key, v)
    if v < 0:
        raise InputError(key, v, "must be >= 0")
    return v


def _bool(key: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise InputError(key, v, "must be true or false")
    return v


def _nonempty_str(key: str, v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise InputError(key, v, "must be a non-empty string")
    return v


def _db_path(key: str, v: Any) -> str:
    v = _nonempty_str(key, v)
    if any(c in v for c in "\0\n\r"):
        raise InputError(key, v, "must be a path without NUL characters or line breaks")
    return v


def _choice(choices: tuple[str, ...], *, lower: bool = True) -> Callable[[str, Any], str]:
    def check(key: str, v: Any) -> str:
        if not isinstance(v, str) or (v.lower() if lower else v) not in choices:
            raise InputError(key, v, f"must be one of {', '.join(choices)}")
        return v.lower() if lower else v

    return check


def _signal(key: str, v: Any) -> str:
    """A signal name as scancel takes it (USR1, SIGUSR1, TERM) or a number; normalised to upper case."""
    if not isinstance(v, str) or not re.fullmatch(r"(SIG)?[A-Z][A-Z0-9+]*|\d+", v.strip().upper()):
        raise InputError(key, v, 'must be a signal name like "USR1" or "SIGTERM", or a signal number')
    return v.strip().upper()


METRICS_OFF = ""  # metrics.listen = "" serves no /metrics
_HOSTNAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")


def parse_listen(key: str, v: Any) -> tuple[str, int] | None:
    """``"HOST:PORT"`` (HOST an IPv4 address, a host name, or an IPv6 address in brackets: ``"[::1]:9817"``;
    PORT 1..65535) -> (host, port), host without brackets; ``""`` -> None (off)."""
    if not isinstance(v, str):
        raise InputError(key, v, 'must be a string "HOST:PORT" (e.g. "127.0.0.1:9817"), or "" for off')
    if v == METRICS_OFF:
        return None
    if v.startswith("["):
        host, sep, port = v[1:].partition("]:")
        if not sep:
            raise InputError(key, v, 'an IPv6 address needs brackets and a port: "[::1]:9817"')
        try:
            if ipaddress.ip_address(host).version != 6:
                raise ValueError(host)
        except ValueError:
            raise InputError(key, v, f"{host!r} in brackets is not an IPv6 address") from None
    else:
        host, sep, port = v.rpartition(":")
        if not sep or not host:
            raise InputError(key, v, 'must be "HOST:PORT" (e.g. "127.0.0.1:9817"), or "" for off')
        if ":" in host:
            raise InputError(key, v, 'an IPv6 address must be in brackets: "[::1]:9817"')
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            if re.fullmatch(r"[0-9.]+", host) or not _HOSTNAME.fullmatch(host):
                raise InputError(key, v, f"{host!r} is neither an IPv4 address nor a host name") from None
    if not re.fullmatch(r"[0-9]{1,5}", port) or not 1 <= int(port) <= 65535:
        raise InputError(key, v, f"port {port!r} must be a number in 1..65535")
    return host, int(port)


def _listen(key: str, v: Any) -> str:
    parse_listen(key, v)
    return v


def _knob_f(key: str, v: Any) -> float:
    f = _number(key, v, nonneg=True)
    if f >= 1:
        raise InputError(key, v, "must be in [0, 1)")
    return f


def _gt1(key: str, v: Any) -> float:
    f = _number(key, v, positive=True)
    if f <= 1:
        raise InputError(key, v, "must be > 1")
    return f


def _weight(key: str, v: Any) -> float:
    f = _number(key, v, positive=True)
    if f > 1:
        raise InputError(key, v, "must be in (0, 1]")
    return f


def _policy(key: str, v: Any) -> str:
    from . import policies

    names = policies.names()
    if not isinstance(v, str) or v not in names:
        raise InputError(key, v, f"unknown policy (known: {', '.join(names)})")
    return v


def _solver(key: str, v: Any) -> str:
    if not isinstance(v, str) or (v and v.upper() not in SOLVERS):
        raise InputError(key, v, f'must be "" (default) or one of {", ".join(SOLVERS)}')
    return v.upper()


def _path_or_empty(key: str, v: Any) -> str:
    if not isinstance(v, str) or v != v.strip() or any(c in v for c in "\n\r\0"):
        raise InputError(key, v, "must be a path without surrounding spaces or line breaks, or \"\"")
    return v


def _str_list(key: str, v: Any) -> tuple[str, ...]:
    if not isinstance(v, list):
        raise InputError(key, v, "must be a list of strings")
    for i, item in enumerate(v):
        if not isinstance(item, str) or not item.strip():
            raise InputError(f"{key}[{i}]", item, "must be a non-empty string")
    if len(set(v)) != len(v):
        raise InputError(key, v, "has duplicate entries")
    return tuple(v)


def _class_order(key: str, v: Any) -> tuple[str, ...]:
    order = _str_list(key, v)
    if not order:
        raise InputError(key, v, "must name at least one source")
    for i, item in enumerate(order):
        if item not in CLASS_SOURCES:
            raise InputError(f"{key}[{i}]", item, f"must be one of {', '.join(CLASS_SOURCES)}")
    return order


def _tenant_map(key: str, v: Any) -> dict[str, str]:
    if not isinstance(v, dict):
        raise InputError(key, v, "must be a table of account = \"tenant\"")
    for acct, tenant in v.items():
        if not acct.strip():
            raise InputError(key, acct, "account name must not be empty")
        if not isinstance(tenant, str) or not tenant.strip():
            raise InputError(f"{key}.{acct}", tenant, "must be a non-empty tenant name")
    return MappingProxyType(dict(v))


def _weights(key: str, v: Any) -> dict[str, float]:
    if not isinstance(v, dict):
        raise InputError(key, v, "must be a table of tenant = weight")
    out = {}
    for tenant, w in v.items():
        if not tenant.strip():
            raise InputError(key, tenant, "tenant name must not be empty")
        out[tenant] = float(_positive(f"{key}.{tenant}", w))
    return MappingProxyType(out)


# --------------------------------------------------------------------------------------------
# the specification: section -> key -> (default, validator, comment lines)


@dataclass(frozen=True)
class Key:
    default: Any
    check: Callable[[str, Any], Any]
    doc: str


SECTION_DOCS = {
    "daemon": "The slurm-fair daemon (`slurm-fair daemon`).",
    "policy": "Which allocation policy computes each tenant's ideal (fractional) share of every GPU type.",
    "cluster": "How slurm-fair talks to Slurm.",
    "classes": "Job classes: a job's class selects its throughput profile (`slurm-fair profiles`).",
    "tenants": "Tenants: who is treated as one party by the fairness policy.",
    "priority": "Priority: slurm-fair steers scheduling order through each job's SiteFactor.",
    "limits": "Limits: per-account per-type GrpTRES that guarantee each account its share and lend the rest.",
    "hooks": "Job records from the Slurm hooks (`slurm-fair hooks install`, etc/slurm.conf.hooks).",
    "submit": "Submission: the GPU type map read by etc/job_submit.lua to type untyped GPU requests.",
    "preemption": "Preemption: over-share running jobs get a checkpoint signal, then a requeue after the grace.",
    "profiling": "Profiling: throughput reports from jobs (`slurm-fair profile ...`), how they update profiles.",
    "store": "The database: how long records are kept.",
    "metrics": "Prometheus metrics: the daemon serves /metrics over HTTP (docs/metrics-reports.md, 'Metrics (Prometheus)').",
}

SPEC: dict[str, dict[str, Key]] = {
    "daemon": {
        "period": Key(300, _positive, "Seconds between two allocation rounds (> 0)."),
        "early_round_after": Key(
            30, _nonneg,
            "Debounce, in seconds, for early rounds triggered by job submissions/completions (>= 0).",
        ),
        "database": Key(
            "/var/lib/slurm-fair/slurm-fair.sqlite", _db_path,
            "SQLite database (profiles, rounds, deviations). A relative path is relative to this file's folder.",
        ),
        "dry_run": Key(True, _bool, "true (the default: shadow mode) = compute and record rounds but never change\n"
                       "anything in Slurm; `slurm-fair status`, `explain` and `report` show what it would do.\n"
                       "Set false to let slurm-fair write limits, SiteFactors and the type map."),
        "log_level": Key("info", _choice(LOG_LEVELS), "One of: " + ", ".join(LOG_LEVELS) + "."),
        "publish_status": Key(
            True, _bool,
            "true = each round (and each poll between rounds) writes a small world-readable status file\n"
            "(status_file): per account and GPU type its guarantee, claims, GPUs in use and limit, per type the\n"
            "capacity and idle GPUs; `slurm-fair why JOBID` reads it, so users need no access to the database.\n"
            "It shows every account's numbers to every user (as squeue and sshare do); false = not written.",
        ),
        "status_file": Key(
            "", _path_or_empty,
            'Where the status file goes; "" = status.json in the database\'s folder (that folder must be\n'
            "world-searchable, as the systemd unit's StateDirectoryMode=0755 makes it). A relative path is\n"
            "relative to this file's folder.",
        ),
    },
    "policy": {
        "name": Key(
            "oef-coop", _policy,
            "oef-noncoop | oef-coop | max-throughput | equal-share | gavel | gandiva-fair | bud | themis | hadar.",
        ),
        "solver": Key("", _solver, 'LP solver: "" = the policy\'s own choice (the fastest exact one it has), or '
                      + " | ".join(SOLVERS) + " to run its LPs through cvxpy."),
        "themis_f": Key(0.8, _knob_f, "themis: fairness knob f in [0, 1); the 1 - f fraction of apps with the worst\n"
                        "finish-time fairness bid in each auction (the paper's 0.8)."),
        "themis_lease": Key(600, _positive, "themis: seconds an auctioned allocation holds before its GPUs are\n"
                            "auctioned again (the paper's 10 minutes; > 0)."),
        "partition_above": Key(0, _nonneg_int,
                               "oef-coop: with more classes than this, solve POP-style in partition_parts groups,\n"
                               "each exact on its weight share of every GPU type: several times faster, but not\n"
                               "exact (envy-freeness holds within a group only; classes of different groups were\n"
                               "measured to envy each other by 20-80 %, total throughput within ~1-3 %);\n"
                               "0 = always exact (at ~1500 classes a round then takes minutes)."),
        "partition_parts": Key(4, _pos_int, "oef-coop: number of groups when partitioned (>= 1)."),
    },
    "cluster": {
        "backend": Key("auto", _choice(BACKENDS), "auto | cli (Slurm commands) | pyslurm."),
        "timeout": Key(30, _positive, "Seconds before a Slurm command/call is abandoned (> 0)."),
        "partitions": Key([], _str_list, "Partitions to manage; empty = all partitions."),
    },
    "classes": {
        "order": Key(
            ["comment", "wckey", "name"], _class_order,
            "Where a job's class is read from, first match wins: a `class=NAME` token in --comment,\n"
            "the job's --wckey, the job name. Any non-empty subset of comment, wckey, name.",
        ),
    },
    "tenants": {
        "map": Key(
            {}, _tenant_map,
            'Account -> tenant name; several accounts may map to one tenant, e.g. {acct_a = "physics"}.\n'
            "Accounts not listed are their own tenant.",
        ),
        "weights": Key(
            {}, _weights,
            "Tenant -> weight (> 0); overrides the weight taken from the account's fair-share Shares,\n"
            "e.g. {physics = 2.0}.",
        ),
    },
    "priority": {
        "site_factor_min": Key(0, _int, "Lowest SiteFactor slurm-fair sets (integer)."),
        "site_factor_max": Key(100000, _int, "Highest SiteFactor slurm-fair sets (integer, > site_factor_min)."),
        "levels": Key(10000, _pos_int, "Number of distinct SiteFactor values used (priority bands, >= 1; the default gives 300 accounts 33 levels each and 10 000 accounts one each)."),
    },
    "limits": {
        "manage": Key(True, _bool, "true = write per-account GrpTRES gres/gpu limits; false = priorities only."),
        "lend": Key(
            True, _bool,
            "true = an account's share is a guarantee and every GPU no waiting account's guarantee holds is\n"
            "lent to whoever can use it (limit = capacity minus the other accounts' claims; over-guarantee jobs\n"
            "are reclaimed by preemption when it is on); false = the share is a hard cap (limit = share).",
        ),
        "accounts": Key(
            [], _str_list,
            "Accounts to manage; empty = every leaf account (parents are never limited) with GPU jobs or a\n"
            "fair-share share.",
        ),
        "site_limits": Key(
            "respect", _choice(SITE_LIMIT_MODES),
            'GPU limits an account had before slurm-fair: "respect" = such an account is left alone (its\n'
            'limits kept); "adopt" = slurm-fair manages it and each of its own limits stays an upper bound.\n'
            "`slurm-fair rollback` restores them either way.",
        ),
    },
    "hooks": {
        "spool": Key(
            "", _path_or_empty,
            "Spool folder the hooks write job start/end records to (the spool= of their hooks.conf);\n"
            'each round reads them into the database first. "" = no ingestion. A relative path is\n'
            "relative to this file's folder.",
        ),
    },
    "submit": {
        "type_map": Key(
            "", _path_or_empty,
            'Type map published each round for job_submit.lua (`gpu_type_map.txt` next to the script);\n'
            '"" = do not publish. A relative path is relative to this file\'s folder.',
        ),
    },
    "preemption": {
        "enabled": Key(False, _bool, "true = signal and requeue over-share jobs (only requeue-able ones)."),
        "grace": Key(
            120, _nonneg,
            "Seconds between the checkpoint signal and the requeue (>= 0); the daemon wakes up for it.",
        ),
        "min_runtime": Key(
            600, _nonneg,
            "Lease, in seconds (>= 0): a job is never preempted before it ran this long since its start,\n"
            "its last requeue or its last checkpoint signal.",
        ),
        "signal": Key("USR1", _signal, 'Checkpoint signal sent to the batch shell, e.g. "USR1" (scancel --signal=SIG --batch).'),
        "max_jobs_per_round": Key(10, _pos_int, "At most this many jobs are signalled per round (>= 1)."),
        "upgrade": Key(
            False, _bool,
            "true = upgrade moves: a running fair:flex job on a slow GPU type is checkpointed and requeued onto a\n"
            "faster type with idle GPUs when the time it saves exceeds upgrade_cost (needs Slurm >= 23.02.6 to\n"
            "retype the requeued job, and enabled = true).",
        ),
        "upgrade_cost": Key(
            300, _nonneg,
            "Seconds a move costs the job (restart, reload, the work since its last checkpoint; >= 0): a move\n"
            "must save more than this.",
        ),
        "unrequeueable": Key(
            "hold-back", _choice(UNREQUEUEABLE_ACTIONS),
            "A job preemption would take that Slurm cannot requeue (--no-requeue, scontrol update requeue=0 during\n"
            "its grace, an salloc allocation): hold-back = its account's limits on that type are lowered by its\n"
            "GPUs until it ends; cancel = the same, then scancel after cancel_grace (batch jobs only);\n"
            "ignore = leave it running (it is only listed as skipped).",
        ),
        "cancel_grace": Key(
            1800, _nonneg,
            'Seconds a job found non-requeue-able runs on before unrequeueable = "cancel" cancels it (>= 0).',
        ),
    },
    "profiling": {
        "min_throughput": Key(1e-6, _positive, "Smallest throughput (steps/s) a report or profile may have (> 0)."),
        "max_throughput": Key(1e7, _positive, "Largest throughput (steps/s) a report may have (> min_throughput)."),
        "outlier_factor": Key(
            3.0, _gt1,
            "A report more than this factor above or below its reference (a trusted value of the same class\n"
            "and type, or the shipped prior) or, once the value has outlier_after samples, the value itself\n"
            "is rejected and counted (> 1).",
        ),
        "outlier_after": Key(1, _pos_int, "Samples a measured value needs before a report is also checked against it (>= 1)."),
        "average_weight": Key(
            0.25, _weight,
            "Moving average: the weight of a new sample, once the plain mean of the first 1/weight samples\n"
            "is built (in (0, 1]; 1 = keep only the last sample).",
        ),
        "stale_after": Key(30 * 86400, _positive, "Seconds after its last sample a measured value is marked stale (> 0)."),
        "conflict_margin": Key(
            0.25, _positive,
            "A tenant's reported speedup on a GPU type that differs from its measured one by more than the\n"
            "factor 1 + margin (either way) is flagged in status and explain (> 0).",
        ),
        "prefer_measured": Key(
            False, _bool,
            "true = the policies use a measured value where one exists, over what the tenant reported;\n"
            "false = reported values win, measured ones fill the types nobody reported.",
        ),
        "explore": Key(
            True, _bool,
            "true = a class with no profile on some GPU types gets its untyped jobs steered to a type it\n"
            "has not been measured on (through the published type map), so its profile fills in.",
        ),
        "nvml_map": Key(
            "", _path_or_empty,
            'CSV (nvml_name,gpu_type) mapping NVML device names to this site\'s GRES types; "" = the\n'
            "shipped map (profiles/nvml-gpu-types.csv). A relative path is relative to this file's folder.",
        ),
        "trusted_users": Key(
            [], _str_list,
            "Users whose profiling runs count as measured; empty = any user's. A profiling run is a one-GPU\n"
            "job with fair:profile in its comment (what `profile submit` submits); the token is not proof:\n"
            "any job can carry it, so list the users who run `profile submit` for the site (docs/profiling.md).",
        ),
        "max_change_factor": Key(
            2.0, _gt1,
            "A measured or harvested value moves at most this factor up or down within change_window (> 1).",
        ),
        "change_window": Key(86400, _positive, "Seconds of the window max_change_factor applies to (> 0)."),
        "shared_classes": Key(
            [], _str_list,
            "Classes any account's jobs may report on although another account has values for them (the\n"
            "site-wide and shipped classes are always shared); a report naming another account's class is refused.",
        ),
        "on_conflict": Key(
            "flag", _choice(ON_CONFLICT),
            "What a profile conflict does: flag (status/explain show it) | ignore-tenant (the account's job\n"
            "reports of that class are not used) | fallback (only profiling runs, site-wide and shipped values are).",
        ),
        "max_classes_per_account": Key(
            20, _pos_int,
            "Job classes per account in a round (>= 1); the jobs of further classes count as the class\n"
            "\"default\" (an event names them), so random job names cannot grow the solver's problem.",
        ),
    },
    "store": {
        "retention_days": Key(
            90, _nonneg,
            "Days of events, job records, profile reports and rounds the daemon keeps; older ones are\n"
            "pruned once a day (0 = keep everything). Profiles and state a round needs are never pruned.",
        ),
    },
    "metrics": {
        "listen": Key(
            "127.0.0.1:9817", _listen,
            'Address the daemon serves /metrics on: "HOST:PORT" (port 1..65535), an IPv6 address in brackets\n'
            '("[::1]:9817"); "" = off. Loopback by default; a wider address ("0.0.0.0:9817") is the\n'
            "admin's choice: the endpoint has no authentication and shows account names and shares.\n"
            "Read once when the daemon starts (SIGHUP does not move it).",
        ),
    },
}


# --------------------------------------------------------------------------------------------
# the dataclasses (field names and defaults must match SPEC; a test checks it)


@dataclass(frozen=True)
class DaemonConfig:
    period: float = 300
    early_round_after: float = 30
    database: str = "/var/lib/slurm-fair/slurm-fair.sqlite"
    dry_run: bool = True
    log_level: str = "info"
    publish_status: bool = True
    status_file: str = ""


@dataclass(frozen=True)
class PolicyConfig:
    name: str = "oef-coop"
    solver: str = ""
    themis_f: float = 0.8
    themis_lease: float = 600
    partition_above: int = 0
    partition_parts: int = 4

    def options(self) -> dict[str, float]:
        """Policy knobs as ``policies.solve(options=)`` takes them (each policy picks its own)."""
        return {"f": float(self.themis_f), "lease_s": float(self.themis_lease),
                "partition_above": int(self.partition_above), "partition_parts": int(self.partition_parts)}


@dataclass(frozen=True)
class ClusterConfig:
    backend: str = "auto"
    timeout: float = 30
    partitions: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClassesConfig:
    order: tuple[str, ...] = ("comment", "wckey", "name")


@dataclass(frozen=True)
class TenantsConfig:
    map: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    weights: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class PriorityConfig:
    site_factor_min: int = 0
    site_factor_max: int = 100000
    levels: int = 10000


@dataclass(frozen=True)
class LimitsConfig:
    manage: bool = True
    lend: bool = True
    accounts: tuple[str, ...] = ()
    site_limits: str = "respect"


@dataclass(frozen=True)
class HooksConfig:
    spool: str = ""


@dataclass(frozen=True)
class SubmitConfig:
    type_map: str = ""


@dataclass(frozen=True)
class PreemptionConfig:
    enabled: bool = False
    grace: float = 120
    min_runtime: float = 600
    signal: str = "USR1"
    max_jobs_per_round: int = 10
    upgrade: bool = False
    upgrade_cost: float = 300
    unrequeueable: str = "hold-back"
    cancel_grace: float = 1800


@dataclass(frozen=True)
class ProfilingConfig:
    min_throughput: float = 1e-6
    max_throughput: float = 1e7
    outlier_factor: float = 3.0
    outlier_after: int = 1
    average_weight: float = 0.25
    stale_after: float = 30 * 86400
    conflict_margin: float = 0.25
    prefer_measured: bool = False
    explore: bool = True
    nvml_map: str = ""
    trusted_users: tuple[str, ...] = ()
    max_change_factor: float = 2.0
    change_window: float = 86400
    shared_classes: tuple[str, ...] = ()
    on_conflict: str = "flag"
    max_classes_per_account: int = 20


@dataclass(frozen=True)
class StoreConfig:
    retention_days: float = 90


@dataclass(frozen=True)
class MetricsConfig:
    listen: str = "127.0.0.1:9817"

    @property
    def address(self) -> tuple[str, int] | None:
        """(host, port) to serve /metrics on, None when off (``listen = ""``)."""
        return parse_listen("metrics.listen", self.listen)


_SECTION_TYPES = {
    "daemon": DaemonConfig,
    "policy": PolicyConfig,
    "cluster": ClusterConfig,
    "classes": ClassesConfig,
    "tenants": TenantsConfig,
    "priority": PriorityConfig,
    "limits": LimitsConfig,
    "hooks": HooksConfig,
    "submit": SubmitConfig,
    "preemption": PreemptionConfig,
    "profiling": ProfilingConfig,
    "store": StoreConfig,
    "metrics": MetricsConfig,
}


@dataclass(frozen=True)
class Config:
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    classes: ClassesConfig = field(default_factory=ClassesConfig)
    tenants: TenantsConfig = field(default_factory=TenantsConfig)
    priority: PriorityConfig = field(default_factory=PriorityConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    hooks: HooksConfig = field(default_factory=HooksConfig)
    submit: SubmitConfig = field(default_factory=SubmitConfig)
    preemption: PreemptionConfig = field(default_factory=PreemptionConfig)
    profiling: ProfilingConfig = field(default_factory=ProfilingConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    source: str = "defaults"  # the config file's path, or "defaults" (no file read)
    database_path: Path = Path("/var/lib/slurm-fair/slurm-fair.sqlite")  # daemon.database, resolved
    spool_path: Path | None = None  # hooks.spool, resolved; None = no ingestion
    type_map_path: Path | None = None  # submit.type_map, resolved; None = do not publish
    nvml_map_path: Path | None = None  # profiling.nvml_map, resolved; None = the shipped map
    status_path: Path | None = None  # daemon.status_file, resolved (default: beside the database); None = off

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """Section -> key -> value, TOML/JSON friendly (tuples become lists)."""
        out: dict[str, dict[str, Any]] = {}
        for section in _SECTION_TYPES:
            sec = getattr(self, section)
            out[section] = {
                f.name: (list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, Mapping) else v)
                for f in fields(sec)
                for v in [getattr(sec, f.name)]
            }
        return out


# --------------------------------------------------------------------------------------------


def resolve_path(explicit: str | os.PathLike | None) -> Path:
    """``--config`` value, else ``$SLURM_FAIR_CONFIG``, else ``/etc/slurm-fair/slurm-fair.toml``."""
    if explicit:
        return Path(explicit)
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    return DEFAULT_PATH


def from_dict(data: Mapping[str, Any], source: str = "defaults", base: Path | None = None) -> Config:
    """Validate a parsed TOML document. ``base`` is the folder relative database paths start from."""
    if not isinstance(data, Mapping):
        raise InputError("config", data, "must be a table")
    for section in data:
        if section not in SPEC:
            raise InputError(section, data[section], f"unknown section (known: {', '.join(SPEC)})")
    sections = {}
    for section, keys in SPEC.items():
        raw = data.get(section, {})
        if not isinstance(raw, Mapping):
            raise InputError(section, raw, "must be a table")
        for key in raw:
            if key not in keys:
                raise InputError(f"{section}.{key}", raw[key], f"unknown key (known: {', '.join(keys)})")
        values = {}
        for key, spec in keys.items():
            v = raw.get(key, spec.default)
            values[key] = spec.check(f"{section}.{key}", v)
        sections[section] = _SECTION_TYPES[section](**values)
    pr = sections["priority"]
    if pr.site_factor_min >= pr.site_factor_max:
        raise InputError(
            "priority.site_factor_max", pr.site_factor_max,
            f"must be greater than priority.site_factor_min ({pr.site_factor_min})",
        )
    if pr.levels > pr.site_factor_max - pr.site_factor_min + 1:
        raise InputError(
            "priority.levels", pr.levels,
            f"more levels than distinct values in [{pr.site_factor_min}, {pr.site_factor_max}]",
        )
    pf = sections["profiling"]
    if pf.max_throughput <= pf.min_throughput:
        raise InputError("profiling.max_throughput", pf.max_throughput,
                         f"must be greater than profiling.min_throughput ({pf.min_throughput:g})")
    if sections["preemption"].upgrade and not sections["preemption"].enabled:
        raise InputError("preemption.upgrade", True, "needs preemption.enabled = true (a move is a checkpoint "
                         "signal, a grace and a requeue)")
    if sections["preemption"].enabled and not sections["limits"].manage:
        raise InputError("preemption.enabled", True, "needs limits.manage = true (preemption enforces the limits)")
    db = Path(sections["daemon"].database).expanduser()
    if not db.is_absolute():
        db = Path(os.path.normpath((base or Path.cwd()) / db))
    status = None
    if sections["daemon"].publish_status:
        status = _optional_path(sections["daemon"].status_file, base) or db.parent / STATUS_NAME
    return Config(**sections, source=source, database_path=db,
                  spool_path=_optional_path(sections["hooks"].spool, base),
                  type_map_path=_optional_path(sections["submit"].type_map, base),
                  nvml_map_path=_optional_path(sections["profiling"].nvml_map, base),
                  status_path=status)


def _optional_path(value: str, base: Path | None) -> Path | None:
    """A path key that may be "" (off), resolved like daemon.database: relative to the config file's folder."""
    if not value:
        return None
    path = Path(value).expanduser()
    return path if path.is_absolute() else Path(os.path.normpath((base or Path.cwd()) / path))


def load(path: str | os.PathLike | None = None) -> Config:
    """Read and validate the config file.

    ``path`` None means :func:`resolve_path` (``$SLURM_FAIR_CONFIG`` or the default path). Only a missing
    file at the built-in default path falls back to defaults (``Config.source == "defaults"``); a missing
    file that was asked for (``path`` or ``$SLURM_FAIR_CONFIG``) is an error.
    """
    p = resolve_path(path)
    if not p.exists():
        if path is None and p == DEFAULT_PATH and not os.environ.get(ENV_VAR):
            return from_dict({}, source="defaults")
        raise InputError("config", str(p), "file not found")
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError("config", str(p), f"cannot read: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise InputError("config", str(p), f"not UTF-8 text: {e}") from e
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError("config", str(p), f"invalid TOML: {e}") from e
    except RecursionError:
        raise InputError("config", str(p), "invalid TOML: a value nested too deeply") from None
    except ValueError as e:  # e.g. an integer literal longer than Python's digit limit
        raise InputError("config", str(p), f"invalid TOML: {e}") from None
    return from_dict(data, source=str(p), base=p.resolve().parent)


# --------------------------------------------------------------------------------------------


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot render {v!r} as TOML")


def _toml_key(k: str) -> str:
    if k and all(c.isalnum() or c in "_-" for c in k):
        return k
    return _toml_value(k)


def render(cfg_dict: Mapping[str, Mapping[str, Any]], header: bool = True) -> str:
    """A commented TOML file with the given values (section -> key -> value)."""
    lines: list[str] = []
    if header:
        lines += [
            "# slurm-fair configuration (TOML).",
            "#",
            "# Looked up at: --config PATH, else $SLURM_FAIR_CONFIG, else /etc/slurm-fair/slurm-fair.toml.",
            "# Every key is optional; the values below are the defaults. Unknown keys are errors.",
            "# Check a file with: slurm-fair config check --config PATH",
        ]
    for section, keys in SPEC.items():
        lines += ["", f"# {SECTION_DOCS[section]}", f"[{section}]"]
        for key, spec in keys.items():
            for doc_line in spec.doc.splitlines():
                lines.append(f"# {doc_line}")
            lines.append(f"{key} = {_toml_value(cfg_dict[section][key])}")
    return "\n".join(lines) + "\n"


def render_default() -> str:
    """The fully commented default configuration file (``etc/slurm-fair.toml`` equals this)."""
    return render({s: {k: spec.default for k, spec in keys.items()} for s, keys in SPEC.items()})
