"""Rolling-restart benchmark (issue 23): a config change of every worker behind the REAL gateway (sglang-router
0.3.2), under steady client load, the rolling way against the old all-at-once way, in the same run.

    .venv/bin/python bench/rolling.py [--out bench/results]

Real test hosts (the test harness's Debian trixie containers, reached over SSH, removed at the end): one gateway
host and three stand-in workers of one model. Load: 6 clients through the gateway, one request after another,
half of them streaming, each about 1.5 s of generation (600 tokens at the stand-in's 400 tok/s).
- rolling: the inventory with its `router` group; the deploy changes every worker's config (sglang_extra_env),
  one worker of the pool at a time (operations/roll.py);
- control: the same kind of change with the gateway host left out of the inventory, so no gateway fronts the
  workers in that run: every worker restarts at once, as every deploy did before (the gateway keeps running and
  finds out through its health checks).
Reports requests sent, failed, streams cut, the fewest healthy workers the gateway listed, the deploy's wall
time, the roll's wall time (first worker out to last one back) and the sum of the workers' own gate times (from
each worker's `compose up` to its gate's verdict, from the time-stamped deploy output). Writes
bench/results/rolling.md and rolling.json.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT))

from harness import PYINFRA, Testbed, _env  # noqa: E402
from rolling_load import Load, gateway_workers  # noqa: E402

WORKERS = ("bench-roll-w1", "bench-roll-w2", "bench-roll-w3")
GW = "bench-roll-gw"
MODEL = "qwen3.6-35b-a3b"
MAX_TOKENS = 600            # about 1.5 s at the stand-in's default 400 tok/s
DEPLOY_TIMEOUT = 1800
ENV = {"STANDIN_LOAD_SECONDS": "2"}
GATE_START = re.compile(r"^\s*\[(?P<host>[^\]]+)\].*roll: .*: taking ")
GATE_END = re.compile(r"gate\[(?P<host>[^\]]+)\]: (passed|FAILED)")
BACK = re.compile(r"^\s*\[(?P<host>[^\]]+)\].*roll: .* is back and healthy")
STACK_UP = re.compile(r"^\s*\[(?P<host>[^\]]+)\].*(Recreate|Started|Starting|Created)")


def deploy(inventory: Path, *args: str) -> tuple[int, list[tuple[float, str]], float]:
    """(return code, time-stamped output lines, wall seconds) of one deploy, read line by line as it runs."""
    started = time.monotonic()
    proc = subprocess.Popen([*PYINFRA, "-y", str(inventory), "deploy.py", *args], cwd=ROOT, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    lines = []
    deadline = started + DEPLOY_TIMEOUT
    for line in proc.stdout:
        lines.append((time.monotonic() - started, line.rstrip("\n")))
        if time.monotonic() > deadline:
            proc.kill()
            break
    proc.wait(60)
    return proc.returncode, lines, time.monotonic() - started


def gate_times(lines) -> dict[str, float]:
    """Each worker's gate: from its first stack restart line (or its roll's start) to the gate's verdict."""
    begin, out = {}, {}
    for at, line in lines:
        for pattern in (GATE_START, STACK_UP):
            found = pattern.search(line)
            if found and found["host"] in WORKERS and found["host"] not in begin:
                begin[found["host"]] = at
        found = GATE_END.search(line)
        if found and found["host"] in begin and found["host"] not in out:
            out[found["host"]] = at - begin[found["host"]]
    return out


def roll_window(lines) -> float | None:
    starts = [at for at, line in lines if GATE_START.search(line)]
    ends = [at for at, line in lines if BACK.search(line)]
    return (max(ends) - min(starts)) if starts and ends else None


def one_case(name, inventory, gateway) -> dict:
    with Load(gateway, MODEL, max_tokens=MAX_TOKENS) as load:
        code, lines, wall = deploy(inventory)
        # the old way: the gateway finds the restarted workers healthy again through its health checks
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all((gateway_workers(gateway) or {"": False}).values()):
            time.sleep(1)
        time.sleep(3)
    gates = gate_times(lines)
    if code != 0:
        raise SystemExit(f"bench: the {name} deploy failed:\n" + "\n".join(line for _, line in lines[-60:]))
    return {"case": name, "sent": load.sent, "failed": load.failed, "cut": load.cut, "fewest_healthy": load.fewest,
            "deploy_s": round(wall, 1), "roll_s": round(roll_window(lines), 1) if roll_window(lines) else None,
            "gate_sum_s": round(sum(gates.values()), 1) if gates else None,
            "gates_s": {h: round(v, 1) for h, v in gates.items()},
            "errors": load.errors[:5]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args()
    state = Path(args.out) / "rolling-state"
    state.mkdir(parents=True, exist_ok=True)
    bed = Testbed(state)
    try:
        hosts = {name: bed.host(name) for name in (*WORKERS, GW)}

        def inventory(file, mark, routed=True):
            values = {"sglang_drain_timeout": 60, "sglang_extra_env": {**ENV, "ROLL_MARK": mark}}
            groups = {"production": [(hosts[n], values) for n in WORKERS]}
            if routed:
                groups["router"] = [(hosts[GW], {"sglang_router_bind_address": hosts[GW].address})]
            return bed.inventory(state / file, groups)

        code, lines, _ = deploy(inventory("converge.py", "a"))
        if code != 0:
            raise SystemExit("bench: the first converge failed:\n" + "\n".join(line for _, line in lines[-60:]))
        gateway = f"http://{hosts[GW].address}:30080"
        rows = [one_case("rolling (this deploy)", inventory("rolling.py", "b"), gateway),
                one_case("control: all at once (no gateway in the run)", inventory("control.py", "c", routed=False),
                         gateway)]
    finally:
        bed.close()
    lines = ["| case | requests sent | failed | streams cut | fewest healthy workers listed | deploy wall s | "
             "roll wall s | sum of the workers' gate times s |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['case']} | {row['sent']} | {row['failed']} | {row['cut']} | {row['fewest_healthy']} | "
                     f"{row['deploy_s']} | {row['roll_s'] if row['roll_s'] is not None else '-'} | "
                     f"{row['gate_sum_s'] if row['gate_sum_s'] is not None else '-'} |")
    table = "\n".join(lines)
    print(table)
    out = Path(args.out)
    (out / "rolling.md").write_text(table + "\n")
    (out / "rolling.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
