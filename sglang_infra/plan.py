"""One plan per host: the host's data judged and resolved once, against one
read of the host (its snapshot).

    resolve(name, data, snapshot) -> HostPlan

Every refusal comes from this one pass, made for every host before anything
runs on any host, one line per problem naming the host, the key and the fix:
- `check_data`: the data alone (types, typos, unpinned image, the model
  registry, the toolchain pins). Pure, so it is unit-tested without hosts.
- `check_host_state`: the data against the host as it is (an account with
  other ids, admins that do not exist, an unsupported OS, the GPU rules).
Then every value the tasks need is worked out here, once, into a frozen
HostPlan. Tasks read the plan and nothing else of the host's data.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Mapping

import click
from pyinfra import logger
from pyinfra.api.exceptions import PyinfraError

from . import ACCOUNT, models, platforms, toolchain
from . import lock as lockfile
from .gpus import Derived, GpuInventory, derive_flags, parse_snapshot, plan_problems
from . import render
from .render import launch_flags, template_path
from .schema import SCHEMA, image_problem, system_dir_problem

class DeployDataError(PyinfraError):
    """Raised while preparing the deploy, naming every problem; pyinfra exits non-zero."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.message = message
        self.problems = problems or [message]

    def show(self, file=None):
        logger.warning(f"--> {click.style('refused', 'red', bold=True)}: {self.message}")


@lru_cache(maxsize=1)
def _refusal() -> type:
    """
    DeployDataError as pyinfra's CliError too: its command line passes a
    CliError through untouched (pyinfra_cli/cli.py) and our show() prints the
    tool's message alone, without a source path. Made on first use, because
    importing pyinfra_cli monkey-patches threading for the whole process.
    """
    from pyinfra_cli.exceptions import CliError

    return type("DeployRefused", (DeployDataError, CliError), {"show": DeployDataError.show})


# Keys an operator may add for their own use (e.g. in their own group files): never judged, never used here.
SITE_PREFIX = "site_"


def pyinfra_keys() -> frozenset[str]:
    """pyinfra's own data keys, from its own tables: the global arguments and every connector's data."""
    from pyinfra.api.arguments import all_global_arguments
    from pyinfra.api.connectors import get_all_connectors

    keys = {name for name, _ in all_global_arguments()}
    for connector in get_all_connectors().values():
        keys.update(getattr(connector, "data_meta", {}) or {})
    return frozenset(keys)


def _suggest(key: str, known: frozenset[str]) -> str | None:
    normal = key.lower().replace("-", "_")
    for candidate in (normal, f"sglang_{normal}", f"_{normal}"):
        prefixed = sorted(k for k in known if k.startswith(candidate))
        if prefixed:
            return prefixed[0]
    close = difflib.get_close_matches(normal, known, n=1, cutoff=0.6)
    return close[0] if close else None


def check_data(host_name: str, data: Mapping[str, Any]) -> list[str]:
    """All problems with one host's merged data, as complete sentences."""
    errors: list[str] = []

    def err(key: str, problem: str, fix: str) -> None:
        errors.append(f"host {host_name}: {key}: {problem}. Fix: {fix}.")

    theirs = pyinfra_keys()
    for key in sorted(data):
        if key in SCHEMA or key in theirs or key.startswith(SITE_PREFIX):
            continue
        guess = _suggest(key, frozenset(SCHEMA) | theirs)
        hint = f"did you mean {guess}? " if guess else ""
        err(key, "unknown key: neither this project's, nor pyinfra's own (a typo would silently fall back to the "
                 "default)", f"{hint}the known keys are listed in README.md and group_data/all.py; keys of your "
                             f"own start with {SITE_PREFIX}")

    missing = [key for key in SCHEMA if key not in data]
    for key in missing:
        err(key, "missing", "keep group_data/all.py in place; it defines every default")

    for key, spec in SCHEMA.items():
        if key not in data or key == "sglang_image":
            continue
        value = data[key]
        if not spec.check(value):
            err(key, f"{value!r} is not {spec.kind}", spec.fix)

    if "sglang_image" in data:
        problem = image_problem(data["sglang_image"])
        if problem:
            err("sglang_image", f"{problem}; an upgrade must be a deliberate change, not drift on a restart",
                SCHEMA["sglang_image"].fix)

    if errors:
        return errors

    # The lock, when there is one: its commits stand in for a registry revision of None.
    try:
        lock = lock_of(data)
    except lockfile.LockError as error:
        err("sglang_lock", str(error).split(". Fix: ")[0], str(error).split(". Fix: ")[-1])
        return errors
    if lock is not None:
        data = lockfile.with_commits(lock, data)

    # Combinations that cannot work.
    template = template_path(data["sglang_compose_template"])
    if not template.is_file():
        err("sglang_compose_template", f"{template} does not exist",
            "point it at a file under templates/, e.g. 'templates/compose.yaml.j2'")
    for key, problem, fix in models.problems(data):
        err(key, problem, fix)
    toolchain_ok = True
    if data["sglang_toolchain_image"]:
        for key, problem, fix in toolchain.problems(data):
            toolchain_ok = False
            err(key, problem, fix)
    if lock is not None:
        pins = toolchain.pins(data) if data["sglang_toolchain_image"] and toolchain_ok else None
        for key, problem, fix in lockfile.problems(lock, data, pins):
            err(key, problem, fix)
    endpoint = data["sglang_hf_endpoint"]
    if endpoint and endpoint.startswith("http://") and models.control_token(data):
        err("sglang_hf_endpoint", f"{endpoint} is plain http, and a Hub token is configured (HF_TOKEN or "
            "sglang_hf_token_file): the token would cross the network in clear",
            "use the mirror's https URL, or run without a token for it")
    if data["sglang_api_key_file"]:
        key_text = models.read_secret(data["sglang_api_key_file"]) or b""
        if not re.fullmatch(rb"[A-Za-z0-9._~+/=-]{16,512}", key_text):
            err("sglang_api_key_file", f"{data['sglang_api_key_file']} does not hold one API key of 16-512 "
                "letters, digits or ._~+/=- (a client sends it in an HTTP header)",
                "put only the key in the file, e.g. from `openssl rand -hex 32`")
    home, tools = data["sglang_home"], data["sglang_tools_dir"]
    for key, path in (("sglang_home", home), ("sglang_tools_dir", tools)):
        problem = system_dir_problem(path)
        if problem:
            err(key, problem, "use a directory of its own, e.g. '/opt/sglang' or '/var/lib/sglang-tools'")
    if tools == home or tools.startswith(home + "/") or home.startswith(tools + "/"):
        err("sglang_tools_dir", f"{tools} overlaps sglang_home {home}; the runbook forbids a Python environment "
            "under the home", "use a directory outside it, e.g. '/var/lib/sglang-tools'")
    if data["sglang_docker_source"] == "docker" and not data["sglang_docker_apt_url"]:
        err("sglang_docker_apt_url", "empty while sglang_docker_source='docker'", "set Docker's repository URL")
    return errors


def check_host_state(host_name: str, data: Mapping[str, Any], snapshot: Mapping[str, Any],
                     gpus: GpuInventory | None = None, serves: bool = True) -> list[str]:
    """Problems between the data and the host as it is now (its snapshot); ``serves``: it runs a model."""
    errors: list[str] = []

    def err(key: str, problem: str, fix: str) -> None:
        errors.append(f"host {host_name}: {key}: {problem}. Fix: {fix}.")

    gpus = gpus if gpus is not None else GpuInventory()
    # A host only in the router group runs the gateway alone: it needs no GPU.
    for key, problem, fix in plan_problems(data, gpus, derive_flags(data, gpus)) if serves else ():
        err(key, problem, fix)

    os_release = snapshot.get("os") or {}
    os_problem = platforms.support_problem(os_release.get("id"), os_release.get("version"),
                                           data["sglang_docker_source"], engine_works(snapshot.get("docker") or {}))
    if os_problem:
        err("os", os_problem[0], os_problem[1])
    if not snapshot.get("python3"):
        err("python3", "not installed; the deploy reads the host with it (one command per run)",
            "install it first: apt-get install -y python3")
        return errors

    existing = snapshot.get("existing") or {}
    for key, found, owners in (("sglang_home", existing.get("home"), (ACCOUNT,)),
                               ("sglang_tools_dir", existing.get("tools"), ("root",))):
        if found and (not found["directory"] or (not found["empty"] and found["owner"] not in owners)):
            what = "is not a directory" if not found["directory"] else \
                f"already exists with content and belongs to {found['owner']}"
            err(key, f"{data[key]} {what}; the deploy would take it over (re-own and re-mode it)",
                f"choose a directory of its own, or, if this one is meant for it, chown it to "
                f"{owners[0]} first")
    preflight = snapshot["account"]
    user, group = preflight.get("user"), preflight.get("group")
    want_uid, want_gid = data["sglang_uid"], data["sglang_gid"]
    if want_uid is not None and user and user["uid"] != want_uid:
        err("sglang_uid", f"the existing account sglang has uid {user['uid']}, not {want_uid}; the deploy "
            "never re-owns files silently",
            f"set sglang_uid = {user['uid']} for this host, or change it by hand (usermod -u {want_uid} sglang "
            "and re-own its files) first")
    if want_gid is not None and group and group["gid"] != want_gid:
        err("sglang_gid", f"the existing group sglang has gid {group['gid']}, not {want_gid}",
            f"set sglang_gid = {group['gid']} for this host, or change it by hand (groupmod -g {want_gid} sglang) "
            "first")
    uid_owner = preflight.get("uid_owner")
    if want_uid is not None and not user and uid_owner:
        err("sglang_uid", f"uid {want_uid} already belongs to the account {uid_owner!r}",
            "choose a free uid for the fleet, or None")
    gid_owner = preflight.get("gid_owner")
    if want_gid is not None and not group and gid_owner:
        err("sglang_gid", f"gid {want_gid} already belongs to the group {gid_owner!r}",
            "choose a free gid for the fleet, or None")
    for admin in data["sglang_admins"]:
        if admin not in preflight.get("admins_present", ()):
            err("sglang_admins", f"the user {admin!r} does not exist on this host",
                f"create {admin!r} first (admins are people, the deploy does not invent them) or remove it "
                "from sglang_admins")
    return errors



def lock_of(data: Mapping[str, Any]) -> lockfile.Lock | None:
    """The lock this host's data names (`sglang_lock`, beside the inventory), or None when there is none."""
    return lockfile.load(lockfile.path_for(data["sglang_lock"], lockfile.inventory_dir()))


def _summary(errors: list[str]) -> str:
    lines = "\n  - ".join(errors)
    return f"refused before any change on any host ({len(errors)} problem(s)):\n  - {lines}"


def raise_if(errors: list[str]) -> None:
    if errors:
        raise _refusal()(_summary(errors), errors)


def engine_works(docker: Mapping[str, Any]) -> bool:
    """
    A Docker engine that is up (active unit, answering socket, CLI present)
    and has the compose v2 CLI plugin. Compose v1 was a standalone program,
    never a plugin, so the plugin's presence means v2 or newer.
    """
    return bool(docker.get("cli") and docker.get("api") and docker.get("active") == "active"
                and docker.get("compose_plugin"))


# ---------------------------------------------------------------- the plan

# The runbook's layout under the home: path below it -> mode (docker/secrets: the server's private config).
LAYOUT = {"": "750", "docker": "755", "docker/secrets": "700", "hf-cache": "2775", "hf-cache/hub": "2775",
          "results": "2775"}
# The toolchain image's build context, beside docker/Dockerfile.
TOOLCHAIN_CONTEXT = "docker/toolchain"
# The gate's messages and the benchmark reach the server on the host itself.
LOCAL_URL = "http://127.0.0.1:{port}"
# The inventory group whose hosts run the gateway (sglang-router), one per model, below the home in router/<slug>/.
ROUTER_GROUP = "router"
GATEWAY_DIR = "router"


@dataclass(frozen=True)
class Paths:
    """Every path the deploy uses on a host, worked out once from the home and the tools directory."""

    home: str
    tools: str
    docker: str
    hub: str
    token: str               # the Hub token, in the tools directory's private secret/
    secrets: str             # the server's private config (the API key), mounted read-only into the container
    server_config: str
    toolchain_context: str

    @classmethod
    def of(cls, home: str, tools: str) -> "Paths":
        return cls(home=home, tools=tools, docker=f"{home}/docker", hub=f"{home}/hf-cache/hub",
                   token=f"{tools}/secret/hf-token", secrets=f"{home}/docker/secrets",
                   server_config=f"{home}/docker/secrets/server.yaml",
                   toolchain_context=f"{home}/{TOOLCHAIN_CONTEXT}")

    def layout(self, toolchain_image: bool) -> dict[str, str]:
        """Each managed directory and its mode."""
        dirs = {f"{self.home}/{sub}".rstrip("/"): mode for sub, mode in LAYOUT.items()}
        if toolchain_image:
            dirs[self.toolchain_context] = "755"
        return dirs


@dataclass(frozen=True)
class Gate:
    url: str
    api_key_file: str | None    # on the host; the checks read the key from it
    served_name: str
    baseline_tok_s: float | None
    ready_timeout: int
    toolchain_check: str | None
    always: bool
    retry_failed: bool


@dataclass(frozen=True)
class Worker:
    """A serving host behind a gateway."""

    host: str
    url: str                  # how the gateway reaches its API
    docker_dir: str           # where its compose.yaml is
    compose_sha: str | None   # sha256 of the compose.yaml its plan renders; None: not in this run


@dataclass(frozen=True)
class Gateway:
    """One model's gateway on a router host: its own compose project, port and gate."""

    key: str                 # the model's registry key
    slug: str                # its directory (router/<slug>/) and compose project (sglang-router-<slug>)
    served_name: str
    port: int
    prometheus_port: int
    dir: str
    workers: tuple[Worker, ...]
    gate: Gate
    compose: str = field(default="", repr=False)
    scripts: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class HostPlan:
    name: str
    account: str
    uid: int | None
    gid: int | None
    admins: tuple[str, ...]
    paths: Paths
    layout: dict[str, str] = field(repr=False)
    # Docker engine and the NVIDIA runtime
    platform: platforms.Platform | None
    engine_works: bool
    docker_source: str
    docker_apt_url: str
    apt_cache_time: int
    gpus: GpuInventory = field(repr=False)
    install_nvidia_toolkit: bool
    nvidia_toolkit_apt_url: str
    arch: str | None
    # models
    served: models.Model
    kept: tuple[models.Model, ...]
    warnings: tuple[str, ...]
    lock: lockfile.Lock | None = field(repr=False)
    locked: Mapping[str, lockfile.LockedModel] = field(repr=False)   # kept models' lock records, by key
    hub_version: str
    pip_index_url: str | None
    hf_endpoint: str | None
    pull_lock_wait: int
    pull_workers: int
    token: bytes | None = field(repr=False)
    api_key: bytes | None = field(repr=False)
    prune: bool
    # image and stack
    image: str
    image_archive: str | None
    build: toolchain.BuildContext | None = field(repr=False)
    serving_image: str
    derived: dict[str, Derived] = field(repr=False)
    flags: tuple[dict[str, str], ...] = field(repr=False)
    data: Mapping[str, Any] = field(repr=False)   # the judged data, for the templates' plain values
    compose_template: str
    gate: Gate
    venv_module: bool   # the host's python3 can make the pull's venv
    # the rendered files (render.py), set once the rest of the plan is known
    compose: str = field(default="", repr=False)
    scripts: Mapping[str, str] = field(default_factory=dict, repr=False)
    # the fleet front door: a host in any group but `router` serves a model; one in `router` runs its gateways
    serves: bool = True
    routes: bool = False
    router_image: str = ""
    gateways: tuple[Gateway, ...] = ()   # set by preflight, which sees every host's plan (with_gateways)

    @property
    def keep(self) -> list[str]:
        return [model.pinned for model in self.kept]


def server_config(api_key: bytes | None) -> bytes | None:
    """The server's private config file (SGLang's --config YAML; a JSON string is a YAML scalar), or None."""
    return None if api_key is None else b"api-key: " + json.dumps(api_key.decode()).encode() + b"\n"


def snapshot_spec(data: Mapping[str, Any], report: bool = False) -> dict[str, Any]:
    """What the snapshot of a host reads, from its (already judged) data; ``report``: the status report's too."""
    paths = Paths.of(data["sglang_home"], data["sglang_tools_dir"])
    spec = {"user": ACCOUNT, "home": paths.home, "tools_dir": paths.tools, "admins": list(data["sglang_admins"]),
            "groups": ["docker"], "uid": data["sglang_uid"], "gid": data["sglang_gid"],
            "dirs": sorted(paths.layout(data["sglang_toolchain_image"]))}
    if report:
        spec["report"] = True
    return spec


def resolve(name: str, data: Mapping[str, Any], snapshot: Mapping[str, Any], groups=()) -> HostPlan:
    """The host's plan; raises DeployDataError naming every problem."""
    raise_if(check_data(name, data))
    return _resolve_judged(name, data, snapshot, groups)


def roles(groups) -> tuple[bool, bool]:
    """(serves, routes) of a host in ``groups``: every group but `router` serves a model."""
    groups = set(groups)
    return (not groups or bool(groups - {ROUTER_GROUP})), ROUTER_GROUP in groups


def _resolve_judged(name: str, data: Mapping[str, Any], snapshot: Mapping[str, Any], groups=()) -> HostPlan:
    """resolve() for data check_data already accepted."""
    serves, routes = roles(groups)
    gpus = parse_snapshot(snapshot.get("gpus"))
    raise_if(check_host_state(name, data, snapshot, gpus, serves))
    lock = lock_of(data)
    if lock is not None:
        data = lockfile.with_commits(lock, data)
    paths = Paths.of(data["sglang_home"], data["sglang_tools_dir"])
    served = models.served(data)
    kept = tuple(models.kept(data))
    image = data["sglang_image"]
    if lock is not None and not data["sglang_image_archive"]:
        image = lock.pinned_image(image) or image
    build = toolchain.build_context(data, image, wheel_hashes=lock.wheels if lock else None,
                                    tag_from=data["sglang_image"]) if data["sglang_toolchain_image"] and serves \
        else None
    derived = derive_flags(data, gpus)
    os_release = snapshot.get("os") or {}
    plan = HostPlan(
        name=name, account=ACCOUNT, uid=data["sglang_uid"], gid=data["sglang_gid"],
        admins=tuple(data["sglang_admins"]), paths=paths, layout=paths.layout(build is not None),
        platform=platforms.lookup(os_release.get("id"), os_release.get("version")),
        engine_works=engine_works(snapshot.get("docker") or {}), docker_source=data["sglang_docker_source"],
        docker_apt_url=data["sglang_docker_apt_url"], apt_cache_time=data["sglang_apt_cache_time"],
        gpus=gpus, install_nvidia_toolkit=data["sglang_install_nvidia_toolkit"],
        nvidia_toolkit_apt_url=data["sglang_nvidia_toolkit_apt_url"], arch=os_release.get("arch"),
        served=served, kept=kept, warnings=tuple(models.warnings(data)),
        lock=lock, locked={m.key: lock.models[m.key] for m in kept} if lock else {},
        hub_version=data["sglang_huggingface_hub_version"], pip_index_url=data["sglang_pip_index_url"],
        hf_endpoint=data["sglang_hf_endpoint"], pull_lock_wait=data["sglang_pull_lock_wait"],
        pull_workers=data["sglang_pull_workers"],
        token=models.control_token(data), api_key=models.read_secret(data["sglang_api_key_file"]),
        prune=data["sglang_prune_models"],
        image=image, image_archive=data["sglang_image_archive"], build=build,
        serving_image=build.tag if build else image,
        derived=derived, flags=tuple(launch_flags(data, derived, served)),
        data=dict(data),
        gate=Gate(url=LOCAL_URL.format(port=data["sglang_port"]),
                  api_key_file=paths.server_config if data["sglang_api_key_file"] else None,
                  served_name=served.served_name,
                  baseline_tok_s=served.baseline_tok_s, ready_timeout=data["sglang_ready_timeout"],
                  toolchain_check=toolchain.check_command() if build else None,
                  always=data["sglang_validate"] == "always", retry_failed=data["sglang_retry_failed"]),
        compose_template=data["sglang_compose_template"],
        venv_module=bool((snapshot.get("tools") or {}).get("venv_module")),
        serves=serves, routes=routes, router_image=data["sglang_router_image"] or image,
    )
    return replace(plan, compose=render.compose_yaml(plan), scripts=render.scripts(plan))


# ---------------------------------------------------------------- the fleet front door: every host's plan at once

def worker_url(address: str, port: int) -> str:
    return f"http://[{address}]:{port}" if ":" in address else f"http://{address}:{port}"


def fleet_worker(name: str, data: Mapping[str, Any], plan: HostPlan | None) -> tuple[str, Worker]:
    """(model key, Worker) of a serving host, from its data and, when it is in this run, its plan."""
    address = data.get("sglang_worker_address") or data.get("ssh_hostname") or name
    sha = hashlib.sha256(plan.compose.encode()).hexdigest() if plan is not None else None
    return data.get("sglang_model"), Worker(host=name, url=worker_url(address, data.get("sglang_port")),
                                            docker_dir=f"{data.get('sglang_home')}/docker", compose_sha=sha)


def gateway_slug(key: str) -> str:
    """A registry key as a compose project name allows it: lowercase letters, digits, '-' and '_'."""
    return re.sub(r"[^a-z0-9_-]+", "-", key.lower()).strip("-_") or "model"


def check_fleet(plan: HostPlan, workers: Mapping[str, list[Worker]]) -> list[str]:
    """A router host's problems with the fleet (``workers``: model key -> its serving hosts)."""
    errors: list[str] = []
    data, name = plan.data, plan.name

    def err(key: str, problem: str, fix: str) -> None:
        errors.append(f"host {name}: {key}: {problem}. Fix: {fix}.")

    fronted = fronted_models(plan, workers)
    listed = data["sglang_router_models"]
    if not fronted:
        err("sglang_router_models", "no host of the inventory serves a model, so this router host would have no "
            "workers", f"add serving hosts (e.g. the production group) to the inventory, or take {name} out of "
            f"the {ROUTER_GROUP} group")
    for key in listed or ():
        if key not in data["sglang_models"]:
            err("sglang_router_models", f"{key!r} is not a key of sglang_models", "use registry keys")
        elif not workers.get(key):
            err("sglang_router_models", f"no host of the inventory serves {key!r}, so its gateway would have no "
                "workers", f"serve it on some host (sglang_model = {key!r}), or remove it from the list")
    ports = {}
    for key in fronted:
        offset = list(data["sglang_models"]).index(key)
        for port_key in ("sglang_router_port", "sglang_router_prometheus_port"):
            port = data[port_key] + offset
            if plan.serves and port == data["sglang_port"]:
                err(port_key, f"the gateway of {key} would listen on {port}, the port this host's own server "
                    "already publishes (sglang_port)", f"set {port_key} to a free port, e.g. {port + 80}")
            elif port in ports:
                err(port_key, f"the gateway of {key} would listen on {port}, which the {ports[port]} uses too",
                    "give sglang_router_port and sglang_router_prometheus_port ranges that do not overlap")
            elif port > 65535:
                err(port_key, f"the gateway of {key} would listen on {port}, above 65535", "use a lower port")
            ports[port] = f"{port_key} of {key}"
    slugs = {}
    for key in fronted:
        if gateway_slug(key) in slugs:
            err("sglang_router_models", f"{key!r} and {slugs[gateway_slug(key)]!r} make the same directory name",
                "front only one of them from this host")
        slugs[gateway_slug(key)] = key
    if data["sglang_router_health_check_timeout"] >= data["sglang_router_health_check_interval"]:
        err("sglang_router_health_check_timeout", f"{data['sglang_router_health_check_timeout']} s is not below "
            f"sglang_router_health_check_interval ({data['sglang_router_health_check_interval']} s)",
            "use a timeout shorter than the interval")
    return errors


def fronted_models(plan: HostPlan, workers: Mapping[str, list[Worker]]) -> list[str]:
    """The registry keys this router host fronts, in registry order."""
    listed = plan.data["sglang_router_models"]
    return [key for key in plan.data["sglang_models"]
            if (key in listed if listed is not None else bool(workers.get(key)))]


def with_gateways(plan: HostPlan, workers: Mapping[str, list[Worker]]) -> HostPlan:
    """A router host's plan with its gateways, one per fronted model; raises naming every fleet problem."""
    raise_if(check_fleet(plan, workers))
    data, gateways = plan.data, []
    for key in fronted_models(plan, workers):
        offset = list(data["sglang_models"]).index(key)
        model = models.entry(data, key)
        port, slug = data["sglang_router_port"] + offset, gateway_slug(key)
        gateway = Gateway(
            key=key, slug=slug, served_name=model.served_name, port=port,
            prometheus_port=data["sglang_router_prometheus_port"] + offset,
            dir=f"{plan.paths.home}/{GATEWAY_DIR}/{slug}",
            workers=tuple(sorted(workers.get(key, ()), key=lambda w: w.host)),
            gate=replace(plan.gate, url=LOCAL_URL.format(port=port), served_name=model.served_name,
                         baseline_tok_s=model.baseline_tok_s, toolchain_check=None))
        gateways.append(replace(gateway, compose=render.router_compose_yaml(plan, gateway),
                                scripts=render.gateway_scripts(plan, gateway)))
    layout = dict(plan.layout, **{f"{plan.paths.home}/{GATEWAY_DIR}": "755"}, **{g.dir: "755" for g in gateways})
    return replace(plan, gateways=tuple(gateways), layout=layout)


# ---------------------------------------------------------------- preflight: every host, once

_plans: dict[int, dict[str, HostPlan]] = {}
_reads: dict[int, list] = {}   # the one parallel pass per run, joined by every host's load of deploy.py


def _groups(host) -> list[str]:
    """
    The inventory's own groups of a host: without pyinfra's `all`, and
    without the group pyinfra adds holding every host, named after the
    inventory file (e.g. `inventory` for inventory.py), which would make every
    router host a serving one.
    """
    inventory_file = lockfile.inventory_file()
    stem = os.path.basename(inventory_file).rsplit(".", 1)[0] if inventory_file else None
    everyone = {each.name for each in host.inventory}
    out = []
    for name in (getattr(group, "name", group) for group in (host.groups or ())):
        implicit = name == stem and name != ROUTER_GROUP and \
            {each.name for each in host.inventory.get_group(name)} == everyone
        if name != "all" and not implicit:
            out.append(name)
    return out


def _resolve_host(host, report: bool = False) -> tuple[HostPlan | None, list[str], dict | None]:
    """The host's plan (or None), its problems, and its snapshot (None when it was not read)."""
    from . import factcache
    from .snapshot import Snapshot

    data = host.data.dict()
    errors = check_data(host.name, data)
    if errors:
        return None, errors, None
    snapshot = factcache.get(host, Snapshot, spec=json.dumps(snapshot_spec(data, report), sort_keys=True))
    if snapshot is None:
        return None, [f"host {host.name}: its snapshot could not be read (the error is above)"], None
    try:
        return _resolve_judged(host.name, data, snapshot, _groups(host)), [], snapshot
    except DeployDataError as error:
        return None, error.problems, snapshot


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


def preflight(host, inventory) -> bool:
    """
    Resolve every host being deployed, at once and in parallel (one snapshot
    each), and refuse the run before anything executes when any host has a
    problem. Called at the top of deploy.py; later calls reuse the plans.
    True: go on with this host's tasks. Only a status report (status.py)
    gets False, for a host it reports as refused or unreadable instead.
    """
    import gevent

    from . import status

    report = bool(status.requested())
    key = id(host.state)
    if key not in _reads:
        hosts = inventory.get_active_hosts() or list(inventory)
        for each in hosts:
            said = _overrides(each)
            if said:
                logger.info(said)
        _reads[key] = [(h, gevent.spawn(_resolve_host, h, report)) for h in hosts]
    jobs = _reads[key]
    gevent.joinall([job for _, job in jobs], raise_error=True)
    if report:
        for each, job in jobs:
            status.note(host.state, each.name, *job.value)
    else:
        raise_if([problem for _, job in jobs for problem in job.value[1]])
    if key not in _plans:
        _plans[key] = _fleet({h.name: job.value[0] for h, job in jobs}, inventory, refuse=not report)
    return _plans[key].get(host.name) is not None


def _fleet(plans: dict[str, HostPlan | None], inventory, refuse: bool = True) -> dict[str, HostPlan | None]:
    """
    Every router host's plan with its gateways: the workers of each model are
    the inventory's serving hosts of that model (those outside this run too,
    which then keep the membership they have); refused when any router host
    has a problem with the fleet (a status report keeps such a plan as it is).
    """
    workers: dict[str, list[Worker]] = {}
    for each in inventory:
        if roles(_groups(each))[0]:
            key, worker = fleet_worker(each.name, each.data.dict(), plans.get(each.name))
            workers.setdefault(key, []).append(worker)
    out, errors = dict(plans), []
    for name, plan in plans.items():
        if plan is not None and plan.routes:
            try:
                out[name] = with_gateways(plan, workers)
            except DeployDataError as error:
                errors += error.problems
    if refuse:
        raise_if(errors)
    return out


def plan_of(host) -> HostPlan:
    """This host's plan, resolved by preflight()."""
    return _plans[id(host.state)][host.name]
