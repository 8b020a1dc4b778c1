"""The pull's peer side: a blob of a model the fleet serves fetched from the hosts of the fleet that already hold it
verified, before (or instead of) the Hub.

Each host's peer door (Debian's nginx) serves its verified blobs read-only at
``http://<fleet address>:<port>/blobs/<blob name>`` (the HF cache's blob name: the sha256 for an LFS file, the git
blob sha1 for a small one), byte ranges answered 206, to a request carrying ``Authorization: Bearer <site key>``.
The door serves a blob only under its final name, which the pull gives a file once it is verified: a peer never
offers a partial.

PeerTransfer wraps the pull's Hub transfer (transfer.Transfer) with the same ``download``:

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
import os
import random
import re
import stat
import threading
import time

import httpx2  # huggingface_hub's own HTTP client (hard dependency of huggingface_hub 2.x)

from . import ranges
from .pull_errors import EXIT_USAGE, PullError
from .safefs import read_regular, unlink_if_present
from .transfer import Sealed, Stopped, _Job, _pwrite_all, gather, open_partial, pause
from .units import human

CONNECT_TIMEOUT = 5.0  # seconds: a peer is on the fleet's LAN
READ_TIMEOUT = 30.0  # seconds without a byte before a peer's range is taken elsewhere
POLL = 1.0  # seconds between two looks for a holder while waiting
MAX_SOURCES = 8  # peers asked for one blob (a swarm: later hosts become sources of the ones after them)
MAX_KEY_BYTES = 4096
HUB = "hub"
_BLOB_NAME = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


@dataclasses.dataclass(frozen=True)
class Peer:
    address: str
    port: int

    @property
    def label(self) -> str:
        return f"[{self.address}]:{self.port}" if ":" in self.address else f"{self.address}:{self.port}"

    def url(self, blob_name: str) -> str:
        return f"http://{self.label}/blobs/{blob_name}"


def parse_peer(text: str) -> Peer:
    """ADDRESS:PORT ([v6]:PORT) as the plan writes it."""
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d{1,5})|([A-Za-z0-9.-]+):(\d{1,5})", text)
    if not m or not 0 < int(m.group(2) or m.group(4)) < 65536:
        raise PullError(f"--peer wants ADDRESS:PORT, got {text!r}", EXIT_USAGE)
    return Peer(m.group(1) or m.group(3), int(m.group(2) or m.group(4)))


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
    """A peer failed a range (its reason); the range goes on elsewhere."""


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
        self.client = httpx2.Client(timeout=httpx2.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT),
                                    follow_redirects=False, trust_env=False)  # a LAN door: no proxy, no redirect
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

    def _redact(self, text: str) -> str:
        return text.replace(self.fleet.key, "<site key>")

    # -- which peers hold a blob
    def holders(self, blob) -> tuple[list[Peer], bool]:
        """(the peers holding ``blob`` now, whether any peer answered at all)."""
        peers = [p for p in self.fleet.peers if p not in self.banned]
        random.shuffle(peers)
        found, alive = [], False
        for peer in peers[:MAX_SOURCES * 2]:
            try:
                resp = self.client.head(peer.url(blob.name), headers=self.headers())
            except (httpx2.ConnectError, httpx2.ConnectTimeout):
                self._ban(peer, "cannot be reached (no door answers)", blob.paths[0], quiet=True)
                continue
            except httpx2.HTTPError:
                continue
            alive = True
            if resp.status_code in (401, 403):
                self._ban(peer, f"refused the site key (HTTP {resp.status_code})", blob.paths[0])
            elif resp.status_code == 200 and resp.headers.get("Content-Length") == str(blob.size):
                found.append(peer)
                if len(found) >= MAX_SOURCES:
                    break
        return found, alive

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
            wrote = self._fetch_spans(job, holders, tally)
            os.fsync(fd)
            check = Sealed(verify, partial)
            what = check(blob, fd)
            if what is not None:
                what = self._blame(job, wrote, holders, check, what, tally)
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

    def _fetch_spans(self, job: _Job, holders: list[Peer], tally: dict[str, int]) -> dict[int, list]:
        """Every missing range of ``job`` from ``holders``, range k starting at holder k (mod their number);
        {range: [(peer, start, end), ...]}: who wrote which bytes."""
        wrote: dict[int, list] = {k: [] for k in range(len(job.spans))}
        todo = [k for k, (start, end, done) in enumerate(job.spans) if done < end - start]
        assert self.hub.ranges is not None
        gather([self.hub.ranges.submit(self._fetch_range, job, k, holders, holders[n % len(holders)], wrote[k], tally)
                for n, k in enumerate(todo)], job.stop)
        return wrote

    def _fetch_range(self, job: _Job, k: int, holders: list[Peer], first: Peer, log: list,
                     tally: dict[str, int]) -> None:
        peer: Peer | None = first
        while True:
            start, end, done = job.span(k)
            if done >= end - start:
                return
            if peer is None or peer in self.banned:
                usable = [p for p in holders if p not in self.banned]
                if not usable:
                    raise _NoHolder("no peer is left that holds it")
                peer = usable[(k + len(self.banned)) % len(usable)]
            pos = start + done
            try:
                self._get(job, peer, pos, end, lambda chunk, at: self._write(job, k, chunk, at))
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

    def _get(self, job: _Job, peer: Peer, pos: int, end: int, take) -> None:
        """Bytes [pos, end) of the job's blob from ``peer``, each chunk handed to take(chunk, offset) as it
        arrives; _Bad when the peer fails (what it sent before stays taken)."""
        wanted = f"bytes={pos}-{end - 1}"
        try:
            with self.client.stream("GET", peer.url(job.blob.name), headers=self.headers({"Range": wanted})) as r:
                if r.status_code != 206:
                    raise _Bad(f"answered HTTP {r.status_code} to a range request")
                m = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", r.headers.get("Content-Range", "").strip())
                if not m or (int(m.group(1)), int(m.group(2)) + 1, int(m.group(3))) != (pos, end, job.blob.size):
                    raise _Bad(f"answered range {r.headers.get('Content-Range')!r} to {wanted}")
                at = pos
                for chunk in r.iter_bytes():  # as received: what a peer sent before it failed is kept
                    if job.stopped():
                        raise Stopped()
                    if at + len(chunk) > end:
                        raise _Bad(f"sent more than {wanted}")
                    take(chunk, at)
                    at += len(chunk)
                if at < end:
                    raise _Bad(f"stopped sending at byte {at} of {wanted}")
        except httpx2.HTTPError as e:
            raise _Bad(f"failed ({self._redact(type(e).__name__ + (': ' + str(e) if str(e) else ''))})")

    def _blame(self, job: _Job, wrote: dict[int, list], holders: list[Peer], verify, what: str,
               tally: dict[str, int]) -> str | None:
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
                        self._get(job, other, piece[1], piece[2], compare)
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
