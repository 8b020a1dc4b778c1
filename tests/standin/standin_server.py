"""STAND-IN for a GPU-backed SGLang server. Tests and the sandbox only.

There is no GPU and no model on these machines, so this small standard-library
server takes SGLang's place inside the stand-in image built by the test
harness. It speaks the same OpenAI-compatible wire protocol SGLang does:

- GET  /health                503 while "loading", then 200 (empty body)
- GET  /v1/models             the served model
- GET  /server_info, /get_server_info, /model_info, /get_model_info
                              what the gateway (sglang-router) asks a worker for when it adds it (the
                              server info with the API key in clear, as SGLang's; its start-up log line
                              server_args=... carries the key too)
- POST /v1/chat/completions   content, reasoning_content, tool_calls, usage;
                              streaming as server-sent events ending in [DONE];
                              404 for an unknown model, 400 for a bad request
- GET  /metrics               with --enable-metrics, SGLang's gauges sglang:num_running_reqs and
                              sglang:num_queue_reqs (label model_name); 404 without it

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
import json
import os
import signal
import sys
import threading
import time
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
    args = p.parse_args(argv)
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


class StandIn:
    def __init__(self, args: argparse.Namespace, env: dict):
        self.args = args
        self.served = args.served_model_name or args.model_path
        self.failure = env.get("STANDIN_FAILURE", "")
        if self.failure not in FAILURES:
            raise SystemExit(f"stand-in: unknown STANDIN_FAILURE={self.failure!r}; one of {FAILURES[1:]}")
        self.tokens_per_second = 10.0 if self.failure == "slow" else float(env.get("STANDIN_TOKENS_PER_SECOND", 400))
        self.ready_at = time.monotonic() + float(env.get("STANDIN_LOAD_SECONDS", 3))
        self.capacity = float(env.get("STANDIN_CAPACITY_TOKENS_PER_SECOND", 0))
        self.drip_seconds = float(env.get("STANDIN_DRIP_SECONDS", 2))
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
                "dp_size": 1, "context_length": self.args.context_length, "version": "stand-in",
                "api_key": self.args.api_key}

    def ready(self) -> bool:
        return self.failure != "never_ready" and time.monotonic() >= self.ready_at

    def metrics(self) -> str:
        """/metrics with --enable-metrics: SGLang's gauges in Prometheus' text format (no queue: it is 0)."""
        label = '{model_name="%s"}' % self.served
        lines = []
        for name, value, what in (("sglang:num_running_reqs", self.active, "The number of running requests."),
                                  ("sglang:num_queue_reqs", 0, "The number of requests in the waiting queue.")):
            lines += [f"# HELP {name} {what}", f"# TYPE {name} gauge", f"{name}{label} {float(value)}"]
        return "\n".join(lines) + "\n"

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
            """With --api-key, every /v1 route wants `Authorization: Bearer <key>` (401 otherwise), as SGLang's."""
            key = standin.args.api_key
            if not key or self.headers.get("Authorization") == f"Bearer {key}":
                return True
            self._error(401, "Unauthorized", "AuthenticationError")
            return False

        def _misbehaves(self) -> bool:
            """drip and endless_line: a 200 whose body never ends (one byte at a time, or without a newline)."""
            if standin.failure not in ("drip", "endless_line") or self.path == "/health":
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

        def do_GET(self):
            if self.path.startswith("/v1/") and not self._authorized():
                return
            if self._misbehaves():
                return
            if self.path == "/metrics" and standin.args.enable_metrics:
                data = standin.metrics().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            elif self.path == "/health":
                if standin.ready() and not standin.terminating:
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
            if not self._authorized():
                return
            if self._misbehaves():
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
            try:
                self._complete(request, messages)
            finally:
                with standin.lock:
                    standin.active -= 1

        def _complete(self, request, messages):
            message, finish, pieces = standin.completion(request)
            prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages) + 12
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(pieces),
                     "total_tokens": prompt_tokens + len(pieces)}
            rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
            if request.get("stream"):
                self._stream(request, rid, created, message, finish, pieces, usage)
                return
            for _ in pieces:
                time.sleep(standin.token_delay())
            self._json(200, {"id": rid, "object": "chat.completion", "created": created, "model": standin.served,
                             "choices": [{"index": 0, "message": message, "finish_reason": finish,
                                          "logprobs": None}], "usage": usage})

        def _stream(self, request, rid, created, message, finish, pieces, usage):
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
                if i < len(reasoning):
                    delta = {"reasoning_content": piece + " "}
                elif message.get("tool_calls"):
                    call = message["tool_calls"][0]
                    delta = {"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                                             "function": {"name": call["function"]["name"], "arguments": piece}}]}
                else:
                    delta = {"content": piece + ("" if i == len(pieces) - 1 else " ")}
                send([{"index": 0, "delta": delta, "finish_reason": None}])
            send([{"index": 0, "delta": {}, "finish_reason": finish}])
            if (request.get("stream_options") or {}).get("include_usage"):
                send([], {"usage": usage})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    return Handler


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
    standin = StandIn(args, env)
    problem = model_problem(args.model_path, env)
    if problem:
        print(f"stand-in: cannot load the model: {problem}", file=sys.stderr, flush=True)
        return 1
    if standin.failure == "crash_at_start":
        print("stand-in: RuntimeError: simulated crash while loading the model (STANDIN_FAILURE=crash_at_start)",
              file=sys.stderr, flush=True)
        return 1
    # SGLang logs its server arguments at start, the API key in clear (sgl-project/sglang#37457); so does the
    # stand-in, so that a test can prove that the project redacts it from everything it prints or stores.
    shown = ", ".join(f"{name}={value!r}" for name, value in sorted(vars(args).items()) if name != "config")
    print(f"[stand-in] server_args=ServerArgs({shown})", file=sys.stderr, flush=True)
    server = Server((args.host, args.port), make_handler(standin))
    signal.signal(signal.SIGTERM, lambda *_: drain_then_stop(standin, server))
    print(f"stand-in: serving {standin.served} on {args.host}:{args.port} (tp {args.tp_size}); "
          f"this is not SGLang", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
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
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


if __name__ == "__main__":
    sys.exit(main())
