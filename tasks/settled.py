"""A settled host: its state and its plan are what the last run that changed nothing found and stamped
(sglang_infra/settled.py), so no operation is planned; one line says so. The plan's warnings are said as
tasks/models.py says them on a full run."""

from pyinfra import host, logger

from sglang_infra.preflight import plan_of

for warning in plan_of(host).warnings:
    logger.warning(f"[{host.name}] {warning}")

host.noop("settled: the host's snapshot and plan match the stamp of its last run that changed nothing; "
          "no operation planned")
