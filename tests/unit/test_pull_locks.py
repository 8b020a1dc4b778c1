"""pull_locks.py: the pull's flock'ed files, against each other and against huggingface_hub's own.
The locks as the CLI meets them (a held repo lock, a planted symlink) are in test_hfpull.py."""

from __future__ import annotations

import os
import stat
import time

import pytest

from sglang_infra.hostside.pull import pull_locks


def test_file_lock_excludes_a_second_holder(tmp_path):
    a, b = pull_locks.FileLock(str(tmp_path / "x.lock")), pull_locks.FileLock(str(tmp_path / "x.lock"))
    assert a.try_acquire()
    assert not b.try_acquire()
    assert pull_locks.is_locked(a.path)
    t0 = time.monotonic()
    assert not b.acquire(0.3)
    assert time.monotonic() - t0 < 5
    a.release()
    assert b.acquire(1)
    b.release()
    assert stat.S_IMODE(os.stat(a.path).st_mode) & 0o060 == 0o060


def test_lock_interoperates_with_huggingface_hub(tmp_path):
    """huggingface_hub guards each blob download with the same flock'ed file."""
    from huggingface_hub.utils import WeakFileLock

    path = str(tmp_path / ".locks" / "models--org--m" / ("a" * 64 + ".lock"))
    os.makedirs(os.path.dirname(path))
    with WeakFileLock(path):
        assert not pull_locks.FileLock(path).try_acquire()
    ours = pull_locks.FileLock(path)
    assert ours.try_acquire()
    try:
        from filelock import FileLock as LibraryLock
        from filelock import Timeout

        with pytest.raises(Timeout):
            LibraryLock(path, timeout=0.1).acquire()
    finally:
        ours.release()


def test_a_lock_file_of_another_owner_keeps_its_mode(tmp_path, monkeypatch):
    path = tmp_path / "x.lock"
    path.write_text("")
    path.chmod(0o600)
    monkeypatch.setattr(pull_locks.os, "geteuid", lambda: os.getuid() + 1)
    lock = pull_locks.FileLock(str(path))
    assert lock.try_acquire()
    lock.release()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_lock_file_with_a_second_name_keeps_its_mode(tmp_path):
    """A member's hard link at a lock's name to a file of the account's (docker/compose.yaml, say): the pull, as
    the account, would make that file group-writable."""
    accounts = tmp_path / "compose.yaml"
    accounts.write_text("services: {}\n")
    accounts.chmod(0o600)
    path = tmp_path / "x.lock"
    os.link(accounts, path)
    lock = pull_locks.FileLock(str(path))
    assert lock.try_acquire()
    lock.release()
    assert stat.S_IMODE(accounts.stat().st_mode) == 0o600
    os.unlink(path)  # a lock file of its own is made group-writable, as before
    assert lock.try_acquire()
    lock.release()
    assert stat.S_IMODE(path.stat().st_mode) == 0o664
