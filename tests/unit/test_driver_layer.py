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


# ---------------------------------------------------------------- a GPU lost since the last good gate (issue 53)
STANDIN = Path(__file__).resolve().parents[1] / "support" / "gpustandin" / "nvidia-smi"


def eight_gpus(tmp_path, present: str, gated: str | None = "0 1 2 3 4 5 6 7") -> dict:
    """The snapshot's gpus section of a host whose stand-in nvidia-smi lists the GPUs ``present`` names, its last
    good gate having passed on those ``gated`` names (None: no gate recorded GPUs)."""
    import subprocess

    share = tmp_path / "standin-nvidia-smi"
    share.mkdir(exist_ok=True)
    (share / "q.xml").write_text(document("recorded"))

    def read(indexes, *args):
        (share / "present").write_text(indexes + "\n")
        return subprocess.run([str(STANDIN), *args], capture_output=True, text=True, check=True, timeout=30,
                              env={"STANDIN_NVIDIA_SMI_DIR": str(share), "PATH": "/usr/bin:/bin"}).stdout

    record = None if gated is None else json.loads(nvsmi.gated(nvsmi.parse(read(gated, "-q", "-x"))))
    return {"query": read(present, "--query-gpu=index,name,compute_cap,memory.total",
                          "--format=csv,noheader,nounits").splitlines(),
            "topo": read(present, "topo", "-m").splitlines(), "runtimes": ["nvidia"],
            "driver": nvsmi.parse(read(present, "-q", "-x")), "nvswitches": [], "fabric_manager": None,
            "units": {}, "gated": record}


GPU_3 = "GPU 3 (00000000:5D:00.0, GPU-5a1e0000-0000-4000-8000-000000000003): missing: nvidia-smi lists 7 GPU(s), " \
    "the last good config passed its gate on 8"


def test_a_gpu_gone_since_the_last_good_gate_is_a_fault_named_by_index_and_bus_id(tmp_path):
    found = gpu_faults(eight_gpus(tmp_path, "0 1 2 4 5 6 7"))
    assert len(found) == 1 and found[0].startswith(GPU_3), found


@pytest.mark.parametrize("present, gated", [("0 1 2 3 4 5 6 7", "0 1 2 3 4 5 6 7"), ("0 1 2 4 5 6 7", None),
                                            ("0 1 2 4 5 6 7", "0 1 2 4 5 6 7"), ("0 1 2 3 4 5 6 7", "0 1 2 4 5 6 7")],
                         ids=["all-there", "never-gated", "gated-on-seven", "one-more-than-gated"])
def test_every_gpu_of_the_last_good_gate_still_there_is_no_fault(tmp_path, present, gated):
    assert gpu_faults(eight_gpus(tmp_path, present, gated)) == []


def test_a_lost_gpu_is_refused_before_a_plan_for_fewer_naming_it_and_the_fix(tmp_path):
    """Today's main re-planned --tp-size 8 to 7 and restarted the server on seven GPUs."""
    section = eight_gpus(tmp_path, "0 1 2 4 5 6 7")
    found = refusals(section)
    what, fix = found["sglang_gpus"]
    assert what.startswith(GPU_3) and "The server is left as it is" in what
    assert "replace the GPU" in fix and "set sglang_gpus = 7" in fix
    assert "nvidia-smi" not in found   # named once, with its own fix, not again as an unhealthy GPU


def test_a_lost_gpu_is_refused_when_sglang_gpus_still_reserves_it(tmp_path):
    assert "missing" in refusals(eight_gpus(tmp_path, "0 1 2 4 5 6 7"), sglang_gpus=8, sglang_tp_size=8)[
        "sglang_gpus"][0]


@pytest.mark.parametrize("gpus", [7, 4])
def test_serving_on_the_gpus_left_is_allowed_when_sglang_gpus_says_so(tmp_path, gpus):
    assert refusals(eight_gpus(tmp_path, "0 1 2 4 5 6 7"), sglang_gpus=gpus, sglang_tp_size=gpus) == {}


def test_the_gates_record_is_read_bounded_and_never_through_a_link(tmp_path):
    (tmp_path / "elsewhere").write_text('[{"index": 0, "bus_id": "x", "uuid": "y"}]')
    (tmp_path / nvsmi.GATED_FILE).symlink_to(tmp_path / "elsewhere")
    assert nvsmi.read_gated(str(tmp_path)) is None
    (tmp_path / nvsmi.GATED_FILE).unlink()
    (tmp_path / nvsmi.GATED_FILE).write_text("[" + "{}, " * 30000 + "{}]")
    assert nvsmi.read_gated(str(tmp_path)) is None
    (tmp_path / nvsmi.GATED_FILE).write_text('[{"index": true, "bus_id": ["x"], "uuid": "GPU-1"}]')
    assert nvsmi.read_gated(str(tmp_path)) == [{"index": None, "bus_id": None, "uuid": "GPU-1"}]
