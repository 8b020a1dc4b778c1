"""hfpull.py and the modules it ships with (pull.py, prune.py, pull_errors.py): unit tests of
their pieces, then the CLI run as a subprocess against the stand-in Hub (tests/support/hfstandin) on
127.0.0.1, the way the deploy runs it on a host. The file locks alone: test_pull_locks.py."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from huggingface_hub import scan_cache_dir, snapshot_download
from huggingface_hub.utils.sha import git_hash

from hfstandin import StandinHub
from sglang_infra.hostside.pull import hfpull, manifest, pull_errors, pull_locks, ranges, transfer
from sglang_infra.hostside.pull.pull import CHUNK, STALE_PARTIAL_AGE, Blob, Progress, Puller, hash_file, safe_relpath
from sglang_infra.hostside.pull.transfer import RETRY_AFTER_MAX, Transfer, retry_after
from sglang_infra.hostside.read import cachestate
from sglang_infra.machine import ship

ROOT = Path(__file__).resolve().parents[2]
# The program as hosts get it: bundled with its neighbours by the loader.
SCRIPT = Path(tempfile.mkdtemp(prefix="hfpull-")) / "hfpull.py"
SCRIPT.write_text(ship.program("pull.hfpull"))
PYTHON = sys.executable
TOKEN = "hf_standinSECRETtoken0123456789"
OFFLINE_ENDPOINT = "http://127.0.0.1:9"  # nothing listens: any request would fail

SMALL_MODEL = {"path": "model.safetensors", "size": 300_000, "seed": 1, "lfs": True}
SPEC = {"repos": [
    {"repo_id": "org/small", "commits": [
        {"branch": "old", "files": [
            {"path": "config.json", "text": '{"version": 0}'},
            {"path": "tokenizer.json", "text": '{"vocab": ["a", "b"]}'},
            SMALL_MODEL]},
        {"branch": "main", "files": [
            {"path": "config.json", "text": '{"version": 1}'},
            {"path": "tokenizer.json", "text": '{"vocab": ["a", "b"]}'},
            {"path": "sub/dir/extra.txt", "text": "nested\n"},
            SMALL_MODEL,
            {"path": "model-2.safetensors", "size": 200_000, "seed": 2, "lfs": True}]}]},
    {"repo_id": "org/other", "commits": [{"branch": "main", "files": [
        {"path": "config.json", "text": '{"other": true}'},
        {"path": "w.safetensors", "size": 120_000, "seed": 3, "lfs": True}]}]},
    {"repo_id": "org/big", "commits": [{"branch": "main", "files": [
        {"path": "config.json", "text": '{"big": true}'},
        {"path": "model.safetensors", "size": 3 << 20, "seed": 4, "lfs": True}]}]},
    {"repo_id": "org/gated", "gated": True, "tokens": [TOKEN], "commits": [{"branch": "main", "files": [
        {"path": "config.json", "text": '{"gated": true}'},
        {"path": "w.safetensors", "size": 50_000, "seed": 5, "lfs": True}]}]},
]}


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def hub():
    with StandinHub(SPEC, access_log=False) as running:
        yield running


@pytest.fixture(scope="module")
def cdn_hub():
    """LFS bodies answered with a 302 to a second origin, the way the Hub hands them to its CDN."""
    with StandinHub(SPEC, access_log=False, lfs_redirect=True) as running:
        yield running


@pytest.fixture(scope="module")
def base_cache(hub, tmp_path_factory):
    """org/small@main and org/other@main pulled once by the CLI; tests work on copies."""
    cache = tmp_path_factory.mktemp("base") / "hub"
    for repo_id in ("org/small", "org/other"):
        r = pull(cache, repo_id, hub.commit(repo_id, "main"), hub)
        assert r.rc == 0, r
    hub.reset()
    return cache


@pytest.fixture
def pulled(base_cache, tmp_path):
    """A private copy of base_cache (links, modes and mtimes kept). A copy is new inodes, which a host would hash
    again; here its manifests are recorded anew for them, as the pull would after hashing."""
    cache = tmp_path / "hub"
    shutil.copytree(base_cache, cache, symlinks=True)
    shutil.copytree(records_of(base_cache), records_of(cache))
    for path in records_of(cache).glob("models--*/*.json"):
        data = json.loads(path.read_text())
        for entry in data["files"]:
            st = (cache / path.parent.name / "blobs" / entry["blob"]).lstat()
            entry.update(ino=st.st_ino, ctime_ns=st.st_ctime_ns)
        path.write_text(json.dumps(data))
    return cache


@pytest.fixture(autouse=True)
def _clean_hub(request):
    yield
    for name in ("hub", "cdn_hub"):
        if name in request.fixturenames:
            h = request.getfixturevalue(name)
            h.configure(throttle_bytes_per_s=None, drop_after_bytes=None, drop_count=0, drop_range=None,
                        inject_status=None, inject_count=0, inject_match=None, retry_after=None,
                        hostile_body=None, hostile_match=None, hostile_status=None)
            h.reset()


class Run:
    def __init__(self, proc: subprocess.CompletedProcess):
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr
        self.result = None
        lines = [ln for ln in self.out.splitlines() if ln.startswith(("SGLANG_PULL_RESULT ", "SGLANG_PRUNE_RESULT "))]
        if lines:
            assert len(lines) == 1 and self.out.splitlines()[-1] == lines[0], self.out
            self.result = json.loads(lines[0].split(" ", 1)[1])

    def __repr__(self):
        return f"rc={self.rc}\nstdout:\n{self.out}\nstderr:\n{self.err}"


def run(*args: str, timeout: float = 60) -> Run:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env["HF_HUB_DISABLE_TELEMETRY"] = "1"
    proc = subprocess.run([PYTHON, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, env=env)
    return Run(proc)


def records_of(cache: Path) -> Path:
    """The pull's records of ``cache``, beside it (on a host: verified/ in the home, outside hf-cache)."""
    return cache.with_name(cache.name + "-verified")


def record(cache: Path, repo_id: str, commit: str) -> Path:
    return records_of(cache) / ("models--" + repo_id.replace("/", "--")) / f"{commit}.json"


def scan(cache: Path) -> dict:
    """cachestate.scan of ``cache`` with its records, as the snapshot reads them (root and this user's)."""
    return cachestate.scan(str(cache), manifest.Records(str(records_of(cache)), manifest.owners()))


def pull(cache: Path, repo_id: str, revision: str, hub: StandinHub | None, *extra: str) -> Run:
    endpoint = hub.url if hub is not None else OFFLINE_ENDPOINT
    return run("pull", "--cache-dir", str(cache), "--records-dir", str(records_of(cache)), "--repo-id", repo_id,
               "--revision", revision,
               "--endpoint", endpoint, *extra)


def ok_pull(cache: Path, repo_id: str, revision: str, hub, *extra: str) -> dict:
    r = pull(cache, repo_id, revision, hub, *extra)
    assert r.rc == 0 and r.err == "", r
    return r.result


def repo_dir(cache: Path, repo_id: str) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


def layout(cache: Path, repo_id: str) -> dict:
    """Snapshot links (relative targets), blob names and refs of one repo, as huggingface_hub sees them."""
    repo = repo_dir(cache, repo_id)
    links = {}
    for root, _dirs, files in os.walk(repo / "snapshots"):
        for name in files:
            p = Path(root) / name
            links[str(p.relative_to(repo / "snapshots"))] = os.readlink(p)
    refs = {str(p.relative_to(repo / "refs")): p.read_text() for p in (repo / "refs").rglob("*") if p.is_file()} \
        if (repo / "refs").is_dir() else {}
    blobs = sorted(p.name for p in (repo / "blobs").iterdir())
    return {"links": links, "blobs": blobs, "refs": refs}


def etag(hub: StandinHub, repo_id: str, commit: str, path: str) -> str:
    return hub.file_meta(repo_id, commit, path)["etag"]


def resolve_gets(hub: StandinHub) -> list[dict]:
    return [r for r in hub.requests() if r["method"] == "GET" and "/resolve/" in r["path"]]


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / 0.02) + 1):
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def hand_pull(cache: Path, repo_id: str, revision: str, hub: StandinHub, **kwargs) -> str:
    return snapshot_download(repo_id, revision=revision, cache_dir=str(cache), endpoint=hub.url,
                             token=kwargs.pop("token", False), max_workers=2, **kwargs)


# --------------------------------------------------------------------------- unit: no Hub


def test_hashes_match_huggingface_hub(tmp_path):
    data = os.urandom(3 * CHUNK + 17)
    f = tmp_path / "f"
    f.write_bytes(data)
    assert hash_file(str(f), lfs=True) == hashlib.sha256(data).hexdigest()
    assert hash_file(str(f), lfs=False) == git_hash(data)
    (tmp_path / "empty").write_bytes(b"")
    assert hash_file(str(tmp_path / "empty"), lfs=False) == git_hash(b"")


def make_puller(cache: Path) -> Puller:
    p = Puller(str(cache), "org/m", "main", OFFLINE_ENDPOINT, None, lock_wait=0,
               records_dir=str(records_of(cache)))
    os.makedirs(p.blobs_dir)
    os.makedirs(p.locks_dir)
    p.progress = Progress("org/m@test", 1, 100)
    return p


def test_adopts_largest_usable_orphan_and_deletes_the_rest(tmp_path, capsys):
    p = make_puller(tmp_path)
    e = "e" * 64
    blob = Blob(e, 100, True, ["model.safetensors"])
    files = {f"{e}.incomplete": 10, f"{e}.aaaa1111.incomplete": 60, f"{e}.bbbb2222.incomplete": 40,
             f"{e}.cccc3333.incomplete": 150, f"{'f' * 64}.dddd4444.incomplete": 5}
    for name, size in files.items():
        (Path(p.blobs_dir) / name).write_bytes(b"x" * size)
    partial = os.path.join(p.blobs_dir, f"{e}.incomplete")

    have = p._adopt_orphans(blob, partial, 1, "model.safetensors")

    assert have == 60
    assert sorted(os.listdir(p.blobs_dir)) == [f"{e}.incomplete", f"{'f' * 64}.dddd4444.incomplete"]
    assert os.path.getsize(partial) == 60
    assert p.stats.orphans_reclaimed == 4  # one adopted, three deleted
    assert p.stats.orphan_bytes == 60 + 10 + 40 + 150
    assert "adopted 1" in capsys.readouterr().out


def test_own_partial_is_kept_without_counting_it_as_an_orphan(tmp_path):
    p = make_puller(tmp_path)
    e = "e" * 40
    (Path(p.blobs_dir) / f"{e}.incomplete").write_bytes(b"x" * 30)
    have = p._adopt_orphans(Blob(e, 100, False, ["a"]), os.path.join(p.blobs_dir, f"{e}.incomplete"), 1, "a")
    assert have == 30 and p.stats.orphans_reclaimed == 0 and not p.stats.changed


def test_stale_partials_of_other_blobs(tmp_path):
    p = make_puller(tmp_path)
    old = time.time() - 2 * STALE_PARTIAL_AGE
    wanted, stale, young, running = "a" * 64, "b" * 64, "c" * 64, "d" * 64
    for e in (wanted, stale, young, running):
        (Path(p.blobs_dir) / f"{e}.12345678.incomplete").write_bytes(b"x" * 7)
    for e in (wanted, stale, running):
        os.utime(Path(p.blobs_dir) / f"{e}.12345678.incomplete", (old, old))
    holder = pull_locks.FileLock(os.path.join(p.locks_dir, f"{running}.lock"))
    assert holder.try_acquire()
    try:
        p._reclaim_stale_partials({wanted})
    finally:
        holder.release()
    left = sorted(n.split(".")[0] for n in os.listdir(p.blobs_dir))
    assert left == [wanted, young, running]
    assert (p.stats.orphans_reclaimed, p.stats.orphan_bytes) == (1, 7)


def test_download_that_never_verifies_fails_with_exit_4(tmp_path, monkeypatch, capsys):
    p = make_puller(tmp_path)
    blob = Blob(hashlib.sha256(b"right").hexdigest(), 5, True, ["w.safetensors"])
    partial = os.path.join(p.blobs_dir, blob.name + ".incomplete")
    calls = []

    def fake_fetch(self, blob_, partial_, spans, index, path):
        (have,) = [done for _, _, done in spans]  # a 5-byte file is one range
        calls.append(have)
        with open(partial_, "r+b" if os.path.exists(partial_) else "wb") as f:
            f.truncate(have)
            f.seek(have)
            f.write(b"wrong"[have:])

    monkeypatch.setattr(Transfer, "fetch", fake_fetch)
    (Path(partial)).write_bytes(b"wr")
    fetcher = Transfer(p.repo_id, "c" * 40, p.endpoint, None, p.workers, p.progress, p.stop, p._count)
    with pytest.raises(pull_errors.VerifyError) as err:
        fetcher.download(blob, partial, 2, 1, "w.safetensors", p._verify)
    assert err.value.code == pull_errors.EXIT_VERIFY and "after a full download from byte 0" in str(err.value)
    assert calls == [2, 0] and not os.path.exists(partial)

    monkeypatch.setattr(Puller, "_run_locked", lambda self: (_ for _ in ()).throw(err.value))
    assert hfpull.main(["pull", "--cache-dir", str(tmp_path / "c"), "--records-dir", str(tmp_path / "r"),
                        "--repo-id", "org/m", "--revision", "main",
                        "--endpoint", OFFLINE_ENDPOINT]) == pull_errors.EXIT_VERIFY
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("verification failed: w.safetensors: sha256 mismatch")
    assert lines[0].endswith("(repo org/m, revision main)")


def test_pull_waits_for_the_repo_lock_then_fails_clearly(tmp_path):
    lock = pull_locks.FileLock(str(repo_dir(tmp_path, "org/m") / pull_locks.PULL_LOCK))
    assert lock.try_acquire()
    try:
        r = pull(tmp_path, "org/m", "a" * 40, None, "--lock-wait", "0.5")
    finally:
        lock.release()
    assert r.rc == pull_errors.EXIT_LOCKED, r
    assert r.err.count("\n") == 1 and "another pull of org/m holds" in r.err and "Traceback" not in r.err
    # The lock's path and its holder (this test process), and the key that sets the wait.
    assert f"{lock.path}, held by pid {os.getpid()}" in r.err and "sglang_pull_lock_wait" in r.err


def test_a_planted_lock_symlink_is_never_followed_nor_waited_on(tmp_path):
    """A member of the group links the repo's lock to a file the account owns: the pull refuses at once."""
    target = tmp_path / "compose.yaml"
    target.write_text("services: {}\n")
    target.chmod(0o644)
    lock = repo_dir(tmp_path, "org/m") / pull_locks.PULL_LOCK
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.symlink_to(target)
    started = time.monotonic()
    r = pull(tmp_path, "org/m", "a" * 40, None, "--lock-wait", "30")
    assert r.rc == pull_errors.EXIT_LOCKED, r
    assert time.monotonic() - started < 20
    assert f"{lock} is a symlink, not a lock file" in r.err and "Traceback" not in r.err
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_unsafe_repo_paths_are_refused():
    for bad in ("../x", "/etc/passwd", "a/../../b", "a//b", "a\\b", ""):
        with pytest.raises(pull_errors.VerifyError):
            safe_relpath(bad)
    assert safe_relpath("a/b/c.json") == os.path.join("a", "b", "c.json")


def test_a_hub_that_cannot_be_reached_is_named_with_its_address_in_one_line(tmp_path):
    r = pull(tmp_path, "org/m", "main", None)
    assert r.rc == 3, r
    assert r.err.startswith("pull failed: the Hub endpoint (sglang_hf_endpoint) at http://127.0.0.1:9 could not be "
                            "reached ([Errno 111] Connection refused) after 5 attempts over ")
    assert r.err.count("\n") == 1
    assert "nothing was fetched" in r.err and "network error" not in r.err
    assert r.out.count("retrying in") == 4  # hublimits.METADATA_ATTEMPTS, with backoff
    assert "(repo org/m, revision main)" in r.err and "Traceback" not in r.err
    assert not repo_dir(tmp_path, "org/m").exists()  # a failed first pull leaves no empty repo folder


# --------------------------------------------------------------------------- pull against the stand-in Hub


def test_first_pull_matches_huggingface_hub_then_second_pull_is_offline(hub, tmp_path):
    commit = hub.commit("org/small", "main")
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    ours.chmod(0o2775)  # the host's hf-cache/hub: setgid, group-writable

    first = pull(ours, "org/small", commit, hub)
    assert first.rc == 0 and first.err == "", first
    res = first.result
    sizes = [hub.file_meta("org/small", commit, p)["size"] for p in hub.files("org/small", commit)]
    assert res == {"repo_id": "org/small", "commit": commit, "files": 5, "files_fetched": 5,
                   "bytes_total": sum(sizes), "bytes_missing": sum(sizes), "bytes_fetched": sum(sizes),
                   "bytes_refetched": 0, "resumed_bytes": 0, "orphans_reclaimed": 0, "orphan_bytes": 0,
                   "changed": True, "sources": {"hub": sum(sizes)}}
    assert f"pull org/small@{commit[:12]}: file " in first.out

    hand_pull(theirs, "org/small", commit, hub)
    assert layout(ours, "org/small") == layout(theirs, "org/small")
    assert layout(ours, "org/small")["refs"] == {}  # never a ref for a commit id
    for path in hub.files("org/small", commit):
        assert (repo_dir(ours, "org/small") / "snapshots" / commit / path).read_bytes() == \
            hub.file_bytes("org/small", commit, path)

    rec = json.loads(record(ours, "org/small", commit).read_text())
    assert rec["repo_id"] == "org/small" and rec["commit"] == commit
    assert isinstance(rec["verified_at"], int)
    assert sorted(rec["files"], key=lambda e: e["path"]) == rec["files"]
    for entry in rec["files"]:
        meta = hub.file_meta("org/small", commit, entry["path"])
        blob = repo_dir(ours, "org/small") / "blobs" / entry["blob"]
        assert (entry["blob"], entry["size"], entry["lfs"]) == (meta["etag"], meta["size"], meta["lfs"])
        assert entry["mtime_ns"] == blob.stat().st_mtime_ns
        assert (entry["ino"], entry["ctime_ns"]) == (blob.stat().st_ino, blob.stat().st_ctime_ns)
        assert stat.S_IMODE(blob.stat().st_mode) == 0o664
    for d in (repo_dir(ours, "org/small"), repo_dir(ours, "org/small") / "snapshots" / commit / "sub" / "dir",
              ours / ".locks" / "models--org--small"):
        assert stat.S_IMODE(d.stat().st_mode) & 0o2070 == 0o2070, d
    for f in (repo_dir(ours, "org/small") / pull_locks.PULL_LOCK, ours / "CACHEDIR.TAG"):
        assert stat.S_IMODE(f.stat().st_mode) & 0o060 == 0o060, f
    # the record: outside the cache, the account's alone, under the pull's umask 002 too
    assert not (repo_dir(ours, "org/small") / ".sglang").exists()
    for f, mode in ((record(ours, "org/small", commit), 0o644), (record(ours, "org/small", commit).parent, 0o755)):
        assert stat.S_IMODE(f.lstat().st_mode) == mode, f

    hub.reset()
    second = pull(ours, "org/small", commit, hub)
    assert second.rc == 0, second
    assert second.result["changed"] is False and second.result["bytes_fetched"] == 0
    assert hub.requests() == []  # the manifest answered: not one request

    state = scan(ours)["repos"]["org/small"]
    assert state["revisions"][commit]["verified"] and state["revisions"][commit]["complete"]
    assert state["revisions"][commit]["files"] == 5 and state["partials"] == []


def test_huggingface_hub_cache_api_tolerates_our_files(hub, pulled):
    commit = hub.commit("org/small", "main")
    assert (repo_dir(pulled, "org/small") / pull_locks.PULL_LOCK).exists()
    assert record(pulled, "org/small", commit).exists()
    info = scan_cache_dir(pulled)
    assert info.warnings == []
    repo = next(r for r in info.repos if r.repo_id == "org/small")
    assert repo.nb_files == 5
    (rev,) = repo.revisions
    assert rev.commit_hash == commit and rev.nb_files == 5
    info.delete_revisions(commit).execute()
    assert not repo_dir(pulled, "org/small").exists()


def test_branch_revision_writes_the_ref(hub, pulled):
    commit = hub.commit("org/small", "main")
    assert not (repo_dir(pulled, "org/small") / "refs").exists()
    res = ok_pull(pulled, "org/small", "main", hub)
    assert res["commit"] == commit and res["changed"] is True and res["bytes_fetched"] == 0
    assert (repo_dir(pulled, "org/small") / "refs" / "main").read_bytes() == commit.encode()

    hub.reset()
    again = ok_pull(pulled, "org/small", "main", hub)
    assert again["changed"] is False
    assert [r["path"] for r in hub.requests()] == ["/api/models/org/small/revision/main"]


def big_file(hub, tmp_path):
    """org/big's commit, its 3 MiB shard's metadata, and where its partial and range sidecar go."""
    commit = hub.commit("org/big", "main")
    meta = hub.file_meta("org/big", commit, "model.safetensors")
    partial = repo_dir(tmp_path, "org/big") / "blobs" / f"{meta['etag']}.incomplete"
    return commit, meta, partial, Path(str(partial) + ranges.SIDECAR)


def assert_big_file_verified(cache: Path, commit: str, meta: dict) -> None:
    """org/big's shard whole in its blob, no partial or sidecar left, the revision verified."""
    blob = repo_dir(cache, "org/big") / "blobs" / meta["etag"]
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == meta["etag"]
    assert [n for n in os.listdir(blob.parent) if "incomplete" in n] == []
    assert scan(cache)["repos"]["org/big"]["revisions"][commit]["verified"]


def shard_gets(hub) -> list[dict]:
    return [g for g in resolve_gets(hub) if g["path"].endswith("/model.safetensors")]


def test_a_large_file_comes_in_parallel_ranges_and_is_verified(hub, tmp_path):
    commit, meta, partial, sidecar = big_file(hub, tmp_path)
    hub.set_throttle(512 << 10)  # per connection: the ranges overlap

    res = ok_pull(tmp_path, "org/big", commit, hub)

    gets = shard_gets(hub)
    assert sorted(g["range"] for g in gets) == sorted(
        ranges.header(start, end, meta["size"]) for start, end, _ in ranges.plan(meta["size"], 8))
    assert len(gets) == 3 and max(g["in_flight"] for g in gets) >= 1
    assert res["bytes_fetched"] == res["bytes_missing"] == meta["size"] + len(hub.file_bytes("org/big", commit,
                                                                                               "config.json"))
    assert_big_file_verified(tmp_path, commit, meta)


SHARDS = {"repos": [{"repo_id": "org/shards", "commits": [{"branch": "main", "files": [
    {"path": "config.json", "text": '{"shards": 4}'}] + [
    {"path": f"model-0000{i}-of-00004.safetensors", "size": 8 << 20, "seed": 60 + i, "lfs": True}
    for i in range(1, 5)]}]}]}


def test_the_connections_go_to_one_file_then_the_next(tmp_path):
    """Four shards of 8 ranges each and 8 connections: the connections take the first file's ranges, then the
    next file's, so the files finish one after another, in the pull's order, each hashed while the next one's bytes
    come. (In the first-come queue before, the ranges ran in the order the files' threads queued them: at times two
    files interleaved to the end, finishing together and both hashed after the last byte, the link idle meanwhile.)"""
    with StandinHub(SHARDS, access_log=False) as hub:
        hub.set_throttle(4 << 20)  # per connection: 0.25 s a range, so the ranges overlap
        commit = hub.commit("org/shards", "main")
        res = ok_pull(tmp_path, "org/shards", commit, hub)
        gets = sorted((g for g in resolve_gets(hub) if "model-" in g["path"]), key=lambda g: g["started_at"])

    assert res["files_fetched"] == 5 and res["bytes_fetched"] == 4 * (8 << 20) + len('{"shards": 4}')
    assert len(gets) == 32 and all(g["range"] for g in gets)
    files = [g["path"].rsplit("/", 1)[1] for g in gets]
    # The first 8 ranges start as the files' HEADs answer (two files may share them); from then on each free
    # connection takes the earliest file's next range, so no range starts a wave (0.25 s) after a later file's.
    # (Requests sent within a few ms of each other may reach the Hub in either order: not counted.)
    later = [(g["started_at"], f) for g, f in zip(gets[8:], files[8:])]
    behind = [(f, g) for t, f in later for u, g in later if u - t > 0.1 and g < f]
    waves = " | ".join(" ".join(f[10] for f in files[n:n + 8]) for n in range(0, 32, 8))
    assert behind == [], waves
    for path in {*files}:
        blob = repo_dir(tmp_path, "org/shards") / "snapshots" / commit / path
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == hub.file_meta("org/shards", commit, path)["etag"]


def test_the_range_pool_runs_the_lowest_order_waiting_first():
    import threading

    ran, gate = [], threading.Event()
    with transfer.RangePool(1, "test-range") as pool:
        busy = pool.submit((0, 0), gate.wait, 10)
        futures = [pool.submit(order, ran.append, order) for order in [(3, 0), (1, 1), (2, 5), (1, 0)]]
        failed = pool.submit((9, 9), int, "not a number")
        gate.set()
        assert busy.result(timeout=10) is True
        for future in futures:
            future.result(timeout=10)
        with pytest.raises(ValueError):
            failed.result(timeout=10)
    assert ran == [(1, 0), (1, 1), (2, 5), (3, 0)]
    with pytest.raises(RuntimeError):
        pool.submit((0, 0), int)


def test_workers_1_fetches_one_stream(hub, tmp_path):
    commit, meta, _, _ = big_file(hub, tmp_path)
    ok_pull(tmp_path, "org/big", commit, hub, "--workers", "1")
    assert [g["range"] for g in shard_gets(hub)] == [None]
    assert max(g["in_flight"] for g in resolve_gets(hub)) == 0


def test_kill_mid_file_then_resume_every_range_with_only_the_missing_bytes(hub, tmp_path):
    commit, meta, partial, sidecar = big_file(hub, tmp_path)
    hub.set_throttle(256 << 10)
    proc = subprocess.Popen([PYTHON, str(SCRIPT), "pull", "--cache-dir", str(tmp_path),
                             "--records-dir", str(records_of(tmp_path)), "--repo-id", "org/big",
                             "--revision", commit, "--endpoint", hub.url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def recorded() -> int:
        text = sidecar.read_bytes() if sidecar.exists() else None
        spans = ranges.parse(text, meta["size"]) if text else None
        return ranges.done(spans) if spans else 0

    try:
        wait_for(lambda: recorded() >= 512 << 10, 30, "512 KiB recorded in the range sidecar")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    spans = ranges.resume(meta["size"], partial.stat().st_size, sidecar.read_bytes(), 8)
    assert len(spans) == 3 and 0 < ranges.done(spans) < meta["size"]
    hub.set_throttle(None)
    hub.reset()

    res = ok_pull(tmp_path, "org/big", commit, hub)

    gets = shard_gets(hub)
    assert sorted(g["range"] for g in gets) == sorted(
        ranges.header(start + done, end, meta["size"]) for start, end, done in spans if done < end - start)
    assert all(g["status"] == 206 for g in gets)
    assert sum(g["bytes_sent"] for g in gets) == ranges.missing(spans) == res["bytes_missing"]
    assert res["bytes_fetched"] / res["bytes_missing"] <= 1.01 and res["bytes_refetched"] == 0
    assert res["resumed_bytes"] == ranges.done(spans) and res["files_fetched"] == 1
    assert_big_file_verified(tmp_path, commit, meta)


def test_a_single_stream_partial_is_resumed_as_a_prefix_split_into_ranges(hub, tmp_path):
    """What a pull before ranges (or huggingface_hub) left: a prefix with no sidecar."""
    commit, meta, partial, sidecar = big_file(hub, tmp_path)
    partial.parent.mkdir(parents=True)
    partial.write_bytes(hub.file_bytes("org/big", commit, "model.safetensors")[:1_000_000])

    res = ok_pull(tmp_path, "org/big", commit, hub)

    asked = sorted(g["range"] for g in shard_gets(hub))
    assert asked == sorted(ranges.header(s, e, meta["size"]) for s, e, d in ranges.plan(meta["size"], 8, 1_000_000)
                           if d < e - s)
    assert len(asked) == 2 and any(a.startswith("bytes=1000000-") for a in asked)
    assert res["resumed_bytes"] == 1_000_000 and res["bytes_refetched"] == 0
    assert not partial.exists() and not sidecar.exists()


def test_a_cut_in_the_middle_of_one_range_resumes_that_range_from_its_last_byte(hub, tmp_path):
    commit, meta, _, _ = big_file(hub, tmp_path)
    hub.configure(drop_after_bytes=300_000, drop_count=1, drop_range=f"bytes={1 << 20}-")

    res = ok_pull(tmp_path, "org/big", commit, hub)

    cut = [g for g in shard_gets(hub) if g["dropped"]]
    assert [(g["range"], g["bytes_sent"]) for g in cut] == [(f"bytes={1 << 20}-{(2 << 20) - 1}", 300_000)]
    others = sorted(g["range"] for g in shard_gets(hub) if not g["dropped"])
    assert others == sorted([f"bytes={(1 << 20) + 300_000}-{(2 << 20) - 1}", f"bytes=0-{(1 << 20) - 1}",
                             f"bytes={2 << 20}-"])
    assert res["bytes_refetched"] == 0
    assert scan(tmp_path)["repos"]["org/big"]["revisions"][commit]["verified"]


def test_a_server_ignoring_ranges_gets_the_file_as_one_stream(hub, tmp_path, monkeypatch):
    commit, meta, _, sidecar = big_file(hub, tmp_path)
    import hfstandin.server as server
    monkeypatch.setattr(server, "_parse_range", lambda header, size: None)

    r = pull(tmp_path, "org/big", commit, hub)

    assert r.rc == 0, r
    assert "the server ignored the Range request; starting over from byte 0 as one stream" in r.out
    assert [g["range"] for g in shard_gets(hub)][-1] is None
    assert not sidecar.exists()
    assert scan(tmp_path)["repos"]["org/big"]["revisions"][commit]["verified"]


def test_a_429_waits_as_long_as_retry_after_asks(hub, tmp_path):
    commit = hub.commit("org/other", "main")
    hub.configure(inject_status=429, inject_count=1, retry_after=2,
                  inject_match=f"GET /org/other/resolve/{commit}/w.safetensors")

    r = pull(tmp_path, "org/other", commit, hub)

    assert r.rc == 0, r
    statuses = [g["status"] for g in resolve_gets(hub) if g["path"].endswith("/w.safetensors")]
    assert statuses == [429, 200]  # a retry inside the window would have been refused again
    assert "HTTP 429; retrying from byte 0 in 2.0 s as the Hub asked" in r.out


def test_a_hub_error_on_one_file_stops_the_whole_pull(hub, tmp_path):
    commit = hub.commit("org/small", "main")
    meta = hub.file_meta("org/small", commit, "model.safetensors")
    hub.set_throttle(64 << 10)  # model.safetensors would take about 5 s
    hub.configure(inject_status=404, inject_count=1, inject_match=f"GET /org/small/resolve/{commit}/model-2.")

    r = pull(tmp_path, "org/small", commit, hub)

    assert r.rc == pull_errors.EXIT_REMOTE, r
    assert r.err.startswith("pull failed: ") and "404" in r.err and r.err.count("\n") == 1, r
    sent = sum(g["bytes_sent"] for g in resolve_gets(hub) if g["path"].endswith("/model.safetensors"))
    assert sent < meta["size"]  # the other downloads ended with it
    assert not (repo_dir(tmp_path, "org/small") / "blobs" / meta["etag"]).exists()
    assert not record(tmp_path, "org/small", commit).exists()


@pytest.mark.parametrize("value, seconds", [("3", 3.0), ("0", 0.0), ("100000", RETRY_AFTER_MAX),
                                            ("soon", None), ("", None)])
def test_retry_after_is_read_and_capped(value, seconds):
    assert retry_after({"Retry-After": value}) == seconds


def test_retry_after_as_an_http_date():
    from email.utils import formatdate

    assert 5 <= retry_after({"Retry-After": formatdate(time.time() + 10, usegmt=True)}) <= 10
    assert retry_after({"Retry-After": formatdate(time.time() - 10, usegmt=True)}) == 0.0


def test_workers_out_of_range_is_a_usage_error(tmp_path):
    r = pull(tmp_path, "org/big", "main", None, "--workers", "0")
    assert r.rc == pull_errors.EXIT_USAGE and "--workers" in r.err


def small_shard(hub, tmp_path):
    """org/small's old commit, its shard's metadata and bytes, and an empty blobs/ to plant partials in."""
    commit = hub.commit("org/small", "old")
    meta = hub.file_meta("org/small", commit, "model.safetensors")
    data = hub.file_bytes("org/small", commit, "model.safetensors")
    blobs = repo_dir(tmp_path, "org/small") / "blobs"
    blobs.mkdir(parents=True)
    return commit, meta, data, blobs


def test_adopts_the_orphan_of_a_killed_huggingface_hub_download(hub, tmp_path):
    commit, meta, data, blobs = small_shard(hub, tmp_path)
    (blobs / f"{meta['etag']}.abcd1234.incomplete").write_bytes(data[:100_000])
    (blobs / f"{meta['etag']}.0badf00d.incomplete").write_bytes(data[:30_000])
    tok = hub.file_meta("org/small", commit, "tokenizer.json")  # a complete partial: nothing left to fetch
    (blobs / f"{tok['etag']}.incomplete").write_bytes(hub.file_bytes("org/small", commit, "tokenizer.json"))

    res = ok_pull(tmp_path, "org/small", commit, hub)

    assert sorted(g["path"].rsplit("/", 1)[1] for g in resolve_gets(hub)) == ["config.json", "model.safetensors"]
    (get,) = [g for g in resolve_gets(hub) if g["path"].endswith("/model.safetensors")]
    assert get["range"] == "bytes=100000-"
    assert res["orphans_reclaimed"] == 2 and res["orphan_bytes"] == 130_000
    assert res["resumed_bytes"] == 100_000 + tok["size"]
    other = hub.file_meta("org/small", commit, "config.json")["size"]
    assert res["bytes_missing"] == meta["size"] - 100_000 + other == res["bytes_fetched"]
    assert not [n for n in os.listdir(blobs) if n.endswith(".incomplete")]
    assert scan(tmp_path)["repos"]["org/small"]["revisions"][commit]["verified"]


def test_corrupted_blob_is_detected_and_fetched_again(hub, pulled):
    tmp_path = pulled
    commit = hub.commit("org/small", "main")
    meta = hub.file_meta("org/small", commit, "model.safetensors")
    blob = repo_dir(tmp_path, "org/small") / "blobs" / meta["etag"]
    data = bytearray(blob.read_bytes())
    data[1234] ^= 0xFF
    blob.write_bytes(bytes(data))  # same size, new ctime
    rev = scan(tmp_path)["repos"]["org/small"]["revisions"][commit]
    assert not rev["verified"]
    assert rev["problems"] == ["blob of model.safetensors changed since it was verified (inode or ctime)"]
    hub.reset()

    r = pull(tmp_path, "org/small", commit, hub)
    assert r.rc == 0, r
    assert "blob on disk is wrong" in r.out
    assert r.result["files_fetched"] == 1 and r.result["bytes_fetched"] == meta["size"]
    assert r.result["bytes_missing"] == meta["size"] and r.result["changed"] is True
    assert [g["path"].rsplit("/", 1)[1] for g in resolve_gets(hub)] == ["model.safetensors"]
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == meta["etag"]
    assert scan(tmp_path)["repos"]["org/small"]["revisions"][commit]["verified"]


def test_touched_blob_and_broken_links_are_repaired_without_fetching(hub, pulled):
    """A blob whose mtime changed is hashed again (not fetched); wrong, dangling and missing links are redone."""
    tmp_path = pulled
    commit = hub.commit("org/small", "main")
    blob = repo_dir(tmp_path, "org/small") / "blobs" / etag(hub, "org/small", commit, "model.safetensors")
    os.utime(blob, ns=(blob.stat().st_atime_ns, blob.stat().st_mtime_ns + 5 * 10**9))
    snap = repo_dir(tmp_path, "org/small") / "snapshots" / commit
    target = os.readlink(snap / "config.json")
    (snap / "config.json").unlink()
    (snap / "config.json").symlink_to("../../blobs/" + "0" * 40)
    (snap / "tokenizer.json").unlink()
    hub.reset()

    r = pull(tmp_path, "org/small", commit, hub)

    assert r.rc == 0 and "sha256 verified" in r.out, r
    assert r.result["bytes_fetched"] == 0 and r.result["changed"] is True  # links and manifest rewritten
    assert resolve_gets(hub) == []
    assert os.readlink(snap / "config.json") == target and (snap / "tokenizer.json").is_symlink()
    assert scan(tmp_path)["repos"]["org/small"]["revisions"][commit]["verified"]


@pytest.mark.parametrize("kind", ["too_long", "wrong_content"])
def test_bad_partial_is_refetched_from_zero(hub, tmp_path, kind):
    commit = hub.commit("org/small", "old")
    meta = hub.file_meta("org/small", commit, "model.safetensors")
    blobs = repo_dir(tmp_path, "org/small") / "blobs"
    blobs.mkdir(parents=True)
    partial = blobs / f"{meta['etag']}.incomplete"
    partial.write_bytes(os.urandom(meta["size"] + 10 if kind == "too_long" else 50_000))

    r = pull(tmp_path, "org/small", commit, hub)

    assert r.rc == 0, r
    gets = [g for g in resolve_gets(hub) if g["path"].endswith("/model.safetensors")]
    blob = blobs / meta["etag"]
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == meta["etag"]
    assert not partial.exists()
    if kind == "too_long":
        assert [g["range"] for g in gets] == [None]
        assert r.result["orphans_reclaimed"] == 1 and r.result["bytes_refetched"] == 0
    else:
        assert [g["range"] for g in gets] == ["bytes=50000-", None]
        assert "sha256 mismatch" in r.out
        assert r.result["bytes_refetched"] == meta["size"]
        assert r.result["bytes_fetched"] == r.result["bytes_missing"] + meta["size"]


def test_dropped_connection_resumes_within_the_same_pull(hub, tmp_path):
    commit = hub.commit("org/small", "old")
    meta = hub.file_meta("org/small", commit, "model.safetensors")
    hub.configure(drop_after_bytes=100_000, drop_count=1)
    r = pull(tmp_path, "org/small", commit, hub)
    assert r.rc == 0, r
    gets = [g for g in resolve_gets(hub) if g["path"].endswith("/model.safetensors")]
    assert [g["range"] for g in gets] == [None, "bytes=100000-"]
    assert r.result["bytes_refetched"] == 0 and r.result["bytes_fetched"] == r.result["bytes_missing"]
    assert hashlib.sha256((repo_dir(tmp_path, "org/small") / "blobs" / meta["etag"]).read_bytes()).hexdigest() \
        == meta["etag"]


def test_server_ignoring_range_is_counted_as_refetched(hub, tmp_path, monkeypatch):
    """A 200 to a Range request: the partial is truncated and the whole body kept."""
    commit, meta, data, blobs = small_shard(hub, tmp_path)
    (blobs / f"{meta['etag']}.incomplete").write_bytes(data[:40_000])
    # Make the stand-in (same process) answer every Range request with the whole body.
    import hfstandin.server as server
    monkeypatch.setattr(server, "_parse_range", lambda header, size: None)
    r = pull(tmp_path, "org/small", commit, hub)
    assert r.rc == 0, r
    assert "ignored the Range request" in r.out
    assert r.result["bytes_refetched"] == 40_000
    assert hashlib.sha256((blobs / meta["etag"]).read_bytes()).hexdigest() == meta["etag"]


def test_transient_503_is_retried(hub, tmp_path):
    commit = hub.commit("org/other", "main")
    hub.configure(inject_status=503, inject_count=1, inject_match="/resolve/")
    r = pull(tmp_path, "org/other", commit, hub)
    assert r.rc == 0, r
    assert scan(tmp_path)["repos"]["org/other"]["revisions"][commit]["verified"]


def test_gated_repo_without_then_with_token(hub, tmp_path):
    commit = hub.commit("org/gated", "main")
    r = pull(tmp_path, "org/gated", "main", hub)
    assert r.rc == 3, r
    assert r.err.startswith("pull failed: GatedRepo: ") and r.err.count("\n") == 1
    assert r.err.rstrip().endswith("(repo org/gated, revision main)")
    assert "127.0.0.1" not in r.err and "http" not in r.err and "Traceback" not in r.err
    assert not repo_dir(tmp_path, "org/gated").exists()  # nothing was written, nothing is left

    wrong = tmp_path / "wrong-token"
    wrong.write_text("hf_not_the_right_one\n")
    r = pull(tmp_path, "org/gated", "main", hub, "--token-file", str(wrong))
    assert r.rc == 3 and "GatedRepo" in r.err, r
    assert "hf_not_the_right_one" not in r.out + r.err

    token_file = tmp_path / "token"
    token_file.write_text(f"  {TOKEN}\n")
    hub.reset()
    r = pull(tmp_path, "org/gated", "main", hub, "--token-file", str(token_file))
    assert r.rc == 0, r
    assert r.result["commit"] == commit and r.result["files_fetched"] == 2
    assert TOKEN not in r.out + r.err
    assert all(req["authorized"] for req in hub.requests())


def test_token_file_reading(tmp_path):
    f = tmp_path / "t"
    f.write_text(f"\n  {TOKEN} \n")
    assert hfpull.read_token(str(f)) == TOKEN
    f.write_text(" \n")
    assert hfpull.read_token(str(f)) is None and hfpull.read_token(None) is None
    with pytest.raises(pull_errors.PullError) as err:
        hfpull.read_token(str(tmp_path / "absent"))
    assert err.value.code == pull_errors.EXIT_USAGE


def test_token_is_dropped_on_a_redirect_to_another_origin(cdn_hub, tmp_path):
    commit = cdn_hub.commit("org/gated", "main")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    r = pull(tmp_path / "cache", "org/gated", commit, cdn_hub, "--token-file", str(token_file))
    assert r.rc == 0, r
    reqs = cdn_hub.requests()
    cdn = [q for q in reqs if q["listener"] == "cdn"]
    assert [q["method"] for q in cdn] == ["GET"] and not cdn[0]["authorized"]
    assert all(q["authorized"] for q in reqs if q["listener"] == "hub")
    assert TOKEN not in r.out + r.err
    assert layout(tmp_path / "cache", "org/gated")["blobs"] == sorted(
        cdn_hub.file_meta("org/gated", commit, p)["etag"] for p in cdn_hub.files("org/gated", commit))


def file_location_headers(monkeypatch, tmp_path, endpoint, location, library_rule=None):
    """The headers the pull sends to ``location`` when the Hub's HEAD of a file at ``endpoint`` points there."""
    from types import SimpleNamespace

    blob = Blob(name="e" * 64, size=10, lfs=True, paths=["model.safetensors"])
    meta = SimpleNamespace(commit_hash="c" * 40, etag=blob.name, size=blob.size, location=location)
    monkeypatch.setattr(transfer, "get_hf_file_metadata", lambda *args, **kwargs: meta)
    if library_rule is not None:
        monkeypatch.setattr(transfer, "_is_same_or_hub_host", library_rule)
    fetcher = Transfer("org/gated", "c" * 40, endpoint, TOKEN, 1, None, None, None)
    return fetcher.location(blob.paths[0], blob)


def same_host(url, target):
    """huggingface_hub 1.x's rule for keeping the token across a redirect: the same host, whatever the scheme."""
    from urllib.parse import urlsplit

    return urlsplit(url).hostname == urlsplit(target).hostname


@pytest.mark.parametrize("library_rule", [None, same_host])
def test_the_token_is_dropped_on_a_redirect_from_https_to_http_on_the_same_host(monkeypatch, tmp_path,
                                                                                 library_rule):
    location, headers = file_location_headers(monkeypatch, tmp_path, "https://mirror.example",
                                              "http://mirror.example/lfs/blob", library_rule)
    assert location == "http://mirror.example/lfs/blob"
    assert "authorization" not in {k.lower() for k in headers} and TOKEN not in json.dumps(headers)
    # The same origin, still https, keeps it: the rule drops only what must be dropped.
    _, kept = file_location_headers(monkeypatch, tmp_path, "https://mirror.example",
                                    "https://mirror.example/lfs/blob", library_rule)
    assert kept["authorization"] == f"Bearer {TOKEN}"


def test_missing_repo_and_revision(hub, tmp_path):
    r = pull(tmp_path, "org/nope", "main", hub)
    assert r.rc == 3 and r.err.startswith("pull failed: RepoNotFound: "), r
    assert r.err.count("\n") == 1 and "(repo org/nope, revision main)" in r.err and "Traceback" not in r.err
    assert not repo_dir(tmp_path, "org/nope").exists()

    r = pull(tmp_path, "org/small", "f" * 40, hub)  # a commit id the Hub does not know
    assert r.rc == 3 and r.err.startswith("pull failed: RevisionNotFound: "), r
    assert f"(repo org/small, revision {'f' * 40})" in r.err and "Traceback" not in r.err



def test_hand_pull_first_is_adopted_without_downloading(hub, tmp_path):
    commit = hub.commit("org/small", "main")
    hand_pull(tmp_path, "org/small", commit, hub)
    rev = scan(tmp_path)["repos"]["org/small"]["revisions"][commit]
    assert rev["verified"] is False and rev["complete"] is False and rev["files"] == 5
    assert rev["size"] == sum(hub.file_meta("org/small", commit, p)["size"] for p in hub.files("org/small", commit))
    hub.reset()

    r = pull(tmp_path, "org/small", commit, hub)

    assert r.rc == 0, r
    assert r.result["bytes_fetched"] == 0 and r.result["files_fetched"] == 0 and r.result["changed"] is True
    assert resolve_gets(hub) == []
    assert scan(tmp_path)["repos"]["org/small"]["revisions"][commit]["verified"]


def test_hand_pull_after_ours_shares_blobs(hub, pulled):
    tmp_path = pulled
    old, new = hub.commit("org/small", "old"), hub.commit("org/small", "main")
    before = {p.name: p.stat().st_ino for p in (repo_dir(tmp_path, "org/small") / "blobs").iterdir()}
    hub.reset()
    hand_pull(tmp_path, "org/small", old, hub)  # an admin pulls the older commit by hand
    got = [g["path"].rsplit("/", 1)[1] for g in resolve_gets(hub)]
    assert got == ["config.json"]  # the only file of `old` whose content is not already a blob
    after = {p.name: p.stat().st_ino for p in (repo_dir(tmp_path, "org/small") / "blobs").iterdir()}
    assert {k: after[k] for k in before} == before and len(after) == len(before) + 1
    shared = etag(hub, "org/small", old, "model.safetensors")
    assert os.path.realpath(repo_dir(tmp_path, "org/small") / "snapshots" / old / "model.safetensors") == \
        os.path.realpath(repo_dir(tmp_path, "org/small") / "snapshots" / new / "model.safetensors") == \
        str((repo_dir(tmp_path, "org/small") / "blobs" / shared).resolve())
    state = scan(tmp_path)["repos"]["org/small"]["revisions"]
    assert state[new]["verified"] and not state[old]["verified"]  # our manifest still holds
    assert scan_cache_dir(tmp_path).warnings == []


def test_deleted_blob_makes_the_revision_incomplete_and_is_fetched_again(hub, pulled):
    tmp_path = pulled
    commit = hub.commit("org/small", "main")
    meta = hub.file_meta("org/small", commit, "model-2.safetensors")
    (repo_dir(tmp_path, "org/small") / "blobs" / meta["etag"]).unlink()
    rev = scan(tmp_path)["repos"]["org/small"]["revisions"][commit]
    assert rev["complete"] is False and rev["problems"] == ["missing blob for model-2.safetensors"]
    hub.reset()
    res = ok_pull(tmp_path, "org/small", commit, hub)
    assert res["files_fetched"] == 1 and res["bytes_fetched"] == res["bytes_missing"] == meta["size"]
    assert scan(tmp_path)["repos"]["org/small"]["revisions"][commit]["verified"]


# --------------------------------------------------------------------------- prune


def prune(cache: Path, *args: str) -> Run:
    return run("prune", "--cache-dir", str(cache), "--records-dir", str(records_of(cache)), *args)


def tree_state(cache: Path) -> list[tuple[str, int]]:
    out = []
    for root, dirs, files in os.walk(cache):
        for name in dirs + files:
            p = Path(root) / name
            out.append((str(p.relative_to(cache)), p.lstat().st_size if not p.is_dir() else 0))
    return sorted(out)


def test_prune_keeps_listed_revisions_and_shared_blobs(hub, pulled):
    tmp_path = pulled
    old, new = hub.commit("org/small", "old"), hub.commit("org/small", "main")
    other = hub.commit("org/other", "main")
    res = ok_pull(tmp_path, "org/small", "old", hub)
    assert res["files_fetched"] == 1  # config.json; the other two blobs are shared with main
    blobs = repo_dir(tmp_path, "org/other") / "blobs"
    (blobs / ("9" * 64 + ".1234abcd.incomplete")).write_bytes(b"p" * 1000)
    size = lambda r, c, p: hub.file_meta(r, c, p)["size"]  # noqa: E731
    only_old = size("org/small", old, "config.json")  # model.safetensors and tokenizer.json are shared with main
    other_total = size("org/other", other, "config.json") + size("org/other", other, "w.safetensors")
    keep = ["--keep", f"org/small@{new}"]

    before = tree_state(tmp_path)
    dry = prune(tmp_path, *keep, "--dry-run")
    assert dry.rc == 0, dry
    assert tree_state(tmp_path) == before
    assert f"prune: would remove org/small@{old[:12]} (refs: old) " in dry.out
    assert f"prune: would remove org/other@{other[:12]} (refs: none) " in dry.out
    assert dry.result["dry_run"] is True
    assert dry.result["freed_bytes"] == only_old + other_total + 1000

    r = prune(tmp_path, *keep)
    assert r.rc == 0 and r.err == "", r
    assert f"prune: org/small@{old[:12]} (refs: old) " in r.out and "prune: freed " in r.out
    assert r.result["dry_run"] is False and r.result["freed_bytes"] == dry.result["freed_bytes"]
    removed = {(x["repo_id"], x["commit"]) for x in r.result["removed"]}
    assert removed == {("org/small", old), ("org/other", other)}
    assert not repo_dir(tmp_path, "org/other").exists()
    assert not record(tmp_path, "org/small", old).exists() and record(tmp_path, "org/small", new).exists()
    assert not record(tmp_path, "org/other", other).parent.exists()   # the records of a repo that went
    assert not (repo_dir(tmp_path, "org/small") / "refs" / "old").exists()
    state = scan(tmp_path)["repos"]
    assert list(state) == ["org/small"] and list(state["org/small"]["revisions"]) == [new]
    assert state["org/small"]["revisions"][new]["verified"]
    assert scan_cache_dir(tmp_path).warnings == []

    again = prune(tmp_path, *keep)
    assert again.rc == 0 and again.result == {"removed": [], "freed_bytes": 0, "dry_run": False}


def test_prune_reports_corrupted_entries_and_skips_a_running_pull(hub, pulled):
    tmp_path = pulled
    small = hub.commit("org/small", "main")
    broken = tmp_path / "models--org--broken"
    (broken / "snapshots" / ("3" * 40)).mkdir(parents=True)
    (broken / "snapshots" / ("3" * 40) / "config.json").symlink_to("../../blobs/missing")
    lock = pull_locks.FileLock(str(repo_dir(tmp_path, "org/other") / pull_locks.PULL_LOCK))
    assert lock.try_acquire()
    try:
        r = prune(tmp_path, "--keep", f"org/small@{small}")
    finally:
        lock.release()
    assert r.rc == 0, r
    assert "prune: warning (left as is): Blob missing" in r.out
    assert "prune: skipping org/other: a pull is running" in r.out
    assert r.result["removed"] == [] and broken.exists() and repo_dir(tmp_path, "org/other").exists()


def test_prune_argument_errors(tmp_path, capsys):
    r = prune(tmp_path, "--keep", "no-at-sign")
    assert r.rc == 2 and r.err.startswith("prune failed: --keep wants ORG/NAME@COMMIT"), r
    assert hfpull.main(["prune", "--cache-dir", str(tmp_path / "absent"), "--records-dir", str(tmp_path / "r"),
                        "--keep", "a/b@" + "1" * 40]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == \
        'SGLANG_PRUNE_RESULT {"dry_run": false, "freed_bytes": 0, "removed": []}'


def test_a_blob_rewritten_with_its_mtime_put_back_is_hashed_again_and_fetched(hub, pulled):
    """A member rewrites a verified blob (same size) and `touch -d`s the old mtime back: its ctime moved, so the
    pull hashes it again instead of taking the manifest's word."""
    tmp_path = pulled
    commit = hub.commit("org/small", "main")
    meta = hub.file_meta("org/small", commit, "model.safetensors")
    blob = repo_dir(tmp_path, "org/small") / "blobs" / meta["etag"]
    st = blob.stat()
    time.sleep(0.02)
    data = bytearray(blob.read_bytes())
    data[7] ^= 0xFF
    blob.write_bytes(bytes(data))
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))
    hub.reset()
    r = pull(tmp_path, "org/small", commit, hub)
    assert r.rc == 0, r
    assert "already verified" not in r.out and "blob on disk is wrong" in r.out
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == meta["etag"]
    assert scan(tmp_path)["repos"]["org/small"]["revisions"][commit]["verified"]


def test_the_mode_is_set_on_the_verified_file_not_on_a_link_swapped_in(hub, tmp_path, monkeypatch):
    """Between the verify and the chmod, a member swaps the partial for a link to a file the account owns (a
    compose file): the chmod by path made that file group-writable."""
    victim = tmp_path / "compose.yaml"
    victim.write_text("services: {}\n")
    victim.chmod(0o644)
    commit = hub.commit("org/small", "main")
    original = Puller._verify

    def racing(self, blob, where):
        why = original(self, blob, where)
        partial = os.path.join(self.blobs_dir, blob.name + ".incomplete")
        if why is None and os.path.isfile(partial) and not os.path.islink(partial):
            os.rename(partial, partial + ".moved")
            os.symlink(victim, partial)
        return why

    monkeypatch.setattr(Puller, "_verify", racing)
    puller = Puller(str(tmp_path / "hub"), "org/small", commit, hub.url, None, lock_wait=5,
                    records_dir=str(tmp_path / "hub-verified"))
    try:
        puller.run()
    except Exception:
        pass  # the swapped file is refused; what matters is the victim's mode
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644
    blobs = repo_dir(tmp_path / "hub", "org/small") / "blobs"
    assert not [n for n in os.listdir(blobs) if (blobs / n).is_symlink() and not n.endswith(".incomplete")]


def member_flips_a_byte(path: Path, fd: int | None = None) -> None:
    """A member's write of the same size: in place (same inode), through ``fd`` when one was opened earlier."""
    own = fd is None
    fd = os.open(path, os.O_RDWR) if fd is None else fd
    try:
        os.pwrite(fd, bytes([os.pread(fd, 1, 7)[0] ^ 0xFF]), 7)
    finally:
        if own:
            os.close(fd)


def test_a_blob_rewritten_after_its_hash_gets_no_record(hub, tmp_path, monkeypatch):
    """A member rewrites a verified blob while the rest of the revision is still being pulled: the record, its
    stat read only at the end, vouched for the new bytes under the old sha256 (and status said verified)."""
    cache = tmp_path / "hub"
    commit = hub.commit("org/other", "main")
    blob = repo_dir(cache, "org/other") / "blobs" / etag(hub, "org/other", commit, "w.safetensors")
    original = Puller._write_manifest

    def rewritten_first(self, blobs, commit_):
        member_flips_a_byte(blob)
        return original(self, blobs, commit_)

    monkeypatch.setattr(Puller, "_write_manifest", rewritten_first)
    puller = Puller(str(cache), "org/other", commit, hub.url, None, lock_wait=5, records_dir=str(records_of(cache)))
    with pytest.raises(pull_errors.VerifyError, match="w.safetensors: its blob .* changed after it was verified"):
        puller.run()
    assert not record(cache, "org/other", commit).exists()
    assert not scan(cache)["repos"]["org/other"]["revisions"][commit]["verified"]
    monkeypatch.setattr(Puller, "_write_manifest", original)
    r = pull(cache, "org/other", commit, hub)
    assert r.rc == 0 and "blob on disk is wrong" in r.out, r
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name
    assert scan(cache)["repos"]["org/other"]["revisions"][commit]["verified"]


def test_a_partial_is_not_group_writable_while_it_is_fetched_and_hashed(hub, tmp_path, monkeypatch):
    """Under the group's umask (002) the partial was created 0664 (and an adopted one stayed so): any member
    could open it for writing and change the bytes between the hash and the record."""
    cache = tmp_path / "hub"
    commit = hub.commit("org/other", "main")
    modes = []
    original = Puller._verify

    def seen(self, blob, fd):
        modes.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return original(self, blob, fd)

    monkeypatch.setattr(Puller, "_verify", seen)
    old = os.umask(0o002)
    try:
        Puller(str(cache), "org/other", commit, hub.url, None, lock_wait=5,
               records_dir=str(records_of(cache))).run()
    finally:
        os.umask(old)
    assert modes and all(mode & 0o022 == 0 for mode in modes), [oct(m) for m in modes]
    blobs = repo_dir(cache, "org/other") / "blobs"
    assert {stat.S_IMODE(p.stat().st_mode) for p in blobs.iterdir()} == {0o664}  # verified: the cache's mode
    assert scan(cache)["repos"]["org/other"]["revisions"][commit]["verified"]


def test_a_write_through_a_descriptor_opened_before_the_hash_is_caught(hub, tmp_path, monkeypatch):
    """A member opened the partial while it was group-writable and writes through that descriptor while the pull
    hashes it: the hash counted and the changed bytes were recorded as verified. Now the hash does not count:
    the file is fetched again from byte 0 and what is recorded is the Hub's bytes."""
    cache = tmp_path / "hub"
    commit = hub.commit("org/other", "main")
    name = etag(hub, "org/other", commit, "w.safetensors")
    original = Puller._verify
    writes = []

    def racing(self, blob, fd):
        partial = Path(self.blobs_dir) / (blob.name + ".incomplete")
        held = os.open(partial, os.O_RDWR) if blob.name == name and not writes else None
        why = original(self, blob, fd)
        if held is not None:
            member_flips_a_byte(partial, held)
            os.close(held)
            writes.append(partial)
        return why

    monkeypatch.setattr(Puller, "_verify", racing)
    Puller(str(cache), "org/other", commit, hub.url, None, lock_wait=5, records_dir=str(records_of(cache))).run()
    assert writes
    blob = repo_dir(cache, "org/other") / "blobs" / name
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == name
    assert scan(cache)["repos"]["org/other"]["revisions"][commit]["verified"]


def test_a_hard_linked_partial_is_neither_written_nor_re_moded(hub, tmp_path):
    """A member plants, at a blob's partial name, a hard link to a file of the account's (a compose file): the
    pull (as the account) would write the blob's bytes into it and make it group-writable."""
    victim = tmp_path / "compose.yaml"
    victim.write_text("services: {}\n")
    victim.chmod(0o644)
    commit = hub.commit("org/other", "main")
    blobs = repo_dir(tmp_path / "hub", "org/other") / "blobs"
    blobs.mkdir(parents=True)
    partial = blobs / (etag(hub, "org/other", commit, "w.safetensors") + ".incomplete")
    os.link(victim, partial)
    r = pull(tmp_path / "hub", "org/other", commit, hub)
    assert r.rc == 3 and f"{partial} has 2 hard links, which the pull never makes" in r.err, r
    assert victim.read_text() == "services: {}\n" and stat.S_IMODE(victim.stat().st_mode) == 0o644


def test_prune_removes_only_blobs_of_the_repos_own_blobs_dir(hub, pulled):
    """huggingface_hub takes a snapshot link's target as the blob to delete: a member's link from a pruned
    revision to a file of the account's (a compose file) or to another repo's kept blob had that file deleted."""
    tmp_path = pulled
    old, new = hub.commit("org/small", "old"), hub.commit("org/small", "main")
    other = hub.commit("org/other", "main")
    ok_pull(tmp_path, "org/small", "old", hub)
    victim = tmp_path.parent / "compose.yaml"
    victim.write_text("services: {}\n")
    kept_blob = next((repo_dir(tmp_path, "org/other") / "blobs").iterdir())
    snap = repo_dir(tmp_path, "org/small") / "snapshots" / old
    (snap / "stolen.yaml").symlink_to(os.path.relpath(victim, snap))
    (snap / "borrowed.bin").symlink_to(os.path.relpath(kept_blob, snap))

    r = prune(tmp_path, "--keep", f"org/small@{new}", "--keep", f"org/other@{other}")
    assert r.rc == 0, r
    assert {(x["repo_id"], x["commit"]) for x in r.result["removed"]} == {("org/small", old)}
    assert victim.read_text() == "services: {}\n" and kept_blob.exists()
    assert f"prune: leaving {victim}" in r.out and f"prune: leaving {kept_blob}" in r.out
    assert not snap.exists()
    state = scan(tmp_path)["repos"]
    assert state["org/other"]["revisions"][other]["verified"] and state["org/small"]["revisions"][new]["verified"]


# --------------------------------------------------------------------------- records a member could have written


def forge(cache: Path, hub: StandinHub, commit: str) -> tuple[Path, dict, dict]:
    """Issue 31 item 2, as a member of the group can do it in hf-cache: rewrite a verified blob in place (same
    size), then a record of the revision with the blob's new inode and ctime, its sha256 (and so the lock's
    content digest) kept. (the blob, its Hub metadata, the forged record)"""
    meta = hub.file_meta("org/small", commit, "model.safetensors")
    blob = repo_dir(cache, "org/small") / "blobs" / meta["etag"]
    data = bytearray(blob.read_bytes())
    data[4321] ^= 0xFF
    blob.write_bytes(bytes(data))
    forged = json.loads(record(cache, "org/small", commit).read_text())
    st = blob.stat()
    for entry in forged["files"]:
        if entry["blob"] == meta["etag"]:
            entry.update(ino=st.st_ino, ctime_ns=st.st_ctime_ns, mtime_ns=st.st_mtime_ns)
    return blob, meta, forged


def assert_rehashed_and_refetched(r: Run, hub: StandinHub, blob: Path, meta: dict) -> None:
    """What the pull does with a blob whose content is not its name's: hashed, found wrong, fetched again."""
    assert r.rc == 0, r
    assert "already verified" not in r.out and "blob on disk is wrong" in r.out, r
    assert r.result["files_fetched"] == 1 and r.result["bytes_fetched"] == meta["size"]
    assert [g["path"].rsplit("/", 1)[1] for g in resolve_gets(hub)] == ["model.safetensors"]
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == meta["etag"]


def test_a_forged_record_in_hf_cache_verifies_nothing_and_the_blob_is_hashed_again(hub, pulled):
    """The member writes the forged record where pulls used to keep them (<repo folder>/.sglang/, in the
    group-writable cache): it is never read; the snapshot says not verified and the pull hashes the blob."""
    commit = hub.commit("org/small", "main")
    blob, meta, forged = forge(pulled, hub, commit)
    old_place = repo_dir(pulled, "org/small") / ".sglang" / f"{commit}.json"
    old_place.parent.mkdir()
    old_place.write_text(json.dumps(forged))
    old_place.chmod(0o664)
    record(pulled, "org/small", commit).unlink()   # a host whose only record was the old one, in hf-cache
    rev = scan(pulled)["repos"]["org/small"]["revisions"][commit]
    assert rev["verified"] is False and rev["complete"] is False
    hub.reset()
    assert_rehashed_and_refetched(pull(pulled, "org/small", commit, hub), hub, blob, meta)
    assert json.loads(old_place.read_text()) == forged   # left as it was, and still ignored
    assert scan(pulled)["repos"]["org/small"]["revisions"][commit]["verified"]


def test_a_forged_record_in_a_group_writable_records_folder_is_not_trusted_nor_written_to(hub, pulled):
    """Had the records folder been left group-writable, a member's record in it counts as none: the blob is
    hashed again and fetched, and the pull refuses to record into that folder (naming it)."""
    commit = hub.commit("org/small", "main")
    blob, meta, forged = forge(pulled, hub, commit)
    path = record(pulled, "org/small", commit)
    path.parent.chmod(0o775)
    path.write_text(json.dumps(forged))
    assert scan(pulled)["repos"]["org/small"]["revisions"][commit]["verified"] is False
    hub.reset()
    r = pull(pulled, "org/small", commit, hub)
    assert r.rc == pull_errors.EXIT_REMOTE and "blob on disk is wrong" in r.out, r
    assert f"{path.parent} is not the account's alone" in r.err, r
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == meta["etag"]
    assert json.loads(path.read_text()) == forged   # nothing written into it
    path.parent.chmod(0o755)
    path.unlink()
    assert ok_pull(pulled, "org/small", commit, hub)["bytes_fetched"] == 0
    assert scan(pulled)["repos"]["org/small"]["revisions"][commit]["verified"]


@pytest.mark.parametrize("kind", ["group-writable", "link"])
def test_a_record_a_member_could_have_written_makes_the_pull_hash_again(hub, pulled, kind):
    """Even a record true to the disk counts as none when it is group-writable or a link: every blob is hashed
    again (nothing fetched), and the pull's own record takes its place."""
    commit = hub.commit("org/small", "main")
    path = record(pulled, "org/small", commit)
    if kind == "group-writable":
        path.chmod(0o664)
    else:
        path.rename(pulled / "kept.json")
        path.symlink_to(pulled / "kept.json")
    assert scan(pulled)["repos"]["org/small"]["revisions"][commit]["verified"] is False
    hub.reset()
    r = ok_pull(pulled, "org/small", commit, hub)
    assert r["bytes_fetched"] == 0 and r["changed"] is True
    assert not path.is_symlink() and stat.S_IMODE(path.lstat().st_mode) == 0o644
    assert scan(pulled)["repos"]["org/small"]["revisions"][commit]["verified"]


def test_records_left_in_hf_cache_by_older_pulls_are_ignored_and_the_disk_verified_again(hub, pulled):
    """After the upgrade: the records are in <repo folder>/.sglang/ only. The revision counts as unverified; the
    next pull hashes every blob (no download) and records it outside hf-cache; the old file is left as it is."""
    commit = hub.commit("org/small", "main")
    old_place = repo_dir(pulled, "org/small") / ".sglang" / f"{commit}.json"
    old_place.parent.mkdir()
    record(pulled, "org/small", commit).rename(old_place)
    before = old_place.read_bytes()
    assert scan(pulled)["repos"]["org/small"]["revisions"][commit]["verified"] is False
    hub.reset()
    r = pull(pulled, "org/small", commit, hub)
    assert r.rc == 0 and r.result["bytes_fetched"] == 0, r
    assert "sha256 verified" in r.out and "already verified" not in r.out
    assert [g for g in resolve_gets(hub)] == []
    assert record(pulled, "org/small", commit).exists() and old_place.read_bytes() == before
    assert scan(pulled)["repos"]["org/small"]["revisions"][commit]["verified"]


def tree_of(folder: Path) -> dict[str, str]:
    """Every entry under ``folder`` (not following links): its kind and content."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            out[str(full.relative_to(folder))] = (f"-> {os.readlink(full)}" if full.is_symlink() else
                                                  "dir" if full.is_dir() else full.read_text())
    return out


@pytest.mark.parametrize("planted", ["hub", "models--org--small", "models--org--small/blobs",
                                     "models--org--small/snapshots/{commit}", ".locks",
                                     ".locks/models--org--small"])
def test_a_link_planted_at_any_level_of_the_cache_is_never_followed(hub, tmp_path, planted):
    """A member of the group (hf-cache is group-writable, 2775 as on a host) makes a directory of the cache a link
    into another folder the account writes (its docker/): the pull refuses, naming the link, and writes nothing
    there."""
    hf_cache = tmp_path / "hf-cache"
    hf_cache.mkdir()
    hf_cache.chmod(0o2775)
    cache = hf_cache / "hub"
    cache.mkdir()
    docker = tmp_path / "docker"
    docker.mkdir()
    (docker / "compose.yaml").write_text("services: {}\n")
    before = tree_of(docker)
    link = hf_cache / planted.format(commit=hub.commit("org/small", "main")) if planted == "hub" else \
        cache / planted.format(commit=hub.commit("org/small", "main"))
    if planted == "hub":
        cache.rmdir()
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(docker)

    r = pull(cache, "org/small", "main", hub)

    assert r.rc != 0, r
    assert f"{link} is a symlink; refusing to follow it" in r.err and "Traceback" not in r.err, r
    assert tree_of(docker) == before
