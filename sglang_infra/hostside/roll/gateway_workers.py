"""Keeps a gateway's worker set equal to the workers that passed their gate.

    python3 gateway_workers.py GATEWAY_DIR URL [KEY_FILE]   (the wanted worker URLs as a JSON list on stdin)

or, for the roll (operations/roll.py), a JSON object on stdin: {"view": true} prints
what the gateway lists now as one JSON line ({"answers", "listed", "healthy"}; a
gateway that does not answer fronts nobody); and, for one worker of a rolling restart,
{"remove": WORKER_URL} takes it out (and waits until the gateway no longer lists
it); {"add": WORKER_URL, "healthy_within": SECONDS, "model": SERVED_NAME} puts it
back and waits until the gateway lists it healthy with that model (SMG lists a
worker whose /v1/models it could not read with model "unknown", and routes it
nothing). workers.json follows, when the gateway has one.
For a gateway recreated in its turn (operations/stack.py), {"ready_within": SECONDS,
"healthy": [WORKER_URL, ...]} waits until it answers /health and lists each of those
workers (what it served before the restart) routable; exit code 1 saying why when not.

1. workers.json in GATEWAY_DIR becomes the wanted list (atomically, owned
   like compose.yaml): the gateway's launcher reads it when it starts;
2. when the gateway answers, its worker API (SMG's, as pinned: GET /workers,
   POST /workers {"url", "api_key"}, DELETE /workers/{id}) adds the missing workers and
   removes the others, without a restart; both are queued by the gateway, so
   the list is read again until it matches (bounded). SMG's DELETE puts a
   worker in its `draining` state first (routed no new request) and drops it
   from the list a few seconds later (drain_settle_secs, 5 by default), so a
   worker taken out for a roll is "out" once it is no longer listed.
Prints one line saying what changed. The key is the gateways' control-plane
key (KEY_FILE, router/.secrets/control-plane.yaml, role admin: SMG's worker API
takes no other), sent as a Bearer header, never printed,
and only to a URL the gateway's own running container publishes (the
Engine API says so): a port no container holds is anyone's to listen on.

A worker is added with the key the gateway sends its workers: the gateway
host's API key (docker/secrets/server.yaml under the home, what the launcher
gives SMG as --api-key), in the request's body (SMG's worker spec, field
api_key: a worker added without it answers SMG's /v1/models with 401 and is
listed with model "unknown"). A gateway from before SMG (sglang-router) takes
that same API key, not the control-plane key, on its worker API: a 401 to the
control-plane key is asked again once with it, so that the move of a keyed
fleet to SMG reads the old gateway's workers.
"""

import contextlib
import errno
import fcntl
import json
import os
import sys
import time
import urllib.error
import urllib.request

from .. import apikey, bounded, names, safefs, stack
from ..printable import printable

UNKNOWN_MODEL = "unknown"   # SMG's model for a worker whose /v1/models it could not read: routed nothing
SETTLE_SECONDS = 30   # the gateway applies queued additions and removals within milliseconds here
MAX_WORKERS_FILE_BYTES = 1 << 20   # workers.json: a list of URLs
TIMEOUT = 10          # seconds, for one call to the gateway, its reply read in full
LOCK_WAIT = 30        # seconds another step may hold workers.json's directory: its read-change-write takes milliseconds


# Set by main(): the key the gateway sends its workers (the gateway host's API key), and how to switch the worker
# API's key to it for a gateway from before SMG (once; "used" then says it was).
_SERVER_KEY: dict = {"key": None, "path": None, "holds": None, "used": False}


def use_server_config(path, holds):
    """Load the gateway host's API key from ``path`` (its server config, apikey.py's format; absent: no key): sent
    in the body of each worker added, and, after a 401 to the control-plane key, as the worker API's key."""
    try:
        key = apikey.read_key(path)
    except FileNotFoundError:
        key = None
    _SERVER_KEY.update(key=key, path=path if key else None, holds=holds, used=False)


def old_gateway():
    """Whether the gateway took the API key instead of the control-plane key: sglang-router, from before SMG."""
    return _SERVER_KEY["used"]


def call(base, method, path, body=None):
    try:
        return call_once(base, method, path, body)
    except urllib.error.HTTPError as error:
        if error.code != 401 or not _SERVER_KEY["path"] or _SERVER_KEY["used"]:
            raise
    # sglang-router (before SMG) took the API key on its worker API: asked again, once, with the key it had
    apikey.use_api_key_file(_SERVER_KEY["path"], _SERVER_KEY["holds"])
    _SERVER_KEY["used"] = True
    print(f"gateway_workers: the gateway at {base} does not take the control-plane key; asked with the API key "
          "(a gateway from before SMG)")
    return call_once(base, method, path, body)


def add_worker(base, url, key=None):
    """POST /workers: ``url``, with the key the gateway sends its workers (never printed) when there is one, and
    only to a URL the gateway's own running container publishes (as the Bearer header: apikey.auth_headers).
    ``key``: the worker's own (a rolled worker whose key was rotated in this run), else the gateway host's."""
    holds = _SERVER_KEY["holds"] is not None and _SERVER_KEY["holds"](base)
    key = (key or _SERVER_KEY["key"]) if holds else None
    call(base, "POST", "/workers", {"url": url, **({"api_key": key} if key else {})})


def models_of(worker):
    """The models the gateway lists for a worker (SMG: model_id and models[].id), "unknown" left out."""
    found = {worker.get("model_id")} | {m.get("id") for m in worker.get("models") or () if isinstance(m, dict)}
    return {m for m in found if isinstance(m, str) and m and m != UNKNOWN_MODEL}


def call_once(base, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base.rstrip("/") + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    started = time.monotonic()
    with bounded.open_url(request, TIMEOUT) as reply:
        raw = bounded.read_bounded(reply, started + TIMEOUT, bounded.MAX_GATEWAY_BYTES)
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
        add_worker(base, url)
    for url in removed:
        call(base, "DELETE", f"/workers/{now[url]}")
    deadline = time.monotonic() + SETTLE_SECONDS
    while set(registered(base)) != set(wanted):
        if time.monotonic() > deadline:
            raise SystemExit(f"gateway_workers: the gateway at {base} did not reach the worker set {sorted(wanted)} "
                             f"within {SETTLE_SECONDS} s")
        time.sleep(0.2)
    return added, removed


def routable(worker):
    """Whether the gateway sends this listed worker requests: healthy, and not in SMG's draining state."""
    return worker.get("is_healthy") is True and worker.get("status") != "draining"


def view(directory, base):
    """What the gateway lists now, as one JSON line: the roll counts the pool's workers out of service from it."""
    answers, found = False, []
    if not apikey.loaded() or apikey.auth_headers(base):
        try:
            found = [w for w in call(base, "GET", "/workers").get("workers", []) if isinstance(w, dict)]
            answers = True
        except (urllib.error.URLError, OSError, ValueError, AttributeError):
            found = []
    print(json.dumps({"answers": answers, "listed": sorted(str(w.get("url")) for w in found),
                      "healthy": sorted(str(w.get("url")) for w in found if routable(w))}))
    return 0


@contextlib.contextmanager
def dir_locked(path, wait):
    """
    An exclusive flock on the directory ``path`` itself (opened as
    safefs.open_dir opens it; no lock file to plant a link at), held for the ``with`` block:
    two processes that read a file there, change it and write it back take
    turns instead of losing one's change. Waits at most ``wait`` seconds
    (whoever can open the directory can hold its lock), then raises an
    OSError naming the directory.
    """
    fd = safefs.open_dir(path)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise OSError(errno.EWOULDBLOCK, f"{path} stayed locked by another process for {wait} s") from None
                time.sleep(0.05)
        yield fd
    finally:
        os.close(fd)


def one_worker(directory, base, change):
    """A rolling restart's step for one worker (see the module's docstring); exit code 0 when it holds."""
    url = change.get("remove") or change.get("add")
    adding = "add" in change
    listed = os.path.join(directory, names.WORKERS_FILE)
    # Workers of one pool roll several at a time (sglang_max_unavailable): each one's change to the list is read,
    # made and written back in its turn, never over another's.
    with dir_locked(directory, LOCK_WAIT) if os.path.isdir(directory) else contextlib.nullcontext():
        raw = safefs.read_regular(listed, MAX_WORKERS_FILE_BYTES)   # no link followed: the account can write here
        if raw is not None:
            try:
                now = set(json.loads(raw))
            except (ValueError, TypeError):
                now = set()
            wanted = now | {url} if adding else now - {url}
            if wanted != now:
                stack.write_private(listed, json.dumps(sorted(wanted), indent=1) + "\n",
                                    os.path.join(directory, names.COMPOSE_FILE))
    if apikey.loaded() and not apikey.auth_headers(base):
        print(f"gateway_workers: the gateway's container does not publish {base}, so the key is not sent there; "
              f"nothing to {'add' if adding else 'remove'}")
        return 0
    try:
        have = registered(base)
        if adding and url not in have:
            add_worker(base, url, change.get("api_key") if isinstance(change.get("api_key"), str) else None)
        elif not adding and url in have:
            call(base, "DELETE", f"/workers/{have[url]}")
    except (urllib.error.URLError, OSError) as error:
        print(f"gateway_workers: the gateway at {base} does not answer ({printable(error)}); "
              f"nothing to {'add' if adding else 'remove'}")
        return 0
    deadline = time.monotonic() + (float(change.get("healthy_within", 0)) if adding else 0) + SETTLE_SECONDS
    # a gateway from before SMG, replaced later in this run, is asked for health alone
    model = change.get("model") if adding and not old_gateway() else None
    while True:
        try:
            found = {w["url"]: w for w in call(base, "GET", "/workers").get("workers", [])}
        except (urllib.error.URLError, OSError, ValueError):
            found = None
        if found is not None and (serves(found.get(url, {}), model) if adding else url not in found):
            print(f"gateway_workers: {url} {'is back and healthy' if adding else 'is out'} at {base}"
                  + (f" with model {model}" if adding and model else ""))
            return 0
        if time.monotonic() > deadline:
            print(f"gateway_workers: the gateway at {base} did not "
                  f"{why_not_back(url, (found or {}).get(url), model) if adding else 'drop ' + url} in time",
                  file=sys.stderr)
            return 1
        time.sleep(0.5)


def serves(worker, model):
    """A listed worker is back: healthy and, when ``model`` is given, listed with it (SMG routes a worker listed
    with model "unknown" nothing)."""
    return worker.get("is_healthy") is True and (model is None or model in models_of(worker))


def why_not_back(url, worker, model):
    if worker is None or worker.get("is_healthy") is not True:
        return f"report {url} healthy"
    return printable(f"list {url} with model {model} (it lists {sorted(models_of(worker)) or [UNKNOWN_MODEL]}: it "
                     "could not read the worker's /v1/models, is the gateway host's sglang_api_key_file the "
                     "worker's key?)")


def ready(base, change):
    """A gateway just recreated: wait until /health answers 200 and it lists every worker of ``change["healthy"]``
    routable, at most ``change["ready_within"]`` seconds; exit code 0 when it does."""
    wanted = set(change.get("healthy") or ())
    deadline = time.monotonic() + float(change["ready_within"])
    why = "it does not answer /health"
    while True:
        try:
            started = time.monotonic()
            with bounded.open_url(urllib.request.Request(base.rstrip("/") + "/health"), TIMEOUT, key=False) as reply:
                bounded.read_bounded(reply, started + TIMEOUT, bounded.MAX_GATEWAY_BYTES)
            found = call(base, "GET", "/workers").get("workers", [])
            missing = wanted - {w.get("url") for w in found if isinstance(w, dict) and routable(w)}
            if not missing:
                print(f"gateway_workers: the gateway at {base} answers and lists its {len(wanted)} worker(s) healthy")
                return 0
            why = f"it does not list {', '.join(sorted(missing))} healthy"
        except (urllib.error.URLError, OSError, ValueError, AttributeError) as error:
            why = f"it does not answer ({printable(error)})"
        if time.monotonic() > deadline:
            print(printable(f"gateway_workers: the gateway at {base} is not ready after {change['ready_within']} s: "
                            f"{why}"), file=sys.stderr)
            return 1
        time.sleep(0.5)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    directory, base = argv[0], argv[1]
    owner = stack.gateway(os.path.basename(directory.rstrip("/")))
    holds = lambda url: stack.holds(url, *owner)   # noqa: E731
    home = os.path.dirname(os.path.dirname(os.path.abspath(directory)))   # the gateway's directory: router/<slug>/
    use_server_config(os.path.join(home, names.SECRETS_DIR, names.SERVER_CONFIG), holds)
    try:
        apikey.use_api_key_file(argv[2] if len(argv) > 2 else None, holds)
    except FileNotFoundError:
        # Not on this gateway host yet (its own run has not written it: a first deploy, a worker rolling first).
        # The gateway's launcher reads the key from this very file when it starts, so no gateway running now
        # requires it: go on without one, as for a gateway without a key.
        pass
    wanted = json.loads(sys.stdin.read())
    if isinstance(wanted, dict):
        if wanted.get("view"):
            return view(directory, base)
        if "ready_within" in wanted:
            return ready(base, wanted)
        return one_worker(directory, base, wanted)
    with dir_locked(directory, LOCK_WAIT):
        stack.write_private(os.path.join(directory, names.WORKERS_FILE), json.dumps(sorted(wanted), indent=1) + "\n",
                            os.path.join(directory, names.COMPOSE_FILE))
    if apikey.loaded() and not apikey.auth_headers(base):
        print(f"gateway_workers: {names.WORKERS_FILE} written; the gateway's container does not publish {base} (not "
              "running yet, or published elsewhere), so the key is not sent there; it reads the file when it starts")
        return 0
    try:
        added, removed = sync(base, wanted)
    except (urllib.error.URLError, OSError) as error:
        print(f"gateway_workers: {names.WORKERS_FILE} written; the gateway does not answer ({printable(error)}), "
              "it reads the file when it starts")
        return 0
    print(printable(f"gateway_workers: added {added or 'none'}, removed {removed or 'none'}; the gateway has "
                    f"{len(wanted)} worker(s)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
