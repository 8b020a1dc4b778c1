"""Pruning of the model cache: every cached model revision not kept is deleted, with the
partial downloads of a repo that goes entirely, through huggingface_hub's own
delete_revisions; a repo whose pull is running (PULL_LOCK held) is skipped; the pull's
records (manifest.Records) of what is gone go too. hfpull.py's `prune` command.

huggingface_hub takes a snapshot link's target as the blob it deletes, wherever it
points: a member's link from snapshots/<rev>/f to a file elsewhere would have that file
deleted. Only regular files directly in the repo's own blobs/ are ever removed; any other
"blob" of the plan is named and left (own_blobs).
"""

from __future__ import annotations

import dataclasses
import os
import stat

from huggingface_hub import scan_cache_dir
from huggingface_hub.file_download import repo_folder_name

from ..formats.units import human
from . import manifest
from .pull import COMMIT_RE, say
from .pull_errors import EXIT_USAGE, PullError, hub_message
from .pull_locks import PULL_LOCK, FileLock


def parse_keep(values: list[str]) -> set[tuple[str, str]]:
    keep = set()
    for v in values:
        repo_id, sep, rev = v.rpartition("@")
        if not sep or repo_id.count("/") != 1 or not rev:
            raise PullError(f"--keep wants ORG/NAME@COMMIT, got {v!r}", EXIT_USAGE)
        keep.add((repo_id, rev))
    return keep


def _resolve_keep(cache_dir: str, keep: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """A kept branch name is resolved through the cache's own refs/ (no network)."""
    out = set()
    for repo_id, rev in keep:
        if not COMMIT_RE.fullmatch(rev):
            ref = os.path.join(cache_dir, repo_folder_name(repo_id=repo_id, repo_type="model"), "refs",
                               *rev.split("/"))
            try:
                with open(ref, encoding="utf-8") as f:
                    rev = f.read().strip()
            except OSError:
                pass
        out.add((repo_id, rev))
    return out


def prune(cache_dir: str, keep_args: list[str], dry_run: bool, records_dir: str) -> dict:
    cache_dir = os.path.abspath(cache_dir)
    records = manifest.Records(os.path.abspath(records_dir), manifest.owners())
    keep = parse_keep(keep_args)
    removed: list[dict] = []
    freed = 0
    verb = "would remove" if dry_run else ""
    if not os.path.isdir(cache_dir):
        say(f"prune: no cache at {cache_dir}")
        return {"removed": removed, "freed_bytes": 0, "dry_run": dry_run}
    keep = _resolve_keep(cache_dir, keep)
    info = scan_cache_dir(cache_dir)
    for w in info.warnings:
        say(f"prune: warning (left as is): {hub_message(w)}")
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model":
            continue  # datasets and spaces are not ours to manage
        going = sorted((r for r in repo.revisions if (repo.repo_id, r.commit_hash) not in keep),
                       key=lambda r: r.commit_hash)
        if not going:
            if not dry_run:
                records.drop_stale(repo.repo_path.name, {r.commit_hash for r in repo.revisions})
            continue
        lock = FileLock(os.path.join(str(repo.repo_path), PULL_LOCK))
        if os.path.exists(lock.path) and not lock.try_acquire():
            say(f"prune: skipping {repo.repo_id}: a pull is running")
            continue
        try:
            whole = len(going) == len(repo.revisions)
            # One repo at a time: a commit id shared by two repos (a fork) must not leave both.
            strategy = own_blobs(dataclasses.replace(info, repos=frozenset({repo})).delete_revisions(
                *(r.commit_hash for r in going)), str(repo.repo_path), going)
            for r in going:
                refs = ", ".join(sorted(r.refs)) or "none"
                say(f"prune: {verb + ' ' if verb else ''}{repo.repo_id}@{r.commit_hash[:12]} "
                    f"(refs: {refs}) {human(r.size_on_disk)}")
                removed.append({"repo_id": repo.repo_id, "commit": r.commit_hash, "size": r.size_on_disk})
            partials = []
            if whole:
                blobs = os.path.join(str(repo.repo_path), "blobs")
                for name in sorted(os.listdir(blobs)) if os.path.isdir(blobs) else []:
                    if name.endswith(".incomplete"):
                        partials.append(os.path.getsize(os.path.join(blobs, name)))
                if partials:
                    say(f"prune: {verb + ' ' if verb else ''}{repo.repo_id}: {len(partials)} partial download(s) "
                        f"{human(sum(partials))}")
            freed += strategy.expected_freed_size + sum(partials)
            if not dry_run:
                strategy.execute()
                records.drop_stale(repo.repo_path.name,
                                   {r.commit_hash for r in repo.revisions} - {g.commit_hash for g in going})
        finally:
            lock.release()
    if not dry_run:  # the records of a repo folder that is gone (pruned whole, or removed by hand)
        present = {r.repo_path.name for r in info.repos}
        for folder in records.folders():
            if folder not in present and not os.path.lexists(os.path.join(cache_dir, folder)):
                records.drop_stale(folder, set())
    say(f"prune: {'would free' if dry_run else 'freed'} {human(freed)}")
    return {"removed": removed, "freed_bytes": freed, "dry_run": dry_run}


def own_blobs(strategy, repo_dir: str, going):
    """``strategy`` without any blob that is not a regular file directly in ``repo_dir``/blobs (a snapshot link
    that pointed elsewhere, to a file of the account's or another repo's); each one left is named."""
    blobs_dir = os.path.join(os.path.abspath(repo_dir), "blobs")
    sizes = {str(f.blob_path): f.size_on_disk for r in going for f in r.files}
    kept, left = [], 0
    for path in sorted(strategy.blobs, key=str):
        here = os.path.abspath(str(path))
        try:
            regular = stat.S_ISREG(os.lstat(here).st_mode)
        except OSError:
            regular = False
        if os.path.dirname(here) == blobs_dir and regular:
            kept.append(path)
            continue
        left += sizes.get(str(path), 0)
        say(f"prune: leaving {here}: a snapshot link of {os.path.basename(repo_dir)} points there, and it is not "
            f"a blob in the repo's own blobs/")
    if left or len(kept) != len(strategy.blobs):
        strategy = dataclasses.replace(strategy, blobs=frozenset(kept),
                                       expected_freed_size=max(0, strategy.expected_freed_size - left))
    return strategy
