"""Repairs drifted entries below the home, as root, never steered by the tree.

    python3 repair.py FIX HOME USER GROUP PATH...
    python3 repair.py dir=MODE HOME USER GROUP PATH     a managed directory: made, owned and moded

The paths come from the snapshot, but the tree is group-writable: between
the read and the repair, any name in it may have become a symlink. So every
path is walked from HOME one component at a time with O_NOFOLLOW (safefs's
walk, open_below: a link on the way is refused and named), and the
fix is applied to what was opened (fchmod) or to the name itself (lchown),
never to where a symlink points. A path that left HOME, vanished, or turned
into something else is skipped and named on stderr; so is a file with more
than one hard link, which the deploy and the pull never make: its other name
may be a file of root's linked in, whose owner or mode the repair must not
change (the snapshot lists such files apart; this is for one linked since).
"""

import grp
import os
import pwd
import stat
import sys

from .. import safefs

_ANY = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


NOT_A_FILE = "it is no longer a file or directory"


def _linked(st):
    """Why an entry must be left as it is: a non-directory with more than one hard link; else None."""
    if not stat.S_ISDIR(st.st_mode) and not stat.S_ISLNK(st.st_mode) and st.st_nlink > 1:
        return (f"it has {st.st_nlink} hard links, which the deploy never makes; left as it is (another name "
                "may be a file from elsewhere)")
    return None


def _mode(add=0, remove=0, kinds=None):
    """A fix that changes mode bits on the opened entry (regular files and directories only). None when done,
    else why not."""
    def fix(parent, name, ids):
        fd = os.open(name, _ANY, dir_fd=parent)
        try:
            st = os.fstat(fd)
            if kinds is not None and stat.S_IFMT(st.st_mode) not in kinds:
                return NOT_A_FILE
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                return NOT_A_FILE
            if _linked(st):
                return _linked(st)
            os.fchmod(fd, (stat.S_IMODE(st.st_mode) | add) & ~remove)
            return None
        finally:
            os.close(fd)
    return fix


def _owner(user_too):
    """A fix that changes the owner: of a symlink itself (by its name, never followed), or of the file or
    directory opened (through its descriptor, so that what was checked is what changes)."""
    def fix(parent, name, ids):
        uid = ids[0] if user_too else -1
        if stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
            os.chown(name, uid, ids[1], dir_fd=parent, follow_symlinks=False)
            return None
        fd = os.open(name, _ANY, dir_fd=parent)
        try:
            st = os.fstat(fd)
            if _linked(st):
                return _linked(st)
            os.fchown(fd, uid, ids[1])
            return None
        finally:
            os.close(fd)
    return fix


FIXES = {
    "cache_group": _owner(user_too=False),                                  # chgrp -h
    "cache_file_mode": _mode(add=0o060, kinds={stat.S_IFREG}),              # chmod g+rw
    "cache_dir_mode": _mode(add=0o2070, kinds={stat.S_IFDIR}),              # chmod g+rwxs
    "owner": _owner(user_too=True),                                         # chown -h
    "world_writable": _mode(remove=0o002),                                  # chmod o-w
    "docker_group_writable": _mode(remove=0o020),                           # chmod g-w
}


def _open_parent(home, path):
    """(fd of the path's parent directory, opened component by component below home and never through a link
    (safefs.open_below), the last name)."""
    relative = os.path.relpath(path, home)
    parts = relative.split(os.sep)
    if relative.startswith("..") or os.path.isabs(relative) or any(p in ("", ".", "..") for p in parts):
        raise OSError(f"{path} is not below {home}")
    fd = os.open(home, safefs.DIR_FLAGS)
    try:
        return safefs.open_below(fd, parts[:-1], home, create=False), parts[-1]
    finally:
        os.close(fd)


def ensure_dir(path, mode, home, ids):
    """Make ``path`` (home, or below it) a directory owned by ``ids`` with ``mode``; never through a symlink."""
    if path == home:
        parent, name = os.open(os.path.dirname(home), os.O_RDONLY | os.O_DIRECTORY), os.path.basename(home)
    else:
        parent, name = _open_parent(home, path)
    try:
        try:
            os.mkdir(name, 0o700, dir_fd=parent)
        except FileExistsError:
            pass
        try:
            fd = os.open(name, safefs.DIR_FLAGS, dir_fd=parent)
        except OSError as error:
            raise OSError(f"{path} is not a directory (a symlink or a file: {error.strerror}); move it away by "
                          "hand and run again") from error
        try:
            os.fchown(fd, *ids)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    finally:
        os.close(parent)


def repair(fix, home, user, group, paths):
    ids = (pwd.getpwnam(user).pw_uid, grp.getgrnam(group).gr_gid)
    if fix.startswith("dir="):
        for path in paths:
            ensure_dir(path, int(fix[len("dir="):], 8), home, ids)
        return 0
    skipped = 0
    for path in paths:
        try:
            parent, name = _open_parent(home, path)
            try:
                why = FIXES[fix](parent, name, ids)
            finally:
                os.close(parent)
        except OSError as error:
            why = error
        if why is not None:
            skipped += 1
            print(f"repair {fix}: skipped {path!r}: {why}", file=sys.stderr)
    return skipped


if __name__ == "__main__":
    try:
        repair(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
    except OSError as error:
        print(f"refused: {error}", file=sys.stderr)
        sys.exit(1)
