"""contrib/checkpoint: the bash and Python examples checkpoint on USR1 and resume (real processes, no Slurm;
the Slurm round trip is tests/integration/test_preemption.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1] / "contrib" / "checkpoint"


def _run(argv, tmp_path, ckpt, restart, steps, signal_after=None):
    env = dict(os.environ, CKPT=str(ckpt), STEPS=str(steps), STEP_SECONDS="0.2", SLURM_RESTART_COUNT=str(restart))
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    if signal_after is not None:
        time.sleep(signal_after)
        p.send_signal(signal.SIGUSR1)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 0, out
    return out


@pytest.mark.parametrize("argv", [["bash", str(HERE / "train.sh")], [sys.executable, str(HERE / "train.py")]],
                         ids=["bash", "python"])
def test_checkpoint_on_usr1_then_resume(tmp_path, argv):
    ckpt = tmp_path / "state"
    out = _run(argv, tmp_path, ckpt, 0, steps=6, signal_after=0.5)
    assert "starting at step 0 (restart 0)" in out
    saved = [int(line.split()[-1]) for line in out.splitlines() if line.startswith("checkpoint saved at step")]
    assert len(saved) == 1 and 1 <= saved[0] <= 6, out
    assert ckpt.exists() and not Path(str(ckpt) + ".tmp").exists()
    out = _run(argv, tmp_path, ckpt, 1, steps=8)
    assert f"resumed from step {saved[0]} (restart 1)" in out and "done: 8 steps (restart 1)" in out
