"""The pull's peer side: a blob of a model the fleet serves fetched from the hosts of the fleet that already hold it
verified, before (or instead of) the Hub.

Each host's peer door (Debian's nginx) serves its verified blobs read-only at
``https://<fleet address>:<port>/blobs/<blob name>`` (the HF cache's blob name: the sha256 for an LFS file, the git
blob sha1 for a small one), byte ranges answered 206, to a request carrying ``Authorization: Bearer <site key>``.
Every connection is TLS (1.2 or later) pinned to the door's own certificate: each peer is given as
ADDRESS:PORT=SHA256, the sha256 of the certificate the deploy read on that host this run, and the key is sent only
once the handshake has shown exactly that certificate (its holder signed the handshake with its private key, which
never leaves that host). A listener presenting any other certificate, or no TLS, is sent nothing and is banned.
The door serves a blob only under its final name, which the pull gives a file once it is verified: a peer never
offers a partial.

PeerTransfer wraps the pull's Hub transfer (transfer.Transfer) with the same ``download``:

* every request to a peer is bounded (_request): a connection in CONNECT_TIMEOUT, no READ_TIMEOUT without a byte,
  a HEAD over in HEAD_DEADLINE, a range at MIN_RATE at least once REQUEST_GRACE has passed (so over by
  REQUEST_GRACE + its length / MIN_RATE), and every peer of one file within FILE_GRACE + its size / MIN_RATE (then the
  Hub takes what is missing); the answer must be plain HTTP/1.x with a Content-Length, no Transfer-Encoding and no
  Content-Encoding but identity (the request asks for identity alone). A peer that times out or answers anything
  malformed (a HEAD too) is banned for the rest of the pull;
* which peers hold the blob: a HEAD to each in a random order, so the load spreads (up to 2 * MAX_SOURCES asked,
  until MAX_SOURCES holders are found); a host
  that is not the seed waits for one, polling, up to ``wait`` seconds while a peer answers at all, then takes the
  Hub (a seed, the first serving host of the model, never waits);
* the missing byte ranges (ranges.py, the same partial and sidecar as a Hub pull, so a cut resumes at the missing
  bytes whatever the source) spread over the holders, each range on a connection of its own; a range whose peer
  fails (a cut, a timeout, an error, an answer that is not the range asked) goes on from its last byte at another
  holder, and the peer is used no more by this pull;
* the file verified by the pull's own check (size, the name's hash, the lock's sha256) before it is handed back,
  exactly as a Hub file is; when the check fails every range is fetched again from another holder and compared
  with what is on disk: a peer whose bytes differ is named (it sent a wrong byte), never used again, and its bytes
  replaced; the file is checked again. When no holder is left, or the second check fails, what is on disk goes
  (its wrong bytes would be resumed) and the Hub fetches the file.

What every host's bytes came from (the Hub, each peer) is counted in ``sources``, which the pull's result carries.
The site key comes from a file the account alone can read; it is never in an argument, an environment, a log.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import random
import re
import socket
import ssl
import stat
import threading
import time

from ..formats.netloc import netloc
from ..formats.units import human
from ..safefs import read_regular, unlink_if_present
from . import ranges
from .pull_errors import EXIT_USAGE, PullError
from .transfer import Sealed, Stopped, _Job, _pwrite_all, gather, open_partial, pause

CONNECT_TIMEOUT = 5.0  # seconds: a peer is on the fleet's LAN
READ_TIMEOUT = 10.0  # seconds without a byte before a peer's request is given up (and the peer banned)
HEAD_DEADLINE = 10.0  # seconds for a whole HEAD, connection to last header
REQUEST_GRACE = 10.0  # seconds a range request runs before its bytes are held to MIN_RATE
MIN_RATE = 4 * 1024 * 1024  # bytes/s a peer's range must average: a LAN's slowest link is far above it
FILE_GRACE = 60.0  # seconds every peer of one file has, on top of its size / MIN_RATE, before the Hub takes it
MAX_HEADER_BYTES = 16 * 1024  # a door's answer head (nginx's is a few hundred bytes)
RECV_BYTES = 1024 * 1024
POLL = 1.0  # seconds between two looks for a holder while waiting
MAX_SOURCES = 8  # peers asked for one blob (a swarm: later hosts become sources of the ones after them)
MAX_KEY_BYTES = 4096
HUB = "hub"
_BLOB_NAME = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


@dataclasses.dataclass(frozen=True)
class Peer:
    address: str
    port: int
    pin: str   # the sha256 (hex) of the DER bytes of the door's certificate: the only one this pull trusts there

    @property
    def label(self) -> str:
        return netloc(self.address, self.port)

    def url(self, blob_name: str) -> str:
        return f"https://{self.label}/blobs/{blob_name}"


def parse_peer(text: str) -> Peer:
    """ADDRESS:PORT=SHA256 ([v6]:PORT=SHA256) as the plan writes it (peering.checked)."""
    m = re.fullmatch(r"(?:\[([0-9A-Fa-f:.]+)\]:(\d{1,5})|([A-Za-z0-9.-]+):(\d{1,5}))=([0-9a-f]{64})", text)
    if not m or not 0 < int(m.group(2) or m.group(4)) < 65536:
        raise PullError(f"--peer wants ADDRESS:PORT=SHA256 (the door certificate's), got {text!r}", EXIT_USAGE)
    return Peer(m.group(1) or m.group(3), int(m.group(2) or m.group(4)), m.group(5))


def _tls(sock: socket.socket, peer: Peer, deadline: float) -> ssl.SSLSocket:
    """``sock`` after a TLS handshake (1.2 or later) that showed exactly the peer's pinned certificate; _Bad
    otherwise, before anything of the request is sent. No CA nor name is consulted: the pin is the check (the
    handshake itself proves the door holds the certificate's private key)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE   # no chain to check: one certificate is trusted, by its sha256 below
    tls = context.wrap_socket(sock, do_handshake_on_connect=False)
    try:
        tls.settimeout(max(0.001, min(READ_TIMEOUT, deadline - time.monotonic())))
        tls.do_handshake()
        presented = tls.getpeercert(binary_form=True)
        if not presented or not hmac.compare_digest(hashlib.sha256(presented).hexdigest(), peer.pin):
            raise _Bad("presented a TLS certificate other than the one this run read on its host (sent nothing)")
    except (OSError, ValueError) as e:
        tls.close()
        why = getattr(e, "reason", None) or getattr(e, "strerror", None) or type(e).__name__
        raise _Bad(f"failed its TLS handshake ({why})")
    except _Bad:
        tls.close()
        raise
    return tls


def read_key(path: str) -> str:
    """The site key from ``path``: a regular file (not a link) of this account's, readable by it alone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        raise PullError(f"cannot read the site key file {path}: {e.strerror}", EXIT_USAGE)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise PullError(f"the site key file {path} must be a regular file of this account's, mode 0600 "
                            f"(it is {stat.filemode(st.st_mode)}, uid {st.st_uid})", EXIT_USAGE)
        key = os.read(fd, MAX_KEY_BYTES + 1).decode("utf-8", "replace").strip()
    finally:
        os.close(fd)
    if not key or len(key) > MAX_KEY_BYTES or not key.isprintable() or " " in key:
        raise PullError(f"the site key file {path} holds no usable key", EXIT_USAGE)
    return key


@dataclasses.dataclass
class Fleet:
    """What the pull knows of its peers for this model: their doors, the site key, whether this host is the seed
    (it takes the Hub at once for a blob no peer holds) and how long another waits for a holder."""
    peers: list[Peer]
    key: str = dataclasses.field(repr=False)
    seed: bool = False
    wait: float = 600.0


class _Bad(Exception):
    """A peer failed a request (its reason: a timeout, a cut, a malformed answer); it is banned, and a range goes on
    elsewhere."""


_STATUS = re.compile(rb"HTTP/1\.[01] ([0-9]{3})(?: [^\r\n]*)?")
_FIELD = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*([^\r\n]*?)[ \t]*")
_NUMBER = re.compile(r"[0-9]{1,19}")  # a byte count or offset (below 10**19): never thousands of digits
_CONTENT_RANGE = re.compile(r"bytes ([0-9]{1,19})-([0-9]{1,19})/([0-9]{1,19})")
_SINGLE = ("content-length", "content-range", "content-encoding", "transfer-encoding")


class _Answer:
    """A peer's answer: its status, its head's fields (lower-case names), and its body to read, bounded by the
    request's deadline and the minimum rate; the connection closes with it."""

    def __init__(self, sock: socket.socket, status: int, fields: dict[str, str], rest: bytes, deadline: float,
                 grace_end: float):
        self.sock, self.status, self.fields, self.rest = sock, status, fields, rest
        self.deadline, self.grace_end, self.received = deadline, grace_end, 0

    def length(self) -> int:
        """The body's Content-Length; _Bad when there is none or it is not a number."""
        value = self.fields.get("content-length", "")
        if not _NUMBER.fullmatch(value):
            raise _Bad(f"answered a Content-Length of {_shown(value)}")
        return int(value)

    def chunks(self, n: int):
        """The next ``n`` bytes of the body, as they arrive; _Bad on a cut, a timeout or a rate below MIN_RATE."""
        left = n
        while left > 0:
            if self.rest:
                chunk, self.rest = self.rest[:left], self.rest[left:]
            else:
                chunk = _recv(self.sock, self.deadline, min(left, RECV_BYTES))
                if not chunk:
                    raise _Bad(f"stopped sending after {self.received} bytes of {n + self.received}")
            left -= len(chunk)
            self.received += len(chunk)
            now = time.monotonic()
            if now > self.grace_end and self.received < (now - self.grace_end) * MIN_RATE:
                raise _Bad(f"sent {self.received} bytes in {now - self.grace_end + REQUEST_GRACE:.0f} s, below "
                           f"{human(MIN_RATE)}/s")
            yield chunk

    def close(self) -> None:
        self.sock.close()


def _shown(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:40] + "...")


def _recv(sock: socket.socket, deadline: float, n: int) -> bytes:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Bad("did not finish its answer in time")
    sock.settimeout(min(READ_TIMEOUT, left))
    try:
        return sock.recv(n)
    except socket.timeout:
        raise _Bad("did not finish its answer in time" if time.monotonic() >= deadline
                   else f"sent nothing for {READ_TIMEOUT:.0f} s")
    except OSError as e:
        raise _Bad(f"failed ({e.strerror or type(e).__name__})")


class _Unreachable(_Bad):
    """No door answers at the peer's address (refused, or no connection in CONNECT_TIMEOUT)."""


def _request(peer: "Peer", method: str, path: str, headers: dict[str, str], deadline: float,
             grace_end: float) -> _Answer:
    """``method`` ``path`` to ``peer`` over a connection of its own (closed with the answer), its head read within
    ``deadline``; _Bad for a timeout or a malformed head, _Unreachable when no door answers."""
    left = deadline - time.monotonic()
    try:
        sock = socket.create_connection((peer.address, peer.port), timeout=max(0.001, min(CONNECT_TIMEOUT, left)))
    except OSError as e:
        raise _Unreachable(f"cannot be reached (no door answers: {e.strerror or type(e).__name__})")
    try:
        sock = _tls(sock, peer, deadline)
        head = [f"{method} {path} HTTP/1.1", f"Host: {peer.label}", "Connection: close",
                *(f"{name}: {value}" for name, value in headers.items())]
        sock.settimeout(max(0.001, min(READ_TIMEOUT, deadline - time.monotonic())))
        try:
            sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        except OSError as e:
            raise _Bad(f"failed ({e.strerror or type(e).__name__})")
        data = b""
        while b"\r\n\r\n" not in data:
            if len(data) > MAX_HEADER_BYTES:
                raise _Bad(f"sent an answer head over {MAX_HEADER_BYTES} bytes")
            chunk = _recv(sock, deadline, MAX_HEADER_BYTES + 4)
            if not chunk:
                raise _Bad("closed the connection before its answer's head ended")
            data += chunk
        raw, _, rest = data.partition(b"\r\n\r\n")
        lines = raw.split(b"\r\n")
        status = _STATUS.fullmatch(lines[0])
        if status is None:
            raise _Bad("answered something that is not HTTP/1.x")
        fields: dict[str, str] = {}
        for line in lines[1:]:
            field = _FIELD.fullmatch(line)
            if field is None:
                raise _Bad("answered a malformed header line")
            name = field.group(1).decode("ascii").lower()
            if name in _SINGLE and name in fields:
                raise _Bad(f"answered {name} twice")
            fields[name] = field.group(2).decode("latin-1")
        if "transfer-encoding" in fields:
            raise _Bad(f"answered with Transfer-Encoding {_shown(fields['transfer-encoding'])}, not a plain body")
        encoding = fields.get("content-encoding", "identity").strip().lower()
        if encoding != "identity":
            raise _Bad(f"answered with Content-Encoding {_shown(encoding)}; only identity is accepted")
        return _Answer(sock, int(status.group(1)), fields, rest, deadline, grace_end)
    except BaseException:
        sock.close()
        raise


class _NoHolder(Exception):
    """No peer is left for the blob: the Hub takes what is missing."""


class PeerTransfer:
    """``hub`` (transfer.Transfer) with peers first: see the module's text."""

    def __init__(self, hub, fleet: Fleet):
        self.hub, self.fleet = hub, fleet
        self.sources: dict[str, int] = {}
        self.lock = threading.Lock()
        self.banned: dict[Peer, str] = {}  # peers this pull uses no more, and why
        self.waited_out = False  # a wait for a holder ran out: no other blob waits
        self.count = counted = hub.count

        def count(**amounts: int) -> None:  # what the Hub transfer receives, counted as the Hub's
            if amounts.get("bytes_fetched"):
                self._add(HUB, amounts["bytes_fetched"])
            counted(**amounts)
        hub.count = count

    # -- the pull's interface, as transfer.Transfer's
    @property
    def ranges(self):
        return self.hub.ranges

    @ranges.setter
    def ranges(self, pool) -> None:
        self.hub.ranges = pool

    def download(self, blob, partial: str, have: int, index: int, path: str, verify) -> os.stat_result:
        got = self._from_peers(blob, partial, have, index, path, verify)
        if got is not None:
            return got
        try:
            have = os.lstat(partial).st_size
        except FileNotFoundError:
            have = 0
        return self.hub.download(blob, partial, have, index, path, verify)

    # -- bookkeeping
    def _add(self, source: str, n: int, tally: dict[str, int] | None = None) -> None:
        """``n`` bytes from ``source``, in the pull's count and in ``tally`` (one file's)."""
        with self.lock:
            self.sources[source] = self.sources.get(source, 0) + n
            if tally is not None:
                tally[source] = tally.get(source, 0) + n

    def _ban(self, peer: Peer, why: str, path: str, quiet: bool = False) -> None:
        """``peer`` is asked nothing more by this pull; the output says why (``quiet``: without naming a file)."""
        with self.lock:
            if peer in self.banned:
                return
            self.banned[peer] = why
        if quiet:
            self.hub.progress.line(f"peer {peer.label} {why}; not asked again by this pull")
        else:
            self.hub.progress.line(f"{path}: peer {peer.label} {why}; taking its ranges elsewhere")

    def headers(self, extra: dict | None = None) -> dict:
        return {"Authorization": f"Bearer {self.fleet.key}", "Accept-Encoding": "identity", **(extra or {})}

    # -- which peers hold a blob
    def holders(self, blob) -> tuple[list[Peer], bool]:
        """(the peers holding ``blob`` now, whether any peer answered at all). A peer that refuses the key, times
        out or answers a malformed head is banned."""
        peers = [p for p in self.fleet.peers if p not in self.banned]
        random.shuffle(peers)
        found, alive = [], False
        for peer in peers[:MAX_SOURCES * 2]:
            if self.hub.stop.is_set():
                raise Stopped()
            try:
                status, length = self._head(peer, blob.name)
            except _Unreachable as e:
                self._ban(peer, str(e), blob.paths[0], quiet=True)
                continue
            except _Bad as e:
                self._ban(peer, f"{e} (asked whether it holds {blob.name[:12]})", blob.paths[0], quiet=True)
                continue
            alive = True
            if status in (401, 403):
                self._ban(peer, f"refused the site key (HTTP {status})", blob.paths[0])
            elif status == 200 and length == blob.size:
                found.append(peer)
                if len(found) >= MAX_SOURCES:
                    break
        return found, alive

    def _head(self, peer: Peer, name: str) -> tuple[int, int | None]:
        """(the status of a HEAD for blob ``name`` at ``peer``, its Content-Length when 200)."""
        now = time.monotonic()
        answer = _request(peer, "HEAD", f"/blobs/{name}", self.headers(), now + HEAD_DEADLINE, now + HEAD_DEADLINE)
        try:
            return answer.status, answer.length() if answer.status == 200 else None
        finally:
            answer.close()

    def _wait_for_holders(self, blob, index: int, path: str) -> list[Peer]:
        """The holders of ``blob``, waiting for one up to the fleet's wait; once a wait ran out, later blobs are not
        waited for (the peers that answer evidently will not have the model in time: the Hub serves)."""
        deadline = time.monotonic() + self.fleet.wait
        said = False
        while True:
            if self.hub.stop.is_set():
                raise Stopped()
            found, alive = self.holders(blob)
            if found or self.fleet.seed or not alive or self.waited_out:
                return found
            if time.monotonic() >= deadline:
                self.waited_out = True
                return found
            if not said:
                self.hub.progress.file_line(index, path, f"waiting up to {self.fleet.wait:.0f} s for a peer to "
                                                         "hold it verified")
                said = True
            if pause(POLL, self.hub.stop.is_set):
                raise Stopped()

    # -- the fetch
    def _from_peers(self, blob, partial: str, have: int, index: int, path: str, verify) -> os.stat_result | None:
        if not self.fleet.peers or not _BLOB_NAME.fullmatch(blob.name):
            return None
        holders = self._wait_for_holders(blob, index, path)
        if not holders:
            self.hub.progress.file_line(index, path, "no peer holds it verified; from the Hub")
            return None
        fd = open_partial(partial)
        sidecar = _read_sidecar(partial)
        spans = ranges.resume(blob.size, os.fstat(fd).st_size, sidecar, max(self.hub.workers, len(holders)))
        got = ranges.done(spans)
        self.count(bytes_missing=blob.size - got, resumed_bytes=got)
        self.hub.progress.update(have=got)
        if got:
            self.hub.progress.file_line(index, path, f"resuming with {human(got)} of {human(blob.size)} on disk")
        job = _Job(self.hub, blob, partial, fd, spans, index, path, None, {})  # type: ignore[arg-type]
        tally: dict[str, int] = {}  # this file's bytes by peer
        try:
            job.grow()
            # Every peer of this file within its time (bounded by the file's size); past it the Hub takes the rest.
            deadline = time.monotonic() + FILE_GRACE + blob.size / MIN_RATE
            wrote = self._fetch_spans(job, holders, tally, deadline)
            os.fsync(fd)
            check = Sealed(verify, partial)
            what = check(blob, fd)
            if what is not None:
                what = self._blame(job, wrote, holders, check, what, tally, deadline)
            if what is None:
                self.hub.progress.file_line(index, path, "from peers " + ", ".join(
                    f"{k} {human(v)}" for k, v in sorted(tally.items())) + " (verified)")
                assert check.hashed is not None  # set by the hash that counted
                return check.hashed
            self.hub.progress.file_line(index, path, f"{what}; discarding it and fetching it from the Hub")
            discard = True
        except _NoHolder as e:
            self.hub.progress.file_line(index, path, f"{e}; the Hub fetches what is missing")
            discard = False
        finally:
            job.close()
        if discard:
            self.hub.progress.update(have=-blob.size)
            unlink_if_present(partial)
            unlink_if_present(partial + ranges.SIDECAR)
        else:
            self.hub.progress.update(have=-ranges.done(job.spans))
        return None

    def _fetch_spans(self, job: _Job, holders: list[Peer], tally: dict[str, int],
                     deadline: float) -> dict[int, list]:
        """Every missing range of ``job`` from ``holders``, range k starting at holder k (mod their number);
        {range: [(peer, start, end), ...]}: who wrote which bytes."""
        wrote: dict[int, list] = {k: [] for k in range(len(job.spans))}
        todo = [k for k, (start, end, done) in enumerate(job.spans) if done < end - start]
        assert self.hub.ranges is not None
        gather([self.hub.ranges.submit((job.index, k), self._fetch_range, job, k, holders, holders[n % len(holders)],
                                       wrote[k], tally, deadline) for n, k in enumerate(todo)], job.stop)
        return wrote

    def _fetch_range(self, job: _Job, k: int, holders: list[Peer], first: Peer, log: list,
                     tally: dict[str, int], deadline: float) -> None:
        peer: Peer | None = first
        while True:
            start, end, done = job.span(k)
            if done >= end - start:
                return
            if time.monotonic() >= deadline:
                raise _NoHolder(f"its peers took longer than {FILE_GRACE + job.blob.size / MIN_RATE:.0f} s (its size "
                                f"at {human(MIN_RATE)}/s, and {FILE_GRACE:.0f} s)")
            if peer is None or peer in self.banned:
                usable = [p for p in holders if p not in self.banned]
                if not usable:
                    raise _NoHolder("no peer is left that holds it")
                peer = usable[(k + len(self.banned)) % len(usable)]
            pos = start + done
            try:
                self._get(job, peer, pos, end, lambda chunk, at: self._write(job, k, chunk, at), deadline)
            except _Bad as e:
                self._ban(peer, str(e), job.path)
            finally:
                now = start + job.span(k)[2]
                if now > pos:
                    log.append((peer, pos, now))
                    self._add(peer.label, now - pos, tally)

    def _write(self, job: _Job, k: int, chunk: bytes, at: int) -> None:
        _pwrite_all(job.fd, chunk, at)
        job.advance(k, len(chunk))
        self.count(bytes_fetched=len(chunk))  # the pull's own count: not the Hub's
        self.hub.progress.update(have=len(chunk), fetched=len(chunk))

    def _get(self, job: _Job, peer: Peer, pos: int, end: int, take, deadline: float) -> None:
        """Bytes [pos, end) of the job's blob from ``peer``, each chunk handed to take(chunk, offset) as it
        arrives, by ``deadline`` (the file's, see _from_peers) and at MIN_RATE past REQUEST_GRACE; _Bad when the
        peer fails (what it sent before stays taken)."""
        wanted = f"bytes={pos}-{end - 1}"
        now = time.monotonic()
        grace_end = now + REQUEST_GRACE
        answer = _request(peer, "GET", f"/blobs/{job.blob.name}", self.headers({"Range": wanted}),
                          min(deadline, grace_end + (end - pos) / MIN_RATE), grace_end)
        try:
            if answer.status != 206:
                raise _Bad(f"answered HTTP {answer.status} to a range request")
            given = answer.fields.get("content-range", "").strip()
            m = _CONTENT_RANGE.fullmatch(given)
            if not m or (int(m.group(1)), int(m.group(2)) + 1, int(m.group(3))) != (pos, end, job.blob.size):
                raise _Bad(f"answered range {_shown(given)} to {wanted}")
            if answer.length() != end - pos:
                raise _Bad(f"answered {answer.length()} bytes to {wanted}")
            at = pos
            for chunk in answer.chunks(end - pos):  # as received: what a peer sent before it failed is kept
                if job.stopped():
                    raise Stopped()
                take(chunk, at)
                at += len(chunk)
        finally:
            answer.close()

    def _blame(self, job: _Job, wrote: dict[int, list], holders: list[Peer], verify, what: str,
               tally: dict[str, int], deadline: float) -> str | None:
        """The file failed ``what``. One source at a time (the one that sent most first), every piece it sent is
        fetched again from another holder and written over it; when the file then verifies and some of those bytes
        differed, that source sent wrong bytes: it is named and used no more. None once the file verifies."""
        path = job.path
        pieces = [list(piece) for k in sorted(wrote) for piece in wrote[k]]
        sent: dict[Peer, int] = {}
        for peer, start, end in pieces:
            sent[peer] = sent.get(peer, 0) + end - start
        if not pieces:
            return what  # the bytes came from an earlier run's partial: nobody to blame, the Hub fetches it
        self.hub.progress.file_line(job.index, path, f"{what}; fetching the pieces of each peer again from another "
                                                     "to find the one that sent wrong bytes")
        for suspect in sorted(sent, key=lambda p: -sent[p]):
            others = [p for p in holders if p != suspect and p not in self.banned]
            if not others:
                continue
            differed: list[tuple[int, int]] = []
            for n, piece in enumerate(pieces):
                if piece[0] != suspect:
                    continue
                for other in others[n % len(others):] + others[:n % len(others)]:
                    bad: list[int] = []

                    def compare(chunk: bytes, at: int, source: str = other.label, bad: list = bad) -> None:
                        self._add(source, len(chunk), tally)
                        self.count(bytes_fetched=len(chunk))
                        if os.pread(job.fd, len(chunk), at) != chunk:
                            bad.append(at)
                            _pwrite_all(job.fd, chunk, at)
                    try:
                        self._get(job, other, piece[1], piece[2], compare, deadline)
                    except _Bad as e:
                        self._ban(other, str(e), path)
                        continue
                    piece[0] = other
                    if bad:
                        differed.append((piece[1], piece[2]))
                    break
                else:
                    return what
            if differed and verify(job.blob, job.fd) is None:
                where = ", ".join(f"{start}-{end - 1}" for start, end in differed[:4])
                self._ban(suspect, f"sent wrong bytes in {where} (fetched again from another peer)", path)
                return None
        if len(sent) == 1 and not [p for p in holders if p not in sent and p not in self.banned]:
            self._ban(next(iter(sent)), "sent a file that failed verification", path)
        return what


def _read_sidecar(partial: str) -> bytes | None:
    return read_regular(partial + ranges.SIDECAR, ranges.MAX_SIDECAR_BYTES)
