#!/bin/bash
# A bash training loop that survives slurm-fair preemption (checkpoint signal -> grace -> requeue).
#
# On USR1 (slurm-fair's checkpoint signal, or Slurm's --signal=B:USR1@N) it saves its step atomically at
# the end of the current step and carries on; when slurm-fair requeues the job, it starts again and resumes
# from the saved step (SLURM_RESTART_COUNT says how often it was requeued).
#
# A bash trap runs only after the foreground command returns, so every step runs in the background
# (`sleep N & wait`): `wait` returns as soon as a trapped signal arrives.
#
# Environment: CKPT (checkpoint file; default $SLURM_SUBMIT_DIR/ckpt-$SLURM_JOB_ID.state), STEPS (default
# 100), STEP_SECONDS (default 1). Replace the `sleep` with one step of real work.
set -u
CKPT=${CKPT:-${SLURM_SUBMIT_DIR:-.}/ckpt-${SLURM_JOB_ID:-local}.state}
STEPS=${STEPS:-100}
STEP_SECONDS=${STEP_SECONDS:-1}

step=0
if [[ -s $CKPT ]]; then
    step=$(<"$CKPT")
    echo "resumed from step $step (restart ${SLURM_RESTART_COUNT:-0})"
else
    echo "starting at step 0 (restart ${SLURM_RESTART_COUNT:-0})"
fi

save() {  # atomic: write a temporary file next to the checkpoint, then rename it over the checkpoint
    printf '%s\n' "$step" > "$CKPT.tmp" && mv -f "$CKPT.tmp" "$CKPT" && echo "checkpoint saved at step $step"
}

checkpoint_requested=0
trap 'checkpoint_requested=1; echo "got USR1"' USR1

while (( step < STEPS )); do
    sleep "$STEP_SECONDS" &            # one step of work
    pid=$!
    wait "$pid"                        # returns early when USR1 arrives ...
    while kill -0 "$pid" 2>/dev/null; do wait "$pid"; done   # ... then let the step finish
    step=$((step + 1))
    if (( checkpoint_requested )); then
        save
        checkpoint_requested=0         # keep training until slurm-fair requeues the job after the grace
    fi
done
echo "done: $STEPS steps (restart ${SLURM_RESTART_COUNT:-0})"
