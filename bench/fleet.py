"""Fleet-size benchmark to 100 hosts (issue 45): the control side's cost per host of a no-change re-run.

    .venv/bin/python bench/fleet.py [--real 2] [--sizes 1,4,16,32,64,100] [--before REF] [--profile 64]
                                    [--out bench/results]

This machine holds a few real test hosts, not a hundred. The bench starts ``--real`` of them (the harness's
Debian trixie containers reached over SSH, the stand-in profile, an API key on every worker: the secure
default), converges them under their own names, requires a re-run to change nothing, and then reaches each
real host under several inventory names (aliases: one SSH target, several names, host ``i`` of a fleet on real
host ``i mod real``). Every alias of a host has the same data, so each plans the same state the host already
has: a no-change re-run of N names is a fair measure of the control side planning and connecting N hosts.

Per fleet size (one pyinfra process each, whole): the no-change re-run's wall time; the control process's CPU
time (user + system of pyinfra and everything it waited for, from os.wait4) and peak RSS; CPU per host; the
remote commands per host (pyinfra's own -vv echo, from a separate counting run made first, which also proves
that no alias changed anything); the CPU the real hosts' containers used meanwhile (their cgroups' cpuacct: sshd,
the snapshot programs, all of it on this machine's cores too); and each as a ratio to the smallest size. With
``--before REF`` the same hosts also run REF's deploy (a detached worktree, as bench/compare.py makes it) at each
size, just before this checkout's: the table then has both, and their ratio. With ``--profile N`` one more run
of N names goes under cProfile (the top functions by cumulative and own time go to fleet-profile.txt). With
``--drift`` a last step plants bench/run.py's five drifts on one host of a hundred names (the first real host
under its own name, the second under the 99 others) and times the run that repairs them and the re-run after it.

What an alias does not simulate: the hosts' own CPU (N names share ``--real`` hosts, so their snapshot reads
queue on a few sshd and python3 processes), the network (all hosts sit on this machine's bridge, sub-millisecond
away), and sshd's per-connection cost on distinct machines. The control side's own work, which is what this
measures, is that of N hosts. Each bench host's sshd takes up to 200 unauthenticated connections at once
(MaxStartups; OpenSSH's default of 10 would drop some of a hundred names' connections).

Writes bench/results/fleet.md and fleet.json; exits non-zero when any run failed or changed something.
Every host it starts is removed at the end, also on failure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pstats
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "support"))
sys.path.insert(0, str(HERE.parent))

from compare import Worktree  # noqa: E402
from harness import Testbed  # noqa: E402
from run import _COMMAND_RE, DRIFTS, PYINFRA, ROOT, _env, parse_output, timed, write_inventory  # noqa: E402
from testbed.hosts import TestHost  # noqa: E402

SIZES = (1, 4, 16, 32, 64, 100)
SSHD_CONF = "/etc/ssh/sshd_config.d/bench-fleet.conf"


def fleet_inventory(path: Path, real: list, count: int, base: dict) -> tuple[Path, list[str]]:
    """``count`` inventory names over the real hosts: name ``i`` is reached at real host ``i mod len(real)``.

    A fleet no larger than the real hosts uses their own names; beyond that every name is an alias."""
    if count <= len(real):
        members = real[:count]
    else:
        members = [dataclasses.replace(real[i % len(real)], name=f"fleet-{i:03d}") for i in range(count)]
    write_inventory(path, {"production": [(host, {}) for host in members]}, base=base)
    return path, [host.name for host in members]


def host_cpu_s(hosts: list[TestHost]) -> float | None:
    """CPU seconds the hosts' containers have used so far (cgroup v1 cpuacct, or v2 cpu.stat); None if unreadable."""
    total = 0.0
    for host in hosts:
        ident = subprocess.run(["docker", "inspect", "-f", "{{.Id}}", host.container], capture_output=True,
                               text=True, timeout=60).stdout.strip()
        v1 = Path(f"/sys/fs/cgroup/cpuacct/docker/{ident}/cpuacct.usage")
        v2 = Path(f"/sys/fs/cgroup/system.slice/docker-{ident}.scope/cpu.stat")
        if v1.exists():
            total += int(v1.read_text()) / 1e9
        elif v2.exists():
            total += int(v2.read_text().split("usage_usec")[1].split()[0]) / 1e6
        else:
            return None
    return total


def deploy(inventory: Path, *args: str, profile: Path | None = None, checkout: Path = ROOT,
           hosts: list[TestHost] = ()) -> dict:
    """One whole `pyinfra -y INVENTORY deploy.py` process of ``checkout``, timed: wall, CPU (user + sys), peak
    RSS; with ``hosts``, also the CPU their containers used meanwhile."""
    python = PYINFRA[:1]
    module = ["-m", "cProfile", "-o", str(profile), "-m", "pyinfra"] if profile else PYINFRA[1:]
    before = host_cpu_s(list(hosts)) if hosts else None
    run = timed([*python, *module, "-y", str(inventory), "deploy.py", *args], cwd=checkout,
                env=_env({"PYTHONPATH": str(checkout)}))
    after = host_cpu_s(list(hosts)) if hosts else None
    run["hosts_cpu_s"] = after - before if before is not None and after is not None else None
    return run


def changes(output: str, names: list[str]) -> int:
    return sum(1 for by_host in parse_output(output).values() for name in names if by_host.get(name) == "Success")


def commands_per_host(output: str, names: list[str]) -> float:
    counted = {name: 0 for name in names}
    for match in _COMMAND_RE.finditer(output):
        if match["host"] in counted:
            counted[match["host"]] += 1
    return sum(counted.values()) / len(names)


SETTLED_TASK = "tasks/settled.py | "


def settled_names(output: str, names: list[str]) -> int:
    """The names the run planned no operation on but the settled host's one (sglang_infra/run/settled.py)."""
    planned = {name for op, by_host in parse_output(output).items() if not op.startswith(SETTLED_TASK)
               for name in by_host}
    return sum(1 for name in names if name not in planned)


def checked(run: dict, what: str, names: list[str]) -> dict:
    if run["returncode"] != 0:
        raise SystemExit(f"fleet: {what} of {len(names)} name(s) failed (exit {run['returncode']}):\n"
                         f"{run['output'][-4000:]}")
    return run


def one_size(state: Path, real: list, count: int, base: dict, label: str = "after", checkout: Path = ROOT) -> dict:
    inventory, names = fleet_inventory(state / f"fleet_{count}.py", real, count, base)
    counted = checked(deploy(inventory, "-vv", checkout=checkout), f"{label}: counting run (-vv) at {count}", names)
    timed_run = checked(deploy(inventory, checkout=checkout, hosts=real), f"{label}: no-change re-run at {count}",
                        names)
    (state / f"fleet_{label}_{count}-vv.log").write_text(counted["output"])
    (state / f"fleet_{label}_{count}.log").write_text(timed_run["output"])
    cpu = timed_run["user_s"] + timed_run["sys_s"]
    hosts_cpu = timed_run["hosts_cpu_s"]
    return {"label": label, "hosts": count, "rerun_s": timed_run["seconds"], "cpu_s": cpu,
            "user_s": timed_run["user_s"], "sys_s": timed_run["sys_s"], "cpu_per_host_s": cpu / count,
            "peak_rss_mib": timed_run["peak_rss_mib"], "hosts_cpu_s": hosts_cpu,
            "hosts_cpu_per_name_s": hosts_cpu / count if hosts_cpu is not None else None,
            "commands_per_host": commands_per_host(counted["output"], names),
            "settled_names": settled_names(timed_run["output"], names),
            "changes": changes(counted["output"], names) + changes(timed_run["output"], names)}


def drift_one_of_a_hundred(state: Path, real: list, base: dict) -> dict:
    """The drifts planted on the first real host, reached under one name among 100; one run repairs them, the next
    changes nothing. Reports both runs and which names changed or planned anything."""
    members = [real[0]] + [dataclasses.replace(real[1], name=f"fleet-{i:03d}") for i in range(1, 100)]
    inventory = write_inventory(state / "fleet_drift.py", {"production": [(h, {}) for h in members]}, base=base)
    names = [h.name for h in members]
    for drift in DRIFTS:
        real[0].exec(drift)
    repair = checked(deploy(inventory, hosts=real), "repair of one drifted host of 100", names)
    after = checked(deploy(inventory, hosts=real), "re-run after the repair", names)
    (state / "fleet_drift_repair.log").write_text(repair["output"])
    (state / "fleet_drift_after.log").write_text(after["output"])
    statuses = parse_output(repair["output"])
    changed = sorted({n for by_host in statuses.values() for n, status in by_host.items() if status == "Success"})
    return {"hosts": 100, "drifted": real[0].name, "repair_s": repair["seconds"],
            "repair_cpu_s": repair["user_s"] + repair["sys_s"], "repaired_ops": sum(
                1 for by_host in statuses.values() if by_host.get(real[0].name) == "Success"),
            "changed_names": changed, "planned_names_in_repair": len(names) - settled_names(repair["output"], names),
            "after_s": after["seconds"], "after_changes": changes(after["output"], names),
            "settled_after": settled_names(after["output"], names)}


def profile_size(state: Path, out: Path, real: list, count: int, base: dict) -> dict:
    inventory, names = fleet_inventory(state / f"fleet_{count}.py", real, count, base)
    raw = state / f"fleet_{count}.prof"
    run = checked(deploy(inventory, profile=raw), f"profiled run at {count}", names)
    text = out / "fleet-profile.txt"
    with text.open("w") as stream:
        stream.write(f"cProfile of one no-change re-run of {count} names "
                     f"({run['seconds']:.1f} s wall, {run['user_s'] + run['sys_s']:.1f} s CPU under the profiler)\n")
        for order in ("cumulative", "tottime"):
            stream.write(f"\n==== by {order} ====\n")
            stats = pstats.Stats(str(raw), stream=stream)
            stats.strip_dirs().sort_stats(order).print_stats(45)
    return {"hosts": count, "wall_s": run["seconds"], "cpu_s": run["user_s"] + run["sys_s"], "file": str(text)}


ROWS = (
    ("rerun_s", "no-change re-run, wall (s)", "{:.2f}"),
    ("cpu_s", "control CPU, user+sys (s)", "{:.2f}"),
    ("cpu_per_host_s", "control CPU per host (s)", "{:.3f}"),
    ("peak_rss_mib", "control peak RSS (MiB)", "{:.0f}"),
    ("commands_per_host", "remote commands per host", "{:.1f}"),
    ("settled_names", "names settled (one no-op, no other operation)", "{:.0f}"),
    ("hosts_cpu_per_name_s", "test hosts' CPU per name (s)", "{:.3f}"),
)


_PROGRAM_OF = ("from sglang_infra.machine import ship; print(ship.cached_program('read.snapshot'), end='\\0'); "
               "print(ship.cached_sources('read.snapshot') if hasattr(ship, 'cached_sources') else '', end='')")
_RUN_CALL = re.compile(r'\nrun\((?P<packages>\[[^]]*\]), "(?P<blob>[A-Za-z0-9+/=]+)"[^\n]*\)\n$')


def read_programs(checkout: Path) -> dict[str, str]:
    """The snapshot's program as ``checkout`` sends it (ship.cached_program: the code cache's runner, then its call
    with the sources' key, or for a checkout from before the key, --before, the compressed modules), cut into the
    steps one read takes, each a whole program that stops there: ``decompress`` (the runner's own text compiled and
    its imports, the modules unpacked when the command carries them), ``load`` (and their code loaded from root's
    cache, or compiled), ``read`` (the whole read: the modules run, the host read); and ``sources``, what a miss is
    sent on stdin (ship.cached_sources; empty for a checkout whose command carries them)."""
    text, _, sources = subprocess.run(
        [sys.executable, "-c", _PROGRAM_OF], cwd=checkout, check=True, capture_output=True, text=True, timeout=120,
        env=_env({"PYTHONPATH": str(checkout)})).stdout.partition("\0")
    found = _RUN_CALL.search(text)
    if found is None:
        raise SystemExit(f"fleet: {checkout}'s snapshot program does not end in the code cache's run(...) call")
    runner = text[:found.start()]
    if sources:   # the command carries the key: a hit loads the entry and unpacks nothing
        program = re.search(r', "([\w.]+)"\)\n$', text)
        if program is None:
            raise SystemExit(f"fleet: {checkout}'s snapshot program does not name its program in its run(...) call")
        return {"decompress": runner + "\n",
                # the entry loaded; stored first when absent (the step's first run has the sources on stdin)
                "load": runner + f"\nif load(DIRECTORY, entry_name(\"{program[1]}\", \"{found['blob']}\")) is None:\n"
                                 "    modules = received()\n    codes_for(modules, DIRECTORY)\n",
                "read": text, "sources": sources}
    # the runner's own unpack(), or, for a checkout from before it (--before), the JSON it sent the modules in
    unpack = (f"\nmodules = unpack(\"{found['blob']}\") if \"unpack\" in globals() else "
              f"json.loads(zlib.decompress(binascii.a2b_base64(\"{found['blob']}\")))\n")
    return {"decompress": runner + unpack, "load": runner + unpack + "codes_for(modules, DIRECTORY)\n",
            "read": text, "sources": ""}


READ_STEPS = (("ssh_login_s", "the SSH login (sshd, the PAM session, the shell)"),
              ("python_start_s", "python3's start (-I -S)"),
              ("decompress_s", "the runner compiled, its imports, the modules decompressed"),
              ("compile_or_load_s", "the modules' code: loaded from root's cache (compiled on a miss)"),
              ("reads_s", "the read: the modules run (their imports) and the host read"),
              ("program_s", "the snapshot program in all (start to exit)"),
              ("per_read_s", "one read over SSH in all"))


def read_breakdown(host: TestHost, base: dict, reps: int, checkouts: list[tuple[str, Path]], rounds: int = 3) -> dict:
    """Where one read's host CPU goes, on one converged real host, for each of ``checkouts`` side by side: ``reps``
    of each step, the container's cgroup CPU before and after, less what the host spends idle meanwhile (its own
    server, dockerd, timers): the SSH login (`ssh HOST true`), python3's start (`python3 -I -S -c pass`), then the
    snapshot's own program cut after each of its steps (read_programs), run as the Snapshot fact runs it (root,
    -I -S, this host's spec); each step is the difference to the one before. One run of each program first, so
    root's code cache holds the checkout's entry (the two checkouts' entries replace each other). ``rounds`` times
    over, every step in turn (the machine is shared: a neighbour's burst lands on one round); each figure is the
    median of its rounds."""
    import runpy
    import shlex

    from sglang_infra.plan.resolve import snapshot_spec

    data = {k: v for k, v in runpy.run_path(str(ROOT / "group_data" / "all.py")).items() if k.startswith("sglang_")}
    spec = shlex.quote(json.dumps(snapshot_spec({**data, **base}, name=host.name), sort_keys=True))
    ssh = ["ssh", "-i", str(host.ssh_key), "-o", f"UserKnownHostsFile={host.known_hosts}", "-o",
           "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", f"{host.login}@{host.address}"]

    def loop(command: str) -> str:
        return f"for i in $(seq {reps}); do {command} >/dev/null; done"

    with tempfile.TemporaryDirectory() as scratch:
        for label, checkout in checkouts:
            for step, program in read_programs(checkout).items():
                path = Path(scratch) / f"bench-{label}-{step}.py"
                path.write_text(program)
                subprocess.run(["docker", "cp", str(path), f"{host.container}:/root/"], check=True,
                               capture_output=True, timeout=60)
    steps = {"idle": lambda: time.sleep(5),
             "ssh_login": lambda: [subprocess.run([*ssh, "true"], check=True, capture_output=True, timeout=60)
                                   for _ in range(reps)],
             "python_start": lambda: host.exec(loop("python3 -I -S -c pass"))}
    for label, _ in checkouts:
        for step in ("decompress", "load", "read"):
            program = f"/root/bench-{label}-{step}.py"
            # the first run with the sources on stdin: root's cache then holds this checkout's entry (a miss is
            # sent them so, factcache.read), and the runs counted are hits with nothing on stdin
            steps[f"{label}:{step}"] = (lambda p=program, s=f"/root/bench-{label}-sources.py": host.exec(
                f"python3 -I -S {p} {spec} <{s} >/dev/null; {loop(f'python3 -I -S {p} {spec} </dev/null')}",
                timeout=600))
    samples: dict[str, list[float]] = {step: [] for step in steps if step != "idle"}
    idle_rates = []
    for _ in range(rounds):
        spent = {}
        for step, run in steps.items():
            cpu, began = host_cpu_s([host]), time.monotonic()
            run()
            spent[step] = (host_cpu_s([host]) - cpu, time.monotonic() - began)
        idle_rate = spent["idle"][0] / spent["idle"][1]
        idle_rates.append(idle_rate)
        for step, (cpu, wall) in spent.items():
            if step != "idle":
                samples[step].append((cpu - idle_rate * wall) / reps)
    per = {step: statistics.median(found) for step, found in samples.items()}
    out: dict = {"reps": reps, "rounds": rounds, "idle_cpu_per_s": statistics.median(idle_rates), "samples": samples}
    # each checkout's snapshot of this host, the checkouts in turn twice (a container's status moves with the
    # clock): the same bytes when some pair side by side is
    said = [(label, host.exec(f"python3 -I -S /root/bench-{label}-read.py {spec} </root/bench-{label}-sources.py",
                              timeout=120).stdout) for _ in range(2) for label, _ in checkouts]
    out["outputs"] = {label: text for label, text in said}
    out["outputs_identical"] = len(checkouts) < 2 or any(a[1] == b[1] for a, b in zip(said, said[1:]))
    for label, _ in checkouts:
        out[label] = {"ssh_login_s": per["ssh_login"], "python_start_s": per["python_start"],
                      "decompress_s": per[f"{label}:decompress"] - per["python_start"],
                      "compile_or_load_s": per[f"{label}:load"] - per[f"{label}:decompress"],
                      "reads_s": per[f"{label}:read"] - per[f"{label}:load"],
                      "program_s": per[f"{label}:read"],
                      "per_read_s": per["ssh_login"] + per[f"{label}:read"]}
    return out


def breakdown_markdown(breakdown: dict, names: dict[str, str]) -> str:
    labels = [label for label in ("before", "after") if label in breakdown]
    lines = ["| one read's host CPU (s) | " + " | ".join(names[label] for label in labels) + " |",
             "|---|" + "---|" * len(labels)]
    for key, text in READ_STEPS:
        lines.append(f"| {text} | " + " | ".join(f"{breakdown[label][key]:.4f}" for label in labels) + " |")
    same = {True: "the same bytes", False: "**different bytes**", None: "not compared"}[
        breakdown.get("outputs_identical")]
    return "\n".join(lines + ["", f"{breakdown['reps']} of each step on one converged host, {breakdown['rounds']} "
                                   "rounds, the median; its container's cgroup CPU less its idle rate "
                                   f"(bench/fleet.py --read-breakdown). The snapshot's output of the checkouts: "
                                   f"{same}."])


def _cell(fmt: str, value) -> str:
    return "-" if value is None else fmt.format(value)


def markdown(rows: list[dict], real: int, names: dict[str, str]) -> str:
    sizes = sorted({r["hosts"] for r in rows})
    by = {(r["label"], r["hosts"]): r for r in rows}
    labels = [label for label in ("before", "after") if any(r["label"] == label for r in rows)]
    head = "| metric | " + " | ".join(f"{n} host{'s' if n > 1 else ''}" for n in sizes) + " |"
    lines = [head, "|---|" + "---|" * len(sizes)]
    for key, text, fmt in ROWS:
        for label in labels:
            row = [by.get((label, n), {}).get(key) for n in sizes]
            lines.append(f"| {text}, {names[label]} | " + " | ".join(_cell(fmt, v) for v in row) + " |")
            if key in ("rerun_s", "cpu_s") and row[0]:
                lines.append(f"| {text.split(',')[0]} ÷ {sizes[0]} host, {names[label]} | "
                             + " | ".join(_cell("{:.2f}×", v / row[0] if v is not None else None) for v in row)
                             + " |")
        if key in ("rerun_s", "cpu_s") and len(labels) == 2:
            ratios = [(by.get(("before", n), {}).get(key), by.get(("after", n), {}).get(key)) for n in sizes]
            lines.append(f"| {text.split(',')[0]}, before ÷ after | "
                         + " | ".join(_cell("{:.2f}×", b / a if a and b else None) for b, a in ratios) + " |")
    lines += ["", f"One run per size and checkout, {real} real host(s); beyond {real} names, aliases "
                  "(bench/fleet.py). Control CPU: the pyinfra process and what it waited for (os.wait4); test "
                  "hosts' CPU: their containers' cgroups, on the same cores."]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--real", type=int, default=2, help="real test hosts to start (default 2)")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="fleet sizes, comma-separated")
    parser.add_argument("--before", metavar="REF", help="also run this git ref's deploy at each size (before a change)")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="also profile one re-run of N names")
    parser.add_argument("--drift", action="store_true", help="also plant drift on one host of 100 names and repair it")
    parser.add_argument("--read-breakdown", type=int, default=0, metavar="N",
                        help="also split one read's host CPU (SSH login, python start, imports, the read), N of each")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"), help="where fleet.{md,json} go")
    args = parser.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    if args.real < 1 or not sizes or sizes[0] < 1:
        parser.error("--real and --sizes must be positive")
    out = Path(args.out).resolve()
    state = out / "fleet-state"
    state.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    bed = Testbed(state)
    before = Worktree(args.before) if args.before else None
    labels = {"after": "this checkout", "before": f"before @ {args.before}"}
    try:
        real = [bed.host(f"bench-fleet-{i}") for i in range(args.real)]
        for host in real:
            host.exec(f"printf 'MaxStartups 200\\nMaxSessions 200\\n' > {SSHD_CONF} && systemctl reload ssh")
        key = state / "api-key"
        key.write_text(secrets.token_urlsafe(32) + "\n")
        key.chmod(0o600)
        base = {**bed.standin, "sglang_api_key_file": str(key)}
        inventory, names = fleet_inventory(state / "fleet_real.py", real, len(real), base)
        converge = checked(deploy(inventory), "first converge (real names)", names)
        print(f"fleet: converged {len(real)} real host(s) in {converge['seconds']:.0f} s", file=sys.stderr)
        rerun = checked(deploy(inventory), "re-run (real names)", names)
        if changes(rerun["output"], names):
            raise SystemExit(f"fleet: the re-run of the real hosts changed something:\n{rerun['output'][-4000:]}")
        rows = []
        for count in sizes:
            checkouts = ([("before", before.path)] if before else []) + [("after", ROOT)]
            for label, checkout in checkouts:
                row = one_size(state, real, count, base, label, checkout)
                rows.append(row)
                print(f"fleet: {label}, {count} host(s): re-run {row['rerun_s']:.2f} s, CPU {row['cpu_s']:.2f} s "
                      f"({row['cpu_per_host_s']:.3f} s/host), {row['commands_per_host']:.1f} commands/host, "
                      f"hosts' CPU {row['hosts_cpu_s'] or 0:.2f} s, {row['changes']} changes", file=sys.stderr)
        breakdown = read_breakdown(real[0], base, args.read_breakdown,
                                   ([("before", before.path)] if before else []) + [("after", ROOT)]
                                   ) if args.read_breakdown else None
        if breakdown:
            print(f"fleet: one read's host CPU: {json.dumps(breakdown)}", file=sys.stderr)
        profiled = profile_size(state, out, real, args.profile, base) if args.profile else None
        drifted = drift_one_of_a_hundred(state, real, base) if args.drift else None
        if drifted:
            print(f"fleet: drift on {drifted['drifted']}, one host of 100: {json.dumps(drifted)}", file=sys.stderr)
    finally:
        bed.close()
        if before:
            before.close()
    text = markdown(rows, args.real, labels)
    (out / "fleet.json").write_text(json.dumps({"real_hosts": args.real, "before": args.before, "rows": rows,
                                                "profile": profiled, "drift": drifted, "read_breakdown": breakdown,
                                                "wall_s": time.monotonic() - began},
                                               indent=2) + "\n")
    if breakdown:
        text += "\n\n" + breakdown_markdown(breakdown, labels)
    (out / "fleet.md").write_text(text + "\n")
    print(text)
    changed = [r["hosts"] for r in rows if r["changes"]]
    if changed:
        print(f"fleet: a no-change re-run changed something at {changed} host(s)", file=sys.stderr)
        return 1
    if drifted and (drifted["changed_names"] != [drifted["drifted"]] or drifted["after_changes"]):
        print(f"fleet: the drift was not repaired by one run on its host alone: {drifted}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
