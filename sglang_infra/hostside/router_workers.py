"""Keeps a gateway's worker set equal to the workers that passed their gate.

    python3 router_workers.py GATEWAY_DIR URL [KEY_FILE]   (the wanted worker URLs as a JSON list on stdin)

1. workers.json in GATEWAY_DIR becomes the wanted list (atomically, owned
   like compose.yaml): the gateway's launcher reads it when it starts;
2. when the gateway answers, its worker API (sglang-router 0.3.2: GET
   /workers, POST /workers {"url"}, DELETE /workers/{id}) adds the missing
   workers and removes the others, without a restart; both are queued by the
   gateway, so the list is read again until it matches (bounded).
Prints one line saying what changed. The key, when there is one, is read
from the server's config file and sent as a Bearer header, never printed,
and only to a URL the gateway's own running container publishes (the
Engine API says so): a port no container holds is anyone's to listen on.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request

from . import checks, names, stack
from .printable import printable

SETTLE_SECONDS = 30   # the gateway applies queued additions and removals within milliseconds here
TIMEOUT = 10          # seconds, for one call to the gateway, its reply read in full


def call(base, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base.rstrip("/") + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **checks.auth_headers()})
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=TIMEOUT) as reply:
        raw = checks.read_bounded(reply, started + TIMEOUT, checks.MAX_GATEWAY_BYTES)
    return json.loads(raw) if raw else {}


def registered(base):
    """{url: id} of the workers the gateway has now."""
    return {w["url"]: w["id"] for w in call(base, "GET", "/workers").get("workers", [])}


def sync(base, wanted):
    """Add and remove through the API until the gateway's set is ``wanted``; (added, removed)."""
    now = registered(base)
    added = sorted(set(wanted) - set(now))
    removed = sorted(set(now) - set(wanted))
    for url in added:
        call(base, "POST", "/workers", {"url": url})
    for url in removed:
        call(base, "DELETE", f"/workers/{now[url]}")
    deadline = time.monotonic() + SETTLE_SECONDS
    while set(registered(base)) != set(wanted):
        if time.monotonic() > deadline:
            raise SystemExit(f"router_workers: the gateway at {base} did not reach the worker set {sorted(wanted)} "
                             f"within {SETTLE_SECONDS} s")
        time.sleep(0.2)
    return added, removed


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    directory, base = argv[0], argv[1]
    checks.use_api_key_file(argv[2] if len(argv) > 2 else None)
    wanted = json.loads(sys.stdin.read())
    stack.write_private(os.path.join(directory, names.WORKERS_FILE), json.dumps(sorted(wanted), indent=1) + "\n",
                        os.path.join(directory, names.COMPOSE_FILE))
    if checks.auth_headers() and not stack.holds(base, *stack.gateway(os.path.basename(directory.rstrip("/")))):
        print(f"router_workers: {names.WORKERS_FILE} written; the gateway's container does not publish {base} (not "
              "running yet, or published elsewhere), so the key is not sent there; it reads the file when it starts")
        return 0
    try:
        added, removed = sync(base, wanted)
    except (urllib.error.URLError, OSError) as error:
        print(f"router_workers: {names.WORKERS_FILE} written; the gateway does not answer ({printable(error)}), it reads the file "
              "when it starts")
        return 0
    print(printable(f"router_workers: added {added or 'none'}, removed {removed or 'none'}; the gateway has "
                    f"{len(wanted)} worker(s)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
