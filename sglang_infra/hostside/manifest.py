"""The manifest of a verified pull: `<repo folder>/.sglang/<commit>.json`.

Written by hfpull.py only once every file of the revision matched the Hub's
size and hash; read by hfpull.py (to skip a complete revision) and by
cachestate.py (to report it). A manifest holds for as long as every listed
file's snapshot link points at its blob and the blob is the very inode that
was verified, unchanged: its inode number, size and change time (ctime), which
no one but the kernel sets (a member of the group can rewrite a blob and
`touch -d` its mtime back, never its ctime). So checking it costs one lstat
per file; a blob whose ctime moved is hashed again by the next pull. The repo
is read through directory descriptors (safefs), never following a link.
"""

import contextlib
import hashlib
import json
import os
import posixpath
import stat

from . import safefs

MANIFEST_DIR = ".sglang"
MAX_BYTES = 64 << 20  # far above any real repo's file list


def path(repo_dir, commit):
    return os.path.join(repo_dir, MANIFEST_DIR, commit + ".json")


def entry(relpath, blob, st, lfs, sha256):
    """One file of a manifest, its blob as verified (``st``, its lstat); ``sha256`` is the content's (for an LFS
    file, its blob name)."""
    return {"path": relpath, "blob": blob, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino,
            "ctime_ns": st.st_ctime_ns, "lfs": lfs, "sha256": sha256}


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
        trusted["size"], trusted["ino"], trusted["ctime_ns"]) == (st.st_size, st.st_ino, st.st_ctime_ns)


@contextlib.contextmanager
def repo_fd(repo):
    """A descriptor of the repo folder: ``repo`` itself when it is one, else the path opened with
    safefs.open_dir (closed at the end)."""
    if isinstance(repo, int):
        yield repo
        return
    fd = safefs.open_dir(repo)
    try:
        yield fd
    finally:
        os.close(fd)


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
    (sglang_infra/lockfile.py). None when a file has no sha256 (a manifest from before sha256 was recorded)."""
    lines = []
    for item in sorted(files, key=lambda e: e["path"]):
        if not item.get("sha256"):
            return None
        lines.append(f"{item['path']}\0{int(item['size'])}\0{item['sha256']}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def document(repo_id, commit, files, verified_at):
    return {"repo_id": repo_id, "commit": commit, "files": sorted(files, key=lambda e: e["path"]),
            "verified_at": verified_at}


def load(repo, commit):
    """The manifest of ``commit`` (``repo``: the repo folder's path or descriptor), or None when there is none
    or it is not one."""
    try:
        with repo_fd(repo) as top:
            mdir = safefs.open_subdir(top, MANIFEST_DIR)
            if mdir is None:
                return None
            try:
                text = safefs.read_regular(commit + ".json", MAX_BYTES, dir_fd=mdir)
            finally:
                os.close(mdir)
    except OSError:
        return None
    try:
        data = json.loads(text) if text is not None else None
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("commit") != commit or not isinstance(data.get("files"), list):
        return None
    return data


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


def trusted_blobs(repo):
    """blob name -> {size, ino, ctime_ns, sha256 (or None)} recorded by any earlier verified pull of this repo."""
    trust = {}
    try:
        with repo_fd(repo) as top:
            mdir = safefs.open_subdir(top, MANIFEST_DIR)
            names = safefs.listdir_fd(mdir) if mdir is not None else []
            if mdir is not None:
                os.close(mdir)
            for name in names:
                if not name.endswith(".json"):
                    continue
                for item in (load(top, name[:-5]) or {}).get("files", []):
                    have = recorded(item) if isinstance(item, dict) else None
                    if have is None or not isinstance(item.get("blob"), str):
                        continue
                    sha256 = item.get("sha256") or (item["blob"] if item.get("lfs") else None)
                    trust[item["blob"]] = {"size": have[0], "ino": have[1], "ctime_ns": have[2], "sha256": sha256}
    except OSError:
        pass
    return trust
