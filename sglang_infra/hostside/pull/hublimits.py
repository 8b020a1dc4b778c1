"""Every answer the pull reads from the Hub or a mirror, bounded in bytes and in total time.

huggingface_hub reads a metadata answer (a model's info, a page of the file tree, paths-info, an error's or a
redirect's body) whole into memory, with nothing but a per-read socket timeout: an endless answer grows the
pull until the kernel's OOM killer picks a process, and one that drips a byte a second never trips a socket
timeout. The pull's client (transfer.bounded_client) sends every request through BoundedTransport: each answer,
from the connection to its last byte, ends within its deadline and its byte limit, or the request fails with
Unbounded, naming the answer, the endpoint and the limit. The work of one request runs in a thread of its own
that the caller waits for with the deadline, so a server stalling mid-header or mid-body cannot outlast it.

A file's body (a GET the pull marks with FILE_BODY, answered 2xx) is the one answer handed back unread: the
pull stops it at the size the tree listed (transfer.py), and its per-read timeout ends a stalled one; its
headers are bounded like any answer's, and a timeout there is an httpx timeout, retried like a cut.

Every other answer (a model's info, a page of the tree, a file's metadata, the access check) is retried by
RetryingTransport when the Hub answers 429, 500, 502, 503 or 504 or cannot be reached: at most
METADATA_ATTEMPTS times, after a backoff of 1, 2, 4 s ... (at most BACKOFF_MAX) or the wait its Retry-After asks
for (at most RETRY_AFTER_MAX), each attempt bounded as above; a wait between attempts moves the deadline of a
whole answer (within()) on by as much, so only the answers' own time counts against it. The Hub's 500s come and
go and its rate limiter answers 429 with the seconds to wait; a pull of hours must not fail on the first.
"""

from __future__ import annotations

import contextlib
import email.utils
import threading
import time
import zlib
from urllib.parse import urlsplit

import httpx2  # huggingface_hub's own HTTP client (hard dependency of huggingface_hub 2.x)

from ..printable import printable
from .pull_errors import PullError

MAX_TREE_ENTRIES = 200_000  # files in one repo; the largest model repos hold a few thousand
# A model's info lists every file (its siblings): MAX_TREE_ENTRIES names at ~160 bytes of JSON each is ~32 MiB,
# and a page of the tree (the Hub sends 1,000 entries a page) is far smaller.
MAX_METADATA_BYTES = 32 << 20
MAX_ERROR_BYTES = 1 << 20  # an error's or a redirect's body: the Hub's are a few hundred bytes of JSON
# One answer, from the connection to its last byte: a model's info or a page of the tree is a few MB at most,
# seconds on the slowest link a fleet pulls models over.
METADATA_DEADLINE = 120.0
# The whole tree, every page: MAX_TREE_ENTRIES at 1,000 a page is 200 answers, each well under a second on
# the Hub; a mirror that paginates without end (empty pages, each with a "next" link) stops here.
LISTING_DEADLINE = 1800.0
# How often one metadata request is asked before its failure is the pull's: a transient 5xx, a 429 or a cut
# connection is retried, with waits of 1, 2, 4, 8 s (BACKOFF_MAX) or the Retry-After asked (RETRY_AFTER_MAX): at
# most 4 waits of 60 s, four minutes, for one answer of a Hub that keeps refusing.
METADATA_ATTEMPTS = 5
RETRIED_STATUSES = (429, 500, 502, 503, 504)
BACKOFF_MAX = 8.0
RETRY_AFTER_MAX = 60.0  # seconds: the longest wait a Retry-After header gets
FILE_BODY = "sglang_file_body"  # the request extension of a GET whose 2xx body is a file, bounded by the pull

_local = threading.local()  # the deadline of a whole listing (within()), for the requests of this thread


class Unbounded(PullError):
    """An answer that grew past its byte limit or did not end by its deadline; the message names which."""


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit >> 10} KiB"


def origin(url) -> str:
    parts = urlsplit(str(url))
    return printable(f"{parts.scheme}://{parts.netloc}")


def answer_name(request) -> str:
    """What a request asks for, in words: model info, the file tree, paths info, file metadata, a file."""
    path, method = request.url.path, request.method
    if request.extensions.get(FILE_BODY):
        return "a file"
    if method == "HEAD":
        return "file metadata"
    if path.startswith("/api/"):
        if "/tree/" in path:
            return "the file tree"
        if "/paths-info/" in path:
            return "paths info"
        if path.endswith("/auth-check"):
            return "the access check"
        return "model info"
    return f"the answer to {method} {printable(path[:80])}"


@contextlib.contextmanager
def within(seconds: float, what: str):
    """Every request this thread makes inside ends by one deadline ``seconds`` away (a paginated listing)."""
    outer = getattr(_local, "overall", None)
    _local.overall = (time.monotonic() + seconds, seconds, what)
    if outer is not None and outer[0] < _local.overall[0]:
        _local.overall = outer  # an outer deadline that ends sooner still holds
    try:
        yield
    finally:
        _local.overall = outer


def _decoder(encoding: str, what: str):
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj()
    raise Unbounded(f"{what} came encoded as {printable(encoding)!r}, which the pull did not ask for")


def _read(response, limit: int, what: str, stop: threading.Event) -> bytes:
    """The whole body of ``response`` decoded (gzip or deflate: the limit holds for the decoded bytes, so no
    small answer expands without end), or Unbounded past ``limit`` bytes."""
    decoder = _decoder(response.headers.get("Content-Encoding", "").strip().lower(), what)
    parts, size = [], 0
    for chunk in response.stream:
        if stop.is_set():  # the caller gave up at the deadline
            return b""
        if decoder is not None:
            chunk = decoder.decompress(chunk, limit - size + 1)
            if decoder.unconsumed_tail:
                size = limit + 1
        size += len(chunk)
        if size > limit:
            raise Unbounded(f"{what} exceeded {_size(limit)}")
        parts.append(chunk)
    return b"".join(parts)


class BoundedTransport(httpx2.BaseTransport):
    """``inner`` (an httpx transport) with every answer bounded: see the module's docstring."""

    def __init__(self, inner: httpx2.BaseTransport):
        self.inner = inner

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        file_body = bool(request.extensions.get(FILE_BODY))
        what = f"{answer_name(request)} from {origin(request.url)}"
        seconds, deadline = METADATA_DEADLINE, time.monotonic() + METADATA_DEADLINE
        overall = getattr(_local, "overall", None)
        if overall is not None and overall[0] < deadline:
            deadline, seconds, what = overall[0], overall[1], f"{overall[2]} from {origin(request.url)}"
        if not file_body:
            request.headers["Accept-Encoding"] = "identity"
        box: dict = {}
        stop = threading.Event()

        def work() -> None:
            response = None
            try:
                response = self.inner.handle_request(request)
                if not (file_body and response.status_code < 300):
                    limit = MAX_ERROR_BYTES if response.status_code >= 300 else MAX_METADATA_BYTES
                    box["body"] = _read(response, limit, f"the HTTP {response.status_code} answer to {what}"
                                        if response.status_code >= 300 else what, stop)
                    response.close()
                box["response"] = response
            except BaseException as error:  # handed to the caller, which raises it
                box["error"] = error
                if response is not None:
                    response.close()
            if stop.is_set() and "response" in box:
                box["response"].close()  # nobody waits for it any more

        worker = threading.Thread(target=work, name="hub-answer", daemon=True)
        worker.start()
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            stop.set()
            message = f"{what} did not complete within {seconds:g} s"
            if file_body:
                raise httpx2.ReadTimeout(message, request=request)  # retried like a cut, with its own count
            raise Unbounded(message)
        if "error" in box:
            raise box["error"]
        response = box["response"]
        if "body" not in box:
            return response
        headers = response.headers  # a HEAD's Content-Length is the file's size: kept as it came
        if response.headers.get("Content-Encoding", "identity").strip().lower() != "identity":  # decoded here
            headers = [(k, v) for k, v in response.headers.multi_items()
                       if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
        return httpx2.Response(response.status_code, headers=headers, stream=httpx2.ByteStream(box["body"]),
                               extensions=response.extensions)

    def close(self) -> None:
        self.inner.close()


def retry_after(headers) -> float | None:
    """The wait a 429 or 503 asks for (seconds, or an HTTP date), capped at RETRY_AFTER_MAX; None if none."""
    value = (headers.get("Retry-After") or "").strip()
    if not value:
        return None
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError):
            return None
    return min(max(0.0, seconds), RETRY_AFTER_MAX)


def backoff(attempt: int, asked: float | None) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1, 2, ...): what the Hub asked, else 1, 2, 4 ... s."""
    return asked if asked is not None else min(BACKOFF_MAX, 2.0 ** (attempt - 1))


def waited(seconds: float) -> None:
    """The deadline of this thread's whole answer (within()) moved ``seconds`` on: a wait between attempts is the
    Hub's asking, not the answer's time; the answers themselves, their redirects included, share the deadline."""
    overall = getattr(_local, "overall", None)
    if overall is not None:
        _local.overall = (overall[0] + seconds, overall[1], overall[2])


def retried(request) -> bool:
    """Whether RetryingTransport asks ``request`` again: the pull's own requests of a model repo (its info, tree,
    paths info, access check; a file's metadata), not what the library sends on its own (its telemetry, its
    registry of agent harnesses: best effort, each with a short timeout of its own)."""
    path = request.url.path
    return "/api/models/" in path or (request.method == "HEAD" and "/resolve/" in path)


class RetryingTransport(httpx2.BaseTransport):
    """``inner`` with every request but a file's body (transfer.py retries those by range) asked again when the Hub
    answers RETRIED_STATUSES or cannot be reached (see the module's docstring); ``say`` prints one line a retry.
    The error of the last attempt is raised with its attempts and seconds on it (sglang_attempts, sglang_seconds)."""

    def __init__(self, inner: httpx2.BaseTransport, say=print, sleep=time.sleep):
        self.inner, self.say, self.sleep = inner, say, sleep

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.extensions.get(FILE_BODY) or not retried(request):
            return self.inner.handle_request(request)
        started = time.monotonic()
        what = f"{answer_name(request)} from {origin(request.url)}"
        for attempt in range(1, METADATA_ATTEMPTS + 1):
            try:
                response = self.inner.handle_request(request)
            except (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.ReadTimeout, httpx2.RemoteProtocolError,
                    httpx2.ReadError) as error:
                if attempt == METADATA_ATTEMPTS:
                    setattr(error, "sglang_attempts", attempt)  # named in the error's line (pull_errors.unreachable)
                    setattr(error, "sglang_seconds", time.monotonic() - started)
                    raise
                wait = backoff(attempt, None)
                why = str(error).splitlines()[0] if str(error) else type(error).__name__
            else:
                if response.status_code not in RETRIED_STATUSES or attempt == METADATA_ATTEMPTS:
                    return response
                asked = retry_after(response.headers)
                response.close()
                wait = backoff(attempt, asked)
                why = f"HTTP {response.status_code}" + (f", Retry-After {asked:g} s" if asked is not None else "")
            self.say(printable(f"{what}: {why}; retrying in {wait:.1f} s (attempt {attempt + 1} of "
                               f"{METADATA_ATTEMPTS}){' as the Hub asked' if 'Retry-After' in why else ''}"))
            self.sleep(wait)
            waited(wait)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def close(self) -> None:
        self.inner.close()


def _say(line: str) -> None:
    print(line, flush=True)


def bound(client: httpx2.Client) -> httpx2.Client:
    """``client`` with every transport it may use (its own, and one per proxy it mounts) bounded, and its requests
    but a file's body retried (RetryingTransport), each attempt bounded."""
    def wrap(transport: httpx2.BaseTransport) -> httpx2.BaseTransport:
        return RetryingTransport(BoundedTransport(transport), say=_say)

    client._transport = wrap(client._transport)
    client._mounts = {pattern: wrap(t) if t is not None else None for pattern, t in client._mounts.items()}
    return client
