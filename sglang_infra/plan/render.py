"""Plan -> text: the files the deploy writes, rendered from templates/ with
one Jinja environment. The templates receive plain values; the choices (which
flags, in which order, with which reason) are made here, where they can be
unit-tested.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..hostside import names
from ..machine import ship
from ..machine.gpus import Derived
from ..machine.templating import render_template, template_text
from ..models import recipes
from ..models.registry import CONTAINER_HF_CACHE, Model
from . import types as plantypes
from .defaults import reasons
from .gateway_pin import GATEWAY_VERSION
from .types import START_WINDOW, Gateway, HostPlan, Monitor, MonitorSettings, NodeExporter, NodeGroup

# Where the container sees docker/secrets (the server's private config, with the API key), and its config file.
SECRETS_IN_CONTAINER = "/etc/sglang-secrets"
SERVER_CONFIG_IN_CONTAINER = f"{SECRETS_IN_CONTAINER}/{names.SERVER_CONFIG}"
# Where a gateway sees router/.secrets/ (the control-plane key), read-only; no worker container mounts it.
GATEWAY_SECRETS_IN_CONTAINER = "/etc/sglang-gateway-secrets"

def gate_files(scripts_dir: str, scripts: Mapping[str, str], compose_dir: str, compose: str) -> dict[str, str]:
    """What a gate judges, by path: its scripts (in their order), the gate scripts by what they judge with
    (names.judged_digest: their command lines, not the programs they carry: the tool's own code is no trigger of a
    gate) and any other (a gateway's launcher, which its container runs) by its sha256, then compose.yaml, the
    config judged, by its sha256."""
    files = {f"{scripts_dir}/{name}": (names.judged_digest if name in names.GATE_SCRIPTS else names.text_digest)(text)
             for name, text in scripts.items()}
    files[f"{compose_dir}/{names.COMPOSE_FILE}"] = names.text_digest(compose)
    return files


# (data key, SGLang flag), in the runbook's order. A None or False value
# leaves the flag out; True renders the bare switch.
LAUNCH_FLAGS = (
    ("sglang_dtype", "--dtype"),
    ("sglang_mamba_full_memory_ratio", "--mamba-full-memory-ratio"),
    ("sglang_mem_fraction_static", "--mem-fraction-static"),
    ("sglang_allow_auto_truncate", "--allow-auto-truncate"),
    ("sglang_disable_custom_all_reduce", "--disable-custom-all-reduce"),
    ("sglang_cuda_graph_backend_prefill", "--cuda-graph-backend-prefill"),
    ("reasoning_parser", "--reasoning-parser"),   # from the served model's registry entry
    ("tool_call_parser", "--tool-call-parser"),   # from the served model's registry entry
    ("sglang_context_length", "--context-length"),
    ("sglang_tp_size", "--tp-size"),
    ("sglang_enable_metrics", "--enable-metrics"),
)

# Reasons of the flags that come from the served model's registry entry.
_ENTRY_REASONS = {
    "reasoning_parser": "Without an explicit parser, reasoning text is not split from the answer.",
    "tool_call_parser": "Without an explicit parser, tool calls arrive as plain text instead of structured tool_calls.",
}

# The files under sglang_home rendered from templates/<name>.j2.
SCRIPTS = names.GATE_SCRIPTS


def final_values(data: Mapping[str, Any], derived: Mapping[str, Derived]) -> dict[str, Any]:
    """The data with each hardware-dependent key replaced by its final value."""
    return {**data, **{key: d.value for key, d in derived.items()}}


# The flags LAUNCH_FLAGS derives: a recipe's argument may replace one only when it says so, with its reason.
DERIVED_FLAGS = frozenset(flag for _, flag in LAUNCH_FLAGS)


def launch_flags(values: Mapping[str, Any], derived: Mapping[str, Derived], model: Model,
                 group: NodeGroup | None = None, drafter: Model | None = None) -> list[dict[str, str]]:
    """SGLang's launch flags from the final values (final_values), each with its reason and source; a member of a
    multi-node group gets its group's three flags after --tp-size; then the served entry's speculative recipe (its
    drafter's pinned snapshot, ``drafter``), then the recipe's arguments: the entry's `launch_args`, then the host's
    `sglang_launch_args` (the host's wins over the entry's for one flag; one that overrides a derived flag takes its
    place)."""
    why = reasons()
    args = {arg.flag: (arg, f"registry entry {model.key}", "sglang_models") for arg in model.launch_args}
    args.update({arg.flag: (arg, "sglang_launch_args", "sglang_launch_args")
                 for arg in recipes.launch_args(values.get("sglang_launch_args"))})
    flags = []
    for key, flag in LAUNCH_FLAGS:
        if flag in args:
            arg, source, data_key = args.pop(flag)
            flags.append({"arg": arg.arg, "key": data_key,
                          "reason": f"{arg.reason} [{source}, in place of the derived {flag}]"})
        else:
            from_entry = key in _ENTRY_REASONS
            value = getattr(model, key) if from_entry else values[key]
            if value is None or value is False:
                continue
            arg_text = flag if value is True else f"{flag}={value}"
            if from_entry:
                reason = f"{_ENTRY_REASONS[key]} [registry entry {model.key}]"
            else:
                # A reason that states the number takes it from the value rendered beside it.
                reason = why[key].replace("{value}", str(value)) + (f" [{derived[key].source}]" if key in derived
                                                                    else "")
            flags.append({"arg": arg_text, "reason": reason, "key": key})
        if key == "sglang_tp_size" and group is not None:
            flags += group_flags(group)
    recipe = model.speculative
    if recipe is not None:
        for arg_text, field in recipe.flags():
            flags.append({"arg": arg_text, "key": "sglang_models",
                          "reason": f"{recipe.reason} [registry entry {model.key}, speculative {field}]"})
        if drafter is not None:
            flags.append({"arg": f"--speculative-draft-model-path={drafter.container_path}", "key": "sglang_models",
                          "reason": f"The drafter {drafter.key} ({drafter.pinned}), pulled and verified like the "
                                    f"model, loaded from its snapshot [registry entry {model.key}, speculative "
                                    "draft_model]"})
    for arg, source, data_key in args.values():
        flags.append({"arg": arg.arg, "key": data_key, "reason": f"{arg.reason} [{source}]"})
    return flags


def group_flags(group: NodeGroup) -> list[dict[str, str]]:
    """--nnodes, --node-rank and --dist-init-addr of a member of ``group``, with their reasons."""
    members = ", ".join(group.members)
    return [
        {"arg": f"--nnodes={group.nnodes}", "key": "sglang_node_group",
         "reason": f"Group {group.name} serves one model across its {group.nnodes} members ({members})."},
        {"arg": f"--node-rank={group.rank}", "key": "sglang_node_rank",
         "reason": f"This host's position among the members in inventory order; rank 0 ({group.head_name}) alone "
                   "serves the API, the others answer /health only."},
        {"arg": f"--dist-init-addr={group.dist_init_addr}", "key": "sglang_dist_init_port",
         "reason": f"Rank 0's rendezvous, reached by every member; SGLang opens its ZMQ ports above it, within "
                   f"{group.port}-{group.port + group.ports - 1} (sglang_dist_init_ports)."},
    ]


def template_values(data: Mapping[str, Any], derived: Mapping[str, Derived]) -> dict[str, Any]:
    """The plain sglang_* values a template renders, hardware-dependent ones at their final value."""
    return {key: value for key, value in final_values(data, derived).items() if key.startswith("sglang_")}


# Seconds compose's stop_grace_period adds to sglang_drain_timeout: SGLang checks for requests left every 5 s.
STOP_MARGIN = 30


def compose_yaml(plan: HostPlan) -> str:
    return render_template(
        plan.compose_template, **plan.template_values,
        model=plan.served,
        serving_image=plan.image.serving,
        built_from=plan.image.build.base_image if plan.image.build else None,
        locked_from=plan.image.tag if plan.image.pulled != plan.image.tag else None,   # pulled by the lock's digest
        flags=plan.flags,
        reasons=reasons(),
        mamba_conv_dtype_source=plan.derived["sglang_mamba_conv_dtype"].source,
        secrets=(plan.paths.secrets, SECRETS_IN_CONTAINER) if plan.api_key else None,
        server_config=SERVER_CONFIG_IN_CONTAINER,
        hf_cache=(plan.paths.hf_cache, CONTAINER_HF_CACHE),
        gpu_reservation=plan.gpus.count > 0,
        stop_grace_period=plan.roll_settings.drain_timeout + STOP_MARGIN,
        model_label=names.MODEL_LABEL,
        drafter=plan.drafter, drafter_label=names.DRAFTER_LABEL,
        group=plan.node_group,
        health_url=f"{plan.gate.url}/health",
        group_labels=(names.NODE_GROUP_LABEL, names.NODE_RANK_LABEL, names.NNODES_LABEL),
    )


def env_file(uid: int, gid: int) -> str:
    return render_template("templates/env.j2", uid=uid, gid=gid)


def scripts(plan: HostPlan, gateway: Gateway | None = None) -> dict[str, str]:
    """The validation scripts and the gate, by file name under sglang_home (a gateway's: under its directory)."""
    gate = gateway.gate if gateway else plan.gate
    context = dict(plan.template_values, url=gate.url, api_key_file=gate.api_key_file, served_model=gate.served_name,
                   baseline=gate.baseline_tok_s, speculative=gate.speculative,
                   min_accept_length=gate.min_accept_length,
                   checks_program=ship.installed("checks"), gate_program=ship.installed("gate.gate"),
                   python=ship.PYTHON,
                   toolchain_check=gate.toolchain_check, scripts_dir=gateway.dir if gateway else plan.paths.home,
                   kernel_check_nvcc=gate.kernel_check_nvcc,
                   kernel_check_program=ship.installed("gpu.gpu_kernel_check") if gate.kernel_check_nvcc else None,
                   results_dir=plan.paths.results,
                   gateway=gateway.slug if gateway else None)
    return {name: render_template(f"templates/{name}.j2", **context) for name in SCRIPTS}


def gateway_scripts(plan: HostPlan, gateway: Gateway) -> dict[str, str]:
    """A gateway's validation scripts and gate (the same templates, through the gateway), and its launcher."""
    return {**scripts(plan, gateway), names.LAUNCHER: ship.installed("gateway_launch")}


# (data key, flag of the pinned SMG, smg/router_args.py) of the gateway, each rendered with its reason from
# group_data/all.py.
GATEWAY_FLAGS = (
    ("sglang_router_policy", "--policy"),
    ("sglang_router_health_check_interval", "--health-check-interval-secs"),
    ("sglang_router_health_check_timeout", "--health-check-timeout-secs"),
    ("sglang_router_health_failure_threshold", "--health-failure-threshold"),
    ("sglang_router_health_success_threshold", "--health-success-threshold"),
    ("sglang_router_request_timeout", "--request-timeout-secs"),
    ("sglang_router_worker_startup_timeout", "--worker-startup-timeout-secs"),
)
# Where the gateway sees its directory (launch.py, workers.json) in its container.
GATEWAY_IN_CONTAINER = "/etc/sglang-router"


def gateway_compose_yaml(plan: HostPlan, gateway: Gateway) -> str:
    front_door = plan.front_door
    assert front_door is not None, "gateways.with_gateways renders for gateway hosts only"
    why = reasons()
    flags = [{"arg": f"{flag}={plan.template_values[key]}", "reason": why[key]} for key, flag in GATEWAY_FLAGS]
    return render_template(
        "templates/gateway-compose.yaml.j2", **plan.template_values,
        gateway=gateway, settings=front_door.settings, image=front_door.image, flags=flags, reasons=why,
        mount=GATEWAY_IN_CONTAINER, gateway_version=GATEWAY_VERSION,
        launcher=names.LAUNCHER, workers_file=names.WORKERS_FILE,
        secrets=(plan.paths.secrets, SECRETS_IN_CONTAINER) if plan.api_key else None,
        server_config=SERVER_CONFIG_IN_CONTAINER,
        control=(plan.paths.gateway_secrets, GATEWAY_SECRETS_IN_CONTAINER),
        control_config=f"{GATEWAY_SECRETS_IN_CONTAINER}/{names.CONTROL_PLANE_CONFIG}",
    )


# ---------------------------------------------------------------- fleet metrics

def node_exporter_dropin(exporter: NodeExporter) -> str:
    """prometheus-node-exporter.service's drop-in: where it listens, and the textfile collector the gate writes."""
    return render_template("templates/systemd/prometheus-node-exporter.conf.j2", listen=exporter.listen,
                           textfile_dir=names.TEXTFILE_DIR, reason=reasons()["sglang_node_exporter_bind_address"])


def _timed_program(name: str, unit_name: str, **values: object) -> dict[str, str]:
    """A host program (``name`` dotted below hostside/, kept as its last part .py) run every minute by its systemd
    service and timer (templates/systemd/<unit>.{service,timer}.j2),
    by the path each has on the host; the service's template gets the program's path and ``values``."""
    program = f"{plantypes.PROGRAM_DIR}/{name.rpartition('.')[2]}.py"
    unit = f"{plantypes.SYSTEMD_DIR}/{unit_name}"
    return {
        program: ship.installed(name),
        f"{unit}.service": render_template(f"templates/systemd/{unit_name}.service.j2", program=program,
                                           textfile_dir=names.TEXTFILE_DIR, python=f"/usr/bin/{ship.PYTHON}",
                                           **values),
        f"{unit}.timer": render_template(f"templates/systemd/{unit_name}.timer.j2"),
    }


def gate_metrics_units(plan: HostPlan) -> dict[str, str]:
    """The gate's metrics program and the systemd service and timer that refresh its file every minute, by the
    path each has on the host."""
    return _timed_program("gate.gate_metrics", plantypes.GATE_METRICS_UNIT, home=plan.paths.home)


def gpu_metrics_units(plan: HostPlan) -> dict[str, str]:
    """On a host with GPUs: the GPU metrics program (hostside/gpu/gpu_metrics.py) and the systemd service and timer
    that write each GPU's health every minute, expecting the GPUs nvidia-smi found at deploy time; none without."""
    if not plan.gpus.count:
        return {}
    return _timed_program("gpu.gpu_metrics", plantypes.GPU_METRICS_UNIT, planned=plan.gpus.count)


def prometheus_config(monitor: Monitor) -> str:
    """prometheus.yml: the inventory's targets by job, each with its labels, and the alert rules."""
    jobs: dict[str, list] = {}
    for target in monitor.targets:
        jobs.setdefault(target.job, []).append(target)
    return render_template("templates/prometheus/prometheus.yml.j2", settings=monitor.settings,
                           rules_file=plantypes.ALERT_RULES, jobs=jobs)


def prometheus_dropin(settings: MonitorSettings) -> str:
    """prometheus.service's drop-in: its config, storage, retention and listen address on its command line."""
    why = reasons()
    return render_template("templates/systemd/prometheus.conf.j2", settings=settings,
                           config=plantypes.PROMETHEUS_CONFIG, storage=plantypes.PROMETHEUS_STORAGE,
                           listen_reason=why["sglang_prometheus_listen_address"],
                           retention_reason=why["sglang_prometheus_retention"])


def alert_rules(settings: MonitorSettings) -> str:
    """The rules: the sglang_alert_* keys, and the stale-group window the deploy recreates a group by."""
    return render_template("templates/prometheus/sglang-alerts.yml.j2", **settings.alerts, start_window=START_WINDOW)


def dashboard() -> str:
    """The Grafana dashboard, as the repository has it (a plain file: Grafana's own ${...} stay as they are)."""
    return template_text(f"templates/grafana/{plantypes.DASHBOARD_FILE}")
