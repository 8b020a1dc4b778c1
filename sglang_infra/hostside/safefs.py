"""Reading files that may sit in a group-writable tree, as root.

Admins and the serving container can write into hf-cache, so a name there may
be a symlink planted to make root read something else. Every read here opens
with O_NOFOLLOW, accepts only a regular file, and is bounded in size; every
write goes to a new file (O_EXCL, O_NOFOLLOW) that then takes the name.
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


def write_atomic(path, data, mode=0o664, owner=None, times=None, verify=False):
    """
    Replace ``path`` with ``data``: written to a new file beside it (never
    through a symlink, never over another file), flushed to disk, optionally
    read back and compared, given ``mode``, ``owner`` (uid, gid) and
    ``times`` (atime_ns, mtime_ns), and only then renamed over the name. A
    full disk raises and leaves the old file as it was.
    """
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if verify and sha256_regular(tmp) != hashlib.sha256(data).hexdigest():
            raise OSError(f"{tmp} does not read back as written")
        if owner is not None:
            os.chown(tmp, *owner)
        os.chmod(tmp, mode)
        if times is not None:
            os.utime(tmp, ns=times)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
