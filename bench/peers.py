"""Peer pulls benchmark (issue #33): the Hub once per site, on real test hosts with capped links.

    .venv/bin/python bench/peers.py [--shards 4] [--shard-mib 64] [--out bench/results]

Four test hosts (the test harness's Debian trixie containers) are deployed once with peer distribution on
(`sglang_peer_key_file`) and a bench model in their cache (`sglang_cached_models`): a config and --shards shards of
--shard-mib MiB, served by a stand-in Hub this script runs on the test network's gateway (with the stand-in repos
the deploy needs). Then the links are capped the way the issue sets them:
- the Hub: each response held to 2.5 MB/s, so a host's pull (8 connections) takes at most 20 MB/s from it;
- the LAN: each host's egress held to 100 MB/s (`tc qdisc ... tbf rate 800mbit` inside the host), which bounds what
  a peer door hands out in all.
For N = 1, 2, 4 hosts: the bench model removed from every host's cache (and its record), then pulled as a deploy
pulls a locked model (hfpull.py as the account, the same arguments and lock record on stdin `tasks/models.py` and
`tasks/models_from_peers.py` give), as a swarm by files (sglang_infra/fleet/peering.py): round 1, every host at once its
share of the files (peering.split), the Hub for what no peer holds; round 2, every host at once the rest from the
peers. A fleet of one pulls everything from the Hub, as the deploy does. Reported: the bytes the Hub served (against
the model's size), each host's time in each round, the fleet's time (the slowest of round 1 + the slowest of round 2),
its ratio to one host's time, and that every pull verified every file (exit 0, and the big shard's sha256 on every
host). Then a late joiner: the fourth host's copy removed and pulled again while the other three hold the model (three
sources at once). Writes bench/results/peers.md and peers.json.

The doors' lists are those the first deploy wrote (every blob of the bench model, by its exact name): a door serves a
blob once the pull gave the file that name, which it does only once the file is verified. The deploy's per-file list
of a revision pulled in part (peerdoor.served_blobs) is tested in tests/unit and tests/e2e/test_peers.py.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shlex
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT))

from harness import Testbed, door_pin, run_deploy  # noqa: E402
from hfstandin import StandinHub  # noqa: E402
from sglang_infra.fleet.peering import split  # noqa: E402
from testbed import hosts as testbed_hosts  # noqa: E402
from testbed import hub as testbed_hub  # noqa: E402

MiB = 1 << 20
REPO = "bench/peers"
KEY_NAME = "bench-peers"
TOOLS = "/var/lib/sglang-tools"
HUB_DIR = "/opt/sglang/hf-cache/hub"
RECORDS = "/opt/sglang/verified"
FOLDER = "models--bench--peers"
PORT = 880  # group_data/all.py's sglang_peer_port
HUB_PER_CONNECTION = 2_500_000      # bytes/s: 8 connections = 20 MB/s per host
LAN_RATE = "800mbit"                # 100 MB/s out of each host
SETTLE = 15


def spec(shards: int, shard_mib: int) -> dict:
    files = [{"path": "config.json", "text": json.dumps({"bench": "peers"})}] + [
        {"path": f"model-{i:05d}-of-{shards:05d}.safetensors", "size": shard_mib * MiB, "seed": 330 + i, "lfs": True}
        for i in range(1, shards + 1)]
    return {"repos": [*testbed_hub.SPEC["repos"], {"repo_id": REPO, "commits": [{"branch": "main", "files": files}]}]}


def pull(host, hub_url: str, commit: str, peers: list, seed: bool, record: dict[str, Any] | None = None) -> dict:
    """One pull of the bench model on ``host`` as the deploy runs it: (wall seconds, its result, its output);
    ``record``: the lock's record of the model (with a "share": a swarm's round 1), on stdin."""
    args = [f"{TOOLS}/venv/bin/python", "-I", f"{TOOLS}/hfpull.py", "pull", "--cache-dir", HUB_DIR, "--records-dir",
            RECORDS, "--repo-id", REPO, "--revision", commit, "--endpoint", hub_url, "--workers", "8"]
    stdin = ""
    if record is not None:
        host.exec(f"printf %s {shlex.quote(json.dumps(record))} > /tmp/bench-lock.json")
        args.append("--locked-stdin")
        stdin = " < /tmp/bench-lock.json"
    if peers:
        args += ["--peer-key-file", f"{TOOLS}/secret/peer-key", "--peer-wait", "0" if seed else str(SETTLE)]
        args += ["--peer-seed"] if seed else []
        for peer in peers:
            args += ["--peer", f"{peer.address}:{PORT}={door_pin(peer)}"]
    started = time.monotonic()
    done = host.exec("cd / && sudo -u sglang " + " ".join(shlex.quote(a) for a in args) + stdin, check=False,
                     timeout=1800)
    wall = time.monotonic() - started
    found = re.findall(r"SGLANG_PULL_RESULT (\{.*\})", done.stdout)
    if done.returncode != 0 or not found:
        raise SystemExit(f"bench: the pull on {host.name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    return {"host": host.name, "seconds": round(wall, 1), "result": json.loads(found[-1])}


def forget(hosts) -> None:
    for host in hosts:
        host.exec(f"rm -rf {HUB_DIR}/{FOLDER} {RECORDS}/{FOLDER} {HUB_DIR}/.locks/{FOLDER}")


def hub_bytes(hub: StandinHub) -> int:
    return sum(r["bytes_sent"] for r in hub.requests() if r["method"] == "GET" and f"/{REPO}/resolve/" in r["path"])


def verified(host, digest: str, shards: int) -> bool:
    path = f"{HUB_DIR}/{FOLDER}/snapshots/*/model-00001-of-{shards:05d}.safetensors"
    return host.exec(f"sha256sum {path}", check=False).stdout.split()[:1] == [digest]


def at_once(hosts, run) -> list[dict]:
    """run(host) on every host at once; their rows by host."""
    results: list[dict] = []
    threads = [threading.Thread(target=lambda h=h: results.append(run(h))) for h in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if len(results) != len(hosts):
        raise SystemExit("bench: a pull failed (see above)")
    return sorted(results, key=lambda r: r["host"])


def fleet_round(hosts, hub, commit: str, record: dict, digest: str, shards: int) -> dict:
    """The bench model on ``hosts`` from nothing: one host alone from the Hub; a fleet as a swarm, in two rounds."""
    hub.reset()
    if len(hosts) == 1:
        rounds = [[pull(hosts[0], hub.url, commit, [], True, record)]]
    else:
        shares = split(record["files"], [h.name for h in hosts])
        rounds = [at_once(hosts, lambda h: pull(h, hub.url, commit, [p for p in hosts if p is not h], True,
                                                 {**record, "share": list(shares[h.name])})),
                  at_once(hosts, lambda h: pull(h, hub.url, commit, [p for p in hosts if p is not h], True, record))]
    slowest = [max(r["seconds"] for r in rows) for rows in rounds]
    return {"hosts": len(hosts), "hub_bytes": hub_bytes(hub), "round_s": slowest, "fleet_s": round(sum(slowest), 1),
            "per_host": [[{"host": r["host"], "seconds": r["seconds"], "sources": r["result"]["sources"]}
                          for r in rows] for rows in rounds],
            "verified": all(verified(h, digest, shards) for h in hosts)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-mib", type=int, default=64)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args()
    out = Path(args.out)
    state = out / "peers-state"
    state.mkdir(parents=True, exist_ok=True)
    size = args.shards * args.shard_mib * MiB + len(json.dumps({"bench": "peers"}))
    bed = Testbed(state)
    hub = StandinHub(spec(args.shards, args.shard_mib), host=testbed_hosts.network_gateway(), access_log=False)
    hub.start()
    try:
        commits = hub.commits()
        registry = testbed_hub.registry(commits)
        registry[KEY_NAME] = {**registry["qwen3.6-27b-awq-int4"], "repo_id": REPO, "revision": commits[REPO]["main"],
                              "served_name": "bench-peers"}
        commit = commits[REPO]["main"]
        digest = hashlib.sha256(hub.file_bytes(REPO, commit, f"model-00001-of-{args.shards:05d}.safetensors")) \
            .hexdigest()
        paths = ["config.json", *(f"model-{i:05d}-of-{args.shards:05d}.safetensors" for i in range(1, args.shards + 1))]
        record = {"commit": commit, "files": [
            {"path": p, "size": len(body), "sha256": hashlib.sha256(body).hexdigest()}
            for p, body in ((p, hub.file_bytes(REPO, commit, p)) for p in paths)]}
        key_file = state / "peer.key"
        key_file.write_text(hashlib.sha256(b"bench peers key").hexdigest() + "\n")
        hosts = [bed.host(f"bench-peers-{n}") for n in range(1, 5)]
        data = {"sglang_peer_key_file": str(key_file), "sglang_benchmark_min_fraction": 0.05,
                "sglang_hf_endpoint": hub.url, "sglang_models": registry, "sglang_cached_models": [KEY_NAME]}
        inventory = bed.inventory(state / "peers.py", {"production": [(h, data) for h in hosts]})
        hub.reset()
        began = time.monotonic()
        first = run_deploy(inventory)
        if first.returncode != 0:
            raise SystemExit("bench: the first deploy failed:\n" + first.why())
        setup = {"deploy_s": round(time.monotonic() - began, 1), "hub_bytes": hub_bytes(hub)}
        print(json.dumps({"first deploy (uncapped, 4 hosts)": setup}), flush=True)
        for host in hosts:
            host.exec(f"tc qdisc replace dev eth0 root tbf rate {LAN_RATE} burst 1mbit latency 50ms")
        hub.set_throttle(HUB_PER_CONNECTION)
        rounds = []
        for n in (1, 2, 4):
            forget(hosts)
            row = fleet_round(hosts[:n], hub, commit, record, digest, args.shards)
            print(json.dumps(row), flush=True)
            rounds.append(row)
        forget(hosts[3:])
        hub.reset()
        late = pull(hosts[3], hub.url, commit, hosts[:3], seed=True, record=record)
        late_row = {"seconds": late["seconds"], "sources": late["result"]["sources"], "hub_bytes": hub_bytes(hub),
                    "verified": verified(hosts[3], digest, args.shards)}
        print(json.dumps({"late joiner": late_row}), flush=True)
    finally:
        hub.stop()
        bed.close()
    one = rounds[0]["fleet_s"]
    summary = {"model_bytes": size, "first_deploy": setup, "rounds": rounds, "late_joiner": late_row,
               "fleet_4_over_1": round(rounds[-1]["fleet_s"] / one, 2)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "peers.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = [f"Model: {args.shards} x {args.shard_mib} MiB + config ({size / MiB:.0f} MiB); Hub 20 MB/s per host, "
             f"LAN 100 MB/s out of each host.", "",
             "| hosts | Hub bytes / model | round 1 (s) | round 2 (s) | fleet (s) | fleet / one host | every host "
             "verified |", "|---|---|---|---|---|---|---|"]
    for row in rounds:
        r1, r2 = (row["round_s"] + ["-"])[:2]
        lines.append(f"| {row['hosts']} | {row['hub_bytes'] / size:.2f} | {r1} | {r2} | {row['fleet_s']} | "
                     f"{row['fleet_s'] / one:.2f} | {'yes' if row['verified'] else 'NO'} |")
    lines += ["", f"Late joiner (three hosts hold it): {late_row['seconds']} s, Hub bytes {late_row['hub_bytes']}, "
              f"sources {late_row['sources']}"]
    text = "\n".join(lines)
    (out / "peers.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
