"""Debian 12 (bookworm) hosts (issue 58), built by debootstrap as the trixie ones are
(tests/support/testbed/build-bookworm-image.sh): bookworm's own docker.io 20.10 with a compose v2 plugin converges
whatever the engine does at the moment of the run, and a host that gets no Docker is never judged for it.

One fleet, one run, each host in one engine state an operator's server is found in:
- STOPPED: docker.service and docker.socket stopped (the plugin in /usr/libexec/docker/cli-plugins);
- SOCKET: only docker.socket active (the snapshot reads the units before its query wakes the engine);
- ROOT_PLUGIN: the compose plugin in root's own ~/.docker/cli-plugins (where `docker compose` finds it);
- MONITOR: a bare bookworm host in the `monitor` group alone, which never gets Docker.
- BARE: a bare bookworm host, no Docker at all: refused before any change with the distribution's source (bookworm
  has no compose v2), refused before any change when Docker's repository does not answer (naming the URL and the
  key), then converged from Docker's repository as a local apt repository serves it (testbed/vendorrepo.py: Debian's
  reprepro, signed by a key the test makes, STAND-IN packages named as Docker's).
Each serving host converges and serves with the engine it had (no docker-ce laid over docker.io), a re-run changes
nothing anywhere."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness import run_deploy
from testbed import hosts as testbed_hosts
from testbed import vendorrepo

STOPPED, SOCKET, ROOT_PLUGIN, MONITOR, BARE, REPO = ("sg-bw-stopped", "sg-bw-socket", "sg-bw-rootplugin",
                                                     "sg-bw-mon", "sg-bw-bare", "sg-bw-repo")
SERVING = (STOPPED, SOCKET, ROOT_PLUGIN)
NOTHING_CHANGED = "id sglang || test -e /opt/sglang || command -v docker"
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
    hosts = {name: testbed.host(name, image=bookworm) for name in (*SERVING, MONITOR, BARE, REPO)}
    repository = vendorrepo.serve(hosts[REPO])
    hosts[BARE].exec(vendorrepo.trust_command())
    for name in SERVING:
        engine_in_state(hosts[name], *STATES[name])
    before = {name: (unit(hosts[name], "docker.service"), unit(hosts[name], "docker.socket")) for name in SERVING}
    # The bare host alone first: the distribution's source, then Docker's repository at a port nothing answers.
    refused = {source: run_deploy(testbed.inventory(workdir / f"bookworm-bare-{source}.py", {
        "production": [(hosts[BARE], {"sglang_docker_source": source, "sglang_docker_apt_url": url,
                                      "sglang_docker_apt_key_fingerprint": repository.fingerprint})]}))
        for source, url in (("distribution", repository.docker_url), ("docker", silent_url(hosts[REPO])))}
    untouched = hosts[BARE].exec(NOTHING_CHANGED, check=False).returncode != 0
    def own(name, **data):   # every exporter listens on its host's test-network address, which the monitor scrapes
        return hosts[name], {"sglang_node_exporter_bind_address": hosts[name].address, **data}

    inventory = testbed.inventory(workdir / "bookworm.py", {
        "production": [*(own(name) for name in SERVING),
                       own(BARE, sglang_docker_source="docker", sglang_docker_apt_url=repository.docker_url,
                           sglang_docker_apt_key_fingerprint=repository.fingerprint)],
        "monitor": [own(MONITOR, sglang_prometheus_listen_address=f"{hosts[MONITOR].address}:9090")],
    })
    first = run_deploy(inventory)
    second = run_deploy(inventory)
    del hosts[REPO]
    return SimpleNamespace(hosts=hosts, before=before, first=first, second=second, refused=refused,
                           untouched=untouched, repository=repository)


def silent_url(host) -> str:
    """Docker's repository at a port of ``host`` that nothing listens on: it does not answer."""
    return f"https://{host.address}:8443/linux"


def test_each_engine_state_is_as_the_test_set_it_before_the_run(fleet):
    before = fleet.before
    assert before == {STOPPED: ("inactive", "inactive"), SOCKET: ("inactive", "active"),
                      ROOT_PLUGIN: ("active", "active")}


def test_the_fleet_converges_with_the_engines_it_found(fleet):
    first = fleet.first
    assert first.returncode == 0, first.why(4000)
    for name in SERVING:
        assert f"gate[{name}]: passed; this config is now the last known-good one" in first.output, first.why()


@pytest.mark.parametrize("name", SERVING)
def test_a_serving_host_keeps_its_docker_io_and_runs_it(fleet, name):
    hosts, first = fleet.hosts, fleet.first
    install = "tasks/docker_engine.py | Ensure the Docker engine and compose v2 are installed (distribution packages)"
    assert name not in first.statuses.get(install, {})   # the engine found was used, not installed again
    host = hosts[name]
    assert unit(host, "docker.service") == "active"
    assert host.exec("dpkg-query -W docker-ce containerd.io", check=False).returncode != 0   # no docker-ce over it
    assert host.exec("cd /opt/sglang/docker && docker compose ps --format '{{.State}}'").stdout.split() == ["running"]


@pytest.mark.parametrize("name", [STOPPED, SOCKET])
def test_a_stopped_or_socket_activated_engine_is_started_and_enabled(fleet, name):
    hosts, first = fleet.hosts, fleet.first
    started = first.statuses["tasks/docker_engine.py | Ensure the Docker engine is running and enabled"][name]
    # The socket's engine woke at the snapshot's own query, so only the stopped one needed starting.
    assert started == ("Success" if name == STOPPED else "No changes")
    assert hosts[name].exec("systemctl is-enabled docker.service").stdout.strip() == "enabled"


def test_the_monitor_only_host_gets_no_docker_and_runs_prometheus(fleet):
    hosts = fleet.hosts
    assert hosts[MONITOR].exec("command -v docker || id sglang", check=False).returncode != 0
    assert unit(hosts[MONITOR], "prometheus") == "active"


def test_a_rerun_changes_nothing_on_any_host(fleet):
    hosts, second = fleet.hosts, fleet.second
    assert second.returncode == 0, second.why(3000)
    assert {name: second.changed(name) for name in hosts} == {name: [] for name in hosts}


def test_a_bare_host_with_the_distributions_source_is_refused_before_any_change(fleet):
    refused, untouched = fleet.refused["distribution"], fleet.untouched
    assert refused.returncode != 0
    assert (f"host {BARE}: os: Debian 12 ships no Docker Compose v2 in its own archive" in refused.output
            and "sglang_docker_source = 'docker'" in refused.output), refused.why()
    assert untouched


def test_dockers_repository_that_does_not_answer_refuses_the_host_before_any_change_naming_url_and_key(fleet):
    refused, untouched = fleet.refused["docker"], fleet.untouched
    assert refused.returncode != 0
    url = f"https://{fleet.repository.docker_url.split('/')[2]}:8443/linux/debian/gpg"
    assert f"host {BARE}: sglang_docker_apt_url: Docker's apt repository at {url} does not answer" in \
        refused.output, refused.why()
    assert "set sglang_docker_apt_url to a mirror it reaches" in refused.output
    assert untouched


def test_a_bare_host_converges_from_dockers_repository_served_by_reprepro(fleet):
    hosts, first = fleet.hosts, fleet.first
    host = hosts[BARE]
    assert first.statuses["tasks/docker_engine.py | Ensure the Docker engine and compose v2 are installed (docker "
                          "packages)"][BARE] == "Success"
    installed = host.exec("dpkg-query -W -f '${Package} ${Version}\\n' docker-ce docker-compose-plugin").stdout
    assert installed.split("\n")[:2] == ["docker-ce 5:99.0.0~standin", "docker-compose-plugin 5:99.0.0~standin"]
    assert f"gate[{BARE}]: passed; this config is now the last known-good one" in first.output, first.why()
    # The key the deploy keeps is the repository's, the one the test made.
    shown = host.exec("gpg --show-keys --with-colons /etc/apt/keyrings/docker.asc").stdout
    assert f"fpr:::::::::{fleet.repository.fingerprint}:" in shown
