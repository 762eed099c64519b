"""Checkpointing for Python training loops under slurm-fair preemption (stdlib only; copy it next to your code).

slurm-fair sends a checkpoint signal (USR1 by default) to the job's batch shell, waits ``preemption.grace``
seconds, then requeues the job; the requeued job starts from the beginning of its script. So:

    from slurm_checkpoint import Checkpoint

    ckpt = Checkpoint("state.json")          # installs the USR1 handler
    state = ckpt.load() or {"step": 0}       # resume after a requeue (ckpt.restart_count > 0)
    while state["step"] < steps:
        train_one_step(state)
        state["step"] += 1
        if ckpt.requested:                   # the signal arrived: save at a step boundary
            ckpt.save(state)                 # atomic; then keep going (or `sys.exit(0)` to stop early)

The handler only sets a flag: the loop decides when its state is consistent. ``save`` writes JSON to a
temporary file in the same folder, fsyncs it and renames it over the checkpoint, so a kill at any moment
leaves the old or the new checkpoint, never half of one. For other formats (torch.save, numpy) write to
``ckpt.tmp_path`` and call ``ckpt.commit()``. Run the program with ``exec`` from the batch script (or as
the script itself) so that it *is* the batch shell that receives the signal.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any, Iterable


class Checkpoint:
    def __init__(self, path: str | os.PathLike, signals: Iterable[int] = (signal.SIGUSR1,)):
        self.path = Path(path)
        self.tmp_path = self.path.with_name(self.path.name + ".tmp")
        self.requested = False
        for s in signals:
            signal.signal(s, self._on_signal)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.requested = True

    @property
    def restart_count(self) -> int:
        """How often Slurm requeued this job (``SLURM_RESTART_COUNT``, 0 on the first run)."""
        try:
            return int(os.environ.get("SLURM_RESTART_COUNT", "0"))
        except ValueError:
            return 0

    def load(self) -> Any:
        """The saved state, or None when there is no checkpoint yet."""
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    def save(self, state: Any) -> None:
        """Write ``state`` (JSON-able) atomically and clear :attr:`requested`."""
        with open(self.tmp_path, "w", encoding="utf-8") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        self.commit()

    def commit(self) -> None:
        """Rename :attr:`tmp_path` (already written and closed) over the checkpoint; clear :attr:`requested`."""
        os.replace(self.tmp_path, self.path)
        try:  # make the rename itself durable
            fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            pass
        self.requested = False
