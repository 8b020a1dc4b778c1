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
        deadline, alerts = time.monotonic() + PROMETHEUS_WAIT, []
        while time.monotonic() < deadline:
            try:
                alerts = _api(port, "alerts")["alerts"]
                if {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"} >= {
                        "SGLangGpuEccUncorrectable", "SGLangGpuRowRemapPending", "SGLangGpuXidError"}:
                    break
            except OSError:
                pass
            time.sleep(1)
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
