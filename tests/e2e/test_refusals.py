"""Bad input is refused before anything changes on any host: the message
names the host, the key and the fix, and the exit code is non-zero."""

from __future__ import annotations

import pytest

from harness import run_deploy
from sglang_infra.models import lockfile

from .test_gpu_driver import RECORDED, give_gpu
from .test_status import rows, run_status

GOOD, BAD, ALIEN = "sg-refuse-good", "sg-refuse-bad", "sg-refuse-alien"

# What a host looks like, for "untouched": account, layout, engine, packages.
FINGERPRINT = (
    "getent passwd sglang; getent group sglang; getent group docker; id -nG sglang 2>&1; "
    "ls -la --time-style=+%s /opt /opt/sglang 2>&1; find /opt/sglang -printf '%p %u %g %m %s\\n' 2>&1; "
    "dpkg-query -W -f='${Package} ${Status}\\n' docker.io docker-compose 2>&1; "
    "stat -c %Y /var/lib/apt/lists 2>&1; stat -c '%U %G %a' /srv/crontabs 2>&1; true"
)


@pytest.fixture(scope="module")
def hosts(testbed):
    made = {name: testbed.host(name) for name in (GOOD, BAD, ALIEN)}
    # The bad host already has an sglang account, made by hand with other ids.
    made[BAD].exec("groupadd --system --gid 1234 sglang && useradd --system --uid 1234 --gid 1234 "
                   "--home-dir /opt/sglang --no-create-home --shell /usr/sbin/nologin sglang")
    # A directory of someone else's, with content, that data could name as the home.
    made[BAD].exec("mkdir -p /srv/data && echo x > /srv/data/notes && chown -R nobody:nogroup /srv/data")
    # A root-owned directory with content that is not the deploy's (like /var/spool/cron/crontabs).
    made[BAD].exec("mkdir -m 700 /srv/crontabs && echo '* * * * * true' > /srv/crontabs/root")
    # The alien host claims to be an operating system the deploy does not support.
    made[ALIEN].exec("sed -i -e 's/^ID=.*/ID=rocky/' -e 's/^VERSION_ID=.*/VERSION_ID=\"9.4\"/' /etc/os-release")
    return made


def fingerprints(hosts):
    return {name: host.exec(FINGERPRINT).stdout for name, host in hosts.items()}


CASES = {
    "typo": ({"sglang_imgae": "lmsysorg/sglang:v0.5.16"}, BAD, "sglang_imgae", "did you mean sglang_image"),
    "wrong type": ({"sglang_port": "thirty"}, BAD, "sglang_port", "use a port number"),
    "latest tag": ({"sglang_image": "lmsysorg/sglang:latest"}, BAD, "sglang_image", "floating 'latest' tag"),
    "missing tag": ({"sglang_image": "lmsysorg/sglang"}, BAD, "sglang_image", "has no tag"),
    "tp above gpus": ({"sglang_tp_size": 4, "sglang_gpus": 2}, BAD, "sglang_tp_size", "sglang_tp_size <= 2"),
    "dtype without conv dtype": ({"sglang_dtype": "float16", "sglang_mamba_conv_dtype": None}, BAD,
                                 "sglang_mamba_conv_dtype", "set both to 'float16', both to 'derive', or neither"),
    "no gpu while one is required": ({"sglang_require_gpu": True}, BAD, "sglang_require_gpu",
                                     "no GPU found by nvidia-smi"),
    "negative fraction": ({"sglang_mem_fraction_static": -0.5}, BAD, "sglang_mem_fraction_static", "a fraction"),
    "admin missing": ({"sglang_admins": ["mallory"]}, BAD, "sglang_admins", "create 'mallory' first"),
    "uid differs": ({"sglang_uid": 950}, BAD, "sglang_uid", "set sglang_uid = 1234"),
    "gid differs": ({"sglang_gid": 950}, BAD, "sglang_gid", "set sglang_gid = 1234"),
    "unsupported os": ({}, ALIEN, "os", "use one of: Debian 12, Debian 13"),
    "denylisted quant": ({"sglang_model": "cyankiwi/qwen3.6-35b-a3b-awq-4BIT"}, BAD, "sglang_model",
                         "a known-broken quant (cyankiwi/Qwen3.6-35B-A3B-AWQ-4bit: the same repetition loops"),
    "denylisted cached quant": ({"sglang_cached_models": ["QuantTrio/Qwen3.6-27B-AWQ"]}, BAD,
                                "sglang_cached_models", "use 'qwen3.6-27b-awq-int4' (cyankiwi/Qwen3.6-27B-AWQ-INT4)"),
    "unknown model": ({"sglang_model": "someone/new-model"}, BAD, "sglang_model",
                      "add an entry for it marked 'unvetted': True"),
    "key that is neither ours nor pyinfra's": ({"sudo": True}, BAD, "sudo", "did you mean _sudo?"),
    "system directory as home": ({"sglang_home": "/etc"}, BAD, "sglang_home", "/etc is a system directory"),
    "someone else's directory as home": ({"sglang_home": "/srv/data"}, BAD, "sglang_home",
                                         "/srv/data already exists with content and belongs to nobody"),
    "root's directory with content as tools dir": ({"sglang_tools_dir": "/srv/crontabs"}, BAD, "sglang_tools_dir",
                                                   "/srv/crontabs already exists with content that is not the "
                                                   "deploy's (root;"),
    "one flashinfer package apart": (
        {"sglang_toolchain_image": True, "sglang_flashinfer_versions": {"flashinfer-jit-cache": "0.6.13"}}, BAD,
        "sglang_flashinfer_versions", "flashinfer-jit-cache is set to 0.6.13+cu130, but flashinfer-python is "
        "0.6.14 and flashinfer-cubin is 0.6.14: SGLang refuses to start with a version-mismatch error"),
    "jit-cache flavour not the image's": (
        {"sglang_toolchain_image": True, "sglang_cuda_flavor": "cu131"}, BAD, "sglang_cuda_flavor",
        "the SGLang image is built for cu130: the JIT cache would hold kernels built for another CUDA"),
    "nvcc major not the flavour's": (
        {"sglang_toolchain_image": True, "sglang_nvcc_version": "12.9.86"}, BAD, "sglang_nvcc_version",
        "kernels would be compiled by a CUDA 12 nvcc against a CUDA 13 stack"),
    "all of a pool out at once": ({"sglang_max_unavailable": "100%"}, BAD, "sglang_max_unavailable",
                                  '"100%" and 0 would leave'),
    "no worker out at once": ({"sglang_max_unavailable": "0%"}, BAD, "sglang_max_unavailable",
                              'a share of the pool\'s workers from "1%" to "99%"'),
    "a share in words": ({"sglang_max_unavailable": "half"}, BAD, "sglang_max_unavailable", 'use e.g. 1, or "25%"'),
    "the retired trusted-network key": ({"sglang_router_trusted_network": True}, BAD, "sglang_router_trusted_network",
                                        "sglang_trusted_network took its place. Fix: set sglang_trusted_network"),
    "a keyless worker on every address": ({"sglang_trusted_network": False}, BAD, "sglang_api_key_file",
                                          "None, and this host's API would be published on 0.0.0.0:30000"),
    "a multi-node group of one": ({"sglang_node_group": "ds-a"}, BAD, "sglang_node_group",
                                  "give another host the same sglang_node_group"),
    # judged by the pinned SGLang's own arguments (sglang_infra/machine/sglang_args/0.5.16.json)
    "a misspelt choice of SGLang's": ({"sglang_cuda_graph_backend_prefill": "disable"}, BAD,
                                      "sglang_cuda_graph_backend_prefill",
                                      "'disable' (--cuda-graph-backend-prefill=disable): "
                                      "--cuda-graph-backend-prefill=disable is not one of SGLang 0.5.16's choices. "
                                      "Fix: use one of breakable, disabled, full, tc_piecewise."),
    "an image whose release has no table": ({"sglang_version": "0.4.0"}, BAD, "sglang_version",
                                            "make it with `scripts/sglang-args.sh 0.4.0`"),
}


@pytest.fixture(scope="module")
def baseline(hosts):
    return fingerprints(hosts)


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_bad_input_is_refused_and_no_host_changes(testbed, hosts, baseline, workdir, case):
    data, target, key, fix = CASES[case]
    groups = {"production": [(hosts[GOOD], {})],
              "quality": [(hosts[name], data if name == target else {}) for name in (BAD, ALIEN)
                          if name == target]}
    inventory = testbed.inventory(workdir / f"refuse_{case.replace(' ', '_')}.py", groups)
    result = run_deploy(inventory)
    assert result.returncode != 0
    assert f"host {target}: {key}:" in result.output, result.output[-3000:]
    assert fix in result.output
    assert "Fix:" in result.output
    assert "refused before any change on any host" in result.output
    # The tool's own message, not pyinfra's internals (a source path and line number).
    assert "pyinfra error" not in result.output and "plan.py" not in result.output
    assert result.statuses == {}, "an operation started"
    assert fingerprints(hosts) == baseline


def test_every_problem_of_every_host_is_reported_at_once(testbed, hosts, baseline, workdir):
    inventory = testbed.inventory(workdir / "refuse_many.py", {
        "production": [(hosts[GOOD], {"sglang_image": "lmsysorg/sglang:latest"})],
        "quality": [(hosts[BAD], {"sglang_port": 0, "sglang_tp_size": "2"})],
    })
    result = run_deploy(inventory)
    assert result.returncode != 0
    for expected in (f"host {GOOD}: sglang_image:", f"host {BAD}: sglang_port:", f"host {BAD}: sglang_tp_size:"):
        assert expected in result.output
    assert fingerprints(hosts) == baseline


def test_a_default_inventory_with_a_router_group_and_no_key_is_refused(testbed, hosts, baseline, workdir):
    """group_data's defaults (no sglang_api_key_file, sglang_trusted_network False, every address): the worker and
    the gateway would answer anyone on the network, so both are refused, each naming the key and the fix."""
    inventory = testbed.inventory(workdir / "refuse_open_fleet.py", {
        "production": [(hosts[GOOD], {"sglang_trusted_network": False})],
        "router": [(hosts[BAD], {"sglang_trusted_network": False, "sglang_require_gpu": False})],
    })
    result = run_deploy(inventory)
    assert result.returncode != 0
    assert "refused before any change on any host" in result.output, result.output[-3000:]
    assert f"host {GOOD}: sglang_api_key_file: None, and this host's API would be published on 0.0.0.0:30000 " \
        f"(sglang_bind_address), which the gateways of {BAD} reach over the network" in result.output
    assert f"host {BAD}: sglang_api_key_file: None, and this host's gateways would be published on every address" \
        in result.output
    assert "sglang_trusted_network = True" in result.output
    assert result.statuses == {}, "an operation started"
    assert fingerprints(hosts) == baseline



def test_a_group_member_that_cannot_reach_rank_0s_dist_init_address_is_refused(testbed, hosts, baseline, workdir):
    """The preflight tries rank 0's dist-init address from every other member (bounded: a few seconds), here an
    address no host answers on (TEST-NET-1)."""
    inventory = testbed.inventory(workdir / "refuse_group_reach.py", {"production": [
        (hosts[GOOD], {"sglang_node_group": "ds-b", "sglang_worker_address": "192.0.2.1"}),
        (hosts[BAD], {"sglang_node_group": "ds-b"})]})
    result = run_deploy(inventory)
    assert result.returncode != 0
    assert f"host {BAD}: sglang_worker_address: this member of group 'ds-b' cannot reach rank 0 ({GOOD}) at " \
        "192.0.2.1:29500" in result.output, result.output[-3000:]
    assert "refused before any change on any host" in result.output
    assert result.statuses == {}, "an operation started"
    assert fingerprints(hosts) == baseline


def test_a_parser_the_pinned_release_lacks_is_refused_naming_the_registry_entry(testbed, hosts, baseline, workdir):
    """k2_horizon is a reasoning parser of SGLang 0.5.23, not of the pinned 0.5.16: the registry entry is refused,
    naming the parser and the ones 0.5.16 registers, before any host changes."""
    registry = testbed.standin["sglang_models"]
    key = "qwen3.6-27b-awq-int4"   # the quality group's model
    models = {**registry, key: {**registry[key], "reasoning_parser": "k2_horizon"}}
    inventory = testbed.inventory(workdir / "refuse_parser.py", {"production": [(hosts[GOOD], {})],
                                                                 "quality": [(hosts[BAD], {"sglang_models": models})]})
    result = run_deploy(inventory)
    assert result.returncode != 0
    assert f"host {BAD}: sglang_models: entry '{key}': reasoning_parser 'k2_horizon' (--reasoning-parser): " \
        "'k2_horizon' is not a reasoning parser SGLang 0.5.16 registers. Fix: use one of apertus2509, auto, " \
        in result.output, result.output[-3000:]
    assert "qwen3-thinking" in result.output and "refused before any change on any host" in result.output
    assert result.statuses == {}, "an operation started"
    assert fingerprints(hosts) == baseline


# ---------------------------------------------------------------- the served model against the host's GPUs

GPU, KEY = "sg-refuse-gpu", "qwen3.6-35b-a3b-awq"
# Hand-written in the shape of a dense 70B model's config.json (Llama-style): 80 layers, 8 KV heads of 128, bf16.
DENSE_70B = {"num_hidden_layers": 80, "num_key_value_heads": 8, "num_attention_heads": 64, "hidden_size": 8192,
             "torch_dtype": "bfloat16", "max_position_embeddings": 131072}


@pytest.fixture(scope="module")
def gpu_host(testbed):
    """A host given one H200 by the stand-in nvidia-smi (the recorded one: 143771 MiB)."""
    host = testbed.host(GPU)
    give_gpu(host, RECORDED)
    return host


def locked_inventory(testbed, workdir, host, name: str, shard_bytes: int, shards: int):
    """``host`` serving the stand-in model with a lock beside the inventory that says it is ``shards`` weight files
    of ``shard_bytes`` with a 70B model's config.json: what the preflight judges the fit by, before any pull."""
    folder = workdir / f"refuse_fit_{name}"
    folder.mkdir(exist_ok=True)
    entry = testbed.standin["sglang_models"][KEY]
    files = tuple({"path": f"model-{i + 1:05d}-of-{shards:05d}.safetensors", "size": shard_bytes,
                   "sha256": f"{i:064x}", "sha256_from": "lfs"} for i in range(shards))
    locked = lockfile.LockedModel(KEY, entry["repo_id"], entry["revision"], files, False, DENSE_70B)
    (folder / "sglang.lock").write_text(lockfile.render(lockfile.document({KEY: locked}, {}, {}, "2026-12-06")))
    return testbed.inventory(folder / "inventory.py", {"production": [(host, {
        "sglang_require_gpu": True, "sglang_install_nvidia_toolkit": True, "sglang_context_length": 131072})]})


def test_a_model_too_large_for_the_hosts_gpus_is_refused_before_the_pull_naming_every_figure(testbed, gpu_host,
                                                                                              workdir):
    before = gpu_host.exec(FINGERPRINT).stdout
    result = run_deploy(locked_inventory(testbed, workdir, gpu_host, "large", 5 * 10**9, 30))   # 150 GB
    assert result.returncode != 0
    assert f"host {GPU}: sglang_model: '{KEY}' (standin-org/tiny-chat@" in result.output, result.output[-3000:]
    assert "on 1 x NVIDIA H200 (143771 MiB each) at --tp-size=1: weights 139.7 GiB (the lock's file sizes), " \
        "139.7 GiB per GPU; --mem-fraction-static 0.85 (sglang_mem_fraction_static) keeps 119.3 GiB of each " \
        "143771 MiB GPU for weights and KV cache: the weights alone are 20.4 GiB over it: it cannot be served " \
        "there, and the pull would fetch 139.7 GiB for nothing. Fix: serve it on more GPUs" in result.output
    assert "refused before any change on any host" in result.output
    assert result.statuses == {}, "an operation started"
    assert gpu_host.exec(FINGERPRINT).stdout == before
    assert gpu_host.exec("test -e /opt/sglang/hf-cache", check=False).returncode != 0   # nothing pulled


def test_a_model_that_fits_is_not_refused_and_status_shows_its_figures(testbed, gpu_host, workdir):
    """20 GB on the same H200: not refused; status.sh (a dry run, nothing changed) shows what it was judged by."""
    before = gpu_host.exec(FINGERPRINT).stdout
    report = run_status(locked_inventory(testbed, workdir, gpu_host, "fits", 5 * 10**9, 4), "--json")
    row = rows(report)[GPU]
    assert row["refused"] == [], row
    fit = row["fit"]
    assert (fit["fits"], fit["tp"], fit["gpu_mib"], fit["fraction"], fit["weights_gib"]) == \
        (True, 1, 143771, 0.85, 18.63), fit
    assert fit["kv_token_bytes"] == 2 * 80 * 8 * 128 * 2 and fit["kv_tokens"] > 131072 and fit["context"] == 131072
    text = run_status(locked_inventory(testbed, workdir, gpu_host, "fits", 5 * 10**9, 4)).stdout
    assert f"{GPU}: fits its GPUs: '{KEY}' (standin-org/tiny-chat@" in text
    assert gpu_host.exec(FINGERPRINT).stdout == before
