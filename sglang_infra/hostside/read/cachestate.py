"""Model repos of a huggingface_hub cache dir, read with stat only, never the Hub.
A revision is complete and verified only while its pull's record (manifest.py,
kept outside hf-cache where no member of the group can write) holds on disk;
without ``records``, or without a record to trust, it is reported unverified.

hf-cache is writable by the group's members, so nothing in it is followed:
the cache dir is opened one component at a time (safefs.open_dir), every
folder below it from its parent's descriptor with O_NOFOLLOW, every file read
with O_NOFOLLOW, and a snapshot's links are read (readlink), never stat'ed
through. The scan is bounded in entries and time; when it stops early,
``stopped_early`` says why (the deploy prints it) and what was not read is
reported as not verified.
"""
import os
import posixpath
import stat

from .. import safefs
from ..pull import manifest

MAX_ENTRIES = 500_000   # directory entries, manifest files and links read in one scan
MAX_SECONDS = 60


def _refs(repo_fd, budget):
    out = {}
    refs = safefs.open_subdir(repo_fd, "refs")
    if refs is None:
        return out
    try:
        for path, st in safefs.walk(refs, "", budget):
            if not stat.S_ISREG(st.st_mode):
                continue
            parent, name = _parent(refs, path)
            if parent is None:
                continue
            try:
                text = safefs.read_regular(name, 256, dir_fd=parent)
            finally:
                if parent != refs:
                    os.close(parent)
            if text is not None:
                out[path.lstrip("/")] = text.decode(errors="replace").strip()
    finally:
        os.close(refs)
    return out


def _parent(top, path):
    """(descriptor of the directory holding ``path``, relative to ``top``, opened without following; the name)."""
    parts = path.strip("/").split("/")
    fd = top
    for part in parts[:-1]:
        nxt = safefs.open_subdir(fd, part)
        if fd != top:
            os.close(fd)
        if nxt is None:
            return None, parts[-1]
        fd = nxt
    return fd, parts[-1]


def _verified(repo_fd, data, budget):
    found = manifest.problems(repo_fd, data, budget)
    try:
        content = manifest.content_digest(data["files"])
    except (KeyError, TypeError, ValueError):
        content = None
    blobs = sorted({item["blob"] for item in data["files"]
                    if isinstance(item, dict) and isinstance(item.get("blob"), str)})
    return {"complete": not found, "verified": not found, "files": len(data["files"]),
            "size": manifest.size(data), "problems": found, "content": content, "blobs": blobs}


def _verified_blobs(repo_fd, part, budget):
    """blob -> content sha256 of each file a record of a revision verified in part (manifest.PARTIAL) lists whose
    snapshot link still names its blob and whose blob is still the very inode the pull verified, unchanged (the
    same check as a whole record's, file by file): what the peer door may list of a revision pulled in part."""
    out = {}
    for item in part["files"]:
        if isinstance(item, dict) and isinstance(item.get("blob"), str) and isinstance(item.get("sha256"), str) \
                and not manifest.problems(repo_fd, {"commit": part["commit"], "files": [item]}, budget):
            out[item["blob"]] = item["sha256"]
    return out


def _check_unverified(repo_fd, commit, budget):
    """A snapshot without a manifest: its files counted, each link's blob looked up in the repo's own blobs/
    (lstat, never through the link); a link that leads anywhere else is a problem."""
    problems, files, seen = [], 0, {}
    snap = safefs.open_subdir(repo_fd, "snapshots")
    snap_fd = safefs.open_subdir(snap, commit) if snap is not None else None
    blobs = safefs.open_subdir(repo_fd, "blobs")
    try:
        for path, st in (safefs.walk(snap_fd, "", budget) if snap_fd is not None else ()):
            if stat.S_ISDIR(st.st_mode):
                continue
            files += 1
            relpath = path.lstrip("/")
            found = st if stat.S_ISREG(st.st_mode) else None
            if stat.S_ISLNK(st.st_mode):
                found = _blob_of_link(snap_fd, relpath, blobs, commit)
            if found is None:
                problems.append("missing blob for " + relpath)
            else:
                seen[(found.st_dev, found.st_ino)] = found.st_size
    finally:
        for fd in (snap, snap_fd, blobs):
            if fd is not None:
                os.close(fd)
    return {"complete": False, "verified": False, "files": files, "size": sum(seen.values()),
            "problems": sorted(problems)}


def _blob_of_link(snap_fd, relpath, blobs, commit):
    """The lstat of the blob in the repo's blobs/ that the snapshot link names; None when it names anything
    else (outside the repo, another link, a missing file)."""
    parent, name = _parent(snap_fd, relpath)
    if parent is None:
        return None
    try:
        target = os.readlink(name, dir_fd=parent)
    except OSError:
        return None
    finally:
        if parent != snap_fd:
            os.close(parent)
    where = posixpath.normpath(posixpath.join("snapshots", commit, posixpath.dirname(relpath), target))
    head, blob = posixpath.split(where)
    if head != "blobs" or blobs is None or target.startswith("/"):
        return None
    found = safefs.lstat_in(blobs, blob)
    return found if found is not None and stat.S_ISREG(found.st_mode) else None


def _names(dir_fd, budget):
    names = []
    if dir_fd is None:
        return names
    try:
        with os.scandir(dir_fd) as entries:
            for entry in entries:
                if not budget.spend():
                    break
                names.append(entry.name)
    except OSError:
        pass
    return sorted(names)


def _is_dir(dir_fd, name):
    st = safefs.lstat_in(dir_fd, name) if dir_fd is not None else None
    return st is not None and stat.S_ISDIR(st.st_mode)


def scan(cache_dir, records=None, budget=None):
    """The model repos of ``cache_dir``; ``records``: the pull's (manifest.Records), None for none to trust."""
    budget = budget or safefs.Budget(MAX_ENTRIES, MAX_SECONDS)
    repos = {}
    try:
        top = safefs.open_dir(cache_dir)
    except safefs.Refused as error:
        return {"repos": repos, "stopped_early": str(error)}
    except OSError:
        return {"repos": repos, "stopped_early": None}
    try:
        for folder in _names(top, budget):
            if not folder.startswith("models--") or not _is_dir(top, folder):
                continue
            repo_fd = safefs.open_subdir(top, folder)
            if repo_fd is None:
                continue
            try:
                repos[folder[len("models--"):].replace("--", "/")] = _repo(repo_fd, folder, records, budget)
            finally:
                os.close(repo_fd)
    finally:
        os.close(top)
    return {"repos": repos, "stopped_early": budget.stopped and f"the scan of {cache_dir} stopped early: "
                                                                f"{budget.stopped}; the rest counts as unverified"}


def _repo(repo_fd, folder, records, budget):
    with records.folder(folder) if records is not None else manifest.Held(None) as rdir:
        return _repo_with(repo_fd, folder, records, rdir, budget)


def _repo_with(repo_fd, folder, records, rdir, budget):
    """_repo() with the repo's records folder open as ``rdir`` (None: no record to trust)."""
    revisions = {}
    snaps = safefs.open_subdir(repo_fd, "snapshots")
    blobs = safefs.open_subdir(repo_fd, "blobs")
    try:
        commits = set(c for c in _names(snaps, budget) if _is_dir(snaps, c))
        if rdir is not None:
            commits |= set(records.commits(rdir, _names(rdir, budget)))
        for commit in sorted(commits):
            if not budget.spend():
                break
            data = records.load_in(rdir, commit) if rdir is not None else None
            if data is not None:
                revisions[commit] = _verified(repo_fd, data, budget)
            elif _is_dir(snaps, commit):
                revisions[commit] = _check_unverified(repo_fd, commit, budget)
                part = records.load_in(rdir, commit, part=True) if rdir is not None else None
                if part is not None:
                    revisions[commit]["verified_blobs"] = _verified_blobs(repo_fd, part, budget)
        partials = []
        for name in _names(blobs, budget):
            if name.endswith(".incomplete"):
                st = safefs.lstat_in(blobs, name)
                if st is not None:
                    partials.append({"name": name, "size": st.st_size})
    finally:
        for fd in (snaps, blobs):
            if fd is not None:
                os.close(fd)
    return {"folder": folder, "refs": _refs(repo_fd, budget), "revisions": revisions, "partials": partials}
