"""The server's API key: its file's format, the header that carries it, and its removal from what is shown.

The key lives in the server's own config file (docker/secrets/server.yaml on a worker, mounted read-only into
the serving and gateway containers), one YAML line `api-key: "KEY"` whose value is a JSON string, so that it
is on no command line. That format is written by file_text() (the deploy, plan.py) and read by read_key()
(every host program that needs the key: the checks, the gate, drain.py, gateway_workers.py, report.py, the
gateway's launcher), and nowhere else. A program that talks to a server loads the key once
(use_api_key_file, with its port check), sends each request through bounded.open_url() (auth_headers(url)
asks the port check again for every request), and passes whatever a server wrote or answered through
redact() (or clip(), which redacts before it cuts) before it prints or stores it. Standard library only:
shipped with the host programs (ship.py), without the checks' tool-call and benchmark code.
"""

import urllib.parse

from . import safefs
from .formats import jsonio

KEY_FIELD = "api-key"
REDACTED = "<redacted>"
MAX_KEY_FILE_BYTES = 65536   # one line holding a key of at most 512 characters

# Set by use_api_key_file(): the key is never passed on a command line.
_HEADERS: dict[str, str] = {}
_SECRETS: list[str] = []   # the key, as it may appear in a log line or an answer, for redact()
_HOLDS = [lambda url: False]   # the port check: whether the key may go to a URL (use_api_key_file)


def file_text(key):
    """The server's config file holding ``key``: one line `api-key: "KEY"` (a JSON string is a YAML scalar)."""
    return f"{KEY_FIELD}: {jsonio.dumps(key)}\n".encode()


def read_key(path):
    """The key in ``path``, the server's config file (its last `api-key:` line, as a YAML reader takes it), or
    None when the file has no such line. Read as root reads the account's files (safefs.read_small): a symlink
    is refused, never followed; a FIFO or anything else but a regular file, or a file larger than
    MAX_KEY_FILE_BYTES, is refused (OSError saying so)."""
    found = None
    for line in safefs.read_small(path, MAX_KEY_FILE_BYTES).decode("utf-8").splitlines():
        field, sep, value = line.partition(":")
        if sep and field.strip() == KEY_FIELD:
            found = jsonio.loads(value.strip())
    return found


def use_api_key_file(path, holds=None):
    """Send the key in ``path`` (the server's config file, see read_key) with every request to a URL that
    ``holds(url)`` says the project's own running container publishes (stack.holds), asked again for each
    request; without ``holds`` the key is sent nowhere (loaded to be redacted). Nothing without a path or a key
    in it. A second call sends its key instead of the first one's, and redacts both."""
    if not path:
        return
    _HOLDS[:] = [holds or (lambda url: False)]
    secret = read_key(path)
    if secret is None:
        return
    _HEADERS["Authorization"] = "Bearer " + secret
    _SECRETS[:] = sorted(set(_SECRETS) | {secret, urllib.parse.quote(secret, safe=""),
                                          urllib.parse.quote_plus(secret, safe="")} - {""}, key=len, reverse=True)


def loaded():
    """Whether a key was loaded (requests may carry it)."""
    return bool(_HEADERS)


def auth_headers(url):
    """The headers that carry the key to ``url``: none without a key, nor when the port check of
    use_api_key_file() says the project's own container does not publish that URL's port (asked every time)."""
    return dict(_HEADERS) if _HEADERS and _HOLDS[0](url) else {}


def redact(text):
    """``text`` without the key: SGLang logs its server args (the key included) at start and /server_info
    carries it (sgl-project/sglang#37457); whatever a server wrote or answered is redacted before it is
    printed or stored."""
    for secret in _SECRETS:
        text = text.replace(secret, REDACTED)
    return text


def clip(text, limit):
    """The first ``limit`` characters of ``text``, redacted before the cut: a key the cut would split leaves none
    of its characters."""
    return redact(text)[:limit]
