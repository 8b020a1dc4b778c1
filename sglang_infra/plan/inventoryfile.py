"""The inventory file, as pyinfra itself reads it: for the scripts around the
deploy (load, match), and, inside a run, which file this run's inventory is
(the lock lives beside it; its name is a group pyinfra adds).

    python3 -m sglang_infra.plan.inventoryfile match INVENTORY PATTERN
        the hosts --limit PATTERN would take; exit 1 if none
    python3 -m sglang_infra.plan.inventoryfile canary INVENTORY PATTERN
        the same, and exit 3 when none of them serves a model (gateway hosts only: a gate proving nothing)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent.parent


def load(path: str):
    """pyinfra's Inventory of ``path`` (group_data included), without connecting to anything."""
    from pyinfra.api import State
    from pyinfra.context import ctx_state
    from pyinfra_cli.inventory import make_inventory

    ctx_state.set(State())
    return make_inventory(str(Path(path).resolve()), cwd=str(PROJECT_DIR))


def matching(inventory, pattern: str) -> list[str]:
    """The host names ``--limit pattern`` selects: a group's hosts, else host names matching the glob."""
    # pyinfra's own rule for --limit and --exclude, so the two never disagree.
    from pyinfra_cli.cli import _get_inventory_pattern_matches

    return sorted(host.name for host in _get_inventory_pattern_matches(inventory, [pattern], "--limit"))


def inventory_dir() -> str | None:
    """The directory of this pyinfra run's inventory file, or None (not a pyinfra run, or hosts given on the
    command line)."""
    inventory = inventory_file()
    return os.path.dirname(os.path.abspath(inventory)) if inventory else None


_parsed: dict[tuple[str, ...], dict] = {}   # run_parameters() by command line: parsed once, not once per host


def run_parameters() -> dict:
    """This pyinfra run's command-line parameters ({} when this is not pyinfra's command line), read with pyinfra's
    own parser: deploy files are loaded in a greenlet, where click's context of the run is not visible. Parsed once
    per command line (click's parse of pyinfra's 40 options is about 1 ms, and every host's judging asks)."""
    if "pyinfra_cli.cli" not in sys.modules:
        return {}   # not pyinfra's command line (importing it would patch threading for the whole process)
    argv = tuple(sys.argv[1:])
    if argv not in _parsed:
        from pyinfra_cli.cli import cli

        try:
            _parsed[argv] = dict(cli.make_context("pyinfra", list(argv), resilient_parsing=True).params)
        except Exception:  # not pyinfra's command line
            _parsed[argv] = {}
    return dict(_parsed[argv])


def inventory_file() -> str | None:
    """This pyinfra run's inventory file, or None."""
    inventory = run_parameters().get("inventory")
    return inventory if inventory and os.path.isfile(inventory) else None


def serving(inventory, names: list[str], path: str) -> list[str]:
    """Those of ``names`` that serve a model (in any group but `router`, roles.roles)."""
    from .roles import groups_of, roles

    return [name for name in names if roles(groups_of(inventory.get_host(name), path))[0]]


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("match", "canary"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    inventory_path, pattern = argv[1], argv[2]
    inventory = load(inventory_path)
    names = matching(inventory, pattern)
    if not names:
        groups = sorted(name for name in inventory.groups if name != "all")
        print(f"'{pattern}' matches no host of {inventory_path}: name one of its hosts "
              f"({', '.join(h.name for h in inventory)}) or groups ({', '.join(groups) or 'none'})", file=sys.stderr)
        return 1
    if argv[0] == "canary" and not serving(inventory, names, inventory_path):
        print(f"'{pattern}' takes only gateway hosts ({', '.join(names)}), which serve no model: their gate proves "
              "nothing about a new image, model or lock. Name a canary with at least one host that serves a model "
              "(a host in any group but router)", file=sys.stderr)
        return 3
    print(" ".join(names))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
