"""Multi-node groups, control side: one model served across several hosts
(sglang_node_group), as one unit.

- membership(): every group of the inventory from its hosts' data, each
  member's rank its position among the group's members in inventory order
  (the first listed is rank 0), and rank 0's address as the members reach it;
- check_groups(): the group's refusals, once every member's plan is known
  (preflight.py), each one line through problems.problem;
- member_reasons() and stale(): why a group must be recreated as a whole,
  from every member's snapshot: a member whose container is gone, exited, not
  started from its files as they are, or started out of the group's order (a
  stale group: sglang#3099). operations/group.py's restart_reasons() reads the
  members and acts on them; the status report and the host checks can name
  the group, the member and why from the same functions.

A member's launch flags (render.launch_flags), compose file (host
networking, the group's labels) and tp-size (the per-host count times the
members) are worked out in resolve.resolve_judged from its NodeGroup.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any, Iterable, Mapping

from ..hostside import names
from ..plan.problems import problem
from ..plan.roles import fleet_address
from ..plan.types import START_WINDOW, GroupMember, HostPlan, NodeGroup


def membership(hosts: Iterable[Any]) -> dict[str, NodeGroup]:
    """Every serving host's NodeGroup by host name, from ``hosts`` (hosts.InventoryHost: name, data, serves),
    in inventory order. A group's port, range and interface are rank 0's data (check_groups refuses members
    whose data disagree)."""
    groups: dict[str, list[Any]] = {}
    for each in hosts:
        name = each.data.get("sglang_node_group")
        if name and each.serves:
            groups.setdefault(name, []).append(each)
    out = {}
    for name, members in groups.items():
        head = members[0]
        for rank, member in enumerate(members):
            out[member.name] = NodeGroup(
                name=name, rank=rank, members=tuple(m.name for m in members), head=fleet_address(head.name, head.data),
                port=head.data["sglang_dist_init_port"], ports=head.data["sglang_dist_init_ports"],
                interface=head.data.get("sglang_node_interface"), head_ssh_port=int(head.data.get("ssh_port") or 22))
    return out


def not_serving(hosts: Iterable[Any]) -> list[str]:
    """A host with sglang_node_group that serves no model (only in `router` or `monitor`): refused."""
    return [problem(each.name, "sglang_node_group", f"{each.data['sglang_node_group']!r} is set, but this host serves "
                    "no model (it is only in the router or monitor group)",
                    "set sglang_node_group = None for it, or put it in a serving group")
            for each in hosts if each.data.get("sglang_node_group") and not each.serves]


# The group's own keys every member must have alike (rank 0's decide the group's ports and interface).
_TEMPLATE_KEYS = ("sglang_dist_init_port", "sglang_dist_init_ports", "sglang_node_interface")
# Launch flags compared under a key of their own (the per-host GPU count) or the same on every member by design.
_NOT_A_FLAG_DIFFERENCE = ("sglang_tp_size", "sglang_node_rank", "sglang_node_group", "sglang_dist_init_port")


def _same(plan: HostPlan) -> dict[str, Any]:
    """What every member must have alike, by the key the operator sets it with: the per-host GPU count under
    sglang_tp_size (a member's --tp-size is it times the members), each launch flag under its own key (a flag of
    the served model's registry entry under sglang_models)."""
    tp = plan.derived["sglang_tp_size"]
    flags: dict[str, tuple[str, ...]] = {}
    for flag in plan.flags:
        if flag["key"] not in _NOT_A_FLAG_DIFFERENCE:
            key = flag["key"] if flag["key"].startswith("sglang_") else "sglang_models"
            flags[key] = flags.get(key, ()) + (flag["arg"],)
    return {"sglang_model": plan.served.pinned, "sglang_image": plan.image.serving,
            "sglang_tp_size": (tp.each or tp).value, **flags,
            **{key: plan.template_values.get(key) for key in _TEMPLATE_KEYS}}


def _shown(plan: HostPlan, key: str, value: Any) -> str:
    """A member's value of ``key`` as a difference names it: the GPU count per host with where it came from."""
    if key == "sglang_tp_size":
        tp = plan.derived["sglang_tp_size"]
        return f"{value} GPU(s) per host ({(tp.each or tp).source})"
    if isinstance(value, tuple):
        return " ".join(value)
    return "no such flag" if value is None and key not in _TEMPLATE_KEYS else repr(value)


def check_groups(plans: Mapping[str, HostPlan | None], groups: Mapping[str, NodeGroup],
                 in_run: Iterable[str] | None = None) -> list[str]:
    """The groups' refusals: one line each naming the host, the key and the fix. ``in_run``: the hosts of this
    run (None: all), a group being deployed whole or not at all."""
    errors: list[str] = []
    running = set(in_run) if in_run is not None else None
    seen: set[str] = set()
    for host, group in groups.items():
        if group.name in seen:
            continue
        seen.add(group.name)
        members = group.members
        if len(members) < 2:
            errors.append(problem(host, "sglang_node_group", f"group {group.name!r} has no other member; a group "
                                  "serves one model across 2 or more hosts", "give another host the same "
                                  "sglang_node_group, or set it to None on this one"))
            continue
        if running is not None and running & set(members) and not set(members) <= running:
            outside = ", ".join(m for m in members if m not in running)
            errors.append(problem(host, "sglang_node_group", f"group {group.name!r} is deployed in part: {outside} "
                                  "is outside this run, and a group restarts as one unit", "run it with every member "
                                  f"({', '.join(members)}) in --limit, or without --limit"))
            continue
        head = plans.get(members[0])
        if head is None:
            continue   # its own refusal is already said
        wanted = _same(head)
        for member in members[1:]:
            plan = plans.get(member)
            if plan is None:
                continue
            found = _same(plan)
            for key in dict.fromkeys([*wanted, *found]):
                if found.get(key) != wanted.get(key):
                    errors.append(problem(member, key, f"differs from rank 0 ({members[0]}) of group {group.name!r}: "
                                          f"{_shown(plan, key, found.get(key))} here, "
                                          f"{_shown(head, key, wanted.get(key))} on rank 0; every member runs the "
                                          "same model, image, flags and GPU count", f"set the same {key} on every "
                                          f"member of {group.name!r}"))
    for host, group in groups.items():
        plan = plans.get(host)
        if plan is None:
            continue
        if not plan.exposure.trusted_network:
            errors.append(problem(host, "sglang_trusted_network", f"False, but group {group.name!r} needs rank 0's "
                                  f"ports {group.port}-{group.port + group.ports - 1} (the rendezvous and SGLang's "
                                  "ZMQ sockets) and NCCL's between the members, which answer without a key",
                                  "put the members on a network you trust and set sglang_trusted_network = True"))
        if plan.api_key is not None:
            errors.append(problem(host, "sglang_api_key_file", f"set on a member of group {group.name!r}: a member "
                                  "runs on the host's network, where the gate cannot tell that the port it sends the "
                                  "key to is the container's", "set sglang_api_key_file = None for the group's "
                                  "members (the group needs sglang_trusted_network = True anyway)"))
    return errors


def with_members(plans: Mapping[str, HostPlan | None]) -> dict[str, HostPlan | None]:
    """Every member's plan with its group's members as the group's operation reaches them (their directories,
    compose digests and images), once every plan is known."""
    out = dict(plans)
    for name, plan in plans.items():
        group = plan.node_group if plan is not None else None
        if plan is None or group is None or any(plans.get(m) is None for m in group.members):
            continue
        members = tuple(GroupMember(m, p.paths.docker, p.paths.home, p.compose_sha, p.image.serving)
                        for m in group.members for p in [plans[m]] if p is not None)
        out[name] = replace(plan, node_group=replace(group, member_plans=members))
    return out


def _started(container: Mapping[str, Any] | None) -> datetime | None:
    when = (container or {}).get("started_at")
    if not when or when.startswith("0001-"):
        return None
    try:
        return datetime.fromisoformat(when[:26].rstrip("Z") if "." in when else when.rstrip("Z"))
    except ValueError:
        return None


def stale(snapshots: Mapping[str, Mapping[str, Any] | None], group: NodeGroup) -> list[str]:
    """Why the group's running members are not one group (one restarted alone), from each member's snapshot: a
    member started after rank 0, rank 0 started more than START_WINDOW after a member, or a member (rank 0 too)
    whose container started since the group's last gate while another member still runs the container its gate
    saw (the gate's record: snapshot's gate section, its started_at). One line each."""
    head = _started(_container(snapshots, group.head_name))
    if head is None:
        return []
    out, named = [], set()
    for member in group.members[1:]:
        started = _started(_container(snapshots, member))
        if started is None:
            continue
        if started > head:
            out.append(f"{member}: started after rank 0 ({group.head_name}), against a group that already formed")
            named.add(member)
        elif (head - started).total_seconds() > START_WINDOW:
            out.append(f"{member}: rank 0 ({group.head_name}) restarted after it, alone")
    restarted = {member: _restarted(snapshots.get(member)) for member in group.members}
    if False not in restarted.values():   # no member runs the container the group's last gate saw (or not known)
        return out
    for rank, member in enumerate(group.members):
        if restarted[member] and member not in named:
            now = (_container(snapshots, member) or {}).get("started_at")
            out.append(f"{member} (rank {rank}): restarted alone at {now}, since the group's last gate (its container "
                       f"then started at {_gated(snapshots.get(member))}); the other members never join it again, so "
                       "the group serves nothing until every member restarts together")
    return out


def _container(snapshots: Mapping[str, Mapping[str, Any] | None], member: str) -> Mapping[str, Any] | None:
    return ((snapshots.get(member) or {}).get("stack") or {}).get("container")


def _gated(snapshot: Mapping[str, Any] | None) -> str | None:
    """When the container the member's last gate stamped had started (its record), or None: not known."""
    return ((snapshot or {}).get("gate") or {}).get("started_at")


def _restarted(snapshot: Mapping[str, Any] | None) -> bool | None:
    """Whether the member's running container started since its last gate stamped one; None: not known (no record
    of a start, or no container started)."""
    gated, now = _gated(snapshot), ((snapshot or {}).get("stack") or {}).get("container")
    if gated is None or _started(now) is None:
        return None
    return (now or {}).get("started_at") != gated


def member_reasons(name: str, snapshot: Mapping[str, Any] | None, compose_sha: str, image_id: str | None,
                   docker_dir: str) -> list[str]:
    """Why one member's container is not the group's as planned: gone, not running, or not from its files."""
    if not snapshot:
        return [f"{name}: could not be read"]
    stack = snapshot.get("stack") or {}
    found = stack.get("container")
    on_disk = ((snapshot.get("files") or {}).get(docker_dir) or {}).get(names.COMPOSE_FILE) or {}
    if found is None:
        return [f"{name}: the service has no container"]
    if found["state"] != "running":
        return [f"{name}: the container is {found['state']}"]
    if on_disk.get("sha256") != compose_sha:
        return [f"{name}: compose.yaml changes"]
    if not stack.get("current"):
        return [f"{name}: the container was not started from compose.yaml and .env as they are"]
    if image_id is None or found.get("image_id") != image_id:
        return [f"{name}: the container runs another image"]
    return []
