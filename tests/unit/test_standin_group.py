"""The SGLang stand-in's multi-node protocol (issue #34 item 6), on loopback, each rank a process started as SGLang
is (`python3 -m sglang.launch_server --nnodes N --node-rank i --dist-init-addr HOST:PORT`): rank 0 serves only once
every rank joined; a rank that drops makes rank 0 hang (completions, then /health_generate 503) and a restarted rank
never heals it; ranks >= 1 answer /health and /health_generate 200 and nothing else, whatever the group's state.
Every process is killed at the end of its test; every wait is bounded."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from harness import PROJECT_DIR, wait_for

STANDIN = PROJECT_DIR / "tests" / "support" / "standin"
sys.path.insert(0, str(STANDIN))
import standin_server  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ranks(tmp_path):
    """start(rank, nnodes, dist_port, **env) -> the rank's HTTP base URL; every process is killed afterwards."""
    started: list[subprocess.Popen] = []

    def start(rank: int, nnodes: int, dist_port: int, **env: str) -> str:
        port = free_port()
        environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(STANDIN),
                   "STANDIN_LOAD_SECONDS": "0", "SGLANG_HEALTH_CHECK_TIMEOUT": "1",
                   "STANDIN_DIST_HEARTBEAT_SECONDS": "3", **env}
        process = subprocess.Popen(
            [sys.executable, "-m", "sglang.launch_server", "--model-path", "org/model", "--served-model-name", "m",
             "--host", "127.0.0.1", "--port", str(port), "--tp-size", str(2 * nnodes), "--nnodes", str(nnodes),
             "--node-rank", str(rank), "--dist-init-addr", f"127.0.0.1:{dist_port}"],
            env=environ, stdout=subprocess.DEVNULL, stderr=(tmp_path / f"{len(started)}.log").open("w"))
        process.log_path = tmp_path / f"{len(started)}.log"   # type: ignore[attr-defined]
        started.append(process)
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):   # the HTTP port listens within 10 s
            if answer(base + "/health", timeout=3) is not None or process.poll() is not None:
                break
            time.sleep(0.1)
        process.base = base   # type: ignore[attr-defined]
        return base

    start.processes = started   # type: ignore[attr-defined]
    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(10)


def answer(url: str, data: bytes | None = None, timeout: float = 5) -> int | None:
    """The HTTP status, or None when the port refuses or the reply did not come within ``timeout``."""
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            reply.read()
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, OSError):
        return None


def completion(base: str, timeout: float = 5) -> int | None:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}).encode()
    return answer(base + "/v1/chat/completions", body, timeout)


def statuses(base: str) -> tuple:
    """(/health, /health_generate, a completion) of one rank."""
    return answer(base + "/health"), answer(base + "/health_generate"), completion(base)


def until(check, seconds: float = 15):
    """``check`` polled every 0.2 s for at most ``seconds``; its last value."""
    return wait_for(check, seconds, every=0.2)


def test_rank0_serves_only_once_every_rank_has_joined(ranks):
    dist = free_port()
    head = ranks(0, 3, dist)
    assert statuses(head) == (503, 503, 503)          # listening, but "loading": nobody joined
    assert answer(head + "/v1/models") == 503 and answer(head + "/server_info") == 503
    one = ranks(1, 3, dist)
    assert until(lambda: "joined" in answer_log(ranks.processes[0]))
    time.sleep(0.5)
    assert statuses(head) == (503, 503, 503)          # rank 2 is still missing
    assert statuses(one) == (200, 200, 404)           # a rank >= 1 says 200 whatever the group's state
    ranks(2, 3, dist)
    assert until(lambda: statuses(head) == (200, 200, 200))
    assert statuses(one) == (200, 200, 404)
    assert answer(head + "/v1/models") == 200
    for path in ("/v1/models", "/server_info", "/metrics", "/flush_cache"):   # nothing else on a rank >= 1
        assert answer(one + path) == 404, path


def answer_log(process: subprocess.Popen) -> str:
    """What the process has logged so far."""
    return process.log_path.read_text()   # type: ignore[attr-defined]


def test_a_rank_that_drops_makes_rank0_hang_and_never_heals(ranks):
    dist = free_port()
    head = ranks(0, 2, dist)
    one = ranks(1, 2, dist)
    assert until(lambda: statuses(head) == (200, 200, 200))
    ranks.processes[1].send_signal(signal.SIGKILL)    # as `docker kill` of rank 1's container
    ranks.processes[1].wait(10)
    assert until(lambda: "the group is broken: rank 1 closed its connection" in answer_log(ranks.processes[0]))
    started = time.monotonic()
    assert completion(head, timeout=3) is None        # hangs: only the client's timeout ends it
    assert time.monotonic() - started >= 2.9
    assert answer(head + "/health_generate", timeout=5) == 503   # after SGLANG_HEALTH_CHECK_TIMEOUT (1 s)
    assert answer(head + "/health", timeout=5) == 503
    assert ranks.processes[0].poll() is None          # rank 0 does not exit
    # Reviving rank 1 alone against the stale rank 0 (a restart policy): it says 200, the group never serves.
    again = ranks(1, 2, dist)
    assert answer(again + "/health") == 200 and answer(again + "/health_generate") == 200
    assert until(lambda: "refused rank 1" in answer_log(ranks.processes[0]))
    assert completion(head, timeout=2) is None
    assert answer(head + "/health_generate", timeout=5) == 503
    assert answer(one + "/health") is None            # the killed one is gone


def test_a_stream_in_flight_stops_when_a_rank_drops(ranks):
    dist = free_port()
    head = ranks(0, 2, dist, STANDIN_TOKENS_PER_SECOND="20")
    ranks(1, 2, dist)
    assert until(lambda: answer(head + "/health_generate") == 200)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 400,
                       "stream": True}).encode()
    request = urllib.request.Request(head + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=3) as reply:
        assert reply.readline().startswith(b"data: ")   # tokens flow
        ranks.processes[1].kill()
        with pytest.raises(TimeoutError):              # then stop: the stream hangs, unfinished
            for _ in range(1000):
                if b"[DONE]" in reply.readline():
                    break
    assert completion(head, timeout=2) is None


def test_a_rank_above_zero_stays_healthy_without_rank0_and_gives_up_in_bounded_time(ranks):
    dist = free_port()
    one = ranks(1, 2, dist, STANDIN_DIST_WAIT_SECONDS="3")
    assert statuses(one) == (200, 200, 404)           # no rank 0 at all, and still 200
    process = ranks.processes[0]
    assert process.wait(15) == 1                      # as torch.distributed's initialisation times out
    assert f"could not join rank 0 at 127.0.0.1:{dist} within 3 s" in answer_log(process)


def test_rank0_alone_gives_up_in_bounded_time_naming_the_missing_ranks(ranks):
    dist = free_port()
    ranks(0, 3, dist, STANDIN_DIST_WAIT_SECONDS="2")
    process = ranks.processes[0]
    assert process.wait(15) == 1
    assert f"ranks [1, 2] did not join on 127.0.0.1:{dist} within 2 s" in answer_log(process)


def test_rank_above_zero_keeps_saying_200_after_rank0_dies(ranks):
    dist = free_port()
    head = ranks(0, 2, dist)
    one = ranks(1, 2, dist)
    assert until(lambda: statuses(head) == (200, 200, 200))
    ranks.processes[0].kill()
    assert until(lambda: "lost rank 0" in answer_log(ranks.processes[1]))
    assert statuses(one) == (200, 200, 404) and ranks.processes[1].poll() is None


def test_rank0_restarted_alone_never_serves_until_every_rank_restarts(ranks):
    """Issue 40: `docker restart` of rank 0 alone (SIGTERM, then the same command again): rank 1 lost it and never
    joins again, so the new rank 0 answers 503 for good while rank 1 says 200; all restarted together, it serves."""
    dist = free_port()
    head = ranks(0, 2, dist)
    one = ranks(1, 2, dist)
    assert until(lambda: statuses(head) == (200, 200, 200))
    ranks.processes[0].send_signal(signal.SIGTERM)
    assert ranks.processes[0].wait(15) == 0
    assert until(lambda: "lost rank 0" in answer_log(ranks.processes[1]))
    again = ranks(0, 2, dist)
    time.sleep(3)                                     # three of rank 1's retry intervals: it does not come back
    assert statuses(again) == (503, 503, 503) and statuses(one) == (200, 200, 404)
    assert "rank 1 joined" not in answer_log(ranks.processes[2])
    for process in ranks.processes[1:]:
        process.kill()
        process.wait(10)
    head = ranks(0, 2, dist)
    ranks(1, 2, dist)
    assert until(lambda: statuses(head) == (200, 200, 200))


def test_the_flags_as_sglang_spells_them():
    args = standin_server.parse_args(["--model-path", "m", "--nnodes", "2", "--node-rank", "1",
                                      "--nccl-init-addr", "[::1]:5000"])   # SGLang's older alias, IPv6
    assert (args.dist_init_addr, args.dist_host, args.dist_port) == ("[::1]:5000", "::1", 5000)
    single = standin_server.parse_args(["--model-path", "m"])
    assert (single.nnodes, single.node_rank, single.dist_init_addr) == (1, 0, None)
    for bad in (["--nnodes", "2"], ["--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "h:1"],
                ["--nnodes", "2", "--dist-init-addr", "h"], ["--nnodes", "2", "--dist-init-addr", "h:0"],
                ["--node-rank", "-1"]):
        with pytest.raises(SystemExit):
            standin_server.parse_args(["--model-path", "m", *bad])
