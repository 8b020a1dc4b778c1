"""The SGLang stand-in on SIGTERM and with --enable-metrics, as SGLang behaves (testbed notes): /health 503 at
once, requests in flight (and new ones) still served, the server stops once none is left; the two gauges."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

from harness import PROJECT_DIR

sys.path.insert(0, str(PROJECT_DIR / "tests" / "support" / "standin"))
import standin_server


def started(metrics=True, rate=40):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = standin_server.parse_args(["--model-path", "org/model", "--served-model-name", "m", "--host", "127.0.0.1",
                                      "--port", str(port), *(["--enable-metrics"] if metrics else [])])
    standin = standin_server.StandIn(args, {"STANDIN_LOAD_SECONDS": "0", "STANDIN_TOKENS_PER_SECOND": str(rate)})
    server = standin_server.Server(("127.0.0.1", port), standin_server.make_handler(standin))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return standin, server, thread, f"http://127.0.0.1:{port}"


def status(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""


def complete(base, out, tokens=40):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": tokens}).encode()
    request = urllib.request.Request(base + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        out.append(reply.status)


def gauges(base):
    text = status(base + "/metrics")[1]
    return {line.split("{")[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith("sglang:")}


def test_sigterm_answers_503_keeps_serving_and_stops_once_idle():
    standin, server, thread, base = started()
    done = []
    first = threading.Thread(target=complete, args=(base, done))   # about 1 s of generation
    first.start()
    time.sleep(0.3)
    assert {name: value for name, value in gauges(base).items() if name in ("sglang:num_running_reqs",
            "sglang:num_queue_reqs")} == {"sglang:num_running_reqs": 1.0, "sglang:num_queue_reqs": 0.0}
    standin_server.drain_then_stop(standin, server, poll=0.1)
    assert status(base + "/health")[0] == 503
    complete(base, done, tokens=4)            # a new request is still served, as SGLang does
    assert thread.is_alive()                  # the first is still in flight
    first.join(10)
    thread.join(10)
    assert done == [200, 200] and not thread.is_alive()
    server.server_close()


def test_metrics_only_with_enable_metrics():
    standin, server, thread, base = started(metrics=False)
    try:
        assert status(base + "/metrics")[0] == 404
        assert status(base + "/health")[0] == 200
    finally:
        server.shutdown()
        server.server_close()
