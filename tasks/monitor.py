"""Monitor hosts: Debian's Prometheus scraping every host of the inventory
(each worker's SGLang /metrics, each gateway's, each node exporter), with
the alert rules, and the Grafana dashboard placed for a site's Grafana. A
new target list is checked by promtool before it replaces the old one;
then Prometheus reloads, it does not restart."""

from pyinfra import host

from sglang_infra.machine import ship
from sglang_infra.operations.files import checked_file
from sglang_infra.operations.system import packages_installed, root_directory, service_running
from sglang_infra.plan.types import (
    ALERT_RULES,
    DASHBOARD_DIR,
    DASHBOARD_FILE,
    DROPIN_NAME,
    PROMETHEUS_CONFIG,
    PROMETHEUS_SERVICE,
    dropin_dir,
)
from sglang_infra.run.preflight import plan_of

monitor = plan_of(host).monitor
settings = monitor.settings

root_directory(name=f"Ensure {dropin_dir(PROMETHEUS_SERVICE)} exists", path=dropin_dir(PROMETHEUS_SERVICE))
dropin = checked_file(
    name=f"Ensure Prometheus listens on {settings.listen_address} and keeps {settings.retention} (its drop-in)",
    dest=f"{dropin_dir(PROMETHEUS_SERVICE)}/{DROPIN_NAME}", content=monitor.dropin, user="root", group="root",
)
# After its drop-in: the package's first start already listens where the data says.
packages_installed(name=f"Ensure {PROMETHEUS_SERVICE} is installed", packages=[PROMETHEUS_SERVICE])
rules = checked_file(
    name=f"Ensure {ALERT_RULES} holds the fleet's alert rules, accepted by promtool",
    dest=ALERT_RULES, content=monitor.rules, user="root", group="root",
    check="promtool check rules {candidate} >/dev/null",
)
config = checked_file(
    name=f"Ensure {PROMETHEUS_CONFIG} scrapes the inventory's {len(monitor.targets)} targets, accepted by promtool",
    dest=PROMETHEUS_CONFIG, content=monitor.config, user="root", group="root",
    check="promtool check config {candidate} >/dev/null",
)
root_directory(name=f"Ensure {DASHBOARD_DIR} exists", path=DASHBOARD_DIR)
checked_file(
    name=f"Ensure {DASHBOARD_DIR}/{DASHBOARD_FILE} is the fleet's Grafana dashboard",
    dest=f"{DASHBOARD_DIR}/{DASHBOARD_FILE}", content=monitor.dashboard, user="root", group="root",
    check=f"{ship.PYTHON} -m json.tool {{candidate}} >/dev/null",
)
service_running(name="Ensure Prometheus is running its current flags, and has read its current config and rules",
                unit=f"{PROMETHEUS_SERVICE}.service", restart_if=dropin.did_change,
                reload_if=lambda: rules.did_change() or config.did_change())
