"""Model repos of a huggingface_hub cache dir as JSON; stdlib only (python3 >= 3.9), stat only.
A revision is complete/verified only when hfpull's `<repo>/.sglang/<commit>.json` exists and
every listed file's snapshot link points at `blobs/<blob>` with the recorded size and mtime_ns."""
import json
import os
import sys


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
            try:
                with open(path) as f:
                    out[os.path.relpath(path, refs_dir).replace(os.sep, "/")] = f.read().strip()
            except OSError:
                pass
    return out


def _manifest(repo_dir, commit):
    try:
        with open(os.path.join(repo_dir, ".sglang", commit + ".json")) as f:
            data = json.load(f)
        return data if data.get("commit") == commit and isinstance(data.get("files"), list) else None
    except (OSError, ValueError, AttributeError):
        return None


def _check_manifest(repo_dir, commit, manifest):
    problems, sizes = [], {}
    blobs = os.path.normpath(os.path.join(repo_dir, "blobs"))
    for entry in manifest["files"]:
        try:
            path, blob, want, mtime = entry["path"], entry["blob"], int(entry["size"]), int(entry["mtime_ns"])
        except (KeyError, TypeError, ValueError):
            problems.append("bad manifest entry")
            continue
        sizes[blob] = want
        link = os.path.join(repo_dir, "snapshots", commit, *path.split("/"))
        try:
            target = os.path.normpath(os.path.join(os.path.dirname(link), os.readlink(link)))
        except OSError:
            problems.append("missing link for " + path)
            continue
        if target != os.path.join(blobs, blob):
            problems.append("wrong link for " + path)
            continue
        try:
            st = os.stat(target)
        except OSError:
            problems.append("missing blob for " + path)
            continue
        if st.st_size != want or st.st_mtime_ns != mtime:
            problems.append(("size" if st.st_size != want else "mtime") + " changed for " + path)
    return {"complete": not problems, "verified": not problems, "files": len(manifest["files"]),
            "size": sum(sizes.values()), "problems": problems}


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
        commits |= set(n[:-5] for n in _listdir(os.path.join(repo_dir, ".sglang")) if n.endswith(".json"))
        for commit in sorted(commits):
            manifest = _manifest(repo_dir, commit)
            if manifest is not None:
                revisions[commit] = _check_manifest(repo_dir, commit, manifest)
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


def main():
    print(json.dumps(scan(sys.argv[1]), sort_keys=True))


if __name__ == "__main__":
    main()
