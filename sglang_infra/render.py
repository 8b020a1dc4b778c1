"""Turns host data into the text of the files the deploy writes. The
templates receive plain data; the choices (which flags, in which order) are
made here, where they can be unit-tested.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import jinja2

from . import models, toolchain
from .defaults import reasons
from .gpus import Derived, GpuInventory, derive_flags

PROJECT_DIR = Path(__file__).resolve().parent.parent

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
)


def final_values(data: Mapping[str, Any], derived: Mapping[str, Derived]) -> dict[str, Any]:
    """The data with each hardware-dependent key replaced by its final value."""
    return {**data, **{key: d.value for key, d in derived.items()}}


# Reasons of the flags that come from the served model's registry entry.
_ENTRY_REASONS = {
    "reasoning_parser": "Without an explicit parser, reasoning text is not split from the answer.",
    "tool_call_parser": "Without an explicit parser, tool calls arrive as plain text instead of structured tool_calls.",
}


def launch_flags(data: Mapping[str, Any], derived: Mapping[str, Derived]) -> list[dict[str, str]]:
    why = reasons()
    values = final_values(data, derived)
    model = models.served(data)
    flags = []
    for key, flag in LAUNCH_FLAGS:
        from_entry = key in _ENTRY_REASONS
        value = getattr(model, key) if from_entry else values[key]
        if value is None or value is False:
            continue
        arg = flag if value is True else f"{flag}={value}"
        if from_entry:
            reason = f"{_ENTRY_REASONS[key]} [registry entry {model.key}]"
        else:
            reason = why[key] + (f" [{derived[key].source}]" if key in derived else "")
        flags.append({"arg": arg, "reason": reason, "key": key})
    return flags


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    # A JSON string is a valid YAML double-quoted scalar.
    env.filters["q"] = lambda value: json.dumps(str(value))
    return env


def template_path(template: str) -> Path:
    """A template named relative to the project, or by absolute path for a site's own copy."""
    return PROJECT_DIR / template


@lru_cache(maxsize=16)
def _compiled(source: str) -> jinja2.Template:
    # Compiled once per run, not once per host: compiling costs more than rendering.
    return _environment().from_string(source)


def render(template: str, **context: Any) -> str:
    source = template_path(template).read_text(encoding="utf-8")
    return _compiled(source).render(**context)


def compose_yaml(data: Mapping[str, Any], gpus: GpuInventory) -> str:
    derived = derive_flags(data, gpus)
    values = final_values(data, derived)
    context = {key: value for key, value in values.items() if key.startswith("sglang_")}
    conv = derived["sglang_mamba_conv_dtype"]
    return render(
        data["sglang_compose_template"], **context,
        model=models.served(data),
        serving_image=toolchain.serving_image(data),
        flags=launch_flags(data, derived),
        reasons=reasons(),
        mamba_conv_dtype_source=conv.source,
        gpu_reservation=gpus.count > 0,
    )


def env_template_source() -> str:
    return (PROJECT_DIR / "templates" / "env.j2").read_text(encoding="utf-8")


def validation_source() -> str:
    return (PROJECT_DIR / "sglang_infra" / "validation.py").read_text(encoding="utf-8").rstrip("\n")


def scripts(data: Mapping[str, Any]) -> dict[str, str]:
    """The validation scripts and the gate, by file name under sglang_home."""
    from .facts import VALIDATED_STAMP

    context = {key: value for key, value in data.items() if key.startswith("sglang_")}
    context.update(
        url=f"http://127.0.0.1:{data['sglang_port']}",
        served_model=models.served(data).served_name,
        baseline=models.served(data).baseline_tok_s,
        validation_source=validation_source(),
        validated_stamp=VALIDATED_STAMP,
        toolchain_check=toolchain.check_command() if data["sglang_toolchain_image"] else None,
    )
    return {name: render(f"templates/{name}.j2", **context)
            for name in ("test_tool_calling.sh", "benchmark.sh", "gate.sh")}
