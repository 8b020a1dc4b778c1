"""One plan per host: the host's judged data resolved once, against one read
of the host (its snapshot).

    resolve(name, data, snapshot, groups) -> HostPlan

refusals.judge has judged the data alone and handed on what it read (the
lock with its commits applied, the pins, the CA bundle, the secrets);
refusals.check_host_state judges the data against the host. Then every value
the tasks, the templates and the status report need is worked out here, once,
into a frozen HostPlan (types.py). Tasks read the plan and nothing else of
the host's data. A gateway host's gateways are added by gateways.with_gateways,
which needs every host's plan (preflight.py).
"""

from __future__ import annotations

import ipaddress
import posixpath
from dataclasses import replace
from typing import Any, Mapping

from .. import ACCOUNT
from ..hostside import apikey, names
from ..hostside.gate.gate import CHECKS_BUDGET
from ..machine import keyrings, platforms, toolchain
from ..machine.gpus import (
    DRIVER_PREFERENCES,
    Derived,
    GpuInventory,
    cuda_repository,
    derive_flags,
    driver_packages,
    parse_snapshot,
)
from ..models import registry as models
from . import peerdoor, render
from . import types as plantypes
from .defaults import reasons
from .hostports import clashes
from .problems import problem, raise_if
from .refusals import Judged, check_gateway_host, check_host_state, judge
from .render import gate_files
from .roles import fleet_address, monitors, roles
from .types import (
    LOCAL_URL,
    Account,
    AptSource,
    Engine,
    Exposure,
    FrontDoor,
    Gate,
    GatewaySettings,
    GpuDriver,
    HostPlan,
    Image,
    Monitor,
    MonitorSettings,
    NodeExporter,
    NodeGroup,
    Paths,
    PeerDoor,
    PeerPin,
    Pull,
    RollSettings,
    worker_url,
    worker_validated,
)


def server_config(api_key: bytes | None) -> bytes | None:
    """The server's private config file (SGLang's --config YAML, hostside/apikey.py's format), or None."""
    return None if api_key is None else apikey.file_text(api_key.decode())


def paths_of(data: Mapping[str, Any]) -> Paths:
    return Paths.of(data["sglang_home"], data["sglang_tools_dir"], names.GATEWAY_DIR)


def docker_repo(data: Mapping[str, Any], platform: platforms.Platform | None) -> AptSource | None:
    """Docker's apt repository for ``platform``, when sglang_docker_source takes the engine from it."""
    if platform is None or data["sglang_docker_source"] != "docker":
        return None
    url = f"{data['sglang_docker_apt_url']}/{platform.docker_repo_family}"
    return AptSource(f"{url}/gpg", f"deb [signed-by={{keyring}}] {url} {platform.codename} stable",
                     data["sglang_docker_apt_key_fingerprint"].upper())


def vendor_keys(data: Mapping[str, Any], platform: platforms.Platform | None,
                os_release: Mapping[str, Any]) -> tuple[keyrings.VendorKey, ...]:
    """Every vendor apt key the deploy may write on this host, each with its pinned fingerprint (the data's, upper
    case): Docker's where its repository is the engine's source, the Container Toolkit's, and on Debian the CUDA
    repository's (NVIDIA's key for the release, or sglang_nvidia_cuda_apt_key_fingerprint)."""
    found = []
    docker = docker_repo(data, platform)
    if docker is not None:
        found.append(keyrings.VendorKey("Docker", keyrings.DOCKER, docker.key_url, docker.fingerprint))
    found.append(keyrings.VendorKey("NVIDIA Container Toolkit", keyrings.NVIDIA_TOOLKIT,
                                    f"{data['sglang_nvidia_toolkit_apt_url']}/gpgkey",
                                    data["sglang_nvidia_toolkit_apt_key_fingerprint"].upper()))
    cuda = cuda_repo(data, os_release)
    if cuda is not None:
        found.append(keyrings.VendorKey("NVIDIA CUDA", keyrings.NVIDIA_CUDA, cuda.key_url, cuda.fingerprint))
    return tuple(found)


def cuda_repo(data: Mapping[str, Any], os_release: Mapping[str, Any]):
    """NVIDIA's CUDA repository for the host (gpus.cuda_repository), its key pinned by the data's override."""
    override = data["sglang_nvidia_cuda_apt_key_fingerprint"]
    return cuda_repository(data["sglang_nvidia_cuda_apt_url"], os_release.get("id"), os_release.get("version"),
                           os_release.get("arch"), override.upper() if override else None)


def toolkit_repo(data: Mapping[str, Any], gpus: GpuInventory, serves: bool, arch: str | None) -> AptSource | None:
    """NVIDIA's Container Toolkit repository, when this run installs the toolkit: a serving host with GPUs whose
    Docker lacks the nvidia runtime, sglang_install_nvidia_toolkit on."""
    if not (serves and gpus.count and not gpus.nvidia_runtime and data["sglang_install_nvidia_toolkit"]):
        return None
    url = data["sglang_nvidia_toolkit_apt_url"]
    return AptSource(f"{url}/gpgkey", f"deb [signed-by={{keyring}}] {url}/stable/deb/{arch} /",
                     data["sglang_nvidia_toolkit_apt_key_fingerprint"].upper())


def snapshot_spec(data: Mapping[str, Any], report: bool = False, node_group: NodeGroup | None = None,
                  name: str = "") -> dict[str, Any]:
    """What the snapshot of a host reads, from its (already judged) data; ``report``: the status report's too;
    a member of ``node_group`` above rank 0 also tries to reach rank 0's dist-init address; ``name``: the host's
    inventory name (its fleet address when nothing else names one)."""
    paths = paths_of(data)
    spec = {"user": ACCOUNT, "home": paths.home, "tools_dir": paths.tools, "admins": list(data["sglang_admins"]),
            "groups": ["docker"], "uid": data["sglang_uid"], "gid": data["sglang_gid"],
            "dirs": sorted(paths.layout(data["sglang_toolchain_image"]))}
    spec.update(metrics_spec())
    for key, values in peerdoor.door_spec().items():
        spec[key] = sorted({*spec.get(key, ()), *values}) if key == "system_dirs" else [*spec[key], *values]
    if data["sglang_peer_key_file"]:
        spec["peer_address"] = peerdoor.door_address(data, name)
        # who holds the door's port, as the run's door check reads it: a settled host's door is checked too
        spec["door"] = {"port": data["sglang_peer_port"], "config": peerdoor.CONFIG, "cert": peerdoor.TLS_CERT,
                        "key": peerdoor.TLS_KEY}
    # every host: a door turned off takes its entry back, and the workers' user of earlier deploys loses its own
    spec["door_reader"] = {"user": peerdoor.WORKER_USER, "group": peerdoor.WORKER_GROUP,
                           "legacy_user": peerdoor.LEGACY_WORKER_USER}
    spec["keyrings"] = list(keyrings.KEYRING_PATHS)   # every host, every run: apt trusts what they hold
    # the driver's pin (gpus.DRIVER_PREFERENCES), removed once sglang_nvidia_driver_version is None again
    spec["system_dirs"] = sorted({*spec["system_dirs"], posixpath.dirname(DRIVER_PREFERENCES)})
    if report:
        spec["report"] = True
    if node_group is not None and node_group.rank > 0:
        spec["reach"] = [node_group.head, node_group.port, node_group.head_ssh_port]
    return spec


def metrics_spec() -> dict[str, list[str]]:
    """What the snapshot reads of the fleet metrics' files, units and packages, on every host (a host's role
    comes from its groups, known after the read; these are a few small directories)."""
    return {"system_dirs": sorted({plantypes.PROMETHEUS_DIR, plantypes.dropin_dir(plantypes.PROMETHEUS_SERVICE),
                                   plantypes.dropin_dir(plantypes.NODE_EXPORTER_SERVICE), plantypes.SYSTEMD_DIR,
                                   plantypes.PROGRAM_DIR, plantypes.DASHBOARD_DIR}),
            "services": [f"{plantypes.PROMETHEUS_SERVICE}.service", f"{plantypes.NODE_EXPORTER_SERVICE}.service",
                         f"{plantypes.GATE_METRICS_UNIT}.timer", f"{plantypes.GPU_METRICS_UNIT}.timer"],
            "packages": [plantypes.PROMETHEUS_SERVICE, plantypes.NODE_EXPORTER_SERVICE]}


def resolve(name: str, data: Mapping[str, Any], snapshot: Mapping[str, Any], groups=(),
            node_group: NodeGroup | None = None) -> HostPlan:
    """The host's plan; raises DeployDataError naming every problem."""
    judged = judge(name, data)
    raise_if(judged.problems)
    return resolve_judged(name, judged, snapshot, groups, node_group)


def group_tp(derived: dict[str, Derived], group: NodeGroup | None) -> dict[str, Derived]:
    """A member's --tp-size is the group's GPUs: this host's (sglang_tp_size, derived or set, per host) times the
    members (nodegroups.check_groups refuses members whose counts differ)."""
    if group is None:
        return derived
    each = derived["sglang_tp_size"]
    return {**derived, "sglang_tp_size": Derived(each.value * group.nnodes, f"{each.value} per host "
                                                 f"({each.source}) x {group.nnodes} members of {group.name}", each)}


def resolve_judged(name: str, judged: Judged, snapshot: Mapping[str, Any], groups=(),
                   node_group: NodeGroup | None = None) -> HostPlan:
    """resolve() for data refusals.judge accepted, from what it read; ``node_group``: its multi-node group."""
    data, lock = judged.data, judged.lock
    serves, runs_gateways = roles(groups)
    gpus = parse_snapshot(snapshot.get("gpus"))
    derived = derive_flags(data, gpus)
    bind, unbound = member_bind(name, data, node_group if serves else None)
    raise_if(unbound + check_host_state(name, data, snapshot, gpus, serves, derived,
                                      gets_docker=serves or runs_gateways)
             + (check_reach(name, node_group, snapshot) if node_group and serves else [])
             + clashes(name, data, serves, runs_gateways, monitors(groups), node_group if serves else None)
             + (check_gateway_host(name, judged) if runs_gateways else []))
    derived = group_tp(derived, node_group if serves else None)
    paths = paths_of(data)
    served = models.served(data)
    kept = tuple(models.kept(data))
    tag = data["sglang_image"]
    locked_image = lock.pinned_image(tag) if lock is not None else None
    image = locked_image if locked_image and not data["sglang_image_archive"] else tag
    build = None
    if data["sglang_toolchain_image"] and serves:
        assert judged.pins is not None  # judge() refuses the data when the toolchain image is on without them
        build = toolchain.build_context(data, judged.pins, judged.ca_bundle, image,
                                        wheel_hashes=lock.wheels if lock else None, tag_from=tag)
    values = {**render.template_values(data, derived), "sglang_bind_address": bind}
    os_release = snapshot.get("os") or {}
    platform = platforms.lookup(os_release.get("id"), os_release.get("version"))
    engine_works = platforms.engine_works(snapshot.get("docker") or {})
    gets_docker = serves or runs_gateways   # a host only in `monitor` never gets Docker
    installs = gets_docker and platform is not None and not engine_works   # a working engine is left alone
    # The server, as the gate reaches it on the host: loopback, or the one address a member listens on.
    url = worker_url(bind, data["sglang_port"]) if node_group and serves else LOCAL_URL.format(port=data["sglang_port"])
    pin = data["sglang_nvidia_driver_version"]
    plan = HostPlan(
        name=name, account=Account(name=ACCOUNT, uid=data["sglang_uid"], gid=data["sglang_gid"],
                                   admins=tuple(data["sglang_admins"])),
        paths=paths, layout=paths.layout(build is not None),
        engine=Engine(
            platform=platform, works=engine_works, source=data["sglang_docker_source"],
            apt_url=data["sglang_docker_apt_url"], repo=docker_repo(data, platform) if installs else None,
            packages=platforms.docker_packages(platform, data["sglang_docker_source"])
            if installs and platform is not None else (),
            apt_cache_time=data["sglang_apt_cache_time"], install_nvidia_toolkit=data["sglang_install_nvidia_toolkit"],
            nvidia_toolkit_apt_url=data["sglang_nvidia_toolkit_apt_url"],
            arch=os_release.get("arch"), toolkit=toolkit_repo(data, gpus, serves, os_release.get("arch"))),
        gpus=gpus,
        served=served, kept=kept, registry=models.registry(data), warnings=tuple(models.warnings(data)),
        lock=lock, locked={m.key: lock.models[m.key] for m in kept} if lock else {},
        pull=Pull(hub_version=data["sglang_huggingface_hub_version"], index_url=data["sglang_pip_index_url"],
                  hf_endpoint=data["sglang_hf_endpoint"], lock_wait=data["sglang_pull_lock_wait"],
                  workers=data["sglang_pull_workers"], min_free=data["sglang_pull_min_free_mib"] << 20,
                  token=judged.token, prune=data["sglang_prune_models"],
                  venv_module=bool((snapshot.get("tools") or {}).get("venv_module"))),
        api_key=judged.api_key, server_config=server_config(judged.api_key),
        image=Image(tag=tag, locked=locked_image, pulled=image, archive=data["sglang_image_archive"], build=build,
                    serving=build.tag if build else image),
        port=data["sglang_port"],
        derived=derived, flags=tuple(render.launch_flags(values, derived, served, node_group if serves else None,
                                                        models.drafter_of(served, kept))),
        template_values=values,
        gate=Gate(url=url,
                  api_key_file=paths.server_config if judged.api_key else None,
                  served_name=served.served_name,
                  baseline_tok_s=served.baseline_tok_s, ready_timeout=data["sglang_ready_timeout"],
                  toolchain_check=toolchain.check_command() if build else None,
                  kernel_check_nvcc=f"{toolchain.CUDA_HOME}/bin/nvcc" if build and gpus.count else None,
                  always=data["sglang_validate"] == "always", retry_failed=data["sglang_retry_failed"],
                  metrics_url=f"{url}/metrics",
                  speculative=served.speculative is not None,
                  min_accept_length=served.speculative.min_accept_length if served.speculative else None,
                  turn_seconds=data["sglang_ready_timeout"] + CHECKS_BUDGET),
        compose_template=data["sglang_compose_template"],
        serves=serves,
        front_door=FrontDoor(image=data["sglang_router_image"] or "", image_archive=data["sglang_router_image_archive"],
                             control_plane_config=server_config(judged.admin_key),
                             settings=GatewaySettings.of(data)) if runs_gateways else None,
        exposure=Exposure(bind_address=bind, trusted_network=data["sglang_trusted_network"]),
        roll_settings=RollSettings(drain_timeout=data["sglang_drain_timeout"],
                                   max_unavailable=data["sglang_max_unavailable"],
                                   validated_at_start=worker_validated(snapshot)),
        monitor=Monitor(settings=MonitorSettings.of(data)) if monitors(groups) else None,
        node_group=node_group if serves else None,
        driver=GpuDriver(
            pin=pin, packages=tuple(driver_packages(pin, os_release.get("id"), data["sglang_nvidia_driver_open"]))
            if pin else (),
            repo=cuda_repo(data, os_release) if pin else None,
            allow_reboot=data["sglang_allow_reboot"], install_fabric_manager=data["sglang_install_fabric_manager"],
            enable_persistence=data["sglang_enable_persistence"]),
        vendor_keys=vendor_keys(data, platform, os_release),
    )
    compose = render.compose_yaml(plan)
    exporter = NodeExporter(data["sglang_node_exporter_bind_address"], data["sglang_node_exporter_port"]) \
        if data["sglang_node_exporter"] else None
    scripts = render.scripts(plan)
    gate = replace(plan.gate, files=gate_files(paths.home, scripts, paths.docker, compose))
    door = peer_door(plan, data, judged.peer_key, snapshot) if serves else None
    return replace(plan, compose=compose, compose_sha=names.text_digest(compose), scripts=scripts, gate=gate,
                   peer_door=door,
                   node_exporter=exporter and replace(
                       exporter, dropin=render.node_exporter_dropin(exporter),
                       gate_metrics_units={**render.gate_metrics_units(plan), **render.gpu_metrics_units(plan)}
                       if serves else {}))


def peer_door(plan: HostPlan, data: Mapping[str, Any], key: bytes | None,
              snapshot: Mapping[str, Any]) -> PeerDoor | None:
    """The host's peer door (peerdoor.py), with its files; None without the site's key."""
    if key is None:
        return None
    address = (snapshot.get("peer") or {}).get("address")
    assert address, "check_host_state refuses a door whose address is not the host's"
    locked = plan.lock.models if plan.lock is not None else {}
    pins = tuple(PeerPin(model.repo_id, model.revision, locked[key_].content if key_ in locked else None,
                         frozenset(f["sha256"] for f in locked[key_].files) if key_ in locked else frozenset())
                 for key_, model in sorted(plan.registry.items()) if models.is_commit(model.revision))
    door = PeerDoor(address=address, port=data["sglang_peer_port"], group=plan.account.name,
                    hub=plan.paths.hub, pins=pins, key=key, key_id=peerdoor.key_id(key))
    config, key_conf, dropin = peerdoor.render(door, reasons()["sglang_peer_bind_address"])
    return replace(door, config=config, key_conf=key_conf, dropin=dropin)


def member_bind(name: str, data: Mapping[str, Any], group: NodeGroup | None) -> tuple[str, list[str]]:
    """Where this host's API listens, and the refusal when it cannot be worked out. A member runs on the host's
    network without a key, so sglang_bind_address as every address ('0.0.0.0', '::', the default) would be every
    interface of the host: a member binds its fleet address instead (roles.fleet_address), which must then be an IP
    address. Any other host, or an address the data names: sglang_bind_address as it is."""
    bind = data["sglang_bind_address"]
    if group is None or not ipaddress.ip_address(bind).is_unspecified:
        return bind, []
    fleet = fleet_address(name, data)
    try:
        return str(ipaddress.ip_address(fleet)), []
    except ValueError:
        return bind, [problem(name, "sglang_bind_address", f"{bind!r} (every address) on a member of group "
                              f"{group.name!r}, whose API answers without a key on the host's own network, and its "
                              f"fleet address {fleet!r} is a name, not an IP address to listen on instead",
                              "set sglang_bind_address to this member's IP address on the group's network, e.g. "
                              "'10.0.0.12' (or set sglang_worker_address to it)")]


def check_reach(host: str, group: NodeGroup, snapshot: Mapping[str, Any]) -> list[str]:
    """A member above rank 0 that did not reach rank 0's dist-init address in its snapshot (hostside/read/snapshot.py's
    reach: bounded in time): refused, naming the address."""
    found = snapshot.get("reach")
    if group.rank == 0 or found is None or found.get("ok"):
        return []
    return [problem(host, "sglang_worker_address", f"this member of group {group.name!r} cannot reach rank 0 "
                    f"({group.head_name}) at {group.dist_init_addr}: {found.get('said')}",
                    f"set rank 0's sglang_worker_address to an address every member reaches, or open port "
                    f"{group.port} (and the {group.ports - 1} above it) from this host")]


