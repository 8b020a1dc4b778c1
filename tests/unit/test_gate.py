"""The gate's own pieces: saving the known-good config, run on temp files."""

from __future__ import annotations

import errno
import os

import pytest

from sglang_infra.hostside import gate


def test_the_known_good_copy_keeps_content_mode_and_replaces_a_planted_symlink(tmp_path):
    source, other = tmp_path / "compose.yaml", tmp_path / "victim"
    source.write_text("services: {}\n")
    source.chmod(0o644)
    other.write_text("untouched\n")
    dest = tmp_path / "compose.yaml.good"
    dest.symlink_to(other)
    gate.copy(str(source), str(dest))
    assert not dest.is_symlink() and dest.read_text() == "services: {}\n"
    assert oct(dest.stat().st_mode & 0o777) == "0o644"
    assert other.read_text() == "untouched\n"


def test_a_full_disk_leaves_the_last_known_good_copy_as_it_was(tmp_path, monkeypatch):
    source, dest = tmp_path / "compose.yaml", tmp_path / "compose.yaml.good"
    source.write_text("new\n")
    dest.write_text("old known-good\n")

    def full(_fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(gate.os, "fsync", full)
    with pytest.raises(OSError):
        gate.copy(str(source), str(dest))
    assert dest.read_text() == "old known-good\n"
    assert sorted(os.listdir(tmp_path)) == ["compose.yaml", "compose.yaml.good"]


def test_the_gate_copies_no_file_through_a_link_and_names_it(tmp_path):
    """compose.yaml (or .good, in a rollback) made a link to a file root can read: never copied from."""
    docker, secret = tmp_path / "docker", tmp_path / "server.yaml"
    docker.mkdir()
    secret.write_text("api-key: s3cret\n")
    (docker / "compose.yaml.good").symlink_to(secret)
    with pytest.raises(OSError, match="compose.yaml.good is a symlink"):
        gate.copy(str(docker / "compose.yaml.good"), str(docker / "compose.yaml"))
    assert not (docker / "compose.yaml").exists()


def test_the_gate_walks_no_directory_link_to_its_files(tmp_path):
    if os.geteuid() == 0:
        os.chown(tmp_path, 65534, 65534)  # the account's directory, as on a host: not root's alone
    real, elsewhere = tmp_path / "docker", tmp_path / "elsewhere"
    real.mkdir()
    elsewhere.mkdir()
    (elsewhere / "compose.yaml").write_text("services: {}\n")
    os.symlink(elsewhere, tmp_path / "linked")
    with pytest.raises(OSError, match="linked is a symlink"):
        gate.copy(str(tmp_path / "linked" / "compose.yaml"), str(real / "compose.yaml.good"))
    with pytest.raises(OSError, match="linked is a symlink"):
        gate.copy(str(elsewhere / "compose.yaml"), str(tmp_path / "linked" / "compose.yaml.good"))
    assert sorted(os.listdir(elsewhere)) == ["compose.yaml"] and not os.listdir(real)
