"""Steady client load through a gateway, for tests/e2e/test_rolling.py and bench/rolling.py: requests one after
another from each client, half of them streaming; counts what was sent, what failed, which streams were cut, and
the fewest healthy workers the gateway listed meanwhile. Bounded: it stops by itself after LOAD_LIMIT seconds."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

from testbed.hosts import ADMIN_KEY

LOAD_LIMIT = 900   # seconds: the load stops by itself even if its caller forgets to stop it
CLIENTS = 6


def listed_models(worker: dict) -> set[str]:
    """The models the gateway lists for a worker (SMG 1.13.0: model_id and models[].id); SMG lists a worker whose
    /v1/models it could not read (a 401: added without the worker's key) with model "unknown", and routes it
    nothing, so that one is left out."""
    found = {worker.get("model_id")} | {m.get("id") for m in worker.get("models") or () if isinstance(m, dict)}
    return {m for m in found if isinstance(m, str) and m and m != "unknown"}


def gateway_workers(gateway: str, key: str = ADMIN_KEY) -> dict[str, bool] | None:
    """{worker URL: routable} as the gateway lists them (healthy, not in SMG's draining state, and with a model),
    None when it does not answer; asked with the test bed's control-plane key (SMG's worker API takes no other)."""
    request = urllib.request.Request(gateway + "/workers", headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return {w["url"]: w["is_healthy"] is True and w.get("status") != "draining" and bool(listed_models(w))
                    for w in json.loads(reply.read())["workers"]}
    except (OSError, ValueError):
        return None


def roll_lines(output: str) -> list[str]:
    """The deploy's lines about its rolling restarts (operations/roll.py), in order."""
    return [line for line in output.splitlines() if "roll: " in line]


def most_out_at_once(output: str) -> int:
    """The most workers between 'taking ... out' and 'is back and healthy', from the deploy's output in order."""
    out = most = 0
    for line in roll_lines(output):
        if ": taking " in line:
            out += 1
            most = max(most, out)
        elif "roll: gateway_workers: " in line and " is back and healthy" in line:
            out -= 1
    return most


class Load:
    """``clients`` threads sending requests one after another through the gateway, half of them streaming, until
    stopped (or LOAD_LIMIT); a watcher records the fewest healthy workers the gateway lists."""

    def __init__(self, gateway: str, model: str, max_tokens: int, clients: int = CLIENTS, key: str | None = None):
        """``key``: the clients' key (sglang_api_key_file), sent with every request when the fleet has one."""
        self.gateway, self.model, self.max_tokens, self.key = gateway, model, max_tokens, key
        self.stop = threading.Event()
        self.sent = self.failed = self.cut = 0
        self.errors: list[str] = []
        self.fewest = None
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.client, args=(i % 2 == 1,), daemon=True) for i in range(clients)]
        self.threads.append(threading.Thread(target=self.watch, daemon=True))

    def __enter__(self):
        self.deadline = time.monotonic() + LOAD_LIMIT
        for thread in self.threads:
            thread.start()
        time.sleep(2)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join(60)

    def running(self):
        return not self.stop.is_set() and time.monotonic() < self.deadline

    def client(self, stream: bool):
        while self.running():
            body = json.dumps({"model": self.model,
                               "messages": [{"role": "user", "content": f"[{time.monotonic_ns()}] hi"}],
                               "max_tokens": self.max_tokens, "stream": stream}).encode()
            headers = {"Content-Type": "application/json",
                       **({"Authorization": f"Bearer {self.key}"} if self.key else {})}
            request = urllib.request.Request(self.gateway + "/v1/chat/completions", data=body, method="POST",
                                             headers=headers)
            with self.lock:
                self.sent += 1
            try:
                with urllib.request.urlopen(request, timeout=120) as reply:
                    text = reply.read().decode(errors="replace")
                if stream and not text.rstrip().endswith("data: [DONE]"):
                    with self.lock:
                        self.cut += 1
                        self.errors.append(f"cut stream: {text[-200:]!r}")
            except (OSError, urllib.error.HTTPError) as error:
                with self.lock:
                    if stream and "IncompleteRead" in repr(error):
                        self.cut += 1
                    else:
                        self.failed += 1
                    self.errors.append(repr(error)[:300])

    def watch(self):
        while self.running():
            found = gateway_workers(self.gateway)
            healthy = sum(bool(v) for v in found.values()) if found is not None else 0
            with self.lock:
                self.fewest = healthy if self.fewest is None else min(self.fewest, healthy)
            time.sleep(0.5)
