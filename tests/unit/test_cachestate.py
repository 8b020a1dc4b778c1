"""cachestate.scan on hand-built huggingface_hub cache trees (no network, no Hub).

The same module is also checked against real pulls in test_hfpull.py."""

from __future__ import annotations

import ast
import builtins
import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_infra.hostside.pull import manifest
from sglang_infra.hostside.read import cachestate
from sglang_infra.machine import ship

C1 = "1" * 40
C2 = "2" * 40


def blob_name(data: bytes, lfs: bool) -> str:
    if lfs:
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def records_of(cache: Path) -> Path:
    """Where the tests keep the pull's records of ``cache``: beside it (on a host: verified/ in the home)."""
    return cache.with_name(cache.name + "-verified")


def record(cache: Path, repo_id: str, commit: str) -> Path:
    return records_of(cache) / ("models--" + repo_id.replace("/", "--")) / f"{commit}.json"


def scan(cache: Path, budget=None, records: Path | None = None) -> dict:
    """cachestate.scan with the records of ``cache``, trusted when root's or this user's."""
    return cachestate.scan(str(cache), manifest.Records(str(records or records_of(cache)), manifest.owners()), budget)


def make_revision(cache: Path, repo_id: str, commit: str, files: dict[str, bytes], *, manifest: bool = True,
                  refs: dict[str, str] | None = None, records: Path | None = None) -> Path:
    """A revision laid out the way huggingface_hub lays it out, plus hfpull's record (0644 in a 0755 folder)."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    entries = []
    for path, data in files.items():
        lfs = path.endswith(".safetensors")
        name = blob_name(data, lfs)
        blob = repo / "blobs" / name
        if not blob.exists():
            blob.write_bytes(data)
        link = repo / "snapshots" / commit / path
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
        st = blob.stat()
        entries.append({"path": path, "blob": name, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                        "ino": st.st_ino, "ctime_ns": st.st_ctime_ns, "lfs": lfs,
                        "sha256": hashlib.sha256(data).hexdigest()})
    if manifest:
        path = (records or records_of(cache)) / repo.name / f"{commit}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        for d in (path.parent.parent, path.parent):
            d.chmod(0o755)
        path.write_text(json.dumps({"repo_id": repo_id, "commit": commit, "files": entries, "verified_at": 1}))
        path.chmod(0o644)
    for name, target in (refs or {}).items():
        ref = repo / "refs" / name
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(target)
    return repo


FILES = {"config.json": b'{"a": 1}', "sub/tokenizer.json": b"{}",
         "model.safetensors": b"\x01" * 4096}


def test_missing_cache_dir(tmp_path):
    assert cachestate.scan(str(tmp_path / "nope")) == {"repos": {}, "stopped_early": None}


def test_verified_revision_and_ignored_entries(tmp_path):
    make_revision(tmp_path, "org/m", C1, FILES, refs={"main": C1, "refs/pr/1": C1})
    (tmp_path / "datasets--org--d" / "snapshots").mkdir(parents=True)
    (tmp_path / ".locks" / "models--org--m").mkdir(parents=True)
    (tmp_path / "version.txt").write_text("1")
    (tmp_path / "CACHEDIR.TAG").write_text("Signature")
    repo = tmp_path / "models--org--m"
    (repo / ".sglang-pull.lock").write_text("")
    (repo / "trees").mkdir()
    (repo / "blobs" / ("a" * 64 + ".0badf00d.incomplete")).write_bytes(b"x" * 10)

    state = scan(tmp_path)
    assert list(state["repos"]) == ["org/m"]
    entry = state["repos"]["org/m"]
    assert entry["folder"] == "models--org--m"
    assert entry["refs"] == {"main": C1, "refs/pr/1": C1}
    # The content digest a lock records (sglang_infra/models/lockfile.py): path, size and sha256 of each file, in path
    # order.
    content = hashlib.sha256(b"".join(b"%s\0%d\0%s\n" % (p.encode(), len(FILES[p]), hashlib.sha256(
        FILES[p]).hexdigest().encode()) for p in sorted(FILES))).hexdigest()
    # The blobs the record names (what a peer door may serve), by their cache names.
    blobs = sorted(blob_name(data, path.endswith(".safetensors")) for path, data in FILES.items())
    assert entry["revisions"] == {C1: {"complete": True, "verified": True, "files": 3,
                                       "size": sum(len(d) for d in FILES.values()), "problems": [],
                                       "content": content, "blobs": blobs}}
    assert entry["partials"] == [{"name": "a" * 64 + ".0badf00d.incomplete", "size": 10}]


def test_problems_make_a_revision_incomplete(tmp_path):
    repo = make_revision(tmp_path, "org/m", C1, FILES)
    blobs = {p: repo / "snapshots" / C1 / p for p in FILES}
    blobs["config.json"].resolve().unlink()  # missing blob (dangling link)
    with open(blobs["model.safetensors"].resolve(), "ab") as f:  # size changed
        f.write(b"!")
    link = blobs["sub/tokenizer.json"]
    link.unlink()  # missing link

    rev = scan(tmp_path)["repos"]["org/m"]["revisions"][C1]
    assert rev["complete"] is False and rev["verified"] is False
    assert sorted(rev["problems"]) == ["missing blob for config.json", "missing link for sub/tokenizer.json",
                                       "size changed for model.safetensors"]


def test_touched_blob_and_wrong_link(tmp_path):
    repo = make_revision(tmp_path, "org/m", C1, FILES)
    snap = repo / "snapshots" / C1
    st = (snap / "config.json").stat()
    os.utime(snap / "config.json", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    other = repo / "blobs" / ("b" * 40)
    other.write_bytes(b"{}")
    (snap / "sub" / "tokenizer.json").unlink()
    (snap / "sub" / "tokenizer.json").symlink_to(os.path.relpath(other, snap / "sub"))

    rev = scan(tmp_path)["repos"]["org/m"]["revisions"][C1]
    assert not rev["verified"]
    assert sorted(rev["problems"]) == ["blob of config.json changed since it was verified (inode or ctime)",
                                       "wrong link for sub/tokenizer.json"]


def test_snapshot_without_manifest_is_unverified(tmp_path):
    """An admin's hand pull: listed with the size of what is present, never verified."""
    repo = make_revision(tmp_path, "org/m", C1, FILES, manifest=False)
    make_revision(tmp_path, "org/m", C2, {"config.json": FILES["config.json"], "new.json": b"[1]"},
                  manifest=False)
    (repo / "snapshots" / C2 / "new.json").resolve().unlink()

    revs = scan(tmp_path)["repos"]["org/m"]["revisions"]
    assert revs[C1] == {"complete": False, "verified": False, "files": 3,
                        "size": sum(len(d) for d in FILES.values()), "problems": []}
    assert revs[C2] == {"complete": False, "verified": False, "files": 2, "size": len(FILES["config.json"]),
                        "problems": ["missing blob for new.json"]}


def test_manifest_without_snapshot(tmp_path):
    repo = make_revision(tmp_path, "org/m", C1, {"config.json": b"{}"})
    import shutil
    shutil.rmtree(repo / "snapshots" / C1)
    rev = scan(tmp_path)["repos"]["org/m"]["revisions"][C1]
    assert rev["complete"] is False and rev["problems"] == ["missing link for config.json"]


def test_shared_blob_counted_once(tmp_path):
    make_revision(tmp_path, "org/m", C1, {"a.safetensors": b"x" * 100, "b.safetensors": b"x" * 100})
    rev = scan(tmp_path)["repos"]["org/m"]["revisions"][C1]
    assert rev["files"] == 2 and rev["size"] == 100 and rev["verified"]


def test_never_reads_blob_contents(tmp_path, monkeypatch):
    """Stat only: hundreds of files, and no blob is ever opened."""
    files = {f"shard-{i:04d}.safetensors": i.to_bytes(4, "big") * 64 for i in range(300)}
    make_revision(tmp_path, "org/big", C1, files)
    real_open = builtins.open

    def guarded_open(file, *args, **kwargs):
        assert "/blobs/" not in str(file), f"blob opened: {file}"
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    rev = scan(tmp_path)["repos"]["org/big"]["revisions"][C1]
    assert rev["verified"] and rev["files"] == 300


def test_the_snapshot_program_reads_the_cache_as_python_c_with_the_system_python(tmp_path):
    make_revision(tmp_path / "hf-cache" / "hub", "org/m", C1, FILES, refs={"main": C1}, records=tmp_path / "verified")
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    spec = {"user": "nobody-here", "home": str(tmp_path), "tools_dir": str(tmp_path / "tools"), "admins": [],
            "groups": [], "uid": None, "gid": None, "dirs": []}
    # as the run sends it (run/facts.Snapshot: through the code cache, compressed; uncompressed the bundle is past
    # one argument's 128 KiB since the vendor keyrings' reader, hostside/read/openpgp.py, joined it)
    program = ship.cached_program("read.snapshot", str(tmp_path / "codecache"))
    out = subprocess.run([python, "-I", "-S", "-c", program, json.dumps(spec)], capture_output=True,
                         text=True, timeout=60, check=True, input=ship.cached_sources("read.snapshot")).stdout
    assert out.count("\n") == 1
    found = json.loads(out)["models"]
    assert found == {**scan(tmp_path / "hf-cache" / "hub", records=tmp_path / "verified"), "referenced": []}
    assert found["repos"]["org/m"]["revisions"][C1]["verified"]   # the record in the home's verified/


@pytest.mark.parametrize("name", ship.programs())
def test_host_programs_fit_the_target_hosts(name):
    """Python 3.9 syntax and the standard library only (pull/: hfpull.py, pull.py, transfer.py, peers.py,
    pull_errors.py, prune.py and hublimits.py also have huggingface_hub, in the pull's venv; toolchain_check.py runs
    inside the image, whose Python has pip; gateway_launch.py inside the gateway's image, which has sglang-router)."""
    source = ship.path_of(name).read_text()
    tree = ast.parse(source, feature_version=(3, 9))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}
    allowed = set(sys.stdlib_module_names) | {"pull.hfpull": {"huggingface_hub", "httpx2"},
                                              "pull.pull": {"huggingface_hub", "httpx2"},
                                              "pull.transfer": {"huggingface_hub", "httpx2"},
                                              "pull.peers": {"httpx2"},
                                              "pull.hublimits": {"httpx2"},
                                              "pull.pull_errors": {"huggingface_hub", "httpx2"},
                                              "pull.prune": {"huggingface_hub"},
                                              "toolchain_check": {"pip"},
                                              "gateway_launch": {"smg"}}.get(name, set())
    assert imported <= allowed


@pytest.mark.parametrize("bad", ["{not json", json.dumps({"commit": "other", "files": []})])
def test_unreadable_manifest_counts_as_none(tmp_path, bad):
    make_revision(tmp_path, "org/m", C1, {"config.json": b"{}"})
    record(tmp_path, "org/m", C1).write_text(bad)
    rev = scan(tmp_path)["repos"]["org/m"]["revisions"][C1]
    assert rev["verified"] is False and rev["files"] == 1


def test_a_rewritten_blob_with_its_mtime_put_back_is_not_verified(tmp_path):
    """A member of the group rewrites a blob (same size) and `touch -d`s its mtime back: size, mtime and the
    link all match the manifest, the ctime does not."""
    import time

    repo = make_revision(tmp_path, "org/m", C1, FILES)
    blob = (repo / "snapshots" / C1 / "model.safetensors").resolve()
    st = blob.stat()
    time.sleep(0.02)
    blob.write_bytes(b"\x02" * 4096)
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (blob.stat().st_size, blob.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    rev = scan(tmp_path)["repos"]["org/m"]["revisions"][C1]
    assert not rev["verified"]
    assert rev["problems"] == ["blob of model.safetensors changed since it was verified (inode or ctime)"]


def test_a_manifest_without_inode_and_ctime_is_not_trusted(tmp_path):
    make_revision(tmp_path, "org/m", C1, FILES)
    path = record(tmp_path, "org/m", C1)
    data = json.loads(path.read_text())
    for item in data["files"]:
        del item["ino"], item["ctime_ns"]
    path.write_text(json.dumps(data))
    rev = scan(tmp_path)["repos"]["org/m"]["revisions"][C1]
    assert not rev["verified"] and all("hashed again" in p for p in rev["problems"])


@pytest.fixture
def members_cache(tmp_path):
    """hf-cache as on a host: its directories belong to the account, not root (links in them are members')."""
    hub = tmp_path / "hf-cache" / "hub"
    hub.mkdir(parents=True)
    if os.geteuid() == 0:
        for d in (tmp_path, tmp_path / "hf-cache", hub):
            os.chown(d, 65534, 65534)
    secrets = tmp_path / "etc"
    secrets.mkdir()
    (secrets / "shadow").write_text("root:$6$secret-hash:19000::::::\n")
    return hub, secrets


def test_no_link_in_the_cache_is_followed(members_cache):
    """refs/ a link to /etc read the start of every file there; snapshots/<rev> or a repo folder a link to /
    walked the whole filesystem; an unverified snapshot's file linked outside blobs/ counted as present."""
    hub, secrets = members_cache
    repo = make_revision(hub, "org/m", C1, FILES, manifest=False)
    (repo / "refs").symlink_to(secrets)
    (repo / "snapshots" / C2).symlink_to(secrets)
    (repo / "snapshots" / C1 / "stolen.json").symlink_to(secrets / "shadow")
    (hub / "models--org--other").symlink_to(secrets)
    state = scan(hub)
    text = json.dumps(state)
    assert "secret-hash" not in text and "shadow" not in text.replace("stolen", "")
    assert list(state["repos"]) == ["org/m"]
    entry = state["repos"]["org/m"]
    assert entry["refs"] == {} and list(entry["revisions"]) == [C1]
    assert "missing blob for stolen.json" in entry["revisions"][C1]["problems"]
    assert entry["revisions"][C1]["files"] == 4 and state["stopped_early"] is None


def test_a_cache_dir_that_is_a_link_is_refused_and_said(members_cache):
    hub, secrets = members_cache
    os.rmdir(hub)
    hub.symlink_to(secrets)
    state = scan(hub)
    assert state["repos"] == {} and f"{hub} is a symlink" in state["stopped_early"]


def test_the_scan_is_bounded_and_says_when_it_stops_early(tmp_path):
    from sglang_infra.hostside import safefs

    make_revision(tmp_path, "org/m", C1, FILES)
    for i in range(50):
        make_revision(tmp_path, f"org/m{i}", C1, {"config.json": b"{}"}, manifest=False)
    state = scan(tmp_path, safefs.Budget(entries=40, seconds=60))
    assert "stopped early: more than 40 entries" in state["stopped_early"]
    assert len(state["repos"]) < 51
    deep = tmp_path / "models--org--m" / "refs"
    for _ in range(safefs.MAX_DEPTH + 5):
        deep = deep / "d"
    deep.mkdir(parents=True)
    assert "deeper than" in scan(tmp_path)["stopped_early"]


# --------------------------------------------------------------------------- records a member could have written


def _forge(repo: Path, commit: str, path: str, content: bytes) -> dict:
    """What a member of the group can do in hf-cache: rewrite a blob in place (same size), then a record of the
    revision with the blob's new inode and ctime, the lock's content digest kept (the sha256 left as it was)."""
    blob = (repo / "snapshots" / commit / path).resolve()
    blob.write_bytes(content)
    data = json.loads(record(repo.parent, "org/m", commit).read_text())
    st = blob.stat()
    for item in data["files"]:
        if item["path"] == path:
            item.update(ino=st.st_ino, ctime_ns=st.st_ctime_ns, mtime_ns=st.st_mtime_ns)
    return data


def test_a_record_in_the_old_place_in_hf_cache_is_ignored(tmp_path):
    """Issue 31 item 2: records in <repo folder>/.sglang/ (group-writable hf-cache, where pulls used to write
    them) are never read: a member's forged record there verifies nothing."""
    repo = make_revision(tmp_path, "org/m", C1, FILES)
    forged = _forge(repo, C1, "model.safetensors", b"\x02" * 4096)
    record(tmp_path, "org/m", C1).unlink()
    (repo / ".sglang").mkdir()
    (repo / ".sglang" / f"{C1}.json").write_text(json.dumps(forged))
    rev = scan(tmp_path)["repos"]["org/m"]["revisions"][C1]
    assert rev["verified"] is False and rev["complete"] is False and "content" not in rev


@pytest.mark.parametrize("where", ["record", "folder", "records dir"])
@pytest.mark.parametrize("mode_bits", [0o020, 0o002])
def test_a_record_a_member_could_have_written_counts_as_none(tmp_path, where, mode_bits):
    """Group- or other-writable: the record, its repo folder or the records dir. Even a record whose every
    entry still matches the disk counts as none (the revision is hashed again by the next pull)."""
    make_revision(tmp_path, "org/m", C1, FILES)
    path = record(tmp_path, "org/m", C1)
    target = {"record": path, "folder": path.parent, "records dir": path.parent.parent}[where]
    assert scan(tmp_path)["repos"]["org/m"]["revisions"][C1]["verified"]
    target.chmod(stat.S_IMODE(target.stat().st_mode) | mode_bits)
    rev = scan(tmp_path)["repos"]["org/m"]["revisions"][C1]
    assert rev["verified"] is False and rev["complete"] is False


def test_a_forged_record_in_a_writable_records_folder_verifies_nothing(tmp_path):
    repo = make_revision(tmp_path, "org/m", C1, FILES)
    path = record(tmp_path, "org/m", C1)
    path.parent.chmod(0o775)   # a folder the group could write into
    path.write_text(json.dumps(_forge(repo, C1, "model.safetensors", b"\x02" * 4096)))
    rev = scan(tmp_path)["repos"]["org/m"]["revisions"][C1]
    assert rev["verified"] is False and rev["problems"] == []


@pytest.mark.parametrize("kind", ["link", "link folder", "link records dir", "fifo", "directory"])
def test_a_record_that_is_not_a_regular_file_of_its_own_counts_as_none(tmp_path, kind):
    """In a home as on a host (not root's: a link there is never followed, safefs.open_dir)."""
    if kind == "link records dir" and os.geteuid() != 0:
        pytest.skip("needs root to give the home to the account")
    home = tmp_path / "home"
    home.mkdir()
    cache = home / "hub"
    make_revision(cache, "org/m", C1, FILES)
    if os.geteuid() == 0:
        os.chown(home, 65534, 65534)
    path = record(cache, "org/m", C1)
    elsewhere = tmp_path / "elsewhere"
    if kind == "link":
        elsewhere.mkdir()
        path.rename(elsewhere / path.name)
        path.symlink_to(elsewhere / path.name)
    elif kind == "link folder":
        path.parent.rename(elsewhere)
        path.parent.symlink_to(elsewhere)
    elif kind == "link records dir":
        path.parent.parent.rename(elsewhere)
        path.parent.parent.symlink_to(elsewhere)
    elif kind == "fifo":
        path.unlink()
        os.mkfifo(path, 0o644)
    else:
        path.unlink()
        path.mkdir(0o755)
    rev = scan(cache)["repos"]["org/m"]["revisions"][C1]
    assert rev["verified"] is False and rev["files"] == 3


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
@pytest.mark.parametrize("where", ["record", "folder", "records dir"])
def test_a_record_of_another_owner_counts_as_none(tmp_path, where):
    make_revision(tmp_path, "org/m", C1, FILES)
    path = record(tmp_path, "org/m", C1)
    target = {"record": path, "folder": path.parent, "records dir": path.parent.parent}[where]
    os.chown(target, 65534, 65534)
    assert scan(tmp_path)["repos"]["org/m"]["revisions"][C1]["verified"] is False
    trusting = manifest.Records(str(records_of(tmp_path)), {0, 65534})   # the account's, when it is 65534
    assert cachestate.scan(str(tmp_path), trusting)["repos"]["org/m"]["revisions"][C1]["verified"]


def test_record_names_never_leave_their_folder(tmp_path):
    make_revision(tmp_path, "org/m", C1, FILES)
    records = manifest.Records(str(records_of(tmp_path)), manifest.owners())
    assert records.load("models--org--m", C1) is not None
    for folder, commit in (("..", C1), (".", C1), ("models--org--m/..", C1), ("", C1),
                           ("models--org--m", "../models--org--m/" + C1), ("models--org--m", "..")):
        assert records.load(folder, commit) is None
    with pytest.raises(OSError):
        records.write("../x", C1, {"commit": C1, "files": []})
    assert not (records_of(tmp_path).parent / "x").exists()


def test_a_record_larger_than_the_bound_is_not_read(tmp_path, monkeypatch):
    make_revision(tmp_path, "org/m", C1, FILES)
    monkeypatch.setattr(manifest, "MAX_BYTES", 100)
    assert scan(tmp_path)["repos"]["org/m"]["revisions"][C1]["verified"] is False


def _snapshot_models(home: Path, user: str) -> dict:
    spec = {"user": user, "home": str(home), "tools_dir": str(home / "tools"), "admins": [], "groups": [],
            "uid": None, "gid": None, "dirs": []}
    # from a file: the bundle is past one argument's 128 KiB uncompressed (the run sends it compressed, facts.py)
    program = home / "snapshot-program.py"
    program.write_text(ship.program("read.snapshot"))
    out = subprocess.run([sys.executable, "-I", str(program), json.dumps(spec)], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return json.loads(out)["models"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the records to another user")
def test_the_snapshot_trusts_the_records_of_the_account_it_names_and_roots_only(tmp_path):
    """The snapshot runs as root; the pull writes the records as the account (the spec's user)."""
    import pwd

    account = pwd.getpwuid(65534).pw_name
    make_revision(tmp_path / "hf-cache" / "hub", "org/m", C1, FILES, records=tmp_path / "verified")
    for root, dirs, files in os.walk(tmp_path / "verified"):
        for name in [root, *(os.path.join(root, f) for f in files)]:
            os.chown(name, 65534, 65534)
    revision = lambda user: _snapshot_models(tmp_path, user)["repos"]["org/m"]["revisions"][C1]  # noqa: E731
    assert revision(account)["verified"] is True
    assert revision("nobody-here")["verified"] is False   # another account's records: none
    os.chown(tmp_path / "verified", 0, 0)
    assert revision("nobody-here")["verified"] is False   # root's records dir, the account's record: still none
    assert revision(account)["verified"] is True


def test_a_record_in_part_is_never_a_revision_and_goes_with_the_whole_record_or_a_prune(tmp_path):
    """A swarm's round 1 records the files it verified as <commit>.partial.json: the scan reports them as the
    revision's verified_blobs (the revision stays unverified), a forged one in a writable folder counts as none, a
    whole record replaces it, and drop_stale removes one of a commit that goes."""
    repo = make_revision(tmp_path, "org/m", C1, FILES, manifest=False)
    folder = records_of(tmp_path) / "models--org--m"
    records = manifest.Records(str(records_of(tmp_path)), manifest.owners())
    data = FILES["model.safetensors"]
    name = blob_name(data, True)
    part = [manifest.entry("model.safetensors", name, os.lstat(repo / "blobs" / name), True,
                           hashlib.sha256(data).hexdigest())]
    records.write("models--org--m", C1, {"repo_id": "org/m", "commit": C1, "files": part}, part=True)
    assert sorted(os.listdir(folder)) == [f"{C1}.partial.json"]
    assert records.load("models--org--m", C1) is None and records.trusted_blobs("models--org--m") == {}
    found = scan(tmp_path)["repos"]["org/m"]["revisions"][C1]
    assert found["verified"] is False and found["verified_blobs"] == {part[0]["blob"]: part[0]["sha256"]}
    folder.chmod(0o775)   # a folder a member could write: its records count as none
    assert "verified_blobs" not in scan(tmp_path)["repos"]["org/m"]["revisions"][C1]
    folder.chmod(0o755)
    records.drop_stale("models--org--m", {C2})
    assert not folder.exists()
    records.write("models--org--m", C1, {"repo_id": "org/m", "commit": C1, "files": part}, part=True)
    records.write("models--org--m", C1, {"repo_id": "org/m", "commit": C1, "files": part})
    assert sorted(os.listdir(folder)) == [f"{C1}.json"]
