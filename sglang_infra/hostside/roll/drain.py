"""Waits until a worker taken out of its gateways has no request left (a rolling restart, operations/roll.py).

    python3 drain.py TIMEOUT METRICS_URL [KEY_FILE]              a worker's own /metrics (SGLang --enable-metrics):
                                                                 sglang:num_running_reqs + sglang:num_queue_reqs
    python3 drain.py TIMEOUT METRICS_URL --worker WORKER_URL     a gateway's Prometheus endpoint:
                                                                 smg_worker_requests_active{worker=WORKER_URL}

Polls every second, at most TIMEOUT seconds. Exit 0: nothing in flight;
1: still busy at the deadline; 3: the endpoint gives no such count (no
--enable-metrics, or the gateway never had that worker), so the caller can
ask elsewhere. Prints one line saying which ("drain: unknown: ..." for 3).
"""

import re
import sys
import time
import urllib.error
import urllib.request

from .. import apikey, bounded, stack
from ..printable import printable

WORKER_GAUGES = ("sglang:num_running_reqs", "sglang:num_queue_reqs")
GATEWAY_GAUGE = "smg_worker_requests_active"
POLL_SECONDS = 1.0
TIMEOUT = 5
SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", re.M)


def in_flight(text, worker=None):
    """The requests the exposition ``text`` counts as in flight (summed over its series), None when it has none."""
    total, seen = 0.0, False
    for found in SAMPLE.finditer(text):
        name, labels, value = found.group(1), found.group(2) or "", found.group(3)
        if (name in WORKER_GAUGES) if worker is None else (name == GATEWAY_GAUGE and f'worker="{worker}"' in labels):
            try:
                total += max(0.0, float(value))
            except ValueError:
                continue
            seen = True
    return total if seen else None


MAX_METRICS_BYTES = 4 << 20   # an exposition of a few hundred series


def read(url, worker=None):
    """One read of ``url``, bounded in bytes and seconds, following no redirect. The key goes only to the serving
    container's own published port (a worker's /metrics needs it when the server has one; a gateway's Prometheus
    port does not, and no key is loaded for it), asked for every read (bounded.open_url)."""
    started = time.monotonic()
    with bounded.open_url(urllib.request.Request(url), TIMEOUT, key=worker is None) as reply:
        return bounded.read_bounded(reply, started + TIMEOUT, MAX_METRICS_BYTES).decode(errors="replace")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    timeout, url = float(argv[0]), argv[1]
    worker = argv[3] if len(argv) > 3 and argv[2] == "--worker" else None
    if worker is None:
        apikey.use_api_key_file(argv[2] if len(argv) > 2 else None, lambda target: stack.holds(target))
    deadline = time.monotonic() + timeout
    count = None
    while True:
        try:
            count = in_flight(read(url, worker), worker)
        except (urllib.error.URLError, OSError, bounded.Unbounded) as error:
            print(f"drain: unknown: {url} does not answer ({printable(error)}); no count of requests in flight there")
            return 3
        if count is None:
            print(f"drain: unknown: {url} counts no requests in flight for this worker")
            return 3
        if count == 0:
            print("drain: no request in flight")
            return 0
        if time.monotonic() > deadline:
            print(f"drain: {count:g} request(s) still in flight after {timeout:g} s; restarting anyway "
                  "(the stop grace period lets SGLang finish them)")
            return 1
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(main())
