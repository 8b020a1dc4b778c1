# Every default of the deploy, for every host. Group files (production.py,
# quality.py) and per-host data in inventory.py override only what differs.
#
# Convention: the comment block directly above a key is its reason. The same
# text is rendered above the matching flag in compose.yaml and is mirrored by
# the variables table in docs/variables.md (a test keeps the three in step).

# ---------------------------------------------------------------- Account and layout

# The service account's home; everything the deploy manages lives below it.
sglang_home = "/opt/sglang"

# Fixed uid for the sglang account so file ownership matches across a fleet; None lets useradd pick a system uid.
sglang_uid = None

# Fixed gid for the sglang group, for the same reason as sglang_uid; None lets groupadd pick.
sglang_gid = None

# Existing users added to the sglang group, so they can pull models into hf-cache without sudo.
sglang_admins = []

# ---------------------------------------------------------------- Docker engine

# Where the engine comes from: 'distribution' (the OS archive) or 'docker' (Docker's apt repository, needed on Debian
# 12, whose archive has no compose v2).
sglang_docker_source = "distribution"

# Base URL of Docker's apt repository, used only when sglang_docker_source is 'docker'.
sglang_docker_apt_url = "https://download.docker.com/linux"

# Full fingerprint of the key that signs Docker's apt repository (Docker's published one): apt trusts every key of a
# keyring, so the keyring holds exactly this key, checked on every run; set a mirror's own key here.
sglang_docker_apt_key_fingerprint = "9DC858229FC7DD38854AE2D88D81803C0EBFCD88"

# Seconds an apt index stays fresh; a re-run inside this window never runs apt-get update.
sglang_apt_cache_time = 86400

# ---------------------------------------------------------------- Stack

# Pinned SGLang release; an upgrade must be a deliberate, tested change, never drift on a restart.
sglang_image = "lmsysorg/sglang:v0.5.16"

# Image archive (`docker save`, gzipped or not) on the control machine, loaded on hosts that lack sglang_image, for
# sites without registry access; None pulls from the registry.
sglang_image_archive = None

# The SGLang release sglang_image carries, whose own arguments (sglang_infra/machine/sglang_args/<release>.json, made by
# scripts/sglang-args.sh) judge every launch flag before any host changes; None reads it from the image's tag (v0.5.16).
sglang_version = None

# Template that becomes docker/compose.yaml; a site may point at its own copy.
sglang_compose_template = "templates/compose.yaml.j2"

# Port of the OpenAI-compatible API, inside the container and on the host.
sglang_port = 30000

# Host address the API is published on; 0.0.0.0 serves the whole network, 127.0.0.1 only local callers. A worker the
# gateways front needs an address they reach (docs/security.md: publishing on that address alone). On a multi-node
# group's member (the host's own network) every address means its fleet address, never every interface of the host.
sglang_bind_address = "0.0.0.0"

# GPUs reserved for the container: 'all' or a count. Hosts where nvidia-smi finds no GPU get no reservation.
sglang_gpus = "all"

# Refuse hosts where nvidia-smi finds no GPU: a real model cannot be served without one. Only a stand-in sandbox sets
# False.
sglang_require_gpu = True

# Let the deploy install the NVIDIA Container Toolkit from NVIDIA's repository when Docker lacks the nvidia runtime
# (a bare GPU server converges with the defaults); False opts out: such a host is refused with the install hint.
sglang_install_nvidia_toolkit = True

# Base URL of NVIDIA's container-toolkit apt repository, used only when sglang_install_nvidia_toolkit is True.
sglang_nvidia_toolkit_apt_url = "https://nvidia.github.io/libnvidia-container"

# Full fingerprint of the key that signs NVIDIA's container-toolkit repository (NVIDIA's published one): its keyring
# holds exactly this key, checked on every run; set a mirror's own key here.
sglang_nvidia_toolkit_apt_key_fingerprint = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"

# On an NVSwitch board (HGX/DGX) CUDA cannot start until Fabric Manager, of the driver's exact version, runs. Off, such
# a host without it is refused with the fix; True lets the deploy install it pinned to the driver's version from the
# host's own driver source (and NVLSM on the boards that need it), then enable it. Off by default: a package that must
# match the driver belongs to whoever chose the driver (docs/gpus.md).
sglang_install_fabric_manager = False

# GPUs whose persistence mode is off are refused (NVIDIA recommends nvidia-persistenced on servers: the driver stays
# initialised between containers); True lets the deploy enable nvidia-persistenced, which comes with the driver.
sglang_enable_persistence = False

# The NVIDIA driver is the operator's: None leaves it alone (a driver too old for the image is refused with the
# minimum). A full version such as "580.105.08" makes the deploy install exactly that driver and hold it there, from
# Ubuntu's own archive or, on Debian, NVIDIA's CUDA repository (docs/gpus.md); a driver change needs a reboot and
# decides which CUDA and Fabric Manager the host can run, so it is never picked for the operator.
sglang_nvidia_driver_version = None

# With a pinned driver: the open kernel modules, which NVIDIA recommends from Turing (SM75) on and which Blackwell
# requires; Volta and older GPUs run only the proprietary modules, so such hosts set False.
sglang_nvidia_driver_open = True

# A newly installed driver loads only after a reboot. Off, the deploy installs it and stops that host with the
# message, for the operator to reboot when it suits; True lets the deploy reboot it and go on: a worker behind a
# gateway in its pool's turns, drained (sglang_max_unavailable), a node group as one unit, a host alone at once.
sglang_allow_reboot = False

# Base URL of NVIDIA's CUDA apt repositories, the driver's source on Debian when sglang_nvidia_driver_version is set.
sglang_nvidia_cuda_apt_url = "https://developer.download.nvidia.com/compute/cuda/repos"

# Full fingerprint of the key that signs the CUDA repository; None: NVIDIA's own key for the host's Debian release
# (gpus.CUDA_REPO_KEYS). Its keyring holds exactly that key, checked on every run; set a mirror's own key here.
sglang_nvidia_cuda_apt_key_fingerprint = None

# More SGLang arguments for this host or group, beyond the runbook's flags and the served entry's launch_args (which
# this host's win over, flag by flag): {'--flag': {'value': V, 'reason': 'why'}}, True for a bare switch. Each is
# checked against the pinned SGLang's own arguments before any host changes; one that replaces a flag the deploy
# derives says 'overrides': True (docs/models.md, Launch recipes).
sglang_launch_args = {}

# Seconds the healthcheck waits before failures count; loading tens of GB of weights takes minutes.
sglang_healthcheck_start_period = 900

# Extra environment for the server container (e.g. NCCL settings); the launch flags' own variables are set by the
# deploy.
sglang_extra_env = {}

# File on the control machine holding the API key clients must send (Authorization: Bearer); None leaves the API open to
# whoever reaches sglang_bind_address:sglang_port. It reaches the server in a 0600 config file, never on a command line.
sglang_api_key_file = None

# Say that everyone who can reach this fleet's ports may call them: only then does a worker or a gateway run without
# sglang_api_key_file on an address other than loopback. Off, so an open port is a decision: without the key anyone who
# reaches a worker can load other weights or a LoRA adapter into it with no restart (the gate's stamp would still say
# the validated config serves), and anyone who reaches a gateway can add a worker and receive every prompt.
sglang_trusted_network = False

# Enable the three debug flags (--log-level debug, --log-requests, --log-requests-level 3) that otherwise sit commented
# out.
sglang_debug_logging = False

# ---------------------------------------------------------------- Models

# The vetted models by key: repo id; revision, the commit that passed the gate (shipped unset: pin the one your site
# validated, a model without one is refused); role; served_name, the name clients send; the parsers it needs (without
# them reasoning is not split from the answer and tool calls arrive as plain text); baseline_tok_s, its aggregate output
# tok/s at 8 concurrent requests, from the runbook.
sglang_models = {
    "qwen3.6-35b-a3b-awq": {
        "repo_id": "QuantTrio/Qwen3.6-35B-A3B-AWQ",
        "revision": None,
        "role": "production",
        "served_name": "qwen3.6-35b-a3b",
        "reasoning_parser": "qwen3",
        "tool_call_parser": "qwen3_coder",
        "baseline_tok_s": 985,
    },
    "qwen3.6-27b-awq-int4": {
        "repo_id": "cyankiwi/Qwen3.6-27B-AWQ-INT4",
        "revision": None,
        "role": "quality",
        "served_name": "qwen3.6-27b",
        "reasoning_parser": "qwen3",
        "tool_call_parser": "qwen3_coder",
        "baseline_tok_s": 452,
    },
}

# Known-broken quants, refused on every host (repo ids compare case-insensitively): both loop on repetition in
# reasoning_content while still returning valid-looking tool_calls.
sglang_denied_models = {
    "QuantTrio/Qwen3.6-27B-AWQ": {
        "failure": "repetition loops in reasoning_content under tool calling",
        "instead": "'qwen3.6-27b-awq-int4' (cyankiwi/Qwen3.6-27B-AWQ-INT4)",
    },
    "cyankiwi/Qwen3.6-35B-A3B-AWQ-4bit": {
        "failure": "the same repetition loops, at the 35B size",
        "instead": "'qwen3.6-35b-a3b-awq' (QuantTrio/Qwen3.6-35B-A3B-AWQ)",
    },
}

# Registry key of the one model this host serves; the production group's model is the default.
sglang_model = "qwen3.6-35b-a3b-awq"

# More registry keys kept in this host's cache (pulled and never pruned), e.g. the quality-comparison model.
sglang_cached_models = []

# Hub endpoint for pulls (a mirror or an air-gapped site's own); None is huggingface_hub's default, the Hub itself.
sglang_hf_endpoint = None

# File on the control machine holding a Hub token for gated repos; None reads HF_TOKEN from the control machine's
# environment, if set. Uploaded 0600 for the pull only.
sglang_hf_token_file = None

# Remove cached revisions that this host neither serves nor keeps (through huggingface_hub's cache API); off because a
# re-download costs hours.
sglang_prune_models = False

# Seconds a pull waits for another pull of the same repo or blob (an admin's hand pull included) before it fails, naming
# the lock and its holder: a large shard over a slow link can take this long.
sglang_pull_lock_wait = 1800

# The lock written by scripts/lock.sh (a path relative to the inventory's directory, or absolute): when the file exists,
# models are pulled at its commits and verified against its sha256 per file, the image is pulled by its digest and the
# toolchain wheels are installed with --require-hashes; when it does not exist, the pins above are used as they are.
# None ignores any lock.
sglang_lock = "sglang.lock"

# Files and connections a pull uses at once (8, as huggingface_hub's snapshot_download): the Hub and its CDN cap each
# connection, not the link, so shards come side by side and a large file as byte ranges.
sglang_pull_workers = 8

# MiB a pull leaves free on the cache's filesystem: a model that would leave less is refused before a byte of it is
# fetched, naming the bytes it needs and those free. hf-cache usually shares its disk with Docker's layers, the
# journal and the server's logs; a disk filled to its last byte stops those writes on a host that is serving, and a
# GiB is little beside a model of tens of GB.
sglang_pull_min_free_mib = 1024

# Outside the home (the runbook forbids a venv under it): the pull's Python environment, its script and the token.
sglang_tools_dir = "/var/lib/sglang-tools"

# huggingface_hub release the pull runs with on hosts; the same pin as the control machine's requirements.txt.
sglang_huggingface_hub_version = "2.4.0"

# ---------------------------------------------------------------- Peer distribution (serving hosts)

# Port of each serving host's peer door (Debian's nginx serving the host's verified model blobs to the fleet's other
# hosts); below 1024, so only root can bind it: no local user can open it before nginx does and be sent the site key.
# Not a port Debian's /etc/services names. A door moved to another port is reloaded on the new one, its list kept.
sglang_peer_port = 880

# Host address the peer door listens on; None: the host's fleet address as the gateways reach it (sglang_worker_address,
# else ssh_hostname, else the inventory name), never every address: the door is for the fleet's network alone.
sglang_peer_bind_address = None

# File on the control machine holding the site's peer key (at least 32 characters of a Bearer token, e.g. `openssl rand
# -hex 32`), which a host sends to a peer and the peer's door requires; None: no peer door, and every host pulls from
# the Hub as before.
sglang_peer_key_file = None

# ---------------------------------------------------------------- Toolchain image

# Serve a thin image built FROM sglang_image with the pins below (the runbook's fix, kept off the host's own toolkit);
# False serves sglang_image as it is, for an image that already carries matching pins.
sglang_toolchain_image = True

# One flashinfer release for flashinfer-python, flashinfer-cubin and flashinfer-jit-cache: SGLang refuses to start when
# they differ.
sglang_flashinfer_version = "0.6.14"

# Per-package override {package: version}, only for moving all three together; one set apart from the others is refused.
sglang_flashinfer_versions = {}

# CUDA flavour of flashinfer's wheel index and of the jit-cache's local version (0.6.14+cu130); must match the SGLang
# image's.
sglang_cuda_flavor = "cu130"

# CUDA flavour the pinned SGLang image is built for; a JIT cache for another CUDA holds kernels built for it.
sglang_image_cuda_flavor = "cu130"

# The CUDA 13 compiler from pip (nvidia-cuda-nvcc, with nvidia-nvvm and nvidia-cuda-crt at the same version) linked as
# CUDA_HOME in the image; the host's nvcc was CUDA 12.0 against SGLang's CUDA 13 stack.
sglang_nvcc_version = "13.3.73"

# Package index for pip, on hosts (the pull's venv) and in the image build; None is pip's own default.
sglang_pip_index_url = None

# flashinfer's own wheel index ({cuda_flavor} is filled in), an extra index for the build: flashinfer-cubin and
# flashinfer-jit-cache for CUDA 13 come from there; None adds none.
sglang_flashinfer_index_url = "https://flashinfer.ai/whl/{cuda_flavor}"

# PEM bundle on the control machine for sites behind a TLS-intercepting proxy, trusted by pip during the image build and
# by the image; None adds none.
sglang_extra_ca_bundle = None

# ---------------------------------------------------------------- Validation gate

# When the gate runs: 'on-change' after any change to compose.yaml, .env, the image or the values the scripts judge
# with (not the checks' program they carry: a tool upgrade gates nothing); 'always' on every run.
sglang_validate = "on-change"

# Seconds to wait for /health and then a first completion after a (re)start; SGLang's own tests allow 600 s.
sglang_ready_timeout = 600

# Seconds a run waits for another run that holds a host (one run changes a host at a time) before it refuses, naming
# the holder: a run's gate ends within sglang_ready_timeout (600 s) plus the checks' 900 s, so a cron'd run started
# during another's gate waits it out; a holder whose machine is gone frees the host within 60 s of silence.
sglang_host_lock_wait = 1800

# Concurrent requests in benchmark.sh; the runbook's throughput figures were measured at 8.
sglang_benchmark_concurrency = 8

# Output tokens per benchmark request: long enough that decode, not prefill, dominates the figure.
sglang_benchmark_max_tokens = 256

# benchmark.sh fails below this fraction of the model's baseline: room for run-to-run noise, not for a regression.
sglang_benchmark_min_fraction = 0.8

# Apply again a config that already failed its gate on a host (kept there as compose.yaml.failed); off, so a cron'd
# re-run does not repeat the outage (recreate, wait, fail, roll back) until the data changes.
sglang_retry_failed = False

# ---------------------------------------------------------------- Fleet front door (router group)

# Address the gateways use to reach this host's API (sglang_port); None uses its ssh_hostname, else its inventory name.
sglang_worker_address = None

# Image of the gateway, Shepherd Model Gateway (PyPI smg 1.13.0), an image of its own: sglang-router's line ended and
# a current SGLang image no longer carries it. No default: no public SMG image is pinned here, so a gateway host is
# refused until it is set. Build it from a pinned Debian base with templates/gateway-requirements.txt (smg==1.13.0
# and each dependency with its sha256) and name it by digest (repo@sha256:...) or by a release tag with
# sglang_router_image_archive; 'latest' or no tag is refused, as it would change the front door on a restart.
sglang_router_image = None

# Image archive (`docker save`, gzipped or not) on the control machine holding sglang_router_image, loaded on gateway
# hosts that lack it; None pulls sglang_router_image from its registry.
sglang_router_image_archive = None

# File on the control machine holding the gateway's control-plane key (SMG role admin): the deploy alone sends it, to
# add and remove workers (/workers) and to read their health for status. Required on gateway hosts: without it SMG's
# worker API would take the client key. It is kept apart from sglang_api_key_file (clients' key, which the gateway also
# sends to its workers: SMG's --api-key is both), so no client can change the worker set.
sglang_router_admin_key_file = None

# Registry keys this gateway host fronts, one gateway (container and port) each; None fronts every model some host of
# the inventory serves.
sglang_router_models = None

# How the gateway picks a worker: cache_aware sends a prompt to the worker whose RadixAttention cache already holds its
# prefix, and balances by load once the workers are uneven; also SMG 1.13's random, round_robin, passthrough,
# power_of_two, least_load, manual, consistent_hashing or prefix_hash.
sglang_router_policy = "cache_aware"

# Host address the gateways publish their ports on; None: every address. Without sglang_api_key_file a gateway is
# refused unless this is loopback or sglang_trusted_network is True: anyone who reaches its port could use every worker
# of its model (the worker API, POST /workers, takes only the control-plane key).
sglang_router_bind_address = None

# Host address the gateways' Prometheus ports are published on; loopback, because the metrics name every worker and its
# load: name an address for a scraper on another machine.
sglang_router_prometheus_bind_address = "127.0.0.1"

# Port of the first model's gateway (the first model of sglang_models); each later model in the registry takes the next
# port, so adding a model at the end moves no one.
sglang_router_port = 30080

# Prometheus port of the first model's gateway, numbered the same way (sglang-router's own default is 29000).
sglang_router_prometheus_port = 29000

# Seconds between the gateway's health checks of each worker; sglang-router's default of 60 (with 3 failures) kept a
# dead worker in rotation for about 3 minutes.
sglang_router_health_check_interval = 5

# Seconds a worker's /health may take before the check counts as failed; below the interval, so checks never pile up.
sglang_router_health_check_timeout = 3

# Consecutive failed checks before a worker leaves rotation: 2 rides out one slow answer and still drops a dead worker
# within about 10 s.
sglang_router_health_failure_threshold = 2

# Consecutive passed checks before a worker comes back: 1, because the deploy only lists workers that passed their gate.
sglang_router_health_success_threshold = 1

# Seconds one request may take through the gateway; long reasoning answers at a 262144-token context take minutes.
sglang_router_request_timeout = 1800

# Seconds the gateway waits for its listed workers when it starts: they already passed their gate and answer at once, so
# a long wait would only delay the front door.
sglang_router_worker_startup_timeout = 120

# SGLang's /metrics on its own port: a rolling restart reads sglang:num_running_reqs and sglang:num_queue_reqs there to
# know a worker out of its gateways has finished its requests (else it asks the gateway).
sglang_enable_metrics = True

# Seconds a worker taken out of its gateways may take to finish its requests in flight before it is restarted anyway;
# compose's stop_grace_period is this plus 30 s, so Docker never SIGKILLs SGLang while it finishes them.
sglang_drain_timeout = 300

# Workers of one pool (one model behind the same gateways) that may be out of service at once during a change, counting
# those already out: an integer, or a share "N%" of the pool rounded down and never below 1 (as Kubernetes'
# maxUnavailable, it grows with the pool without an edit). 1 keeps every other worker serving while a change rolls; it
# must stay below the pool's size. Workers out of service (new, stopped, crashed) restart at once regardless.
sglang_max_unavailable = 1

# ---------------------------------------------------------------- Multi-node groups (one model across several hosts)

# Name of the multi-node group this host is a member of; None: it serves alone. Every member runs the same launch
# command with --tp-size = the group's GPUs, --nnodes, --node-rank and --dist-init-addr, is restarted, gated (through
# rank 0 only) and rolled back with the others as one unit, and is one worker (rank 0's URL) behind the gateways. Ranks
# follow the inventory's order of the group's members: the first listed is rank 0 (a rank key could disagree with that
# order or leave gaps; reordering the inventory moves rank 0, which recreates the group like any other config change).
sglang_node_group = None

# Rank 0's port for the group's rendezvous (torch's store, --dist-init-addr), reached by every member at rank 0's
# sglang_worker_address (else ssh_hostname, else its inventory name). 29500 is torch's customary rendezvous port, apart
# from SGLang's own 30000 and the ports it derives above sglang_port (+233) when no group is set.
sglang_dist_init_port = 29500

# Ports rank 0 uses from sglang_dist_init_port up: SGLang v0.5 opens its ZMQ sockets on the 6 ports above the
# rendezvous port (one more per rank with data-parallel attention), so this range, not one port, must be free on rank 0
# and reachable from every member; 16 leaves room for that. It may not overlap another port of the host.
sglang_dist_init_ports = 16

# Network interface NCCL and Gloo use between the members (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME), e.g. 'eth1'; None
# lets them pick one, which on a host with a Docker bridge or a management network may be one the others cannot reach.
sglang_node_interface = None

# ---------------------------------------------------------- Fleet metrics (every host; Prometheus on the monitor group)

# Debian's prometheus-node-exporter on every host: the host's CPU, memory and disks, and, through its textfile
# collector, the gate's last result (pass or fail, tool calls, tok/s against the model's baseline, whether the running
# config is the one that passed).
sglang_node_exporter = True

# Host address the node exporter listens on; loopback, because it describes the host to whoever reaches it: name the
# address the monitor hosts reach this host on (the deploy refuses loopback when a monitor host elsewhere scrapes it).
sglang_node_exporter_bind_address = "127.0.0.1"

# The node exporter's port (its own default).
sglang_node_exporter_port = 9100

# Where Prometheus listens on a monitor host (address:port); loopback, because its API answers every query about the
# fleet and takes no password: name the address a site's Grafana reaches.
sglang_prometheus_listen_address = "127.0.0.1:9090"

# How long Prometheus keeps samples (a Prometheus duration); 15d, Debian's default, covers two weeks of comparisons at a
# few GB for a small fleet.
sglang_prometheus_retention = "15d"

# How often Prometheus scrapes each target (a Prometheus duration); 15s resolves a queue that builds within a minute at
# a modest load on the hosts.
sglang_prometheus_scrape_interval = "15s"

# How long a target may be down, or a worker unhealthy in its gateway, before the alert fires: 2m rides out a drained
# restart's gap without paging anyone.
sglang_alert_down_for = "2m"

# The gate's measured tok/s under this fraction of the model's baseline raises an alert: half the baseline is a broken
# GPU or flag, not noise.
sglang_alert_throughput_fraction = 0.5

# Requests waiting in a worker's queue above this many, for sglang_alert_queue_for, raise an alert: the fleet needs
# another worker.
sglang_alert_queue_depth = 16

# How long the queue must stay above sglang_alert_queue_depth before the alert fires: a burst is served within minutes;
# a backlog is not.
sglang_alert_queue_for = "10m"

# The filesystem holding hf-cache with less than this fraction free raises an alert: the next model pull would not fit.
sglang_alert_disk_free_fraction = 0.1

# How long the running config may differ from the one that passed its gate before the alert fires: a deploy in progress
# differs for minutes.
sglang_alert_config_for = "15m"

# ---------------------------------------------------------------- Launch flags

# The AWQ Marlin kernel needs FP16, not the model's BF16, on GPUs before SM90 (SGLang warns: Marlin with bf16 before
# SM90). 'derive' sets float16 for AWQ/GPTQ models on such GPUs, else the model's own dtype.
sglang_dtype = "derive"

# The Mamba/GDN conv-state cache stays BF16 unless told, and crashes against the FP16 compute path; it must match
# sglang_dtype ('derive' follows it).
sglang_mamba_conv_dtype = "derive"

# Without an explicit ratio the Mamba/KV split can leave zero request slots (max_num_reqs=0), as seen with the FP8
# release.
sglang_mamba_full_memory_ratio = 0.9

# Caps SGLang's static pools (weights + Mamba/KV) at this fraction ({value}) of GPU memory, leaving explicit headroom
# instead of auto-sizing.
sglang_mem_fraction_static = 0.85

# Oversized input is cut instead of rejected; note that SGLang gives no signal that truncation happened.
sglang_allow_auto_truncate = True

# Custom all-reduce fails without NVLink (GeForce cards have no peer-to-peer); this accepts the slower fallback.
# 'derive' disables it when several GPUs are not all NVLinked.
sglang_disable_custom_all_reduce = "derive"

# Avoids a CUB version mismatch (BlockAdjacentDifference) that breaks prefill CUDA-graph capture; decode graphs stay on.
sglang_cuda_graph_backend_prefill = "disabled"

# The model's native context; cheap here because only 10 of 40 layers keep a context-sized KV cache.
sglang_context_length = 262144

# Splits the model across the GPUs; 'derive' uses every GPU nvidia-smi finds (the runbook's servers have two).
sglang_tp_size = "derive"

# ---------------------------------------------------------------- Connection (pyinfra's own key)

# Refuse hosts whose SSH key is not already in known_hosts, as OpenSSH does with StrictHostKeyChecking=yes; pyinfra's
# default would trust a new host on first contact.
ssh_strict_host_key_checking = "yes"

# ---------------------------------------------------------------- (not data: what pyinfra takes from this file)

# Every name above, as pyinfra's group data. Without it pyinfra parses this file once more for every name in it (to
# leave imported names out), about 110 parses on every run; with it, none (issue 56).
__all__: list[str] = [_name for _name in dict(globals()) if not _name.startswith("_")]
