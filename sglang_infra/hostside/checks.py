"""The runbook's validation checks, as one standard-library Python program.

Bundled into /opt/sglang/test_tool_calling.sh and benchmark.sh (and used by
gate.py), so the host needs nothing but python3. Both checks print a JSON summary on stdout;
on failure they also print a one-line reason on stderr and exit non-zero.

    tool-calling  one request that must produce a structured tool call, with
                  clean content and reasoning that is not a repetition loop
    benchmark     N concurrent streaming requests: aggregate output tok/s,
                  TTFT p50/p99, errors; compared with the model's baseline
    ready         wait until /health stops answering 503, then for a real
                  completion, with progress on stderr
    models        /health, then the model ids /v1/models lists (scripts/check.sh)

Every read from a server is bounded in bytes and in time (bounded.py), and
each check as a whole ends within its --timeout and a margin (watchdog). The
key comes from the server's config file (--api-key-file, apikey.py), goes
only to a port the project's own container publishes (asked for every
request; --gateway SLUG: that gateway's container), never along a redirect
(bounded.open_url), and is redacted from what the checks print or store.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
import urllib.error
import urllib.request

from . import stack
from .apikey import clip, redact, use_api_key_file
from .bounded import MAX_ANSWER_BYTES, Unbounded, bounded_lines, error_body, left, open_url, read_bounded

# ---------------------------------------------------------------- repetition loops
# The failure the runbook saw: reasoning_content full of one repeated
# character or phrase, next to a structurally clean tool call. Thresholds:
MAX_CHAR_RUN = 20         # one non-space character this many times in a row is a loop ("!!!!!!!!...")
MAX_PHRASE_REPEATS = 6    # any run of words repeated back to back this many times is a loop
SENTENCE_WORDS = 8        # a run of at least this many words (a sentence) ...
MAX_SENTENCE_REPEATS = 3  # ... is a loop already at this many repeats, however long it is
MAX_PATTERN_REPEATS = 8   # a 2-24 character pattern repeated back to back this many times is a loop
MAX_SAME_TOOL_CALLS = 1   # the same call (name and arguments) more than once in one answer is a loop


def _repeated_block(words: list[str]) -> tuple[list[str], int] | None:
    """The shortest run of words repeated back to back often enough to be a loop, and how many times.

    For each period p, a stretch where every word equals the word p places later is a block of p words
    repeated; nothing bounds the block's length, so a long sentence said again and again is found too.
    """
    n = len(words)
    for period in range(1, n // 2 + 1):
        need = MAX_PHRASE_REPEATS if period < SENTENCE_WORDS else MAX_SENTENCE_REPEATS
        if period * need > n:
            continue
        run = 0
        for i in range(n - period):
            run = run + 1 if words[i] == words[i + period] else 0
            if run >= (need - 1) * period:
                start = i - run + 1
                end = i + period
                while end + 1 < n and words[end + 1] == words[end + 1 - period]:
                    end += 1
                return words[start:start + period], (end - start + 1) // period
    return None


def repetition_problem(text: str | None) -> str | None:
    """Why ``text`` looks like a repetition loop, or None when it does not."""
    if not text:
        return None
    run = re.search(r"(\S)\1{%d,}" % (MAX_CHAR_RUN - 1), text)
    if run:
        return f"the character {run.group(1)!r} repeats {len(run.group(0))} times in a row"
    for pattern in re.finditer(r"(\S.{1,23}?)\1{%d,}" % (MAX_PATTERN_REPEATS - 1), text, re.S):
        if len(set(pattern.group(1))) > 1:  # one character repeated is the run rule's business
            times = len(pattern.group(0)) // len(pattern.group(1))
            return f"the pattern {pattern.group(1)!r} repeats {times} times in a row"
    # Words, and runs of one punctuation character as a single token (runs are the rule above's business).
    words = [m.group(0) for m in re.finditer(r"\w+|([^\w\s])\1*", text.lower())]
    found = _repeated_block(words)
    if found:
        phrase = " ".join(found[0])
        shown = phrase if len(phrase) <= 80 else clip(phrase, 77) + "..."
        return f"the phrase {shown!r} repeats {found[1]} times in a row"
    return None


# ---------------------------------------------------------------- tool calls
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TOOL_PROMPT = "What is the weather in Paris right now, in celsius? Use the tool."
# Markup that parsers turn into tool_calls; left in content it means the parser did not run.
_RAW_MARKUP = re.compile(r"<tool_call>|</tool_call>|<function=|<\|tool_call|\"arguments\"\s*:", re.I)
_JSON_TYPES: dict[str, type | tuple[type, ...]] = {"string": str, "integer": int, "number": (int, float),
                                                 "boolean": bool, "object": dict, "array": list}


def schema_problem(value, schema: dict, path: str = "arguments") -> str | None:
    """A small JSON-schema check: type, required, enum, additionalProperties, nested properties."""
    kind = schema.get("type")
    if kind:
        expected = _JSON_TYPES[kind]
        if not isinstance(value, expected) or (kind in ("integer", "number") and isinstance(value, bool)):
            return f"{path} should be {kind}, got {type(value).__name__}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{path}={value!r} is not one of {schema['enum']}"
    if kind == "object":
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                return f"{path} lacks required {key!r}"
        if schema.get("additionalProperties") is False:
            extra = sorted(set(value) - set(props))
            if extra:
                return f"{path} has unexpected {extra}"
        for key, sub in props.items():
            if key in value:
                problem = schema_problem(value[key], sub, f"{path}.{key}")
                if problem:
                    return problem
    return None


def tool_call_problems(response: dict, tools: list[dict]) -> list[str]:
    """Everything wrong with one chat completion that had to call a tool."""
    problems = []
    choices = response.get("choices") or []
    if not choices:
        return ["the response has no choices"]
    choice = choices[0]
    message = choice.get("message") or {}
    if choice.get("finish_reason") != "tool_calls":
        problems.append(f"finish_reason is {choice.get('finish_reason')!r}, not 'tool_calls'")
    calls = message.get("tool_calls") or []
    if not calls:
        problems.append("tool_calls is empty: the call fell through as text (is --tool-call-parser set?)")
    schemas = {t["function"]["name"]: t["function"].get("parameters", {}) for t in tools}
    for call in calls:
        function = call.get("function") or {}
        name = function.get("name")
        if name not in schemas:
            problems.append(f"tool_calls names an unknown tool {name!r}")
            continue
        try:
            arguments = json.loads(function.get("arguments") or "")
        except (TypeError, ValueError):
            problems.append(f"the arguments of {name} are not valid JSON: {function.get('arguments')!r}")
            continue
        problem = schema_problem(arguments, schemas[name])
        if problem:
            problems.append(f"the arguments of {name} do not match its schema: {problem}")
    seen: dict[str, int] = {}
    for call in calls:
        function = call.get("function") or {}
        same = json.dumps([function.get("name"), function.get("arguments")])
        seen[same] = seen.get(same, 0) + 1
    for same, count in seen.items():
        if count > MAX_SAME_TOOL_CALLS:
            problems.append(f"tool_calls repeats the same call {count} times: {clip(same, 120)}")
    content = message.get("content") or ""
    if _RAW_MARKUP.search(content):
        problems.append(f"raw tool-call markup left in content: {clip(content, 120)!r}")
    for field in ("reasoning_content", "content"):
        loop = repetition_problem(message.get(field))
        if loop:
            problems.append(f"{field} is a repetition loop: {loop}")
    return problems


# ---------------------------------------------------------------- HTTP
def _post(url: str, payload: dict, timeout: float):
    request = urllib.request.Request(url, data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    return open_url(request, timeout)


def _chat_url(base: str) -> str:
    return base.rstrip("/") + "/v1/chat/completions"


def check_tool_calling(url: str, model: str, timeout: float) -> dict:
    payload = {"model": model, "messages": [{"role": "user", "content": TOOL_PROMPT}],
               "tools": [WEATHER_TOOL], "tool_choice": "auto", "max_tokens": 1024, "temperature": 0}
    started = time.monotonic()
    try:
        with _post(_chat_url(url), payload, timeout) as reply:
            response = json.loads(read_bounded(reply, started + timeout))
    except urllib.error.HTTPError as error:
        body = error_body(error)
        return {"check": "tool_calling", "ok": False, "problems": [f"HTTP {error.code} from the server: {body}"]}
    except (urllib.error.URLError, OSError, ValueError) as error:
        return {"check": "tool_calling", "ok": False, "problems": [f"no usable answer from {url}: {error}"]}
    problems = tool_call_problems(response, [WEATHER_TOOL])
    message = (response.get("choices") or [{}])[0].get("message") or {}
    return {"check": "tool_calling", "ok": not problems, "problems": problems, "model": model,
            "seconds": round(time.monotonic() - started, 3),
            "tool_calls": len(message.get("tool_calls") or []),
            "reasoning_chars": len(message.get("reasoning_content") or "")}


# ---------------------------------------------------------------- the served models
MAX_MODELS_BYTES = 1 << 20   # /v1/models: a few hundred bytes a model


def list_models(url: str, timeout: float) -> dict:
    """/health, then the ids /v1/models lists: each read bounded in bytes, the two together in ``timeout``."""
    deadline = time.monotonic() + timeout
    base = url.rstrip("/")
    try:
        with open_url(urllib.request.Request(base + "/health"), left(deadline, timeout), key=False) as reply:
            read_bounded(reply, deadline, MAX_MODELS_BYTES)
        with open_url(urllib.request.Request(base + "/v1/models"), left(deadline, timeout)) as reply:
            listed = json.loads(read_bounded(reply, deadline, MAX_MODELS_BYTES))
        models = [m["id"] for m in listed["data"]]
    except urllib.error.HTTPError as error:
        return {"check": "models", "ok": False, "problems": [f"HTTP {error.code} from {url}: {error_body(error)}"]}
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as error:
        return {"check": "models", "ok": False, "problems": [f"no usable answer from {url} within {timeout:g} s: "
                                                              f"{error}"]}
    return {"check": "models", "ok": True, "problems": [], "models": models}


# ---------------------------------------------------------------- benchmark
BENCH_PROMPT = "Write a short paragraph about the history of the printing press."


def percentile(values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile (no interpolation)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-fraction * len(ordered) // 1))))
    return ordered[rank - 1]


def bench_prompt(index: int | None) -> str:
    """The benchmark's prompt; with an index, one whose start differs per request, as unrelated users' do (a
    cache-aware gateway sends a shared prefix to the worker that holds it, unrelated ones by load)."""
    return BENCH_PROMPT if index is None else f"[{index:04d}-{os.urandom(4).hex()}] {BENCH_PROMPT}"


def _one_stream(url: str, model: str, max_tokens: int, timeout: float, out: dict, prompt: str = BENCH_PROMPT) -> None:
    payload = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
               "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    started = time.monotonic()
    try:
        with _post(_chat_url(url), payload, timeout) as reply:
            for raw in bounded_lines(reply, started + timeout):
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if "ttft" not in out and (delta.get("content") or delta.get("reasoning_content")):
                        out["ttft"] = time.monotonic() - started
                if chunk.get("usage"):
                    out["tokens"] = chunk["usage"].get("completion_tokens", 0)
        if "tokens" not in out:
            out["error"] = "the stream carried no usage"
    except Unbounded as error:
        out["error"] = f"{error} (the stream's bound: {timeout:g} s, {MAX_ANSWER_BYTES} bytes)"
    except (urllib.error.URLError, OSError, ValueError) as error:
        out["error"] = str(error)


# An accept length is the tokens one verify step keeps (the verified token included): 1 to a drafter's steps + 1.
MAX_ACCEPT_LENGTH = 64.0


def accept_length(url: str, timeout: float) -> tuple[float | None, str | None]:
    """(the server's average speculative accept length, a problem): SGLang's /server_info reports
    avg_spec_accept_length in each data-parallel rank's internal_states once a speculative step has run; the mean of
    the ranks that report one. Read bounded in bytes and time; anything but numbers in range is a problem."""
    deadline = time.monotonic() + timeout
    try:
        with open_url(urllib.request.Request(url.rstrip("/") + "/server_info"), left(deadline, timeout)) as reply:
            info = json.loads(read_bounded(reply, deadline, MAX_ANSWER_BYTES))
    except urllib.error.HTTPError as error:
        return None, f"HTTP {error.code} from {url}/server_info: {error_body(error)}"
    except (urllib.error.URLError, OSError, ValueError, Unbounded) as error:
        return None, f"no usable /server_info from {url} within {timeout:g} s: {error}"
    states = info.get("internal_states") if isinstance(info, dict) else None
    if not isinstance(states, list):
        return None, f"{url}/server_info has no internal_states list"
    found = [state.get("avg_spec_accept_length") for state in states if isinstance(state, dict)]
    found = [v for v in found if v is not None]
    values = [float(v) for v in found if isinstance(v, (int, float)) and not isinstance(v, bool)
              and 0 <= v <= MAX_ACCEPT_LENGTH]
    if len(values) != len(found):
        return None, f"{url}/server_info reports an avg_spec_accept_length that is not a number 0-{MAX_ACCEPT_LENGTH:g}"
    if not values:
        return None, None
    return sum(values) / len(values), None


def run_benchmark(url: str, model: str, concurrency: int, max_tokens: int, timeout: float,
                  baseline: float | None, min_fraction: float, results_dir: str | None,
                  distinct_prompts: bool = False, speculative: bool = False,
                  min_accept_length: float | None = None) -> dict:
    outs: list[dict] = [{} for _ in range(concurrency)]
    threads = [threading.Thread(target=_one_stream, args=(url, model, max_tokens, timeout, o,
                                                          bench_prompt(i if distinct_prompts else None)))
               for i, o in enumerate(outs)]
    started = time.monotonic()
    for thread in threads:
        thread.daemon = True   # a request that never ends must not keep the check alive
        thread.start()
    deadline = started + timeout + 5
    for thread, out in zip(threads, outs):
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            out["error"] = f"no complete answer within {timeout:g} s"
    wall = time.monotonic() - started
    errors = [o["error"] for o in outs if "error" in o]
    tokens = sum(o.get("tokens", 0) for o in outs if "error" not in o)
    ttfts = [o["ttft"] for o in outs if "ttft" in o and "error" not in o]
    throughput = tokens / wall if wall > 0 else 0.0
    result = {
        "check": "benchmark", "model": model, "concurrency": concurrency, "max_tokens": max_tokens,
        "output_tokens": tokens, "seconds": round(wall, 3), "tok_per_s": round(throughput, 1),
        "ttft_p50_s": _round(percentile(ttfts, 0.50)), "ttft_p99_s": _round(percentile(ttfts, 0.99)),
        "errors": len(errors), "baseline_tok_per_s": baseline, "min_fraction": min_fraction,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    problems = []
    if errors:
        problems.append(f"{len(errors)} of {concurrency} requests failed: {errors[0]}")
    elif tokens == 0:
        problems.append("the server answered every request with no output tokens")
    if baseline:
        floor = baseline * min_fraction
        result["ratio_to_baseline"] = round(throughput / baseline, 3)
        if throughput < floor:
            problems.append(f"{throughput:.1f} tok/s is below {min_fraction:.0%} of the baseline {baseline:g} tok/s")
    else:
        result["note"] = "no baseline recorded for this model; this result can become one"
    if speculative or min_accept_length is not None:
        # The recipe's own measure: its drafter's tokens kept per step, beside the throughput they buy.
        length, problem = accept_length(url, 30.0)
        result["avg_spec_accept_length"] = _round(length)
        result["min_accept_length"] = min_accept_length
        if min_accept_length is None:
            if problem:
                result["accept_length_note"] = problem
        elif problem:
            problems.append(problem)
        elif length is None:
            problems.append("the server reports no avg_spec_accept_length: speculative decoding did not run")
        elif length < min_accept_length:
            problems.append(f"the average accept length {length:.2f} is below the recipe's floor "
                            f"{min_accept_length:g}")
    result["ok"] = not problems
    result["problems"] = problems
    if results_dir:
        result["result_file"] = write_result(results_dir, result)
    return result


def write_result(results_dir: str, result: dict) -> str:
    """A new file in the (group-writable) results directory: created exclusively, never through a symlink."""
    stamp = time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())
    for attempt in range(100):
        path = os.path.join(results_dir, f"benchmark-{stamp}{f'-{attempt}' if attempt else ''}.json")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o664)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w") as handle:
            json.dump(json.loads(redact(json.dumps(result))), handle, indent=2)
        return path
    raise OSError(f"no free result file name in {results_dir}")


def _round(value):
    return None if value is None else round(value, 4)


# ---------------------------------------------------------------- readiness
READY_PROMPT = "Reply with the single word OK."


def wait_ready(url: str, model: str, timeout: float, every: float = 10.0, poll: float = 1.0,
               gone=lambda: None) -> dict:
    """
    Wait until /health stops answering 503 and a real completion comes back;
    progress on stderr. Every probe is capped to the time left, so the wait
    ends within ``timeout``. ``gone()`` returns why waiting is pointless (the
    container exited), or None.
    """
    started = time.monotonic()
    deadline = started + timeout
    last_report, last_status = started, None
    phase = "health"
    while True:
        why = gone()
        if why:
            return {"check": "ready", "ok": False, "seconds": round(time.monotonic() - started, 1),
                    "problems": [why]}
        try:
            if phase == "health":
                health = urllib.request.Request(url.rstrip("/") + "/health")
                with open_url(health, left(deadline, 10), key=False) as reply:
                    last_status = reply.status
                phase = "completion"
            payload = {"model": model, "messages": [{"role": "user", "content": READY_PROMPT}],
                       "max_tokens": 16, "temperature": 0}
            with _post(_chat_url(url), payload, timeout=left(deadline, 60)) as reply:
                answer = json.loads(read_bounded(reply, min(deadline, time.monotonic() + 60)))
            if answer.get("choices"):
                return {"check": "ready", "ok": True, "problems": [],
                        "seconds": round(time.monotonic() - started, 1)}
            last_status = "a completion without choices"
        except urllib.error.HTTPError as error:
            last_status = error.code
        except (urllib.error.URLError, OSError, ValueError) as error:
            last_status = type(error).__name__
        elapsed = time.monotonic() - started
        if elapsed >= timeout:
            return {"check": "ready", "ok": False, "seconds": round(elapsed, 1),
                    "problems": [f"not ready after {timeout:g} s (waiting for {phase}, last answer {last_status})"]}
        if time.monotonic() - last_report >= every:
            print(f"ready: waiting for {phase} ({last_status}), {elapsed:.0f}/{timeout:g} s", file=sys.stderr,
                  flush=True)
            last_report = time.monotonic()
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())))


# ---------------------------------------------------------------- command line
WATCHDOG_MARGIN = 30   # seconds beyond --timeout: a check as a whole ends by then, whatever a server does


def watchdog(check: str, seconds: float) -> None:
    """End this process with a reason after ``seconds``: a server dripping its headers a byte at a time is
    bounded per read only, so the check as a whole is bounded here."""
    def expire():
        print(f"{check} FAILED: no result within {seconds:g} s: the server answers too slowly, or not at all",
              file=sys.stderr, flush=True)
        os._exit(1)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sglang-validate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="check", required=True)
    for name in ("tool-calling", "benchmark", "ready", "models"):
        p = sub.add_parser(name)
        p.add_argument("--url", required=True)
        p.add_argument("--model", required=name != "models")
        p.add_argument("--timeout", type=float, default=300)
        p.add_argument("--api-key-file", default=None, help="the server's key file (api-key: KEY)")
        p.add_argument("--gateway", default=None, metavar="SLUG",
                       help="the URL is the gateway's in router/SLUG/: the key goes only to its container's port")
        if name == "benchmark":
            p.add_argument("--concurrency", type=int, default=8)
            p.add_argument("--max-tokens", type=int, default=256)
            p.add_argument("--baseline", type=float, default=None, help="tok/s; none: record, do not compare")
            p.add_argument("--min-fraction", type=float, default=0.8)
            p.add_argument("--speculative", action="store_true",
                           help="record /server_info's avg_spec_accept_length beside the throughput")
            p.add_argument("--min-accept-length", type=float, default=None,
                           help="the speculative recipe's floor on /server_info's avg_spec_accept_length")
            p.add_argument("--results-dir", default=None)
            p.add_argument("--distinct-prompts", action="store_true",
                           help="start every prompt differently (unrelated users), to measure a gateway's spread")
    args = parser.parse_args(argv)
    watchdog(args.check, args.timeout + WATCHDOG_MARGIN)
    owner = stack.gateway(args.gateway) if args.gateway else (stack.PROJECT, stack.SERVICE)
    use_api_key_file(args.api_key_file, lambda url: stack.holds(url, *owner))
    if args.check == "tool-calling":
        result = check_tool_calling(args.url, args.model, args.timeout)
    elif args.check == "ready":
        result = wait_ready(args.url, args.model, args.timeout)
    elif args.check == "models":
        result = list_models(args.url, args.timeout)
    else:
        result = run_benchmark(args.url, args.model, args.concurrency, args.max_tokens, args.timeout,
                               args.baseline, args.min_fraction, args.results_dir, args.distinct_prompts,
                               args.speculative, args.min_accept_length)
    print(redact(json.dumps(result, sort_keys=True)))
    if not result["ok"]:
        print(redact(f"{result['check']} FAILED: {'; '.join(result['problems'])}"), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
