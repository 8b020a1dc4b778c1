"""The fleet's metrics, control side: what each host of the `monitor` group
scrapes, worked out from the whole inventory.

Every serving host's SGLang /metrics (job `sglang`), every gateway's
Prometheus port (job `sglang-router`), every host's node exporter (job
`node`) and the monitor's own Prometheus (job `prometheus`), each labelled
with its host, inventory group, model key and role; a multi-node group's
member's worker and node targets also with its group and rank (`node_group`,
`node_rank`). Hosts outside this run
(--limit) are scraped too: their data says where they listen. A target is
reached where it is published: the address it binds when that is one
address, the host's fleet address (roles.fleet_address) when it binds every address, and loopback only
from the same host. preflight.py calls `with_monitors()` with the run's Fleet
once every host's plan is known; its refusals are here (check_monitor), the text in
render.py, the host side in tasks/monitor.py.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping

from ..hostside.formats.netloc import netloc
from ..plan import render
from ..plan.problems import DeployDataError, problem, raise_if
from ..plan.roles import MONITOR_GROUP, ROLE_GROUPS
from ..plan.types import GatewaySettings, HostPlan, Target
from .gateways import place

if TYPE_CHECKING:
    from .hosts import Fleet

JOB_WORKER, JOB_GATEWAY, JOB_NODE, JOB_PROMETHEUS = "sglang", "sglang-router", "node", "prometheus"




def scrape_address(bind: str, port: int, reach: str, same_host: bool) -> str | None:
    """Where a monitor host reaches a port bound on ``bind``; None: loopback, on another host."""
    address = ipaddress.ip_address(bind)
    if address.is_loopback:
        return netloc(bind, port) if same_host else None
    return netloc(reach if address.is_unspecified else bind, port)


def _labels(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


@dataclass(frozen=True)
class Unscrapable:
    """A port a monitor host would scrape on another host, where that host binds it to loopback only."""

    host: str
    key: str       # the data key that binds it
    bind: str
    job: str
    loopback: bool = True   # False: the value is no IP address at all


def check_monitor(name: str, scraped: list, unreachable: list[Unscrapable]) -> list[str]:
    """A monitor host's problems with the fleet: ``scraped``, the inventory's serving and gateway hosts, and the
    ports of other hosts bound where it cannot reach them."""
    errors = []
    if not scraped:
        errors.append(problem(name, "inventory", f"the {MONITOR_GROUP} group has no host to scrape: no host of "
                              "the inventory serves a model or runs a gateway", "add the serving hosts (e.g. the "
                              f"production group) to the inventory, or take {name} out of the {MONITOR_GROUP} group"))
    for each in unreachable:
        if not each.loopback:
            errors.append(problem(each.host, each.key, f"{each.bind!r} is not an IP address, so monitor host {name} "
                                  f"cannot tell where to scrape this host's {each.job} metrics",
                                  "use an IP address, e.g. '10.0.0.11'"))
            continue
        errors.append(problem(each.host, each.key, f"{each.bind} is loopback, but monitor host {name} scrapes "
                              f"this host's {each.job} metrics from another machine",
                              f"set {each.key} for {each.host} to the address {name} reaches it on (e.g. its "
                              "private interface's address)"))
    return errors


def targets_of(monitor: str, everyone: Fleet) -> tuple[list[Target], list[Unscrapable]]:
    """Every target ``monitor`` scrapes, in inventory order, and the ports it could not reach."""
    found: list[Target] = []
    unreachable: list[Unscrapable] = []

    def add(job, host_name, key, bind, port, **labels):
        try:
            address = scrape_address(bind, port, reach, host_name == monitor)
        except ValueError:   # a host outside this run (--limit) is not judged: its data may be malformed
            unreachable.append(Unscrapable(host_name, key, bind, job, loopback=False))
            return
        if address is None:
            unreachable.append(Unscrapable(host_name, key, bind, job))
        else:
            found.append(Target(job, address, _labels(host=host_name, **labels)))

    for each in everyone.hosts:
        data, reach = each.data, each.address
        serving = ",".join(g for g in each.groups if g not in ROLE_GROUPS) or "inventory"
        model = data.get("sglang_model") if each.serves else ""
        # A multi-node group's member: its worker and node targets name its group and rank, so the rules can judge
        # the group from its members' series (sglang-alerts.yml: SGLangGroupMemberDown, SGLangGroupStale).
        member = everyone.node_groups.get(each.name)
        grouped = {"node_group": member.name, "node_rank": str(member.rank)} if member is not None else {}
        if each.serves and data.get("sglang_enable_metrics"):
            add(JOB_WORKER, each.name, "sglang_bind_address", data["sglang_bind_address"], data["sglang_port"],
                group=serving, model=model, role="worker", **grouped)
        if each.runs_gateways:
            for spot in place(GatewaySettings.of(data), everyone.workers):
                add(JOB_GATEWAY, each.name, "sglang_router_prometheus_bind_address",
                    data["sglang_router_prometheus_bind_address"], spot.prometheus_port,
                    group="router", model=spot.key, role="gateway")
        if data.get("sglang_node_exporter"):
            add(JOB_NODE, each.name, "sglang_node_exporter_bind_address", data["sglang_node_exporter_bind_address"],
                data["sglang_node_exporter_port"], group=",".join(each.groups) or "inventory", model=model or "",
                role="node", **grouped)
    return found, unreachable


def with_monitor(plan: HostPlan, everyone: Fleet) -> HostPlan:
    """A monitor host's plan with its Prometheus: targets, config, rules, drop-in and dashboard; raises naming
    every problem."""
    found, unreachable = targets_of(plan.name, everyone)
    raise_if(check_monitor(plan.name, [each for each in everyone.hosts if each.serves or each.runs_gateways],
                           unreachable))
    assert plan.monitor is not None, "with_monitors() calls this for monitor hosts only"
    settings = plan.monitor.settings
    own = scrape_address(*_split(settings.listen_address), "127.0.0.1", True)
    assert own is not None  # same_host: loopback too
    found.append(Target(JOB_PROMETHEUS, own, _labels(host=plan.name, group="monitor", model="", role="monitor")))
    monitor = replace(plan.monitor, targets=tuple(found))
    return replace(plan, monitor=replace(monitor, config=render.prometheus_config(monitor),
                                         rules=render.alert_rules(settings), dropin=render.prometheus_dropin(settings),
                                         dashboard=render.dashboard()))


def _split(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


def with_monitors(plans: Mapping[str, HostPlan | None], everyone: Fleet,
                  refuse: bool = True) -> dict[str, HostPlan | None]:
    """Every monitor host's plan with its Prometheus over the whole inventory; refused when any monitor host has
    a problem (a status report keeps such a plan as it is)."""
    out, errors = dict(plans), []
    monitors = {name: plan for name, plan in plans.items() if plan is not None and plan.monitors}
    if not monitors:
        return out
    for name, plan in monitors.items():
        try:
            out[name] = with_monitor(plan, everyone)
        except DeployDataError as error:
            errors += error.problems
    if refuse:
        raise_if(errors)
    return out
