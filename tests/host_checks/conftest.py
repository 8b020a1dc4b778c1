"""Read-only checks of converged hosts, for operators and for CI alike.

    scripts/check.sh [INVENTORY]       # default: inventory.py

Every host of the inventory is reached over SSH with paramiko, with the same
ssh_* data pyinfra uses. Host keys are checked against the known_hosts file
(the host's ssh_known_hosts_file, else ~/.ssh/known_hosts): an unknown or
changed key fails the check run instead of being trusted.
"""

from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path

import paramiko
import pytest
import testinfra

PROJECT_DIR = Path(__file__).resolve().parents[2]


def _load_inventory(path: str):
    from sglang_infra import fleet

    return fleet.load(path)


def _hosts(config):
    path = config.getoption("--hosts-inventory")
    inventory = _load_inventory(path)
    return [(h.name, h.data.dict()) for h in inventory]


def pytest_generate_tests(metafunc):
    if "target" in metafunc.fixturenames:
        hosts = _hosts(metafunc.config)
        metafunc.parametrize("target", hosts, ids=[name for name, _ in hosts], indirect=True, scope="module")


def _client(name: str, data: dict) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    known_hosts = data.get("ssh_known_hosts_file") or os.path.expanduser("~/.ssh/known_hosts")
    if Path(known_hosts).exists():
        client.load_host_keys(known_hosts)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        data.get("ssh_hostname") or name,
        port=int(data.get("ssh_port") or 22),
        username=data.get("ssh_user") or None,
        key_filename=data.get("ssh_key") or None,
        timeout=15,
        allow_agent=True,
        look_for_keys=data.get("ssh_key") is None,
    )
    return client


class Target:
    def __init__(self, name: str, data: dict):
        self.name = name
        self.data = data
        address = data.get("ssh_hostname") or name
        user = data.get("ssh_user")
        self.host = testinfra.get_host(f"paramiko://{user + '@' if user else ''}{address}")
        # Replace testinfra's lenient client (it warns on unknown keys) with a strict one.
        self.host.backend.__dict__["client"] = _client(name, data)
        self.sudo = bool(data.get("_sudo")) and user != "root"

    @cached_property
    def snapshot(self) -> dict:
        """One read of the host, the same the deploy makes (sglang_infra/snapshot.py)."""
        from sglang_infra.plan import snapshot_spec
        from sglang_infra.snapshot import Snapshot

        command = Snapshot().command(spec=json.dumps(snapshot_spec(self.data), sort_keys=True))
        return Snapshot().process(self.run(command).stdout.splitlines())

    @cached_property
    def plan(self):
        """The host's plan, resolved from its data and its snapshot as the deploy resolves it."""
        from sglang_infra.plan import resolve

        return resolve(self.name, self.data, self.snapshot)

    def run(self, command: str):
        if self.sudo:
            with self.host.sudo():
                return self.host.run(command)
        return self.host.run(command)


@pytest.fixture(scope="module")
def target(request):
    name, data = request.param
    t = Target(name, data)
    yield t
    t.host.backend.client.close()
