"""The pull's transfer: HTTP only, apart from what the pull decides (pull.py lists a revision, takes its locks,
verifies, repairs, links and records it; this module moves a file's bytes), the way huggingface_hub keeps
its transfer in utils/_http.py apart from its snapshot logic.

Transfer fetches one revision's files: where the Hub serves each (its HEAD, the redirect, whether the token
may follow), then a file's missing bytes into its partial `<etag>.incomplete` as ranged GETs, each range on
a connection of its own (ranges.py cuts them and keeps what each holds in a sidecar), a cut or a transient
error retried from the range's last byte with backoff or the wait the Hub asks for, a bounded number of
times, and the candidate verified (by the pull's own check) before it is handed back. The client has finite
timeouts (bounded_client). The first failure anywhere stops every worker (gather, Stopped).
"""

from __future__ import annotations

import heapq
import itertools
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, as_completed
from concurrent.futures import wait as wait_futures
from urllib.parse import urljoin, urlsplit

import httpx2  # huggingface_hub's own HTTP client (hard dependency of huggingface_hub 2.x)
from huggingface_hub import get_hf_file_metadata, hf_hub_url
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

from ..formats.units import human
from ..safefs import read_regular, unlink_if_present, write_atomic
from . import hublimits, ranges
from .pull_errors import PullError, Retryable, VerifyError
from .pull_locks import LOCK_POLL

_is_same_or_hub_host: Callable[[str, str], bool] | None
try:  # the library's own rule for keeping the auth header across a redirect
    from huggingface_hub.utils._http import _is_same_or_hub_host as _library_rule
    _is_same_or_hub_host = _library_rule
except ImportError:  # pragma: no cover - other library versions
    _is_same_or_hub_host = None

LIBRARY_NAME = "sglang-infra-hfpull"

CONNECT_TIMEOUT = 30.0  # seconds
READ_TIMEOUT = 120.0  # seconds without a byte before a read is abandoned
METADATA_TIMEOUT = 60.0
FSYNC_EVERY = 64 * 1024 * 1024
MAX_STALLED_ATTEMPTS = 5  # consecutive GET attempts of one range without progress
MAX_GET_ATTEMPTS = 50  # total GET attempts for one range, whatever the progress
RETRY_AFTER_MAX = hublimits.RETRY_AFTER_MAX
# A partial, and a blob until it is hashed: the account writes it, the group reads it. No member opens it for
# writing, so the bytes hashed are the bytes recorded (manifest.py); verified, it becomes group-writable (SHARED).
SEALED = 0o644
SHARED = 0o664


def token_arg(token: str | None):
    """huggingface_hub's token argument: the token, or False (never a token the library finds on its own)."""
    return token if token else False


def redact(text: str, token: str | None) -> str:
    """``text`` without the token."""
    if token:
        text = text.replace(token, "<token>")
    return text


def bounded_client():
    """huggingface_hub's default client, with finite timeouts instead of none, and every answer bounded in bytes
    and in total time (hublimits.py)."""
    from huggingface_hub.utils import _http as hf_http

    client = hf_http.default_client_factory()
    client.timeout = httpx2.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT)
    return hublimits.bound(client)


def model_info(api, repo_id: str, revision: str):
    """The model's info at ``revision``: every request it makes (a redirect followed) ends by one deadline."""
    with hublimits.within(hublimits.METADATA_DEADLINE, "model info"):
        return api.model_info(repo_id, revision=revision, timeout=METADATA_TIMEOUT)


def access_check(api, repo_id: str) -> None:
    """The Hub's word that the api's token may read ``repo_id``'s files (huggingface_hub's auth_check: GatedRepoError
    when it may not), within one deadline."""
    with hublimits.within(hublimits.METADATA_DEADLINE, "the access check"):
        api.auth_check(repo_id)


def tree(api, repo_id: str, commit: str, token):
    """The entries of the repo's file tree at ``commit`` (every page), each answer bounded by the client and the
    whole listing by hublimits.LISTING_DEADLINE."""
    with hublimits.within(hublimits.LISTING_DEADLINE, "the file tree"):
        yield from api.list_repo_tree(repo_id, recursive=True, revision=commit, token=token)


def _same_origin(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme, pa.hostname, pa.port) == (pb.scheme, pb.hostname, pb.port)


def keeps_token(url: str, location: str) -> bool:
    """
    Whether the request to ``location``, where ``url`` led, may carry the
    token: never when the scheme changes away from https (the token would
    cross the network in clear, whatever the host), else when both are one
    origin or a Hub origin (huggingface_hub's own rule, whose details vary
    between its releases; its 1.x compared the host alone).
    """
    if urlsplit(url).scheme.lower() == "https" and urlsplit(location).scheme.lower() != "https":
        return False
    return _is_same_or_hub_host(url, location) if _is_same_or_hub_host else _same_origin(url, location)


class _Job:
    """One blob being fetched: the partial's descriptor, its ranges (start, end, bytes done)
    and their sidecar (ranges.py), and where the Hub serves it. Range workers write with
    pwrite at their own offsets, then their own count line in the sidecar."""

    def __init__(self, transfer: Transfer, blob, partial: str, fd: int, spans: list, index: int, path: str,
                 location: str, headers: dict):
        self.transfer, self.blob, self.partial, self.fd = transfer, blob, partial, fd
        self.spans, self.index, self.path = spans, index, path
        self.location: str | None = location
        self.headers = headers
        self.sidecar = partial + ranges.SIDECAR
        self.counts: int | None = None  # the sidecar, open for its count lines
        self.count_at: list[int] = []  # where each range's count line is
        self.lock = threading.Lock()  # spans
        self.where_lock = threading.Lock()
        self.stop = threading.Event()  # a sibling range failed, or the server ignores ranges

    @property
    def split(self) -> bool:
        return len(self.spans) > 1

    def span(self, k: int) -> tuple[int, int, int]:
        with self.lock:
            return tuple(self.spans[k])

    def grow(self) -> None:
        """A file fetched as ranges gets its sidecar first, then its full length; one fetched as a
        single stream keeps its length equal to what it holds."""
        if self.split:
            write_atomic(self.sidecar, ranges.document(self.spans, self.blob.size))
            self.count_at = [ranges.count_offset(self.spans, self.blob.size, k) for k in range(len(self.spans))]
            self.counts = os.open(self.sidecar, os.O_WRONLY | os.O_NOFOLLOW)
            os.ftruncate(self.fd, self.blob.size)
        else:
            os.ftruncate(self.fd, self.spans[0][2])

    def advance(self, k: int, n: int) -> None:
        """Range k wrote n more bytes (already in the partial): count them, in the sidecar too."""
        with self.lock:
            self.spans[k][2] += n
            done = self.spans[k][2]
            if self.counts is not None:
                os.pwrite(self.counts, ranges.count_line(done), self.count_at[k])

    def rewind(self) -> None:
        """The server answered a resumed single stream with the whole file: keep it from byte 0."""
        with self.lock:
            lost, self.spans[0][2] = self.spans[0][2], 0
        os.ftruncate(self.fd, 0)
        self.transfer.progress.update(have=-lost)

    def restart(self, why: str) -> None:
        """The Hub ignored or refused a range request: fetch the file as one stream from byte 0."""
        self.transfer.progress.file_line(self.index, self.path, f"{why}; starting over from byte 0 as one stream")
        with self.lock:
            lost = ranges.done(self.spans)
            self.spans = [[0, self.blob.size, 0]]
            self._close_counts()
        unlink_if_present(self.sidecar)
        os.ftruncate(self.fd, 0)
        self.stop.clear()
        self.transfer.progress.update(have=-lost)

    def where(self) -> tuple[str, dict]:
        with self.where_lock:
            if self.location is None:
                self.location, self.headers = self.transfer.location(self.path, self.blob)
            return self.location, self.headers

    def forget_location(self) -> None:
        with self.where_lock:
            self.location = None

    def stopped(self) -> bool:
        return self.stop.is_set() or self.transfer.stop.is_set()

    def _close_counts(self) -> None:
        if self.counts is not None:
            os.close(self.counts)
            self.counts = None

    def close(self) -> None:
        try:
            self._close_counts()
            if not self.split and os.fstat(self.fd).st_size == 0:
                os.unlink(self.partial)  # nothing worth resuming
        finally:
            os.close(self.fd)


class RangePool:
    """``workers`` threads that run the ranges of a pull's files, the earliest file's first: each range is
    submitted with its ``order`` (the file's number in the pull, then the range's), and a free thread takes the
    lowest waiting. So the connections go to one file, then the next (they finish one after another, each hashed
    while the next one's bytes come) instead of to whichever file's ranges were queued first: files whose threads
    queue their ranges at the same moment interleave in a first-come queue, finish together at the end, and are
    all hashed after the last byte, the link idle meanwhile. Closing runs what is queued, then joins the threads."""

    def __init__(self, workers: int, name: str):
        self._queue: list = []  # heap of (order, sequence, future, fn, args)
        self._sequence = itertools.count()
        self._ready = threading.Condition()
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}_{n}", daemon=True) for n in range(workers)]
        for thread in self._threads:
            thread.start()

    def submit(self, order: tuple, fn, *args) -> Future:
        future: Future = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("the range pool is closed")
            heapq.heappush(self._queue, (order, next(self._sequence), future, fn, args))
            self._ready.notify()
        return future

    def _work(self) -> None:
        while True:
            with self._ready:
                while not self._queue and not self._closed:
                    self._ready.wait()
                if not self._queue:
                    return
                _, _, future, fn, args = heapq.heappop(self._queue)
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as error:  # handed to whoever waits on the future (gather)
                future.set_exception(error)

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify_all()
        for thread in self._threads:
            thread.join()

    def __enter__(self) -> RangePool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Transfer:
    """The transfer of one revision's files (pinned to ``commit``) from ``endpoint`` (None: the Hub), with up to
    ``workers`` connections in all: the ranges of every file share the pool the pull sets as ``ranges`` (a
    RangePool: the earliest file's ranges first).
    ``progress`` is the pull's (file_line, line, update), ``stop`` its event (set by the first failure: every
    worker ends at its next chunk), ``count`` adds to its totals (bytes_fetched, bytes_missing, resumed_bytes)."""

    def __init__(self, repo_id: str, commit: str, endpoint: str | None, token: str | None, workers: int,
                 progress, stop: threading.Event, count):
        self.repo_id, self.commit, self.endpoint, self.token = repo_id, commit, endpoint, token
        self.workers, self.progress, self.stop, self.count = workers, progress, stop, count
        self.ranges: RangePool | None = None

    def location(self, path: str, blob) -> tuple[str, dict]:
        """HEAD the resolve URL through huggingface_hub, as hf_hub_download does: the final
        location, and headers without the token if that location is off the Hub."""
        url = hf_hub_url(self.repo_id, path, revision=self.commit, endpoint=self.endpoint)
        # Its redirects and its retries (the client's, hublimits.RetryingTransport: not the library's as well).
        with hublimits.within(hublimits.METADATA_DEADLINE * 3, "file metadata"):
            meta = get_hf_file_metadata(url, token=token_arg(self.token), timeout=METADATA_TIMEOUT,
                                        library_name=LIBRARY_NAME, endpoint=self.endpoint)
        if meta.commit_hash and meta.commit_hash != self.commit:
            raise VerifyError(f"{path}: the Hub served commit {meta.commit_hash}, expected {self.commit}")
        listing = "the tree listing" if blob.locked is None else "the lock"  # with a lock, the listing is the lock's
        if meta.etag and meta.etag != blob.name:
            if blob.locked is not None:
                raise VerifyError(f"{path}: the endpoint lists {'sha256' if blob.lfs else 'git blob'} {meta.etag}, "
                                  f"the lock {blob.name}")
            raise VerifyError(f"{path}: the Hub's etag {meta.etag} differs from {listing} {blob.name}")
        if meta.size is not None and meta.size != blob.size:
            raise VerifyError(f"{path}: the Hub's size {meta.size} differs from {listing} {blob.size}")
        headers = build_hf_headers(token=token_arg(self.token), library_name=LIBRARY_NAME)
        headers["Accept-Encoding"] = "identity"
        location = urljoin(url, meta.location) if meta.location else url
        if not keeps_token(url, location):
            headers.pop("authorization", None)
        return location, headers

    def download(self, blob, partial: str, have: int, index: int, path: str, verify) -> os.stat_result:
        """Fetch what `partial` lacks (per its range sidecar, else everything after its first
        `have` bytes), then verify size and hash through one descriptor, the file writable by the
        account alone (Sealed); one retry from 0. The verified file's stat as hashed."""
        for attempt in (1, 2):
            sidecar = read_regular(partial + ranges.SIDECAR, ranges.MAX_SIDECAR_BYTES)
            spans = ranges.resume(blob.size, have, sidecar, self.workers)
            if attempt == 1:
                got = ranges.done(spans)
                self.count(bytes_missing=blob.size - got, resumed_bytes=got)
                self.progress.update(have=got)
                if got:
                    self.progress.file_line(index, path, f"resuming with {human(got)} of {human(blob.size)} "
                                                         f"on disk, {len(spans)} range(s)")
            if ranges.missing(spans):
                self.fetch(blob, partial, spans, index, path)
            fd = os.open(partial, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                check = Sealed(verify, partial)
                what = check(blob, fd)
                if what is None:
                    assert check.hashed is not None  # set by the hash that counted
                    return check.hashed
            finally:
                os.close(fd)
            self.progress.update(have=-min(os.path.getsize(partial), blob.size))
            os.unlink(partial)
            unlink_if_present(partial + ranges.SIDECAR)
            if attempt == 2:
                raise VerifyError(f"{path}: {what} after a full download from byte 0")
            self.progress.file_line(index, path, f"{what}; discarding the partial and fetching from byte 0")
            have = 0
        raise AssertionError("unreachable: the second attempt returns or raises")

    def fetch(self, blob, partial: str, spans: list, index: int, path: str) -> None:
        """Fetch the missing part of every range, each on a connection of its own, into `partial`."""
        assert self.ranges is not None  # the puller's pool, open for the revision's whole fetch
        location, headers = self.location(path, blob)  # errors (gated, ...) surface before any write
        fd = open_partial(partial)
        job = _Job(self, blob, partial, fd, spans, index, path, location, headers)
        try:
            job.grow()
            for _ in range(2):
                todo = [k for k, (start, end, done) in enumerate(job.spans) if done < end - start]
                try:
                    gather([self.ranges.submit((index, k), self._fetch_range, job, k) for k in todo], job.stop)
                    break
                except _Restart as e:
                    job.restart(str(e))
            else:
                raise PullError(f"{path}: the Hub answered a single stream as it did the ranges")
            os.fsync(fd)
        finally:
            job.close()

    def _fetch_range(self, job: _Job, k: int) -> None:
        """Range k of the job, complete: a cut or a transient error is retried from the range's
        last byte, with backoff (or the wait the Hub asks for), a bounded number of times."""
        stalled = 0
        for _ in range(MAX_GET_ATTEMPTS):
            start, end, before = job.span(k)
            if before >= end - start:
                return
            if job.stopped():
                raise Stopped()
            try:
                self._get_range(job, k)
                if job.span(k)[2] < end - start:
                    raise Retryable("the response ended early")
            except (httpx2.TransportError, Retryable) as e:
                done = job.span(k)[2]
                stalled = 0 if done > before else stalled + 1
                if stalled >= MAX_STALLED_ATTEMPTS:
                    raise
                if isinstance(e, Retryable) and e.refresh:
                    job.forget_location()  # e.g. an expired signed location
                asked = e.retry_after if isinstance(e, Retryable) else None
                wait = asked if asked is not None else min(8.0, 0.5 * 2.0 ** stalled)
                why = redact(str(e).splitlines()[0] if str(e) else type(e).__name__, self.token)
                part = f" (range {start}-{end - 1})" if job.split else ""
                self.progress.line(f"{job.path}{part}: {why}; retrying from byte {start + done} "
                                   f"in {wait:.1f} s" + (" as the Hub asked" if asked is not None else ""))
                if pause(wait, job.stopped):
                    raise Stopped()
        raise PullError(f"{job.path}: gave up after {MAX_GET_ATTEMPTS} attempts")

    def _get_range(self, job: _Job, k: int) -> None:
        start, end, done = job.span(k)
        pos = start + done
        size = job.blob.size
        location, headers = job.where()
        h = dict(headers)
        wanted = ranges.header(pos, end, size)
        if wanted:
            h["Range"] = wanted
        with get_session().stream("GET", location, headers=h, follow_redirects=True,
                                  extensions={hublimits.FILE_BODY: True}) as resp:
            if resp.status_code == 416 and wanted:
                raise _Restart("the Hub refused the range request")
            if resp.status_code in (408, 429, 500, 502, 503, 504):
                raise Retryable(f"HTTP {resp.status_code}", refresh=resp.status_code != 429,
                                 retry_after=retry_after(resp.headers))
            if resp.status_code == 403 and urlsplit(location).hostname != urlsplit(
                    hf_hub_url(self.repo_id, job.path, revision=self.commit, endpoint=self.endpoint)).hostname:
                raise Retryable("HTTP 403 from the file location", refresh=True)
            hf_raise_for_status(resp)
            if wanted and resp.status_code == 200:
                if job.split:
                    raise _Restart("the server ignored the Range request")
                self.progress.file_line(job.index, job.path,
                                        "the server ignored the Range request; starting over from byte 0")
                job.rewind()
                pos = 0
            elif resp.status_code == 206:
                m = re.match(r"bytes (\d+)-(\d+)/", resp.headers.get("Content-Range", ""))
                if not m or (int(m.group(1)), int(m.group(2))) != (pos, end - 1):
                    raise PullError(f"{job.path}: the Hub answered range {resp.headers.get('Content-Range')!r} "
                                    f"to a request for bytes {pos}-{end - 1}")
            since_sync = 0
            for chunk in resp.iter_bytes():  # as received: an interruption loses nothing already read
                if job.stopped():
                    raise Stopped()
                if not chunk:
                    continue
                n = len(chunk)
                if pos + n > end:
                    raise VerifyError(f"{job.path}: the Hub sent more than the expected {size} bytes"
                                      if end == size else f"{job.path}: the Hub sent more than bytes {start}-{end - 1}")
                _pwrite_all(job.fd, chunk, pos)
                pos += n
                job.advance(k, n)
                self.count(bytes_fetched=n)
                self.progress.update(have=n, fetched=n)
                since_sync += n
                if since_sync >= FSYNC_EVERY:
                    os.fsync(job.fd)
                    since_sync = 0


def _single_name(fd: int, path: str) -> None:
    """PullError unless the file open as ``fd`` has one name: the pull never hard-links a partial, and a second
    name may be another file of the account's, linked in by a member, that the pull must neither write nor
    make group-writable."""
    links = os.fstat(fd).st_nlink
    if links > 1:
        raise PullError(f"{path} has {links} hard links, which the pull never makes; it is neither written nor "
                        f"re-moded. Remove it (rm {path}) and run again")


def open_partial(partial: str) -> int:
    """The partial file of a blob open for writing (never through a link), once it has one name (_single_name),
    writable by the account alone (SEALED, also for one adopted group-writable); the caller closes it."""
    fd = os.open(partial, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, SEALED)
    try:
        _single_name(fd, partial)
        os.fchmod(fd, SEALED)
    except PullError:
        os.close(fd)
        raise
    return fd


def content_key(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """What moves when a file's bytes change: any write sets mtime and ctime (the kernel's clock), and only the
    owner can set an mtime back, never a ctime."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class Sealed:
    """``verify`` (blob, fd) -> why not, or None, run on a file no member can open for writing: first it gets one
    name (_single_name) and mode SEALED through ``fd``, then it is hashed, and a hash counts only when the file's
    content_key is the same before and after it (a member's descriptor opened while it was group-writable
    still writes, and moves both times). ``hashed``: the file's stat right after the hash that counted."""

    def __init__(self, verify, path: str):
        self.verify, self.path = verify, path
        self.hashed: os.stat_result | None = None

    def __call__(self, blob, fd: int) -> str | None:
        self.hashed = None
        _single_name(fd, self.path)
        os.fchmod(fd, SEALED)
        before = os.fstat(fd)
        what = self.verify(blob, fd)
        after = os.fstat(fd)
        if what is None and content_key(before) != content_key(after):
            what = "it was written while it was hashed"
        if what is None:
            self.hashed = after
        return what


class _Restart(Exception):
    """The Hub ignored or refused a range request: the file is fetched again as one stream."""


class Stopped(PullError):
    """Another worker failed (its error is the one reported) or the pull was interrupted."""

    def __init__(self):
        super().__init__("stopped")


def gather(futures: list, stop: threading.Event) -> None:
    """Wait for every future. The first failure sets `stop` (the others end at their next
    chunk) and is raised once all have ended; an interrupt of the waiting thread does the same."""
    first: BaseException | None = None
    try:
        for future in as_completed(futures):
            error = future.exception()
            if error is not None:
                stop.set()
                if first is None or (isinstance(first, Stopped) and not isinstance(error, Stopped)):
                    first = error
    except BaseException:
        stop.set()
        wait_futures(futures)
        raise
    if first is not None:
        raise first


def pause(seconds: float, stopped) -> bool:
    """Sleep up to `seconds`, in short steps; True as soon as `stopped()` is."""
    deadline = time.monotonic() + seconds
    for _ in range(int(seconds / LOCK_POLL) + 2):
        if stopped():
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(LOCK_POLL, left))
    return stopped()


retry_after = hublimits.retry_after  # the wait a 429 or 503 asks for, capped at hublimits.RETRY_AFTER_MAX


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n

