"""The plan's types: what one host's data and snapshot resolve into (resolve.py),
what the templates render from (render.py), and what the tasks apply.

Below both resolve.py and render.py, so neither imports the other for its types.
Every value here is final: a task, a template or the status report reads it
and never works it out again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple

from ..hostside import names
from ..hostside.formats.netloc import netloc
from ..machine import platforms
from ..machine.gpus import CudaRepository, Derived, GpuInventory
from ..machine.keyrings import VendorKey
from ..machine.toolchain.image import BuildContext
from ..models.lockfile import Lock, LockedModel
from ..models.registry import Model, drafter_of

# The runbook's layout under the home: path below it -> mode (docker/secrets: the server's private config).
LAYOUT = {"": "750", names.DOCKER_DIR: "755", names.SECRETS_DIR: "700", names.HF_CACHE_DIR: "2775",
          names.HUB_DIR: "2775", names.RESULTS_DIR: "2775", names.VERIFIED_DIR: "755"}
# The gate's messages and the benchmark reach a server (or a gateway) on the host itself.
LOCAL_URL = "http://127.0.0.1:{port}"


def worker_url(address: str, port: int) -> str:
    return f"http://{netloc(address, port)}"


def worker_validated(snapshot: Mapping[str, Any] | None) -> bool:
    """
    A worker serves a config that passed its gate: the gate's stamp is the
    digest of what runs now and its container runs. A worker rolled back to
    its last good config counts too: it serves what passed (a rolling restart
    puts it back in its gateways, operations/roll.py); one whose config never
    passed does not.
    """
    if not snapshot or not snapshot.get("gate"):
        return False
    container = (snapshot.get("stack") or {}).get("container") or {}
    return bool(names.stamp_current(snapshot["gate"]["stamp"], snapshot["gate"]["digest"])
                and container.get("state") == "running")


# Where a gateway's port is published when sglang_router_bind_address is None.
EVERY_ADDRESS = "0.0.0.0"
# Fleet metrics: files root owns outside the home (Debian's packages read /etc/prometheus; systemd's drop-ins
# override a packaged unit's command line without touching the package's own files).
PROMETHEUS_DIR = "/etc/prometheus"
PROMETHEUS_CONFIG = f"{PROMETHEUS_DIR}/prometheus.yml"
ALERT_RULES = f"{PROMETHEUS_DIR}/sglang-alerts.yml"
PROMETHEUS_STORAGE = "/var/lib/prometheus/metrics2/"   # Debian's own
SYSTEMD_DIR = "/etc/systemd/system"
DROPIN_NAME = "sglang.conf"
PROMETHEUS_SERVICE = "prometheus"
NODE_EXPORTER_SERVICE = "prometheus-node-exporter"
GATE_METRICS_UNIT = "sglang-gate-metrics"   # .service and .timer: the gate's metrics refreshed every minute
GPU_METRICS_UNIT = "sglang-gpu-metrics"     # .service and .timer: each GPU's health, written every minute
PROGRAM_DIR = "/usr/local/lib/sglang"       # host programs systemd runs as root (root's own, 0755)
DASHBOARD_DIR = "/usr/share/sglang/grafana"
DASHBOARD_FILE = "sglang-fleet.json"


# The members are started in one operation, ranks >= 1 first and rank 0 last (operations/group.py): a healthy
# group's rank 0 started after every other member, within this many seconds of it. A member started after rank 0,
# or rank 0 started long after a member, is a stale group (one of them restarted alone).
START_WINDOW = 600


def dropin_dir(service: str) -> str:
    return f"{SYSTEMD_DIR}/{service}.service.d"


@dataclass(frozen=True)
class Paths:
    """Every path the deploy uses on a host, worked out once from the home and the tools directory."""

    home: str
    tools: str
    docker: str
    dockerfile: str          # the toolchain image's, in docker/
    hf_cache: str
    hub: str
    results: str             # the benchmark's results
    verified: str            # the pull's records of what it verified (the account's alone, outside hf-cache)
    token: str               # the Hub token, in the tools directory's private secret/
    peer_key: str            # the site's peer key, beside it (the pull sends it to the fleet's peer doors)
    secrets: str             # the server's private config (the API key), mounted read-only into the container
    server_config: str
    toolchain_context: str
    gateways: str            # router/, where each gateway has its directory
    gateway_secrets: str     # router/.secrets/ (0700): the control-plane key, mounted into the gateways alone
    control_plane_config: str

    @classmethod
    def of(cls, home: str, tools: str, gateway_dir: str) -> "Paths":
        docker, secrets = f"{home}/{names.DOCKER_DIR}", f"{home}/{names.SECRETS_DIR}"
        return cls(home=home, tools=tools, docker=docker, dockerfile=f"{docker}/{names.DOCKERFILE}",
                   hf_cache=f"{home}/{names.HF_CACHE_DIR}", hub=f"{home}/{names.HUB_DIR}",
                   results=f"{home}/{names.RESULTS_DIR}", verified=f"{home}/{names.VERIFIED_DIR}",
                   token=f"{tools}/secret/hf-token", peer_key=f"{tools}/secret/{names.PEER_KEY}", secrets=secrets,
                   server_config=f"{secrets}/{names.SERVER_CONFIG}",
                   toolchain_context=f"{home}/{names.TOOLCHAIN_DIR}", gateways=f"{home}/{gateway_dir}",
                   gateway_secrets=f"{home}/{names.GATEWAY_SECRETS_DIR}",
                   control_plane_config=f"{home}/{names.GATEWAY_SECRETS_DIR}/{names.CONTROL_PLANE_CONFIG}")

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
    metrics_url: str | None = None    # a worker's own /metrics (its requests in flight, for the drain); not a gateway's
    turn_seconds: int = 0             # the longest one gate may take: its readiness wait and its checks
    # what it judges: path -> digest (render.gate_files: the gate scripts' judged digests, compose.yaml's sha256)
    files: Mapping[str, str] = field(default_factory=dict, repr=False)
    # the toolchain image's pinned nvcc: the gate compiles and runs a CUDA kernel with it on every GPU
    kernel_check_nvcc: str | None = None
    # the served entry's speculative recipe: the benchmark records the server's average accept length, and fails
    # below the recipe's floor (min_accept_length) when it sets one
    speculative: bool = False
    min_accept_length: float | None = None


@dataclass(frozen=True)
class AptSource:
    """A vendor's apt repository (operations/system.vendor_repository): its signing key's URL and its source line."""

    key_url: str
    line: str                 # with {keyring}: where the key is kept
    fingerprint: str          # the signing key's full fingerprint, pinned (keyrings.py)


@dataclass(frozen=True)
class Worker:
    """A serving host behind a gateway."""

    host: str
    url: str                  # how the gateway reaches its API
    docker_dir: str           # where its compose.yaml is
    compose_sha: str | None   # sha256 of the compose.yaml its plan renders; None: not in this run


@dataclass(frozen=True)
class Front:
    """A gateway in front of a serving host, as the roll reaches it: through its gateway host's own connection."""

    gateway_host: str         # the gateway host's inventory name
    slug: str                 # router/<slug>/ on it
    url: str                  # the gateway's API, where the gateway host itself reaches it (gateways.own_url)
    metrics: str              # its Prometheus endpoint, on the gateway host (smg_worker_requests_active)
    directory: str            # router/<slug>/ there (workers.json)
    key_file: str | None      # the gateway host's control-plane key file (router/.secrets/), for its worker API


@dataclass(frozen=True)
class Roll:
    """How a serving host that gateways front restarts: one worker of its pool at a time (operations/roll.py)."""

    url: str                        # the worker's URL as its gateways list it
    fronts: tuple[Front, ...]
    pool: str                       # the workers of one model fronted by the same gateways
    pool_size: int
    max_unavailable: int            # workers of the pool out of service at once, counted (a share worked out)
    drain_timeout: int
    others: tuple[Front, ...] = ()  # the gateways of every other model: a worker switching models leaves them
    members: tuple[tuple[str, str], ...] = ()   # (host, url) of every worker of the pool, in this run or not
    stamped: bool = False           # RollSettings.validated_at_start: one half of being in service
    model: str | None = None        # the served name its gateways list it with once they can read its /v1/models


@dataclass(frozen=True)
class GatewaySettings:
    """A gateway host's settings for its gateways, as its data sets them (judged by gateways.check_fleet)."""

    models: tuple[str, ...] | None     # sglang_router_models: the keys it fronts; None: every served key
    registry: tuple[str, ...]          # every registry key, in order: a gateway's ports follow its position
    port: int                          # the first gateway's port
    prometheus_port: int               # the first gateway's Prometheus port
    health_check_interval: int
    health_check_timeout: int
    bind_address: str | None           # sglang_router_bind_address: None publishes on every address
    prometheus_bind_address: str       # where the Prometheus ports are published
    worker_startup_timeout: int        # sglang_router_worker_startup_timeout: a turn waits this long for its workers

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> "GatewaySettings":
        """A gateway host's settings, from its data (judged by gateways.check_fleet)."""
        return cls(
            models=tuple(data["sglang_router_models"]) if data["sglang_router_models"] is not None else None,
            registry=tuple(data["sglang_models"]), port=data["sglang_router_port"],
            prometheus_port=data["sglang_router_prometheus_port"],
            health_check_interval=data["sglang_router_health_check_interval"],
            health_check_timeout=data["sglang_router_health_check_timeout"],
            bind_address=data["sglang_router_bind_address"],
            prometheus_bind_address=data["sglang_router_prometheus_bind_address"],
            worker_startup_timeout=data["sglang_router_worker_startup_timeout"])

    @property
    def published_on(self) -> str:
        """The host address the gateway's own port is published on."""
        return self.bind_address or EVERY_ADDRESS


class Placement(NamedTuple):
    """Where one fronted model's gateway goes on a gateway host (gateways.place), judged by check_fleet."""

    key: str
    slug: str
    port: int
    prometheus_port: int


@dataclass(frozen=True)
class Gateway:
    """One model's gateway on a gateway host: its own compose project, port and gate."""

    key: str                 # the model's registry key
    slug: str                # its directory (router/<slug>/) and compose project (sglang-router-<slug>)
    served_name: str
    port: int
    prometheus_port: int
    dir: str
    workers: tuple[Worker, ...]
    gate: Gate
    compose: str = field(default="", repr=False)
    compose_sha: str = ""
    scripts: Mapping[str, str] = field(default_factory=dict, repr=False)
    sole_front: bool = False   # no other gateway host of the inventory fronts its model: its restart is an outage


@dataclass(frozen=True)
class NodeExporter:
    """The host's prometheus-node-exporter, as its data sets it."""

    bind_address: str        # sglang_node_exporter_bind_address
    port: int                # sglang_node_exporter_port
    dropin: str = field(default="", repr=False)   # its systemd drop-in (render.py): listen address, textfile dir
    # a serving host's timers and their programs (path -> text): the gate's metrics, and each GPU's health
    gate_metrics_units: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def listen(self) -> str:
        return netloc(self.bind_address, self.port)


class PeerSources(NamedTuple):
    """Where a serving host's pull looks for one model's blobs (peering.py): the peer doors (ADDRESS:PORT; with
    =SHA256, the door's certificate, once peering.checked has kept them) of the
    other serving hosts of this run holding the same site key, whether this host is the model's seed (it takes the
    Hub for a blob no peer holds, first), how long its pull waits for a peer to hold a blob, and in a swarm
    (peering.split) the lock's paths this host takes in the first round (None: no swarm)."""

    peers: tuple[str, ...]
    seed: bool
    wait: int
    share: tuple[str, ...] | None = None
    hosts: tuple[str, ...] = ()   # the inventory name of each peer, in the order of ``peers``


class PeerPin(NamedTuple):
    """A registry model's pinned revision, as the peer door checks it: its repo, commit and (with a lock) the
    lock's content digest and the sha256 of each of its files."""

    repo_id: str
    commit: str
    content: str | None
    sha256s: frozenset[str] = frozenset()


@dataclass(frozen=True)
class PeerDoor:
    """A serving host's peer door (peerdoor.py): nginx serving its verified blobs to the fleet's other hosts."""

    address: str             # the IP address it listens on (the snapshot resolved the fleet address)
    port: int                # sglang_peer_port
    group: str               # the account's group, the nginx workers' group: they read the group's cache
    hub: str                 # hf-cache/hub on the host
    pins: tuple[PeerPin, ...]
    key: bytes = field(repr=False)
    key_id: str = ""         # the key's fingerprint (peerdoor.key_id): hosts compare it, never the key
    config: str = field(default="", repr=False)     # nginx.conf
    key_conf: str = field(default="", repr=False)   # key.conf (0600)
    dropin: str = field(default="", repr=False)     # nginx.service's drop-in


@dataclass(frozen=True)
class Target:
    """One scrape target of the fleet's Prometheus (monitoring.py): a job, where it is reached, its labels."""

    job: str                        # sglang (a worker's /metrics), sglang-router (a gateway's), node, prometheus
    address: str                    # host:port, as the monitor host reaches it
    labels: tuple[tuple[str, str], ...]   # host, group, model, role: sorted (name, value) pairs


@dataclass(frozen=True)
class MonitorSettings:
    """A monitor host's Prometheus and its alert thresholds, as its data sets them."""

    listen_address: str             # sglang_prometheus_listen_address (address:port)
    retention: str
    scrape_interval: str
    alerts: Mapping[str, Any] = field(repr=False)   # the rules template's inputs, from the sglang_alert_* keys

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> "MonitorSettings":
        return cls(listen_address=data["sglang_prometheus_listen_address"],
                   retention=data["sglang_prometheus_retention"],
                   scrape_interval=data["sglang_prometheus_scrape_interval"],
                   alerts={key[len("sglang_alert_"):]: value for key, value in sorted(data.items())
                           if key.startswith("sglang_alert_")})


@dataclass(frozen=True)
class Monitor:
    """What a monitor host runs: Prometheus scraping ``targets``, with the alert rules and the dashboard."""

    settings: MonitorSettings
    targets: tuple[Target, ...] = ()   # set by preflight, which sees the whole Fleet (monitoring.with_monitor)
    config: str = field(default="", repr=False)      # prometheus.yml
    rules: str = field(default="", repr=False)       # the alert rules
    dropin: str = field(default="", repr=False)      # prometheus.service's drop-in: listen address, retention
    dashboard: str = field(default="", repr=False)   # the Grafana dashboard, for a site's Grafana to provision


class GroupMember(NamedTuple):
    """One member of a multi-node group as the group's operation reaches it (operations/group.py)."""

    name: str                 # its inventory name
    docker: str               # its docker/ directory
    home: str                 # sglang_home (gate.sh)
    compose_sha: str          # the compose.yaml its plan renders
    image: str                # its serving image


@dataclass(frozen=True)
class NodeGroup:
    """A multi-node group this host is a member of (sglang_node_group; nodegroups.py): one model served across its
    members, restarted, gated through rank 0 and rolled back as one unit."""

    name: str                       # sglang_node_group
    rank: int                       # this host's --node-rank: its position among the members, in inventory order
    members: tuple[str, ...]        # every member's inventory name, in rank order (members[0] is rank 0)
    head: str                       # rank 0's address as the members reach it (its --dist-init-addr host)
    port: int                       # sglang_dist_init_port, on rank 0
    ports: int                      # sglang_dist_init_ports: the range rank 0 uses from port up
    interface: str | None = None    # sglang_node_interface: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME
    member_plans: tuple[GroupMember, ...] = ()   # every member, in rank order (set by preflight from their plans)
    head_ssh_port: int = 22         # a port rank 0 answers on before the group runs (the preflight's reach check)

    @property
    def nnodes(self) -> int:
        return len(self.members)

    @property
    def dist_init_addr(self) -> str:
        return f"{self.head}:{self.port}"

    @property
    def head_name(self) -> str:
        return self.members[0]

    @property
    def port_range(self) -> range:
        return range(self.port, self.port + self.ports)


@dataclass(frozen=True)
class Engine:
    """Docker and apt on one host, what tasks/docker_engine.py and tasks/gpu_runtime.py apply: the engine (left
    alone when one already works, else installed from the platform's packages or Docker's repository), NVIDIA's
    Container Toolkit, and how long apt's package lists count as fresh."""

    platform: platforms.Platform | None   # the host's OS as platforms.py knows it (None: not one it supports)
    works: bool                     # a Docker engine with compose v2 already works: left alone
    source: str                     # sglang_docker_source: 'distribution' or 'docker'
    apt_url: str                    # sglang_docker_apt_url
    repo: AptSource | None          # Docker's apt repository, when the engine is installed from it
    packages: tuple[str, ...]       # the engine's packages (none: a working engine is left alone)
    apt_cache_time: int             # sglang_apt_cache_time: seconds apt's lists stay fresh, for every apt step
    install_nvidia_toolkit: bool    # sglang_install_nvidia_toolkit
    nvidia_toolkit_apt_url: str     # sglang_nvidia_toolkit_apt_url
    arch: str | None                # the host's Debian architecture (NVIDIA's repository path)
    # NVIDIA's Container Toolkit repository, when this run installs the toolkit: a serving host with GPUs whose
    # Docker lacks the nvidia runtime, sglang_install_nvidia_toolkit on (None: nothing to install)
    toolkit: AptSource | None = None


@dataclass(frozen=True)
class Pull:
    """How the host pulls its models, what tasks/models.py, peering.pull_arguments and tasks/model_pruning.py
    apply: the pull's venv (huggingface_hub's version, the package index), the Hub (its endpoint, the token), how
    the pull runs, and whether revisions no longer kept are pruned."""

    hub_version: str                # sglang_huggingface_hub_version, in the pull's venv
    index_url: str | None           # sglang_pip_index_url (None: pip's default)
    hf_endpoint: str | None         # sglang_hf_endpoint (None: the Hub)
    lock_wait: int                  # sglang_pull_lock_wait: seconds a pull waits for another's lock
    workers: int                    # sglang_pull_workers: files and connections at a time
    token: bytes | None = field(repr=False)   # the Hub token (registry.control_token), uploaded to paths.token
    prune: bool = False             # sglang_prune_models
    venv_module: bool = False       # the host's python3 can make the pull's venv
    min_free: int = 0               # sglang_pull_min_free_mib in bytes: what a pull leaves free on the cache's disk


@dataclass(frozen=True)
class Image:
    """The serving image, what tasks/image.py applies and tasks/stack.py runs: the tag the data names, the digest
    the lock pins for it, what the host pulls (or loads from an archive), the toolchain image built on it, and the
    one the server runs."""

    tag: str                        # sglang_image as the data names it
    locked: str | None              # the digest the lock pins for it (None: no lock, or the lock pins none)
    pulled: str                     # what the host pulls: the locked digest, else the tag
    archive: str | None             # sglang_image_archive: a `docker save` archive loaded instead of a pull
    build: BuildContext | None = field(repr=False)   # the toolchain image built on it (None: sglang_toolchain off)
    serving: str = ""               # what the server runs: the built image's tag, else the pulled one


@dataclass(frozen=True)
class Account:
    """The service account, what tasks/account.py ensures: its name, its ids (None: the system picks them), and
    the admins in its group."""

    name: str
    uid: int | None                 # sglang_uid
    gid: int | None                 # sglang_gid
    admins: tuple[str, ...]         # sglang_admins


@dataclass(frozen=True)
class FrontDoor:
    """A gateway host's part of the fleet's front door, what tasks/gateways.py applies: the gateway image, the
    control-plane key, the host's gateway settings, and its gateways (one per fronted model)."""

    image: str                      # sglang_router_image (check_gateway_host refuses it unset)
    image_archive: str | None       # sglang_router_image_archive: a `docker save` archive loaded instead of a pull
    # router/.secrets/control-plane.yaml (the control-plane admin key), or None: no key (refused on a gateway host)
    control_plane_config: bytes | None = field(repr=False)
    settings: GatewaySettings
    gateways: tuple[Gateway, ...] = ()   # set by preflight, which sees every host's plan (gateways.with_gateways)


@dataclass(frozen=True)
class Exposure:
    """Who may call this host's ports without a key (gateways.check_open_worker, check_fleet, nodegroups)."""

    bind_address: str = EVERY_ADDRESS   # sglang_bind_address: where the worker's API is published
    trusted_network: bool = False   # sglang_trusted_network: the operator said an open port is fine on this network


@dataclass(frozen=True)
class RollSettings:
    """A serving host's data for its rolling restart, which the gateway pass turns into its Roll."""

    drain_timeout: int = 0          # sglang_drain_timeout: also what compose's stop_grace_period is worked out from
    # sglang_max_unavailable as written, a count or "N%" of a pool: the gateway pass works out the count once, for
    # the pool's size, into Roll.max_unavailable (gateways.unavailable); nothing else reads this
    max_unavailable: int | str = 1
    # it ran a config its gate stamped when the run began (its snapshot before any change); the roll's "in service"
    validated_at_start: bool = False


@dataclass(frozen=True)
class GpuDriver:
    """The NVIDIA driver layer, what tasks/gpu_driver.py applies: the pinned driver (sglang_nvidia_driver_version,
    None: the operator's), its apt packages, NVIDIA's CUDA repository directory where it is the source (Debian),
    whether the deploy may reboot to load it, and the driver's companions it may install."""

    pin: str | None = None
    packages: tuple[str, ...] = ()
    repo: CudaRepository | None = None
    allow_reboot: bool = False              # sglang_allow_reboot
    install_fabric_manager: bool = False    # sglang_install_fabric_manager
    enable_persistence: bool = False        # sglang_enable_persistence


@dataclass(frozen=True)
class HostPlan:
    name: str
    account: Account                # the service account the deploy runs the models and the stack as
    paths: Paths
    layout: dict[str, str] = field(repr=False)
    engine: Engine                  # Docker and apt: the engine, NVIDIA's Container Toolkit, apt's cache
    gpus: GpuInventory = field(repr=False)
    # models
    served: Model
    kept: tuple[Model, ...]
    registry: Mapping[str, Model] = field(repr=False)   # every well-formed registry entry, by key
    warnings: tuple[str, ...]
    lock: Lock | None = field(repr=False)
    locked: Mapping[str, LockedModel] = field(repr=False)   # kept models' lock records, by key
    pull: Pull                      # the pull: its venv, the Hub, its token, pruning
    api_key: bytes | None = field(repr=False)
    server_config: bytes | None = field(repr=False)   # docker/secrets/server.yaml (the API key), or None: absent
    # image and stack
    image: Image                   # the serving image: pulled, loaded or built, and the one the server runs
    port: int
    derived: dict[str, Derived] = field(repr=False)
    flags: tuple[dict[str, str], ...] = field(repr=False)
    # The sglang_* values the templates render, hardware-dependent ones at their final value. Read by
    # render.py, and by nodegroups._same, which compares what the members render; a value any other caller
    # needs is a field of its own.
    template_values: Mapping[str, Any] = field(repr=False)
    compose_template: str
    gate: Gate
    # the rendered files (render.py), set once the rest of the plan is known
    compose: str = field(default="", repr=False)
    compose_sha: str = ""
    scripts: Mapping[str, str] = field(default_factory=dict, repr=False)
    # the roles: a host in any group but `router` and `monitor` serves a model; one in `router` runs its gateways
    # (front_door), one in `monitor` the fleet's Prometheus (monitor)
    serves: bool = True
    front_door: FrontDoor | None = None   # a gateway host's gateways: image, control-plane key, settings
    exposure: Exposure = Exposure()       # who may call this host's ports without a key
    roll_settings: RollSettings = RollSettings()   # how the gateway pass rolls it (into roll)
    roll: Roll | None = None        # set by preflight for a serving host some gateway of the inventory fronts
    # fleet metrics: the node exporter (None: sglang_node_exporter off) with the gate's metrics timer on a serving
    # host, and, on a host of the `monitor` group, Prometheus over the inventory (its targets set by preflight)
    node_exporter: NodeExporter | None = None
    monitor: Monitor | None = None
    node_group: NodeGroup | None = None   # sglang_node_group: this host's multi-node group, its rank and members
    # peer distribution: the door (None: sglang_peer_key_file is None, or the host serves no model)
    peer_door: PeerDoor | None = None
    # where the pull looks for each kept model's blobs first, by model key (set by preflight, peering.py)
    peer_sources: Mapping[str, PeerSources] = field(default_factory=dict)
    driver: GpuDriver = GpuDriver()   # the NVIDIA driver layer the deploy may install
    # every vendor apt key the deploy may write on this host, each pinned (keyrings.py): judged on every run
    vendor_keys: tuple[VendorKey, ...] = ()

    @property
    def runs_gateways(self) -> bool:
        return self.front_door is not None

    @property
    def monitors(self) -> bool:
        return self.monitor is not None

    @property
    def keep(self) -> list[str]:
        return [model.pinned for model in self.kept]

    @property
    def drafter(self) -> Model | None:
        """The served entry's drafter (its speculative recipe's draft_model), kept beside it; None without one."""
        return drafter_of(self.served, self.kept)
