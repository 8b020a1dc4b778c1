"""Run test modules in two lanes at once: each lane is one pytest session of its own (for the end-to-end modules,
its own testbed run prefix, stand-in Hub and registry), over a share of the modules balanced by their last
measured durations (scripts/lane_durations.json, keyed by the module's path; a module not listed there counts as
the median). Two, not more: the machine the suite is written for has two cores, and for the end-to-end modules
every test host is a systemd with a nested dockerd on them; more modules at once made gates fail for load alone.

    python3 scripts/lanes.py [--lanes 2] [--name e2e] MODULE...

Each lane's output goes to .lanes/NAME-N.log and is printed whole when the lane ends; the script ends with one
closing line "NAME: N passed, N failed" (the lanes' counts added up) and exits non-zero when any lane failed,
errored or ran no test (pytest's exit 5).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DURATIONS = Path(__file__).with_name("lane_durations.json")
LOGS = ROOT / ".lanes"
COUNTS = re.compile(r"(\d+) (passed|failed|errors?|skipped)")


def balanced(modules: list[str], lanes: int, seconds: dict[str, float]) -> list[list[str]]:
    """The modules in ``lanes`` groups of about equal total time, longest first onto the lightest lane."""
    known = [seconds[m] for m in modules if m in seconds]   # the median of these modules, not of every kind
    default = statistics.median(known) if known else 60.0
    weight = {m: seconds.get(m, default) for m in modules}
    groups: list[list[str]] = [[] for _ in range(lanes)]
    totals = [0.0] * lanes
    for module in sorted(modules, key=lambda m: (-weight[m], m)):
        lightest = totals.index(min(totals))
        groups[lightest].append(module)
        totals[lightest] += weight[module]
    return [group for group in groups if group]


def counts(text: str) -> dict[str, int]:
    """The counts of pytest's closing line in ``text`` ('3 passed, 1 failed in 12.3s')."""
    lines = [line for line in text.splitlines() if " in " in line and COUNTS.search(line)]
    found: dict[str, int] = {}
    for number, word in COUNTS.findall(lines[-1] if lines else ""):
        found["errors" if word.startswith("error") else word] = int(number)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lanes", type=int, default=2)
    parser.add_argument("--name", default="e2e", help="names the lanes' logs and lines")
    parser.add_argument("modules", nargs="+")
    args = parser.parse_args(argv)
    seconds = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    LOGS.mkdir(exist_ok=True)
    running = []
    for number, group in enumerate(balanced(args.modules, args.lanes, seconds), 1):
        log = LOGS / f"{args.name}-{number}.log"
        print(f"{args.name} lane {number}: {' '.join(Path(m).name for m in group)}", flush=True)
        handle = log.open("w")
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--durations=0", "--durations-min=0.5",
                   *group]
        running.append((number, log, handle, subprocess.Popen(command, cwd=ROOT, stdout=handle,
                                                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)))
    total: dict[str, int] = {}
    failed = False
    for number, log, handle, process in running:
        began = time.monotonic()
        code = process.wait()
        handle.close()
        text = log.read_text(errors="replace")
        waited = time.monotonic() - began
        print(f"\n===== {args.name} lane {number} (exit {code}, waited {waited:.0f} s more) =====\n{text}", flush=True)
        for key, value in counts(text).items():
            total[key] = total.get(key, 0) + value
        failed = failed or code != 0
    print(f"{args.name}: {total.get('passed', 0)} passed, {total.get('failed', 0) + total.get('errors', 0)} failed"
          + (f", {total['skipped']} skipped" if total.get("skipped") else ""))
    return 1 if failed or not total.get("passed") else 0


if __name__ == "__main__":
    sys.exit(main())
