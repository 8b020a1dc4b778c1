"""Docker's Engine API over its unix socket: the state of images and
containers without starting the docker CLI (a Go binary whose start-up alone
costs more CPU than the whole read of a converged host). One HTTP/1.0 GET per
connection, read to the close (the engine sends no chunks to HTTP/1.0): no
http.client, whose email package was a tenth of a read's CPU (docs/benchmarks.md);
on _socket, not socket (its import converts four enums: issue 56), and the
JSON through formats/jsonio.py (json imports re and enum)."""

import _socket

from .formats import jsonio

SOCKET = "/var/run/docker.sock"
TIMEOUT = 10  # seconds; a local daemon answers in milliseconds
LIMIT = 64 << 20  # bytes of one answer: the largest, /images/json of a host with thousands of images, is a few MB


class Unavailable(Exception):
    """No engine answers on the socket."""


def _answer(raw, path):
    """(status, body) of the HTTP answer ``raw``; Unavailable when it is not one, or cut short."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if not sep or not version.startswith("HTTP/1.") or not (code.isascii() and code.isdigit()):
        raise Unavailable(f"GET {path}: not an HTTP answer")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "identity").lower() != "identity":
        raise Unavailable(f"GET {path}: an answer in {headers['transfer-encoding']} encoding, to HTTP/1.0")
    length = headers.get("content-length")
    if length is not None:
        if not (length.isascii() and length.isdigit()) or len(body) < int(length):
            raise Unavailable(f"GET {path}: the answer was cut short")
        body = body[:int(length)]
    return int(code), body


# What urllib.parse.quote_plus leaves as it is (its _ALWAYS_SAFE); every other character goes as %XX of its UTF-8.
_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")


def _quoted(value):
    return "".join(c if c in _PLAIN else "+" if c == " " else "".join(f"%{b:02X}" for b in c.encode()) for c in value)


def urlencode(query):
    """urllib.parse.urlencode(query) of a {str: str} (urllib.parse's import is a read's CPU: docs/benchmarks.md)."""
    return "&".join(f"{_quoted(str(key))}={_quoted(str(value))}" for key, value in query.items())


def get(path, query=None, socket_path=SOCKET):
    """The decoded JSON of GET ``path``; None on 404; Unavailable when the engine does not answer."""
    url = path + ("?" + urlencode(query) if query else "")
    if not url.isascii() or any(c <= " " or c == "\x7f" for c in url):
        raise ValueError(f"not a URL path to ask the engine: {url!r}")
    received, size = [], 0
    try:
        connection = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            connection.settimeout(TIMEOUT)
            connection.connect(socket_path)
            connection.sendall(f"GET {url} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode("ascii"))
            while chunk := connection.recv(1 << 16):
                size += len(chunk)
                if size > LIMIT:
                    raise Unavailable(f"GET {path}: an answer over {LIMIT} bytes")
                received.append(chunk)
        finally:
            connection.close()
    except OSError as error:
        raise Unavailable(str(error)) from error
    status, body = _answer(b"".join(received), path)
    if status == 404:
        return None
    if status != 200:
        raise Unavailable(f"GET {path}: HTTP {status}")
    return jsonio.loads(body)


def images(socket_path=SOCKET):
    """{"repo:tag" or "repo@digest": {"id", "labels"}} of every local image."""
    out = {}
    for image in get("/images/json", socket_path=socket_path) or []:
        for tag in (image.get("RepoTags") or []) + (image.get("RepoDigests") or []):
            out[tag] = {"id": image.get("Id"), "labels": image.get("Labels") or {}}
    return out


def containers(labels, socket_path=SOCKET):
    """Every container (running or not) carrying all of ``labels`` ("key=value")."""
    query = {"all": "1", "filters": jsonio.dumps({"label": list(labels)})}
    out = []
    for found in get("/containers/json", query, socket_path=socket_path) or []:
        out.append({
            "id": found.get("Id"),
            "name": (found.get("Names") or ["?"])[0].lstrip("/"),
            "state": found.get("State"),
            "status": found.get("Status"),
            "image_id": found.get("ImageID"),
            "labels": found.get("Labels") or {},
            # [{"IP", "PrivatePort", "PublicPort", "Type"}] it publishes, sorted: the engine lists them in no fixed
            # order, and the snapshot's digest must not move with it (a gateway's two ports: issue 56)
            "ports": sorted(found.get("Ports") or [], key=lambda port: jsonio.dumps(port, sort_keys=True)),
        })
    return out


def compose_containers(project, socket_path=SOCKET):
    """The containers of one compose project, by service name."""
    found = containers([f"com.docker.compose.project={project}"], socket_path=socket_path)
    return {c["labels"].get("com.docker.compose.service"): c for c in found}


def runtimes(socket_path=SOCKET):
    """The engine's runtimes (runc, nvidia, ...)."""
    return sorted(((get("/info", socket_path=socket_path) or {}).get("Runtimes") or {}))
