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

Results: median [min-max], the ratio of the medians (ours / the library's)
next to issue #14's goals (reported, not enforced), in pull.md and
pull.json under --out. Traffic goes only to the stand-in on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
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


class BenchError(RuntimeError):
    pass


def spec() -> dict:
    return {"repos": [{"repo_id": f"bench/{name}", "commits": [{"branch": "main", "files": files}]}
                      for name, files in REPOS.items()]}


def repo_size(name: str) -> int:
    return sum(f.get("size", len(f.get("text", "").encode())) for f in REPOS[name])


class Standin:
    """The stand-in Hub as a child process on 127.0.0.1, an ephemeral port."""

    def __init__(self, workdir: Path, throttle: int):
        spec_file = workdir / "spec.json"
        spec_file.write_text(json.dumps(spec()))
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--throttle", type=int, default=2_000_000, help="bytes per second, per connection")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="sglang-pull-bench-"))
    script = workdir / "hfpull.py"
    script.write_text(ship.program("pull.hfpull"))
    hub = Standin(workdir, args.throttle)
    results: dict = {}
    try:
        for name in REPOS:
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
        hub.close()
        subprocess.run(["rm", "-rf", str(workdir)], check=False)
    (args.out / "pull.json").write_text(json.dumps(
        {"throttle_bytes_per_s": args.throttle, "workers": args.workers, "reps": args.reps, "goals": GOALS,
         "results": results}, indent=1) + "\n")
    return publish(args.out / "pull.md", table(results, args), [], "")


if __name__ == "__main__":
    sys.exit(main())
