"""Day two on a host already serving (issue #60): a new config to deploy, two runs on one host at once, and the
host's own client, sampling the server while they run. Used by tests/e2e/test_day_two.py and bench/daytwo.py."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from pathlib import Path

from harness import start_deploy, wait_for

DOCKER = "/opt/sglang/docker"
# On the host: a chat completion every 0.5 s, bounded, one line each (when it was sent, ok / fail), into SAMPLES.
SAMPLES = "/root/samples"
SAMPLER = (f": > {SAMPLES}; m=$(curl -s -m 2 http://127.0.0.1:30000/v1/models | python3 -c "
           "'import json,sys; print(json.load(sys.stdin)[\"data\"][0][\"id\"])'); "
           "for i in $(seq 400); do [ -e /root/sampler.stop ] && break; t=$(date +%s.%N); "
           "curl -sf -m 3 -o /dev/null -H 'Content-Type: application/json' "
           "-d '{\"model\":\"'$m'\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4}' "
           f"http://127.0.0.1:30000/v1/chat/completions && echo $t ok >> {SAMPLES} || echo $t fail >> {SAMPLES}; "
           "sleep 0.5; done")
REQUEST_MAX = 3   # seconds: curl -m 3, the longest a sample's request can last
# The serving container's life on the host, from the engine's own records: (seconds, action) each.
EVENTS = ("docker events --since {since} --until {until} --filter type=container "
          "--filter label=com.docker.compose.service=sglang --format '{{{{.TimeNano}}}} {{{{.Action}}}}'")


def data(marker: str, **env: str) -> list[str]:
    """A new config: the stand-in's environment with a marker of its own (compose.yaml changes, the server
    restarts and the gate runs)."""
    return ["--data", f"sglang_extra_env={json.dumps({'STANDIN_LOAD_SECONDS': '2', 'DAY2': marker, **env})}"]


def cat(host, path) -> str:
    return host.exec(f"cat {path}", check=False).stdout


def results(host) -> int:
    """How many gates have run on the host (each leaves a result)."""
    return int(host.exec("ls /opt/sglang/results | wc -l").stdout)


def serving(host) -> str:
    """The serving container's id while it runs (a restart makes a new one), read at once."""
    return host.exec("docker ps -q --no-trunc --filter label=com.docker.compose.service=sglang").stdout.strip()


def both(inventory: Path, workdir: Path, host_name: str, first: list[str], second: list[str], apart: float = 0.0,
         second_when: Callable[[], bool] | None = None) -> list[tuple[int, str]]:
    """Two runs on ``host_name``, the second started ``apart`` seconds after the first, or once ``second_when()``
    holds (polled every 0.1 s, at most 300 s): (rc, output) each. A run still going after 600 s is killed."""
    logs = [workdir / "first.log", workdir / "second.log"]
    runs = [start_deploy(inventory, logs[0], "--limit", host_name, *first)]
    try:
        time.sleep(apart)
        if second_when is not None and not wait_for(second_when, 300, every=0.1):
            raise RuntimeError(f"the second run's moment never came:\n{logs[0].read_text()[-3000:]}")
        runs.append(start_deploy(inventory, logs[1], "--limit", host_name, *second))
        return [(run.wait(timeout=600), log.read_text()) for run, log in zip(runs, logs)]
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
                run.wait(timeout=30)


class Sampler:
    """The host's own client: requests sent and failed while the block runs, each with the time it was sent, and
    the serving container's events meanwhile (docker events: its starts, stops, execs)."""

    def __init__(self, host):
        self.host = host

    def __enter__(self):
        self.since = self.host.exec("date +%s.%N").stdout.strip()
        self.host.exec(f"rm -f /root/sampler.stop; nohup bash -c {shlex.quote(SAMPLER)} >/dev/null 2>&1 &")
        if not wait_for(lambda: cat(self.host, SAMPLES).count("ok") >= 2, 20):
            raise RuntimeError(f"{self.host.name}: the sampler never got an answer")
        return self

    def __exit__(self, *_):
        time.sleep(1)
        self.host.exec("touch /root/sampler.stop; sleep 4")
        until = self.host.exec("date +%s.%N").stdout.strip()
        self.samples = [(float(sent), word) for sent, word in
                        (line.split() for line in cat(self.host, SAMPLES).splitlines() if line.strip())]
        self.sent, self.failed = len(self.samples), sum(word == "fail" for _, word in self.samples)
        self.events = [(int(ns) / 1e9, action.split(":")[0]) for ns, action in
                       (line.split(" ", 1) for line in
                        self.host.exec(EVENTS.format(since=self.since, until=until)).stdout.splitlines()
                        if line.strip())]

    def starts(self) -> int:
        """How many times the serving container started."""
        return sum(action == "start" for _, action in self.events)

    def window(self) -> tuple[float, float] | None:
        """The restart's outage: (when the old container was told to stop, when the new one first answered), in
        the host's seconds; None without a stop and a start."""
        stopped = min((t for t, action in self.events if action in ("kill", "stop", "die")), default=None)
        started = max((t for t, action in self.events if action == "start"), default=None)
        if stopped is None or started is None:
            return None
        return stopped, min((sent for sent, word in self.samples if word == "ok" and sent > started),
                            default=float("inf"))

    def outside_the_restart(self) -> list[float]:
        """The failed requests not explained by the container's one restart: sent before its old container was
        told to stop (less REQUEST_MAX, a request in flight then), or after the new one first answered. Where
        the samples fall within the outage changes how many fail (one more or less), never this list."""
        window = self.window()
        return [sent for sent, word in self.samples if word == "fail" and
                (window is None or not window[0] - REQUEST_MAX <= sent < window[1])]

    def outage(self) -> float:
        """Seconds from the old container told to stop to the new one's first answer (0 without a restart)."""
        window = self.window()
        return window[1] - window[0] if window else 0.0
