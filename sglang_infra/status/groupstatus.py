"""Whether a multi-node group (sglang_node_group) is whole, for the fleet report (scripts/status.sh) and the host
checks (scripts/check.sh): one judgement, from what each member's container is.

A group serves only while every member runs, all started together: a member whose container is gone or not running
leaves rank 0 hanging (a lost NCCL peer), and a member started after rank 0 (or rank 0 long after a member) is a
stale group that never serves again (sglang#3099), as is a member (rank 0 included) whose container started since the
group's last gate while another member still runs the container its gate saw (one restarted alone, however soon
after the others): nodegroups.stale, the rule the deploy recreates the group by. Any of these makes the group
failing; each line names the group, the member and why. Rank 0's own health says nothing about the others (and stays
"starting" for the healthcheck's start period after a restart), and the other ranks' health answers say nothing at
all, so neither is asked here.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..fleet.nodegroups import stale
from ..plan.types import NodeGroup
from .statusrows import GROUP_FIELDS

UNREAD = object()   # a member whose container could not be read (unreachable, refused): not known to be whole


def problems(group: NodeGroup, containers: Mapping[str, Any], gated: Mapping[str, str | None] | None = None
             ) -> list[str]:
    """Why ``group`` is failing, one line each (none: every member runs, started as one group). ``containers``: each
    member's container as the snapshot reads it (stack.container: state, started_at), None when it has none, UNREAD
    when it could not be read; ``gated``: when the container each member's last gate stamped had started (the
    snapshot's gate section, its started_at), None or left out when not known."""
    out = []
    for rank, member in enumerate(group.members):
        found = containers.get(member, UNREAD)
        who = f"group {group.name}: member {member} (rank {rank})"
        if found is UNREAD:
            out.append(f"{who} could not be read, so the group is not known to serve")
        elif found is None:
            out.append(f"{who} has no container: it is gone")
        elif found.get("state") != "running":
            out.append(f"{who}: its container is {found.get('state')}")
    readable = {m: {"stack": {"container": c}, "gate": {"started_at": (gated or {}).get(m)}}
                for m, c in containers.items() if c is not UNREAD and c is not None and c.get("state") == "running"}
    return out + [f"group {group.name}: member {line}" for line in stale(readable, group)]


def of_row(found: Mapping[str, Any]) -> NodeGroup:
    """The NodeGroup a status row carries (statusrows.row: the plan's, as JSON)."""
    return NodeGroup(**{**{name: found[name] for name in GROUP_FIELDS}, "members": tuple(found["members"])})
