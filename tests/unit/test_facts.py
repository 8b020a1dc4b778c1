from __future__ import annotations

import grp
import json
import os
import pwd
import subprocess

import pytest

from conftest import FIXTURES
from sglang_infra.facts import DirectoryFiles, HostState, Layout, StackState, engine_works


def recorded(name: str) -> dict:
    return json.loads((FIXTURES / "facts" / f"{name}.json").read_text())


def test_host_state_on_a_fresh_trixie_host():
    state = HostState().process(recorded("host_state.fresh_trixie")["output"])
    assert state["os_id"] == "debian" and state["os_version"] == "13"
    assert state["user"] is None and state["group"] is None
    assert state["extra_groups"] == {}
    assert state["password_locked"] is None
    assert state["admins_present"] == []
    assert not engine_works(state)


def test_host_state_on_a_converged_host():
    state = HostState().process(recorded("host_state.converged_trixie")["output"])
    assert state["user"] == {"name": "sglang", "uid": 995, "gid": 996, "home": "/opt/sglang",
                             "shell": "/usr/sbin/nologin"}
    assert state["group"]["gid"] == 996
    assert state["extra_groups"]["docker"]["members"] == ["sglang"]
    assert state["supplementary"] == ["sglang", "docker"]
    assert state["password_locked"] is True
    assert state["admins_present"] == ["alice"]
    assert engine_works(state)


def test_host_state_command_never_prints_the_password_hash():
    command = HostState().command(user="sglang")
    assert "getent shadow sglang | cut -d: -f2 | cut -c1" in command


WORKING = {"docker_cli": "/usr/bin/docker", "docker_socket": True, "docker_active": "active",
           "docker_compose_plugin": "/usr/libexec/docker/cli-plugins/docker-compose"}


@pytest.mark.parametrize("broken", [
    {"docker_compose_plugin": None},   # engine without compose v2 (v1 was never a plugin)
    {"docker_socket": False},          # daemon not listening
    {"docker_active": "failed"},       # unit down
    {"docker_cli": None},              # no client
])
def test_engine_works_needs_every_part(broken):
    assert engine_works(WORKING)
    assert not engine_works({**WORKING, **broken})


def _run_fact(fact, **kwargs):
    out = subprocess.run(["sh", "-c", fact.command(**kwargs)], capture_output=True, text=True, check=True)
    return fact.process(out.stdout.splitlines())


@pytest.fixture
def tree(tmp_path):
    """A small home laid out as the deploy leaves it, owned by whoever runs the tests."""
    home = tmp_path / "home"
    hub = home / "hf-cache" / "hub"
    (hub / "models--a--b" / "blobs").mkdir(parents=True)
    (home / "docker").mkdir()
    for d in (home / "hf-cache", hub, hub / "models--a--b", hub / "models--a--b" / "blobs"):
        d.chmod(0o2775)
    blob = hub / "models--a--b" / "blobs" / "abc"
    blob.write_text("x")
    blob.chmod(0o664)
    compose = home / "docker" / "compose.yaml"
    compose.write_text("x")
    compose.chmod(0o644)
    return home


def _ids():
    return pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name


def _dirs(tree):
    return [str(tree), str(tree / "docker"), str(tree / "hf-cache"), str(tree / "hf-cache" / "hub")]


def test_layout_reads_the_managed_directories_and_no_drift(tree):
    user, group = _ids()
    found = _run_fact(Layout(), home=str(tree), dirs=_dirs(tree), user=user, group=group)
    assert found["drift"] == {}
    assert found["dirs"][str(tree / "hf-cache" / "hub")] == {"owner": user, "group": group, "mode": "2775"}
    assert set(found["dirs"]) == set(_dirs(tree))


def test_layout_finds_each_kind_of_drift(tree):
    user, group = _ids()
    hub = tree / "hf-cache" / "hub"
    (hub / "models--a--b" / "blobs" / "abc").chmod(0o644)
    (hub / "models--a--b").chmod(0o775)
    (tree / "notes.txt").write_text("x")
    (tree / "notes.txt").chmod(0o666)
    (tree / "docker" / "compose.yaml").chmod(0o664)
    drift = _run_fact(Layout(), home=str(tree), dirs=_dirs(tree), user=user, group=group)["drift"]
    assert drift == {
        "cache_file_mode": [str(hub / "models--a--b" / "blobs" / "abc")],
        "cache_dir_mode": [str(hub / "models--a--b")],
        "world_writable": [str(tree / "notes.txt")],
        "docker_group_writable": [str(tree / "docker" / "compose.yaml")],
    }


def test_layout_is_empty_before_the_home_exists(tmp_path):
    user, group = _ids()
    home = tmp_path / "missing"
    out = subprocess.run(["sh", "-c", Layout().command(home=str(home), dirs=[str(home)], user=user, group=group)],
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == ""


def test_layout_ignores_symlinks_for_modes(tree):
    user, group = _ids()
    snapshot = tree / "hf-cache" / "hub" / "models--a--b" / "snapshots"
    snapshot.mkdir()
    snapshot.chmod(0o2775)
    (snapshot / "link").symlink_to("../blobs/abc")
    assert _run_fact(Layout(), home=str(tree), dirs=_dirs(tree), user=user, group=group)["drift"] == {}


def test_directory_files_reads_owner_mode_and_hash(tmp_path):
    (tmp_path / "compose.yaml").write_text("hello\n")
    (tmp_path / "compose.yaml").chmod(0o640)
    (tmp_path / ".env").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "link").symlink_to("compose.yaml")
    user, group = _ids()
    assert _run_fact(DirectoryFiles(), path=str(tmp_path)) == {
        "compose.yaml": {"owner": user, "group": group, "mode": "640",
                         "sha256": "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"},
        ".env": {"owner": user, "group": group, "mode": "644",
                 "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        "sub": False,
        "link": False,
    }


def test_directory_files_of_a_missing_directory(tmp_path):
    out = subprocess.run(["sh", "-c", DirectoryFiles().command(path=str(tmp_path / "nope"))],
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == ""


def test_stack_state_parses_compose_ps_json():
    ps = {"Service": "sglang", "State": "running", "Name": "sglang-sglang-1",
          "Labels": "com.docker.compose.image=sha256:84d8,com.docker.compose.project=sglang,"
                    "com.docker.compose.config-hash=2828d81f,sglang.model=org/m"}
    output = ["@image", "sha256:84d8", "@hash", "sglang 2828d81f", "@ps", json.dumps(ps)]
    assert StackState().process(output) == {
        "image_id": "sha256:84d8", "hashes": {"sglang": "2828d81f"},
        "containers": [{"service": "sglang", "state": "running", "config_hash": "2828d81f", "model": "org/m",
                        "image_id": "sha256:84d8", "name": "sglang-sglang-1"}]}


def test_stack_state_accepts_the_older_array_format_and_no_containers():
    assert StackState().process(["@image", "@hash", "sglang abc", "@ps", "[]"]) == \
        {"image_id": None, "hashes": {"sglang": "abc"}, "containers": []}


def test_directory_files_carries_the_validation_stamp(tmp_path):
    (tmp_path / ".validated").write_text("abc123\n")
    found = _run_fact(DirectoryFiles(), path=str(tmp_path))
    assert found[".validated"]["content"] == "abc123"


def _hand_pulled_snapshot(hub, commit="a" * 40):
    repo = hub / "models--org--model"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "b1").write_bytes(b"{}")
    (repo / "snapshots" / commit).mkdir(parents=True)
    os.symlink("../../blobs/b1", repo / "snapshots" / commit / "config.json")
    return repo


def test_model_cache_reads_the_cache_and_the_compose_references(tmp_path):
    from sglang_infra.facts import ModelCache

    hub, docker = tmp_path / "hub", tmp_path / "docker"
    _hand_pulled_snapshot(hub)
    docker.mkdir()
    (docker / "compose.yaml").write_text('    labels:\n      sglang.model: "org/model@' + "a" * 40 + '"\n')
    (docker / "compose.yaml.good").write_text('      sglang.model: "org/model@' + "b" * 40 + '"\n')
    found = _run_fact(ModelCache(), hub=str(hub), docker_dir=str(docker))
    revision = found["repos"]["org/model"]["revisions"]["a" * 40]
    assert revision["complete"] is False and revision["files"] == 1
    assert found["referenced"] == ["org/model@" + "a" * 40, "org/model@" + "b" * 40]


def test_model_cache_of_a_host_without_a_cache(tmp_path):
    from sglang_infra.facts import ModelCache

    found = _run_fact(ModelCache(), hub=str(tmp_path / "none"), docker_dir=str(tmp_path / "none"))
    assert found == {"repos": {}, "referenced": []}


def test_pull_tools_reads_the_venv_release_without_starting_python(tmp_path):
    from sglang_infra.facts import PullTools

    site = tmp_path / "venv" / "lib" / "python3.13" / "site-packages"
    (site / "huggingface_hub-2.4.0.dist-info").mkdir(parents=True)
    (tmp_path / "venv" / "bin").mkdir()
    (tmp_path / "venv" / "bin" / "python").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "venv" / "bin" / "python", 0o755)
    found = _run_fact(PullTools(), tools_dir=str(tmp_path))
    assert found["venv_python"] and found["hub_versions"] == ["2.4.0"] and found["secret"] is None
    assert found["tools"]["mode"] == oct(os.stat(tmp_path).st_mode & 0o777)[2:]
    assert _run_fact(PullTools(), tools_dir=str(tmp_path / "none"))["hub_versions"] == []


@pytest.mark.parametrize("output,value", [([], None), (["label=abc"], "abc"), (["label=<no value>"], ""),
                                          (["label="], "")])
def test_image_label_tells_a_missing_image_from_a_missing_label(output, value):
    from sglang_infra.facts import ImageLabel

    assert ImageLabel().process(output) == value
