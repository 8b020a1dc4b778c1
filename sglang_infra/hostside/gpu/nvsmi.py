"""What `nvidia-smi -q -x` says about the driver and each GPU, as a small dict (standard library only).

The XML is nvidia-smi's documented machine-readable form (its DTD is named in the document: nvsmi_device_v*.dtd);
one document is ~27 kB per GPU, most of it supported clocks, so the host keeps only what the deploy and the GPU
metrics need. Fields a driver does not report ("N/A", or missing in an older schema) come back as None.
Newer drivers name the clock reasons clocks_event_reasons, older ones clocks_throttle_reasons; newer drivers
give the slowdown temperature as a margin to T.Limit, older ones as an absolute threshold: both are read.
"""

import os
import re
import xml.etree.ElementTree as ElementTree

from .. import safefs
from ..formats import jsonio

NVSWITCH_DEVICES = "/proc/driver/nvidia-nvswitch/devices"
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager.service"
PERSISTENCED_UNIT = "nvidia-persistenced.service"
DRIVER_UNITS = (FABRIC_MANAGER_UNIT, PERSISTENCED_UNIT)
# compiled on first use (re's cache): re is ship.LAZY, and a host without GPUs never needs them
_NUMBER = r"-?\d+(?:\.\d+)?"
_XID = r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)"
KMSG_MAX_RECORDS = 100000   # bounds the kernel-log read: the ring buffer holds far fewer
# The GPUs a worker's last good config passed its gate on (index, bus id, uuid), kept by the gate beside
# compose.yaml.good in docker/: a host that lists fewer later lost one (an XID 79, fallen off the bus), and a
# plan re-derived from what is left would restart the server on fewer GPUs than it was gated with (issue 53).
GATED_FILE = "gpus.good"
GATED_KEYS = ("index", "bus_id", "uuid")
GATED_MAX_BYTES = 65536


def _text(node, path):
    found = node.find(path) if node is not None else None
    text = (found.text or "").strip() if found is not None else ""
    return None if text in ("", "N/A", "Unknown") or text.startswith("Requested functionality") else text


def _number(node, path):
    """'36 C', '122.95 W', '143771 MiB', '0 %' -> the number; None when not reported."""
    text = _text(node, path)
    match = re.match(_NUMBER, text) if text else None
    if not match:
        return None
    value = float(match.group())
    return int(value) if value.is_integer() else value


def _yes(node, path):
    text = _text(node, path)
    return None if text is None else text.lower() in ("yes", "enabled", "active")


def _ecc(node):
    """{'corrected': n, 'uncorrected': n} from one <volatile> or <aggregate> block (None when ECC is off)."""
    if node is None:
        return None
    sums = {"corrected": 0, "uncorrected": 0}
    seen = False
    # Older schema: <single_bit><total>, <double_bit><total>; newer: <dram_uncorrectable> and kin.
    for bit, kind in (("single_bit", "corrected"), ("double_bit", "uncorrected")):
        total = _number(node, f"{bit}/total")
        if total is not None:
            seen = True
            sums[kind] += int(total)
    for leaf in node:
        value = _number(leaf, ".") if not len(leaf) else None
        if value is None:
            continue
        kind = "uncorrected" if "uncorrectable" in leaf.tag else "corrected" if "correctable" in leaf.tag else None
        if kind:
            seen = True
            sums[kind] += int(value)
    return sums if seen else None


def _slowdown_celsius(temperature):
    absolute = _number(temperature, "gpu_temp_slow_threshold")
    if absolute is not None:
        return absolute
    current, margin = _number(temperature, "gpu_temp"), _number(temperature, "gpu_temp_tlimit")
    slow = _number(temperature, "gpu_temp_slow_tlimit_threshold")
    if None in (current, margin, slow):
        return None
    # T.Limit is the margin left to the card's limit; slowdown starts when the margin falls to `slow`.
    return current + margin - slow


def _clock_reasons(gpu):
    block = gpu.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if block is None:
        block, prefix = gpu.find("clocks_throttle_reasons"), "clocks_throttle_reason_"
    if block is None:
        return {}
    return {leaf.tag[len(prefix):] if leaf.tag.startswith(prefix) else leaf.tag: _yes(leaf, ".")
            for leaf in block if _yes(leaf, ".") is not None}


def parse(xml_text):
    """{'driver', 'cuda', 'gpus': [...]} from `nvidia-smi -q -x`; ValueError on a document that is not one."""
    try:
        root = ElementTree.fromstring(xml_text)
    except ElementTree.ParseError as error:
        raise ValueError(f"nvidia-smi -q -x printed no readable XML ({error})") from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"nvidia-smi -q -x printed <{root.tag}>, not <nvidia_smi_log>")
    gpus = []
    for position, gpu in enumerate(root.findall("gpu")):
        temperature = gpu.find("temperature")
        power = gpu.find("gpu_power_readings")
        if power is None:
            power = gpu.find("power_readings")
        power_draw = None
        for field in ("average_power_draw", "power_draw", "instant_power_draw"):
            power_draw = _number(power, field)
            if power_draw is not None:
                break
        minor = _number(gpu, "minor_number")
        gpus.append({
            "index": position if minor is None else minor,
            "bus_id": gpu.get("id"),
            "uuid": _text(gpu, "uuid"),
            "name": _text(gpu, "product_name"),
            "persistence": _yes(gpu, "persistence_mode"),
            "fabric_state": _text(gpu, "fabric/state"),
            "fabric_status": _text(gpu, "fabric/status"),
            "temperature_c": _number(temperature, "gpu_temp"),
            "slowdown_c": _slowdown_celsius(temperature),
            "power_w": power_draw,
            "power_limit_w": _number(power, "current_power_limit") or _number(power, "power_limit"),
            "utilization": _number(gpu, "utilization/gpu_util"),
            "memory_utilization": _number(gpu, "utilization/memory_util"),
            "memory_used_mib": _number(gpu, "fb_memory_usage/used"),
            "memory_total_mib": _number(gpu, "fb_memory_usage/total"),
            "ecc_volatile": _ecc(gpu.find("ecc_errors/volatile")),
            "ecc_aggregate": _ecc(gpu.find("ecc_errors/aggregate")),
            "retired_single_bit": _number(gpu, "retired_pages/multiple_single_bit_retirement/retired_count"),
            "retired_double_bit": _number(gpu, "retired_pages/double_bit_retirement/retired_count"),
            "retirement_pending": _yes(gpu, "retired_pages/pending_retirement"),
            "remap_pending": _yes(gpu, "remapped_rows/remapped_row_pending"),
            "remap_failure": _yes(gpu, "remapped_rows/remapped_row_failure"),
            "remapped_corrected": _number(gpu, "remapped_rows/remapped_row_corr"),
            "remapped_uncorrected": _number(gpu, "remapped_rows/remapped_row_unc"),
            "clock_reasons": _clock_reasons(gpu),
        })
    return {"driver": _text(root, "driver_version"), "cuda": _text(root, "cuda_version"), "gpus": gpus}


def gated(parsed):
    """GATED_FILE's text for the GPUs of ``parsed`` (parse()'s reading): each one's index, bus id and uuid."""
    return jsonio.dumps([{key: gpu.get(key) for key in GATED_KEYS} for gpu in parsed["gpus"]], sort_keys=True) + "\n"


def read_gated(docker_dir):
    """The GPUs the last good config passed its gate on ([{index, bus_id, uuid}]), None when none are recorded
    (no gate passed since the record began, no GPU, or a file that is not the gate's: a link, too large, not JSON)."""
    raw = safefs.read_regular(os.path.join(docker_dir, GATED_FILE), GATED_MAX_BYTES)
    try:
        found = jsonio.loads(raw) if raw is not None else None
    except ValueError:
        return None
    if not isinstance(found, list) or not all(isinstance(g, dict) for g in found):
        return None
    return [{key: g.get(key) if isinstance(g.get(key), (str, int)) and not isinstance(g.get(key), bool) else None
             for key in GATED_KEYS} for g in found][:64]


def missing(gated_gpus, listed):
    """The GPUs of ``gated_gpus`` (read_gated) that ``listed`` (parse()'s gpus) no longer has: matched by bus id
    (the slot: a replaced card is no loss), by uuid where no bus id was recorded."""
    buses = {str(g.get("bus_id")).lower() for g in listed if g.get("bus_id")}
    uuids = {g.get("uuid") for g in listed if g.get("uuid")}
    return [g for g in gated_gpus or ()
            if (str(g["bus_id"]).lower() not in buses if g.get("bus_id") else g.get("uuid") not in uuids)]


def nvswitches(directory=NVSWITCH_DEVICES):
    """The NVSwitch devices the driver found (their PCI addresses), [] on a board without NVSwitch."""
    try:
        return sorted(entry for entry in os.listdir(directory) if not entry.startswith("."))[:64]
    except OSError:
        return []


def xids(lines):
    """{(pci address, xid): count} from kernel-log lines (NVRM's 'Xid (PCI:0000:00:06): 79, ...')."""
    found = {}
    for line in lines:
        match = re.search(_XID, line)
        if match:
            key = (match.group(1).lower(), int(match.group(2)))
            found[key] = found.get(key, 0) + 1
    return found


def kernel_log(path="/dev/kmsg"):
    """The messages of the kernel ring buffer's records the kernel itself wrote (kernel_record), read without
    blocking (root only); None where it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    lines = []
    try:
        for _ in range(KMSG_MAX_RECORDS):
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError:   # EPIPE: a record was overwritten while reading; the next read goes on
                continue
            if not record:
                break
            message = kernel_record(record)
            if message is not None:
                lines.append(message)
    finally:
        os.close(fd)
    return lines


def kernel_record(record):
    """The message of one /dev/kmsg record ('PRIORITY,SEQUENCE,TIME,FLAGS;MESSAGE'), when the kernel itself wrote
    it: its facility (PRIORITY >> 3) is 0. A record written into /dev/kmsg from user space always has another
    facility (the kernel makes it LOG_USER, 1, at least), so no service's log line counts as the driver's XID.
    None for any other record."""
    head, sep, message = record.decode(errors="replace").partition(";")
    priority = head.partition(",")[0]
    if not sep or not priority.isdigit() or int(priority) >> 3 != 0:
        return None
    return message.rstrip("\n")
