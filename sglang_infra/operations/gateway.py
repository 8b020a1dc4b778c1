"""The fleet's gateways: the barrier every host passes before any gateway
decides its workers, and each gateway's worker set, from the workers'
snapshots."""

from __future__ import annotations

import json

from pyinfra import host, logger
from pyinfra.api import StringCommand, operation

from ..machine import ship
from ..plan.types import worker_validated
from ..run.operation import diff_wanted, q, snapshot_operation
from .stack import stack_section


@operation()
def fleet_barrier(reason: str):
    """
    An ordering point that changes nothing. pyinfra orders operations by each
    host's own sequence: a gateway-only host, which runs no gate, gives no
    reason to run its gateway operations after the workers' gates. Every host
    calls this at the same place (tasks/gateways.py), so everything before it on
    any host runs before everything after it on any host.
    """
    host.noop(reason)
    yield from ()


def _fleet_snapshot(name: str) -> dict | None:
    """Another host's snapshot as it is now (read again after its own commands ran), None when unreadable."""
    from ..run import factcache
    from ..run.facts import Snapshot

    try:
        return factcache.current(host.inventory.get_host(name), Snapshot)
    except Exception as error:   # a host lost mid-run, or not reachable: its worker counts as not validated
        logger.warning(f"[{host.name}] the worker {name} could not be read ({error!r}); it counts as not validated")
        return None


@snapshot_operation
def gateway_workers(directory: str, gateway: str, url: str, workers, key_file: str | None = None):
    """
    Ensure the gateway in ``directory`` (router/<gateway>/) has exactly the
    ``workers`` (types.Worker) that passed their gate with their own config:
    decided when the operation runs, from each worker's snapshot read after
    its own gate ran in this same run (tasks/gateways.py comes after
    tasks/stack.py). A worker outside this run (--limit) keeps the
    membership it has. On a difference, workers.json is rewritten (the
    gateway's launcher reads it on start) and the gateway's /workers API adds
    and removes workers without a restart (hostside/roll/gateway_workers.py).
    """
    have = stack_section(gateway)["workers"]
    wanted = sorted(w.url for w in workers
                    if (w.url in (have or ()) if w.compose_sha is None
                        else worker_validated(_fleet_snapshot(w.host))))
    if host.state.is_executing:
        logger.info(f"[{host.name}] gateway {gateway}: workers that passed their gate: {wanted or 'none'}")
    if have is not None and sorted(have) == wanted:
        host.noop(f"the gateway already has the {len(wanted)} worker(s) that passed their gate")
        return
    if diff_wanted():
        host.log(f"Will set the gateway's workers: {sorted(have or [])} -> {wanted}", logger.info)
    args = [directory, url, *([key_file] if key_file else [])]
    yield StringCommand(f"{ship.command('roll.gateway_workers')} " + " ".join(q(a) for a in args),
                        _stdin=json.dumps(wanted))
