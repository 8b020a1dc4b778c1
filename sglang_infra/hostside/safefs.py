"""Reading and writing files that others may have changed, as root.

Admins and the serving container can write into hf-cache, and the account
owns the rest of the home, so a name there may be a symlink planted to make
root read or write something else. Every read here opens with O_NOFOLLOW,
accepts only a regular file, and is bounded in size; every write goes to a
new file (O_EXCL, O_NOFOLLOW) whose owner, mode and times are set through its
descriptor, and that then takes the name. Directories are opened one path
component at a time (open_dir), so no component is a link that someone other
than root could have made; walks are bounded in entries and time (Budget).
"""

import errno
import hashlib
import os
import stat
import time

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
DIR_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | _CLOEXEC


_HELD = "/proc/self/fd/"


def held(path):
    """(descriptor, rest) of a path in a folder this process holds open, /proc/self/fd/N[/...], else None: what
    re.fullmatch(r"/proc/self/fd/([0-9]+)(/.*)?", path) groups (rest "" for none), without importing re (a read's
    CPU, docs/benchmarks.md; tests/unit/test_read_imports.py holds the two equal)."""
    if not path.startswith(_HELD):
        return None
    fd, slash, rest = path[len(_HELD):].partition("/")
    if not fd or not fd.isascii() or not fd.isdigit() or "\n" in rest:
        return None
    return fd, slash + rest


class Refused(OSError):
    """A path that is a symlink (or not what it must be) where root must not follow one; the message names it."""


def _root_only(st):
    """A directory only root can change entries in: a link found there is root's own."""
    return st.st_uid == 0 and not st.st_mode & 0o022


def open_dir(path):
    """
    A descriptor of the directory ``path``, opened from / one component at a
    time. A component may be a symlink only inside a directory that root
    alone can write (``/opt`` moved to another disk by the admin); anywhere
    below a directory someone else can write, a symlink is refused (Refused,
    naming the path) and never followed.
    """
    path = os.path.abspath(path)
    found = held(path)
    if found:  # a directory this process holds open (fd_path): itself, never its name again
        fd = os.open(f"/proc/self/fd/{found[0]}", DIR_FLAGS & ~os.O_NOFOLLOW)
        walked, path = f"/proc/self/fd/{found[0]}", found[1]
    else:
        fd = os.open("/", DIR_FLAGS)
        walked = ""
    try:
        for part in [p for p in path.split("/") if p]:
            walked += "/" + part
            fd = _step(fd, part, walked, follow=_root_only(os.fstat(fd)))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _step(fd, part, walked, follow=False):
    """The directory ``part`` of ``fd`` opened (``fd`` closed), through a link only when ``follow``; Refused
    naming ``walked`` for a link."""
    try:
        nxt = os.open(part, DIR_FLAGS & ~os.O_NOFOLLOW if follow else DIR_FLAGS, dir_fd=fd)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(fd, part):
            raise Refused(f"{walked} is a symlink; refusing to follow it") from error
        raise
    os.close(fd)
    return nxt


def fd_path(fd):
    """A name for the directory open as ``fd`` that resolves to that very directory, whatever its path's names
    become later (Linux's /proc/self/fd): what is opened below it is found from there, and open_dir goes on from
    the descriptor too."""
    return f"/proc/self/fd/{fd}"


def open_below(dir_fd, parts, shown, create=True):
    """The directory ``parts`` (names, one per level) below ``dir_fd``, opened one level at a time and never
    through a link (Refused, naming ``shown`` and the levels walked); each level made (mode 0777 less the umask)
    when missing and ``create``. The caller closes the descriptor."""
    fd = os.dup(dir_fd)
    walked = shown
    try:
        for part in parts:
            walked = f"{walked}/{part}"
            if part in ("", ".", "..") or "/" in part:
                raise Refused(f"{walked} is not a directory's name")
            if create:
                try:
                    os.mkdir(part, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
            fd = _step(fd, part, walked)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_link(dir_fd, name):
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def open_subdir(dir_fd, name):
    """A directory entry of ``dir_fd`` opened as a directory, never through a symlink; None if it is not one."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None


def lstat_in(dir_fd, name):
    try:
        return os.lstat(name, dir_fd=dir_fd)
    except OSError:
        return None


def listdir_fd(dir_fd):
    try:
        return sorted(os.listdir(dir_fd))
    except OSError:
        return []


def _open_regular(path, dir_fd=None):
    fd = os.open(path, _FLAGS, dir_fd=dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return fd


def read_small(path, limit):
    """The content of the regular file ``path``, read as root reads what others may have written: Refused when it
    is a symlink (never followed), OSError when it is not a regular file (a FIFO is opened without blocking and
    never read) or is larger than ``limit`` bytes."""
    try:
        fd = _open_regular(path)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise Refused(f"{path} is a symlink; refusing to follow it") from error
        raise
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(f"{path} is larger than {limit} bytes")
    return data


def read_regular(path, limit, dir_fd=None):
    """At most ``limit`` bytes of a regular file that is not a symlink, or None."""
    try:
        fd = _open_regular(path, dir_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read(limit)


def read_regular_with_stat(name, limit, dir_fd):
    """(content, fstat) of the regular file ``name`` in ``dir_fd``, opened with O_NOFOLLOW (a FIFO without
    blocking, never read), or None when it is not one or is larger than ``limit`` bytes."""
    try:
        fd = _open_regular(name, dir_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        data = handle.read(limit + 1)
    return None if len(data) > limit else (data, st)


def is_regular(path):
    """A regular file, not a symlink to one."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def read_with_stat(path, limit):
    """(content, stat) of a regular file, at most ``limit`` bytes, its directory opened with open_dir and the file
    with O_NOFOLLOW; Refused when it is a symlink, OSError when it is not a regular file or larger."""
    directory, name = os.path.split(os.path.abspath(path))
    dir_fd = open_dir(directory)
    try:
        if _is_link(dir_fd, name):
            raise Refused(f"{path} is a symlink; refusing to follow it")
        fd = _open_regular(name, dir_fd)
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(f"{path} is larger than {limit} bytes")
    return data, st


def sha256_fd(fd, limit=None):
    """The sha256 of what ``fd`` reads from its current offset to the end; None once it passes ``limit`` bytes."""
    digest, size = hashlib.sha256(), 0
    for block in iter(lambda: os.read(fd, 1 << 20), b""):
        size += len(block)
        if limit is not None and size > limit:
            return None
        digest.update(block)
    return digest.hexdigest()


MAX_HASHED_BYTES = 64 << 20   # a config file, a script, a launcher: far below this


def sha256_regular(path, limit=MAX_HASHED_BYTES):
    """The sha256 of a regular file that is not a symlink (a FIFO is opened without blocking and never read), or
    None, also when it is larger than ``limit`` bytes (read no further)."""
    try:
        fd = _open_regular(path)
    except OSError:
        return None
    try:
        return sha256_fd(fd, limit)
    finally:
        os.close(fd)


def create_new(dir_fd, name, data, mode, owner=None, times=None):
    """
    ``name`` in ``dir_fd`` created anew (O_EXCL, O_NOFOLLOW: never another
    file, never through a link) holding ``data``, flushed, then given
    ``owner``, ``mode`` and ``times`` through its descriptor. Its lstat.
    """
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        if owner is not None:
            os.fchown(fd, *owner)
        os.fchmod(fd, mode)
        if times is not None:
            os.utime(fd, ns=times)
        return os.fstat(fd)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def rename_own(dir_fd, tmp, name, st):
    """Rename ``tmp`` (created as ``st``) over ``name``, both in ``dir_fd``: refused if ``tmp`` is no longer the
    file created, and checked again once renamed."""
    found = lstat_in(dir_fd, tmp)
    if found is None or (found.st_dev, found.st_ino) != (st.st_dev, st.st_ino):
        raise Refused(f"{tmp} was replaced before it took its name; nothing was renamed")
    os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    found = lstat_in(dir_fd, name)
    if found is None or (found.st_dev, found.st_ino) != (st.st_dev, st.st_ino):
        raise Refused(f"{name} was replaced while it took its new content")


def write_atomic(path, data, mode=0o664, owner=None, times=None, verify=False, trusted_dir=False):
    """
    Replace ``path`` with ``data``: written to a new file beside it (never
    through a symlink, never over another file, its directory opened with
    open_dir), flushed to disk, optionally read back and compared, given
    ``mode``, ``owner`` (uid, gid) and ``times`` (atime_ns, mtime_ns) through
    its descriptor, and only then renamed over the name. A full disk raises
    and leaves the old file as it was. ``trusted_dir``: the directory is the
    caller's own (the control machine's lock), opened as the caller names it.
    """
    directory, name = os.path.split(os.path.abspath(path))
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY) if trusted_dir else open_dir(directory)
    tmp = f"{name}.{os.getpid()}.tmp"

    def read_back():
        back = read_regular(tmp, len(data) + 1, dir_fd=dir_fd)
        if back is None or hashlib.sha256(back).digest() != hashlib.sha256(data).digest():
            raise OSError(f"{path}: the new copy does not read back as written")

    try:
        st = create_new(dir_fd, tmp, data, mode, owner, times)
        rename_new(dir_fd, tmp, name, st, read_back if verify else None)
    finally:
        os.close(dir_fd)


def rename_new(dir_fd, tmp, name, st, before=None):
    """The new file ``tmp`` (its stat ``st``, made by create_new) renamed over ``name`` after ``before()``, if
    given; on any failure ``tmp`` is removed and the old ``name`` is left as it was."""
    try:
        if before is not None:
            before()
        rename_own(dir_fd, tmp, name, st)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def replace_textfile(textfile_dir, name, data, mode):
    """``data`` as ``name`` in the node exporter's ``textfile_dir``, replaced atomically: the path written, or None
    when the directory does not exist. Refused (an OSError naming it) when a link is on the way to the directory; a
    link at the file's name is replaced by the new file, never written through."""
    try:
        dir_fd = open_dir(textfile_dir)
    except FileNotFoundError:
        return None
    try:
        # A name the collector skips (it reads *.prom only), unique to this process, created anew (O_EXCL).
        tmp = f".{name}.{os.getpid()}.tmp"
        created = create_new(dir_fd, tmp, data, mode)
        rename_new(dir_fd, tmp, name, created)
    finally:
        os.close(dir_fd)
    return os.path.join(textfile_dir, name)


def unlink_if_present(path):
    """Remove the name ``path`` (a link itself, not what it points to); nothing when it is already gone."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class Budget:
    """A walk's bound: at most ``entries`` entries and ``seconds`` of time. ``spend()`` is False once either is
    used up, and ``stopped`` then says which."""

    def __init__(self, entries, seconds):
        self.left = entries
        self.entries = entries
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.stopped = None

    def spend(self, n=1):
        if self.stopped is None:
            self.left -= n
            if self.left < 0:
                self.stopped = f"more than {self.entries} entries"
            elif time.monotonic() > self.deadline:
                self.stopped = f"more than {self.seconds} s"
        return self.stopped is None


MAX_DEPTH = 256  # directories below a walk's top; a deeper tree is left unread, and said so


def walk(dir_fd, top, budget):
    """
    (path, lstat) of everything below the directory open as ``dir_fd`` (named
    ``top``; not closed here), depth first. Each directory is opened from its
    parent's descriptor with O_NOFOLLOW, so a directory swapped for a link
    while the walk runs is never entered; at most MAX_DEPTH levels, and only
    while ``budget`` lasts (its ``stopped`` then says why the walk ended).
    """
    stack = [(top, None, os.scandir(dir_fd))]
    try:
        while stack:
            path, fd, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                entries.close()
                if fd is not None:
                    os.close(fd)
                stack.pop()
                continue
            if not budget.spend():
                return
            parent = dir_fd if fd is None else fd
            st = lstat_in(parent, entry.name)
            if st is None:
                continue
            full = path + "/" + entry.name
            yield full, st
            if stat.S_ISDIR(st.st_mode):
                if len(stack) >= MAX_DEPTH:
                    budget.stopped = f"a tree deeper than {MAX_DEPTH} directories ({full})"
                    return
                child = open_subdir(parent, entry.name)
                if child is not None:
                    try:
                        stack.append((full, child, os.scandir(child)))
                    except OSError:
                        os.close(child)
    finally:
        for _path, fd, entries in stack:
            entries.close()
            if fd is not None:
                os.close(fd)


def create_if_absent(path, data, mode=0o664):
    """``path`` created anew with ``data`` unless the name is taken (by a link too: never followed, left as it
    is); True when it was created."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC, mode)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return True


def which(command):
    """shutil.which(command) on POSIX, without importing shutil (it imports fnmatch and re: a read's CPU,
    docs/benchmarks.md): ``command`` itself when it names a folder, else the first folder of PATH (os.confstr's
    CS_PATH, or os.defpath, when PATH is unset; none when empty) holding an executable of that name that is not a
    folder. tests/unit/test_read_imports.py holds the two equal."""
    def runnable(name):
        return os.path.exists(name) and os.access(name, os.F_OK | os.X_OK) and not os.path.isdir(name)

    if os.path.dirname(command):
        return command if runnable(command) else None
    path = os.environ.get("PATH", None)
    if path is None:
        try:
            path = os.confstr("CS_PATH")
        except (AttributeError, ValueError):
            path = os.defpath
    if not path:
        return None
    seen = set()
    for folder in os.fsdecode(path).split(os.pathsep):
        if folder not in seen:
            seen.add(folder)
            name = os.path.join(folder, command)
            if runnable(name):
                return name
    return None
