"""A settled host takes one no-op instead of planning every operation (issue 45).

A host is settled when its last run found it exactly as its plan wants it and nothing has moved since: the
stamp that run left on the host (hostside/read/settled.py, read back by the one snapshot the preflight takes
anyway) names the same plan fingerprint and the same snapshot digest this run works out. The fingerprint
covers everything a host's operations are made from: the whole resolved plan (every field, secrets and rendered
files included, the fleet-derived values the preflight set on it), and the deploy's own code and templates.
The snapshot digest covers everything the operations compare against: any drift (a mode, a file, the
account, the container, the cache, a GPU or the driver) changes the snapshot, so the host takes the full plan,
which finds and repairs the drift, and `--dry --diff` shows it as before. What moves by itself while nothing
changes (a container's uptime, each GPU's temperature, power draw, utilisation, memory used and clocks) is left
out of the digest: every real GPU host would otherwise take the full plan on every run (issue 56).

Conservative where hosts involve each other: when any host of the run takes the full plan, a host whose
operations reach other hosts or depend on their state (a gateway host, a worker some gateway fronts, a
multi-node group member, a monitor, a host with peer sources) takes the full plan too; only a standalone worker
still skips. A host with a peer door skips only when its snapshot found the door held by the door's own nginx
with its certificate (the snapshot reads that as the run's door check does; who holds the port is in its digest);
no host skips under `sglang_validate=always`, in the status report or in a `--dry` run (which
shows every operation's plan, as before). The run's log says why each stamped host takes the full plan
(unsettled_because: its stamp differs; held_back: it matches, and one of these rules holds it back).

The stamp is written at the end of a run, outside any operation (it is the run's record, not a change of the
host's state), for each host that changed nothing, failed nothing and whose stamp differs: after a run that
changed a host, the next run takes the full plan once more, finds nothing to change and stamps it. The
inventory name is left out of the fingerprint: it is never written on a host by itself (what a plan writes
that names it is in the plan's other fields), so the aliases of one host (bench/fleet.py) write one stamp.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gevent
from pyinfra import logger
from pyinfra.api import command as pyinfra_command
from pyinfra.api.state import BaseStateCallback
from pyinfra.version import __version__ as PYINFRA_VERSION

from ..hostside.read import settled as stamp_file
from ..plan.inventoryfile import run_parameters
from ..plan.types import HostPlan
from ..status import statusrows
from .operation import connector_arguments

ROOT = Path(__file__).resolve().parents[2]
# The deploy's own code, templates and defaults: a change of any of them changes every plan's fingerprint.
CODE = ("deploy.py", "sglang_infra", "tasks", "templates", "group_data")
_MARK = "_sglang_counts_for_settled"


class Unfingerprintable(TypeError):
    """A plan field of a type canonical() cannot write the same way in every run."""


_PLAIN = frozenset((str, int, float, bool))   # exactly these types (a str or int enum is an enum: below)


def canonical(value: Any) -> Any:
    """``value`` as plain JSON that is the same in every run for the same value: dataclasses and named tuples
    by field (every field, those left out of repr too), mappings by sorted key, sets sorted, bytes as hex."""
    if value is None or type(value) in _PLAIN:   # most of a plan's values: returned before the costlier checks
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"@": type(value).__name__,
                **{f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {"@": type(value).__name__, **{k: canonical(v) for k, v in zip(value._fields, value)}}
    if isinstance(value, Mapping):   # sorted by key alone: a mapping has each key once
        return {"@map": sorted(([canonical(k), canonical(v)] for k, v in value.items()),
                               key=lambda pair: json.dumps(pair[0]))}
    if isinstance(value, (set, frozenset)):
        return {"@set": sorted((canonical(v) for v in value), key=json.dumps)}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return {"@bytes": bytes(value).hex()}
    if isinstance(value, enum.Enum):
        return {"@enum": f"{type(value).__name__}.{value.name}"}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise Unfingerprintable(f"cannot fingerprint a {type(value).__name__}: {value!r:.80}")


@functools.cache
def code_digest(root: Path = ROOT) -> str:
    """sha256 of every file of the deploy's code, templates and defaults (by path and content), and pyinfra's
    version: worked out once per run."""
    digest = hashlib.sha256(f"pyinfra {PYINFRA_VERSION}\n".encode())
    for top in CODE:
        for relative in _code_files(root, top):
            digest.update(f"{relative}\n".encode())
            with open(os.path.join(root, relative), "rb") as file:
                digest.update(hashlib.sha256(file.read()).digest())
    return digest.hexdigest()


def _code_files(root: Path, top: str) -> list[str]:
    """Every file under ``root``/``top`` (or ``top`` itself, a file), by its path from ``root``, in the order of
    their paths' parts, none in or named __pycache__: pathlib's rglob("*") of the same files walked with os.walk
    (a third of the time: rglob made a Path of each entry). Links to files are read through; a linked folder is
    not entered (rglob's rules)."""
    path = os.path.join(root, top)
    if os.path.isfile(path):
        return [top]
    found: list[str] = []
    for folder, folders, names in os.walk(path):
        folders[:] = [name for name in folders if name != "__pycache__"]
        base = os.path.relpath(folder, root)
        found.extend(os.path.join(base, name) for name in names
                     if name != "__pycache__" and os.path.isfile(os.path.join(folder, name)))
    return sorted(found, key=lambda relative: relative.split(os.sep))


def plan_fingerprint(plan: HostPlan, code: str | None = None) -> str:
    """sha256 of the plan (every field but the inventory name) and of the code that turns it into operations."""
    fields = {f.name: canonical(getattr(plan, f.name)) for f in dataclasses.fields(plan) if f.name != "name"}
    text = json.dumps({"code": code or code_digest(), "plan": fields}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


# Each GPU's live readings (hostside/gpu/nvsmi.py parse()'s keys): they move by themselves on every real GPU,
# from one second to the next, and no operation compares against them. What the GPU is (its index, bus id, uuid,
# name, memory total, power limit, persistence, fabric, ECC faults, retired and remapped rows) stays in.
GPU_LIVE = ("temperature_c", "slowdown_c", "power_w", "utilization", "memory_utilization", "memory_used_mib",
            "clock_reasons")


def _steady_gpu(gpu: Mapping[str, Any]) -> dict[str, Any]:
    """One GPU's reading without GPU_LIVE; its ECC counts kept as the uncorrected ones alone (corrected errors
    tick up on a healthy card); whether it is at its slowdown temperature kept as a verdict (a fault the
    preflight refuses, gpus.gpu_faults)."""
    temperature, slowdown = gpu.get("temperature_c"), gpu.get("slowdown_c")
    steady = {k: v for k, v in gpu.items() if k not in GPU_LIVE}
    for key in ("ecc_volatile", "ecc_aggregate"):
        if isinstance(steady.get(key), Mapping):
            steady[key] = {"uncorrected": steady[key].get("uncorrected")}
    steady["hot"] = temperature is not None and slowdown is not None and temperature >= slowdown
    return steady


def _steady(value: Any) -> Any:
    """The snapshot without what changes by itself while nothing changes and no operation compares: a
    container's status text ("Up 3 minutes") and its healthcheck's last verdict (the status report's alone),
    and the stamp itself."""
    if isinstance(value, dict):
        volatile = {"status", "health"} if {"started_at", "state"} <= value.keys() else set()
        return {k: _steady(v) for k, v in value.items() if k not in volatile and k != "settled"}
    if isinstance(value, list):
        return [_steady(v) for v in value]
    return value


def _steady_gpus(section: Any) -> Any:
    """The snapshot's gpus section with each GPU of its driver reading (nvsmi.parse) as _steady_gpu keeps it."""
    driver = section.get("driver") if isinstance(section, Mapping) else None
    if not isinstance(driver, Mapping) or not isinstance(driver.get("gpus"), list):
        return section
    gpus = [_steady_gpu(g) if isinstance(g, Mapping) else g for g in driver["gpus"]]
    return {**section, "driver": {**driver, "gpus": gpus}}


def snapshot_digest(snapshot: Mapping[str, Any]) -> str:
    """sha256 of the snapshot less what moves by itself (_steady, and each GPU's live readings, _steady_gpus)."""
    steady = _steady({**snapshot, "gpus": _steady_gpus(snapshot["gpus"])} if "gpus" in snapshot else dict(snapshot))
    text = json.dumps(steady, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def involves_others(plan: HostPlan) -> bool:
    """Its operations reach other hosts or depend on their state: it may not skip while another host changes."""
    return bool(plan.runs_gateways or plan.monitors or plan.roll is not None or plan.node_group is not None
                or plan.peer_door is not None or plan.peer_sources)


def door_unheld(plan: HostPlan, snapshot: Mapping[str, Any]) -> bool:
    """It keeps a peer door that its snapshot did not find held by the door's own nginx with its certificate
    (hostside/read/doorcheck.py): it takes the full plan, whose door check fails it or finds the door up."""
    if plan.peer_door is None:
        return False
    door = (snapshot.get("peer") or {}).get("door") or {}
    return not (door.get("held") and door.get("cert"))


def matches(plan: HostPlan, snapshot: Mapping[str, Any], stamp: Mapping[str, str]) -> bool:
    """The host may skip by itself: its snapshot carries ``stamp`` (the one this run works out for it), it is not
    gated on every run, and its door (if it keeps one) was found held."""
    return snapshot.get("settled") == stamp and not (plan.gate.always or door_unheld(plan, snapshot))


def decide(plans: Mapping[str, HostPlan | None], snapshots: Mapping[str, Mapping[str, Any] | None],
           report: bool = False, whole: bool = True, dry: bool = False) -> tuple[set[str], dict[str, dict[str, str]]]:
    """(the hosts that skip, the stamp each resolved host would get): see the module's docstring. ``whole``:
    the run has every host of the inventory (not --limit'ed); a limited run counts as one with a full plan."""
    stamps, matching = {}, set()
    for name, plan in plans.items():
        snapshot = snapshots.get(name)
        if plan is None or snapshot is None:
            continue
        stamps[name] = {"plan": plan_fingerprint(plan), "snapshot": snapshot_digest(snapshot)}
        if matches(plan, snapshot, stamps[name]) and not (report or dry):
            matching.add(name)
    if matching != set(plans) or not whole:
        matching = {name for name in matching if not involves_others(plans[name])}   # type: ignore[arg-type]
    return matching, stamps


def held_back(plans: Mapping[str, HostPlan | None], snapshots: Mapping[str, Mapping[str, Any] | None],
              stamps: Mapping[str, Mapping[str, str]], skips: set[str], whole: bool = True) -> dict[str, str]:
    """Why each host whose stamp matches still takes the full plan (decide()'s other rules), in a few words: the
    run's log says it beside unsettled_because(), so a host planned in full is never so without a word."""
    stamped = {}
    for name, stamp in stamps.items():
        plan, snapshot = plans[name], snapshots[name]
        if plan is not None and snapshot is not None and snapshot.get("settled") == stamp:
            stamped[name] = (plan, snapshot)
    causes = sorted(set(plans) - {name for name, (plan, snapshot) in stamped.items()
                                  if matches(plan, snapshot, stamps[name])})
    said = ", ".join(causes[:3]) + (f" and {len(causes) - 3} more" if len(causes) > 3 else "")
    out = {}
    for name, (plan, snapshot) in sorted(stamped.items()):
        if name in skips:
            continue
        if plan.gate.always:
            out[name] = "sglang_validate is always (it is gated on every run)"
        elif door_unheld(plan, snapshot):
            out[name] = "its snapshot did not find its peer door held by the door's nginx with its certificate"
        elif not whole:
            out[name] = "it involves other hosts, and this run has not every host of the inventory (--limit)"
        else:
            out[name] = f"it involves other hosts, and {said} {'takes' if len(causes) == 1 else 'take'} the full plan"
    return out


def unsettled_because(found: Mapping[str, str] | None, wanted: Mapping[str, str]) -> str | None:
    """Why a host with a stamp does not match it, in a few words; None without a stamp or when it matches."""
    if not found or found == wanted:
        return None
    differs = [what for key, what in (("plan", "its plan (data, code or the fleet)"),
                                      ("snapshot", "its snapshot (a change on the host)")) if found[key] != wanted[key]]
    return f"{' and '.join(differs)} differ from its last settled run's"


# ---------------------------------------------------------------- the run's side

_runs: dict[int, tuple[set[str], dict[str, dict[str, str]], dict[str, Any]]] = {}
_changed: dict[int, set[str]] = {}


def _decided(state, plans: Mapping[str, HostPlan | None], snapshots: Mapping[str, dict | None]
             ) -> tuple[set[str], dict[str, dict[str, str]], dict[str, Any]]:
    key = id(state)
    if key not in _runs:
        report, whole, dry = (bool(statusrows.requested()), len(plans) == len(state.inventory),
                              bool(run_parameters().get("dry")))
        skips, stamps = decide(plans, snapshots, report, whole, dry)
        found = {name: (snapshots.get(name) or {}).get("settled") for name in stamps}
        whys = {name: unsettled_because(found[name], stamps[name]) for name in stamps}
        if not (report or dry):   # a --dry run and the status report take the full plan anyway
            whys.update(held_back(plans, snapshots, stamps, skips, whole))
        for name, said in sorted(whys.items()):
            if said:
                logger.info(f"[{name}] takes the full plan: {said}")
        _runs[key] = (skips, stamps, found)
    return _runs[key]


def stamp_of(host) -> str:
    """The plan fingerprint this run works out for ``host`` (after unchanged() said True)."""
    return _runs[id(host.state)][1][host.name]["plan"]


def unchanged(host, plans: Mapping[str, HostPlan | None], snapshots: Mapping[str, dict | None]) -> bool:
    """True: this host is settled: deploy.py includes tasks/settled.py instead of the tasks. False: it takes the
    full plan. ``plans`` and ``snapshots``: every host's, as the preflight (which has passed for ``host``) made and
    read them (run/preflight.py plans() and snapshots()); the decision is made once per run, for every host."""
    return host.name in _decided(host.state, plans, snapshots)[0]


def _counting(execute):
    @functools.wraps(execute)
    def wrapper(self, state, host, connector_arguments):
        _changed.setdefault(id(state), set()).add(host.name)
        return execute(self, state, host, connector_arguments)

    setattr(wrapper, _MARK, True)
    return wrapper


class _Stamper(BaseStateCallback):
    """After the run's last operation: the stamp of each host that changed and failed nothing, where it differs."""

    def operation_end(self, state, op_hash):
        order = state.get_op_order()
        if not order or op_hash != order[-1] or id(state) not in _runs:
            return
        _, stamps, found = _runs[id(state)]
        changed = _changed.get(id(state), set())
        failed = {host.name for host in state.failed_hosts}
        due = [host for host in state.inventory.get_active_hosts() if host.name in stamps
               and host.name not in changed | failed and found.get(host.name) != stamps[host.name]]
        jobs = [gevent.spawn(_write, state, host, stamps[host.name]) for host in due]
        gevent.joinall(jobs, timeout=120)


def _write(state, host, stamp: dict[str, str]) -> None:
    arguments = {**connector_arguments(state, host), "_stdin": json.dumps(stamp, sort_keys=True)}
    ok, _ = host.run_shell_command(stamp_file.write_command(), print_output=False, **arguments)
    if not ok:
        logger.warning(f"[{host.name}] could not record its settled stamp: its next run takes the full plan")


_installed: set[int] = set()


def install(state) -> None:
    """Count the hosts any command ran on, and stamp the settled ones after the last operation. Idempotent;
    nothing is stamped in a --dry run (no operation runs)."""
    for name in ("StringCommand", "FileUploadCommand", "FileDownloadCommand", "FunctionCommand", "RsyncCommand"):
        cls = getattr(pyinfra_command, name)
        if not getattr(cls.execute, _MARK, False):
            cls.execute = _counting(cls.execute)
    if id(state) not in _installed:
        _installed.add(id(state))
        state.add_callback_handler(_Stamper())
