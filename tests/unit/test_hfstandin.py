"""The Hub stand-in (tests/support/hfstandin/server.py), driven by the real huggingface_hub client.

Everything goes to 127.0.0.1. Every wait is a bounded poll; nothing asserts on speed.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

SUPPORT_DIR = Path(__file__).resolve().parents[1] / "support"
if str(SUPPORT_DIR) not in sys.path:
    sys.path.insert(0, str(SUPPORT_DIR))

import huggingface_hub  # noqa: E402
from huggingface_hub import (  # noqa: E402
    HfApi,
    constants,
    get_hf_file_metadata,
    hf_hub_download,
    hf_hub_url,
    snapshot_download,
)
from huggingface_hub.errors import (  # noqa: E402
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from hfstandin.server import StandinHub, build_repos, generated_bytes  # noqa: E402

SERVER = SUPPORT_DIR / "hfstandin" / "server.py"
REPO = "standin-org/tiny-model"
GATED = "standin-org/gated-model"
PRIVATE = "standin-org/private-model"
TOKEN = "hf_standin_secret_4c1d"
DENIED = "hf_standin_denied_77aa"
SHARD1, SHARD2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
SHARD1_SIZE = 3 << 20

SPEC = {"repos": [
    {"repo_id": REPO, "commits": [
        {"branch": "v0", "files": [
            {"path": "config.json", "text": '{"hidden_size": 8}'},
            {"path": SHARD1, "size": 1 << 20, "seed": 9, "lfs": True}]},
        {"branch": ["main", "v1"], "files": [
            {"path": "config.json", "text": '{"hidden_size": 16}'},
            {"path": SHARD1, "size": SHARD1_SIZE, "seed": 1, "lfs": True},
            {"path": SHARD2, "size": (1 << 20) + 7, "seed": 2, "lfs": True},
            {"path": "sub/dir/tokenizer.json", "text": '{"vocab": ["a", "b"]}'},
            {"path": "sub/vocab.bin", "size": 5000, "seed": 3}]}]},
    {"repo_id": GATED, "gated": True, "tokens": [TOKEN], "denied_tokens": [DENIED], "commits": [
        {"branch": "main", "files": [
            {"path": "config.json", "text": "{}"},
            {"path": "weights.safetensors", "size": 100_000, "seed": 4, "lfs": True}]}]},
    {"repo_id": PRIVATE, "private": True, "tokens": [TOKEN], "commits": [
        {"branch": "main", "files": [{"path": "config.json", "text": "{}"}]}]},
]}
MAIN_FILES = ["config.json", SHARD1, SHARD2, "sub/dir/tokenizer.json", "sub/vocab.bin"]


@pytest.fixture(autouse=True)
def hf_env(monkeypatch, tmp_path):
    """No machine token, no offline mode, no telemetry, whatever the environment says."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                 "HF_OIDC_RESOURCE", "HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_IMPLICIT_TOKEN", True)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))


@pytest.fixture
def hub():
    with StandinHub(SPEC) as running:
        yield running


def wait_for(predicate, what: str, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def raw_request(hub: StandinHub, method: str, path: str, headers: dict | None = None, body: bytes | None = None):
    connection = http.client.HTTPConnection("127.0.0.1", hub.bound_port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def repo_cache(cache_dir: Path, repo_id: str) -> Path:
    return cache_dir / ("models--" + repo_id.replace("/", "--"))


def assert_snapshot(hub: StandinHub, cache_dir: Path, repo_id: str, commit: str, files: list[str]):
    storage = repo_cache(cache_dir, repo_id)
    snapshot = storage / "snapshots" / commit
    for path in files:
        meta = hub.file_meta(repo_id, commit, path)
        link = snapshot / path
        assert link.is_symlink(), path
        target = link.resolve()
        assert target.parent == (storage / "blobs").resolve()
        # LFS blobs are named by sha256, regular files by their git blob sha1
        assert target.name == (meta["sha256"] if meta["lfs"] else meta["git_oid"])
        assert target.read_bytes() == hub.file_bytes(repo_id, commit, path)
    assert sorted(str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if not p.is_dir()) == sorted(files)


def test_snapshot_download_at_a_commit_builds_the_hub_cache(hub, tmp_path):
    commit = hub.commit(REPO)
    path = snapshot_download(REPO, revision=commit, cache_dir=tmp_path / "cache", endpoint=hub.url, token=False)
    assert Path(path) == repo_cache(tmp_path / "cache", REPO) / "snapshots" / commit
    assert_snapshot(hub, tmp_path / "cache", REPO, commit, MAIN_FILES)
    assert not (repo_cache(tmp_path / "cache", REPO) / "refs").exists()  # a commit id needs no ref
    assert (repo_cache(tmp_path / "cache", REPO) / "trees" / f"{commit}.json").is_file()  # tree-listing cache
    log = hub.requests()
    assert not any(e["path"].startswith(f"/api/models/{REPO}/revision") for e in log)  # commit: no repo_info call
    heads = {e["path"] for e in log if e["method"] == "HEAD"}
    gets = {e["path"] for e in log if e["method"] == "GET" and "/resolve/" in e["path"]}
    expected = {f"/{REPO}/resolve/{commit}/{p}" for p in MAIN_FILES}
    assert heads == expected and gets == expected
    assert all(e["status"] in (200, 206) and e["finished"] for e in log)


def test_snapshot_download_by_branch_writes_the_ref(hub, tmp_path):
    cache = tmp_path / "cache"
    snapshot_download(REPO, revision="main", cache_dir=cache, endpoint=hub.url, token=False)
    assert (repo_cache(cache, REPO) / "refs" / "main").read_text() == hub.commit(REPO, "main")
    assert_snapshot(hub, cache, REPO, hub.commit(REPO), MAIN_FILES)

    old = hub.commit(REPO, "v0")
    snapshot_download(REPO, revision="v0", cache_dir=cache, endpoint=hub.url, token=False)
    assert (repo_cache(cache, REPO) / "refs" / "v0").read_text() == old
    assert_snapshot(hub, cache, REPO, old, ["config.json", SHARD1])
    assert old != hub.commit(REPO) == hub.commit(REPO, "v1") == hub.commit(REPO, 1)


def test_model_info_and_tree_listing(hub):
    api = HfApi(endpoint=hub.url, token=False)
    commit = hub.commit(REPO)
    assert api.model_info(REPO).sha == commit
    assert api.model_info(REPO, revision="v0").sha == hub.commit(REPO, "v0")
    info = api.model_info(REPO, revision=commit, files_metadata=True)
    assert info.id == REPO and info.private is False and info.gated is False
    assert sorted(s.rfilename for s in info.siblings) == sorted(MAIN_FILES)
    shard = next(s for s in info.siblings if s.rfilename == SHARD1)
    assert shard.size == SHARD1_SIZE
    assert shard.lfs.sha256 == hashlib.sha256(hub.file_bytes(REPO, commit, SHARD1)).hexdigest()
    assert api.model_info(GATED).gated == "auto"  # metadata of a gated repo is public, like on the Hub

    entries = list(api.list_repo_tree(REPO, recursive=True, revision=commit))
    files = {e.path: e for e in entries if isinstance(e, huggingface_hub.hf_api.RepoFile)}
    folders = {e.path for e in entries if isinstance(e, huggingface_hub.hf_api.RepoFolder)}
    assert sorted(files) == sorted(MAIN_FILES) and folders == {"sub", "sub/dir"}
    for path, entry in files.items():
        meta = hub.file_meta(REPO, commit, path)
        assert (entry.size, entry.blob_id) == (meta["size"], meta["git_oid"])
        if meta["lfs"]:
            assert entry.lfs.sha256 == hashlib.sha256(hub.file_bytes(REPO, commit, path)).hexdigest()
            assert entry.lfs.size == meta["size"] and entry.lfs.pointer_size == meta["pointer_size"]
        else:
            assert entry.lfs is None
    top = {e.path for e in api.list_repo_tree(REPO, revision=commit)}
    assert top == {"config.json", SHARD1, SHARD2, "sub"}
    assert {e.path for e in api.list_repo_tree(REPO, "sub", revision="main")} == {"sub/dir", "sub/vocab.bin"}
    assert api.list_repo_files(REPO, revision="v0") == ["config.json", SHARD1]

    # the pagination contract: a Link rel="next" header, followed by the client
    hub.configure(tree_page_size=2)
    hub.reset()
    paged = list(api.list_repo_tree(REPO, recursive=True, revision=commit))
    assert [e.path for e in paged] == [e.path for e in entries]
    assert len([e for e in hub.requests() if "/tree/" in e["path"]]) == 4  # 7 entries, 2 a page


def test_file_metadata(hub):
    commit = hub.commit(REPO)
    for path in ("config.json", SHARD1, "sub/dir/tokenizer.json"):
        meta = get_hf_file_metadata(hf_hub_url(REPO, path, revision="main", endpoint=hub.url), token=False)
        expected = hub.file_meta(REPO, commit, path)
        assert meta.commit_hash == commit
        assert meta.etag == expected["etag"] == (expected["sha256"] or expected["git_oid"])
        assert meta.size == expected["size"]
        assert meta.xet_file_data is None


def test_resolve_headers_ranges_and_keep_alive(hub):
    commit = hub.commit(REPO)
    data = hub.file_bytes(REPO, commit, SHARD1)
    sha256 = hashlib.sha256(data).hexdigest()
    path = f"/{REPO}/resolve/{commit}/{SHARD1}"
    connection = http.client.HTTPConnection("127.0.0.1", hub.bound_port, timeout=10)
    try:
        def ask(method, headers=None):
            connection.request(method, path, headers=headers or {})
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()

        status, headers, body = ask("HEAD")
        assert status == 200 and body == b""
        kept_alive = connection.sock
        assert headers["x-repo-commit"] == commit and headers["accept-ranges"] == "bytes"
        assert headers["etag"] == f'"{sha256}"' and headers["x-linked-etag"] == f'"{sha256}"'
        assert headers["x-linked-size"] == headers["content-length"] == str(len(data))
        assert not [h for h in headers if h.startswith("x-xet")] and "link" not in headers

        status, headers, body = ask("GET", {"Range": "bytes=100-"})
        assert status == 206 and body == data[100:]
        assert headers["content-range"] == f"bytes 100-{len(data) - 1}/{len(data)}"
        status, headers, body = ask("GET", {"Range": "bytes=10-19"})
        assert (status, body, headers["content-length"]) == (206, data[10:20], "10")
        status, headers, body = ask("GET", {"Range": "bytes=-5"})
        assert (status, body) == (206, data[-5:])
        status, headers, body = ask("GET", {"Range": f"bytes={len(data)}-"})
        assert status == 416 and headers["content-range"] == f"bytes */{len(data)}"
        status, headers, body = ask("GET")
        assert status == 200 and body == data
        assert connection.sock is kept_alive is not None  # one connection for all of them
    finally:
        connection.close()
    regular = hub.file_meta(REPO, commit, "sub/vocab.bin")
    status, headers, _ = raw_request(hub, "HEAD", f"/{REPO}/resolve/main/sub/vocab.bin")
    assert headers["etag"] == f'"{regular["git_oid"]}"' and "x-linked-etag" not in headers
    log = hub.requests()
    assert [e["range"] for e in log[:6]] == [None, "bytes=100-", "bytes=10-19", "bytes=-5", f"bytes={len(data)}-", None]
    assert [log[i]["bytes_sent"] for i in (0, 1, 2, 3, 5)] == [0, len(data) - 100, 10, 5, len(data)]
    assert log[4]["status"] == 416


@pytest.mark.parametrize("case, error", [
    ("unknown repo", RepositoryNotFoundError),
    ("unknown revision", RevisionNotFoundError),
    ("unknown file", RemoteEntryNotFoundError),
    ("gated, no token", GatedRepoError),
    ("gated, wrong token", GatedRepoError),
    ("gated, denied token", GatedRepoError),
])
def test_errors_raise_the_huggingface_hub_exceptions(hub, tmp_path, case, error):
    repo, filename, kwargs = {
        "unknown repo": ("standin-org/missing", "config.json", {}),
        "unknown revision": (REPO, "config.json", {"revision": "no-such-branch"}),
        "unknown file": (REPO, "missing.json", {}),
        "gated, no token": (GATED, "config.json", {}),
        "gated, wrong token": (GATED, "config.json", {"token": "hf_not_a_known_token"}),
        "gated, denied token": (GATED, "config.json", {"token": DENIED}),
    }[case]
    kwargs.setdefault("token", False)
    with pytest.raises(error) as raised:
        hf_hub_download(repo, filename, cache_dir=tmp_path / "cache", endpoint=hub.url, **kwargs)
    status = raised.value.response.status_code
    assert status == {"unknown repo": 401, "gated, denied token": 403, "gated, no token": 401,
                      "gated, wrong token": 401}.get(case, 404)
    if case == "unknown file":
        assert isinstance(raised.value, EntryNotFoundError)
        # the 404 carries X-Repo-Commit, so the client caches the file's absence
        assert (repo_cache(tmp_path / "cache", REPO) / ".no_exist" / hub.commit(REPO) / "missing.json").exists()


def test_api_errors(hub, tmp_path):
    api = HfApi(endpoint=hub.url, token=False)
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("standin-org/missing")
    with pytest.raises(RepositoryNotFoundError):  # authenticated: 404 instead of 401, same error
        HfApi(endpoint=hub.url, token=TOKEN).model_info("standin-org/missing")
    with pytest.raises(RevisionNotFoundError):
        api.model_info(REPO, revision="0" * 40)
    with pytest.raises(RevisionNotFoundError):
        list(api.list_repo_tree(REPO, revision="no-such-branch"))
    with pytest.raises(RemoteEntryNotFoundError):
        list(api.list_repo_tree(REPO, "no/such/dir"))
    with pytest.raises(RepositoryNotFoundError):
        snapshot_download("standin-org/missing", cache_dir=tmp_path / "cache", endpoint=hub.url, token=False)
    with pytest.raises(RepositoryNotFoundError):  # a private repo looks missing without its token
        api.model_info(PRIVATE)
    assert HfApi(endpoint=hub.url, token=TOKEN).model_info(PRIVATE).private is True
    assert api.repo_exists(REPO) and not api.repo_exists("standin-org/missing")
    assert api.file_exists(REPO, "sub/vocab.bin") and not api.file_exists(REPO, "nope.bin")

    status, headers, _ = raw_request(hub, "GET", f"/{REPO}/resolve/bad%0D%0AX-Injected:%201/config.json")
    assert status == 404 and headers["x-error-code"] == "RevisionNotFound" and "x-injected" not in headers

    hub.configure(inject_status=503, inject_match="/api/models/")
    with pytest.raises(HfHubHTTPError) as raised:
        api.model_info(REPO)
    assert raised.value.response.status_code == 503
    assert api.model_info(REPO).sha == hub.commit(REPO)  # one injected failure only


@pytest.mark.parametrize("token, status", [(False, 401), ("hf_not_a_known_token", 401), (DENIED, 403)],
                         ids=["no token", "a token not granted", "a refused token"])
def test_auth_check_of_a_gated_repo_answers_as_its_files_do(hub, token, status):
    with pytest.raises(GatedRepoError) as raised:
        HfApi(endpoint=hub.url, token=token).auth_check(GATED)
    assert raised.value.response.status_code == status
    assert raised.value.response.headers["x-error-code"] == "GatedRepo"


def test_auth_check_passes_a_granted_token_and_an_ungated_repo_and_hides_a_private_one(hub):
    HfApi(endpoint=hub.url, token=TOKEN).auth_check(GATED)
    HfApi(endpoint=hub.url, token=False).auth_check(REPO)
    with pytest.raises(RepositoryNotFoundError):
        HfApi(endpoint=hub.url, token=False).auth_check(PRIVATE)


def test_requests_are_counted_by_the_kind_the_hub_limits(hub, tmp_path):
    api = HfApi(endpoint=hub.url, token=TOKEN)
    hub.configure(tree_page_size=2)
    hub.reset()
    api.model_info(REPO, revision="main", files_metadata=True)
    list(api.list_repo_tree(REPO, recursive=True, revision="main"))   # 7 entries: 4 pages
    api.auth_check(GATED)
    get_hf_file_metadata(hf_hub_url(REPO, "config.json", revision="main", endpoint=hub.url), token=False)
    hf_hub_download(REPO, "config.json", cache_dir=tmp_path / "cache", endpoint=hub.url, token=False)
    api.list_repo_refs(REPO)
    assert hub.counts(REPO) == {"info": 1, "listing": 4, "auth": 0, "file-head": 2, "file-get": 1, "other": 1}
    assert hub.counts(GATED) == {"info": 0, "listing": 0, "auth": 1, "file-head": 0, "file-get": 0, "other": 0}
    _, _, over_http = raw_request(hub, "GET", f"/_standin/counts?repo={REPO}")
    assert json.loads(over_http) == hub.counts(REPO)
    assert sum(hub.counts().values()) == len(hub.requests())
    hub.configure(tree_page_size=None)


def test_gated_repo_with_the_right_token_and_no_token_in_any_log(hub, tmp_path, capfd):
    path = snapshot_download(GATED, cache_dir=tmp_path / "cache", endpoint=hub.url, token=TOKEN)
    assert_snapshot(hub, tmp_path / "cache", GATED, hub.commit(GATED), ["config.json", "weights.safetensors"])
    assert Path(path).name == hub.commit(GATED)
    with pytest.raises(GatedRepoError):
        hf_hub_download(GATED, "weights.safetensors", cache_dir=tmp_path / "other", endpoint=hub.url, token=False)
    log = hub.requests()
    resolves = [e for e in log if "/resolve/" in e["path"]]
    assert resolves and all(e["authorized"] for e in resolves[:-1]) and not resolves[-1]["authorized"]
    _, _, over_http = raw_request(hub, "GET", "/_standin/requests")
    captured = capfd.readouterr()
    for text in (json.dumps(log), over_http.decode(), captured.err, captured.out):
        assert TOKEN not in text and "Bearer" not in text
    assert f'"HEAD /{GATED}/resolve/' in captured.err  # the access log did run
    assert len(json.loads(over_http)) == len(log)  # control requests are not recorded


CHILD_DOWNLOAD = """
import sys
from huggingface_hub import hf_hub_download
hf_hub_download(sys.argv[1], sys.argv[2], revision=sys.argv[3], cache_dir=sys.argv[4], endpoint=sys.argv[5],
                token=False)
"""


def test_throttled_body_and_a_client_killed_mid_file(hub, tmp_path):
    commit = hub.commit(REPO)
    hub.set_throttle(256 << 10)  # a 3 MiB shard now takes about 12 s
    env = {**os.environ, "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": str(tmp_path / "hf-home"),
           "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE"):
        env.pop(name, None)
    cache = tmp_path / "cache"
    child = subprocess.Popen([sys.executable, "-c", CHILD_DOWNLOAD, REPO, SHARD1, commit, str(cache), hub.url],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def body_started():
            return [e for e in hub.requests()
                    if e["method"] == "GET" and e["path"].endswith(SHARD1) and e["bytes_sent"] >= 64 << 10]
        wait_for(body_started, "the download body to start")
    finally:
        child.kill()
        child.wait(timeout=10)

    def aborted_entry():
        return [e for e in hub.requests() if e["method"] == "GET" and e["path"].endswith(SHARD1) and e["finished"]]
    [entry] = wait_for(aborted_entry, "the server to notice the client is gone")
    assert entry["status"] == 200 and entry["client_aborted"]
    assert 64 << 10 <= entry["bytes_sent"] < SHARD1_SIZE
    blob = repo_cache(cache, REPO) / "blobs" / hub.file_meta(REPO, commit, SHARD1)["sha256"]
    assert not blob.exists() and not (repo_cache(cache, REPO) / "snapshots" / commit / SHARD1).exists()

    hub.set_throttle(None)  # the server is still healthy afterwards
    path = hf_hub_download(REPO, SHARD1, revision=commit, cache_dir=cache, endpoint=hub.url, token=False)
    assert Path(path).read_bytes() == hub.file_bytes(REPO, commit, SHARD1)


def test_dropped_connection_is_resumed_with_a_range_request(tmp_path):
    # huggingface_hub writes its body in 10 MiB chunks, so only a cut past 10 MiB leaves bytes to resume from
    size = (10 << 20) + 123_456
    spec = {"repos": [{"repo_id": "standin-org/big", "commits": [
        {"branch": "main", "files": [{"path": "big.safetensors", "size": size, "seed": 7, "lfs": True}]}]}]}
    with StandinHub(spec, access_log=False) as hub:
        hub.configure(drop_after_bytes=(10 << 20) + 1000)
        path = hf_hub_download("standin-org/big", "big.safetensors", cache_dir=tmp_path / "cache",
                               endpoint=hub.url, token=False)
        assert Path(path).read_bytes() == hub.file_bytes("standin-org/big", "main", "big.safetensors")
        gets = [e for e in hub.requests() if e["method"] == "GET"]
    assert [(e["status"], e["range"], e["dropped"]) for e in gets] == [
        (200, None, True), (206, f"bytes={10 << 20}-", False)]
    assert gets[0]["bytes_sent"] == (10 << 20) + 1000 and gets[1]["bytes_sent"] == size - (10 << 20)


def test_lfs_redirect_to_a_cdn_origin_drops_the_token(tmp_path):
    with StandinHub(SPEC, lfs_redirect=True, access_log=False) as hub:
        commit = hub.commit(GATED)
        meta = get_hf_file_metadata(hf_hub_url(GATED, "weights.safetensors", endpoint=hub.url), token=TOKEN)
        assert meta.location.startswith(hub.cdn_url + "/lfs/") and meta.commit_hash == commit
        assert meta.etag == hub.file_meta(GATED, commit, "weights.safetensors")["sha256"] and meta.size == 100_000
        snapshot_download(GATED, cache_dir=tmp_path / "cache", endpoint=hub.url, token=TOKEN)
        assert_snapshot(hub, tmp_path / "cache", GATED, commit, ["config.json", "weights.safetensors"])
        log = hub.requests()
    cdn = [e for e in log if e["listener"] == "cdn"]
    assert [(e["method"], e["status"], e["authorized"]) for e in cdn] == [("GET", 200, False)]
    assert all(e["authorized"] for e in log if e["listener"] == "hub")
    heads = [e for e in log if e["method"] == "HEAD" and e["path"].endswith("weights.safetensors")]
    assert [e["status"] for e in heads] == [302, 302]


def test_control_endpoints_over_http(hub):
    status, _, body = raw_request(hub, "POST", "/_standin/config", {"Content-Type": "application/json"},
                                  json.dumps({"throttle_bytes_per_s": 4096}).encode())
    assert status == 200 and json.loads(body)["throttle_bytes_per_s"] == 4096 == hub.config()["throttle_bytes_per_s"]
    status, _, _ = raw_request(hub, "POST", "/_standin/config", {}, json.dumps({"nope": 1}).encode())
    assert status == 400
    raw_request(hub, "POST", "/_standin/config", {}, json.dumps({"throttle_bytes_per_s": None}).encode())
    assert hub.config()["throttle_bytes_per_s"] is None
    raw_request(hub, "GET", f"/api/models/{REPO}", {"Authorization": "Bearer hf_whatever"})
    status, _, body = raw_request(hub, "GET", "/_standin/requests")
    [entry] = json.loads(body)
    assert {k: entry[k] for k in ("method", "path", "range", "status", "authorized")} == {
        "method": "GET", "path": f"/api/models/{REPO}", "range": None, "status": 200, "authorized": True}
    assert entry["bytes_sent"] > 0
    assert raw_request(hub, "POST", "/_standin/reset")[0] == 200 and hub.requests() == []
    assert json.loads(raw_request(hub, "GET", "/_standin/commits")[2]) == hub.commits()


def test_commit_ids_and_content_are_deterministic():
    first, second = build_repos(SPEC), build_repos(json.loads(json.dumps(SPEC)))
    assert [c.oid for c in first[REPO].commits] == [c.oid for c in second[REPO].commits]
    assert len({c.oid for r in first.values() for c in r.commits}) == 4  # the repo id is in each title
    assert generated_bytes(1, 1000) == generated_bytes(1, 1000) != generated_bytes(2, 1000)
    assert len(generated_bytes(5, (16 << 20) + 3)) == (16 << 20) + 3
    for bad in ({"repos": []},
                {"repos": [{"repo_id": "a/b", "commits": [{"files": [{"path": "../x", "text": ""}]}]}]},
                {"repos": [{"repo_id": "a/b", "commits": [{"files": [{"path": "x", "text": ""},
                                                                      {"path": "x/y", "text": ""}]}]}]},
                {"repos": [{"repo_id": "a/b", "commits": [{"files": [{"path": "x", "size": -1}]}]}]},
                {"repos": [{"repo_id": "a/b", "commits": [{"branch": "f" * 40, "files": []}]}]}):
        with pytest.raises(ValueError):
            build_repos(bad)


def test_cli_prints_commits_and_serves_until_sigterm(tmp_path):
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(SPEC))
    expected = StandinHub(SPEC).commits()
    printed = subprocess.run([sys.executable, str(SERVER), "--spec", str(spec_path), "--print-commits"],
                             capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(printed.stdout) == expected
    assert expected[REPO]["main"] == expected[REPO]["v1"] == expected[REPO]["1"]

    commits_file = tmp_path / "commits.json"
    server = subprocess.Popen([sys.executable, str(SERVER), "--spec", str(spec_path), "--host", "127.0.0.1",
                               "--port", "0", "--write-commits", str(commits_file)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline().strip()
        assert line.startswith("standin-hub listening on http://127.0.0.1:")
        url = line.rsplit(" ", 1)[1]
        assert json.loads(commits_file.read_text()) == expected
        with urllib.request.urlopen(f"{url}/_standin/health", timeout=10) as response:
            assert json.load(response) == {"ok": True}
        info = HfApi(endpoint=url, token=False).model_info(REPO)
        assert info.sha == expected[REPO]["main"]
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=20) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=10)
        err = server.stderr.read()
        server.stdout.close()
        server.stderr.close()
    assert f'"GET /api/models/{REPO}" 200' in err and "Traceback" not in err


def test_the_hub_api_over_https_with_the_test_ca(tmp_path, monkeypatch):
    """The stand-in's HTTPS listener (for pulls with a token), trusted through the testbed's own CA."""
    import ssl

    from testbed import hosts
    from testbed import hub as testbed_hub

    monkeypatch.setattr(hosts, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(testbed_hub, "CA_DIR", tmp_path / "ca")
    tls_dir = testbed_hub._server_certificate("localhost")
    with StandinHub(SPEC, tls=(str(tls_dir / "cert.pem"), str(tls_dir / "key.pem"), 0)) as running:
        port = next(server.server_address[1] for server in running._servers if server.listener == "tls")
        context = ssl.create_default_context(cafile=str(testbed_hub.test_ca()[0]))
        with urllib.request.urlopen(f"https://localhost:{port}/api/models/{REPO}", context=context,
                                    timeout=10) as reply:
            assert json.load(reply)["id"] == REPO
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"https://localhost:{port}/api/models/{REPO}",
                                   context=ssl.create_default_context(), timeout=10)
