"""Refuse bad host data before any operation runs on any host.

Two stages, both run while pyinfra prepares the deploy, before it executes
anything:
- `check_data`: the data alone (types, typos, unpinned image, impossible
  combinations). Pure, so it is unit-tested without hosts.
- `check_host_state`: the data against what the host already is (an account
  with other ids, admins that do not exist, an unsupported OS). Read-only
  facts only.

Every message names the host, the key and the fix.
"""

from __future__ import annotations

import difflib
from typing import Any, Mapping

from pyinfra.api.exceptions import PyinfraError

from . import models, platforms, toolchain
from .facts import engine_works
from .gpus import GpuInventory, derive_flags, plan_problems
from .render import template_path
from .schema import DERIVE, SCHEMA, image_problem

class DeployDataError(PyinfraError):
    """Raised while preparing the deploy; pyinfra prints it and exits non-zero."""


def _looks_like_ours(key: str) -> bool:
    lowered = key.lower().replace("-", "_")
    if lowered.startswith("sglang") or lowered.startswith("sgl_"):
        return True
    return bool(difflib.get_close_matches(lowered, SCHEMA, n=1, cutoff=0.85))


def _suggest(key: str) -> str | None:
    normal = key.lower().replace("-", "_")
    prefixed = sorted(k for k in SCHEMA if k.startswith(normal))
    if prefixed:
        return prefixed[0]
    close = difflib.get_close_matches(normal, SCHEMA, n=1, cutoff=0.6)
    return close[0] if close else None


def check_data(host_name: str, data: Mapping[str, Any]) -> list[str]:
    """All problems with one host's merged data, as complete sentences."""
    errors: list[str] = []

    def err(key: str, problem: str, fix: str) -> None:
        errors.append(f"host {host_name}: {key}: {problem}. Fix: {fix}.")

    for key in sorted(data):
        if key in SCHEMA or not _looks_like_ours(key):
            continue
        guess = _suggest(key)
        hint = f"did you mean {guess}? " if guess else ""
        err(key, "unknown key (a typo would silently fall back to the default)",
            f"{hint}the known keys are listed in README.md and group_data/all.py")

    missing = [key for key in SCHEMA if key not in data]
    for key in missing:
        err(key, "missing", "keep group_data/all.py in place; it defines every default")

    for key, spec in SCHEMA.items():
        if key not in data or key == "sglang_image":
            continue
        value = data[key]
        if not spec.check(value):
            err(key, f"{value!r} is not {spec.kind}", spec.fix)

    if "sglang_image" in data:
        problem = image_problem(data["sglang_image"])
        if problem:
            err("sglang_image", f"{problem}; an upgrade must be a deliberate change, not drift on a restart",
                SCHEMA["sglang_image"].fix)

    if errors:
        return errors

    # Combinations that cannot work.
    dtype, conv = data["sglang_dtype"], data["sglang_mamba_conv_dtype"]
    if DERIVE not in (dtype, conv) and (dtype == "float16") != (conv == "float16"):
        err("sglang_mamba_conv_dtype",
            f"sglang_dtype={dtype!r} with sglang_mamba_conv_dtype={conv!r}: the FP16 compute path and the "
            "Mamba conv-state cache must agree or the server crashes with 'Index put requires the source and "
            "destination dtypes match'",
            "set both to 'float16', both to 'derive', or neither")
    gpus, tp = data["sglang_gpus"], data["sglang_tp_size"]
    if gpus != "all" and tp != DERIVE and tp > gpus:
        err("sglang_tp_size", f"{tp} is larger than sglang_gpus={gpus}, so the model cannot be split",
            f"set sglang_tp_size <= {gpus} or reserve more GPUs")
    template = template_path(data["sglang_compose_template"])
    if not template.is_file():
        err("sglang_compose_template", f"{template} does not exist",
            "point it at a file under templates/, e.g. 'templates/compose.yaml.j2'")
    for key, problem, fix in models.problems(data):
        err(key, problem, fix)
    if data["sglang_toolchain_image"]:
        for key, problem, fix in toolchain.problems(data):
            err(key, problem, fix)
    home, tools = data["sglang_home"], data["sglang_tools_dir"]
    if tools == home or tools.startswith(home + "/") or home.startswith(tools + "/"):
        err("sglang_tools_dir", f"{tools} overlaps sglang_home {home}; the runbook forbids a Python environment "
            "under the home", "use a directory outside it, e.g. '/var/lib/sglang-tools'")
    if data["sglang_docker_source"] == "docker" and not data["sglang_docker_apt_url"]:
        err("sglang_docker_apt_url", "empty while sglang_docker_source='docker'", "set Docker's repository URL")
    return errors


def check_host_state(host_name: str, data: Mapping[str, Any], preflight: Mapping[str, Any],
                     gpus: GpuInventory | None = None) -> list[str]:
    """Problems between the data and the host as it is now (HostState and GpuFacts facts)."""
    errors: list[str] = []

    def err(key: str, problem: str, fix: str) -> None:
        errors.append(f"host {host_name}: {key}: {problem}. Fix: {fix}.")

    gpus = gpus if gpus is not None else GpuInventory()
    for key, problem, fix in plan_problems(data, gpus, derive_flags(data, gpus)):
        err(key, problem, fix)

    os_problem = platforms.support_problem(preflight.get("os_id"), preflight.get("os_version"),
                                           data["sglang_docker_source"], engine_works(preflight))
    if os_problem:
        err("os", os_problem[0], os_problem[1])

    user, group = preflight.get("user"), preflight.get("group")
    want_uid, want_gid = data["sglang_uid"], data["sglang_gid"]
    if want_uid is not None and user and user["uid"] != want_uid:
        err("sglang_uid", f"the existing account sglang has uid {user['uid']}, not {want_uid}; the deploy "
            "never re-owns files silently",
            f"set sglang_uid = {user['uid']} for this host, or change it by hand (usermod -u {want_uid} sglang "
            "and re-own its files) first")
    if want_gid is not None and group and group["gid"] != want_gid:
        err("sglang_gid", f"the existing group sglang has gid {group['gid']}, not {want_gid}",
            f"set sglang_gid = {group['gid']} for this host, or change it by hand (groupmod -g {want_gid} sglang) "
            "first")
    uid_owner = preflight.get("uid_owner")
    if want_uid is not None and not user and uid_owner:
        err("sglang_uid", f"uid {want_uid} already belongs to the account {uid_owner!r}",
            "choose a free uid for the fleet, or None")
    gid_owner = preflight.get("gid_owner")
    if want_gid is not None and not group and gid_owner:
        err("sglang_gid", f"gid {want_gid} already belongs to the group {gid_owner!r}",
            "choose a free gid for the fleet, or None")
    for admin in data["sglang_admins"]:
        if admin not in preflight.get("admins_present", ()):
            err("sglang_admins", f"the user {admin!r} does not exist on this host",
                f"create {admin!r} first (admins are people, the deploy does not invent them) or remove it "
                "from sglang_admins")
    return errors


def _summary(errors: list[str]) -> str:
    lines = "\n  - ".join(errors)
    return f"refused before any change on any host ({len(errors)} problem(s)):\n  - {lines}"


def raise_if(errors: list[str]) -> None:
    if errors:
        raise DeployDataError(_summary(errors))


_inventory_errors: dict[int, list[str]] = {}


def preflight(host, inventory) -> None:
    """
    Refuse the run, for every host at once, before anything executes: first
    the data of every host being deployed, then this host's data against its
    current state (read-only facts). Called at the top of deploy.py.
    """
    from . import ACCOUNT, factcache
    from .facts import GpuFacts, HostState

    key = id(inventory)
    if key not in _inventory_errors:
        hosts = inventory.get_active_hosts() or list(inventory)
        _inventory_errors[key] = [m for h in hosts for m in check_data(h.name, h.data.dict())]
    raise_if(_inventory_errors[key])

    data = host.data.dict()
    # The same arguments as tasks/account.py, so the account operation reuses this reading.
    state = factcache.get(host, HostState, user=ACCOUNT, admins=data["sglang_admins"], groups=["docker"],
                          uid=data["sglang_uid"], gid=data["sglang_gid"])
    raise_if(check_host_state(host.name, data, state, factcache.get(host, GpuFacts)))
