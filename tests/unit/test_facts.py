from __future__ import annotations

import grp
import json
import os
import pwd
import subprocess

import pytest

from conftest import FIXTURES
from sglang_infra.facts import FileState, HostState, TreeDrift, engine_works


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


@pytest.mark.parametrize("server,compose,works", [
    ("26.1.5+dfsg1", "2.26.1-4", True),
    ("27.3.1", "v2.29.7", True),
    ("20.10.24", "", False),        # engine without compose v2
    ("20.10.24", "1.29.2", False),  # compose v1 only
    ("", "2.26.1", False),          # client and plugin, but no daemon answering
])
def test_engine_works(server, compose, works):
    assert engine_works({"docker_server": server, "docker_compose": compose}) is works


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


def test_tree_drift_finds_nothing_in_a_conforming_tree(tree):
    user, group = _ids()
    assert _run_fact(TreeDrift(), home=str(tree), user=user, group=group) == {}


def test_tree_drift_finds_each_kind_of_drift(tree):
    user, group = _ids()
    hub = tree / "hf-cache" / "hub"
    (hub / "models--a--b" / "blobs" / "abc").chmod(0o644)
    (hub / "models--a--b").chmod(0o775)
    (tree / "notes.txt").write_text("x")
    (tree / "notes.txt").chmod(0o666)
    (tree / "docker" / "compose.yaml").chmod(0o664)
    drift = _run_fact(TreeDrift(), home=str(tree), user=user, group=group)
    assert drift == {
        "cache_file_mode": [str(hub / "models--a--b" / "blobs" / "abc")],
        "cache_dir_mode": [str(hub / "models--a--b")],
        "world_writable": [str(tree / "notes.txt")],
        "docker_group_writable": [str(tree / "docker" / "compose.yaml")],
    }


def test_tree_drift_is_empty_before_the_home_exists(tmp_path):
    user, group = _ids()
    out = subprocess.run(["sh", "-c", TreeDrift().command(home=str(tmp_path / "missing"), user=user, group=group)],
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == ""


def test_tree_drift_ignores_symlinks_for_modes(tree):
    user, group = _ids()
    snapshot = tree / "hf-cache" / "hub" / "models--a--b" / "snapshots"
    snapshot.mkdir()
    snapshot.chmod(0o2775)
    (snapshot / "link").symlink_to("../blobs/abc")
    assert _run_fact(TreeDrift(), home=str(tree), user=user, group=group) == {}


def test_file_state_reads_owner_mode_and_hash(tmp_path):
    path = tmp_path / "f"
    path.write_text("hello\n")
    path.chmod(0o640)
    user, group = _ids()
    assert _run_fact(FileState(), path=str(path)) == {
        "owner": user, "group": group, "mode": "640",
        "sha256": "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"}


def test_file_state_missing_and_not_a_file(tmp_path):
    assert subprocess.run(["sh", "-c", FileState().command(path=str(tmp_path / "nope"))],
                          capture_output=True, text=True).stdout == ""
    assert _run_fact(FileState(), path=str(tmp_path)) is False
