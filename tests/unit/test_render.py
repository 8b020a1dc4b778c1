from __future__ import annotations

import re
from dataclasses import replace

import yaml
from conftest import nvidia_smi, pinned_defaults, plan_for

from harness import PROJECT_DIR
from sglang_infra.machine.gpus import parse_snapshot
from sglang_infra.plan import render
from sglang_infra.plan.defaults import read_defaults

DEFAULTS = pinned_defaults()


FIXTURES = PROJECT_DIR / "tests" / "unit" / "fixtures" / "nvidia-smi"


def gpus(case="rtx4090-2gpu-node"):
    """The runbook's own servers by default: two RTX 4090 on separate PCIe host bridges."""
    return parse_snapshot(nvidia_smi(case))


def compose(case="rtx4090-2gpu-node", **overrides):
    data = {**DEFAULTS, **({"sglang_require_gpu": False} if case is None else {}), **overrides}
    return plan_for(data, case).compose


def command(case="rtx4090-2gpu-node", **overrides):
    return yaml.safe_load(compose(case, **overrides))["services"]["sglang"]["command"]


def test_defaults_render_every_runbook_flag_in_order():
    flags = [arg for arg in command() if arg.startswith("--") and not arg.startswith(
        ("--model-path", "--served-model-name", "--host", "--port"))]
    assert flags == ["--dtype=float16", "--mamba-full-memory-ratio=0.9", "--mem-fraction-static=0.85",
                     "--allow-auto-truncate", "--disable-custom-all-reduce", "--cuda-graph-backend-prefill=disabled",
                     "--reasoning-parser=qwen3", "--tool-call-parser=qwen3_coder", "--context-length=262144",
                     "--tp-size=2", "--enable-metrics"]


def test_each_flag_carries_its_reason_from_group_data():
    text = compose()
    reasons = {d.key: d.reason for d in read_defaults()}
    for flag in plan_for(DEFAULTS).flags:
        if flag["key"] in ("reasoning_parser", "tool_call_parser"):
            assert flag["reason"].endswith("[registry entry qwen3.6-35b-a3b-awq]")
        else:
            value = flag["arg"].split("=", 1)[1] if "=" in flag["arg"] else "True"
            assert flag["reason"].startswith(reasons[flag["key"]].replace("{value}", value))
        assert f"      # {flag['reason']}\n      - \"{flag['arg']}\"\n" in text


def test_derived_flags_say_where_their_value_came_from():
    text = compose()
    assert "[derived: 2 GPUs found by nvidia-smi]\n      - \"--tp-size=2\"" in text
    assert "[derived: Marlin-quantized model on SM89, before SM90]\n      - \"--dtype=float16\"" in text
    assert "[derived: 2 GPUs found by nvidia-smi, linked by NODE, not NVLink]\n      - " \
           "\"--disable-custom-all-reduce\"" in text
    assert "[derived: follows --dtype]\n      SGLANG_MAMBA_CONV_DTYPE: \"float16\"" in text
    assert "[set in data]\n      - \"--tp-size=1\"" in compose(sglang_tp_size=1)


def test_nvlinked_h100s_keep_custom_all_reduce_and_bf16():
    args = command("h100-8gpu-nvlink")
    assert "--tp-size=8" in args
    assert not any(a.startswith(("--dtype", "--disable-custom-all-reduce")) for a in args)


def test_host_without_gpu_gets_no_reservation():
    service = yaml.safe_load(compose(None, sglang_require_gpu=False))["services"]["sglang"]
    assert "deploy" not in service
    assert "--tp-size=1" in service["command"]


def test_none_and_false_leave_flags_out():
    args = command(sglang_dtype=None, sglang_mamba_conv_dtype=None, sglang_allow_auto_truncate=False,
                   sglang_context_length=None, sglang_disable_custom_all_reduce=False)
    assert not any(a.startswith(("--dtype", "--allow-auto-truncate", "--context-length")) for a in args)
    env = yaml.safe_load(compose(sglang_dtype=None, sglang_mamba_conv_dtype=None))["services"]["sglang"]["environment"]
    assert "SGLANG_MAMBA_CONV_DTYPE" not in env


def test_fp16_and_conv_dtype_render_together():
    service = yaml.safe_load(compose())["services"]["sglang"]
    assert "--dtype=float16" in service["command"]
    assert service["environment"]["SGLANG_MAMBA_CONV_DTYPE"] == "float16"


def test_without_the_toolchain_layer_the_pinned_image_is_served_as_is():
    service = yaml.safe_load(compose(sglang_toolchain_image=False))["services"]["sglang"]
    assert service["image"] == "lmsysorg/sglang:v0.5.16" and "pull_policy" not in service


def test_a_pin_change_names_another_serving_image():
    assert yaml.safe_load(compose())["services"]["sglang"]["image"] != \
        yaml.safe_load(compose(sglang_flashinfer_version="0.6.15"))["services"]["sglang"]["image"]


def test_the_gate_checks_the_pins_in_the_running_container_only_with_the_layer():
    assert "--toolchain-check 'python3 /usr/local/share/sglang-toolchain/toolchain_check.py'" in \
        plan_for(DEFAULTS).scripts["gate.sh"]
    assert '--toolchain-check' not in \
        plan_for({**DEFAULTS, "sglang_toolchain_image": False}).scripts["gate.sh"].split("<<'PYTHON'")[0]


def test_debug_flags_are_commented_out_unless_asked():
    assert "--log-level=debug" not in command()
    assert re.search(r"#\s*- --log-requests-level=3", compose())
    assert {"--log-level=debug", "--log-requests", "--log-requests-level=3"} <= set(command(sglang_debug_logging=True))


def test_service_shape():
    service = yaml.safe_load(compose(sglang_port=31000, sglang_bind_address="127.0.0.1", sglang_gpus=2))[
        "services"]["sglang"]
    assert re.fullmatch(r"sglang-serving:v0\.5\.16-[0-9a-f]{12}", service["image"])
    assert service["pull_policy"] == "never"
    assert service["ipc"] == "host"
    assert service["ports"] == ["127.0.0.1:31000:31000"]
    assert service["volumes"] == ["/opt/sglang/hf-cache:/hf-cache:ro", "cache:/var/cache/sglang"]
    assert service["environment"]["HF_HOME"] == "/hf-cache"
    assert service["healthcheck"]["start_period"] == "900s"
    assert "31000/health" in service["healthcheck"]["test"][-1]
    assert service["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "count": 2, "capabilities": ["gpu"]}]


def test_the_server_loads_the_pinned_snapshot_offline_under_the_registry_name():
    service = yaml.safe_load(compose())["services"]["sglang"]
    revision = DEFAULTS["sglang_models"]["qwen3.6-35b-a3b-awq"]["revision"]
    assert f"--model-path=/hf-cache/hub/models--QuantTrio--Qwen3.6-35B-A3B-AWQ/snapshots/{revision}" \
        in service["command"]
    assert "--served-model-name=qwen3.6-35b-a3b" in service["command"]
    assert service["environment"]["HF_HUB_OFFLINE"] == "1"
    assert service["labels"]["sglang.model"] == f"QuantTrio/Qwen3.6-35B-A3B-AWQ@{revision}"


def test_switching_the_model_changes_path_name_parsers_and_label():
    service = yaml.safe_load(compose(sglang_model="qwen3.6-27b-awq-int4"))["services"]["sglang"]
    assert any(a.startswith("--model-path=/hf-cache/hub/models--cyankiwi--Qwen3.6-27B-AWQ-INT4/snapshots/")
               for a in service["command"])
    assert "--served-model-name=qwen3.6-27b" in service["command"]
    assert service["labels"]["sglang.model"].startswith("cyankiwi/Qwen3.6-27B-AWQ-INT4@")


def test_a_model_without_parsers_renders_no_parser_flags():
    registry = {**DEFAULTS["sglang_models"]}
    registry["plain"] = {**registry["qwen3.6-35b-a3b-awq"], "reasoning_parser": None, "tool_call_parser": None}
    args = command(sglang_models=registry, sglang_model="plain")
    assert not [a for a in args if "parser" in a]


def test_env_template_renders_ids():
    text = render.env_file(995, 996)
    assert "SGLANG_UID=995\nSGLANG_GID=996\n" in text


def test_every_default_has_a_reason_and_a_section():
    for default in read_defaults():
        assert default.reason, default.key
        assert default.section, default.key


def test_the_variables_table_mirrors_group_data():
    table = (PROJECT_DIR / "docs" / "variables.md").read_text()
    rows = {m[0]: m[1] for m in re.findall(r"^\| `((?:sglang|ssh)_\w+)` \| `([^`]*)` \|", table, re.M)}
    # Multi-line defaults (the registry) appear on one line in the table.
    assert rows == {d.key: " ".join(d.default_source.split()) for d in read_defaults()}


def test_the_server_reads_the_cache_read_only_and_writes_elsewhere():
    service = yaml.safe_load(compose())["services"]["sglang"]
    assert "/opt/sglang/hf-cache:/hf-cache:ro" in service["volumes"]
    assert service["environment"]["XDG_CACHE_HOME"].startswith("/var/cache/sglang")
    assert service["environment"]["HF_MODULES_CACHE"].startswith("/var/cache/sglang/")


def test_a_dollar_in_any_value_reaches_the_container_as_it_was_written():
    """compose interpolates $VAR in every value; a literal $ must be doubled."""
    text = compose(sglang_extra_env={"NCCL_SOCKET_IFNAME": "=$HOME"})
    assert '"=$$HOME"' in text
    assert yaml.safe_load(text)["services"]["sglang"]["environment"]["NCCL_SOCKET_IFNAME"] == "=$$HOME"


def test_extra_env_may_not_set_what_the_deploy_sets():
    from sglang_infra.plan.schema import DEPLOY_ENV

    rendered = set(yaml.safe_load(compose())["services"]["sglang"]["environment"])
    image_env = {line.split("=")[0].split()[-1] for line in plan_for(DEFAULTS).image.build.dockerfile.splitlines()
                 if line.startswith("ENV ") or line.strip().startswith("PATH=")}
    assert rendered | image_env == set(DEPLOY_ENV)


def test_no_comment_contradicts_the_value_beside_it():
    """Every numeric flag rendered with a non-default value: its comment never states the default instead."""
    changed = {"sglang_mem_fraction_static": 0.8, "sglang_mamba_full_memory_ratio": 0.7,
               "sglang_context_length": 131072, "sglang_tp_size": 1}
    defaults = {d.key: d for d in read_defaults()}
    flags = {flag["key"]: flag for flag in plan_for({**DEFAULTS, **changed}).flags}
    for key, value in changed.items():
        default = eval(defaults[key].default_source) if defaults[key].default_source[0].isdigit() else None
        reason = flags[key]["reason"]
        assert flags[key]["arg"].endswith(f"={value}")
        if isinstance(default, (int, float)):
            forms = {str(default), f"{default * 100:g}%"} - {str(value), f"{value * 100:g}%"}
            assert not any(form in reason for form in forms), (key, reason)
    assert "(0.8)" in flags["sglang_mem_fraction_static"]["reason"]


def test_an_api_key_reaches_the_server_as_a_mounted_file_never_as_text(tmp_path):
    key_file = tmp_path / "api-key"
    key_file.write_text("k3y-0123456789abcdef\n")
    plan = plan_for({**DEFAULTS, "sglang_api_key_file": str(key_file)})
    service = yaml.safe_load(plan.compose)["services"]["sglang"]
    assert "--config=/etc/sglang-secrets/server.yaml" in service["command"]
    assert "/opt/sglang/docker/secrets:/etc/sglang-secrets:ro" in service["volumes"]
    assert "k3y-0123456789abcdef" not in plan.compose + "".join(plan.scripts.values())
    for script in ("test_tool_calling.sh", "benchmark.sh", "gate.sh"):
        assert '--api-key-file /opt/sglang/docker/secrets/server.yaml ' in plan.scripts[script], script
    from sglang_infra.plan.resolve import server_config
    assert server_config(plan.api_key) == b'api-key: "k3y-0123456789abcdef"\n'


def test_without_an_api_key_nothing_of_it_is_rendered():
    plan = plan_for(DEFAULTS)
    assert "--config=" not in plan.compose and "sglang-secrets" not in plan.compose
    assert "--api-key-file" not in plan.scripts["test_tool_calling.sh"].split("<<'PYTHON'")[0]


HOSTILE_NAMES = ("$(touch {marker})", "`touch {marker}`", "x'; touch {marker}; '", "a b\n touch {marker}")


def test_no_operator_value_in_a_script_runs_as_a_command(tmp_path):
    """A `$(`, a backtick, a quote or a newline in a served name (or any value) reaches the program as one word:
    each script is run by bash with a stand-in python3 that records its arguments, and nothing else runs."""
    import json
    import os
    import subprocess

    marker = tmp_path / "ran"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "python3"
    stub.write_text(f"#!{os.path.realpath(__import__('sys').executable)}\n"
                    "import json, sys; sys.stdin.read(); print(json.dumps(sys.argv[1:]))\n")
    stub.chmod(0o755)
    plan = plan_for(DEFAULTS)
    for hostile in HOSTILE_NAMES:
        name = hostile.format(marker=marker)
        # Past the refusals (served names are judged): the rendering alone must hold.
        hostile_plan = replace(plan, gate=replace(plan.gate, served_name=name))
        for script, text in render.scripts(hostile_plan).items():
            path = tmp_path / script
            path.write_text(text)
            done = subprocess.run(["bash", str(path)], capture_output=True, text=True, timeout=30,
                                  env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
            assert done.returncode == 0, (script, done.stderr)
            args = json.loads(done.stdout)
            assert args[args.index("--model") + 1] == name, (script, args)
            assert not marker.exists(), (script, name)


def test_the_sh_filter_quotes_and_the_line_filter_keeps_a_comment_one_line():
    from sglang_infra.machine.templating import environment

    assert environment().filters["sh"]("/opt/sglang") == "/opt/sglang"
    assert environment().filters["sh"]("$(id)") == "'$(id)'"
    assert "\n" not in environment().filters["line"]("a\nb\x1b[2J")


def test_the_gate_runs_the_cuda_kernel_check_with_the_images_pinned_nvcc_on_a_gpu_host(tmp_path):
    """gate.sh hands gpu/gpu_kernel_check.py's text to the gate, which runs it inside the running container; bash
    reads it back unchanged from the quoted here-document."""
    import subprocess

    from sglang_infra.machine import ship

    text = plan_for(DEFAULTS).scripts["gate.sh"]
    assert "--kernel-check-nvcc /usr/local/cuda-pip/bin/nvcc --kernel-check-program \"$kernel_check\"" in text
    head = text.split("exec ")[0]
    (tmp_path / "head.sh").write_text(head + 'printf %s "$kernel_check"\n')
    found = subprocess.run(["bash", str(tmp_path / "head.sh")], capture_output=True, text=True, timeout=30)
    assert found.returncode == 0 and found.stdout == ship.program("gpu.gpu_kernel_check").rstrip("\n")
    # Without the toolchain layer there is no pinned nvcc, and a host without GPUs has nothing to run it on.
    for data, case in (({**DEFAULTS, "sglang_toolchain_image": False}, "rtx4090-2gpu-node"),
                       ({**DEFAULTS, "sglang_require_gpu": False}, None)):
        assert "kernel-check" not in plan_for(data, case=case).scripts["gate.sh"].split("<<'PYTHON'")[0]
