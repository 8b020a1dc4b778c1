"""Nothing changes on a host that cannot finish (issue 58): the sources a host's plan fetches from
(run/sources.py: `fetched`, only those this run fetches from) are asked from the host (hostside/read/reach.py, run
here as a host runs it), and one that does not answer refuses the host in the preflight, naming the URL, the key
and the fix."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from conftest import FakeHost, converged_snapshot, pinned_defaults

from sglang_infra.machine import ship
from sglang_infra.plan.resolve import resolve
from sglang_infra.run import sources

DEFAULTS = pinned_defaults()
HUB = "http://hub.mirror.test"


def reach(urls, timeout=1) -> tuple[dict, float]:
    """hostside/read/reach.py as the host runs it (its bundled source as python3 -c's argument)."""
    started = time.monotonic()
    # no cache there: the sources on stdin, as factcache.read sends them after the host's first answer
    out = subprocess.run(["sh", "-c", f"{ship.cached_command('read.reach', '/nonexistent-cache')} "
                          f"'{json.dumps({'urls': urls, 'timeout': timeout})}'"],
                         capture_output=True, text=True, timeout=60, input=ship.cached_sources("read.reach"))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), time.monotonic() - started


@pytest.fixture
def web():
    """A real HTTP server on loopback (python3 -m http.server), its base URL."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(10)


def test_a_source_that_answers_any_status_answers(web):
    found, _ = reach([f"{web}/", f"{web}/no/such/file.gpg"])
    assert found == {f"{web}/": None, f"{web}/no/such/file.gpg": None}


def test_a_refused_port_is_named_with_why():
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{closed.getsockname()[1]}/gpg"
    closed.close()
    found, _ = reach([url])
    assert found[url] and "refused" in found[url].lower()


def test_a_silent_server_is_bounded_by_the_timeout():
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)   # connections complete in the backlog; nothing ever answers
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/"
        found, took = reach([url, url + "other"], timeout=1)
    finally:
        silent.close()
    assert found[url] and "timed out" in found[url]
    assert took < 5, took   # both asked at once, each bounded


HTTPS_SERVER = """
import http.server, ssl, sys
server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[1], sys.argv[2])
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def test_a_site_cas_certificate_that_apt_and_curl_accept_answers_under_python_3_13s_strict_default(
        tmp_path, monkeypatch):
    """A testbed CA certificate has no Authority Key Identifier: Python 3.13's default strict X.509 checks refuse it
    (seen on a trixie host), apt and curl do not; the check asks as they do."""
    from sglang_infra.hostside.read import reach as host_reach
    from testbed import tls

    ca = tls.test_ca(tmp_path / "ca")
    cert, key = tls.issue(ca, "127.0.0.1", ip_addresses=["127.0.0.1"])
    (tmp_path / "cert.pem").write_bytes(cert)
    (tmp_path / "key.pem").write_bytes(key)
    server = subprocess.Popen([sys.executable, "-c", HTTPS_SERVER, str(tmp_path / "cert.pem"),
                               str(tmp_path / "key.pem")], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, cwd=tmp_path)
    default = ssl.create_default_context

    def as_python_3_13(*args, **kwargs):   # 3.13's default context, with the site's CA as the system's trust
        context = default(*args, **{**kwargs, "cafile": str(ca[0])})
        context.verify_flags |= ssl.VERIFY_X509_STRICT
        return context

    monkeypatch.setattr(host_reach.ssl, "create_default_context", as_python_3_13)
    try:
        port = server.stdout.readline().strip()
        strict = as_python_3_13()
        with pytest.raises(ssl.SSLError):   # the certificate is one Python 3.13 refuses by default
            strict.wrap_socket(socket.create_connection(("127.0.0.1", int(port)), timeout=5),
                               server_hostname="127.0.0.1")
        assert host_reach.ask(f"https://127.0.0.1:{port}/", 5) is None
    finally:
        server.terminate()
        server.wait(10)


def plan_of(data=None, groups=(), **sections):
    snapshot = converged_snapshot(**sections)
    return resolve("gpu-01", {**DEFAULTS, **(data or {})}, snapshot, groups), snapshot


def cached(plan) -> dict:
    """The snapshot's models section with every kept model complete."""
    return {"repos": {m.repo_id: {"revisions": {m.revision: {"complete": True}}} for m in plan.kept}}


def converged(plan, snapshot) -> dict:
    return {**snapshot, "models": cached(plan), "tools": {"venv_module": True, "hub_versions": [DEFAULTS[
        "sglang_huggingface_hub_version"]]}, "docker": {**snapshot["docker"], "images": {
            plan.image.build.tag: {"labels": {"sglang.toolchain.inputs": plan.image.build.inputs_hash}}}
            if plan.image.build else {}}}


def test_a_converged_host_fetches_from_nothing_so_it_is_asked_nothing():
    plan, snapshot = plan_of({"sglang_pip_index_url": "http://pypi.mirror.test/simple"})
    assert sources.fetched(plan, converged(plan, snapshot)) == []


def test_a_missing_model_asks_the_hub_or_its_mirror():
    plan, snapshot = plan_of({"sglang_hf_endpoint": HUB})
    [hub] = sources.fetched(plan, {**converged(plan, snapshot), "models": {"repos": {}}})
    assert (hub.url, hub.key) == (HUB, "sglang_hf_endpoint")


def test_a_host_whose_peers_hold_its_models_does_not_ask_the_hub():
    plan, snapshot = plan_of({"sglang_hf_endpoint": HUB})
    plan = replace(plan, peer_sources={m.key: object() for m in plan.kept})
    assert sources.fetched(plan, {**converged(plan, snapshot), "models": {"repos": {}}}) == []


@pytest.mark.parametrize("what", ["the pull's venv", "the toolchain image"])
def test_the_package_index_is_asked_when_something_is_installed_from_it(what):
    index = "http://pypi.mirror.test/simple"
    plan, snapshot = plan_of({"sglang_pip_index_url": index})
    state = converged(plan, snapshot)
    state = {**state, "tools": {"hub_versions": []}} if what == "the pull's venv" else \
        {**state, "docker": {**state["docker"], "images": {}}}
    assert [(s.url, s.key) for s in sources.fetched(plan, state)] == [(index, "sglang_pip_index_url")]


def test_dockers_repository_is_asked_only_when_the_engine_is_installed_from_it():
    no_engine = {"cli": None, "api": False, "active": "inactive", "loaded": False, "compose_plugin": None,
                 "images": {}, "runtimes": []}
    data = {"sglang_docker_source": "docker", "sglang_docker_apt_url": "https://docker.mirror.test/linux"}
    plan, snapshot = plan_of(data, docker=no_engine)
    assert [(s.url, s.key) for s in sources.fetched(plan, converged(plan, snapshot))] == [
        ("https://docker.mirror.test/linux/debian/gpg", "sglang_docker_apt_url")]
    working, snapshot = plan_of(data)
    assert sources.fetched(working, converged(working, snapshot)) == []


def test_the_toolkits_repository_is_asked_when_the_runtime_is_missing_and_not_when_opted_out():
    from conftest import nvidia_smi

    gpus = {**nvidia_smi("h200-1gpu"), "runtimes": ["runc"]}
    plan, snapshot = plan_of(gpus=gpus)
    assert [(s.url, s.key) for s in sources.fetched(plan, converged(plan, snapshot))] == [
        (f"{DEFAULTS['sglang_nvidia_toolkit_apt_url']}/gpgkey", "sglang_nvidia_toolkit_apt_url")]
    assert plan.engine.toolkit is not None and plan.engine.toolkit.line.endswith("/stable/deb/amd64 /")


@pytest.mark.parametrize("source", ["distribution", "docker"])
def test_a_bare_debian_12_monitor_only_host_plans_no_docker_and_fetches_nothing(source):
    no_engine = {"cli": None, "api": False, "active": "inactive", "loaded": False, "compose_plugin": None,
                 "images": {}, "runtimes": []}
    plan, snapshot = plan_of({"sglang_docker_source": source}, groups=("monitor",), docker=no_engine, gpus=None,
                             os={"id": "debian", "version": "12", "arch": "amd64"})
    assert (plan.engine.packages, plan.engine.repo) == ((), None)
    assert sources.fetched(plan, snapshot) == []


class Host(FakeHost):
    def __init__(self, name, answers):
        super().__init__({"SourcesAnswer": answers})
        self.name = name


def test_a_source_that_does_not_answer_refuses_the_host_naming_url_key_and_fix():
    plan, snapshot = plan_of({"sglang_hf_endpoint": HUB})
    state = {**converged(plan, snapshot), "models": {"repos": {}}}
    host = Host("gpu-01", {HUB: "URLError: [Errno -2] Name or service not known"})
    [refusal] = sources.refusals([host], {"gpu-01": plan}, {"gpu-01": state})
    assert refusal.startswith("host gpu-01: sglang_hf_endpoint: ") and HUB in refusal
    assert "Name or service not known" in refusal and "set sglang_hf_endpoint to a mirror" in refusal
    assert json.loads(host.fact_calls[0][1]["spec"]) == {"urls": [HUB], "timeout": sources.TIMEOUT}


def test_a_source_that_answers_refuses_nothing_and_a_host_that_fetches_nothing_is_not_asked():
    plan, snapshot = plan_of({"sglang_hf_endpoint": HUB})
    state = {**converged(plan, snapshot), "models": {"repos": {}}}
    assert sources.refusals([Host("gpu-01", {HUB: None})], {"gpu-01": plan}, {"gpu-01": state}) == []
    settled = Host("gpu-01", {})
    assert sources.refusals([settled], {"gpu-01": plan}, {"gpu-01": converged(plan, snapshot)}) == []
    assert settled.fact_calls == []
