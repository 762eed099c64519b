"""Round planning: from a cluster snapshot and profiles to per-account GPU limits, job priorities and the GPU
type map. Pure functions of data (no I/O): the daemon's round (``daemon/round.py``) observes Slurm, calls
:func:`decide`, then applies and records the result.

One concern a module:

* :mod:`.eligible` — demand is what could start: held, dependent, future, reservation-bound jobs are not;
* :mod:`.demand` — which jobs count, their class, what each (account, class) asks for now;
* :mod:`.problem` — profiles per (account, class, type), tenants and weights: the policy's input;
* :mod:`.limits` — the policy's fractional shares to whole GPUs and per-account GrpTRES limits;
* :mod:`.priority` — deficits and SiteFactor;
* :mod:`.typemap` — the GPU type map for untyped requests, exploration, retyping pending jobs;
* :mod:`.view` — one snapshot's partition view (the managed partitions beside the whole), made once;
* :mod:`.decide` — a round's decisions, all at once.

The names below are re-exported so callers write ``plan.decide``, ``plan.make_plan`` … without knowing the
module.
"""

from .decide import MAX_RETYPES, MAX_SITE_FACTOR_UPDATES, UNKNOWN_SOURCES, Decisions, decide, known_types, type_map
from .demand import (DEFAULT_CLASS, LIMIT_REASONS, NEVER_MANAGED, ClassDemand, FreeGPUs, Triggers, Waiting, early_triggers, flexible_as_untyped, gpu_jobs, gpus_in_use, pending_gpus,
                     held_elsewhere, idle_gpus, job_class, managed_accounts, parent_accounts, observe_demand,
                     partition_view, pending_typed, place_gpus, received_gpus, startable, typed_claims,
                     usable_capacity, waiting_gpus)
from .eligible import blocked_kind, counted, not_demand
from .borrow import Borrowing, waiting_types
from .limits import (Plan, account_throughput, claims_of, drift, lend_limits, limit_batches, limit_changes, make_plan,
                     pin_drift, real_per_class, restore, round_fairness, with_held_elsewhere)
from .priority import factor_range, level_value, pilot_factors, site_factors, update_deficit, with_weights
from .problem import (SRC_ACCOUNT, SRC_ASSUMED, SRC_SHIPPED, SRC_SITE, SRC_UNPROFILED, Built, ProfileIndex,
                      build_problem, lookup_throughput, tenant_weights, tree_weight, type_order)
from .typemap import (DEFAULT_TARGET, PartitionTypes, Retype, Target, explore_plan, explore_targets, flexible_note,
                      partition_types, retype_moves, share_room, untyped_targets, with_retypes)
from .view import PartitionView

__all__ = [
    "MAX_RETYPES", "MAX_SITE_FACTOR_UPDATES", "UNKNOWN_SOURCES", "Decisions", "decide", "known_types", "type_map",
    "DEFAULT_CLASS", "LIMIT_REASONS", "NEVER_MANAGED", "ClassDemand", "FreeGPUs", "Triggers", "Waiting", "early_triggers", "flexible_as_untyped", "gpu_jobs", "gpus_in_use", "pending_gpus",
    "held_elsewhere", "idle_gpus", "job_class", "managed_accounts", "parent_accounts", "observe_demand",
    "partition_view", "pending_typed", "place_gpus", "received_gpus", "startable", "typed_claims", "usable_capacity",
    "waiting_gpus", "blocked_kind", "counted", "not_demand",
    "Borrowing", "Plan", "account_throughput", "claims_of", "drift", "lend_limits", "limit_batches", "limit_changes", "make_plan",
    "pin_drift", "real_per_class", "restore", "round_fairness", "with_held_elsewhere", "waiting_types",
    "factor_range", "level_value", "pilot_factors", "site_factors", "update_deficit", "with_weights",
    "SRC_ACCOUNT", "SRC_ASSUMED", "SRC_SHIPPED", "SRC_SITE", "SRC_UNPROFILED", "Built", "ProfileIndex",
    "build_problem", "lookup_throughput", "tenant_weights", "tree_weight", "type_order",
    "DEFAULT_TARGET", "PartitionTypes", "Retype", "Target", "explore_plan", "explore_targets", "flexible_note",
    "partition_types", "retype_moves", "share_room", "untyped_targets", "with_retypes",
    "PartitionView",
]
