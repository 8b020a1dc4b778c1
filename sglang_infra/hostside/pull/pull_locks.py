"""The pull's file locks: an exclusive flock on a file that stays in place, the same
protocol as huggingface_hub's per-blob locks (`<cache>/.locks/<repo folder>/<etag>.lock`),
so a hand pull by an admin and hfpull.py never write the same blob at once; and the
per-repo lock (PULL_LOCK) that a whole pull holds and prune respects.

Standard library only, but for its errors (pull_errors.py, which needs huggingface_hub).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time

from .pull_errors import EXIT_LOCKED, PullError

PULL_LOCK = ".sglang-pull.lock"
DEFAULT_LOCK_WAIT = 1800.0  # 30 min for another pull (or a hand pull of one blob)
LOCK_POLL = 0.5


class FileLock:
    """An exclusive fcntl.flock on a file that stays in place (same protocol as the
    `filelock` package used by huggingface_hub, so both sides exclude each other)."""

    def __init__(self, path: str):
        self.path = path
        self.fd: int | None = None

    def try_acquire(self) -> bool:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        try:
            # Never through a symlink planted in the group-writable cache.
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o664)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise PullError(f"{self.path} is a symlink, not a lock file; it is never followed. Remove it "
                                f"(rm {self.path}) and run again", EXIT_LOCKED) from e
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise PullError(f"{self.path} is not a regular file, so it is no lock; remove it and run again",
                            EXIT_LOCKED)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                return False
            raise
        try:  # a peer may have unlinked the path before we got the lock: retry on the new inode
            same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            return False
        st = os.fstat(fd)
        if st.st_uid == os.geteuid() and st.st_nlink == 1:  # a second name may be another file of the account's
            try:
                os.fchmod(fd, 0o664)
            except OSError:
                pass
        self.fd = fd
        return True

    def acquire(self, wait_s: float, on_wait=None) -> bool:
        deadline = time.monotonic() + max(0.0, wait_s)
        announced = False
        for _ in range(int(wait_s / LOCK_POLL) + 2):
            if self.try_acquire():
                return True
            if time.monotonic() >= deadline:
                return False
            if not announced and on_wait is not None:
                on_wait()
                announced = True
            time.sleep(LOCK_POLL)
        return False

    def release(self) -> None:
        if self.fd is not None:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def held_by(path: str) -> str:
    """The ", held by <holder>" part of a message about the lock on ``path`` (empty if no holder is known)."""
    holder = lock_holder(path)
    return f", held by {holder}" if holder else ""


def lock_holder(path: str) -> str | None:
    """Who holds the flock on ``path`` ("pid 123 (hf download ...)"), read from /proc/locks, or None."""
    try:
        st = os.stat(path)
        with open("/proc/locks", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == wanted:
            pid = fields[4]
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
            except OSError:
                command = "?"
            return f"pid {pid} ({command})"
    return None


def is_locked(path: str) -> bool:
    """True if someone holds an flock on `path` (a missing file is not locked)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False
