"""STAND-IN for a GPU-backed SGLang server. Tests and the sandbox only.

There is no GPU and no model on these machines, so this small standard-library
server takes SGLang's place inside the stand-in image built by the test
harness. It speaks the same OpenAI-compatible wire protocol SGLang does:

- GET  /health                503 while "loading", then 200 (empty body)
- GET  /health_generate       the same answer as /health (SGLang's generates one token first)
- GET  /v1/models             the served model
- GET  /server_info, /get_server_info, /model_info, /get_model_info
                              what the gateway (sglang-router) asks a worker for when it adds it (the
                              server info with the API key in clear, as SGLang's; its start-up log line
                              server_args=... carries the key too)
- POST /v1/chat/completions   content, reasoning_content, tool_calls, usage;
                              streaming as server-sent events ending in [DONE];
                              404 for an unknown model, 400 for a bad request
- GET or POST /flush_cache    "Cache flushed." (one of SGLang's routes that change a running server)
- with --api-key, every route wants the key (401 {"error": "Unauthorized"} without it) except OPTIONS and
  the paths that start with /health or /metrics, exactly as SGLang 0.5.16's key check (_authorized)
- GET  /metrics               with --enable-metrics, SGLang's own metric set in Prometheus' text format (404
                              without it), without the API key as SGLang serves it; kept from the requests
                              the stand-in serves (see Metrics below):
      gauges (labels engine_type, model_name, moe_ep_rank, pp_rank, tp_rank, as SGLang's scheduler):
        sglang:num_running_reqs, sglang:num_queue_reqs (always 0: nothing waits), sglang:gen_throughput,
        sglang:token_usage, sglang:num_used_tokens, sglang:max_total_num_tokens, sglang:cache_hit_rate
      counters (labels engine_type, model_name, as SGLang's tokenizer manager):
        sglang:prompt_tokens_total, sglang:generation_tokens_total, sglang:num_requests_total (these three
        + is_streaming "true"/"false"), sglang:cached_tokens_total (+ cache_source "device"),
        sglang:num_aborted_requests_total
      histograms with SGLang's default buckets (labels engine_type, model_name):
        sglang:time_to_first_token_seconds, sglang:e2e_request_latency_seconds (these two + is_streaming),
        sglang:inter_token_latency_seconds

Multi-node groups (--nnodes N --node-rank i --dist-init-addr HOST:PORT, spelled as SGLang's server_args.py
spells them, --nccl-init-addr its older alias): the stand-in models what a group looks like from outside, over
plain TCP instead of NCCL (see Group and GroupMember below):
- rank 0 listens on HOST:PORT; its HTTP port answers at once, but /health, /health_generate and every other
  route answer 503 until every other rank has joined (and, but for /v1/models and the info routes,
  STANDIN_LOAD_SECONDS more have passed);
- once the group has formed, a rank that drops its connection (its process died or was killed, or it went
  silent for STANDIN_DIST_HEARTBEAT_SECONDS) breaks the group for good, as NCCL does: rank 0 does not exit,
  its completions hang (bounded only by the client's timeout, or NEVER_SECONDS), its /health and
  /health_generate answer 503 after SGLANG_HEALTH_CHECK_TIMEOUT seconds (SGLang's own variable, default 20),
  and a restarted rank is refused (a stale group never serves again; only restarting the whole group heals);
- ranks >= 1 connect to rank 0 (retrying every second) and answer 200 on /health and /health_generate and 404
  on everything else (an empty /metrics with --enable-metrics), whatever the group's state, as SGLang's dummy
  health server does: only rank 0's answer says whether the group works;
- a rank 0 that has not seen every rank join, or a rank >= 1 that has not joined, within
  STANDIN_DIST_WAIT_SECONDS (default 600) exits 1, as torch.distributed's initialisation times out.

On SIGTERM it does what SGLang does: /health answers 503 at once, it keeps
serving (new requests too), and it exits once no request is left. SGLang
checks every 5 s; the stand-in every second, so tests wait less.

It is started exactly like SGLang (`python3 -m sglang.launch_server ...`,
through the shim package next to it) and refuses flags SGLang does not know.
Behaviour is set by environment variables, which compose passes through:

  STANDIN_LOAD_SECONDS       time /health answers 503 at start (default 3)
  STANDIN_TOKENS_PER_SECOND  decode speed per request (default 400)
  STANDIN_CAPACITY_TOKENS_PER_SECOND
                             decode speed of the whole server, shared by the requests in flight, as a GPU's
                             batch is (default 0: none, each request decodes at its own speed)
  STANDIN_KV_POOL_TOKENS     tokens the (modelled) KV cache pool holds: /metrics' sglang:max_total_num_tokens,
                             the denominator of sglang:token_usage and the prefix cache's size (default 65536)
  STANDIN_DIST_WAIT_SECONDS  how long a group waits to form before a rank gives up and exits 1 (default 600)
  STANDIN_DIST_HEARTBEAT_SECONDS
                             silence after which rank 0 counts a joined rank as gone (default 10)
  SGLANG_HEALTH_CHECK_TIMEOUT
                             seconds rank 0 of a broken group holds /health and /health_generate before its 503
                             (SGLang's own variable and default, 20)
  STANDIN_ACCEPT_LENGTH      the average speculative accept length /server_info reports with
                             --speculative-algorithm, once a completion was served (default 2.5)
  STANDIN_FAILURE            one failure mode, to test the gate:
      repetition_loop    clean tool_calls, reasoning_content full of one character
      tool_call_as_text  the tool call left as raw markup in content
      slow               decodes at 10 tok/s per request, far below any baseline
      crash_at_start     exits with an error before listening
      never_ready        /health answers 503 forever
      never_completes    /health answers 200, but a completion never comes back (the connection is held, then
                         dropped after NEVER_SECONDS)
      drip               /health answers 200; every other route answers 200 and then one byte every
                         STANDIN_DRIP_SECONDS (default 2), for NEVER_SECONDS: a per-read timeout never fires
      endless_line       /health answers 200; every other route answers 200 and then streams bytes without a
                         newline as fast as it can, up to ENDLESS_BYTES

Production defaults never reference this file or its image.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import signal
import socket
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAILURES = ("", "repetition_loop", "tool_call_as_text", "slow", "crash_at_start", "never_ready", "never_completes",
            "drip", "endless_line")
NEVER_SECONDS = 600  # "never", for any test's timeout; the wait still ends by itself
ENDLESS_BYTES = 4 << 30   # "gigabytes without a newline"; the stream still ends by itself
REASONING = ("The user wants the current weather for a city. I have a get_weather tool whose parameters are "
             "a city and a unit. Both are stated in the request, so I will call the tool directly and report "
             "the result afterwards.")
ANSWER = ("The printing press, developed by Johannes Gutenberg around 1440, combined movable metal type, "
          "oil-based ink and a screw press. It made books cheaper and faster to produce, spread literacy "
          "across Europe, and carried the ideas of the Renaissance and the Reformation further than "
          "handwritten copies ever could. ")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """SGLang's launch flags that the deploy renders; anything else is refused, as SGLang's parser does."""
    p = argparse.ArgumentParser(prog="sglang.launch_server (stand-in)")
    p.add_argument("--model-path", required=True)
    p.add_argument("--served-model-name")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--dtype")
    p.add_argument("--mamba-full-memory-ratio", type=float)
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--allow-auto-truncate", action="store_true")
    p.add_argument("--disable-custom-all-reduce", action="store_true")
    p.add_argument("--cuda-graph-backend-prefill")
    p.add_argument("--reasoning-parser")
    p.add_argument("--tool-call-parser")
    p.add_argument("--context-length", type=int)
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--log-level")
    p.add_argument("--log-requests", action="store_true")
    p.add_argument("--log-requests-level", type=int)
    p.add_argument("--api-key")
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--config", help="a YAML file of flags (key: value), merged as SGLang's --config does")
    # Recipes' arguments, as SGLang 0.5.16's server_args.py spells them: speculative decoding (the algorithm's
    # choices are SGLang's own) and the tuning flags operators set per model.
    p.add_argument("--speculative-algorithm",
                   choices=("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK"))
    p.add_argument("--speculative-draft-model-path")
    p.add_argument("--speculative-draft-model-quantization")
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--kv-cache-dtype")
    p.add_argument("--quantization")
    p.add_argument("--chunked-prefill-size", type=int)
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--disable-cuda-graph", action="store_true")
    # Multi-node, as SGLang's server_args.py spells them (--nccl-init-addr: its older alias).
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr")
    args = p.parse_args(argv)
    if args.nnodes < 1 or not 0 <= args.node_rank < args.nnodes:
        p.error(f"--node-rank {args.node_rank} must be in 0..{args.nnodes - 1} (--nnodes {args.nnodes})")
    if args.nnodes > 1:
        if not args.dist_init_addr:
            p.error(f"--nnodes {args.nnodes} needs --dist-init-addr HOST:PORT (rank 0's address)")
        args.dist_host, args.dist_port = split_address(args.dist_init_addr, p)
    if args.config:
        # SGLang merges a config file's entries as if they were flags; the stand-in knows the one it is sent.
        with open(args.config, encoding="utf-8") as handle:
            for line in handle:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "api-key":
                    args.api_key = json.loads(value.strip())
                elif sep:
                    raise SystemExit(f"stand-in: --config: unknown key {key.strip()!r}")
    return args


def split_address(text: str, parser: argparse.ArgumentParser) -> tuple[str, int]:
    """HOST:PORT or [IPv6]:PORT, as SGLang reads --dist-init-addr."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        parser.error(f"--dist-init-addr {text!r} must be HOST:PORT")
    return host, int(port)


def example_value(name: str, schema: dict):
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "string")
    if kind == "string":
        return "Paris" if "city" in name else f"example {name}"
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.0
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    return {k: example_value(k, v) for k, v in schema.get("properties", {}).items()}


# /metrics as SGLang exports it (sgl-project/sglang, python/sglang/srt/observability/metrics_collector.py at
# 016d8605: TokenizerMetricsCollector and SchedulerMetricsCollector; labels from managers/tokenizer_manager.py at
# 001067ff and the scheduler's collector set-up): the same names, types, label names, HELP texts and default
# buckets. SGLang runs prometheus_client in multiprocess mode, so there are no *_created samples, and a labelled
# series (a counter, a histogram) appears once it has its first value.
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = TTFT_BUCKETS + (600, 1200, 1800, 2400)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100,
               0.200, 0.400, 0.600, 0.800, 1, 2, 4, 6, 8)
COUNTERS = {   # prometheus_client shows a Counter under its name with _total, in # TYPE too
    "sglang:prompt_tokens_total": "Number of prefill tokens processed.",
    "sglang:generation_tokens_total": "Number of generation tokens processed.",
    "sglang:num_requests_total": "Number of requests processed.",
    "sglang:cached_tokens_total": "Number of cached prompt tokens by source (device/host/storage).",
    "sglang:num_aborted_requests_total": "Number of requests aborted.",
}
HISTOGRAMS = {
    "sglang:time_to_first_token_seconds": ("Histogram of time to first token in seconds.", TTFT_BUCKETS),
    "sglang:e2e_request_latency_seconds": ("Histogram of End-to-end request latency in seconds", E2E_BUCKETS),
    "sglang:inter_token_latency_seconds": ("Histogram of inter-token latency in seconds.", ITL_BUCKETS),
}
WINDOW_SECONDS = 5.0   # sglang:gen_throughput and sglang:cache_hit_rate look this far back
BIN_SECONDS = 0.1      # decoding is counted in bins this wide


def prometheus_number(value: float) -> str:
    """A value as prometheus_client writes it, in Go's float format: 2.0, 0.25, 1.5e+06, +Inf."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(float(value))
    point = text.find(".")
    if value > 0 and point > 6:   # Go turns to an exponent sooner than Python does
        mantissa = (text[0] + "." + text[1:point] + text[point + 1:]).rstrip("0").rstrip(".")
        return f"{mantissa}e+{point - 1:02d}"
    return text


def label_text(labels) -> str:
    """{a="x",b="y"}, names in order as prometheus_client writes them, values escaped."""
    def escape(value) -> str:
        return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    return "{" + ",".join(f'{name}="{escape(value)}"' for name, value in sorted(labels)) + "}"


def prompt_token_count(messages: list) -> int:
    """The prompt's tokens as the stand-in counts them (its usage.prompt_tokens): the words, and 12 for the
    chat template."""
    return sum(len(str(m.get("content", "")).split()) for m in messages) + 12


def prompt_sequence(messages: list):
    """The prompt as the prefix cache sees it: each message's role, then its words."""
    for m in messages:
        yield f"<|{m.get('role')}|>"
        yield from str(m.get("content", "")).split()


class Tracked:
    """One request, from when the stand-in takes it until it ends."""

    __slots__ = ("stream", "prompt", "cached", "generated", "started", "last", "done")

    def __init__(self, stream: bool, prompt: int, cached: int):
        self.stream, self.prompt, self.cached = stream, prompt, cached
        self.generated, self.started, self.last, self.done = 0, time.monotonic(), 0.0, False


class Metrics:
    """What /metrics reports, kept from the requests the stand-in serves. Requests run in threads of their own:
    every read and update holds ``lock``.

    As SGLang's tokenizer manager keeps them: the time to first token is observed when the first token is
    generated (non-streaming) or sent (streaming), the inter-token latency at every later token, and when the
    request ends the end-to-end latency and the counters of prompt, generated and cached tokens and of requests
    (SGLang adds them when a request finishes, not token by token); a request whose client goes away first
    counts in sglang:num_aborted_requests_total only.

    As SGLang's scheduler reports them, computed when /metrics is read:
      sglang:num_running_reqs    the requests being generated (the stand-in's count in flight)
      sglang:num_queue_reqs      0: the stand-in queues nothing
      sglang:gen_throughput      tokens generated in the last WINDOW_SECONDS, over the time within it that
                                 something was decoding (0 when nothing was)
      sglang:num_used_tokens     the KV slots the running requests hold: their prompt and the tokens generated
                                 so far (a cached prefix stays in the cache, as evictable, not counted here)
      sglang:token_usage         num_used_tokens / max_total_num_tokens, at most 1 (the stand-in never queues
                                 for memory)
      sglang:max_total_num_tokens  the KV pool, STANDIN_KV_POOL_TOKENS
      sglang:cache_hit_rate      cached / prompt tokens of the requests taken in the last WINDOW_SECONDS (the
                                 last one's alone when none was). It models SGLang's radix (prefix) cache: a
                                 prompt, as role and words per message, counts as cached as far as it begins
                                 like an earlier prompt did (at most all but one of its tokens, as SGLang always
                                 computes the last); the cache holds as many prefixes as the pool has tokens and
                                 forgets the least recently used first.
    """

    def __init__(self, served: str, pool_tokens: int):
        self.lock = threading.Lock()
        self.pool_tokens = pool_tokens
        base = (("engine_type", "unified"), ("model_name", served))   # unified: no prefill/decode split
        self.tokenizer_labels = base
        # Only the scheduler of attention-TP rank 0 reports, whatever --tp-size: tp_rank is 0.
        self.scheduler_labels = base + (("moe_ep_rank", "0"), ("pp_rank", "0"), ("tp_rank", "0"))
        self.counters: dict[str, dict[tuple, float]] = {name: {} for name in COUNTERS}
        self.histograms: dict[str, dict[tuple, list]] = {name: {} for name in HISTOGRAMS}   # per-bucket counts, sum
        self.used_tokens = 0
        self.decoded: collections.deque = collections.deque()      # [bin, tokens] of the window
        self.taken: collections.deque = collections.deque(maxlen=100_000)   # (time, cached, prompt) of the window
        self.prefixes: collections.OrderedDict = collections.OrderedDict()  # hash of a prompt prefix, oldest first

    def _cached(self, sequence) -> int:
        """How far ``sequence`` begins like a prompt still in the cache; remembers all its prefixes."""
        key, matched, matching = 0, 0, True
        for token in sequence:
            key = hash((key, token))
            if matching and key in self.prefixes:
                self.prefixes.move_to_end(key)
                matched += 1
            else:
                matching = False
                self.prefixes[key] = None
        while len(self.prefixes) > self.pool_tokens:
            self.prefixes.popitem(last=False)
        return matched

    def _prune(self, now: float) -> None:
        oldest = int((now - WINDOW_SECONDS) / BIN_SECONDS)
        while self.decoded and self.decoded[0][0] < oldest:
            self.decoded.popleft()
        while len(self.taken) > 1 and self.taken[0][0] < now - WINDOW_SECONDS:
            self.taken.popleft()

    def _add(self, name: str, labels: tuple, amount: float) -> None:
        series = self.counters[name]
        series[labels] = series.get(labels, 0.0) + amount

    def _observe(self, name: str, labels: tuple, value: float) -> None:
        bounds = HISTOGRAMS[name][1]
        counts = self.histograms[name].setdefault(labels, [0] * (len(bounds) + 1) + [0.0])
        counts[next((i for i, bound in enumerate(bounds) if value <= bound), len(bounds))] += 1
        counts[-1] += value

    def take(self, messages: list, stream: bool) -> Tracked:
        """A request starts: its prompt is prefilled (from the cache as far as it matches)."""
        prompt = prompt_token_count(messages)
        with self.lock:
            cached = min(self._cached(prompt_sequence(messages)), max(prompt - 1, 0))
            tracked = Tracked(stream, prompt, cached)
            self.used_tokens += prompt
            self.taken.append((tracked.started, cached, prompt))
            self._prune(tracked.started)
        return tracked

    def token(self, tracked: Tracked) -> None:
        """One more token generated (non-streaming) or sent (streaming)."""
        now = time.monotonic()
        with self.lock:
            if tracked.generated == 0:
                self._observe("sglang:time_to_first_token_seconds", self._streaming(tracked), now - tracked.started)
            else:
                self._observe("sglang:inter_token_latency_seconds", self.tokenizer_labels, now - tracked.last)
            tracked.generated += 1
            tracked.last = now
            self.used_tokens += 1
            slot = int(now / BIN_SECONDS)
            if self.decoded and self.decoded[-1][0] == slot:
                self.decoded[-1][1] += 1
            else:
                self.decoded.append([slot, 1])
            self._prune(now)

    def _streaming(self, tracked: Tracked) -> tuple:
        return self.tokenizer_labels + (("is_streaming", "true" if tracked.stream else "false"),)

    def finish(self, tracked: Tracked) -> None:
        """The request has its last token: SGLang's counters and end-to-end latency."""
        now = time.monotonic()
        with self.lock:
            if tracked.done:
                return
            tracked.done = True
            self.used_tokens -= tracked.prompt + tracked.generated
            labels = self._streaming(tracked)
            self._add("sglang:prompt_tokens_total", labels, tracked.prompt)
            self._add("sglang:generation_tokens_total", labels, tracked.generated)
            self._add("sglang:num_requests_total", labels, 1)
            if tracked.cached > 0:
                self._add("sglang:cached_tokens_total", self.tokenizer_labels + (("cache_source", "device"),),
                          tracked.cached)
            self._observe("sglang:e2e_request_latency_seconds", labels, now - tracked.started)

    def abort(self, tracked: Tracked) -> None:
        """The request ended before its last token (its client went away): counted as aborted; nothing once it
        has finished."""
        with self.lock:
            if tracked.done:
                return
            tracked.done = True
            self.used_tokens -= tracked.prompt + tracked.generated
            self._add("sglang:num_aborted_requests_total", self.tokenizer_labels, 1)

    def render(self, running: int) -> str:
        """The exposition, in Prometheus' text format 0.0.4 as prometheus_client writes it."""
        now = time.monotonic()
        lines: list[str] = []

        def family(name: str, kind: str, text: str, samples) -> None:
            lines.append(f"# HELP {name} {text}")
            lines.append(f"# TYPE {name} {kind}")
            lines.extend(f"{sample}{label_text(labels)} {prometheus_number(value)}"
                         for sample, labels, value in samples)

        with self.lock:
            self._prune(now)
            busy = len(self.decoded) * BIN_SECONDS
            throughput = sum(tokens for _, tokens in self.decoded) / busy if busy else 0.0
            prompts = sum(prompt for _, _, prompt in self.taken)
            hit_rate = sum(cached for _, cached, _ in self.taken) / prompts if prompts else 0.0
            for name, value, text in (
                    ("sglang:num_running_reqs", running, "The number of running requests."),
                    ("sglang:num_queue_reqs", 0, "The number of requests in the waiting queue."),
                    ("sglang:gen_throughput", throughput, "The generation throughput (token/s)."),
                    ("sglang:token_usage", min(1.0, self.used_tokens / self.pool_tokens), "The token usage."),
                    ("sglang:num_used_tokens", self.used_tokens, "The number of used tokens."),
                    ("sglang:max_total_num_tokens", self.pool_tokens,
                     "Maximum total number of tokens in the KV cache pool."),
                    ("sglang:cache_hit_rate", hit_rate, "The prefix cache hit rate.")):
                family(name, "gauge", text, [(name, self.scheduler_labels, float(value))])
            for name, text in COUNTERS.items():
                if self.counters[name]:
                    family(name, "counter", text, [(name, labels, value)
                                                   for labels, value in sorted(self.counters[name].items())])
            for name, (text, bounds) in HISTOGRAMS.items():
                samples = []
                for labels, counts in sorted(self.histograms[name].items()):
                    total = 0
                    for bound, count in zip(bounds + (math.inf,), counts):
                        total += count
                        samples.append((f"{name}_bucket", labels + (("le", prometheus_number(bound)),), total))
                    samples += [(f"{name}_count", labels, total), (f"{name}_sum", labels, counts[-1])]
                if samples:
                    family(name, "histogram", text, samples)
        return "\n".join(lines) + "\n"


def log(text: str) -> None:
    print(f"stand-in: {text}", file=sys.stderr, flush=True)


def read_line(conn: socket.socket, limit: int = 512) -> str:
    """One line from a socket (at most ``limit`` bytes), without its newline; '' at EOF."""
    data = b""
    while not data.endswith(b"\n") and len(data) < limit:
        chunk = conn.recv(1)
        if not chunk:
            break
        data += chunk
    return data.decode("utf-8", "replace").strip()


class Stalled(Exception):
    """A request that hung on a broken group until NEVER_SECONDS passed (its client gave up long before)."""


class Group:
    """STAND-IN for a multi-node group's rendezvous and links, on rank 0. torch.distributed and NCCL are not here:
    rank 0 listens on --dist-init-addr; each rank >= 1 joins with one line ``{"rank": i, "nnodes": N}``, is
    answered ``ok`` (or ``refused: why``), keeps the connection and sends a line every second. The group forms when
    every rank has joined. A rank that leaves before that frees its place; once formed, a rank that leaves (its
    connection closed, or silent for heartbeat_seconds) breaks the group for good, as a lost NCCL peer does: rank 0
    goes on running, hung, and refuses any rank that comes back (a stale group never serves again)."""

    def __init__(self, args: argparse.Namespace, env: dict):
        self.nnodes = args.nnodes
        self.address = args.dist_init_addr
        self.wait_seconds = float(env.get("STANDIN_DIST_WAIT_SECONDS", 600))
        self.heartbeat_seconds = float(env.get("STANDIN_DIST_HEARTBEAT_SECONDS", 10))
        self.lock = threading.Lock()
        self.joined: dict[int, socket.socket] = {}
        self.formed_at: float | None = None
        self.broken: str | None = None
        family = socket.getaddrinfo(args.dist_host, args.dist_port, type=socket.SOCK_STREAM)[0][0]
        # Rank 0's own address (a host's address, with host networking), not every interface.
        self.listener = socket.create_server((args.dist_host, args.dist_port), family=family)

    def start(self, give_up) -> None:
        threading.Thread(target=self._accept, daemon=True).start()
        threading.Thread(target=self._deadline, args=(give_up,), daemon=True).start()
        log(f"rank 0 of {self.nnodes}: waiting on {self.address} for ranks 1..{self.nnodes - 1}")

    def _deadline(self, give_up) -> None:
        time.sleep(self.wait_seconds)
        with self.lock:
            missing = sorted(set(range(1, self.nnodes)) - set(self.joined)) if self.formed_at is None else []
        if missing:
            give_up(f"rank 0: ranks {missing} did not join on {self.address} within {self.wait_seconds:g} s")

    def _accept(self) -> None:
        while True:
            try:
                conn, peer = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._join, args=(conn, peer), daemon=True).start()

    def _join(self, conn: socket.socket, peer) -> None:
        try:
            conn.settimeout(5)
            hello = json.loads(read_line(conn))
            rank, nnodes = int(hello["rank"]), int(hello["nnodes"])
        except (OSError, ValueError, KeyError, TypeError):
            conn.close()
            return
        with self.lock:
            if nnodes != self.nnodes:
                why = f"--nnodes {nnodes} differs from rank 0's {self.nnodes}"
            elif not 1 <= rank < self.nnodes:
                why = f"rank {rank} is not one of 1..{self.nnodes - 1}"
            elif self.broken:
                why = f"the group is broken ({self.broken}); only restarting every rank heals it"
            elif self.formed_at is not None or rank in self.joined:
                why = f"rank {rank} has already joined"
            else:
                why = ""
                self.joined[rank] = conn
                if len(self.joined) == self.nnodes - 1:
                    self.formed_at = time.monotonic()
                    log(f"rank 0: every rank of {self.nnodes} has joined: the group has formed")
        try:
            conn.sendall(f"refused: {why}\n".encode() if why else b"ok\n")
        except OSError:
            pass
        if why:
            log(f"rank 0: refused rank {rank} from {peer[0]}: {why}")
            conn.close()
            return
        log(f"rank 0: rank {rank} joined from {peer[0]}")
        self._watch(rank, conn)

    def _watch(self, rank: int, conn: socket.socket) -> None:
        conn.settimeout(self.heartbeat_seconds)
        while True:
            try:
                if conn.recv(64) == b"":
                    gone = "closed its connection"
                    break
            except TimeoutError:
                gone = f"sent nothing for {self.heartbeat_seconds:g} s"
                break
            except OSError as error:
                gone = f"lost its connection ({error})"
                break
        conn.close()
        with self.lock:
            if self.joined.get(rank) is conn:
                del self.joined[rank]
            if self.formed_at is None:
                log(f"rank 0: rank {rank} {gone} before the group formed; its place is free again")
                return
            if not self.broken:
                self.broken = f"rank {rank} {gone}"
                log(f"rank 0: the group is broken: {self.broken}; requests hang from now on, as on a lost "
                    f"NCCL peer")


class GroupMember:
    """STAND-IN for a rank >= 1 of a multi-node group: joins rank 0 (see Group), retrying every second for at most
    STANDIN_DIST_WAIT_SECONDS, then sends a line every second. It never joins again once it lost rank 0 (its
    health server goes on answering 200, as SGLang's dummy one does)."""

    def __init__(self, args: argparse.Namespace, env: dict):
        self.rank, self.nnodes, self.address = args.node_rank, args.nnodes, args.dist_init_addr
        self.target = (args.dist_host, args.dist_port)
        self.wait_seconds = float(env.get("STANDIN_DIST_WAIT_SECONDS", 600))
        self.interval = min(1.0, float(env.get("STANDIN_DIST_HEARTBEAT_SECONDS", 10)) / 3)
        self.joined = False

    def start(self, give_up) -> None:
        threading.Thread(target=self._run, args=(give_up,), daemon=True).start()
        log(f"rank {self.rank} of {self.nnodes}: joining rank 0 at {self.address}")

    def _run(self, give_up) -> None:
        deadline, last, said = time.monotonic() + self.wait_seconds, "", ""
        hello = (json.dumps({"rank": self.rank, "nnodes": self.nnodes}) + "\n").encode()
        while time.monotonic() < deadline:
            try:
                conn = socket.create_connection(self.target, timeout=2)
            except OSError as error:
                last = f"cannot reach rank 0 at {self.address}: {error}"
            else:
                try:
                    conn.settimeout(5)
                    conn.sendall(hello)
                    reply = read_line(conn)
                except OSError as error:
                    reply = f"no answer ({error})"
                if reply == "ok":
                    self.joined = True
                    log(f"rank {self.rank}: joined rank 0 at {self.address}")
                    gone = self._heartbeat(conn)
                    log(f"rank {self.rank}: lost rank 0 at {self.address} ({gone}); staying up, as SGLang's rank "
                        f"does, and never joining again")
                    return
                conn.close()
                last = f"rank 0 at {self.address} answered {reply or 'nothing'!r}"
            if last != said:
                log(f"rank {self.rank}: {last}; retrying")
                said = last
            time.sleep(1)
        give_up(f"rank {self.rank}: could not join rank 0 at {self.address} within {self.wait_seconds:g} s: {last}")

    def _heartbeat(self, conn: socket.socket) -> str:
        conn.settimeout(self.interval)
        while True:
            try:
                conn.sendall(b"ping\n")
                if conn.recv(64) == b"":
                    return "it closed the connection"
            except TimeoutError:
                continue
            except OSError as error:
                return str(error)


class StandIn:
    def __init__(self, args: argparse.Namespace, env: dict):
        self.args = args
        self.served = args.served_model_name or args.model_path
        self.failure = env.get("STANDIN_FAILURE", "")
        if self.failure not in FAILURES:
            raise SystemExit(f"stand-in: unknown STANDIN_FAILURE={self.failure!r}; one of {FAILURES[1:]}")
        self.tokens_per_second = 10.0 if self.failure == "slow" else float(env.get("STANDIN_TOKENS_PER_SECOND", 400))
        self.load_seconds = float(env.get("STANDIN_LOAD_SECONDS", 3))
        self.started_at = time.monotonic()
        self.health_check_timeout = float(env.get("SGLANG_HEALTH_CHECK_TIMEOUT", 20))
        self.group: Group | None = None           # rank 0 of a multi-node group
        self.member: GroupMember | None = None    # a rank >= 1
        if args.nnodes > 1 and args.node_rank == 0:
            self.group = Group(args, env)
        elif args.nnodes > 1:
            self.member = GroupMember(args, env)
        self.capacity = float(env.get("STANDIN_CAPACITY_TOKENS_PER_SECOND", 0))
        self.drip_seconds = float(env.get("STANDIN_DRIP_SECONDS", 2))
        pool = int(env.get("STANDIN_KV_POOL_TOKENS", 65536))
        if pool < 1:
            raise SystemExit(f"stand-in: STANDIN_KV_POOL_TOKENS={pool} must be at least 1")
        self.stats = Metrics(self.served, pool)
        # A speculative server's average accept length (STANDIN_ACCEPT_LENGTH, default 2.5), reported as SGLang
        # reports it: in /server_info's internal_states, once a speculative step has run (a completion served).
        self.accept_length = float(env.get("STANDIN_ACCEPT_LENGTH", 2.5))
        self.completions = 0
        self.active = 0
        self.lock = threading.Lock()
        self.terminating = False   # SIGTERM came: /health answers 503, requests are still served

    def token_delay(self) -> float:
        """Seconds per output token now: the request's own speed, or its share of the server's capacity."""
        own = 1.0 / self.tokens_per_second
        return max(own, self.active / self.capacity) if self.capacity else own

    def info(self) -> dict:
        """SGLang's /server_info in brief: the fields a gateway reads, and the API key in clear, as SGLang's
        carries it (sgl-project/sglang#37457): a stand-in shows that failure mode too."""
        return {"model_path": self.args.model_path, "served_model_name": self.served, "tp_size": self.args.tp_size,
                "dp_size": 1, "nnodes": self.args.nnodes, "node_rank": self.args.node_rank,
                "dist_init_addr": self.args.dist_init_addr, "context_length": self.args.context_length,
                "version": "stand-in",
                "speculative_algorithm": self.args.speculative_algorithm,
                "speculative_draft_model_path": self.args.speculative_draft_model_path,
                "internal_states": [{"avg_spec_accept_length": self.accept_length}
                                    if self.args.speculative_algorithm and self.completions else {}],
                "api_key": self.args.api_key}

    def ready(self) -> bool:
        """Loaded: STANDIN_LOAD_SECONDS after start, or, on rank 0 of a group, after every rank joined (the
        weights load once the group has formed)."""
        formed = self.started_at if self.group is None else self.group.formed_at
        return self.failure != "never_ready" and formed is not None and time.monotonic() >= formed + self.load_seconds

    def broken(self) -> str | None:
        """Why the group this rank 0 leads is broken (a rank left once it had formed), or None."""
        return self.group.broken if self.group is not None else None

    def stall(self) -> None:
        """On a broken group a request hangs, as one waiting on a lost NCCL peer: the client's timeout ends it (or
        NEVER_SECONDS, then Stalled)."""
        if self.broken() is None:
            return
        time.sleep(NEVER_SECONDS)
        raise Stalled()

    def health(self) -> bool:
        """/health and /health_generate: False while loading or after SIGTERM; on a broken group False after
        SGLANG_HEALTH_CHECK_TIMEOUT, as SGLang's one-token generation that never comes back."""
        if self.terminating or not self.ready():
            return False
        if self.broken() is not None:
            time.sleep(self.health_check_timeout)
            return False
        return True

    def metrics(self) -> str:
        """/metrics with --enable-metrics: SGLang's metric set in Prometheus' text format (Metrics)."""
        with self.lock:
            running = self.active
        return self.stats.render(running)

    def reasoning(self) -> str:
        if self.failure == "repetition_loop":
            return "Let me think about the weather. " + "!" * 600
        return REASONING

    def completion(self, request: dict):
        """(message, finish_reason, output tokens as text pieces)."""
        tools = request.get("tools") or []
        # The gateway passes a client's max_tokens on as max_completion_tokens.
        max_tokens = int(request.get("max_completion_tokens") or request.get("max_tokens") or 128)
        if tools:
            function = tools[0]["function"]
            params = function.get("parameters", {})
            arguments = {k: example_value(k, v) for k, v in params.get("properties", {}).items()
                         if k in params.get("required", list(params.get("properties", {})))}
            reasoning = self.reasoning()
            if self.failure == "tool_call_as_text":
                content = f"<tool_call>\n{json.dumps({'name': function['name'], 'arguments': arguments})}\n</tool_call>"
                message = {"role": "assistant", "content": content, "reasoning_content": reasoning, "tool_calls": None}
                return message, "stop", reasoning.split(" ") + content.split(" ")
            call = {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function", "index": 0,
                    "function": {"name": function["name"], "arguments": json.dumps(arguments)}}
            message = {"role": "assistant", "content": None, "reasoning_content": reasoning, "tool_calls": [call]}
            return message, "tool_calls", reasoning.split(" ") + [call["function"]["arguments"]]
        words = (ANSWER * (max_tokens // 40 + 1)).split(" ")[:max_tokens]
        finish = "length" if len(words) >= max_tokens else "stop"
        return {"role": "assistant", "content": " ".join(words), "reasoning_content": None,
                "tool_calls": None}, finish, words


def make_handler(standin: StandIn):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # one line per request, like SGLang's access log
            sys.stderr.write("stand-in %s\n" % (fmt % args))

        def _json(self, code: int, body) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, code: int, message: str, kind: str) -> None:
            self._json(code, {"object": "error", "message": message, "type": kind, "param": None, "code": code})

        def _authorized(self) -> bool:
            """With --api-key, the key check of SGLang 0.5.16 (sglang/srt/utils/auth.py, decide_request_auth, with
            an api key and no admin key): every route wants `Authorization: Bearer <key>` (401 otherwise), the
            routes that change a running server (/flush_cache, /update_weights_from_disk, /load_lora_adapter, ...)
            included, except an OPTIONS request and any path that starts with /health or /metrics (a prober and a
            Prometheus scraper have no key), which pass without it."""
            key = standin.args.api_key
            path = urllib.parse.urlsplit(self.path).path
            if not key or self.command == "OPTIONS" or path.startswith(("/health", "/metrics")) or \
                    self.headers.get("Authorization") == f"Bearer {key}":
                return True
            self._json(401, {"error": "Unauthorized"})   # SGLang's own answer
            return False

        def _misbehaves(self) -> bool:
            """drip and endless_line: a 200 whose body never ends (one byte at a time, or without a newline)."""
            if standin.failure not in ("drip", "endless_line") or self.path in ("/health", "/health_generate"):
                return False
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            started, sent = time.monotonic(), 0
            try:
                while time.monotonic() - started < NEVER_SECONDS and sent < ENDLESS_BYTES:
                    if standin.failure == "drip":
                        self.wfile.write(b"d")
                        self.wfile.flush()
                        time.sleep(standin.drip_seconds)
                        sent += 1
                    else:
                        self.wfile.write(b"x" * 65536)
                        sent += 65536
            except OSError:   # the client gave up, as it should
                pass
            return True

        def _forming(self) -> bool:
            """Rank 0 of a group that has not formed: only /health and /health_generate answer (503), as SGLang's
            API only comes up once the model loaded across every rank."""
            path = urllib.parse.urlsplit(self.path).path
            if standin.group is None or standin.group.formed_at is not None or path in ("/health", "/health_generate"):
                return False
            self._error(503, "waiting for every rank of the group to join", "ServiceUnavailable")
            return True

        def do_GET(self):
            if not self._authorized() or self._forming():
                return
            if self.path.split("?")[0] == "/flush_cache":
                self._flush_cache()
                return
            if self._misbehaves():
                return
            if self.path == "/metrics" and standin.args.enable_metrics:   # no API key wanted, as SGLang's
                data = standin.metrics().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            elif self.path in ("/health", "/health_generate"):
                if standin.health():
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    self._error(503, "the model is still loading", "ServiceUnavailable")
            elif self.path in ("/server_info", "/get_server_info"):
                self._json(200, standin.info())
            elif self.path in ("/model_info", "/get_model_info"):
                self._json(200, {"model_path": standin.args.model_path, "tokenizer_path": standin.args.model_path,
                                 "is_generation": True, "served_model_name": standin.served})
            elif self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [
                    {"id": standin.served, "object": "model", "created": int(time.time()),
                     "owned_by": "sglang", "root": standin.args.model_path,
                     "max_model_len": standin.args.context_length}]})
            else:
                self._error(404, f"no route {self.path}", "NotFoundError")

        def do_POST(self):
            if not self._authorized() or self._forming():
                return
            if self._misbehaves():
                return
            if self.path.split("?")[0] == "/flush_cache":
                self._flush_cache()
                return
            if self.path != "/v1/chat/completions":
                self._error(404, f"no route {self.path}", "NotFoundError")
                return
            if not standin.ready():
                self._error(503, "the model is still loading", "ServiceUnavailable")
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
                request = json.loads(self.rfile.read(length) or b"")
                messages = request["messages"]
                assert isinstance(messages, list) and messages
            except (ValueError, KeyError, AssertionError, TypeError):
                self._error(400, "the body must be JSON with a non-empty messages list", "BadRequestError")
                return
            if request.get("model") not in (standin.served, None):
                self._error(404, f"The model `{request.get('model')}` does not exist.", "NotFoundError")
                return
            if standin.failure == "never_completes":
                for _ in range(NEVER_SECONDS):
                    time.sleep(1)
                self.close_connection = True
                return
            with standin.lock:
                standin.active += 1
            tracked = None
            try:
                standin.stall()   # a broken group: the request hangs before its first token
                tracked = standin.stats.take(messages, bool(request.get("stream")))
                self._complete(request, tracked)
            except Stalled:
                self.close_connection = True
            finally:
                if tracked is not None:
                    standin.stats.abort(tracked)   # only if it did not finish: its client went away
                with standin.lock:
                    standin.active -= 1

        def _flush_cache(self):
            """SGLang's /flush_cache (GET or POST): one of the routes that change a running server, behind the key
            as the real one; the stand-in has no cache to flush, so it only answers as SGLang does."""
            data = b"Cache flushed.\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _complete(self, request, tracked: Tracked):
            standin.completions += 1
            message, finish, pieces = standin.completion(request)
            prompt_tokens = tracked.prompt
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(pieces),
                     "total_tokens": prompt_tokens + len(pieces)}
            rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
            if request.get("stream"):
                self._stream(request, rid, created, message, finish, pieces, usage, tracked)
                return
            for _ in pieces:
                time.sleep(standin.token_delay())
                standin.stall()   # the group broke while this request was being generated
                standin.stats.token(tracked)
            standin.stats.finish(tracked)
            self._json(200, {"id": rid, "object": "chat.completion", "created": created, "model": standin.served,
                             "choices": [{"index": 0, "message": message, "finish_reason": finish,
                                          "logprobs": None}], "usage": usage})

        def _stream(self, request, rid, created, message, finish, pieces, usage, tracked: Tracked):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()

            def send(choices, extra=None):
                chunk = {"id": rid, "object": "chat.completion.chunk", "created": created,
                         "model": standin.served, "choices": choices, **(extra or {})}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()

            send([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
            reasoning = (message.get("reasoning_content") or "").split(" ") if message.get("reasoning_content") else []
            for i, piece in enumerate(pieces):
                time.sleep(standin.token_delay())
                standin.stall()
                if i < len(reasoning):
                    delta = {"reasoning_content": piece + " "}
                elif message.get("tool_calls"):
                    call = message["tool_calls"][0]
                    delta = {"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                                             "function": {"name": call["function"]["name"], "arguments": piece}}]}
                else:
                    delta = {"content": piece + ("" if i == len(pieces) - 1 else " ")}
                send([{"index": 0, "delta": delta, "finish_reason": None}])
                standin.stats.token(tracked)   # sent
            standin.stats.finish(tracked)
            send([{"index": 0, "delta": {}, "finish_reason": finish}])
            if (request.get("stream_options") or {}).get("include_usage"):
                send([], {"usage": usage})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    return Handler


def make_member_handler(standin: StandIn):
    """A rank >= 1 of a group: SGLang's dummy health server (launch_dummy_health_check_server): 200 on /health and
    /health_generate whatever the group's state, its (here empty) /metrics with --enable-metrics, and FastAPI's 404
    or 405 for anything else. No key check: it has none in SGLang either."""
    paths = ("/health", "/health_generate") + (("/metrics",) if standin.args.enable_metrics else ())

    class MemberHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            sys.stderr.write("stand-in %s\n" % (fmt % args))

        def _answer(self, code: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            path = urllib.parse.urlsplit(self.path).path
            if path in paths:
                self._answer(200, b"", "text/plain")
            else:
                self._answer(404, b'{"detail":"Not Found"}')

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0") or 0)
            self.rfile.read(length)
            path = urllib.parse.urlsplit(self.path).path
            if path in paths:
                self._answer(405, b'{"detail":"Method Not Allowed"}')
            else:
                self._answer(404, b'{"detail":"Not Found"}')

    return MemberHandler


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128   # the default 5 resets connections of a burst, which SGLang's server accepts


def model_problem(model_path: str, env: dict) -> str | None:
    """Why the weights cannot be loaded, as SGLang would fail: a local snapshot must be whole, and with
    HF_HUB_OFFLINE=1 a repo id cannot be resolved against the Hub."""
    if model_path.startswith("/"):
        if not os.path.isdir(model_path):
            return f"{model_path} does not exist"
        if not os.path.isfile(os.path.join(model_path, "config.json")):
            return f"{model_path} has no config.json"
        for root, _, files in os.walk(model_path):
            for name in files:
                if not os.path.exists(os.path.join(root, name)):
                    return f"{os.path.join(root, name)} points at a missing blob (a partial snapshot)"
        return None
    if env.get("HF_HUB_OFFLINE") == "1" and model_path != "stand-in":
        return f"{model_path} is not a local path and HF_HUB_OFFLINE=1 forbids asking the Hub"
    return None


def main(argv: list[str] | None = None, env: dict | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ) if env is None else env
    try:
        standin = StandIn(args, env)
    except OSError as error:   # rank 0 cannot listen on --dist-init-addr (not its address, or the port is taken)
        log(f"rank 0 cannot listen on --dist-init-addr {args.dist_init_addr}: {error}")
        return 1
    problem = model_problem(args.model_path, env)
    if problem:
        print(f"stand-in: cannot load the model: {problem}", file=sys.stderr, flush=True)
        return 1
    if args.speculative_draft_model_path:
        problem = model_problem(args.speculative_draft_model_path, env)
        if problem:
            print(f"stand-in: cannot load the draft model: {problem}", file=sys.stderr, flush=True)
            return 1
    if standin.failure == "crash_at_start":
        print("stand-in: RuntimeError: simulated crash while loading the model (STANDIN_FAILURE=crash_at_start)",
              file=sys.stderr, flush=True)
        return 1
    # SGLang logs its server arguments at start, the API key in clear (sgl-project/sglang#37457); so does the
    # stand-in, so that a test can prove that the project redacts it from everything it prints or stores.
    shown = ", ".join(f"{name}={value!r}" for name, value in sorted(vars(args).items()) if name != "config")
    print(f"[stand-in] server_args=ServerArgs({shown})", file=sys.stderr, flush=True)
    server = Server((args.host, args.port), make_member_handler(standin) if standin.member else make_handler(standin))
    signal.signal(signal.SIGTERM, lambda *_: drain_then_stop(standin, server))
    gave_up: list[str] = []

    def give_up(why: str) -> None:   # the group did not form in time: exit 1, as torch.distributed's init does
        log(why)
        gave_up.append(why)
        server.shutdown()

    for part in (standin.group, standin.member):
        if part is not None:
            part.start(give_up)
    role = f"rank {args.node_rank} of {args.nnodes}, " if args.nnodes > 1 else ""
    print(f"stand-in: serving {standin.served} on {args.host}:{args.port} ({role}tp {args.tp_size}); "
          f"this is not SGLang", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    if gave_up:
        return 1
    for _ in range(NEVER_SECONDS * 10):   # stopped by SIGTERM: the requests still in their threads finish first
        with standin.lock:
            if standin.active == 0:
                break
        time.sleep(0.1)
    return 0


def drain_then_stop(standin: StandIn, server: ThreadingHTTPServer, poll: float = 1.0) -> None:
    """SIGTERM, as SGLang: /health 503 at once, keep serving, stop once no request is left (checked every
    ``poll`` s; no limit of its own: Docker's stop grace period is the limit)."""
    standin.terminating = True
    print("stand-in: SIGTERM: /health answers 503; exiting once no request is left", file=sys.stderr, flush=True)

    def wait():
        while True:
            time.sleep(poll)
            with standin.lock:
                idle = standin.active == 0
            if idle:
                server.shutdown()
                return

    threading.Thread(target=wait, daemon=True).start()


def serve_in_thread(argv: list[str], env: dict) -> ThreadingHTTPServer:
    """For unit tests: the same server on loopback, in this process."""
    args = parse_args(argv)
    server = Server((args.host, args.port), make_handler(StandIn(args, env)))
    # A short poll: shutdown() waits for it, once per test.
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


if __name__ == "__main__":
    sys.exit(main())
