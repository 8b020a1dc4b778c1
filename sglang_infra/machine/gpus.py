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
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from ..hostside.gpu import nvsmi

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_MARLIN = re.compile(r"awq|gptq|marlin", re.I)
# The value a key takes to be derived from the host's GPUs here (the schema accepts it for those keys).
DERIVE = "derive"


def served_repo_id(data: Mapping[str, Any]) -> str:
    """The served model's repo id (a bare repo id is accepted where no registry is involved, e.g. GPU rules)."""
    key = data["sglang_model"]
    registry = data.get("sglang_models") or {}
    return registry[key]["repo_id"] if key in registry else key


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    compute_capability: tuple[int, int]
    memory_mib: int

    @property
    def sm(self) -> str:
        return f"SM{self.compute_capability[0]}{self.compute_capability[1]}"


@dataclass(frozen=True)
class DriverFacts:
    """What `nvidia-smi -q -x`, /proc/driver/nvidia-nvswitch and the host's units say about the driver layer."""
    version: str | None = None           # the driver, e.g. '580.159.04'
    cuda: str | None = None              # the newest CUDA it supports, e.g. '13.0'
    persistence_off: tuple[int, ...] = ()     # GPUs whose persistence mode is off
    # (index, state, status) of each GPU's fabric registration where the driver reports one (NVSwitch boards)
    fabric: tuple[tuple[int, str, str | None], ...] = ()
    nvswitches: tuple[str, ...] = ()     # NVSwitch devices the driver found
    fabric_manager: str | None = None    # nv-fabricmanager's own version, None when not installed
    fabric_manager_active: bool = False
    persistenced_active: bool = False
    names: tuple[str, ...] = ()          # the GPUs' product names (NVLSM is needed by some boards)
    faults: tuple[str, ...] = ()         # each unhealthy GPU with its reasons (gpu_faults)
    lost: tuple[str, ...] = ()           # each GPU of the last good gate nvidia-smi no longer lists (lost_gpus)
    error: str | None = None             # why nvidia-smi -q -x could not be read


@dataclass
class GpuInventory:
    gpus: list[Gpu] = field(default_factory=list)
    # (i, j) with i < j -> topology code from `nvidia-smi topo -m` (NV18, NODE, PHB, ...)
    links: dict[tuple[int, int], str] = field(default_factory=dict)
    nvidia_runtime: bool = False
    driver: DriverFacts = field(default_factory=DriverFacts)

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


def parse_driver(section: Mapping[str, Any]) -> DriverFacts:
    """The driver's part of the snapshot's gpus section (hostside/gpu/nvsmi.py's reading, the units' states)."""
    found = section.get("driver") or {}
    units = section.get("units") or {}
    gpus = found.get("gpus") or []
    return DriverFacts(
        version=found.get("driver"), cuda=found.get("cuda"),
        persistence_off=tuple(g["index"] for g in gpus if g.get("persistence") is False),
        fabric=tuple((g["index"], g["fabric_state"], g.get("fabric_status")) for g in gpus if g.get("fabric_state")),
        nvswitches=tuple(section.get("nvswitches") or ()), fabric_manager=section.get("fabric_manager"),
        fabric_manager_active=(units.get(FABRIC_MANAGER_UNIT) or {}).get("active") == "active",
        persistenced_active=(units.get(PERSISTENCED_UNIT) or {}).get("active") == "active",
        names=tuple(g.get("name") or "" for g in gpus), faults=tuple(_health_faults(section)),
        lost=tuple(lost_gpus(section)), error=found.get("error"))


def parse_snapshot(section: Mapping[str, Any] | None) -> GpuInventory:
    """The snapshot's gpus section (nvidia-smi's own output), None on a host without nvidia-smi."""
    if not section:
        return GpuInventory()
    return GpuInventory(gpus=parse_query(section.get("query", [])), links=parse_topo(section.get("topo", [])),
                        nvidia_runtime="nvidia" in section.get("runtimes", []), driver=parse_driver(section))


# The oldest driver that runs each CUDA major release, by CUDA's minor-version compatibility: NVIDIA's CUDA Toolkit
# release notes ("CUDA Driver", the minor-version compatibility table) and the CUDA Compatibility guide give
# CUDA 11.x >= 450.80.02, 12.x >= 525.60.13, 13.x >= R580 (580.65.06 is the driver CUDA 13.0 shipped with). Within a
# major release, a toolkit newer than the driver still runs its compiled kernels (sm_90a cubins from nvcc 13.3 ran
# under 580.159.04, CUDA 13.0, on the lent H200) but not PTX newer than the driver: the image's kernels are cubins.
CUDA_MIN_DRIVER = {11: (450, 80, 2), 12: (525, 60, 13), 13: (580, 65, 6)}
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager.service"
PERSISTENCED_UNIT = "nvidia-persistenced.service"
# Boards whose NVSwitch fabric needs NVIDIA's NVLink subnet manager (NVLSM) beside Fabric Manager: the NVLink 5
# systems (HGX B200/B300, GB200/GB300), by NVIDIA's Fabric Manager user guide.
_NVLSM_BOARDS = re.compile(r"\bG?B[23]00\b", re.I)


def driver_tuple(version: str) -> tuple[int, ...] | None:
    """'580.159.04' -> (580, 159, 4); None for a spelling that is not a driver version."""
    parts = version.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


def flavor_cuda(flavor: str) -> tuple[int, int] | None:
    """'cu130' -> (13, 0); 'cu129' -> (12, 9); None for another spelling."""
    match = re.fullmatch(r"cu(\d+)(\d)", flavor)
    return (int(match.group(1)), int(match.group(2))) if match else None


def min_driver(flavor: str, driver: str | None) -> tuple[int, ...] | None:
    """The oldest driver that runs an image built for ``flavor`` when ``driver`` is older, else None (also when
    either is unknown: the flavour's spelling is schema.py's to refuse)."""
    cuda = flavor_cuda(flavor)
    found = driver_tuple(driver) if driver else None
    least = CUDA_MIN_DRIVER.get(cuda[0]) if cuda else None
    return least if least is not None and found is not None and found < least else None


def _version(parts: tuple[int, ...]) -> str:
    return f"{parts[0]}." + ".".join(f"{p:02d}" for p in parts[1:])


def needs_nvlsm(facts: DriverFacts) -> bool:
    return bool(facts.nvswitches) and any(_NVLSM_BOARDS.search(name) for name in facts.names)


def fabric_manager_packages(facts: DriverFacts) -> list[str]:
    """Fabric Manager pinned to the driver's version (apt's 'name=version-*': any packaging revision of that
    version), and nvlsm where the board needs it. Up to R580 the package carries the branch in its name, in
    Ubuntu's archive and NVIDIA's repository alike; from R590 NVIDIA's is plain nvidia-fabricmanager."""
    version = facts.version or ""
    branch = version.split(".")[0]
    name = "nvidia-fabricmanager" if branch.isdigit() and int(branch) >= 590 else f"nvidia-fabricmanager-{branch}"
    return [f"{name}={version}-*"] + (["nvlsm"] if needs_nvlsm(facts) else [])


# nvidia-persistenced where systemd does not know its unit: Ubuntu's archive ships it in the driver branch's
# compute utilities, NVIDIA's repository (Debian's source for a data-centre driver) as its own package.
PERSISTENCED_PACKAGES = {"ubuntu": "nvidia-compute-utils-{branch}", "debian": "nvidia-persistenced"}


def persistenced_packages(facts: DriverFacts, os_id: str | None) -> list[str]:
    spelling = PERSISTENCED_PACKAGES.get(os_id or "")
    return [spelling.format(branch=(facts.version or "").split(".")[0])] if spelling else []


# The pinned driver's package, by the OS family's source (docs/gpus.md): (open kernel modules, proprietary ones).
# Ubuntu: the archive's own signed server builds; Debian: NVIDIA's CUDA repository, its metapackages.
DRIVER_PACKAGES = {"ubuntu": ("nvidia-driver-{branch}-server-open", "nvidia-driver-{branch}-server"),
                   "debian": ("nvidia-open", "cuda-drivers")}
# The packages apt's preferences hold at the pinned version (priority 1001: kept, downgraded to, never upgraded
# past); a package of these names at another version (the container toolkit's) is left to its own priority.
DRIVER_HELD = "nvidia-* libnvidia-* libcuda* libnvcuvid* libnvoptix* xserver-xorg-video-nvidia-* cuda-drivers*"
DRIVER_PREFERENCES = "/etc/apt/preferences.d/sglang-nvidia-driver"
# NVIDIA's CUDA repository signing key per Debian release, its file there and its full fingerprint: a downloaded key
# that is not this one is removed before any source uses it. The debian13 repository is signed by a newer key.
CUDA_REPO_KEYS = {"12": ("3bf863cc.pub", "EB693B3035CD5710E231E123A4B469963BF863CC"),
                  "13": ("8793F200.pub", "02182E60104FCDC26EAE1B8597A5D4CB8793F200")}
# NVIDIA's CUDA repository names its architectures its own way (Debian's amd64 is x86_64, arm64 servers are sbsa).
CUDA_REPO_ARCH = {"amd64": "x86_64", "arm64": "sbsa"}
# Seconds a rebooting server may take to answer again: HGX boards spend minutes in their firmware.
REBOOT_TIMEOUT = 1200
# NVIDIA's driver packages build their kernel module against a kernel's headers (DKMS), which apt installs only as
# a recommendation, never with --no-install-recommends: this package, for the running kernel and the one that boots
# next, goes in before any driver package (Debian and Ubuntu spell it alike).
HEADERS_PACKAGE = "linux-headers-{kernel}"
# The kernel the next boot loads, as a shell expression: the newest /boot/vmlinuz-* (Debian's and Ubuntu's GRUB
# boot the newest by default), else the running one (a host that boots no kernel of its own /boot).
NEXT_KERNEL = "$(ls -1 /boot/vmlinuz-* 2>/dev/null | sed 's|^/boot/vmlinuz-||' | sort -V | tail -n 1)"


def driver_packages(version: str, os_family: str | None, open_modules: bool) -> list[str]:
    """The pinned driver's package as apt installs it ('name=version-*': any packaging revision of that version)."""
    spellings = DRIVER_PACKAGES.get(os_family or "")
    if not spellings:
        return []
    name = spellings[0 if open_modules else 1].format(branch=version.split(".")[0])
    return [f"{name}={version}-*"]


@dataclass(frozen=True)
class CudaRepository:
    directory: str     # '<url>/debian12/x86_64': the apt source is '<directory>/ /'
    key_url: str
    fingerprint: str


def cuda_repository(url: str, os_id: str | None, os_version: str | None, arch: str | None,
                    fingerprint: str | None = None) -> CudaRepository | None:
    """NVIDIA's CUDA repository for a Debian host and its pinned key (``fingerprint``, a mirror's; None: NVIDIA's
    for the release, CUDA_REPO_KEYS), None where it is not the driver's source."""
    release = (os_version or "").split(".")[0]
    if os_id != "debian" or release not in CUDA_REPO_KEYS or (arch or "") not in CUDA_REPO_ARCH:
        return None
    directory = f"{url.rstrip('/')}/debian{release}/{CUDA_REPO_ARCH[arch or '']}"
    key, nvidia_s = CUDA_REPO_KEYS[release]
    return CudaRepository(directory, f"{directory}/{key}", fingerprint or nvidia_s)


def pinned_driver_problems(data: Mapping[str, Any], inventory: GpuInventory):
    """(key, problem, fix) for a pinned driver (sglang_nvidia_driver_version) that could not serve this host."""
    pinned = data["sglang_nvidia_driver_version"]
    if not pinned:
        return []
    problems = []
    flavor = data["sglang_image_cuda_flavor"]
    least, cuda = min_driver(flavor, pinned), flavor_cuda(flavor)
    if least and cuda:
        problems.append(("sglang_nvidia_driver_version",
                         f"{pinned} is older than the image needs: it is built for {flavor} (CUDA "
                         f"{cuda[0]}.{cuda[1]}), which needs driver {_version(least)} or newer (R{least[0]})",
                         f"pin an R{least[0]} driver ({_version(least)} or newer), or None to leave the driver alone"))
    low = inventory.min_compute_capability()
    if data["sglang_nvidia_driver_open"] and low is not None and low < (7, 5):
        problems.append(("sglang_nvidia_driver_open",
                         f"the open kernel modules run only on Turing (SM75) and newer, and this host has an "
                         f"SM{low[0]}{low[1]} GPU", "set sglang_nvidia_driver_open = False for this host or group"))
    return problems


def fabric_manager_ready(facts: DriverFacts) -> bool:
    """On an NVSwitch board: Fabric Manager runs and is the driver's exact version (it refuses any other)."""
    return facts.fabric_manager_active and facts.fabric_manager is not None and \
        facts.fabric_manager == facts.version


def driver_problems(data: Mapping[str, Any], inventory: GpuInventory):
    """(key, problem, fix) for a driver layer that cannot serve the image: its CUDA, the NVSwitch fabric,
    persistence mode."""
    facts = inventory.driver
    problems: list[tuple[str, str, str]] = pinned_driver_problems(data, inventory)
    if not inventory.count or facts.version is None:
        return problems
    flavor = data["sglang_image_cuda_flavor"]
    # a pinned driver replaces the running one, so only the pinned one must run the image (checked above)
    least = None if data["sglang_nvidia_driver_version"] else min_driver(flavor, facts.version)
    if least:
        cuda = flavor_cuda(flavor)
        assert cuda is not None   # min_driver found the flavour's CUDA
        problems.append(("sglang_image_cuda_flavor",
                         f"the driver is {facts.version} (it supports CUDA {facts.cuda or 'unknown'}), but the image "
                         f"is built for {flavor} (CUDA {cuda[0]}.{cuda[1]}), which needs driver {_version(least)} or "
                         f"newer (R{least[0]}): the container would die with 'CUDA driver version is insufficient'",
                         f"install an R{least[0]} driver ({_version(least)} or newer; docs/gpus.md says from where), "
                         "or pin an image built for a CUDA this driver runs (sglang_image and "
                         "sglang_image_cuda_flavor)"))
    if data["sglang_nvidia_driver_version"]:   # Fabric Manager must match the driver the deploy installs
        facts = replace(facts, version=data["sglang_nvidia_driver_version"])
    if facts.nvswitches and not fabric_manager_ready(facts) and not data["sglang_install_fabric_manager"]:
        found = (f"Fabric Manager {facts.fabric_manager} is installed "
                 f"({'running' if facts.fabric_manager_active else 'not running'})" if facts.fabric_manager
                 else "Fabric Manager is not installed")
        pinned = " and ".join(fabric_manager_packages(facts))
        problems.append(("sglang_install_fabric_manager",
                         f"{len(facts.nvswitches)} NVSwitch device(s) found and {found}, while driver "
                         f"{facts.version} needs Fabric Manager {facts.version} running: until it runs, CUDA fails "
                         "with error 802 (system not yet initialized) though nvidia-smi lists every GPU",
                         f"apt-get install '{pinned}' from the driver's own source and systemctl enable --now "
                         f"{FABRIC_MANAGER_UNIT}, or set "
                         "sglang_install_fabric_manager = True to let the deploy do it"))
    for fault in facts.faults:
        problems.append(("nvidia-smi", f"{fault}: a server started on it cannot be trusted",
                         "drain the host and reset the GPU (nvidia-smi -r) or reboot it, or take the GPU out "
                         "(sglang_gpus) and deploy again"))
    if facts.persistence_off and not data["sglang_enable_persistence"]:
        shown = ", ".join(str(i) for i in facts.persistence_off)
        problems.append(("sglang_enable_persistence",
                         f"persistence mode is off on GPU(s) {shown}: the driver unloads between processes, so each "
                         "container start pays its initialisation and the GPUs' settings are not kept",
                         f"systemctl enable --now {PERSISTENCED_UNIT} (it comes with the driver), or set "
                         "sglang_enable_persistence = True to let the deploy do it"))
    return problems


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
    if data["sglang_require_gpu"] and count == 0 and not data["sglang_nvidia_driver_version"]:
        problems.append(("sglang_require_gpu", "no GPU found by nvidia-smi, and the model needs one",
                         "run this group on GPU servers (with the NVIDIA driver installed, or pin "
                         "sglang_nvidia_driver_version to let the deploy install it), or set "
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
    lost = inventory.driver.lost
    if lost and (gpus == "all" or gpus > count):
        # A plan derived from the GPUs left (--tp-size 7 of 8) would restart the server on fewer GPUs than its gate
        # passed with; most models do not split 7 ways, and the rollback to 8 could not start either (issue 53).
        problems.append(("sglang_gpus", f"{'; '.join(lost)}. The server is left as it is: a plan from the {count} "
                         "GPU(s) left would restart it on fewer than its last good config passed its gate on",
                         "replace the GPU, or bring it back (reset it: nvidia-smi -r, or reboot the host), and "
                         f"deploy again; or serve on the {count} left on purpose: set sglang_gpus = {count} (with an "
                         "sglang_tp_size that divides it) and deploy again"))
    if (derived["sglang_dtype"].value == "float16") != (derived["sglang_mamba_conv_dtype"].value == "float16"):
        problems.append(("sglang_mamba_conv_dtype",
                         "--dtype float16 and SGLANG_MAMBA_CONV_DTYPE=float16 must go together (one alone crashes "
                         "with 'Index put requires the source and destination dtypes match')",
                         "set both to 'float16', both to 'derive', or neither"))
    problems += driver_problems(data, inventory)
    if count and not inventory.nvidia_runtime and not data["sglang_install_nvidia_toolkit"]:
        problems.append(("sglang_install_nvidia_toolkit",
                         "Docker on this host has no NVIDIA runtime, so containers cannot see the GPUs",
                         "install the NVIDIA Container Toolkit (nvidia-ctk runtime configure --runtime=docker), "
                         "or set sglang_install_nvidia_toolkit = True to let the deploy install it"))
    return problems


def lost_gpus(section: Mapping[str, Any] | None) -> list[str]:
    """'GPU <i> (<bus id>, <uuid>): missing ...' for each GPU the last good config passed its gate on (the gate's
    record, nvsmi.GATED_FILE) that nvidia-smi no longer lists: fallen off the bus (XID 79) or taken out. [] where
    no gate recorded GPUs, and where nvidia-smi -q -x could not be read (its own error says so)."""
    section = section or {}
    gated = section.get("gated")
    listed = (section.get("driver") or {}).get("gpus")
    if not gated or listed is None:
        return []
    return [f"GPU {g.get('index')} ({', '.join(str(g[k]) for k in ('bus_id', 'uuid') if g.get(k))}): missing: "
            f"nvidia-smi lists {len(listed)} GPU(s), the last good config passed its gate on {len(gated)} "
            "(fallen off the bus? look for XID 79 in the kernel log: dmesg | grep -i xid)"
            for g in nvsmi.missing(gated, listed)]


def gpu_faults(section: Mapping[str, Any] | None) -> list[str]:
    """Each GPU that should not be trusted with a server: every one missing since the last good gate
    (lost_gpus), then every unhealthy one (_health_faults)."""
    return lost_gpus(section) + _health_faults(section)


def _health_faults(section: Mapping[str, Any] | None) -> list[str]:
    """'GPU <i> (<bus id>): <reason>; ...' for each GPU whose health says it should not be trusted with a server,
    from the snapshot's gpus section (hostside/gpu/nvsmi.py's reading):
    uncorrectable ECC errors since the driver loaded,
    a row remap or page retirement pending or failed, a temperature at or over the card's slowdown threshold, a
    fabric not registered on an NVSwitch board. [] for healthy GPUs, and for a host without nvidia-smi."""
    found = (section or {}).get("driver") or {}
    faults = []
    for gpu in found.get("gpus") or []:
        reasons = []
        uncorrected = (gpu.get("ecc_volatile") or {}).get("uncorrected") or 0
        if uncorrected:
            reasons.append(f"{uncorrected} uncorrectable ECC error(s) since the driver loaded")
        if gpu.get("remap_failure"):
            reasons.append("a row remap failed: the card needs service")
        elif gpu.get("remap_pending") or gpu.get("retirement_pending"):
            reasons.append("a memory row remap (or page retirement) waits for a GPU reset")
        temperature, slowdown = gpu.get("temperature_c"), gpu.get("slowdown_c")
        if temperature is not None and slowdown is not None and temperature >= slowdown:
            reasons.append(f"{temperature} C, at or over its slowdown temperature ({slowdown} C)")
        state, status = gpu.get("fabric_state"), gpu.get("fabric_status")
        registered = state == "Completed" and status in (None, "Success")
        if section and section.get("nvswitches") and state and not registered:
            reasons.append(f"not registered with the NVSwitch fabric (state {state}, status {status or 'N/A'}): "
                           "Fabric Manager has not finished, CUDA fails with error 802")
        if reasons:
            faults.append(f"GPU {gpu.get('index')} ({gpu.get('bus_id')}): {'; '.join(reasons)}")
    return faults
