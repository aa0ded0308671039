"""A real Prometheus (Debian's package, `make prometheus`) on the host, scraping the jobs it
is given every second: what the autoscaling tests, the autoscaler peers' benchmark and
`goodput sandbox up --peers hpa,keda` read serving metrics from."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from goodput_operator.sandbox import procs


class Prometheus:
    """`prometheus` scraping SCRAPE's jobs every second, listening on ADDRESS:PORT (a free
    port when None); stop() and start() keep its data in WORKDIR."""

    def __init__(self, workdir: Path, scrape: list[dict[str, object]],
                 address: str = "127.0.0.1", port: int | None = None) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("prometheus is not installed: run `make prometheus` "
                               "(Debian's package)")
        self.binary = binary
        self.workdir = workdir
        self.port = port or procs.free_port()
        self.address = address  # where it listens: where the operator asks it
        self.url = f"http://{address}:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "prometheus.yml").write_text(json.dumps({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": scrape}))  # JSON is YAML

    @staticmethod
    def job(name: str, *targets: str) -> dict[str, object]:
        """A scrape job of static TARGETS (host:port)."""
        return {"job_name": name, "static_configs": [{"targets": list(targets)}]}

    def start(self, timeout: float = 60) -> None:
        log = (self.workdir / "prometheus.log").open("ab")
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={self.workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address={self.address}:{self.port}"],
            stdout=log, stderr=subprocess.STDOUT)
        procs.wait(self.ready, timeout, f"Prometheus ready (log {self.workdir}/prometheus.log)")

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.proc = None


# the classic text format, as vLLM serves its metrics (OpenMetrics would rewrite the `:`)
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


def serve_metrics(render: Callable[[], bytes], content_type: str = TEXT_FORMAT) -> int:
    """Serve RENDER's answer (metrics in CONTENT_TYPE's format) to every GET on 127.0.0.1,
    from a daemon thread; the port. What a serving pod's metrics endpoint is to Prometheus."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = render()
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return int(server.server_address[1])
