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
