"""Turns host data into the text of the files the deploy writes. The
templates receive plain data; the choices (which flags, in which order) are
made here, where they can be unit-tested.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import jinja2

from .defaults import reasons

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
    ("sglang_reasoning_parser", "--reasoning-parser"),
    ("sglang_tool_call_parser", "--tool-call-parser"),
    ("sglang_context_length", "--context-length"),
    ("sglang_tp_size", "--tp-size"),
)


def launch_flags(data: Mapping[str, Any]) -> list[dict[str, str]]:
    why = reasons()
    flags = []
    for key, flag in LAUNCH_FLAGS:
        value = data[key]
        if value is None or value is False:
            continue
        arg = flag if value is True else f"{flag}={value}"
        flags.append({"arg": arg, "reason": why[key], "key": key})
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


def render(template: str, **context: Any) -> str:
    source = template_path(template).read_text(encoding="utf-8")
    return _environment().from_string(source).render(**context)


def compose_yaml(data: Mapping[str, Any]) -> str:
    context = {key: value for key, value in data.items() if key.startswith("sglang_")}
    return render(data["sglang_compose_template"], **context, flags=launch_flags(data), reasons=reasons())


def env_template_source() -> str:
    return (PROJECT_DIR / "templates" / "env.j2").read_text(encoding="utf-8")
