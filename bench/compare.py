"""Side-by-side benchmark of the no-change re-run (issue #10): this checkout,
an earlier one, and an Ansible playbook that does only the runbook's layout,
on the same fresh test hosts, in one run.

    .venv/bin/python bench/compare.py [--before REF] [--after REF] [--hosts 1,4] [--reps 3] [--out bench/results]

For each fleet size and repetition it starts fresh hosts (the test harness's
Debian trixie containers, reached over SSH) and, in this order:
1. this checkout: `pyinfra -y INVENTORY deploy.py` once to converge, once
   with -vv to count the remote commands per host of a no-change re-run
   (pyinfra's own `[host] >>> ` lines), then once timed: the no-change
   re-run (both must change nothing);
2. with --before REF: the same for REF, checked out with `git worktree add
   --detach` in a temporary directory and run from there with this venv's
   pyinfra (cwd and PYTHONPATH = the worktree). Its first run re-converges
   the hosts to REF's state; the worktree is removed at the end;
3. bench/ansible/layout.yml (the account and the directory layout only, as
   tasks/account.py and tasks/layout.py) with ansible-core from its own venv
   (bench/results/ansible-venv, made on demand from
   bench/ansible/requirements.txt) over OpenSSH: once to converge (on hosts
   this project converged, it should find nothing to change: reported), once
   with -vvv to count the SSH invocations per host, then once timed (both
   must report changed=0 for every host).
--after REF benchmarks REF instead of the working tree (also in a worktree).

Times are wall seconds of the whole process; medians over the repetitions,
[min-max] shown. Results: compare.md and compare.json in --out. The exit code
is non-zero when a re-run changed something or a run failed; the targets of
issue #10 are reported, not enforced. Every host the bench starts is removed
at the end, also on failure; it talks only to those hosts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import _COMMAND_RE, PYINFRA, ROOT, _env, parse_output, publish, testbed, timed, write_inventory  # noqa: E402

ANSIBLE_DIR = HERE / "ansible"
PLAYBOOK = ANSIBLE_DIR / "layout.yml"
ANSIBLE_REQUIREMENTS = ANSIBLE_DIR / "requirements.txt"
ANSIBLE_TIMEOUT = 600
_RECAP_RE = re.compile(r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
                       r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)", re.M)
_SSH_EXEC_RE = re.compile(r"^<(?P<address>[^>]+)> SSH: EXEC ", re.M)

# Issue #10's targets: reported with the measurements, never enforced.
TARGET_RERUN_1_HOST_S = 1.5
TARGET_SCALING = 1.3      # 4 hosts ÷ 1 host, this checkout's re-run
TARGET_ANSIBLE_RATIO = 5  # Ansible ÷ this checkout, at 4 hosts


class BenchError(RuntimeError):
    pass


def _git(*args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise BenchError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


class Worktree:
    """A detached worktree of one ref in a temporary directory; removed by close()."""

    def __init__(self, ref: str):
        self.ref = ref
        self.commit = _git("rev-parse", "--verify", f"{ref}^{{commit}}")
        self.tmp = Path(tempfile.mkdtemp(prefix="sglang-bench-"))
        self.path = self.tmp / "checkout"
        _git("worktree", "add", "--detach", str(self.path), self.commit)

    def close(self) -> None:
        subprocess.run(["git", "worktree", "remove", "--force", str(self.path)], cwd=ROOT,
                       capture_output=True, timeout=120)
        shutil.rmtree(self.tmp, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, capture_output=True, timeout=120)


# ---------------------------------------------------------------- Ansible

def ensure_ansible(out: Path) -> tuple[Path, str]:
    """ansible-playbook from its own venv, made (or remade, when the pin changes) on demand."""
    venv = out / "ansible-venv"
    stamp = venv / ".requirements"
    want = ANSIBLE_REQUIREMENTS.read_text()
    playbook = venv / "bin" / "ansible-playbook"
    if not playbook.exists() or not stamp.exists() or stamp.read_text() != want:
        print(f"compare: installing {ANSIBLE_REQUIREMENTS.relative_to(ROOT)} into {venv}", file=sys.stderr)
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                        "-r", str(ANSIBLE_REQUIREMENTS)], check=True, timeout=600)
        stamp.write_text(want)
    version = subprocess.run([str(venv / "bin" / "ansible"), "--version"], capture_output=True, text=True,
                             timeout=120, env=_ansible_env(out / "compare-state" / "ansible", 1)).stdout
    match = re.search(r"\[core ([^\]]+)\]", version)
    return playbook, f"ansible-core {match[1]}" if match else version.splitlines()[0]


def _ansible_env(home: Path, forks: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update({
        "ANSIBLE_HOME": str(home),                    # nothing written to ~/.ansible
        "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(home / "cp"),
        "ANSIBLE_HOST_KEY_CHECKING": "True",          # the inventory pins each host's key; checking stays on
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_FORKS": str(max(5, forks)),
        "ANSIBLE_NOCOLOR": "1",
        "LC_ALL": "C.UTF-8",                          # ansible-core refuses a non-UTF-8 locale
    })
    return env


def write_ansible_inventory(path: Path, fleet: list) -> Path:
    """A YAML inventory (JSON is YAML) for the same hosts, reached as pyinfra reaches them."""
    hosts = {
        host.name: {
            "ansible_host": host.address,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(host.ssh_key),
            "ansible_ssh_common_args": f"-o UserKnownHostsFile={host.known_hosts} -o StrictHostKeyChecking=yes",
            "ansible_python_interpreter": "/usr/bin/python3",
        }
        for host in fleet
    }
    path.write_text(json.dumps({"all": {"hosts": hosts}}, indent=2) + "\n")
    return path


def timed_playbook(playbook: Path, inventory: Path, home: Path, forks: int, *args: str) -> dict:
    run = timed([str(playbook), "-i", str(inventory), str(PLAYBOOK), *args], cwd=ANSIBLE_DIR,
                env=_ansible_env(home, forks), timeout=ANSIBLE_TIMEOUT)
    run["recap"] = {m["host"]: {k: int(m[k]) for k in ("ok", "changed", "unreachable", "failed")}
                    for m in _RECAP_RE.finditer(run["output"])}
    return run


# ---------------------------------------------------------------- one round

def _changes(output: str, names: list[str]) -> int:
    statuses = parse_output(output)
    return sum(1 for by_host in statuses.values() for h in names if by_host.get(h) == "Success")


def _commands_per_host(output: str, names: list[str]) -> int:
    counts = {h: 0 for h in names}
    for match in _COMMAND_RE.finditer(output):
        counts[match["host"]] = counts.get(match["host"], 0) + 1
    return max(counts.values())


def inventory_for(checkout: Path, inventory: Path) -> Path:
    """The inventory as ``checkout`` reads it. The harness declares the test network trusted
    (sglang_trusted_network, the last key of each host's data); a checkout from before that key refuses it as
    unknown, and refused no keyless worker either, so its copy goes without it."""
    if "sglang_trusted_network" in (checkout / "group_data" / "all.py").read_text():
        return inventory
    older = inventory.with_name(f"{inventory.stem}.{checkout.name}.py")
    older.write_text(inventory.read_text().replace(", 'sglang_trusted_network': True", ""))
    return older


# With --as-operator, each checkout's pyinfra runs as in an operator's shell: PYTHONDONTWRITEBYTECODE (which this
# machine's shell sets) and PYTHONPYCACHEPREFIX dropped, so the installed packages' bytecode is read from their own
# __pycache__ as pip wrote it, and the project's modules are compiled or kept as that checkout's deploy.py decides
# (pyinfra's CLI turns bytecode writing off; machine/pycache.py keeps ours in the operator's ~/.cache). Without it,
# the caller's environment decides (here: every run compiles the project's modules from source).
AS_OPERATOR = False


def timed_deploy(inventory: Path, *args: str, checkout: Path = ROOT) -> dict:
    """One `pyinfra -y INVENTORY deploy.py` of ``checkout``, run from it and importing from it, with this venv's
    pyinfra."""
    env = _env({"PYTHONPATH": str(checkout)})
    if AS_OPERATOR:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.pop("PYTHONPYCACHEPREFIX", None)
    return timed([*PYINFRA, "-y", str(inventory), "deploy.py", *args], cwd=checkout, env=env)


def _pyinfra(label: str, checkout: Path, inventory: Path, names: list[str], log_dir: Path, reruns: int = 1) -> dict:
    converge = timed_deploy(inventory, checkout=checkout)
    (log_dir / f"{label}-converge.log").write_text(converge["output"])
    if converge["returncode"] != 0:
        raise BenchError(f"{label}: converge of {len(names)} host(s) failed (exit {converge['returncode']}):\n"
                         f"{converge['output'][-3000:]}")
    # The counting run comes first: it also lets the hosts settle after the converge (containers starting)
    # before the timed run.
    counted = timed_deploy(inventory, "-vv", checkout=checkout)
    (log_dir / f"{label}-rerun-vv.log").write_text(counted["output"])
    timed_runs = [timed_deploy(inventory, checkout=checkout) for _ in range(reruns)]
    rerun = sorted(timed_runs, key=lambda run: run["seconds"])[len(timed_runs) // 2]   # the median's run
    (log_dir / f"{label}-rerun.log").write_text(rerun["output"])
    for run, what in ((*((r, "re-run") for r in timed_runs), (counted, "-vv re-run"))):
        if run["returncode"] != 0:
            raise BenchError(f"{label}: {what} of {len(names)} host(s) failed (exit {run['returncode']}):\n"
                             f"{run['output'][-3000:]}")
    return {
        f"{label}_converge_s": converge["seconds"],
        f"{label}_rerun_s": rerun["seconds"],
        f"{label}_rerun_all_s": [r["seconds"] for r in timed_runs],
        f"{label}_rerun_cpu_s": rerun["user_s"] + rerun["sys_s"],
        f"{label}_rerun_commands_per_host": _commands_per_host(counted["output"], names),
        f"{label}_rerun_changes": sum(_changes(r["output"], names) for r in (*timed_runs, counted)),
    }


def _ansible(playbook: Path, inventory: Path, home: Path, names: list[str], log_dir: Path) -> dict:
    forks = len(names)
    runs = {}
    for what, args in (("converge", ()), ("rerun-vvv", ("-vvv",)), ("rerun", ())):
        run = timed_playbook(playbook, inventory, home, forks, *args)
        (log_dir / f"ansible-{what}.log").write_text(run["output"])
        if run["returncode"] != 0 or set(run["recap"]) != set(names) or any(
                r["failed"] or r["unreachable"] for r in run["recap"].values()):
            raise BenchError(f"ansible: {what} of {forks} host(s) failed (exit {run['returncode']}):\n"
                             f"{run['output'][-3000:]}")
        runs[what] = run
    address_to_name = {line["ansible_host"]: name
                       for name, line in json.loads(inventory.read_text())["all"]["hosts"].items()}
    ssh = {h: 0 for h in names}
    for match in _SSH_EXEC_RE.finditer(runs["rerun-vvv"]["output"]):
        name = address_to_name.get(match["address"])
        if name:
            ssh[name] += 1
    return {
        "ansible_converge_s": runs["converge"]["seconds"],
        # On hosts this project has converged, the playbook should find nothing to do already.
        "ansible_converge_changed": sum(r["changed"] for r in runs["converge"]["recap"].values()),
        "ansible_rerun_s": runs["rerun"]["seconds"],
        "ansible_rerun_changes": sum(r["changed"] for run in (runs["rerun"], runs["rerun-vvv"])
                                     for r in run["recap"].values()),
        "ansible_rerun_ssh_per_host": max(ssh.values()),
    }


def one_round(count: int, rep: int, state_dir: Path, image: str, base: dict,
              checkouts: list[tuple[str, Path]], playbook: Path, reruns: int = 1) -> dict:
    names = [f"cmp-{count}-{i}" for i in range(count)]
    log_dir = state_dir / f"logs-{count}-{rep}"
    log_dir.mkdir(parents=True, exist_ok=True)
    fleet = []
    try:
        for name in names:
            fleet.append(testbed.start_host(name, state_dir, image=image))
        inventory = write_inventory(state_dir / f"compare_{count}_{rep}.py",
                                    {"production": [(host, {}) for host in fleet]}, base=base)
        sample = {"hosts": count, "rep": rep}
        # Every other repetition the checkouts take the other order, so that a load rising or falling on a shared
        # machine weighs on each side alike.
        for label, checkout in (checkouts if rep % 2 == 0 else checkouts[::-1]):
            sample.update(_pyinfra(label, checkout, inventory_for(checkout, inventory), names, log_dir, reruns))
        ansible_inventory = write_ansible_inventory(state_dir / f"compare_{count}_{rep}.ansible.yml", fleet)
        sample.update(_ansible(playbook, ansible_inventory, state_dir / "ansible", names, log_dir))
    finally:
        for name in names:
            testbed.remove_host(name)
    return sample


# ---------------------------------------------------------------- report

def _stats(samples: list[dict], key: str, count: int) -> dict | None:
    values = [s[key] for s in samples if s["hosts"] == count and key in s]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(samples: list[dict], counts: list[int], labels: list[str]) -> dict:
    keys = [f"{label}_{m}" for label in [*labels, "ansible"]
            for m in ("rerun_s", "converge_s", "converge_changed", "rerun_commands_per_host", "rerun_ssh_per_host")]
    summary = {}
    for key in keys:
        row = {count: _stats(samples, key, count) for count in counts}
        if any(row.values()):
            summary[key] = row
    return summary


def _ratio(a: dict | None, b: dict | None) -> float | None:
    if not a or not b or not b["median"]:
        return None
    return a["median"] / b["median"]


def report(summary: dict, counts: list[int], reps: int, names: dict[str, str]) -> tuple[str, dict, list[dict]]:
    """The Markdown table, the ratio rows as data, and the targets."""
    base = counts[0]
    after, before = "after", "before" if "before_rerun_s" in summary else None

    def cell(key, count, fmt="{:.2f}"):
        stats = summary.get(key, {}).get(count)
        if not stats:
            return "-"
        return f"{fmt.format(stats['median'])} [{fmt.format(stats['min'])}-{fmt.format(stats['max'])}]"

    def ratio_cell(value):
        return "-" if value is None else f"{value:.2f}×"

    rows, ratios = [], {}
    tools = [(after, names["after"])] + ([(before, names["before"])] if before else []) \
        + [("ansible", names["ansible"])]
    for label, name in tools:
        rows.append((f"no-change re-run (s), {name}", [cell(f"{label}_rerun_s", c) for c in counts]))
    for label, name in tools:
        key = f"ratio_{label}_scaling"
        ratios[key] = {c: _ratio(summary[f"{label}_rerun_s"][c], summary[f"{label}_rerun_s"][base]) for c in counts}
        rows.append((f"{name}: N hosts ÷ {base} host{'s' if base > 1 else ''} (re-run)",
                     [ratio_cell(ratios[key][c]) for c in counts]))
    ratios["ratio_ansible_over_after"] = {c: _ratio(summary["ansible_rerun_s"][c], summary["after_rerun_s"][c])
                                          for c in counts}
    rows.append(("Ansible ÷ this project (re-run)", [ratio_cell(ratios["ratio_ansible_over_after"][c])
                                                       for c in counts]))
    if before:
        ratios["ratio_before_over_after"] = {c: _ratio(summary["before_rerun_s"][c], summary["after_rerun_s"][c])
                                             for c in counts}
        rows.append(("before ÷ after (re-run)", [ratio_cell(ratios["ratio_before_over_after"][c]) for c in counts]))
    for label, name in tools[:-1]:
        rows.append((f"remote commands per host, no-change re-run, {name}",
                     [cell(f"{label}_rerun_commands_per_host", c, "{:.0f}") for c in counts]))
    rows.append((f"SSH invocations per host, no-change re-run, {names['ansible']} (-vvv)",
                 [cell("ansible_rerun_ssh_per_host", c, "{:.0f}") for c in counts]))
    rows.append((f"first converge of fresh hosts (s), {names['after']}", [cell("after_converge_s", c) for c in counts]))
    rows.append(("Ansible: tasks changed on hosts this project converged (all hosts)",
                 [cell("ansible_converge_changed", c, "{:.0f}") for c in counts]))

    targets = []
    one = summary["after_rerun_s"].get(1) if 1 in counts else None
    four = summary["after_rerun_s"].get(4) if 4 in counts else None
    if one:
        targets.append({"target": f"this project, no-change re-run, 1 host ≤ {TARGET_RERUN_1_HOST_S} s",
                        "measured": f"{one['median']:.2f} s", "met": one["median"] <= TARGET_RERUN_1_HOST_S})
    if one and four:
        value = four["median"] / one["median"]
        targets.append({"target": f"this project, 4 hosts ÷ 1 host ≤ {TARGET_SCALING}×",
                        "measured": f"{value:.2f}×", "met": value <= TARGET_SCALING})
    if four:
        value = ratios["ratio_ansible_over_after"][4]
        targets.append({"target": f"Ansible ÷ this project at 4 hosts ≥ {TARGET_ANSIBLE_RATIO}×",
                        "measured": f"{value:.2f}×", "met": value >= TARGET_ANSIBLE_RATIO})
    commands = summary.get("after_rerun_commands_per_host", {})
    targets.append({"target": "this project, remote commands per host of a no-change re-run (reported)",
                    "measured": ", ".join(f"{commands[c]['median']:.0f} at {c} host{'s' if c > 1 else ''}"
                                          for c in counts if commands.get(c)),
                    "met": None})

    head = "| metric | " + " | ".join(f"{c} host{'s' if c > 1 else ''}" for c in counts) + " |"
    lines = [head, "|---|" + "---|" * len(counts)]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows]
    lines.append("")
    lines.append(f"Wall seconds of the whole process, median [min-max] over {reps} repetition(s); ratios are of "
                 f"medians. Each round: fresh hosts, converged by this project; "
                 f"then each tool in turn: one converging run, one counting run (-vv/-vvv), one timed re-run "
                 f"(the checkouts in the other order every other repetition).")
    lines.append("")
    lines.append("Targets (issue #10):")
    lines.append("")
    for t in targets:
        verdict = "reported" if t["met"] is None else ("met" if t["met"] else "NOT met")
        lines.append(f"- {t['target']}: {t['measured']} ({verdict})")
    return "\n".join(lines), ratios, targets


# ---------------------------------------------------------------- main

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", metavar="REF", help="also benchmark this git ref (e.g. a commit before a change)")
    parser.add_argument("--after", metavar="REF",
                        help="benchmark this git ref instead of the working tree (default: the working tree)")
    # 1,4 x 3 repetitions fits in about 10 minutes on 2 cores.
    parser.add_argument("--hosts", default="1,4", help="fleet sizes, comma-separated (default 1,4)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per fleet size (default 3)")
    parser.add_argument("--reruns", type=int, default=1,
                        help="timed no-change re-runs per repetition and checkout, the median kept (default 1)")
    parser.add_argument("--as-operator", action="store_true",
                        help="run each checkout's pyinfra as in an operator's shell (no PYTHONDONTWRITEBYTECODE)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"), help="where compare.{md,json} go")
    args = parser.parse_args()
    global AS_OPERATOR
    counts = [int(c) for c in args.hosts.split(",")]
    if args.reps < 1 or not counts or min(counts) < 1:
        parser.error("--hosts and --reps must be positive")
    out = Path(args.out).resolve()
    state_dir = out / "compare-state"
    state_dir.mkdir(parents=True, exist_ok=True)
    AS_OPERATOR = args.as_operator

    started = time.monotonic()
    worktrees: list[Worktree] = []
    samples: list[dict] = []
    try:
        playbook, ansible_version = ensure_ansible(out)
        head = _git("rev-parse", "HEAD")
        dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
        if args.after:
            worktrees.append(Worktree(args.after))
            checkouts = [("after", worktrees[-1].path)]
            after_desc = {"ref": args.after, "commit": worktrees[-1].commit}
            after_name = f"this project @ {args.after}"
        else:
            checkouts = [("after", ROOT)]
            after_desc = {"ref": "working tree", "commit": head, "dirty": dirty}
            after_name = "this project (working tree)"
        before_desc = None
        names = {"after": after_name, "ansible": f"Ansible layout.yml, {ansible_version}"}
        if args.before:
            worktrees.append(Worktree(args.before))
            checkouts.append(("before", worktrees[-1].path))
            before_desc = {"ref": args.before, "commit": worktrees[-1].commit}
            names["before"] = f"before @ {args.before}"
        image = testbed.ensure_image()
        # Test hosts have no GPU: the stand-in profile, as in the tests and the sandbox.
        base = testbed.standin_data()
        for rep in range(args.reps):
            for count in counts:
                sample = one_round(count, rep, state_dir, image, base, checkouts, playbook, args.reruns)
                samples.append(sample)
                print(f"compare: {count} host(s) rep {rep + 1}/{args.reps}: "
                      + ", ".join(f"{label} re-run {sample[f'{label}_rerun_s']:.2f}s "
                                  f"(all {sample[f'{label}_rerun_all_s']}, CPU {sample[f'{label}_rerun_cpu_s']:.2f}s) "
                                  f"({sample[f'{label}_rerun_commands_per_host']} commands/host, "
                                  f"{sample[f'{label}_rerun_changes']} changes)" for label, _ in checkouts)
                      + f", ansible re-run {sample['ansible_rerun_s']:.2f}s "
                        f"({sample['ansible_rerun_ssh_per_host']} ssh/host, changed={sample['ansible_rerun_changes']})",
                      file=sys.stderr)
    except BenchError as error:
        print(f"compare: {error}", file=sys.stderr)
        return 2
    finally:
        for worktree in worktrees:
            worktree.close()

    labels = [label for label, _ in checkouts]
    summary = summarise(samples, counts, labels)
    text, ratios, targets = report(summary, counts, args.reps, names)
    (out / "compare.json").write_text(json.dumps({
        "counts": counts, "reps": args.reps, "after": after_desc, "before": before_desc,
        "ansible": ansible_version, "samples": samples, "summary": summary, "ratios": ratios,
        "targets": targets, "wall_s": time.monotonic() - started,
    }, indent=2, default=str) + "\n")
    return publish(out / "compare.md", text,
                   [s for s in samples if any(s.get(f"{label}_rerun_changes") for label in [*labels, "ansible"])],
                   "compare: {} round(s) had a re-run that changed something: {}")


if __name__ == "__main__":
    sys.exit(main())
