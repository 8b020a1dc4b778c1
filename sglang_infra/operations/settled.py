"""The one operation of a settled host (sglang_infra/settled.py): it changes nothing and says why."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation


@operation()
def host_settled(stamp: str):
    """
    Ensure the host is as its last run that changed nothing left it: the
    preflight found its snapshot and its plan equal to that run's stamp
    (``stamp``: the plan's fingerprint), so no other operation is planned.
    """
    host.noop(f"the host's snapshot and plan match the stamp of its last settled run (plan {stamp[:12]})")
    yield from ()
