"""A Python training loop that survives slurm-fair preemption (see slurm_checkpoint.py and docs/preemption.md).

Environment: CKPT (default ckpt-$SLURM_JOB_ID.json), STEPS (100), STEP_SECONDS (1).
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from slurm_checkpoint import Checkpoint  # noqa: E402

ckpt = Checkpoint(os.environ.get("CKPT", f"ckpt-{os.environ.get('SLURM_JOB_ID', 'local')}.json"))
steps = int(os.environ.get("STEPS", "100"))
state = ckpt.load()
if state is None:
    state = {"step": 0}
    print(f"starting at step 0 (restart {ckpt.restart_count})", flush=True)
else:
    print(f"resumed from step {state['step']} (restart {ckpt.restart_count})", flush=True)
while state["step"] < steps:
    time.sleep(float(os.environ.get("STEP_SECONDS", "1")))  # one step of real work goes here
    state["step"] += 1
    if ckpt.requested:
        ckpt.save(state)
        print(f"checkpoint saved at step {state['step']}", flush=True)
print(f"done: {steps} steps (restart {ckpt.restart_count})", flush=True)
