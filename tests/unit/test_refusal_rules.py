from __future__ import annotations

import runpy

import pytest
from conftest import pinned_defaults

from harness import PROJECT_DIR
from sglang_infra.plan.refusals import check_data, check_host_state
from sglang_infra.plan.schema import image_problem

DEFAULTS = pinned_defaults()


def errors_for(**overrides):
    return check_data("gpu-01", {**DEFAULTS, **overrides})


def test_defaults_are_valid():
    assert errors_for() == []


def test_every_group_file_is_valid_on_top_of_the_defaults():
    for path in (PROJECT_DIR / "group_data").glob("*.py"):
        group = {k: v for k, v in runpy.run_path(str(path)).items() if k.startswith("sglang_")}
        group.pop("sglang_models", None)  # all.py's registry ships without revisions; pinned ones are used here
        assert errors_for(**group) == [], path.name


def test_the_shipped_registry_is_refused_until_revisions_are_pinned():
    shipped = {k: v for k, v in runpy.run_path(str(PROJECT_DIR / "group_data" / "all.py")).items()
               if k.startswith("sglang_")}
    errors = check_data("gpu-01", shipped)
    assert len(errors) == 1
    assert errors[0].startswith("host gpu-01: sglang_models: entry 'qwen3.6-35b-a3b-awq' has no pinned revision")
    assert "Fix: set 'revision' to the 40-hex commit you validated" in errors[0]


@pytest.mark.parametrize("image", ["lmsysorg/sglang:v0.5.16", "registry.local:5000/team/sglang:v0.5.16-cu130",
                                   "lmsysorg/sglang@sha256:" + "a" * 64,
                                   "lmsysorg/sglang:v0.5.16@sha256:" + "b" * 64])
def test_pinned_images_are_accepted(image):
    assert image_problem(image) is None


@pytest.mark.parametrize("image,why", [
    ("lmsysorg/sglang:latest", "floating 'latest'"),
    ("lmsysorg/sglang", "has no tag"),
    ("registry.local:5000/sglang", "has no tag"),
    ("LMSYS/sglang:v1", "not a valid image reference"),
    ("lmsysorg/sglang:v1 ", "not a valid image reference"),
    ("", "must be a string"),
    (None, "must be a string"),
])
def test_unpinned_or_invalid_images_are_refused(image, why):
    assert why in image_problem(image)


@pytest.mark.parametrize("overrides,key", [
    ({"sglang_port": "30000"}, "sglang_port"),
    ({"sglang_port": 70000}, "sglang_port"),
    ({"sglang_port": True}, "sglang_port"),
    ({"sglang_uid": -1}, "sglang_uid"),
    ({"sglang_uid": 1.5}, "sglang_uid"),
    ({"sglang_admins": "alice"}, "sglang_admins"),
    ({"sglang_admins": ["alice", "alice"]}, "sglang_admins"),
    ({"sglang_admins": ["root"]}, "sglang_admins"),
    ({"sglang_admins": ["Bad Name"]}, "sglang_admins"),
    ({"sglang_home": "opt/sglang"}, "sglang_home"),
    ({"sglang_home": "/"}, "sglang_home"),
    ({"sglang_home": "/opt/../etc"}, "sglang_home"),
    ({"sglang_home": "/opt/sg lang"}, "sglang_home"),
    ({"sglang_mem_fraction_static": 1.0}, "sglang_mem_fraction_static"),
    ({"sglang_mamba_full_memory_ratio": 0}, "sglang_mamba_full_memory_ratio"),
    ({"sglang_dtype": "fp8"}, "sglang_dtype"),
    ({"sglang_docker_source": "snap"}, "sglang_docker_source"),
    ({"sglang_docker_apt_url": "http://example.invalid/linux"}, "sglang_docker_apt_url"),
    ({"sglang_gpus": 0}, "sglang_gpus"),
    ({"sglang_tp_size": 0}, "sglang_tp_size"),
    ({"sglang_model": "no-such-key"}, "sglang_model"),
    ({"sglang_cached_models": "qwen3.6-27b-awq-int4"}, "sglang_cached_models"),
    ({"sglang_hf_endpoint": "ftp://mirror"}, "sglang_hf_endpoint"),
    ({"sglang_hf_token_file": "/nonexistent/token"}, "sglang_hf_token_file"),
    ({"sglang_prune_models": "yes"}, "sglang_prune_models"),
    ({"sglang_tools_dir": "/opt/sglang/tools"}, "sglang_tools_dir"),
    ({"sglang_huggingface_hub_version": "latest"}, "sglang_huggingface_hub_version"),
    ({"sglang_bind_address": "localhost"}, "sglang_bind_address"),
    ({"sglang_healthcheck_start_period": 5}, "sglang_healthcheck_start_period"),
    ({"sglang_debug_logging": "yes"}, "sglang_debug_logging"),
])
def test_wrong_values_name_host_key_and_fix(overrides, key):
    errors = errors_for(**overrides)
    assert len(errors) == 1
    assert errors[0].startswith(f"host gpu-01: {key}: ")
    assert "Fix: " in errors[0]


@pytest.mark.parametrize("typo,suggestion", [
    ("sglang_imgae", "sglang_image"),
    ("sglang_tp", "sglang_tp_size"),
    ("sglang-port", "sglang_port"),
    ("sglan_admins", "sglang_admins"),
])
def test_unknown_keys_are_refused_with_a_suggestion(typo, suggestion):
    errors = errors_for(**{typo: 1})
    assert errors and f"did you mean {suggestion}?" in errors[0]
    assert errors[0].startswith(f"host gpu-01: {typo}: unknown key")


def test_pyinfras_own_keys_and_site_keys_pass():
    assert errors_for(ssh_user="deploy", _sudo=True, ssh_port=2222, _sudo_user="x", site_rack="b7") == []


@pytest.mark.parametrize("key,suggestion", [("sudo", "_sudo"), ("mem_fraction_static", "sglang_mem_fraction_static"),
                                            ("ssh_usr", "ssh_user")])
def test_any_other_key_is_refused_with_the_close_match(key, suggestion):
    errors = errors_for(**{key: 1})
    assert len(errors) == 1 and errors[0].startswith(f"host gpu-01: {key}: unknown key")
    assert f"did you mean {suggestion}?" in errors[0] and "start with site_" in errors[0]


def test_missing_defaults_are_reported():
    data = dict(DEFAULTS)
    del data["sglang_image"]
    assert any("sglang_image: missing" in e for e in check_data("h", data))


def test_compose_template_must_exist():
    assert "does not exist" in errors_for(sglang_compose_template="templates/nope.j2")[0]


FRESH = {"os_id": "debian", "os_version": "13", "user": None, "group": None, "admins_present": [],
         "uid_owner": None, "gid_owner": None, "cli": None, "api": False, "active": "inactive", "loaded": False,
         "compose_plugin": None}
WORKING_ENGINE = {"cli": "/usr/bin/docker", "api": True, "active": "active", "loaded": True,
                  "compose_plugin": "/usr/libexec/docker/cli-plugins/docker-compose"}
_DOCKER = ("cli", "api", "active", "loaded", "compose_plugin")


def snapshot(state: dict) -> dict:
    """The snapshot sections the host check reads, from one flat mapping."""
    return {"python3": "/usr/bin/python3", "os": {"id": state["os_id"], "version": state["os_version"]},
            "docker": {k: state[k] for k in _DOCKER},
            "account": {k: v for k, v in state.items() if k not in _DOCKER and not k.startswith("os_")}}


def host_errors(state=None, **overrides):
    # These cases are about the OS and the account; the GPU plan has its own tests (test_gpus.py).
    data = {**DEFAULTS, "sglang_require_gpu": False, **overrides}
    return check_host_state("gpu-01", data, snapshot({**FRESH, **(state or {})}))


@pytest.mark.parametrize("dtype,conv,ok", [
    ("float16", "float16", True), (None, None, True), ("bfloat16", None, True),
    ("float16", None, False), ("float16", "bfloat16", False), (None, "float16", False),
])
def test_fp16_and_mamba_conv_dtype_go_together(dtype, conv, ok):
    assert (host_errors(sglang_dtype=dtype, sglang_mamba_conv_dtype=conv) == []) is ok


def test_tp_size_cannot_exceed_reserved_gpus():
    assert host_errors(sglang_tp_size=2, sglang_gpus=2) == []
    assert "sglang_tp_size <= 1" in host_errors(sglang_tp_size=2, sglang_gpus=1)[0]


def test_a_host_without_python3_is_refused_with_the_fix():
    state = snapshot(FRESH)
    state["python3"] = None
    errors = check_host_state("gpu-01", {**DEFAULTS, "sglang_require_gpu": False}, state)
    assert errors == ["host gpu-01: python3: not installed; the deploy reads the host with it (one command per "
                      "run). Fix: install it first: apt-get install -y python3."]


def test_gpu_plan_is_part_of_the_host_check():
    errors = host_errors(sglang_require_gpu=True)
    assert len(errors) == 1 and errors[0].startswith("host gpu-01: sglang_require_gpu: no GPU found by nvidia-smi")


def test_fresh_supported_host_passes():
    assert host_errors() == []


@pytest.mark.parametrize("os_id,version,ok", [
    ("debian", "13", True), ("ubuntu", "22.04", True), ("ubuntu", "24.04", True),
    ("ubuntu", "20.04", False), ("rocky", "9.4", False), (None, None, False),
])
def test_supported_systems(os_id, version, ok):
    assert (host_errors({"os_id": os_id, "os_version": version}) == []) is ok


def test_debian_12_needs_dockers_repository_unless_an_engine_works():
    assert "sglang_docker_source = 'docker'" in host_errors({"os_version": "12"})[0]
    assert host_errors({"os_version": "12"}, sglang_docker_source="docker") == []
    assert host_errors({"os_version": "12", **WORKING_ENGINE}) == []


@pytest.mark.parametrize("engine", [
    {"api": False, "active": "inactive"},   # docker.service stopped
    {"api": True, "active": "inactive"},    # only docker.socket was active when the units were read
    {"api": False, "active": "failed"},
])
def test_debian_12_with_compose_v2_and_an_engine_that_can_start_is_not_refused(engine):
    assert host_errors({"os_version": "12", **WORKING_ENGINE, **engine}) == []


def test_debian_12_whose_engine_is_masked_and_silent_is_refused():
    assert host_errors({"os_version": "12", **WORKING_ENGINE, "api": False, "loaded": False})


def test_a_host_that_gets_no_docker_is_never_judged_for_it():
    data = {**DEFAULTS, "sglang_require_gpu": False}
    bare_bookworm = snapshot({**FRESH, "os_version": "12"})
    assert check_host_state("mon-01", data, bare_bookworm, serves=False, gets_docker=False) == []
    assert check_host_state("mon-01", data, bare_bookworm, serves=False, gets_docker=True)


def test_existing_account_with_other_ids_is_refused():
    state = {"user": {"uid": 995, "gid": 996}, "group": {"gid": 996}}
    errors = host_errors(state, sglang_uid=950, sglang_gid=950)
    assert any("sglang_uid: the existing account sglang has uid 995" in e and "set sglang_uid = 995" in e
               for e in errors)
    assert any("sglang_gid: the existing group sglang has gid 996" in e for e in errors)
    assert host_errors(state, sglang_uid=995, sglang_gid=996) == []


def test_fixed_ids_taken_by_others_are_refused():
    errors = host_errors({"uid_owner": "postgres", "gid_owner": "postgres"}, sglang_uid=950, sglang_gid=950)
    assert len(errors) == 2 and "'postgres'" in errors[0]


def test_missing_admins_are_named():
    errors = host_errors({"admins_present": ["alice"]}, sglang_admins=["alice", "bob"])
    assert len(errors) == 1 and "the user 'bob' does not exist" in errors[0]


@pytest.mark.parametrize("key,value", [
    ("sglang_home", "/opt/sglang\n"), ("sglang_image", "lmsysorg/sglang:v0.5.16\n"),
    ("sglang_hf_endpoint", "https://hub.example\n"), ("sglang_huggingface_hub_version", "2.4.0\n"),
    ("sglang_cuda_graph_backend_prefill", "disabled\n"), ("sglang_extra_env", {"A\n": "1"}),
    ("sglang_pip_index_url", "https://pypi.example/simple\n"),
])
def test_a_trailing_newline_never_passes_a_pattern(key, value):
    errors = errors_for(**{key: value})
    assert errors and errors[0].startswith(f"host gpu-01: {key}: ")


@pytest.mark.parametrize("key", ["sglang_home", "sglang_tools_dir"])
@pytest.mark.parametrize("path", ["/etc", "/usr", "/var", "/opt", "/home", "/tmp", "/root", "/var/lib",
                                  "/tmp/sglang", "/usr/local/sglang", "/var/lib/docker"])
def test_system_directories_are_refused(key, path):
    other = {"sglang_home": "/srv/sglang-home", "sglang_tools_dir": "/srv/sglang-tools"}
    errors = errors_for(**{**other, key: path})
    assert any(e.startswith(f"host gpu-01: {key}: {path} is") for e in errors), errors


def test_own_directories_pass():
    assert errors_for(sglang_home="/srv/sglang", sglang_tools_dir="/var/lib/sglang-tools") == []


@pytest.mark.parametrize("env", [{"HF_HUB_OFFLINE": "0"}, {"HF_HOME": "/x"}, {"SGLANG_MAMBA_CONV_DTYPE": "x"},
                                 {"CUDA_HOME": "/x"}, {"1BAD": "x"}, {"A-B": "x"}, {"OK": "two\nlines"}])
def test_extra_env_refuses_the_deploys_own_keys_and_bad_names(env):
    errors = errors_for(sglang_extra_env=env)
    assert len(errors) == 1 and errors[0].startswith("host gpu-01: sglang_extra_env: ")


def test_tp_size_must_divide_the_reserved_gpus():
    assert "does not divide the 4 GPU(s) reserved" in host_errors(sglang_tp_size=3, sglang_gpus=4)[0]
    assert host_errors(sglang_tp_size=2, sglang_gpus=4) == []


def test_a_refusal_is_shown_as_the_tools_own_message():
    """pyinfra's command line passes a CliError through; ours prints no source path or line number. In a child
    process: importing pyinfra's command line monkey-patches threading."""
    import subprocess
    import sys

    from harness import PROJECT_DIR

    code = ("import logging; logging.basicConfig()\n"
            "from pyinfra_cli.exceptions import CliError\n"
            "from sglang_infra.plan.problems import DeployDataError, raise_if\n"
            "try:\n    raise_if(['host gpu-01: sglang_port: bad. Fix: use a port number.'])\n"
            "except DeployDataError as refused:\n    assert isinstance(refused, CliError)\n    refused.show()\n")
    shown = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_DIR, capture_output=True, text=True,
                           timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "refused before any change on any host (1 problem(s))" in shown.stderr
    assert "plan.py" not in shown.stderr and " line " not in shown.stderr


def test_the_run_names_what_a_hosts_own_data_sets_over_group_data():
    from types import SimpleNamespace

    from sglang_infra.run.preflight import _overrides

    inventory = SimpleNamespace(get_host_data=lambda name: {"ssh_user": "x", "sglang_image": "a:b"},
                                get_override_data=lambda: {"sglang_port": 1})
    host = SimpleNamespace(name="gpu-01", inventory=inventory)
    assert _overrides(host) == "[gpu-01] over group_data, its inventory data sets sglang_image; --data sets sglang_port"
    quiet = SimpleNamespace(name="gpu-02", inventory=SimpleNamespace(get_host_data=lambda name: {"ssh_user": "x"},
                                                                     get_override_data=lambda: {}))
    assert _overrides(quiet) is None


@pytest.mark.parametrize("key,existing,owner,refused", [
    ("sglang_home", {"owner": "bob", "group": "bob", "directory": True, "empty": False}, None, True),
    ("sglang_home", {"owner": "bob", "group": "bob", "directory": True, "empty": True}, None, False),
    ("sglang_home", {"owner": "sglang", "group": "sglang", "directory": True, "empty": False}, None, False),
    ("sglang_home", {"owner": "root", "group": "root", "directory": False, "empty": True}, None, True),
    ("sglang_tools_dir", {"owner": "bob", "group": "bob", "directory": True, "empty": False}, None, True),
    ("sglang_tools_dir", {"owner": "root", "group": "sglang", "directory": True, "empty": False,
                          "entries": ["hfpull.py", "hfpull.py.previous", "secret", "venv"], "more": False},
     None, False),
    ("sglang_tools_dir", {"owner": "root", "group": "root", "directory": True, "empty": True,
                          "entries": [], "more": False}, None, False),
])
def test_an_existing_directory_of_someone_else_is_not_adopted(key, existing, owner, refused):
    state = snapshot(FRESH)
    state["existing"] = {"home" if key == "sglang_home" else "tools": existing}
    errors = check_host_state("gpu-01", {**DEFAULTS, "sglang_require_gpu": False}, state)
    assert bool(errors) is refused, errors
    if refused:
        assert errors[0].startswith(f"host gpu-01: {key}: ") and "Fix: choose a directory of its own" in errors[0]


@pytest.mark.parametrize("entries,more", [(["root"], False), (["hfpull.py", "venv", "notes.txt"], False),
                                          (["hfpull.py", "secret", "venv"], True), (["\x1b]0;x\x07"], False)])
def test_a_root_owned_directory_with_content_not_the_deploys_is_not_adopted_as_tools_dir(entries, more):
    """/var/spool/cron/crontabs is root's and not empty: it would become root:sglang 755."""
    state = snapshot(FRESH)
    state["existing"] = {"tools": {"owner": "root", "group": "crontab", "directory": True, "empty": False,
                                   "entries": entries, "more": more}}
    [error] = check_host_state("gpu-01", {**DEFAULTS, "sglang_require_gpu": False}, state)
    assert error.startswith("host gpu-01: sglang_tools_dir: /var/lib/sglang-tools already exists with content "
                            "that is not the deploy's (") and "Fix: choose a directory of its own" in error
    assert "\x1b" not in error and "\x07" not in error


@pytest.mark.parametrize("path", ["/var/spool/cron/crontabs", "/var/spool/anything", "/var/log/sglang",
                                  "/var/lib/dpkg", "/var/lib/apt/lists", "/var/cache/sglang", "/lib/sglang"])
def test_system_places_below_var_and_the_root_are_refused(path):
    errors = errors_for(sglang_tools_dir=path)
    assert any(e.startswith(f"host gpu-01: sglang_tools_dir: {path} is") for e in errors), errors


@pytest.mark.parametrize("key,ok", [("0123456789abcdef0123", True), ("short", False), ("has space inside 12345", False),
                                    ("two\nlines-0123456789", False)])
def test_an_api_key_file_holds_one_header_safe_key(tmp_path, key, ok):
    path = tmp_path / "key"
    path.write_text(key + "\n")
    errors = errors_for(sglang_api_key_file=str(path))
    assert (errors == []) is ok, errors
    if not ok:
        assert errors[0].startswith("host gpu-01: sglang_api_key_file: ") and key not in errors[0]


def test_a_token_is_never_sent_over_plain_http(tmp_path):
    token = tmp_path / "token"
    token.write_text("hf_0123456789\n")
    errors = errors_for(sglang_hf_endpoint="http://mirror.internal:8080", sglang_hf_token_file=str(token))
    assert len(errors) == 1 and errors[0].startswith("host gpu-01: sglang_hf_endpoint: http://mirror.internal:8080 "
                                                     "is plain http") and "hf_0123" not in errors[0]
    assert errors_for(sglang_hf_endpoint="https://mirror.internal", sglang_hf_token_file=str(token)) == []
    assert errors_for(sglang_hf_endpoint="http://mirror.internal:8080") == []   # no token, nothing to leak


def test_a_ca_bundle_holding_a_private_key_is_refused_with_the_toolchain_image_off(tmp_path):
    # Judged whether or not the bundle is used: turning the toolchain image on later cannot surprise anyone.
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
                      "-----BEGIN PRIVATE KEY-----\nMIIEfake\n-----END PRIVATE KEY-----\n")
    [found] = errors_for(sglang_extra_ca_bundle=str(bundle), sglang_toolchain_image=False)
    assert found.startswith("host gpu-01: sglang_extra_ca_bundle: ") and "private key" in found
    assert errors_for(sglang_extra_ca_bundle=str(bundle), sglang_toolchain_image=True) == [found]


@pytest.mark.parametrize("value", ["0", "2", None])
def test_a_host_without_hard_link_protection_is_refused_with_the_fix(value):
    state = snapshot(FRESH)
    state["kernel"] = {"protected_hardlinks": value}
    [error] = check_host_state("gpu-01", {**DEFAULTS, "sglang_require_gpu": False}, state)
    shown = value or "unreadable"
    assert error.startswith(f"host gpu-01: fs.protected_hardlinks: the kernel setting is {shown}, not 1: ")
    assert "Fix: sysctl -w fs.protected_hardlinks=1, and keep it across reboots with a file in /etc/sysctl.d/" in error
    state["kernel"] = {"protected_hardlinks": "1"}
    assert check_host_state("gpu-01", {**DEFAULTS, "sglang_require_gpu": False}, state) == []


@pytest.mark.parametrize("hostname", ["10.0.0.11\n- --host=0.0.0.0", "gpu-01:2222", "gpu 01", "-gpu", "a/b", "",
                                      "x" * 64 + ".example"])
def test_an_ssh_hostname_that_is_no_host_name_or_address_is_refused(hostname):
    """ssh_hostname becomes rank 0's --dist-init-addr, a worker's URL and a peer's address when
    sglang_worker_address is unset; it was never judged."""
    [error] = errors_for(ssh_hostname=hostname)
    assert error.startswith("host gpu-01: ssh_hostname: ") and "is not a host name or an IP address" in error
    assert "\n" not in error


@pytest.mark.parametrize("hostname", ["10.0.0.11", "fd00::11", "gpu-01", "gpu-01.dc1.example.org"])
def test_a_host_name_or_an_address_is_a_valid_ssh_hostname(hostname):
    assert errors_for(ssh_hostname=hostname) == []


def test_an_inventory_name_that_is_the_fleet_address_must_be_a_host_name():
    [error] = check_data("gpu 01\nx", dict(DEFAULTS))
    assert error.startswith("host gpu 01\\x0ax: ssh_hostname: not set, so the inventory name")
    assert check_data("gpu 01", {**DEFAULTS, "ssh_hostname": "10.0.0.11"}) == []
    assert check_data("gpu 01", {**DEFAULTS, "sglang_worker_address": "10.0.0.11"}) == []
