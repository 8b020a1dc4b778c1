"""The real SGLang's own arguments as data (sglang_infra/machine/sglang_args/), the preflight's judgement of every
launch flag against them, and whether the served model fits its GPUs (sglang_infra/machine/modelfit.py)."""

from __future__ import annotations

import ast
import hashlib
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import pinned_defaults, plan_for

from sglang_infra.machine import modelfit
from sglang_infra.machine.sglang_args import launch, reader
from sglang_infra.machine.sglang_args import table as tables
from sglang_infra.models.lockfile import LockedModel
from sglang_infra.plan.problems import problem

DEFAULTS = pinned_defaults()


def lines(name: str, found) -> list[str]:
    """The refusal lines the preflight makes of (key, what, fix) problems."""
    return [problem(name, *each) for each in found]
# The wheels are kept here between runs (14 MB for 0.5.16, 39 MB for 0.5.23): `pip download` from the package index.
WHEELS = Path("/var/tmp/sglang-wheels")


# ---------------------------------------------------------------- the tables, regenerated from the real wheels

@pytest.mark.parametrize("version", tables.known_versions())
def test_each_table_is_what_its_release_wheel_says(version):
    """Every committed table is regenerated from the real wheel (pip download --no-deps) and must equal it byte for
    byte: a hand edit, or a reader that changed, fails here."""
    committed = reader.table_path(version).read_text(encoding="utf-8")
    assert reader.render(reader.table_for(version, WHEELS)) == committed


def test_the_pinned_images_release_has_a_table():
    assert tables.image_version(DEFAULTS["sglang_image"]) == "0.5.16"
    assert tables.load("0.5.16") is not None


def test_the_pinned_table_holds_every_flag_the_deploy_renders_with_its_choices():
    table = tables.load("0.5.16")
    assert table is not None
    assert table.flags["--cuda-graph-backend-prefill"]["choices"] == ["breakable", "disabled", "full", "tc_piecewise"]
    assert table.flags["--allow-auto-truncate"]["kind"] == "switch"
    assert table.flags["--tp-size"]["type"] == "int"
    assert "qwen3_coder" in table.parsers["tool_call"] and "qwen3" in table.parsers["reasoning"]
    assert "qwen3_coder" in table.flags["--tool-call-parser"]["choices"]
    assert table.flags["--model"]["alias_of"] == "--model-path"


# ---------------------------------------------------------------- the reader, on a small source of SGLang's shape

SOURCE = {
    "sglang/srt/server_args.py": '''
from typing import Literal, Optional, List
from sglang.srt.arg_groups.arg_utils import A, Arg
from sglang.srt.graph import Backend
MODES = ["a", "b"]
MORE = MODES + ["c"]

@dataclasses.dataclass
class ServerArgs:
    model_path: A[str, Arg(help="x", aliases=["--model"])]
    mode: A[str, Arg(help="m", choices=MORE)] = "a"
    graph: A[Optional[Literal["full", "off"]], Arg(help="g", choices=Backend.ALL)] = None
    level: A[Optional[Literal["low", "high"]], "help only"] = None
    size: A[int, "a number"] = 1
    speculative_algorithm: A[Optional[str], "free text to argparse"] = None
    fast: A[bool, "a switch"] = False
    ids: A[Optional[List[int]], "several"] = None
    hidden: A[bool, Arg(no_cli=True)] = False
    plain: int = 3

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--reasoning-parser", type=str, choices=["auto"] + list(ReasoningParser.DetectorMap.keys()))
        parser.add_argument("--tool-call-parser", type=str,
                            choices=["auto"] + list(FunctionCallParser.ToolCallParserEnum.keys()))
        parser.add_argument("--old-fast", action=DeprecatedStoreTrueAction, new_flag="--fast")
        parser.add_argument("--kind", type=str, choices=[m.name for m in Kinds])
''',
    "sglang/srt/graph.py": "class Backend:\n    FULL = 'full'\n    OFF = 'off'\n    ALL = (FULL, OFF)\n",
    "sglang/srt/speculative/spec_info.py":
        "class SpeculativeAlgorithm(Enum):\n    EAGLE = auto()\n    NGRAM = auto()\n    NONE = auto()\n",
    "sglang/srt/arg_groups/speculative_hook.py":
        "def resolve(speculative_algorithm):\n"
        "    if speculative_algorithm == 'NEXTN' or speculative_algorithm == 'EAGLE':\n"
        "        return 'EAGLE'\n    return speculative_algorithm\n",
    "sglang/srt/parser/reasoning_parser.py": "class ReasoningParser:\n    DetectorMap = {'qwen3': A, 'kimi': B}\n",
    "sglang/srt/function_call/function_call_parser.py":
        "class FunctionCallParser:\n    ToolCallParserEnum = {'qwen3_coder': A, 'hermes': B}\n",
}


@pytest.fixture(scope="module")
def small():
    return reader.read(SOURCE, "9.9.9", "sglang-9.9.9.whl", "0" * 64)


def test_the_speculative_algorithm_takes_the_releases_members_and_the_aliases_its_hook_resolves(small):
    flag = small["flags"]["--speculative-algorithm"]
    assert flag["choices"] == ["EAGLE", "NEXTN", "NGRAM"] and flag["registry"] == "speculative"
    assert "SpeculativeAlgorithm's members" in small["made_from"]["how"]


def test_a_misspelt_speculative_algorithm_is_refused_with_the_releases_choices():
    table = tables.load("0.5.16")
    assert table is not None
    what, choices = tables.judge(table, "--speculative-algorithm", "EAGEL3")
    assert what == "'EAGEL3' is not a speculative algorithm SGLang 0.5.16 registers"
    assert choices == ["DFLASH", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "NEXTN", "NGRAM", "STANDALONE"]
    assert tables.judge(table, "--speculative-algorithm", "EAGLE3") is None


def test_the_reader_names_the_release_and_how_it_read_it(small):
    assert small["sglang"] == "9.9.9" and small["made_from"]["wheel"] == "sglang-9.9.9.whl"
    assert "ast over sglang/srt/server_args.py" in small["made_from"]["how"]
    assert small["parsers"] == {"reasoning": ["kimi", "qwen3"], "tool_call": ["hermes", "qwen3_coder"]}


@pytest.mark.parametrize("flag, wanted", [
    ("--mode", {"kind": "value", "type": "str", "choices": ["a", "b", "c"], "default": "a"}),   # a name, through +
    ("--graph", {"choices": ["full", "off"], "optional": True}),   # a class attribute of an imported module
    ("--level", {"choices": ["high", "low"]}),                     # the Literal's, without Arg
    ("--size", {"type": "int", "default": 1}),
    ("--fast", {"kind": "switch"}),
    ("--ids", {"kind": "list", "type": "int", "nargs": "+"}),
    ("--model", {"alias_of": "--model-path", "required": True}),
    ("--reasoning-parser", {"choices": ["auto", "kimi", "qwen3"], "registry": "reasoning"}),
    ("--tool-call-parser", {"choices": ["auto", "hermes", "qwen3_coder"], "registry": "tool_call"}),
    ("--old-fast", {"kind": "switch", "deprecated": True, "new_flag": "--fast"}),
    ("--kind", {"choices_computed": "[m.name for m in Kinds]"}),
])
def test_the_reader_registers_each_field_as_sglangs_own_parser_does(small, flag, wanted):
    assert {key: small["flags"][flag].get(key) for key in wanted} == wanted


def test_a_field_without_cli_metadata_or_marked_no_cli_is_no_flag(small):
    assert "--hidden" not in small["flags"] and "--plain" not in small["flags"]


def test_the_reader_never_imports_the_release():
    """Importing SGLang would pull torch and its kernels: the reader parses text with ast alone."""
    tree = ast.parse(Path(reader.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} | \
        {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not any(name and name.startswith("sglang") and not name.startswith("sglang_infra") for name in imported)
    assert "importlib" not in imported


# ---------------------------------------------------------------- a flag and its value judged

@pytest.mark.parametrize("image, version, wanted", [
    ("lmsysorg/sglang:v0.5.16", None, "0.5.16"),
    ("lmsysorg/sglang:v0.5.16-cu130", None, "0.5.16"),
    ("registry.local:5000/lmsysorg/sglang:v0.5.23.post1", None, "0.5.23.post1"),
    ("mirror.local/sglang:prod-2026-12", None, None),
    ("lmsysorg/sglang@sha256:" + "a" * 64, None, None),
    ("mirror.local/sglang:prod-2026-12", "0.5.16", "0.5.16"),
])
def test_the_images_release_comes_from_its_tag_or_sglang_version(image, version, wanted):
    assert tables.image_version(image, version) == wanted


@pytest.mark.parametrize("flag, value, wrong", [
    ("--cuda-graph-backend-prefill", "disabled", None),
    ("--cuda-graph-backend-prefill", "disable", "--cuda-graph-backend-prefill=disable is not one of SGLang 0.5.16's "
                                                "choices"),
    ("--cuda-graph-backend-prefil", "disabled", "--cuda-graph-backend-prefil is not an argument of SGLang 0.5.16 (did "
                                                "you mean --cuda-graph-backend-prefill"),
    ("--allow-auto-truncate", True, None),
    ("--allow-auto-truncate", "yes", "--allow-auto-truncate is a switch in SGLang 0.5.16: it takes no value"),
    ("--tp-size", "2", None),
    ("--tp-size", "two", "--tp-size=two is not an integer"),
    ("--tp-size", True, "--tp-size takes a value in SGLang 0.5.16, and none was given"),
    ("--mem-fraction-static", "0.85", None),
    ("--mem-fraction-static", "most", "--mem-fraction-static=most is not a number"),
    ("--context-length", "128k", None),
    ("--tool-call-parser", "qwen3_coder", None),
    ("--tool-call-parser", "qwen4_coder", "'qwen4_coder' is not a tool-call parser SGLang 0.5.16 registers"),
    ("--reasoning-parser", "k2_horizon", "'k2_horizon' is not a reasoning parser SGLang 0.5.16 registers"),
    ("--speculative-algorithm", "EAGLE3", None),
    ("--kv-cache-dtype", "fp8_e4m3", None),
    ("--kv-cache-dtype", "fp8", "--kv-cache-dtype=fp8 is not one of SGLang 0.5.16's choices"),
])
def test_any_flag_is_judged_by_the_release(flag, value, wrong):
    table = tables.load("0.5.16")
    assert table is not None
    found = tables.judge(table, flag, value)
    assert (found[0] if found else None) == wrong or (wrong and found and found[0].startswith(wrong))


def test_a_parser_a_later_release_added_is_refused_by_the_pinned_one_and_accepted_by_that_release():
    old, new = tables.load("0.5.16"), tables.load("0.5.23")
    assert old is not None and new is not None
    assert tables.judge(old, "--reasoning-parser", "k2_horizon") is not None
    assert tables.judge(new, "--reasoning-parser", "k2_horizon") is None


# ---------------------------------------------------------------- a host's rendered flags, in the preflight

def test_the_defaults_render_nothing_the_pinned_release_refuses():
    plan = plan_for(DEFAULTS)
    assert lines("gpu-01", launch.problems(plan, DEFAULTS)) == []


def test_a_misspelt_choice_is_refused_naming_the_host_key_value_and_choices():
    data = {**DEFAULTS, "sglang_cuda_graph_backend_prefill": "disable"}
    assert lines("gpu-01", launch.problems(plan_for(data), data)) == [
        "host gpu-01: sglang_cuda_graph_backend_prefill: 'disable' (--cuda-graph-backend-prefill=disable): "
        "--cuda-graph-backend-prefill=disable is not one of SGLang 0.5.16's choices. Fix: use one of breakable, "
        "disabled, full, tc_piecewise."]


def test_a_parser_the_release_lacks_is_refused_naming_the_registry_entry():
    key = DEFAULTS["sglang_model"]
    data = {**DEFAULTS, "sglang_models": {**DEFAULTS["sglang_models"],
                                          key: {**DEFAULTS["sglang_models"][key], "reasoning_parser": "k2_horizon"}}}
    [line] = lines("gpu-01", launch.problems(plan_for(data), data))
    assert line.startswith(f"host gpu-01: sglang_models: entry {key!r}: reasoning_parser 'k2_horizon' "
                           "(--reasoning-parser): 'k2_horizon' is not a reasoning parser SGLang 0.5.16 registers. "
                           "Fix: use one of apertus2509, auto, ")
    assert "qwen3-thinking" in line and line.endswith("in the registry entry, or None to leave the flag out.")


def test_an_image_whose_release_has_no_table_is_refused_naming_the_script():
    data = {**DEFAULTS, "sglang_image": "lmsysorg/sglang:v0.4.0"}
    [line] = lines("gpu-01", launch.problems(plan_for(data), data))
    assert line.startswith("host gpu-01: sglang_image: SGLang 0.4.0 (lmsysorg/sglang:v0.4.0) has no table of its "
                           "arguments (sglang_infra/machine/sglang_args/0.4.0.json)")
    assert "Fix: make it with `scripts/sglang-args.sh 0.4.0`" in line and "0.5.16" in line


def test_a_mirrors_tag_needs_sglang_version_and_then_is_judged_by_it():
    data = {**DEFAULTS, "sglang_image": "mirror.local/sglang:prod-2026-12"}
    [line] = lines("gpu-01", launch.problems(plan_for(data), data))
    assert line.startswith("host gpu-01: sglang_version: None, and sglang_image mirror.local/sglang:prod-2026-12 does "
                           "not say in its tag which SGLang release it carries")
    named = {**data, "sglang_version": "0.5.16"}
    assert lines("gpu-01", launch.problems(plan_for(named), named)) == []


def test_a_host_that_serves_no_model_has_no_launch_flags_judged():
    data = {**DEFAULTS, "sglang_cuda_graph_backend_prefill": "disable"}
    assert lines("gw-1", launch.problems(replace(plan_for(data), serves=False), data)) == []


def test_the_table_is_read_once_per_process():
    tables.load.cache_clear()
    for _ in range(3):
        plan = plan_for(DEFAULTS)
        lines("gpu-01", launch.problems(plan, DEFAULTS))
    assert tables.load.cache_info().misses == 1


# ---------------------------------------------------------------- the model against the GPUs

# Hand-written in the shape of a hybrid Qwen3-Next-style config.json (every fourth layer full attention): 40 layers,
# 2 KV heads of 256, bfloat16.
HYBRID = {"num_hidden_layers": 40, "full_attention_interval": 4, "num_key_value_heads": 2, "num_attention_heads": 16,
          "head_dim": 256, "torch_dtype": "bfloat16", "max_position_embeddings": 262144}
# Hand-written in the shape of a dense 70B Llama-style config.json: 80 layers, 8 KV heads of 128, bfloat16.
DENSE_70B = {"num_hidden_layers": 80, "num_key_value_heads": 8, "num_attention_heads": 64, "hidden_size": 8192,
             "torch_dtype": "bfloat16", "max_position_embeddings": 131072}


def locked(plan, shard_bytes: int, shards: int, config: dict | None):
    """The plan with a lock record of its served model: ``shards`` weight files of ``shard_bytes``, and config."""
    model = plan.served
    files = tuple({"path": f"model-{i:05d}.safetensors", "size": shard_bytes, "sha256": "0" * 64,
                   "sha256_from": "lfs"} for i in range(shards)) + \
        ({"path": "config.json", "size": 1000, "sha256": "1" * 64, "sha256_from": "computed"},)
    return replace(plan, locked={model.key: LockedModel(model.key, model.repo_id, model.revision, files,
                                                        False, config)})


@pytest.mark.parametrize("gpu_mib, tp, fraction", [
    (143771, 1, 0.907),   # H200: 512 + 8192 x 1.5 + 128 + 256 x 2 = 13440 MiB (over the 10 GiB floor)
    (81559, 1, 0.835),    # H100 80GB: the same 13440 MiB
    (81559, 8, 0.818),    # H100 80GB, tp 8: 512 + 12288 + 1024 + 512 x 2 = 14848 MiB
    (24564, 1, 0.847),    # RTX 4090: 512 + 2048 x 1.5 + 128 + 24 x 2 = 3760 MiB
    (46068, 1, 0.851),    # L40S: 512 + 4096 x 1.5 + 128 + 32 x 2 = 6848 MiB
])
def test_sglangs_own_default_fraction_follows_its_0_5_16_rule(gpu_mib, tp, fraction):
    assert modelfit.sglang_default_fraction(gpu_mib, tp) == fraction


def test_one_tokens_kv_cache_counts_only_the_full_attention_layers_and_the_heads_on_one_gpu():
    shape = modelfit.kv_shape(HYBRID, tp=2, dtype=None)
    assert shape is not None
    assert (shape.layers, shape.heads, shape.head_dim, shape.dtype_bytes) == (10, 1, 256, 2)
    assert shape.token_bytes == 2 * 10 * 1 * 256 * 2
    dense = modelfit.kv_shape(DENSE_70B, tp=1, dtype="float16")
    assert dense is not None and dense.token_bytes == 2 * 80 * 8 * 128 * 2


def test_a_70b_model_on_one_48gb_gpu_is_refused_naming_every_figure():
    data = {**DEFAULTS, "sglang_tp_size": 1, "sglang_gpus": "all", "sglang_context_length": 131072}
    plan = locked(plan_for(data, "l40s-1gpu"), 5 * 10**9, 28, DENSE_70B)   # 140 GB of weights
    [line] = lines("gpu-01", modelfit.problems(plan))
    assert line.startswith(
        f"host gpu-01: sglang_model: {plan.served.key!r} ({plan.served.repo_id}@{plan.served.revision[:12]}) on "
        "1 x NVIDIA L40S (46068 MiB each) at --tp-size=1: weights 130.4 GiB (the lock's file sizes), 130.4 GiB per "
        "GPU; --mem-fraction-static 0.85 (sglang_mem_fraction_static) keeps 38.2 GiB of each 46068 MiB GPU for "
        "weights and KV cache: the weights alone are 92.1 GiB over it: it cannot be served there, and the pull "
        "would fetch 130.4 GiB for nothing")
    assert "Fix: serve it on more GPUs" in line


def test_a_model_that_fits_but_whose_kv_room_is_short_of_the_context_is_refused_with_the_tokens():
    data = {**DEFAULTS, "sglang_tp_size": 1, "sglang_context_length": 131072}
    plan = locked(plan_for(data, "l40s-1gpu"), 5 * 10**9, 7, DENSE_70B)   # 35 GB: 32.6 GiB, 5.6 GiB left
    [line] = lines("gpu-01", modelfit.problems(plan))
    fit = modelfit.fit(plan)
    assert fit is not None and fit.tokens is not None and 0 < fit.tokens < 131072
    assert f"leaving 5.6 GiB for the KV cache: {fit.tokens} tokens at 327680 B a token (80 layers x 8 KV head(s) " \
        "per GPU x 128 x 2 B x K,V), for a context of 131072 tokens (sglang_context_length)" in line
    assert f"Fix: serve a shorter context (sglang_context_length at most {fit.tokens})" in line


def test_the_default_model_fits_one_h200_and_its_figures_are_given():
    plan = locked(plan_for({**DEFAULTS, "sglang_tp_size": "derive"}, "h200-1gpu"), 4 * 10**9, 6, HYBRID)
    fit = modelfit.fit(plan)
    assert fit is not None and fit.fits and lines("gpu-01", modelfit.problems(plan)) == []
    assert fit.figures()["kv_tokens"] == (int(143771 * 2**20 * 0.85) - 24 * 10**9) // (2 * 10 * 2 * 256 * 2)
    assert fit.figures()["fraction_source"] == "sglang_mem_fraction_static"


def test_without_a_fraction_sglangs_default_for_the_gpu_is_used():
    plan = locked(plan_for({**DEFAULTS, "sglang_mem_fraction_static": None}, "h200-1gpu"), 4 * 10**9, 6, HYBRID)
    fit = modelfit.fit(plan)
    assert fit is not None and fit.fraction == 0.907 and fit.fraction_source == "SGLang's default for a 143771 MiB GPU"


def test_a_multi_node_group_splits_the_weights_over_its_whole_tp():
    plan = locked(plan_for(DEFAULTS, "h200-1gpu"), 5 * 10**9, 28, DENSE_70B)
    alone = modelfit.fit(plan)
    # as resolve gives a member its group's whole tp: the derived value and the flag rendered from it
    flags = tuple({**f, "arg": "--tp-size=4"} if f["arg"].startswith("--tp-size=") else f for f in plan.flags)
    grouped = modelfit.fit(replace(plan, flags=flags, derived={**plan.derived, "sglang_tp_size": replace(
        plan.derived["sglang_tp_size"], value=4)}))
    assert alone is not None and grouped is not None
    assert grouped.per_gpu * 4 >= grouped.weights and grouped.per_gpu < alone.per_gpu


def test_nothing_is_judged_without_gpus_or_a_lock():
    assert modelfit.fit(locked(plan_for({**DEFAULTS, "sglang_require_gpu": False}, None), 10**12, 1, DENSE_70B)) is None
    assert modelfit.fit(plan_for(DEFAULTS, "h200-1gpu")) is None


def test_a_lock_without_config_still_judges_the_weights():
    plan = locked(plan_for(DEFAULTS, "l40s-1gpu"), 5 * 10**9, 28, None)
    [line] = lines("gpu-01", modelfit.problems(plan))
    assert "the weights alone are" in line
    fits = modelfit.fit(locked(plan_for(DEFAULTS, "h200-1gpu"), 10**9, 2, None))
    assert fits is not None and fits.fits and "the lock has no copy of config.json" in fits.said()


def test_the_lock_keeps_only_the_shape_of_config_json():
    from sglang_infra.models.lockfile import config_subset

    raw = {**HYBRID, "vocab_size": 151936, "rope_theta": 1e7, "text_config": {"num_hidden_layers": 48, "x": 1}}
    assert config_subset(raw) == {**HYBRID, "text_config": {"num_hidden_layers": 48}}
    assert hashlib.sha256(repr(sorted(config_subset(raw))).encode()).hexdigest()   # plain data, JSON-ready


def test_the_templates_own_flags_are_judged_too():
    """--model-path, --served-model-name, --host, --port come from the compose template itself: judged as rendered,
    under sglang_compose_template."""
    plan = plan_for(DEFAULTS)
    found = {flag["arg"].split("=")[0]: flag["key"] for flag in launch.rendered(plan)}
    assert {k: found[k] for k in ("--model-path", "--served-model-name", "--host", "--port", "--tp-size")} == {
        "--model-path": "sglang_compose_template", "--served-model-name": "sglang_compose_template",
        "--host": "sglang_compose_template", "--port": "sglang_compose_template", "--tp-size": "sglang_tp_size"}
    table = tables.load("0.5.16")
    assert table is not None
    broken = replace(plan, compose=plan.compose.replace("--served-model-name=", "--served-name="))
    [line] = lines("gpu-01", launch.flag_problems(table, launch.rendered(broken), plan.served.key))
    assert line.startswith("host gpu-01: sglang_compose_template: '") and \
        "--served-name is not an argument of SGLang 0.5.16 (did you mean --served-model-name?)" in line


# ---------------------------------------------------------------- the preflight's hook

def test_the_preflight_refuses_a_misspelt_choice_before_any_host_changes(monkeypatch):
    """The whole preflight over a fleet (test_fleet_once.py's fake inventory): one host's misspelt choice refuses the
    run, naming it; a fleet without one passes."""
    from types import SimpleNamespace

    from conftest import converged_snapshot
    from test_fleet_once import Host, Inventory

    from sglang_infra.plan.problems import DeployDataError
    from sglang_infra.run import preflight

    def fleet(**data):
        state = SimpleNamespace()
        hosts = Inventory()
        hosts += [Host("gpu-01", ["production"], state, hosts, ssh_hostname="10.0.0.11"),
                  Host("gpu-02", ["production"], state, hosts, ssh_hostname="10.0.0.12", **data)]
        return state, hosts

    monkeypatch.setattr(preflight.factcache, "get", lambda host, fact, spec: converged_snapshot())
    monkeypatch.setattr(preflight.sources, "ask", lambda host, urls: dict.fromkeys(urls))   # every source answers
    monkeypatch.setattr(preflight, "inventory_file", lambda: None)
    state, good = fleet()
    try:
        assert all(preflight.preflight(host, good) for host in good)
    finally:
        for cache in (preflight._plans, preflight._reads, preflight._fleets):
            cache.pop(id(state), None)
    state, bad = fleet(sglang_cuda_graph_backend_prefill="disable")
    try:
        with pytest.raises(DeployDataError) as refused:
            preflight.preflight(bad[0], bad)
    finally:
        for cache in (preflight._plans, preflight._reads, preflight._fleets):
            cache.pop(id(state), None)
    assert refused.value.problems == [
        "host gpu-02: sglang_cuda_graph_backend_prefill: 'disable' (--cuda-graph-backend-prefill=disable): "
        "--cuda-graph-backend-prefill=disable is not one of SGLang 0.5.16's choices. Fix: use one of breakable, "
        "disabled, full, tc_piecewise."]
