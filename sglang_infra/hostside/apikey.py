"""The server's API key: its file's format, the header that carries it, and its removal from what is shown.

The key lives in the server's own config file (docker/secrets/server.yaml on a worker, mounted read-only into
the serving and gateway containers), one YAML line `api-key: "KEY"` whose value is a JSON string, so that it
is on no command line. That format is written by file_text() (the deploy, plan.py) and read by read_key()
(every host program that needs the key: the checks, the gate, drain.py, gateway_workers.py, report.py, the
gateway's launcher), and nowhere else. A program that talks to a server loads the key once
(use_api_key_file), sends auth_headers() with its requests, and passes whatever a server wrote or answered
through redact() before it prints or stores it. Standard library only: shipped with the host programs
(ship.py), without the checks' tool-call and benchmark code.
"""

import json
import urllib.parse

KEY_FIELD = "api-key"
REDACTED = "<redacted>"

# Set by use_api_key_file(): the key is never passed on a command line.
_HEADERS: dict[str, str] = {}
_SECRETS: list[str] = []   # the key, as it may appear in a log line or an answer, for redact()


def file_text(key):
    """The server's config file holding ``key``: one line `api-key: "KEY"` (a JSON string is a YAML scalar)."""
    return f"{KEY_FIELD}: {json.dumps(key)}\n".encode()


def read_key(path):
    """The key in ``path``, the server's config file (its last `api-key:` line, as a YAML reader takes it), or
    None when the file has no such line."""
    found = None
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            field, sep, value = line.partition(":")
            if sep and field.strip() == KEY_FIELD:
                found = json.loads(value.strip())
    return found


def use_api_key_file(path):
    """Send the key in ``path`` (the server's config file, see read_key) with every request; nothing without a
    path or a key in it."""
    if not path:
        return
    secret = read_key(path)
    if secret is None:
        return
    _HEADERS["Authorization"] = "Bearer " + secret
    _SECRETS[:] = sorted({secret, urllib.parse.quote(secret, safe=""),
                          urllib.parse.quote_plus(secret, safe="")} - {""}, key=len, reverse=True)


def auth_headers():
    """The headers that carry the key (none without one)."""
    return dict(_HEADERS)


def redact(text):
    """``text`` without the key: SGLang logs its server args (the key included) at start and /server_info
    carries it (sgl-project/sglang#37457); whatever a server wrote or answered is redacted before it is
    printed or stored."""
    for secret in _SECRETS:
        text = text.replace(secret, REDACTED)
    return text
