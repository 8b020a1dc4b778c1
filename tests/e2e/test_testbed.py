"""The test set-up (and the sandbox, which shares it) recovers from leftovers of its own: a stand-in Hub that
comes back after dockerd restarts, with its mounted spec removed by a cleaner in the meantime. The sandbox's
--down leaves nothing it started."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from harness import PROJECT_DIR
from testbed import hosts, sandbox
from testbed import hub as standin_hub


def mounted_spec_dir(name: str) -> str:
    mounts = json.loads(subprocess.run(["docker", "inspect", "-f", "{{json .Mounts}}", name], capture_output=True,
                                       text=True, check=True).stdout)
    return next(m["Source"] for m in mounts if m["Destination"] == "/opt/hfstandin-spec")


def test_the_hub_recovers_when_its_mounted_spec_was_cleaned_away():
    name = hosts.container_name("leftover-hfhub")
    try:
        first = standin_hub.ensure_hub(name)
        # What systemd-tmpfiles does to /var/tmp after 30 days, then the container comes back (as when dockerd
        # restarts it): Docker makes the missing mount source an empty directory.
        shutil.rmtree(mounted_spec_dir(name))
        subprocess.run(["docker", "restart", name], capture_output=True, timeout=120)
        again = standin_hub.ensure_hub(name)
        assert again.name == first.name
        assert isinstance(again.requests(), list)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=120)


def _sandbox(action: str) -> subprocess.CompletedProcess:
    """scripts/sandbox.sh's own step (python -m testbed.sandbox ACTION), as an operator's shell runs it: no test
    run's prefix. (sandbox.sh first runs setup-machine.sh, which this machine's tests have already done.)"""
    env = {k: v for k, v in os.environ.items() if k not in (hosts.RUN_PREFIX_ENV, hosts.OWNER_ENV)}
    env["PYTHONPATH"] = str(PROJECT_DIR / "tests" / "support")
    return subprocess.run([sys.executable, "-m", "testbed.sandbox", action], cwd=PROJECT_DIR, env=env,
                          capture_output=True, text=True, timeout=900)


def _containers(*names: str) -> list[str]:
    listed = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True,
                            check=True, timeout=60).stdout.split()
    return [name for name in listed if name in names]


def _pypiservers_of_the_sandbox() -> list[int]:
    """pids of pypiserver processes serving the sandbox's wheel directory, from ps (not from the code under test)."""
    lines = subprocess.run(["ps", "-eww", "-o", "pid=,args="], capture_output=True, text=True, check=True).stdout
    wheels = str(sandbox.STATE_DIR / "wheels")
    return [int(line.split()[0]) for line in lines.splitlines()
            if "pypiserver" in line.split() and line.split()[-1] == wheels]


def _answers(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=3):
            return True
    except OSError:
        return False


@pytest.fixture
def sandbox_started():
    """The sandbox up (its host, the stand-in Hub, the stand-in wheel index); afterwards whatever a failed --down
    left is removed, so the test leaves nothing running either way. Skipped where a sandbox already runs: the
    test would take down an operator's sandbox."""
    hub_name = standin_hub.NAME   # the sandbox's Hub: unprefixed, as outside any test run
    gateway = hosts.network_gateway()
    if _containers(sandbox.NAME, hub_name) or _pypiservers_of_the_sandbox() or _answers(gateway, sandbox.WHEEL_PORT):
        pytest.skip("a sandbox (or its stand-ins) already runs on this machine; its --down would be tested on it")
    try:
        started = _sandbox("up")
        yield started, hub_name, gateway
    finally:
        subprocess.run(["docker", "rm", "-f", "-v", sandbox.NAME, hub_name], capture_output=True, timeout=120)
        subprocess.run(["docker", "volume", "rm", "-f", f"{sandbox.NAME}-docker"], capture_output=True, timeout=120)
        for pid in _pypiservers_of_the_sandbox():
            os.kill(pid, 9)
        (sandbox.STATE_DIR / "hosts.json").unlink(missing_ok=True)


def test_sandbox_down_leaves_no_container_process_or_network_it_started(sandbox_started):
    started, hub_name, gateway = sandbox_started
    assert started.returncode == 0, started.stderr[-3000:]
    network_before = hosts.network_ids()
    assert set(_containers(sandbox.NAME, hub_name)) == {sandbox.NAME, hub_name}
    assert _pypiservers_of_the_sandbox() and _answers(gateway, sandbox.WHEEL_PORT)

    down = _sandbox("--down")

    assert down.returncode == 0, down.stderr[-3000:]
    assert _containers(sandbox.NAME, hub_name) == []
    volumes = subprocess.run(["docker", "volume", "ls", "-q"], capture_output=True, text=True, check=True).stdout
    assert f"{sandbox.NAME}-docker" not in volumes.split()
    assert _pypiservers_of_the_sandbox() == []
    assert not _answers(gateway, sandbox.WHEEL_PORT)
    # The test network was there before the sandbox (the fixture asked for it, as a test run does): not the
    # sandbox's, so kept.
    assert hosts.network_ids() == network_before
