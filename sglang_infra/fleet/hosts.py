"""The Fleet: what every host's plan needs from the other hosts of the inventory, read once per run.

The preflight (run/preflight.py) builds one `Fleet` from the inventory before it resolves any host (read_fleet:
the inventory's hosts, their groups and data, walked once) and hands it on: each host's groups and multi-node group
to plan.resolve, the workers of each model to the gateway pass, which places the gateways in front of
them (gateways.fleet), the keepers of each model to the peer sources (peering.with_sources), every host's roles and
fleet address to the monitors' targets (monitoring.with_monitors). No pass reads the inventory again.

Hosts outside this run (--limit) are in the Fleet too: their data says where they listen and what they serve.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterable, Mapping

from ..models.registry import kept_keys
from ..plan.roles import fleet_address, groups_of, monitors, roles
from ..plan.types import NodeGroup
from .nodegroups import membership


@dataclass(frozen=True)
class InventoryHost:
    """A host of the inventory (in this run or not), as the fleet's roles see it: its data and its groups."""

    name: str
    data: Mapping[str, Any]
    groups: tuple[str, ...]
    serves: bool
    runs_gateways: bool
    monitors: bool = False

    @property
    def address(self) -> str:
        """Where the other hosts reach this one (roles.fleet_address)."""
        return fleet_address(self.name, self.data)


@dataclass(frozen=True)
class Fleet:
    """Every host of the inventory with its data, roles and fleet address (in inventory order), and what follows
    from them alone: the multi-node groups, the workers of each model, the monitor hosts and the hosts that keep
    each model (the candidates for its peer sources)."""

    hosts: tuple[InventoryHost, ...]
    node_groups: Mapping[str, NodeGroup]               # member's name -> its group (nodegroups.membership)
    workers: Mapping[str, tuple[InventoryHost, ...]]   # model key -> the hosts its gateways send to (a group's rank 0)
    monitors: tuple[str, ...]                          # the hosts that run Prometheus over the whole inventory

    @classmethod
    def of(cls, hosts: Iterable[InventoryHost]) -> Fleet:
        """The Fleet of ``hosts`` (in inventory order)."""
        hosts = tuple(hosts)
        groups = membership(hosts)
        workers: dict[str, list[InventoryHost]] = {}
        for each in hosts:
            if each.serves and (each.name not in groups or groups[each.name].rank == 0):
                # a multi-node group is one worker: rank 0, which alone serves the API
                workers.setdefault(each.data["sglang_model"], []).append(each)
        return cls(hosts=hosts, node_groups=groups, workers={key: tuple(found) for key, found in workers.items()},
                   monitors=tuple(each.name for each in hosts if each.monitors))

    # Worked out on first use, once the preflight has judged the data of every host in the run.

    @cached_property
    def keepers(self) -> Mapping[str, tuple[str, ...]]:
        """Model key -> the serving hosts that keep it in their cache (registry.kept_keys), in inventory order: the
        candidates for its peer sources."""
        found: dict[str, list[str]] = {}
        for each in self.hosts:
            try:
                kept = kept_keys(each.data) if each.serves else []
            except TypeError:   # an unhashable sglang_cached_models: refused in this run, nobody's peer outside it
                kept = []
            for key in kept:
                found.setdefault(key, []).append(each.name)
        return {key: tuple(names) for key, names in found.items()}

    def host(self, name: str) -> InventoryHost:
        return next(each for each in self.hosts if each.name == name)


def read_fleet(inventory, path: str | None) -> Fleet:
    """The Fleet of pyinfra's ``inventory`` (every host, in this run or not): each host's groups read once.
    ``path``: the inventory's file (inventoryfile.inventory_file() in a pyinfra run), or None."""
    found = []
    for each in inventory:
        groups = tuple(groups_of(each, path))
        found.append(InventoryHost(each.name, each.data.dict(), groups, *roles(groups), monitors(groups)))
    return Fleet.of(found)
