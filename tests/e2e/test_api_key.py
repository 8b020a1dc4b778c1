"""With sglang_api_key_file, the API wants the key: the gate and the checks send it from the server's own
0600 file, a client without it gets 401, and the key is in no command line, compose.yaml, docker inspect or
pyinfra output; a server that never becomes ready has its log (which carries the key, as SGLang's does) shown
without it. Without the key again, the file goes and the API is open. Across the test network, a keyed worker's
routes that change a running server (POST /flush_cache) refuse a request from another host without the key; the SMG
gateway's worker API (/workers) answers 401 without its control-plane key or with the clients' key, from another host
and from the gateway host itself (loopback included), 2xx with it; a client with its key gets completions through the
gateway, none without."""

from __future__ import annotations

import json
import os
import shlex
import subprocess

import pytest

from harness import PROJECT_DIR, run_deploy, run_host_checks

NAME = "sg-apikey-1"
KEY = "apikey-0123456789abcdef0123456789"
CONFIG = "/opt/sglang/docker/secrets/server.yaml"
# /server_info as the server answers it, asked with the key read from its file (never on a command line).
SERVER_INFO = ("python3 -c \"import json, urllib.request as u; k = json.loads(open('" + CONFIG + "').read()"
               ".split(':', 1)[1]); print(u.urlopen(u.Request('http://127.0.0.1:30000/server_info', "
               "headers={'Authorization': 'Bearer ' + k}), timeout=10).read().decode())\"")
PROBE = "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:30000/v1/models').status)\""
# The gateway host's control-plane key (sglang_router_admin_key_file), 0600 in router/.secrets/.
ADMIN_CONFIG = "/opt/sglang/router/.secrets/control-plane.yaml"
# One request from a test host: python3 -c CALL METHOD URL key|admin|none [body|JSON]; with "key", the clients' key is
# read from that host's own server.yaml, with "admin" the control-plane key from its router/.secrets/ (never on a
# command line). Prints the status code, or with "body" the answer's text; a JSON argument is the request's body.
CALL = "\n".join([
    "import json, sys, urllib.request as u, urllib.error as e",
    "m, url, w = sys.argv[1:4]",
    "h = {'Content-Type': 'application/json'}",
    "f = {'key': '" + CONFIG + "', 'admin': '" + ADMIN_CONFIG + "'}.get(w)",
    "if f: h['Authorization'] = 'Bearer ' + json.loads(open(f).read().split(':', 1)[1])",
    "d = sys.argv[4].encode() if sys.argv[4:5] and sys.argv[4].startswith('{') else b'{}'",
    "try:",
    "    r = u.urlopen(u.Request(url, data=d if m == 'POST' else None, method=m, headers=h), timeout=20)",
    "    print(r.read().decode() if sys.argv[4:] == ['body'] else r.status)",
    "except e.HTTPError as x:",
    "    print(x.code)",
])
FLEET_WORKER, FLEET_GATEWAY = "sg-apikey-w", "sg-apikey-gw"


@pytest.fixture(scope="module")
def keyed(testbed, workdir):
    host = testbed.host(NAME, login="deploy")
    key_file = workdir / "api-key"
    key_file.write_text(KEY + "\n")
    inventory = testbed.inventory(workdir / "apikey.py",
                                  {"production": [(host, {"sglang_api_key_file": str(key_file)})]})
    first = run_deploy(inventory, "-vvv")
    return host, inventory, first


def test_the_gate_passes_with_the_key(keyed):
    _, _, first = keyed
    assert first.returncode == 0, first.output[-3000:]
    assert f"gate[{NAME}]: passed" in first.output


def test_a_client_without_the_key_is_refused(keyed):
    host, _, _ = keyed
    result = host.exec(PROBE, check=False)
    assert result.returncode != 0 and "401" in result.stderr


def test_the_key_is_only_in_its_file(keyed):
    host, _, first = keyed
    assert KEY not in first.output
    holders = host.exec(f"grep -rlsF {KEY} /opt /etc /var/lib/sglang-tools /tmp /root /home /var/log",
                        check=False).stdout.split()
    assert holders == [CONFIG]
    assert host.exec(f"stat -c '%U %a' {CONFIG} /opt/sglang/docker/secrets").stdout.split() == \
        ["sglang", "600", "sglang", "700"]
    assert KEY not in host.exec("docker inspect $(docker ps -aq)").stdout
    assert KEY not in host.exec("ps -eo args").stdout


def test_the_host_checks_send_the_key(keyed, workdir):
    _, inventory, _ = keyed
    report = run_host_checks(inventory, workdir)
    assert report.failed(NAME) == set(), report.output[-3000:]


def test_a_rerun_changes_nothing(keyed):
    _, inventory, _ = keyed
    again = run_deploy(inventory)
    assert again.returncode == 0 and again.changed(NAME) == [], again.output[-3000:]


def test_a_new_key_restarts_the_server_and_the_gate_follows(keyed, workdir):
    host, inventory, _ = keyed
    (workdir / "api-key").write_text("rotated-0123456789abcdef0123\n")
    result = run_deploy(inventory)
    assert result.returncode == 0, result.output[-3000:]
    assert f"gate[{NAME}]: passed" in result.output
    assert "rotated-0123456789abcdef0123" in host.exec(f"cat {CONFIG}").stdout


def test_a_server_that_never_becomes_ready_shows_its_log_without_the_key(keyed, testbed, workdir):
    """The stand-in logs its server args with the key at start, as SGLang does (sgl-project/sglang#37457), and
    its /server_info carries it: the gate's log tail, its record and the status report show neither."""
    host, _, _ = keyed
    key = (workdir / "api-key").read_text().strip()
    assert key in host.exec(SERVER_INFO).stdout   # the failure mode, shown
    never = testbed.inventory(workdir / "apikey_never.py", {"production": [(host, {
        "sglang_api_key_file": str(workdir / "api-key"), "sglang_ready_timeout": 15,
        "sglang_extra_env": {"STANDIN_FAILURE": "never_ready"}})]})
    result = run_deploy(never)
    assert result.returncode != 0
    assert f"gate[{NAME}]: the server did not become ready; last lines of its log:" in result.output, \
        result.output[-3000:]
    logged = [line for line in result.output.splitlines() if "server_args=ServerArgs(" in line]
    assert logged and all("api_key='<redacted>'" in line for line in logged), result.output[-3000:]
    assert key not in result.output
    assert key not in host.exec("cat /opt/sglang/docker/.last-gate").stdout
    status = subprocess.run(["bash", "scripts/status.sh", str(never), "--json"], cwd=PROJECT_DIR,
                            env=dict(os.environ, PYTHONPATH=str(PROJECT_DIR)), capture_output=True, text=True,
                            timeout=600)
    assert status.stdout and key not in status.stdout + status.stderr


def test_without_the_key_the_file_goes_and_the_api_is_open(keyed, testbed, workdir):
    host, _, _ = keyed
    inventory = testbed.inventory(workdir / "apikey_open.py", {"production": [(host, {})]})
    result = run_deploy(inventory)
    assert result.returncode == 0, result.output[-3000:]
    assert host.exec(f"test -e {CONFIG}", check=False).returncode != 0
    assert host.exec(PROBE).stdout.strip() == "200"


@pytest.fixture(scope="module")
def keyed_fleet(testbed, workdir):
    """A keyed worker and a keyed gateway in front of it, both published on every address (group_data's default),
    on the test network: each host is the other's client."""
    hosts = {name: testbed.host(name) for name in (FLEET_WORKER, FLEET_GATEWAY)}
    key_file = workdir / "api-key-fleet"
    key_file.write_text("fleetkey-0123456789abcdef0123\n")
    keyed = {"sglang_api_key_file": str(key_file), "sglang_trusted_network": False}
    inventory = testbed.inventory(workdir / "apikey_fleet.py", {
        "production": [(hosts[FLEET_WORKER], keyed)],
        "router": [(hosts[FLEET_GATEWAY], {**keyed, "sglang_require_gpu": False, "sglang_router_bind_address": None})]})
    result = run_deploy(inventory)
    (workdir / "apikey_fleet.log").write_text(result.output)   # the whole run, for a failure's first cause
    assert result.returncode == 0, result.output[-3000:]
    return hosts


def call(host, method: str, url: str, key: bool | str, *extra: str) -> str:
    who = key if isinstance(key, str) else "key" if key else "none"
    return host.exec(shlex.join(["python3", "-c", CALL, method, url, who, *extra])).stdout.strip()


def test_from_another_host_a_keyed_workers_mutating_route_wants_the_key(keyed_fleet):
    worker, client = keyed_fleet[FLEET_WORKER], keyed_fleet[FLEET_GATEWAY]
    url = f"http://{worker.address}:30000/flush_cache"
    assert call(client, "POST", url, key=False) == "401"
    assert call(client, "POST", url, key=True) == "200"
    # SGLang's key check lets /health through without the key (a prober has none): what docs/security.md says.
    assert call(client, "GET", f"http://{worker.address}:30000/health", key=False) == "200"


def test_the_gateways_worker_api_wants_the_control_plane_key_from_anywhere_loopback_included(keyed_fleet):
    """SMG 1.13.0's worker API takes only the control-plane key (role admin): without a key, or with the clients'
    key, 401 from another host and from the gateway host itself, on its address and on loopback."""
    gateway, client = keyed_fleet[FLEET_GATEWAY], keyed_fleet[FLEET_WORKER]
    url = f"http://{gateway.address}:30080/workers"
    for host, base in ((client, url), (gateway, url), (gateway, "http://127.0.0.1:30080/workers")):
        for who in ("none", "key"):
            assert (host.name, base, who, call(host, "POST", base, who)) == (host.name, base, who, "401")
            assert (host.name, base, who, call(host, "GET", base, who)) == (host.name, base, who, "401")
    assert call(gateway, "GET", url, "admin") == "200"
    listed = call(gateway, "GET", url, "admin", "body")
    assert f"http://{keyed_fleet[FLEET_WORKER].address}:30000" in listed   # the fleet's worker, none added
    assert "127.0.0.1" not in listed


def test_a_client_with_its_key_gets_completions_through_the_gateway_and_none_without(keyed_fleet):
    gateway, client = keyed_fleet[FLEET_GATEWAY], keyed_fleet[FLEET_WORKER]
    url = f"http://{gateway.address}:30080/v1/chat/completions"
    body = json.dumps({"model": "qwen3.6-35b-a3b", "messages": [{"role": "user", "content": "Say hello."}],
                       "max_tokens": 8})
    assert call(client, "POST", url, "none", body) == "401"
    assert call(client, "POST", url, "key", body) == "200"
    assert json.loads(call_body(client, url, body))["choices"][0]["message"]["content"]


def call_body(host, url: str, body: str) -> str:
    """A completion's answer text, asked with the clients' key read from the host's own server.yaml."""
    script = CALL.replace("sys.argv[4:] == ['body']", "True")
    return host.exec(shlex.join(["python3", "-c", script, "POST", url, "key", body])).stdout.strip()


def test_the_control_plane_key_adds_a_worker_through_the_api(keyed_fleet):
    """With the control-plane key, POST /workers is accepted (2xx); the next deploy sets the worker set back."""
    gateway = keyed_fleet[FLEET_GATEWAY]
    url = f"http://{gateway.address}:30080/workers"
    spare = json.dumps({"url": f"http://{gateway.address}:30999"})   # nothing listens there: never healthy
    assert call(gateway, "POST", url, "admin", spare) in ("200", "201", "202")


def test_a_rotated_key_rolls_the_worker_behind_its_gateway_and_serves(keyed_fleet, workdir):
    """Issue 53: a key rotation stopped the roll at the first worker. The worker, restarted first, wants the new
    key; its gateway took it back with the gateway host's old one (that file changes later, in tasks/gateways.py),
    so it listed the worker with model "unknown" and the roll failed. Now the roll sends the worker's own key: the
    run passes, and through the recreated gateway a client with the new key gets completions."""
    gateway, client = keyed_fleet[FLEET_GATEWAY], keyed_fleet[FLEET_WORKER]
    (workdir / "api-key-fleet").write_text("fleetkey-rotated-456789abcdef0123\n")
    result = run_deploy(workdir / "apikey_fleet.py")
    (workdir / "apikey_rotated.log").write_text(result.output)
    assert result.returncode == 0, result.why()
    assert "fleetkey-rotated-456789abcdef0123" not in result.output
    assert "fleetkey-rotated" in client.exec(f"cat {CONFIG}").stdout
    body = json.dumps({"model": "qwen3.6-35b-a3b", "messages": [{"role": "user", "content": "Say hello."}],
                       "max_tokens": 8})
    assert call(client, "POST", f"http://{gateway.address}:30080/v1/chat/completions", "key", body) == "200"
