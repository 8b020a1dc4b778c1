"""Scale-out benchmark (issue 35): how a pool behind the REAL gateway (sglang-router 0.3.2) grows and changes.

    .venv/bin/python bench/scaleout.py [--out bench/results]

Real test hosts (the test harness's Debian trixie containers, reached over SSH, removed at the end): four stand-in
workers of one model and two gateway hosts. In one run, one after another:
1. the first converge of one worker behind a fresh gateway (w1 behind gw-b);
2. the first converge of a new pool of three behind another fresh gateway (w2, w3, w4 behind gw-a): the goal is at
   most 1.3x the first, since workers that serve nobody yet restart together instead of one turn each;
3. w1 joins the pool behind gw-a (out of service there: it goes at once, the others have nothing to do);
4. a config change of the four workers at sglang_max_unavailable 1, under steady load through gw-a;
5. the same kind of change at "50%": two turns instead of four;
6. a config whose server never answers a completion, on w1 alone (--limit), sglang_ready_timeout 20: the run must
   fail within about that deadline plus the rollback's own time, and w1 serve its last good config again.
Reports each deploy's wall time and the roll's window (from the first worker out to the last one back, from the
time-stamped deploy output), with requests sent, failed and streams cut under load; the ratios of 2 to 1 and of
5 to 4. Writes bench/results/scaleout.md and scaleout.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from harness import Testbed  # noqa: E402
from rolling import BACK, GATE_END, deploy  # noqa: E402
from rolling_load import Load  # noqa: E402

W1, W2, W3, W4, GWA, GWB = "bench-so-w1", "bench-so-w2", "bench-so-w3", "bench-so-w4", "bench-so-gwa", "bench-so-gwb"
WORKERS = (W1, W2, W3, W4)
MODEL = "qwen3.6-35b-a3b"
MAX_TOKENS = 200
ENV = {"STANDIN_LOAD_SECONDS": "2"}
OUT = ("roll: ", ": taking ", "out of service, restarted at once")
LOGS = ROOT / "bench" / "results" / "scaleout-logs"   # each case's time-stamped deploy output


def window(lines) -> float | None:
    """Seconds from the first worker that left (or restarted at once) to the last one back and healthy, or to the
    last gate's verdict when no gateway answers yet (a first converge: the gateway is deployed after the workers)."""
    lines = [(at, line) for at, line in lines if any(f"[{worker}]" in line for worker in WORKERS)]   # not gateways
    starts = [at for at, line in lines if OUT[0] in line and (OUT[1] in line or OUT[2] in line)]
    ends = [at for at, line in lines if BACK.search(line) or GATE_END.search(line)]
    return round(max(ends) - min(starts), 1) if starts and ends else None


def case(name: str, inventory: Path, gateway: str | None = None) -> dict:
    if gateway is None:
        code, lines, wall = deploy(inventory)
        load = None
    else:
        with Load(gateway, MODEL, max_tokens=MAX_TOKENS) as load:
            code, lines, wall = deploy(inventory)
    if code != 0:
        raise SystemExit(f"bench: {name} failed:\n" + "\n".join(line for _, line in lines[-60:]))
    row = {"case": name, "deploy_s": round(wall, 1), "roll_s": window(lines)}
    LOGS.mkdir(parents=True, exist_ok=True)
    (LOGS / f"{name.split('.')[0]}.log").write_text("\n".join(f"{at:8.1f} {line}" for at, line in lines) + "\n")
    if load is not None:
        row.update(sent=load.sent, failed=load.failed, cut=load.cut, fewest_healthy=load.fewest)
    print(json.dumps(row), flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args()
    global LOGS
    LOGS = Path(args.out) / "scaleout-logs"
    state = Path(args.out) / "scaleout-state"
    state.mkdir(parents=True, exist_ok=True)
    bed = Testbed(state)
    began = time.monotonic()
    try:
        hosts = {name: bed.host(name) for name in (W1, W2, W3, W4, GWA, GWB)}

        def inventory(file, workers, router, mark="a", hung=None, **data):
            def values(name):
                never = {"STANDIN_FAILURE": "never_completes"} if name == hung else {}
                return {"sglang_drain_timeout": 60, "sglang_extra_env": {**ENV, "ROLL_MARK": mark, **never}, **data}
            return bed.inventory(state / file, {
                "production": [(hosts[n], values(n)) for n in workers],
                "router": [(hosts[router], {"sglang_router_bind_address": hosts[router].address})]})

        gateway = f"http://{hosts[GWA].address}:30080"
        rows = [case("1. first converge: one worker behind a fresh gateway", inventory("one.py", [W1], GWB)),
                case("2. first converge: a new pool of 3 behind a fresh gateway",
                     inventory("three.py", [W2, W3, W4], GWA)),
                case("3. w1 joins the pool: it serves, only the gateway's worker set changes",
                     inventory("four.py", [W1, W2, W3, W4], GWA)),
                case("4. change of 4 workers at sglang_max_unavailable 1, under load",
                     inventory("at-one.py", [W1, W2, W3, W4], GWA, mark="b"), gateway),
                case('5. the same change at "50%", under load',
                     inventory("at-half.py", [W1, W2, W3, W4], GWA, mark="c", sglang_max_unavailable="50%"), gateway)]
        code, lines, wall = deploy(inventory("hung.py", [W1, W2, W3, W4], GWA, mark="c", sglang_max_unavailable="50%",
                                             sglang_ready_timeout=20, hung=W1), "--limit", W1)
        said = [line for _, line in lines if "gate[" in line and "FAILED" in line]
        began = min((at for at, line in lines if "roll: " in line), default=0.0)
        ended = max((at for at, line in lines if "gate[" in line and "FAILED" in line), default=wall)
        rolled_back = any("Rolled back to the last known-good config, which serves" in line for line in said)
        rows.append({"case": "6. a server that never answers, sglang_ready_timeout 20 (--limit w1): the run fails",
                     "deploy_s": round(wall, 1), "roll_s": round(ended - began, 1), "failed_run": code != 0,
                     "rolled_back": rolled_back})
        print(json.dumps(rows[-1]), flush=True)
    finally:
        bed.close()
    first, pool, at_one, at_half = rows[0], rows[1], rows[3], rows[4]
    ratios = {"new pool of 3 / one worker (deploy wall)": round(pool["deploy_s"] / first["deploy_s"], 2),
              "new pool of 3 / one worker (roll window)": round(pool["roll_s"] / first["roll_s"], 2)
              if pool["roll_s"] and first["roll_s"] else None,
              '"50%" / 1 (roll window)': round(at_half["roll_s"] / at_one["roll_s"], 2)
              if at_half["roll_s"] and at_one["roll_s"] else None,
              '"50%" / 1 (deploy wall)': round(at_half["deploy_s"] / at_one["deploy_s"], 2)}
    hung = rows[5]
    ratios["never-answering server: run failed, rolled back, s from the roll's start to the verdict"] = \
        f"{hung['failed_run']}, {hung['rolled_back']}, {hung['roll_s']}"
    lines = ["| case | deploy wall s | roll window s | requests sent | failed | streams cut | fewest healthy |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['case']} | {row['deploy_s']} | {row['roll_s'] if row['roll_s'] is not None else '-'} | "
                     f"{row.get('sent', '-')} | {row.get('failed', '-')} | {row.get('cut', '-')} | "
                     f"{row.get('fewest_healthy', '-')} |")
    lines += ["", "| ratio | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in ratios.items()]
    lines += ["", f"Whole benchmark: {time.monotonic() - began:.0f} s."]
    table = "\n".join(lines)
    print(table)
    out = Path(args.out)
    (out / "scaleout.md").write_text(table + "\n")
    (out / "scaleout.json").write_text(json.dumps({"rows": rows, "ratios": ratios}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
