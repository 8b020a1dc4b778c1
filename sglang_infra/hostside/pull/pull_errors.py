"""The pull's failures: its exit codes, its error types, and the one line an exception
from the Hub, the network or the disk is reported as (describe_error), with its exit code.

Imported by every other part of hfpull.py (pull.py, pull_locks.py, prune.py) and by
hfpull.py itself; it imports none of them.
"""

from __future__ import annotations

import errno
import re

import httpx2  # huggingface_hub's own HTTP client (hard dependency of huggingface_hub 2.x)
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

EXIT_OK, EXIT_USAGE, EXIT_REMOTE, EXIT_VERIFY, EXIT_LOCKED = 0, 2, 3, 4, 5


class PullError(Exception):
    """A failure reported as one line on stderr."""

    def __init__(self, message: str, code: int = EXIT_REMOTE):
        super().__init__(message)
        self.code = code


class VerifyError(PullError):
    def __init__(self, message: str):
        super().__init__(message, EXIT_VERIFY)


class Retryable(Exception):
    """A transient failure of one GET (a cut, a 5xx, a 429): retried from the range's last byte."""

    def __init__(self, message: str, refresh: bool = False, retry_after: float | None = None):
        super().__init__(message)
        self.refresh = refresh
        self.retry_after = retry_after


def hub_message(e: BaseException) -> str:
    """The Hub's own message when it gave one, else the first line of the error; no URLs."""
    text = getattr(e, "server_message", None) or str(e) or type(e).__name__
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), type(e).__name__)
    line = re.sub(r"\s*\((Request ID|Amzn Trace ID|Amz CF ID): [^)]*\)", "", line)
    return re.sub(r"https?://\S+", "<url>", line)


def unreachable(e: BaseException, endpoint: str | None) -> str | None:
    """The words for a Hub (or mirror) that could not be reached at all (refused, unresolvable, timed out before
    it answered), naming it and its address, or None for any other failure."""
    if not isinstance(e, (httpx2.ConnectError, httpx2.ConnectTimeout)):
        return None
    try:
        url = e.request.url
        address = f"{url.scheme}://{url.netloc.decode('ascii', 'replace')}"
    except RuntimeError:  # no request attached
        address = endpoint or "the default endpoint"
    who = "the Hub" if not endpoint else "the Hub endpoint (sglang_hf_endpoint)"
    attempts = getattr(e, "sglang_attempts", 1)
    tried = f" after {attempts} attempts over {getattr(e, 'sglang_seconds', 0.0):.0f} s" if attempts > 1 else ""
    return (f"{who} at {address} could not be reached ({hub_message(e)}){tried}. Check that it is up and that "
            "this host reaches it, then run again")


def describe_error(e: BaseException, endpoint: str | None = None) -> tuple[str, int]:
    down = unreachable(e, endpoint)
    if down:
        return down, EXIT_REMOTE
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"disk full: {e.strerror}" + (f" ({e.filename})" if e.filename else ""), EXIT_REMOTE
    if isinstance(e, GatedRepoError):
        reason = "GatedRepo"
    elif isinstance(e, RepositoryNotFoundError):
        reason = "RepoNotFound"
    elif isinstance(e, RevisionNotFoundError):
        reason = "RevisionNotFound"
    elif isinstance(e, EntryNotFoundError):
        reason = "EntryNotFound"
    elif isinstance(e, HfHubHTTPError):
        code = getattr(getattr(e, "response", None), "status_code", None)
        reason = f"HTTP {code}" if code else "HTTP error"
    elif isinstance(e, (httpx2.HTTPError, Retryable, ConnectionError, TimeoutError)):
        reason = "network error"
    elif isinstance(e, OSError) and e.filename:
        reason = "I/O error"
        return f"{reason}: {e.strerror or e} ({e.filename})", EXIT_REMOTE
    else:
        reason = "network error"
    return f"{reason}: {hub_message(e)}", EXIT_REMOTE
