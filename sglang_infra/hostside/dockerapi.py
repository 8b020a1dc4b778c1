"""Docker's Engine API over its unix socket: the state of images and
containers without starting the docker CLI (a Go binary whose start-up alone
costs more CPU than the whole read of a converged host)."""

import http.client
import json
import socket
import urllib.parse

SOCKET = "/var/run/docker.sock"
TIMEOUT = 10  # seconds; a local daemon answers in milliseconds


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=TIMEOUT)
        self._path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT)
        self.sock.connect(self._path)


class Unavailable(Exception):
    """No engine answers on the socket."""


def get(path, query=None, socket_path=SOCKET):
    """The decoded JSON of GET ``path``; None on 404; Unavailable when the engine does not answer."""
    url = path + ("?" + urllib.parse.urlencode(query) if query else "")
    connection = UnixConnection(socket_path)
    try:
        connection.request("GET", url)
        reply = connection.getresponse()
        body = reply.read()
    except OSError as error:
        raise Unavailable(str(error)) from error
    finally:
        connection.close()
    if reply.status == 404:
        return None
    if reply.status != 200:
        raise Unavailable(f"GET {path}: HTTP {reply.status}")
    return json.loads(body)


def images(socket_path=SOCKET):
    """{"repo:tag" or "repo@digest": {"id", "labels"}} of every local image."""
    out = {}
    for image in get("/images/json", socket_path=socket_path) or []:
        for tag in (image.get("RepoTags") or []) + (image.get("RepoDigests") or []):
            out[tag] = {"id": image.get("Id"), "labels": image.get("Labels") or {}}
    return out


def containers(labels, socket_path=SOCKET):
    """Every container (running or not) carrying all of ``labels`` ("key=value")."""
    query = {"all": "1", "filters": json.dumps({"label": list(labels)})}
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
            "ports": sorted(found.get("Ports") or [], key=lambda port: json.dumps(port, sort_keys=True)),
        })
    return out


def compose_containers(project, socket_path=SOCKET):
    """The containers of one compose project, by service name."""
    found = containers([f"com.docker.compose.project={project}"], socket_path=socket_path)
    return {c["labels"].get("com.docker.compose.service"): c for c in found}


def runtimes(socket_path=SOCKET):
    """The engine's runtimes (runc, nvidia, ...)."""
    return sorted(((get("/info", socket_path=socket_path) or {}).get("Runtimes") or {}))
