# Every default of the deploy, for every host. Group files (production.py,
# quality.py) and per-host data in inventory.py override only what differs.
#
# Convention: the comment block directly above a key is its reason. The same
# text is rendered above the matching flag in compose.yaml and is mirrored by
# the README's variables table (a test keeps the three in step).

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

# Where the engine comes from: 'distribution' (the OS archive) or 'docker' (Docker's apt repository, needed on Debian 12, whose archive has no compose v2).
sglang_docker_source = "distribution"

# Base URL of Docker's apt repository, used only when sglang_docker_source is 'docker'.
sglang_docker_apt_url = "https://download.docker.com/linux"

# Seconds an apt index stays fresh; a re-run inside this window never runs apt-get update.
sglang_apt_cache_time = 86400

# ---------------------------------------------------------------- Stack

# Pinned SGLang release; an upgrade must be a deliberate, tested change, never drift on a restart.
sglang_image = "lmsysorg/sglang:v0.5.16"

# Image archive (`docker save`, gzipped or not) on the control machine, loaded on hosts that lack sglang_image, for sites without registry access; None pulls from the registry.
sglang_image_archive = None

# Template that becomes docker/compose.yaml; a site may point at its own copy.
sglang_compose_template = "templates/compose.yaml.j2"

# Model served on this host (Hugging Face repo id); the production group's model is the default.
sglang_model = "QuantTrio/Qwen3.6-35B-A3B-AWQ"

# Name clients send in requests; None serves under the repo id.
sglang_served_model_name = None

# Port of the OpenAI-compatible API, inside the container and on the host.
sglang_port = 30000

# Host address the API is published on; 0.0.0.0 serves the whole network, 127.0.0.1 only local callers.
sglang_bind_address = "0.0.0.0"

# GPUs reserved for the container: 'all' or a count. Hosts where nvidia-smi finds no GPU get no reservation.
sglang_gpus = "all"

# Refuse hosts where nvidia-smi finds no GPU: a real model cannot be served without one. Only a stand-in sandbox sets False.
sglang_require_gpu = True

# Let the deploy install the NVIDIA Container Toolkit from NVIDIA's repository when Docker lacks the nvidia runtime; off, such a host is refused with the install hint.
sglang_install_nvidia_toolkit = False

# Base URL of NVIDIA's container-toolkit apt repository, used only when sglang_install_nvidia_toolkit is True.
sglang_nvidia_toolkit_apt_url = "https://nvidia.github.io/libnvidia-container"

# Seconds the healthcheck waits before failures count; loading tens of GB of weights takes minutes.
sglang_healthcheck_start_period = 900

# Extra environment for the server container (e.g. NCCL settings); the launch flags' own variables are set by the deploy.
sglang_extra_env = {}

# Enable the three debug flags (--log-level debug, --log-requests, --log-requests-level 3) that otherwise sit commented out.
sglang_debug_logging = False

# ---------------------------------------------------------------- Validation gate

# When the gate runs: 'on-change' after any change to compose.yaml, .env, the image or the scripts; 'always' on every run.
sglang_validate = "on-change"

# Seconds to wait for /health and then a first completion after a (re)start; SGLang's own tests allow 600 s.
sglang_ready_timeout = 600

# Concurrent requests in benchmark.sh; the runbook's throughput figures were measured at 8.
sglang_benchmark_concurrency = 8

# Output tokens per benchmark request: long enough that decode, not prefill, dominates the figure.
sglang_benchmark_max_tokens = 256

# benchmark.sh fails below this fraction of the model's baseline: room for run-to-run noise, not for a regression.
sglang_benchmark_min_fraction = 0.8

# Aggregate output tok/s at 8 concurrent requests per model, from the runbook; a model without one is measured, not compared.
sglang_throughput_baselines = {"QuantTrio/Qwen3.6-35B-A3B-AWQ": 985, "cyankiwi/Qwen3.6-27B-AWQ-INT4": 452}

# ---------------------------------------------------------------- Launch flags

# The AWQ Marlin kernel needs FP16, not the model's BF16, on GPUs before SM90 (SGLang warns: Marlin with bf16 before SM90). 'derive' sets float16 for AWQ/GPTQ models on such GPUs, else the model's own dtype.
sglang_dtype = "derive"

# The Mamba/GDN conv-state cache stays BF16 unless told, and crashes against the FP16 compute path; it must match sglang_dtype ('derive' follows it).
sglang_mamba_conv_dtype = "derive"

# Without an explicit ratio the Mamba/KV split can leave zero request slots (max_num_reqs=0), as seen with the FP8 release.
sglang_mamba_full_memory_ratio = 0.9

# Caps SGLang's static pools (weights + Mamba/KV) at 85% of GPU memory, leaving explicit headroom instead of auto-sizing.
sglang_mem_fraction_static = 0.85

# Oversized input is cut instead of rejected; note that SGLang gives no signal that truncation happened.
sglang_allow_auto_truncate = True

# Custom all-reduce fails without NVLink (GeForce cards have no peer-to-peer); this accepts the slower fallback. 'derive' disables it when several GPUs are not all NVLinked.
sglang_disable_custom_all_reduce = "derive"

# Avoids a CUB version mismatch (BlockAdjacentDifference) that breaks prefill CUDA-graph capture; decode graphs stay on.
sglang_cuda_graph_backend_prefill = "disabled"

# Without an explicit parser, reasoning text is not split from the answer.
sglang_reasoning_parser = "qwen3"

# Without an explicit parser, tool calls fall through as plain text instead of structured tool_calls.
sglang_tool_call_parser = "qwen3_coder"

# The model's native context; cheap here because only 10 of 40 layers keep a context-sized KV cache.
sglang_context_length = 262144

# Splits the model across the GPUs; 'derive' uses every GPU nvidia-smi finds (the runbook's servers have two).
sglang_tp_size = "derive"

# ---------------------------------------------------------------- Connection (pyinfra's own key)

# Refuse hosts whose SSH key is not already in known_hosts, as OpenSSH does with StrictHostKeyChecking=yes; pyinfra's default would trust a new host on first contact.
ssh_strict_host_key_checking = "yes"
