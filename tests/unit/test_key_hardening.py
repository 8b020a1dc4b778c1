"""Issue #31, third round: the API key follows no redirect and goes only to a port the project's own container
publishes, checked for every request; it is redacted before any cut; and the files root reads (the key file,
the stamp's inputs) are read with no link followed, no FIFO opened for reading, and a bound in bytes."""

from __future__ import annotations

import io
import json
import os
import threading
import time
import urllib.error
import urllib.request
from contextlib import redirect_stdout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sglang_infra.hostside import apikey, bounded, checks, safefs, stack
from sglang_infra.hostside.gate import report, stamp
from sglang_infra.hostside.roll import drain, gateway_workers

KEY = "Zq9Xw7Vb5Nm3Lk1Jh8Gf6Dd4Ss2Aa0Pp"   # 32 characters, none of them in the padding below
assert len(KEY) == 32


class Server:
    """A loopback HTTP server recording (method, path, Authorization) of each request; ``redirect`` (code,
    location) makes it answer every request with that redirect, else 200 and ``body``."""

    def __init__(self, redirect=None, body=None):
        self.seen = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                outer.seen.append((self.command, self.path, self.headers.get("Authorization")))
                if redirect:
                    self.send_response(redirect[0])
                    self.send_header("Location", redirect[1] + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                raw = json.dumps(body if body is not None else {}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def key_file(tmp_path, monkeypatch):
    monkeypatch.setattr(apikey, "_HEADERS", {})
    monkeypatch.setattr(apikey, "_SECRETS", [])
    monkeypatch.setattr(checks, "watchdog", lambda *a: None)   # it would end the test run's process
    path = tmp_path / "server.yaml"
    path.write_text(f'api-key: "{KEY}"\n')
    return str(path)


@pytest.fixture(params=[302, 307])
def hop(request, monkeypatch):
    """(the redirect's code, the server answering it to every request, the server it redirects to), every port
    held by the project's own container as far as the port check knows."""
    monkeypatch.setattr(stack, "holds", lambda url, *a: True)
    monkeypatch.setattr(stack, "published", lambda port, *a: ["127.0.0.1"])
    target = Server(body={"workers": [], "data": []})
    source = Server(redirect=(request.param, target.url))
    yield request.param, source, target
    source.close()
    target.close()


def within(seconds, call, *args):
    """The result of ``call`` (or the exception it raised), failing when it is not done in ``seconds``."""
    found = {}

    def run():
        try:
            found["result"] = call(*args)
        except Exception as error:   # the caller judges it
            found["result"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{call.__name__} did not return within {seconds} s"
    return found["result"]


# ---------------------------------------------------------------- item 5: no redirect followed, checked per request
def test_the_checks_follow_no_redirect(key_file, hop, capsys):
    code, source, target = hop
    assert checks.main(["models", "--url", source.url, "--timeout", "5", "--api-key-file", key_file]) == 1
    assert checks.main(["tool-calling", "--url", source.url, "--model", "m", "--timeout", "5",
                        "--api-key-file", key_file]) == 1
    out = capsys.readouterr()
    assert target.seen == [] and KEY not in out.out + out.err
    assert f"HTTP {code} redirect to {target.url}/" in out.err and "not followed" in out.err


def test_the_drain_follows_no_redirect(key_file, hop, capsys):
    code, source, target = hop
    assert drain.main(["1", source.url + "/metrics", key_file]) == 3
    assert target.seen == [] and source.seen[0][2] == f"Bearer {KEY}"
    assert f"HTTP {code} redirect to {target.url}/metrics" in capsys.readouterr().out


def test_the_gateways_worker_calls_follow_no_redirect(key_file, hop, monkeypatch, tmp_path):
    code, source, target = hop
    (tmp_path / "compose.yaml").write_text("x")
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(["http://10.0.0.11:30000"])))
    out = io.StringIO()
    with redirect_stdout(out):
        assert gateway_workers.main([str(tmp_path), source.url, key_file]) == 0
    assert target.seen == [] and f"HTTP {code} redirect to {target.url}/workers" in out.getvalue()


def test_the_status_probe_follows_no_redirect(key_file, hop, monkeypatch, tmp_path):
    code, source, target = hop
    home = tmp_path / "home"
    (home / "router" / ".secrets").mkdir(parents=True)   # the control-plane key: /workers takes no other
    os.replace(key_file, home / "router" / ".secrets" / "control-plane.yaml")
    (home / "router" / "m").mkdir(parents=True)
    (home / "router" / "m" / "compose.yaml").write_text(f"--port={source.url.rsplit(':', 1)[1]}\n")
    report.use_key(str(home))
    [found] = report.gateways(str(home))
    assert target.seen == [] and source.seen[0][2] == f"Bearer {KEY}"
    assert f"HTTP {code} redirect to {target.url}/workers" in found["error"]


def test_the_key_goes_only_to_a_port_held_when_each_request_is_sent(key_file, monkeypatch, tmp_path):
    """The port check is made for every request that would carry the key, not once before a series."""
    gateway = Server(body={"workers": [{"id": "w1", "url": "http://10.0.0.11:30000", "is_healthy": True}]})
    answers = iter([True, True])
    asked = []
    monkeypatch.setattr(stack, "holds", lambda url, *a: asked.append(url) or next(answers, False))
    monkeypatch.setattr(gateway_workers, "SETTLE_SECONDS", 1)
    (tmp_path / "compose.yaml").write_text("x")
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"remove": "http://10.0.0.11:30000"})))
    out = io.StringIO()
    try:
        with redirect_stdout(out):
            gateway_workers.main([str(tmp_path), gateway.url, key_file])
    finally:
        gateway.close()
    keys = [auth for _method, _path, auth in gateway.seen]
    assert len(keys) >= 3 and keys[0] == f"Bearer {KEY}" and keys[1:] == [None] * (len(keys) - 1), gateway.seen
    assert len(asked) >= len(keys)


def test_a_request_to_a_port_no_container_holds_carries_no_key(key_file, monkeypatch):
    server = Server(body={"data": []})
    held = [True]
    monkeypatch.setattr(stack, "holds", lambda url, *a: held[0])
    try:
        apikey.use_api_key_file(key_file, lambda url: stack.holds(url))
        for flip in (True, False, True):
            held[0] = flip
            with bounded.open_url(urllib.request.Request(server.url + "/v1/models"), 5) as reply:
                reply.read()
    finally:
        server.close()
    assert [auth for *_, auth in server.seen] == [f"Bearer {KEY}", None, f"Bearer {KEY}"]


# ---------------------------------------------------------------- item 8: redaction before the cut
def straddling(cut):
    """A text whose cut at ``cut`` characters falls inside the key (placed at cut - 10)."""
    return "." * (cut - 10) + KEY + " and more"


def test_an_error_body_cut_inside_the_key_shows_none_of_it(key_file):
    apikey.use_api_key_file(key_file)
    error = urllib.error.HTTPError("http://x", 500, "x", {}, io.BytesIO(straddling(200).encode()))
    found = bounded.error_body(error)
    assert KEY[:4] not in found and len(found) <= 200


def test_the_checks_problems_cut_inside_the_key_show_none_of_it(key_file):
    apikey.use_api_key_file(key_file)
    def arguments(at):
        return json.dumps({"city": "." * at + KEY, "unit": "celsius"})

    shift = json.dumps(["get_weather", arguments(0)]).index(KEY)   # where the key lands in the shown call
    message = {"content": "<tool_call>" + straddling(120)[len("<tool_call>"):], "tool_calls": [
        {"function": {"name": "get_weather", "arguments": arguments(120 - 10 - shift)}}] * 2}
    assert json.dumps(["get_weather", arguments(120 - 10 - shift)]).index(KEY) == 120 - 10
    problems = checks.tool_call_problems({"choices": [{"message": message, "finish_reason": "tool_calls"}]},
                                         [checks.WEATHER_TOOL])
    assert any("raw tool-call markup" in p for p in problems) and any("repeats the same call" in p for p in problems)
    assert not any(KEY[:4] in p for p in problems), problems


# ---------------------------------------------------------------- item 9: the files root reads
def test_a_fifo_at_the_key_files_path_is_refused_at_once(tmp_path):
    fifo = tmp_path / "server.yaml"
    os.mkfifo(fifo)
    found = within(5, apikey.read_key, str(fifo))
    assert isinstance(found, OSError) and "not a regular file" in str(found)


def test_a_symlink_at_the_key_files_path_is_not_followed(tmp_path):
    real = tmp_path / "elsewhere.yaml"
    real.write_text(f'api-key: "{KEY}"\n')
    (tmp_path / "server.yaml").symlink_to(real)
    with pytest.raises(OSError, match="symlink"):
        apikey.read_key(str(tmp_path / "server.yaml"))


def test_a_huge_key_file_is_refused_by_its_bound(tmp_path):
    path = tmp_path / "server.yaml"
    with open(path, "wb") as handle:
        handle.truncate(apikey.MAX_KEY_FILE_BYTES + 1)
    started = time.monotonic()
    with pytest.raises(OSError, match="larger than"):
        apikey.read_key(str(path))
    assert time.monotonic() - started < 5


def test_a_fifo_at_compose_yamls_path_leaves_the_stamp_prompt(tmp_path):
    docker = tmp_path / "docker"
    docker.mkdir()
    os.mkfifo(docker / "compose.yaml")
    assert isinstance(within(5, stamp.digest, str(tmp_path), None), str)
    assert within(5, safefs.sha256_regular, str(docker / "compose.yaml")) is None


def test_a_huge_file_is_not_hashed_past_its_bound(tmp_path):
    docker = tmp_path / "docker"
    docker.mkdir()
    small = stamp.digest(str(tmp_path), None)
    with open(docker / "compose.yaml", "wb") as handle:
        handle.truncate(safefs.MAX_HASHED_BYTES + 1)
    assert safefs.sha256_regular(str(docker / "compose.yaml")) is None
    assert stamp.digest(str(tmp_path), None) == small   # a file past the bound counts as no file


def test_the_status_probe_sends_the_control_plane_key_not_the_client_key(key_file, monkeypatch, tmp_path):
    """SMG's worker API takes only the control-plane key: the report sends that one to /workers, never the clients'
    key (server.yaml), and redacts both."""
    gateway = Server(body={"workers": [{"id": "w1", "url": "http://10.0.0.11:30000", "is_healthy": True}]})
    monkeypatch.setattr(stack, "holds", lambda url, *a: True)
    home = tmp_path / "home"
    (home / "docker" / "secrets").mkdir(parents=True)
    os.replace(key_file, home / "docker" / "secrets" / "server.yaml")
    (home / "router" / "m").mkdir(parents=True)
    (home / "router" / "m" / "compose.yaml").write_text(f"--port={gateway.url.rsplit(':', 1)[1]}\n")
    monkeypatch.setattr(stack, "published", lambda port, *a: ["127.0.0.1"])
    try:
        report.use_key(str(home))
        report.gateways(str(home))
        assert [auth for _m, _p, auth in gateway.seen] == [None]   # no control-plane key yet: the client key stays
        (home / "router" / ".secrets").mkdir()
        (home / "router" / ".secrets" / "control-plane.yaml").write_text('api-key: "adm1n-0123456789abcdef"\n')
        report.use_key(str(home))
        [found] = report.gateways(str(home))
    finally:
        gateway.close()
    assert [auth for _m, _p, auth in gateway.seen][-1] == "Bearer adm1n-0123456789abcdef"
    assert found["workers"] == [{"url": "http://10.0.0.11:30000", "healthy": True}]
    assert apikey.redact(f"{KEY} adm1n-0123456789abcdef") == "<redacted> <redacted>"
