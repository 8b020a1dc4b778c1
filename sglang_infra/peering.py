"""Where each serving host's pull looks for a model's blobs: the fleet's peer doors (peerdoor.py), the Hub once per
site.

For each model (registry key), its peer hosts are the inventory's serving hosts that keep it (serve it, or list it in
sglang_cached_models) with peer distribution on (sglang_peer_key_file set), in inventory order. The model's seed is
the first of them in this run: its pull (tasks/models.py) takes from the Hub what no peer holds, at once. Every other
one pulls after the seeds' doors list what they verified (tasks/models_from_peers.py, after tasks/peer_door.py), from
every peer that holds each blob then (HEAD to each, ranges spread over up to MAX_SOURCES of them), and takes the Hub
only for a blob no peer holds after a short wait (SETTLE). So in a fresh fleet the Hub serves each file once, to the
seed; a host added later, or one whose files were lost, finds every earlier host as a source (the swarm grows with
the fleet: each host that holds a model verified serves it to the next ones).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from . import peerdoor
from .plantypes import HostPlan, PeerSources

# Seconds a pull after the seeds waits for a peer to hold a blob (their doors have just been reloaded); past it, or
# when no peer answers, the Hub.
SETTLE = 15


def kept_keys(data: Mapping[str, Any]) -> list[str]:
    """The registry keys a host keeps in its cache (models.kept's order): the served one, then the cached ones."""
    return list(dict.fromkeys([data["sglang_model"], *(data.get("sglang_cached_models") or ())]))


def with_sources(plans: Mapping[str, HostPlan | None], hosts) -> dict[str, HostPlan | None]:
    """Every plan of a serving host with a peer door, with its peer_sources; ``hosts``: the inventory's hosts with
    their data and roles, in inventory order (gateways.inventory_roles)."""
    members: dict[str, list[tuple[str, str]]] = {}  # model key -> (host, its door) in inventory order
    for each in hosts:
        data = each.data
        if not each.serves or not data.get("sglang_peer_key_file"):
            continue
        plan = plans.get(each.name)
        address = plan.peer_door.address if plan is not None and plan.peer_door is not None \
            else peerdoor.fleet_address(data, each.name)
        door = peerdoor.listen(address, int(data["sglang_peer_port"]))
        for key in kept_keys(data):
            members.setdefault(key, []).append((each.name, door))
    out = dict(plans)
    for name, plan in plans.items():
        if plan is None or plan.peer_door is None:
            continue
        sources = {}
        for model in plan.kept:
            found = members.get(model.key, [])
            in_run = [host for host, _ in found if getattr(plans.get(host), "peer_door", None) is not None]
            seed = bool(in_run) and in_run[0] == name
            sources[model.key] = PeerSources(tuple(door for host, door in found if host != name), seed,
                                             0 if seed else SETTLE)
        out[name] = replace(plan, peer_sources=sources)
    return out


def pull_arguments(plan: HostPlan, model) -> dict[str, Any]:
    """model_pulled's arguments for ``model`` on the host of ``plan`` (tasks/models.py, tasks/models_from_peers.py)."""
    from .hostside import names

    sources = plan.peer_sources.get(model.key)
    return dict(
        name=f"Ensure {model.key} ({model.pinned}) is complete and verified in {names.HUB_DIR}"
             + ("" if sources is None or not sources.peers else
                " (the Hub for what no peer holds)" if sources.seed else " (from the fleet's peers first)"),
        hub=plan.paths.hub, verified=plan.paths.verified, repo_id=model.repo_id, revision=model.revision,
        tools_dir=plan.paths.tools, lock_wait=plan.pull_lock_wait, workers=plan.pull_workers,
        endpoint=plan.hf_endpoint, token_file=plan.paths.token if plan.token else None,
        locked=plan.locked.get(model.key), peers=sources if sources is not None and sources.peers else None,
        peer_key_file=plan.paths.peer_key if sources is not None and sources.peers else None,
        _sudo=True, _sudo_user=plan.account)


def after_seeds(plan: HostPlan, model) -> bool:
    """True when the host pulls ``model`` after the seeds' doors list it (tasks/models_from_peers.py)."""
    sources = plan.peer_sources.get(model.key)
    return sources is not None and bool(sources.peers) and not sources.seed
