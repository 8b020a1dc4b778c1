"""Debian 12 (bookworm) hosts (issue 58), built by debootstrap as the trixie ones are
(tests/support/testbed/build-bookworm-image.sh): bookworm's own docker.io 20.10 with a compose v2 plugin converges
whatever the engine does at the moment of the run, and a host that gets no Docker is never judged for it.

One fleet, one run, each host in one engine state an operator's server is found in:
- STOPPED: docker.service and docker.socket stopped (the plugin in /usr/libexec/docker/cli-plugins);
- SOCKET: only docker.socket active (the snapshot reads the units before its query wakes the engine);
- ROOT_PLUGIN: the compose plugin in root's own ~/.docker/cli-plugins (where `docker compose` finds it);
- MONITOR: a bare bookworm host in the `monitor` group alone, which never gets Docker.
Each serving host converges and serves with the engine it had (no docker-ce laid over docker.io), a re-run changes
nothing anywhere; a bare serving host with the distribution's source is refused before any change."""

from __future__ import annotations

import pytest

from harness import run_deploy
from testbed import hosts as testbed_hosts

STOPPED, SOCKET, ROOT_PLUGIN, MONITOR, BARE = ("sg-bw-stopped", "sg-bw-socket", "sg-bw-rootplugin", "sg-bw-mon",
                                               "sg-bw-bare")
SERVING = (STOPPED, SOCKET, ROOT_PLUGIN)
SYSTEM_PLUGINS = "/usr/libexec/docker/cli-plugins"
ROOT_PLUGINS = "/root/.docker/cli-plugins"
# What each host is made into before the run: docker.io from the image's apt cache (no mirror asked), the compose v2
# plugin (trixie's binary, kept aside in the image) where an operator would put it, then the engine's state.
INSTALL = "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-download docker.io >/dev/null"
STATES = {
    STOPPED: (SYSTEM_PLUGINS, "systemctl stop docker.socket docker.service"),
    SOCKET: (SYSTEM_PLUGINS, "systemctl stop docker.service && systemctl start docker.socket"),
    ROOT_PLUGIN: (ROOT_PLUGINS, "true"),
}


def engine_in_state(host, plugins: str, state: str) -> None:
    host.exec(f"{INSTALL} && install -D -m 755 /usr/local/share/testbed/docker-compose {plugins}/docker-compose && "
              f"{state}", timeout=300)


def unit(host, name: str) -> str:
    return host.exec(f"systemctl is-active {name}", check=False).stdout.strip()


@pytest.fixture(scope="module")
def bookworm():
    return testbed_hosts.ensure_bookworm_image()


@pytest.fixture(scope="module")
def fleet(testbed, workdir, bookworm):
    hosts = {name: testbed.host(name, image=bookworm) for name in (*SERVING, MONITOR)}
    for name in SERVING:
        engine_in_state(hosts[name], *STATES[name])
    before = {name: (unit(hosts[name], "docker.service"), unit(hosts[name], "docker.socket")) for name in SERVING}
    monitor_data = {"sglang_prometheus_listen_address": f"{hosts[MONITOR].address}:9090"}
    inventory = testbed.inventory(workdir / "bookworm.py", {
        "production": [(hosts[name], {}) for name in SERVING],
        "monitor": [(hosts[MONITOR], monitor_data)],
    })
    first = run_deploy(inventory)
    second = run_deploy(inventory)
    return hosts, before, first, second


def test_each_engine_state_is_as_the_test_set_it_before_the_run(fleet):
    _, before, _, _ = fleet
    assert before == {STOPPED: ("inactive", "inactive"), SOCKET: ("inactive", "active"),
                      ROOT_PLUGIN: ("active", "active")}


def test_the_fleet_converges_with_the_engines_it_found(fleet):
    hosts, _, first, _ = fleet
    assert first.returncode == 0, first.why(4000)
    for name in SERVING:
        assert f"gate[{name}]: passed; this config is now the last known-good one" in first.output, first.why()


@pytest.mark.parametrize("name", SERVING)
def test_a_serving_host_keeps_its_docker_io_and_runs_it(fleet, name):
    hosts, _, first, _ = fleet
    install = "tasks/docker_engine.py | Ensure the Docker engine and compose v2 are installed (distribution packages)"
    assert name not in first.statuses.get(install, {})   # the engine found was used, not installed again
    host = hosts[name]
    assert unit(host, "docker.service") == "active"
    assert host.exec("dpkg-query -W docker-ce containerd.io", check=False).returncode != 0   # no docker-ce over it
    assert host.exec("cd /opt/sglang/docker && docker compose ps --format '{{.State}}'").stdout.split() == ["running"]


@pytest.mark.parametrize("name", [STOPPED, SOCKET])
def test_a_stopped_or_socket_activated_engine_is_started_and_enabled(fleet, name):
    hosts, _, first, _ = fleet
    started = first.statuses["tasks/docker_engine.py | Ensure the Docker engine is running and enabled"][name]
    # The socket's engine woke at the snapshot's own query, so only the stopped one needed starting.
    assert started == ("Success" if name == STOPPED else "No changes")
    assert hosts[name].exec("systemctl is-enabled docker.service").stdout.strip() == "enabled"


def test_the_monitor_only_host_gets_no_docker_and_runs_prometheus(fleet):
    hosts, _, _, _ = fleet
    assert hosts[MONITOR].exec("command -v docker || id sglang", check=False).returncode != 0
    assert unit(hosts[MONITOR], "prometheus") == "active"


def test_a_rerun_changes_nothing_on_any_host(fleet):
    hosts, _, _, second = fleet
    assert second.returncode == 0, second.why(3000)
    assert {name: second.changed(name) for name in hosts} == {name: [] for name in hosts}


def test_a_bare_serving_host_with_the_distributions_source_is_refused_before_any_change(testbed, workdir, bookworm):
    host = testbed.host(BARE, image=bookworm)
    refused = run_deploy(testbed.inventory(workdir / "bookworm-bare.py", {"production": [(host, {})]}))
    assert refused.returncode != 0
    assert (f"host {BARE}: os: Debian 12 ships no Docker Compose v2 in its own archive" in refused.output
            and "sglang_docker_source = 'docker'" in refused.output), refused.why()
    assert host.exec("id sglang || test -e /opt/sglang", check=False).returncode != 0
