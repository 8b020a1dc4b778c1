"""The one shape of a refusal, at the bottom of the control library: `problem()` formats one line naming the host,
the key, what is wrong and the fix; `raise_if()` refuses the run with every such line at once (`DeployDataError`).

Every concern judges its own data and says its problems through this module: the data of one host and that host
as it is (plan/refusals.py), a gateway host against the fleet's serving hosts and a worker's open port
(fleet/gateways.py), a monitor host against what it scrapes (fleet/monitoring.py), a multi-node group
(fleet/nodegroups.py), the peer door's ports (plan/peerdoor.py). It imports nothing of the project but the one
escape of host text (hostside/printable.py).
"""

from __future__ import annotations

from functools import lru_cache

import click
from pyinfra import logger
from pyinfra.api.exceptions import PyinfraError

from ..hostside.printable import printable


class DeployDataError(PyinfraError):
    """Raised while preparing the deploy, naming every problem; pyinfra exits non-zero."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.message = message
        self.problems = problems or [message]

    def show(self, file=None):
        logger.warning(f"--> {click.style('refused', 'red', bold=True)}: {self.message}")


@lru_cache(maxsize=1)
def _refusal() -> type:
    """
    DeployDataError as pyinfra's CliError too: its command line passes a
    CliError through untouched (pyinfra_cli/cli.py) and our show() prints the
    tool's message alone, without a source path. Made on first use, because
    importing pyinfra_cli monkey-patches threading for the whole process.
    """
    from pyinfra_cli.exceptions import CliError

    return type("DeployRefused", (DeployDataError, CliError), {"show": DeployDataError.show})



def problem(host_name: str, key: str, what: str, fix: str) -> str:
    """The one shape of every refusal: the host, the key, what is wrong, and the fix."""
    return f"host {printable(host_name)}: {key}: {what}. Fix: {fix}."


def _summary(errors: list[str]) -> str:
    lines = "\n  - ".join(errors)
    return f"refused before any change on any host ({len(errors)} problem(s)):\n  - {lines}"


def raise_if(errors: list[str]) -> None:
    if errors:
        raise _refusal()(_summary(errors), errors)
