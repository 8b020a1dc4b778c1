"""Reads of a server's answer that end: bounded in bytes and in time.

A server (SGLang, a gateway, a worker's /metrics) may answer slowly, endlessly or hugely; every host program
reads an answer through read_bounded() or bounded_lines(), which end with Unbounded when the body is not
complete by a deadline or grows past a limit, and an error's body through error_body(). Every request is
sent through open_url(): it follows no redirect, and adds the API key only where apikey.auth_headers(url)
allows it. The limits below are the bounds of the answers the checks and the gateways' worker API give.
Standard library only, and apart from the checks (checks.py), so that drain.py, gateway_workers.py and
report.py ship without them.
"""

import socket
import time
import urllib.error
import urllib.request

from . import apikey
from .printable import printable

MAX_ANSWER_BYTES = 16 << 20  # far above any real answer to the checks' prompts
MAX_LINE_BYTES = 1 << 20     # one line of a stream (one chunk of a few tokens is a few hundred bytes)
MAX_ERROR_BYTES = 4096       # of an error's body, kept to say why
MAX_GATEWAY_BYTES = 1 << 20  # a gateway's reply (its worker list: a few hundred bytes a worker)


class Unbounded(OSError):
    """A server's answer that did not end in time or grew past its bound; the message says which."""


class Redirected(urllib.error.URLError):
    """A redirect (3xx) answered to a request: never followed, since the request may carry the key."""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        fp.close()
        raise Redirected(f"HTTP {code} redirect to {printable(newurl)} not followed")


# urllib's own opener follows a redirect with the request's headers (the key too), to any host and port.
OPENER = urllib.request.build_opener(_NoRedirects)


def open_url(request, timeout, key=True):
    """The answer to ``request`` (a urllib Request), through OPENER (a redirect is Redirected, never followed).
    With ``key``, it carries the API key when apikey.auth_headers() allows it for the request's URL, asked
    again for every request; whatever Authorization the request had is dropped first."""
    request.remove_header("Authorization")
    for name, value in (apikey.auth_headers(request.full_url) if key else {}).items():
        request.add_header(name, value)
    return OPENER.open(request, timeout=timeout)


def left(deadline: float, cap: float) -> float:
    """A probe's timeout: at most ``cap``, never past the deadline (and never zero, which means blocking)."""
    return max(0.1, min(cap, deadline - time.monotonic()))


def _read_timeout(reply, deadline: float) -> None:
    """Each read of ``reply`` waits at most until ``deadline`` (the socket's own timeout is per read)."""
    fp = getattr(reply, "fp", None)
    sock = getattr(getattr(fp, "raw", None), "_sock", None)
    if sock is not None:
        sock.settimeout(left(deadline, 3600))


def _blocks(reply, deadline: float, limit: int):
    """The body's blocks as they arrive; Unbounded when it is not done by ``deadline`` or passes ``limit`` bytes."""
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise Unbounded("the answer did not finish in time")
        _read_timeout(reply, deadline)
        try:
            block = reply.read1(65536)
        except (TimeoutError, socket.timeout):
            raise Unbounded("the answer did not finish in time") from None
        if not block:
            return
        size += len(block)
        if size > limit:
            raise Unbounded(f"the answer is larger than {limit} bytes")
        yield block


def read_bounded(reply, deadline: float, limit: int = MAX_ANSWER_BYTES) -> bytes:
    """The whole body of a server's answer, or Unbounded when it is not complete by ``deadline`` (a monotonic
    time) or grows past ``limit`` bytes. Every read from a server goes through here or bounded_lines()."""
    return b"".join(_blocks(reply, deadline, limit))


def bounded_lines(reply, deadline: float, limit: int = MAX_ANSWER_BYTES, max_line: int = MAX_LINE_BYTES):
    """The body's lines as they arrive (a stream), bounded like read_bounded() and each line at ``max_line``."""
    pending = b""
    for block in _blocks(reply, deadline, limit):
        pending += block
        *lines, pending = pending.split(b"\n")
        yield from lines
        if len(pending) > max_line:
            raise Unbounded(f"a line of the answer is longer than {max_line} bytes")
    if pending:
        yield pending


def error_body(error, seconds: float = 10, limit: int = 200) -> str:
    """The start of an HTTP error's body, to say why: read for at most ``seconds``, at most ``limit`` characters,
    the key redacted before the cut."""
    parts, deadline = [], time.monotonic() + seconds
    try:
        for block in _blocks(error, deadline, MAX_ERROR_BYTES):
            parts.append(block)
    except (Unbounded, OSError, AttributeError):
        pass
    return apikey.clip(b"".join(parts).decode(errors="replace"), limit)
