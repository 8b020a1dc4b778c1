"""dockerapi.get: the Engine API's answer read over its unix socket with plain HTTP/1.0 (no HTTP library: the
snapshot's read of every host imported http.client and its email package for it), each answer bounded."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import OsThread

from sglang_infra.hostside import dockerapi


@pytest.fixture
def engine(tmp_path):
    """A unix socket that answers each connection with the next of ``answers`` (bytes) and records each request."""
    path = str(tmp_path / "docker.sock")
    server = OsThread.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)
    state = {"answers": [], "requests": []}

    def serve():
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            with connection:
                request = b""
                while b"\r\n\r\n" not in request:
                    chunk = connection.recv(4096)
                    if not chunk:
                        break
                    request += chunk
                state["requests"].append(request.decode())
                if state["answers"]:
                    connection.sendall(state["answers"].pop(0))

    thread = OsThread(serve)
    yield path, state
    OsThread.stop(server)
    thread.join(timeout=5)


def answer(status, body, headers=()):
    head = [f"HTTP/1.0 {status} X", "Content-Type: application/json", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def test_an_answer_is_read_to_its_end_and_decoded(engine):
    path, state = engine
    body = json.dumps([{"Id": "sha256:" + "a" * 64, "RepoTags": ["x:1"]}] * 3000).encode()  # ~300 KB: many reads
    state["answers"].append(answer(200, body, [f"Content-Length: {len(body)}"]))
    assert dockerapi.get("/images/json", socket_path=path) == json.loads(body)
    state["answers"].append(answer(200, b'{"Runtimes": {"runc": {}}}'))   # no length: read to the close
    assert dockerapi.runtimes(socket_path=path) == ["runc"]
    assert state["requests"] == ["GET /images/json HTTP/1.0\r\nHost: localhost\r\n\r\n",
                                 "GET /info HTTP/1.0\r\nHost: localhost\r\n\r\n"]


def test_the_query_is_encoded_into_the_request_line(engine):
    path, state = engine
    state["answers"].append(answer(200, b"[]"))
    assert dockerapi.containers(["com.docker.compose.project=p"], socket_path=path) == []
    assert state["requests"][0].startswith("GET /containers/json?all=1&filters=%7B%22label%22%3A+%5B%22"
                                           "com.docker.compose.project%3Dp%22%5D%7D HTTP/1.0\r\n")


def test_not_found_is_none_and_an_error_is_unavailable(engine):
    path, state = engine
    state["answers"] += [answer(404, b'{"message": "no such container"}'), answer(500, b'{"message": "boom"}')]
    assert dockerapi.get("/containers/x/json", socket_path=path) is None
    with pytest.raises(dockerapi.Unavailable, match="HTTP 500"):
        dockerapi.get("/info", socket_path=path)


@pytest.mark.parametrize("raw, said", [
    (b"", "not an HTTP answer"),                                        # closed without a word
    (b"SSH-2.0-OpenSSH\r\n", "not an HTTP answer"),                      # something else on the socket
    (b"HTTP/1.0 200 OK\r\nContent-Type: application/json", "not an HTTP answer"),   # cut in the headers
    (b"HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\n[1, 2", "cut short"),            # cut in the body
    (b"HTTP/1.0 200 OK\r\nContent-Length: x\r\n\r\n[]", "cut short"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n[]\r\n0\r\n\r\n", "chunked"),
])
def test_what_is_not_a_whole_answer_is_unavailable(engine, raw, said):
    path, state = engine
    state["answers"].append(raw)
    with pytest.raises(dockerapi.Unavailable, match=said):
        dockerapi.get("/info", socket_path=path)


def test_an_answer_is_bounded(engine, monkeypatch):
    path, state = engine
    monkeypatch.setattr(dockerapi, "LIMIT", 1000)
    state["answers"].append(answer(200, b"[" + b"0, " * 1000 + b"0]"))
    with pytest.raises(dockerapi.Unavailable, match="over 1000 bytes"):
        dockerapi.get("/images/json", socket_path=path)


def test_no_engine_is_unavailable_and_a_path_that_would_break_the_request_is_refused(tmp_path):
    with pytest.raises(dockerapi.Unavailable):
        dockerapi.get("/info", socket_path=str(tmp_path / "absent.sock"))
    for bad in ("/containers/a b/json", "/containers/a\r\nX: y/json", "/containers/\x7f/json", "/containers/é/json"):
        with pytest.raises(ValueError):
            dockerapi.get(bad, socket_path=str(tmp_path / "absent.sock"))


def test_dockerapi_imports_no_http_library():
    """http.client imports the email package to parse headers: about a tenth of a read's own CPU (benchmarks.md)."""
    root = Path(dockerapi.__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", "import sys; from sglang_infra.hostside import dockerapi; "
                          "print(sorted(m for m in sys.modules if m.startswith(('http', 'email'))))"],
                         capture_output=True, text=True, timeout=60, cwd=root, env={**os.environ, "PYTHONPATH": root})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
