"""The engine's runtimes kept between reads (hostside/read/snapshot.py, engine_runtimes): GET /info is asked once
per running dockerd and daemon.json, and asked again whenever either changes or the kept entry is not sound.
The engine's PID file, /proc and the cache directory are temp trees; the engine's answer is counted."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sglang_infra.hostside import dockerapi
from sglang_infra.hostside.read import snapshot

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the kept runtimes are root's alone")

DOCKERD = "/usr/sbin/dockerd\0-H\0fd://\0--containerd=/run/containerd/containerd.sock\0"


class Engine:
    """A running dockerd as the read finds it: its PID file, /proc/PID/{stat,cmdline}, daemon.json, and what
    GET /info answers (counted)."""

    def __init__(self, root: Path, monkeypatch):
        self.root, self.asked, self.pid, self.started = root, 0, 623, 4711
        self.answer = ["io.containerd.runc.v2", "runc"]
        self.config = root / "daemon.json"
        self.cache = root / "cache"
        self.cache.mkdir(mode=0o700)
        for name, value in (("ENGINE_PIDFILE", root / "docker.pid"), ("PROC", root / "proc"),
                            ("DAEMON_JSON", self.config), ("CACHE_DIRECTORY", self.cache)):
            monkeypatch.setattr(snapshot, name, str(value))
        monkeypatch.setattr(dockerapi, "runtimes", self.info)
        self.start(command=DOCKERD)

    def info(self, socket_path=None):
        self.asked += 1
        return sorted(self.answer)

    def start(self, pid=None, command=None, comm="dockerd"):
        """The engine (re)started: a new process, a new start time."""
        self.pid, self.started = pid or self.pid + 1, self.started + 100
        proc = self.root / "proc" / str(self.pid)
        proc.mkdir(parents=True, exist_ok=True)
        fields = ["S"] + ["0"] * 18 + [str(self.started)] + ["0"] * 10
        (proc / "stat").write_text(f"{self.pid} ({comm}) " + " ".join(fields) + "\n")
        (proc / "cmdline").write_text(command or DOCKERD)
        (self.root / "docker.pid").write_text(f"{self.pid}")

    def configure(self, runtimes):
        """daemon.json written anew, as nvidia-ctk writes it (the engine not told yet)."""
        self.config.write_text(json.dumps({"runtimes": {name: {"path": f"/usr/bin/{name}"} for name in runtimes}}))

    def read(self):
        return snapshot.engine_runtimes()


@pytest.fixture
def engine(tmp_path, monkeypatch):
    return Engine(tmp_path, monkeypatch)


def test_the_engine_is_asked_once_while_nothing_it_runs_from_changes(engine):
    assert engine.read() == ["io.containerd.runc.v2", "runc"]
    assert engine.read() == ["io.containerd.runc.v2", "runc"]
    assert engine.read() == ["io.containerd.runc.v2", "runc"]
    assert engine.asked == 1
    entry = engine.cache / snapshot.KEPT_RUNTIMES
    assert entry.stat().st_uid == 0 and entry.stat().st_mode & 0o777 == 0o600


def test_a_restarted_engine_is_asked_again(engine):
    engine.read()
    engine.answer = ["io.containerd.runc.v2", "nvidia", "runc"]
    engine.configure(["nvidia"])
    engine.start()
    assert engine.read() == ["io.containerd.runc.v2", "nvidia", "runc"]
    assert engine.asked == 2
    # the same PID again (reused) but a new start time: asked again
    engine.answer = ["io.containerd.runc.v2", "runc"]
    engine.config.unlink()
    engine.start(pid=engine.pid)
    assert engine.read() == ["io.containerd.runc.v2", "runc"]
    assert engine.asked == 3


def test_daemon_json_edited_and_not_yet_loaded_is_never_kept_and_a_reload_is_seen(engine):
    engine.configure(["nvidia"])
    assert engine.read() == ["io.containerd.runc.v2", "runc"]   # the running engine has not loaded it
    assert engine.read() == ["io.containerd.runc.v2", "runc"]
    assert engine.asked == 2                                        # not kept: the answer is not daemon.json's
    engine.answer = ["io.containerd.runc.v2", "nvidia", "runc"]    # SIGHUP: the same process reloads the file
    assert engine.read() == ["io.containerd.runc.v2", "nvidia", "runc"]
    assert engine.read() == ["io.containerd.runc.v2", "nvidia", "runc"]
    assert engine.asked == 3


def test_daemon_json_changed_under_a_kept_entry_asks_again(engine):
    engine.configure(["nvidia"])
    engine.answer = ["io.containerd.runc.v2", "nvidia", "runc"]
    engine.read()
    engine.configure([])                     # the runtime removed, then a reload
    engine.answer = ["io.containerd.runc.v2", "runc"]
    assert engine.read() == ["io.containerd.runc.v2", "runc"]
    assert engine.asked == 2


def test_a_runtime_beyond_daemon_json_and_the_built_in_ones_is_never_kept(engine):
    engine.answer = ["io.containerd.runc.v2", "runc", "youki"]   # from somewhere this read does not follow
    engine.read()
    engine.read()
    assert engine.asked == 2
    assert not (engine.cache / snapshot.KEPT_RUNTIMES).exists()


@pytest.mark.parametrize("command", [DOCKERD + "--config-file\0/srv/docker.json\0",
                                     DOCKERD + "--add-runtime=crun=/usr/bin/crun\0"])
def test_an_engine_run_from_another_config_or_its_own_runtimes_is_always_asked(engine, command):
    engine.start(command=command)
    engine.read()
    engine.read()
    assert engine.asked == 2


def test_a_pid_file_naming_another_process_or_none_is_always_asked(engine):
    engine.start(comm="sleep")
    engine.read()
    engine.read()
    assert engine.asked == 2
    (engine.root / "docker.pid").unlink()
    engine.read()
    assert engine.asked == 3


@pytest.mark.parametrize("spoil", ["mode", "owner", "link", "key", "names"])
def test_a_kept_entry_that_is_not_sound_is_never_used(engine, spoil, tmp_path):
    engine.read()
    entry = engine.cache / snapshot.KEPT_RUNTIMES
    lines = entry.read_bytes().split(b"\n")
    if spoil == "mode":
        entry.chmod(0o644)
    elif spoil == "owner":
        os.chown(entry, 65534, 65534)
    elif spoil == "link":
        planted = tmp_path / "planted"
        planted.write_bytes(entry.read_bytes())
        entry.unlink()
        entry.symlink_to(planted)
    elif spoil == "key":
        entry.write_bytes(b"\n".join([lines[0], b"0" * 64, *lines[2:]]))
    else:
        entry.write_bytes(b"\n".join([*lines[:2], b"nvidia runc", b""]))
    assert engine.read() == ["io.containerd.runc.v2", "runc"]
    assert engine.asked == 2


@pytest.mark.parametrize("mode", [0o755, 0o770])
def test_a_cache_directory_others_may_read_or_write_is_never_used(engine, mode):
    engine.cache.chmod(mode)
    engine.read()
    engine.read()
    assert engine.asked == 2
    assert not (engine.cache / snapshot.KEPT_RUNTIMES).exists()


def test_the_snapshots_docker_section_asks_the_engine_once(engine, monkeypatch):
    """docker(), the snapshot's engine section, takes its runtimes through the kept entry."""
    import socket

    path = engine.root / "docker.sock"
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(path))
        monkeypatch.setattr(dockerapi, "SOCKET", str(path))
        monkeypatch.setattr(dockerapi, "images", lambda socket_path=None: {})
        first, second = snapshot.docker(None), snapshot.docker(None)
    assert first["api"] and second["api"]
    assert first["runtimes"] == second["runtimes"] == ["io.containerd.runc.v2", "runc"]
    assert engine.asked == 1


def test_the_runtimes_are_kept_in_the_code_caches_own_directory():
    from sglang_infra.hostside.read import codecache

    assert snapshot.CACHE_DIRECTORY == codecache.DIRECTORY
