"""The STAND-IN Hub on the test network: tests/support/hfstandin/server.py in a
container of its own (the stand-in server image has python3), serving small
generated model repos over the Hub's wire protocol. Test hosts pull from it
through `sglang_hf_endpoint`; tests read its request log to count what was
fetched. Production never points here: `sglang_hf_endpoint` defaults to
huggingface_hub's own default, the Hub.

Each test run has its own Hub container, named with the run's prefix (its
request log and throttle are per run); the sandbox uses the unprefixed one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

from testbed import hosts, tls

HUB_DIR = Path(__file__).resolve().parent.parent / "hfstandin"
NAME = "sglang-hfhub"
SPEC_NAME = "spec.json"
PORT = 8080
GATED_TOKEN = "hf_standinGatedToken0123456789abcdef"

# Sizes are small for fast tests, but the first shard is big enough to kill a pull mid-file.
SPEC = {"repos": [
    {"repo_id": "standin-org/tiny-chat", "commits": [
        {"branch": None, "files": [
            {"path": "config.json", "text": json.dumps({"architectures": ["StandinForCausalLM"], "revision": 1})},
            {"path": "model-00001-of-00002.safetensors", "size": 12 << 20, "seed": 11, "lfs": True},
            {"path": "model-00002-of-00002.safetensors", "size": 2 << 20, "seed": 12, "lfs": True},
        ]},
        {"branch": "main", "files": [
            {"path": "config.json", "text": json.dumps({"architectures": ["StandinForCausalLM"], "revision": 2})},
            {"path": "tokenizer/tokenizer.json", "text": json.dumps({"model": {"type": "BPE"}})},
            {"path": "model-00001-of-00002.safetensors", "size": 12 << 20, "seed": 11, "lfs": True},
            {"path": "model-00002-of-00002.safetensors", "size": 3 << 20, "seed": 13, "lfs": True},
        ]},
    ]},
    {"repo_id": "standin-org/tiny-chat-quality", "commits": [
        {"branch": "main", "files": [
            {"path": "config.json", "text": json.dumps({"architectures": ["StandinForCausalLM"], "dense": True})},
            {"path": "model.safetensors", "size": 3 << 20, "seed": 21, "lfs": True},
        ]},
    ]},
    {"repo_id": "standin-org/gated-chat", "gated": True, "tokens": [GATED_TOKEN], "commits": [
        {"branch": "main", "files": [
            {"path": "config.json", "text": json.dumps({"architectures": ["StandinForCausalLM"], "gated": True})},
            {"path": "model.safetensors", "size": 1 << 20, "seed": 31, "lfs": True},
        ]},
    ]},
    # A speculative recipe's drafter (tests/e2e/test_recipes.py): a small model of its own, pinned and pulled.
    {"repo_id": "standin-org/tiny-chat-drafter", "commits": [
        {"branch": "main", "files": [
            {"path": "config.json", "text": json.dumps({"architectures": ["StandinEagle3ForCausalLM"]})},
            {"path": "model.safetensors", "size": 1 << 20, "seed": 51, "lfs": True},
        ]},
    ]},
    {"repo_id": "standin-org/admin-extra", "commits": [
        {"branch": "main", "files": [
            {"path": "config.json", "text": json.dumps({"architectures": ["StandinForCausalLM"], "extra": True})},
            {"path": "model.safetensors", "size": 1 << 20, "seed": 41, "lfs": True},
        ]},
    ]},
]}


def _server_module():
    spec = importlib.util.spec_from_file_location("hfstandin_server", HUB_DIR / "server.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def commits() -> dict[str, dict[str, str]]:
    """{repo_id: {"main": commit, "old": commit}} for SPEC, computed without a server."""
    hub = _server_module().StandinHub(SPEC)
    out = {}
    for repo in SPEC["repos"]:
        out[repo["repo_id"]] = {"main": hub.commit(repo["repo_id"], "main")}
        if len(repo["commits"]) > 1:
            out[repo["repo_id"]]["old"] = hub.commit(repo["repo_id"], 0)
    return out


def file_bytes(repo_id: str, commit: str, path: str) -> bytes:
    return _server_module().StandinHub(SPEC).file_bytes(repo_id, commit, path)


TLS_PORT = 8443
CA_DIR = tls.CA_DIR


def test_ca() -> tuple[Path, Path]:
    """The testbed's CA (tls.test_ca()), which signs the stand-in Hub's HTTPS listener: (certificate, key)."""
    return tls.test_ca(CA_DIR)


def _server_certificate(hostname: str) -> Path:
    """A directory holding cert.pem and key.pem for ``hostname`` (the Hub container's name on the test network),
    signed by test_ca()."""
    directory = hosts.CACHE_DIR / f"hfstandin-tls-{hostname}"
    ca = test_ca()
    signed_by = directory / "ca.pem"   # which CA signed it: a CA made anew means a new certificate
    if all((directory / n).is_file() for n in ("cert.pem", "key.pem", "ca.pem")) and \
            signed_by.read_bytes() == ca[0].read_bytes():
        return directory
    cert, key = tls.issue(ca, hostname, dns_names=[hostname])
    if directory.exists() and not directory.is_dir():
        directory.unlink()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "key.pem").write_bytes(key)
    (directory / "cert.pem").write_bytes(cert)
    signed_by.write_bytes(ca[0].read_bytes())
    return directory


class Hub:
    """A running stand-in Hub container, seen from the control machine."""

    def __init__(self, name: str, address: str):
        self.name = name
        self.address = address
        self.url = f"http://{address}:{PORT}"
        # The same Hub API over HTTPS, by the container's name (Docker's DNS on the test network), with a
        # certificate from test_ca(): hosts that pull with a token use it after trusting that CA.
        self.https_url = f"https://{name}:{TLS_PORT}"

    @staticmethod
    def trust_command() -> str:
        """A shell command that makes a test host trust test_ca() (the pull's client uses the system store)."""
        pem = test_ca()[0].read_text()
        return (f"printf '%s' '{pem}' > /usr/local/share/ca-certificates/sglang-testbed-hub.crt && "
                "update-ca-certificates >/dev/null")

    def _call(self, path: str, body: dict | None = None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method="GET" if data is None else "POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read().decode()
        return json.loads(text) if text.strip() else None

    def requests(self) -> list[dict]:
        return self._call("/_standin/requests")

    def reset(self) -> None:
        self._call("/_standin/reset", {})

    def counts(self, repo_id: str | None = None) -> dict[str, int]:
        """The requests recorded since the last reset, by kind (hfstandin's request_kind): info, listing, auth,
        file-head, file-get, other; ``repo_id``: that repo's alone."""
        return self._call("/_standin/counts" + (f"?repo={repo_id}" if repo_id else ""))

    def tamper(self, repo_id: str, revision: str, path: str, offset: int = 0) -> dict:
        """Flip one byte of a file on this Hub, consistently (see StandinHub.tamper); its new metadata."""
        return self._call("/_standin/tamper", {"repo_id": repo_id, "revision": revision, "path": path,
                                               "offset": offset})

    def configure(self, **changes) -> dict:
        """Throttle and faults (tests/support/hfstandin/server.py CONFIG_DEFAULTS); returns the whole config."""
        return self._call("/_standin/config", changes)

    def set_throttle(self, bytes_per_s: int | None) -> None:
        """Each response's body (so each connection) at most this fast; None lifts it."""
        self.configure(throttle_bytes_per_s=bytes_per_s)

    def clear_faults(self) -> None:
        self.configure(throttle_bytes_per_s=None, drop_after_bytes=None, drop_count=0, drop_range=None,
                       inject_status=None, inject_count=0, inject_match=None, retry_after=None,
                       inject_statuses=None)


def ensure_hub(name: str | None = None) -> Hub:
    """Start the stand-in Hub container unless it already runs this SPEC and server; return it.

    By default the current test run's own Hub (its prefix + NAME); outside a test run, NAME."""
    name = name or hosts.container_name(NAME)
    tag, _ = hosts.ensure_standin_image()
    hosts.ensure_network()
    spec_text = json.dumps(SPEC, sort_keys=True)
    source = (HUB_DIR / "server.py").read_bytes()
    fingerprint = hashlib.sha256(spec_text.encode() + source + tag.encode() + b"tls").hexdigest()[:12]
    tls_dir = _server_certificate(name)
    # A directory named by its content (runs and the sandbox never rewrite what another Hub has mounted), holding
    # the spec. A directory, not a file, is mounted: when a cleaner (systemd-tmpfiles) removes a mounted file
    # and dockerd restarts the Hub, Docker makes the missing source a directory, and the Hub could never read it.
    spec_dir = hosts.CACHE_DIR / f"hfstandin-spec-{hashlib.sha256(spec_text.encode()).hexdigest()[:12]}"
    spec_file = spec_dir / SPEC_NAME
    ok = spec_dir.is_dir() and not spec_dir.is_symlink() and spec_file.is_file() and \
        spec_file.read_text() == spec_text
    inspect = subprocess.run(["docker", "inspect", name], capture_output=True, text=True)
    if inspect.returncode == 0:
        info = json.loads(inspect.stdout)[0]
        # Its server mounted from this checkout: a Hub whose checkout is gone (a removed worktree) restarts forever.
        mounted = any(m.get("Destination") == "/opt/hfstandin" and m.get("Source") == str(HUB_DIR)
                      for m in info.get("Mounts") or ())
        if ok and mounted and info["State"]["Running"] and not info["State"].get("Restarting") and \
                info["Config"]["Labels"].get("sglang-hfhub") == fingerprint:
            return Hub(name, info["NetworkSettings"]["Networks"][hosts.NETWORK]["IPAddress"])
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    if not ok:
        # Whatever is in the way (a leftover, or what Docker made of a missing mount source) is replaced.
        if spec_dir.is_symlink() or (spec_dir.exists() and not spec_dir.is_dir()):
            spec_dir.unlink()
        elif spec_dir.is_dir():
            shutil.rmtree(spec_dir)
        spec_dir.mkdir(parents=True)
        partial = spec_dir / f".{SPEC_NAME}.{os.getpid()}.tmp"
        partial.write_text(spec_text)
        os.replace(partial, spec_file)
    prefix = name[:-len(NAME)] if name.endswith(NAME) else ""
    subprocess.run([
        "docker", "run", "-d", "--name", name, *hosts.run_labels(prefix), "--label", f"sglang-hfhub={fingerprint}",
        "--network", hosts.NETWORK, "--restart", "unless-stopped",
        "-v", f"{HUB_DIR}:/opt/hfstandin:ro", "-v", f"{spec_dir}:/opt/hfstandin-spec:ro",
        "-v", f"{tls_dir}:/opt/hfstandin-tls:ro",
        "--entrypoint", "python3", tag,
        "/opt/hfstandin/server.py", "--spec", f"/opt/hfstandin-spec/{SPEC_NAME}", "--host", "0.0.0.0",
        "--port", str(PORT), "--tls-cert", "/opt/hfstandin-tls/cert.pem", "--tls-key", "/opt/hfstandin-tls/key.pem",
        "--tls-port", str(TLS_PORT),
    ], check=True, capture_output=True, text=True)
    info = json.loads(subprocess.run(["docker", "inspect", name], check=True, capture_output=True,
                                     text=True).stdout)[0]
    hub = Hub(name, info["NetworkSettings"]["Networks"][hosts.NETWORK]["IPAddress"])
    deadline = time.monotonic() + 60
    while True:
        try:
            hub.requests()
            return hub
        except OSError:
            if time.monotonic() > deadline:
                logs = subprocess.run(["docker", "logs", "--tail", "20", name], capture_output=True, text=True)
                raise hosts.TestbedError(f"the stand-in Hub did not answer within 60 s: {logs.stderr[-2000:]}")
            time.sleep(0.5)


def registry(commit_ids: dict[str, dict[str, str]]) -> dict:
    """sglang_models for the stand-in repos: vetted like the real registry, pinned to the stand-in's commits."""
    def entry(repo_id, role, served, **extra):
        return {"repo_id": repo_id, "revision": commit_ids[repo_id]["main"], "role": role, "served_name": served,
                "reasoning_parser": "qwen3", "tool_call_parser": "qwen3_coder",
                # The stand-in's own baseline: well below what it sustains on a loaded 2-core machine
                # (about 1000 tok/s for 8 streams), well above its `slow` mode (at most 80 tok/s).
                "baseline_tok_s": 300, **extra}

    # The real registry's keys, so group_data/production.py and quality.py pick the stand-in models as is.
    return {
        "qwen3.6-35b-a3b-awq": entry("standin-org/tiny-chat", "production", "qwen3.6-35b-a3b"),
        "qwen3.6-27b-awq-int4": entry("standin-org/tiny-chat-quality", "quality", "qwen3.6-27b"),
        "gated-chat": entry("standin-org/gated-chat", "quality", "gated-chat"),
        "admin-extra": entry("standin-org/admin-extra", "quality", "admin-extra"),
    }
