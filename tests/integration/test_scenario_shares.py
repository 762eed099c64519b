"""The late-comers scenario on the real testbed, with the shipped hooks and job_submit.lua (both installed by
contrib/testbed/testbed.sh): guarantees, lending and reclaim.

1. ``slurm-fair daemon --once``: a first round with no jobs publishes the type map (every GPU free);
2. acct_a floods the cluster with long untyped, checkpointing 1-GPU jobs (contrib/checkpoint/train.sh):
   job_submit.lua spreads them over every GPU type from the map's rooms, and all 16 start (lent GPUs);
3. acct_b and acct_c then submit typed and untyped jobs (the untyped ones typed by job_submit.lua);
4. ``slurm-fair daemon --once`` runs every 10 s with ``[preemption] enabled, grace = 5, min_runtime = 0,
   upgrade_cost = 0``.

Within 6 rounds acct_b and acct_c run at least their guarantee on every type (the round's rounded shares,
as far as their jobs ask for that type), no GPU is idle while a job that could use it waits, every reclaimed
job was signalled before it was requeued (checkpoint written), and ``explain`` names every preemption. Then
the late accounts leave, and each reclaimed job resumes from its checkpoint.
"""

from __future__ import annotations

import json
import re
import time

from slurm_fair import config as config_mod
from slurm_fair.store import Store

from .scenario import (CAPACITY, PERIOD, checkpointing_flood, gpus_in_use, idle_gpus, jobs_of,
                       late_comers_config, sf)

ROUNDS = 6


def _limits(testbed) -> dict[str, dict[str, int]]:
    """account -> type -> GrpTRES limit as Slurm has it now (per type; the gres/gpu total left out)."""
    return {a: {t: n for t, n in row.items() if t != "*"} for a, row in testbed.gpu_limits().items()}


def _pending(testbed, account: str | None = None) -> list[tuple[str, str]]:
    """(account, requested GPU type) of pending jobs that could start (not held, no dependency)."""
    out = testbed.run(["squeue", "-h", "-t", "PD", "-o", "%a|%b|%r"]).stdout
    rows = []
    for line in out.splitlines():
        acct, gres, reason = line.split("|")
        if reason.startswith(("JobHeld", "Dependency", "BeginTime")) or (account and acct != account):
            continue
        rows.append((acct, gres.split(":")[-2] if gres.count(":") >= 2 else ""))
    return rows


def _waiting_types(testbed) -> set[str]:
    return {t for _a, t in _pending(testbed) if t}


def _asked(testbed, account: str, gpu_type: str) -> int:
    """GPUs of ``account``'s running and pending 1-GPU jobs typed ``gpu_type``."""
    running = gpus_in_use(testbed).get(account, {}).get(gpu_type, 0)
    return running + sum(1 for _a, t in _pending(testbed, account) if t == gpu_type)


def _output(testbed, job_id: int) -> str:
    p = testbed.jobdir / f"slurm-{job_id}.out"
    return p.read_text() if p.exists() else ""


def test_flood_then_fair_shares_with_preemption(testbed, tmp_path):
    cfg = late_comers_config(testbed, tmp_path)
    c = config_mod.load(cfg)
    # 1. a first round with nobody's jobs: the map lends every GPU; 2. the flood: typed by job_submit.lua from
    # the map's rooms, spread over every type, all running
    with checkpointing_flood(testbed, cfg, tmp_path, sum(CAPACITY.values())) as flood:
        spread = gpus_in_use(testbed)["acct_a"]
        assert spread == CAPACITY, spread  # untyped jobs landed on every type
        assert all("fair:flex" in testbed.job(j).get("Comment", "") for j in flood)
        testbed.wait_scheduled()
        sf(testbed, cfg, "daemon", "--once")  # only acct_a has jobs: it is guaranteed everything

        # 3. the late accounts: typed and untyped jobs (job_submit.lua types the untyped ones)
        late = {"acct_b": [], "acct_c": []}
        for t in ("k80", "k80", "v100"):
            late["acct_b"].append(testbed.sbatch("acct_b", gpu_type=t, name="rl"))
        for _ in range(2):
            late["acct_b"].append(testbed.sbatch("acct_b", name="rl"))
        for t in ("a100", "a100", "v100", "v100"):
            late["acct_c"].append(testbed.sbatch("acct_c", gpu_type=t, name="lm"))
        for _ in range(2):
            late["acct_c"].append(testbed.sbatch("acct_c", name="lm", via="gpus"))
        for acct, jobs in late.items():  # untyped requests were typed at submission and marked flexible, or left
            for jid in jobs[-2:]:        # untyped within the account's #@untyped room (no type had room: the flood)
                j = testbed.job(jid)
                typed = re.search(r"gpu:[A-Za-z]", j.get("TresPerNode", "") + j.get("TresPerJob", ""))
                assert ("fair:flex" in j.get("Comment", "")) == bool(typed), j
        testbed.wait_scheduled()

        # 4. rounds every 10 s until the late accounts run their guarantee and no GPU idles while a job waits
        store = Store(c.database_path)
        held, seen = None, []
        try:
            for rounds in range(1, ROUNDS + 1):
                t0 = time.monotonic()
                sf(testbed, cfg, "daemon", "--once")
                time.sleep(3)  # a scheduling pass after the round's changes
                rnd = store.rounds(limit=1)[0]
                guarantee = {}
                for p in store.placements(rnd.id):
                    guarantee.setdefault(p.account, {})[p.gpu_type] = p.real
                lim, use = _limits(testbed), gpus_in_use(testbed)
                idle, waiting = idle_gpus(testbed), _waiting_types(testbed)
                seen.append(f"round {rounds + 2}: guarantees {guarantee} limits {lim} in use {use} idle {idle} "
                            f"waiting {waiting}")
                # the late accounts run at least their guarantee, as far as their jobs ask for each type
                late_ok = all(use.get(a, {}).get(t, 0) >= min(n, _asked(testbed, a, t))
                              for a in late for t, n in guarantee.get(a, {}).items())
                idle_ok = not any(idle.get(t, 0) >= 1 for t in waiting)
                if late_ok and idle_ok and any(guarantee.get(a) for a in late):
                    held = (guarantee, lim, use)
                    break
                time.sleep(max(0.0, PERIOD - (time.monotonic() - t0)))
        finally:
            store.close()
        assert held is not None, "guarantees not reached within {} rounds:\n{}".format(ROUNDS, "\n".join(seen))
        guarantee, lim, use = held

        # every preemption: signalled, then requeued after the grace; the job saved a checkpoint
        ex = json.loads(sf(testbed, cfg, "explain", "acct_a", "--json"))
        pre = ex["preemptions"]
        assert pre, "acct_a ran above its share but nothing was preempted"
        requeued = [p for p in pre if p["state"] == "requeued"]
        assert requeued, pre
        print(f"\nscenario: guarantees held after {rounds} round(s) past the flood's; guarantees {guarantee}; "
              f"limits {lim}; in use {use}; "
              f"preemptions {sorted((p['job_id'], p['gpu_type'], p['state']) for p in pre)}")
        for p in requeued:
            steps = [s["step"] for s in p["steps"]]
            assert steps.index("signalled") < steps.index("requeued"), p
            times = {s["step"]: s["time"] for s in p["steps"]}
            assert times["requeued"] - times["signalled"] >= 5 - 0.5, p  # the grace was waited
            out = _output(testbed, p["job_id"])
            assert "got USR1" in out and "checkpoint saved at step" in out, out
        text = sf(testbed, cfg, "explain", "acct_a")
        for p in pre:
            assert f"job {p['job_id']}" in text

        # 4. the late accounts leave: acct_a's share returns and each preempted job resumes from its checkpoint
        testbed.run(["scancel", *map(str, late["acct_b"] + late["acct_c"])])
        testbed.wait_for(lambda: not (jobs_of(testbed, "acct_b", "R,PD,CG") + jobs_of(testbed, "acct_c", "R,PD,CG")),
                         60, what="late jobs gone")
        testbed.wait_scheduled()
        sf(testbed, cfg, "daemon", "--once")
        for p in requeued:
            testbed.wait_for(lambda: "resumed from step" in _output(testbed, p["job_id"]).split("got USR1")[-1],
                             90, what=f"job {p['job_id']} resumed from its checkpoint")
            assert "(restart 1)" in _output(testbed, p["job_id"]).split("resumed from step")[-1].splitlines()[0]
