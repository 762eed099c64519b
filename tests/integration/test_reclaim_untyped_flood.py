"""Reclaim that delivers on real Slurm (issue 39, item 5's "done when"): reclaimed GPUs reach the owed accounts.

1. ``slurm-fair daemon --once`` with no jobs publishes the type map;
2. acct_a floods every GPU with long untyped, checkpointing 1-GPU jobs (contrib/checkpoint/train.sh); a round;
3. acct_b and acct_c arrive after that round, each with more untyped 1-GPU jobs than its share (job_submit.lua
   types them by the map, or leaves them untyped within the account's ``#@untyped`` room);
4. rounds every 10 s (``[preemption] enabled, grace = 5, min_runtime = 0, upgrade_cost = 0``).

Checked, by the GPUs jobs really hold (``scontrol -d show job``: the GRES of each node of a running job): within
6 rounds each late account holds its guarantee on every type it is guaranteed (as far as its jobs can use that
type: typed for it or untyped) and no account holds more of a type than its limit there (Slurm's GrpTRES, as
the round wrote it) — three runs in a row. Before issue 39 an untyped job of an account with ``v100=0`` took
V100s reclaimed for another account (Slurm does not count untyped requests against typed limits).
"""

from __future__ import annotations

import re
import time

from slurm_fair import config as config_mod
from slurm_fair.store import Store

from .scenario import CAPACITY, PERIOD, checkpointing_flood, guarantees, late_comers_config, sf

ROUNDS = 6
RUNS = 3
LATE = {"acct_b": 8, "acct_c": 10}  # untyped 1-GPU jobs each late account submits (more than its share)
GRES = re.compile(r"(?:^|[\s,])GRES=([^\s]*)")
TYPED = re.compile(r"gpu:([A-Za-z0-9_.-]+):(\d+)")


def held(testbed) -> tuple[dict[str, dict[str, int]], dict[str, list[tuple[int, str]]]]:
    """(account -> type -> GPUs its running jobs hold, from the per-node ``GRES=gpu:TYPE:N(IDX:..)`` lines of
    ``scontrol -d show job``; account -> (job id, requested GRES) of its pending jobs)."""
    out = testbed.run(["scontrol", "-d", "-o", "show", "job"], check=False).stdout
    use: dict[str, dict[str, int]] = {}
    pending: dict[str, list[tuple[int, str]]] = {}
    for line in out.splitlines():
        f = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        acct, state = f.get("Account", ""), f.get("JobState", "")
        if state == "PENDING":
            pending.setdefault(acct, []).append((int(f["JobId"]), f.get("TresPerNode", "") or f.get("TresPerJob", "")))
        if state != "RUNNING":
            continue
        for g in GRES.findall(line):
            for t, n in TYPED.findall(g):
                use.setdefault(acct, {})[t] = use.get(acct, {}).get(t, 0) + int(n)
    return use, pending


def _usable(account: str, t: str, use: dict, pending: dict) -> int:
    """GPUs of type ``t`` the account's jobs could hold: those it holds there, plus its pending jobs typed ``t``
    or untyped (1 GPU each)."""
    n = use.get(account, {}).get(t, 0)
    for _jid, req in pending.get(account, []):
        m = TYPED.search(req)
        if m is None or m.group(1) == t:
            n += 1
    return n


def _one_run(testbed, tmp_path, run: int) -> list[str]:
    cfg = late_comers_config(testbed, tmp_path)
    c = config_mod.load(cfg)
    log: list[str] = []
    with checkpointing_flood(testbed, cfg, tmp_path, sum(CAPACITY.values())):
        testbed.wait_scheduled()
        sf(testbed, cfg, "daemon", "--once")  # the first round: only acct_a has jobs
        for acct, n in LATE.items():
            for _ in range(n):
                testbed.sbatch(acct, name="late", extra=["--requeue"], command="sleep 3600")
        testbed.wait_scheduled()
        store = Store(c.database_path)
        try:
            for rnd in range(1, ROUNDS + 1):
                t0 = time.monotonic()
                sf(testbed, cfg, "daemon", "--once")
                time.sleep(3)  # a scheduling pass after the round's limits and requeues
                guarantee, lim = guarantees(store), testbed.gpu_limits()
                use, pending = held(testbed)
                short = {(a, t): (use.get(a, {}).get(t, 0), n) for a in LATE for t, n in guarantee.get(a, {}).items()
                         if use.get(a, {}).get(t, 0) < min(n, _usable(a, t, use, pending))}
                above = {(a, t): (n, lim[a][t]) for a, row in use.items() for t, n in row.items()
                         if t in lim.get(a, {}) and n > lim[a][t]}
                log.append(f"run {run} round {rnd}: held {use} guarantees {guarantee} limits {lim} "
                           f"short {short} above {above}")
                if not short and not above and all(guarantee.get(a) for a in LATE):
                    return log
                time.sleep(max(0.0, PERIOD - (time.monotonic() - t0)))
        finally:
            store.close()
    raise AssertionError(f"run {run}: the late accounts did not hold their guarantees within {ROUNDS} rounds "
                         "(short: (account, type) -> (held, guarantee); above: -> (held, limit)):\n" + "\n".join(log))


def test_reclaimed_gpus_reach_the_owed_accounts_three_runs_in_a_row(testbed, tmp_path):
    logs = []
    for run in range(1, RUNS + 1):
        d = tmp_path / f"run{run}"
        d.mkdir()
        logs += _one_run(testbed, d, run)
    print("\n" + "\n".join(logs))
