"""Gateways of one model restarted one gateway host at a time (docs/front-door.md, "Rolling, drained restarts").

pyinfra runs validated on every gateway host at once. A gateway whose container
runs and must be recreated, on a model that another gateway host fronts too
(the site's balancer sends its clients to either), takes the model's turn (a
gevent lock shared by that model's gateways in this run): it asks itself
which workers it lists healthy, then `docker compose up` and its gate (with
its rollback and record) run as one program on the host, apart from the run's
connection (run/operation.py gated), and it gives the turn back only once the
gate passed and the new gateway answers /health and lists those workers
healthy again (hostside/roll/gateway_workers.py, bounded by
sglang_router_worker_startup_timeout), so the other gateway host serves
meanwhile. A failed turn (its restart, its gate, or its readiness) stops the
model's later turns: those gateways are not restarted and keep serving their
old config, and fail naming the gateway that failed (the next run tries
again). A new gateway (no running container) or the sole front of its model
takes no turn.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from dataclasses import dataclass

from pyinfra import logger

from ..machine import ship
from .facts import MAX_ANSWER_BYTES, bounded_json
from .operation import gate_reason, gated, q, run_on


@dataclass(frozen=True)
class GatewayTurn:
    """What a gateway's turn needs: its model, its own URL and files, and how long its readiness may take."""

    model: str            # the model's registry key: the gateways of one model take turns
    slug: str
    directory: str        # router/<slug>/
    url: str              # how the gateway host reaches its own gateway
    key_file: str | None  # the control-plane key (role admin) for its worker API
    ready_within: int     # sglang_router_worker_startup_timeout


@dataclass
class ModelTurns:
    """One model's gateway restarts in this run, shared by its gateway hosts' greenlets."""

    lock: AbstractContextManager
    failed: str | None = None   # "<gateway host>/<slug>: <why>" once a turn failed


_models: dict[tuple[int, str], ModelTurns] = {}


def model_turns(state, model: str) -> ModelTurns:
    from gevent.lock import Semaphore

    key = (id(state), model)
    if key not in _models:
        _models[key] = ModelTurns(Semaphore())
    return _models[key]


def on_own_gateway(host, turn: GatewayTurn, change: dict) -> tuple[bool, str]:
    """hostside/roll/gateway_workers.py on this gateway host, for its own gateway; (ok, its last line)."""
    args = [turn.directory, turn.url, *([turn.key_file] if turn.key_file else [])]
    status, output = run_on(host, f"{ship.command('roll.gateway_workers')} " + " ".join(q(a) for a in args),
                            json.dumps(change), print_output=False)
    return status, (output.stdout_lines + output.stderr_lines or ["no output"])[-1]


def gateway_turn(state, host, turn: GatewayTurn, up: str, gate: str, why: str) -> bool:
    """This gateway's turn among its model's gateways (the module's docstring): the restart ``up`` and the gate
    ``gate`` one detached program; False fails this host. pyinfra passes ``state`` and ``host`` only to a function
    whose parameters have these very names (FunctionCommand)."""
    def say(line, log=logger.info):
        host.log_styled(f"gateway turn: {line}", log_func=log)

    turns = model_turns(state, turn.model)
    with turns.lock:
        if turns.failed:
            say(f"{turn.slug} not restarted: the restarts of {turn.model}'s gateways stopped at {turns.failed}; it "
                "keeps serving its old config", logger.error)
            return False
        failure: str | None = "its turn did not finish"
        try:
            ok, said = on_own_gateway(host, turn, {"view": True})
            try:
                healthy = bounded_json(said, MAX_ANSWER_BYTES, "the gateway's answer")["healthy"] if ok else []
                if not isinstance(healthy, list) or not all(isinstance(url, str) for url in healthy):
                    healthy = []
            except (ValueError, KeyError, TypeError):
                healthy = []
            say(f"{why}: {turn.slug} restarts now; the other gateway hosts of {turn.model} keep serving")
            # the restart and its gate one program apart from this run's connection: a run lost in the turn
            # leaves the host to gate (and roll back) the new gateway by itself
            status, output = gated(host, gate, up)
            if not status:
                failure = gate_reason(output)
            else:
                ok, said = on_own_gateway(host, turn, {"ready_within": turn.ready_within, "healthy": healthy})
                failure = None if ok else said
        finally:
            if failure is not None:
                turns.failed = f"{host.name}/{turn.slug}: {failure}"
                say(f"{host.name}/{turn.slug} failed: {failure}; the restarts of {turn.model}'s other gateways "
                    "stop here", logger.error)
    if failure is not None:
        return False
    say(f"{turn.slug} passed its gate, is back and lists its {len(healthy)} healthy worker(s) again; the next "
        "gateway may go")
    return True
