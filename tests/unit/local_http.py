"""A local HTTP server for the tests of our HTTP clients (the SDK, the Prometheus query):
a handler class answers, a context gives its URL."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from typing import Any, ClassVar


class Handler(BaseHTTPRequestHandler):
    """Answers JSON, and keeps quiet about it."""

    def answer(self, code: int, body: Any) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body if isinstance(body, bytes) else json.dumps(body).encode())

    def log_message(self, *_: object) -> None:
        pass


class AskingEvery(Handler):
    """An operator that asks for every `every`-th step; records (rank, step) of each step
    report as it arrives (subclasses set both)."""

    every: ClassVar[int] = 1
    sent: ClassVar[list[tuple[int, int]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.sent.append((body["rank"], body["step"]))
        self.answer(200, {"accepted": True, "every": self.every})


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], threaded: bool = False) -> Iterator[str]:
    """HANDLER serving on a free local port, for the block: its base URL. THREADED: each
    connection on a thread of its own (clients with requests in flight at once)."""
    httpd = (ThreadingHTTPServer if threaded else HTTPServer)(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
