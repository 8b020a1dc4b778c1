"""Launch recipes on a real host (keyed, the secure default): a served entry's speculative recipe with a drafter
that is itself a registry entry, pulled from the STAND-IN Hub, verified and mounted read-only (the STAND-IN server
refuses to start on a drafter path it cannot load), and an entry's own argument; a re-run changes nothing; a drafter
not in the registry, a derived flag replaced without saying so, a misspelt algorithm and an argument the pinned
SGLang lacks (its own table, machine/sglang_args/) are refused before any change; an accept length below the
recipe's floor fails the gate and rolls back."""

from __future__ import annotations

import json

import pytest

from harness import run_deploy
from testbed import hub as standin_hub

DOCKER = "/opt/sglang/docker"
HUB = "/opt/sglang/hf-cache/hub"
TARGET = "qwen3.6-35b-a3b-awq"     # standin-org/tiny-chat
DRAFTER = "tiny-chat-drafter"
DRAFTER_REPO = "standin-org/tiny-chat-drafter"
KEY = "sk-recipes-0123456789abcdef"


def registry(recipe: dict | None = None, drafter: bool = True, args: dict | None = None) -> dict:
    models = standin_hub.registry(standin_hub.commits())
    target = {**models[TARGET]}
    if recipe is not None:
        target["speculative"] = recipe
    if args is not None:
        target["launch_args"] = args
    models[TARGET] = target
    if drafter:
        models[DRAFTER] = {"repo_id": DRAFTER_REPO, "revision": standin_hub.commits()[DRAFTER_REPO]["main"],
                           "served_name": "tiny-chat-drafter"}
    return models


RECIPE = {"algorithm": "EAGLE3", "draft_model": DRAFTER, "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4,
          "min_accept_length": 2.0, "reason": "the drafter keeps about 2.5 tokens a step on this model"}
ARGS = {"--chunked-prefill-size": {"value": 4096, "reason": "smaller prefill chunks keep decode latency flat"}}


def data(models: dict) -> list[str]:
    return ["--data", f"sglang_models={json.dumps(models)}"]


def command(host) -> list[str]:
    out = host.exec(f"docker inspect -f '{{{{json .Config.Cmd}}}}' $(cd {DOCKER} && docker compose ps -q sglang)")
    return json.loads(out.stdout)


def container(host) -> str:
    return host.exec(f"cd {DOCKER} && docker compose ps -q sglang").stdout.strip()


def sha(host, path: str) -> str:
    return host.exec(f"sha256sum {path}").stdout.split()[0]


@pytest.fixture(scope="module")
def served(testbed, workdir):
    standin_hub.ensure_hub()
    host = testbed.host("sg-recipes-1")
    key_file = workdir / "api-key"
    key_file.write_text(KEY + "\n")
    inventory = testbed.inventory(workdir / "recipes.py", {"production": [(host, {
        "sglang_api_key_file": str(key_file), "sglang_models": registry(RECIPE, args=ARGS)})]})
    first = run_deploy(inventory)
    assert first.returncode == 0, first.output[-4000:]
    return host, inventory, first


def test_the_drafter_is_pulled_verified_and_served_from_its_pinned_snapshot(served):
    host, _, first = served
    commit = standin_hub.commits()[DRAFTER_REPO]["main"]
    snapshot = f"{HUB}/models--standin-org--tiny-chat-drafter/snapshots/{commit}"
    assert host.exec(f"test -f {snapshot}/model.safetensors").returncode == 0
    args = command(host)
    assert f"--speculative-draft-model-path=/hf-cache/hub/models--standin-org--tiny-chat-drafter/snapshots/{commit}" \
        in args
    assert "--speculative-algorithm=EAGLE3" in args and "--chunked-prefill-size=4096" in args
    # The server loaded the drafter from the read-only cache: the stand-in exits at start on a path it cannot load.
    assert host.exec(f"cd {DOCKER} && docker compose ps --format '{{{{.State}}}}'").stdout.split() == ["running"]
    assert "gate[sg-recipes-1]: passed; this config is now the last known-good one" in first.output


def test_the_gate_recorded_the_accept_length_beside_the_throughput(served):
    host = served[0]
    record = json.loads(host.exec(f"cat {DOCKER}/.last-gate").stdout)
    assert record["passed"] is True
    assert record["benchmark"]["avg_spec_accept_length"] == 2.5
    assert record["benchmark"]["min_accept_length"] == 2.0 and record["benchmark"]["tok_per_s"] > 0


def test_a_rerun_changes_nothing(served):
    host, inventory, _ = served
    before = container(host)
    again = run_deploy(inventory)
    assert again.returncode == 0, again.output[-3000:]
    assert again.changed(host.name) == [], again.changed(host.name)
    assert container(host) == before


@pytest.mark.parametrize("models, words", [
    (registry(RECIPE, drafter=False, args=ARGS),
     ["sglang_models: entry 'qwen3.6-35b-a3b-awq': speculative: draft_model 'tiny-chat-drafter' is not in the "
      "registry"]),
    (registry(RECIPE, args={"--tp-size": {"value": 1, "reason": "one GPU"}}),
     ["entry 'qwen3.6-35b-a3b-awq': launch_args['--tp-size']: --tp-size is derived by the deploy",
      "'overrides': True"]),
    (registry({**RECIPE, "algorithm": "EAGEL3"}, args=ARGS),
     ["sglang_models: entry 'qwen3.6-35b-a3b-awq': 'EAGEL3' (--speculative-algorithm=EAGEL3): 'EAGEL3' is not a "
      "speculative algorithm SGLang 0.5.16 registers", "use one of DFLASH, DSPARK, EAGLE, EAGLE3"]),
    (registry(RECIPE, args={"--kv-cache-dtyp": {"value": "fp8_e5m2", "reason": "halves the KV cache"}}),
     ["entry 'qwen3.6-35b-a3b-awq'", "--kv-cache-dtyp is not an argument of SGLang 0.5.16"]),
    (registry(RECIPE, args={"--tp-size": {"value": 1, "overrides": True}}),
     ["entry 'qwen3.6-35b-a3b-awq': launch_args['--tp-size'] has no reason", "add 'reason'"]),
], ids=["drafter-not-in-registry", "tp-size-without-override", "misspelt-algorithm", "argument-the-release-lacks",
        "override-without-a-reason"])
def test_a_bad_recipe_is_refused_before_any_change(served, models, words):
    host, inventory, _ = served
    compose = sha(host, f"{DOCKER}/compose.yaml")
    before = container(host)
    refused = run_deploy(inventory, *data(models))
    assert refused.returncode != 0
    assert "refused before any change on any host" in refused.output
    for word in words:
        assert word in refused.output, refused.output[-3000:]
    assert sha(host, f"{DOCKER}/compose.yaml") == compose and container(host) == before


def test_an_accept_length_below_the_floor_fails_the_gate_and_rolls_back(served):
    host, inventory, _ = served
    good = sha(host, f"{DOCKER}/compose.yaml")
    low = {"STANDIN_LOAD_SECONDS": "2", "STANDIN_ACCEPT_LENGTH": "1.2"}
    failed = run_deploy(inventory, "--data", f"sglang_extra_env={json.dumps(low)}")
    assert failed.returncode != 0
    assert "the average accept length 1.20 is below the recipe's floor 2" in failed.output, failed.output[-3000:]
    record = json.loads(host.exec(f"cat {DOCKER}/.last-gate").stdout)
    assert record["passed"] is False and record["rolled_back"] is True
    assert sha(host, f"{DOCKER}/compose.yaml") == good
    assert "STANDIN_ACCEPT_LENGTH" not in host.exec(f"cat {DOCKER}/compose.yaml").stdout
    assert host.exec(f"cd {DOCKER} && docker compose ps --format '{{{{.State}}}}'").stdout.split() == ["running"]
