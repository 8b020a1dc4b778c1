"""Every host: Debian's prometheus-node-exporter, listening where the data
says, its textfile collector carrying the gate's last result. On a serving
host the gate writes that file, and a systemd timer refreshes it every
minute, so a restart or an edit since the gate shows at once."""

from pyinfra import host

from sglang_infra.operations.files import checked_file
from sglang_infra.operations.system import packages_installed, root_directory, service_running
from sglang_infra.plan.types import (
    DROPIN_NAME,
    GATE_METRICS_UNIT,
    GPU_METRICS_UNIT,
    NODE_EXPORTER_SERVICE,
    PROGRAM_DIR,
    dropin_dir,
)
from sglang_infra.run.preflight import plan_of

plan = plan_of(host)
exporter = plan.node_exporter

if exporter is None:
    host.noop("sglang_node_exporter is off: no node exporter, and no gate metrics")
else:
    root_directory(name=f"Ensure {dropin_dir(NODE_EXPORTER_SERVICE)} exists",
                   path=dropin_dir(NODE_EXPORTER_SERVICE))
    dropin = checked_file(
        name=f"Ensure the node exporter listens on {exporter.listen} and reads the gate's metrics (its drop-in)",
        dest=f"{dropin_dir(NODE_EXPORTER_SERVICE)}/{DROPIN_NAME}", content=exporter.dropin,
        user="root", group="root",
    )
    # After its drop-in: the package's first start already listens where the data says, never on every address.
    packages_installed(name=f"Ensure {NODE_EXPORTER_SERVICE} is installed", packages=[NODE_EXPORTER_SERVICE])
    service_running(name=f"Ensure {NODE_EXPORTER_SERVICE} is running its current flags",
                    unit=f"{NODE_EXPORTER_SERVICE}.service", restart_if=dropin.did_change)

    if exporter.gate_metrics_units:
        root_directory(name=f"Ensure {PROGRAM_DIR} exists", path=PROGRAM_DIR)
        written = [checked_file(name=f"Ensure {path} is up to date", dest=path, content=text,
                                user="root", group="root")
                   for path, text in exporter.gate_metrics_units.items()]
        service_running(name="Ensure the gate's metrics are refreshed every minute",
                        unit=f"{GATE_METRICS_UNIT}.timer",
                        restart_if=lambda: any(op.did_change() for op in written))
    if plan.gpus.count and exporter.gate_metrics_units:
        service_running(name="Ensure each GPU's health is written for the node exporter every minute",
                        unit=f"{GPU_METRICS_UNIT}.timer",
                        restart_if=lambda: any(op.did_change() for op in written))
