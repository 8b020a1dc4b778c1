"""Where each serving host's pull looks for a model's blobs: the fleet's peer doors (peerdoor.py), the Hub once per
site.

For each model (registry key), its peer hosts are the serving hosts of this run (not one outside --limit, none that
failed its preflight) that keep it (serve it, or list it in sglang_cached_models) with peer distribution on
(sglang_peer_key_file set) and the very same site key (their keys' fingerprints, peerdoor.key_id, are equal; the keys
themselves are never compared nor sent anywhere but to a door), in inventory order. A pull asks only those of them
whose door this run has brought up and found held by the door's own nginx (tasks/peer_door.py, door_checked, which
runs on every host before any pull): checked() drops the others when the pull's command is made.

With a lock and two or more of them in this run, the model is pulled as a swarm by files, in two rounds that the
deploy's order gives (every host runs an operation before any runs the next): split() gives each of them a share of
the lock's files. Round 1 (tasks/models.py): each host pulls only its share, from a peer that already holds a file
verified, else from the Hub at once; so in a fresh fleet the Hub serves each file once, to one host. The doors then
list what each host verified (tasks/peer_door.py: per file, from the pull's record of a revision pulled in part).
Round 2 (tasks/models_from_peers.py): each host pulls the rest from the peers that hold each file (ranges from
several at once), the Hub at once for a file no peer holds (the share of a host whose round 1 failed).

Without a lock (no file list before the pull), or with one host of the model in the run, the model's seed is the
first of them in this run: its pull (tasks/models.py) takes from the Hub what no peer holds, at once. Every other one
pulls after the seeds' doors list what they verified, from every peer that holds each blob then, and takes the Hub
only for a blob no peer holds after a short wait (SETTLE). Either way a host added later, or one whose files were
lost, finds every earlier host as a source (the swarm grows with the fleet: each host that holds a model verified
serves it to the next ones).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Mapping

from ..hostside.formats.netloc import netloc
from ..plan.types import HostPlan, PeerSources

if TYPE_CHECKING:
    from .hosts import Fleet

# Seconds a pull after the seeds waits for a peer to hold a blob (their doors have just been reloaded); past it, or
# when no peer answers, the Hub.
SETTLE = 15


def split(files, hosts) -> dict[str, tuple[str, ...]]:
    """The swarm's shares: host -> the lock's paths it pulls in round 1. ``files``: the lock's files ({"path",
    "size", "sha256"}); ``hosts``: the model's hosts in this run, in inventory order. Each content once (files of one
    content go together: they are one blob), largest first (ties by path), to the host with the fewest bytes so far
    (ties: the earlier in the inventory). Deterministic: every host works out the same split."""
    load = {host: 0 for host in hosts}
    shares: dict[str, list[str]] = {host: [] for host in hosts}
    owner: dict[str, str] = {}
    for item in sorted(files, key=lambda f: (-int(f["size"]), f["path"])):
        if item["sha256"] not in owner:
            owner[item["sha256"]] = min(hosts, key=lambda host: load[host])
            load[owner[item["sha256"]]] += int(item["size"])
        shares[owner[item["sha256"]]].append(item["path"])
    return {host: tuple(sorted(paths)) for host, paths in shares.items()}


def with_sources(plans: Mapping[str, HostPlan | None], everyone: Fleet) -> dict[str, HostPlan | None]:
    """Every plan of a serving host with a peer door, with its peer_sources, from the hosts that keep each model
    (the Fleet's keepers, in inventory order). A host without a plan here (outside the run, or refused) is nobody's
    peer; nor is one whose site key is another."""
    members: dict[str, list[tuple[str, str, str]]] = {}  # model key -> (host, its door, its key's id), in order
    for key, keepers in everyone.keepers.items():
        for name in keepers:
            door = getattr(plans.get(name), "peer_door", None)
            if door is not None:
                members.setdefault(key, []).append((name, netloc(door.address, door.port), door.key_id))
    out = dict(plans)
    for name, plan in plans.items():
        if plan is None or plan.peer_door is None:
            continue
        sources = {}
        for model in plan.kept:
            found = [(host, door) for host, door, key_id in members.get(model.key, [])
                     if key_id == plan.peer_door.key_id]
            in_run = [host for host, _ in found]
            peers = tuple(door for host, door in found if host != name)
            names = tuple(host for host, _ in found if host != name)
            locked = plan.locked.get(model.key)
            if len(in_run) > 1 and locked is not None and name in in_run:  # a swarm by files
                sources[model.key] = PeerSources(peers, True, 0, split(locked.files, in_run)[name], names)
                continue
            seed = bool(in_run) and in_run[0] == name
            sources[model.key] = PeerSources(peers, seed, 0 if seed else SETTLE, hosts=names)
        out[name] = replace(plan, peer_sources=sources)
    return out


# per run (id of pyinfra's state): the hosts whose door was found ours -> its certificate's sha256
_checked: dict[int, dict[str, str]] = {}


def door_checked(state, name: str, cert: str) -> None:
    """This run found the door of host ``name`` up and held by the door's own nginx, with the certificate whose
    sha256 is ``cert`` (operations.peerdoor)."""
    _checked.setdefault(id(state), {})[name] = cert


def checked(state, sources: PeerSources) -> PeerSources:
    """``sources`` with only the peers whose door this run has checked (door_checked), each ADDRESS:PORT=SHA256,
    the certificate the run read on its host: the pull speaks TLS pinned to it and sends the site key to no other
    listener, not one on a door still down on a fresh fleet nor one whose host failed before its door came up."""
    ours = _checked.get(id(state), {})
    kept = [(f"{door}={ours[host]}", host) for door, host in zip(sources.peers, sources.hosts) if host in ours]
    return sources._replace(peers=tuple(door for door, _ in kept), hosts=tuple(host for _, host in kept))


def pull_arguments(plan: HostPlan, model, first_round: bool = False) -> dict[str, Any]:
    """model_pulled's arguments for ``model`` on the host of ``plan`` (tasks/models.py, tasks/models_from_peers.py);
    ``first_round``: a swarm's round 1, this host's share alone."""
    from ..hostside import names

    sources = plan.peer_sources.get(model.key)
    share = sources.share if first_round and sources is not None else None
    if share is not None:
        return dict(pull_arguments(plan, model), share=share,
                    name=f"Ensure this host's share of {model.key} ({model.pinned}: {len(share)} of "
                         f"{len(model_files(plan, model))} files) is verified in {names.HUB_DIR}, for its peers")
    return dict(
        name=f"Ensure {model.key} ({model.pinned}) is complete and verified in {names.HUB_DIR}"
             + ("" if sources is None or not sources.peers else
                " (the rest from the peers that hold it)" if sources.share is not None else
                " (the Hub for what no peer holds)" if sources.seed else " (from the fleet's peers first)"),
        pull=plan.pull, paths=plan.paths, model=model, locked=plan.locked.get(model.key),
        peers=sources if sources is not None and sources.peers else None, _sudo=True, _sudo_user=plan.account.name)


def model_files(plan: HostPlan, model) -> tuple:
    locked = plan.locked.get(model.key)
    return locked.files if locked is not None else ()


def in_swarm(plan: HostPlan, model) -> bool:
    """True when the host pulls ``model`` as a swarm: its share in round 1 (tasks/models.py), the rest in round 2."""
    sources = plan.peer_sources.get(model.key)
    return sources is not None and sources.share is not None


def after_seeds(plan: HostPlan, model) -> bool:
    """True when the host pulls ``model`` (or, in a swarm, the rest of it) after the doors list what their hosts
    verified (tasks/models_from_peers.py)."""
    sources = plan.peer_sources.get(model.key)
    return sources is not None and bool(sources.peers) and (not sources.seed or sources.share is not None)
