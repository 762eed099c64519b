"""Typed records of what a round decided and did: :class:`RoundDetails` (stored as the round's ``details`` JSON)
and :class:`PreemptionSummary` (its ``preemption`` part). One place turns them into JSON and back
(:meth:`RoundDetails.to_json` / :meth:`RoundDetails.from_json`); the daemon writes them, and every reader
(``status``, ``explain``, ``report``, ``/metrics``, the simulator, ``admin``) reads fields, not string keys.

Reading is lenient: a key this version does not know (a newer daemon's) is kept in ``other`` and written back
unchanged; a key that is missing (an older daemon's round, or a failed round that never got so far) reads as
the field's default. Optional parts of a round (the apply results, the status file, preemption...) are written
only when the round has them, so a stored round says what happened and nothing else. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

Json = dict[str, Any]

OPTIONAL = {"optional": True}  # field metadata: written only when not None


def _field_dict() -> Any:
    return field(default_factory=dict)


def _to_json(obj: Any) -> Json:
    out: Json = {}
    for f in dataclasses.fields(obj):
        if f.name == "other":
            continue
        v = getattr(obj, f.name)
        if v is None and f.metadata.get("optional"):
            continue
        out[f.name] = v.to_json() if hasattr(v, "to_json") else v
    out.update(obj.other)
    return out


def _from_json(cls: type, data: Any, nested: Mapping[str, type] = {}) -> Any:
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        return cls()
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "other"}
    kw: Json = {}
    for k, v in data.items():
        f = fields.get(k)
        if f is None:
            continue
        if f.default_factory is not dataclasses.MISSING:  # a container: anything else reads as an empty one
            empty = f.default_factory()
            v = v if isinstance(v, type(empty)) else empty
        kw[k] = nested[k].from_json(v) if k in nested and v is not None else v
    names = set(fields)
    return cls(**kw, other={k: v for k, v in data.items() if k not in names})


@dataclass
class PreemptionSummary:
    """What a round's preemption decided (``would``: the steps of a dry run) and did: per outcome the steps as
    JSON objects (job_id, account, gpu_type, gpus, reason; ``target_type`` for an upgrade move, ``error`` for a
    failure, ``preemption_id`` once recorded). ``held_back`` and ``cancelled`` exist only when it acted."""

    over: Any = None  # accounts above what preemption enforces: account -> type -> GPUs
    waiting: Any = None  # accounts waiting for GPUs: account -> type -> GPUs
    upgrades: int = 0
    skipped: list[Json] = field(default_factory=list)
    signalled: list[Json] = field(default_factory=list)
    requeued: list[Json] = field(default_factory=list)
    resolved: list[Json] = field(default_factory=list)
    gone: list[Json] = field(default_factory=list)
    failed: list[Json] = field(default_factory=list)
    held_back: list[Json] | None = field(default=None, metadata=OPTIONAL)
    cancelled: list[Json] | None = field(default=None, metadata=OPTIONAL)
    would: list[Json] | None = field(default=None, metadata=OPTIONAL)
    held_back_limits: Json | None = field(default=None, metadata=OPTIONAL)
    other: Json = _field_dict()

    def steps(self, outcome: str) -> list[Json]:
        """The steps with this outcome (``signalled``, ``held-back``...; [] for one the round did not have)."""
        return list(getattr(self, outcome.replace("-", "_"), None) or [])

    def to_json(self) -> Json:
        out = _to_json(self)
        if "held_back" in out:  # the stored key is the preemption state's name
            out = {("held-back" if k == "held_back" else k): v for k, v in out.items()}
        return out

    @classmethod
    def from_json(cls, data: Any) -> "PreemptionSummary":
        if isinstance(data, Mapping) and "held-back" in data:
            data = {("held_back" if k == "held-back" else k): v for k, v in data.items()}
        return _from_json(cls, data)


@dataclass
class RoundDetails:
    """Everything a round records beside its status row. Per-account values are keyed by account, then by GPU
    type where they are per type."""

    policy: str = ""
    slurm_version: str = ""
    capacity: dict[str, int] = _field_dict()  # GPU type -> usable GPUs
    accounts: list[str] = field(default_factory=list)  # the accounts the round managed
    tenants: dict[str, str] = _field_dict()  # account -> tenant
    weights: dict[str, float] = _field_dict()  # tenant -> weight
    ideal: dict[str, dict[str, float]] = _field_dict()  # the policy's fractional share
    real: dict[str, dict[str, int]] = _field_dict()  # the rounded share: the guarantee per type
    extra: dict[str, Any] = _field_dict()
    limits: dict[str, dict[str, int]] = _field_dict()  # the planned limits
    lend: bool = False  # limits.lend: guarantees lend, or hard caps
    claims: dict[str, dict[str, int]] = _field_dict()  # of the guarantee, held for the account's waiting jobs
    lendable: dict[str, int] = _field_dict()  # per type, GPUs no waiting account's claim holds
    deviation_before: dict[str, dict[str, float]] = _field_dict()
    deviations: dict[str, dict[str, float]] = _field_dict()  # carried to the next round
    min_gpus: dict[str, Any] = _field_dict()
    demand: dict[str, Any] = _field_dict()  # account -> GPUs its jobs could use
    pending_gpus: dict[str, int] = _field_dict()
    pending_jobs: dict[str, int] = _field_dict()
    held_back: dict[str, dict[str, int]] = _field_dict()  # GPUs the limits are lowered by (daemon/preemption/unrequeueable.py)
    held_at: dict[str, dict[str, int]] = _field_dict()  # accounts held back across all their jobs: the most they hold
    held_why: dict[str, str] = _field_dict()  # ... and the demand they are held back for
    # account -> key -> a GPU limit someone else set since slurm-fair wrote it (CLEAR: removed): kept, never written
    drift: dict[str, dict[str, int]] = _field_dict()
    # GPU limits in Slurm a store with no record faced: nothing written until `slurm-fair limits adopt | clear`
    unrecorded: dict[str, dict[str, int]] = _field_dict()
    not_demand: dict[str, dict[str, int]] = _field_dict()  # account -> why -> GPUs of pending jobs that could not start
    in_use: dict[str, dict[str, int]] = _field_dict()  # GPUs held by running jobs
    classes: dict[str, dict[str, Any]] = _field_dict()  # account -> class -> its demand, throughput, source, ideal
    deficits: dict[str, float] = _field_dict()
    limits_before: dict[str, dict[str, Any]] = _field_dict()
    limit_changes: dict[str, dict[str, Any]] = _field_dict()
    left_alone: list[str] = field(default_factory=list)  # accounts whose own GPU limits are respected
    site_factor_changes: int = 0
    site_factors_set: int = 0
    site_factor_changes_deferred: int = 0
    dt: float | None = None
    untyped_targets: dict[str, Any] = _field_dict()
    partition_types: dict[str, list[str]] = _field_dict()  # GPU types per partition (the map's #@partition lines)
    explore_moves: Any = None  # profiling.explore: one GPU of a limit moved to an unprofiled type
    retype_supported: bool = False
    prices: dict[str, float] | None = None  # market policies (bud): the price of one GPU of each type
    warm_start: dict[str, Any] = _field_dict()  # what seeded the solve, binding rows kept
    fairness: dict[str, Any] | None = field(default=None, metadata=OPTIONAL)  # envy / SI counts, or {"error"}
    throughput: dict[str, Any] | None = field(default=None, metadata=OPTIONAL)  # per account: ideal and placed
    # hashes of the problem solved: {"problem", "capacity", "accounts": {account: hash}} (fairness.stability)
    fingerprint: dict[str, Any] | None = field(default=None, metadata=OPTIONAL)
    # what happened after the decision (present only when it did)
    hook_records: dict[str, Any] | None = field(default=None, metadata=OPTIONAL)
    profile_reports: dict[str, Any] | None = field(default=None, metadata=OPTIONAL)
    classes_folded: dict[str, list[str]] | None = field(default=None, metadata=OPTIONAL)  # the first FOLD_NAMES
    classes_folded_count: dict[str, int] | None = field(default=None, metadata=OPTIONAL)  # where more were folded
    pruned: dict[str, Any] | None = field(default=None, metadata=OPTIONAL)
    preemption: PreemptionSummary | None = field(default=None, metadata=OPTIONAL)
    preemption_error: str | None = field(default=None, metadata=OPTIONAL)
    apply_error: str | None = field(default=None, metadata=OPTIONAL)
    apply_failures: dict[str, str] | None = field(default=None, metadata=OPTIONAL)
    apply_batch_errors: list[Any] | None = field(default=None, metadata=OPTIONAL)
    site_factor_failures: dict[str, str] | None = field(default=None, metadata=OPTIONAL)
    retyped: list[Json] | None = field(default=None, metadata=OPTIONAL)
    retype_error: str | None = field(default=None, metadata=OPTIONAL)
    type_map_written: Any = field(default=None, metadata=OPTIONAL)
    type_map_error: str | None = field(default=None, metadata=OPTIONAL)
    status_file: str | None = field(default=None, metadata=OPTIONAL)
    status_file_private: str | None = field(default=None, metadata=OPTIONAL)
    status_file_error: str | None = field(default=None, metadata=OPTIONAL)
    ownership_error: str | None = field(default=None, metadata=OPTIONAL)  # limits.ownership_file unusable
    other: Json = _field_dict()  # keys of another version, kept as they were

    def to_json(self) -> Json:
        return _to_json(self)

    @classmethod
    def from_json(cls, data: Any) -> "RoundDetails":
        """A round's stored ``details`` (None, {} or a failed round's partial details read as defaults)."""
        return _from_json(cls, data, {"preemption": PreemptionSummary})

    @classmethod
    def of_round(cls, row: Any) -> "RoundDetails":
        """The details of a round as the store returns it (``store.Round``; None: no round)."""
        return cls.from_json(None if row is None else row.details)
