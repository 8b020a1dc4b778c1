"""A model's launch recipe: the SGLang arguments a registry entry (`launch_args`) or a host (`sglang_launch_args`)
adds to the runbook's flags, and a speculative-decoding recipe (`speculative`) with its drafter, itself a registry
entry. Pure functions over host data, unit-tested without hosts.

Here the shapes are judged (a flag's spelling, a value's kind, a reason for each, no secret); whether SGLang knows
the flag, its type and its choices is judged against the pinned version's own table of arguments in the preflight.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

_FLAG_RE = re.compile(r"^--[a-z0-9][a-z0-9-]{0,63}$")

# Flags the deploy writes itself from what it knows of the host, the model and the fleet: no recipe may set them.
OWNED_FLAGS = {
    "--model-path": "the served entry's pinned snapshot (sglang_model)",
    "--served-model-name": "the entry's served_name",
    "--host": "sglang_bind_address",
    "--port": "sglang_port",
    "--config": "the server's private config, written by the deploy (sglang_api_key_file)",
    "--nnodes": "sglang_node_group",
    "--node-rank": "sglang_node_group (the member's place in the inventory)",
    "--dist-init-addr": "sglang_dist_init_port",
    "--speculative-algorithm": "the entry's 'speculative' recipe ('algorithm')",
    "--speculative-draft-model-path": "the entry's 'speculative' recipe ('draft_model', a registry key)",
    "--speculative-draft-model-revision": "the drafter's registry entry ('revision', or the lock)",
    "--speculative-num-steps": "the entry's 'speculative' recipe ('num_steps')",
    "--speculative-eagle-topk": "the entry's 'speculative' recipe ('eagle_topk')",
    "--speculative-num-draft-tokens": "the entry's 'speculative' recipe ('num_draft_tokens')",
}

# A flag whose name says it carries a secret never goes on a command line (visible in `ps`, in compose.yaml, in the
# container's inspect): the key that carries it safely, by the word in the flag.
SECRET_WORDS = {
    "key": "sglang_api_key_file (clients' key, read by the server from its private config)",
    "token": "sglang_hf_token_file (the Hub token; the server never talks to the Hub: it loads pinned snapshots)",
    "secret": "a file the deploy writes 0600 (sglang_api_key_file)",
    "password": "a file the deploy writes 0600 (sglang_api_key_file)",
    "credential": "a file the deploy writes 0600 (sglang_api_key_file)",
}

# Speculative algorithms whose draft tokens come from a separate drafter model (SGLang's speculative_draft_model_path);
# NEXTN drafts with the model's own MTP layers and NGRAM from the prompt, so they take none. Which algorithms exist is
# the pinned version's table's to say, not this module's.
NEEDS_DRAFTER = frozenset({"EAGLE", "EAGLE3", "STANDALONE"})
TAKES_NO_DRAFTER = frozenset({"NEXTN", "NGRAM"})

# The recipe's fields: (required, what it must be).
SPECULATIVE_FIELDS = {
    "algorithm": (True, "SGLang's --speculative-algorithm, e.g. 'EAGLE3'"),
    "draft_model": (False, "the drafter's registry key (required for EAGLE, EAGLE3 and STANDALONE)"),
    "num_steps": (False, "an integer 1-16 (--speculative-num-steps)"),
    "eagle_topk": (False, "an integer 1-16 (--speculative-eagle-topk)"),
    "num_draft_tokens": (False, "an integer 1-64 (--speculative-num-draft-tokens)"),
    "min_accept_length": (False, "a number >= 1: the gate fails below this average accept length"),
    "reason": (True, "why this recipe, in one line"),
}
_RECIPE_INTS = {"num_steps": ("--speculative-num-steps", 16), "eagle_topk": ("--speculative-eagle-topk", 16),
                "num_draft_tokens": ("--speculative-num-draft-tokens", 64)}


@dataclass(frozen=True)
class LaunchArg:
    flag: str
    value: bool | int | float | str   # True: the bare switch
    reason: str
    overrides: bool                   # it replaces a flag the deploy derives (the reason says why)

    @property
    def arg(self) -> str:
        return self.flag if self.value is True else f"{self.flag}={self.value}"


@dataclass(frozen=True)
class Speculative:
    algorithm: str
    draft_model: str | None
    num_steps: int | None
    eagle_topk: int | None
    num_draft_tokens: int | None
    min_accept_length: float | None
    reason: str

    def flags(self) -> list[tuple[str, str]]:
        """(arg, field) of the recipe's own flags, the drafter's path aside (it is the drafter entry's snapshot)."""
        out = [(f"--speculative-algorithm={self.algorithm}", "algorithm")]
        for field, (flag, _) in _RECIPE_INTS.items():
            value = getattr(self, field)
            if value is not None:
                out.append((f"{flag}={value}", field))
        return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _line(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip()) and value.isprintable() and len(value) <= 400


def launch_args(raw: Any) -> tuple[LaunchArg, ...]:
    """The arguments of a well-formed `launch_args` or `sglang_launch_args` mapping, in its order."""
    if not isinstance(raw, Mapping):
        return ()
    return tuple(LaunchArg(flag=flag, value=spec["value"], reason=spec["reason"],
                           overrides=bool(spec.get("overrides", False))) for flag, spec in raw.items())


def speculative(raw: Any) -> Speculative | None:
    if not isinstance(raw, Mapping):
        return None
    floor = raw.get("min_accept_length")
    return Speculative(algorithm=raw["algorithm"], draft_model=raw.get("draft_model"), num_steps=raw.get("num_steps"),
                       eagle_topk=raw.get("eagle_topk"), num_draft_tokens=raw.get("num_draft_tokens"),
                       min_accept_length=float(floor) if floor is not None else None, reason=raw["reason"])


def drafter_key(raw_entry: Any) -> str | None:
    """The registry key of an entry's drafter, when its recipe names one (read from the raw data, malformed or not)."""
    if isinstance(raw_entry, Mapping) and isinstance(raw_entry.get("speculative"), Mapping):
        key = raw_entry["speculative"].get("draft_model")
        return key if isinstance(key, str) else None
    return None


def args_problems(where: str, raw: Any, derived: frozenset[str] | None) -> list[tuple[str, str]]:
    """(problem, fix) for one `launch_args` mapping; ``where`` names it in the message, ``derived`` the flags the
    deploy derives itself (which an argument may replace only when it says so, with its reason; None: not judged)."""
    example = "{'--kv-cache-dtype': {'value': 'fp8_e5m2', 'reason': 'halves the KV cache on this model'}}"
    if not isinstance(raw, Mapping):
        return [(f"{where} is {type(raw).__name__}, not a mapping of flags to {{'value', 'reason'}}",
                 f"write it as e.g. {example}")]
    out = []
    for flag, spec in raw.items():
        name = f"{where}[{flag!r}]"
        if not (isinstance(flag, str) and _FLAG_RE.fullmatch(flag)):
            out.append((f"{name}: {flag!r} is not an SGLang flag written '--name'",
                        "write the flag as its command line spells it, e.g. '--kv-cache-dtype'"))
            continue
        words = set(flag[2:].split("-"))
        secret = next((word for word in SECRET_WORDS if word in words or (word == "key" and "keys" in words)), None)
        if secret:
            out.append((f"{name}: {flag} would carry a secret on the server's command line (visible in ps, in "
                        "compose.yaml and in docker inspect)", f"remove it; set {SECRET_WORDS[secret]} instead"))
            continue
        if flag in OWNED_FLAGS:
            out.append((f"{name}: {flag} is written by the deploy from {OWNED_FLAGS[flag]}",
                        f"remove it and set {OWNED_FLAGS[flag]}"))
            continue
        if not isinstance(spec, Mapping) or set(spec) - {"value", "reason", "overrides"} or "value" not in spec:
            out.append((f"{name} is not {{'value': ..., 'reason': ...}} (an optional 'overrides': True)",
                        f"write it as e.g. {example}"))
            continue
        value = spec["value"]
        if not (value is True or _is_int(value) or isinstance(value, float)
                or (isinstance(value, str) and value.isprintable() and value.strip() and len(value) <= 1000)):
            out.append((f"{name}: value {value!r} is not True (a bare switch), a number or a one-line string",
                        "give the value as the flag takes it; leave a flag out by removing it"))
        if not _line(spec.get("reason")):
            out.append((f"{name} has no reason", "add 'reason': one line saying why this model or host needs it"))
        overrides = spec.get("overrides", False)
        if not isinstance(overrides, bool):
            out.append((f"{name}: overrides must be True or False", "use True, with the reason saying why"))
        elif derived is None:
            continue
        elif flag in derived and not overrides:
            out.append((f"{name}: {flag} is derived by the deploy (docs/variables.md says from what)",
                        "set the key that derives it, or say 'overrides': True with the reason why this entry "
                        "replaces the derived value"))
        elif overrides and flag not in derived:
            out.append((f"{name}: 'overrides' is set but the deploy does not derive {flag}",
                        "remove 'overrides'"))
    return out


def speculative_problems(where: str, raw: Any, registry: Any) -> list[tuple[str, str]]:
    """(problem, fix) for one entry's `speculative` recipe, its drafter judged against the registry."""
    example = ("{'algorithm': 'EAGLE3', 'draft_model': 'qwen3-next-eagle3', 'num_steps': 3, 'eagle_topk': 1, "
               "'num_draft_tokens': 4, 'reason': '...'}")
    if not isinstance(raw, Mapping):
        return [(f"{where} is {type(raw).__name__}, not a recipe mapping", f"write it as e.g. {example}")]
    out = []
    for field in sorted(set(raw) - set(SPECULATIVE_FIELDS)):
        out.append((f"{where} has an unknown field {field!r}", f"use only {', '.join(SPECULATIVE_FIELDS)}"))
    for field, (required, kind) in SPECULATIVE_FIELDS.items():
        if required and raw.get(field) is None:
            out.append((f"{where} lacks {field!r} ({kind})", f"write it as e.g. {example}"))
    algorithm = raw.get("algorithm")
    if algorithm is not None and not (isinstance(algorithm, str) and re.fullmatch(r"[A-Z0-9_]{1,32}", algorithm)):
        out.append((f"{where}: algorithm {algorithm!r} is not {SPECULATIVE_FIELDS['algorithm'][1]}",
                    "use one of the pinned SGLang's choices, upper case"))
    if raw.get("reason") is not None and not _line(raw["reason"]):
        out.append((f"{where}: reason is not one line of text", "say in one line why this recipe"))
    for field, (_, high) in _RECIPE_INTS.items():
        value = raw.get(field)
        if value is not None and not (_is_int(value) and 1 <= value <= high):
            out.append((f"{where}: {field} {value!r} is not an integer 1-{high}", f"use e.g. {field}: 3"))
    floor = raw.get("min_accept_length")
    if floor is not None and not (isinstance(floor, (int, float)) and not isinstance(floor, bool) and floor >= 1):
        out.append((f"{where}: min_accept_length {floor!r} is not a number >= 1 (an accept length counts the "
                    "verified token too)", "use the average accept length measured on this model, e.g. 2.5"))
    drafter = raw.get("draft_model")
    if algorithm in NEEDS_DRAFTER and drafter is None:
        out.append((f"{where}: {algorithm} drafts with a separate model, and none is named",
                    "set 'draft_model' to the drafter's registry key (an entry pinned like any model)"))
    elif drafter is not None and algorithm in TAKES_NO_DRAFTER:
        out.append((f"{where}: {algorithm} takes no drafter model, but draft_model is {drafter!r}",
                    f"remove 'draft_model', or use one of {', '.join(sorted(NEEDS_DRAFTER))}"))
    if drafter is not None and (not isinstance(drafter, str) or not isinstance(registry, Mapping)
                                or drafter not in registry):
        keys = sorted(registry) if isinstance(registry, Mapping) else []
        out.append((f"{where}: draft_model {drafter!r} is not in the registry sglang_models, so it is neither "
                    "pinned nor vetted", f"add an entry for the drafter (repo_id, a pinned revision, served_name, "
                                          f"'unvetted': True) and name its key; the registry has {keys}"))
    elif drafter is not None and drafter_key(registry.get(drafter)) is not None:
        out.append((f"{where}: the drafter {drafter!r} has a speculative recipe of its own",
                    "a drafter is served by its target's recipe alone: remove the drafter's 'speculative'"))
    return out
