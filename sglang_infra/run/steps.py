"""What several task files do alike, as plain functions that call the
operations: a file the service account owns, a compose.yaml that compose
accepts before it replaces the old one, and a set of scripts put in place.
The operations keep the names the task files give them (the run log's)."""

from __future__ import annotations

from typing import Mapping

from ..hostside.names import COMPOSE_FILE
from ..operations.files import checked_file


def account_file(name: str, dest: str, content: str, account: str, mode: str = "644", check: str | None = None):
    """checked_file: ``dest`` holds ``content``, owned by ``account`` and its group."""
    return checked_file(name=name, dest=dest, content=content, user=account, group=account, mode=mode, check=check)


def compose_file(name: str, directory: str, content: str, account: str):
    """``directory``/compose.yaml holds ``content``; a new version replaces the old one only after the host's own
    `docker compose config -q` accepts it, in that directory."""
    return account_file(name, f"{directory}/{COMPOSE_FILE}", content, account,
                        check=f"docker compose --project-directory {directory} -f {{candidate}} config -q")


def scripts_in_place(directory: str, scripts: Mapping[str, str], account: str) -> None:
    """Each of ``scripts`` (file name: text, in that order) as ``directory``/name: a script 0755, the gateway's
    launcher (launch.py, which python reads) 0644."""
    for name, text in scripts.items():
        account_file(f"Ensure {directory}/{name} is up to date", f"{directory}/{name}", text, account,
                     mode="644" if name.endswith(".py") else "755")
