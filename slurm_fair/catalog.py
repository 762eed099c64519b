"""The names other layers validate against: the allocation policies (name -> module in ``slurm_fair.policies``)
and the LP solvers a policy can run its LPs through (cvxpy's names; ``lp.py`` maps them to cvxpy's constants).

A leaf module, so that the config (which validates ``policy.name`` and ``policy.solver``) needs neither the
policies nor cvxpy: each list is declared here once and read by ``config``, ``policies`` and ``lp``."""

from __future__ import annotations

POLICIES = {
    "oef-noncoop": "oef_noncoop",
    "oef-coop": "oef_coop",
    "max-throughput": "max_throughput",
    "equal-share": "equal_share",
    "gavel": "gavel",
    "gandiva-fair": "gandiva_fair",
    "bud": "bud",
    "themis": "themis",
    "hadar": "hadar",
}

SOLVERS = ("ECOS", "HIGHS", "CLARABEL", "SCIPY")  # cvxpy solvers by name (one list for CLI, config and policies)

# the sources of a profile value (store/profiles.py, profiling/core.py read them here: the CLI's choices need no
# database library)
PROFILE_SOURCES = ("imported", "set", "measured", "harvested", "shipped")
# the default budget of fairness.probe (re-solves x virtual users), named in the CLI's help without numpy
PROBE_WORK = 600
# seconds the strategy-proofness probe may take: `solve --check` (per run) and `compare` (all policies together),
# issue 41: gandiva-fair on 300 GPU types re-solved 120 times for ~8 minutes before there was a budget
CHECK_BUDGET_S = 30.0
COMPARE_BUDGET_S = 60.0
