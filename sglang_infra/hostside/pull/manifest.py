"""The record of a verified pull: `<records dir>/<repo folder>/<commit>.json`.

The records dir is `verified/` below the home (names.VERIFIED_DIR), outside
hf-cache: the account's own, 0755, not group-writable. hf-cache is writable by
every member of the group; a record there could be rewritten by a member along
with the blob it vouches for. So a record counts only while the records dir,
the repo's folder in it and the record itself are owned by the account or by
root, are a directory, a directory and a regular file (never a link), and
carry no group or other write bit (Records); any other record is as if there
were none, and the next pull hashes the blobs again. Records left in a repo
folder's `.sglang/` by older pulls are never read.

Written by hfpull.py only once every file of the revision matched the Hub's
size and hash; read by hfpull.py (to skip a complete revision) and by
cachestate.py (to report it). A record holds for as long as every listed
file's snapshot link points at its blob and the blob is the very inode that
was verified, unchanged: its inode number, size and change time (ctime), which
no one but the kernel sets (a member of the group can rewrite a blob and
`touch -d` its mtime back, never its ctime). So checking it costs one lstat
per file; a blob whose ctime moved is hashed again by the next pull. The repo
is read through directory descriptors (safefs), never following a link.
"""

import contextlib
import hashlib
import os
import posixpath
import pwd
import stat

from .. import safefs
from ..formats import jsonio

MAX_BYTES = 64 << 20  # far above any real repo's file list
SUFFIX = ".json"
# `<commit>.partial.json`: a revision verified in part (a swarm's first round, peering.py): the same entries as a
# record, for the files the pull verified so far alone; never a complete revision, only what the peer door may list.
PARTIAL = ".partial"


def safe_name(name):
    """A name that stays one entry of its directory: no '/', not '.' or '..', no NUL."""
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name


def owners(account=None):
    """The uids whose records count: root and ``account`` (by name); without one, whoever runs this (the pull
    runs as the account)."""
    uids = {0}
    if account is None:
        uids.add(os.geteuid())
    else:
        try:
            uids.add(pwd.getpwnam(account).pw_uid)
        except KeyError:
            pass
    return frozenset(uids)


class Records:
    """The verified-pull records in ``directory``, trusted only when owned by one of ``owners`` and writable by
    no one else (module doc)."""

    def __init__(self, directory, owners):
        self.directory = directory
        self.owners = frozenset(owners)

    def trusted(self, st, kind):
        return kind(st.st_mode) and st.st_uid in self.owners and not st.st_mode & 0o022

    def _top(self):
        """The records dir opened (safefs.open_dir) and trusted, or None."""
        try:
            top = safefs.open_dir(self.directory)
        except OSError:
            return None
        if not self.trusted(os.fstat(top), stat.S_ISDIR):
            os.close(top)
            return None
        return top

    def _sub(self, top, folder):
        fd = safefs.open_subdir(top, folder) if safe_name(folder) else None
        if fd is not None and not self.trusted(os.fstat(fd), stat.S_ISDIR):
            os.close(fd)
            return None
        return fd

    def folder(self, folder):
        """A descriptor of the repo's records folder, or None: none there, a bad name, or one not to trust (Held:
        closed at the with block's end)."""
        top = self._top()
        fd = None
        if top is not None:
            try:
                fd = self._sub(top, folder)
            finally:
                os.close(top)
        return Held(fd)

    def load_in(self, fd, commit, part=False):
        """The record of ``commit`` in the folder open as ``fd`` (from folder()), or None when there is none or it
        is not one to trust: a link, not a regular file, another owner, group- or other-writable, too large.
        ``part``: its record of the files verified so far (PARTIAL) instead."""
        if fd is None or not safe_name(commit):
            return None
        try:
            found = safefs.read_regular_with_stat(commit + (PARTIAL if part else "") + SUFFIX, MAX_BYTES, dir_fd=fd)
        except OSError:
            return None
        if found is None or not self.trusted(found[1], stat.S_ISREG):
            return None
        return _parse(found[0], commit)

    def load(self, folder, commit, part=False):
        with self.folder(folder) as fd:
            return self.load_in(fd, commit, part)

    def commits(self, fd, names):
        """The commits of the records among ``names`` (entries of the folder open as ``fd``)."""
        return [n[:-len(SUFFIX)] for n in names if fd is not None and n.endswith(SUFFIX)
                and not n.endswith(PARTIAL + SUFFIX)]

    def folders(self):
        """The repo folders that have records (names only), when the records dir is one to trust."""
        top = self._top()
        if top is None:
            return []
        try:
            return [n for n in safefs.listdir_fd(top) if safe_name(n)]
        finally:
            os.close(top)

    def trusted_blobs(self, folder):
        """blob name -> {size, ino, ctime_ns, sha256 (or None)} recorded by any earlier verified pull of the repo."""
        trust = {}
        with self.folder(folder) as fd:
            for commit in self.commits(fd, safefs.listdir_fd(fd) if fd is not None else []):
                for item in (self.load_in(fd, commit) or {}).get("files", []):
                    have = recorded(item) if isinstance(item, dict) else None
                    if have is None or not isinstance(item.get("blob"), str):
                        continue
                    sha256 = item.get("sha256") or (item["blob"] if item.get("lfs") else None)
                    trust[item["blob"]] = {"size": have[0], "ino": have[1], "ctime_ns": have[2], "sha256": sha256}
        return trust

    def _own(self, fd, path):
        if not self.trusted(os.fstat(fd), stat.S_ISDIR):
            raise safefs.Refused(f"{path} is not the account's alone (another owner, or writable by its group or "
                                 f"others): nothing verified is recorded there; make it the account's, mode 0755")

    def write(self, folder, commit, data, part=False):
        """``data`` as the record of ``commit``: the records dir and the repo's folder made 0755 when missing, the
        record created anew 0644 and renamed into place. Refused (nothing written) when either folder is a link
        or not the account's alone. ``part``: the record of a revision verified in part (PARTIAL); a whole
        record replaces it (the partial one goes)."""
        if not (safe_name(folder) and safe_name(commit)):
            raise safefs.Refused(f"refusing a record named {folder!r}/{commit!r}")
        here = os.path.join(self.directory, folder)
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.directory, 0o755)
        top = safefs.open_dir(self.directory)
        try:
            self._own(top, self.directory)
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder, 0o755, dir_fd=top)
            fd = safefs.open_subdir(top, folder)
        finally:
            os.close(top)
        if fd is None:
            raise safefs.Refused(f"{here} is not a directory (a symlink?); refusing to record into it")
        try:
            self._own(fd, here)
            name = commit + (PARTIAL if part else "") + SUFFIX
            tmp = f"{name}.{os.getpid()}.tmp"
            import json  # here: a read, which never writes a record, imports no json (docs/benchmarks.md)
            st = safefs.create_new(fd, tmp, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode(), 0o644)
            safefs.rename_new(fd, tmp, name, st)
            if not part:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(commit + PARTIAL + SUFFIX, dir_fd=fd)
        finally:
            os.close(fd)

    def drop_stale(self, folder, present):
        """Remove the repo's records of commits not in ``present`` (its folder too once empty); a folder not to
        trust is left as it is."""
        top = self._top()
        if top is None:
            return
        try:
            fd = self._sub(top, folder)
            if fd is None:
                return
            try:
                for name in safefs.listdir_fd(fd):
                    commit = name[:-len(SUFFIX)].removesuffix(PARTIAL) if name.endswith(SUFFIX) else None
                    if commit is not None and commit not in present:
                        with contextlib.suppress(OSError):
                            os.unlink(name, dir_fd=fd)
                left = safefs.listdir_fd(fd)
            finally:
                os.close(fd)
            if not left:
                with contextlib.suppress(OSError):
                    os.rmdir(folder, dir_fd=top)
        finally:
            os.close(top)


def _parse(text, commit):
    try:
        data = jsonio.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("commit") != commit or not isinstance(data.get("files"), list):
        return None
    return data


def entry(relpath, blob, st, lfs, sha256):
    """One file of a manifest, its blob as verified (``st``, its lstat); ``sha256`` is the content's (for an LFS
    file, its blob name)."""
    return {"path": relpath, "blob": blob, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino,
            "ctime_ns": st.st_ctime_ns, "lfs": lfs, "sha256": sha256}


def vouched(st):
    """(size, inode, ctime_ns) of a blob's stat: what a record holds it to (recorded, still_trusted)."""
    return st.st_size, st.st_ino, st.st_ctime_ns


def recorded(item):
    """(size, inode, ctime_ns) a manifest entry records of its blob; None for an entry without them (written
    before they were recorded: its blob is hashed again)."""
    try:
        return int(item["size"]), int(item["ino"]), int(item["ctime_ns"])
    except (KeyError, TypeError, ValueError):
        return None


def still_trusted(trusted, st, size):
    """Whether the blob ``st`` (its lstat) is the very inode an earlier pull verified (``trusted``, from
    trusted_blobs), unchanged since, and of ``size``."""
    return bool(trusted) and stat.S_ISREG(st.st_mode) and st.st_size == size and (
        trusted["size"], trusted["ino"], trusted["ctime_ns"]) == vouched(st)


class Held:
    """A descriptor for a with block, closed at its end unless ``owned`` is false (None: nothing): what a
    contextlib.contextmanager did here, without importing contextlib on a read (docs/benchmarks.md)."""

    def __init__(self, fd, owned=True):
        self.fd, self.owned = fd, owned

    def __enter__(self):
        return self.fd

    def __exit__(self, *raised):
        if self.fd is not None and self.owned:
            os.close(self.fd)


def repo_fd(repo):
    """A descriptor of the repo folder: ``repo`` itself when it is one, else the path opened with
    safefs.open_dir (closed at the end)."""
    return Held(repo, owned=False) if isinstance(repo, int) else Held(safefs.open_dir(repo))


class _Dirs:
    """Subdirectories of a repo opened one component at a time with O_NOFOLLOW, each once."""

    def __init__(self, top):
        self.fds = {(): top}

    def get(self, parts):
        parts = tuple(parts)
        if parts not in self.fds:
            parent = self.get(parts[:-1])
            self.fds[parts] = None if parent is None else safefs.open_subdir(parent, parts[-1])
        return self.fds[parts]

    def close(self):
        for parts, fd in self.fds.items():
            if parts and fd is not None:
                os.close(fd)


def content_digest(files):
    """One sha256 over every file's path, size and content sha256: what a lock records for a revision
    (sglang_infra/models/lockfile.py). None when a file has no sha256 (a manifest from before sha256 was recorded)."""
    lines = []
    for item in sorted(files, key=lambda e: e["path"]):
        if not item.get("sha256"):
            return None
        lines.append(f"{item['path']}\0{int(item['size'])}\0{item['sha256']}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def document(repo_id, commit, files, verified_at):
    return {"repo_id": repo_id, "commit": commit, "files": sorted(files, key=lambda e: e["path"]),
            "verified_at": verified_at}


def split_relpath(relpath):
    """The parts of a repo path, or None when it would leave the snapshot folder."""
    parts = relpath.split("/") if isinstance(relpath, str) else []
    if not parts or relpath.startswith("/") or "\\" in relpath or any(p in ("", ".", "..") for p in parts):
        return None
    return parts


def link_target(repo_dir, commit, relpath, blob):
    """(the snapshot link's path, the relative target it must hold), as huggingface_hub lays them out."""
    link = os.path.join(repo_dir, "snapshots", commit, *relpath.split("/"))
    return link, os.path.relpath(os.path.join(repo_dir, "blobs", blob), os.path.dirname(link))


def problems(repo, data, budget=None):
    """What no longer holds of a manifest on disk; [] when the revision is still complete and verified.
    ``repo``: the repo folder's path or descriptor; nothing in it is followed."""
    out = []
    try:
        with repo_fd(repo) as top:
            dirs = _Dirs(top)
            try:
                for item in data["files"]:
                    if budget is not None and not budget.spend():
                        return out + ["the cache scan stopped early"]
                    out += _entry_problems(dirs, data["commit"], item)
            finally:
                dirs.close()
    except OSError as error:
        return [f"repo folder unreadable ({error})"]
    return out


def _entry_problems(dirs, commit, item):
    try:
        relpath, blob, want = item["path"], item["blob"], recorded(item)
    except (KeyError, TypeError):
        return ["bad manifest entry"]
    if split_relpath(relpath) is None or split_relpath(blob) is None or "/" in blob:
        return ["unsafe manifest entry"]
    if want is None:
        return [f"no inode and ctime recorded for {relpath} (an older manifest): it is hashed again"]
    parts = ["snapshots", commit, *relpath.split("/")]
    parent = dirs.get(parts[:-1])
    try:
        if parent is None:
            raise OSError
        target = os.readlink(parts[-1], dir_fd=parent)
    except OSError:
        return ["missing link for " + relpath]
    if target != posixpath.relpath(posixpath.join("blobs", blob), posixpath.join(*parts[:-1])):
        return ["wrong link for " + relpath]
    blobs = dirs.get(["blobs"])
    st = None if blobs is None else safefs.lstat_in(blobs, blob)
    if st is None:
        return ["missing blob for " + relpath]
    if not stat.S_ISREG(st.st_mode):
        return ["blob of " + relpath + " is not a regular file"]
    if st.st_size != want[0]:
        return ["size changed for " + relpath]
    if (st.st_ino, st.st_ctime_ns) != want[1:]:
        return ["blob of " + relpath + " changed since it was verified (inode or ctime)"]
    return []


def size(data):
    """Bytes of the revision, each blob counted once."""
    blobs = {}
    for item in data["files"]:
        try:
            blobs[item["blob"]] = int(item["size"])
        except (KeyError, TypeError, ValueError):
            pass
    return sum(blobs.values())
