"""The pull itself: one revision of a model repo listed, fetched, verified and linked into
huggingface_hub's cache layout (Puller), as hfpull.py's `pull` command runs it; see
hfpull.py for what it adds to `hf download`, transfer.py for how a file's bytes come
over HTTP (ranged GETs, retries), ranges.py for how a large file is cut into byte
ranges, manifest.py for what a verified revision records.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import os
import re
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from huggingface_hub.file_download import repo_folder_name

from .. import safefs
from ..formats.units import human
from ..printable import printable
from ..safefs import (
    create_if_absent,
    create_new,
    fd_path,
    open_below,
    open_dir,
    read_regular,
    rename_new,
    unlink_if_present,
)
from . import hublimits, manifest, peers, ranges, transfer
from .pull_errors import EXIT_LOCKED, EXIT_USAGE, PullError, VerifyError
from .pull_locks import PULL_LOCK, FileLock, held_by
from .transfer import LIBRARY_NAME, Stopped, gather

if TYPE_CHECKING:
    from huggingface_hub import HfApi

COMMIT_RE = re.compile(r"[0-9a-f]{40}")
BLOB_NAME_RE = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # a blob's name: git's sha1 (a regular file), sha256 (LFS)

PROGRESS_EVERY = 2.0
CHUNK = 1024 * 1024
DEFAULT_WORKERS = 8  # files and connections at once, as huggingface_hub's snapshot_download
MAX_WORKERS = 64
MAX_TREE_ENTRIES = hublimits.MAX_TREE_ENTRIES
STALE_PARTIAL_AGE = 24 * 3600
MiB = 1024 * 1024
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)  # a write refused for want of space: the disk's, or the account's quota


def mib(n: float) -> str:
    return f"{n / MiB:.1f}"


_SAY = threading.Lock()


def say(line: str) -> None:
    """One line of progress; what came from the Hub or the cache (file and folder names) with control
    characters escaped."""
    with _SAY:  # whole lines, whichever worker speaks
        print(printable(line), flush=True)


def hash_file(path: str, lfs: bool) -> str:  # sha256 of the content for LFS files; git's blob sha1 for others
    return hashes(path, lfs)[0]


def hashes(path: str, lfs: bool) -> tuple[str, str]:
    """(the blob name's hash, the content's sha256), in one read: for an LFS file both are its sha256; for a
    regular file the first is git's blob sha1."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        return hashes_fd(fd, lfs)
    finally:
        os.close(fd)


def hashes_fd(fd: int, lfs: bool) -> tuple[str, str]:
    """hashes() of the file open as ``fd``, read from its start."""
    size = os.fstat(fd).st_size
    content = hashlib.sha256()
    git = None if lfs else hashlib.sha1(b"blob %d\0" % size)
    offset = 0
    while True:
        chunk = os.pread(fd, CHUNK, offset)
        if not chunk:
            break
        offset += len(chunk)
        content.update(chunk)
        if git is not None:
            git.update(chunk)
    return (git or content).hexdigest(), content.hexdigest()


def safe_relpath(path: str) -> str:
    """Refuse repo paths that would leave the snapshot folder."""
    parts = manifest.split_relpath(path)
    if parts is None:
        raise VerifyError(f"refusing unsafe path in repo tree: {path!r}")
    return os.path.join(*parts)


@dataclasses.dataclass
class Blob:
    name: str  # etag: sha256 (LFS) or git blob sha1 (regular)
    size: int
    lfs: bool
    paths: list[str]
    locked: str | None = None  # the content sha256 the lock (sglang.lock) records for it
    sha256: str | None = None  # the content sha256, once verified
    vouched: tuple[int, int, int] | None = None  # (size, inode, ctime_ns) of the blob as verified: what its record says


@dataclasses.dataclass
class Stats:
    files: int = 0
    files_fetched: int = 0
    bytes_total: int = 0
    bytes_missing: int = 0
    bytes_fetched: int = 0
    resumed_bytes: int = 0
    orphans_reclaimed: int = 0
    orphan_bytes: int = 0
    changed: bool = False


class Progress:
    """The pull's progress, one line every PROGRESS_EVERY seconds whichever worker moves it:
    files verified, bytes on disk across every file, this run's rate and the files in flight."""

    def __init__(self, label: str, nfiles: int, total: int):
        self.label, self.nfiles, self.total = label, nfiles, total
        self.files = 0  # files verified (found present or fetched)
        self.have = 0  # bytes on disk: verified files and what partials hold
        self.fetched = 0  # bytes received by this run
        self.active = 0  # files being fetched now
        self.started = self.last = time.monotonic()
        self.lock = threading.Lock()

    def line(self, what: str) -> None:
        say(f"pull {self.label}: {what}")

    def file_line(self, index: int, path: str, what: str) -> None:
        self.line(f"file {index}/{self.nfiles} {path} {what}")

    def update(self, files: int = 0, have: int = 0, fetched: int = 0, active: int = 0, force: bool = False) -> None:
        with self.lock:
            self.files += files
            self.have += have
            self.fetched += fetched
            self.active += active
            now = time.monotonic()
            if not force and now - self.last < PROGRESS_EVERY:
                return
            self.last = now
            rate = self.fetched / max(now - self.started, 1e-3)
            line = (f"pull {self.label}: {self.files}/{self.nfiles} files, {mib(self.have)}/{mib(self.total)} MiB, "
                    f"{mib(rate)} MiB/s, {self.active} downloading")
        say(line)


class Puller:
    def __init__(self, cache_dir: str, repo_id: str, revision: str, endpoint: str | None,
                 token: str | None, lock_wait: float, workers: int = DEFAULT_WORKERS, *, records_dir: str,
                 min_free: int = 0):
        self.cache_dir = os.path.abspath(cache_dir)
        self.repo_id = repo_id
        self.revision = revision
        self.endpoint = endpoint.rstrip("/") if endpoint else None
        self.token = token
        self.lock_wait = lock_wait
        self.workers = workers
        self.min_free = min_free  # bytes the pull leaves free on the cache's filesystem (sglang_pull_min_free_mib)
        self.folder = repo_folder_name(repo_id=repo_id, repo_type="model")
        self.repo_dir = os.path.join(self.cache_dir, self.folder)
        self.blobs_dir = os.path.join(self.repo_dir, "blobs")
        self.locks_dir = os.path.join(self.cache_dir, ".locks", self.folder)
        self.records = manifest.Records(os.path.abspath(records_dir), manifest.owners())  # outside hf-cache
        self.stats = Stats()
        self.stats_lock = threading.Lock()
        self.stop = threading.Event()  # set by the first failure: every worker ends at its next chunk
        self.commit: str | None = None
        self.progress: Progress | None = None
        self.expect: dict | None = None  # the lock's files ({path: {"size", "sha256", ...}}), see expect_lock()
        self.expect_digest: str | None = None
        self.transfer: transfer.Transfer | peers.PeerTransfer | None = None  # the revision's HTTP, once known
        self.fleet: peers.Fleet | None = None  # the peers that may hold this model's blobs (peers.py), or None
        self.share: set[str] | None = None  # a swarm's round 1 (peering.split): the paths this host pulls, or None
        # Whether the repo is gated: the lock's word, else the Hub's info; None while unsaid (then taken as gated).
        self.gated: bool | str | None = None
        self.access: bool | BaseException | None = None  # the Hub's answer to this pull's access check, once asked
        self.access_lock = threading.Lock()
        self.held: dict[str, int] = {}  # while run() runs: the cache's directories open (_open_cache), by role
        self.names: dict[str, str] = {}  # safefs.fd_path of each of them -> its path, for what the pull says

    def _count(self, **amounts: int) -> None:
        with self.stats_lock:
            for name, n in amounts.items():
                setattr(self.stats, name, getattr(self.stats, name) + n)

    # -- auth: the token only ever lives in request headers
    def _token_arg(self):
        return transfer.token_arg(self.token)

    def redact(self, text: str) -> str:
        """``text`` without the token, each directory the pull holds open named by its path."""
        text = transfer.redact(text, self.token)
        return re.sub(r"/proc/self/fd/[0-9]+(?![0-9])", lambda m: self.names.get(m.group(0), m.group(0)), text)

    def _open_cache(self) -> None:
        """hub, models--X with its blobs and snapshots, and .locks/models--X opened one directory at a time, each
        made when missing, never through a link (safefs: a member of the group may plant one at any level, e.g.
        blobs -> the account's docker/); then the pull finds each through its descriptor (safefs.fd_path), not its
        path's names again."""
        found, missing = self.cache_dir, list[str]()
        while True:  # the deepest folder of the path there is (safefs.open_dir), then the rest made below it
            try:
                top = open_dir(found)
                break
            except FileNotFoundError:
                found, name = os.path.split(found)
                if not name:
                    raise
                missing.insert(0, name)
        try:
            self.held["hub"] = open_below(top, missing, found.rstrip("/"))
        finally:
            os.close(top)
        shown = {"hub": self.cache_dir}
        for role, parent, name in (("repo", "hub", self.folder), ("blobs", "repo", "blobs"),
                                   ("snapshots", "repo", "snapshots"), ("locks_top", "hub", ".locks"),
                                   ("locks", "locks_top", self.folder)):
            self.held[role] = open_below(self.held[parent], [name], shown[parent])
            shown[role] = f"{shown[parent]}/{name}"
        self.names = {fd_path(fd): shown[role] for role, fd in self.held.items()}
        self.cache_dir, self.repo_dir, self.blobs_dir, self.locks_dir = (
            fd_path(self.held[role]) for role in ("hub", "repo", "blobs", "locks"))

    def _close_cache(self) -> None:
        for fd in self.held.values():
            os.close(fd)
        self.held = {}
        self.cache_dir, self.repo_dir, self.blobs_dir, self.locks_dir = (
            self.names.get(d, d) for d in (self.cache_dir, self.repo_dir, self.blobs_dir, self.locks_dir))

    # -- entry point
    def run(self) -> dict:
        try:
            self._open_cache()
            return self._run_in_cache()
        except OSError as error:
            if error.errno not in DISK_FULL or "blobs" not in self.held:
                raise
            raise self._disk_full(error) from None
        finally:
            self._close_cache()

    def _free(self) -> int:
        """Bytes this account may still write on the filesystem of the cache's blobs (statvfs: what is free to a
        user, the blocks reserved for root left out)."""
        st = os.fstatvfs(self.held["blobs"])
        return st.f_bavail * st.f_frsize

    def _disk_full(self, error: OSError) -> PullError:
        """The disk filled while the pull wrote (another writer, or a margin too small): named as such, never as
        a network error; what was fetched stays in partial files, never linked into a snapshot."""
        where = self.redact(self.blobs_dir)
        revision = f"{self.repo_id}@{(self.commit or self.revision)[:12]}"
        return PullError(f"the disk holding {where} is full ({human(self._free())} free now; {error.strerror}): the "
                         f"pull of {revision} stopped there. What it fetched stays in partial files "
                         f"(*.incomplete), never linked into the snapshot; free space on that disk (df -h "
                         f"{where}), then run again: the pull resumes them and verifies every file")

    def still_to_write(self, blob: Blob) -> int:
        """Bytes of ``blob`` the cache does not hold yet: none for a blob of its size there (verified later), else
        its size less what its partial holds on disk (its allocated blocks: a partial fetched as ranges is as long
        as the file from the start)."""
        for name, partial in ((blob.name, False), (f"{blob.name}.incomplete", True)):
            st = safefs.lstat_in(self.held["blobs"], name)
            if st is None or not stat.S_ISREG(st.st_mode):
                continue
            if not partial and st.st_size == blob.size:
                return 0
            if partial:
                return blob.size - min(st.st_blocks * 512, st.st_size, blob.size)
        return blob.size

    def _check_room(self, blobs: list[Blob], label: str) -> None:
        """Refuse the revision before a byte of it is fetched when what the cache lacks of it, plus the margin the
        operator keeps free, is more than the disk has free: naming the model, the bytes and the fix."""
        missing = sum(self.still_to_write(blob) for blob in blobs)
        free = self._free()
        if missing and missing + self.min_free > free:
            where = self.redact(self.blobs_dir)
            raise PullError(
                f"not enough disk for {label}: it needs {human(missing + self.min_free)} on the filesystem of "
                f"{where} ({missing} bytes of its files not in the cache yet, {human(missing)}, + "
                f"{human(self.min_free)} kept free, sglang_pull_min_free_mib), which has {free} bytes free "
                f"({human(free)}). Nothing was fetched; free space there, move hf-cache to a larger disk or, on "
                "purpose, lower sglang_pull_min_free_mib, then run again")

    def _run_in_cache(self) -> dict:
        try:  # huggingface_hub's CACHEDIR.TAG, never written through a member's link there, as the library would
            from huggingface_hub._local_folder import CACHEDIR_TAG_CONTENT
            create_if_absent(os.path.join(self.cache_dir, "CACHEDIR.TAG"), CACHEDIR_TAG_CONTENT.encode())
        except (ImportError, OSError):
            pass
        lock = FileLock(os.path.join(self.repo_dir, PULL_LOCK))
        shown = self.redact(lock.path)
        if not lock.acquire(self.lock_wait, on_wait=lambda: say(
                f"pull {self.repo_id}: another pull holds {shown}; waiting up to {self.lock_wait:.0f} s")):
            raise PullError(f"another pull of {self.repo_id} holds {shown}"
                            f"{held_by(lock.path)}; waited {self.lock_wait:.0f} s (sglang_pull_lock_wait). "
                            "Let it finish or stop it, then run again", EXIT_LOCKED)
        try:
            return self._run_locked()
        except BaseException:
            self._drop_if_empty()
            raise
        finally:
            lock.release()

    def _drop_if_empty(self) -> None:
        """A failed first pull (unknown repo, gated, ...) leaves no empty repo folder behind."""
        repo, hub, locks = self.held["repo"], self.held["hub"], self.held["locks_top"]
        try:
            if os.listdir(self.blobs_dir) or os.path.isdir(os.path.join(self.repo_dir, "refs")):
                return
            if os.listdir(os.path.join(self.repo_dir, "snapshots")):
                return
            for d in ("snapshots", "blobs"):
                os.rmdir(d, dir_fd=repo)
            os.unlink(PULL_LOCK, dir_fd=repo)
            os.rmdir(self.folder, dir_fd=hub)
            if not os.listdir(self.locks_dir):
                os.rmdir(self.folder, dir_fd=locks)
        except OSError:
            pass

    def _result(self) -> dict:
        s = self.stats
        return {
            "repo_id": self.repo_id,
            "commit": self.commit,
            "files": s.files,
            "files_fetched": s.files_fetched,
            "bytes_total": s.bytes_total,
            "bytes_missing": s.bytes_missing,
            "bytes_fetched": s.bytes_fetched,
            "bytes_refetched": max(0, s.bytes_fetched - s.bytes_missing),
            "resumed_bytes": s.resumed_bytes,
            "orphans_reclaimed": s.orphans_reclaimed,
            "orphan_bytes": s.orphan_bytes,
            "changed": s.changed,
            "sources": dict(getattr(self.transfer, "sources", {"hub": s.bytes_fetched} if s.bytes_fetched else {})),
        }

    def expect_lock(self, locked: dict) -> None:
        """Verify every file against a lock's record ({"commit", "files": [{"path", "size", "sha256",
        "git_blob"?}]}), not only against what the endpoint says: a mirror cannot swap content."""
        if locked.get("commit") != self.revision:
            raise PullError(f"the lock records commit {locked.get('commit')}, the pull asks for {self.revision}",
                            EXIT_USAGE)
        self.expect = {f["path"]: f for f in locked["files"]}
        self.share = set(locked["share"]) if locked.get("share") is not None else None
        self.gated = locked.get("gated")
        self.expect_digest = manifest.content_digest(locked["files"])

    def _fast_path(self, commit: str) -> bool:
        found = self.records.load(self.folder, commit)
        if found is None or manifest.problems(self.repo_dir, found):
            return False
        if self.expect is not None and manifest.content_digest(found["files"]) != self.expect_digest:
            return False  # verified against the endpoint, but not (yet) against the lock
        self.commit = commit
        self.stats.files = len(found["files"])
        self.stats.bytes_total = sum(int(e["size"]) for e in found["files"])
        say(f"pull {self.repo_id}@{commit[:12]}: {self.stats.files} files already verified "
            f"({human(self.stats.bytes_total)}), nothing to fetch")
        return True

    def _run_locked(self) -> dict:
        # A pinned commit whose manifest still matches the disk needs no request at all.
        if COMMIT_RE.fullmatch(self.revision) and self._fast_path(self.revision):
            return self._result()

        # With the lock, its files are the revision's listing: the Hub is asked for no info and no listing.
        listed = self._blobs_from_lock() if self.expect is not None else None
        if listed is not None:
            self.commit = self.revision  # the lock's commit (expect_lock: the one asked)
            self._pull_blobs(listed, self.commit)
            self._write_manifest(listed, self.commit)
            return self._result()

        api = self._api()
        info = transfer.model_info(api, self.repo_id, self.revision)
        if getattr(info, "gated", None) or self.gated is None:
            self.gated = getattr(info, "gated", None)
        commit = info.sha
        if not commit or not COMMIT_RE.fullmatch(commit):
            raise PullError(f"the Hub returned no commit id for revision {self.revision}")
        if COMMIT_RE.fullmatch(self.revision) and commit != self.revision:
            raise PullError(f"the Hub resolved commit {self.revision} to {commit}")
        self.commit = commit
        if commit != self.revision and self._fast_path(commit):
            self._write_ref(commit)
            return self._result()

        blobs = self._list_tree(api, commit)
        self._pull_blobs(blobs, commit)
        self._write_manifest(blobs, commit)
        if commit != self.revision:
            self._write_ref(commit)
        return self._result()

    def _api(self) -> HfApi:
        """The library's API client, imported here: its module (huggingface_hub.hf_api) is a large part of the pull's
        start (0.06-0.18 s of a 2-core machine's time), and a pull with the lock's listing, or of a revision
        its record vouches for, never asks the API (test_hfpull: a locked pull never imports it)."""
        from huggingface_hub import HfApi

        return HfApi(endpoint=self.endpoint, token=self._token_arg(), library_name=LIBRARY_NAME)

    def _blobs_from_lock(self) -> list[Blob] | None:
        """The revision's blobs as the lock lists them (an LFS file named by its sha256, a regular one by its git
        blob), each with the lock's sha256: what the Hub's listing would give, asked of no one. None when a regular
        file has no git blob in the lock (a lock written before it kept one): the Hub's listing then."""
        assert self.expect is not None  # called only with a lock
        by_name: dict[str, Blob] = {}
        for path, want in sorted(self.expect.items()):
            safe_relpath(path)
            lfs = want.get("sha256_from") == "lfs"
            name = want["sha256"] if lfs else want.get("git_blob")
            if not isinstance(name, str) or not BLOB_NAME_RE.fullmatch(name):
                return None
            blob = by_name.get(name)
            if blob is None:
                by_name[name] = Blob(name, int(want["size"]), lfs, [path], locked=want["sha256"])
            elif (blob.size, blob.locked) != (int(want["size"]), want["sha256"]):
                raise VerifyError(f"{path}: the lock records blob {name} with two sizes or contents")
            else:
                blob.paths.append(path)
        return self._taken(sorted(by_name.values(), key=lambda b: b.paths[0]))

    def _taken(self, blobs: list[Blob]) -> list[Blob]:
        """Of the revision's ``blobs``, those this pull fetches (a swarm's round 1: this host's share), counted."""
        if self.share is not None:  # this host's share alone; _write_manifest records it as verified in part
            blobs = [b for b in blobs if self.share & set(b.paths)]
        self.stats.files = sum(len(b.paths) for b in blobs)
        self.stats.bytes_total = sum(b.size * len(b.paths) for b in blobs)
        return blobs

    def _may_read(self) -> None:
        """Before a byte of a gated repo (or one nobody said is not) comes from a peer, the Hub says this host's
        own token may read its files (an access check, one per pull; GatedRepoError when it may not): a door
        serves whoever holds the site key, so the Hub's gate is asked here. From the Hub alone, the Hub's file
        endpoint answers for itself."""
        if self.gated is False or not (self.fleet and self.fleet.peers):
            return
        with self.access_lock:
            if self.access is None:
                try:
                    transfer.access_check(self._api(), self.repo_id)
                except BaseException as error:
                    self.access = error
                    raise
                self.access = True
                say(f"pull {self.repo_id}: the Hub accepts this host's token for the repo's files")
            elif self.access is not True:
                raise Stopped()  # the check failed in another worker: its error is the one reported

    def _list_tree(self, api: HfApi, commit: str) -> list[Blob]:
        from huggingface_hub.hf_api import RepoFile  # loaded with the api (_api)

        by_name: dict[str, Blob] = {}
        count = 0
        for entry in transfer.tree(api, self.repo_id, commit, self._token_arg()):
            count += 1
            if count > MAX_TREE_ENTRIES:
                raise PullError(f"repo tree has more than {MAX_TREE_ENTRIES} entries")
            if not isinstance(entry, RepoFile):
                continue
            safe_relpath(entry.path)
            if entry.lfs is not None:
                name, size, lfs = entry.lfs.sha256, int(entry.lfs.size), True
            else:
                name, size, lfs = entry.blob_id, int(entry.size), False
            if not name or not BLOB_NAME_RE.fullmatch(name):
                raise VerifyError(f"the Hub gave no usable hash for {entry.path}")
            blob = by_name.get(name)
            if blob is None:
                by_name[name] = Blob(name, size, lfs, [entry.path])
            elif blob.size != size:
                raise VerifyError(f"the Hub lists blob {name} with two sizes")
            else:
                blob.paths.append(entry.path)
        blobs = sorted(by_name.values(), key=lambda b: b.paths[0])
        for b in blobs:
            b.paths.sort()
        if self.expect is not None:
            self._against_lock(blobs)
        return self._taken(blobs)

    def _against_lock(self, blobs: list[Blob]) -> None:
        """The endpoint's listing must be the lock's, file by file, before a byte is fetched."""
        assert self.expect is not None  # called only with a lock
        listed = {p: b for b in blobs for p in b.paths}
        extra, missing = sorted(set(listed) - set(self.expect)), sorted(set(self.expect) - set(listed))
        if extra or missing:
            raise VerifyError("the endpoint's file list differs from the lock's: "
                              + "; ".join(filter(None, (f"not in the lock: {', '.join(extra[:5])}" if extra else None,
                                                        f"missing: {', '.join(missing[:5])}" if missing else None))))
        for path in sorted(listed):
            blob, want = listed[path], self.expect[path]
            if blob.size != int(want["size"]):
                raise VerifyError(f"{path}: the endpoint lists {blob.size} bytes, the lock {want['size']}")
            if blob.lfs and blob.name != want["sha256"]:
                raise VerifyError(f"{path}: the endpoint lists sha256 {blob.name}, the lock {want['sha256']}")
            if not blob.lfs and want.get("git_blob") and blob.name != want["git_blob"]:
                raise VerifyError(f"{path}: the endpoint lists git blob {blob.name}, the lock {want['git_blob']}")
            if blob.locked not in (None, want["sha256"]):
                raise VerifyError(f"{path}: the lock records two contents for one blob {blob.name}")
            blob.locked = want["sha256"]

    def _verify(self, blob: Blob, fd: int) -> str | None:
        """Why the file open as ``fd`` is not the blob (its size, the hash it is named by: sha256 for an LFS
        file, git-sha1 for a regular one, and the lock's sha256), or None; then its content sha256 is recorded
        on the blob. Called once per file, after its bytes are complete, before it is linked into the
        snapshot. Through the descriptor: what is verified is what the caller then changes (fchmod)."""
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file"
        if st.st_size != blob.size:
            return f"size {st.st_size} != {blob.size}"
        named, content = hashes_fd(fd, blob.lfs)
        if named != blob.name:
            return f"{'sha256' if blob.lfs else 'git-sha1'} mismatch"
        if blob.locked and content != blob.locked:
            return f"sha256 {content} differs from the lock's {blob.locked}"
        blob.sha256 = content
        return None

    def _verify_path(self, blob: Blob, path: str) -> str | None:
        """_verify() of the blob at ``path``, opened without following a link; its mode is left as it is (it may
        have a second name), so a hash counts only when the file did not change while it was read. The stat
        right after is what its record vouches for (``blob.vouched``)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as e:
            return f"cannot open it ({e.strerror})"
        try:
            before = os.fstat(fd)
            what = self._verify(blob, fd)
            after = os.fstat(fd)
        finally:
            os.close(fd)
        if what is None and transfer.content_key(before) != transfer.content_key(after):
            return "it was written while it was hashed"
        blob.vouched = manifest.vouched(after)
        return what

    # -- per blob
    def _pull_blobs(self, blobs: list[Blob], commit: str) -> None:
        """Every blob verified and linked, up to `workers` files at a time and up to `workers`
        connections in all (the ranges of every file share them). The first failure stops the
        rest at once: a Hub error (gated, not found) is the same for every file."""
        label = f"{self.repo_id}@{commit[:12]}"
        self.progress = Progress(label, self.stats.files, self.stats.bytes_total)
        hub = transfer.Transfer(self.repo_id, commit, self.endpoint, self.token, self.workers, self.progress,
                                self.stop, self._count)
        self.transfer = peers.PeerTransfer(hub, self.fleet) if self.fleet and self.fleet.peers else hub
        trust = self.records.trusted_blobs(self.folder)
        self._reclaim_stale_partials({b.name for b in blobs})
        self._check_room(blobs, label)
        indexed, index = [], 1
        for blob in blobs:
            indexed.append((index, blob))
            index += len(blob.paths)
        with ThreadPoolExecutor(self.workers, "hfpull-file") as files, \
                transfer.RangePool(self.workers, "hfpull-range") as self.transfer.ranges:
            gather([files.submit(self._pull_blob, blob, trust, i, commit) for i, blob in indexed], self.stop)
        self.progress.update(force=True)

    def _pull_blob(self, blob: Blob, trust: dict, index: int, commit: str) -> None:
        if self.stop.is_set():
            raise Stopped()
        assert self.progress is not None  # set with the revision, before any blob
        path0 = blob.paths[0]
        blob_path = os.path.join(self.blobs_dir, blob.name)
        with self._etag_lock(blob.name):
            self._ensure_blob(blob, blob_path, trust, index, path0)
        for k, p in enumerate(blob.paths):
            self._link(commit, p, blob.name)
            if k:
                self.progress.file_line(index + k, p, f"same content as {path0}; linked to the same blob")
        self.progress.update(files=len(blob.paths), have=blob.size * (len(blob.paths) - 1))

    def _etag_lock(self, etag: str) -> FileLock:
        lock = FileLock(os.path.join(self.locks_dir, f"{etag}.lock"))
        if not lock.acquire(self.lock_wait, on_wait=lambda: say(
                f"pull {self.repo_id}: blob {etag[:12]} is being downloaded by another process; waiting")):
            raise PullError(f"blob {etag} of {self.repo_id} stayed locked ({self.redact(lock.path)}"
                            f"{held_by(lock.path)}) by another download for {self.lock_wait:.0f} s "
                            "(sglang_pull_lock_wait). Let it finish or stop it, then run again", EXIT_LOCKED)
        return lock

    def _ensure_blob(self, blob: Blob, blob_path: str, trust: dict, index: int, path: str) -> None:
        p = self.progress
        assert p is not None and self.transfer is not None
        try:
            st = os.lstat(blob_path)
        except FileNotFoundError:
            st = None
        if st is not None:
            recorded = stat.S_ISREG(st.st_mode) and manifest.still_trusted(trust.get(blob.name), st, blob.size)
            content = (trust.get(blob.name) or {}).get("sha256")
            if recorded and content and blob.locked in (None, content):
                blob.sha256, blob.vouched = content, manifest.vouched(st)
                p.file_line(index, path, f"present {human(blob.size)} (verified by an earlier pull)")
                p.update(have=blob.size)
                return
            if stat.S_ISREG(st.st_mode) and self._verify_path(blob, blob_path) is None:
                p.file_line(index, path,
                            f"present {human(blob.size)} ({'sha256' if blob.lfs else 'git-sha1'} verified)")
                p.update(have=blob.size)
                return
            p.file_line(index, path, "blob on disk is wrong (size or hash); fetching it again")
            os.unlink(blob_path)
            self.stats.changed = True
        partial = os.path.join(self.blobs_dir, f"{blob.name}.incomplete")
        self._may_read()
        have = self._adopt_orphans(blob, partial, index, path)
        p.update(active=1)
        try:
            hashed = self.transfer.download(blob, partial, have, index, path, self._verify)
        finally:
            p.update(active=-1)
        os.replace(partial, blob_path)
        blob.vouched = self._share(blob_path, hashed, path)
        unlink_if_present(partial + ranges.SIDECAR)
        self._count(files_fetched=1)
        self.stats.changed = True
        p.file_line(index, path, f"fetched and verified ({human(blob.size)})")

    @staticmethod
    def _share(blob_path: str, hashed: os.stat_result, path: str) -> tuple[int, int, int]:
        """The blob just renamed into place made group-writable (transfer.SHARED), as the cache's files are,
        through a descriptor of the very file hashed, unwritten since (its mtime: only the account can set one
        back); a link or another file swapped in is removed, never re-moded. What its record vouches for."""
        replaced = VerifyError(f"{path}: the verified file was replaced or written before it took its name; "
                               "run again")
        try:
            fd = os.open(blob_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            os.unlink(blob_path)
            raise replaced from None
        try:
            now = os.fstat(fd)
            if (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) != (
                    hashed.st_dev, hashed.st_ino, hashed.st_size, hashed.st_mtime_ns):
                os.unlink(blob_path)
                raise replaced
            os.fchmod(fd, transfer.SHARED)
            return manifest.vouched(os.fstat(fd))
        finally:
            os.close(fd)

    def _adopt_orphans(self, blob: Blob, partial: str, index: int, path: str) -> int:
        """Keep the largest usable partial of this blob as `<etag>.incomplete`; delete the rest.
        Its length; the ranges it holds are read from its sidecar, if it has one.

        Called with the blob's lock held, so no live download of huggingface_hub
        (which holds the same lock) is writing to any of these files."""
        candidates = []
        prefix = blob.name + "."
        for name in os.listdir(self.blobs_dir):
            if name.startswith(prefix) and name.endswith(".incomplete"):
                full = os.path.join(self.blobs_dir, name)
                try:
                    st = os.lstat(full)
                except FileNotFoundError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    candidates.append((st.st_size, name, full))
        usable = [c for c in candidates if c[0] <= blob.size]
        best = max(usable, key=lambda c: (c[0], c[2] == partial), default=None)
        adopted = deleted = freed = 0
        for size, name, full in candidates:
            if best is not None and full == best[2]:
                continue
            os.unlink(full)
            deleted += 1
            freed += size
        have = 0
        if best is None or best[2] != partial:
            unlink_if_present(partial + ranges.SIDECAR)  # it described a partial that is gone
        if best is not None:
            have = best[0]
            if best[2] != partial:
                os.replace(best[2], partial)
                adopted = 1
        reclaimed = adopted + deleted
        if reclaimed:
            self._count(orphans_reclaimed=reclaimed, orphan_bytes=freed + (have if adopted else 0))
            self.stats.changed = True
            assert self.progress is not None
            self.progress.file_line(index, path, f"reclaimed {reclaimed} orphan partial(s): adopted {adopted} "
                                                 f"({human(have if adopted else 0)}), "
                                                 f"deleted {deleted} ({human(freed)})")
        return have

    def _reclaim_stale_partials(self, wanted: set[str]) -> None:
        """Partials of blobs outside this revision: delete only old ones nobody holds a lock on.
        A range sidecar whose partial is gone goes too."""
        now = time.time()
        for name in sorted(os.listdir(self.blobs_dir)):
            if name.endswith(".incomplete" + ranges.SIDECAR):
                if not os.path.lexists(os.path.join(self.blobs_dir, name[:-len(ranges.SIDECAR)])):
                    unlink_if_present(os.path.join(self.blobs_dir, name))
                continue
            if not name.endswith(".incomplete"):
                continue
            etag = name.split(".", 1)[0]
            if etag in wanted:
                continue
            full = os.path.join(self.blobs_dir, name)
            try:
                st = os.lstat(full)
            except FileNotFoundError:
                continue
            if now - st.st_mtime < STALE_PARTIAL_AGE:
                say(f"pull {self.repo_id}: leaving partial {name} ({human(st.st_size)}) of a blob outside "
                    f"this revision (younger than 24 h)")
                continue
            lock = FileLock(os.path.join(self.locks_dir, f"{etag}.lock"))
            if not lock.try_acquire():
                say(f"pull {self.repo_id}: leaving partial {name}: its download is running")
                continue
            try:
                os.unlink(full)
                unlink_if_present(full + ranges.SIDECAR)
            finally:
                lock.release()
            self._count(orphans_reclaimed=1, orphan_bytes=st.st_size)
            self.stats.changed = True
            say(f"pull {self.repo_id}: deleted stale partial {name} ({human(st.st_size)}, older than 24 h)")

    # -- links, manifest, refs
    def _link(self, commit: str, path: str, blob_name: str) -> None:
        parts = safe_relpath(path).split("/")
        link, rel = manifest.link_target(self.repo_dir, commit, path, blob_name)
        shown = self.redact(link)
        folder = open_below(self.held["snapshots"], [commit, *parts[:-1]], self.redact(
            os.path.join(self.repo_dir, "snapshots")))  # snapshots/<commit>/<dirs>: never through a link
        name = parts[-1]
        try:
            try:
                if os.readlink(name, dir_fd=folder) == rel:
                    return
            except FileNotFoundError:
                pass
            except OSError as e:
                if e.errno != errno.EINVAL:  # EINVAL: a regular file or dir sits there
                    raise
                if stat.S_ISDIR(os.lstat(name, dir_fd=folder).st_mode):
                    raise VerifyError(f"{shown} is a directory where a file link belongs")
            tmp = f"{name}.{os.getpid()}.tmplink"
            try:
                os.unlink(tmp, dir_fd=folder)
            except FileNotFoundError:
                pass
            os.symlink(rel, tmp, dir_fd=folder)
            os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
        finally:
            os.close(folder)
        self.stats.changed = True

    def _write_manifest(self, blobs: list[Blob], commit: str) -> None:
        files = []
        for blob in blobs:
            st = os.lstat(os.path.join(self.blobs_dir, blob.name))
            if not stat.S_ISREG(st.st_mode) or st.st_size != blob.size:
                raise VerifyError(f"blob {blob.name} changed size while pulling")
            if blob.vouched is None or manifest.vouched(st) != blob.vouched:
                raise VerifyError(f"{blob.paths[0]}: its blob {blob.name} changed after it was verified (its inode "
                                  "or ctime moved): nothing is recorded for this revision; run the pull again, "
                                  "which hashes it again")
            for p in blob.paths:
                files.append(manifest.entry(p, blob.name, st, blob.lfs, blob.sha256))
        data = manifest.document(self.repo_id, commit, files, int(time.time()))
        old = self.records.load(self.folder, commit, self.share is not None)
        if old is not None and old.get("files") == data["files"] and old.get("repo_id") == self.repo_id:
            return
        self.records.write(self.folder, commit, data, self.share is not None)
        self.stats.changed = True

    def _write_ref(self, commit: str) -> None:
        """refs/<branch> holds the bare commit id (no newline), as huggingface_hub writes it."""
        parts = self.revision.split("/")
        folder = open_below(self.held["repo"], ["refs", *parts[:-1]], self.redact(self.repo_dir))
        try:
            if read_regular(parts[-1], len(commit) + 1, dir_fd=folder) == commit.encode():
                return
            tmp = f"{parts[-1]}.{os.getpid()}.tmp"
            rename_new(folder, tmp, parts[-1], create_new(folder, tmp, commit.encode(), 0o664))
        finally:
            os.close(folder)
        self.stats.changed = True
