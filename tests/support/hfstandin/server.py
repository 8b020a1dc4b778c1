"""STAND-IN for the Hugging Face Hub. Tests and the sandbox only.

Nothing here talks to the real Hub. This standard-library server (Python 3.11
or newer, no third-party imports, so it can be copied into a container and run
with the system python3) serves small model repos that are generated from a
spec, over the subset of the Hub's HTTP protocol that huggingface_hub's
download path uses:

  GET  /api/models/{repo_id}                          repo info at the default branch
  GET  /api/models/{repo_id}/revision/{revision}      repo info at a revision (?blobs, ?expand, ?securityStatus)
  GET  /api/models/{repo_id}/tree/{revision}[/{path}] tree listing (?recursive, ?expand, cursor pagination)
  POST /api/models/{repo_id}/paths-info/{revision}    info about given paths
  GET  /api/models/{repo_id}/auth-check               whether the caller's token may read the repo's files
  GET  /api/models/{repo_id}/refs                     branches
  GET  /api/models/{repo_id}/commits/{revision}       linear history, newest first
  HEAD/GET /{repo_id}/resolve/{revision}/{path}       file metadata and bytes, Range requests

File responses carry X-Repo-Commit, a quoted ETag (git blob sha1 for regular
files, sha256 for LFS files), Content-Length and Accept-Ranges: bytes; LFS
files add X-Linked-Etag and X-Linked-Size. No Xet header is ever sent, so
clients fall back to plain HTTP. Errors carry X-Error-Code / X-Error-Message
and a JSON body {"error": ...}: RepoNotFound (401 without an Authorization
header, 404 with one, as the Hub does), RevisionNotFound (404), EntryNotFound
(404, with X-Repo-Commit), GatedRepo (401, or 403 for a denied token).

Every request is counted by kind (request_kind): "info" (a model's info), "listing" (a page of the tree, or
paths-info), "auth" (auth-check), "file-head" and "file-get" (a resolve, an LFS body from the CDN origin),
"other" (refs, commits): the Hub's rate limits count its API calls (info, listing, auth) per IP.

Optionally (lfs_redirect) LFS files are answered with a 302 to a second
listener on another port, the way the Hub hands LFS bodies to its CDN; that
second origin serves GET/HEAD /lfs/{sha256} without any auth.

Test-only control endpoints live under /_standin/ and are never recorded:
  GET  /_standin/requests   every recorded request (no header values, never a token), with its started_at and
                            ended_at (time.monotonic(): this machine's CLOCK_MONOTONIC, a benchmark's clock too)
  GET  /_standin/counts     the recorded requests by kind ({"info": n, ...}); ?repo=ORG/NAME: that repo's alone
  POST /_standin/reset      clear the request log
  GET|POST /_standin/config throttle and fault injection (cut bodies, injected statuses, endless or dripping answers)
  GET  /_standin/commits    {repo_id: {branch or index: commit}}
  POST /_standin/tamper     {"repo_id", "revision", "path", "offset"?}: flip one byte of that file, consistently
  GET  /_standin/health     {"ok": true}

Spec: {"repos": [{"repo_id": "org/name", "gated": false, "tokens": [...],
"denied_tokens": [...], "private": false, "gate_metadata": false,
"commits": [{"branch": null | "main" | ["main", "v1"], "title": "...",
"files": [{"path": "config.json", "text": "..."},
{"path": "model.safetensors", "size": 8388608, "seed": 1, "lfs": true}]}]}]}
Commits are listed oldest first, each one a full file list; a later commit
naming the same branch moves it.

Run: python3 server.py --spec SPEC.json [--host H] [--port P] [--write-commits OUT.json]
     python3 server.py --spec SPEC.json --print-commits
"""

from __future__ import annotations

import argparse
import codecs
import hashlib
import json
import re
import signal
import socket
import ssl
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

# ---------------------------------------------------------------------------
# Repo model: deterministic content, git object ids, commits
# ---------------------------------------------------------------------------

# First line of a git-lfs pointer file: a spec identifier inside the file, never contacted.
LFS_POINTER_VERSION = "version https://git-lfs.github.com/spec/v1"
GIT_AUTHOR = "Standin Hub <standin@standin.invalid>"
BASE_TIMESTAMP = 1704067200  # 2024-01-01T00:00:00Z; commit i is dated i hours later
DEFAULT_BRANCH = "main"
GENERATED_BLOCK = 16 << 20
MAX_REQUEST_BODY = 1 << 20
HEX40 = re.compile(r"[0-9a-f]{40}")
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


def generated_bytes(seed: int, size: int) -> bytes:
    """Deterministic pseudo-random bytes for (seed, size), identical on every Python >= 3.11."""
    blocks = []
    for index in range((size + GENERATED_BLOCK - 1) // GENERATED_BLOCK):
        key = b"standin-hub content seed=%d size=%d block=%d" % (seed, size, index)
        blocks.append(hashlib.shake_256(key).digest(min(GENERATED_BLOCK, size - index * GENERATED_BLOCK)))
    return b"".join(blocks)


def git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"{LFS_POINTER_VERSION}\noid sha256:{sha256}\nsize {size}\n".encode()


def iso_date(timestamp: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(timestamp))


class FileEntry:
    """One file of one commit. `data` may be shared between commits and repos."""

    __slots__ = ("path", "data", "lfs", "git_oid", "sha256", "pointer_size")

    def __init__(self, path: str, data: bytes, lfs: bool):
        self.path = path
        self.data = data
        self.lfs = lfs
        self.sha256 = hashlib.sha256(data).hexdigest() if lfs else None
        if lfs:
            pointer = lfs_pointer(self.sha256, len(data))
            self.git_oid = git_blob_oid(pointer)
            self.pointer_size = len(pointer)
        else:
            self.git_oid = git_blob_oid(data)
            self.pointer_size = None

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def etag(self) -> str:
        """What the Hub puts in the (linked) ETag, and so the blob name in a client cache."""
        return self.sha256 if self.lfs else self.git_oid


class Commit:
    __slots__ = ("repo_id", "index", "oid", "names", "title", "timestamp", "files", "trees", "touched")

    def __init__(self, repo_id: str, index: int, names: list[str], title: str, files: dict[str, FileEntry]):
        self.repo_id = repo_id
        self.index = index
        self.names = names
        self.title = title
        self.timestamp = BASE_TIMESTAMP + 3600 * index
        self.files = files
        self.trees = git_trees(files)  # directory path ("" is the root) -> git tree oid
        self.oid = ""
        self.touched: dict[str, Commit] = {}  # path -> last commit that changed it

    @property
    def date(self) -> str:
        return iso_date(self.timestamp)


class Repo:
    def __init__(self, repo_id: str, *, gated: bool, private: bool, gate_metadata: bool,
                 tokens: frozenset[str], denied_tokens: frozenset[str]):
        self.repo_id = repo_id
        self.gated = gated
        self.private = private
        self.gate_metadata = gate_metadata
        self.tokens = tokens
        self.denied_tokens = denied_tokens
        self.commits: list[Commit] = []
        self.refs: dict[str, Commit] = {}
        self.by_oid: dict[str, Commit] = {}

    @property
    def default(self) -> Commit:
        return self.refs.get(DEFAULT_BRANCH) or self.commits[-1]

    def resolve(self, revision: str | None) -> Commit | None:
        if revision is None:
            return self.default
        for prefix in ("refs/heads/", "refs/tags/"):
            if revision.startswith(prefix):
                revision = revision[len(prefix):]
        if revision in self.refs:
            return self.refs[revision]
        return self.by_oid.get(revision)


def git_trees(files: dict[str, FileEntry]) -> dict[str, str]:
    """Git tree object ids of every directory, computed the way git does."""
    children: dict[str, dict[str, tuple[str, str]]] = {"": {}}
    for path in files:
        parts = path.split("/")
        for depth in range(1, len(parts)):
            directory = "/".join(parts[:depth])
            children.setdefault(directory, {})
            children["/".join(parts[:depth - 1])][parts[depth - 1]] = ("dir", directory)
        children.setdefault("/".join(parts[:-1]), {})[parts[-1]] = ("file", path)
    oids: dict[str, str] = {}
    for directory in sorted(children, key=lambda d: d.count("/") if d else -1, reverse=True):
        records = []
        for name, (kind, target) in children[directory].items():
            if kind == "dir":
                records.append(((name + "/").encode(), b"40000 " + name.encode() + b"\0" + bytes.fromhex(oids[target])))
            else:
                oid = files[target].git_oid
                records.append((name.encode(), b"100644 " + name.encode() + b"\0" + bytes.fromhex(oid)))
        body = b"".join(record for _, record in sorted(records))
        oids[directory] = hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()
    return oids


def commit_oid(tree: str, parent: str | None, timestamp: int, title: str) -> str:
    lines = [f"tree {tree}"]
    if parent:
        lines.append(f"parent {parent}")
    lines += [f"author {GIT_AUTHOR} {timestamp} +0000", f"committer {GIT_AUTHOR} {timestamp} +0000", "", title, ""]
    body = "\n".join(lines).encode()
    return hashlib.sha1(b"commit %d\0" % len(body) + body).hexdigest()


def _check_path(path: object, where: str) -> str:
    if not isinstance(path, str) or not path or path.startswith("/") or path.endswith("/"):
        raise ValueError(f"{where}: bad path {path!r}")
    if any(part in ("", ".", "..") for part in path.split("/")) or "\\" in path or "\0" in path:
        raise ValueError(f"{where}: bad path {path!r}")
    return path


def _names(value: object, where: str) -> list[str]:
    if value is None:
        return []
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) and n.strip() == n and n for n in names):
        raise ValueError(f"{where}: 'branch' must be null, a name or a list of names")
    for name in names:
        if HEX40.fullmatch(name):
            raise ValueError(f"{where}: branch name {name!r} looks like a commit id")
    return names


def load_spec(spec: dict | str | Path) -> dict:
    if isinstance(spec, dict):
        return spec
    return json.loads(Path(spec).read_text(encoding="utf-8"))


def build_repos(spec: dict | str | Path) -> dict[str, Repo]:
    """Validate a spec and build every repo, with content generated once and shared."""
    spec = load_spec(spec)
    contents: dict[tuple[int, int], bytes] = {}
    repos: dict[str, Repo] = {}
    if not isinstance(spec.get("repos"), list) or not spec["repos"]:
        raise ValueError("spec: 'repos' must be a non-empty list")
    for repo_spec in spec["repos"]:
        repo_id = repo_spec.get("repo_id")
        if not isinstance(repo_id, str) or not REPO_ID.fullmatch(repo_id) or repo_id in repos:
            raise ValueError(f"spec: bad or duplicate repo_id {repo_id!r}")
        tokens = repo_spec.get("tokens", [])
        denied = repo_spec.get("denied_tokens", [])
        for field, value in (("tokens", tokens), ("denied_tokens", denied)):
            if not isinstance(value, list) or not all(isinstance(t, str) and t for t in value):
                raise ValueError(f"{repo_id}: '{field}' must be a list of non-empty strings")
        repo = Repo(repo_id, gated=bool(repo_spec.get("gated", False)), private=bool(repo_spec.get("private", False)),
                    gate_metadata=bool(repo_spec.get("gate_metadata", False)),
                    tokens=frozenset(tokens), denied_tokens=frozenset(denied))
        commit_specs = repo_spec.get("commits")
        if not isinstance(commit_specs, list) or not commit_specs:
            raise ValueError(f"{repo_id}: 'commits' must be a non-empty list")
        parent: str | None = None
        for index, commit_spec in enumerate(commit_specs):
            where = f"{repo_id} commit {index}"
            files: dict[str, FileEntry] = {}
            for file_spec in commit_spec.get("files", []):
                path = _check_path(file_spec.get("path"), where)
                if path in files:
                    raise ValueError(f"{where}: duplicate path {path!r}")
                if "text" in file_spec:
                    if not isinstance(file_spec["text"], str):
                        raise ValueError(f"{where}: 'text' of {path!r} must be a string")
                    data = file_spec["text"].encode("utf-8")
                else:
                    size, seed = file_spec.get("size"), file_spec.get("seed", 0)
                    if not isinstance(size, int) or size < 0 or not isinstance(seed, int):
                        raise ValueError(f"{where}: {path!r} needs 'text' or an integer 'size' (and 'seed')")
                    if (seed, size) not in contents:
                        contents[(seed, size)] = generated_bytes(seed, size)
                    data = contents[(seed, size)]
                files[path] = FileEntry(path, data, bool(file_spec.get("lfs", False)))
            for path in files:
                parts = path.split("/")
                for depth in range(1, len(parts)):
                    if "/".join(parts[:depth]) in files:
                        raise ValueError(f"{where}: {'/'.join(parts[:depth])!r} is both a file and a directory")
            title = commit_spec.get("title") or f"{repo_id}: commit {index}"
            commit = Commit(repo_id, index, _names(commit_spec.get("branch"), where), str(title), files)
            commit.oid = commit_oid(commit.trees[""], parent, commit.timestamp, commit.title)
            parent = commit.oid
            repo.commits.append(commit)
            repo.by_oid[commit.oid] = commit
            for name in commit.names:
                repo.refs[name] = commit  # a later commit moves the branch
        for index, commit in enumerate(repo.commits):
            previous = repo.commits[index - 1] if index else None
            for path, entry in commit.files.items():
                old = previous.files.get(path) if previous else None
                same = old is not None and (old.git_oid, old.lfs) == (entry.git_oid, entry.lfs)
                commit.touched[path] = previous.touched[path] if same else commit
            for directory, oid in commit.trees.items():
                same = previous is not None and previous.trees.get(directory) == oid
                commit.touched[directory + "/"] = previous.touched[directory + "/"] if same else commit
        repos[repo_id] = repo
    return repos


def commit_map(repos: dict[str, Repo]) -> dict[str, dict[str, str]]:
    """{repo_id: {branch name or commit index: commit id}}."""
    result: dict[str, dict[str, str]] = {}
    for repo_id, repo in repos.items():
        mapping = {name: commit.oid for name, commit in sorted(repo.refs.items())}
        mapping.update({str(commit.index): commit.oid for commit in repo.commits})
        result[repo_id] = mapping
    return result


# ---------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------

class _HubError(Exception):
    def __init__(self, status: int, code: str | None, message: str, headers: list[tuple[str, str]] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or []


class _ClientGone(Exception):
    """The client went away (or the server is stopping) while a response was being written."""


CONFIG_DEFAULTS = {
    "throttle_bytes_per_s": None,  # slow every file body down to this rate, each response (so each connection) alone
    "tree_page_size": None,        # paginate tree listings with a Link header
    "drop_after_bytes": None,      # cut the connection of the next file bodies after this many bytes
    "drop_count": 0,               # ... for this many responses
    "drop_range": None,            # ... only those answering a Range header that starts with this ("bytes=1048576-")
    "inject_status": None,         # answer the next requests with this status
    "inject_count": 0,             # ... this many of them
    "inject_match": None,          # ... only those whose "METHOD /path" contains this string
    "inject_statuses": None,       # a list: answer the next matching requests with these statuses, one each, in
                                   # order, before any inject_status (a Hub that errs, then rate-limits: [500, 429])
    "retry_after": None,           # seconds: an injected status carries Retry-After, and every matching request
                                   # gets it until they have passed, as from the Hub's rate limiter
    "hostile_body": None,          # "endless": answer the matching requests with a JSON body that never ends, as
                                   # fast as the client reads; "drip": one that never ends either, a byte every
                                   # DRIP_EVERY seconds (far inside any socket timeout)
    "hostile_match": None,         # ... every request whose "METHOD /path" contains this string (None: every one)
    "hostile_status": None,        # ... with this status (None: 200), e.g. an endless error body
}
_STRING_KEYS = ("inject_match", "drop_range", "hostile_match")
HOSTILE_BODIES = ("endless", "drip")
DRIP_EVERY = 0.2  # seconds between the bytes of a dripping answer


def _validate_config(update: object) -> dict:
    if not isinstance(update, dict):
        raise ValueError("config must be a JSON object")
    for key, value in update.items():
        if key not in CONFIG_DEFAULTS:
            raise ValueError(f"unknown config key {key!r}")
        if key in _STRING_KEYS:
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{key} must be a string or null")
            continue
        if key == "inject_statuses":
            if value is not None and (not isinstance(value, list) or len(value) > 100 or not all(
                    isinstance(v, int) and not isinstance(v, bool) and 400 <= v <= 599 for v in value)):
                raise ValueError(f"{key} must be a list of at most 100 statuses 400-599, or null")
            continue
        if key == "hostile_body":
            if value is not None and value not in HOSTILE_BODIES:
                raise ValueError(f"{key} must be one of {', '.join(HOSTILE_BODIES)} or null")
            continue
        nullable = key not in ("drop_count", "inject_count")
        if value is None and nullable:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{key} must be an integer" + (" or null" if nullable else ""))
        low = {"throttle_bytes_per_s": 1, "tree_page_size": 1, "inject_status": 400, "hostile_status": 200}.get(key, 0)
        if key == "retry_after" and value > 3600:
            raise ValueError(f"{key} out of range: {value}")
        if value < low or (key in ("inject_status", "hostile_status") and value > 599):
            raise ValueError(f"{key} out of range: {value}")
    return dict(update)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, hub: "StandinHub", listener: str):
        self.hub = hub
        self.listener = listener
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)
        if listener == "tls":
            # The Hub API over HTTPS, as the real Hub and a serious mirror serve it.
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*hub.tls[:2])
            self.socket = context.wrap_socket(self.socket, server_side=True)

    def handle_error(self, request, client_address):
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            self.hub._emit(f"standin-hub: {client_address[0]} connection error: {error.__class__.__name__}")
        else:
            self.hub._emit(f"standin-hub: {client_address[0]} handler crashed:\n{traceback.format_exc()}")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "standin-hub/1"
    sys_version = ""
    timeout = 30  # bounds idle keep-alive reads and blocked writes
    server: _Server

    # -- plumbing ----------------------------------------------------------

    def setup(self):
        super().setup()
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
        finally:
            with self.server.connections_lock:
                self.server.connections.discard(self.connection)

    def log_request(self, code="-", size="-"):
        pass  # one line per request is written by _dispatch, without header values

    def log_message(self, format, *args):  # the base class names it format
        if format.startswith("Request timed out"):
            return  # an idle keep-alive connection being closed is not news
        self.server.hub._emit(f"standin-hub: {self.client_address[0]} {format % args}")

    def do_GET(self):
        self._dispatch()

    def do_HEAD(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def do_PUT(self):
        self._dispatch()

    def do_DELETE(self):
        self._dispatch()

    def do_PATCH(self):
        self._dispatch()

    def do_OPTIONS(self):
        self._dispatch()

    def _token(self) -> str | None:
        value = self.headers.get("Authorization")
        if not value:
            return None
        scheme, _, token = value.strip().partition(" ")
        return token.strip() if scheme.lower() == "bearer" and token.strip() else ""

    def _read_body(self) -> bytes | None:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            self._send_json(411, {"error": "Content-Length required"})
            return None
        length = self.headers.get("Content-Length")
        if not length:
            return b""
        try:
            size = int(length)
        except ValueError:
            size = -1
        if size < 0 or size > MAX_REQUEST_BODY:
            self.close_connection = True
            self._send_json(413, {"error": "request body too large"})
            return None
        return self.rfile.read(size)

    def _start(self, status: int, headers: list[tuple[str, object]]):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, _header_value(value))
        if self.close_connection:
            self.send_header("Connection", "close")
        self._mark(status=status)
        try:
            self.end_headers()
        except OSError as error:
            raise _ClientGone(error.__class__.__name__) from error

    def _write(self, data: bytes | memoryview, *, file_body: bool = False):
        """Write a body, throttled and possibly cut short if configured; count what was written."""
        hub = self.server.hub
        view = memoryview(data)
        total = len(view)
        drop_after = hub._take_drop(total, self.headers.get("Range")) if file_body else None
        started = time.monotonic()
        sent = 0
        while sent < total:  # at least one byte per turn; stop() and the socket timeout bound the time
            if hub._stopping.is_set():
                raise _ClientGone("server stopping")
            rate = hub._config["throttle_bytes_per_s"] if file_body else None
            chunk = 1 << 20 if rate is None else max(1, min(64 << 10, rate // 20))
            if drop_after is not None:
                chunk = min(chunk, drop_after - sent)
                if chunk <= 0:
                    self._mark(dropped=True)
                    self.close_connection = True
                    return
            piece = view[sent:sent + chunk]
            try:
                self.wfile.write(piece)
            except OSError as error:  # BrokenPipe, ConnectionReset, timeout
                raise _ClientGone(error.__class__.__name__) from error
            sent += len(piece)
            if self._entry is not None:
                with hub._lock:
                    self._entry["bytes_sent"] += len(piece)
            if rate is not None:
                delay = started + sent / rate - time.monotonic()
                if delay > 0 and hub._stopping.wait(delay):
                    raise _ClientGone("server stopping")

    def _mark(self, **fields):
        if self._entry is not None:
            with self.server.hub._lock:
                self._entry.update(fields)

    def _send_json(self, status: int, obj: object, headers: list[tuple[str, object]] | None = None):
        body = json.dumps(obj, separators=(",", ":")).encode()
        self._start(status, [("Content-Type", "application/json; charset=utf-8"),
                             ("Content-Length", len(body)), *(headers or [])])
        if self.command != "HEAD":
            self._write(body)

    def _send_hostile(self, mode: str, status: int):
        """A JSON answer that never ends (no Content-Length, the connection closed only by the client or stop()):
        "endless" as fast as the client reads, "drip" a byte every DRIP_EVERY seconds."""
        hub = self.server.hub
        self.close_connection = True
        self._start(status, [("Content-Type", "application/json; charset=utf-8")])
        if self.command == "HEAD":
            return
        self._write(b'{"siblings": [')
        piece = b'{"rfilename": "config.json"}, ' * 2048 if mode == "endless" else b" "
        while not hub._stopping.is_set():
            self._write(piece)
            if mode == "drip" and hub._stopping.wait(DRIP_EVERY):
                break
        raise _ClientGone("server stopping")

    def _send_error(self, error: _HubError):
        headers: list[tuple[str, object]] = list(error.headers)
        if error.code:
            headers.append(("X-Error-Code", error.code))
        headers.append(("X-Error-Message", error.message))
        self._send_json(error.status, {"error": error.message}, headers)

    # -- request dispatch --------------------------------------------------

    def _dispatch(self):
        hub = self.server.hub
        self._entry = None
        split = urlsplit(self.path)
        raw_path, query = split.path or "/", split.query
        body = self._read_body()
        if body is None:
            return
        if self.server.listener == "hub" and raw_path.startswith("/_standin/"):
            try:
                self._control(raw_path, body)
            except _ClientGone:
                self.close_connection = True
            return
        token = self._token()
        self._entry = hub._record({
            "in_flight": hub._bodies_in_flight(self.command),
            "listener": self.server.listener,
            "method": self.command,
            "path": raw_path,
            "query": query or None,
            "range": self.headers.get("Range"),
            "status": None,
            "bytes_sent": 0,
            "authorized": token is not None,
            "finished": False,
            "client_aborted": False,
            "dropped": False,
            "started_at": time.monotonic(),  # CLOCK_MONOTONIC: comparable with a client's on this machine
            "ended_at": None,
        })
        try:
            injected, wait = hub._take_injection(f"{self.command} {raw_path}")
            if injected is not None:
                raise _HubError(injected, None, f"Injected failure {injected}",
                                [("Retry-After", wait)] if wait is not None else None)
            if self.command not in ("GET", "HEAD", "POST"):
                raise _HubError(405, None, "Method not allowed")
            hostile = hub._take_hostile(f"{self.command} {raw_path}")
            if hostile is not None:
                return self._send_hostile(*hostile)
            if self.server.listener == "cdn":
                self._route_cdn(raw_path)
            else:
                self._route_hub(raw_path, query, token, body)
        except _HubError as error:
            try:
                self._send_error(error)
            except _ClientGone:
                self._mark(client_aborted=True)
                self.close_connection = True
        except _ClientGone:
            self._mark(client_aborted=True)
            self.close_connection = True
        except Exception:  # a bug here must not kill the connection thread silently
            hub._emit(f"standin-hub: error while serving {self.command} {raw_path}:\n{traceback.format_exc()}")
            self.close_connection = True
            if self._entry["status"] is None:
                try:
                    self._send_json(500, {"error": "internal stand-in error"})
                except _ClientGone:
                    pass
        finally:
            self._mark(finished=True, ended_at=time.monotonic())
            hub._access_log(self.client_address[0], self._entry)

    # -- control -----------------------------------------------------------

    def _control(self, raw_path: str, body: bytes):
        hub = self.server.hub
        name, method = raw_path[len("/_standin/"):].strip("/"), self.command
        if name == "requests" and method in ("GET", "HEAD"):
            self._send_json(200, hub.requests())
        elif name == "counts" and method in ("GET", "HEAD"):
            repo = parse_qs(urlsplit(self.path).query).get("repo")
            self._send_json(200, hub.counts(repo[-1] if repo else None))
        elif name == "reset" and method == "POST":
            hub.reset()
            self._send_json(200, {"ok": True})
        elif name == "config" and method in ("GET", "HEAD"):
            self._send_json(200, hub.config())
        elif name == "config" and method == "POST":
            try:
                update = json.loads(body or b"{}")
                self._send_json(200, hub.configure(**_validate_config(update)))
            except ValueError as error:
                self._send_json(400, {"error": str(error)})
        elif name == "commits" and method in ("GET", "HEAD"):
            self._send_json(200, hub.commits())
        elif name == "tamper" and method == "POST":
            try:
                request = json.loads(body or b"{}")
                self._send_json(200, hub.tamper(request["repo_id"], request["revision"], request["path"],
                                                int(request.get("offset", 0))))
            except (ValueError, KeyError, TypeError) as error:
                self._send_json(400, {"error": f"tamper wants repo_id, revision and path: {error}"})
        elif name == "health" and method in ("GET", "HEAD"):
            self._send_json(200, {"ok": True})
        else:
            self._send_json(404, {"error": f"unknown control endpoint {method} {raw_path}"})

    # -- the Hub -----------------------------------------------------------

    def _repo_for(self, candidates: list[tuple[str, list[str]]]) -> tuple[str, Repo | None, list[str]]:
        """Pick the known repo among (repo_id, rest) candidates, else the first candidate."""
        for repo_id, rest in candidates:
            repo = self.server.hub._repos.get(repo_id)
            if repo is not None:
                return repo_id, repo, rest
        repo_id, rest = candidates[0]
        return repo_id, None, rest

    def _check_access(self, repo_id: str, repo: Repo | None, token: str | None, *, files: bool) -> Repo:
        if repo is None or (repo.private and token not in repo.tokens):
            # The Hub answers 401 to an anonymous caller and 404 to an authenticated one.
            status = 401 if token is None else 404
            raise _HubError(status, "RepoNotFound", f"Repository {repo_id} not found on this stand-in Hub")
        if repo.gated and (files or repo.gate_metadata):
            if token is not None and token in repo.denied_tokens:
                raise _HubError(403, "GatedRepo", f"Access to gated repo {repo_id} was refused for this token")
            if token is None or token not in repo.tokens:
                raise _HubError(401, "GatedRepo",
                                f"Repo {repo_id} is gated: send an authorized token to access its files")
        return repo

    @staticmethod
    def _revision(repo: Repo, revision: str | None) -> Commit:
        commit = repo.resolve(revision)
        if commit is None:
            raise _HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return commit

    def _route_hub(self, raw_path: str, query: str, token: str | None, body: bytes):
        segs = raw_path.split("/")[1:]
        if segs and segs[0] == "api":
            return self._route_api(segs[1:], query, token, body)
        candidates = []
        if len(segs) >= 4 and segs[2] == "resolve":
            candidates.append((f"{segs[0]}/{segs[1]}", segs[3:]))
        if len(segs) >= 3 and segs[1] == "resolve":
            candidates.append((segs[0], segs[2:]))
        if not candidates or self.command == "POST":
            raise _HubError(404, None, "Not Found")
        repo_id, repo, rest = self._repo_for(candidates)
        repo = self._check_access(repo_id, repo, token, files=True)
        commit = self._revision(repo, unquote(rest[0]))
        path = "/".join(unquote(s) for s in rest[1:])
        entry = commit.files.get(path)
        if entry is None:
            raise _HubError(404, "EntryNotFound", f"Entry not found: {path}", [("X-Repo-Commit", commit.oid)])
        self._serve_file(entry, commit)

    def _route_api(self, segs: list[str], query: str, token: str | None, body: bytes):
        if len(segs) < 2 or segs[0] not in ("models", "datasets", "spaces", "kernels"):
            raise _HubError(404, None, "Not Found")
        keywords = {"revision", "tree", "refs", "paths-info", "commits", "auth-check"}
        after = segs[1:]
        two = (f"{after[0]}/{after[1]}", after[2:]) if len(after) >= 2 else None
        one = (after[0], after[1:])
        if segs[0] != "models":  # only model repos are served: everything else is unknown
            candidates = [two if two and after[1] not in keywords else one]
            repo_id, _, rest = self._repo_for(candidates)
            repo = None
        else:
            prefer_one = two is None or (after[1] in keywords and two[0] not in self.server.hub._repos)
            repo_id, repo, rest = self._repo_for([one, two] if prefer_one and two else [c for c in (two, one) if c])
        repo = self._check_access(repo_id, repo, token, files=False)
        params = parse_qs(query, keep_blank_values=True)
        op = rest[0] if rest else ""
        if (self.command == "POST") != (op == "paths-info"):
            raise _HubError(405, None, "Method not allowed")
        if not rest:
            return self._send_json(200, self._model_info(repo, repo.default, params))
        if op == "revision" and len(rest) >= 2:
            commit = self._revision(repo, "/".join(unquote(s) for s in rest[1:]))
            return self._send_json(200, self._model_info(repo, commit, params))
        if op == "tree":
            commit = self._revision(repo, unquote(rest[1]) if len(rest) >= 2 else None)
            path = "/".join(unquote(s) for s in rest[2:]).strip("/")
            return self._tree(repo, commit, path, raw_path=urlsplit(self.path).path, params=params)
        if op == "refs" and len(rest) == 1:
            branches = [{"name": name, "ref": f"refs/heads/{name}", "targetCommit": commit.oid}
                        for name, commit in sorted(repo.refs.items())]
            return self._send_json(200, {"branches": branches, "converts": [], "tags": [], "pullRequests": []})
        if op == "commits":
            commit = self._revision(repo, "/".join(unquote(s) for s in rest[1:]) or None)
            history = [{"id": c.oid, "title": c.title, "message": "", "authors": [{"user": "standin"}],
                        "date": c.date} for c in reversed(repo.commits[:commit.index + 1])]
            return self._send_json(200, history)
        if op == "auth-check" and len(rest) == 1:
            # The Hub's own answer to huggingface_hub's auth_check(): the files' rule, so a gated repo's
            # GatedRepo (401 without a token or with one not granted, 403 for a refused one), else 200.
            self._check_access(repo_id, repo, token, files=True)
            return self._send_json(200, {})
        if op == "paths-info" and len(rest) >= 2:
            commit = self._revision(repo, "/".join(unquote(s) for s in rest[1:]))
            return self._paths_info(commit, body)
        raise _HubError(404, None, "Not Found")

    def _model_info(self, repo: Repo, commit: Commit, params: dict[str, list[str]]) -> dict:
        blobs = _truthy(params.get("blobs"))
        siblings = []
        for path in sorted(commit.files):
            entry = commit.files[path]
            sibling: dict = {"rfilename": path}
            if blobs:
                sibling.update(size=entry.size, blobId=entry.git_oid)
                if entry.lfs:
                    sibling["lfs"] = {"sha256": entry.sha256, "size": entry.size, "pointerSize": entry.pointer_size}
            siblings.append(sibling)
        info = {
            "_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "author": repo.repo_id.split("/")[0] if "/" in repo.repo_id else None,
            "sha": commit.oid,
            "lastModified": commit.date,
            "createdAt": repo.commits[0].date,
            "private": repo.private,
            "disabled": False,
            "gated": "auto" if repo.gated else False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": siblings,
            "spaces": [],
            "usedStorage": sum(entry.size for entry in commit.files.values()),
        }
        if _truthy(params.get("securityStatus")):
            info["securityRepoStatus"] = {"scansDone": True, "filesWithIssues": []}
        expand = params.get("expand", []) + params.get("expand[]", [])
        if expand:
            info = {key: value for key, value in info.items() if key in ("_id", "id") or key in expand}
        return info

    def _tree_entry(self, commit: Commit, path: str, expand: bool) -> dict:
        if path in commit.files:
            entry = commit.files[path]
            item: dict = {"type": "file", "oid": entry.git_oid, "size": entry.size, "path": path}
            if entry.lfs:
                item["lfs"] = {"oid": entry.sha256, "size": entry.size, "pointerSize": entry.pointer_size}
            touched = commit.touched[path]
        else:
            item = {"type": "directory", "oid": commit.trees[path], "size": 0, "path": path}
            touched = commit.touched[path + "/"]
        if expand:
            item["lastCommit"] = {"id": touched.oid, "title": touched.title, "date": touched.date}
            if item["type"] == "file":
                item["securityFileStatus"] = {"status": "safe", "avScan": {"virusFound": False, "virusNames": None},
                                              "pickleImportScan": None}
        return item

    def _tree(self, repo: Repo, commit: Commit, path: str, raw_path: str, params: dict[str, list[str]]):
        if path and path not in commit.trees:
            raise _HubError(404, "EntryNotFound", f"Directory not found: {path}", [("X-Repo-Commit", commit.oid)])
        recursive, expand = _truthy(params.get("recursive")), _truthy(params.get("expand"))
        prefix = path + "/" if path else ""
        names = [p for p in list(commit.trees) + list(commit.files) if p and p.startswith(prefix)]
        if not recursive:
            names = [p for p in names if "/" not in p[len(prefix):]]
        names.sort()
        page_size = self.server.hub._config["tree_page_size"]
        try:
            start = max(0, int((params.get("cursor") or ["0"])[0]))
        except ValueError:
            raise _HubError(400, None, "Invalid cursor") from None
        stop = len(names) if page_size is None else min(len(names), start + page_size)
        headers: list[tuple[str, object]] = []
        if stop < len(names):
            next_params = {"recursive": "true" if recursive else "false",
                           "expand": "true" if expand else "false", "cursor": str(stop)}
            headers.append(("Link", f'<{self._base_url()}{raw_path}?{urlencode(next_params)}>; rel="next"'))
        self._send_json(200, [self._tree_entry(commit, p, expand) for p in names[start:stop]], headers)

    def _paths_info(self, commit: Commit, body: bytes):
        content_type = (self.headers.get("Content-Type") or "").lower()
        if "json" in content_type:
            try:
                data = json.loads(body or b"{}")
            except ValueError:
                raise _HubError(400, None, "Invalid JSON body") from None
            paths, expand = data.get("paths", []), bool(data.get("expand", False))
            paths = [paths] if isinstance(paths, str) else paths
        else:
            form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
            paths, expand = form.get("paths", []), _truthy(form.get("expand"))
        found = []
        for path in paths:
            path = str(path).strip("/")
            if path in commit.files or (path and path in commit.trees):
                found.append(self._tree_entry(commit, path, expand))
        self._send_json(200, found)

    def _base_url(self) -> str:
        return f"http://{self.headers.get('Host') or self.server.hub.url.split('://', 1)[1]}"

    def _serve_file(self, entry: FileEntry, commit: Commit):
        hub = self.server.hub
        headers: list[tuple[str, object]] = [
            ("X-Repo-Commit", commit.oid),
            ("ETag", f'"{entry.etag}"'),
            ("Accept-Ranges", "bytes"),
        ]
        if entry.lfs:
            headers += [("X-Linked-Etag", f'"{entry.sha256}"'), ("X-Linked-Size", entry.size)]
            if hub.lfs_redirect:
                location = f"{hub._cdn_base(self.headers.get('Host'))}/lfs/{entry.sha256}"
                self._start(302, [*headers, ("Location", location), ("Content-Length", 0)])
                return
        self._serve_bytes(entry.data, headers, "text/plain; charset=utf-8" if not entry.lfs and _is_text(entry)
                          else "application/octet-stream")

    def _route_cdn(self, raw_path: str):
        segs = raw_path.split("/")[1:]
        if self.command == "POST" or len(segs) != 2 or segs[0] != "lfs" or not SHA256_HEX.fullmatch(segs[1]):
            raise _HubError(404, None, "Not Found")
        data = self.server.hub._lfs_objects.get(segs[1])
        if data is None:
            raise _HubError(404, None, "No such object")
        self._serve_bytes(data, [("ETag", f'"{segs[1]}"'), ("Accept-Ranges", "bytes")], "application/octet-stream")

    def _serve_bytes(self, data: bytes, headers: list[tuple[str, object]], content_type: str):
        size = len(data)
        wanted = _parse_range(self.headers.get("Range"), size)
        if wanted == "unsatisfiable":
            raise _HubError(416, None, "Requested range not satisfiable", [("Content-Range", f"bytes */{size}")])
        status, start, end = (200, 0, size) if wanted is None else (206, wanted[0], wanted[1] + 1)
        extra: list[tuple[str, object]] = [("Content-Type", content_type), ("Content-Length", end - start)]
        if status == 206:
            extra.append(("Content-Range", f"bytes {start}-{end - 1}/{size}"))
        self._start(status, [*headers, *extra])
        if self.command != "HEAD":
            self._write(memoryview(data)[start:end], file_body=True)


REQUEST_KINDS = ("info", "listing", "auth", "file-head", "file-get", "other")


def request_kind(entry: dict) -> str:
    """What a recorded request asked the Hub for: see REQUEST_KINDS and the module's text."""
    path, method = entry["path"], entry["method"]
    if entry["listener"] == "cdn" or "/resolve/" in path:
        return "file-head" if method == "HEAD" else "file-get"
    segs = path.split("/")[1:]
    if segs[:1] != ["api"]:
        return "other"
    if "tree" in segs or "paths-info" in segs:
        return "listing"
    if segs[-1:] == ["auth-check"]:
        return "auth"
    if "refs" in segs or "commits" in segs:
        return "other"
    return "info"


def count_kinds(entries: list[dict], repo_id: str | None = None, lfs: frozenset[str] = frozenset()) -> dict[str, int]:
    """Recorded requests by kind (request_kind), every kind named; ``repo_id``: that repo's alone (``lfs``: the
    sha256 of its LFS files, whose bodies the CDN origin serves by that name alone)."""
    found = dict.fromkeys(REQUEST_KINDS, 0)
    for entry in entries:
        if repo_id is None or (entry["path"].rsplit("/", 1)[-1] in lfs if entry["listener"] == "cdn"
                               else f"/{repo_id}/" in entry["path"] + "/"):
            found[request_kind(entry)] += 1
    return found


def _truthy(values: list[str] | None) -> bool:
    return bool(values) and values[-1].strip().lower() in ("1", "true", "yes")


def _is_text(entry: FileEntry) -> bool:
    try:
        codecs.getincrementaldecoder("utf-8")().decode(entry.data[:4096], final=False)
    except UnicodeDecodeError:
        return False
    return True


def _header_value(value: object) -> str:
    """Header-safe text: no control characters (no header injection), latin-1 only."""
    text = "".join(ch for ch in str(value) if ch >= " " and ch != "\x7f")
    return text.encode("latin-1", "backslashreplace").decode("latin-1")


_RANGE = re.compile(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", re.IGNORECASE)


def _parse_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """(first, last) inclusive, "unsatisfiable", or None to serve the whole body.

    Malformed and multi-range headers are ignored, which RFC 9110 allows.
    """
    if not header or "," in header:
        return None
    match = _RANGE.fullmatch(header)
    if not match or (not match.group(1) and not match.group(2)):
        return None
    first, last = match.groups()
    if not first:  # suffix range: the last N bytes
        length = int(last)
        if length == 0 or size == 0:
            return "unsatisfiable"
        return max(0, size - length), size - 1
    start = int(first)
    end = size - 1 if not last else min(int(last), size - 1)
    if last and int(last) < start:
        return None
    if start >= size:
        return "unsatisfiable"
    return start, end


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------

class StandinHub:
    """A running stand-in Hub. Use as a context manager, or start() / stop()."""

    def __init__(self, spec: dict | str | Path, host: str = "127.0.0.1", port: int = 0, *,
                 lfs_redirect: bool = False, cdn_port: int = 0, cdn_base_url: str | None = None,
                 access_log: bool = True, log_stream=None, tls: tuple[str, str, int] | None = None):
        self._repos = build_repos(spec)
        self.tls = tls  # (certificate, key, port) of an HTTPS listener for the Hub API, or None
        self.host = host
        self.port = port
        self.lfs_redirect = lfs_redirect
        self.cdn_port = cdn_port
        self.cdn_base_url = cdn_base_url.rstrip("/") if cdn_base_url else None
        self.access_log = access_log
        self._log_stream = log_stream
        self._lock = threading.Lock()
        self._emit_lock = threading.Lock()
        self._log: list[dict] = []
        self._next_id = 0
        self._config = dict(CONFIG_DEFAULTS)
        self._limited_until, self._limited_status = 0.0, None  # a Retry-After window (see retry_after)
        self._stopping = threading.Event()
        self._servers: list[_Server] = []
        self._threads: list[threading.Thread] = []
        self._lfs_objects = {entry.sha256: entry.data for repo in self._repos.values() for commit in repo.commits
                             for entry in commit.files.values() if entry.lfs}

    # lifecycle

    def start(self) -> "StandinHub":
        if self._servers:
            return self
        self._stopping.clear()
        listeners = [("hub", self.port)] + ([("cdn", self.cdn_port)] if self.lfs_redirect else []) + \
            ([("tls", self.tls[2])] if self.tls else [])
        try:
            for listener, port in listeners:
                self._servers.append(_Server((self.host, port), self, listener))
        except OSError:
            for server in self._servers:
                server.server_close()
            self._servers = []
            raise
        for server in self._servers:
            thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                      name=f"standin-hub-{server.listener}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stopping.set()
        for server in self._servers:
            server.shutdown()
            server.server_close()
            with server.connections_lock:
                connections = list(server.connections)
            for connection in connections:
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers, self._threads = [], []

    def __enter__(self) -> "StandinHub":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @staticmethod
    def _connect_host(host: str) -> str:
        return "127.0.0.1" if host in ("", "0.0.0.0") else host

    @property
    def bound_port(self) -> int:
        if not self._servers:
            raise RuntimeError("stand-in Hub is not started")
        return self._servers[0].server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self._connect_host(self.host)}:{self.bound_port}"

    @property
    def cdn_url(self) -> str | None:
        if not self.lfs_redirect or len(self._servers) < 2:
            return None
        return self.cdn_base_url or f"http://{self._connect_host(self.host)}:{self._servers[1].server_address[1]}"

    def _cdn_base(self, host_header: str | None) -> str:
        if self.cdn_base_url:
            return self.cdn_base_url
        port = self._servers[1].server_address[1]
        hostname = self._connect_host(self.host)
        if host_header:
            host_header = host_header.strip()
            if host_header.startswith("["):
                hostname = host_header[:host_header.find("]") + 1] or hostname
            else:
                hostname = host_header.rsplit(":", 1)[0] or hostname
        return f"http://{hostname}:{port}"

    # repo data

    def commit(self, repo_id: str, branch: str | int = DEFAULT_BRANCH) -> str:
        """Commit id of a branch name, a commit index (oldest is 0), or a full commit id."""
        repo = self._repos[repo_id]
        commit = repo.commits[branch] if isinstance(branch, int) else repo.resolve(branch)
        if commit is None:
            raise KeyError(f"{repo_id} has no revision {branch!r}")
        return commit.oid

    def commits(self) -> dict[str, dict[str, str]]:
        return commit_map(self._repos)

    def _file(self, repo_id: str, revision: str | int, path: str) -> FileEntry:
        commit = self._repos[repo_id].by_oid[self.commit(repo_id, revision)]
        return commit.files[path]

    def file_bytes(self, repo_id: str, commit: str | int, path: str) -> bytes:
        return self._file(repo_id, commit, path).data

    def file_meta(self, repo_id: str, commit: str | int, path: str) -> dict:
        """size, git_oid, sha256 (LFS only), lfs, pointer_size and etag (the blob name in a client cache)."""
        entry = self._file(repo_id, commit, path)
        return {"path": entry.path, "size": entry.size, "lfs": entry.lfs, "git_oid": entry.git_oid,
                "sha256": entry.sha256, "pointer_size": entry.pointer_size, "etag": entry.etag}

    def files(self, repo_id: str, commit: str | int = DEFAULT_BRANCH) -> list[str]:
        return sorted(self._repos[repo_id].by_oid[self.commit(repo_id, commit)].files)

    # request log and behaviour

    def requests(self) -> list[dict]:
        with self._lock:
            return [dict(entry) for entry in self._log]

    def reset(self) -> None:
        with self._lock:
            self._log = []

    def counts(self, repo_id: str | None = None) -> dict[str, int]:
        """The recorded requests by kind (request_kind), every kind named; ``repo_id``: that repo's alone."""
        repo = self._repos.get(repo_id or "")
        lfs = frozenset(e.sha256 for c in repo.commits for e in c.files.values() if e.lfs) if repo else frozenset()
        return count_kinds(self.requests(), repo_id, lfs)

    def tamper(self, repo_id: str, revision: str | int, path: str, offset: int = 0) -> dict:
        """Flip one byte of a file of one commit, the way a mirror that rewrote content would serve it: the
        commit id stays, while the listing, the ETag and the bytes all describe the new content consistently,
        so only a client holding the original sha256 (a lock) can tell. Returns the file's new metadata."""
        with self._lock:
            commit = self._repos[repo_id].by_oid[self.commit(repo_id, revision)]
            old = commit.files[path]
            data = bytearray(old.data)
            data[offset % len(data)] ^= 0x01
            entry = FileEntry(path, bytes(data), old.lfs)
            commit.files = {**commit.files, path: entry}  # a new dict: other commits sharing the old one keep it
            if entry.lfs:
                self._lfs_objects[entry.sha256] = entry.data
        return self.file_meta(repo_id, commit.oid, path)

    def config(self) -> dict:
        with self._lock:
            return dict(self._config)

    def configure(self, **changes) -> dict:
        _validate_config(changes)
        with self._lock:
            self._config.update(changes)
            if changes.get("drop_after_bytes") is not None and "drop_count" not in changes:
                self._config["drop_count"] = 1
            if changes.get("inject_status") is not None and "inject_count" not in changes:
                self._config["inject_count"] = 1
            if changes.get("inject_statuses") is not None:
                self._config["inject_statuses"] = list(changes["inject_statuses"])  # consumed here, not the caller's
            if {"inject_status", "inject_statuses", "inject_match", "retry_after"} & set(changes):
                self._limited_until = 0.0
            return dict(self._config)

    def set_throttle(self, bytes_per_s: int | None) -> None:
        self.configure(throttle_bytes_per_s=bytes_per_s)

    def _bodies_in_flight(self, method: str) -> int:
        """How many other GETs are still being answered as this one arrives (how many connections a client uses)."""
        if method != "GET":
            return 0
        with self._lock:
            return sum(1 for e in self._log if e["method"] == "GET" and not e["finished"])

    def _record(self, entry: dict) -> dict:
        with self._lock:
            entry["id"] = self._next_id
            self._next_id += 1
            self._log.append(entry)
        return entry

    def _take_drop(self, length: int, range_header: str | None) -> int | None:
        with self._lock:
            after, wanted = self._config["drop_after_bytes"], self._config["drop_range"]
            if after is None or self._config["drop_count"] <= 0 or length <= after:
                return None
            if wanted is not None and not (range_header or "").replace(" ", "").startswith(wanted):
                return None
            self._config["drop_count"] -= 1
            return after

    def _take_injection(self, target: str) -> tuple[int | None, int | None]:
        """(status, Retry-After seconds) to answer the request "METHOD /path" with, or (None, None)."""
        with self._lock:
            status, match = self._config["inject_status"], self._config["inject_match"]
            if match and match not in target:
                return None, None
            now = time.monotonic()
            if now < self._limited_until:  # inside a Retry-After window: refused again, as a rate limiter does
                return self._limited_status, max(1, round(self._limited_until - now + 0.499))
            wait = self._config["retry_after"]
            if self._config["inject_statuses"]:
                status = self._config["inject_statuses"].pop(0)
                wait = wait if status in (429, 503) else None  # in a sequence, as the Hub's: a 500 asks no wait
            elif status is None or self._config["inject_count"] <= 0:
                return None, None
            else:
                self._config["inject_count"] -= 1
            if wait is not None:
                self._limited_until, self._limited_status = now + wait, status
            return status, wait

    def _take_hostile(self, target: str) -> tuple[str, int] | None:
        """(mode, status) of a hostile answer to the request "METHOD /path", or None."""
        with self._lock:
            mode, match = self._config["hostile_body"], self._config["hostile_match"]
            if mode is None or (match and match not in target):
                return None
            return mode, self._config["hostile_status"] or 200

    def _emit(self, line: str) -> None:
        if not self.access_log:
            return
        stream = self._log_stream or sys.stderr
        with self._emit_lock:
            try:
                stream.write(line.rstrip("\n") + "\n")
                stream.flush()
            except (OSError, ValueError):
                pass

    def _access_log(self, client: str, entry: dict) -> None:
        with self._lock:
            e = dict(entry)
        target = e["path"] + (f"?{e['query']}" if e["query"] else "")
        flags = "".join(f" {name}" for name in ("client_aborted", "dropped") if e[name])
        self._emit(f"standin-hub: {client} {e['listener']} \"{e['method']} {target}\" {e['status']} "
                   f"sent={e['bytes_sent']} range={e['range'] or '-'} auth={'yes' if e['authorized'] else 'no'}{flags}")


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="STAND-IN for the Hugging Face Hub (tests and sandbox only)")
    parser.add_argument("--spec", required=True, help="repo spec, JSON")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--print-commits", action="store_true",
                        help="print {repo_id: {branch or index: commit}} as JSON and exit")
    parser.add_argument("--write-commits", metavar="OUT.json", help="write the same map to a file, then serve")
    parser.add_argument("--lfs-redirect", action="store_true",
                        help="answer LFS resolves with a 302 to a second listener, like the Hub's CDN")
    parser.add_argument("--cdn-port", type=int, default=0, help="port of that second listener (0: any)")
    parser.add_argument("--cdn-base-url", default=None, help="base URL clients reach the second listener at")
    parser.add_argument("--throttle", type=int, default=None,
                        help="file body rate of each response (so each connection), bytes per second")
    parser.add_argument("--quiet", action="store_true", help="no access log")
    parser.add_argument("--tls-cert", default=None, help="with --tls-key: also serve the Hub API over HTTPS")
    parser.add_argument("--tls-key", default=None)
    parser.add_argument("--tls-port", type=int, default=8443)
    args = parser.parse_args(argv)

    if args.print_commits:
        print(json.dumps(commit_map(build_repos(args.spec)), indent=1, sort_keys=True), flush=True)
        return 0
    hub = StandinHub(args.spec, args.host, args.port, lfs_redirect=args.lfs_redirect, cdn_port=args.cdn_port,
                     cdn_base_url=args.cdn_base_url, access_log=not args.quiet,
                     tls=(args.tls_cert, args.tls_key, args.tls_port) if args.tls_cert else None)
    if args.throttle:
        hub.set_throttle(args.throttle)
    if args.write_commits:
        Path(args.write_commits).write_text(json.dumps(hub.commits(), indent=1, sort_keys=True) + "\n")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    hub.start()
    print(f"standin-hub listening on http://{args.host}:{hub.bound_port}", flush=True)
    if hub.cdn_url:
        print(f"standin-hub cdn listening on {hub.cdn_url}", file=sys.stderr, flush=True)
    while not stop.wait(0.5):  # until SIGTERM or SIGINT
        pass
    hub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
