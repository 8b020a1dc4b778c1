"""The peer door on a serving host (sglang_infra/plan/peerdoor.py): its list of
verified blobs, worked out from the host as it is when the operation runs
(after this run's pulls), the check that its address and port are held by
the door's own nginx, and a door left behind removed once the data has
none."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import FactBase, FunctionCommand, operation
from pyinfra.api.exceptions import FactProcessError

from ..fleet import peering
from ..hostside.formats.netloc import netloc
from ..machine import ship
from ..plan import peerdoor
from ..plan.types import PeerDoor
from ..run.facts import MAX_ANSWER_BYTES, bounded_json, current
from ..run.operation import _failed, q, snapshot_operation
from .files import swap_in


class DoorHeld(FactBase):
    """Whether every socket listening on the door's address and port is nginx.service's main process's, running
    the door's config, and the sha256 of the door's certificate (hostside/read/doorcheck.py, as root):
    {"held", "pid", "why", "cert"}."""

    def command(self, address: str, port: int):
        return (f"exec {ship.command('read.doorcheck')} {shlex.quote(address)} {int(port)} "
                f"{shlex.quote(peerdoor.CONFIG)} {shlex.quote(peerdoor.TLS_CERT)}")

    def process(self, output):
        try:
            return bounded_json("\n".join(output), MAX_ANSWER_BYTES, "the door check's answer")
        except ValueError as error:
            raise FactProcessError(str(error)) from None


@snapshot_operation
def blobs_listed(door: PeerDoor):
    """
    Ensure the door's list (peerdoor.BLOBS_CONF, root's, 0644) names exactly
    the blobs of the registry's verified revisions the host holds now, as
    its snapshot reads them when this operation runs.
    """
    content = peerdoor.blobs_conf(door, current(host)["models"])
    yield from swap_in(peerdoor.BLOBS_CONF, content.encode(), "root", "root", "644", None)


@snapshot_operation
def tls_made():
    """
    Ensure the door's TLS key pair is on the host (peerdoor.TLS_KEY, root's,
    0600, and its self-signed peerdoor.TLS_CERT), made there by root once
    (peerdoor.tls_command) and kept across runs: the private key never
    leaves the host. A pair whose key is not root's alone, or whose key and
    certificate are not one pair (the snapshot's tls_pair), is made anew.
    """
    snapshot = current(host)
    if peerdoor.tls_ready(snapshot["files"].get(peerdoor.DOOR_DIR) or {}, (snapshot.get("peer") or {}).get("tls_pair")):
        host.noop(f"the peer door's key pair is in {peerdoor.DOOR_DIR}")
        return
    yield peerdoor.tls_command()


@operation()
def door_checked(door: PeerDoor):
    """
    Ensure the door's address and port are held by the door's own nginx
    (DoorHeld), read when the operation runs, after the door's start or
    reload, and read its certificate's sha256. Found so, the door is one this
    run's pulls may ask, with the site key, over TLS pinned to that
    certificate (peering.checked); otherwise this host fails here, and no
    pull of this run sends the key to its door.
    """
    listen = netloc(door.address, door.port)
    if not host.state.is_executing:
        host.noop(f"the peer door on {listen} is checked when this operation runs")
        return
    found = host.get_fact(DoorHeld, address=door.address, port=door.port) or {}
    if found.get("held") and found.get("cert"):
        peering.door_checked(host.state, host.name, found["cert"])
        host.noop(f"the peer door on {listen} is the door's own nginx (pid {found['pid']})")
        return
    why = (f"{peerdoor.TLS_CERT} holds no certificate to pin" if found.get("held")
           else found.get("why", "the check did not answer"))
    yield FunctionCommand(_failed, (f"the peer door on {listen} is not the door's own nginx: {why}; no peer is sent "
                                    "the site key there",), {})


@snapshot_operation
def door_absent():
    """
    Ensure no peer door is left on the host: nginx.service stopped and
    disabled when the deploy's drop-in runs it, the drop-in and the door's
    directory (its config, key and list) removed. Debian's nginx package
    stays installed, stopped and disabled.
    """
    snapshot = current(host)
    dropin_dir, _, dropin_name = peerdoor.dropin().rpartition("/")
    ours = dropin_name in snapshot["files"].get(dropin_dir, {})
    door_dir = snapshot["system_dirs"].get(peerdoor.DOOR_DIR)
    if not ours and not door_dir:
        host.noop("no peer door on this host")
        return
    commands = []
    if ours:
        unit = f"{peerdoor.SERVICE}.service"
        commands += [f"systemctl disable --now {q(unit)}", f"rm -f {q(peerdoor.dropin())}",
                     "systemctl daemon-reload"]
    if door_dir:
        commands.append(f"rm -rf {q(peerdoor.DOOR_DIR)}")
    yield " && ".join(commands)


@snapshot_operation
def door_user_present():
    """
    Ensure the door's workers' own system user and group exist
    (peerdoor.WORKER_USER, WORKER_GROUP: no home, no login), before the
    config that names them (nginx -t refuses an unknown user).
    """
    reader = current(host).get("door_reader") or {}
    if reader.get("user") and reader.get("group") is not None:
        host.noop(f"the door's workers' user and group {peerdoor.WORKER_USER} exist")
        return
    user, group = q(peerdoor.WORKER_USER), q(peerdoor.WORKER_GROUP)
    yield (f"{{ getent group {group} >/dev/null || groupadd --system {group}; }} && "
           f"{{ getent passwd {user} >/dev/null || useradd --system --gid {group} --no-create-home "
           f"--home-dir /nonexistent --shell /usr/sbin/nologin {user}; }}")


@snapshot_operation
def home_passable(home: str, wanted: bool):
    """
    Ensure the peer door's workers (their group, peerdoor.WORKER_GROUP) may
    pass through the home and nothing more, by one ACL entry
    (group:sglang-door:--x), while the door is on (``wanted``); with no door,
    that entry removed. The entry earlier deploys gave the shared www-data
    (peerdoor.LEGACY_WORKER_USER) is taken back either way.
    """
    reader = current(host).get("door_reader") or {}
    group, legacy = peerdoor.WORKER_GROUP, peerdoor.LEGACY_WORKER_USER
    commands = []
    if wanted and reader.get("group") is not True:
        commands.append(f"{ship.command('write.acl')} grant {q(home)} group {q(group)}")
    if not wanted and reader.get("group_entry"):
        commands.append(f"{ship.command('write.acl')} revoke {q(home)} group {q(group)}")
    if reader.get("legacy_entry"):
        commands.append(f"{ship.command('write.acl')} revoke {q(home)} user {q(legacy)}")
    if not commands:
        host.noop(f"group {group} {'may' if wanted else 'has no entry to'} pass through {home}")
        return
    yield " && ".join(commands)
