"""Every TCP port one host's data gives a listener, and the refusal of any two that overlap.

A host's ports come from many keys (ssh, the server, the peer door, the gateways, the node exporter,
Prometheus, a group's dist-init range); each pair is judged here, once, for the roles the host has, before
anything on any host changes. A clash names both keys and both ranges, and ports the one it names could move to.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

from .problems import problem
from .types import NodeGroup

# Pairs gateways.check_fleet judges once the gateways are placed (their exact ports, not one per registry entry).
PLACED = frozenset({"sglang_port", "sglang_router_port", "sglang_router_prometheus_port"})


class Listener(NamedTuple):
    """Ports ``first``..``last`` (both included) that ``key`` gives one listener of the host."""

    key: str
    first: int
    last: int

    def span(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"


def free_from(found: list[Listener], moved: Listener) -> Listener | None:
    """``moved`` shifted to the first ports above its own that no listener of ``found`` takes; None past 65535.
    Each step jumps past the listener in the way, so the search ends after at most one step per listener."""
    width = moved.last - moved.first
    start = moved.first + 1
    while start + width <= 65535:
        hit = next((other for other in found if other.first <= start + width and start <= other.last), None)
        if hit is None:
            return Listener(moved.key, start, start + width)
        start = hit.last + 1
    return None


def listeners(data: Mapping[str, Any], serves: bool, runs_gateways: bool, monitors: bool,
              node_group: NodeGroup | None) -> list[Listener]:
    """The host's listeners by the key that sets each: ssh always; the server and, with the site's key, the peer
    door on a serving host; a group member's dist-init range (rank 0 listens there, and a change of the
    inventory's order makes any member rank 0); a gateway host's gateways (one port per registry entry, the
    numbering gateways.place uses); the node exporter; Prometheus on a monitor host."""
    found = [Listener("ssh_port", int(data.get("ssh_port") or 22), int(data.get("ssh_port") or 22))]
    if serves:
        found.append(Listener("sglang_port", data["sglang_port"], data["sglang_port"]))
        if data["sglang_peer_key_file"]:
            found.append(Listener("sglang_peer_port", data["sglang_peer_port"], data["sglang_peer_port"]))
        if node_group is not None:
            found.append(Listener("sglang_dist_init_port", node_group.port, node_group.port + node_group.ports - 1))
    if runs_gateways:
        count = max(1, len(data["sglang_models"]))
        for key in ("sglang_router_port", "sglang_router_prometheus_port"):
            found.append(Listener(key, data[key], data[key] + count - 1))
    if data["sglang_node_exporter"]:
        port = data["sglang_node_exporter_port"]
        found.append(Listener("sglang_node_exporter_port", port, port))
    if monitors:
        port = int(str(data["sglang_prometheus_listen_address"]).rpartition(":")[2])
        found.append(Listener("sglang_prometheus_listen_address", port, port))
    return found


def clashes(name: str, data: Mapping[str, Any], serves: bool, runs_gateways: bool, monitors: bool,
            node_group: NodeGroup | None) -> list[str]:
    """One line for each pair of the host's listeners whose ports overlap, naming both keys."""
    found = listeners(data, serves, runs_gateways, monitors, node_group)
    errors = []
    for i, one in enumerate(found):
        for other in found[i + 1:]:
            if {one.key, other.key} <= PLACED:
                continue
            if one.first <= other.last and other.first <= one.last:
                free = free_from(found, other)
                errors.append(problem(name, other.key, f"port {other.span()} overlaps {one.key}'s {one.span()}: two "
                                      "listeners of this host would want the same port",
                                      f"move {other.key} (or {one.key}) so that every port of the host is its own"
                                      + (f", e.g. {other.key} on {free.span()}" if free else "")))
    return errors
