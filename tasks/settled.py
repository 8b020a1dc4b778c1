"""A settled host: its state and its plan are what the last run that changed nothing found and stamped
(sglang_infra/run/settled.py), so one operation, which changes nothing, stands for all the others. The plan's
warnings are said as tasks/models.py says them on a full run."""

from pyinfra import host, logger

from sglang_infra.operations.stack import host_settled
from sglang_infra.run import settled
from sglang_infra.run.preflight import plan_of

for warning in plan_of(host).warnings:
    logger.warning(f"[{host.name}] {warning}")

host_settled(
    name="Ensure the host is as its last settled run left it (its snapshot and plan match its stamp)",
    stamp=settled.stamp_of(host),
)
