"""A host's roles, from the inventory groups it is in: every group but
`router` and `monitor` serves a model; `router` runs the fleet's gateways
(gateways.py); `monitor` runs Prometheus over the whole inventory
(monitoring.py). A host in several does each; a host only in `router` or
`monitor` serves no model and needs no GPU.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

# The inventory group whose hosts run the gateway (SMG, the Shepherd Model Gateway), one per model.
ROUTER_GROUP = "router"
# The inventory group whose hosts run Prometheus, scraping every host of the inventory.
MONITOR_GROUP = "monitor"
# The groups that give a host a role of the fleet's; any other group serves a model.
ROLE_GROUPS = (ROUTER_GROUP, MONITOR_GROUP)


def groups_of(host, inventory_path: str | None) -> list[str]:
    """
    The inventory's own groups of a host: without pyinfra's `all`, and
    without the group pyinfra adds holding every host, named after the
    inventory file (e.g. `inventory` for inventory.py), which would make every
    gateway host a serving one. ``inventory_path``: that file
    (inventoryfile.inventory_file() in a pyinfra run), or None.
    """
    path = inventory_path
    stem = os.path.basename(path).rsplit(".", 1)[0] if path else None
    everyone = {each.name for each in host.inventory}
    out = []
    for name in (getattr(group, "name", group) for group in (host.groups or ())):
        implicit = name == stem and name not in ROLE_GROUPS and \
            {each.name for each in host.inventory.get_group(name)} == everyone
        if name != "all" and not implicit:
            out.append(name)
    return out


def roles(groups) -> tuple[bool, bool]:
    """(serves, runs_gateways) of a host in ``groups``: every group but `router` and `monitor` serves a model."""
    groups = set(groups)
    return (not groups or bool(groups - set(ROLE_GROUPS))), ROUTER_GROUP in groups


def monitors(groups) -> bool:
    """True when a host in ``groups`` runs the fleet's Prometheus."""
    return MONITOR_GROUP in set(groups)


def fleet_address(name: str, data: Mapping[str, Any]) -> str:
    """Where the other hosts of the fleet reach a host (its gateways, its monitor, its group's members, its peers):
    sglang_worker_address, else its ssh_hostname, else its inventory name. The one rule; the Fleet
    (fleet/hosts.py) carries it for every host."""
    return data.get("sglang_worker_address") or data.get("ssh_hostname") or name
