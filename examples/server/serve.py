#!/usr/bin/env python3
"""A toy model server for the sandbox's real nodes: a deterministic token generator behind
an OpenAI-style HTTP API, exporting vLLM's metric names, so that the autoscaler is driven
by real serving processes (tests/e2e/test_real_nodes.py) without a model or an accelerator.

Each request generates `max_tokens` tokens at --tokens-per-second; --slots requests run at
once and the others wait in arrival order, as a continuous-batching engine's queue does.
The text is a hash chain of the prompt: the same prompt always gives the same answer.

    POST /v1/completions {"prompt": "...", "max_tokens": 16}
    GET  /metrics   vllm:num_requests_waiting, vllm:num_requests_running,
                    vllm:request_success_total, vllm:generation_tokens_total,
                    vllm:kv_cache_usage_perc (running / slots)
    GET  /health
Standard library only (the worker image has no pip packages for it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WORDS = ("the", "model", "serves", "tokens", "from", "a", "queue", "of", "requests", "at",
         "steady", "rate", "while", "replicas", "scale", "out", "and", "in")
MAX_TOKENS = 4096


class Engine:
    """SLOTS requests generate at once; the rest wait their turn."""

    def __init__(self, slots: int, tokens_per_second: float) -> None:
        self.slots = slots
        self.free = threading.Semaphore(slots)
        self.tokens_per_second = tokens_per_second
        self.lock = threading.Lock()
        self.waiting = self.running = self.finished = self.generated = 0

    def generate(self, prompt: str, max_tokens: int) -> str:
        with self.lock:
            self.waiting += 1
        self.free.acquire()
        with self.lock:
            self.waiting -= 1
            self.running += 1
        try:
            digest = hashlib.sha256(prompt.encode()).digest()
            words = []
            for _ in range(max_tokens):
                digest = hashlib.sha256(digest).digest()
                words.append(WORDS[digest[0] % len(WORDS)])
            time.sleep(max_tokens / self.tokens_per_second)
            return " ".join(words)
        finally:
            with self.lock:
                self.running -= 1
                self.finished += 1
                self.generated += max_tokens
            self.free.release()

    def metrics(self) -> str:
        with self.lock:
            values = [("vllm:num_requests_waiting", "gauge", self.waiting),
                      ("vllm:num_requests_running", "gauge", self.running),
                      ("vllm:request_success_total", "counter", self.finished),
                      ("vllm:generation_tokens_total", "counter", self.generated),
                      ("vllm:kv_cache_usage_perc", "gauge", self.running / self.slots)]
        return "".join(f"# TYPE {name} {kind}\n{name} {value}\n" for name, kind, value in values)


def handler(engine: Engine, model: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/metrics":
                self._send(200, engine.metrics().encode(), "text/plain; version=0.0.4")
            elif self.path == "/health":
                self._send(200, b"ok\n", "text/plain")
            else:
                self._send(404, b'{"error": "not found"}')

        def do_POST(self) -> None:
            if self.path != "/v1/completions":
                self._send(404, b'{"error": "not found"}')
                return
            try:
                length = min(int(self.headers.get("Content-Length") or 0), 1 << 20)
                request = json.loads(self.rfile.read(length) or b"{}")
                prompt = str(request.get("prompt", ""))
                tokens = max(1, min(int(request.get("max_tokens", 16)), MAX_TOKENS))
            except (ValueError, TypeError) as err:
                self._send(400, json.dumps({"error": str(err)}).encode())
                return
            text = engine.generate(prompt, tokens)
            self._send(200, json.dumps({
                "object": "text_completion", "model": model,
                "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
                "usage": {"completion_tokens": tokens}}).encode())

        def log_message(self, *_: object) -> None:
            pass

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("GOODPUT_PORT", 8000)))
    parser.add_argument("--slots", type=int, default=2, help="requests generated at once")
    parser.add_argument("--tokens-per-second", type=float, default=32.0,
                        help="each request's generation speed")
    args = parser.parse_args()
    model = os.environ.get("GOODPUT_MODEL_NAME", "toy")
    engine = Engine(args.slots, args.tokens_per_second)
    server = ThreadingHTTPServer(("0.0.0.0", args.port), handler(engine, model))
    server.daemon_threads = True
    print(f"serving {model} on :{args.port}: {args.slots} slots, "
          f"{args.tokens_per_second:g} tokens/s each", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
