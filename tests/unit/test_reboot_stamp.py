"""A reboot asks for no deploy (issue 44): the gate's stamp still names the container the Docker daemon started again
at the host's boot, and nothing else (hostside/gate/stamp.py as_gated, current). Written for real into a temp home; the
container is a stand-in dictionary shaped as stack.container() returns the engine's answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gate_home import gated_home
from sglang_infra.hostside import names
from sglang_infra.hostside.gate import stamp

GATED = {"id": "c" * 64, "state": "running", "image_id": "sha256:" + "ee" * 32,
         "started_at": "2026-01-01T10:00:00.000000000Z", "restart_count": 0}
AFTER_BOOT = {**GATED, "started_at": "2026-01-02T08:00:00.000000000Z"}
GATE_BOOT, THIS_BOOT = "1" * 8 + "-aaaa-bbbb-cccc-" + "d" * 12, "2" * 8 + "-aaaa-bbbb-cccc-" + "d" * 12


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A worker's home whose gate passed with GATED serving, in boot GATE_BOOT; the kernel now says THIS_BOOT."""
    home = gated_home(tmp_path, GATED)
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


# ------------------------------------------------ a driver change is a change of the serving stack (issue 52, item 2)
RECORDED_DRIVER = Path(__file__).parent / "fixtures" / "driver" / "h200-proc-driver-nvidia-version.txt"


@pytest.fixture
def on_driver(tmp_path, monkeypatch):
    """The host's loaded module as the H200 recorded it (580.159.04), and a Fabric Manager binary that answers
    ``fabric_manager['said']``; returns a function that swaps the loaded module's line."""
    version = tmp_path / "proc-driver-nvidia-version"
    version.write_text(RECORDED_DRIVER.read_text())
    monkeypatch.setattr(stamp, "DRIVER_VERSION", str(version))
    fabric_manager = {"said": None}
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nv-fabricmanager"
    tool.write_text("#!/bin/sh\necho \"$SAID\"\n")
    tool.chmod(0o755)
    monkeypatch.setattr(stamp.safefs, "which", lambda name: str(tool) if fabric_manager["said"] else None)
    monkeypatch.setenv("SAID", "")

    def swap(line=None, fm=None):
        if line is not None:
            version.write_text(line)
        fabric_manager["said"] = fm
        monkeypatch.setenv("SAID", fm or "")
    return swap


def restamp(home, container=GATED):
    (home / "docker" / stamp.STAMP).write_text(stamp.digest(str(home), container) + "\n")


def test_the_recorded_module_line_names_its_release(on_driver):
    assert stamp.running_driver() == ["driver=580.159.04"]
    on_driver("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.172.08  Tue Jul  8 2025\n",
              "Fabric Manager version is : 570.172.08")
    assert stamp.running_driver() == ["driver=570.172.08", "fabric_manager=570.172.08"]


def test_a_host_without_nvidias_driver_digests_as_before(home, monkeypatch, tmp_path):
    """No module, no Fabric Manager: the digest is what it was before the driver counted (no stamp goes stale)."""
    monkeypatch.setattr(stamp, "DRIVER_VERSION", str(tmp_path / "absent"))
    monkeypatch.setattr(stamp.safefs, "which", lambda name: None)
    assert stamp.running_driver() == []
    restamp(home)
    assert holds(home, GATED)


def test_the_same_container_after_a_boot_into_another_driver_asks_for_the_gate(home, on_driver):
    """The deploy's pinned driver loaded by the reboot: the daemon starts the very container the gate stamped, on
    a driver it never served on (on main the stamp held, and no gate ran)."""
    restamp(home)
    assert holds(home, AFTER_BOOT)
    on_driver("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.195.03  Release Build  (nixbld@)\n")
    assert not holds(home, AFTER_BOOT)
    assert not holds(home, GATED)


def test_another_fabric_manager_asks_for_the_gate(home, on_driver):
    on_driver(fm="Fabric Manager version is : 580.159.04")
    restamp(home)
    assert holds(home, AFTER_BOOT)
    on_driver(fm="Fabric Manager version is : 580.195.03")
    assert not holds(home, AFTER_BOOT)


def test_a_gateways_digest_leaves_the_driver_out(home, on_driver):
    """A gateway runs on no GPU: a driver change on its host is no change of what its gate validated."""
    before = stamp.digest(str(home), GATED, str(home / "docker"), stamp.GATEWAY_FILES)
    on_driver("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.195.03  Release Build\n")
    assert stamp.digest(str(home), GATED, str(home / "docker"), stamp.GATEWAY_FILES) == before
