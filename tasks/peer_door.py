"""A serving host's peer door: Debian's nginx serving the host's verified
model blobs, read-only, to the fleet's other hosts holding the site's key
(sglang_infra/plan/peerdoor.py says what it serves and refuses). Its files come
before the package, so nginx's first start already runs the door's config,
never Debian's default site. It comes up before any pull of the run, with the
blobs verified before it, and is then checked (its address and port held by
the door's own nginx, its certificate read): only a door checked so is asked
by this run's pulls, over TLS pinned to that certificate
(sglang_infra/fleet/peering.py), which tasks/models_from_peers.py lists next.
Without sglang_peer_key_file, no door, and one left from an earlier run is
removed."""

from pyinfra import host

from sglang_infra.hostside.formats.netloc import netloc
from sglang_infra.operations.files import checked_file, secret_file
from sglang_infra.operations.peerdoor import (
    blobs_listed,
    door_absent,
    door_checked,
    door_user_present,
    home_passable,
    tls_made,
)
from sglang_infra.operations.system import packages_installed, root_directory, service_running
from sglang_infra.plan import peerdoor
from sglang_infra.plan.types import dropin_dir
from sglang_infra.run.preflight import plan_of

plan = plan_of(host)
door = plan.peer_door

if door is None:
    door_absent(name="Ensure no peer door is left (sglang_peer_key_file is None)")
    home_passable(name=f"Ensure {peerdoor.WORKER_GROUP} has no ACL entry on {plan.paths.home} (no peer door)",
                  home=plan.paths.home, wanted=False)
else:
    listen = netloc(door.address, door.port)
    root_directory(name=f"Ensure {peerdoor.DOOR_DIR} exists", path=peerdoor.DOOR_DIR)
    # The door's TLS key pair, made here by root before the config that names it (nginx -t reads it).
    packages_installed(name=f"Ensure {peerdoor.TLS_PACKAGE} is installed", packages=[peerdoor.TLS_PACKAGE])
    tls = tls_made(name=f"Ensure {peerdoor.TLS_KEY} and {peerdoor.TLS_CERT} hold the door's own key pair (0600 key)")
    key = secret_file(name=f"Ensure {peerdoor.KEY_CONF} holds the site's peer key (0600, root only)",
                      dest=peerdoor.KEY_CONF, content=door.key_conf.encode(), user="root")
    door_user_present(name=f"Ensure the door's workers run as a user and group of their own ({peerdoor.WORKER_USER})")
    blobs = blobs_listed(name=f"Ensure {peerdoor.BLOBS_CONF} lists the verified blobs the door serves", door=door)
    config = checked_file(
        name=f"Ensure {peerdoor.CONFIG} is the peer door on {listen}, accepted by nginx",
        dest=peerdoor.CONFIG, content=door.config, user="root", group="root",
        check="! command -v nginx >/dev/null || nginx -t -q -c {candidate}",
    )
    root_directory(name=f"Ensure {dropin_dir(peerdoor.SERVICE)} exists", path=dropin_dir(peerdoor.SERVICE))
    dropin = checked_file(name=f"Ensure {peerdoor.SERVICE}.service runs the peer door's config (its drop-in)",
                          dest=peerdoor.dropin(), content=door.dropin, user="root", group="root")
    # Read access alone: the workers are not in the account's group (which may write in hf-cache).
    home_passable(name=f"Ensure {peerdoor.WORKER_GROUP} may pass through {plan.paths.home} and nothing more "
                       f"(ACL group:{peerdoor.WORKER_GROUP}:--x): the door reads the cache, never writes it",
                  home=plan.paths.home, wanted=True)
    # After its files: the package's first start already runs the door, never Debian's default site.
    packages_installed(name=f"Ensure {peerdoor.PACKAGE} is installed", packages=[peerdoor.PACKAGE])
    service_running(name=f"Ensure the peer door listens on {listen} with its current config and list",
                    unit=f"{peerdoor.SERVICE}.service", restart_if=dropin.did_change,
                    reload_if=lambda: (key.did_change() or blobs.did_change() or config.did_change()
                                       or tls.did_change()),
                    check=peerdoor.config_check())
    door_checked(name=f"Ensure {listen} is held by the peer door's own nginx before any peer asks it", door=door)
