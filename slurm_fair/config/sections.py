"""The configuration's sections: one frozen dataclass per TOML table, and every key declared once, as a field
``name: type = key(default, check, doc)``. The TOML template (``render_default``), the validation
(``from_dict``), the reference page (``docs/config-reference.md``) and :data:`SPEC` are all derived from these
fields; a section's comment comes from its ``@section`` decorator, the order of sections from :class:`Config`."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from ..catalog import SOLVERS
from .checks import (BACKENDS, _cap_gpus, _int_or_auto, LOG_LEVELS, ON_CONFLICT, SITE_LIMIT_MODES, UNREQUEUEABLE_ACTIONS, _bool,
                     _checkpoint_rules, _choice, _class_order, _db_path, _gt1, _host_id, _int, _knob_f, _listen, _nonneg,
                     _path_or_empty, _policy, _pos_int, _nonneg_int, _positive, _signal, _solver, _str_list, _tenant_map,
                     _upgrade_mode, _weight, _weights, parse_listen)


@dataclass(frozen=True)
class Key:
    """One key as the TOML file has it: its default (TOML form: lists, tables), validator and comment."""

    default: Any
    check: Callable[[str, Any], Any]
    doc: str


def key(default: Any, check: Callable[[str, Any], Any], doc: str) -> Any:
    """A section field: ``default`` as written in TOML, ``check`` its validator, ``doc`` its comment. The field's
    own default is ``check`` applied to ``default`` (lists become tuples, tables read-only mappings)."""
    typed = check("default", default)
    meta = {"key": Key(default, check, doc)}
    if isinstance(typed, (Mapping, list, dict, set)):
        return field(default_factory=lambda: typed, metadata=meta)
    return field(default=typed, metadata=meta)


def section(name: str, doc: str) -> Callable[[type], type]:
    """A frozen dataclass for the TOML table ``[name]``, ``doc`` its comment in the template."""

    def make(cls: type) -> type:
        cls = dataclass(frozen=True)(cls)
        cls.TABLE = name
        cls.DOC = doc
        return cls

    return make


def keys_of(cls: type) -> dict[str, Key]:
    """A section's keys in declaration order."""
    return {f.name: f.metadata["key"] for f in fields(cls)}


@section("daemon", "The slurm-fair daemon (`slurm-fair daemon`).")
class DaemonConfig:
    period: float = key(300, _positive, "Seconds between two allocation rounds (> 0).")
    early_round_after: float = key(
        30, _nonneg,
        "Debounce, in seconds, for early rounds triggered by job submissions/completions (>= 0).",
    )
    database: str = key(
        "/var/lib/slurm-fair/slurm-fair.sqlite", _db_path,
        "SQLite database (profiles, rounds, deviations). A relative path is relative to this file's folder.",
    )
    dry_run: bool = key(
        True, _bool,
        "true (the default: shadow mode) = compute and record rounds but never change\n"
        "anything in Slurm; `slurm-fair status`, `explain` and `report` show what it would do.\n"
        "Set false to let slurm-fair write limits, SiteFactors and the type map.",
    )
    log_level: str = key("info", _choice(LOG_LEVELS), "One of: " + ", ".join(LOG_LEVELS) + ".")
    publish_status: bool = key(
        True, _bool,
        "true = each round (and each poll between rounds) writes a small world-readable status file\n"
        "(status_file): per account and GPU type its guarantee, claims, GPUs in use and limit, per type the\n"
        "capacity and idle GPUs; `slurm-fair why JOBID` reads it, so users need no access to the database.\n"
        "It shows every account's numbers to every user (as squeue and sshare do); false = not written.",
    )
    status_file: str = key(
        "", _path_or_empty,
        'Where the status file goes; "" = status.json in the database\'s folder (that folder must be\n'
        "world-searchable, as the systemd unit's StateDirectoryMode=0755 makes it). A relative path is\n"
        "relative to this file's folder.",
    )
    host_id: str = key(
        "", _host_id,
        'This daemon\'s host in the leader lock (the database\'s "lease": docs/daemon.md, "High availability")\n'
        'and the name matched against `scontrol ping` (only_on_primary); "" = this machine\'s host name. Must\n'
        "differ between hosts that share the database; tests set it to play two hosts on one machine.",
    )
    only_on_primary: bool = key(
        False, _bool,
        "true = each round first asks `scontrol ping` which controller serves (the first one UP, in\n"
        "SlurmctldHost order) and runs only when that is this host (host_id); otherwise the round is\n"
        'skipped (logged "standby", nothing written to Slurm or the database, the leader lock given up).\n'
        "For a backup SlurmctldHost: enable the daemon on every controller host.",
    )


@section("policy", "Which allocation policy computes each tenant's ideal (fractional) share of every GPU type.")
class PolicyConfig:
    name: str = key(
        "oef-coop", _policy,
        "oef-noncoop | oef-coop | max-throughput | equal-share | gavel | gandiva-fair | bud | themis | hadar.",
    )
    solver: str = key(
        "", _solver,
        'LP solver: "" = the policy\'s own choice (the fastest exact one it has), or '
        + " | ".join(SOLVERS) + " to run its LPs through cvxpy.",
    )
    themis_f: float = key(
        0.8, _knob_f,
        "themis: fairness knob f in [0, 1); the 1 - f fraction of apps with the worst\n"
        "finish-time fairness bid in each auction (the paper's 0.8).",
    )
    themis_lease: float = key(
        600, _positive,
        "themis: seconds an auctioned allocation holds before its GPUs are\n"
        "auctioned again (the paper's 10 minutes; > 0).",
    )

    themis_work_conserving: bool = key(
        False, _bool,
        "themis: false (the paper's auction) = hidden payments that no app outside the auction can use stay\n"
        "idle until the next auction; true = they go to anyone below its caps, bidders included (then a bid\n"
        "lie can pay).",
    )

    partition_above: int = key(
        0, _nonneg_int,
        "oef-coop: with more classes than this, solve POP-style in partition_parts groups, each exact on its\n"
        "weight share of every GPU type: several times faster, but not exact (envy-freeness holds within a\n"
        "group only; classes of different groups were measured to envy each other by 20-90 %, total\n"
        "throughput within ~1-3 %); 0 = always exact (at ~1500 classes a round then takes a minute or more).",
    )
    partition_parts: int = key(4, _pos_int, "oef-coop: number of groups when partitioned (>= 1).")
    stable: bool = key(
        True, _bool,
        "Guarantees that hold still: oef-coop, oef-noncoop, gavel and max-throughput return, of their optima,\n"
        "the one nearest to last round's (same optimum), and the rounding keeps an account's last whole GPUs\n"
        "of a type while its share there is unchanged, or still rounds to them; false = any optimum, and\n"
        "the rounding carries the deviation every round.",
    )

    def options(self) -> dict[str, float | bool | int]:
        """Policy knobs as ``policies.solve(options=)`` takes them (each policy declares its own)."""
        return {"f": float(self.themis_f), "lease_s": float(self.themis_lease),
                "work_conserving": bool(self.themis_work_conserving),
                "partition_above": int(self.partition_above), "partition_parts": int(self.partition_parts),
                "stable": bool(self.stable)}


@section("cluster", "How slurm-fair talks to Slurm.")
class ClusterConfig:
    backend: str = key("auto", _choice(BACKENDS), "auto | cli (Slurm commands) | pyslurm.")
    timeout: float = key(30, _positive, "Seconds before a Slurm command/call is abandoned (> 0).")
    partitions: tuple[str, ...] = key([], _str_list, "Partitions to manage; empty = all partitions.")


@section("classes", "Job classes: a job's class selects its throughput profile (`slurm-fair profiles`).")
class ClassesConfig:
    order: tuple[str, ...] = key(
        ["comment", "wckey", "name"], _class_order,
        "Where a job's class is read from, first match wins: a `class=NAME` token in --comment,\n"
        "the job's --wckey, the job name. Any non-empty subset of comment, wckey, name.",
    )


@section("tenants", "Tenants: who is treated as one party by the fairness policy.")
class TenantsConfig:
    map: Mapping[str, str] = key(
        {}, _tenant_map,
        'Account -> tenant name; several accounts may map to one tenant, e.g. {acct_a = "physics"}.\n'
        "Accounts not listed are their own tenant.",
    )
    weights: Mapping[str, float] = key(
        {}, _weights,
        "Tenant -> weight (> 0); overrides the weight taken from the account's fair-share Shares,\n"
        "e.g. {physics = 2.0}.",
    )


@section("priority", "Priority: slurm-fair steers scheduling order through each job's SiteFactor.")
class PriorityConfig:
    site_factor_min: int = key(0, _int, "Lowest SiteFactor slurm-fair sets (integer).")
    site_factor_max: int | str = key(
        "auto", _int_or_auto,
        'Highest SiteFactor slurm-fair sets (integer, > site_factor_min), or "auto": site_factor_min + the sum\n'
        "of the site's PriorityWeight* (TRES weights included; scontrol show config, read when the daemon starts), so\n"
        "SiteFactor weighs at most as much as all of Slurm's own factors together; 100000 where they are all 0\n"
        "or cannot be read. A range above that sum swamps them: slurm-fair preflight calls it a problem. A pilot\n"
        "(limits.accounts set) uses no range: its jobs swap their own priorities (docs/daemon.md#priority).",
    )
    levels: int = key(
        10000, _pos_int,
        "Number of distinct SiteFactor values used (priority bands, >= 1; the default gives 300 accounts 33 levels each and 10 000 accounts one each;\n"
        "at most one per value of the range: a narrower range uses fewer).",
    )
    age_floor: float = key(
        14400, _nonneg,
        "Age floor, in seconds (>= 0; 0 = off): a pending GPU job that has waited this long since its submission\n"
        "rises above every account's deficit-ordered jobs, first come first among such jobs (as Slurm's age\n"
        "factor would lift it), so that no deficit order holds a job back for ever.",
    )


@section("limits", "Limits: per-account per-type GrpTRES that guarantee each account its share and lend the rest.")
class LimitsConfig:
    manage: bool = key(True, _bool, "true = write per-account GrpTRES gres/gpu limits; false = priorities only.")
    lend: bool = key(
        True, _bool,
        "true = an account's share is a guarantee and every GPU no waiting account's guarantee holds is\n"
        "lent to whoever can use it (limit = capacity minus the other accounts' claims; over-guarantee jobs\n"
        "are reclaimed by preemption when it is on); false = the share is a hard cap (limit = share).",
    )
    borrow_gpus: int = key(
        -1, _cap_gpus,
        "Lending horizon (limits.lend, preemption.enabled = false): on a type where another account with jobs\n"
        "waiting for it holds less than its guarantee (it could claim the rest as GPUs free), an account may\n"
        "hold at most its guarantee + max(borrow_gpus, borrow_fraction x its guarantee, rounded up) there;\n"
        "-1 (the default) = no cap, every unclaimed GPU is lent. With preemption on it has no effect: borrowed\n"
        "GPUs come back by reclaim.",
    )
    borrow_fraction: float = key(
        0.0, _nonneg,
        "With borrow_gpus >= 0: the share of its guarantee an account may borrow on top of it (>= 0).",
    )
    accounts: tuple[str, ...] = key(
        [], _str_list,
        "Accounts to manage; empty = every leaf account (parents are never limited) with GPU jobs or a\n"
        "fair-share share.",
    )
    site_limits: str = key(
        "respect", _choice(SITE_LIMIT_MODES),
        'GPU limits an account had before slurm-fair: "respect" = such an account is left alone (its\n'
        'limits kept); "adopt" = slurm-fair manages it and each of its own limits stays an upper bound.\n'
        "`slurm-fair rollback` restores them either way.",
    )
    ownership_file: str = key(
        "auto", _path_or_empty,
        "File where slurm-fair keeps, per cluster, account and GPU limit, the value it last wrote (written\n"
        "with every limit change, atomically, 0640): a database lost or replaced cannot take it along, so a\n"
        "new database tells slurm-fair's own limits (equal to the file's) from the site's, and rollback gives\n"
        'back only what slurm-fair wrote. "auto" = limits.json in a folder beside the database\'s folder, named\n'
        "after it with -ownership (/var/lib/slurm-fair-ownership/limits.json for the default database): not\n"
        'the database\'s folder, which a reset or restore replaces; "" = off. A relative path is relative to\n'
        "this file's folder.",
    )
    qos_accepted: tuple[str, ...] = key(
        [], _str_list,
        "QOS whose GPU limits the site keeps on purpose: `slurm-fair preflight` then notes them instead of\n"
        "failing (a QOS GPU limit below a type's capacity applies before slurm-fair's account limits, so it\n"
        "can hold a job back that its account's guarantee would start).",
    )


@section("hooks", "Job records from the Slurm hooks (`slurm-fair hooks install`, etc/slurm.conf.hooks).")
class HooksConfig:
    spool: str = key(
        "", _path_or_empty,
        "Spool folder the hooks write job start/end records to (the spool= of their hooks.conf);\n"
        'each round reads them into the database first. "" = no ingestion. A relative path is\n'
        "relative to this file's folder.",
    )


@section("submit", "Submission: the GPU type map read by etc/job_submit.lua to type untyped GPU requests.")
class SubmitConfig:
    type_map: str = key(
        "", _path_or_empty,
        'Type map published each round for job_submit.lua (`gpu_type_map.txt` next to the script);\n'
        '"" = do not publish. A relative path is relative to this file\'s folder.',
    )
    max_age: float = key(
        0, _nonneg,
        "Seconds a published map stays valid (its #@expires line): past it job_submit.lua ignores the map\n"
        "(the daemon stopped publishing) and leaves untyped requests as they are. 0 = 3 x daemon.period, at\n"
        "least 60.",
    )


@section("preemption", "Preemption: over-share running jobs get a checkpoint signal, then a requeue after the grace.")
class PreemptionConfig:
    enabled: bool = key(False, _bool, "true = signal and requeue over-share jobs (only requeue-able ones).")
    grace: float = key(
        120, _nonneg,
        "Seconds between the checkpoint signal and the requeue (>= 0); the daemon wakes up for it.",
    )
    min_runtime: float = key(
        600, _nonneg,
        "Lease, in seconds (>= 0): a job is never preempted before it ran this long since its start,\n"
        "its last requeue or its last checkpoint signal.",
    )
    signal: str = key(
        "USR1", _signal,
        'Checkpoint signal sent to the batch shell, e.g. "USR1" (scancel --signal=SIG --batch).',
    )
    max_jobs_per_round: int = key(10, _pos_int, "At most this many jobs are signalled per round (>= 1).")
    max_requeues_per_day: int = key(
        2, _pos_int,
        "A reclaim never signals a job that slurm-fair requeued this many times in the last 24 h (>= 1).",
    )
    upgrade: str = key(
        "checkpointing", _upgrade_mode,
        "Upgrade moves: a running fair:flex job on a slow GPU type is checkpointed and requeued onto a faster\n"
        "type with idle GPUs when the time it saves exceeds upgrade_cost (Slurm >= 23.02.6 retypes the requeued\n"
        'job; older Slurm gets none). "checkpointing" = only jobs that declare they checkpoint: Slurm may\n'
        "requeue them and their comment has the token fair:checkpoint, or a checkpointing rule names them;\n"
        '"all" = every fair:flex job Slurm may requeue; "off" = none (true / false mean "all" / "off").\n'
        "Moves need no reclaim: they run whether enabled is true or false.",
    )
    checkpointing: tuple[str, ...] = key(
        [], _checkpoint_rules,
        'Site rule for upgrade = "checkpointing": jobs that checkpoint without saying so in their comment, as\n'
        '"account:NAME", "partition:NAME" or "class:NAME" entries, e.g. ["account:physics", "class:resnet50"]\n'
        "(the job must still be requeue-able).",
    )

    @property
    def moves(self) -> bool:
        """Upgrade moves are on (for some jobs)."""
        return self.upgrade != "off"

    upgrade_cost: float = key(
        300, _nonneg,
        "Seconds a move costs the job (restart, reload, the work since its last checkpoint; >= 0): a move\n"
        "must save more than this.",
    )
    unrequeueable: str = key(
        "hold-back", _choice(UNREQUEUEABLE_ACTIONS),
        "A job preemption would take that Slurm cannot requeue (--no-requeue, scontrol update requeue=0 during\n"
        "its grace, an salloc allocation): hold-back = its account's limits on that type are lowered by its\n"
        "GPUs, and the account starts no GPU job on any type (its limits held at what it runs) until the\n"
        "demand it was held back for runs, at most hold_back_max (then scancel as under cancel); cancel =\n"
        "the same, then scancel after cancel_grace (salloc/srun allocations too; with its other\n"
        "non-requeue-able jobs on that type, newest first, as many GPUs as the waiting job needs); ignore =\n"
        "leave it running (it is only listed as skipped).",
    )
    cancel_grace: float = key(
        1800, _nonneg,
        'Seconds a job found non-requeue-able runs on before unrequeueable = "cancel" cancels it (>= 0).',
    )
    hold_back_max: float = key(
        14400, _nonneg,
        'Seconds a job held back under unrequeueable = "hold-back" runs on while its account is still over its\n'
        "guarantee on that type and someone waits; then it is cancelled (scancel, the reason recorded), as\n"
        'under "cancel". 0 = no bound (held back until the demand it owes runs or it ends).',
    )


@section("profiling", "Profiling: throughput reports from jobs (`slurm-fair profile ...`), how they update profiles.")
class ProfilingConfig:
    min_throughput: float = key(1e-6, _positive, "Smallest throughput (steps/s) a report or profile may have (> 0).")
    max_throughput: float = key(
        1e7, _positive,
        "Largest throughput (steps/s) a report, `profiles import` or `profiles set` may have (> min_throughput).",
    )
    outlier_factor: float = key(
        3.0, _gt1,
        "A report more than this factor above or below its reference (a trusted value of the same class\n"
        "and type, or the shipped prior) or, once the value has outlier_after samples, the value itself\n"
        "is rejected and counted (> 1).",
    )
    outlier_after: int = key(
        1, _pos_int,
        "Samples a measured value needs before a report is also checked against it (>= 1).",
    )
    average_weight: float = key(
        0.25, _weight,
        "Moving average: the weight of a new sample, once the plain mean of the first 1/weight samples\n"
        "is built (in (0, 1]; 1 = keep only the last sample).",
    )
    stale_after: float = key(
        30 * 86400, _positive,
        "Seconds after its last sample a measured value is marked stale (> 0).",
    )
    conflict_margin: float = key(
        0.25, _positive,
        "A tenant's reported speedup on a GPU type that differs from its measured one by more than the\n"
        "factor 1 + margin (either way) is flagged in status and explain (> 0).",
    )
    prefer_measured: bool = key(
        False, _bool,
        "true = the policies use a measured value where one exists, over what the tenant reported;\n"
        "false = reported values win, measured ones fill the types nobody reported.",
    )
    measured_speeds: bool = key(
        True, _bool,
        "true = an account's class with a measured value (a profiling run or a job report) on some GPU\n"
        "type gets its speeds from measurements only: its reported (set/imported) values are not used on\n"
        "any type; types it has not run on take the site-wide or shipped value. A reported value on a type\n"
        "never run on could sandbag the others (speeds are normalized to the slowest type).",
    )
    explore: bool = key(
        True, _bool,
        "true = a class with no profile on some GPU types gets its untyped jobs steered to a type it\n"
        "has not been measured on (through the published type map), so its profile fills in.",
    )
    nvml_map: str = key(
        "", _path_or_empty,
        'CSV (nvml_name,gpu_type) mapping NVML device names to this site\'s GRES types; "" = the shipped\n'
        "map (slurm_fair/profiling/data/nvml-gpu-types.csv). A relative path is relative to this file's folder.",
    )
    trusted_users: tuple[str, ...] = key(
        [], _str_list,
        "Users whose profiling runs count as measured; empty = any user's. A profiling run is a one-GPU\n"
        "job with fair:profile in its comment (what `profile submit` submits); the token is not proof:\n"
        "any job can carry it, so list the users who run `profile submit` for the site (docs/profiling.md).",
    )
    max_change_factor: float = key(
        2.0, _gt1,
        "A measured or harvested value stays within this factor of every value it held in the last\n"
        "change_window seconds (a sliding window; > 1).",
    )
    change_window: float = key(86400, _positive, "Seconds of the window max_change_factor applies to (> 0).")
    shared_classes: tuple[str, ...] = key(
        [], _str_list,
        "Ignored since 0.2.0 (kept so that configurations naming it still load): every account's reports of\n"
        "any class name are its own, kept apart from other accounts' values of the same name (issue 30).",
    )
    on_conflict: str = key(
        "flag", _choice(ON_CONFLICT),
        "What a profile conflict does: flag (status/explain show it) | ignore-tenant (the account's job\n"
        "reports of that class are not used) | fallback (only profiling runs, site-wide and shipped values are).",
    )
    new_class_range: float = key(
        100.0, _gt1,
        "A report of a class with no trusted value (no profiling run, not shipped, not site-wide) must lie\n"
        "within the lowest..highest value of the site's known classes on that GPU type (shipped, site-wide,\n"
        "and measured ones when trusted_users is set), widened by this factor (> 1; docs/profiling.md).",
    )
    new_class_ratio: float = key(
        3.0, _gt1,
        "Such a class's report on one type, over its own value on another type, must lie within the\n"
        "ratios the known classes show between those two types, widened by this factor (> 1): the shares\n"
        "follow speed ratios, so this bound is what keeps a new class from claiming an extreme speedup.",
    )
    max_classes_per_account: int = key(
        20, _pos_int,
        "Job classes per account in a round (>= 1); the jobs of further classes count as the class\n"
        "\"default\" (an event names them), so random job names cannot grow the solver's problem.",
    )


@section("store", "The database: how long records are kept.")
class StoreConfig:
    retention_days: float = key(
        90, _nonneg,
        "Days of events, job records, profile reports, rounds and pending-job sightings the daemon keeps;\n"
        "older ones are pruned once a day (0 = keep everything, profiles too). State a round needs is never pruned.",
    )
    profile_days: float = key(
        90, _nonneg,
        "Days a profile value is kept unused: not updated (report, measurement, import, set) and its class\n"
        "named by no job record, pending job, share or report of its account since (any account's, for a\n"
        "site-wide value); pruned with the rest (0 = keep every profile). Shipped values are never pruned.",
    )


@section("metrics", "Prometheus metrics: the daemon serves /metrics over HTTP (docs/metrics-reports.md, 'Metrics (Prometheus)').")
class MetricsConfig:
    listen: str = key(
        "127.0.0.1:9817", _listen,
        'Address the daemon serves /metrics on: "HOST:PORT" (port 1..65535), an IPv6 address in brackets\n'
        '("[::1]:9817"); "" = off. Loopback by default; a wider address ("0.0.0.0:9817") is the\n'
        "admin's choice: the endpoint has no authentication and shows account names and shares.\n"
        "Read once when the daemon starts (SIGHUP does not move it).",
    )

    @property
    def address(self) -> tuple[str, int] | None:
        """(host, port) to serve /metrics on, None when off (``listen = ""``)."""
        return parse_listen("metrics.listen", self.listen)


def _section_field(cls: type) -> Any:
    return field(default_factory=cls, metadata={"section": cls})


@dataclass(frozen=True)
class Config:
    daemon: DaemonConfig = _section_field(DaemonConfig)
    policy: PolicyConfig = _section_field(PolicyConfig)
    cluster: ClusterConfig = _section_field(ClusterConfig)
    classes: ClassesConfig = _section_field(ClassesConfig)
    tenants: TenantsConfig = _section_field(TenantsConfig)
    priority: PriorityConfig = _section_field(PriorityConfig)
    limits: LimitsConfig = _section_field(LimitsConfig)
    hooks: HooksConfig = _section_field(HooksConfig)
    submit: SubmitConfig = _section_field(SubmitConfig)
    preemption: PreemptionConfig = _section_field(PreemptionConfig)
    profiling: ProfilingConfig = _section_field(ProfilingConfig)
    store: StoreConfig = _section_field(StoreConfig)
    metrics: MetricsConfig = _section_field(MetricsConfig)
    source: str = "defaults"  # the config file's path, or "defaults" (no file read)
    database_path: Path = Path("/var/lib/slurm-fair/slurm-fair.sqlite")  # daemon.database, resolved
    spool_path: Path | None = None  # hooks.spool, resolved; None = no ingestion
    type_map_path: Path | None = None  # submit.type_map, resolved; None = do not publish
    nvml_map_path: Path | None = None  # profiling.nvml_map, resolved; None = the shipped map
    status_path: Path | None = None  # daemon.status_file, resolved (default: beside the database); None = off
    # limits.ownership_file, resolved ("auto": beside the database's folder); None = off
    ownership_path: Path | None = Path("/var/lib/slurm-fair-ownership/limits.json")

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """Section -> key -> value, TOML/JSON friendly (tuples become lists)."""
        out: dict[str, dict[str, Any]] = {}
        for name in SECTIONS:
            sec = getattr(self, name)
            out[name] = {
                f.name: (list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, Mapping) else v)
                for f in fields(sec)
                for v in [getattr(sec, f.name)]
            }
        return out


#: TOML table -> its section dataclass, in the order of :class:`Config`
SECTIONS: dict[str, type] = {f.name: f.metadata["section"] for f in fields(Config) if "section" in f.metadata}
assert all(cls.TABLE == name for name, cls in SECTIONS.items()), "a Config field must be named after its table"
#: section -> key -> Key (default in TOML form, validator, comment), derived from the fields
SPEC: dict[str, dict[str, Key]] = {name: keys_of(cls) for name, cls in SECTIONS.items()}
SECTION_DOCS: dict[str, str] = {name: cls.DOC for name, cls in SECTIONS.items()}
