"""Unit tests of the custom facts and operations, the way pyinfra tests its
own: facts in, commands out, with a no-op case for each operation."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pyinfra_cli  # noqa: F401  (see below)
import pytest
from pyinfra.api import FileUploadCommand, FunctionCommand, StringCommand

# pyinfra's command line monkey-patches threading (gevent) when first imported, as a real run does before anything
# starts a thread. Imported above, before any test, so that every unit test runs in that one state whatever the
# order: imported later, by the first refusal, while an earlier test's server threads still ran, it broke the
# import locks ("cannot release un-acquired lock") and hung the run.

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


@contextmanager
def on_host(fake: FakeHost):
    """Run with ``fake`` as pyinfra's current host, the way pyinfra sets the host an operation runs for:
    every module of sglang_infra/operations/ that reads ``host`` sees it."""
    from pyinfra.context import ctx_host

    with ctx_host.use(fake):
        yield fake


class OsThread:
    """``target`` run on an operating-system thread, with the standard library's own socket class: a fake server
    for host code that speaks on _socket itself (dockerapi.py, unitstate.py: a read imports no socket module), whose
    blocking calls would stall the gevent hub that pyinfra's patched threading runs a Thread's greenlet on."""

    def __init__(self, target):
        import gevent.monkey

        self.done = gevent.monkey.get_original("_thread", "allocate_lock")()
        self.done.acquire()

        def run():
            try:
                target()
            except OSError:   # the client went away (the code under test gave up on an answer): the test judges it
                pass
            finally:
                self.done.release()

        gevent.monkey.get_original("_thread", "start_new_thread")(run, ())

    @staticmethod
    def socket(*args):
        import gevent.monkey

        return gevent.monkey.get_original("socket", "socket")(*args)

    @staticmethod
    def stop(server):
        """Close a listening ``server``, waking a thread that waits in its accept()."""
        import socket

        try:
            server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        server.close()

    def join(self, timeout):
        if self.done.acquire(timeout=timeout):
            self.done.release()


def _short(text: str) -> str:
    """A shipped host program inside a command, as <hostside/NAME.py>: fixtures stay readable."""
    import shlex

    from sglang_infra.machine import ship

    for name in ship.programs():
        text = text.replace(shlex.quote(ship.packed(name)), f"<hostside/{name.replace('.', '/')}.py>")
    return text


def command_text(command) -> str:
    if isinstance(command, FileUploadCommand) and isinstance(command.src, str):
        return f"upload {command.src} {command.dest}"
    if isinstance(command, FileUploadCommand):
        content = command.src.getvalue()
        return f"upload {command.dest} sha256={hashlib.sha256(content).hexdigest()}"
    if isinstance(command, StringCommand):
        text = _short(str(command))
        stdin = command.connector_arguments.get("_stdin")
        if text.startswith("python3 -I -c <hostside/write/put.py>") and isinstance(stdin, str):
            text += f" <stdin sha256={hashlib.sha256(stdin.encode()).hexdigest()}>"  # the file's content
        return text
    if isinstance(command, FunctionCommand):
        args = tuple(_short(arg) if isinstance(arg, str) else arg for arg in command.args)
        return _short(f"function {command.function.__name__}{args}")
    return _short(str(command).strip())


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
    # A gateway host needs both (refusals.check_gateway_host): the SMG image, pinned, and the control-plane key.
    data["sglang_router_image"] = GATEWAY_IMAGE
    data["sglang_router_admin_key_file"] = str(FIXTURES / "router-admin.key")
    return data


GATEWAY_IMAGE = "registry.example.net/smg-gateway@sha256:" + "ab" * 32


def nvidia_smi(case: str | None) -> dict | None:
    """The snapshot's gpus section from a recorded (or hand-written) nvidia-smi output, None for no GPU."""
    if case is None:
        return None
    base = FIXTURES / "nvidia-smi"
    return {"query": (base / f"{case}.query.csv").read_text().splitlines(),
            "topo": (base / f"{case}.topo.txt").read_text().splitlines(), "runtimes": ["nvidia", "runc"]}


def converged_snapshot(case: str | None = "rtx4090-2gpu-node", **sections) -> dict:
    """A snapshot of a converged Debian 13 host: what plan.resolve needs from a host."""
    docker = {"cli": "/usr/bin/docker", "api": True, "active": "active", "enabled": "enabled",
              "compose_plugin": "/usr/libexec/docker/cli-plugins/docker-compose", "images": {}, "runtimes": ["runc"]}
    return {"python3": "/usr/bin/python3", "os": {"id": "debian", "version": "13", "arch": "amd64"},
            "account": {"user": None, "group": None, "supplementary": [], "password_locked": None,
                        "extra_groups": {}, "admins_present": [], "uid_owner": None, "gid_owner": None},
            "docker": docker, "gpus": nvidia_smi(case), "tools": {"venv_module": True}, **sections}


def plan_for(data: dict, case: str | None = "rtx4090-2gpu-node", **sections):
    from sglang_infra.plan.resolve import resolve

    return resolve("gpu-01", data, converged_snapshot(case, **sections))


def promtool(*args: str, cwd):
    """promtool (Debian's prometheus, which scripts/setup-machine.sh installs) run in ``cwd``; missing, the test
    fails saying so."""
    import shutil
    import subprocess

    import pytest

    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed: scripts/setup-machine.sh installs it (Debian's package prometheus)",
                    pytrace=False)
    return subprocess.run([path, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture(autouse=True)
def _umask_restored():
    """A pull run in-process (hfpull.main) sets the shared cache's umask 002 for the whole process, as its own
    process on a host should; the tests after it get the umask they started with (a folder a later test makes
    would otherwise come out group-writable, and be refused, rightly)."""
    kept = os.umask(0o022)
    os.umask(kept)
    yield
    os.umask(kept)


@pytest.fixture(autouse=True)
def _hub_client_restored():
    """hfpull.main() and lockgen.resolve_model() install the pull's bounded client for the whole process (as they
    should: one process, one purpose); a test after them that drives huggingface_hub's own download gets the
    library's client back."""
    yield
    if "huggingface_hub" in sys.modules:
        from huggingface_hub import set_client_factory
        from huggingface_hub.utils._http import default_client_factory

        set_client_factory(default_client_factory)
