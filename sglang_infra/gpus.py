"""The host's GPUs as nvidia-smi reports them, and the launch flags they imply.

The rules come from the runbook and the operators' notes:
- --tp-size splits the model across every GPU found;
- the AWQ/GPTQ Marlin kernel needs FP16 before SM90, and then the Mamba conv
  state must be FP16 too (one without the other crashes);
- custom all-reduce fails between GPUs that have no NVLink (GeForce cards
  have no peer-to-peer), so it is disabled unless every pair is NVLinked.
Each derived value carries a sentence saying where it came from, rendered
next to the flag in compose.yaml.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from .models import served_repo_id
from .schema import DERIVE

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_MARLIN = re.compile(r"awq|gptq|marlin", re.I)


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    compute_capability: tuple[int, int]
    memory_mib: int

    @property
    def sm(self) -> str:
        return f"SM{self.compute_capability[0]}{self.compute_capability[1]}"


@dataclass
class GpuInventory:
    gpus: list[Gpu] = field(default_factory=list)
    # (i, j) with i < j -> topology code from `nvidia-smi topo -m` (NV18, NODE, PHB, ...)
    links: dict[tuple[int, int], str] = field(default_factory=dict)
    nvidia_runtime: bool = False

    @property
    def count(self) -> int:
        return len(self.gpus)

    def all_pairs_nvlinked(self) -> bool:
        return self.count > 1 and all(code.startswith("NV") for code in self.links.values()) and \
            len(self.links) == self.count * (self.count - 1) // 2

    def non_nvlink_codes(self) -> list[str]:
        return sorted({code for code in self.links.values() if not code.startswith("NV")})

    def min_compute_capability(self) -> tuple[int, int] | None:
        return min((g.compute_capability for g in self.gpus), default=None)


def parse_query(lines: list[str]) -> list[Gpu]:
    """`nvidia-smi --query-gpu=index,name,compute_cap,memory.total --format=csv,noheader,nounits`."""
    gpus = []
    for line in lines:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4 or not parts[0].isdigit():
            continue
        major, _, minor = parts[2].partition(".")
        gpus.append(Gpu(int(parts[0]), parts[1], (int(major), int(minor or 0)), int(float(parts[3]))))
    return gpus


def parse_topo(lines: list[str]) -> dict[tuple[int, int], str]:
    """The GPU-to-GPU block of `nvidia-smi topo -m` (ANSI escapes and NIC columns ignored)."""
    header: list[str] | None = None
    links: dict[tuple[int, int], str] = {}
    for raw in lines:
        line = _ANSI.sub("", raw)
        cells = [c.strip() for c in line.split("\t")]
        if header is None:
            if any(re.fullmatch(r"GPU\d+", c) for c in cells):
                header = cells
            continue
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            if line.strip().startswith("Legend"):
                break
            continue
        row = int(cells[0][3:])
        for column, cell in zip(header[1:], cells[1:]):
            if re.fullmatch(r"GPU\d+", column):
                col = int(column[3:])
                if row < col:
                    links[(row, col)] = cell
    return links


def parse_snapshot(section: Mapping[str, Any] | None) -> GpuInventory:
    """The snapshot's gpus section (nvidia-smi's own output), None on a host without nvidia-smi."""
    if not section:
        return GpuInventory()
    return GpuInventory(gpus=parse_query(section.get("query", [])), links=parse_topo(section.get("topo", [])),
                        nvidia_runtime="nvidia" in section.get("runtimes", []))


@dataclass(frozen=True)
class Derived:
    value: Any
    source: str
    each: Derived | None = None   # a multi-node group's member: this host's own count, of which value is the group's


def derive_flags(data: Mapping[str, Any], inventory: GpuInventory) -> dict[str, Derived]:
    """The final value of each hardware-dependent key, and where it came from."""
    out: dict[str, Derived] = {}
    count = inventory.count
    found = f"{count} GPU{'s' if count != 1 else ''} found by nvidia-smi"

    tp = data["sglang_tp_size"]
    out["sglang_tp_size"] = Derived(max(count, 1), f"derived: {found}") if tp == DERIVE else \
        Derived(tp, "set in data")

    dtype, conv = data["sglang_dtype"], data["sglang_mamba_conv_dtype"]
    low = inventory.min_compute_capability()
    marlin = bool(_MARLIN.search(served_repo_id(data)))
    if dtype == DERIVE:
        if marlin and low is not None and low < (9, 0):
            sm = f"SM{low[0]}{low[1]}"
            out["sglang_dtype"] = Derived("float16", f"derived: Marlin-quantized model on {sm}, before SM90")
        elif marlin and low is None:
            out["sglang_dtype"] = Derived(None, "derived: no GPU found, so the model's own dtype")
        else:
            why = "SM90 or newer" if marlin else "not a Marlin-quantized model"
            out["sglang_dtype"] = Derived(None, f"derived: {why}, so the model's own dtype")
    else:
        out["sglang_dtype"] = Derived(dtype, "set in data")
    if conv == DERIVE:
        follows = out["sglang_dtype"].value == "float16"
        out["sglang_mamba_conv_dtype"] = Derived("float16" if follows else None,
                                                 "derived: follows --dtype" if follows else
                                                 "derived: not needed without --dtype float16")
    else:
        out["sglang_mamba_conv_dtype"] = Derived(conv, "set in data")

    car = data["sglang_disable_custom_all_reduce"]
    if car == DERIVE:
        if count > 1 and not inventory.all_pairs_nvlinked():
            codes = "/".join(inventory.non_nvlink_codes()) or "unknown topology"
            out["sglang_disable_custom_all_reduce"] = Derived(True, f"derived: {found}, linked by {codes}, "
                                                                    "not NVLink")
        elif count > 1:
            out["sglang_disable_custom_all_reduce"] = Derived(False, f"derived: {found}, every pair on NVLink")
        else:
            out["sglang_disable_custom_all_reduce"] = Derived(False, f"derived: {found}, no all-reduce")
    else:
        out["sglang_disable_custom_all_reduce"] = Derived(car, "set in data")
    return out


def plan_problems(data: Mapping[str, Any], inventory: GpuInventory, derived: Mapping[str, Derived]):
    """(key, problem, fix) for each plan that cannot work on this hardware."""
    problems = []
    count = inventory.count
    if data["sglang_require_gpu"] and count == 0:
        problems.append(("sglang_require_gpu", "no GPU found by nvidia-smi, and the model needs one",
                         "run this group on GPU servers (with the NVIDIA driver installed), or set "
                         "sglang_require_gpu = False only for a stand-in sandbox"))
    tp = derived["sglang_tp_size"].value
    reserved = data["sglang_gpus"]
    usable = reserved if reserved != "all" else count
    if reserved != "all" and tp > reserved:
        problems.append(("sglang_tp_size", f"{tp} is larger than sglang_gpus={reserved}, so the model cannot be split",
                         f"set sglang_tp_size <= {reserved} or reserve more GPUs"))
    elif usable and usable % tp:
        problems.append(("sglang_tp_size", f"{tp} does not divide the {usable} GPU(s) reserved, so some would idle "
                         "or the split fails", f"use a divisor of {usable}, or 'derive'"))
    elif count and tp > count:
        problems.append(("sglang_tp_size", f"{tp} is more than the {count} GPU(s) nvidia-smi found",
                         f"set sglang_tp_size to at most {count}, or 'derive'"))
    gpus = data["sglang_gpus"]
    if count and gpus != "all" and gpus > count:
        problems.append(("sglang_gpus", f"{gpus} reserved but only {count} GPU(s) found",
                         f"reserve at most {count}, or 'all'"))
    if (derived["sglang_dtype"].value == "float16") != (derived["sglang_mamba_conv_dtype"].value == "float16"):
        problems.append(("sglang_mamba_conv_dtype",
                         "--dtype float16 and SGLANG_MAMBA_CONV_DTYPE=float16 must go together (one alone crashes "
                         "with 'Index put requires the source and destination dtypes match')",
                         "set both to 'float16', both to 'derive', or neither"))
    if count and not inventory.nvidia_runtime and not data["sglang_install_nvidia_toolkit"]:
        problems.append(("sglang_install_nvidia_toolkit",
                         "Docker on this host has no NVIDIA runtime, so containers cannot see the GPUs",
                         "install the NVIDIA Container Toolkit (nvidia-ctk runtime configure --runtime=docker), "
                         "or set sglang_install_nvidia_toolkit = True to let the deploy install it"))
    return problems
