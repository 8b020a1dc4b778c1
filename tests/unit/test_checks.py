"""The validation program's detectors on good and degenerate samples, and the
whole checks against the stand-in server on loopback."""

from __future__ import annotations

import json
import socket
import sys
import time
import urllib.error
import urllib.request

import pytest

from harness import PROJECT_DIR
from sglang_infra.hostside import apikey, bounded
from sglang_infra.hostside import checks as v

sys.path.insert(0, str(PROJECT_DIR / "tests" / "support" / "standin"))
import standin_server

GOOD_REASONING = [
    "The user wants the weather in Paris in celsius. I have a get_weather tool with two required parameters, "
    "city and unit. Both are given, so I will call it with city=Paris and unit=celsius and then summarise.",
    "Let me think. The question is about Paris. Paris is in France. The tool needs a city and a unit; the unit "
    "should be celsius because the user asked for it. I will call get_weather.",
    "First, check what is needed: a city (Paris) and a unit (celsius). Second, call the tool. Third, report. "
    "No clarification is needed. - city: Paris - unit: celsius",
    "Okay, okay. So the user asks: what's the weather? In Paris. Right now. Fine: call get_weather(Paris, "
    "celsius). Done thinking.",
    "",
    None,
]
LOOPS = [
    ("!" * 400, "character '!'"),
    ("Let me think about the weather. " + "?" * 25, "character '?'"),
    ("I need to " + "call the tool and " * 10, "pattern"),
    ("Wait. " * 12, "pattern"),
    ("the the the the the the the the", "repeats"),
    ("Paris Paris Paris Paris Paris Paris Paris Paris Paris", "repeats"),
    ("so the answer is so the answer is so the answer is so the answer is so the answer is so the answer is",
     "repeats"),
    # A 20-word sentence said 30 times: no phrase-length limit hides it.
    (" ".join(["The user wants the weather in Paris so I should call the weather tool with the city and unit now."]
              * 30), "repeats 30 times"),
    ("Fine. " + "I will now call get_weather for Paris in celsius as the user asked me to do today. " * 3,
     "repeats 3 times"),
]


@pytest.mark.parametrize("text", GOOD_REASONING)
def test_good_reasoning_is_not_a_loop(text):
    assert v.repetition_problem(text) is None


@pytest.mark.parametrize("text,what", LOOPS)
def test_degenerate_reasoning_is_a_loop(text, what):
    problem = v.repetition_problem(text)
    assert problem and what in problem


def test_character_run_threshold_is_exact():
    assert v.repetition_problem("x" + "=" * (v.MAX_CHAR_RUN - 1)) is None
    assert v.repetition_problem("x" + "=" * v.MAX_CHAR_RUN)


def test_phrase_threshold_is_exact():
    below = " ".join(["alpha beta gamma delta"] * (v.MAX_PHRASE_REPEATS - 1))
    at = " ".join(["alpha beta gamma delta"] * v.MAX_PHRASE_REPEATS)
    assert v.repetition_problem(below) is None
    assert "repeats" in v.repetition_problem(at)


def test_long_good_text_is_not_a_loop():
    assert v.repetition_problem(" ".join(GOOD_REASONING[:4])) is None


def response(message, finish="tool_calls"):
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}


def call(arguments):
    return {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}


def test_clean_tool_call_passes():
    message = {"content": None, "reasoning_content": GOOD_REASONING[0],
               "tool_calls": [call('{"city": "Paris", "unit": "celsius"}')]}
    assert v.tool_call_problems(response(message), [v.WEATHER_TOOL]) == []


@pytest.mark.parametrize("message,finish,expected", [
    ({"content": '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>', "tool_calls": None},
     "stop", ["finish_reason is 'stop'", "tool_calls is empty", "raw tool-call markup"]),
    ({"tool_calls": [call("{city: Paris}")]}, "tool_calls", ["not valid JSON"]),
    ({"tool_calls": [call('{"city": "Paris"}')]}, "tool_calls", ["lacks required 'unit'"]),
    ({"tool_calls": [call('{"city": "Paris", "unit": "kelvin"}')]}, "tool_calls", ["not one of"]),
    ({"tool_calls": [call('{"city": 7, "unit": "celsius"}')]}, "tool_calls", ["should be string"]),
    ({"tool_calls": [call('{"city": "Paris", "unit": "celsius", "x": 1}')]}, "tool_calls", ["unexpected ['x']"]),
    ({"tool_calls": [{"function": {"name": "rm_rf", "arguments": "{}"}}]}, "tool_calls", ["unknown tool"]),
    ({"reasoning_content": "!" * 100, "tool_calls": [call('{"city": "Paris", "unit": "celsius"}')]},
     "tool_calls", ["repetition loop"]),
])
def test_bad_tool_calls_are_named(message, finish, expected):
    problems = v.tool_call_problems(response(message, finish), [v.WEATHER_TOOL])
    assert len(problems) == len(expected)
    for problem, fragment in zip(problems, expected):
        assert fragment in problem


def test_percentile_is_nearest_rank():
    assert v.percentile([], 0.5) is None
    assert v.percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert v.percentile(list(range(1, 101)), 0.99) == 99
    assert v.percentile([5.0], 0.99) == 5.0


# ---------------------------------------------------------------- against the stand-in, on loopback
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def standin():
    servers = []

    def start(failure="", load=0.0, rate=2000, served="qwen-test", drip=2.0, extra=(), accept=2.5):
        port = free_port()
        server = standin_server.serve_in_thread(
            ["--model-path", "org/model", "--served-model-name", served, "--host", "127.0.0.1", "--port", str(port),
             "--tp-size", "2", "--tool-call-parser", "qwen3_coder", *extra],
            {"STANDIN_FAILURE": failure, "STANDIN_LOAD_SECONDS": str(load), "STANDIN_TOKENS_PER_SECOND": str(rate),
             "STANDIN_DRIP_SECONDS": str(drip), "STANDIN_ACCEPT_LENGTH": str(accept)})
        servers.append(server)
        return f"http://127.0.0.1:{port}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_standin_health_is_503_while_loading_then_200(standin):
    url = standin(load=0.5)
    status, body = get(url + "/health")
    assert status == 503 and json.loads(body)["type"] == "ServiceUnavailable"
    time.sleep(0.6)
    assert get(url + "/health")[0] == 200


def test_standin_never_ready(standin):
    url = standin(failure="never_ready")
    time.sleep(0.1)
    assert get(url + "/health")[0] == 503


def test_standin_lists_the_served_model(standin):
    status, body = get(standin() + "/v1/models")
    assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == ["qwen-test"]


def test_standin_answers_unknown_models_and_bad_bodies_like_openai(standin):
    url = standin() + "/v1/chat/completions"
    for payload, code in (({"model": "nope", "messages": [{"role": "user", "content": "x"}]}, 404),
                          ({"model": "qwen-test"}, 400)):
        request = urllib.request.Request(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(request, timeout=5)
        assert error.value.code == code
        assert json.loads(error.value.read())["object"] == "error"


def test_standin_refuses_flags_sglang_does_not_know():
    with pytest.raises(SystemExit):
        standin_server.parse_args(["--model-path", "x", "--no-such-flag"])


def test_tool_calling_check_passes_on_a_healthy_server(standin):
    result = v.check_tool_calling(standin(), "qwen-test", timeout=10)
    assert result["ok"], result["problems"]
    assert result["tool_calls"] == 1 and result["reasoning_chars"] > 50


@pytest.mark.parametrize("failure,fragment", [
    ("repetition_loop", "repetition loop"),
    ("tool_call_as_text", "tool_calls is empty"),
])
def test_tool_calling_check_catches_the_failure(standin, failure, fragment):
    result = v.check_tool_calling(standin(failure=failure), "qwen-test", timeout=10)
    assert not result["ok"]
    assert any(fragment in p for p in result["problems"])


def test_tool_calling_check_reports_an_unknown_model(standin):
    result = v.check_tool_calling(standin(), "wrong-name", timeout=10)
    assert not result["ok"] and "HTTP 404" in result["problems"][0]


def test_benchmark_measures_and_passes_against_its_baseline(standin, tmp_path):
    # A bar far below the 8 x 400 tok/s the stand-in is told to decode: the pass must not depend on how busy
    # this machine is (a loaded 2-core machine was seen below 500 tok/s); the slow case below fails at 10 tok/s.
    result = v.run_benchmark(standin(rate=400), "qwen-test", concurrency=8, max_tokens=40, timeout=30,
                             baseline=400, min_fraction=0.25, results_dir=str(tmp_path))
    assert result["ok"], result["problems"]
    assert result["output_tokens"] == 8 * 40 and result["errors"] == 0
    assert 0 < result["ttft_p50_s"] <= result["ttft_p99_s"] < 5
    assert abs(result["tok_per_s"] - result["output_tokens"] / result["seconds"]) < 0.02 * result["tok_per_s"]
    assert result["tok_per_s"] <= 8 * 400  # the stand-in never decodes faster than it was told
    assert json.loads(open(result["result_file"]).read())["tok_per_s"] == result["tok_per_s"]


def test_benchmark_fails_a_slow_server(standin):
    result = v.run_benchmark(standin(failure="slow"), "qwen-test", concurrency=4, max_tokens=4, timeout=30,
                             baseline=985, min_fraction=0.8, results_dir=None)
    assert not result["ok"] and "below 80% of the baseline 985" in result["problems"][0]


SPECULATIVE = ("--speculative-algorithm", "NGRAM", "--speculative-num-steps", "3")


def test_benchmark_records_a_speculative_servers_accept_length_beside_its_throughput(standin):
    result = v.run_benchmark(standin(extra=SPECULATIVE, accept=2.75), "qwen-test", concurrency=2, max_tokens=4,
                             timeout=30, baseline=None, min_fraction=0.8, results_dir=None, speculative=True)
    assert result["ok"], result["problems"]
    assert result["avg_spec_accept_length"] == 2.75 and result["tok_per_s"] > 0


def test_benchmark_fails_an_accept_length_below_the_recipes_floor(standin):
    result = v.run_benchmark(standin(extra=SPECULATIVE, accept=1.2), "qwen-test", concurrency=2, max_tokens=4,
                             timeout=30, baseline=None, min_fraction=0.8, results_dir=None, speculative=True,
                             min_accept_length=2.0)
    assert not result["ok"]
    assert result["problems"] == ["the average accept length 1.20 is below the recipe's floor 2"]


def test_benchmark_with_a_floor_fails_a_server_that_never_drafted(standin):
    result = v.run_benchmark(standin(), "qwen-test", concurrency=2, max_tokens=4, timeout=30, baseline=None,
                             min_fraction=0.8, results_dir=None, speculative=True, min_accept_length=2.0)
    assert not result["ok"] and "speculative decoding did not run" in result["problems"][0]


@pytest.mark.parametrize("answer, why", [
    (b"null", "has no internal_states list"),
    (b'{"internal_states": [{"avg_spec_accept_length": "many"}]}', "not a number 0-64"),
    (b'{"internal_states": [{"avg_spec_accept_length": 1e9}]}', "not a number 0-64"),
    (b"x" * (v.MAX_ANSWER_BYTES + 10), "no usable /server_info"),
])
def test_an_accept_length_answer_out_of_shape_is_a_problem_never_a_crash(answer, why):
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        length, problem = v.accept_length(f"http://127.0.0.1:{server.server_address[1]}", 5)
    finally:
        server.shutdown()
        server.server_close()
    assert length is None and why in problem


def test_benchmark_counts_errors(standin):
    result = v.run_benchmark(standin(), "wrong-name", concurrency=3, max_tokens=4, timeout=10, baseline=None,
                             min_fraction=0.8, results_dir=None)
    assert not result["ok"] and result["errors"] == 3


def test_command_line_prints_json_and_a_one_line_reason(standin, capsys, monkeypatch):
    monkeypatch.setattr(v, "watchdog", lambda check, seconds: None)   # its os._exit would end pytest itself
    url = standin(failure="repetition_loop")
    assert v.main(["tool-calling", "--url", url, "--model", "qwen-test", "--timeout", "10"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["ok"] is False
    ours = [line for line in err.splitlines() if not line.startswith("stand-in")]
    assert len(ours) == 1 and ours[0].startswith("tool_calling FAILED: reasoning_content is a repetition loop")


def test_ready_waits_for_health_then_a_completion(standin, capsys):
    url = standin(load=1.5)
    result = v.wait_ready(url, "qwen-test", timeout=20, every=0.5, poll=0.2)
    assert result["ok"] and result["seconds"] >= 1.0  # it waited for the load, not just for a socket
    assert "ready: waiting for health (503)" in capsys.readouterr().err


def test_ready_times_out_on_a_server_that_never_loads(standin):
    result = v.wait_ready(standin(failure="never_ready"), "qwen-test", timeout=1.5, every=10, poll=0.2)
    assert not result["ok"] and "not ready after 1.5 s (waiting for health, last answer 503)" in result["problems"][0]


def test_ready_times_out_when_nothing_listens():
    result = v.wait_ready(f"http://127.0.0.1:{free_port()}", "m", timeout=0.5, every=10, poll=0.1)
    assert not result["ok"] and "URLError" in result["problems"][0]


def test_a_sentence_said_twice_is_not_yet_a_loop():
    sentence = "The user wants the weather in Paris so I should call the weather tool with the city."
    assert v.repetition_problem(f"{sentence} {sentence}") is None


def test_a_loop_in_content_fails_the_check():
    message = {"content": "Sure! " * 40, "tool_calls": [call('{"city": "Paris", "unit": "celsius"}')]}
    problems = v.tool_call_problems(response(message), [v.WEATHER_TOOL])
    assert any(p.startswith("content is a repetition loop") for p in problems), problems


def test_forty_identical_tool_calls_fail_the_check():
    message = {"content": "", "tool_calls": [call('{"city": "Paris", "unit": "celsius"}')] * 40}
    problems = v.tool_call_problems(response(message), [v.WEATHER_TOOL])
    assert any("repeats the same call 40 times" in p for p in problems), problems


# ---------------------------------------------------------------- servers that never finish, on loopback
class _Misbehaving:
    """A loopback server that answers /health but whose completions never end (or carry no tokens)."""

    def __init__(self, mode: str):
        import http.server
        import threading

        self.stop = threading.Event()
        stop, outer = self.stop, self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream" if body.get("stream") else "application/json")
                self.end_headers()
                if mode == "no_tokens":
                    chunk = {"choices": [], "usage": {"completion_tokens": 0}}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())
                    return
                for _ in range(600):   # at most 30 s, then the test server gives up by itself
                    if stop.is_set():
                        return
                    try:
                        self.wfile.write(b'data: {"choices": [{"delta": {"content": "x"}}]}\n\n'
                                         if body.get("stream") else b" ")
                        self.wfile.flush()
                    except OSError:
                        return
                    time.sleep(0.05)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        outer.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def misbehaving():
    made = []

    def start(mode):
        made.append(_Misbehaving(mode))
        return made[-1].url

    yield start
    for server in made:
        server.close()


def test_a_stream_that_never_finishes_is_an_error_not_a_pass(misbehaving):
    started = time.monotonic()
    result = v.run_benchmark(misbehaving("endless"), "m", concurrency=2, max_tokens=4, timeout=1.5, baseline=None,
                             min_fraction=0.8, results_dir=None)
    assert not result["ok"] and result["errors"] == 2, result
    assert time.monotonic() - started < 10


def test_a_benchmark_with_no_output_tokens_fails_even_without_a_baseline(misbehaving):
    result = v.run_benchmark(misbehaving("no_tokens"), "m", concurrency=2, max_tokens=4, timeout=5, baseline=None,
                             min_fraction=0.8, results_dir=None)
    assert not result["ok"] and "no output tokens" in result["problems"][0], result


def test_a_tool_call_answer_that_never_ends_is_bounded(misbehaving):
    started = time.monotonic()
    result = v.check_tool_calling(misbehaving("endless"), "m", timeout=1.5)
    assert not result["ok"] and time.monotonic() - started < 10


def test_the_readiness_wait_ends_within_its_timeout_when_completions_never_return(misbehaving):
    started = time.monotonic()
    result = v.wait_ready(misbehaving("endless"), "m", timeout=2, every=10, poll=0.1)
    assert not result["ok"] and time.monotonic() - started < 2 + 1.5, result


def test_with_an_api_key_the_checks_send_it_and_the_server_refuses_without(tmp_path):
    port = free_port()
    config = tmp_path / "server.yaml"
    config.write_text('api-key: "secret-key-0123456789"\n')
    server = standin_server.serve_in_thread(
        ["--model-path", "org/model", "--served-model-name", "qwen-test", "--host", "127.0.0.1", "--port", str(port),
         "--tool-call-parser", "qwen3_coder", "--config", str(config)],
        {"STANDIN_LOAD_SECONDS": "0"})
    url = f"http://127.0.0.1:{port}"
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "/v1/models", timeout=5)
        assert refused.value.code == 401
        assert get(url + "/health")[0] == 200  # readiness needs no key, as in SGLang
        try:
            apikey.use_api_key_file(str(config), lambda url: True)   # as if the container published the port
            assert v.check_tool_calling(url, "qwen-test", timeout=10)["ok"]
        finally:
            apikey._HEADERS.clear()
        assert not v.check_tool_calling(url, "qwen-test", timeout=10)["ok"]
    finally:
        server.shutdown()
        server.server_close()


# ---------------------------------------------------------------- every read from a server is bounded
def finished_within(seconds, call, *args):
    """(elapsed, result or the exception raised) of ``call``, run in a thread; fails when it is not done in time
    (the thread is a daemon: a read that never ends does not keep the test run alive)."""
    import threading

    found = {}

    def run():
        try:
            found["result"] = call(*args)
        except Exception as error:   # the caller judges what was raised
            found["result"] = error

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{call.__name__} did not end within {seconds} s"
    return time.monotonic() - started, found["result"]


def test_a_stream_dripping_a_byte_every_few_seconds_ends_at_its_deadline(standin):
    """One byte every 2 s never trips a per-read timeout: only a deadline over the whole stream ends it."""
    url = standin(failure="drip", drip=1.0)
    elapsed, result = finished_within(20, v.run_benchmark, url, "qwen-test", 2, 4, 3, None, 0.8, None)
    assert not result["ok"] and result["errors"] == 2, result
    assert "did not finish in time" in result["problems"][0], result
    assert elapsed < 3 + 2, elapsed   # the stream's own deadline, not the benchmark's join margin (+5 s)


def test_a_stream_without_a_newline_ends_at_the_line_bound(standin):
    elapsed, result = finished_within(20, v.run_benchmark, standin(failure="endless_line"), "qwen-test", 1, 4, 10,
                                      None, 0.8, None)
    assert not result["ok"] and f"longer than {bounded.MAX_LINE_BYTES} bytes" in result["problems"][0], result
    assert elapsed < 10, elapsed


@pytest.mark.parametrize("failure,reason", [("drip", "did not finish in time"),
                                            ("endless_line", f"larger than {v.MAX_MODELS_BYTES} bytes")])
def test_the_models_probe_is_bounded_in_time_and_bytes(standin, failure, reason):
    elapsed, result = finished_within(20, v.list_models, standin(failure=failure, drip=1.0), 3)
    assert not result["ok"] and reason in result["problems"][0], result
    assert elapsed < 3 + 2, elapsed


def test_the_models_probe_lists_the_served_model(standin, capsys, monkeypatch):
    monkeypatch.setattr(v, "watchdog", lambda check, seconds: None)   # its os._exit would end pytest itself
    assert v.main(["models", "--url", standin(), "--timeout", "5"]) == 0
    assert json.loads(capsys.readouterr().out)["models"] == ["qwen-test"]


def test_the_gateways_worker_api_is_read_within_its_deadline(standin, monkeypatch):
    from sglang_infra.hostside.roll import gateway_workers

    monkeypatch.setattr(gateway_workers, "TIMEOUT", 2)
    elapsed, error = finished_within(20, gateway_workers.registered, standin(failure="drip", drip=0.5))
    assert isinstance(error, bounded.Unbounded) and "did not finish in time" in str(error), error
    assert elapsed < 2 + 2, elapsed


def test_the_status_probe_of_a_gateway_is_read_within_its_deadline(standin, monkeypatch, tmp_path):
    from sglang_infra.hostside.gate import report

    url = standin(failure="endless_line")
    (tmp_path / "router" / "model").mkdir(parents=True)
    (tmp_path / "router" / "model" / "compose.yaml").write_text(f"--port={url.rsplit(':', 1)[1]}\n")
    monkeypatch.setattr(report, "GATEWAY_TIMEOUT", 2)
    # The probe goes only to a port the gateway's own container publishes (Docker's answer, stood in for here).
    monkeypatch.setattr(report.stack, "published", lambda port, project, service: ["127.0.0.1"])
    elapsed, found = finished_within(20, report.gateways, str(tmp_path))
    assert found[0]["error"] == ("the gateway does not answer: "
                                 f"the answer is larger than {bounded.MAX_GATEWAY_BYTES} bytes")
    assert elapsed < 2 + 2, elapsed


def test_a_whole_check_ends_by_its_watchdog_with_a_reason():
    """A server that drips even its headers a byte at a time is bounded per read only (http.client reads them
    before the checks see a body): the check's process ends anyway, with a reason, at --timeout plus a margin."""
    import subprocess
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    stop = threading.Event()

    def drip_headers():
        conn, _ = listener.accept()
        with conn:
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            while not stop.wait(0.3):
                try:
                    conn.sendall(b"X")
                except OSError:
                    return

    threading.Thread(target=drip_headers, daemon=True).start()
    program = ("import sys; sys.path.insert(0, sys.argv[1]); from sglang_infra.hostside import checks; "
               "checks.WATCHDOG_MARGIN = 1; sys.exit(checks.main(sys.argv[2:]))")
    try:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-c", program, str(PROJECT_DIR), "tool-calling", "--url",
                               f"http://127.0.0.1:{listener.getsockname()[1]}", "--model", "m", "--timeout", "2"],
                              capture_output=True, text=True, timeout=30)
    finally:
        stop.set()
        listener.close()
    assert done.returncode == 1 and time.monotonic() - started < 2 + 1 + 3, done
    assert "tool-calling FAILED: no result within 3 s" in done.stderr, done.stderr
