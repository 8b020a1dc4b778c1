"""The fleet is read from the inventory once per run (sglang_infra/fleet/hosts.py): the preflight, run for every host
of a fake inventory as deploy.py runs it, reads each host's inventory groups once, and every pass after it (the
gateways, the peer sources, the monitors, the node groups) takes the one Fleet it built."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from unittest import mock

import pytest
from conftest import converged_snapshot, pinned_defaults

from sglang_infra.run import preflight

DEFAULTS = pinned_defaults()


class Data:
    def __init__(self, values):
        self.values = values

    def dict(self):
        return dict(self.values)


class Host:
    """A host of pyinfra's inventory as the preflight reads it; counts every read of its inventory groups."""

    reads: Counter = Counter()

    def __init__(self, name, groups, state, inventory, **data):
        self.name, self._groups, self.state, self.inventory = name, groups, state, inventory
        self.data = Data({**DEFAULTS, "sglang_trusted_network": True, "sglang_node_exporter_bind_address": "0.0.0.0",
                          **data})

    @property
    def groups(self):
        Host.reads[self.name] += 1
        return [SimpleNamespace(name=group) for group in self._groups]


class Inventory(list):
    def get_active_hosts(self):
        return list(self)

    def get_host_data(self, name):
        return {}

    def get_override_data(self):
        return {}


@pytest.fixture
def inventory(monkeypatch):
    state = SimpleNamespace()
    hosts = Inventory()
    hosts += [Host("gpu-01", ["production"], state, hosts, ssh_hostname="10.0.0.11", sglang_node_group="ds-a"),
              Host("gpu-02", ["production"], state, hosts, ssh_hostname="10.0.0.12", sglang_node_group="ds-a"),
              Host("gpu-03", ["production"], state, hosts, ssh_hostname="10.0.0.13"),
              Host("gw-1", ["router"], state, hosts, ssh_hostname="10.0.0.5", sglang_require_gpu=False,
                   sglang_router_bind_address="10.0.0.5", sglang_router_prometheus_bind_address="10.0.0.5"),
              Host("mon-1", ["monitor"], state, hosts, ssh_hostname="10.0.0.9", sglang_require_gpu=False)]
    snapshots = {each.name: converged_snapshot(None if each.name[:3] in ("gw-", "mon") else "rtx4090-2gpu-node",
                                               reach={"ok": True, "said": "connected"}) for each in hosts}
    monkeypatch.setattr(preflight.factcache, "get", lambda host, fact, spec: snapshots[host.name])
    monkeypatch.setattr(preflight.sources, "ask", lambda host, urls: dict.fromkeys(urls))   # every source answers
    monkeypatch.setattr(preflight, "inventory_file", lambda: None)
    Host.reads.clear()
    yield hosts
    for cache in (preflight._plans, preflight._reads, getattr(preflight, "_fleets", {})):
        cache.pop(id(state), None)


def run(inventory):
    """preflight() for every host, as deploy.py calls it; each host's plan."""
    for host in inventory:
        assert preflight.preflight(host, inventory)
    return {each.name: preflight.plan_of(each) for each in inventory}


def test_a_run_reads_each_hosts_inventory_groups_once(inventory):
    run(inventory)
    assert Host.reads == {each.name: 1 for each in inventory}   # not once per pass (gateways, peers, monitors)


def test_a_run_builds_one_fleet(inventory):
    with mock.patch.object(preflight, "read_fleet", wraps=preflight.read_fleet) as read_fleet:
        run(inventory)
    assert read_fleet.call_count == 1


def test_every_pass_works_from_the_fleet(inventory):
    """The gateways' workers, the monitor's targets and the group's ranks, as the inventory says."""
    plans = run(inventory)
    [gateway] = plans["gw-1"].front_door.gateways
    assert [worker.host for worker in gateway.workers] == ["gpu-01", "gpu-03"]   # the group once, through rank 0
    assert {target.address for target in plans["mon-1"].monitor.targets if target.job == "node"} == \
        {"10.0.0.11:9100", "10.0.0.12:9100", "10.0.0.13:9100", "10.0.0.5:9100", "10.0.0.9:9100"}
    assert (plans["gpu-02"].node_group.rank, plans["gpu-02"].node_group.head) == (1, "10.0.0.11")
    assert plans["gpu-01"].roll is not None and plans["gpu-01"].roll.fronts[0].gateway_host == "gw-1"


def test_a_gateway_hosts_secrets_are_each_read_once(tmp_path, monkeypatch):
    """The API key file and the control-plane key file are read by refusals.judge alone and handed on in Judged:
    the gateway host's own check (refusals.check_gateway_host) and its plan take them from there."""
    from sglang_infra.models import registry
    from sglang_infra.plan.resolve import resolve

    api_key = tmp_path / "api-key"
    api_key.write_text("k3y-0123456789abcdef\n")
    reads = Counter()
    real = registry.read_secret
    monkeypatch.setattr(registry, "read_secret", lambda path: reads.update([path]) or real(path))
    plan = resolve("gw-1", {**DEFAULTS, "sglang_require_gpu": False, "sglang_api_key_file": str(api_key)},
                   converged_snapshot(None), ("router",))
    assert plan.front_door.control_plane_config is not None and plan.api_key == b"k3y-0123456789abcdef"
    assert reads == {str(api_key): 1, DEFAULTS["sglang_router_admin_key_file"]: 1}


def test_a_control_plane_key_equal_to_the_api_key_is_still_refused(tmp_path):
    from sglang_infra.plan.problems import DeployDataError
    from sglang_infra.plan.resolve import resolve

    same = tmp_path / "api-key"
    same.write_text(open(DEFAULTS["sglang_router_admin_key_file"]).read())
    with pytest.raises(DeployDataError) as refused:
        resolve("gw-1", {**DEFAULTS, "sglang_require_gpu": False, "sglang_api_key_file": str(same)},
                converged_snapshot(None), ("router",))
    [line] = refused.value.problems
    assert line.startswith("host gw-1: sglang_router_admin_key_file: ") and "holds the same key as " \
        "sglang_api_key_file" in line


def test_a_run_reads_each_hosts_key_files_once_and_works_out_max_unavailable_once_per_worker(inventory, tmp_path,
                                                                                           monkeypatch):
    """issue 41's single passes, over a whole run's preflight: each host's API key file (and a gateway host's
    control-plane key file) is opened once, by refusals.judge, however many passes follow (gateways, peers,
    monitors); sglang_max_unavailable is worked out into a count once per fronted worker, by the gateway pass."""
    from sglang_infra.fleet import gateways
    from sglang_infra.models import registry

    for host in inventory:
        if host.name in ("gpu-03", "gw-1"):   # a node group's members run without a key (nodegroups.check_groups)
            key = tmp_path / f"{host.name}.key"
            key.write_text(f"k3y-{host.name}-0123456789abcdef\n")
            host.data.values["sglang_api_key_file"] = str(key)
    reads: Counter = Counter()
    real = registry.read_secret
    monkeypatch.setattr(registry, "read_secret", lambda path: reads.update([path]) or real(path))
    counted: Counter = Counter()
    real_unavailable = gateways.unavailable
    monkeypatch.setattr(gateways, "unavailable",
                        lambda setting, size: counted.update([(setting, size)]) or real_unavailable(setting, size))
    plans = run(inventory)
    for host in inventory:   # deploy.py calls the preflight once per host: the later calls reuse the plans
        assert preflight.preflight(host, inventory)
    # every host's data names the one control-plane key file here: once per host (judge knows no roles)
    assert reads == {str(tmp_path / "gpu-03.key"): 1, str(tmp_path / "gw-1.key"): 1,
                     DEFAULTS["sglang_router_admin_key_file"]: len(inventory)}
    assert plans["gpu-03"].api_key == b"k3y-gpu-03-0123456789abcdef"
    assert counted == {(1, 2): 2}   # gpu-01 (its group, through rank 0) and gpu-03, each a pool of 2
    assert (plans["gpu-01"].roll.max_unavailable, plans["gpu-03"].roll.max_unavailable) == (1, 1)
