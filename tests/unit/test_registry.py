"""The model registry: what a host may serve and keep, and what is refused."""

from __future__ import annotations

import pytest
from conftest import pinned_defaults

from sglang_infra.models import registry as models
from sglang_infra.operations.models import prune_plan
from sglang_infra.plan.refusals import check_data

DEFAULTS = pinned_defaults()
PROD = "qwen3.6-35b-a3b-awq"


def registry_with(key, **fields):
    base = {**DEFAULTS["sglang_models"][PROD], **fields}
    return {**DEFAULTS["sglang_models"], key: {k: v for k, v in base.items() if v is not ...}}


def errors_for(**overrides):
    return check_data("gpu-01", {**DEFAULTS, **overrides})


@pytest.mark.parametrize("repo_id", ["QuantTrio/Qwen3.6-27B-AWQ", "quanttrio/qwen3.6-27b-awq",
                                     "cyankiwi/Qwen3.6-35B-A3B-AWQ-4bit", "CYANKIWI/QWEN3.6-35B-A3B-AWQ-4BIT"])
def test_a_denylisted_quant_is_refused_whatever_its_case(repo_id):
    errors = errors_for(sglang_models=registry_with("candidate", repo_id=repo_id, unvetted=True),
                        sglang_model="candidate")
    assert len(errors) == 1
    assert errors[0].startswith("host gpu-01: sglang_model: 'candidate' is " + repo_id)
    assert "repetition loops" in errors[0] and "Fix: use '" in errors[0] and "instead" in errors[0]


def test_a_denylisted_repo_id_named_directly_is_refused_with_the_alternative():
    errors = errors_for(sglang_cached_models=["QuantTrio/Qwen3.6-27B-AWQ"])
    assert len(errors) == 1
    assert "sglang_cached_models: 'QuantTrio/Qwen3.6-27B-AWQ' is a known-broken quant" in errors[0]
    assert "Fix: use 'qwen3.6-27b-awq-int4' (cyankiwi/Qwen3.6-27B-AWQ-INT4) instead" in errors[0]


def test_an_unknown_model_is_refused():
    errors = errors_for(sglang_model="someone/new-model")
    assert len(errors) == 1
    assert "is not in the registry sglang_models, so it was never vetted" in errors[0]
    assert "marked 'unvetted': True" in errors[0]


def test_a_repo_id_in_place_of_a_key_points_at_the_key():
    errors = errors_for(sglang_model="quanttrio/Qwen3.6-35B-A3B-AWQ")
    assert errors == ["host gpu-01: sglang_model: 'quanttrio/Qwen3.6-35B-A3B-AWQ' is a repo id; hosts name models "
                      "by registry key. Fix: use the key 'qwen3.6-35b-a3b-awq'."]


def test_an_entry_without_a_vetting_record_is_refused_unless_marked_unvetted():
    registry = registry_with("trial", repo_id="someone/new-model", baseline_tok_s=None)
    errors = errors_for(sglang_models=registry, sglang_model="trial")
    assert len(errors) == 1 and "entry 'trial' is not vetted" in errors[0]
    registry["trial"]["unvetted"] = True
    assert errors_for(sglang_models=registry, sglang_model="trial") == []


def test_an_unvetted_model_warns_on_every_run():
    registry = registry_with("trial", repo_id="someone/new-model", unvetted=True)
    data = {**DEFAULTS, "sglang_models": registry, "sglang_cached_models": ["trial"]}
    (warning,) = models.warnings(data)
    assert warning.startswith("trial (someone/new-model@") and "marked unvetted" in warning
    assert models.warnings(DEFAULTS) == []


@pytest.mark.parametrize("revision", ["main", "v1.0", "abc123", "A" * 40, None])
def test_a_revision_must_be_a_full_commit(revision):
    errors = errors_for(sglang_models=registry_with(PROD, revision=revision))
    assert len(errors) == 1 and "sglang_models: entry 'qwen3.6-35b-a3b-awq'" in errors[0]


@pytest.mark.parametrize("field,value", [("served_name", "has space"), ("tool_call_parser", "qwen3; rm -rf /"),
                                         ("role", "staging"), ("baseline_tok_s", -1), ("colour", "blue"),
                                         ("repo_id", "not-a-repo-id")])
def test_bad_entry_fields_are_refused(field, value):
    errors = errors_for(sglang_models=registry_with(PROD, **{field: value}))
    assert len(errors) == 1 and errors[0].startswith("host gpu-01: sglang_models: entry 'qwen3.6-35b-a3b-awq'")


def test_an_unused_broken_entry_does_not_block_other_hosts():
    registry = registry_with("draft", revision="main")
    assert errors_for(sglang_models=registry) == []


def test_kept_models_are_the_served_one_then_the_cached_ones_once():
    data = {**DEFAULTS, "sglang_cached_models": ["qwen3.6-27b-awq-int4", PROD]}
    assert [m.key for m in models.kept(data)] == [PROD, "qwen3.6-27b-awq-int4"]


def test_the_token_comes_from_the_file_before_the_environment(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("hf_from_file\n")
    assert models.control_token({"sglang_hf_token_file": str(token_file)}, {"HF_TOKEN": "hf_env"}) == b"hf_from_file"
    assert models.control_token({"sglang_hf_token_file": None}, {"HF_TOKEN": " hf_env "}) == b"hf_env"
    assert models.control_token({"sglang_hf_token_file": None}, {}) is None


def test_prune_plan_keeps_kept_and_referenced_revisions():
    cache = {"repos": {
        "a/one": {"revisions": {"1" * 40: {"size": 10}, "2" * 40: {"size": 20}}},
        "b/two": {"revisions": {"3" * 40: {"size": 30}}},
        "c/three": {"revisions": {"4" * 40: {"size": 40}}},
    }, "referenced": ["b/two@" + "3" * 40]}
    plan = prune_plan(cache, ["A/One@" + "1" * 40])
    assert plan == [("a/one", "2" * 40, 20), ("c/three", "4" * 40, 40)]


@pytest.mark.parametrize("repo_id", ["a--b/model", "org/x..y", "org/name.git", "-org/name", "org/" + "n" * 97,
                                     "QuantTrio/Qwen3.6-27B-AWQ\n"])
def test_a_repo_id_huggingface_hub_rejects_is_refused_up_front(repo_id):
    registry = {**DEFAULTS["sglang_models"]}
    registry["qwen3.6-35b-a3b-awq"] = {**registry["qwen3.6-35b-a3b-awq"], "repo_id": repo_id}
    errors = errors_for(sglang_models=registry)
    assert any("repo_id" in e for e in errors), errors


def _generated_repo_ids():
    """Ids around every edge of huggingface_hub's rule: the characters at each end, '--', '..', '.git', lengths near
    96, one part or two, several slashes, non-ASCII word characters, whitespace."""
    import random

    rng = random.Random(56)
    alphabet = "aZ09_-./é \n"
    ids = ["a", "a/b", "_/_", "-a", "a-", "a.", ".a", "a/b.git", "a.git/b", "a--b", "a..b", "a-.b", "a.-b", "a/-b",
           "a/b-", "a//b", "/a", "a/", "a/b/c", "", "a" * 96, "a" * 97, "a" * 96 + "/" + "b" * 96,
           "a" * 96 + "/" + "b" * 97, "café/x", "org/文件"]
    for _ in range(4000):
        ids.append("".join(rng.choice(alphabet) for _ in range(rng.choice((1, 2, 3, 5, 8, 95, 96, 97)))))
        part = lambda: "".join(rng.choice("ab0_-.") for _ in range(rng.randint(1, 98)))  # noqa: E731
        ids.append(f"{part()}/{part()}")
    return ids


def test_the_repo_id_rule_is_huggingface_hubs_own():
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    from sglang_infra.models.registry import hub_accepts

    def theirs(repo_id):
        try:
            validate_repo_id(repo_id)
        except HFValidationError:
            return False
        return True

    differ = [repo_id for repo_id in _generated_repo_ids() if hub_accepts(repo_id) != theirs(repo_id)]
    assert differ == []


def test_judging_the_models_loads_no_http_client():
    """A settled run judges every host's models too: the repo-id rule must not import huggingface_hub (and with it
    httpx), about 0.02 s of every run."""
    import json
    import subprocess
    import sys

    program = ("import json, sys\n"
               "from sglang_infra.models import registry\n"
               "data = json.loads(sys.stdin.read())\n"
               "print(registry.problems(data))\n"
               "print(sorted(m for m in sys.modules if m.split('.')[0] in ('huggingface_hub', 'httpx', 'httpx2')))\n")
    models = registry_with(PROD, repo_id="a--b/model")
    data = {**DEFAULTS, "sglang_models": models}
    out = subprocess.run([sys.executable, "-c", program], input=json.dumps(data, default=list), capture_output=True,
                         text=True, timeout=60, check=True).stdout.splitlines()
    assert "repo_id 'a--b/model' is not" in out[0]     # the rule was applied
    assert out[1] == "[]"
