"""Gateway benchmark: aggregate output tok/s and p50 TTFT through the real gateway (sglang-router 0.3.2, as the
stand-in image carries it) in front of 2 stand-in workers, against one worker direct.

    .venv/bin/python bench/gateway.py [--concurrency 8,16] [--reps 3] [--max-tokens 128]

Three containers of the stand-in image on the test network (removed at the end): two workers, each with a decode
capacity shared by its requests in flight as a GPU batch is (STANDIN_CAPACITY_TOKENS_PER_SECOND; 400 tok/s per
request up to 1600 tok/s per server), and the gateway with the fleet's settings from group_data/all.py. The load
is hostside/checks.py's benchmark (the one benchmark.sh runs) with prompts that start differently per request, as
unrelated users' do: cache_aware then spreads them by load. Writes bench/results/gateway.md and gateway.json.
"""

from __future__ import annotations

import argparse
import json
import runpy
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT))

from sglang_infra.hostside import checks  # noqa: E402
from testbed import hosts as testbed  # noqa: E402

PREFIX = "sglang-bench-router-"
MODEL = "tiny-chat"
WORKER_ENV = {"STANDIN_LOAD_SECONDS": "0", "STANDIN_TOKENS_PER_SECOND": "400",
              "STANDIN_CAPACITY_TOKENS_PER_SECOND": "1600"}
DEFAULTS = runpy.run_path(str(ROOT / "group_data" / "all.py"))
WAIT = 120  # seconds, at most, for the containers to answer


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], check=True, capture_output=True, text=True, timeout=120).stdout.strip()


def start(name: str, image: str, env: dict[str, str], command: list[str]) -> str:
    subprocess.run(["docker", "rm", "-f", PREFIX + name], capture_output=True, timeout=60)
    docker("run", "-d", "--name", PREFIX + name, "--network", testbed.NETWORK, "--label", testbed.LABEL,
           *[f"-e{k}={v}" for k, v in env.items()], image, *command)
    return docker("inspect", "-f", f"{{{{(index .NetworkSettings.Networks \"{testbed.NETWORK}\").IPAddress}}}}",
                  PREFIX + name)


def wait_ready(url: str, path: str) -> None:
    deadline = time.monotonic() + WAIT
    while True:
        try:
            with urllib.request.urlopen(url + path, timeout=5) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: {url}{path} did not answer within {WAIT} s")
        time.sleep(0.5)


def gateway_flags(workers: list[str]) -> list[str]:
    d = DEFAULTS
    return ["python3", "-m", "sglang_router.launch_router", "--host", "0.0.0.0", "--port", "30080",
            "--prometheus-port", "29000", "--policy", d["sglang_router_policy"],
            "--health-check-interval-secs", str(d["sglang_router_health_check_interval"]),
            "--health-check-timeout-secs", str(d["sglang_router_health_check_timeout"]),
            "--health-failure-threshold", str(d["sglang_router_health_failure_threshold"]),
            "--health-success-threshold", str(d["sglang_router_health_success_threshold"]),
            "--worker-startup-timeout-secs", str(d["sglang_router_worker_startup_timeout"]),
            "--worker-urls", *workers]


def measure(url: str, concurrency: int, max_tokens: int) -> dict:
    return checks.run_benchmark(url, MODEL, concurrency, max_tokens, 300, None, 0.8, None, distinct_prompts=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="8,16")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args()
    image, _ = testbed.ensure_standin_image()
    testbed.ensure_network()
    worker = ["python3", "-m", "sglang.launch_server", "--model-path", "stand-in", "--served-model-name", MODEL,
              "--host", "0.0.0.0", "--port", "30000"]
    try:
        addresses = [start(f"w{i}", image, WORKER_ENV, worker) for i in (1, 2)]
        urls = [f"http://{a}:30000" for a in addresses]
        for url in urls:
            wait_ready(url, "/health")
        gateway = f"http://{start('gw', image, {}, gateway_flags(urls))}:30080"
        wait_ready(gateway, "/readiness")
        rows = []
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            for target, url in (("one worker direct", urls[0]), ("gateway, 2 workers", gateway)):
                runs = [measure(url, concurrency, args.max_tokens) for _ in range(args.reps)]
                bad = [r for r in runs if r["errors"]]
                if bad:
                    raise SystemExit(f"bench: {target} at {concurrency}: {bad[0]['problems']}")
                rows.append({"concurrency": concurrency, "target": target,
                             "tok_per_s": [r["tok_per_s"] for r in runs],
                             "ttft_p50_s": [r["ttft_p50_s"] for r in runs]})
    finally:
        for name in ("gw", "w1", "w2"):
            subprocess.run(["docker", "rm", "-f", PREFIX + name], capture_output=True, timeout=60)
    lines = ["| concurrency | target | aggregate tok/s, median [min-max] | p50 TTFT s, median | tok/s vs direct | "
             "TTFT vs direct |", "|---|---|---|---|---|---|"]
    for row in rows:
        direct = next(r for r in rows if r["concurrency"] == row["concurrency"] and r["target"].startswith("one"))
        tok, ttft = statistics.median(row["tok_per_s"]), statistics.median(row["ttft_p50_s"])
        lines.append(f"| {row['concurrency']} | {row['target']} | {tok:.0f} [{min(row['tok_per_s']):.0f}-"
                     f"{max(row['tok_per_s']):.0f}] | {ttft:.4f} | "
                     f"{tok / statistics.median(direct['tok_per_s']):.2f} | "
                     f"{ttft / statistics.median(direct['ttft_p50_s']):.2f} |")
    table = "\n".join(lines)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gateway.md").write_text(table + "\n")
    (out / "gateway.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
