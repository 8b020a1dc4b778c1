"""One host's refusals, before anything runs on any host: one line per
problem, naming the host, the key and the fix (problems.problem, the one
formatter).

The passes over one host, each over what it can see:
- `judge` / `check_data`: one host's data alone (types, typos, the unpinned
  image, the model registry, the toolchain pins, the lock, the secrets).
  Pure, so it is unit-tested without hosts. What it reads to judge (the lock,
  the pins, the CA bundle, the secrets) it hands on in `Judged`, so the plan
  is resolved from the same reads and nothing is read twice.
- `check_host_state`: the data against the host as it is (an account with
  other ids, admins that do not exist, an unsupported OS, the GPU rules).
- `check_gateway_host`: a gateway host's own data (its image, its
  control-plane key).

What needs other hosts lives with its concern: the gateway pass's refusals
in fleet/gateways.py, a monitor host's in fleet/monitoring.py, a multi-node
group's in fleet/nodegroups.py.
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from .. import ACCOUNT
from ..hostside import names
from ..hostside.printable import printable
from ..machine import platforms, toolchain
from ..machine.gpus import Derived, GpuInventory, derive_flags, plan_problems
from ..machine.templating import template_path
from ..models import lockfile, recipes
from ..models import registry as models
from . import peerdoor
from .gateway_pin import GATEWAY_VERSION
from .inventoryfile import inventory_dir
from .problems import problem
from .render import DERIVED_FLAGS
from .schema import RETIRED, SCHEMA, by_digest, host_address, image_problem, system_dir_problem

# Keys an operator may add for their own use (e.g. in their own group files): never judged, never used here.
SITE_PREFIX = "site_"


@functools.cache
def pyinfra_keys() -> frozenset[str]:
    """pyinfra's own data keys, from its own tables: the global arguments and every connector's data. Worked out
    once per process: finding the connectors scans every installed distribution's entry points (5 to 9 ms), which
    judging each host did again (a hundred names: a hundred scans)."""
    from pyinfra.api.arguments import all_global_arguments
    from pyinfra.api.connectors import get_all_connectors

    keys = {name for name, _ in all_global_arguments()}
    for connector in get_all_connectors().values():
        keys.update(getattr(connector, "data_meta", {}) or {})
    return frozenset(keys)


def _suggest(key: str, known: frozenset[str]) -> str | None:
    normal = key.lower().replace("-", "_")
    for candidate in (normal, f"sglang_{normal}", f"_{normal}"):
        prefixed = sorted(k for k in known if k.startswith(candidate))
        if prefixed:
            return prefixed[0]
    close = difflib.get_close_matches(normal, known, n=1, cutoff=0.6)
    return close[0] if close else None



@dataclass(frozen=True)
class Judged:
    """One host's data as judged: its problems, and what was read and worked out to judge it, handed on to
    plan.resolve so that nothing is read or worked out twice."""

    problems: list[str]
    data: Mapping[str, Any] = field(default_factory=dict, repr=False)   # with the lock's commits applied
    lock: lockfile.Lock | None = field(default=None, repr=False)
    pins: Mapping[str, str] | None = field(default=None, repr=False)   # the toolchain's, when it is on
    ca_bundle: bytes | None = field(default=None, repr=False)
    token: bytes | None = field(default=None, repr=False)
    api_key: bytes | None = field(default=None, repr=False)
    peer_key: bytes | None = field(default=None, repr=False)   # the site's peer key (sglang_peer_key_file)
    admin_key: bytes | None = field(default=None, repr=False)  # a gateway's control-plane key (check_gateway_host)


def check_data(host_name: str, data: Mapping[str, Any]) -> list[str]:
    """All problems with one host's merged data, as complete sentences."""
    return judge(host_name, data).problems


def lock_of(data: Mapping[str, Any]) -> lockfile.Lock | None:
    """The lock this host's data names (`sglang_lock`, beside the inventory), or None when there is none."""
    return lockfile.load(lockfile.path_for(data["sglang_lock"], inventory_dir()))


def judge(host_name: str, data: Mapping[str, Any]) -> Judged:
    """The data alone judged, and what judging it read (see Judged)."""
    errors: list[str] = []

    def err(key: str, what: str, fix: str) -> None:
        errors.append(problem(host_name, key, what, fix))

    theirs = pyinfra_keys()
    for key in sorted(data):
        if key in RETIRED:
            err(key, f"no longer a key of this project: {RETIRED[key]} took its place", f"set {RETIRED[key]} "
                f"instead (docs/variables.md says what it covers now) and remove {key}")
            continue
        if key in SCHEMA or key in theirs or key.startswith(SITE_PREFIX):
            continue
        guess = _suggest(key, frozenset(SCHEMA) | theirs)
        hint = f"did you mean {guess}? " if guess else ""
        err(key, "unknown key: neither this project's, nor pyinfra's own (a typo would silently fall back to the "
                 "default)", f"{hint}the known keys are listed in docs/variables.md and group_data/all.py; "
                             f"keys of your own start with {SITE_PREFIX}")

    missing = [key for key in SCHEMA if key not in data]
    for key in missing:
        err(key, "missing", "keep group_data/all.py in place; it defines every default")

    for key, spec in SCHEMA.items():
        if key not in data or key == "sglang_image":
            continue
        value = data[key]
        if not spec.check(value):
            err(key, f"{value!r} is not {spec.kind}", spec.fix)

    # The fleet address (sglang_worker_address, else ssh_hostname, else the inventory name) goes into
    # --dist-init-addr, worker URLs and peer addresses: a host name or an IP address, nothing else.
    if data.get("ssh_hostname") is not None and not host_address(data["ssh_hostname"]):
        err("ssh_hostname", f"'{printable(data['ssh_hostname'])}' is not a host name or an IP address (it is also "
            "the address the fleet reaches this host on, when sglang_worker_address is not set)",
            "set it to the host's DNS name or IP address, e.g. '10.0.0.11'")
    elif not (data.get("sglang_worker_address") or data.get("ssh_hostname")) and not host_address(host_name):
        err("ssh_hostname", f"not set, so the inventory name '{printable(host_name)}' is the address the fleet "
            "reaches this host on, and it is not a host name or an IP address",
            "set ssh_hostname (or sglang_worker_address) to the host's DNS name or IP address, or rename the host")

    if "sglang_image" in data:
        unpinned = image_problem(data["sglang_image"])
        if unpinned:
            err("sglang_image", f"{unpinned}; an upgrade must be a deliberate change, not drift on a restart",
                SCHEMA["sglang_image"].fix)

    if errors:
        return Judged(errors)

    # The lock, when there is one: its commits stand in for a registry revision of None. Applied here, once.
    try:
        lock = lock_of(data)
    except lockfile.LockError as error:
        err("sglang_lock", str(error).split(". Fix: ")[0], str(error).split(". Fix: ")[-1])
        return Judged(errors)
    if lock is not None:
        data = lockfile.with_commits(lock, data)

    # Combinations that cannot work.
    template = template_path(data["sglang_compose_template"])
    if not template.is_file():
        err("sglang_compose_template", f"{template} does not exist",
            "point it at a file under templates/, e.g. 'templates/compose.yaml.j2'")
    for key, what, fix in models.problems(data, DERIVED_FLAGS):
        err(key, what, fix)
    for what, fix in recipes.args_problems("sglang_launch_args", data["sglang_launch_args"], DERIVED_FLAGS):
        err("sglang_launch_args", what, fix)
    pins = None
    if data["sglang_toolchain_image"]:
        found = toolchain.problems(data)
        for key, what, fix in found:
            err(key, what, fix)
        pins = None if found else toolchain.pins(data)
    # Judged whether or not the toolchain image is on: turning it on later cannot surprise anyone.
    ca_bundle, found = toolchain.read_ca_bundle(data)
    for key, what, fix in found:
        err(key, what, fix)
    if lock is not None:
        for key, what, fix in lockfile.problems(lock, data, pins):
            err(key, what, fix)
    token = models.control_token(data)
    endpoint = data["sglang_hf_endpoint"]
    if endpoint and endpoint.startswith("http://") and token:
        err("sglang_hf_endpoint", f"{endpoint} is plain http, and a Hub token is configured (HF_TOKEN or "
            "sglang_hf_token_file): the token would cross the network in clear",
            "use the mirror's https URL, or run without a token for it")
    api_key = models.read_secret(data["sglang_api_key_file"]) if data["sglang_api_key_file"] else None
    if data["sglang_api_key_file"]:
        if not re.fullmatch(API_KEY_SHAPE, api_key or b""):
            err("sglang_api_key_file", f"{data['sglang_api_key_file']} does not hold one API key of 16-512 "
                "letters, digits or ._~+/=- (a client sends it in an HTTP header)",
                "put only the key in the file, e.g. from `openssl rand -hex 32`")
    peer_key = models.read_secret(data["sglang_peer_key_file"]) if data["sglang_peer_key_file"] else None
    if data["sglang_peer_key_file"]:
        bad = peerdoor.key_problem(peer_key)
        if bad:
            err("sglang_peer_key_file", f"{data['sglang_peer_key_file']} {bad}: the peer door would take it as the "
                "site's key", f"put only the key in the file, {peerdoor.KEY_MIN}-{peerdoor.KEY_MAX} characters, "
                "e.g. from `openssl rand -hex 32`")
    home, tools = data["sglang_home"], data["sglang_tools_dir"]
    for key, path in (("sglang_home", home), ("sglang_tools_dir", tools)):
        shared = system_dir_problem(path)
        if shared:
            err(key, shared, "use a directory of its own, e.g. '/opt/sglang' or '/var/lib/sglang-tools'")
    if tools == home or tools.startswith(home + "/") or home.startswith(tools + "/"):
        err("sglang_tools_dir", f"{tools} overlaps sglang_home {home}; the runbook forbids a Python environment "
            "under the home", "use a directory outside it, e.g. '/var/lib/sglang-tools'")
    if data["sglang_docker_source"] == "docker" and not data["sglang_docker_apt_url"]:
        err("sglang_docker_apt_url", "empty while sglang_docker_source='docker'", "set Docker's repository URL")
    admin_key = models.read_secret(data["sglang_router_admin_key_file"])   # judged on a gateway host alone
    return Judged(errors, data, lock, pins, ca_bundle, token, api_key, peer_key, admin_key)



def check_host_state(host_name: str, data: Mapping[str, Any], snapshot: Mapping[str, Any],
                     gpus: GpuInventory | None = None, serves: bool = True,
                     derived: Mapping[str, Derived] | None = None, gets_docker: bool = True) -> list[str]:
    """Problems between the data and the host as it is now (its snapshot); ``serves``: it runs a model;
    ``derived``: the flags resolve derived from ``gpus`` (worked out here when not given); ``gets_docker``: the
    deploy installs or uses Docker there (a host only in the monitor group does not)."""
    errors: list[str] = []

    def err(key: str, what: str, fix: str) -> None:
        errors.append(problem(host_name, key, what, fix))

    gpus = gpus if gpus is not None else GpuInventory()
    # A host only in the router group runs the gateway alone: it needs no GPU.
    if serves:
        for key, what, fix in plan_problems(data, gpus, derived if derived is not None else derive_flags(data, gpus)):
            err(key, what, fix)

    os_release = snapshot.get("os") or {}
    os_problem = platforms.support_problem(os_release.get("id"), os_release.get("version"),
                                           data["sglang_docker_source"],
                                           platforms.engine_works(snapshot.get("docker") or {}), gets_docker)
    if os_problem:
        err("os", os_problem[0], os_problem[1])
    if not snapshot.get("python3"):
        err("python3", "not installed; the deploy reads the host with it (one command per run)",
            "install it first: apt-get install -y python3")
        return errors

    # Repairs in hf-cache and the pull's writes there rely on the kernel refusing a hard link to another user's
    # file; the setting is the host's (kernel-wide), so the deploy names it rather than changing it.
    hardlinks = (snapshot.get("kernel") or {"protected_hardlinks": "1"}).get("protected_hardlinks")
    if hardlinks != "1":
        shown = printable(hardlinks) if hardlinks else "unreadable"
        err("fs.protected_hardlinks", f"the kernel setting is {shown}, not 1: a group member could hard-link any "
            "file, root's too, into hf-cache, where the deploy repairs group and modes and the pull writes",
            "sysctl -w fs.protected_hardlinks=1, and keep it across reboots with a file in /etc/sysctl.d/ (e.g. "
            "60-protected-links.conf holding 'fs.protected_hardlinks = 1')")
    existing = snapshot.get("existing") or {}
    for key, found, owners in (("sglang_home", existing.get("home"), (ACCOUNT,)),
                               ("sglang_tools_dir", existing.get("tools"), ("root",))):
        if found and (not found["directory"] or (not found["empty"] and found["owner"] not in owners)):
            what = "is not a directory" if not found["directory"] else \
                f"already exists with content and belongs to {printable(found['owner'])}"
            err(key, f"{data[key]} {what}; the deploy would take it over (re-own and re-mode it)",
                f"choose a directory of its own, or, if this one is meant for it, chown it to "
                f"{owners[0]} first")
    # A root-owned tools directory is adopted only when it holds the deploy's own entries and nothing else:
    # root owns system places too (/var/spool/cron/crontabs would become root:sglang 755).
    tools = existing.get("tools")
    if tools and tools["directory"] and not tools["empty"] and tools["owner"] == "root":
        strangers = [name for name in tools.get("entries", ()) if not names.tools_entry(name)]
        if strangers or tools.get("more") or "entries" not in tools:
            shown = ", ".join(printable(name) for name in strangers[:5]) + (", ..." if len(strangers) > 5 or
                                                                             tools.get("more") else "")
            err("sglang_tools_dir", f"{data['sglang_tools_dir']} already exists with content that is not the "
                f"deploy's ({shown or 'unknown entries'}; it keeps only {', '.join(names.TOOLS_ENTRIES)} there); "
                "the deploy would take it over (re-mode it root:sglang 755)",
                "choose a directory of its own (an empty or a new one), e.g. '/var/lib/sglang-tools'")
    preflight = snapshot["account"]
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
    if serves and data["sglang_peer_key_file"]:
        wanted = peerdoor.door_address(data, host_name)
        bad_bind = peerdoor.bind_problem(host_name, wanted, snapshot.get("peer"))
        if bad_bind:
            err("sglang_peer_bind_address", f"{bad_bind} (the peer door's address, from "
                f"{peerdoor.address_source(data, host_name)}; None means the host's fleet address: "
                "sglang_worker_address, else ssh_hostname)", "set sglang_peer_bind_address to the IP address the "
                "fleet's other hosts reach this host on (Debian's /etc/hosts maps the host's own name to 127.0.1.1)")
        taken = peerdoor.foreign_nginx(snapshot)
        if taken:
            err("sglang_peer_key_file", f"nginx.service is already {taken} on this host without the peer door's "
                "drop-in: the door would take that nginx over and its sites would stop answering",
                "run the peer door on hosts without an nginx of their own (stop and disable that one first), or set "
                "sglang_peer_key_file = None for this host")
    for admin in data["sglang_admins"]:
        if admin not in preflight.get("admins_present", ()):
            err("sglang_admins", f"the user {admin!r} does not exist on this host",
                f"create {admin!r} first (admins are people, the deploy does not invent them) or remove it "
                "from sglang_admins")
    return errors




API_KEY_SHAPE = rb"[A-Za-z0-9._~+/=-]{16,512}"   # a key a client sends in an HTTP header


def check_gateway_host(name: str, judged: Judged) -> list[str]:
    """A gateway host's own data: the gateway's image (SMG, its own image: schema.image_problem judged it pinned
    when set) and the control-plane key the deploy alone sends to its worker API (both keys as judge() read
    them)."""
    data = judged.data
    errors: list[str] = []
    if not data["sglang_router_image"]:
        errors.append(problem(name, "sglang_router_image", "None on a gateway host: the gateway (Shepherd Model "
                              f"Gateway, smg {GATEWAY_VERSION}) runs from an image of its own, which no default pins",
                              "build it with scripts/build-gateway-image.sh TAG ARCHIVE (Debian trixie and "
                              "templates/gateway-requirements.txt, hashes checked) and set it with "
                              "sglang_router_image_archive, or name an image of your registry by digest "
                              "(repo@sha256:...); docs/front-door.md has the steps"))
    elif not data["sglang_router_image_archive"] and not by_digest(data["sglang_router_image"]):
        image = data["sglang_router_image"]
        repo = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
        errors.append(problem(name, "sglang_router_image", f"{image!r} would be pulled from its registry by tag "
                              "alone (sglang_router_image_archive is None): a tag can be moved, so the gateway the "
                              "host pulls is not the one the operator vetted",
                              f"name it by digest ({repo}@sha256:...), or set sglang_router_image_archive to its "
                              "`docker save` archive"))
    path = data["sglang_router_admin_key_file"]
    if not path:
        errors.append(problem(name, "sglang_router_admin_key_file", "None on a gateway host: the gateway's worker "
                              "API (/workers) takes only the control-plane key, so the deploy could not add or "
                              "remove its workers", "point it at a file holding one key, e.g. from "
                              "`openssl rand -hex 32`, kept apart from sglang_api_key_file"))
        return errors
    key = judged.admin_key
    if not re.fullmatch(API_KEY_SHAPE, key or b""):
        errors.append(problem(name, "sglang_router_admin_key_file", f"{path} is empty or does not hold one key of "
                              "16-512 letters, digits or ._~+/=- (sent in an HTTP header)",
                              "put only the key in the file, e.g. from `openssl rand -hex 32`"))
    elif judged.api_key is not None and key == judged.api_key:
        errors.append(problem(name, "sglang_router_admin_key_file", f"{path} holds the same key as "
                              "sglang_api_key_file: every client could then add and remove the gateway's workers",
                              "use a key of its own, e.g. from `openssl rand -hex 32`"))
    return errors
