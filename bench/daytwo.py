"""Two runs of one change meeting on one host, against one run alone (issue #60, "Done when", item 2): the requests
failed while they meet, over several trials.

    .venv/bin/python bench/daytwo.py [--trials 6] [--out bench/results]

One real test host (the test harness's Debian trixie container, reached over SSH, removed at the end) serving the
stand-in, converged once. Then, per trial, three cases, each a new config (its own marker in sglang_extra_env, so
compose.yaml changes and the server restarts), in an order rotated from trial to trial so that the machine's load
drifting weighs on each case alike:
- alone: one run makes the change;
- at once: two runs of the same change, the second started as the first is;
- after start: two runs of the same change, the second started once the first's new container runs (the first is
  then in its gate).
Both runs of a pair take turns through the host's hold (sglang_infra/run/hold.py); the second finds the change made.
While each case runs, the host's own client (tests/support/day_two.py, Sampler) sends a chat completion every 0.5 s
and reads the serving container's docker events. Per case: requests failed / sent, the outage (the old container
told to stop to the new one's first answer), the container's starts, the failures outside that outage, the gates
that ran, the runs' exit codes and the machine's 1-minute load. Then per case kind: the median and mean failed
requests per restart, the median outage, the failed requests per second of outage, and the verdict: whether two
runs meeting fail no more requests per restart than one run alone. Writes bench/results/daytwo.md and daytwo.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT))

from day_two import DOCKER, Sampler, both, cat, data, results  # noqa: E402
from harness import Testbed, run_deploy  # noqa: E402

HOST = "bench-day2"
CASES = ("alone", "at once", "after start")
WAITED = "another run is changing this host"
# On the host: the serving container's first start since {since} (the host's seconds), as soon as dockerd reports it.
FIRST_START = ("import subprocess; p = subprocess.Popen(['docker', 'events', '--since', '{since}', '--filter', "
               "'type=container', '--filter', 'label=com.docker.compose.service=sglang', '--filter', 'event=start', "
               "'--format', '{{{{.TimeNano}}}}'], stdout=subprocess.PIPE, text=True); "
               "print(p.stdout.readline().strip()); p.kill()")


def cpu_ticks() -> tuple[int, int]:
    """This machine's CPU time so far (the test hosts are its containers): (busy, all) clock ticks, every core."""
    with open("/proc/stat") as stat:
        ticks = [int(t) for t in stat.readline().split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)   # idle and iowait are not busy


def one_case(kind: str, trial: int, host, inventory: Path, workdir: Path) -> dict[str, Any]:
    """One case of one trial, sampled; its row. A run that fails ends the bench, with its output."""
    marker = f"t{trial}-{kind.replace(' ', '-')}"
    gates, load = results(host), os.getloadavg()[0]
    at: dict[str, float] = {}

    def first_runs() -> bool:
        """Wait, on the host, for the first run's new container to start (one `docker events` reader, not a poll:
        polling the host ten times a second loaded the machine's two cores during the very restart it measured);
        the second run's moment, its time kept."""
        started = host.exec(f"timeout 300 python3 -c {shlex.quote(FIRST_START.format(since=at['first']))}",
                            check=False, timeout=330).stdout.strip()
        at["second"] = time.time()
        return bool(started)

    with Sampler(host) as sampled:
        began, cpu = time.monotonic(), cpu_ticks()
        at["first"] = time.time()   # the host's clock too: a test host is a container of this machine
        if kind == "alone":
            result = run_deploy(inventory, "--limit", HOST, *data(marker))
            runs = [(result.returncode, result.output)]
        else:
            at["second"] = at["first"]
            runs = both(inventory, workdir, HOST, data(marker), data(marker),
                        second_when=first_runs if kind == "after start" else None)
        wall = time.monotonic() - began   # the runs' own: the first's start to the last one's end
        busy = [b - a for a, b in zip(cpu, cpu_ticks())]
    if any(rc != 0 for rc, _ in runs):
        raise SystemExit(f"bench: a run of trial {trial} ({kind}) failed:\n" +
                         "\n---\n".join(output[-3000:] for _, output in runs))
    if f'"{marker}"' not in cat(host, f"{DOCKER}/compose.yaml"):
        raise SystemExit(f"bench: trial {trial} ({kind}): compose.yaml lacks its change")
    stopped, back = sampled.window() or (at["first"], at["first"])
    within = [sent for sent, _ in sampled.samples if stopped <= sent < back]
    return {"trial": trial, "case": kind, "sent": sampled.sent, "failed": sampled.failed,
            "outage_s": round(sampled.outage(), 2), "starts": sampled.starts(),
            "outside": len(sampled.outside_the_restart()), "gates": results(host) - gates,
            "waited": sum(WAITED in output for _, output in runs), "rcs": [rc for rc, _ in runs],
            "wall_s": round(wall, 1), "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2),
            "cpu_busy": round(busy[0] / busy[1], 2) if busy[1] else None,
            # when each run started, the samples were sent and the container's events came, in seconds from the old
            # container told to stop
            "runs_at_s": [round(at[k] - stopped, 2) for k in ("first", "second") if k in at],
            "sample_period_in_outage_s": round((within[-1] - within[0]) / (len(within) - 1), 2)
            if len(within) > 1 else None,
            "samples": [[round(sent - stopped, 2), word] for sent, word in sampled.samples],
            "events": [[round(t - stopped, 2), action] for t, action in sampled.events]}


def per_restart(row: dict[str, Any]) -> float:
    return row["failed"] / row["starts"] if row["starts"] else float("inf")


def mean_of(values) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.mean(known), 2) if known else None


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per case kind: the figures the verdict compares."""
    out = {}
    for kind in CASES:
        mine = [r for r in rows if r["case"] == kind]
        if not mine:
            continue
        outage = sum(r["outage_s"] for r in mine)
        out[kind] = {"trials": len(mine), "failed": [r["failed"] for r in mine],
                     "starts": [r["starts"] for r in mine], "outside": sum(r["outside"] for r in mine),
                     "median_per_restart": statistics.median(per_restart(r) for r in mine),
                     "mean_per_restart": round(statistics.mean(per_restart(r) for r in mine), 2),
                     "median_outage_s": round(statistics.median(r["outage_s"] for r in mine), 2),
                     "mean_outage_s": round(outage / len(mine), 2),
                     "failed_per_outage_s": round(sum(r["failed"] for r in mine) / outage, 2) if outage > 0 else None,
                     "mean_sample_period_in_outage_s": mean_of(r["sample_period_in_outage_s"] for r in mine),
                     "mean_cpu_busy": mean_of(r["cpu_busy"] for r in mine)}
    return out


def verdict(figures: dict[str, dict[str, Any]]) -> str:
    alone = figures["alone"]
    parts, held = [], True
    for kind in CASES[1:]:
        met = figures.get(kind)
        if met is None:
            continue
        ok = met["median_per_restart"] <= alone["median_per_restart"] and set(met["starts"]) == {1} \
            and met["outside"] == 0
        held = held and ok
        parts.append(f"{kind}: median {met['median_per_restart']} failed per restart, mean {met['mean_per_restart']},"
                     f" starts {met['starts']}, {met['outside']} outside the outage")
    word = "no more" if held else "MORE"
    return (f"verdict: two runs meeting fail {word} requests per restart than one run alone (alone: median "
            f"{alone['median_per_restart']}, mean {alone['mean_per_restart']}, starts {alone['starts']}; "
            + "; ".join(parts) + ")")


def markdown(head: list[str], body: list[list[Any]]) -> list[str]:
    """A markdown table's lines: ``head`` and one line per row of ``body``."""
    return [f"| {' | '.join(cells)} |" for cells in [head, ["---"] * len(head), *[[str(c) for c in b] for b in body]]]


def table(rows: list[dict[str, Any]], figures: dict[str, dict[str, Any]]) -> str:
    per_case = markdown(["trial", "case", "failed / sent", "outage s", "container starts", "failed outside the outage",
                         "gates", "runs waited", "runs wall s", "sample period in the outage s", "CPU busy",
                         "load before / after"],
                        [[r["trial"], r["case"], f"{r['failed']} / {r['sent']}", r["outage_s"], r["starts"],
                          r["outside"], r["gates"], r["waited"], r["wall_s"], r["sample_period_in_outage_s"],
                          r["cpu_busy"], f"{r['load_before']} / {r['load_after']}"]
                         for r in rows])
    per_kind = markdown(["case", "trials", "failed per trial", "median failed per restart", "mean", "median outage s",
                         "mean outage s", "failed per second of outage", "mean sample period in the outage s",
                         "mean CPU busy"],
                        [[kind, f["trials"], f["failed"], f["median_per_restart"], f["mean_per_restart"],
                          f["median_outage_s"], f["mean_outage_s"], f["failed_per_outage_s"],
                          f["mean_sample_period_in_outage_s"], f["mean_cpu_busy"]]
                         for kind, f in figures.items()])
    return "\n".join([*per_case, "", *per_kind])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args()
    if not 1 <= args.trials <= 50:
        parser.error("--trials: from 1 to 50")
    out = Path(args.out)
    state = out / "daytwo-state"
    state.mkdir(parents=True, exist_ok=True)
    # SIGTERM (a slot's holder stopped) removes the host as an interrupt does
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rows: list[dict[str, Any]] = []
    bed = Testbed(state)
    try:
        host = bed.host(HOST)
        inventory = bed.inventory(state / "daytwo.py", {"production": [(host, {})]})
        first = run_deploy(inventory)
        if first.returncode != 0:
            raise SystemExit("bench: the first converge failed:\n" + first.why())
        print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()}", flush=True)
        for trial in range(1, args.trials + 1):
            shift = (trial - 1) % len(CASES)
            for kind in CASES[shift:] + CASES[:shift]:
                row = one_case(kind, trial, host, inventory, state)
                print(json.dumps({k: v for k, v in row.items() if k != "samples"}), flush=True)
                rows.append(row)
    finally:
        bed.close()
    figures = summary(rows)
    text = table(rows, figures) + "\n\n" + verdict(figures)
    (out / "daytwo.md").write_text(text + "\n")
    (out / "daytwo.json").write_text(json.dumps({"rows": rows, "summary": figures}, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
