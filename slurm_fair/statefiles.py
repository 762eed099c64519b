"""The files slurm-fair writes, with their modes whatever the umask.

* Private state: folders slurm-fair creates are 0750, the database (and SQLite's ``-wal``/``-shm`` beside it)
  and the daemon's lock file 0600. The lock file is opened without following symbolic links and never
  truncated unless it is our own regular file with a single link (a planted ``db.sqlite.lock -> /some/file``
  is refused, the target left untouched).
* Public files the daemon publishes (the GPU type map, ``daemon/type_map_file.py``; the status file,
  ``daemon/status_file.py``): :func:`write_public` writes them atomically, mode 0644.
"""

from __future__ import annotations

import os
import stat
import tempfile
import time
from pathlib import Path
from typing import IO

from .errors import SlurmFairError

DIR_MODE = 0o750
FILE_MODE = 0o600
PUBLIC_MODE = 0o644
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


class StateFileError(SlurmFairError):
    """A state file or folder cannot be created or is unsafe to use (a symlink, not a regular file)."""


def make_dirs(folder: str | os.PathLike) -> None:
    """Create ``folder`` and its missing parents with mode 0750 (umask ignored); existing folders are left
    as they are."""
    folder = Path(folder)
    missing = []
    p = folder
    while not p.exists():
        if p.is_symlink():  # a dangling symlink: do not create through it
            raise StateFileError(f"cannot create the folder {p}: a dangling symbolic link is in the way")
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, DIR_MODE)
        except FileExistsError:
            continue  # created meanwhile by someone else: leave it as it is
        os.chmod(d, DIR_MODE)  # the umask may have removed bits; it never adds any


def tighten(path: str | os.PathLike, mode: int = FILE_MODE) -> None:
    """Set ``path``'s mode to ``mode`` if it is a regular file of ours with more permissions (best effort: a
    file of another user, e.g. an admin reading the daemon's database, is left alone)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & ~mode == 0:
        return
    try:
        os.chmod(path, stat.S_IMODE(st.st_mode) & mode, follow_symlinks=False)
    except (NotImplementedError, OSError):
        pass


def create_private(path: str | os.PathLike) -> None:
    """Create ``path`` as an empty 0600 file if it does not exist (never through a symlink)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)


def open_lock_file(path: str | os.PathLike) -> IO[str]:
    """Open (creating it 0600) the lock file ``path`` for writing, without following symlinks and without
    truncating anything; refuse anything but a regular file with one link. The caller flocks it and only
    then truncates it."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, FILE_MODE)
    except OSError as e:
        if os.path.islink(path):
            raise StateFileError(f"refusing the lock file {path}: it is a symbolic link "
                                 f"(to {os.readlink(path)!r}); remove it") from None
        raise StateFileError(f"cannot open the lock file {path}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StateFileError(f"refusing the lock file {path}: not a regular file")
        if st.st_nlink != 1:
            raise StateFileError(f"refusing the lock file {path}: it has {st.st_nlink} hard links; remove it")
        if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "r+")
    except BaseException:
        os.close(fd)
        raise


def write_public(path: str | os.PathLike, text: str, now: float | None = None) -> bool:
    """Write ``text`` to the public file ``path`` atomically: a temporary file in the same folder, ``fsync``,
    mode 0644, mtime set explicitly to ``now`` (default the time of writing), then ``os.replace`` over ``path``
    (a reader sees the old or the new file, never half). False (nothing written) if the file already holds
    ``text``. Raises OSError when the folder is missing or not writable."""
    p = Path(path)
    try:
        if p.read_text(encoding="utf-8") == text:
            return False
    except (FileNotFoundError, UnicodeDecodeError, IsADirectoryError):
        pass
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, PUBLIC_MODE)
        t = time.time() if now is None else now
        os.utime(tmp, (t, t))
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return True
