"""A worker's home (its docker/ folder, compose.yaml, .env and validation scripts) whose gate passed with a given
container serving, stamped by this version's stamp.digest: the start of the unit tests of the gate's stamp."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from sglang_infra.hostside import names
from sglang_infra.hostside.gate import stamp


def plain_scripts(home: Path) -> None:
    """Validation scripts that pass and carry nothing."""
    for name in names.VALIDATION_SCRIPTS:
        (home / name).write_text("#!/bin/bash\nexit 0\n")


def gated_home(tmp_path: Path, container: Mapping[str, Any],
               scripts: Callable[[Path], None] = plain_scripts) -> Path:
    """tmp_path/home, its files written (the scripts by ``scripts``) and stamped as gated with ``container``."""
    home = tmp_path / "home"
    (home / names.DOCKER_DIR).mkdir(parents=True)
    (home / names.DOCKER_DIR / names.COMPOSE_FILE).write_text("services: {sglang: {image: x}}\n")
    (home / names.DOCKER_DIR / names.ENV_FILE).write_text("SGLANG_UID=999\n")
    scripts(home)
    (home / names.DOCKER_DIR / stamp.STAMP).write_text(stamp.digest(str(home), dict(container)) + "\n")
    return home
