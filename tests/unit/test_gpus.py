from __future__ import annotations

from pathlib import Path

import pytest
from conftest import pinned_defaults

from sglang_infra.machine.gpus import GpuInventory, derive_flags, parse_query, parse_snapshot, parse_topo, plan_problems

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "nvidia-smi"
DEFAULTS = pinned_defaults()
AWQ = "QuantTrio/Qwen3.6-35B-A3B-AWQ"


def inventory(case: str, runtime: bool = True) -> GpuInventory:
    query = (FIXTURES / f"{case}.query.csv").read_text().splitlines()
    topo = (FIXTURES / f"{case}.topo.txt").read_text().splitlines()
    runtimes = ["nvidia", "runc"] if runtime else ["runc"]
    return parse_snapshot({"query": query, "topo": topo, "runtimes": runtimes})


def test_recorded_h200():
    inv = inventory("h200-1gpu")
    assert [(g.index, g.name, g.compute_capability, g.memory_mib) for g in inv.gpus] == \
        [(0, "NVIDIA H200", (9, 0), 143771)]
    assert inv.links == {}
    assert inv.nvidia_runtime


def test_two_4090s_on_separate_host_bridges():
    inv = inventory("rtx4090-2gpu-node")
    assert inv.count == 2 and inv.gpus[0].compute_capability == (8, 9)
    assert inv.links == {(0, 1): "NODE"}
    assert not inv.all_pairs_nvlinked()


def test_two_3090s():
    inv = inventory("rtx3090-2gpu-phb")
    assert inv.min_compute_capability() == (8, 6)
    assert inv.links == {(0, 1): "PHB"}


def test_eight_nvlinked_h100s():
    inv = inventory("h100-8gpu-nvlink")
    assert inv.count == 8 and len(inv.links) == 28
    assert set(inv.links.values()) == {"NV18"}
    assert inv.all_pairs_nvlinked()


def test_no_gpu_host_reads_nothing():
    inv = parse_snapshot(None)
    assert inv.count == 0 and inv.links == {} and not inv.nvidia_runtime


def test_topo_ignores_nic_columns_and_ansi():
    lines = ["\t\x1b[4mGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m",
             "GPU0\t X \tNV4\tPXB\t0-15\t0\t\tN/A", "GPU1\tNV4\t X \tPXB\t0-15\t0\t\tN/A",
             "NIC0\tPXB\tPXB\t X ", "", "Legend:"]
    assert parse_topo(lines) == {(0, 1): "NV4"}


def test_query_skips_garbage():
    assert parse_query(["No devices were found", ""]) == []


def derived(case, **data):
    inv = inventory(case) if case else GpuInventory()
    return derive_flags({**DEFAULTS, "sglang_model": AWQ, **data}, inv)


@pytest.mark.parametrize("case,tp,dtype,car", [
    ("rtx4090-2gpu-node", 2, "float16", True),   # the runbook's own servers
    ("rtx3090-2gpu-phb", 2, "float16", True),
    ("h100-8gpu-nvlink", 8, None, False),
    ("h200-1gpu", 1, None, False),
    (None, 1, None, False),
])
def test_derived_flags_per_machine(case, tp, dtype, car):
    d = derived(case)
    assert d["sglang_tp_size"].value == tp
    assert d["sglang_dtype"].value == dtype
    assert d["sglang_mamba_conv_dtype"].value == dtype
    assert d["sglang_disable_custom_all_reduce"].value is car


def test_sources_say_where_values_came_from():
    d = derived("rtx4090-2gpu-node")
    assert d["sglang_tp_size"].source == "derived: 2 GPUs found by nvidia-smi"
    assert d["sglang_dtype"].source == "derived: Marlin-quantized model on SM89, before SM90"
    assert d["sglang_disable_custom_all_reduce"].source == \
        "derived: 2 GPUs found by nvidia-smi, linked by NODE, not NVLink"


def test_unquantized_model_keeps_its_dtype_on_ampere():
    assert derived("rtx3090-2gpu-phb", sglang_model="Qwen/Qwen3-8B")["sglang_dtype"].value is None


def test_data_overrides_every_derived_value():
    d = derived("rtx4090-2gpu-node", sglang_tp_size=1, sglang_dtype="bfloat16", sglang_mamba_conv_dtype=None,
                sglang_disable_custom_all_reduce=False)
    assert {k: (v.value, v.source) for k, v in d.items()} == {
        "sglang_tp_size": (1, "set in data"), "sglang_dtype": ("bfloat16", "set in data"),
        "sglang_mamba_conv_dtype": (None, "set in data"), "sglang_disable_custom_all_reduce": (False, "set in data")}


def problems(case, runtime=True, **data):
    full = {**DEFAULTS, "sglang_model": AWQ, **data}
    inv = inventory(case, runtime) if case else GpuInventory()
    return [key for key, _, _ in plan_problems(full, inv, derive_flags(full, inv))]


def test_workable_plans_pass():
    assert problems("rtx4090-2gpu-node") == []
    assert problems("h100-8gpu-nvlink", sglang_tp_size=4) == []
    assert problems(None, sglang_require_gpu=False) == []


def test_impossible_plans_are_refused():
    assert problems(None) == ["sglang_require_gpu"]
    assert problems("h200-1gpu", sglang_tp_size=2) == ["sglang_tp_size"]
    assert problems("rtx4090-2gpu-node", sglang_gpus=4) == ["sglang_gpus"]
    assert problems("h100-8gpu-nvlink", sglang_dtype=None, sglang_mamba_conv_dtype="float16") == \
        ["sglang_mamba_conv_dtype"]
    # an explicit float16 with a derived conv dtype is complete: the conv dtype follows it
    assert problems("h100-8gpu-nvlink", sglang_dtype="float16") == []


def test_missing_nvidia_runtime_is_installed_by_default_and_refused_when_opted_out():
    assert problems("h200-1gpu", runtime=False) == []
    assert problems("h200-1gpu", runtime=False, sglang_install_nvidia_toolkit=False) == \
        ["sglang_install_nvidia_toolkit"]
