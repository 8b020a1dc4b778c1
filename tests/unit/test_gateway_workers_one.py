"""hostside/gateway_workers.py's one-worker steps of a rolling restart, against a small fake of sglang-router
0.3.2's worker API on loopback: out (and no longer listed), back in (and healthy), workers.json following."""

from __future__ import annotations

import io
import json
import os
import threading
from contextlib import redirect_stdout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sglang_infra.hostside import gateway_workers

A, B = "http://10.0.0.11:30000", "http://10.0.0.12:30000"


@pytest.fixture
def gateway():
    listed = {"w1": {"url": A, "is_healthy": True}, "w2": {"url": B, "is_healthy": True}}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self.reply(200, {"workers": [{"id": k, **v} for k, v in listed.items()]})

        def do_POST(self):
            url = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["url"]
            listed[f"w{len(listed) + 10}"] = {"url": url, "is_healthy": True}
            self.reply(202, {})

        def do_DELETE(self):
            listed.pop(self.path.rsplit("/", 1)[1], None)
            self.reply(202, {})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", listed
    server.shutdown()
    server.server_close()


def step(tmp_path, base, change):
    out = io.StringIO()
    with redirect_stdout(out):
        code = gateway_workers.one_worker(str(tmp_path), base, change)
    return code, out.getvalue()


def test_a_worker_leaves_and_comes_back(tmp_path, gateway):
    base, listed = gateway
    (tmp_path / "compose.yaml").write_text("x")
    (tmp_path / "workers.json").write_text(json.dumps([A, B]))
    code, said = step(tmp_path, base, {"remove": A})
    assert code == 0 and "is out" in said
    assert [w["url"] for w in listed.values()] == [B]
    assert json.loads((tmp_path / "workers.json").read_text()) == [B]
    code, said = step(tmp_path, base, {"add": A, "healthy_within": 5})
    assert code == 0 and "back and healthy" in said
    assert sorted(w["url"] for w in listed.values()) == [A, B]
    assert json.loads((tmp_path / "workers.json").read_text()) == [A, B]


def test_a_gateway_not_set_up_yet_is_left_alone(tmp_path):
    code, said = step(tmp_path, "http://127.0.0.1:9", {"remove": A})
    assert code == 0 and "does not answer" in said
    assert not os.path.exists(tmp_path / "workers.json")


def test_a_key_file_not_written_yet_is_no_error(tmp_path, monkeypatch):
    """A worker rolling in the first run of a keyed gateway host: the gateway's key file is not there yet (nor its
    container, whose launcher would read the key from that file): the step goes on without a key."""
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"remove": A})))
    out = io.StringIO()
    with redirect_stdout(out):
        code = gateway_workers.main([str(tmp_path / "m"), "http://127.0.0.1:9", str(tmp_path / "missing.yaml")])
    assert code == 0 and "does not answer" in out.getvalue()


def test_a_recreated_gateway_is_ready_once_it_lists_what_it_served_healthy(gateway, capsys):
    base, listed = gateway
    assert gateway_workers.ready(base, {"ready_within": 5, "healthy": [A, B]}) == 0
    listed["w2"]["is_healthy"] = False
    assert gateway_workers.ready(base, {"ready_within": 1, "healthy": [A, B]}) == 1
    assert f"is not ready after 1 s: it does not list {B} healthy" in capsys.readouterr().err


def test_a_gateway_that_does_not_answer_is_not_ready(capsys):
    assert gateway_workers.ready("http://127.0.0.1:9", {"ready_within": 0.5, "healthy": []}) == 1
    assert "is not ready after 0.5 s: it does not answer" in capsys.readouterr().err
