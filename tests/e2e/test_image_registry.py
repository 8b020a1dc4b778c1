"""The testbed's REAL registry (Debian's docker-registry, tests/support/testbed/registry.py): what a push stores is what
the registry serves, what a test host pulls by digest and what this machine's Engine API resolves; a tag moved
upstream shows as a new digest; a run's cleanup takes its trust entry and no other run's."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from testbed import hosts
from testbed import registry as testbed_registry

REPOSITORY = "sglang/standin"


@pytest.fixture(scope="module")
def registry():
    return testbed_registry.ensure_registry()


@pytest.fixture(scope="module")
def pushed(registry, measure):
    """The stand-in serving image, pushed as REPOSITORY:v1; its digest."""
    started = time.monotonic()
    digest = registry.push(hosts.ensure_standin_image()[0], REPOSITORY, "v1")
    measure(f"registry: pushing the stand-in image (first push): {time.monotonic() - started:.1f} s")
    return digest


def test_push_returns_the_digest_the_registry_serves(registry, pushed):
    assert pushed.startswith("sha256:") and len(pushed) == 71
    assert registry.digest(REPOSITORY, "v1") == pushed


def test_this_machines_engine_resolves_the_tag_to_the_pushed_digest(registry, pushed):
    """The Engine API call a lock tool makes to resolve a tag (GET /distribution/NAME/json on the socket)."""
    answer = subprocess.run(
        ["curl", "-sf", "--max-time", "30", "--unix-socket", "/var/run/docker.sock",
         f"http://localhost/distribution/{registry.address}/{REPOSITORY}:v1/json"],
        capture_output=True, text=True, timeout=60)
    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout)["Descriptor"]["digest"] == pushed


def test_a_host_pulls_the_image_by_digest(testbed, registry, pushed, measure):
    host = testbed.host("sg-registry-1")
    # The trust entry goes in before Docker exists on the host, as a deploy would put it.
    host.exec(registry.trust_command())
    started = time.monotonic()
    host.exec("DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null", timeout=600)
    hosts._wait_for(lambda: host.exec("docker info", check=False).returncode == 0, "Docker in the host", 60)
    measure(f"registry: installing docker.io on the host: {time.monotonic() - started:.1f} s")
    ref = f"{registry.address}/{REPOSITORY}@{pushed}"
    started = time.monotonic()
    host.exec(f"docker pull -q {ref}", timeout=600)
    measure(f"registry: a host pulling the stand-in image by digest: {time.monotonic() - started:.1f} s")
    repo_digests = host.exec(f"docker image inspect -f '{{{{json .RepoDigests}}}}' {ref}").stdout
    assert json.loads(repo_digests) == [ref]


def test_a_tag_moved_upstream_shows_as_a_new_digest(registry):
    first = registry.push(testbed_registry.tiny_image(f"{registry.address}/sglang/moving:first", "one"),
                          "sglang/moving", "latest")
    moved = registry.push(testbed_registry.tiny_image(f"{registry.address}/sglang/moving:second", "two"),
                          "sglang/moving", "latest")
    assert moved != first
    assert registry.digest("sglang/moving", "latest") == moved


def test_a_runs_cleanup_removes_its_trust_and_image_references_only(registry):
    other_run = f"{hosts.run_prefix()}other-"
    other = testbed_registry.ensure_registry(f"{other_run}{testbed_registry.NAME}")
    try:
        local = other.push(testbed_registry.tiny_image(f"{other.address}/sglang/other:local", "other"),
                           "sglang/other", "v1")
        assert local.startswith("sha256:")
        hosts.remove_run_objects(other_run)
        assert not (testbed_registry.CERTS_D / other.address).exists()
        listed = subprocess.run(["docker", "image", "ls", "--format", "{{.Repository}}"], capture_output=True,
                                text=True, check=True).stdout.split()
        assert not [name for name in listed if name.startswith(f"{other.address}/")]
        assert (testbed_registry.CERTS_D / registry.address / "ca.crt").is_file()
        assert registry.ready()
    finally:
        hosts.remove_run_objects(other_run)
