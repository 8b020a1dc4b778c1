"""The last gate's result as Prometheus metrics, for the node exporter's textfile collector.

One file, names.GATE_METRICS_FILE in the collector's directory
(names.TEXTFILE_DIR), in Prometheus' text exposition format: when the last
gate ended, whether it passed, whether its tool-calling check passed, its
benchmark's tok/s and the model's baseline, whether the config running now is
the one the gate stamped, whether the worker's container runs, since when and
whether it is the one the gate stamped, and the room left where hf-cache
lives. gate.py writes it at the end of every worker gate; a systemd timer
the deploy installs refreshes it every minute, so a container restarted or a
compose.yaml edited since the gate shows as not validated before the next
deploy looks.

The node exporter reads every *.prom file of its directory on each scrape, so
the file is written beside it under a name that does not end in .prom,
flushed to disk and renamed over the old one: a scrape sees the old file or
the new one, never half of one. Nothing here follows a symlink (safefs). A
metric whose value is unknown (no gate yet, a malformed record, no hf-cache)
is left out rather than written as NaN. Without the directory (no node
exporter installed) nothing is written, and that is no error.

    python3 gate_metrics.py --home /opt/sglang [--textfile-dir DIR]
"""

import argparse
import datetime
import math
import os
import sys
import time

from .. import dockerapi, names, safefs, stack
from ..printable import written_or_said
from . import report, stamp

# Every metric the file can hold, in the file's order, with its HELP text. Gauges without labels of their own:
# Prometheus adds the host's and the model's from the scrape target.
METRICS = (
    ("sglang_gate_last_run_timestamp_seconds", "When the last gate on this host ended, in Unix seconds."),
    ("sglang_gate_passed", "1 when the last gate passed, 0 when it failed (rolled back or not)."),
    ("sglang_gate_tool_call_ok", f"1 when {names.VALIDATION_SCRIPTS[0]} passed in the last gate, "
                                 "0 when it failed or never ran (the server did not become ready)."),
    ("sglang_gate_tokens_per_second", "Aggregate output tokens per second of the last gate's benchmark."),
    ("sglang_gate_baseline_tokens_per_second", "The served model's baseline tokens per second, which the last "
                                               "gate's benchmark was compared with."),
    ("sglang_config_validated", "1 when the config and the container running now are the ones the last passing "
                                "gate stamped, 0 when anything changed or restarted since."),
    ("sglang_container_running", "1 when the worker's container runs, 0 when it is gone, stopped or exited, or "
                                 "the engine does not answer."),
    ("sglang_container_started_timestamp_seconds", "When the running worker container last started, in Unix "
                                                   "seconds (a multi-node group's members are compared by it)."),
    ("sglang_container_gated", "1 when the running worker container is the one the last gate stamped, 0 when it "
                               "started since (a multi-node group's member restarted alone)."),
    ("sglang_hf_cache_avail_bytes", "Bytes free for unprivileged users on the filesystem holding hf-cache."),
    ("sglang_hf_cache_size_bytes", "Size in bytes of the filesystem holding hf-cache."),
    ("sglang_gate_metrics_written_timestamp_seconds", "When this file was written, in Unix seconds."),
)
FILE_MODE = 0o644       # the node exporter runs as its own user and must read it


def _number(value):
    """``value`` when it is a finite number (a bool is none: the record is a file on the host), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def _seconds(text):
    """Unix seconds of the record's UTC ISO time ("2025-01-31T12:00:00Z"), or None."""
    if not isinstance(text, str):
        return None
    try:
        when = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=datetime.timezone.utc)).timestamp()


def record_values(home):
    """The metrics of the last gate's record (docker/.last-gate, read by report.py as status.sh reads it): each
    field that is there and of its type, the others left out."""
    record = report.last_gate(home)
    if not isinstance(record, dict):
        return {}
    benchmark = record.get("benchmark") if isinstance(record.get("benchmark"), dict) else {}
    found = {"sglang_gate_last_run_timestamp_seconds": _seconds(record.get("time")),
             "sglang_gate_tokens_per_second": _number(benchmark.get("tok_per_s")),
             "sglang_gate_baseline_tokens_per_second": _number(benchmark.get("baseline_tok_per_s"))}
    if isinstance(record.get("passed"), bool):
        found["sglang_gate_passed"] = int(record["passed"])
    # None: the check never ran (the server never became ready), so it did not pass. A record written before the
    # gate kept this field says nothing about it, and the metric is left out.
    if "tool_call_ok" in record and (record["tool_call_ok"] is None or isinstance(record["tool_call_ok"], bool)):
        found["sglang_gate_tool_call_ok"] = int(bool(record["tool_call_ok"]))
    return {name: value for name, value in found.items() if value is not None}


def running_container(home):
    """The worker's container as snapshot.py's read finds it (stack.state), None when the engine does not answer:
    the digest is then of no container, and matches no stamp."""
    try:
        return stack.state(os.path.join(home, names.DOCKER_DIR))["container"]
    except (dockerapi.Unavailable, ValueError):
        return None


def config_values(home):
    """Whether the gate's stamp names the config as it is now, computed as snapshot.py computes "gate" for the
    deploy: the same stamp, the same digest, the one comparison."""
    current = names.stamp_current(stamp.read(home), stamp.current(home, running_container(home)))
    return {"sglang_config_validated": int(current)}


def container_values(home):
    """Whether the worker's container runs and, when it does, when it started (Docker's StartedAt, nanoseconds cut
    to microseconds) and whether it is the one the last gate stamped. The alert rules judge a multi-node group from
    its members' (a member gone, restarted after rank 0, or restarted alone since the group's gate:
    sglang-alerts.yml)."""
    found = running_container(home)
    if found is None or found.get("state") != "running":
        return {"sglang_container_running": 0}
    values = {"sglang_container_running": 1}
    started = found.get("started_at")
    if isinstance(started, str) and not started.startswith("0001-"):
        head, dot, rest = started.rstrip("Z").partition(".")
        values["sglang_container_started_timestamp_seconds"] = _seconds(
            head + (dot + rest[:6] if dot else "") + "Z")
        gated = report.gated_start(home)
        if gated is not None:   # a record written before the gate kept the container says nothing about it
            values["sglang_container_gated"] = int(gated == started)
    return {name: value for name, value in values.items() if value is not None}


def cache_values(home):
    """Free and total bytes of hf-cache's filesystem. hf-cache is the account's and its group's to change, so
    it is opened without following a link (a link there gives nothing) and measured through its descriptor:
    statvfs on its path would follow one."""
    home_fd = safefs.open_dir(home)
    try:
        fd = safefs.open_subdir(home_fd, names.HF_CACHE_DIR)
    finally:
        os.close(home_fd)
    if fd is None:
        return {}
    try:
        found = os.fstatvfs(fd)
    finally:
        os.close(fd)
    return {"sglang_hf_cache_avail_bytes": found.f_bavail * found.f_frsize,
            "sglang_hf_cache_size_bytes": found.f_blocks * found.f_frsize}


def gather(home, now=None):
    """{metric: value} of everything known now; each part that cannot be read is left out, never fatal."""
    values = {}
    for part in (record_values, config_values, container_values, cache_values):
        try:
            values.update(part(home))
        except (OSError, ValueError, dockerapi.Unavailable):
            pass   # a home half made, a file unreadable: the other parts still say what they know
    values["sglang_gate_metrics_written_timestamp_seconds"] = round(time.time() if now is None else now, 3)
    return values


def exposition(values):
    """Prometheus' text format of ``values``: HELP, TYPE and the sample of each metric known, in METRICS' order."""
    lines = []
    for name, help_text in METRICS:
        if name in values:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {values[name]!r}"]
    return "\n".join(lines) + "\n"


def write(home, textfile_dir=names.TEXTFILE_DIR, now=None):
    """The metrics file, replaced atomically in ``textfile_dir`` (safefs.replace_textfile): the path written, or None
    when the directory does not exist."""
    return safefs.replace_textfile(textfile_dir, names.GATE_METRICS_FILE, exposition(gather(home, now)).encode(),
                                   FILE_MODE)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="gate_metrics.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", required=True)
    parser.add_argument("--textfile-dir", default=names.TEXTFILE_DIR,
                        help=f"the node exporter's textfile collector directory (default {names.TEXTFILE_DIR})")
    args = parser.parse_args(argv)
    return written_or_said("gate_metrics", "the gate's metrics", args.textfile_dir,
                           lambda: write(args.home, args.textfile_dir))


if __name__ == "__main__":
    sys.exit(main())
