"""Starts the Shepherd Model Gateway (SMG 1.13.0) inside its container: SMG's
own launcher (smg/launch_router.py: parse_router_args, then launch_router,
what `smg launch` runs), called in this process so that three things come
from files instead of the command line:

- the worker URLs, from workers.json (the deploy keeps it equal to the
  workers that passed their gate, and adds or removes them at run time
  through the gateway's /workers API; a restarted gateway starts from it);
- the API key, from the server's private config (`api-key: "KEY"`, mounted
  read-only): SMG's --api-key, which clients must send and the gateway
  sends on to its workers;
- the control-plane key, from router/.secrets/control-plane.yaml (the same
  format, mounted read-only): --control-plane-api-keys with the admin role,
  the only key the worker API (/workers) takes.

None is in a command line: not in `ps`, compose.yaml or `docker inspect`.

    python3 launch.py WORKERS_JSON KEY_FILE|- CONTROL_PLANE_FILE [GATEWAY FLAGS ...]
"""

import json
import sys

from . import apikey, names


def api_key(path):
    """The key in a config file (apikey.py reads it), or None for "-"."""
    if path == "-":
        return None
    key = apikey.read_key(path)
    if not key:
        raise SystemExit(f"launch.py: {path} has no {apikey.KEY_FIELD} line")
    return key


def worker_urls(path):
    try:
        with open(path, encoding="utf-8") as handle:
            urls = json.load(handle)
    except FileNotFoundError:
        return []
    if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
        raise SystemExit(f"launch.py: {path} is not a JSON list of URLs")
    return urls


def arguments(argv):
    """The gateway's arguments: the flags given, the worker URLs, the control-plane key and, if any, the API key."""
    workers_file, key_file, control_file, flags = argv[0], argv[1], argv[2], list(argv[3:])
    key = api_key(key_file)
    admin = api_key(control_file)
    if admin is None:
        raise SystemExit("launch.py: no control-plane key file: the worker API would take the client key")
    control = f"{names.CONTROL_PLANE_KEY_ID}:{names.CONTROL_PLANE_KEY_ID}:admin:{admin}"
    return [*flags, "--worker-urls", *worker_urls(workers_file), "--control-plane-api-keys", control,
            *(["--api-key", key] if key else [])]


def main(argv=None):
    args = arguments(sys.argv[1:] if argv is None else argv)
    from smg.launch_router import launch_router, parse_router_args

    launch_router(parse_router_args(args))


if __name__ == "__main__":
    main()
