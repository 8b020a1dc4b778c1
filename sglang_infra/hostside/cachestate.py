"""Model repos of a huggingface_hub cache dir, read with stat only, never the Hub.
A revision is complete and verified only while its pull manifest (manifest.py)
holds on disk."""
import os

from . import manifest, safefs


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _refs(refs_dir):
    out = {}
    for root, _dirs, files in os.walk(refs_dir):
        for name in files:
            path = os.path.join(root, name)
            text = safefs.read_regular(path, 256)
            if text is not None:
                out[os.path.relpath(path, refs_dir).replace(os.sep, "/")] = text.decode(errors="replace").strip()
    return out


def _verified(repo_dir, data):
    found = manifest.problems(repo_dir, data)
    try:
        content = manifest.content_digest(data["files"])
    except (KeyError, TypeError, ValueError):
        content = None
    return {"complete": not found, "verified": not found, "files": len(data["files"]),
            "size": manifest.size(data), "problems": found, "content": content}


def _check_unverified(snap_dir):
    problems, files, seen = [], 0, {}
    for root, _dirs, names in os.walk(snap_dir):
        for name in names:
            path = os.path.join(root, name)
            files += 1
            try:
                st = os.stat(path)
                seen[(st.st_dev, st.st_ino)] = st.st_size
            except OSError:
                problems.append("missing blob for " + os.path.relpath(path, snap_dir).replace(os.sep, "/"))
    return {"complete": False, "verified": False, "files": files, "size": sum(seen.values()),
            "problems": sorted(problems)}


def scan(cache_dir):
    repos = {}
    for folder in _listdir(cache_dir):
        repo_dir = os.path.join(cache_dir, folder)
        if not folder.startswith("models--") or not os.path.isdir(repo_dir):
            continue
        revisions = {}
        snaps = os.path.join(repo_dir, "snapshots")
        commits = set(c for c in _listdir(snaps) if os.path.isdir(os.path.join(snaps, c)))
        commits |= set(n[:-5] for n in _listdir(os.path.join(repo_dir, manifest.MANIFEST_DIR)) if n.endswith(".json"))
        for commit in sorted(commits):
            data = manifest.load(repo_dir, commit)
            if data is not None:
                revisions[commit] = _verified(repo_dir, data)
            elif os.path.isdir(os.path.join(snaps, commit)):
                revisions[commit] = _check_unverified(os.path.join(snaps, commit))
        partials = []
        for name in _listdir(os.path.join(repo_dir, "blobs")):
            if name.endswith(".incomplete"):
                try:
                    partials.append({"name": name, "size": os.lstat(os.path.join(repo_dir, "blobs", name)).st_size})
                except OSError:
                    pass
        repos[folder[len("models--"):].replace("--", "/")] = {
            "folder": folder, "refs": _refs(os.path.join(repo_dir, "refs")),
            "revisions": revisions, "partials": partials}
    return {"repos": repos}
