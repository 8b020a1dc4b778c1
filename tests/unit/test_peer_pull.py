"""The pull's peer side (hostside/pull/peers.py): a host takes a model's files from peer doors that hold them verified,
byte ranges from several at once, with the stand-in Hub as the fallback. The doors here are Python's http.server on
127.0.0.1 (tests only), over TLS with a fixed self-signed certificate (fixtures/peer_tls, made once with openssl
for these tests), serving blobs by name with ranges to a request with the site key, as the fleet's nginx does;
one can flip a byte, cut its answers and vanish, refuse the key, or hold a blob back for a while."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from hfstandin import StandinHub
from sglang_infra.hostside.pull import peers, pull_errors
from sglang_infra.hostside.pull.pull import Puller
from sglang_infra.machine import ship

SCRIPT = Path(tempfile.mkdtemp(prefix="hfpull-peers-")) / "hfpull.py"
SCRIPT.write_text(ship.program("pull.hfpull"))
KEY = "site-key-0123456789abcdef"
TLS_DIR = Path(__file__).parent / "fixtures" / "peer_tls"   # door.* and other.*: two self-signed pairs (tests only)
MiB = 1 << 20
GATED = "org/gated-fleet"
TOKEN = "hf_peersGatedToken0123456789abcdef"
SPEC = {"repos": [{"repo_id": "org/fleet", "commits": [{"branch": "main", "files": [
    {"path": "config.json", "text": '{"fleet": true}'},
    {"path": "model-1.safetensors", "size": 3 * MiB + 12345, "seed": 11, "lfs": True},
    {"path": "model-2.safetensors", "size": 2 * MiB + 777, "seed": 12, "lfs": True},
    {"path": "tokenizer.json", "text": '{"vocab": ["x"]}'}]}]},
    {"repo_id": GATED, "gated": True, "tokens": [TOKEN], "commits": [{"branch": "main", "files": [
        {"path": "config.json", "text": '{"gated": true}'},
        {"path": "model.safetensors", "size": MiB + 5, "seed": 13, "lfs": True}]}]}]}


def tls_server(name: str = "door") -> ssl.SSLContext:
    """A server's TLS context with the fixed pair ``name`` (fixtures/peer_tls)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(TLS_DIR / f"{name}.crt", TLS_DIR / f"{name}.key")
    return context


def pin(name: str = "door") -> str:
    """The sha256 of the pair ``name``'s certificate (DER), as the deploy reads it on a door's host."""
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert((TLS_DIR / f"{name}.crt").read_text())).hexdigest()


class _TLSServer(ThreadingHTTPServer):
    """http.server over TLS, each handshake in the request's own thread (a silent client stalls nobody else)."""

    daemon_threads = True
    context = tls_server()

    def finish_request(self, request, client_address):
        try:
            request = self.context.wrap_socket(request, server_side=True)
        except (OSError, ValueError):
            return
        super().finish_request(request, client_address)

    def handle_error(self, request, client_address):
        pass


class Door:
    """A peer door on 127.0.0.1: GET/HEAD /blobs/<name>, ranges answered 206, the site key required.
    ``corrupt``: the offsets of a blob whose byte it flips; ``cut_after``: after that many body bytes in all it cuts
    the answer and stops listening (the peer disappears); ``held``: names answered 404 until released."""

    def __init__(self, blobs: dict[str, bytes], key: str = KEY):
        self.blobs, self.key = blobs, key
        self.corrupt: dict[str, set[int]] = {}  # blob name -> offsets
        self.cut_after: int | None = None
        self.held: set[str] = set()
        self.pause = 0.0  # seconds after each 64 KiB sent
        self.sent = 0
        self.log: list[tuple[str, str, int]] = []  # (method, path, status)
        self.lock = threading.Lock()
        door = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self.answer(body=False)

            def do_GET(self):
                try:
                    self.answer(body=True)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the pull was killed

            def answer(self, body: bool):
                m = re.fullmatch(r"/blobs/([0-9a-f]{40}|[0-9a-f]{64})", self.path)
                status, data = 200, b""
                if self.headers.get("Authorization") != f"Bearer {door.key}":
                    status = 401
                elif not m or m.group(1) not in door.blobs or m.group(1) in door.held:
                    status = 404
                with door.lock:
                    door.log.append((self.command, self.path, status))
                if status != 200:
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = door.blobs[m.group(1)]
                start, end = 0, len(data)
                rng = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
                if rng:
                    start, end = int(rng.group(1)), min(len(data), int(rng.group(2) or len(data) - 1) + 1)
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(end - start))
                self.end_headers()
                if not body:
                    return
                out = bytearray(data[start:end])
                for at in door.corrupt.get(m.group(1), ()):
                    if start <= at < end:
                        out[at - start] ^= 0xFF
                for i in range(0, len(out), 64 * 1024):
                    piece = bytes(out[i:i + 64 * 1024])
                    with door.lock:
                        if door.cut_after is not None and door.sent + len(piece) > door.cut_after:
                            self.wfile.write(piece[:max(0, door.cut_after - door.sent)])
                            self.wfile.flush()
                            door.sent = door.cut_after
                            self.close_connection = True
                            threading.Thread(target=door.server.shutdown).start()
                            return
                        door.sent += len(piece)
                    self.wfile.write(piece)
                    if door.pause:
                        time.sleep(door.pause)

        self.server = _TLSServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.label = f"127.0.0.1:{self.server.server_address[1]}"
        self.arg = f"{self.label}={pin()}"   # --peer's: the door's address, port and certificate

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def gets(self) -> int:
        return sum(1 for method, _, status in self.log if method == "GET")


@pytest.fixture(scope="module")
def hub():
    with StandinHub(SPEC, access_log=False) as running:
        yield running


@pytest.fixture(scope="module")
def seeded(hub, tmp_path_factory):
    """The model pulled once from the Hub: {blob name: bytes}, as a peer holds it verified."""
    cache = tmp_path_factory.mktemp("seed")
    Puller(str(cache / "hub"), "org/fleet", "main", hub.url, None, lock_wait=5,
           records_dir=str(cache / "verified")).run()
    blobs = cache / "hub" / "models--org--fleet" / "blobs"
    return {name: (blobs / name).read_bytes() for name in os.listdir(blobs)}


@pytest.fixture
def doors(seeded):
    made: list[Door] = []

    def make(n: int = 2, key: str = KEY) -> list[Door]:
        new = [Door(dict(seeded), key) for _ in range(n)]
        made.extend(new)
        return new
    yield make
    for door in made:
        try:
            door.close()
        except Exception:
            pass


def key_file(tmp_path: Path, mode: int = 0o600) -> str:
    path = tmp_path / "peer.key"
    path.write_text(KEY + "\n")
    path.chmod(mode)
    return str(path)


def hub_file_bytes(hub) -> int:
    """Body bytes the stand-in Hub sent for files (resolve and LFS answers), not metadata."""
    return sum(e["bytes_sent"] for e in hub.requests() if e["method"] == "GET" and "/resolve/" in e["path"])


def run_pull(hub, tmp_path: Path, door_list: list[Door], *extra: str, cache: Path | None = None,
             stdin: str | None = None):
    cache = cache or tmp_path / "host"
    args = [sys.executable, "-I", str(SCRIPT), "pull", "--cache-dir", str(cache / "hub"), "--records-dir",
            str(cache / "verified"), "--repo-id", "org/fleet", "--revision", "main", "--endpoint", hub.url,
            "--lock-wait", "5", "--workers", "4", "--peer-key-file", key_file(tmp_path), *extra]
    for door in door_list:
        args += ["--peer", door.arg]
    done = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=120)
    result = None
    for line in done.stdout.splitlines():
        if line.startswith("SGLANG_PULL_RESULT "):
            result = json.loads(line.split(" ", 1)[1])
    return done, result


def assert_cache_holds(seeded: dict, cache: Path) -> None:
    blobs = cache / "hub" / "models--org--fleet" / "blobs"
    names = sorted(os.listdir(blobs))
    assert names == sorted(seeded), names  # no partial, no sidecar left
    for name in names:
        data = (blobs / name).read_bytes()
        assert data == seeded[name]
        if len(name) == 64:
            assert hashlib.sha256(data).hexdigest() == name


def test_a_host_takes_every_file_from_two_peers_and_none_from_the_hub(hub, seeded, doors, tmp_path):
    a, b = doors(2)
    hub.reset()
    done, result = run_pull(hub, tmp_path, [a, b])
    assert done.returncode == 0, done.stderr
    assert hub_file_bytes(hub) == 0
    assert a.gets() and b.gets()  # ranges from both at once
    total = sum(len(v) for v in seeded.values())
    assert result["sources"].get("hub", 0) == 0
    assert result["sources"][a.label] + result["sources"][b.label] == total
    assert re.search(r"file 1/4 config.json from peers 127\.0\.0\.1:\d+ 15 B \(verified\)", done.stdout), done.stdout
    assert re.search(r"file 4/4 tokenizer.json from peers 127\.0\.0\.1:\d+ 16 B \(verified\)", done.stdout)
    assert_cache_holds(seeded, tmp_path / "host")

    # A second run pulls nothing and touches no peer.
    a.log.clear()
    b.log.clear()
    hub.reset()
    again, result = run_pull(hub, tmp_path, [a, b])
    assert again.returncode == 0, again.stderr
    assert a.log == [] and b.log == []
    assert hub_file_bytes(hub) == 0
    assert result["files_fetched"] == 0 and result["sources"] == {}


def test_a_peer_that_sends_a_wrong_byte_is_named_and_its_range_fetched_elsewhere(hub, seeded, doors, tmp_path):
    a, b = doors(2)
    big = max(seeded, key=lambda n: len(seeded[n]))
    a.corrupt = {big: {len(seeded[big]) // 2 + i * (len(seeded[big]) // 4) for i in (-2, -1, 0, 1)}}
    hub.reset()
    done, result = run_pull(hub, tmp_path, [a, b])
    assert done.returncode == 0, done.stderr
    assert re.search(rf"peer {re.escape(a.label)} sent wrong bytes in \d+-\d+", done.stdout), done.stdout
    assert f"peer {b.label} sent wrong" not in done.stdout
    assert hub_file_bytes(hub) == 0  # the other peer had the right bytes
    assert_cache_holds(seeded, tmp_path / "host")


def test_a_lone_peer_sending_a_wrong_byte_leaves_the_file_to_the_hub(hub, seeded, doors, tmp_path):
    (a,) = doors(1)
    big = max(seeded, key=lambda n: len(seeded[n]))
    a.corrupt = {big: {5}}
    hub.reset()
    done, result = run_pull(hub, tmp_path, [a], "--workers", "1")  # one file at a time: the big one first
    assert done.returncode == 0, done.stderr
    assert f"peer {a.label} sent a file that failed verification" in done.stdout
    assert hub_file_bytes(hub) == result["sources"]["hub"] >= len(seeded[big])
    assert_cache_holds(seeded, tmp_path / "host")


def test_a_peer_that_disappears_mid_transfer_the_others_finish(hub, seeded, doors, tmp_path):
    a, b = doors(2)
    a.cut_after = 700_000
    hub.reset()
    done, result = run_pull(hub, tmp_path, [a, b])
    assert done.returncode == 0, done.stderr
    assert f"peer {a.label}" in done.stdout
    assert hub_file_bytes(hub) == 0
    assert 0 < result["sources"][a.label] <= 700_000  # what it sent before it went is kept, not fetched again
    assert result["bytes_fetched"] == sum(len(v) for v in seeded.values())
    assert_cache_holds(seeded, tmp_path / "host")


def test_every_peer_gone_mid_transfer_the_hub_fetches_only_what_is_missing(hub, seeded, doors, tmp_path):
    (a,) = doors(1)
    a.cut_after = 1_500_000
    hub.reset()
    done, result = run_pull(hub, tmp_path, [a])
    assert done.returncode == 0, done.stderr
    total = sum(len(v) for v in seeded.values())
    assert 0 < result["sources"][a.label] <= 1_500_000
    assert result["sources"]["hub"] == hub_file_bytes(hub)
    assert result["sources"]["hub"] + result["sources"][a.label] == total  # nothing fetched twice
    assert_cache_holds(seeded, tmp_path / "host")


def test_a_host_without_the_site_key_gets_nothing_from_a_peer(hub, seeded, doors, tmp_path):
    (a,) = doors(1, key="another-site-key")
    hub.reset()
    done, result = run_pull(hub, tmp_path, [a])
    assert done.returncode == 0, done.stderr
    assert f"peer {a.label} refused the site key (HTTP 401)" in done.stdout
    assert a.gets() == 0  # no body ever asked for, none sent
    assert set(result["sources"]) == {"hub"}
    assert KEY not in done.stdout + done.stderr
    assert_cache_holds(seeded, tmp_path / "host")


def test_a_host_waits_for_a_peer_to_hold_a_blob_and_the_seed_does_not(hub, seeded, doors, tmp_path):
    (a,) = doors(1)
    a.held = set(seeded)
    threading.Timer(2.5, a.held.clear).start()
    hub.reset()
    started = time.monotonic()
    done, result = run_pull(hub, tmp_path, [a], "--peer-wait", "60")
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started >= 2.5
    assert "waiting up to 60 s for a peer" in done.stdout
    assert hub_file_bytes(hub) == 0 and result["sources"][a.label] == sum(len(v) for v in seeded.values())

    a.held = set(seeded)  # the seed takes the Hub at once
    hub.reset()
    done, result = run_pull(hub, tmp_path, [a], "--peer-seed", cache=tmp_path / "seed")
    assert done.returncode == 0, done.stderr
    assert "waiting" not in done.stdout
    assert set(result["sources"]) == {"hub"}

    hub.reset()  # a bounded wait: then the Hub, and no other file waits again (one at a time here)
    done, result = run_pull(hub, tmp_path, [a], "--peer-wait", "1", "--workers", "1", cache=tmp_path / "third")
    assert done.returncode == 0, done.stderr
    assert set(result["sources"]) == {"hub"}
    assert done.stdout.count("waiting up to 1 s for a peer") == 1


def test_the_site_key_file_must_be_the_accounts_alone(tmp_path):
    with pytest.raises(pull_errors.PullError, match="mode 0600"):
        peers.read_key(key_file(tmp_path, 0o640))
    os.symlink(key_file(tmp_path), tmp_path / "link")
    with pytest.raises(pull_errors.PullError, match="cannot read"):
        peers.read_key(str(tmp_path / "link"))
    assert peers.read_key(key_file(tmp_path)) == KEY


def test_peer_addresses_are_parsed_strictly():
    fp = "0f" * 32
    assert peers.parse_peer(f"10.0.0.2:8090={fp}").url("ab" * 20) == f"https://10.0.0.2:8090/blobs/{'ab' * 20}"
    assert peers.parse_peer(f"[fd00::2]:8090={fp}").label == "[fd00::2]:8090"
    assert peers.parse_peer(f"[fd00::2]:8090={fp}").pin == fp
    for bad in ("10.0.0.2", "10.0.0.2:0", "a/b:80", "10.0.0.2:99999", "x:80/../", "10.0.0.2:8090",
                f"10.0.0.2:8090={fp[:-1]}", f"10.0.0.2:8090={fp.upper()}", f"10.0.0.2:0={fp}"):
        with pytest.raises(pull_errors.PullError):
            peers.parse_peer(bad)


def test_a_peer_without_a_door_is_asked_once_and_the_hub_serves(hub, seeded, doors, tmp_path):
    (a,) = doors(1)
    gone = a.label
    a.close()
    hub.reset()
    done, result = run_pull(hub, tmp_path, [a])
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(f"peer {gone} cannot be reached") == 1
    assert set(result["sources"]) == {"hub"}
    assert_cache_holds(seeded, tmp_path / "host")


def test_a_pull_from_peers_killed_mid_file_resumes_at_the_missing_bytes(hub, seeded, doors, tmp_path):
    (a,) = doors(1)
    a.pause = 0.05
    cache = tmp_path / "host"
    args = [sys.executable, "-I", str(SCRIPT), "pull", "--cache-dir", str(cache / "hub"), "--records-dir",
            str(cache / "verified"), "--repo-id", "org/fleet", "--revision", "main", "--endpoint", hub.url,
            "--workers", "4", "--peer-key-file", key_file(tmp_path), "--peer", a.arg]
    running = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while a.sent < 1_500_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    running.kill()
    running.wait()
    blobs = cache / "hub" / "models--org--fleet" / "blobs"
    assert [n for n in os.listdir(blobs) if n.endswith(".incomplete.ranges")]  # ranges on disk, as a Hub pull's
    a.pause = 0.0
    hub.reset()
    done, result = run_pull(hub, tmp_path, [a])
    assert done.returncode == 0, done.stderr
    total = sum(len(v) for v in seeded.values())
    assert result["resumed_bytes"] > 500_000
    assert result["bytes_fetched"] == result["bytes_missing"] == sum(result["sources"].values())
    assert result["bytes_missing"] + result["resumed_bytes"] <= total  # nothing fetched twice
    assert hub_file_bytes(hub) == 0
    assert_cache_holds(seeded, cache)


def lock_of(cache: Path) -> dict:
    """The lock's record of org/fleet (commit, files with their sha256), from a verified pull's record."""
    from sglang_infra.hostside.pull import manifest
    records = manifest.Records(str(cache / "verified"), manifest.owners())
    (commit,) = [name[:-5] for name in os.listdir(cache / "verified" / "models--org--fleet")]
    found = records.load("models--org--fleet", commit)
    return {"commit": commit, "files": [{"path": e["path"], "size": e["size"], "sha256": e["sha256"]}
                                        for e in found["files"]]}


def served(cache: Path, lock: dict) -> dict[str, str]:
    """What the door of a host whose cache is ``cache`` lists, from its snapshot (cachestate) as the deploy reads it."""
    from sglang_infra.hostside.pull import manifest
    from sglang_infra.hostside.read import cachestate
    from sglang_infra.plan import peerdoor
    from sglang_infra.plan.types import PeerDoor, PeerPin
    found = cachestate.scan(str(cache / "hub"), manifest.Records(str(cache / "verified"), manifest.owners()))
    pin = PeerPin("org/fleet", lock["commit"], manifest.content_digest(lock["files"]),
                  frozenset(f["sha256"] for f in lock["files"]))
    door = PeerDoor(address="127.0.0.1", port=1, group="g", hub=str(cache / "hub"), pins=(pin,), key=KEY.encode())
    return peerdoor.served_blobs(door, found)


def test_a_swarm_each_host_its_share_from_the_hub_then_the_rest_from_the_peer_and_its_door_lists_each_file(
        hub, seeded, tmp_path_factory):
    """Round 1: each host pulls only its share (peering.split) from the Hub, recorded as verified in part, and its
    door lists those files alone; a file an admin drops or rewrites, or one no pull verified, is never listed.
    Round 2: the rest from the other host's door, the Hub not at all; the whole record replaces the partial one."""
    from sglang_infra.fleet import peering
    from sglang_infra.hostside.pull import manifest
    lock = lock_of(tmp_path_factory.getbasetemp() / "seed0")   # the `seeded` fixture's cache
    shares = peering.split(lock["files"], ["h1", "h2"])
    blob_of = {f["path"]: f["sha256"] for f in lock["files"]}
    name_of = {f["path"]: next(n for n, data in seeded.items() if hashlib.sha256(data).hexdigest() == f["sha256"])
               for f in lock["files"]}
    caches = {h: tmp_path_factory.mktemp(h) for h in shares}
    for h, share in shares.items():
        hub.reset()
        puller = Puller(str(caches[h] / "hub"), "org/fleet", lock["commit"], hub.url, None, lock_wait=5,
                        records_dir=str(caches[h] / "verified"))
        puller.expect_lock({**lock, "share": list(share)})
        result = puller.run()
        assert result["bytes_fetched"] == sum(f["size"] for f in lock["files"] if f["path"] in share)
        assert hub_file_bytes(hub) == result["bytes_fetched"]
        assert sorted(os.listdir(caches[h] / "hub/models--org--fleet/blobs")) == sorted(name_of[p] for p in share)
        records = manifest.Records(str(caches[h] / "verified"), manifest.owners())
        assert records.load("models--org--fleet", lock["commit"]) is None            # never a whole revision
        assert sorted(served(caches[h], lock)) == sorted(name_of[p] for p in share)
    assert {blob_of[p] for p in shares["h1"]} & {blob_of[p] for p in shares["h2"]} == set()
    one, big = caches["h1"], max(shares["h1"], key=lambda p: len(seeded[name_of[p]]))
    blobs = one / "hub/models--org--fleet/blobs"
    # a file of the other share put there by hand (right bytes, right link): no pull verified it, never listed
    stray = shares["h2"][0]
    (blobs / name_of[stray]).write_bytes(seeded[name_of[stray]])
    link = one / "hub/models--org--fleet/snapshots" / lock["commit"] / stray
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(blobs / name_of[stray], link.parent))
    assert name_of[stray] not in served(one, lock)
    (blobs / name_of[stray]).unlink()
    # an admin rewrites a verified file in place (same bytes): no longer the inode verified, not listed; drops it: gone
    data = (blobs / name_of[big]).read_bytes()
    (blobs / name_of[big]).unlink()
    assert name_of[big] not in served(one, lock)
    (blobs / name_of[big]).write_bytes(data)
    assert name_of[big] not in served(one, lock)
    # round 2 on h2: h1's share from h1's door (its blobs as listed there), the Hub not at all
    door = Door({name_of[p]: seeded[name_of[p]] for p in shares["h1"]})
    try:
        hub.reset()
        two = caches["h2"]
        puller = Puller(str(two / "hub"), "org/fleet", lock["commit"], hub.url, None, lock_wait=5,
                        records_dir=str(two / "verified"))
        puller.expect_lock(lock)
        puller.fleet = peers.Fleet([peers.parse_peer(door.arg)], KEY, seed=True, wait=0)
        result = puller.run()
    finally:
        door.close()
    assert result["sources"] == {door.label: sum(f["size"] for f in lock["files"] if f["path"] in shares["h1"])}
    assert hub_file_bytes(hub) == 0
    assert_cache_holds(seeded, two)
    assert sorted(os.listdir(two / "verified/models--org--fleet")) == [lock["commit"] + ".json"]   # partial gone
    assert sorted(served(two, lock)) == sorted(seeded)


class Hostile:
    """A peer on 127.0.0.1 that holds every blob (HEAD: 200 with the right length) and answers in one bad way
    (``mode``): "drip" sends a range's body a byte at a time, "huge-range" names a Content-Range of thousands of
    digits, "gzip" sends the range gzip-compressed under Content-Encoding: gzip, "head-hang" answers no HEAD for
    ``hang`` seconds (then closes). Raw sockets, so the answer is exactly what the mode says."""

    def __init__(self, blobs: dict[str, bytes], mode: str, hang: float = 4.0):
        self.blobs, self.mode, self.hang = blobs, mode, hang
        self.requests: list[str] = []
        self.stop = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.label = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.arg = f"{self.label}={pin()}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn):
        conn.settimeout(5)
        try:
            conn = tls_server().wrap_socket(conn, server_side=True)
        except (OSError, ValueError):
            conn.close()
            return
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                data += chunk
            method, path = data.split(b" ")[:2]
            self.requests.append(method.decode())
            blob = self.blobs.get(path.decode().rpartition("/")[2])
            if blob is None:
                conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                return
            if method == b"HEAD":
                if self.mode == "head-hang":
                    self.stop.wait(self.hang)
                    return
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(blob))
                return
            start, end = (int(x) for x in re.search(rb"Range: bytes=(\d+)-(\d+)", data).groups())
            body = blob[start:end + 1]
            content_range = f"bytes {start}-{end}/{len(blob)}"
            extra = ""
            if self.mode == "huge-range":
                content_range = f"bytes {start}-{'9' * 5000}/{len(blob)}"
            if self.mode == "gzip":
                body, extra = gzip.compress(body), "Content-Encoding: gzip\r\n"
            conn.sendall(f"HTTP/1.1 206 Partial Content\r\nContent-Range: {content_range}\r\n{extra}"
                         f"Content-Length: {len(body)}\r\n\r\n".encode())
            try:
                if self.mode == "drip":
                    for i in range(len(body)):
                        if self.stop.wait(0.05):
                            return
                        conn.sendall(body[i:i + 1])
                else:
                    conn.sendall(body)
            except OSError:
                pass

    def close(self):
        self.stop.set()
        self.sock.close()


@pytest.fixture
def tight(monkeypatch):
    """Peer limits small enough for a test to see them act (raising=False: the same test runs on code without
    them, where it shows the stall or the crash)."""
    for name, value in (("HEAD_DEADLINE", 1.0), ("READ_TIMEOUT", 1.0), ("REQUEST_GRACE", 0.5),
                        ("MIN_RATE", 64 * 1024), ("FILE_GRACE", 5.0)):
        monkeypatch.setattr(peers, name, value, raising=False)


def pull_in_thread(hub, cache: Path, peer: Hostile, limit: float,
                   workers: int = 4) -> tuple[dict | BaseException | None, float]:
    """The pull with ``peer`` as its only peer (this host the seed: no wait for a holder), run in a thread so a pull
    that stalls is seen stalling: (its result or error, None when it was still running after ``limit`` s; seconds)."""
    puller = Puller(str(cache / "hub"), "org/fleet", "main", hub.url, None, lock_wait=5, workers=workers,
                    records_dir=str(cache / "verified"))
    puller.fleet = peers.Fleet([peers.parse_peer(peer.arg)], KEY, seed=True, wait=0)
    out: list = [None]

    def run():
        try:
            out[0] = puller.run()
        except BaseException as e:
            out[0] = e
    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    return (None if thread.is_alive() else out[0]), time.monotonic() - started


@pytest.mark.parametrize("mode, said", [
    ("drip", r"(sent \d+ bytes in \d+ s, below 64\.0 KiB/s|did not finish its answer in time)"),  # rate, or deadline
    ("huge-range", r"answered range 'bytes \d+-99999"),
    ("gzip", r"answered with Content-Encoding 'gzip'; only identity is accepted"),
])
def test_a_hostile_peer_is_banned_and_the_hub_serves_in_bounded_time(hub, seeded, tmp_path, tight, capsys, mode,
                                                                    said):
    peer = Hostile(seeded, mode)
    try:
        result, took = pull_in_thread(hub, tmp_path / "host", peer, limit=30)
    finally:
        peer.close()
    assert isinstance(result, dict), f"the pull {'stalled' if result is None else f'failed: {result!r}'}"
    out = capsys.readouterr().out
    assert re.search(f"peer {peer.label} {said}", out), out
    assert out.count(f"peer {peer.label} ") == 1  # banned once: asked nothing more
    assert set(result["sources"]) <= {"hub", peer.label} and result["sources"].get(peer.label, 0) < 64 * 1024
    assert took < 20
    assert_cache_holds(seeded, tmp_path / "host")


def test_a_peer_whose_head_times_out_is_banned_after_one_head(hub, seeded, tmp_path, tight, capsys):
    peer = Hostile(seeded, "head-hang", hang=4.0)
    try:
        result, took = pull_in_thread(hub, tmp_path / "host", peer, limit=60, workers=1)  # one file at a time
    finally:
        peer.close()
    assert isinstance(result, dict), result
    assert peer.requests == ["HEAD"]  # one blob asked, then never again
    assert f"peer {peer.label} did not finish its answer in time" in capsys.readouterr().out
    assert set(result["sources"]) == {"hub"}
    assert took < 10
    assert_cache_holds(seeded, tmp_path / "host")


def test_a_peer_answer_that_is_not_plain_http_is_refused():
    """Each malformed head is a _Bad (which bans the peer), never an uncaught error."""
    heads = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"SSH-2.0-OpenSSH\r\n\r\n",
             b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
             b"HTTP/1.1 200 OK\r\nX" + b"y" * (40 * 1024) + b": z\r\n\r\n", b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n"]
    for head in heads:
        server = socket.create_server(("127.0.0.1", 0))

        def answer(server=server, head=head):
            conn, _ = server.accept()
            with tls_server().wrap_socket(conn, server_side=True) as conn:
                conn.recv(4096)
                conn.sendall(head)
        threading.Thread(target=answer, daemon=True).start()
        peer = peers.Peer("127.0.0.1", server.getsockname()[1], pin())
        with pytest.raises(peers._Bad):
            now = time.monotonic()
            peers._request(peer, "HEAD", "/blobs/x", {}, now + 5, now + 5).length()
        server.close()


class Listener:
    """Whoever holds a door's port on 127.0.0.1: with ``cert`` (a fixtures/peer_tls pair) it completes TLS with that
    certificate, without, it speaks plain TCP; either way it keeps every byte a client sends it (after the
    handshake, for TLS) and answers a blob's HEAD 200, as a thief after the key would."""

    def __init__(self, cert: str | None):
        self.received = bytearray()
        self.handshakes = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(5)
        self.cert = cert
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        for _ in range(8):   # bounded: a test makes a few connections
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.settimeout(3)
            try:
                if self.cert is not None:
                    conn = tls_server(self.cert).wrap_socket(conn, server_side=True)
                    self.handshakes += 1
                while b"\r\n\r\n" not in self.received:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    self.received += chunk
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
            except (OSError, ValueError):
                pass
            finally:
                conn.close()

    def peer(self, pinned: str = "door") -> peers.Peer:
        return peers.Peer("127.0.0.1", self.sock.getsockname()[1], pin(pinned))


@pytest.mark.parametrize("cert", ["other", None])
def test_a_listener_without_the_pinned_certificate_is_sent_nothing_and_banned(cert, tmp_path):
    """A TLS listener with another certificate, or a plain one, on a door's port: the pull's request fails before
    any byte of it (the key least of all) is sent, and the peer is banned; pinned to the listener's own
    certificate, the same request goes through (the pin is what decides)."""
    thief = Listener(cert)
    now = time.monotonic()
    with pytest.raises(peers._Bad, match="TLS"):
        peers._request(thief.peer(), "HEAD", "/blobs/x", {"Authorization": f"Bearer {KEY}"}, now + 3, now + 3)
    assert KEY.encode() not in thief.received and b"Authorization" not in thief.received, thief.received
    assert not thief.received if cert else thief.received.startswith(b"\x16\x03")   # plain: a ClientHello alone

    if cert:
        trusted = Listener(cert)
        answer = peers._request(trusted.peer(cert), "HEAD", "/blobs/x", {"Authorization": f"Bearer {KEY}"},
                                time.monotonic() + 3, time.monotonic() + 3)
        answer.close()
        assert answer.status == 200 and f"Authorization: Bearer {KEY}".encode() in trusted.received


def test_a_pull_bans_a_door_with_another_certificate_and_the_hub_serves(hub, seeded, tmp_path, capsys):
    thief = Listener("other")
    thief.arg = f"{thief.peer().label}={pin()}"   # the pull pins the door's certificate; the thief shows another
    result, _ = pull_in_thread(hub, tmp_path / "host", thief, limit=60)
    assert isinstance(result, dict), result
    out = capsys.readouterr().out
    assert f"peer {thief.peer().label} failed its TLS handshake" in out or \
        f"peer {thief.peer().label} presented a TLS certificate other" in out, out
    assert set(result["sources"]) == {"hub"} and not thief.received
    assert_cache_holds(seeded, tmp_path / "host")


@pytest.fixture(scope="module")
def gated_seeded(hub, tmp_path_factory):
    """The gated model pulled once from the Hub with a token it accepts: {blob name: bytes}, as a peer holds it."""
    cache = tmp_path_factory.mktemp("gated-seed")
    Puller(str(cache / "hub"), GATED, "main", hub.url, TOKEN, lock_wait=5, records_dir=str(cache / "verified")).run()
    blobs = cache / "hub" / "models--org--gated-fleet" / "blobs"
    return {name: (blobs / name).read_bytes() for name in os.listdir(blobs)}


def lock_record(hub, repo: str, gated: object) -> dict:
    """The lock's record of ``repo``@main (as scripts/lock.sh writes it), saying ``gated``."""
    files = []
    for path in hub.files(repo):
        meta, data = hub.file_meta(repo, "main", path), hub.file_bytes(repo, "main", path)
        files.append({"path": path, "size": meta["size"], "sha256": hashlib.sha256(data).hexdigest(),
                      **({"sha256_from": "lfs"} if meta["lfs"] else
                         {"sha256_from": "computed", "git_blob": meta["git_oid"]})})
    return {"commit": hub.commit(repo), "files": files, "gated": gated}


def gated_pull(hub, tmp_path: Path, door: Door, token: bool, locked: dict | None):
    args = [sys.executable, "-I", str(SCRIPT), "pull", "--cache-dir", str(tmp_path / "host" / "hub"),
            "--records-dir", str(tmp_path / "host" / "verified"), "--repo-id", GATED, "--revision",
            hub.commit(GATED), "--endpoint", hub.url, "--lock-wait", "5", "--peer-key-file", key_file(tmp_path),
            "--peer", door.arg, "--peer-seed"]
    if token:
        (tmp_path / "token").write_text(TOKEN)
        args += ["--token-file", str(tmp_path / "token")]
    if locked is not None:
        args += ["--locked-stdin"]
    return subprocess.run(args, input=json.dumps(locked) if locked is not None else None, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("lock", ["none", "gated", "unsaid"], ids=["without a lock", "the lock says gated",
                                                                   "a lock that does not say"])
def test_a_gated_model_comes_from_a_peer_only_once_the_hub_accepted_this_hosts_token(hub, gated_seeded, tmp_path,
                                                                                     lock):
    locked = None if lock == "none" else lock_record(hub, GATED, "auto")
    if lock == "unsaid":
        del locked["gated"]
    door = Door(dict(gated_seeded))
    try:
        hub.reset()
        refused = gated_pull(hub, tmp_path, door, token=False, locked=locked)
        assert refused.returncode == 3 and refused.stderr.startswith("pull failed: GatedRepo: "), refused
        assert door.log == []   # no peer asked, not even whether it holds a blob
        assert hub.counts(GATED)["auth"] == 1 and hub.counts(GATED)["file-get"] == 0
        assert not (tmp_path / "host" / "hub" / "models--org--gated-fleet").exists()

        hub.reset()
        allowed = gated_pull(hub, tmp_path, door, token=True, locked=locked)
        assert allowed.returncode == 0, allowed.stderr
        result = json.loads(allowed.stdout.splitlines()[-1].split(" ", 1)[1])
        assert result["sources"] == {door.label: sum(len(b) for b in gated_seeded.values())}
        listed = int(locked is None)   # with the lock, the lock lists the files
        assert hub.counts(GATED) == {"info": listed, "listing": listed, "auth": 1, "file-head": 0, "file-get": 0,
                                     "other": 0}
    finally:
        door.close()


def test_a_model_the_lock_says_is_not_gated_asks_the_hub_nothing_when_peers_hold_it(hub, seeded, doors, tmp_path):
    a, b = doors(2)
    lock = lock_record(hub, "org/fleet", False)
    hub.reset()
    done, result = run_pull(hub, tmp_path, [a, b], "--locked-stdin", "--revision", hub.commit("org/fleet"),
                            stdin=json.dumps(lock))
    assert done.returncode == 0, done.stderr
    assert hub.requests() == [] and "hub" not in result["sources"]
    assert_cache_holds(seeded, tmp_path / "host")
