"""One serving host's launch flags judged against the SGLang release its image carries, in the preflight: every flag
its compose.yaml gives the server (the plan's flags, HostPlan.flags, and the template's own) exists in that release,
takes a value of its type and among its choices, and every parser a registry entry names is one the release
registers. A release without a table is refused, naming the script that makes one. Each problem is a (key, what,
fix), as the machine layer says its problems (gpus.plan_problems); the preflight makes each the refusal line naming
the host, the key (or the registry entry), the value and the valid choices (plan/problems.py).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping, Sequence

from .. import modelfit
from . import table as tables

# The data keys whose values come from the served model's registry entry (render._ENTRY_REASONS).
ENTRY_KEYS = ("reasoning_parser", "tool_call_parser")


Problem = tuple[str, str, str]   # (key, what is wrong, the fix)


def release_problem(image: str, version: str | None) -> tuple[tables.Table | None, Problem | None]:
    """(the table of the image's release, None) or (None, the problem)."""
    found = tables.image_version(image, version)
    key = "sglang_version" if version else "sglang_image"
    if found is None:
        return None, ("sglang_version", f"None, and sglang_image {image} does not say in its tag which "
                             "SGLang release it carries, so its launch flags cannot be checked against that release",
                             "set sglang_version to the release the image carries, e.g. '0.5.16'")
    table = tables.load(found)
    if table is None:
        have = ", ".join(tables.known_versions()) or "none"
        return None, (key, f"SGLang {found} ({image}) has no table of its arguments "
                             f"(sglang_infra/machine/sglang_args/{found}.json), so its launch flags cannot be checked",
                             f"make it with `{tables.SCRIPT} {found}`, read what it says of today's flags "
                             f"(docs/upgrading.md) and commit it; or pin a release that has one ({have})")
    return table, None


def flag_problems(table: tables.Table, flags: Sequence[Mapping[str, Any]], entry: str) -> list[Problem]:
    """A problem for each rendered flag ({"arg", "key"}) the table's SGLang release would not accept; ``entry``:
    the served model's registry key (for the flags that come from it)."""
    out: list[Problem] = []
    for each in flags:
        flag, value = tables.split(each["arg"])
        wrong = tables.judge(table, flag, value)
        if wrong is None:
            continue
        what, choices = wrong
        valid = f"use one of {tables.shown_choices(choices)}" if choices else \
            f"see {table.path} for the arguments of SGLang {table.version}"
        if each["key"] in ENTRY_KEYS:
            out.append(("sglang_models", f"entry {entry!r}: {each['key']} {value!r} ({flag}): {what}",
                        f"{valid} in the registry entry, or None to leave the flag out"))
        elif each["key"] == "sglang_models":   # the entry's recipe: its launch_args or its speculative recipe
            said = f"{value!r} ({each['arg']}): {what}" if value is not True else what
            out.append(("sglang_models", f"entry {entry!r}: {said}",
                        f"{valid} in the entry's launch_args or speculative recipe"))
        else:
            out.append((each["key"], f"{value!r} ({each['arg']}): {what}" if value is not True else what, valid))
    return out


# The module SGLang's serving command runs: the service whose command names it is the server.
SERVER_MODULE = "sglang.launch_server"
TEMPLATE_KEY = "sglang_compose_template"   # a flag the template writes itself (--model-path, --port, ...)


@lru_cache(maxsize=64)
def _command_flags(compose: str) -> tuple[str, ...] | None:
    """The --flags of the server's command in a rendered compose.yaml, or None when no service runs SGLang's
    server module; cached by the text, so hosts whose files are the same parse it once. Parsed with libyaml's
    safe loader where PyYAML has it (its wheels do): the same document, about 0.3 ms against 3.5 ms, every run."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    services = (yaml.load(compose, Loader=loader) or {}).get("services") or {}
    for service in services.values():
        command = (service or {}).get("command") if isinstance(service, Mapping) else None
        if isinstance(command, list) and SERVER_MODULE in command:
            return tuple(arg for arg in command if isinstance(arg, str) and arg.startswith("--"))
    return None


def rendered(plan) -> list[dict[str, str]]:
    """Every flag the host's compose.yaml gives SGLang's server, each with the data key it comes from (the template's
    own flags: sglang_compose_template); the plan's flags alone when the template runs the server some other way."""
    keys = {flag["arg"]: flag["key"] for flag in plan.flags}
    found = _command_flags(plan.compose) if plan.compose else None
    if found is None:
        return [{"arg": flag["arg"], "key": flag["key"]} for flag in plan.flags]
    return [{"arg": arg, "key": keys.get(arg, TEMPLATE_KEY)} for arg in found]


def problems(plan, data: Mapping[str, Any]) -> list[Problem]:
    """Every problem of a serving host's launch flags against its image's SGLang release (none for a host that serves
    no model)."""
    if not plan.serves:
        return []
    table, refused = release_problem(data["sglang_image"], data.get("sglang_version"))
    if table is None:
        return [refused] if refused else []
    return flag_problems(table, rendered(plan), plan.served.key)


def host_problems(plan, data: Mapping[str, Any]) -> list[Problem]:
    """The preflight's hook: the launch flags against the image's release, and the served model against the GPUs
    (machine/modelfit.py), once the host's plan is resolved and before any host changes."""
    return problems(plan, data) + modelfit.problems(plan)
