"""A driver change of 3 workers behind the REAL gateway reboots them in the pool's turns (issue 52 item 3), on real
test hosts given a GPU server's driver life by STAND-INS (tests/support/testbed/gpuhost.py, docs/stand-ins.md):
the H200's nvidia-smi, Docker's GPU request, NVIDIA's CUDA repository (a flat apt repository signed by a key this
run makes, pinned as sglang_nvidia_cuda_apt_key_fingerprint) with stand-in driver packages whose module modinfo
reports, the kernel's headers package, and a `reboot` that drops every session, gives the kernel a new boot id,
loads the installed driver and restarts the Docker engine. Everything else is the real deploy
(`pyinfra inventory.py deploy.py`), the real gateway (SMG) and the real apt, dpkg and modinfo on the hosts.

The pool serves on driver 580.159.04; sglang_nvidia_driver_version 580.195.03 with sglang_allow_reboot, under
steady load through the gateway: each worker's headers and driver go in, its module checked built, then one worker
at a time (sglang_max_unavailable 1) is taken out of the gateway and drained, rebooted, checked loaded on the new
driver, gated and put back; the requests the load sent and those that failed are the rolling benchmark's figure
for a driver change (docs/benchmarks.md). A second run changes nothing.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from harness import run_deploy
from rolling_load import Load, gateway_workers, most_out_at_once, roll_lines
from testbed import gpuhost, tls
from testbed import hub as standin_hub

W1, W2, W3, GW = "sg-drv-w1", "sg-drv-w2", "sg-drv-w3", "sg-drv-gw"
WORKERS = (W1, W2, W3)
MODEL = "qwen3.6-35b-a3b"
PIN = "580.195.03"
LAST_GATE = "/opt/sglang/docker/.last-gate"
FIGURE = "/tmp/driver-roll-figure.json"   # the sampler's figure, for docs/benchmarks.md


@pytest.fixture(scope="module")
def fleet(testbed, workdir):
    hosts = {name: testbed.host(name) for name in (*WORKERS, GW)}
    kernel = hosts[W1].exec("uname -r").stdout.strip()
    tree, fingerprint = gpuhost.build(workdir / "standin-gpu", PIN, kernel)
    pair = tls.issue(standin_hub.test_ca(), "localhost", dns_names=["localhost"])
    for name in WORKERS:
        gpuhost.prepare(hosts[name], tree, pair, standin_hub.Hub.trust_command())

    def inventory(file, **data):
        values = {"sglang_drain_timeout": 60, "sglang_nvidia_cuda_apt_url": f"https://localhost:{gpuhost.PORT}",
                  "sglang_nvidia_cuda_apt_key_fingerprint": fingerprint, "sglang_allow_reboot": True, **data}
        return testbed.inventory(workdir / file, {"production": [(hosts[n], values) for n in WORKERS],
                                                  "router": [(hosts[GW], {"sglang_router_bind_address":
                                                                          hosts[GW].address})]})

    first = run_deploy(inventory("driver-first.py"))
    assert first.returncode == 0, first.why(4000)
    return hosts, inventory


def boot_id(host) -> str:
    return host.exec("cat /proc/sys/kernel/random/boot_id").stdout.strip()


def loaded(host) -> str:
    return host.exec("cat /proc/driver/nvidia/version").stdout


def test_a_driver_change_reboots_one_worker_at_a_time_out_of_the_gateway_and_no_request_fails(fleet):
    hosts, inventory = fleet
    gateway = f"http://{hosts[GW].address}:30080"
    assert gateway_workers(gateway) == {f"http://{hosts[n].address}:30000": True for n in WORKERS}
    boots = {name: boot_id(hosts[name]) for name in WORKERS}
    gated = {name: hosts[name].exec(f"cat {LAST_GATE}").stdout for name in WORKERS}
    began = time.monotonic()
    with Load(gateway, MODEL, max_tokens=200) as load:
        result = run_deploy(inventory("driver-pin.py", sglang_nvidia_driver_version=PIN))
    wall = time.monotonic() - began
    figure = {"sent": load.sent, "failed": load.failed, "cut": load.cut, "fewest_healthy": load.fewest,
              "deploy_s": round(wall, 1), "errors": load.errors[:5]}
    with open(FIGURE, "w") as out:
        json.dump(figure, out)
    print("driver roll figure:", figure)
    assert result.returncode == 0, result.why(12000)
    for name in WORKERS:
        host = hosts[name]
        assert boot_id(host) != boots[name], name                       # rebooted
        assert PIN in loaded(host) and "580.159.04" not in loaded(host), name   # into the pinned driver
        assert host.exec(f"cat {LAST_GATE}").stdout != gated[name], name       # gated on it
        assert {"nvidia-open", "cuda-drivers"} & set(host.exec("apt-mark showhold").stdout.split()), name  # held
    # one turn at a time: each worker out of the gateway and drained before its reboot, back after its gate
    lines = roll_lines(result.output)
    assert most_out_at_once(result.output) == 1, lines
    for name in WORKERS:
        mine = [line for line in lines if f"[{name}]" in line]
        assert any(": taking " in line for line in mine) and any("is back and healthy" in line for line in mine), lines
    out_order = [re.search(r"\[(sg-drv-w\d)\]", line)[1] for line in lines if ": taking " in line]
    assert sorted(out_order) == sorted(WORKERS), lines
    assert load.sent > 20, load.sent
    assert (load.failed, load.cut) == (0, 0), (load.errors[:5], lines)
    assert load.fewest is not None and load.fewest >= len(WORKERS) - 1, load.fewest
    assert gateway_workers(gateway) == {f"http://{hosts[n].address}:30000": True for n in WORKERS}

    again = run_deploy(inventory("driver-pin.py", sglang_nvidia_driver_version=PIN))
    assert again.returncode == 0, again.why(3000)
    assert {name: again.changed(name) for name in (*WORKERS, GW)} == {name: [] for name in (*WORKERS, GW)}, \
        again.why(3000)
    assert "roll: " not in again.output
