"""Launch recipes: a registry entry's and a host's own SGLang arguments, and a speculative-decoding recipe with its
drafter, judged before any host changes and rendered with their reasons."""

from __future__ import annotations

import hashlib

import pytest
import yaml
from conftest import pinned_defaults, plan_for

from sglang_infra.fleet import lockgen
from sglang_infra.models import registry
from sglang_infra.plan.refusals import check_data

DEFAULTS = pinned_defaults()
TARGET = "qwen3.6-35b-a3b-awq"
DRAFTER = "qwen3.6-35b-eagle3"
DRAFTER_ENTRY = {"repo_id": "example-org/Qwen3.6-35B-EAGLE3", "revision": hashlib.sha1(b"d").hexdigest(),
                 "served_name": "qwen3.6-35b-eagle3"}
RECIPE = {"algorithm": "EAGLE3", "draft_model": DRAFTER, "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4,
          "reason": "EAGLE3 drafting doubles single-stream decode on this model (the operators' notes)"}


def data_with(entry: dict | None = None, drafter: dict | None = DRAFTER_ENTRY, **overrides) -> dict:
    models = {**DEFAULTS["sglang_models"], TARGET: {**DEFAULTS["sglang_models"][TARGET], **(entry or {})}}
    if drafter is not None:
        models[DRAFTER] = drafter
    return {**DEFAULTS, "sglang_models": models, **overrides}


def errors(data: dict) -> list[str]:
    return check_data("gpu-01", data)


def command(data: dict) -> list[str]:
    return yaml.safe_load(plan_for(data).compose)["services"]["sglang"]["command"]


# ---------------------------------------------------------------- arguments per model and per host

def test_an_entrys_arguments_render_after_the_runbooks_flags_each_with_its_reason():
    data = data_with({"launch_args": {"--kv-cache-dtype": {"value": "fp8_e5m2", "reason": "halves the KV cache"},
                                      "--disable-cuda-graph": {"value": True, "reason": "capture hangs here"}}})
    assert errors(data) == []
    plan = plan_for(data)
    args = [flag["arg"] for flag in plan.flags]
    assert args[-2:] == ["--kv-cache-dtype=fp8_e5m2", "--disable-cuda-graph"]
    assert "      # halves the KV cache [registry entry qwen3.6-35b-a3b-awq]\n      - \"--kv-cache-dtype=fp8_e5m2\"" \
        in plan.compose


def test_a_hosts_argument_wins_over_the_entrys_for_one_flag():
    data = data_with({"launch_args": {"--chunked-prefill-size": {"value": 8192, "reason": "the model's"}}},
                     sglang_launch_args={"--chunked-prefill-size": {"value": 2048, "reason": "small GPUs here"}})
    assert errors(data) == []
    rendered = [arg for arg in command(data) if arg.startswith("--chunked-prefill-size")]
    assert rendered == ["--chunked-prefill-size=2048"]


def test_a_change_of_arguments_is_a_change_of_the_config_the_gate_validates():
    before = plan_for(data_with())
    after = plan_for(data_with(sglang_launch_args={"--max-running-requests": {"value": 64, "reason": "queue"}}))
    assert before.compose_sha != after.compose_sha
    assert before.gate.files != after.gate.files


@pytest.mark.parametrize("flag", ["--tp-size", "--dtype", "--tool-call-parser", "--context-length"])
def test_a_derived_flag_is_refused_unless_the_argument_says_it_overrides_it(flag):
    found = errors(data_with({"launch_args": {flag: {"value": "1", "reason": "why"}}}))
    assert len(found) == 1
    assert f"{flag} is derived by the deploy" in found[0] and "'overrides': True" in found[0]
    assert found[0].startswith("host gpu-01: sglang_models: entry 'qwen3.6-35b-a3b-awq': launch_args")
    found = errors(data_with(sglang_launch_args={flag: {"value": "1", "reason": "why"}}))
    assert len(found) == 1 and found[0].startswith("host gpu-01: sglang_launch_args:")


def test_an_override_with_its_reason_takes_the_derived_flags_place():
    data = data_with({"launch_args": {"--tp-size": {"value": 1, "reason": "fits one GPU; the other serves a drafter",
                                                    "overrides": True}}})
    assert errors(data) == []
    args = [flag["arg"] for flag in plan_for(data).flags]
    assert "--tp-size=1" in args and "--tp-size=2" not in args
    assert args.index("--tp-size=1") == args.index("--context-length=262144") + 1   # in the derived flag's place


def test_an_override_without_a_reason_is_refused():
    found = errors(data_with({"launch_args": {"--tp-size": {"value": 1, "overrides": True}}}))
    assert len(found) == 1 and "has no reason" in found[0]


@pytest.mark.parametrize("flag, carrier", [("--api-key", "sglang_api_key_file"),
                                           ("--admin-api-key", "sglang_api_key_file"),
                                           ("--hf-token", "sglang_hf_token_file")])
def test_an_argument_that_carries_a_secret_is_refused_naming_the_key_that_carries_it(flag, carrier):
    found = errors(data_with(sglang_launch_args={flag: {"value": "s3cret", "reason": "auth"}}))
    assert len(found) == 1 and "would carry a secret" in found[0] and carrier in found[0]
    assert "s3cret" not in found[0]


@pytest.mark.parametrize("flag", ["--model-path", "--port", "--host", "--node-rank", "--speculative-algorithm",
                                  "--speculative-draft-model-path"])
def test_a_flag_the_deploy_writes_itself_is_refused(flag):
    found = errors(data_with({"launch_args": {flag: {"value": "x", "reason": "mine"}}}))
    assert len(found) == 1 and f"{flag} is written by the deploy" in found[0]


@pytest.mark.parametrize("spec, why", [
    ({"value": "x"}, "has no reason"),
    ({"value": None, "reason": "r"}, "is not True (a bare switch)"),
    ({"value": "two\nlines", "reason": "r"}, "is not True (a bare switch)"),
    ("fp8", "is not {'value': ..., 'reason': ...}"),
    ({"value": "x", "reason": "r", "why": "extra"}, "is not {'value': ..., 'reason': ...}"),
])
def test_a_malformed_argument_is_refused_with_the_fix(spec, why):
    found = errors(data_with(sglang_launch_args={"--kv-cache-dtype": spec}))
    assert len(found) == 1 and why in found[0] and "Fix:" in found[0]


def test_a_flag_not_spelt_as_a_flag_is_refused():
    found = errors(data_with(sglang_launch_args={"kv_cache_dtype": {"value": "fp8_e5m2", "reason": "r"}}))
    assert len(found) == 1 and "is not an SGLang flag written '--name'" in found[0]


# ---------------------------------------------------------------- speculative decoding

def test_a_recipe_renders_its_flags_and_the_drafters_pinned_snapshot():
    data = data_with({"speculative": RECIPE})
    assert errors(data) == []
    args = command(data)
    path = f"/hf-cache/hub/models--example-org--Qwen3.6-35B-EAGLE3/snapshots/{DRAFTER_ENTRY['revision']}"
    assert [a for a in args if a.startswith("--speculative")] == [
        "--speculative-algorithm=EAGLE3", "--speculative-num-steps=3", "--speculative-eagle-topk=1",
        "--speculative-num-draft-tokens=4", f"--speculative-draft-model-path={path}"]


def test_the_drafter_is_kept_pulled_locked_and_shared_like_the_model():
    data = data_with({"speculative": RECIPE})
    assert registry.kept_keys(data) == [TARGET, DRAFTER]
    plan = plan_for(data)
    assert [model.key for model in plan.kept] == [TARGET, DRAFTER]
    # The lock resolves every kept key; a drafter missing from the registry stops the lock with the fix.
    with pytest.raises(lockgen.LockGenError, match="not in sglang_models"):
        lockgen.generate([("gpu-01", data_with({"speculative": RECIPE}, drafter=None))], None, [])


def test_a_drafter_needs_no_role_or_baseline_and_warns_of_nothing():
    data = data_with({"speculative": RECIPE})
    assert errors(data) == []
    assert registry.warnings(data) == []


def test_a_drafter_not_in_the_registry_is_refused_before_the_pull():
    found = errors(data_with({"speculative": RECIPE}, drafter=None))
    assert len(found) == 1
    assert "draft_model 'qwen3.6-35b-eagle3' is not in the registry sglang_models" in found[0]


def test_an_unpinned_drafter_is_refused():
    found = errors(data_with({"speculative": RECIPE}, drafter={**DRAFTER_ENTRY, "revision": None}))
    assert len(found) == 1 and "'qwen3.6-35b-eagle3' has no pinned revision" in found[0]


def test_a_denied_drafter_is_refused():
    data = data_with({"speculative": RECIPE},
                     sglang_denied_models={**DEFAULTS["sglang_denied_models"],
                                           DRAFTER_ENTRY["repo_id"]: {"failure": "drafts garbage", "instead": "x"}})
    found = errors(data)
    assert len(found) == 1 and "known-broken" in found[0] and "drafts garbage" in found[0]


@pytest.mark.parametrize("recipe, why", [
    ({**RECIPE, "draft_model": None}, "EAGLE3 drafts with a separate model, and none is named"),
    ({**RECIPE, "algorithm": "NGRAM"}, "NGRAM takes no drafter model"),
    ({**RECIPE, "num_steps": 0}, "num_steps 0 is not an integer 1-16"),
    ({**RECIPE, "min_accept_length": 0.5}, "min_accept_length 0.5 is not a number >= 1"),
    ({**RECIPE, "algorithm": "eagle 3"}, "algorithm 'eagle 3' is not"),
    ({k: v for k, v in RECIPE.items() if k != "reason"}, "lacks 'reason'"),
    ({**RECIPE, "topk": 1}, "unknown field 'topk'"),
])
def test_a_malformed_recipe_is_refused_naming_the_entry(recipe, why):
    found = errors(data_with({"speculative": recipe}))
    assert any(why in line and "entry 'qwen3.6-35b-a3b-awq': speculative" in line for line in found), found


def test_a_recipe_without_a_drafter_renders_no_drafter_path():
    data = data_with({"speculative": {"algorithm": "NEXTN", "num_steps": 2, "reason": "the model's MTP layers"}})
    assert errors(data) == []
    args = command(data)
    assert "--speculative-algorithm=NEXTN" in args
    assert not any(arg.startswith("--speculative-draft-model-path") for arg in args)
    assert registry.kept_keys(data) == [TARGET]


def test_a_lock_without_the_drafter_is_refused_naming_it():
    from sglang_infra.models import lockfile

    data = data_with({"speculative": RECIPE})
    target = data["sglang_models"][TARGET]
    lock = lockfile.Lock(path="sglang.lock", written_at="now", images={}, wheels={}, models={
        TARGET: lockfile.LockedModel(key=TARGET, repo_id=target["repo_id"], commit=target["revision"], files=())})
    found = lockfile.problems(lock, {**data, "sglang_image_archive": "/x.tar"}, None)
    assert found == [("sglang_lock", "sglang.lock has no entry for the model 'qwen3.6-35b-eagle3'",
                      "add it with scripts/lock.sh (or --update qwen3.6-35b-eagle3@main to lock the branch head)")]


def test_the_gate_records_the_accept_length_and_holds_the_recipes_floor():
    def call(plan) -> str:
        lines = plan.scripts["benchmark.sh"].splitlines()
        return next(line for line in lines if "--min-fraction " in line and not line.startswith("#"))

    assert "--speculative" not in call(plan_for(data_with()))
    recipe = plan_for(data_with({"speculative": {**RECIPE, "min_accept_length": 2.5}}))
    assert "--speculative --min-accept-length 2.5 --min-fraction" in call(recipe)
    assert recipe.gate.speculative and recipe.gate.min_accept_length == 2.5


def test_a_config_names_its_drafter_so_a_prune_keeps_it_while_a_config_on_disk_needs_it(tmp_path):

    from sglang_infra.hostside.read import snapshot

    plan = plan_for(data_with({"speculative": RECIPE}))
    drafter = f"{DRAFTER_ENTRY['repo_id']}@{DRAFTER_ENTRY['revision']}"
    assert plan.keep[-1] == drafter
    assert f'      sglang.drafter: "{drafter}"\n' in plan.compose
    # The snapshot reads the labels of every compose file on disk (the running config, its rollback): the prune
    # keeps whatever they name.
    assert set(snapshot.labelled(plan.compose)) == {plan.served.pinned, drafter}


def test_a_prune_never_removes_the_drafter_an_entry_references():
    from sglang_infra.operations.models import prune_plan

    plan = plan_for(data_with({"speculative": RECIPE}))
    old = "0" * 40
    cache = {"repos": {DRAFTER_ENTRY["repo_id"]: {"revisions": {DRAFTER_ENTRY["revision"]: {"size": 10},
                                                                 old: {"size": 5}}}},
             "referenced": []}
    assert prune_plan(cache, plan.keep) == [(DRAFTER_ENTRY["repo_id"], old, 5)]
    # Without the recipe the drafter is no longer kept, unless a config on disk (its label) still names it.
    plain = plan_for(data_with())
    assert (DRAFTER_ENTRY["repo_id"], DRAFTER_ENTRY["revision"], 10) in prune_plan(cache, plain.keep)
    named = {**cache, "referenced": [f"{DRAFTER_ENTRY['repo_id']}@{DRAFTER_ENTRY['revision']}"]}
    assert prune_plan(named, plain.keep) == [(DRAFTER_ENTRY["repo_id"], old, 5)]


# ---------------------------------------------------------------- against the pinned SGLang's own arguments

def launch_problems(data: dict, case: str = "rtx4090-2gpu-node") -> list[tuple[str, str, str]]:
    from sglang_infra.machine.sglang_args import launch

    return launch.problems(plan_for(data, case), data)


def test_a_recipe_the_pinned_release_accepts_is_not_refused():
    assert launch_problems(data_with({"speculative": RECIPE, "launch_args": {
        "--kv-cache-dtype": {"value": "fp8_e5m2", "reason": "r"}, "--disable-cuda-graph": {"value": True,
                                                                                       "reason": "r"}}})) == []


@pytest.mark.parametrize("entry, words", [
    ({"speculative": {**RECIPE, "algorithm": "EAGEL3"}},
     ["entry 'qwen3.6-35b-a3b-awq': 'EAGEL3' (--speculative-algorithm=EAGEL3): 'EAGEL3' is not a speculative "
      "algorithm SGLang 0.5.16 registers", "use one of DFLASH, DSPARK, EAGLE, EAGLE3, FROZEN_KV_MTP, NEXTN, NGRAM"]),
    ({"launch_args": {"--kv-cache-dtyp": {"value": "fp8_e5m2", "reason": "r"}}},
     ["entry 'qwen3.6-35b-a3b-awq'", "--kv-cache-dtyp is not an argument of SGLang 0.5.16 (did you mean "
      "--kv-cache-dtype"]),
    ({"launch_args": {"--kv-cache-dtype": {"value": "fp3", "reason": "r"}}},
     ["--kv-cache-dtype=fp3 is not one of SGLang 0.5.16's choices", "fp8_e5m2"]),
], ids=["misspelt-algorithm", "flag-the-release-lacks", "choice-the-release-lacks"])
def test_a_recipe_the_pinned_release_would_reject_is_refused_naming_the_entry_and_the_choices(entry, words):
    found = launch_problems(data_with(entry))
    assert len(found) == 1 and found[0][0] == "sglang_models"
    said = f"{found[0][1]}. Fix: {found[0][2]}"
    for word in words:
        assert word in said, said


def test_the_model_fit_counts_the_drafters_weights():
    from dataclasses import replace

    from sglang_infra.machine import modelfit
    from sglang_infra.models.lockfile import LockedModel

    def locked(data, drafter_bytes):
        plan = plan_for(data, "h200-1gpu")
        files = ({"path": "model.safetensors", "size": 60 * 10**9, "sha256": "a" * 64},)
        models = {TARGET: LockedModel(key=TARGET, repo_id="org/t", commit="c" * 40, files=files)}
        if drafter_bytes:
            models[DRAFTER] = LockedModel(key=DRAFTER, repo_id="org/d", commit="d" * 40, files=(
                {"path": "model.safetensors", "size": drafter_bytes, "sha256": "b" * 64},))
        return replace(plan, locked=models)

    alone = modelfit.fit(locked(data_with(), 0))
    drafted = modelfit.fit(locked(data_with({"speculative": RECIPE}), 3 * 10**9))
    assert alone is not None and drafted is not None
    assert drafted.weights == alone.weights + 3 * 10**9 and drafted.drafter_weights == 3 * 10**9
    assert "the drafter's 2.8 GiB included" in drafted.said()
