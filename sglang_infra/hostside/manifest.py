"""The manifest of a verified pull: `<repo folder>/.sglang/<commit>.json`.

Written by hfpull.py only once every file of the revision matched the Hub's
size and hash; read by hfpull.py (to skip a complete revision) and by
cachestate.py (to report it). A manifest holds for as long as every listed
file's snapshot link points at its blob and the blob keeps the recorded size
and mtime, so checking it costs one stat per file.
"""

import hashlib
import json
import os

from . import safefs

MANIFEST_DIR = ".sglang"
MAX_BYTES = 64 << 20  # far above any real repo's file list


def path(repo_dir, commit):
    return os.path.join(repo_dir, MANIFEST_DIR, commit + ".json")


def entry(relpath, blob, size, mtime_ns, lfs, sha256):
    """One file of a manifest; ``sha256`` is the content's (for an LFS file, its blob name)."""
    return {"path": relpath, "blob": blob, "size": size, "mtime_ns": mtime_ns, "lfs": lfs, "sha256": sha256}


def content_digest(files):
    """One sha256 over every file's path, size and content sha256: what a lock records for a revision
    (sglang_infra/lock.py). None when a file has no sha256 (a manifest from before sha256 was recorded)."""
    lines = []
    for item in sorted(files, key=lambda e: e["path"]):
        if not item.get("sha256"):
            return None
        lines.append(f"{item['path']}\0{int(item['size'])}\0{item['sha256']}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def document(repo_id, commit, files, verified_at):
    return {"repo_id": repo_id, "commit": commit, "files": sorted(files, key=lambda e: e["path"]),
            "verified_at": verified_at}


def load(repo_dir, commit):
    """The manifest of ``commit``, or None when there is none or it is not one."""
    text = safefs.read_regular(path(repo_dir, commit), MAX_BYTES)
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


def problems(repo_dir, data):
    """What no longer holds of a manifest on disk; [] when the revision is still complete and verified."""
    out = []
    for item in data["files"]:
        try:
            relpath, blob, size, mtime = item["path"], item["blob"], int(item["size"]), int(item["mtime_ns"])
        except (KeyError, TypeError, ValueError):
            out.append("bad manifest entry")
            continue
        if split_relpath(relpath) is None or split_relpath(blob) is None or "/" in blob:
            out.append("unsafe manifest entry")
            continue
        link, rel = link_target(repo_dir, data["commit"], relpath, blob)
        try:
            target = os.readlink(link)
        except OSError:
            out.append("missing link for " + relpath)
            continue
        if target != rel:
            out.append("wrong link for " + relpath)
            continue
        try:
            st = os.lstat(os.path.join(repo_dir, "blobs", blob))
        except OSError:
            out.append("missing blob for " + relpath)
            continue
        if not (st.st_mode & 0o170000 == 0o100000):
            out.append("blob of " + relpath + " is not a regular file")
        elif st.st_size != size:
            out.append("size changed for " + relpath)
        elif st.st_mtime_ns != mtime:
            out.append("mtime changed for " + relpath)
    return out


def size(data):
    """Bytes of the revision, each blob counted once."""
    blobs = {}
    for item in data["files"]:
        try:
            blobs[item["blob"]] = int(item["size"])
        except (KeyError, TypeError, ValueError):
            pass
    return sum(blobs.values())


def trusted_blobs(repo_dir):
    """blob name -> (size, mtime_ns, content sha256 or None) recorded by any earlier verified pull of this repo."""
    trust = {}
    mdir = os.path.join(repo_dir, MANIFEST_DIR)
    try:
        names = sorted(os.listdir(mdir))
    except OSError:
        return trust
    for name in names:
        if not name.endswith(".json"):
            continue
        data = load(repo_dir, name[:-5])
        for item in (data or {}).get("files", []):
            try:
                sha256 = item.get("sha256") or (item["blob"] if item.get("lfs") else None)
                trust[item["blob"]] = (int(item["size"]), int(item["mtime_ns"]), sha256)
            except (KeyError, TypeError, ValueError):
                continue
    return trust
