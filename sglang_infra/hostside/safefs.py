"""Reading files that may sit in a group-writable tree, as root.

Admins and the serving container can write into hf-cache, so a name there may
be a symlink planted to make root read something else. Every read here opens
with O_NOFOLLOW, accepts only a regular file, and is bounded in size.
"""

import hashlib
import os
import stat

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _open_regular(path):
    fd = os.open(path, _FLAGS)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return fd


def read_regular(path, limit):
    """At most ``limit`` bytes of a regular file that is not a symlink, or None."""
    try:
        fd = _open_regular(path)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read(limit)


def sha256_regular(path):
    """The sha256 of a regular file that is not a symlink, or None."""
    try:
        fd = _open_regular(path)
    except OSError:
        return None
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
