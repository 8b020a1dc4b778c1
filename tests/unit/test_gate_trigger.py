"""What triggers a gate (issue 60): the config it judges (compose.yaml, .env, the image and the container that serve
it) and the operator's judging values rendered into the validation scripts' command lines, never the programs the
scripts carry (the tool's own code). A tool upgrade gates nothing it did not change; a stamp an earlier version
wrote of the host as it is stays a pass (hostside/gate/stamp.py compare, hostside/write/restamp.py,
plan/render.py gate_files, operations/gate.py gate_passed). The host side is written for real into a temp home;
the container is a stand-in dictionary shaped as stack.container() returns the engine's answer."""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace

import pytest
from conftest import FakeHost, command_text, on_host, pinned_defaults, plan_for

from gate_home import gated_home
from sglang_infra.hostside import names, safefs
from sglang_infra.hostside.gate import stamp
from sglang_infra.hostside.write import restamp
from sglang_infra.machine import ship
from sglang_infra.operations import gate as gate_operations
from sglang_infra.plan import render
from sglang_infra.run import factcache

GATED = {"id": "c" * 64, "state": "running", "image_id": "sha256:" + "ee" * 32,
         "started_at": "2026-01-01T10:00:00.000000000Z", "restart_count": 0}
# A validation script as templates/*.sh.j2 render it: comments, its command line, the program it carries.
SCRIPT = ("#!/usr/bin/env bash\n# Managed by pyinfra (deploy.py). {comment}\ncd /\n"
          "exec python3 - {check} --url {url} --model m --min-fraction {fraction} \"$@\" <<'PYTHON'\n"
          "{program}\nPYTHON\n")


def script(check, program="print('checks v1')", url="http://127.0.0.1:30000", fraction="0.8", comment="gate"):
    return SCRIPT.format(check=check, program=program, url=url, fraction=fraction, comment=comment)


def write_scripts(home, **values):
    for name in names.VALIDATION_SCRIPTS:
        (home / name).write_text(script(name.split(".")[0], **values))


def stamp_of_cef8e10(home, container):
    """The stamp the tree of the last landing (cef8e10, up to stop 61) wrote: its stamp.digest(), spelled out here
    (each validation script by its whole sha256, no form), on a host without NVIDIA's driver."""
    docker = os.path.join(home, names.DOCKER_DIR)
    parts = [f"compose={safefs.sha256_regular(os.path.join(docker, names.COMPOSE_FILE))}",
             f"env={safefs.sha256_regular(os.path.join(docker, names.ENV_FILE))}",
             f"image={container['image_id']}", f"container={container['id']}@{container['started_at']}"]
    parts += [f"{name}={safefs.sha256_regular(os.path.join(home, name))}" for name in names.VALIDATION_SCRIPTS]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A worker's home whose gate passed with GATED serving; no NVIDIA driver, no reboot since."""
    home = gated_home(tmp_path, GATED, write_scripts)
    monkeypatch.setattr(stamp, "running_driver", lambda: [])
    monkeypatch.setattr(stamp, "boot_id", lambda: "b" * 36)
    return home


def holds(home, container=GATED):
    return names.stamp_current(stamp.read(str(home)), stamp.current(str(home), container))


def test_a_new_version_of_the_checks_the_scripts_carry_keeps_the_stamp(home):
    """The tool's upgrade rewrites both scripts with its new checks program (and reworded comments): the same
    config, judged by the same values, still passed."""
    write_scripts(home, program="print('checks v2: ports read sorted')", comment="reworded")
    assert holds(home)


@pytest.mark.parametrize("change", ["url", "threshold", "compose", "env", "image", "container"])
def test_a_change_of_the_config_or_of_a_judging_value_asks_for_the_gate(home, change):
    container = GATED
    if change == "url":
        write_scripts(home, url="http://127.0.0.1:30001")
    elif change == "threshold":
        write_scripts(home, fraction="0.9")
    elif change == "compose":
        (home / "docker" / names.COMPOSE_FILE).write_text("services: {sglang: {image: y}}\n")
    elif change == "env":
        (home / "docker" / names.ENV_FILE).write_text("SGLANG_UID=1000\n")
    elif change == "image":
        container = {**GATED, "image_id": "sha256:" + "ff" * 32}
    else:
        container = {**GATED, "started_at": "2026-01-01T11:00:00.000000000Z"}
    assert not holds(home, container)


def test_an_earlier_versions_stamp_of_the_host_as_it_is_is_a_pass_and_is_migrated(home, monkeypatch):
    """The host a cef8e10 run gated: its stamp names the host as it is (a pass), restamp() rewrites it in this
    version's form before the new scripts land, and the new scripts (new checks, same values) keep it a pass."""
    earlier = stamp_of_cef8e10(str(home), GATED)
    (home / "docker" / stamp.STAMP).write_text(earlier + "\n")
    assert holds(home) and stamp.compare(str(home), GATED) == (earlier, True)
    monkeypatch.setattr(restamp.stack, "container", lambda project, service: GATED)
    assert restamp.restamp(str(home)) is True
    assert stamp.read(str(home)) != earlier and stamp.compare(str(home), GATED)[1] is False and holds(home)
    write_scripts(home, program="print('checks v2')")
    assert holds(home)
    assert restamp.restamp(str(home)) is False   # this version's stamp: left as it is


def test_an_earlier_versions_stamp_of_another_config_is_no_pass_and_stays(home, monkeypatch):
    (home / "docker" / stamp.STAMP).write_text(stamp_of_cef8e10(str(home), GATED) + "\n")
    (home / "docker" / names.COMPOSE_FILE).write_text("services: {sglang: {image: y}}\n")
    before = stamp.read(str(home))
    monkeypatch.setattr(restamp.stack, "container", lambda project, service: GATED)
    assert not holds(home) and restamp.restamp(str(home)) is False and stamp.read(str(home)) == before


def test_the_judged_text_is_the_command_lines_without_comments_or_carried_programs():
    text = script("benchmark", program="line one\n# not a comment of the script\nPYTHONISH")
    assert names.judged_text(text) == ("cd /\nexec python3 - benchmark --url http://127.0.0.1:30000 --model m "
                                       "--min-fraction 0.8 \"$@\" <<'PYTHON'\n")


# The control side: the plan's gate files, and validated's decision on them.

DEFAULTS = pinned_defaults()
INSTALLED = ship.installed


def new_checks(monkeypatch, program):
    """The tool's checks program (the one the validation scripts carry) as a new version of it would be."""
    monkeypatch.setattr(ship, "installed", lambda entry: (f"# {program}\n" if entry == "checks" else "")
                        + INSTALLED(entry))


def gate_files(monkeypatch, program="checks v1", **overrides):
    new_checks(monkeypatch, program)
    return dict(plan_for({**DEFAULTS, **overrides}).gate.files)


def test_the_plans_gate_files_ignore_the_programs_the_scripts_carry(monkeypatch):
    before = gate_files(monkeypatch)
    assert gate_files(monkeypatch, program="checks v2") == before


@pytest.mark.parametrize("key,value", [("sglang_benchmark_min_fraction", 0.5), ("sglang_benchmark_max_tokens", 77),
                                       ("sglang_benchmark_concurrency", 3), ("sglang_port", 30001)])
def test_a_judging_value_changes_the_plans_gate_files(monkeypatch, key, value):
    before, after = gate_files(monkeypatch), gate_files(monkeypatch, **{key: value})
    changed = sorted(os.path.basename(path) for path in before if before[path] != after[path])
    assert changed and set(changed) <= {*names.GATE_SCRIPTS, names.COMPOSE_FILE}, changed


def decide(plan, host_scripts: dict[str, str], image_id="sha256:aaa", compose_sha=None):
    """validated's commands on a host serving ``plan``'s compose.yaml from ``image_id``, its stamp current, with
    ``host_scripts`` (name: text) on disk as the snapshot reads them."""
    home = plan.paths.home
    snapshot = {
        "docker": {"images": {plan.image.serving: {"id": "sha256:aaa", "labels": {}}}, "runtimes": []},
        "files": {plan.paths.docker: {names.COMPOSE_FILE: {"owner": "sglang", "group": "sglang", "mode": "644",
                                                           "sha256": compose_sha or plan.compose_sha}},
                  home: {name: {"owner": "sglang", "group": "sglang", "mode": "755",
                                "sha256": names.text_digest(text)} for name, text in host_scripts.items()}},
        "stack": {"container": {"id": "c1", "state": "running", "status": "running", "image_id": image_id,
                                "labels": {}}, "record": None, "current": True},
        "gate": {"stamp": "d1", "digest": "d1", "legacy": False,
                 "judged": {f"{home}/{name}": names.judged_digest(text) for name, text in host_scripts.items()}},
    }
    fake = FakeHost({"Snapshot": snapshot})
    try:
        with on_host(fake):
            return [command_text(c) for c in gate_operations.validated._inner(
                home=home, image=plan.image.serving, gate=f"{home}/{names.GATE_SCRIPT}", files=plan.gate.files)]
    finally:
        factcache.invalidate(fake)


def test_an_upgraded_tool_on_a_host_that_passed_runs_no_gate(monkeypatch):
    old = plan_for(DEFAULTS)
    new_checks(monkeypatch, "checks v2")
    new = plan_for(DEFAULTS)
    assert new.scripts != old.scripts   # the scripts carry the new program
    assert decide(new, old.scripts) == []


@pytest.mark.parametrize("change", ["compose", "image", "judging value"])
def test_a_changed_compose_image_or_judging_value_runs_the_gate(change):
    plan = plan_for(DEFAULTS)
    on_disk = plan.scripts
    if change == "judging value":
        on_disk = render.scripts(replace(plan, gate=replace(plan.gate, url="http://127.0.0.1:30001")))
        assert {names.judged_digest(t) for t in on_disk.values()} != {names.judged_digest(t)
                                                                     for t in plan.scripts.values()}
    commands = decide(plan, on_disk, image_id="sha256:bbb" if change == "image" else "sha256:aaa",
                      compose_sha="0" * 64 if change == "compose" else None)
    assert len(commands) == 1 and commands[0].startswith("function run_gate"), commands
