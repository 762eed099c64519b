"""The whole "shares that Slurm actually follows" scenario on the real testbed, with the shipped hooks and
job_submit.lua (both installed by contrib/testbed/testbed.sh):

1. acct_a floods the cluster with long untyped, checkpointing 1-GPU jobs (contrib/checkpoint/train.sh) before
   slurm-fair ever ran (no type map yet: the jobs pass untyped and spread over every GPU type);
2. acct_b and acct_c then submit typed and untyped jobs (the untyped ones are typed by job_submit.lua from the
   map the daemon published);
3. ``slurm-fair daemon --once`` runs every 10 s with ``[preemption] enabled, grace = 5, min_runtime = 0``.

Within 6 rounds every account's GPUs in use per type are within its limit, acct_b and acct_c run their share
(every GPU their limits give them is in use),
every preempted job was signalled before it was requeued (checkpoint written), and ``explain`` names every
preemption. Then the late accounts leave, and each preempted job resumes from its checkpoint.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from slurm_fair import config as config_mod

PY = [sys.executable, "-c", "from slurm_fair.cli import main; main()"]
TRAIN_SH = Path(__file__).resolve().parents[2] / "contrib" / "checkpoint" / "train.sh"
CAPACITY = {"a100": 4, "v100": 6, "k80": 6}
ROUNDS = 6
PERIOD = 10.0


def _config(testbed, tmp_path: Path) -> Path:
    base = tomllib.loads(Path(testbed.env["SLURM_FAIR_CONFIG"]).read_text())
    for section, key in (("submit", "type_map"), ("hooks", "spool")):
        if not base.get(section, {}).get(key):
            pytest.skip(f"the testbed has no {section}.{key}: restart it (testbed.sh down; up) to install it")
    base.setdefault("daemon", {}).update(database=str(tmp_path / "sf.sqlite"), period=300)
    base["preemption"] = {"enabled": True, "grace": 5, "min_runtime": 0}
    path = tmp_path / "slurm-fair.toml"
    path.write_text(config_mod.render(config_mod.from_dict(base).as_dict()))
    return path


def _sf(testbed, cfg: Path, *args: str) -> str:
    r = subprocess.run([*PY, *args, "--config", str(cfg)], env=testbed.env, capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, f"slurm-fair {' '.join(args)} exited {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def _limits(testbed) -> dict[str, dict[str, int]]:
    """account -> type -> GrpTRES limit as Slurm has it now (per type; the gres/gpu total left out)."""
    return {a: {t: n for t, n in row.items() if t != "*"} for a, row in testbed.gpu_limits().items()}


def _in_use(testbed) -> dict[str, dict[str, int]]:
    """account -> type -> GPUs held by running jobs (the type they really got, also for untyped requests)."""
    use: dict[str, dict[str, int]] = {}
    out = testbed.run(["squeue", "-h", "-t", "R", "-o", "%a|%i"]).stdout
    for line in out.splitlines():
        acct, jid = line.split("|")
        alloc = testbed.job(int(jid)).get("AllocTRES", "") or testbed.job(int(jid)).get("TRES", "")
        for item in alloc.split(","):
            k, _, v = item.partition("=")
            if k.startswith("gres/gpu:"):
                t = k.split(":", 1)[1]
                use.setdefault(acct, {})[t] = use.get(acct, {}).get(t, 0) + int(v)
    return use


def _jobs_of(testbed, account: str, state: str) -> list[int]:
    out = testbed.run(["squeue", "-h", "-A", account, "-t", state, "-o", "%i"]).stdout
    return [int(x) for x in out.split()]


def _output(testbed, job_id: int) -> str:
    p = testbed.jobdir / f"slurm-{job_id}.out"
    return p.read_text() if p.exists() else ""


def test_flood_then_fair_shares_with_preemption(testbed, tmp_path):
    cfg = _config(testbed, tmp_path)
    c = config_mod.load(cfg)
    type_map = c.type_map_path
    saved_map = type_map.read_bytes() if type_map.exists() else None
    ckpts: list[Path] = []
    try:
        # 1. the flood, before slurm-fair ever ran: no type map, so untyped jobs pass untyped
        type_map.unlink(missing_ok=True)
        flood = []
        train = testbed.job_file(TRAIN_SH)
        for i in range(sum(CAPACITY.values())):
            ckpt = testbed.jobdir / f"ckpt-{tmp_path.name}-{i}.state"
            ckpt.unlink(missing_ok=True)
            ckpts.append(ckpt)
            flood.append(testbed.sbatch("acct_a", name="flood", extra=["--requeue", "--open-mode=append"],
                                        command=f"export CKPT={ckpt} STEPS=100000 STEP_SECONDS=0.5; "
                                                f"exec bash {train}"))
        testbed.wait_for(lambda: len(_jobs_of(testbed, "acct_a", "R")) == len(flood), 180,
                         what="the flood running on every GPU")
        spread = _in_use(testbed)["acct_a"]
        assert spread == CAPACITY, spread  # untyped jobs landed on every type
        _sf(testbed, cfg, "daemon", "--once")  # round 1: only acct_a has jobs; the map gets published
        assert type_map.exists()

        # 2. the late accounts: typed and untyped jobs (job_submit.lua types the untyped ones)
        late = {"acct_b": [], "acct_c": []}
        for t in ("k80", "k80", "v100"):
            late["acct_b"].append(testbed.sbatch("acct_b", gpu_type=t, name="rl"))
        for _ in range(2):
            late["acct_b"].append(testbed.sbatch("acct_b", name="rl"))
        for t in ("a100", "a100", "v100", "v100"):
            late["acct_c"].append(testbed.sbatch("acct_c", gpu_type=t, name="lm"))
        for _ in range(2):
            late["acct_c"].append(testbed.sbatch("acct_c", name="lm", via="gpus"))
        for acct, jobs in late.items():  # untyped requests were typed at submission and marked flexible
            for jid in jobs[-2:]:
                assert "fair:flex" in testbed.job(jid).get("Comment", ""), testbed.job(jid)

        # 3. rounds every 10 s until the shares hold
        held, seen = None, []
        for rounds in range(1, ROUNDS + 1):
            t0 = time.monotonic()
            _sf(testbed, cfg, "daemon", "--once")
            time.sleep(3)  # a scheduling pass after the round's changes
            lim, use = _limits(testbed), _in_use(testbed)
            seen.append(f"round {rounds + 1}: limits {lim} in use {use}")
            within = all(n <= lim.get(a, {}).get(t, 0) for a, row in use.items() for t, n in row.items())
            # the late accounts run their share: every GPU their limits give them is in use
            late_run = all(sum(use.get(a, {}).values()) == sum(lim.get(a, {}).values()) > 0 for a in late)
            if within and late_run:
                held = (lim, use)
                break
            time.sleep(max(0.0, PERIOD - (time.monotonic() - t0)))
        assert held is not None, "shares not held within {} rounds:\n{}".format(ROUNDS, "\n".join(seen))
        lim, use = held

        # every preemption: signalled, then requeued after the grace; the job saved a checkpoint
        ex = json.loads(_sf(testbed, cfg, "explain", "acct_a", "--json"))
        pre = ex["preemptions"]
        assert pre, "acct_a ran above its share but nothing was preempted"
        requeued = [p for p in pre if p["state"] == "requeued"]
        assert requeued, pre
        print(f"\nscenario: shares held after {rounds} round(s) past the flood's first; limits {lim}; in use {use}; "
              f"preemptions {sorted((p['job_id'], p['gpu_type'], p['state']) for p in pre)}")
        for p in requeued:
            steps = [s["step"] for s in p["steps"]]
            assert steps.index("signalled") < steps.index("requeued"), p
            times = {s["step"]: s["time"] for s in p["steps"]}
            assert times["requeued"] - times["signalled"] >= 5 - 0.5, p  # the grace was waited
            out = _output(testbed, p["job_id"])
            assert "got USR1" in out and "checkpoint saved at step" in out, out
        text = _sf(testbed, cfg, "explain", "acct_a")
        for p in pre:
            assert f"job {p['job_id']}" in text

        # 4. the late accounts leave: acct_a's share returns and each preempted job resumes from its checkpoint
        testbed.run(["scancel", *map(str, late["acct_b"] + late["acct_c"])])
        testbed.wait_for(lambda: not (_jobs_of(testbed, "acct_b", "R,PD,CG") + _jobs_of(testbed, "acct_c", "R,PD,CG")),
                         60, what="late jobs gone")
        _sf(testbed, cfg, "daemon", "--once")
        for p in requeued:
            testbed.wait_for(lambda: "resumed from step" in _output(testbed, p["job_id"]).split("got USR1")[-1],
                             90, what=f"job {p['job_id']} resumed from its checkpoint")
            assert "(restart 1)" in _output(testbed, p["job_id"]).split("resumed from step")[-1].splitlines()[0]
    finally:
        testbed.cancel_all()
        if saved_map is None:
            type_map.unlink(missing_ok=True)
        else:
            type_map.write_bytes(saved_map)
        for ck in ckpts:
            ck.unlink(missing_ok=True)
            Path(str(ck) + ".tmp").unlink(missing_ok=True)
