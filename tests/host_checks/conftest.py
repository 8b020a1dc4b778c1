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

from sglang_infra.fleet import gateways, monitoring
from sglang_infra.fleet.hosts import read_fleet
from sglang_infra.plan import roles as groups

PROJECT_DIR = Path(__file__).resolve().parents[2]


def _load_inventory(path: str):
    from sglang_infra.plan import inventoryfile

    return inventoryfile.load(path)


_inventories: dict[str, object] = {}


def _inventory(path: str):
    if path not in _inventories:
        _inventories[path] = _load_inventory(path)
    return _inventories[path]


def _hosts(config):
    path = config.getoption("--hosts-inventory")
    return [(h.name, h.data.dict(), path) for h in _inventory(path)]


# Every host is connected to once, before any check: a host that cannot be reached gets one line saying why,
# and the run fails; the checks run on the others.
_clients: dict[str, paramiko.SSHClient] = {}
_unreachable: dict[str, str] = {}


def pytest_generate_tests(metafunc):
    if "target" in metafunc.fixturenames:
        hosts = []
        for name, data, path in _hosts(metafunc.config):
            if name not in _clients and name not in _unreachable:
                try:
                    _clients[name] = _client(name, data)
                except Exception as error:  # each reason becomes one line below
                    _unreachable[name] = _reason(name, data, error)
            if name in _clients:
                hosts.append((name, data, path))
        metafunc.parametrize("target", hosts, ids=[name for name, _, _ in hosts], indirect=True, scope="module")


def pytest_terminal_summary(terminalreporter):
    for line in _unreachable.values():
        terminalreporter.write_line(line, red=True)


def pytest_sessionfinish(session, exitstatus):
    if _unreachable:
        session.exitstatus = 1


def _known_hosts(data: dict) -> str:
    return data.get("ssh_known_hosts_file") or os.path.expanduser("~/.ssh/known_hosts")


def _reason(name: str, data: dict, error: Exception) -> str:
    address = data.get("ssh_hostname") or name
    known = _known_hosts(data)
    if isinstance(error, paramiko.BadHostKeyException):
        return (f"host {name}: its SSH host key CHANGED (it is not the one in {known}). Fix: ask why; if the server "
                f"was rebuilt, ssh-keygen -f {known} -R {address}, then add the new key after checking it")
    if isinstance(error, paramiko.SSHException) and "not found in known_hosts" in str(error):
        return (f"host {name}: its SSH host key is unknown (not in {known}, and ssh_strict_host_key_checking is "
                f"'yes'). Fix: check the fingerprint, then ssh-keyscan {address} >> {known}")
    if isinstance(error, paramiko.AuthenticationException):
        return (f"host {name}: authentication refused for {data.get('ssh_user') or 'the default user'}. "
                "Fix: check ssh_user and ssh_key for this host")
    return f"host {name}: unreachable ({type(error).__name__}: {error}). Fix: check ssh_hostname and ssh_port"


def _client(name: str, data: dict) -> paramiko.SSHClient:
    """Connected as the deploy connects: the host's ssh_* data, with the deploy's defaults."""
    client = paramiko.SSHClient()
    strict = data.get("ssh_strict_host_key_checking", "accept-new")
    known_hosts = _known_hosts(data)
    if strict not in ("no", "off", False) and Path(known_hosts).exists():
        # Loaded as known keys only: with load_host_keys(), paramiko's AutoAddPolicy would write new keys back.
        client.get_host_keys().load(known_hosts)
    # yes: only known keys; accept-new: unknown keys too, but a changed one is refused (paramiko raises on a
    # known host whose key differs, whatever the policy); no: anything. Read-only: nothing is saved.
    client.set_missing_host_key_policy(paramiko.RejectPolicy() if strict in ("yes", "on", True)
                                       else paramiko.AutoAddPolicy())
    client.connect(
        data.get("ssh_hostname") or name,
        port=int(data.get("ssh_port") or 22),
        username=data.get("ssh_user") or None,
        key_filename=data.get("ssh_key") or None,
        password=data.get("ssh_password") or None,
        passphrase=data.get("ssh_key_password") or None,
        timeout=15,
        allow_agent=data.get("ssh_allow_agent", True),
        look_for_keys=data.get("ssh_look_for_keys", data.get("ssh_key") is None),
    )
    return client


class Target:
    def __init__(self, name: str, data: dict, inventory_path: str):
        self.name = name
        self.data = data
        self.inventory, self.inventory_path = _inventory(inventory_path), inventory_path
        self.groups = groups.groups_of(self.inventory.get_host(name), inventory_path)
        address = data.get("ssh_hostname") or name
        user = data.get("ssh_user")
        self.host = testinfra.get_host(f"paramiko://{user + '@' if user else ''}{address}")
        # Replace testinfra's lenient client (it warns on unknown keys) with a strict one.
        self.host.backend.__dict__["client"] = _clients[name]
        self.sudo = bool(data.get("_sudo")) and user != "root"

    @cached_property
    def snapshot(self) -> dict:
        """One read of the host, the same the deploy makes (sglang_infra/run/facts.py)."""
        from sglang_infra.plan.resolve import snapshot_spec
        from sglang_infra.run.facts import Snapshot

        spec = snapshot_spec(self.data, node_group=self.node_group, name=self.name)
        command = Snapshot().command(spec=json.dumps(spec, sort_keys=True))
        return Snapshot().process(self.run(command).stdout.splitlines())

    @cached_property
    def fleet(self):
        """The inventory's Fleet, as the deploy reads it once (sglang_infra/fleet/hosts.py)."""
        return read_fleet(self.inventory, self.inventory_path)

    @cached_property
    def node_group(self):
        """This host's multi-node group as the deploy works it out from the inventory (None: not a member)."""
        return self.fleet.node_groups.get(self.name)

    @cached_property
    def plan(self):
        """The host's plan, resolved from its data, its groups and its snapshot as the deploy resolves it; a
        gateway host's with its gateways, whose workers are the inventory's serving hosts."""
        from sglang_infra.plan.resolve import resolve

        plan = resolve(self.name, self.data, self.snapshot, self.groups, self.node_group)
        if plan.runs_gateways:
            plan = gateways.fleet({self.name: plan}, self.fleet, refuse=False)[self.name]
        if plan.monitors:
            plan = monitoring.with_monitors({self.name: plan}, self.fleet, refuse=False)[self.name]
        return plan

    def member(self, name: str) -> Target | None:
        """Another host of the inventory (a member of this host's multi-node group), read through its own
        connection; None when it could not be reached (its own line says why)."""
        if name == self.name:
            return self
        if name not in _clients:
            return None
        data = self.inventory.get_host(name).data.dict()
        transport = _clients[name].get_transport()
        if transport is None or not transport.is_active():   # its own checks are over and closed it
            _clients[name] = _client(name, data)
        return Target(name, data, self.inventory_path)

    def run(self, command: str):
        if self.sudo:
            with self.host.sudo():
                return self.host.run(command)
        return self.host.run(command)


@pytest.fixture(scope="module")
def target(request):
    name, data, path = request.param
    t = Target(name, data, path)
    yield t
    t.host.backend.client.close()
