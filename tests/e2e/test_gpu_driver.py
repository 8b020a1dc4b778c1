"""The driver layer is judged before any change, on real test hosts given GPUs by a stand-in nvidia-smi.

A test host has no GPU and no NVIDIA driver (no kernel module in a container), so each host here gets a stand-in
`nvidia-smi` (/usr/local/bin/nvidia-smi, a shell script) that prints recorded documents: the H200's of 2026-12-04
(tests/unit/fixtures/h200-2026-12-04/q.xml) or its hand-written R570 variant (fixtures/nvidia-smi/README.md), and
the query and topology the H200 printed. The NVSwitch host's /proc/driver gets a tmpfs holding the directory the
nvidia-nvswitch driver makes (devices/<PCI address>), as on an HGX board. Everything else is the real deploy
against the real host: its snapshot reads them with the real nvidia-smi arguments.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness import run_deploy

FIXTURES = Path(__file__).resolve().parents[1] / "unit" / "fixtures"
RECORDED = FIXTURES / "h200-2026-12-04" / "q.xml"
R570 = FIXTURES / "nvidia-smi" / "h200-r570-handwritten.q.xml"
QUERY = FIXTURES / "nvidia-smi" / "h200-1gpu.query.csv"
TOPO = FIXTURES / "nvidia-smi" / "h200-1gpu.topo.txt"
OLD_DRIVER, NVSWITCH = "sg-gpu-r570", "sg-gpu-nvswitch"
STANDIN = """#!/bin/sh
# Stand-in nvidia-smi for a test host (tests/e2e/test_gpu_driver.py): recorded outputs, no GPU.
case "$*" in
  "-q -x") cat /usr/local/share/standin-nvidia-smi/q.xml ;;
  "topo -m") cat /usr/local/share/standin-nvidia-smi/topo.txt ;;
  --query-gpu=*) cat /usr/local/share/standin-nvidia-smi/query.csv ;;
  *) echo "stand-in nvidia-smi: $* is not recorded" >&2; exit 2 ;;
esac
"""
FINGERPRINT = ("getent passwd sglang; ls -la /opt 2>&1; dpkg-query -W -f='${Package} ${Status}\\n' docker.io "
               "nvidia-fabricmanager-580 2>&1; systemctl is-enabled nvidia-persistenced.service 2>&1; true")


def give_gpu(host, document: Path) -> None:
    host.exec("mkdir -p /usr/local/share/standin-nvidia-smi")
    for source, name in ((document, "q.xml"), (QUERY, "query.csv"), (TOPO, "topo.txt")):
        subprocess.run(["docker", "cp", str(source), f"{host.container}:/usr/local/share/standin-nvidia-smi/{name}"],
                       check=True, capture_output=True, timeout=60)
    host.exec(f"cat > /usr/local/bin/nvidia-smi <<'EOF'\n{STANDIN}EOF\nchmod 755 /usr/local/bin/nvidia-smi")


@pytest.fixture(scope="module")
def hosts(testbed):
    made = {name: testbed.host(name) for name in (OLD_DRIVER, NVSWITCH)}
    give_gpu(made[OLD_DRIVER], R570)
    give_gpu(made[NVSWITCH], RECORDED)
    made[NVSWITCH].exec("mount -t tmpfs -o size=1m nvswitch /proc/driver && "
                        "mkdir -p /proc/driver/nvidia-nvswitch/devices/0000:05:00.0 "
                        "/proc/driver/nvidia-nvswitch/devices/0000:06:00.0")
    return made


def refused(testbed, workdir, host, name: str, data: dict):
    before = host.exec(FINGERPRINT).stdout
    inventory = testbed.inventory(workdir / f"gpu_{name}.py", {"production": [(host, data)]})
    result = run_deploy(inventory)
    assert result.returncode != 0
    assert "refused before any change on any host" in result.output, result.output[-3000:]
    assert result.statuses == {}, "an operation started"
    assert host.exec(FINGERPRINT).stdout == before
    return result.output


def test_an_r570_driver_with_the_cu130_image_is_refused_naming_the_minimum(testbed, hosts, workdir):
    output = refused(testbed, workdir, hosts[OLD_DRIVER], "r570", {"sglang_require_gpu": True})
    assert f"host {OLD_DRIVER}: sglang_image_cuda_flavor: the driver is 570.172.08 (it supports CUDA 12.8), but the " \
        "image is built for cu130 (CUDA 13.0), which needs driver 580.65.06 or newer (R580)" in output
    assert "install an R580 driver" in output


def test_an_nvswitch_host_without_fabric_manager_is_refused(testbed, hosts, workdir):
    output = refused(testbed, workdir, hosts[NVSWITCH], "nvswitch", {"sglang_require_gpu": True})
    assert f"host {NVSWITCH}: sglang_install_fabric_manager: 2 NVSwitch device(s) found and Fabric Manager is not " \
        "installed, while driver 580.159.04 needs Fabric Manager 580.159.04 running" in output
    assert "apt-get install 'nvidia-fabricmanager-580=580.159.04-*'" in output
    # The recorded R580 driver runs the cu130 image: only the fabric is refused.
    assert "sglang_image_cuda_flavor" not in output
