"""The names a host program and the control side both use, defined once.

Every directory, file, label and script name that the deploy (control side)
writes or reads and a host program (gate, snapshot, stack, the gateway's
launcher) also writes or reads is spelled out here and nowhere else; a unit
test fails when one of these values is spelled out in a second module. So is
the one comparison of the gate's stamp with the digest of the host as it is.
Standard library only: shipped with the host programs (ship.py).
"""

import hashlib

# Below the home: the gateways' directory, one router/<slug>/ per fronted model.
GATEWAY_DIR = "router"
# Below the home: a worker's stack (compose.yaml, .env, the gate's stamp) and the toolchain image's Dockerfile.
DOCKER_DIR = "docker"
# Below docker/: the server's private config (0700), mounted read-only into the container.
SECRETS_DIR = DOCKER_DIR + "/secrets"
# In it: the server's config file (SGLang's --config YAML, with the API key), which the gateways read too.
SERVER_CONFIG = "server.yaml"
# Below docker/: the toolchain image's build context, beside its Dockerfile.
TOOLCHAIN_DIR = DOCKER_DIR + "/toolchain"
DOCKERFILE = "Dockerfile"
# Below the home: the Hugging Face cache (setgid, group-writable: admins pull into it), and its hub/ of models.
HF_CACHE_DIR = "hf-cache"
HUB_DIR = HF_CACHE_DIR + "/hub"
# Below the home, outside hf-cache: the pull's records of what it verified, one folder per repo
# (verified/<repo folder>/<commit>.json, manifest.py). The account's alone (0755, not group-writable): a member of
# the group, who can rewrite a blob in hf-cache, cannot rewrite the record that says it was verified.
VERIFIED_DIR = "verified"
# Below the home: the benchmark's results (group-writable), written by the gate and by admins.
RESULTS_DIR = "results"
# The compose service of a gateway's project (a worker's is `sglang`).
GATEWAY_SERVICE = "router"
# Each gateway's worker set, read by its launcher at start and kept by the deploy through /workers.
WORKERS_FILE = "workers.json"
# A gateway's launcher, beside its compose.yaml.
LAUNCHER = "launch.py"
# Below the home: the gateways' private files (0700), mounted read-only into the gateway containers alone; in it the
# control-plane key (SMG role admin, apikey.py's format) that the launcher gives the gateway and the deploy sends.
# A dot name: no gateway's slug begins with a dot (gateways.gateway_slug), so it is never taken for a gateway's.
GATEWAY_SECRETS_DIR = GATEWAY_DIR + "/.secrets"
CONTROL_PLANE_CONFIG = "control-plane.yaml"
# The id and name the gateway knows the deploy's control-plane key by (--control-plane-api-keys 'id:name:role:key').
CONTROL_PLANE_KEY_ID = "sglang-deploy"
# The stack's files, in docker/ (a worker) or router/<slug>/ (a gateway).
COMPOSE_FILE = "compose.yaml"
# Every `docker compose` the deploy and the gate run names its file: without -f, compose also loads a
# compose.override.yaml beside it, a file the deploy never wrote.
COMPOSE_COMMAND = ("docker", "compose", "-f", COMPOSE_FILE)
ENV_FILE = ".env"
# What the gate keeps of a config that failed it (compose.yaml.failed, .env.failed), so it is not retried.
FAILED_SUFFIX = ".failed"
# The container label naming the model a worker serves (repo@commit): a change of model recreates it.
MODEL_LABEL = "sglang.model"
# The label naming a speculative recipe's drafter (repo@commit): a config on disk (the running one, its rollback)
# keeps its drafter's revision from a prune, as MODEL_LABEL keeps its model's.
DRAFTER_LABEL = "sglang.drafter"
# A multi-node group's member (sglang_node_group): the serving container's labels name its group, its rank and the
# group's size, so the status report, the host checks and the deploy can tell a member and its group from the host.
NODE_GROUP_LABEL = "sglang.node_group"
NODE_RANK_LABEL = "sglang.node_rank"
NNODES_LABEL = "sglang.nnodes"
# The toolchain image's labels (docker/Dockerfile): the base it was built from, and its inputs' digest.
TOOLCHAIN_LABEL_PREFIX = "sglang.toolchain"
TOOLCHAIN_BASE_LABEL = TOOLCHAIN_LABEL_PREFIX + ".base"
TOOLCHAIN_INPUTS_LABEL = TOOLCHAIN_LABEL_PREFIX + ".inputs"
# The validation scripts in the home (a gateway's: in its directory), and the gate that runs them.
VALIDATION_SCRIPTS = ("test_tool_calling.sh", "benchmark.sh")
GATE_SCRIPT = "gate.sh"
GATE_SCRIPTS = (*VALIDATION_SCRIPTS, GATE_SCRIPT)
# The node exporter's textfile collector: the gate's metrics (gate_metrics.py) are one file there, which the
# deploy's node exporter drop-in names as its collector directory. It is the directory Debian's
# prometheus-node-exporter reads by default, so other collectors' files already there keep being read.
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
GATE_METRICS_FILE = "sglang_gate.prom"
GPU_METRICS_FILE = "sglang_gpu.prom"   # gpu_metrics.py: each GPU's health

# What the deploy keeps in sglang_tools_dir: the pull's venv, the Hub token's private directory, the pull
# script (and its swap's candidate and previous copies, named after it). An existing tools directory holding
# anything else is someone else's, never adopted.
TOOLS_ENTRIES = ("venv", "secret", "hfpull.py")
# In sglang_tools_dir/secret/: the site's peer key as the pull reads it (the account's alone, 0600, in its private
# secret/ beside the Hub token), passed to the pull by its path, never on a command line or in an environment.
PEER_KEY = "peer-key"
# How many entries of an existing directory the snapshot names (enough to tell the deploy's from another's).
EXISTING_ENTRIES_SHOWN = 64


def tools_entry(name):
    """True when ``name``, an entry of sglang_tools_dir, is one the deploy keeps there."""
    return name in TOOLS_ENTRIES or name.startswith(TOOLS_ENTRIES[-1] + ".")


def failed(name):
    """The name the gate keeps a failed file under (compose.yaml -> compose.yaml.failed)."""
    return name + FAILED_SUFFIX


def text_digest(text):
    """The sha256 hex digest of a rendered file's text, as the deploy and the gate compare files."""
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


# A line ending in a quoted here-document (<<'PYTHON'): a program follows, to that word.
_WORD_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_WORD = _WORD_START | frozenset("0123456789")


def heredoc_end(line):
    """The word a line opens a quoted here-document with (`<<'EOF'`, `<<-'EOF'`, blanks allowed, at the line's
    end), else None: re.search(r"<<-?\\s*'([A-Za-z_][A-Za-z0-9_]*)'\\s*$", line).group(1), without importing re
    (a read's CPU, docs/benchmarks.md; tests/unit/test_read_imports.py holds the two equal)."""
    at = line.find("<<")
    while at >= 0:
        rest = line[at + 2:]
        rest = (rest[1:] if rest.startswith("-") else rest).lstrip()
        word, quote, after = rest[1:].partition("'")
        if rest.startswith("'") and quote and word and word[0] in _WORD_START and all(c in _WORD for c in word) \
                and (not after or after.isspace()):
            return word
        at = line.find("<<", at + 1)
    return None


def judged_text(text):
    """A gate script's command lines (the values rendered into them), without its comments and the bodies of its
    quoted here-documents (the programs it carries, the tool's own code: no change of what a gate judges)."""
    kept, end = [], None
    for line in (text.decode(errors="replace") if isinstance(text, bytes) else text).splitlines():
        if end is not None:
            end = None if line == end else end
            continue
        if line.lstrip().startswith("#") or not line.strip():
            continue
        kept.append(line)
        end = heredoc_end(line)
    return "\n".join(kept) + "\n"


def judged_digest(text):
    """text_digest of judged_text(): a gate script as the gate's decision counts it."""
    return text_digest(judged_text(text))


def stamp_current(stamp, digest):
    """True when the gate's stamp names the config as it is now: the one comparison of stamp and digest."""
    return bool(stamp) and stamp == digest
