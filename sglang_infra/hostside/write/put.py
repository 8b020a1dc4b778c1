"""A file root writes under the account's directories, from stdin, never through a link.

    python3 put.py DEST USER GROUP MODE SIZE [--keep-previous] [--check COMMAND]

Reads exactly SIZE bytes from stdin into DEST.candidate.PID (its own pid: two
writes of DEST at once never meet; an ended process's leftover is removed), a file this program
creates itself (O_EXCL, O_NOFOLLOW) in DEST's directory, opened one path
component at a time (safefs.open_dir), and sets its owner and mode through
its descriptor. With --check, COMMAND (a shell command naming the candidate as "$CANDIDATE")
must accept it; a candidate it refuses is deleted and DEST stays as it was.
With --keep-previous, the current DEST is copied (content, owner, mode,
times, read with O_NOFOLLOW) into a new file that then takes the name
DEST.previous. Then the candidate takes DEST's name. A symlink (or anything
but a regular file) at DEST, at DEST.previous's place or on the way to them is
refused and named on stderr; nothing is followed.
"""

import argparse
import grp
import os
import pwd
import stat
import subprocess
import sys

from .. import safefs

CHECK_TIMEOUT = 300  # seconds, for the candidate's check (docker compose config)
MAX_PREVIOUS = 64 << 20
CANDIDATE = ".candidate"   # DEST.candidate.PID: the new content, named by the process that writes it


def _read_stdin(size):
    data = b""
    while len(data) < size:
        chunk = os.read(0, size - len(data))
        if not chunk:
            raise safefs.Refused(f"stdin ended after {len(data)} of {size} bytes; nothing was written")
        data += chunk
    return data


def _regular_or_absent(dir_fd, name, path):
    """The lstat of ``name``, None when absent; Refused when it is a symlink or not a regular file."""
    st = safefs.lstat_in(dir_fd, name)
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        raise safefs.Refused(f"{path} is {kind}; refusing to write through it: move it away by hand and run again")
    return st


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_leftovers(dir_fd, name, dest):
    """DEST.candidate (an older run's name) and DEST.candidate.PID of a process that has ended: leftovers of an
    interrupted write, removed; a live process's candidate is left to it. A link or anything but a regular file at
    such a name is refused, never followed."""
    for entry in sorted(os.listdir(dir_fd)):
        if entry != name + CANDIDATE and not entry.startswith(name + CANDIDATE + "."):
            continue
        pid = entry[len(name + CANDIDATE) + 1:]
        if pid and (not pid.isdigit() or _alive(int(pid))):
            continue
        _regular_or_absent(dir_fd, entry, os.path.join(os.path.dirname(dest), entry))
        try:
            os.unlink(entry, dir_fd=dir_fd)
        except FileNotFoundError:
            pass


def _replace(dir_fd, name, data, mode, owner, times=None):
    """``name`` replaced by a new file holding ``data``: written beside it, renamed over it."""
    tmp = f"{name}.{os.getpid()}.tmp"
    safefs.rename_new(dir_fd, tmp, name, safefs.create_new(dir_fd, tmp, data, mode, owner, times))


def put(dest, owner, mode, data, keep_previous=False, check=None):
    directory, name = os.path.split(os.path.abspath(dest))
    dir_fd = safefs.open_dir(directory)
    try:
        current = _regular_or_absent(dir_fd, name, dest)
        _remove_leftovers(dir_fd, name, dest)
        # This program's own name: another write of DEST at the same moment has its own, and never unlinks this one.
        candidate = f"{name}{CANDIDATE}.{os.getpid()}"

        def checked_and_kept():
            """The candidate passed its check, and the old file is kept as .previous."""
            if check:
                try:
                    found = subprocess.run(["sh", "-c", check], env={**os.environ, "CANDIDATE": os.path.join(
                        directory, candidate)}, capture_output=True, text=True, timeout=CHECK_TIMEOUT)
                    out, ok = (found.stdout + found.stderr).strip(), found.returncode == 0
                except subprocess.TimeoutExpired:
                    out, ok = f"the check took over {CHECK_TIMEOUT} s", False
                if not ok:
                    raise safefs.Refused(f"the new {dest} failed its check, the current file is unchanged: {out}")
            if keep_previous and current is not None:
                previous = name + ".previous"
                _regular_or_absent(dir_fd, previous, dest + ".previous")
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
                with os.fdopen(fd, "rb") as handle:
                    was = os.fstat(handle.fileno())
                    if not stat.S_ISREG(was.st_mode):
                        raise safefs.Refused(f"{dest} is not a regular file")
                    old = handle.read(MAX_PREVIOUS)
                _replace(dir_fd, previous, old, stat.S_IMODE(was.st_mode), (was.st_uid, was.st_gid),
                         (was.st_atime_ns, was.st_mtime_ns))

        safefs.rename_new(dir_fd, candidate, name, safefs.create_new(dir_fd, candidate, data, mode, owner),
                          checked_and_kept)
    finally:
        os.close(dir_fd)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="put.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dest")
    parser.add_argument("user")
    parser.add_argument("group")
    parser.add_argument("mode")
    parser.add_argument("size", type=int)
    parser.add_argument("--keep-previous", action="store_true")
    parser.add_argument("--check", default=None)
    args = parser.parse_args(argv)
    try:
        owner = (pwd.getpwnam(args.user).pw_uid, grp.getgrnam(args.group).gr_gid)
        put(args.dest, owner, int(args.mode, 8), _read_stdin(args.size), args.keep_previous, args.check)
    except OSError as error:
        print(f"refused: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
