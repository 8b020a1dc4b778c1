"""The driver layer of a GPU host: what nvsmi.py reads from `nvidia-smi -q -x`, and the refusals the plan makes of
it (a driver too old for the image's CUDA, an NVSwitch board without its Fabric Manager, persistence mode off),
over the document recorded on the lent H200 (2026-12-04) and hand-written variants of it
(fixtures/nvidia-smi/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import pinned_defaults

from sglang_infra.hostside.gpu import nvsmi
from sglang_infra.machine.gpus import derive_flags, gpu_faults, min_driver, parse_snapshot, plan_problems

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RUN = FIXTURES / "h200-2026-12-04"
DEFAULTS = pinned_defaults()
QUERY = ["0, NVIDIA H200, 9.0, 143771"]


def document(case: str) -> str:
    path = RUN / "q.xml" if case == "recorded" else FIXTURES / "nvidia-smi" / f"{case}.q.xml"
    return path.read_text()


def section(case: str, nvswitches=(), fabric_manager=None, units=None) -> dict:
    """The snapshot's gpus section as hostside/read/snapshot.py makes it from ``case``'s document."""
    return {"query": QUERY, "topo": [], "runtimes": ["nvidia"], "driver": nvsmi.parse(document(case)),
            "nvswitches": list(nvswitches), "fabric_manager": fabric_manager, "units": units or {}}


def refusals(gpus: dict, **data) -> dict:
    full = {**DEFAULTS, **data}
    inventory = parse_snapshot(gpus)
    return {key: (what, fix) for key, what, fix in plan_problems(full, inventory, derive_flags(full, inventory))}


def test_the_recorded_h200_reads_its_driver_and_cuda():
    found = nvsmi.parse(document("recorded"))
    assert (found["driver"], found["cuda"]) == ("580.159.04", "13.0")
    gpu = found["gpus"][0]
    assert (gpu["index"], gpu["bus_id"], gpu["name"], gpu["persistence"]) == \
        (0, "00000000:00:06.0", "NVIDIA H200", True)
    # A single H200 on PCIe has no fabric: the driver says N/A, read as None.
    assert (gpu["fabric_state"], gpu["fabric_status"]) == (None, None)


def test_the_snapshot_recorded_on_the_h200_carries_the_driver_facts():
    gpus = json.loads((RUN / "snapshot.json").read_text())["gpus"]
    assert gpus["driver"]["driver"] == "580.159.04" and gpus["driver"]["cuda"] == "13.0"
    assert gpus["nvswitches"] == [] and gpus["fabric_manager"] is None
    facts = parse_snapshot(gpus).driver
    assert (facts.version, facts.cuda, facts.persistence_off, facts.nvswitches) == ("580.159.04", "13.0", (), ())


def test_the_recorded_h200_is_not_refused_for_its_driver():
    assert refusals(section("recorded")) == {}


def test_an_r570_driver_is_refused_for_the_cu130_image_naming_the_minimum():
    found = refusals(section("h200-r570-handwritten"))
    assert list(found) == ["sglang_image_cuda_flavor"]
    what, fix = found["sglang_image_cuda_flavor"]
    assert "the driver is 570.172.08 (it supports CUDA 12.8)" in what
    assert "built for cu130 (CUDA 13.0), which needs driver 580.65.06 or newer (R580)" in what
    assert "install an R580 driver" in fix


def test_an_r570_driver_runs_an_image_built_for_cuda_12():
    assert refusals(section("h200-r570-handwritten"), sglang_image_cuda_flavor="cu128") == {}


@pytest.mark.parametrize("flavor, driver, least", [
    ("cu130", "570.172.08", (580, 65, 6)), ("cu130", "580.65.06", None), ("cu130", "590.1.2", None),
    ("cu129", "525.60.13", None), ("cu126", "520.61.05", (525, 60, 13)), ("cu130", None, None),
    ("cu999", "470.1.1", None),
])
def test_the_minimum_driver_follows_cudas_minor_version_compatibility(flavor, driver, least):
    assert min_driver(flavor, driver) == least


NVSWITCHES = ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
RUNNING = {"nvidia-fabricmanager.service": {"active": "active"}}


def test_an_nvswitch_board_without_fabric_manager_is_refused_with_the_fix():
    found = refusals(section("recorded", nvswitches=NVSWITCHES))
    what, fix = found["sglang_install_fabric_manager"]
    assert "4 NVSwitch device(s) found and Fabric Manager is not installed" in what
    assert "error 802" in what
    assert "apt-get install 'nvidia-fabricmanager-580=580.159.04-*'" in fix
    assert "sglang_install_fabric_manager = True" in fix


def test_a_fabric_manager_of_another_version_is_refused():
    found = refusals(section("recorded", nvswitches=NVSWITCHES, fabric_manager="580.95.05", units=RUNNING))
    assert "Fabric Manager 580.95.05 is installed (running), while driver 580.159.04 needs Fabric Manager " \
           "580.159.04" in found["sglang_install_fabric_manager"][0]


def test_a_running_fabric_manager_of_the_drivers_version_passes():
    assert refusals(section("recorded", nvswitches=NVSWITCHES, fabric_manager="580.159.04", units=RUNNING)) == {}


def test_the_key_lets_the_deploy_install_fabric_manager_instead():
    assert refusals(section("recorded", nvswitches=NVSWITCHES), sglang_install_fabric_manager=True) == {}


def test_a_board_without_nvswitch_needs_no_fabric_manager():
    assert "sglang_install_fabric_manager" not in refusals(section("recorded"))


def test_persistence_mode_off_is_refused_unless_the_deploy_may_enable_it():
    found = refusals(section("hgx-h200-fabric-pending-handwritten"))
    assert list(found) == ["sglang_enable_persistence"]
    assert "persistence mode is off on GPU(s) 0" in found["sglang_enable_persistence"][0]
    assert refusals(section("hgx-h200-fabric-pending-handwritten"), sglang_enable_persistence=True) == {}


def test_the_fabric_state_of_each_gpu_is_read():
    facts = parse_snapshot(section("hgx-h200-fabric-pending-handwritten")).driver
    assert facts.fabric == ((0, "In Progress", None),)


def test_a_document_that_is_not_nvidia_smis_is_refused_by_the_reader():
    with pytest.raises(ValueError, match="no readable XML"):
        nvsmi.parse("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")


def test_nvswitch_devices_are_listed_from_the_drivers_directory(tmp_path):
    for name in ("0000:07:00.0", "0000:05:00.0"):
        (tmp_path / name).mkdir()
    assert nvsmi.nvswitches(str(tmp_path)) == ["0000:05:00.0", "0000:07:00.0"]
    assert nvsmi.nvswitches(str(tmp_path / "absent")) == []


def test_healthy_gpus_have_no_faults():
    assert gpu_faults(section("recorded")) == [] and gpu_faults(None) == []


def test_a_gpu_not_registered_with_the_fabric_is_a_fault_on_an_nvswitch_board():
    pending = section("hgx-h200-fabric-pending-handwritten", nvswitches=NVSWITCHES)
    assert gpu_faults(pending) == ["GPU 0 (00000000:00:06.0): not registered with the NVSwitch fabric (state In "
                                   "Progress, status N/A): Fabric Manager has not finished, CUDA fails with error 802"]


def test_a_failing_gpu_is_refused_before_the_stack_starts_naming_it():
    found = refusals(section("h200-failing-handwritten"))
    assert list(found) == ["nvidia-smi"]
    what, fix = found["nvidia-smi"]
    assert what.startswith("GPU 0 (00000000:00:06.0): 2 uncorrectable ECC error(s) since the driver loaded;")
    assert "reset the GPU" in fix


def test_a_fabric_not_yet_registered_is_refused_once_fabric_manager_runs():
    found = refusals(section("hgx-h200-fabric-pending-handwritten", nvswitches=NVSWITCHES,
                             fabric_manager="580.159.04", units=RUNNING), sglang_enable_persistence=True)
    assert list(found) == ["nvidia-smi"] and "not registered with the NVSwitch fabric" in found["nvidia-smi"][0]
