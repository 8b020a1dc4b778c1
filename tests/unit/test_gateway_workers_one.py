"""hostside/roll/gateway_workers.py's one-worker steps of a rolling restart, against a small fake of sglang-router
0.3.2's worker API on loopback: out (and no longer listed), back in (and healthy), workers.json following."""

from __future__ import annotations

import io
import json
import os
import threading
from contextlib import redirect_stdout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sglang_infra.hostside.roll import gateway_workers

A, B = "http://10.0.0.11:30000", "http://10.0.0.12:30000"


class _JsonHandler(BaseHTTPRequestHandler):
    """A fake gateway's handler: quiet, answering JSON."""

    def log_message(self, *args):
        pass

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def gateway():
    listed = {"w1": {"url": A, "is_healthy": True}, "w2": {"url": B, "is_healthy": True}}

    class Handler(_JsonHandler):

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


def test_two_workers_leaving_at_once_both_leave_workers_json(tmp_path, gateway, monkeypatch):
    """A roll of half the pool (sglang_max_unavailable): two workers' steps run at once on the gateway host. Each
    reads workers.json, drops itself and writes it back; both reading before either wrote lost one's change (or
    failed, the second rename replacing the first's file). Here both reach the read together when they can: with the
    directory locked, the second waits for the first's write and reads it."""
    base, listed = gateway
    (tmp_path / "compose.yaml").write_text("x")
    (tmp_path / "workers.json").write_text(json.dumps([A, B]))
    both_read = threading.Barrier(2, timeout=1)
    read = gateway_workers.safefs.read_regular

    def read_together(*args, **kwargs):
        found = read(*args, **kwargs)
        try:
            both_read.wait()
        except threading.BrokenBarrierError:
            pass   # the other step waits for the lock this one holds
        return found

    monkeypatch.setattr(gateway_workers.safefs, "read_regular", read_together)
    codes = []
    steps = [threading.Thread(target=lambda url=url: codes.append(step(tmp_path, base, {"remove": url})[0]))
             for url in (A, B)]
    for thread in steps:
        thread.start()
    for thread in steps:
        thread.join(10)
    assert codes == [0, 0]
    assert json.loads((tmp_path / "workers.json").read_text()) == []


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


# Issue 40: a keyed fleet. A fake of SMG 1.13.0's worker API as far as keys go: GET/POST /workers want the
# control-plane key (401 without it); a worker added without the key its server wants (the body's api_key, SMG's
# worker spec) is listed healthy with model "unknown" (its /v1/models answered 401), with it under its served name.
SERVED, WORKER_KEY, ADMIN = "qwen3.6-35b-a3b", "worker-key-0123456789abcdef", "admin-key-0123456789abcdef"


@pytest.fixture
def keyed(tmp_path, monkeypatch):
    from sglang_infra.hostside import apikey

    monkeypatch.setattr(apikey, "_HEADERS", {})
    monkeypatch.setattr(apikey, "_SECRETS", [])
    monkeypatch.setattr(gateway_workers, "_SERVER_KEY", dict(gateway_workers._SERVER_KEY))
    monkeypatch.setattr(gateway_workers, "SETTLE_SECONDS", 2)
    listed, bodies, wants = {}, [], {"key": ADMIN}

    class Handler(_JsonHandler):

        def authorized(self):
            if self.headers.get("Authorization") == f"Bearer {wants['key']}":
                return True
            self.reply(401, {"error": "Unauthorized"})
            return False

        def do_GET(self):
            if self.authorized():
                self.reply(200, {"workers": [{"id": k, **v} for k, v in listed.items()]})

        def do_POST(self):
            if self.authorized():
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                bodies.append(body)
                model = SERVED if body.get("api_key") == WORKER_KEY else "unknown"
                listed[f"w{len(listed) + 10}"] = {"url": body["url"], "is_healthy": True, "model_id": model}
                self.reply(202, {})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    home = tmp_path / "home"
    (home / "router" / "m").mkdir(parents=True)
    (home / "router" / "m" / "compose.yaml").write_text("x")
    (home / "docker" / "secrets").mkdir(parents=True)
    control = home / "router" / ".secrets" / "control-plane.yaml"
    control.parent.mkdir()
    control.write_text(f'api-key: "{ADMIN}"\n')
    apikey.use_api_key_file(str(control), lambda url: True)
    yield f"http://127.0.0.1:{server.server_address[1]}", home, listed, bodies, wants
    server.shutdown()
    server.server_close()


def server_config(home, key, holds=lambda url: True):
    """The gateway host's API key file (docker/secrets/server.yaml), loaded as main() loads it."""
    path = home / "docker" / "secrets" / "server.yaml"
    path.write_text(f'api-key: "{key}"\n')
    gateway_workers.use_server_config(str(path), holds)


def test_a_worker_comes_back_with_the_gateways_key_and_is_listed_with_its_model(keyed):
    base, home, listed, bodies, _ = keyed
    server_config(home, WORKER_KEY)
    code, said = step(home / "router" / "m", base, {"add": A, "healthy_within": 2, "model": SERVED})
    assert (code, [w["model_id"] for w in listed.values()]) == (0, [SERVED]), said
    assert bodies == [{"url": A, "api_key": WORKER_KEY}]
    assert f"is back and healthy at {base} with model {SERVED}" in said and WORKER_KEY not in said


def test_the_workers_key_goes_to_no_port_the_gateways_container_does_not_publish(keyed):
    base, home, _, bodies, _ = keyed
    server_config(home, WORKER_KEY, holds=lambda url: False)
    step(home / "router" / "m", base, {"add": A, "healthy_within": 0})
    assert bodies == [{"url": A}]


def test_a_worker_listed_healthy_without_its_model_is_not_back(keyed, capsys):
    """The gateway could not read the worker's /v1/models (a key it does not take): listed healthy, model "unknown",
    routed nothing; the step fails saying so, instead of calling the worker back."""
    base, home, listed, _, _ = keyed
    server_config(home, "another-key-0123456789abcdef")
    code, _ = step(home / "router" / "m", base, {"add": A, "healthy_within": 0, "model": SERVED})
    assert code == 1 and [w["model_id"] for w in listed.values()] == ["unknown"]
    err = capsys.readouterr().err
    assert f"did not list {A} with model {SERVED} (it lists ['unknown']: it could not read the worker's /v1/models" \
        in err and "another-key" not in err


def test_a_worker_whose_key_was_rotated_comes_back_with_its_own_key(keyed, capsys):
    """Issue 53: a key rotated in this run. The roll restarts the worker first (it now wants the new key); the
    gateway host's server.yaml still holds the old one until tasks/gateways.py. Sent the old key, the gateway listed
    the worker with model "unknown" and the roll stopped at the first worker; the roll now sends the worker's own."""
    base, home, listed, bodies, _ = keyed
    server_config(home, "old-key-0123456789abcdef0123")
    code, said = step(home / "router" / "m", base, {"add": A, "healthy_within": 2, "model": SERVED,
                                                    "api_key": WORKER_KEY})
    assert (code, [w["model_id"] for w in listed.values()]) == (0, [SERVED]), said
    assert bodies == [{"url": A, "api_key": WORKER_KEY}]
    assert WORKER_KEY not in said + capsys.readouterr().err


def test_a_rotated_key_goes_to_no_port_the_gateways_container_does_not_publish(keyed):
    base, home, _, bodies, _ = keyed
    server_config(home, "old-key-0123456789abcdef0123", holds=lambda url: False)
    step(home / "router" / "m", base, {"add": A, "healthy_within": 0, "api_key": WORKER_KEY})
    assert bodies == [{"url": A}]


def test_a_gateway_from_before_smg_is_read_with_the_api_key_it_had(keyed, capsys):
    """The move of a keyed sglang-router fleet to SMG: the old gateway's worker API takes the API key (the gateway
    host's server.yaml), not the control-plane key; the roll reads what it lists with that key."""
    base, home, listed, _, wants = keyed
    listed["w1"] = {"url": A, "is_healthy": True}
    wants["key"] = WORKER_KEY   # sglang-router: its one key, the API key
    server_config(home, WORKER_KEY)
    assert gateway_workers.view(str(home / "router" / "m"), base) == 0
    seen = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert seen == {"answers": True, "listed": [A], "healthy": [A]}
