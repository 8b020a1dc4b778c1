"""Each GPU's health as Prometheus metrics, for the node exporter's textfile collector.

One file, names.GPU_METRICS_FILE in the collector's directory, from one `nvidia-smi -q -x` (nvsmi.py reads it):
per GPU (labels gpu, the index, and bus_id) temperature and the card's slowdown temperature, power and its limit,
utilisation, memory used and total, ECC errors corrected and uncorrected (volatile: since the driver loaded;
aggregate: the card's lifetime), retired pages and pending retirement (before Ampere), row remaps pending and
failed (Ampere on), each clock event (throttle) reason active or not, the fabric's registration on NVSwitch boards,
and the XID errors the driver logged in the kernel ring buffer (readable by root). Beside them, how many GPUs
nvidia-smi saw and how many the plan expects: a GPU that fell off the bus is missing from nvidia-smi, so only the
difference shows it. When nvidia-smi fails or prints no document, sglang_gpu_metrics_ok is 0 and the GPUs seen 0.

Written beside the old file under a name the collector skips, then renamed over it (as gate_metrics.py does).

    python3 gpu_metrics.py --planned 8 [--textfile-dir DIR]
"""

import argparse
import subprocess
import sys
import time

from .. import names, safefs
from ..printable import written_or_said
from . import nvsmi

NVIDIA_SMI_TIMEOUT = 30   # seconds; a GPU that hangs the driver makes nvidia-smi hang too
FILE_MODE = 0o644
HELP = {
    "sglang_gpu_metrics_ok": "1 when nvidia-smi answered with a readable document, else 0.",
    "sglang_gpus_seen": "GPUs nvidia-smi lists now.",
    "sglang_gpus_planned": "GPUs the deploy's plan expects on this host (found at deploy time).",
    "sglang_gpu_metrics_written_timestamp_seconds": "When this file was written, in Unix seconds.",
    "sglang_gpu_info": "1 per GPU; its name, driver and the CUDA version the driver supports as labels.",
    "sglang_gpu_temperature_celsius": "GPU core temperature.",
    "sglang_gpu_slowdown_temperature_celsius": "Temperature at which the card slows its clocks (its own threshold).",
    "sglang_gpu_power_watts": "Power draw (average where the driver gives one).",
    "sglang_gpu_power_limit_watts": "The power limit in force.",
    "sglang_gpu_utilization_ratio": "Share of the last sample period a kernel ran (0 to 1).",
    "sglang_gpu_memory_utilization_ratio": "Share of the last sample period memory was read or written (0 to 1).",
    "sglang_gpu_memory_used_bytes": "Framebuffer memory in use.",
    "sglang_gpu_memory_total_bytes": "Framebuffer memory in all.",
    "sglang_gpu_ecc_errors": "ECC errors by period (volatile: since the driver loaded; aggregate: lifetime) and "
                             "type (corrected, uncorrected).",
    "sglang_gpu_retired_pages": "Pages retired, by cause (single_bit, double_bit); GPUs before Ampere.",
    "sglang_gpu_retirement_pending": "1 when a page retirement waits for the next driver load.",
    "sglang_gpu_row_remap_pending": "1 when a row remap waits for a GPU reset (Ampere on).",
    "sglang_gpu_row_remap_failure": "1 when a row remap failed: the card needs service.",
    "sglang_gpu_clock_event_active": "1 when the clocks are held down for this reason (throttle reasons).",
    "sglang_gpu_fabric_registered": "1 when the GPU is registered with the NVSwitch fabric (state Completed, "
                                    "status Success), 0 otherwise; absent on a board without a fabric.",
    "sglang_gpu_xid_errors": "XID errors of this GPU in the kernel's ring buffer, by XID code.",
}
MIB = 1024 * 1024


def _labels(**labels):
    return "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in labels.items()) + "}"


def _escape(value):
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def samples(found, planned, xids, now):
    """[(metric, labels text, value)] for ``found`` (nvsmi.parse's dict, None when nvidia-smi gave nothing)."""
    gpus = found["gpus"] if found else []
    out = [("sglang_gpu_metrics_ok", "", 1 if found else 0), ("sglang_gpus_seen", "", len(gpus))]
    if planned is not None:
        out.append(("sglang_gpus_planned", "", planned))
    out.append(("sglang_gpu_metrics_written_timestamp_seconds", "", round(now, 3)))
    for gpu in gpus:
        ids = {"gpu": gpu["index"], "bus_id": gpu["bus_id"] or ""}
        plain = _labels(**ids)
        out.append(("sglang_gpu_info", _labels(**ids, name=gpu["name"] or "", driver=found["driver"] or "",
                                               cuda=found["cuda"] or ""), 1))
        for metric, key, scale in (("sglang_gpu_temperature_celsius", "temperature_c", 1),
                                   ("sglang_gpu_slowdown_temperature_celsius", "slowdown_c", 1),
                                   ("sglang_gpu_power_watts", "power_w", 1),
                                   ("sglang_gpu_power_limit_watts", "power_limit_w", 1),
                                   ("sglang_gpu_utilization_ratio", "utilization", 0.01),
                                   ("sglang_gpu_memory_utilization_ratio", "memory_utilization", 0.01),
                                   ("sglang_gpu_memory_used_bytes", "memory_used_mib", MIB),
                                   ("sglang_gpu_memory_total_bytes", "memory_total_mib", MIB)):
            if gpu[key] is not None:
                out.append((metric, plain, round(gpu[key] * scale, 6)))
        for period in ("volatile", "aggregate"):
            for kind, count in sorted((gpu[f"ecc_{period}"] or {}).items()):
                out.append(("sglang_gpu_ecc_errors", _labels(**ids, period=period, type=kind), count))
        for cause in ("single_bit", "double_bit"):
            if gpu[f"retired_{cause}"] is not None:
                out.append(("sglang_gpu_retired_pages", _labels(**ids, cause=cause), gpu[f"retired_{cause}"]))
        for metric, key in (("sglang_gpu_retirement_pending", "retirement_pending"),
                            ("sglang_gpu_row_remap_pending", "remap_pending"),
                            ("sglang_gpu_row_remap_failure", "remap_failure")):
            if gpu[key] is not None:
                out.append((metric, plain, int(gpu[key])))
        for reason, active in sorted(gpu["clock_reasons"].items()):
            out.append(("sglang_gpu_clock_event_active", _labels(**ids, reason=reason), int(active)))
        if gpu["fabric_state"] is not None:
            registered = gpu["fabric_state"] == "Completed" and gpu["fabric_status"] in (None, "Success")
            out.append(("sglang_gpu_fabric_registered", plain, int(registered)))
        for (pci, xid), count in sorted((xids or {}).items()):
            if _bus_device(pci) == _bus_device(gpu["bus_id"] or ""):
                out.append(("sglang_gpu_xid_errors", _labels(**ids, xid=xid), count))
    return out


def _bus_device(address):
    """'00:06' from the kernel's 0000:00:06 and from nvidia-smi's 00000000:00:06.0 alike."""
    return ":".join(address.lower().partition(".")[0].split(":")[-2:])


def exposition(rows):
    """Prometheus' text format: HELP and TYPE once per metric, then its samples, in HELP's order."""
    lines = []
    for metric, help_text in HELP.items():
        mine = [(labels, value) for name, labels, value in rows if name == metric]
        if mine:
            lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"]
            lines += [f"{metric}{labels} {value!r}" for labels, value in mine]
    return "\n".join(lines) + "\n"


def read_gpus():
    """nvsmi.parse of `nvidia-smi -q -x`, or None when it cannot run or prints no document."""
    try:
        done = subprocess.run(["nvidia-smi", "-q", "-x"], capture_output=True, text=True,
                              timeout=NVIDIA_SMI_TIMEOUT)
        return nvsmi.parse(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def write(text, textfile_dir=names.TEXTFILE_DIR):
    """``text`` as the metrics file, replaced atomically (safefs.replace_textfile); the path, or None without the
    directory."""
    return safefs.replace_textfile(textfile_dir, names.GPU_METRICS_FILE, text.encode(), FILE_MODE)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="gpu_metrics.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--planned", type=int, default=None, help="GPUs the plan expects on this host")
    parser.add_argument("--textfile-dir", default=names.TEXTFILE_DIR)
    parser.add_argument("--stdout", action="store_true", help="print the metrics instead of writing the file")
    args = parser.parse_args(argv)
    log = nvsmi.kernel_log()
    text = exposition(samples(read_gpus(), args.planned, nvsmi.xids(log) if log is not None else None, time.time()))
    if args.stdout:
        sys.stdout.write(text)
        return 0
    return written_or_said("gpu_metrics", "the GPU metrics", args.textfile_dir,
                           lambda: write(text, args.textfile_dir))


if __name__ == "__main__":
    sys.exit(main())
