"""Starts the SGLang Model Gateway inside its container: sglang-router's own
launcher (launch_router.parse_router_args, then launch_router, what
`python3 -m sglang_router.launch_router` runs), called in this process so
that two things come from files instead of the command line:

- the worker URLs, from workers.json (the deploy keeps it equal to the
  workers that passed their gate, and adds or removes them at run time
  through the gateway's /workers API; a restarted gateway starts from it);
- the API key, from the server's private config (`api-key: "KEY"`, mounted
  read-only), so it is in no command line: not in `ps`, compose.yaml or
  `docker inspect`.

    python3 launch.py WORKERS_JSON KEY_FILE|- [GATEWAY FLAGS ...]
"""

import json
import sys

from . import apikey


def api_key(path):
    """The key in the server's config file (apikey.py reads it), or None for "-"."""
    if path == "-":
        return None
    key = apikey.read_key(path)
    if key is None:
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
    """The gateway's arguments: the flags given, the worker URLs and, if any, the key."""
    workers_file, key_file, flags = argv[0], argv[1], list(argv[2:])
    key = api_key(key_file)
    return [*flags, "--worker-urls", *worker_urls(workers_file), *(["--api-key", key] if key else [])]


def main(argv=None):
    args = arguments(sys.argv[1:] if argv is None else argv)
    from sglang_router.launch_router import launch_router, parse_router_args

    launch_router(parse_router_args(args))


if __name__ == "__main__":
    main()
