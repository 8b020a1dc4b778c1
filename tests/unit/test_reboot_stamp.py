"""A reboot asks for no deploy (issue 44): the gate's stamp still names the container the Docker daemon started again
at the host's boot, and nothing else (hostside/gate/stamp.py as_gated, current). Written for real into a temp home; the
container is a stand-in dictionary shaped as stack.container() returns the engine's answer."""

from __future__ import annotations

import json

import pytest

from sglang_infra.hostside import names
from sglang_infra.hostside.gate import stamp

GATED = {"id": "c" * 64, "state": "running", "image_id": "sha256:" + "ee" * 32,
         "started_at": "2026-01-01T10:00:00.000000000Z", "restart_count": 0}
AFTER_BOOT = {**GATED, "started_at": "2026-01-02T08:00:00.000000000Z"}
GATE_BOOT, THIS_BOOT = "1" * 8 + "-aaaa-bbbb-cccc-" + "d" * 12, "2" * 8 + "-aaaa-bbbb-cccc-" + "d" * 12


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A worker's home whose gate passed with GATED serving, in boot GATE_BOOT; the kernel now says THIS_BOOT."""
    home = tmp_path / "home"
    (home / "docker").mkdir(parents=True)
    (home / "docker" / names.COMPOSE_FILE).write_text("services: {sglang: {image: x}}\n")
    (home / "docker" / names.ENV_FILE).write_text("SGLANG_UID=999\n")
    for script in names.VALIDATION_SCRIPTS:
        (home / script).write_text("#!/bin/bash\nexit 0\n")
    (home / "docker" / stamp.STAMP).write_text(stamp.digest(str(home), GATED) + "\n")
    record(home, boot_id=GATE_BOOT)
    monkeypatch.setattr(stamp, "boot_id", lambda: THIS_BOOT)
    return home


def record(home, **fields):
    found = {"passed": True, "container": {key: GATED[key] for key in stamp.GATED_CONTAINER}, **fields}
    (home / "docker" / stamp.LAST).write_text(json.dumps({k: v for k, v in found.items() if v is not None}))


def holds(home, container):
    return names.stamp_current(stamp.read(str(home)), stamp.current(str(home), container))


def test_the_container_the_daemon_started_at_boot_keeps_its_stamp(home):
    assert holds(home, GATED)
    assert holds(home, AFTER_BOOT)


@pytest.mark.parametrize("why, container, boot", [
    ("a restart in the gate's own boot (a crash, an operator)", AFTER_BOOT, GATE_BOOT),
    ("restarted by its policy since the boot's start", {**AFTER_BOOT, "restart_count": 1}, THIS_BOOT),
    ("another container", {**AFTER_BOOT, "id": "d" * 64}, THIS_BOOT),
    ("another image", {**AFTER_BOOT, "image_id": "sha256:" + "ff" * 32}, THIS_BOOT),
    ("not running", {**AFTER_BOOT, "state": "restarting"}, THIS_BOOT),
    ("the engine did not say its restart count", {**AFTER_BOOT, "restart_count": None}, THIS_BOOT),
])
def test_any_other_start_still_asks_for_the_gate(home, monkeypatch, why, container, boot):
    monkeypatch.setattr(stamp, "boot_id", lambda: boot)
    assert not holds(home, container), why


def test_a_record_without_its_boot_or_the_kernels_boot_unknown_keeps_todays_rule(home, monkeypatch):
    record(home, boot_id=None)   # a record written before the gate kept its boot
    assert not holds(home, AFTER_BOOT)
    record(home, boot_id=GATE_BOOT)
    monkeypatch.setattr(stamp, "boot_id", lambda: None)
    assert not holds(home, AFTER_BOOT)


def test_a_config_changed_since_the_gate_is_not_hidden_by_a_reboot(home):
    (home / "docker" / names.ENV_FILE).write_text("SGLANG_UID=998\n")
    assert not holds(home, AFTER_BOOT)


def test_a_link_in_place_of_the_record_is_no_record(home, tmp_path):
    elsewhere = tmp_path / "planted"
    elsewhere.write_text((home / "docker" / stamp.LAST).read_text())
    (home / "docker" / stamp.LAST).unlink()
    (home / "docker" / stamp.LAST).symlink_to(elsewhere)
    assert not holds(home, AFTER_BOOT)


def test_the_boot_id_is_the_kernels():
    found = stamp.boot_id()
    assert found is None or (len(found) == 36 and found.count("-") == 4)


def test_the_restart_count_is_asked_of_the_engine_when_the_container_does_not_carry_it(home, monkeypatch):
    """stack.container() does not read it (the validation scripts carry that module, and their text is part of the
    stamp): the stamp asks the engine for the one container, and only once the cheap conditions hold."""
    from sglang_infra.hostside import dockerapi

    asked = []
    answers = {"c" * 64: {"RestartCount": 0}}
    monkeypatch.setattr(dockerapi, "get", lambda path, *a, **k: asked.append(path) or answers.get(path.split("/")[2]))
    bare = {key: value for key, value in AFTER_BOOT.items() if key != "restart_count"}
    assert holds(home, bare) and asked == [f"/containers/{'c' * 64}/json"]
    answers["c" * 64] = {"RestartCount": 2}
    assert not holds(home, bare)

    def unavailable(path, *a, **k):
        raise dockerapi.Unavailable("no engine")
    monkeypatch.setattr(dockerapi, "get", unavailable)
    assert not holds(home, bare)
    asked.clear()
    monkeypatch.setattr(dockerapi, "get", lambda path, *a, **k: asked.append(path) or {"RestartCount": 0})
    monkeypatch.setattr(stamp, "boot_id", lambda: GATE_BOOT)   # the gate's own boot: the engine is not asked
    assert not holds(home, bare) and asked == []
