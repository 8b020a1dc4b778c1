"""The fleet front door, control side: which hosts serve and which route,
the workers of each model, and each gateway host's gateways.

A host in any inventory group but `router` serves a model; a host in
`router` runs one gateway (Shepherd Model Gateway, SMG) per model it fronts, each in its
own compose project under router/<slug>/, with ports that follow the model's
position in the registry. preflight.py calls `fleet()` with the run's Fleet (hosts.py)
once every host's plan is known; its refusals are here (check_fleet, check_open_worker,
check_pool), the rendering in render.py,
the host side in hostside/gateway_launch.py and hostside/roll/gateway_workers.py.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..hostside import names
from ..plan import render
from ..plan.problems import DeployDataError, problem, raise_if
from ..plan.render import gate_files
from ..plan.roles import ROUTER_GROUP
from ..plan.types import Front, Gateway, GatewaySettings, HostPlan, Paths, Placement, Roll, Worker, worker_url

if TYPE_CHECKING:
    from .hosts import Fleet, InventoryHost


def own_url(published_on: str, port: int) -> str:
    """How the gateway host itself reaches a gateway port published on ``published_on`` (the gate, the worker
    API, the status report): loopback when it is every address, else that address."""
    if ipaddress.ip_address(published_on).is_unspecified:
        published_on = "::1" if ":" in published_on else "127.0.0.1"
    return worker_url(published_on, port)


def fleet_worker(host: InventoryHost, plan: HostPlan | None) -> Worker:
    """The Worker of a serving host, from its data and, when it is in this run, its plan."""
    return Worker(host=host.name, url=worker_url(host.address, host.data["sglang_port"]),
                  docker_dir=f"{host.data.get('sglang_home')}/{names.DOCKER_DIR}",
                  compose_sha=plan.compose_sha if plan is not None else None)


def gateway_slug(key: str) -> str:
    """A registry key as a compose project name allows it: lowercase letters, digits, '-' and '_'."""
    return re.sub(r"[^a-z0-9_-]+", "-", key.lower()).strip("-_") or "model"


def place(settings: GatewaySettings, workers: Mapping[str, Sequence[Any]]) -> list[Placement]:
    """The gateways a gateway host runs, in registry order: the keys it lists, else every key some host
    serves; each at the ports of its position in the registry."""
    out = []
    for offset, key in enumerate(settings.registry):
        if key in settings.models if settings.models is not None else bool(workers.get(key)):
            out.append(Placement(key, gateway_slug(key), settings.port + offset, settings.prometheus_port + offset))
    return out


def with_gateways(plan: HostPlan, workers: Mapping[str, list[Worker]]) -> HostPlan:
    """A gateway host's plan with its gateways, one per fronted model; raises naming every fleet problem."""
    front_door = plan.front_door
    assert front_door is not None, "fleet() calls this for gateway hosts only"
    placed = place(front_door.settings, workers)
    raise_if(check_fleet(plan, workers, placed))
    gateways = []
    for spot in placed:
        model = plan.registry[spot.key]
        gateway = Gateway(
            key=spot.key, slug=spot.slug, served_name=model.served_name, port=spot.port,
            prometheus_port=spot.prometheus_port, dir=f"{plan.paths.gateways}/{spot.slug}",
            workers=tuple(sorted(workers.get(spot.key, ()), key=lambda w: w.host)),
            gate=replace(plan.gate, url=own_url(front_door.settings.published_on, spot.port),
                         served_name=model.served_name, baseline_tok_s=model.baseline_tok_s, toolchain_check=None,
                         metrics_url=None))
        compose = render.gateway_compose_yaml(plan, gateway)
        scripts = render.gateway_scripts(plan, gateway)
        gate = replace(gateway.gate, files=gate_files(gateway.dir, scripts, gateway.dir, compose))
        gateways.append(replace(gateway, compose=compose, compose_sha=names.text_digest(compose), scripts=scripts,
                                gate=gate))
    layout = dict(plan.layout, **{plan.paths.gateways: "755", plan.paths.gateway_secrets: "700"},
                  **{g.dir: "755" for g in gateways})
    return replace(plan, front_door=replace(front_door, gateways=tuple(gateways)), layout=layout)


def fronts(gateway_hosts, workers: Mapping[str, Sequence[Any]]) -> dict[str, tuple[Front, ...]]:
    """
    The gateways in front of each model's workers: every gateway host of the
    inventory (in this run or not: its data says where its gateways are) and
    the gateways it places, by model key.
    """
    out: dict[str, list[Front]] = {}
    for gateway_host in gateway_hosts:
        data = gateway_host.data
        paths = Paths.of(data["sglang_home"], data["sglang_tools_dir"], names.GATEWAY_DIR)
        settings = GatewaySettings.of(data)
        for spot in place(settings, workers):
            out.setdefault(spot.key, []).append(Front(
                gateway_host=gateway_host.name, slug=spot.slug, url=own_url(settings.published_on, spot.port),
                metrics=own_url(settings.prometheus_bind_address, spot.prometheus_port) + "/metrics",
                directory=f"{paths.gateways}/{spot.slug}",
                key_file=paths.control_plane_config))
    return {key: tuple(found) for key, found in out.items()}


# ---------------------------------------------------------------- the gateway pass's refusals

def check_fleet(plan: HostPlan, workers: Mapping[str, list[Worker]], placed: list[Placement]) -> list[str]:
    """A gateway host's problems with the fleet: ``workers`` (model key -> its serving hosts) and the gateways
    gateways.place() worked out for it."""
    errors: list[str] = []
    assert plan.front_door is not None, "check_fleet judges gateway hosts only"
    settings, name = plan.front_door.settings, plan.name

    def err(key: str, what: str, fix: str) -> None:
        errors.append(problem(name, key, what, fix))

    if not placed:
        err("sglang_router_models", "no host of the inventory serves a model, so this gateway host would have no "
            "workers", f"add serving hosts (e.g. the production group) to the inventory, or take {name} out of "
            f"the {ROUTER_GROUP} group")
    for key in settings.models or ():
        if key not in settings.registry:
            err("sglang_router_models", f"{key!r} is not a key of sglang_models", "use registry keys")
        elif not workers.get(key):
            err("sglang_router_models", f"no host of the inventory serves {key!r}, so its gateway would have no "
                "workers", f"serve it on some host (sglang_model = {key!r}), or remove it from the list")
    # Every fronted entry, listed or fronted because some host serves it (one outside this run too), is whole.
    for spot in placed:
        if spot.key not in plan.registry:
            err("sglang_models", f"entry {spot.key!r}, which this gateway host fronts, is not a well-formed "
                "registry entry", "give it repo_id, revision, served_name, role and baseline_tok_s (or "
                "'unvetted': True) as group_data/all.py shows, or stop serving it")
    ports: dict[int, str] = {}
    for spot in placed:
        for port_key, port in (("sglang_router_port", spot.port), ("sglang_router_prometheus_port",
                                                                    spot.prometheus_port)):
            if plan.serves and port == plan.port:
                err(port_key, f"the gateway of {spot.key} would listen on {port}, the port this host's own server "
                    "already publishes (sglang_port)", f"set {port_key} to a free port, e.g. {port + 80}")
            elif port in ports:
                err(port_key, f"the gateway of {spot.key} would listen on {port}, which the {ports[port]} uses too",
                    "give sglang_router_port and sglang_router_prometheus_port ranges that do not overlap")
            elif port > 65535:
                err(port_key, f"the gateway of {spot.key} would listen on {port}, above 65535", "use a lower port")
            ports[port] = f"{port_key} of {spot.key}"
    slugs: dict[str, str] = {}
    for spot in placed:
        if spot.slug in slugs:
            err("sglang_router_models", f"{spot.key!r} and {slugs[spot.slug]!r} make the same directory name",
                "front only one of them from this host")
        slugs[spot.slug] = spot.key
    # The front door: without a key, the gateway's POST /workers is open to whoever reaches its port.
    if plan.api_key is None and not plan.exposure.trusted_network and \
            not ipaddress.ip_address(settings.published_on).is_loopback:
        where = "every address" if ipaddress.ip_address(settings.published_on).is_unspecified else \
            settings.published_on
        err("sglang_api_key_file", f"None, and this host's gateways would be published on {where} "
            "(sglang_router_bind_address): anyone who reaches a gateway's port could use every worker of its "
            "model", "set sglang_api_key_file (clients then send its key), or "
            "sglang_router_bind_address = '127.0.0.1' when every client runs on this host, or, on a network where "
            "everyone who reaches the port may call it, sglang_trusted_network = True")
    if settings.health_check_timeout >= settings.health_check_interval:
        err("sglang_router_health_check_timeout", f"{settings.health_check_timeout} s is not below "
            f"sglang_router_health_check_interval ({settings.health_check_interval} s)",
            "use a timeout shorter than the interval")
    return errors


def check_open_worker(plan: HostPlan, fronted_by: tuple[str, ...] = ()) -> list[str]:
    """A serving host whose API would answer anyone on the network without a key: refused unless it is
    published on loopback only or the operator said the network is trusted. ``fronted_by``: the gateway hosts
    in front of it (they reach it over the network, so loopback is no fix for it)."""
    exposure = plan.exposure
    if plan.api_key is not None or exposure.trusted_network or ipaddress.ip_address(exposure.bind_address).is_loopback:
        return []
    where = f"{exposure.bind_address}:{plan.port} (sglang_bind_address)"
    behind = f", which the gateways of {', '.join(fronted_by)} reach over the network" if fronted_by else ""
    loopback = "" if fronted_by else "sglang_bind_address = '127.0.0.1' when no gateway fronts this host and " \
        "every client runs on it, or "
    return [problem(plan.name, "sglang_api_key_file", f"None, and this host's API would be published on {where}"
                    f"{behind}: anyone who reaches it could call every SGLang route, those that load other weights "
                    "or a LoRA adapter and flush the cache included, with no restart, while the gate's stamp still "
                    "says the validated config serves", "set sglang_api_key_file (clients and the gateways then "
                    f"send its key), or {loopback}on a network where everyone who reaches the port may call it, "
                    "sglang_trusted_network = True")]


def check_pool(name: str, setting: int | str, allowed: int, pool: str, size: int) -> list[str]:
    """A serving host's problem with the pool it rolls in: more of its workers out at once than it can spare
    (``allowed``: sglang_max_unavailable, ``setting``, worked out for the pool's ``size``)."""
    if size > 1 and allowed >= size:
        share = f" ({setting!r} of {size} is {allowed})" if isinstance(setting, str) else ""
        return [problem(name, "sglang_max_unavailable", f"{setting!r}{share} would let every one of the {size} "
                        f"workers of {pool} be out of service at once, and its gateways would have none to send "
                        "requests to", f"use a number below {size}, e.g. 1, or a share such as \"25%\"")]
    return []


def unavailable(setting: int | str, size: int) -> int:
    """How many of a pool's ``size`` workers may be out of service at once: sglang_max_unavailable as a count,
    or as a share "N%" of the pool rounded down, never below 1 (as Kubernetes' maxUnavailable)."""
    if isinstance(setting, str):
        return max(1, size * int(setting.rstrip("%")) // 100)
    return setting


def fleet(plans: Mapping[str, HostPlan | None], everyone: Fleet, refuse: bool = True) -> dict[str, HostPlan | None]:
    """
    Every gateway host's plan with its gateways: the workers of each model are
    the Fleet's (the inventory's serving hosts of that model, those outside
    this run too, which then keep the membership they have); refused when any
    gateway host has a problem with the fleet (a status report keeps such a
    plan as it is).
    """
    workers = {key: [fleet_worker(each, plans.get(each.name)) for each in hosts]
               for key, hosts in everyone.workers.items()}
    out, errors = dict(plans), []
    for name, plan in plans.items():
        if plan is not None and plan.runs_gateways:
            try:
                out[name] = with_gateways(plan, workers)
            except DeployDataError as error:
                errors += error.problems
    every_front = fronts([each for each in everyone.hosts if each.runs_gateways], everyone.workers)
    for name, plan in out.items():
        if plan is not None and plan.front_door is not None and plan.front_door.gateways:
            gateways = tuple(replace(g, sole_front=len(every_front.get(g.key, ())) == 1)
                             for g in plan.front_door.gateways)
            out[name] = replace(plan, front_door=replace(plan.front_door, gateways=gateways))
    fronting = every_front if not errors else {}
    for key, behind in fronting.items():
        for worker in workers.get(key, ()):
            plan = out.get(worker.host)
            if plan is not None and plan.serves:
                pool = f"{key} behind " + ", ".join(f"{f.gateway_host}/{f.slug}" for f in behind)
                size = len(workers[key])
                settings = plan.roll_settings
                allowed = unavailable(settings.max_unavailable, size)
                errors += check_pool(plan.name, settings.max_unavailable, allowed, pool, size)
                others = tuple(f for other, found in fronting.items() if other != key for f in found)
                out[worker.host] = replace(plan, roll=Roll(
                    url=worker.url, fronts=behind, pool=pool, pool_size=size, max_unavailable=allowed,
                    drain_timeout=settings.drain_timeout, others=others,
                    members=tuple((each.host, each.url) for each in workers[key]), stamped=settings.validated_at_start,
                    model=plan.served.served_name))
    # No worker answers the network without a key unless the operator said so (check_open_worker).
    for name, plan in plans.items():
        if plan is not None and plan.serves:
            behind = every_front.get(plan.served.key, ())
            errors += check_open_worker(plan, tuple(dict.fromkeys(front.gateway_host for front in behind)))
    if refuse:
        raise_if(errors)
    return out
