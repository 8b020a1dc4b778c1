"""The validation gate: refusing a config that already failed here, and
running the gate unless its stamp matches what runs."""

from __future__ import annotations

from typing import Mapping

from pyinfra import host, logger
from pyinfra.api import FunctionCommand

from ..hostside.names import COMPOSE_FILE, stamp_current
from ..machine import ship
from ..run.gateway_turns import GatewayTurn, gateway_turn
from ..run.operation import file_entry, q, run_gate, snapshot_operation
from .docker import image_id
from .stack import restart, stack_section


@snapshot_operation
def not_failed_before(failed: str, sha: str, retry: bool = False):
    """
    Refuse, on this host only, to apply again the config (sha256 ``sha``)
    that already failed its gate here (the gate kept it as ``failed``),
    unless ``retry``: the host keeps serving its last known-good config and
    the run fails for it, saying how to go on.
    """
    if retry or (file_entry(failed) or {}).get("sha256") != sha:
        host.noop("this config has not failed its gate on this host")
        return
    message = (f"refused: this config failed its gate on this host before (kept as {failed}); the host keeps "
               "serving its last known-good config. Change the data, or run again with "
               "--data sglang_retry_failed=True")
    yield f"echo {q(message)} >&2; exit 1"


@snapshot_operation
def validated(home: str, image: str, gate: str, files: dict[str, str], always: bool = False,
              gateway: str | None = None, project_dir: str | None = None, model: str | None = None,
              compose_sha: str | None = None, recreate_if=None, sole_front: bool = False,
              turn: GatewayTurn | None = None):
    """
    Ensure what runs has passed the validation gate: unless the stamp the gate
    wrote matches the host as it is (hostside/gate/stamp.py) and ``files`` (the
    plan's compose.yaml by its sha256, its scripts by what they judge with:
    gate_passed) and ``image`` are what is on it, run ``gate`` (wait for
    ready, test_tool_calling.sh, benchmark.sh, roll back on failure).
    ``always`` runs it regardless.

    + gateway: the slug of a gateway (router/<slug>/), whose stamp also covers its worker set
    + project_dir, model, compose_sha, recreate_if: the server's (or the gateway's) stack, restarted here when it
      does not run the current compose.yaml (stack.restart), the restart and the gate one program run apart from
      this run's connection: no moment exists where the run's loss leaves a restarted container ungated
    + sole_front: that gateway is the only one in front of its model: a restart of a running one is said aloud
    + turn: another gateway host fronts its model too: a running one restarts and is gated in the model's turn,
      one gateway host at a time (run/gateway_turns.py)
    """
    reasons: list[str] = []
    up: str | None = None
    if project_dir is not None:
        assert compose_sha is not None
        reasons, up = restart(project_dir, image, model, compose_sha, recreate_if, gateway)
    if not reasons and gate_passed(image, files, gateway) and not always:
        host.noop("this compose.yaml, .env, image and the scripts' judging values already " +
                  ("run and " if project_dir is not None else "") + "passed the gate")
        return
    judged = gate_command(gate, files)
    running = stack_section(gateway)["stack"]["container"]
    serving = running is not None and running["state"] == "running"
    if reasons and sole_front and serving and host.state.is_executing:
        logger.warning(f"[{host.name}] the gateway {gateway} restarts ({'; '.join(reasons)}) and no other gateway "
                       "host fronts its model: its clients see errors until it is back (with two gateway hosts "
                       "behind the site's load balancer, the run restarts them one at a time)")
    if reasons and turn is not None and not sole_front and serving:
        yield FunctionCommand(gateway_turn, (turn, up, judged, "; ".join(reasons)), {})
        return
    # apart from this run's connection: an interrupt or a cut connection leaves the restart's gate to end on the
    # host, judging only the config this run rendered (its sha256 among ``files``)
    yield FunctionCommand(run_gate, (judged,) + ((up,) if reasons else ()), {})


def gate_command(gate: str, files: Mapping[str, str]) -> str:
    """The gate script ``gate`` run for the config this run rendered: --config-sha, compose.yaml's sha256 among
    ``files``, when the plan has one."""
    config = next((sha for path, sha in files.items() if path.endswith("/" + COMPOSE_FILE)), None)
    return f"bash {q(gate)}" + (f" --config-sha {config}" if config else "")


def gate_passed(image: str, files: Mapping[str, str], gateway: str | None = None) -> bool:
    """validated's decision: the gate's stamp matches the host as it is (its config, the image and container
    that serve it, the validation scripts' judging values: hostside/gate/stamp.py), and ``files`` (the config by
    its sha256, the gate scripts by what they judge with: plan/render.py gate_files) and ``image`` are on it. The
    programs the scripts carry (the tool's own code) are no part of it: a tool upgrade gates nothing."""
    section = stack_section(gateway)
    found = section["stack"]["container"]
    judged = section.get("judged") or {}
    return (stamp_current(section["stamp"], section["digest"])
            and all((judged.get(path) if path in judged else (file_entry(path) or {}).get("sha256")) == digest
                    for path, digest in files.items())
            and found is not None and found["image_id"] == image_id(image))


@snapshot_operation
def stamp_migrated(home: str, gateway: str | None = None):
    """
    Ensure the gate's stamp is in this version's form: an earlier version's
    stamp that names the host as it is now (the snapshot's ``legacy``) is
    rewritten on the host as this version's stamp of the same state
    (hostside/write/restamp.py), before the run replaces the scripts it
    covered; any other stamp is left as it is. Run before the scripts are
    written: the tool's upgrade then gates nothing that passed.

    + gateway: the slug of a gateway (router/<slug>/) instead of the server
    """
    if not stack_section(gateway).get("legacy"):
        host.noop("the gate's stamp is this version's, or names no pass of the host as it is")
        return
    yield f"{ship.command('write.restamp')} {q(home)}" + (f" {q(gateway)}" if gateway else "")
