"""The model registry: which models a host serves and keeps, at which pinned
revision, with which launch parameters, and which models are refused.

Pure functions over host data, unit-tested without hosts. The registry itself
(`sglang_models`, `sglang_denied_models`) lives in group_data/all.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..hostside import names
from . import recipes
from .recipes import LaunchArg, Speculative

_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_REPO_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_WORD_RE = re.compile(r"^[A-Za-z0-9_.:=/-]+$")
ROLES = ("production", "quality")

# Inside the container, hf-cache is mounted at /hf-cache (compose.yaml).
CONTAINER_HF_CACHE = "/" + names.HF_CACHE_DIR
CONTAINER_HUB = "/" + names.HUB_DIR

# Each field of a registry entry: (required, what it must be, how to write it).
FIELDS = {
    "repo_id": (True, "a Hugging Face repo id 'org/name'", "'QuantTrio/Qwen3.6-35B-A3B-AWQ'"),
    "revision": (True, "the 40-hex commit that was validated", "the commit id from the model's history on the Hub"),
    "role": (False, "'production' or 'quality'", "'production'"),
    "served_name": (True, "the name clients send, without spaces", "'qwen3.6-35b-a3b'"),
    "reasoning_parser": (False, "None or a parser name", "'qwen3'"),
    "tool_call_parser": (False, "None or a parser name", "'qwen3_coder'"),
    "baseline_tok_s": (False, "None or the measured aggregate output tok/s (a number > 0)", "985"),
    "unvetted": (False, "True or False", "True, to serve a model that has not passed the gate yet"),
    "launch_args": (False, "SGLang flags this model needs beyond the runbook's, each {'value', 'reason'}",
                    "{'--kv-cache-dtype': {'value': 'fp8_e5m2', 'reason': '...'}}"),
    "speculative": (False, "a speculative-decoding recipe (algorithm, draft_model, steps, reason)",
                    "{'algorithm': 'EAGLE3', 'draft_model': 'its-drafter-key', 'num_steps': 3, 'reason': '...'}"),
}


@dataclass(frozen=True)
class Model:
    key: str
    repo_id: str
    revision: str
    served_name: str
    role: str | None
    reasoning_parser: str | None
    tool_call_parser: str | None
    baseline_tok_s: float | None
    unvetted: bool
    launch_args: tuple[LaunchArg, ...] = ()
    speculative: Speculative | None = None

    @property
    def folder(self) -> str:
        """The repo's folder in huggingface_hub's cache layout."""
        return "models--" + self.repo_id.replace("/", "--")

    @property
    def container_path(self) -> str:
        """The pinned snapshot as the server sees it: loaded offline, never resolved against the Hub."""
        return f"{CONTAINER_HUB}/{self.folder}/snapshots/{self.revision}"

    @property
    def pinned(self) -> str:
        return f"{self.repo_id}@{self.revision}"


# huggingface_hub's own rule for repo ids (utils/_validators.py, validate_repo_id, at the pinned release), so a pull
# never crashes on one: each part 1 to 96 of [A-Za-z0-9_.-], starting and ending with a word character, no '--' or
# '..', no '.git' at the end. Written out rather than imported: importing it loads the library's HTTP client (httpx),
# about 0.02 s of every run, a settled one too (docs/benchmarks.md); tests/unit/test_registry.py holds it equal to
# the installed library's over generated ids.
_HUB_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
_HUB_REPO_ID_RE = re.compile(rf"(?:{_HUB_PART}/)?{_HUB_PART}")


def hub_accepts(repo_id: str) -> bool:
    """Whether huggingface_hub's validate_repo_id accepts ``repo_id`` (its rule above)."""
    return (_HUB_REPO_ID_RE.fullmatch(repo_id) is not None and "--" not in repo_id and ".." not in repo_id
            and not repo_id.endswith(".git"))


def is_commit(value: Any) -> bool:
    return isinstance(value, str) and bool(_COMMIT_RE.fullmatch(value))


def entry(data: Mapping[str, Any], key: str) -> Model:
    raw = data["sglang_models"][key]
    return Model(
        key=key, repo_id=raw["repo_id"], revision=raw["revision"], served_name=raw["served_name"],
        role=raw.get("role"), reasoning_parser=raw.get("reasoning_parser"),
        tool_call_parser=raw.get("tool_call_parser"), baseline_tok_s=raw.get("baseline_tok_s"),
        unvetted=bool(raw.get("unvetted", False)),
        launch_args=recipes.launch_args(raw.get("launch_args")),
        speculative=recipes.speculative(raw.get("speculative")),
    )


def registry(data: Mapping[str, Any]) -> dict[str, Model]:
    """Every well-formed entry of the registry, by key (a malformed one is refused where a host uses it)."""
    registry = data["sglang_models"]
    drafters = {recipes.drafter_key(raw) for raw in registry.values()}
    return {key: entry(data, key) for key, raw in registry.items()
            if not _entry_problems(key, raw, registry, drafter=key in drafters)}


def served(data: Mapping[str, Any]) -> Model:
    """The one model this host serves (`sglang_model`, a registry key)."""
    return entry(data, data["sglang_model"])


def kept_keys(data: Mapping[str, Any]) -> list[str]:
    """The registry keys a host keeps in its cache, each once: the served one, then `sglang_cached_models`, each
    followed by the drafter its speculative recipe names (pulled, locked, shared and never pruned like a model)."""
    registry = data.get("sglang_models") or {}
    keys: list[str] = []
    for key in [data["sglang_model"], *(data.get("sglang_cached_models") or ())]:
        keys.append(key)
        drafter = recipes.drafter_key(registry.get(key)) if isinstance(registry, Mapping) else None
        if drafter is not None:
            keys.append(drafter)
    return list(dict.fromkeys(keys))


def kept(data: Mapping[str, Any]) -> list[Model]:
    """Every model this host keeps in its cache (kept_keys), the served one first."""
    return [entry(data, key) for key in kept_keys(data)]


def drafter_of(model: Model, kept: Iterable[Model]) -> Model | None:
    """``model``'s drafter among the ``kept`` models (its speculative recipe's draft_model); None without one."""
    key = model.speculative.draft_model if model.speculative else None
    return next((each for each in kept if key is not None and each.key == key), None)


def _denied(data: Mapping[str, Any], repo_id: str) -> tuple[str, Mapping[str, str]] | None:
    for denied_id, why in (data.get("sglang_denied_models") or {}).items():
        if denied_id.lower() == repo_id.lower():
            return denied_id, why
    return None


def _entry_problems(key: str, raw: Any, registry: Any, derived: frozenset[str] | None = None,
                    drafter: bool = False) -> list[tuple[str, str]]:
    """(problem, fix) for one registry entry, judged alone (its drafter against ``registry``, its arguments against
    the flags the deploy derives, ``derived``, when given); a ``drafter`` is judged by its target's gate, so it
    records no role or baseline of its own."""
    if not isinstance(raw, Mapping):
        return [(f"entry {key!r} is {type(raw).__name__}, not a mapping", "write it as a dict of fields")]
    out = []
    for name in sorted(set(raw) - set(FIELDS)):
        out.append((f"entry {key!r} has an unknown field {name!r}", f"use only {', '.join(FIELDS)}"))
    for name, (required, kind, example) in FIELDS.items():
        if required and raw.get(name) is None:
            if name == "revision":
                out.append((f"entry {key!r} has no pinned revision, and a model must never float to whatever "
                            "a branch points at today",
                            f"set 'revision' to the 40-hex commit you validated, e.g. from `python3 -c \"import "
                            f"huggingface_hub as h; print(h.model_info({raw.get('repo_id')!r}).sha)\"`"))
            else:
                out.append((f"entry {key!r} lacks {name!r} ({kind})", f"add {name!r}: {example}"))
    value = raw.get("repo_id")
    if value is not None and not (isinstance(value, str) and _REPO_ID_RE.fullmatch(value) and hub_accepts(value)):
        out.append((f"entry {key!r}: repo_id {value!r} is not {FIELDS['repo_id'][1]}", "use e.g. 'org/name'"))
    value = raw.get("revision")
    if value is not None and not is_commit(value):
        out.append((f"entry {key!r}: revision {value!r} is not a 40-hex commit (a branch or tag moves)",
                    "pin the full commit id you validated"))
    value = raw.get("role")
    if value is not None and value not in ROLES:
        out.append((f"entry {key!r}: role {value!r} is not {FIELDS['role'][1]}", "use 'production' or 'quality'"))
    for name in ("served_name", "reasoning_parser", "tool_call_parser"):
        value = raw.get(name)
        if value is not None and not (isinstance(value, str) and _WORD_RE.fullmatch(value)):
            out.append((f"entry {key!r}: {name} {value!r} is not {FIELDS[name][1]}", f"use e.g. {FIELDS[name][2]}"))
    value = raw.get("baseline_tok_s")
    if value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0):
        out.append((f"entry {key!r}: baseline_tok_s {value!r} is not a number > 0", "use the measured tok/s"))
    if not isinstance(raw.get("unvetted", False), bool):
        out.append((f"entry {key!r}: unvetted must be True or False", "use True or False"))
    if "launch_args" in raw:
        out += recipes.args_problems(f"entry {key!r}: launch_args", raw["launch_args"], derived)
    if "speculative" in raw:
        out += recipes.speculative_problems(f"entry {key!r}: speculative", raw["speculative"], registry)
    if not drafter and raw.get("unvetted") is not True and (
            raw.get("role") is None or raw.get("baseline_tok_s") is None):
        out.append((f"entry {key!r} is not vetted: a vetted model records its role and its measured baseline_tok_s",
                    "add both from a gate run (test_tool_calling.sh and benchmark.sh), or mark the entry "
                    "'unvetted': True to try it"))
    return out


def problems(data: Mapping[str, Any], derived: frozenset[str] = frozenset()) -> list[tuple[str, str, str]]:
    """(key, problem, fix) for the registry and this host's choice of models (and their drafters); ``derived``: the
    flags the deploy derives itself, which an entry's launch_args may replace only when it says so."""
    out: list[tuple[str, str, str]] = []
    registry, denied = data["sglang_models"], data["sglang_denied_models"]
    if not isinstance(registry, Mapping):
        return [("sglang_models", "is not a mapping of keys to entries", "see group_data/all.py")]
    if not isinstance(denied, Mapping) or not all(
            isinstance(k, str) and isinstance(v, Mapping) and {"failure", "instead"} <= set(v)
            for k, v in denied.items()):
        return [("sglang_denied_models", "must map repo ids to {'failure': ..., 'instead': ...}",
                 "see group_data/all.py")]
    wanted = [("sglang_model", data["sglang_model"])]
    cached = data["sglang_cached_models"]
    if not (isinstance(cached, (list, tuple)) and all(isinstance(k, str) for k in cached)):
        out.append(("sglang_cached_models", f"{cached!r} is not a list of registry keys",
                    "use e.g. ['qwen3.6-27b-awq-int4']"))
        cached = []
    wanted += [("sglang_cached_models", key) for key in cached]
    # A gateway host's fronted models are entries it uses too (its gateway's served name reaches its scripts).
    fronted = data.get("sglang_router_models")
    if isinstance(fronted, (list, tuple)):
        wanted += [("sglang_router_models", key) for key in fronted]

    checked: set[str] = set()
    drafters: set[str] = set()
    for data_key, key in wanted:
        if not isinstance(key, str) or key not in registry:
            by_repo = [k for k, v in registry.items() if isinstance(v, Mapping)
                       and isinstance(key, str) and str(v.get("repo_id", "")).lower() == key.lower()]
            hit = _denied(data, key) if isinstance(key, str) else None
            if hit:
                denied_id, why = hit
                out.append((data_key, f"{key!r} is a known-broken quant ({denied_id}: {why['failure']})",
                            f"use {why['instead']} instead"))
            elif by_repo:
                out.append((data_key, f"{key!r} is a repo id; hosts name models by registry key",
                            f"use the key {by_repo[0]!r}"))
            else:
                out.append((data_key, f"{key!r} is not in the registry sglang_models, so it was never vetted",
                            f"use one of {sorted(registry)}, or add an entry for it marked 'unvetted': True"))
            continue
        if key in checked:
            continue
        checked.add(key)
        if not _KEY_RE.fullmatch(key):
            out.append((data_key, f"registry key {key!r} must be lower-case letters, digits, '.', '_' or '-'",
                        "rename the entry"))
        for problem, fix in _entry_problems(key, registry[key], registry, derived, key in drafters):
            out.append(("sglang_models", problem, fix))
        raw = registry[key]
        drafter = recipes.drafter_key(raw)
        if drafter is not None and drafter in registry:   # one not in it is the recipe's own problem
            drafters.add(drafter)
            wanted.append(("sglang_models", drafter))
        if isinstance(raw, Mapping) and isinstance(raw.get("repo_id"), str):
            hit = _denied(data, raw["repo_id"])
            if hit:
                denied_id, why = hit
                out.append((data_key, f"{key!r} is {raw['repo_id']}, a known-broken quant ({denied_id}): "
                            f"{why['failure']}", f"use {why['instead']} instead"))
    return out


def warnings(data: Mapping[str, Any]) -> list[str]:
    """What every run says about an unvetted model on this host."""
    out = []
    drafters = {model.speculative.draft_model for model in kept(data) if model.speculative}
    for model in kept(data):
        if model.unvetted and model.key not in drafters:
            out.append(f"{model.key} ({model.pinned}) is marked unvetted: it has not passed the runbook's "
                       "tool-calling test and benchmark; do not route production traffic to it")
    return out


def control_token(data: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> bytes | None:
    """
    The Hub token, read on the control machine: the file named by
    `sglang_hf_token_file`, else HF_TOKEN from the environment, else None.
    Never logged; it reaches hosts only inside an upload.
    """
    import os

    path = data.get("sglang_hf_token_file")
    if path:
        return read_secret(path)
    return (environ if environ is not None else os.environ).get("HF_TOKEN", "").strip().encode() or None


def read_secret(path: str | None) -> bytes | None:
    """A secret kept in a file on the control machine (a token, an API key), stripped; never logged."""
    if not path:
        return None
    with open(path, "rb") as handle:
        return handle.read().strip() or None
