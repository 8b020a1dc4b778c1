"""The API key stays secret on the host: redacted from every server log line and answer the gate prints or
stores (SGLang logs its server args, the key included, and /server_info carries it), and sent only to a port
that the project's own running container publishes (a free port is anyone's to listen on)."""

from __future__ import annotations

import ast
import io
import json
import re
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from sglang_infra.hostside import apikey, checks, dockerapi, gateway_launch, stack
from sglang_infra.hostside.gate import gate, report, stamp
from sglang_infra.hostside.roll import gateway_workers

KEY = "apikey-0123456789abcdef+/=0123"
SLUG = "m"
CONTROL = "control-plane-0123456789abcdef"


@pytest.fixture
def keyed(tmp_path, monkeypatch):
    """A home whose server config holds KEY, loaded as the gate and the report load it."""
    monkeypatch.setattr(apikey, "_HEADERS", {})
    monkeypatch.setattr(apikey, "_SECRETS", [])
    secrets = tmp_path / "docker" / "secrets"
    secrets.mkdir(parents=True)
    (secrets / "server.yaml").write_text(f'api-key: "{KEY}"\n')
    (tmp_path / "docker" / "compose.yaml").write_text("x")
    report.use_key(str(tmp_path))
    return tmp_path


def test_redact_removes_the_key_as_written_and_as_url_encoded(keyed):
    text = f"server_args=ServerArgs(api_key='{KEY}', port=30000) GET /x?key={KEY.replace('+', '%2B')}"
    found = apikey.redact(text.replace("%2B/=", "%2B%2F%3D"))
    assert KEY not in found and "%2B" not in found and found.count(apikey.REDACTED) == 2


def test_the_gate_prints_the_servers_log_and_stores_its_record_without_the_key(keyed, monkeypatch, capsys):
    run = gate.Gate(SimpleNamespace(home=str(keyed), url="http://127.0.0.1:30000", model="m", ready_timeout=1))
    monkeypatch.setattr(checks, "wait_ready", lambda *a, **k: {"ok": False, "problems": ["not ready after 1 s"]})
    log = f"sglang-1  | [2026] server_args=ServerArgs(model_path='/m', api_key='{KEY}', port=30000)\n"
    monkeypatch.setattr(run, "compose", lambda *words: subprocess.CompletedProcess(words, 0, log, ""))
    assert run.validate() == "the server did not become ready"
    run.record(f"HTTP 401 from the server: {{\"server_info\": {{\"api_key\": \"{KEY}\"}}}}", None)
    shown = capsys.readouterr().err
    assert "server_args=ServerArgs(model_path='/m', api_key='<redacted>', port=30000)" in shown and KEY not in shown
    stored = (keyed / "docker" / stamp.LAST).read_text()
    assert KEY not in stored and apikey.REDACTED in stored


def test_the_status_report_redacts_a_gate_record_written_before_the_gate_did(keyed):
    (keyed / "docker" / stamp.LAST).write_text(json.dumps({"passed": False, "reason": f"api_key='{KEY}'"}))
    assert report.last_gate(str(keyed))["reason"] == "api_key='<redacted>'"


class Gateway:
    """A stand-in for the gateway's worker API on loopback, recording each request's Authorization header."""

    def __init__(self):
        self.seen, self.urls = [], {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, body):
                raw = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):
                outer.seen.append(("GET", self.headers.get("Authorization")))
                self._answer({"workers": [{"url": u, "id": i, "is_healthy": True} for u, i in outer.urls.items()]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.seen.append(("POST", self.headers.get("Authorization")))
                outer.urls[body["url"]] = f"w{len(outer.urls)}"
                self._answer({})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener():
    found = Gateway()
    yield found
    found.close()


def engine(monkeypatch, running=None):
    """The Engine API's answer: the gateway's container running and publishing ``running`` (host address, port),
    or no container at all."""
    project, service = stack.gateway(SLUG)

    def compose_containers(name, socket_path=None):
        if running is None or name != project:
            return {}
        return {service: {"id": "c1", "state": "running", "labels": {}, "ports": [
            {"IP": running[0], "PrivatePort": running[1], "PublicPort": running[1], "Type": "tcp"}]}}

    monkeypatch.setattr(dockerapi, "compose_containers", compose_containers)


def gateway_dir(home, port):
    directory = home / "router" / SLUG
    directory.mkdir(parents=True)
    (directory / "compose.yaml").write_text(f"      - --port={port}\n")
    return directory


def test_the_status_report_sends_the_key_only_to_the_gateways_own_published_port(keyed, listener, monkeypatch):
    """The key the report sends to a gateway's /workers is the control-plane key (SMG's worker API takes no
    other), from router/.secrets/."""
    gateway_dir(keyed, listener.port)
    (keyed / "router" / ".secrets").mkdir()
    (keyed / "router" / ".secrets" / "control-plane.yaml").write_text(f'api-key: "{CONTROL}"\n')
    report.use_key(str(keyed))
    engine(monkeypatch, None)                       # no gateway container: someone else may hold the port
    [found] = report.gateways(str(keyed))
    assert listener.seen == [] and found["workers"] is None and "nothing was sent" in found["error"]
    engine(monkeypatch, ("127.0.0.2", listener.port))  # published elsewhere than where the listener is
    assert report.gateways(str(keyed))[0]["workers"] is None and listener.seen == []
    engine(monkeypatch, ("0.0.0.0", listener.port))
    assert report.gateways(str(keyed))[0]["workers"] == []
    assert listener.seen == [("GET", f"Bearer {CONTROL}")]


def test_the_worker_set_is_sent_with_the_key_only_to_the_gateways_own_published_port(keyed, listener,
                                                                                      monkeypatch, capsys):
    directory = gateway_dir(keyed, listener.port)
    key_file = str(keyed / "docker" / "secrets" / "server.yaml")
    base = f"http://127.0.0.1:{listener.port}"
    engine(monkeypatch, None)
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(["http://10.0.0.11:30000"])))
    assert gateway_workers.main([str(directory), base, key_file]) == 0
    assert listener.seen == [] and "the key is not sent there" in capsys.readouterr().out
    assert json.loads((directory / "workers.json").read_text()) == ["http://10.0.0.11:30000"]
    engine(monkeypatch, ("0.0.0.0", listener.port))
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(["http://10.0.0.11:30000"])))
    assert gateway_workers.main([str(directory), base, key_file]) == 0
    assert ("POST", f"Bearer {KEY}") in listener.seen and set(listener.urls) == {"http://10.0.0.11:30000"}


def test_the_gate_waits_for_no_port_its_container_does_not_publish(keyed, monkeypatch):
    run = gate.Gate(SimpleNamespace(home=str(keyed), url="http://127.0.0.1:30000", model="m", ready_timeout=1))
    monkeypatch.setattr(stack, "container", lambda *a: {"state": "running", "status": "Up"})
    monkeypatch.setattr(dockerapi, "compose_containers", lambda name, socket_path=None: {
        stack.SERVICE: {"state": "running", "ports": [{"IP": "10.0.0.5", "PublicPort": 30000, "Type": "tcp"}]}})
    assert run.gone() == "the container does not publish http://127.0.0.1:30000; the API key is sent to no other port"
    monkeypatch.setattr(dockerapi, "compose_containers", lambda name, socket_path=None: {
        stack.SERVICE: {"state": "running", "ports": [{"IP": "0.0.0.0", "PublicPort": 30000, "Type": "tcp"}]}})
    assert run.gone() is None



def test_the_key_file_is_written_and_read_in_one_place(tmp_path):
    """plan/resolve.py writes the server's config with apikey.file_text(), and every reader (the checks, the gate, the
    gateway's launcher) goes through apikey.read_key(): no other module of sglang_infra/ spells out the field."""
    from sglang_infra.plan import resolve as plan

    config = tmp_path / "server.yaml"
    config.write_bytes(plan.server_config(KEY.encode()))
    assert apikey.read_key(str(config)) == KEY == gateway_launch.api_key(str(config))
    spelled = []
    for path in sorted(Path(apikey.__file__).parents[1].rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            value = getattr(node, "value", None) if isinstance(node, ast.Constant) else None
            text = value.decode(errors="replace") if isinstance(value, bytes) else value
            if isinstance(text, str) and re.fullmatch(r"\s*api-key\s*:?\s*", text) and path.name != "apikey.py":
                spelled.append(f"{path.name}:{node.lineno}")
    assert spelled == []
