"""Files root writes under the account's directories (checked_file, account_env_file, secret_file), run for real
on this machine: the operation's commands, as the host would run them, against a tree with planted links."""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import subprocess
from pathlib import Path

import pytest
from conftest import FakeHost, on_host
from pyinfra.api import FileUploadCommand

from sglang_infra.machine import ship
from sglang_infra.operations import files
from sglang_infra.run import factcache

USER = pwd.getpwuid(os.geteuid()).pw_name
GROUP = grp.getgrgid(os.getegid()).gr_name


def facts(dest: Path) -> dict:
    """The snapshot's files section for dest's directory, as hostside/read/snapshot.py reads it."""
    entries = {}
    for entry in os.scandir(dest.parent):
        st = entry.stat(follow_symlinks=False)
        entries[entry.name] = {"owner": USER, "group": GROUP, "mode": format(st.st_mode & 0o7777, "o"),
                               "sha256": hashlib.sha256(Path(entry.path).read_bytes()).hexdigest()} \
            if entry.is_file(follow_symlinks=False) else False
    return {"Snapshot": {"files": {str(dest.parent): entries}}}


def apply(op, dest: Path, **args) -> list[subprocess.CompletedProcess]:
    """Every command of the operation, run as the host runs it: an upload writes its file at its name, a shell
    command gets its stdin the way pyinfra sends it (a newline added); the first failure stops."""
    fake = FakeHost(facts(dest))
    try:
        with on_host(fake):
            commands = list(op._inner(dest=str(dest), **args))
    finally:
        factcache.invalidate(fake)
    done = []
    for command in commands:
        if isinstance(command, FileUploadCommand):
            Path(command.dest).write_bytes(command.src.getvalue())
            continue
        stdin = getattr(command, "connector_arguments", {}).get("_stdin")
        if stdin is not None and not stdin.endswith("\n"):
            stdin += "\n"
        done.append(subprocess.run(["sh", "-c", str(command)], input=stdin, capture_output=True, text=True))
        if done[-1].returncode:
            break
    return done


@pytest.fixture
def docker(tmp_path):
    """The account's docker/ directory, owned by someone other than root (as on a host)."""
    if os.geteuid() == 0:
        os.chown(tmp_path, 65534, 65534)
    (tmp_path / "docker").mkdir()
    if os.geteuid() == 0:
        os.chown(tmp_path / "docker", 65534, 65534)
    return tmp_path / "docker"


def compose(docker: Path, content: str, check: str | None = None):
    return apply(files.checked_file, docker / "compose.yaml", content=content, user=USER, group=GROUP,
                 mode="644", check=check)


def test_a_new_file_is_written_with_its_mode_and_the_old_one_kept_as_previous(docker):
    dest = docker / "compose.yaml"
    assert [r.returncode for r in compose(docker, "a: 1\n")] == [0]
    os.utime(dest, ns=(10**18, 10**18))
    runs = compose(docker, "a: 2\n", check="grep -q a: {candidate}")
    assert [r.returncode for r in runs] == [0], runs
    assert dest.read_text() == "a: 2\n" and oct(dest.stat().st_mode & 0o777) == "0o644"
    previous = docker / "compose.yaml.previous"
    assert previous.read_text() == "a: 1\n" and previous.stat().st_mtime_ns == 10**18
    assert sorted(os.listdir(docker)) == ["compose.yaml", "compose.yaml.previous"]


def test_a_link_at_previous_is_refused_and_named_and_its_target_untouched(docker, tmp_path):
    """`cp -p compose.yaml compose.yaml.previous` wrote through a link there, and chown'd its target."""
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    assert [r.returncode for r in compose(docker, "a: 1\n")] == [0]
    (docker / "compose.yaml.previous").symlink_to(victim)
    runs = compose(docker, "a: 2\n")
    assert runs[-1].returncode != 0
    assert f"{docker}/compose.yaml.previous is a symlink" in runs[-1].stderr
    assert victim.read_text() == "root's file\n"
    assert (docker / "compose.yaml").read_text() == "a: 1\n"
    assert not (docker / "compose.yaml.candidate").exists()


def test_a_link_at_the_candidate_is_refused_and_its_target_untouched(docker, tmp_path):
    """The candidate was uploaded over whatever sat at its name, then chown'd by path."""
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    os.chmod(victim, 0o600)
    (docker / "compose.yaml.candidate").symlink_to(victim)
    runs = compose(docker, "a: 1\n")
    assert runs and runs[-1].returncode != 0
    assert f"{docker}/compose.yaml.candidate is a symlink" in runs[-1].stderr
    assert victim.read_text() == "root's file\n" and victim.stat().st_mode & 0o777 == 0o600
    assert not (docker / "compose.yaml").exists()


def test_a_directory_link_on_the_way_is_refused(docker, tmp_path):
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    os.rmdir(docker)
    docker.symlink_to(elsewhere)
    runs = compose(docker, "a: 1\n")
    assert runs[-1].returncode != 0 and f"{docker} is a symlink" in runs[-1].stderr
    assert os.listdir(elsewhere) == []


def test_a_candidate_refused_by_its_check_is_removed_and_the_file_kept(docker):
    assert [r.returncode for r in compose(docker, "good\n")] == [0]
    runs = compose(docker, "bad\n", check="grep -q good {candidate}")
    assert runs[-1].returncode != 0
    assert "failed its check, the current file is unchanged" in runs[-1].stderr
    assert (docker / "compose.yaml").read_text() == "good\n"
    assert sorted(os.listdir(docker)) == ["compose.yaml"]


def test_the_secret_is_written_private_and_no_link_beside_it_is_followed(docker, tmp_path):
    """`head -c N > hf-token.upload && chown` wrote through a link at the upload's name."""
    victims = {name: tmp_path / f"victim-{name}" for name in ("upload", "candidate")}
    for name, victim in victims.items():
        victim.write_text("root's file\n")
        (docker / f"hf-token.{name}").symlink_to(victim)
    runs = apply(files.secret_file, docker / "hf-token", content=b"hf_abc", user=USER)
    assert runs[-1].returncode != 0 and "hf-token.candidate is a symlink" in runs[-1].stderr
    assert all(v.read_text() == "root's file\n" for v in victims.values())
    assert "hf_abc" not in runs[-1].stderr
    for name in victims:
        os.unlink(docker / f"hf-token.{name}")
    runs = apply(files.secret_file, docker / "hf-token", content=b"hf_abc", user=USER)
    assert [r.returncode for r in runs] == [0]
    assert (docker / "hf-token").read_bytes() == b"hf_abc" and (docker / "hf-token").stat().st_mode & 0o777 == 0o600


def test_the_program_reads_exactly_its_size_from_stdin(docker):
    program = ship.program("write.put")
    short = subprocess.run(["python3", "-c", program, str(docker / "f"), USER, GROUP, "600", "10"],
                           input=b"abc", capture_output=True)
    assert short.returncode == 1 and b"stdin ended after 3 of 10 bytes" in short.stderr
    assert not (docker / "f").exists()


def test_a_live_writers_candidate_is_left_to_it_and_an_ended_ones_removed(docker):
    """Two writes of one file at once never unlink each other's candidate (issue #60: both runs failed)."""
    sleeper = subprocess.Popen(["sleep", "30"])
    ended = subprocess.Popen(["true"])
    ended.wait()
    try:
        (docker / f"compose.yaml.candidate.{sleeper.pid}").write_text("another run's\n")
        (docker / f"compose.yaml.candidate.{ended.pid}").write_text("a killed run's\n")
        runs = compose(docker, "a: 1\n", check='grep -q "a: 1" "$CANDIDATE"')
        assert [r.returncode for r in runs] == [0], runs
        assert sorted(os.listdir(docker)) == ["compose.yaml", f"compose.yaml.candidate.{sleeper.pid}"]
    finally:
        sleeper.kill()
        sleeper.wait()
