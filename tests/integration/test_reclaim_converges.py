"""Reclaim that converges, on the real testbed (issue 28's first "done when"): three accounts, one floods, a late
account's 4-GPU job is owed GPUs.

1. ``slurm-fair daemon --once`` with no jobs publishes the type map;
2. acct_a floods every GPU with long untyped, checkpointing 1-GPU jobs (contrib/checkpoint/train.sh); a round;
3. acct_b (the third account) queues two untyped 1-GPU jobs, acct_c (the late account) one untyped 4-GPU job;
4. rounds every 10 s (``[preemption] enabled, grace = 5, min_runtime = 0``).

Checked: the 4-GPU job runs within two rounds of the first requeue made for it (the freed GPUs are not refilled by
another account's job first), no job is requeued twice, and once it runs, with nothing changing, the guarantees
stay the same round after round.
"""

from __future__ import annotations

import time

from slurm_fair import config as config_mod
from slurm_fair.store import Store

from .scenario import PERIOD, checkpointing_flood, guarantees, late_comers_config, sf

CAPACITY = 16
STEADY_ROUNDS = 3


def _restarts(testbed, job_id: int) -> int:
    return int(testbed.job(job_id).get("Restarts", "0") or 0)


def test_reclaimed_gpus_go_to_the_owed_job(testbed, tmp_path):
    _scenario(testbed, tmp_path)


def _scenario(testbed, tmp_path):
    cfg = late_comers_config(testbed, tmp_path)
    c = config_mod.load(cfg)
    with checkpointing_flood(testbed, cfg, tmp_path, CAPACITY) as flood:
        testbed.wait_scheduled()
        sf(testbed, cfg, "daemon", "--once")
        third = [testbed.sbatch("acct_b", name="third", command="sleep 900") for _ in range(2)]
        owed = testbed.sbatch("acct_c", gpus=4, name="owed", command="sleep 900")
        testbed.wait_scheduled()

        store = Store(c.database_path)
        log, first_requeue, started_round = [], None, None
        try:
            for rnd in range(1, 9):
                t0 = time.monotonic()
                sf(testbed, cfg, "daemon", "--once")
                time.sleep(3)
                g = guarantees(store)
                requeued = [j for j in flood if _restarts(testbed, j) > 0]
                state = testbed.job(owed).get("JobState", "")
                info = testbed.job(owed)
                log.append(f"round {rnd}: guarantees {g} owed job {state} ({info.get('Reason')}, "
                           f"{info.get('TresPerNode') or info.get('Gres')}, {info.get('Comment')}) requeued {requeued} "
                           f"third {[testbed.job(j).get('JobState') for j in third]}")
                if requeued and first_requeue is None:
                    first_requeue = rnd
                if state == "RUNNING":
                    started_round = rnd
                    break
                time.sleep(max(0.0, PERIOD - (time.monotonic() - t0)))
            assert started_round is not None, "the owed 4-GPU job never started:\n" + "\n".join(log)
            assert first_requeue is not None, "\n".join(log)
            assert started_round - first_requeue <= 2, "\n".join(log)
            assert all(_restarts(testbed, j) <= 1 for j in flood), \
                {j: _restarts(testbed, j) for j in flood}

            # nothing changes now (every job runs or waits as before): the guarantees hold still
            seen = []
            for _ in range(STEADY_ROUNDS):
                t0 = time.monotonic()
                sf(testbed, cfg, "daemon", "--once")
                seen.append(guarantees(store))
                time.sleep(max(0.0, PERIOD - (time.monotonic() - t0)))
            states = {j: testbed.job(j).get("JobState") for j in flood + third + [owed]}
            assert all(s == seen[0] for s in seen), f"guarantees flipped: {seen}\n{states}\n" + "\n".join(log)
            assert all(_restarts(testbed, j) <= 1 for j in flood), \
                {j: _restarts(testbed, j) for j in flood}
        finally:
            store.close()
