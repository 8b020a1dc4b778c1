"""Unit tests of the custom facts and operations, the way pyinfra tests its
own: facts in, commands out, with a no-op case for each operation."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

from pyinfra.api import FileUploadCommand, FunctionCommand, StringCommand

FIXTURES = Path(__file__).resolve().parent / "fixtures"


class FakeHost:
    """Stands in for pyinfra's host context inside one operation call."""

    name = "unit-test-host"

    def __init__(self, facts: dict, executing: bool = False):
        self.facts = facts
        self.noops: list[str] = []
        self.fact_calls: list[tuple[str, dict]] = []
        self.state = SimpleNamespace(is_executing=executing)

    def get_fact(self, cls, **kwargs):
        self.fact_calls.append((cls.__name__, kwargs))
        value = self.facts[cls.__name__]
        if isinstance(value, dict) and set(value) == {"output"}:
            return cls().process(value["output"])  # recorded command output, processed by the fact
        return value

    def noop(self, message: str) -> None:
        self.noops.append(message)

    def get_temp_filename(self, key: str) -> str:
        return f"/tmp/pyinfra-{hashlib.sha1(key.encode()).hexdigest()}"


def command_text(command) -> str:
    if isinstance(command, FileUploadCommand) and isinstance(command.src, str):
        return f"upload {command.src} {command.dest}"
    if isinstance(command, FileUploadCommand):
        content = command.src.getvalue()
        return f"upload {command.dest} sha256={hashlib.sha256(content).hexdigest()}"
    if isinstance(command, StringCommand):
        return str(command)
    if isinstance(command, FunctionCommand):
        return f"function {command.function.__name__}{tuple(command.args)}"
    return str(command).strip()


def load_cases(kind: str) -> list[tuple[str, dict]]:
    cases = []
    for path in sorted((FIXTURES / kind).glob("*.json")):
        cases.append((path.stem, json.loads(path.read_text())))
    return cases


def pinned_defaults() -> dict:
    """group_data/all.py with a revision pinned for every registry entry (it ships them unset, on purpose)."""
    import runpy

    data = {k: v for k, v in runpy.run_path(str(FIXTURES.parent.parent.parent / "group_data" / "all.py")).items()
            if k.startswith("sglang_")}
    data["sglang_models"] = {key: {**entry, "revision": hashlib.sha1(key.encode()).hexdigest()}
                             for key, entry in data["sglang_models"].items()}
    return data
