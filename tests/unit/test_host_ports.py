"""The ports of one host judged against each other (sglang_infra/plan/hostports.py) before any change, through
plan.resolve as preflight judges each host: any two listeners whose ports overlap are refused, naming both keys."""

from __future__ import annotations

import pytest
from conftest import converged_snapshot, pinned_defaults

from sglang_infra.fleet import nodegroups
from sglang_infra.fleet.hosts import InventoryHost
from sglang_infra.plan.problems import DeployDataError
from sglang_infra.plan.resolve import resolve

DEFAULTS = pinned_defaults()
KEY = "0123456789abcdef" * 4


def judged(tmp_path, name="gpu-01", groups=(), grouped=False, door=False, **data):
    """The problems resolve() refuses ``name`` for, one of two members of group 'ds-a' when ``grouped``
    (gpu-01 rank 0, gpu-02 rank 1), with the peer door on when ``door``; [] when it resolves."""
    key = tmp_path / "peer.key"
    key.write_text(KEY + "\n")
    common = {**DEFAULTS, "sglang_trusted_network": True,
              "sglang_node_group": "ds-a" if grouped else None,
              "sglang_peer_key_file": str(key) if door else None}
    serves = not groups or bool(set(groups) - {"router", "monitor"})
    hosts = [InventoryHost(n, {**common, "ssh_hostname": address, **(data if n == name else {})}, tuple(groups),
                           serves, "router" in groups)
             for n, address in (("gpu-01", "10.0.0.11"), ("gpu-02", "10.0.0.12"))]
    this = next(h for h in hosts if h.name == name)
    snapshot = converged_snapshot(peer={"address": this.data["ssh_hostname"], "local": True})
    try:
        resolve(name, this.data, snapshot, tuple(groups), nodegroups.membership(hosts).get(name))
    except DeployDataError as refused:
        return refused.problems
    return []


@pytest.mark.parametrize("case,data,keys", [
    ("the door in rank 0's dist-init range", dict(grouped=True, door=True, sglang_peer_port=29505),
     ("sglang_peer_port", "sglang_dist_init_port")),
    ("ssh in a member's dist-init range", dict(name="gpu-02", grouped=True, ssh_port=29510),
     ("ssh_port", "sglang_dist_init_port")),
    ("the server in the range on rank 1", dict(name="gpu-02", grouped=True, sglang_port=29505),
     ("sglang_port", "sglang_dist_init_port")),
    ("the node exporter on Prometheus' port", dict(groups=("monitor",), sglang_node_exporter_port=9090),
     ("sglang_node_exporter_port", "sglang_prometheus_listen_address")),
    ("a gateway on the node exporter's port", dict(groups=("router",), sglang_router_port=9100),
     ("sglang_router_port", "sglang_node_exporter_port")),
])
def test_two_listeners_of_one_host_on_one_port_are_refused_naming_both_keys(tmp_path, case, data, keys):
    name = data.get("name", "gpu-01")
    problems = judged(tmp_path, **data)
    assert len(problems) == 1, (case, problems)
    assert problems[0].startswith(f"host {name}: ") and "overlaps" in problems[0], (case, problems)
    assert all(key in problems[0] for key in keys), (case, problems)


@pytest.mark.parametrize("data", [dict(grouped=True, door=True), dict(name="gpu-02", grouped=True, door=True),
                                  dict(groups=("production", "router", "monitor"), door=True),
                                  dict(groups=("router",), sglang_port=30080)])
def test_the_defaults_and_a_port_no_listener_uses_are_no_clash(tmp_path, data):
    assert judged(tmp_path, **data) == []


# The peer door's port is judged with the host's other listeners, by the one port check (it had a check of its own,
# in refusals.check_data, which suggested 30050 whatever the port). Each case: the door's port, the host's groups.
DOOR_CLASHES = [
    (dict(sglang_peer_port=30000), "sglang_port"),
    (dict(sglang_peer_port=9100), "sglang_node_exporter_port"),
    (dict(groups=("production", "monitor"), sglang_peer_port=9090), "sglang_prometheus_listen_address"),
    (dict(groups=("production", "router"), sglang_peer_port=30081), "sglang_router_port"),
    (dict(groups=("production", "router"), sglang_peer_port=29000), "sglang_router_prometheus_port"),
    (dict(sglang_peer_port=22), "ssh_port"),
    (dict(sglang_peer_port=2222, ssh_port=2222), "ssh_port"),
]


@pytest.mark.parametrize("data,other", DOOR_CLASHES)
def test_the_doors_port_on_another_listeners_is_refused_with_a_port_that_is_free(tmp_path, data, other):
    [problem] = judged(tmp_path, door=True, **data)
    assert problem.startswith("host gpu-01: ") and "overlaps" in problem and "sglang_peer_port" in problem
    assert other in problem and "30050" not in problem
    moved, span = problem.rpartition(", e.g. ")[2].rstrip(".").split(" on ")
    free = int(span.partition("-")[0])   # a range key (a gateway's ports, one per model) holds its first port
    fixed = {**data, moved: free} if moved != "sglang_prometheus_listen_address" else {
        **data, moved: f"127.0.0.1:{free}"}
    assert judged(tmp_path, door=True, **fixed) == [], problem


def test_the_doors_port_is_no_clash_where_the_door_is_off_or_the_other_listener_absent(tmp_path):
    assert judged(tmp_path, sglang_peer_port=30000) == []                        # no door: no port of its own
    assert judged(tmp_path, door=True, sglang_peer_port=9090) == []              # Prometheus runs on monitors only
    assert judged(tmp_path, door=True, sglang_peer_port=30081) == []             # gateways on router hosts only


def test_the_port_suggested_skips_every_listener_in_the_way(tmp_path):
    """The door on the server's port, the next ports taken by a group's dist-init range: the suggestion is past it."""
    [problem] = judged(tmp_path, door=True, sglang_peer_port=29500, sglang_port=29500)
    assert problem.endswith(", e.g. sglang_peer_port on 29501.")
    [problem] = judged(tmp_path, grouped=True, door=True, sglang_peer_port=30000)
    assert problem.endswith(", e.g. sglang_peer_port on 30001.")
