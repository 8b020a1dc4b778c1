"""The SGLang stand-in's /metrics (tests/support/standin/standin_server.py): SGLang's metric set, kept from the requests
the stand-in actually serves, read back through a strict parser of Prometheus' text format.

The stand-in runs in this process on 127.0.0.1; all traffic is loopback. Every wait is bounded in time and in
count. Nothing asserts on speed beyond what the stand-in's own sleeps guarantee.
"""

from __future__ import annotations

import http.client
import json
import math
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support" / "standin"))
import standin_server

MODEL = "qwen-test"
KEY = "sk-standin-metrics-5e1f"
RATE = 200            # tokens per second per request
POOL = 1000           # STANDIN_KV_POOL_TOKENS
SCHEDULER = {"engine_type", "model_name", "moe_ep_rank", "pp_rank", "tp_rank"}
TOKENIZER = {"engine_type", "model_name"}
STREAMING = TOKENIZER | {"is_streaming"}
GAUGES = ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:gen_throughput", "sglang:token_usage",
          "sglang:num_used_tokens", "sglang:max_total_num_tokens", "sglang:cache_hit_rate")
# Each family's type and label names (le aside), as SGLang's own /metrics shows them.
FAMILIES = {**{name: ("gauge", SCHEDULER) for name in GAUGES},
            "sglang:prompt_tokens_total": ("counter", STREAMING),
            "sglang:generation_tokens_total": ("counter", STREAMING),
            "sglang:num_requests_total": ("counter", STREAMING),
            "sglang:cached_tokens_total": ("counter", TOKENIZER | {"cache_source"}),
            "sglang:num_aborted_requests_total": ("counter", TOKENIZER),
            "sglang:time_to_first_token_seconds": ("histogram", STREAMING),
            "sglang:e2e_request_latency_seconds": ("histogram", STREAMING),
            "sglang:inter_token_latency_seconds": ("histogram", TOKENIZER)}
# SGLang's default buckets, as prometheus_client writes their bounds.
TTFT_LE = ["0.1", "0.2", "0.4", "0.6", "0.8", "1.0", "2.0", "4.0", "6.0", "8.0", "10.0", "20.0", "40.0", "60.0",
           "80.0", "100.0", "200.0", "400.0", "+Inf"]
E2E_LE = TTFT_LE[:-1] + ["600.0", "1200.0", "1800.0", "2400.0", "+Inf"]
ITL_LE = ["0.002", "0.004", "0.006", "0.008", "0.01", "0.015", "0.02", "0.025", "0.03", "0.035", "0.04", "0.06",
          "0.08", "0.1", "0.2", "0.4", "0.6", "0.8", "1.0", "2.0", "4.0", "6.0", "8.0", "+Inf"]


# --- a strict parser of Prometheus' text exposition format 0.0.4 ---

class Malformed(Exception):
    pass


def need(condition, why: str) -> None:
    if not condition:
        raise Malformed(why)


NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
SAMPLE = re.compile(rf"^({NAME})(?:\{{(.*)\}})? (\S+)(?: (-?[0-9]+))?$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
NUMBER = re.compile(r"^(?:[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]Inf|NaN)$")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


def parse_labels(text: str, line: str) -> dict:
    labels, at = {}, 0
    while at < len(text):
        found = LABEL.match(text, at)
        need(found, f"bad label at {text[at:]!r} in {line!r}")
        name = found.group(1)
        need(name not in labels, f"label {name} twice in {line!r}")
        labels[name] = re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), found.group(2))
        at = found.end()
        if at < len(text):
            need(text[at] == ",", f"labels not separated by commas in {line!r}")
            at += 1
    return labels


def number(text: str, line: str) -> float:
    need(NUMBER.match(text), f"bad value {text!r} in {line!r}")
    return float(text)


def parse(text: str) -> dict:
    """{family: {"type", "help", "samples": [(name, labels, value)]}}; raises Malformed at the first thing that
    is not the text format: a line neither HELP, TYPE nor a sample, a family without HELP or TYPE or declared
    twice or split up, a sample outside its family, a series twice, a histogram whose buckets are not
    cumulative, do not end with le="+Inf" or disagree with its _count."""
    need(text.endswith("\n"), "the exposition does not end with a newline")
    families: dict = {}
    current = None
    seen = set()
    for line in text[:-1].split("\n"):
        need(line, "an empty line")
        if line.startswith("#"):
            found = re.match(rf"^# (HELP|TYPE) ({NAME}) (.*)$", line) or re.match(rf"^# (HELP) ({NAME})()$", line)
            need(found, f"a comment that is neither HELP nor TYPE: {line!r}")
            kind, name, rest = found.groups()
            if name != current:
                need(name not in families, f"family {name} declared again after others")
                families[name] = {"type": None, "help": None, "samples": []}
                current = name
            family = families[name]
            need(not family["samples"], f"{kind} of {name} after its samples")
            key = kind.lower()
            need(family[key] is None, f"{kind} of {name} twice")
            if kind == "TYPE":
                need(rest in TYPES, f"unknown type {rest!r} of {name}")
            family[key] = rest
            continue
        found = SAMPLE.match(line)
        need(found, f"not a sample line: {line!r}")
        name, labels_text, value_text, _ = found.groups()
        labels = parse_labels(labels_text or "", line)
        value = number(value_text, line)
        need(current is not None, f"a sample before any family: {line!r}")
        family = families[current]
        need(family["help"] is not None and family["type"] is not None, f"family {current} lacks HELP or TYPE")
        allowed = ({f"{current}_bucket", f"{current}_count", f"{current}_sum"} if family["type"] == "histogram"
                   else {current})
        need(name in allowed, f"sample {name} outside its family {current}")
        need("le" not in labels or name.endswith("_bucket"), f"le on a sample that is no bucket: {line!r}")
        series = (name, tuple(sorted(labels.items())))
        need(series not in seen, f"series twice: {line!r}")
        seen.add(series)
        family["samples"].append((name, labels, value))
    for name, family in families.items():
        need(family["help"] is not None and family["type"] is not None, f"family {name} lacks HELP or TYPE")
        if family["type"] == "histogram":
            check_histogram(name, family["samples"])
    return families


def check_histogram(name: str, samples: list) -> None:
    groups: dict = {}
    for sample, labels, value in samples:
        rest = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        group = groups.setdefault(rest, {"buckets": [], "count": None, "sum": None})
        if sample.endswith("_bucket"):
            need("le" in labels, f"a bucket of {name} without le")
            group["buckets"].append((number(labels["le"], labels["le"]), value))
        else:
            group[sample.rsplit("_", 1)[1]] = value
    for rest, group in groups.items():
        buckets = group["buckets"]
        need(buckets, f"{name}{dict(rest)} has no buckets")
        need(group["count"] is not None and group["sum"] is not None, f"{name}{dict(rest)} lacks _count or _sum")
        bounds = [bound for bound, _ in buckets]
        need(bounds == sorted(bounds) and len(set(bounds)) == len(bounds), f"{name} buckets out of order")
        need(bounds[-1] == math.inf, f"{name}{dict(rest)} does not end with le=\"+Inf\"")
        counts = [count for _, count in buckets]
        need(all(a <= b for a, b in zip(counts, counts[1:])), f"{name}{dict(rest)} buckets are not cumulative")
        need(counts[-1] == group["count"], f"{name}{dict(rest)}: +Inf bucket {counts[-1]} != _count")


def value(families: dict, sample: str, **labels) -> float:
    """The sum of the samples named ``sample`` whose labels include ``labels`` (0 when there is none)."""
    family = families.get(re.sub(r"_(bucket|count|sum)$", "", sample)) or families.get(sample) or {"samples": []}
    return sum(v for name, got, v in family["samples"]
               if name == sample and all(got.get(k) == want for k, want in labels.items()))


# --- the stand-in ---

@pytest.fixture
def standin():
    servers = []

    def start(*flags, pool=POOL, rate=RATE):
        server = standin_server.serve_in_thread(
            ["--model-path", "org/model", "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", "0",
             "--enable-metrics", *flags],
            {"STANDIN_LOAD_SECONDS": "0", "STANDIN_TOKENS_PER_SECOND": str(rate), "STANDIN_KV_POOL_TOKENS": str(pool)})
        servers.append(server)
        return server.server_address[1]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def get(port: int, path: str, key: str | None = None):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                     headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.headers.get("Content-Type"), reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, None, ""


def scrape(port: int) -> dict:
    status, kind, text = get(port, "/metrics")
    assert status == 200 and kind.startswith("text/plain; version=0.0.4")
    return parse(text)


def body(words: str, tokens: int, **extra) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": words}], "max_tokens": tokens, **extra}


def complete(port: int, request: dict, key: str | None = None) -> dict:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    post = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(request).encode(),
                                  headers=headers)
    with urllib.request.urlopen(post, timeout=30) as reply:
        return json.loads(reply.read())


def stream(port: int, request: dict, during=None) -> dict:
    """A streaming completion; ``during(chunks_read)`` runs once, after the third token's chunk. Returns usage."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", "/v1/chat/completions", json.dumps({**request, "stream": True,
                                                                      "stream_options": {"include_usage": True}}),
                           {"Content-Type": "application/json"})
        reply = connection.getresponse()
        assert reply.status == 200
        usage, tokens = None, 0
        for _ in range(10_000):
            line = reply.readline().decode()
            if not line or line.strip() == "data: [DONE]":
                break
            if not line.startswith("data: "):
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                tokens += 1
                if tokens == 3 and during:
                    during(tokens)
        return usage
    finally:
        connection.close()


def check_labels(families: dict) -> None:
    """Every family is one of SGLang's, with its type and exactly its label names; the model is ours."""
    for name, family in families.items():
        assert name in FAMILIES, f"{name} is not one of the families the stand-in exports"
        kind, names = FAMILIES[name]
        assert family["type"] == kind and family["help"], name
        for sample, labels, _ in family["samples"]:
            assert set(labels) - {"le"} == names, (sample, labels)
            assert labels["model_name"] == MODEL and labels["engine_type"] == "unified"
            if "is_streaming" in labels:
                assert labels["is_streaming"] in ("true", "false")
        if kind == "counter":
            assert name.endswith("_total")   # as prometheus_client shows a Counter, in # TYPE too


# --- the parser itself ---

GOOD = """# HELP h A histogram.
# TYPE h histogram
h_bucket{le="0.5",m="a"} 1.0
h_bucket{le="+Inf",m="a"} 2.0
h_count{m="a"} 2.0
h_sum{m="a"} 1.25
# HELP c_total A counter.
# TYPE c_total counter
c_total{m="a \\"quoted\\""} 3.0
"""


@pytest.mark.parametrize("broken", [
    GOOD.replace('h_bucket{le="0.5",m="a"} 1.0', 'h_bucket{le="0.5",m="a"} 3.0'),   # not cumulative
    GOOD.replace('h_count{m="a"} 2.0', 'h_count{m="a"} 5.0'),                      # +Inf != _count
    GOOD.replace('le="+Inf"', 'le="9"'),                                           # no +Inf
    GOOD.replace("# TYPE c_total counter\n", ""),                                  # no TYPE
    GOOD.replace("# HELP h A histogram.\n", ""),                                   # no HELP
    GOOD.replace("c_total{", "c{"),                                                # outside its family
    GOOD.replace(" 3.0", " three"),                                                # no number
    GOOD.replace('m="a \\"', 'm="a "'),                                            # bad quoting
    GOOD + "\n",                                                                   # an empty line
    GOOD + "# HELP h again\n",                                                     # a family split up
    GOOD + 'c_total{m="a \\"quoted\\""} 4.0\n',                                    # a series twice
    GOOD.rstrip("\n"),                                                             # no final newline
])
def test_the_parser_refuses_what_is_not_the_text_format(broken):
    assert parse(GOOD)["c_total"]["samples"] == [("c_total", {"m": 'a "quoted"'}, 3.0)]
    with pytest.raises(Malformed):
        parse(broken)


# --- the stand-in's /metrics ---

def test_idle_metrics_need_no_key_and_show_the_gauges_only(standin):
    port = standin("--api-key", KEY)
    assert get(port, "/v1/models")[0] == 401             # the key guards the API...
    assert get(port, "/v1/models", KEY)[0] == 200
    families = scrape(port)                               # ...but not /metrics, as SGLang's
    check_labels(families)
    assert sorted(families) == sorted(GAUGES)             # counters and histograms appear with their first value
    assert {name: value(families, name) for name in GAUGES} == {
        **{name: 0.0 for name in GAUGES}, "sglang:max_total_num_tokens": float(POOL)}


def test_counters_and_histograms_move_by_exactly_what_was_served(standin):
    port = standin()
    started = time.monotonic()
    before = scrape(port)
    first = complete(port, body("alpha beta gamma", 6))["usage"]
    again = complete(port, body("alpha beta gamma", 4))["usage"]     # the same prompt: its prefix is cached
    seen = {}

    def mid_stream(tokens):
        seen["at"], seen["families"] = tokens, scrape(port)

    streamed = stream(port, body("delta epsilon", 8), during=mid_stream)
    finished = time.monotonic()
    after = scrape(port)
    check_labels(after)
    check_labels(seen["families"])

    def moved(sample, **labels):
        return value(after, sample, **labels) - value(before, sample, **labels)

    plain, streaming = {"is_streaming": "false"}, {"is_streaming": "true"}
    assert (first["completion_tokens"], again["completion_tokens"], streamed["completion_tokens"]) == (6, 4, 8)
    assert moved("sglang:num_requests_total", **plain) == 2 and moved("sglang:num_requests_total", **streaming) == 1
    assert moved("sglang:prompt_tokens_total", **plain) == first["prompt_tokens"] + again["prompt_tokens"]
    assert moved("sglang:prompt_tokens_total", **streaming) == streamed["prompt_tokens"]
    assert moved("sglang:generation_tokens_total", **plain) == 10
    assert moved("sglang:generation_tokens_total", **streaming) == 8
    for histogram in ("sglang:time_to_first_token_seconds", "sglang:e2e_request_latency_seconds"):
        assert moved(f"{histogram}_count", **plain) == 2 and moved(f"{histogram}_count", **streaming) == 1
        assert moved(f"{histogram}_bucket", le="+Inf", **plain) == 2
    assert moved("sglang:inter_token_latency_seconds_count") == (6 - 1) + (4 - 1) + (8 - 1)   # every later token
    assert moved("sglang:num_aborted_requests_total") == 0
    # The stand-in sleeps 1/RATE s before each token: lower bounds that hold however slow the machine is.
    assert moved("sglang:e2e_request_latency_seconds_sum") >= (6 + 4 + 8) / RATE * 0.99
    assert moved("sglang:inter_token_latency_seconds_sum") >= (5 + 3 + 7) / RATE * 0.99
    assert moved("sglang:time_to_first_token_seconds_sum") < moved("sglang:e2e_request_latency_seconds_sum")
    # SGLang's bucket bounds.
    for histogram, bounds in (("sglang:time_to_first_token_seconds", TTFT_LE),
                              ("sglang:e2e_request_latency_seconds", E2E_LE),
                              ("sglang:inter_token_latency_seconds", ITL_LE)):
        assert [labels["le"] for sample, labels, _ in after[histogram]["samples"]
                if sample.endswith("_bucket") and labels.get("is_streaming", "true") == "true"] == bounds
    # The prefix cache: the second prompt repeats the first (its role and three words); the third shares the
    # role only; the first found the cache empty.
    assert moved("sglang:cached_tokens_total", cache_source="device") == 4 + 1
    prompts = first["prompt_tokens"] + again["prompt_tokens"] + streamed["prompt_tokens"]
    if finished - started < standin_server.WINDOW_SECONDS - 1:   # all three are in the window
        assert value(after, "sglang:cache_hit_rate") == pytest.approx(5 / prompts)
        assert value(after, "sglang:gen_throughput") > 0
    # Mid-stream: one request running, holding its prompt and the tokens generated so far.
    during = seen["families"]
    used = value(during, "sglang:num_used_tokens")
    assert value(during, "sglang:num_running_reqs") == 1
    assert streamed["prompt_tokens"] + seen["at"] - 1 <= used <= streamed["prompt_tokens"] + 8
    assert value(during, "sglang:token_usage") == pytest.approx(used / POOL)
    # Idle again: nothing running, nothing held.
    assert [value(after, name) for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs",
                                            "sglang:num_used_tokens", "sglang:token_usage")] == [0, 0, 0, 0]


def test_concurrent_requests_are_all_counted(standin):
    port = standin(rate=400)
    replies, threads = [], []
    for i in range(8):
        thread = threading.Thread(target=lambda i=i: replies.append(complete(port, body(f"word{i} " * 3, 5 + i))))
        threads.append(thread)
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(replies) == 8
    families = scrape(port)
    assert value(families, "sglang:num_requests_total") == 8
    assert value(families, "sglang:generation_tokens_total") == sum(r["usage"]["completion_tokens"] for r in replies)
    assert value(families, "sglang:prompt_tokens_total") == sum(r["usage"]["prompt_tokens"] for r in replies)
    assert value(families, "sglang:inter_token_latency_seconds_count") == sum(4 + i for i in range(8))
    assert value(families, "sglang:num_used_tokens") == 0


def test_a_stream_cut_short_counts_as_aborted(standin):
    port = standin(rate=100)
    request = json.dumps(body("zeta eta", 400, stream=True)).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(request)).encode() + b"\r\n\r\n" + request)
        received = b""
        for _ in range(1000):                    # until the first token's chunk
            received += conn.recv(4096)
            if b'"content": "The' in received:
                break
        assert b'"content": "The' in received
    families = {}
    for _ in range(100):                         # the stand-in notices at its next write; 4 s of tokens at most
        families = scrape(port)
        if value(families, "sglang:num_running_reqs") == 0:
            break
        time.sleep(0.1)
    check_labels(families)
    assert value(families, "sglang:num_running_reqs") == 0
    assert value(families, "sglang:num_aborted_requests_total") == 1
    assert value(families, "sglang:num_requests_total") == 0
    assert value(families, "sglang:time_to_first_token_seconds_count", is_streaming="true") == 1   # it was sent
    assert value(families, "sglang:e2e_request_latency_seconds_count") == 0
    assert value(families, "sglang:num_used_tokens") == 0


def call(port: int, method: str, path: str, key: str | None = None) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method, data=b"" if method == "POST"
                                     else None, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def test_the_key_guards_exactly_the_routes_sglangs_key_check_guards(standin):
    """SGLang 0.5.16 with --api-key (sglang/srt/utils/auth.py): every route wants the key, the ones that change a
    running server included; OPTIONS and any path starting with /health or /metrics pass without it."""
    key = "k3y-0123456789abcdef"
    port = standin("--api-key", key)
    for method, path in (("POST", "/flush_cache"), ("GET", "/flush_cache"), ("GET", "/v1/models"),
                         ("GET", "/get_server_info"), ("GET", "/server_info"), ("GET", "/get_model_info"),
                         ("POST", "/v1/chat/completions"), ("POST", "/update_weights_from_disk"),
                         ("GET", "/no-such-route")):
        assert call(port, method, path) == 401, (method, path)
        assert call(port, method, path, "wrong-key-0123456789") == 401, (method, path)
    assert call(port, "POST", "/flush_cache", key) == 200 and call(port, "GET", "/flush_cache?timeout=1", key) == 200
    assert call(port, "GET", "/get_server_info", key) == 200
    assert call(port, "POST", "/update_weights_from_disk", key) == 404   # a route the stand-in does not serve
    assert call(port, "GET", "/health") == 200 and call(port, "GET", "/metrics") == 200
    assert call(port, "GET", "/health_generate") == 200   # passes the key check, as /health does
    assert call(port, "OPTIONS", "/flush_cache") == 501   # passes the key check; http.server has no OPTIONS
