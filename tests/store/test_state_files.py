"""State files are private whatever the umask (issue 10, item 5): folders slurm-fair creates 0750, the
database with its -wal/-shm and the daemon's lock file 0600; a planted lock-file symlink is refused and its
target left untouched."""

from __future__ import annotations

import os
import stat

import pytest

from slurm_fair.daemon.service import AlreadyRunning, lock
from slurm_fair.statefiles import StateFileError
from slurm_fair.store import Store


def mode(p) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


@pytest.fixture
def umask0():
    old = os.umask(0)
    yield
    os.umask(old)


def test_database_side_files_lock_and_folders_are_private_under_umask_0(tmp_path, umask0):
    db = tmp_path / "state" / "sub" / "sf.sqlite"
    store = Store(db)
    store.set_profile("cnn", "v100", 2.0)  # a write: the WAL has content
    for p in (db, f"{db}-wal", f"{db}-shm"):
        assert os.path.exists(p), p
        assert mode(p) == 0o600, (p, oct(mode(p)))
    assert mode(tmp_path / "state") == 0o750 and mode(tmp_path / "state" / "sub") == 0o750
    f = lock(db)
    try:
        assert mode(f"{db}.lock") == 0o600
        assert open(f"{db}.lock").read() == f"{os.getpid()}\n"
        with pytest.raises(AlreadyRunning):
            lock(db)
    finally:
        f.close()
    store.close()


def test_an_existing_too_open_database_and_lock_are_tightened(tmp_path, umask0):
    db = tmp_path / "sf.sqlite"
    Store(db).close()
    os.chmod(db, 0o644)
    (tmp_path / "sf.sqlite.lock").write_text("123\n")
    os.chmod(tmp_path / "sf.sqlite.lock", 0o666)
    store = Store(db)
    assert mode(db) == 0o600
    f = lock(db)
    assert mode(tmp_path / "sf.sqlite.lock") == 0o600
    f.close()
    store.close()


def test_a_planted_lock_symlink_is_refused_and_its_target_untouched(tmp_path, umask0):
    victim = tmp_path / "precious.txt"
    victim.write_text("do not truncate me\n")
    os.chmod(victim, 0o644)
    db = tmp_path / "sf.sqlite"
    os.symlink(victim, f"{db}.lock")
    with pytest.raises(StateFileError, match="symbolic link"):
        lock(db)
    assert victim.read_text() == "do not truncate me\n" and mode(victim) == 0o644
    # a dangling symlink is refused too, and nothing is created at its target
    os.unlink(f"{db}.lock")
    os.symlink(tmp_path / "elsewhere", f"{db}.lock")
    with pytest.raises(StateFileError, match="symbolic link"):
        lock(db)
    assert not (tmp_path / "elsewhere").exists()


def test_a_planted_hard_link_as_lock_file_is_refused(tmp_path):
    victim = tmp_path / "precious.txt"
    victim.write_text("keep\n")
    db = tmp_path / "sf.sqlite"
    os.link(victim, f"{db}.lock")
    with pytest.raises(StateFileError, match="hard links"):
        lock(db)
    assert victim.read_text() == "keep\n"
