"""The models a serving host takes from the fleet's peers (peering.py). First
this host's door lists what its own pulls verified (tasks/models.py: a seed's
pull, a swarm's round 1), reloaded; every host does so before any pulls here.
Then each model pulled after the seeds, or in a swarm the rest of it: each
file from every peer that holds it verified (of those whose door this run
checked, tasks/peer_door.py), checked against the lock (or the Hub's digest)
before it enters the cache, the Hub for what no peer holds. Then this host's
own door lists what it now holds, for the hosts after it."""

from pyinfra import host

from sglang_infra.fleet.peering import after_seeds, pull_arguments
from sglang_infra.hostside.formats.netloc import netloc
from sglang_infra.operations.models import model_pulled
from sglang_infra.operations.peerdoor import blobs_listed
from sglang_infra.operations.system import service_running
from sglang_infra.plan import peerdoor
from sglang_infra.run.preflight import plan_of

plan = plan_of(host)
door = plan.peer_door
later = [model for model in plan.kept if after_seeds(plan, model)]

if door is not None:
    listen = netloc(door.address, door.port)
    pulled = blobs_listed(name=f"Ensure {peerdoor.BLOBS_CONF} lists the verified blobs this host pulled",
                          door=door)
    service_running(name=f"Ensure the peer door on {listen} serves what this host pulled",
                    unit=f"{peerdoor.SERVICE}.service", reload_if=pulled.did_change)

for model in later:
    model_pulled(**pull_arguments(plan, model))

if door is not None and later:
    blobs = blobs_listed(name=f"Ensure {peerdoor.BLOBS_CONF} lists the blobs this host took from its peers",
                         door=door)
    service_running(name=f"Ensure the peer door on {listen} serves them", unit=f"{peerdoor.SERVICE}.service",
                    reload_if=blobs.did_change)
