"""What the testbed scenarios share (a helper module, no tests): the late-comers configuration (preemption on, a
short grace), ``slurm-fair`` run as a subprocess, who holds which GPUs now, and the flood of checkpointing jobs
that test_scenario_shares.py and test_reclaim_converges.py both start from."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from slurm_fair import config as config_mod

PY = [sys.executable, "-c", "from slurm_fair.cli import main; main()"]
TRAIN_SH = Path(__file__).resolve().parents[2] / "contrib" / "checkpoint" / "train.sh"
#: the testbed's GPUs by type
CAPACITY = {"a100": 4, "v100": 6, "k80": 6}
#: seconds between the scenarios' ``daemon --once`` rounds
PERIOD = 10.0


def late_comers_config(testbed, tmp_path: Path) -> Path:
    """The testbed's config with a database in ``tmp_path``, limits applied and preemption on (grace 5 s)."""
    base = tomllib.loads(Path(testbed.env["SLURM_FAIR_CONFIG"]).read_text())
    for section, key in (("submit", "type_map"), ("hooks", "spool")):
        if not base.get(section, {}).get(key):
            pytest.skip(f"the testbed has no {section}.{key}: restart it (testbed.sh down; up) to install it")
    base.setdefault("daemon", {}).update(database=str(tmp_path / "sf.sqlite"), period=300, dry_run=False)
    # upgrade_cost 0: a requeue must pay (issue 28); these jobs ran seconds, checkpoint and restart at no cost
    base["preemption"] = {"enabled": True, "grace": 5, "min_runtime": 0, "upgrade_cost": 0}
    path = tmp_path / "slurm-fair.toml"
    path.write_text(config_mod.render(config_mod.from_dict(base).as_dict()))
    return path


def sf(testbed, cfg: Path, *args: str) -> str:
    """``slurm-fair ARGS --config CFG`` in the testbed's environment; its stdout (it must exit 0)."""
    r = subprocess.run([*PY, *args, "--config", str(cfg)], env=testbed.env, capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, f"slurm-fair {' '.join(args)} exited {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def guarantees(store) -> dict[str, dict[str, int]]:
    """account -> type -> the last round's guarantee (its rounded share, ``placements.real``), where above 0."""
    rnd = store.rounds(limit=1)[0]
    out: dict[str, dict[str, int]] = {}
    for p in store.placements(rnd.id):
        if p.real:
            out.setdefault(p.account, {})[p.gpu_type] = p.real
    return out


def gpus_in_use(testbed) -> dict[str, dict[str, int]]:
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


def idle_gpus(testbed) -> dict[str, int]:
    """type -> GPUs free now (sinfo: configured minus allocated, usable nodes)."""
    out = testbed.run(["sinfo", "-h", "-N", "-O", "NodeList:|,StateCompact:|,Gres:|,GresUsed:"]).stdout
    idle: dict[str, int] = {}
    for line in out.splitlines():
        _n, state, gres, used = (line.split("|") + ["", "", ""])[:4]
        if state.rstrip("*~#!%$@^-") not in ("idle", "mix", "alloc"):
            continue
        conf = {m.group(1): int(m.group(2)) for m in re.finditer(r"gpu:([A-Za-z0-9_.-]+):(\d+)", gres)}
        busy = {m.group(1): int(m.group(2)) for m in re.finditer(r"gpu:([A-Za-z0-9_.-]+):(\d+)", used)}
        for t, c in conf.items():
            idle[t] = idle.get(t, 0) + c - busy.get(t, 0)
    return idle


def jobs_of(testbed, account: str, state: str) -> list[int]:
    out = testbed.run(["squeue", "-h", "-A", account, "-t", state, "-o", "%i"]).stdout
    return [int(x) for x in out.split()]


@contextmanager
def checkpointing_flood(testbed, cfg: Path, tmp_path: Path, n: int) -> Iterator[list[int]]:
    """A first ``daemon --once`` with no jobs publishes the type map (every GPU free); then acct_a floods the
    testbed with ``n`` long untyped, checkpointing 1-GPU jobs (contrib/checkpoint/train.sh) and all of them run.
    Yields their job ids. On leaving: every job cancelled, the type map as it was, the checkpoints removed."""
    type_map = config_mod.load(cfg).type_map_path
    saved_map = type_map.read_bytes() if type_map.exists() else None
    ckpts: list[Path] = []
    try:
        type_map.unlink(missing_ok=True)
        sf(testbed, cfg, "daemon", "--once")
        assert type_map.exists()
        flood = []
        train = testbed.job_file(TRAIN_SH)
        for i in range(n):
            ckpt = testbed.jobdir / f"ckpt-{tmp_path.name}-{i}.state"
            ckpt.unlink(missing_ok=True)
            ckpts.append(ckpt)
            flood.append(testbed.sbatch("acct_a", name="flood", extra=["--requeue", "--open-mode=append"],
                                        command=f"export CKPT={ckpt} STEPS=100000 STEP_SECONDS=0.5; "
                                                f"exec bash {train}"))
        testbed.wait_for(lambda: len(jobs_of(testbed, "acct_a", "R")) == len(flood), 60,
                         what="the flood running on every GPU")
        yield flood
    finally:
        testbed.cancel_all()
        if saved_map is None:
            type_map.unlink(missing_ok=True)
        else:
            type_map.write_bytes(saved_map)
        for ck in ckpts:
            ck.unlink(missing_ok=True)
            Path(str(ck) + ".tmp").unlink(missing_ok=True)


def stop_daemon(proc: subprocess.Popen) -> int:
    """SIGTERM to a ``slurm-fair daemon`` process; its exit status (killed, and the timeout raised, after 60 s)."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
