"""The pull's faults on a real host already serving a good model (issue 53, items 1, 2, 3 and 7), each while a
new model is added to its cache from the STAND-IN Hub (tests/support/testbed/hub.py), the served model's server
asked every half second throughout:

- too little disk for the new model: refused before a byte of it is fetched, naming the host, the model, the
  bytes it needs and the bytes free;
- the disk filled mid-pull by another writer: the run fails naming the disk, nothing unverified is linked into
  the snapshot, and once space is freed a re-run completes and verifies;
- the control run killed (SIGKILL) mid-pull: nothing partial in the snapshot, a re-run completes and verifies;
- the Hub answering 500, then 429 with Retry-After: retried within a bound, the wait honoured, the pull done;
  a Hub that cannot be reached at all: the run fails naming it and its address, and nothing changes.

The host's disk is a tmpfs mounted over the new model's folder in hf-cache (test hosts are containers with
CAP_SYS_ADMIN): a small, bounded disk of its own that fills without touching the machine's."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import urllib.request

import pytest

from harness import read_snapshot, run_deploy, start_deploy, wait_for
from testbed import hub as standin_hub

NAME = "sg-faults-pull-1"
HUB = "/opt/sglang/hf-cache/hub"
VERIFIED = "/opt/sglang/verified"
QUALITY = "standin-org/tiny-chat-quality"
QUALITY_KEY = "qwen3.6-27b-awq-int4"    # the stand-in registry's key for QUALITY
FOLDER = "models--standin-org--tiny-chat-quality"
QDIR = f"{HUB}/{FOLDER}"
SHARD = "model.safetensors"
SHARD_SIZE = 3 << 20
MARGIN_MIB = 1   # sglang_pull_min_free_mib on this host: the tmpfs disks below are a few MiB
DOCKER = "/opt/sglang/docker"


def shard_sha256() -> str:
    commit = standin_hub.commits()[QUALITY]["main"]
    return hashlib.sha256(standin_hub.file_bytes(QUALITY, commit, SHARD)).hexdigest()


class Served:
    """The served model's server asked for /v1/models every half second from the test, for at most 600 s."""

    def __init__(self, address: str):
        self.url = f"http://{address}:30000/v1/models"
        self.ok = self.failed = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._ask, daemon=True)

    def _ask(self) -> None:
        deadline = time.monotonic() + 600
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url, timeout=3) as reply:
                    reply.read(1 << 16)
                    self.ok += 1
            except OSError:
                self.failed += 1
            self.stop.wait(0.5)

    def __enter__(self) -> Served:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(10)


def started_at(host) -> str:
    container = host.exec(f"cd {DOCKER} && docker compose ps -q sglang").stdout.strip()
    return json.loads(host.exec(f"docker inspect {container}").stdout)[0]["State"]["StartedAt"]


def revision_state(host) -> dict | None:
    commit = standin_hub.commits()[QUALITY]["main"]
    return (read_snapshot(host)["models"]["repos"].get(QUALITY) or {}).get("revisions", {}).get(commit)


def forget_quality(host) -> None:
    """The new model gone from the host: its folder (a tmpfs unmounted first), its records, its locks."""
    host.exec(f"umount {QDIR} 2>/dev/null; rm -rf {QDIR} {VERIFIED}/{FOLDER} {HUB}/.locks/{FOLDER}")


def small_disk(host, size: str) -> None:
    """A tmpfs of ``size`` as the new model's folder: its own disk, owned and moded as hf-cache's folders are."""
    forget_quality(host)
    host.exec(f"install -d -o sglang -g sglang -m 2775 {QDIR} && "
              f"mount -t tmpfs -o size={size},mode=2775,uid=$(id -u sglang),gid=$(id -g sglang) tmpfs {QDIR}")


def allocated(host, path: str) -> int:
    out = host.exec(f"stat -c '%b %B' {path} 2>/dev/null || echo 0 0", check=False).stdout.split()
    return int(out[0]) * int(out[1]) if len(out) == 2 else 0


def unverified_links(host) -> list[str]:
    """Links in the new model's snapshot whose blob is missing or not complete (a partial), by name."""
    out = host.exec(f"cd {QDIR}/snapshots 2>/dev/null && for l in $(find . -type l); do "
                    f"t=$(readlink -f $l); case $t in *.incomplete|'') echo $l;; *) test -f $t || echo $l;; esac; "
                    "done", check=False).stdout
    return out.split()


def quality_gets(requests: list[dict]) -> list[dict]:
    return [r for r in requests if r["method"] == "GET" and f"/{QUALITY}/resolve/" in r["path"]]


@pytest.fixture(scope="module")
def hub():
    return standin_hub.ensure_hub()


@pytest.fixture(scope="module")
def serving(testbed, workdir, hub):
    """A host serving the production model, and a function making an inventory of it with more data."""
    host = testbed.host(NAME)

    def inventory(name: str, **data):
        return testbed.inventory(workdir / f"faults-pull-{name}.py", {"production": [(host, {
            "sglang_pull_min_free_mib": MARGIN_MIB, **data})]})

    first = run_deploy(inventory("serving"))
    assert first.returncode == 0, first.why()
    return host, inventory, started_at(host)


@pytest.fixture()
def fault(serving, hub):
    """Each test's fault cleared after it, whatever happens: the Hub's, the small disk."""
    hub.reset()
    yield serving
    hub.clear_faults()
    forget_quality(serving[0])


def test_a_model_the_disk_cannot_hold_is_refused_before_a_byte_of_it_is_pulled(fault, hub, measure):
    host, inventory, started = fault
    small_disk(host, "1m")
    with Served(host.address) as served:
        result = run_deploy(inventory("cached", sglang_cached_models=[QUALITY_KEY]))
    assert result.returncode != 0
    commit = standin_hub.commits()[QUALITY]["main"]
    line = next((ln for ln in result.output.splitlines() if "not enough disk for" in ln), "")
    assert f"[{NAME}]" in line and f"not enough disk for {QUALITY}@{commit[:12]}" in line, result.why()
    needed = re.search(r"\((\d+) bytes of its files not in the cache yet", line)
    free = re.search(r"which has (\d+) bytes free", line)
    assert needed and int(needed[1]) >= SHARD_SIZE and free and int(free[1]) <= 1 << 20, line
    assert "sglang_pull_min_free_mib" in line and "network error" not in result.output
    assert quality_gets(hub.requests()) == []   # not a byte of the model was asked for
    assert served.failed == 0 and served.ok > 0 and started_at(host) == started
    measure(f"disk too small for a new model: refused before any file GET; the served model answered "
            f"{served.ok}/{served.ok + served.failed} probes during the run")


def test_a_disk_filled_mid_pull_fails_naming_the_disk_and_a_rerun_completes(fault, hub, workdir, measure):
    host, inventory, started = fault
    small_disk(host, "32m")
    cached = inventory("cached", sglang_cached_models=[QUALITY_KEY])
    partial = f"{QDIR}/blobs/{shard_sha256()}.incomplete"
    hub.set_throttle(64 << 10)   # per connection: the 3 MiB shard's ranges take about 6 s
    with Served(host.address) as served:
        deploy = start_deploy(cached, workdir / "disk-filled.log")
        assert wait_for(lambda: allocated(host, partial) >= 256 << 10, 180, every=0.3), "the pull never got going"
        # Another writer takes every byte left on the disk.
        host.exec(f"dd if=/dev/zero of={QDIR}/filler bs=1M status=none", check=False)
        deploy.wait(timeout=300)
    hub.set_throttle(None)
    output = (workdir / "disk-filled.log").read_text()
    assert deploy.returncode != 0
    line = next((ln for ln in output.splitlines() if "pull failed:" in ln), "")
    assert f"[{NAME}]" in line and f"the disk holding {QDIR}/blobs is full" in line, output[-3000:]
    assert "network error" not in output and "No space left on device" in line
    assert unverified_links(host) == []
    assert host.exec(f"test -e {QDIR}/blobs/{shard_sha256()}", check=False).returncode != 0
    state = revision_state(host)
    assert not (state or {}).get("complete")
    assert served.failed == 0 and served.ok > 0 and started_at(host) == started

    host.exec(f"rm {QDIR}/filler")
    again = run_deploy(cached)
    assert again.returncode == 0, again.why()
    assert host.exec(f"sha256sum {QDIR}/blobs/{shard_sha256()}").stdout.split()[0] == shard_sha256()
    assert (revision_state(host) or {}).get("verified") is True
    measure(f"disk filled mid-pull: failed naming the disk; the served model answered {served.ok}/"
            f"{served.ok + served.failed} probes; the re-run after freeing space verified the model")


def test_a_control_run_killed_mid_pull_leaves_nothing_partial_and_a_rerun_verifies(fault, hub, workdir, measure):
    host, inventory, started = fault
    forget_quality(host)
    cached = inventory("cached", sglang_cached_models=[QUALITY_KEY])
    partial = f"{HUB}/{FOLDER}/blobs/{shard_sha256()}.incomplete"
    hub.set_throttle(64 << 10)
    with Served(host.address) as served:
        deploy = start_deploy(cached, workdir / "killed-control.log")
        assert wait_for(lambda: allocated(host, partial) >= 256 << 10, 180, every=0.3), "the pull never got going"
        deploy.kill()   # SIGKILL: the operator's laptop closed, CI's timeout
        deploy.wait(timeout=60)
        assert unverified_links(host) == []   # the pull on the host may run on alone: what it links is verified
    hub.set_throttle(None)
    assert served.failed == 0 and served.ok > 0 and started_at(host) == started

    again = run_deploy(cached)
    assert again.returncode == 0, again.why()
    assert host.exec(f"sha256sum {QDIR}/blobs/{shard_sha256()}").stdout.split()[0] == shard_sha256()
    assert (revision_state(host) or {}).get("verified") is True
    assert unverified_links(host) == []
    results = [json.loads(m) for m in re.findall(r"SGLANG_PULL_RESULT (\{.*\})", again.output)]
    resumed = sum(r.get("resumed_bytes", 0) for r in results if r.get("repo_id") == QUALITY)
    measure(f"control run killed mid-pull: nothing unverified linked; the served model answered {served.ok}/"
            f"{served.ok + served.failed} probes; the re-run verified the model ({resumed} bytes resumed)")


def test_a_hub_that_answers_500_then_429_is_retried_and_the_pull_succeeds(fault, hub):
    host, inventory, _ = fault
    forget_quality(host)
    hub.configure(inject_statuses=[500, 429], retry_after=2, inject_match=f"GET /api/models/{QUALITY}/revision/")
    result = run_deploy(inventory("cached", sglang_cached_models=[QUALITY_KEY]))
    assert result.returncode == 0, result.why()
    infos = [r["status"] for r in hub.requests() if r["path"].startswith(f"/api/models/{QUALITY}/revision/")]
    assert infos == [500, 429, 200]   # a retry inside the 2 s window would have been refused a second time
    assert "HTTP 429, Retry-After 2 s; retrying in 2.0 s" in result.output
    assert host.exec(f"sha256sum {QDIR}/blobs/{shard_sha256()}").stdout.split()[0] == shard_sha256()
    assert (revision_state(host) or {}).get("verified") is True


def test_a_hub_that_cannot_be_reached_fails_naming_it_and_changes_nothing(fault, measure):
    host, inventory, started = fault
    forget_quality(host)
    down = "http://127.0.0.1:9"   # nothing listens there on the host: every connection is refused
    before = host.exec(f"sha256sum {DOCKER}/compose.yaml; ls -a {HUB}").stdout
    with Served(host.address) as served:
        begun = time.monotonic()
        result = run_deploy(inventory("hub-down", sglang_cached_models=[QUALITY_KEY], sglang_hf_endpoint=down))
        took = time.monotonic() - begun
    assert result.returncode != 0
    # the preflight asks the Hub from the host before any change (issue 58, run/sources.py) and refuses the host
    line = next((ln for ln in result.output.splitlines() if "does not answer from this host" in ln), "")
    assert f"host {NAME}: sglang_hf_endpoint: the Hub" in line and f"at {down} does not answer" in line, result.why()
    assert "Connection refused" in line and "refused before any change on any host" in result.output
    assert host.exec(f"sha256sum {DOCKER}/compose.yaml; ls -a {HUB}").stdout == before
    assert served.failed == 0 and served.ok > 0 and started_at(host) == started
    measure(f"Hub down: the run failed naming it after {took:.0f} s (5 attempts with backoff)")
