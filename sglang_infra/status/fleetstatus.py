"""A read-only fleet report, one row per host (scripts/status.sh).

    python3 -m sglang_infra.status.fleetstatus [INVENTORY] [--json]

It runs `pyinfra INVENTORY deploy.py --dry --json` (--json: pyinfra asks no
"continue?" when a host fails to connect) with SGLANG_STATUS_REPORT set:
one snapshot per host, read in parallel (with its report section), every
task planned and nothing executed (statusrows.py writes the rows). This module
judges each row and prints the table (or JSON) and the fleet's summary line.

Exit code: 0 when every host is reachable, serving (container running and
not unhealthy, the served model complete and verified, the last gate passed)
and on the lock (or without one); 1 when any host is unreachable, refused,
failing or off the lock; 2 when no report could be made (a broken
inventory). Drift is shown, never a failure: `pyinfra INVENTORY deploy.py`
repairs it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from ..hostside.formats.units import human
from ..hostside.printable import printable
from . import groupstatus, statusrows

PROJECT_DIR = Path(__file__).resolve().parent.parent.parent
RUN_TIMEOUT = 600   # seconds for the whole read; SSH's own connect timeout ends an unanswered host much sooner
# The verdicts, worst first; a host's verdict is its worst problem's kind.
VERDICTS = ("unreachable", "refused", "failing", "off the lock", "ok")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


# ---------------------------------------------------------------- judging a row

def problems(row: dict) -> list[tuple[str, str]]:
    """(kind, what) for everything wrong with one host; drift is not a problem."""
    if not row.get("reachable"):
        return [("unreachable", row.get("unreachable") or "no answer")]
    if row.get("refused"):
        return [("refused", problem) for problem in row["refused"]]
    if row.get("unreachable"):
        return [("unreachable", row["unreachable"])]
    found = []
    if row.get("api") == statusrows.API_ACCESS[-1]:
        found.append(("refused", "no sglang_api_key_file and sglang_trusted_network is False, yet a port of this host "
                                 "answers the network without a key; the next deploy refuses that"))
    for gateway in row.get("gateways") or ():
        if gateway.get("error"):
            found.append(("failing", f"gateway {gateway['slug']}: {gateway['error']}"))
        elif not any(w["healthy"] for w in gateway["workers"]):
            found.append(("failing", f"gateway {gateway['slug']} has no healthy worker"))
    if row.get("serves") is False:   # a gateway-only host: no container, model or gate of its own to judge
        return found
    container, gate, model, image = row.get("container"), row.get("gate"), row["model"], row["image"]
    found += [("failing", fault) for fault in row.get("gpu_faults") or ()]
    if container is None:
        found.append(("failing", "the service has no container"))
    elif container["state"] != "running":
        found.append(("failing", f"the container is {container['state']}"))
    elif container.get("health") == "unhealthy":
        found.append(("failing", "the container is unhealthy"))
    if not (model["complete"] and model["verified"]):
        found.append(("failing", f"the served model {model['repo_id']}@{model['commit']} is not complete and "
                                 "verified in hf-cache"))
    if gate is not None and gate.get("passed") is False:
        found.append(("failing", f"the last gate failed: {gate.get('reason')}"))
    if image.get("lock") == "no":
        found.append(("off the lock", f"the container runs {image.get('ref')}, not the image digest of "
                                      f"{row.get('lock')}"))
    if model.get("lock") == "no":
        found.append(("off the lock", f"the container serves {model['key']}@{model['short']}, not the commit and "
                                      f"content {row.get('lock')} records for {model['key']}"))
    return found


def verdict(found: list[tuple[str, str]]) -> str:
    return min((kind for kind, _ in found), key=VERDICTS.index, default="ok")


def node_groups(rows: list[dict]) -> list[dict]:
    """Every multi-node group the rows' plans name, in inventory order: its members and rank 0, and why it is
    failing (groupstatus.problems, from each member's container; a member not reported on is not known to serve)."""
    by_host = {row["host"]: row for row in rows}
    out: dict[str, dict] = {}
    for row in rows:
        if row.get("node_group") and row["node_group"]["name"] not in out:
            group = groupstatus.of_row(row["node_group"])
            containers = {name: by_host[name]["container"] for name in group.members
                          if by_host.get(name, {}).get("reachable") and "container" in by_host[name]}
            gated = {name: (by_host[name].get("gate") or {}).get("started_at") for name in containers}
            found = groupstatus.problems(group, containers, gated)
            out[group.name] = {"name": group.name, "members": list(group.members), "head": group.head_name,
                               "problems": found, "verdict": "failing" if found else "ok"}
    return list(out.values())


def judged(rows: list[dict]) -> dict:
    """The rows with their problems and verdict, the fleet's summary and the exit code. A member of a failing
    multi-node group is failing too, with its group's lines."""
    groups = node_groups(rows)
    failing = {group["name"]: group["problems"] for group in groups}
    hosts = []
    for row in rows:
        found = problems(row)
        if row.get("reachable") and not row.get("refused") and row.get("node_group"):
            found += [("failing", line) for line in failing.get(row["node_group"]["name"], ())]
        hosts.append({**row, "problems": [f"{kind}: {what}" for kind, what in found], "verdict": verdict(found)})
    counts = {kind: sum(1 for h in hosts if h["verdict"] == kind) for kind in VERDICTS}
    drifted = [h for h in hosts if (h.get("drift") or {}).get("operations")]
    summary = {"hosts": len(hosts), **counts, "drifted_hosts": len(drifted),
               "drifted_operations": sum(h["drift"]["operations"] for h in drifted)}
    return {"hosts": hosts, "groups": groups, "summary": summary, "exit": 0 if counts["ok"] == len(hosts) else 1}


# ---------------------------------------------------------------- the table

def _duration(seconds: int | None) -> str:
    if seconds is None:
        return "?"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def _size(value) -> str:
    return "?" if value is None else human(value)


def _cells(host: dict) -> list[str]:
    if host["verdict"] in ("unreachable", "refused"):
        return [host["host"], host["verdict"], host.get("os") or "?"] + [""] * 11
    gpus, docker, image, model = host["gpus"], host["docker"], host["image"], host["model"]
    container, gate, disk = host["container"], host["gate"], host["disk"]
    if gpus is None:
        gpu_cell = "none"
    else:
        names = ", ".join(f"{n}×{name}" for name, n in sorted(gpus["names"].items())) or "0"
        memory = "" if gpus["total_mib"] is None else \
            f" {gpus['used_mib'] / 1024:.1f}/{gpus['total_mib'] / 1024:.1f} GiB"
        gpu_cell = names + memory
    digest = image.get("digest") or (f"id {image['id']}" if image.get("id") else "?")
    if container is None:
        container_cell = "none"
    else:
        health = f" ({container['health']})" if container.get("health") else ""
        container_cell = f"{container['state']}{health} {_duration(container.get('uptime_s'))}"
    if gate is None:
        gate_cell = "no record"
    else:
        outcome = "pass" if gate.get("passed") else "FAIL"
        tok = gate.get("tok_per_s")
        ratio = gate.get("ratio_to_baseline")
        figures = "" if tok is None else f" {tok:g} tok/s" + ("" if ratio is None else f" ({ratio:g}x)")
        if gate.get("avg_spec_accept_length") is not None:
            figures += f" accept {gate['avg_spec_accept_length']:.2f}"
        gate_cell = f"{gate.get('time') or '?'} {outcome}{figures}"
    verified = "verified" if model["complete"] and model["verified"] else "INCOMPLETE"
    return [host["host"], host["verdict"], host.get("os") or "?", gpu_cell,
            f"{docker.get('engine') or '?'} / {docker.get('compose') or '?'}",
            f"{image.get('ref') or '?'} {digest}", image["lock"],
            f"{model['key']}@{model['short']} {verified}", model["lock"],
            container_cell, gate_cell, str(host["drift"]["operations"]),
            f"{_size(disk.get('hf_cache_bytes'))} / {_size(disk.get('free_bytes'))}", host.get("api") or "?"]


HEADER = ["HOST", "STATUS", "OS", "GPUS (mem used/total)", "DOCKER / COMPOSE", "IMAGE (digest)", "LOCK",
          "MODEL", "LOCK", "CONTAINER", "LAST GATE (UTC)", "DRIFT", "HF-CACHE / FREE",
          "API"]


def gateway_line(host: str, gateway: dict) -> str:
    """One gateway on a gateway host: its port, and each worker with the health the gateway reports."""
    if gateway.get("error"):
        return f"{host}: gateway {gateway['slug']} :{gateway.get('port')}: {gateway['error']}"
    workers = gateway["workers"]
    each = ", ".join(f"{w['url']} {'healthy' if w['healthy'] else 'UNHEALTHY'}" for w in workers) or "none"
    healthy = sum(w["healthy"] for w in workers)
    return f"{host}: gateway {gateway['slug']} :{gateway['port']}: {healthy}/{len(workers)} workers healthy ({each})"


def summary_line(summary: dict) -> str:
    counts = ", ".join(f"{summary[kind]} {kind}" for kind in VERDICTS if summary[kind] or kind == "ok")
    drift = (f"{summary['drifted_operations']} operation(s) would change on {summary['drifted_hosts']} host(s)"
             if summary["drifted_hosts"] else "no drift")
    return f"fleet: {summary['hosts']} host(s): {counts}; {drift}"


def table(report: dict) -> str:
    # Much of a row came from the hosts (log-derived reasons, worker URLs, labels): printed escaped.
    rows = [HEADER] + [[printable(cell) for cell in _cells(host)] for host in report["hosts"]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    for host in report["hosts"]:
        lines += [printable(f"{host['host']}: {problem}") for problem in host["problems"]]
        lines += [printable(gateway_line(host["host"], gateway)) for gateway in host.get("gateways") or ()]
        if host.get("fit"):
            lines.append(printable(f"{host['host']}: fits its GPUs: {host['fit']['said']}"))
        if host.get("prometheus"):
            lines.append(printable(f"{host['host']}: the fleet's Prometheus (metrics, alerts, the dashboard's "
                                   f"source) at {host['prometheus']}"))
    lines += [printable(group_line(group)) for group in report.get("groups") or ()]
    lines.append(summary_line(report["summary"]))
    return "\n".join(lines)


def group_line(group: dict) -> str:
    """A multi-node group as one worker: its name, verdict, rank 0 and members (their lines are above)."""
    return f"group {group['name']}: {'FAILING' if group['problems'] else 'ok'}, one worker at rank 0 " \
           f"({group['head']}), members {', '.join(group['members'])}"


# ---------------------------------------------------------------- the run

def _connect_errors(output: str, names: list[str]) -> dict[str, str]:
    """What pyinfra said about each host it could not connect to (`[name] Could not connect ...`)."""
    found = {}
    for line in _ANSI.sub("", output).splitlines():
        match = re.match(r"^\[(?P<name>[^\]]+)\]\s+(?P<what>.+)$", line.strip())
        if match and match["name"] in names and match["name"] not in found \
                and not match["what"].startswith(("Connected", "Ready:", "over group_data")):
            found[match["name"]] = match["what"].strip()
    return found


def collect(inventory: str) -> list[dict]:
    """One row per host of ``inventory``, from one `pyinfra ... --dry` run in report mode."""
    from ..plan import inventoryfile

    names = [host.name for host in inventoryfile.load(inventory)]
    env = {k: v for k, v in os.environ.items() if k != "PYINFRA_YES"}   # -y would skip change detection
    with tempfile.TemporaryDirectory(prefix="sglang-status-") as tmp:
        out = os.path.join(tmp, "report.json")
        env.update({statusrows.ENV: out, "PYINFRA_PROGRESS": "off",
                    "PYTHONPATH": os.pathsep.join(filter(None, (str(PROJECT_DIR), env.get("PYTHONPATH"))))})
        proc = subprocess.run([sys.executable, "-m", "pyinfra", inventory, "deploy.py", "--dry", "--json"],
                              cwd=PROJECT_DIR, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=RUN_TIMEOUT)
        rows = json.loads(Path(out).read_text())["hosts"] if os.path.exists(out) else []
    output = proc.stdout + proc.stderr
    # No row at all: pyinfra stopped before the deploy file (every host failed to connect).
    seen = {row["host"] for row in rows}
    rows += [statusrows.unanswered(name, "could not connect") for name in names if name not in seen]
    errors = _connect_errors(output, [row["host"] for row in rows if row.get("unreachable") == "could not connect"])
    for row in rows:
        if not row["reachable"] and row["host"] in errors:
            row["unreachable"] = errors[row["host"]]
    order = {name: i for i, name in enumerate(names)}
    return sorted(rows, key=lambda row: order.get(row["host"], len(order)))


def main(argv: list[str]) -> int:
    args = [a for a in argv if a != "--json"]
    if len(args) > 1 or any(a.startswith("-") for a in args):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    inventory = os.path.abspath(args[0] if args else "inventory.py")
    try:
        rows = collect(inventory)
    except Exception as error:   # an inventory pyinfra cannot load: no report, say why
        print(f"status: no report could be made for {inventory}: {error}", file=sys.stderr)
        return 2
    report = judged(rows)
    print(json.dumps(report, indent=2, sort_keys=True) if "--json" in argv else table(report))
    return report["exit"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
