"""Pull benchmark (issue #14): hostside/pull/hfpull.py against huggingface_hub's
snapshot_download, side by side in one run, on the STAND-IN Hub throttled
per connection the way the Hub's CDN holds each connection to a rate.

    .venv/bin/python bench/pull.py [--reps 3] [--throttle 2000000] [--workers 8] [--out bench/results]

The stand-in Hub (tests/support/hfstandin/server.py) runs as its own process on
127.0.0.1 with `--throttle` bytes per second for every response, so every
connection alone. Two repos:
- shards: a config and 4 shards of 4 MiB;
- large: a config and one file of 32 MiB.
For each repo and repetition, into a fresh cache each time:
1. this checkout's pull (the program as hosts get it, bundled by
   sglang_infra/machine/ship.py), run with this venv's python and `--workers`;
2. `snapshot_download(..., max_workers=--workers)`, the library's own
   parallel download, in a child process of the same python.
Each is timed whole (wall seconds) with its peak RSS. Then, once per repo, a
pull is killed (SIGKILL) once the stand-in has sent about 40 % of the repo,
and run again: the resumed run's bytes fetched against the bytes its
partials lacked, and the bytes the stand-in sent across both runs against
the repo's size (what the kill cost in all, socket buffers included).

Then the link (issue #56: a pull at >= 90 % of a capped link, 4 shards):
in a network namespace of its own (`unshare --net`, so the cap touches no
other process of this machine, and the namespace goes with its last
process), its loopback's MTU set to 1500 and capped by `tc qdisc ... tbf
rate --link-mbit` (the link), the stand-in Hub inside it, every connection
held to a quarter of the link by the stand-in's own throttle (capped
connections: a pull needs 4 of them to fill the link), a model of 4 shards
of --link-shard-mib MiB, pulled as the deploy pulls a locked model (the
lock's record, from the project's lockgen, on stdin). This checkout's pull
and, with --before REF, REF's
(its hostside/pull bundled by its own ship.py from `git archive REF`), one
after the other, --reps times each, each into a fresh cache. Per pull: its
wall time and the link's share it reached (the model's bytes / the wall
time / the link's rate), split by the stand-in's clock into the start
(process start to the first shard's request: interpreter, imports, the
Hub's info and listing, the files' HEADs), the bodies (first shard request
to last body byte: the link's share while bytes flow) and the tail (last
byte to exit: hashing, links, the record). The ceiling of the bodies'
share is TCP's: 1448 payload bytes in each 1514-byte frame (0.956). It
needs root (unshare, tc); without it the part is skipped, saying why.

Results: median [min-max], the ratio of the medians (ours / the library's)
next to issue #14's goals and the link's share next to issue #56's (reported,
not enforced), in pull.md and pull.json under --out. Traffic goes only to the
stand-in on 127.0.0.1 (this machine's, or the namespace's own loopback).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import ROOT, publish, timed  # noqa: E402

sys.path.insert(0, str(ROOT))
from sglang_infra.machine import ship  # noqa: E402

MiB = 1 << 20
STANDIN = ROOT / "tests" / "support" / "hfstandin" / "server.py"
REPOS = {
    "shards": [{"path": "config.json", "text": "{\"bench\": \"shards\"}"}] + [
        {"path": f"model-0000{i}-of-00004.safetensors", "size": 4 * MiB, "seed": 140 + i, "lfs": True}
        for i in range(1, 5)],
    "large": [{"path": "config.json", "text": "{\"bench\": \"large\"}"},
              {"path": "model.safetensors", "size": 32 * MiB, "seed": 149, "lfs": True}],
}
# Issue #14's goals, as ours / snapshot_download: reported with the measurements, never enforced.
GOALS = {"shards": 1.0, "large": 0.4}
PULL_TIMEOUT = 600  # seconds; one pull longer than this is killed
KILL_AT = 0.4       # the share of a repo on disk when the kill comes
POLL = 0.05
LINK_GOAL = 0.90    # issue #56: the share of the link a 4-shard pull reaches (reported, never enforced)
LINK_MTU = 1500     # the namespace's loopback, as an Ethernet link's (its own is 65536)
FRAME_CEILING = (LINK_MTU - 52) / (LINK_MTU + 14)  # TCP payload per frame: IP 20 + TCP 20 + timestamps 12; lo's 14


class BenchError(RuntimeError):
    pass


def spec(repos: dict | None = None) -> dict:
    return {"repos": [{"repo_id": f"bench/{name}", "commits": [{"branch": "main", "files": files}]}
                      for name, files in (REPOS if repos is None else repos).items()]}


def link_repo(shard_mib: int) -> list[dict]:
    return [{"path": "config.json", "text": "{\"bench\": \"link\"}"}] + [
        {"path": f"model-0000{i}-of-00004.safetensors", "size": shard_mib * MiB, "seed": 560 + i, "lfs": True}
        for i in range(1, 5)]


def repo_size(name: str) -> int:
    return sum(f.get("size", len(f.get("text", "").encode())) for f in REPOS[name])


class Standin:
    """The stand-in Hub as a child process on 127.0.0.1, an ephemeral port."""

    def __init__(self, workdir: Path, throttle: int, repos: dict | None = None):
        spec_file = workdir / "spec.json"
        spec_file.write_text(json.dumps(spec(repos)))
        self.proc = subprocess.Popen([sys.executable, str(STANDIN), "--spec", str(spec_file), "--host", "127.0.0.1",
                                      "--port", "0", "--throttle", str(throttle), "--quiet"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()  # "standin-hub listening on http://127.0.0.1:PORT"
        if "listening on" not in line:
            self.close()
            raise BenchError(f"the stand-in Hub did not start: {line!r}")
        self.url = line.split("listening on ", 1)[1].strip()

    def _call(self, path: str, body: dict | None = None):
        import urllib.request

        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method="GET" if data is None else "POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def reset(self) -> None:
        self._call("/_standin/reset", {})

    def bytes_sent(self) -> int:
        return sum(r["bytes_sent"] for r in self._call("/_standin/requests") if "/resolve/" in r["path"])

    def bodies(self) -> list[dict]:
        """The file bodies it sent (GETs of /resolve/), each with its start and end on this machine's clock."""
        return [r for r in self._call("/_standin/requests")
                if r["method"] == "GET" and "/resolve/" in r["path"] and r["bytes_sent"]]

    def configure(self, **config) -> None:
        self._call("/_standin/config", config)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    out.update(HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_XET="1", PYTHONDONTWRITEBYTECODE="1")
    return out


def ours(script: Path, cache: Path, repo: str, hub: Standin, workers: int) -> list[str]:
    # The records of verified revisions beside the cache, never in it (the deploy keeps them outside hf-cache).
    return [sys.executable, str(script), "pull", "--cache-dir", str(cache), "--records-dir", f"{cache}-verified",
            "--repo-id", repo, "--revision", "main", "--endpoint", hub.url, "--workers", str(workers)]


def library(cache: Path, repo: str, hub: Standin, workers: int) -> list[str]:
    code = ("import sys; from huggingface_hub import snapshot_download; "
            "snapshot_download(sys.argv[1], revision='main', cache_dir=sys.argv[2], endpoint=sys.argv[3], "
            "max_workers=int(sys.argv[4]))")
    return [sys.executable, "-c", code, repo, str(cache), hub.url, str(workers)]


def run_one(command: list[str], what: str) -> dict:
    result = timed(command, cwd=ROOT, env=env(), timeout=PULL_TIMEOUT)
    if result["returncode"] != 0:
        raise BenchError(f"{what} failed ({result['returncode']}): {result['output'][-2000:]}")
    return result


def killed_and_resumed(script: Path, workdir: Path, name: str, hub: Standin, workers: int) -> dict:
    repo, total = f"bench/{name}", repo_size(name)
    cache = workdir / f"killed-{name}"
    hub.reset()
    proc = subprocess.Popen(ours(script, cache, repo, hub, workers), cwd=ROOT, env=env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + PULL_TIMEOUT
    for _ in range(int(PULL_TIMEOUT / POLL)):
        if hub.bytes_sent() >= KILL_AT * total or proc.poll() is not None or time.monotonic() > deadline:
            break
        time.sleep(POLL)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    resumed = run_one(ours(script, cache, repo, hub, workers), f"the resumed pull of {repo}")
    line = [ln for ln in resumed["output"].splitlines() if ln.startswith("SGLANG_PULL_RESULT ")][-1]
    result = json.loads(line.split(" ", 1)[1])
    return {"on_disk_at_kill": total - result["bytes_missing"], "bytes_missing": result["bytes_missing"],
            "bytes_fetched": result["bytes_fetched"],
            "fetched_per_missing": result["bytes_fetched"] / max(1, result["bytes_missing"]),
            "sent_both_runs_per_size": hub.bytes_sent() / total, "peak_rss_mib": resumed["peak_rss_mib"]}


def program_at(ref: str, workdir: Path) -> Path:
    """REF's pull program, as its own ship.py bundles it from its own hostside/pull (git archive: no checkout)."""
    tree = workdir / f"tree-{ref.replace('/', '_')}"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", "--format=tar", ref, "sglang_infra"], cwd=ROOT, capture_output=True,
                             timeout=120)
    if archive.returncode != 0:
        raise BenchError(f"git archive {ref}: {archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True, timeout=120)
    built = subprocess.run([sys.executable, "-c", "import sys; from sglang_infra.machine import ship; "
                            "sys.stdout.write(ship.program('pull.hfpull'))"], cwd=tree, capture_output=True,
                           text=True, timeout=120, env={**env(), "PYTHONPATH": str(tree)})
    if built.returncode != 0:
        raise BenchError(f"bundling {ref}'s pull: {built.stderr[-2000:]}")
    script = workdir / f"hfpull-{ref.replace('/', '_')}.py"
    script.write_text(built.stdout)
    return script


def link_unavailable() -> str | None:
    """Why the link part cannot run here, or None."""
    if os.geteuid() != 0:
        return "it needs root (unshare --net, tc)"
    for tool in ("unshare", "ip", "tc"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    probe = subprocess.run(["unshare", "--net", "sh", "-c", "ip link set lo up && tc qdisc add dev lo root tbf "
                            "rate 8mbit burst 64kb latency 100ms"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"a namespace with a tbf-capped loopback could not be made: {probe.stderr.strip()[:300]}"
    return None


def timed_stdin(command: list[str], stdin: Path) -> dict:
    """The wall time, exit code and output of ``command``, ``stdin``'s content as its standard input."""
    with open(stdin, "rb") as given, tempfile.TemporaryFile("w+") as log:
        started = time.perf_counter()
        proc = subprocess.Popen(command, cwd=ROOT, env=env(), stdin=given, stdout=log, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            proc.wait(timeout=PULL_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        seconds = time.perf_counter() - started
        log.seek(0)
        output = log.read()
    return {"seconds": seconds, "returncode": proc.returncode, "output": output}


def link_child(config: dict) -> int:
    """Inside the namespace (`unshare --net`): cap its loopback, run the stand-in and every pull, print the rows."""
    rate_bps = config["mbit"] * 1_000_000 // 8
    for command in (["ip", "link", "set", "lo", "up"], ["ip", "link", "set", "lo", "mtu", str(LINK_MTU)],
                    ["tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", f"{config['mbit']}mbit",
                     "burst", "64kb", "latency", "100ms"]):
        subprocess.run(command, check=True, timeout=30)
    workdir = Path(config["workdir"])
    repos = {"link": link_repo(config["shard_mib"])}
    size = sum(f.get("size", len(f.get("text", "").encode())) for f in repos["link"])
    hub = Standin(workdir, rate_bps // 4, repos)
    rows = []
    try:
        # As the deploy pulls a locked model: the lock's record on stdin (its files are the listing), written by the
        # project's own lock code against the stand-in.
        from sglang_infra.fleet import lockgen

        locked = lockgen.resolve_model("link", "bench/link", "main", hub.url, None)
        lock_file = workdir / "link-lock.json"
        lock_file.write_text(json.dumps(locked.record()))
        for rep in range(config["reps"]):
            for label, script in config["programs"]:
                hub.reset()
                cache = workdir / f"link-{label}-{rep}"
                command = ours(Path(script), cache, "bench/link", hub, config["workers"]) + ["--locked-stdin"]
                command[command.index("--revision") + 1] = locked.commit
                started = time.monotonic()
                result = timed_stdin(command, lock_file)
                if result["returncode"] != 0:
                    raise BenchError(f"{label}'s pull failed ({result['returncode']}): {result['output'][-2000:]}")
                ended = started + result["seconds"]
                bodies = [b for b in hub.bodies() if "model-" in b["path"]]
                first, last = min(b["started_at"] for b in bodies), max(b["ended_at"] for b in bodies)
                sent = sum(b["bytes_sent"] for b in hub.bodies())
                line = [ln for ln in result["output"].splitlines() if ln.startswith("SGLANG_PULL_RESULT ")][-1]
                pulled = json.loads(line.split(" ", 1)[1])
                if pulled["bytes_total"] != size or pulled["files"] != len(repos["link"]):
                    raise BenchError(f"{label}'s pull verified {pulled['files']} files, {pulled['bytes_total']} "
                                     f"bytes, not the model's {len(repos['link'])} and {size}")
                rows.append({"label": label, "rep": rep, "seconds": result["seconds"],
                             "share": size / result["seconds"] / rate_bps, "start_s": first - started,
                             "bodies_s": last - first, "bodies_share": sent / (last - first) / rate_bps,
                             "tail_s": ended - last, "hub_bytes": sent})
                print(f"link {label} #{rep + 1}: {result['seconds']:.2f} s, {rows[-1]['share']:.3f} of the link",
                      file=sys.stderr, flush=True)
                subprocess.run(["rm", "-rf", str(cache), f"{cache}-verified"], check=False)
    finally:
        hub.close()
    print(json.dumps({"model_bytes": size, "rate_bytes_per_s": rate_bps, "rows": rows}))
    return 0


def link_part(args, workdir: Path) -> dict:
    """The link's share (see the module's text): the child in its own namespace; its rows by program."""
    programs = [("this tree", str(workdir / "hfpull.py"))]
    if args.before:
        programs.insert(0, (f"before ({args.before})", str(program_at(args.before, workdir))))
    config = {"mbit": args.link_mbit, "shard_mib": args.link_shard_mib, "reps": args.reps, "workers": args.workers,
              "workdir": str(workdir), "programs": programs}
    child = subprocess.run(["unshare", "--net", sys.executable, str(Path(__file__).resolve()), "--link-child",
                            json.dumps(config)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                           timeout=PULL_TIMEOUT * 2 * args.reps + 120)
    if child.returncode != 0:
        raise BenchError(f"the link part failed ({child.returncode}); its output: {child.stdout[-2000:]}")
    data = json.loads(child.stdout.strip().splitlines()[-1])
    data["programs"] = [label for label, _ in programs]
    if args.before:
        commit = subprocess.run(["git", "rev-parse", "--short", args.before], cwd=ROOT, capture_output=True,
                                text=True, timeout=30).stdout.strip()
        data["before_commit"] = commit
    return data


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def table(results: dict, args) -> str:
    lines = [f"Pull benchmark: stand-in Hub throttled to {args.throttle / 1e6:.1f} MB/s per connection, "
             f"{args.workers} workers, {args.reps} repetitions (median [min-max])", "",
             "| repo | size | hfpull s | snapshot_download s | ratio | goal | hfpull peak RSS MiB | "
             "snapshot_download peak RSS MiB |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        ratio = statistics.median(r["ours_s"]) / statistics.median(r["library_s"])
        lines.append(f"| {name} | {repo_size(name) / MiB:.0f} MiB | {spread(r['ours_s'])} | {spread(r['library_s'])} "
                     f"| {ratio:.2f} | <= {GOALS[name]} {'met' if ratio <= GOALS[name] else 'NOT met'} "
                     f"| {spread(r['ours_rss'], '{:.0f}')} | {spread(r['library_rss'], '{:.0f}')} |")
    lines += ["", "| repo | on disk at the kill | missing | fetched by the resumed pull | fetched / missing | "
                  "sent in both runs / size |", "|---|---|---|---|---|---|"]
    for name, r in results.items():
        k = r["killed"]
        lines.append(f"| {name} | {k['on_disk_at_kill']} | {k['bytes_missing']} | {k['bytes_fetched']} | "
                     f"{k['fetched_per_missing']:.4f} | {k['sent_both_runs_per_size']:.4f} |")
    return "\n".join(lines)


def link_table(link: dict, args) -> str:
    if "skipped" in link:
        return f"The link part was skipped: {link['skipped']}."
    rate = link["rate_bytes_per_s"]
    lines = [f"The link: {args.link_mbit} Mbit/s ({rate / 1e6:.1f} MB/s, tc tbf on the loopback of a namespace of its "
             f"own, MTU {LINK_MTU}), each connection held to {rate / 4e6:.1f} MB/s by the stand-in Hub; a model of "
             f"4 x {args.link_shard_mib} MiB ({link['model_bytes']} bytes), {args.workers} workers, {args.reps} "
             f"repetitions each, alternating (median [min-max]). Goal: at least {LINK_GOAL:.0%} of the link; the "
             f"bodies' ceiling is TCP's {FRAME_CEILING:.3f}.", "",
             "| pull | wall s | share of the link | start s | bodies s | share while bytes flow | tail s | "
             "Hub bytes / model |", "|---|---|---|---|---|---|---|---|"]
    for label in link["programs"]:
        rows = [r for r in link["rows"] if r["label"] == label]

        def cell(key: str, fmt: str = "{:.2f}", rows=rows) -> str:
            return spread([r[key] for r in rows], fmt)
        met = "met" if statistics.median(r["share"] for r in rows) >= LINK_GOAL else "NOT met"
        hub_per_model = statistics.median(r["hub_bytes"] for r in rows) / link["model_bytes"]
        lines.append(f"| {label} | {cell('seconds')} | {cell('share', '{:.3f}')} ({met}) | {cell('start_s')} | "
                     f"{cell('bodies_s')} | {cell('bodies_share', '{:.3f}')} | {cell('tail_s')} | "
                     f"{hub_per_model:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--throttle", type=int, default=2_000_000, help="bytes per second, per connection")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--before", default=None, metavar="REF",
                        help="also pull with REF's program in the link part, side by side (e.g. main)")
    parser.add_argument("--link-mbit", type=int, default=128, help="the link's cap, Mbit/s (tc tbf)")
    parser.add_argument("--link-shard-mib", type=int, default=64, help="the link part's shard size, MiB (4 shards)")
    parser.add_argument("--only-link", action="store_true", help="the link part alone")
    parser.add_argument("--link-child", default=None, help=argparse.SUPPRESS)  # inside the namespace
    args = parser.parse_args(argv)
    if args.link_child:
        return link_child(json.loads(args.link_child))
    args.out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="sglang-pull-bench-"))
    script = workdir / "hfpull.py"
    script.write_text(ship.program("pull.hfpull"))
    results: dict = {}
    link: dict = {}
    hub = None
    try:
        why = link_unavailable()
        link = {"skipped": why} if why else link_part(args, workdir)
        hub = Standin(workdir, args.throttle)
        for name in ([] if args.only_link else REPOS):
            repo = f"bench/{name}"
            r = results[name] = {"ours_s": [], "library_s": [], "ours_rss": [], "library_rss": []}
            for rep in range(args.reps):
                mine = run_one(ours(script, workdir / f"ours-{name}-{rep}", repo, hub, args.workers), f"hfpull {repo}")
                theirs = run_one(library(workdir / f"lib-{name}-{rep}", repo, hub, args.workers),
                                 f"snapshot_download {repo}")
                r["ours_s"].append(mine["seconds"])
                r["ours_rss"].append(mine["peak_rss_mib"])
                r["library_s"].append(theirs["seconds"])
                r["library_rss"].append(theirs["peak_rss_mib"])
                print(f"{name} #{rep + 1}: hfpull {mine['seconds']:.2f} s, snapshot_download "
                      f"{theirs['seconds']:.2f} s", flush=True)
            r["killed"] = killed_and_resumed(script, workdir, name, hub, args.workers)
    finally:
        if hub is not None:
            hub.close()
        subprocess.run(["rm", "-rf", str(workdir)], check=False)
    (args.out / "pull.json").write_text(json.dumps(
        {"throttle_bytes_per_s": args.throttle, "workers": args.workers, "reps": args.reps, "goals": GOALS,
         "results": results, "link": {**link, "goal": LINK_GOAL, "mbit": args.link_mbit,
                                      "shard_mib": args.link_shard_mib, "ceiling": FRAME_CEILING}}, indent=1) + "\n")
    text = (table(results, args) + "\n\n" if results else "") + link_table(link, args)
    return publish(args.out / "pull.md", text, [], "")


if __name__ == "__main__":
    sys.exit(main())
