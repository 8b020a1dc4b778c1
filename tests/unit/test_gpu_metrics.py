"""hostside/gpu/gpu_metrics.py: each GPU's health for the node exporter's textfile collector, over the file it wrote on
the lent H200 (2026-12-04) and over hand-written failures; hostside/gpu/gpu_kernel_check.py's recorded results there."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sglang_infra.hostside.gpu import gpu_kernel_check, gpu_metrics, nvsmi

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RUN = FIXTURES / "h200-2026-12-04"
RECORDED = (RUN / "sglang_gpu.prom").read_text()
IDS = 'gpu="0",bus_id="00000000:00:06.0"'
PROMTOOL_GPU_TESTS = Path(__file__).resolve().parents[1] / "support" / "promtool" / "sglang-gpus.test.yml"


def samples(text: str) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def written(case: str, planned=1, xids=None) -> str:
    document = (FIXTURES / "nvidia-smi" / f"{case}.q.xml").read_text()
    return gpu_metrics.exposition(gpu_metrics.samples(nvsmi.parse(document), planned, xids, 1796400000.0))


def test_the_file_written_on_the_h200_holds_every_gpu_metric_the_rules_and_panels_read():
    found = samples(RECORDED)
    assert found["sglang_gpu_metrics_ok"] == 1 and found["sglang_gpus_seen"] == 1 and found["sglang_gpus_planned"] == 1
    assert found[f'sglang_gpu_info{{{IDS},name="NVIDIA H200",driver="580.159.04",cuda="13.0"}}'] == 1
    assert found[f"sglang_gpu_temperature_celsius{{{IDS}}}"] == 33
    assert found[f"sglang_gpu_slowdown_temperature_celsius{{{IDS}}}"] == 89
    assert found[f"sglang_gpu_power_limit_watts{{{IDS}}}"] == 700
    assert found[f"sglang_gpu_memory_total_bytes{{{IDS}}}"] == 143771 * 1024 * 1024
    assert found[f'sglang_gpu_ecc_errors{{{IDS},period="volatile",type="uncorrected"}}'] == 0
    assert found[f"sglang_gpu_row_remap_pending{{{IDS}}}"] == 0
    assert found[f'sglang_gpu_clock_event_active{{{IDS},reason="gpu_idle"}}'] == 1
    # An H200 has row remapping, not page retirement (N/A there): no retired-pages series.
    assert not [name for name in found if name.startswith("sglang_gpu_retired_pages")]


def test_the_recorded_file_is_what_the_program_writes_from_the_recorded_document():
    document = (RUN / "q.xml").read_text()
    again = gpu_metrics.exposition(gpu_metrics.samples(nvsmi.parse(document), 1, {}, 0.0))
    # The same document, one second apart: only the time written and the power drawn may differ.
    steady = re.compile(r"^sglang_gpu_(metrics_written|power_watts)")
    assert [line for line in again.splitlines() if not steady.match(line)] == \
        [line for line in RECORDED.splitlines() if not steady.match(line)]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool checks the exposition format")
def test_promtool_accepts_the_recorded_file():
    result = subprocess.run(["promtool", "check", "metrics"], input=RECORDED, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_failing_gpu_writes_the_series_the_promtool_cases_fire_on():
    found = samples(written("h200-failing-handwritten", xids={("0000:00:06", 79): 1}))
    assert found[f'sglang_gpu_ecc_errors{{{IDS},period="volatile",type="uncorrected"}}'] == 2
    assert found[f'sglang_gpu_ecc_errors{{{IDS},period="volatile",type="corrected"}}'] == 17
    assert found[f"sglang_gpu_row_remap_pending{{{IDS}}}"] == 1
    assert found[f"sglang_gpu_temperature_celsius{{{IDS}}}"] == 92
    assert found[f"sglang_gpu_slowdown_temperature_celsius{{{IDS}}}"] == 91
    assert found[f'sglang_gpu_clock_event_active{{{IDS},reason="hw_thermal_slowdown"}}'] == 1
    assert found[f'sglang_gpu_xid_errors{{{IDS},xid="79"}}'] == 1
    # The promtool cases use these very values.
    cases = PROMTOOL_GPU_TESTS.read_text()
    for value in ("'0 2x3'", "'0 17x3'", "'0 1x3'", "'92x5'", "'91x5'", 'xid="79"'):
        assert value in cases


def test_xids_of_another_gpu_are_not_this_ones():
    found = samples(written("h200-failing-handwritten", xids={("0000:1b:00", 48): 3}))
    assert not [name for name in found if name.startswith("sglang_gpu_xid_errors")]


def test_nvidia_smi_failing_reads_as_no_gpu_seen():
    found = samples(gpu_metrics.exposition(gpu_metrics.samples(None, 8, None, 0.0)))
    assert found == {"sglang_gpu_metrics_ok": 0, "sglang_gpus_seen": 0, "sglang_gpus_planned": 8,
                     "sglang_gpu_metrics_written_timestamp_seconds": 0.0}


def test_xid_lines_are_counted_per_gpu_and_code():
    lines = ["NVRM: Xid (PCI:0000:00:06): 79, pid=0, name=, GPU has fallen off the bus.",
             "NVRM: Xid (PCI:0000:00:06): 79, pid=0, name=, GPU has fallen off the bus.",
             "NVRM: Xid (PCI:0000:1b:00): 48, pid=1234, name=python3, An uncorrectable double bit error",
             "usb 1-1: new high-speed USB device"]
    assert nvsmi.xids(lines) == {("0000:00:06", 79): 2, ("0000:1b:00", 48): 1}


def test_only_the_kernel_s_own_records_count_never_a_line_written_from_user_space(monkeypatch):
    """Issue 52 item 8: a service echoing an XID line into /dev/kmsg (facility LOG_USER: priority 8 and up, as the
    kernel forces for any write from user space) counted as the driver's XID."""
    xid = "NVRM: Xid (PCI:0000:1b:00): 48, pid=1234, name=python3, An uncorrectable double bit error"
    assert nvsmi.kernel_record(f"4,1234,5678,-;{xid}\n".encode()) == xid                 # the driver's (KERN_WARNING)
    assert nvsmi.kernel_record(f"0,1,2,-;{xid}\n".encode()) == xid
    assert nvsmi.kernel_record(f"12,1235,5679,-;{xid}\n".encode()) is None               # user.warning: echoed
    assert nvsmi.kernel_record(f"30,1236,5680,-;{xid}\n".encode()) is None               # daemon.info
    assert nvsmi.kernel_record(xid.encode()) is None                                      # no record header
    records = iter([f"4,1,1,-;{xid}\n".encode(), f"14,2,2,-;{xid}\n".encode(), f"6,3,3,-;{xid}\n".encode()])

    def read(fd, size):
        try:
            return next(records)
        except StopIteration:
            raise BlockingIOError from None

    monkeypatch.setattr(nvsmi.os, "open", lambda *a: 99)
    monkeypatch.setattr(nvsmi.os, "close", lambda fd: None)
    monkeypatch.setattr(nvsmi.os, "read", read)
    assert nvsmi.xids(nvsmi.kernel_log("/dev/kmsg")) == {("0000:1b:00", 48): 2}


def test_the_file_is_replaced_whole_in_the_textfile_directory(tmp_path):
    path = gpu_metrics.write(RECORDED, str(tmp_path))
    assert path == f"{tmp_path}/sglang_gpu.prom" and Path(path).read_text() == RECORDED
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sglang_gpu.prom"]
    assert gpu_metrics.write(RECORDED, str(tmp_path / "absent")) is None


@pytest.mark.parametrize("name, ok, said", [
    ("kernel-check-pip-nvcc-sm_90a.json", True, "every element as computed on the host"),
    ("kernel-check-local-nvcc.json", True, "every element as computed on the host"),
    ("kernel-check-sm_80-cubin.json", False, "cuModuleLoadData failed: CUDA_ERROR_NO_BINARY_FOR_GPU (209)"),
])
def test_the_kernel_check_recorded_on_the_h200(name, ok, said):
    report = json.loads((RUN / name).read_text())
    assert report["ok"] is ok and report["arch"] == "sm_90a"
    assert [(g["gpu"], g["name"], g["ok"], g["said"]) for g in report["gpus"]] == [(0, "NVIDIA H200", ok, said)]
    assert report["gpus"][0]["checked"] == (gpu_kernel_check.ELEMENTS if ok else 0)


@pytest.mark.parametrize("capability, arch", [((9, 0), "sm_90a"), ((10, 0), "sm_100a"), ((8, 9), "sm_89"),
                                              ((8, 0), "sm_80")])
def test_the_kernel_is_built_for_the_gpus_own_architecture(capability, arch):
    assert gpu_kernel_check.arch_of(capability) == arch


def test_the_expected_values_wrap_at_32_bits():
    assert gpu_kernel_check.expected(3, 0x5EED)[2] == (2 * 2654435761 + 0x5EED) % 2**32


def test_without_a_driver_the_check_fails_saying_why():
    report = gpu_kernel_check.check("/bin/false", library="libcuda-that-is-not-here.so.1")
    assert report["ok"] is False and report["said"].startswith("the CUDA driver cannot start:")


def test_every_gpu_panel_and_rule_reads_a_metric_the_h200_file_holds():
    """The dashboard's GPU panels and the sglang-gpus rules read names the file written on the H200 holds; XIDs
    alone are absent there (none logged: a series appears with the first one)."""
    from dashboard_queries import metric_names, panel_queries
    from harness import PROJECT_DIR

    held = {line.split("{")[0].split(" ")[0] for line in RECORDED.splitlines() if line and not line.startswith("#")}
    read = {name for _, expr in panel_queries(PROJECT_DIR / "templates" / "grafana" / "sglang-fleet.json")
            for name in metric_names(expr) if name.startswith(("sglang_gpu_", "sglang_gpus_"))}
    rules = (PROJECT_DIR / "templates" / "prometheus" / "sglang-alerts.yml.j2").read_text()
    read |= set(re.findall(r"\b(sglang_gpus?_[a-z_]+)\{", rules.split("name: sglang-gpus")[1]))
    assert len(read) >= 10
    assert read - held == {"sglang_gpu_xid_errors", "sglang_gpu_retirement_pending"}
