"""Keep standard output for the command's own output.

Some solver libraries print from C straight to file descriptor 1, where Python's ``sys.stdout`` cannot
catch it: highspy >= 1.12 prints a "Running HiGHS …" banner when the first ``Highs`` object of a process is
built, before any option (``output_flag``) can be set. Two layers keep that out of ``slurm-fair … --json``:

* :func:`new_highs` builds HiGHS models with the banner silenced at the descriptor level (the banner is
  printed once per process, so only the first construction pays for the redirect);
* :func:`protect_stdout` (called by the console script) moves descriptor 1 to stderr for the whole process
  and gives Python's ``sys.stdout`` a private copy of the real stdout: whatever C code prints lands on stderr.
"""

from __future__ import annotations

import io
import os
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

_lock = threading.Lock()
_highs_primed = False


@contextmanager
def fd1_to_devnull() -> Iterator[None]:
    """Point file descriptor 1 at /dev/null for the block (what C code prints there is dropped)."""
    try:
        sys.stdout.flush()
    except (AttributeError, ValueError, OSError):
        pass
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def prime_highs() -> None:
    """Build (and drop) one HiGHS object with fd 1 silenced, so its once-per-process banner is never seen."""
    global _highs_primed
    if _highs_primed:
        return
    with _lock:
        if _highs_primed:
            return
        import highspy

        with fd1_to_devnull():
            h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        _highs_primed = True


def new_highs() -> Any:
    """A silent ``highspy.Highs`` model (no banner, ``output_flag`` off)."""
    import highspy

    prime_highs()
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    return h


def protect_stdout() -> None:
    """Move fd 1 to stderr and keep the real stdout for ``sys.stdout`` only (see the module docstring).

    Safe to call once at process start; does nothing if stdout or stderr is not a real descriptor."""
    try:
        out_fd, err_fd = sys.stdout.fileno(), sys.stderr.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return
    if out_fd != 1:
        return
    sys.stdout.flush()
    real = os.dup(1)
    os.set_inheritable(real, False)
    os.dup2(err_fd, 1)
    old = sys.stdout
    sys.stdout = io.TextIOWrapper(
        io.FileIO(real, "w", closefd=True), encoding=old.encoding, errors=old.errors,
        line_buffering=os.isatty(real), write_through=False,
    )
