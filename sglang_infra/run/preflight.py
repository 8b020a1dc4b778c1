"""The preflight: every host being deployed resolved at once, before anything
runs on any host.

At the top of deploy.py, the first host's load reads every host's snapshot in
parallel (one gevent job each, one pass per run, joined by every later
host's load), judges and resolves each into its plan (plan/resolve.py), then gives
the gateway hosts their gateways (gateways.fleet) and the monitor hosts their
scrape targets (monitoring.with_monitors) and each serving host with a peer door
the peers its pull looks to first (peering.with_sources). The inventory is read
once per run, into the run's Fleet (fleet/hosts.py), which every pass takes. Any problem on any host
refuses the run (refusals.py). In the status report's mode (statusrows.py) a
refused or unreadable host becomes a row of the report instead, and its
tasks are skipped. Tasks read their host's plan with plan_of(host).
"""

from __future__ import annotations

import json

from pyinfra import logger

from ..fleet.gateways import fleet
from ..fleet.hosts import Fleet, read_fleet
from ..fleet.monitoring import with_monitors
from ..fleet.nodegroups import check_groups, not_serving, with_members
from ..fleet.peering import with_sources
from ..machine.sglang_args.launch import host_problems as launch_problems
from ..plan.inventoryfile import inventory_file
from ..plan.problems import DeployDataError, problem, raise_if
from ..plan.refusals import judge
from ..plan.resolve import resolve_judged, snapshot_spec
from ..plan.schema import SCHEMA
from ..plan.types import HostPlan
from ..status import statusrows
from . import factcache, sources
from .facts import Snapshot

_plans: dict[int, dict[str, HostPlan | None]] = {}
_reads: dict[int, list] = {}   # the one parallel pass per run, joined by every host's load of deploy.py
_fleets: dict[int, Fleet] = {}   # each run's Fleet: the inventory read once


def _resolve_host(host, report: bool, everyone: Fleet) -> tuple[HostPlan | None, list[str], dict | None]:
    """The host's plan (or None), its problems, and its snapshot (None when it was not read)."""
    node_group = everyone.node_groups.get(host.name)
    judged = judge(host.name, host.data.dict())
    if judged.problems:
        return None, judged.problems, None
    spec = snapshot_spec(judged.data, report, node_group=node_group, name=host.name)
    snapshot = factcache.get(host, Snapshot, spec=json.dumps(spec, sort_keys=True))
    if snapshot is None:
        return None, [f"host {host.name}: its snapshot could not be read (the error is above)"], None
    try:
        plan = resolve_judged(host.name, judged, snapshot, everyone.host(host.name).groups, node_group)
    except DeployDataError as error:
        return None, error.problems, snapshot
    # the flags against the image's SGLang release, the model against the GPUs
    found = [problem(host.name, *each) for each in launch_problems(plan, judged.data)]
    return (None, found, snapshot) if found else (plan, [], snapshot)


def _overrides(host) -> str | None:
    """Which of our keys this host's own inventory data (or --data) sets over group_data, said at the start."""
    inventory = host.inventory
    parts = []
    for source, values in (("its inventory data", inventory.get_host_data(host.name)),
                           ("--data", inventory.get_override_data())):
        keys = sorted(key for key in (values or {}) if key in SCHEMA)
        if keys:
            parts.append(f"{source} sets {', '.join(keys)}")
    return f"[{host.name}] over group_data, {'; '.join(parts)}" if parts else None


def walk_warnings(name: str, snapshot: dict | None) -> list[str]:
    """What the host's one read left unread, because a walk below the home (the layout's, the model cache's)
    reached its bound in entries or time, or met a link where none may be: one line each."""
    found = []
    for section in ("layout", "models"):
        said = ((snapshot or {}).get(section) or {}).get("stopped_early")
        if said:
            found.append(f"[{name}] {said}")
    return found


def preflight(host, inventory) -> bool:
    """
    Resolve every host being deployed, at once and in parallel (one snapshot
    each), and refuse the run before anything executes when any host has a
    problem. Called at the top of deploy.py; later calls reuse the plans.
    True: go on with this host's tasks. Only a status report (statusrows.py)
    gets False, for a host it reports as refused or unreadable instead.
    """
    import gevent

    report = bool(statusrows.requested())
    key = id(host.state)
    if key not in _reads:
        hosts = inventory.get_active_hosts() or list(inventory)
        for each in hosts:
            said = _overrides(each)
            if said:
                logger.info(said)
        everyone = _fleets[key] = read_fleet(inventory, inventory_file())
        _reads[key] = [(h, gevent.spawn(_resolve_host, h, report, everyone)) for h in hosts]
    jobs = _reads[key]
    gevent.joinall([job for _, job in jobs], raise_error=True)
    if report:
        for each, job in jobs:
            statusrows.note(host.state, each.name, *job.value)
    else:
        raise_if([problem for _, job in jobs for problem in job.value[1]])
    if key not in _plans:
        for each, job in jobs:
            for line in walk_warnings(each.name, job.value[2]):
                logger.warning(line)
        resolved = with_members({h.name: job.value[0] for h, job in jobs})
        everyone = _fleets[key]
        if not report:   # a group's refusals, once every member's plan is known
            raise_if(not_serving(everyone.hosts)
                     + check_groups(resolved, everyone.node_groups, [h.name for h, _ in jobs]))
        plans = fleet(resolved, everyone, refuse=not report)
        plans = with_sources(plans, everyone)
        plans = with_monitors(plans, everyone, refuse=not report)
        if not report:   # every source a plan fetches from answers from its host, before any change (sources.py)
            raise_if(sources.refusals([h for h, _ in jobs], plans, {h.name: job.value[2] for h, job in jobs}))
        _plans[key] = plans
    return _plans[key].get(host.name) is not None


def plan_of(host) -> HostPlan:
    """This host's plan, resolved by preflight()."""
    plan = _plans[id(host.state)][host.name]
    assert plan is not None, "deploy.py includes the tasks only for a host whose preflight() passed"
    return plan


def plans(state) -> dict[str, HostPlan | None]:
    """Every host's plan of this run, by name (None: refused or unreadable, in a status report)."""
    return _plans[id(state)]


def snapshots(state) -> dict[str, dict | None]:
    """Every host's snapshot as the preflight read it, by name (None: not read)."""
    return {each.name: job.value[2] for each, job in _reads[id(state)]}
