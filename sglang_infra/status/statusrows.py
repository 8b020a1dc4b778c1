"""The fleet status report, inside the run that reads it (scripts/status.sh,
sglang_infra/status/fleetstatus.py, runs `pyinfra INVENTORY deploy.py --dry` with
SGLANG_STATUS_REPORT set to a file name).

In that run the preflight reads each host's snapshot with its report section
(hostside/gate/report.py), and a host whose data is refused or that cannot be read
is noted here instead of stopping the run; its tasks are skipped. The other
hosts' tasks are planned as in any `--dry` run, from the same one snapshot,
so how many of their operations would change is the drift. When pyinfra
exits, one row per inventory host is written to the file as JSON: what row()
says about the plan and the snapshot, nothing else.

The lock rules (docs/status.md):
- image: without a lock, "no lock". With one, the digest it records for
  sglang_image must be what the container runs: the running image's
  RepoDigests hold `repo@<that digest>`; with the toolchain image (built FROM
  the pinned base, so it has no registry digest of its own) its label
  sglang.toolchain.base must be the pinned `repo@<digest>`. An image loaded
  from sglang_image_archive has no registry digest, and the lock records none
  for it: "n/a".
- model: the container's model (its sglang.model label, repo@commit) must be
  the lock's commit for the served key, and that revision in hf-cache
  complete and verified with the lock's content digest (every file's path,
  size and sha256).
"""

from __future__ import annotations

import atexit
import ipaddress
import json
import os
from datetime import datetime, timezone
from typing import Any, Mapping

from ..hostside.formats.netloc import netloc
from ..hostside.names import MODEL_LABEL, TOOLCHAIN_BASE_LABEL, stamp_current
from ..machine.gpus import gpu_faults
from ..machine.modelfit import fit as model_fit
from ..plan.schema import listen_address

ENV = "SGLANG_STATUS_REPORT"
SHORT_COMMIT = 7    # as git abbreviates
SHORT_DIGEST = 12   # as docker abbreviates

_noted: dict[int, dict[str, dict]] = {}
_installed: set[int] = set()


def requested() -> str | None:
    """The file this run writes its report to, when it is a status report."""
    return os.environ.get(ENV) or None


def note(state, name: str, plan, problems: list[str], snapshot: Mapping[str, Any] | None) -> None:
    """What the preflight found on one host: its plan (None when refused or unreadable), problems, snapshot."""
    _noted.setdefault(id(state), {})[name] = {"plan": plan, "problems": problems, "snapshot": snapshot}


# ---------------------------------------------------------------- one host's row

def _short_digest(digest: str | None) -> str | None:
    return digest.split(":", 1)[-1][:SHORT_DIGEST] if digest else None


def _running_image(snapshot, container) -> tuple[list[str], list[str], dict]:
    """The tags, registry digests (repo@sha256:...) and labels of the image the container runs."""
    image_id = (container or {}).get("image_id")
    tags: list[str] = []
    digests: list[str] = []
    labels: dict = {}
    for ref, found in ((snapshot.get("docker") or {}).get("images") or {}).items():
        if image_id and found.get("id") == image_id:
            (digests if "@" in ref else tags).append(ref)
            labels = found.get("labels") or labels
    return sorted(tags), sorted(digests), labels


def image_lock(plan, tags_digests_labels) -> str:
    """"yes", "no", "no lock" or "n/a" (the lock pins no digest for this image), by the rule above."""
    from ..models.lockfile import repository

    if plan.lock is None:
        return "no lock"
    wanted = plan.image.locked
    if wanted is None or plan.image.archive:
        return "n/a"
    _tags, digests, labels = tags_digests_labels
    if plan.image.build is not None:
        return "yes" if labels.get(TOOLCHAIN_BASE_LABEL) == wanted else "no"
    return "yes" if any(repository(d) == repository(wanted) and d.split("@", 1)[1] == wanted.split("@", 1)[1]
                        for d in digests) else "no"


def _model(plan, snapshot, container) -> dict:
    running = ((container or {}).get("labels") or {}).get(MODEL_LABEL) or plan.served.pinned
    repo_id, _, commit = running.partition("@")
    key = plan.served.key if repo_id.lower() == plan.served.repo_id.lower() else next(
        (k for k, e in plan.registry.items() if e.repo_id.lower() == repo_id.lower()), repo_id)
    revision = ((((snapshot.get("models") or {}).get("repos") or {}).get(repo_id) or {}).get("revisions")
                or {}).get(commit) or {}
    found = {"key": key, "repo_id": repo_id, "commit": commit, "short": commit[:SHORT_COMMIT],
             "complete": bool(revision.get("complete")), "verified": bool(revision.get("verified")),
             "size": revision.get("size"), "wanted": plan.served.revision}
    if plan.lock is None:
        found["lock"] = "no lock"
    else:
        locked = plan.lock.models.get(key)
        found["lock"] = "yes" if (locked is not None and locked.commit == commit and found["verified"]
                                  and revision.get("content") == locked.content) else "no"
    return found


def _uptime(started_at: str | None, now: float | None) -> int | None:
    if not started_at or now is None or started_at.startswith("0001-"):
        return None
    # Docker's RFC 3339 time has nanoseconds; Python reads at most microseconds.
    head, _, rest = started_at.rstrip("Z").partition(".")
    try:
        started = datetime.fromisoformat(head).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None
    return max(0, int(now - started))


def _gpus(report) -> dict | None:
    found = report.get("gpus")
    if found is None:
        return None
    names: dict[str, int] = {}
    for gpu in found:
        names[gpu["name"]] = names.get(gpu["name"], 0) + 1
    known = [g for g in found if g.get("total_mib") is not None]
    return {"count": len(found), "names": names,
            "used_mib": sum(g["used_mib"] for g in known) if known else None,
            "total_mib": sum(g["total_mib"] for g in known) if known else None}


def _of(value, kind):
    """``value`` when it is of ``kind`` (a bool is no number), else None: the gate's record is a file on the host."""
    if isinstance(value, bool) and kind is not bool:
        return None
    return value if isinstance(value, kind) else None


def _gate_record(report) -> tuple[dict | None, dict]:
    """The last gate's record and its benchmark figures, each field of the type it must have (None otherwise)."""
    gate = report.get("gate")
    if not isinstance(gate, Mapping) or not gate:
        return None, {}
    benchmark = found if isinstance(found := gate.get("benchmark"), Mapping) else {}
    number = (int, float)
    return {"time": _of(gate.get("time"), str), "passed": _of(gate.get("passed"), bool),
            "reason": None if gate.get("reason") is None else str(gate.get("reason")),
            "rolled_back": _of(gate.get("rolled_back"), bool)}, \
        {key: _of(benchmark.get(key), number) for key in ("tok_per_s", "baseline_tok_per_s", "ratio_to_baseline",
                                                          "avg_spec_accept_length", "min_accept_length")}


def row(name: str, plan, snapshot: Mapping[str, Any], drift: list[str]) -> dict:
    """One host's row: the plan and the snapshot (with its report section) judged, and the drifted operations."""
    report = snapshot.get("report") or {}
    container = (snapshot.get("stack") or {}).get("container")
    image = _running_image(snapshot, container)
    gate, benchmark = _gate_record(report)
    os_release = snapshot.get("os") or {}
    cache, disk = report.get("cache") or {}, report.get("disk") or {}
    return {
        "host": name, "reachable": True, "refused": [],
        "os": " ".join(str(v) for v in (os_release.get("id"), os_release.get("version")) if v) or None,
        "gpus": _gpus(report),
        # each GPU nvidia-smi reports unhealthy, named with its reason (gpus.gpu_faults)
        "gpu_faults": gpu_faults(snapshot.get("gpus")),
        "docker": {"engine": (report.get("engine") or {}).get("version"), "compose": report.get("compose")},
        "image": {"ref": next((t for t in image[0] if t == plan.image.serving), next(iter(image[0] or image[1]), None)),
                  "digest": _short_digest(image[1][0].split("@", 1)[1] if image[1] else None),
                  "id": _short_digest((container or {}).get("image_id")),
                  "wanted": plan.image.serving, "lock": image_lock(plan, image) if container else "?"},
        "model": _model(plan, snapshot, container),
        "container": None if container is None else {
            "state": container.get("state"), "health": container.get("health"),
            "started_at": container.get("started_at"),
            "uptime_s": _uptime(container.get("started_at"), report.get("now"))},
        "gate": None if gate is None else {
            "time": gate.get("time"), "passed": gate.get("passed"), "reason": gate.get("reason"),
            "rolled_back": gate.get("rolled_back"), "tok_per_s": benchmark.get("tok_per_s"),
            "baseline_tok_per_s": benchmark.get("baseline_tok_per_s"),
            "ratio_to_baseline": benchmark.get("ratio_to_baseline"),
            # a speculative recipe's average accept length, and its floor (None without a recipe)
            "avg_spec_accept_length": benchmark.get("avg_spec_accept_length"),
            "min_accept_length": benchmark.get("min_accept_length"),
            # whether what runs now is what the gate last passed (the stamp, hostside/gate/stamp.py)
            "current": stamp_current((snapshot.get("gate") or {}).get("stamp"),
                                     (snapshot.get("gate") or {}).get("digest")),
            # when the container it stamped had started (a group's member started since restarted alone)
            "started_at": (snapshot.get("gate") or {}).get("started_at")},
        "drift": {"operations": len(drift), "names": drift},
        "disk": {"hf_cache_bytes": cache.get("bytes"), "free_bytes": disk.get("free"),
                 "total_bytes": disk.get("total")},
        "lock": plan.lock.path if plan.lock is not None else None,
        # a host only in the router group serves no model; a gateway host's gateways and their workers' health
        "serves": plan.serves,
        # who may call its API and gateways without the key (sglang_api_key_file, sglang_trusted_network)
        "api": api_access(plan),
        "gateways": report.get("gateways") or [],
        # a monitor host: where its Prometheus answers (the fleet's metrics, alerts and the dashboard's source)
        "prometheus": prometheus_url(name, plan.monitor.settings) if plan.monitor else None,
        # a member of a multi-node group: the group, its members and its rank (fleetstatus judges the group whole)
        "node_group": group_fields(plan.node_group),
        # the served model against the GPUs, the figures the preflight judged it by (machine/modelfit.py); None where
        # it is not judged (no GPU, no lock)
        "fit": fit_fields(plan),
    }


def fit_fields(plan) -> dict | None:
    found = model_fit(plan)
    return None if found is None else {**found.figures(), "said": found.said()}


GROUP_FIELDS = ("name", "rank", "members", "head", "port", "ports", "interface")   # what the row carries of a group


def group_fields(group) -> dict | None:
    """A multi-node group as its row carries it (JSON: its name, this host's rank, its members in rank order, rank
    0's address and range); groupstatus.of_row reads it back."""
    if group is None:
        return None
    return {name: list(getattr(group, name)) if name == "members" else getattr(group, name) for name in GROUP_FIELDS}


API_ACCESS = ("key", "no key, trusted network", "no key, loopback only", "NO KEY, OPEN")


def api_access(plan) -> str:
    """Who may call the host's API and its gateways: with the key only; anyone, the operator having said the network
    is trusted (sglang_trusted_network); local callers only (every port on loopback); or anyone, undeclared (the
    deploy refuses that: gateways.check_open_worker and check_fleet)."""
    if plan.api_key is not None:
        return API_ACCESS[0]
    if plan.exposure.trusted_network:
        return API_ACCESS[1]
    published = ([plan.exposure.bind_address] if plan.serves else []) + \
        ([plan.front_door.settings.published_on] if plan.front_door is not None else [])
    return API_ACCESS[2] if all(ipaddress.ip_address(a).is_loopback for a in published) else API_ACCESS[3]


def prometheus_url(name: str, settings) -> str:
    """Where a monitor host's Prometheus answers: its listen address, the host's name when that is every
    address (loopback stays loopback: reached from that host, or through an SSH tunnel)."""
    parsed = listen_address(settings.listen_address)
    assert parsed is not None, "the plan refuses a monitor host whose listen address is not one"
    address, port = parsed
    if ipaddress.ip_address(address).is_unspecified:
        address = name
    return f"http://{netloc(address, port)}"


def unanswered(name: str, reason: str | None = None, refused: list[str] | None = None,
               snapshot: Mapping[str, Any] | None = None) -> dict:
    """The row of a host that could not be reported on in full: unreachable, or its data refused."""
    os_release = (snapshot or {}).get("os") or {}
    return {"host": name, "reachable": snapshot is not None or bool(refused), "unreachable": reason,
            "refused": refused or [],
            "os": " ".join(str(v) for v in (os_release.get("id"), os_release.get("version")) if v) or None}


# ---------------------------------------------------------------- the end of the run

def drifted(state, host) -> list[str]:
    """The operations a re-run would change on ``host``: pyinfra's own `--dry --json` hosts_with_change."""
    from pyinfra_cli.prints import pretty_op_name

    names = []
    for op_hash in state.get_op_order():
        if op_hash not in state.ops[host]:
            continue
        op_data = state.get_op_data_for_host(host, op_hash)
        if op_data.operation_meta._maybe_is_change and not op_data.global_arguments["_if"]:
            names.append(pretty_op_name(state.op_meta[op_hash]))
    return names


def rows(state) -> list[dict]:
    out = []
    for host in state.inventory:
        # keyed by the host's own State: deploy.py's `state` is pyinfra's context proxy, another object
        found = _noted.get(id(host.state), {}).get(host.name)
        if host not in state.activated_hosts:
            out.append(unanswered(host.name, "could not connect"))
        elif found is None or host in state.failed_hosts:   # pyinfra fails a host whose snapshot it cannot read
            out.append(unanswered(host.name, "connected, but the snapshot could not be read"))
        elif found["plan"] is None:
            out.append(unanswered(host.name, refused=found["problems"], snapshot=found["snapshot"]))
        else:
            out.append(row(host.name, found["plan"], found["snapshot"], drifted(state, host)))
    return out


def install(state) -> None:
    """When this run is a status report: write its rows when pyinfra exits. Idempotent."""
    path = requested()
    if not path or id(state) in _installed:
        return
    _installed.add(id(state))

    def _write():
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"hosts": rows(state)}, handle, indent=2, sort_keys=True)

    atexit.register(_write)
