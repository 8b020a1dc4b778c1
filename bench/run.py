"""Deploy benchmark on real test hosts: first converge, no-change re-run and
drift repair, at several fleet sizes.

    scripts/bench.sh [--hosts 1,2,4] [--reps 3] [--out bench/results]

For each fleet size and repetition it starts fresh hosts (the test harness's
Debian trixie containers, reached over SSH), then times three runs of
`pyinfra -y INVENTORY deploy.py`, whole-process:
- converge: the first run on bare hosts;
- rerun: the same deploy again, which must change nothing;
- repair: after planting the same drifts on every host.
It also counts the remote commands one no-change re-run executes per host
(from pyinfra's own -vv echo of each command) and the peak RSS of the
control process. Results: median and min-max, and each median as a ratio to
the first fleet size's, in JSON and Markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT))   # harness imports sglang_infra (ship): the checkout itself, whatever the cwd

from harness import PYINFRA, _env, parse_output, write_inventory  # noqa: E402
from testbed import hosts as testbed  # noqa: E402

# Planted on every host before the repair run; each is repaired by a different operation.
DRIFTS = (
    "chmod g-s /opt/sglang/hf-cache/hub",
    "usermod -s /bin/bash sglang",
    "gpasswd -d sglang docker",
    "sed -i 's/--mem-fraction-static=0.85/--mem-fraction-static=0.95/' /opt/sglang/docker/compose.yaml",
    "rm /opt/sglang/docker/.env",
)
DEPLOY_TIMEOUT = 900  # seconds; one deploy longer than this is killed
_COMMAND_RE = re.compile(r"^\[(?P<host>[^\]]+)\] >>> ", re.M)


def timed(command: list[str], *, cwd: Path, env: dict[str, str], timeout: float = DEPLOY_TIMEOUT) -> dict:
    """One child process, timed whole: wall seconds, peak RSS (MiB), exit code, output.

    The output goes to a file, not a pipe: a helper the child leaves behind
    (OpenSSH's ControlPersist master, for one) cannot hold the run open. A run
    longer than ``timeout`` is killed (its whole process group) and reported
    with return code -9.
    """
    with tempfile.TemporaryFile("w+") as log:
        started = time.perf_counter()
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        killer = threading.Timer(timeout, os.killpg, (proc.pid, signal.SIGKILL))
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        seconds = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        output = log.read()
    # CPU: the child's and that of every descendant it waited for (Linux wait4 sums them).
    return {"seconds": seconds, "peak_rss_mib": usage.ru_maxrss / 1024, "returncode": proc.returncode,
            "user_s": usage.ru_utime, "sys_s": usage.ru_stime, "output": output}


def timed_deploy(inventory: Path, *args: str, checkout: Path = ROOT) -> dict:
    """One `pyinfra -y INVENTORY deploy.py` of ``checkout`` (this one by default), run from it and importing
    from it, with this venv's pyinfra."""
    return timed([*PYINFRA, "-y", str(inventory), "deploy.py", *args], cwd=checkout,
                 env=_env({"PYTHONPATH": str(checkout)}))


def one_round(count: int, rep: int, state_dir: Path, image: str, base: dict) -> dict:
    names = [f"bench-{count}-{i}" for i in range(count)]
    fleet = [testbed.start_host(name, state_dir, image=image) for name in names]
    try:
        inventory = write_inventory(state_dir / f"bench_{count}_{rep}.py",
                                   {"production": [(host, {}) for host in fleet]}, base=base)
        converge = timed_deploy(inventory)
        if converge["returncode"] != 0:
            raise SystemExit(f"converge of {count} host(s) failed:\n{converge['output'][-3000:]}")
        rerun = timed_deploy(inventory)
        changed = {h: [op for op, by_host in parse_output(rerun["output"]).items() if by_host.get(h) == "Success"]
                   for h in names}
        counted = timed_deploy(inventory, "-vv")
        commands = {h: 0 for h in names}
        for match in _COMMAND_RE.finditer(counted["output"]):
            commands[match["host"]] = commands.get(match["host"], 0) + 1
        for host in fleet:
            for drift in DRIFTS:
                host.exec(drift)
        repair = timed_deploy(inventory)
        repaired = {h: [op for op, by_host in parse_output(repair["output"]).items() if by_host.get(h) == "Success"]
                    for h in names}
        after = timed_deploy(inventory)
        still_changing = {h for h in names
                          if any(by_host.get(h) == "Success" for by_host in parse_output(after["output"]).values())}
    finally:
        for name in names:
            testbed.remove_host(name)
    return {
        "hosts": count, "rep": rep,
        "converge_s": converge["seconds"], "rerun_s": rerun["seconds"], "repair_s": repair["seconds"],
        "peak_rss_mib": max(r["peak_rss_mib"] for r in (converge, rerun, repair)),
        "rerun_commands_per_host": max(commands.values()),
        "rerun_changes": sum(len(v) for v in changed.values()),
        "repair_ops_per_host": min(len(v) for v in repaired.values()),
        "changes_after_repair": len(still_changing),
    }


METRICS = (
    ("converge_s", "first converge (s)"),
    ("rerun_s", "no-change re-run (s)"),
    ("repair_s", "drift repair (s)"),
    ("rerun_commands_per_host", "remote commands per host, no-change re-run"),
    ("peak_rss_mib", "control process peak RSS (MiB)"),
)


def summarise(samples: list[dict], counts: list[int]) -> dict:
    table = {}
    for key, _ in METRICS:
        row = {}
        for count in counts:
            values = [s[key] for s in samples if s["hosts"] == count]
            row[count] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
        base = row[counts[0]]["median"]
        for count in counts:
            row[count]["ratio"] = row[count]["median"] / base if base else None
        table[key] = row
    return table


def markdown(table: dict, counts: list[int], reps: int) -> str:
    head = "| metric | " + " | ".join(f"{c} host{'s' if c > 1 else ''}" for c in counts) + " |"
    lines = [head, "|---|" + "---|" * len(counts)]
    for key, label in METRICS:
        cells = []
        for count in counts:
            cell = table[key][count]
            fmt = "{:.0f}" if key == "rerun_commands_per_host" else "{:.2f}"
            cells.append(f"{fmt.format(cell['median'])} [{fmt.format(cell['min'])}-{fmt.format(cell['max'])}] "
                         f"x{cell['ratio']:.2f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"median [min-max] over {reps} repetitions; xN = median / the {counts[0]}-host median.")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # 1,2,4 x 3 repetitions takes about 9 minutes on 2 cores; adding 8 hosts makes it about 18.
    parser.add_argument("--hosts", default="1,2,4", help="fleet sizes, comma-separated (default 1,2,4)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per fleet size (default 3)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"), help="where the JSON and Markdown go")
    args = parser.parse_args()
    counts = [int(c) for c in args.hosts.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    state_dir = out / "state"
    state_dir.mkdir(exist_ok=True)
    image = testbed.ensure_image()
    # Test hosts have no GPU: the stand-in profile, as in the tests and the sandbox.
    base = testbed.standin_data()

    samples = []
    started = time.monotonic()
    for rep in range(args.reps):
        for count in counts:
            sample = one_round(count, rep, state_dir, image, base)
            samples.append(sample)
            print(f"bench: {count} host(s) rep {rep + 1}/{args.reps}: converge {sample['converge_s']:.1f}s, "
                  f"re-run {sample['rerun_s']:.2f}s ({sample['rerun_commands_per_host']} commands/host, "
                  f"{sample['rerun_changes']} changes), repair {sample['repair_s']:.2f}s", file=sys.stderr)
    table = summarise(samples, counts)
    text = markdown(table, counts, args.reps)
    (out / "bench.json").write_text(json.dumps({"counts": counts, "reps": args.reps, "samples": samples,
                                                 "summary": table, "wall_s": time.monotonic() - started},
                                                indent=2, default=str) + "\n")
    return publish(out / "bench.md", text, [s for s in samples if s["rerun_changes"] or s["changes_after_repair"]],
                   "bench: {} round(s) were not idempotent: {}")


def publish(markdown_path: Path, text: str, failures: list, message: str) -> int:
    """Write and print the table; exit non-zero, saying why, when a round was not idempotent."""
    markdown_path.write_text(text + "\n")
    print(text)
    if failures:
        print(message.format(len(failures), failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
