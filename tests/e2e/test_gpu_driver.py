"""The driver layer is judged before any change, on real test hosts given GPUs by a stand-in nvidia-smi.

A test host has no GPU and no NVIDIA driver (no kernel module in a container), so each host here gets a stand-in
`nvidia-smi` (/usr/local/bin/nvidia-smi, a shell script) that prints recorded documents: the H200's of 2026-12-04
(tests/unit/fixtures/h200-2026-12-04/q.xml) or its hand-written R570 variant (fixtures/nvidia-smi/README.md), and
the query and topology the H200 printed. The NVSwitch host's /proc/driver gets a tmpfs holding the directory the
nvidia-nvswitch driver makes (devices/<PCI address>), as on an HGX board. Everything else is the real deploy
against the real host: its snapshot reads them with the real nvidia-smi arguments.

The driver a host runs is, to the gate, the loaded module's own line in /proc/driver/nvidia/version (recorded on an
H200: tests/unit/fixtures/driver/); a host given a tmpfs there holding that line "runs" that driver, and a new line
written there is the host as it comes back from a boot into another driver: the same container, a driver it never
served on (issue 52).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness import SETTLED_OP, run_deploy

FIXTURES = Path(__file__).resolve().parents[1] / "unit" / "fixtures"
RECORDED = FIXTURES / "h200-2026-12-04" / "q.xml"
R570 = FIXTURES / "nvidia-smi" / "h200-r570-handwritten.q.xml"
QUERY = FIXTURES / "nvidia-smi" / "h200-1gpu.query.csv"
TOPO = FIXTURES / "nvidia-smi" / "h200-1gpu.topo.txt"
OLD_DRIVER, NVSWITCH = "sg-gpu-r570", "sg-gpu-nvswitch"
NEW_DRIVER, NO_HEADERS = "sg-gpu-newdriver", "sg-gpu-noheaders"
MODULE_LINE = (FIXTURES / "driver" / "h200-proc-driver-nvidia-version.txt").read_text()
GATE_OP = ("tasks/stack.py | Ensure the running config passed test_tool_calling.sh and benchmark.sh "
           "(rolled back if not)")
LAST_GATE = "/opt/sglang/docker/.last-gate"
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


def load_driver(host, version: str) -> None:
    """The host's loaded NVIDIA module, as the kernel reports it, is ``version`` (a tmpfs at /proc/driver)."""
    host.exec("mountpoint -q /proc/driver || mount -t tmpfs -o size=1m nvdriver /proc/driver; "
              "mkdir -p /proc/driver/nvidia && cat > /proc/driver/nvidia/version <<'EOF'\n"
              f"{MODULE_LINE.replace('580.159.04', version)}EOF")


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


# ------------------------------------------------------- a driver change is gated; its module is built before a reboot
def test_a_boot_into_another_driver_runs_the_gate_on_the_same_container(testbed, workdir):
    """Converged and settled on driver 580.159.04; the host comes back from a boot into 580.195.03 with the same
    container serving: the next run is not settled, runs the gate (a new record), and the run after changes nothing.
    On main the stamp held: no gate ran, and the host was reported good on a driver it never served on."""
    host = testbed.host(NEW_DRIVER)
    load_driver(host, "580.159.04")
    inventory = testbed.inventory(workdir / "gpu_newdriver.py", {"production": [(host, {})]})
    first = run_deploy(inventory)
    assert first.returncode == 0, first.why()
    settled = run_deploy(inventory)
    assert settled.returncode == 0 and settled.changed(NEW_DRIVER) == [], settled.why()
    gated = host.exec(f"cat {LAST_GATE}").stdout
    container = host.exec("docker ps -q --no-trunc").stdout
    load_driver(host, "580.195.03")
    after = run_deploy(inventory)
    assert after.returncode == 0, after.why()
    assert SETTLED_OP not in after.statuses
    assert after.changed(NEW_DRIVER) == [GATE_OP]
    assert host.exec(f"cat {LAST_GATE}").stdout != gated
    assert host.exec("docker ps -q --no-trunc").stdout == container   # the same container, gated again
    again = run_deploy(inventory)
    assert again.returncode == 0 and again.changed(NEW_DRIVER) == [], again.why()


def test_a_pinned_driver_whose_kernel_headers_apt_cannot_install_stops_before_any_driver_package(testbed, workdir):
    """NVIDIA's DKMS module needs the running kernel's headers, which the deploy's --no-install-recommends never
    brings: a test host runs this machine's kernel, whose linux-headers-KVER no Debian source holds. The host stops
    naming that package, before NVIDIA's repository, any driver package, its pin or its hold, and is not rebooted
    (on main nothing asked for the headers: the driver's install went on, and would have built no module)."""
    from testbed import hub as standin_hub

    host = testbed.host(NO_HEADERS)
    give_gpu(host, R570)
    answering = standin_hub.ensure_hub()   # an https source that answers: the stand-in Hub's TLS port
    host.exec(answering.trust_command())
    kernel = host.exec("uname -r").stdout.strip()
    inventory = testbed.inventory(workdir / "gpu_noheaders.py", {"production": [(host, {
        "sglang_nvidia_driver_version": "580.105.08", "sglang_allow_reboot": True,
        "sglang_install_nvidia_toolkit": True,   # Docker's nvidia runtime comes after the driver (never here)
        # NVIDIA's repositories as sources that answer (the stand-in Hub's address: the preflight asks every source
        # the plan fetches from, run/sources.py); never fetched from: the headers stop the host first
        "sglang_nvidia_cuda_apt_url": answering.https_url,
        "sglang_nvidia_toolkit_apt_url": answering.https_url})]})
    result = run_deploy(inventory)
    assert result.returncode != 0
    assert f"the kernel headers linux-headers-{kernel} (kernel {kernel}) cannot be installed" in result.output, \
        result.why()
    assert result.errors(NO_HEADERS) == [
        "tasks/gpu_driver.py | Ensure the kernel headers NVIDIA driver 580.105.08's module builds against are "
        "installed (the running kernel's and the next boot's), before any driver package"]
    assert not any("Reboot" in op or "installed and held" in op for op in result.statuses), result.why()
    # no driver package, pin or hold, and not even NVIDIA's repository or its key
    assert host.exec("dpkg-query -W -f='${Package}\\n' 'nvidia-*' 'cuda-drivers*' 2>/dev/null; "
                     "find /etc/apt/preferences.d /etc/apt/keyrings -mindepth 1; "
                     "ls /etc/apt/sources.list.d/ | grep nvidia; "
                     "apt-mark showhold", check=False).stdout.strip() == ""


# ---------------------------------------------------------------- the H200's metrics, scraped by the real Prometheus
PROMETHEUS_WAIT = 60   # seconds for Prometheus to start, scrape both files and evaluate the rules


def _serve(text: str):
    """The file on loopback at /metrics, as the node exporter's textfile collector would serve it."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _api(port: int, path: str, **params) -> dict:
    import json
    import urllib.parse
    import urllib.request

    url = f"http://127.0.0.1:{port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())["data"]


def test_the_h200s_gpu_metrics_scraped_by_prometheus_feed_every_gpu_panel_and_fire_the_rules(tmp_path):
    """The real Prometheus (Debian's, as on a monitor host) scrapes two node targets: gpu-01 serves the file
    gpu_metrics.py wrote on the lent H200 (2026-12-04), gpu-02 the file it writes for the hand-written failing
    H200 with an XID 79 in the kernel log and 2 GPUs planned. Every GPU panel's query answers from gpu-01's
    series; gpu-01 raises no alert, gpu-02 the ones whose for is 0m at once and the rest pending."""
    import json
    import runpy
    import shutil
    import time

    from dashboard_queries import concrete, metric_names, panel_queries
    from harness import PROJECT_DIR
    from sglang_infra.hostside.gpu import gpu_metrics, nvsmi
    from sglang_infra.plan import render
    from sglang_infra.plan.types import MonitorSettings

    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus is not installed: scripts/setup-machine.sh installs it"
    failing = gpu_metrics.exposition(gpu_metrics.samples(
        nvsmi.parse((FIXTURES / "nvidia-smi" / "h200-failing-handwritten.q.xml").read_text()), 2,
        {("0000:00:06", 79): 1}, time.time()))
    servers = {"gpu-01": _serve((FIXTURES / "h200-2026-12-04" / "sglang_gpu.prom").read_text()),
               "gpu-02": _serve(failing)}
    data = {k: v for k, v in runpy.run_path(str(PROJECT_DIR / "group_data" / "all.py")).items()
            if k.startswith("sglang_")}
    (tmp_path / "rules.yml").write_text(render.alert_rules(MonitorSettings.of(data)))
    targets = [{"targets": [f"127.0.0.1:{server.server_address[1]}"],
                "labels": {"host": host, "group": "production", "model": "qwen3.6-35b-a3b-awq", "role": "node"}}
               for host, server in servers.items()]
    (tmp_path / "prometheus.yml").write_text(json.dumps({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "rule_files": ["rules.yml"],
        "scrape_configs": [{"job_name": "node", "static_configs": targets}]}))
    port = _free_port()
    process = subprocess.Popen([prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                                f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, alerts, scraped = time.monotonic() + PROMETHEUS_WAIT, [], set()
        while time.monotonic() < deadline:
            try:
                # Both targets scraped (each has its own offset in the interval, so gpu-02's alerts can fire before
                # gpu-01's first scrape), then gpu-02's immediate alerts fired.
                scraped = {series["metric"]["host"] for series in _api(port, "query", query="up == 1")["result"]}
                alerts = _api(port, "alerts")["alerts"]
                if scraped == set(servers) and {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"} >= {
                        "SGLangGpuEccUncorrectable", "SGLangGpuRowRemapPending", "SGLangGpuXidError"}:
                    break
            except OSError:
                pass
            time.sleep(1)
        assert scraped == set(servers), f"Prometheus scraped only {sorted(scraped)} in {PROMETHEUS_WAIT} s"
        states = {(a["labels"]["host"], a["labels"]["alertname"]): a["state"] for a in alerts}
        assert states == {("gpu-02", "SGLangGpuEccUncorrectable"): "firing",
                          ("gpu-02", "SGLangGpuRowRemapPending"): "firing",
                          ("gpu-02", "SGLangGpuXidError"): "firing",
                          ("gpu-02", "SGLangGpuMissing"): "pending",
                          ("gpu-02", "SGLangGpuTooHot"): "pending"}
        answered = {}
        for title, expr in panel_queries(PROJECT_DIR / "templates" / "grafana" / "sglang-fleet.json"):
            if any(name.startswith(("sglang_gpu_", "sglang_gpus_")) for name in metric_names(expr)):
                query = concrete(expr).replace('host=~".*"', 'host="gpu-01"')
                answered[(title, expr)] = len(_api(port, "query", query=query)["result"])
        assert len(answered) >= 10
        # The healthy H200 answers every GPU query but the two that show only trouble: XIDs (none logged) and
        # clock events other than idle (none active).
        assert {title for (title, expr), found in answered.items() if not found} == {"GPU errors", "GPU clock events"}
        assert [expr for (title, expr), found in answered.items() if not found and "xid" not in expr
                and "clock_event" not in expr] == []
    finally:
        process.terminate()
        process.wait(timeout=30)
        for server in servers.values():
            server.shutdown()
