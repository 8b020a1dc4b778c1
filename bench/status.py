"""Fleet status benchmark: the wall time of scripts/status.sh at 1 and 8 hosts.

    .venv/bin/python bench/status.py [--hosts 8] [--reps 5]

Starts fresh test hosts (the test harness's Debian trixie containers over
SSH), converges them in one deploy, then times whole `scripts/status.sh
INVENTORY --json` runs, alternating an inventory of the first host alone and
one of every host, `--reps` times each. Every timed report must say "ok" for
every host. Prints median [min-max] per fleet size and the ratio of the
medians, and writes bench/results/status.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "bench"))

from harness import write_inventory  # noqa: E402
from run import timed, timed_deploy  # noqa: E402
from testbed import hosts as testbed  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=8, help="the larger fleet (default 8)")
    parser.add_argument("--reps", type=int, default=5, help="timed reports per fleet size (default 5)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args()
    out = Path(args.out)
    state_dir = out / "state"
    state_dir.mkdir(parents=True, exist_ok=True)
    image, base = testbed.ensure_image(), testbed.standin_data()
    names = [f"bench-status-{i}" for i in range(args.hosts)]
    fleet = [testbed.start_host(name, state_dir, image=image) for name in names]
    try:
        inventories = {size: write_inventory(state_dir / f"status_{size}.py",
                                             {"production": [(h, {}) for h in fleet[:size]]}, base=base)
                       for size in (1, args.hosts)}
        converge = timed_deploy(inventories[args.hosts])
        if converge["returncode"] != 0:
            raise SystemExit(f"converge of {args.hosts} host(s) failed:\n{converge['output'][-3000:]}")
        seconds: dict[int, list[float]] = {1: [], args.hosts: []}
        for _ in range(args.reps):
            for size, inventory in inventories.items():
                run = timed(["bash", "scripts/status.sh", str(inventory), "--json"], cwd=ROOT,
                            env={k: v for k, v in os.environ.items() if k != "PYINFRA_YES"}, timeout=600)
                report = json.loads(run["output"][run["output"].index("{"):])
                if run["returncode"] != 0 or report["summary"]["ok"] != size:
                    raise SystemExit(f"status of {size} host(s) was not all ok:\n{run['output'][-3000:]}")
                seconds[size].append(run["seconds"])
    finally:
        for name in names:
            testbed.remove_host(name)
    medians = {size: statistics.median(values) for size, values in seconds.items()}
    result = {"reps": args.reps, "seconds": seconds, "medians": medians,
              "ratio": medians[args.hosts] / medians[1], "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ")}
    (out / "status.json").write_text(json.dumps(result, indent=2) + "\n")
    for size, values in seconds.items():
        print(f"status.sh, {size} host(s): {medians[size]:.2f} s [{min(values):.2f}-{max(values):.2f}] "
              f"over {args.reps} runs")
    print(f"ratio {args.hosts} hosts / 1 host: {result['ratio']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
