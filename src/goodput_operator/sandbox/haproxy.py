"""A real HAProxy (Debian's 2.6, `make haproxy`) on the host: the proxy multi-region
endpoints' requests go through in the routing e2e test and `bench.routing`, configured
as an admin would (docs/multicluster.md, "Routing requests across regions").

Its configuration is the admin's part: one backend per routed endpoint, named
`<namespace>.<name>`, with a server per region named after it at that region's entry,
health-checked every half second; a connection refused or an answer 503 is retried once
on another region (`retry-on`, `option redispatch`). The operator only sets the servers'
weights through the runtime API (controllers.routing).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from goodput_operator.autoscaling.routing import backend_name
from goodput_operator.controllers.routing import ProxyError, RuntimeApi
from goodput_operator.sandbox import procs

CHECK = "check inter 500ms fall 2 rise 2"  # down within about a second, up as fast


def config(port: int, socket: Path, backends: Mapping[str, Mapping[str, str]],
           address: str = "127.0.0.1") -> str:
    """haproxy.cfg: a frontend on ADDRESS:PORT sending each request to the backend its
    Host names (`<name>.<namespace>`, else the first backend), and BACKENDS (backend ->
    region -> its entry, host:port)."""
    lines = ["global", f"  stats socket {socket} level admin", "  maxconn 4000",
             "defaults", "  mode http", "  timeout connect 1s", "  timeout client 30s",
             "  timeout server 30s", "  timeout queue 5s", "  retries 1",
             "  option redispatch 1", "  retry-on conn-failure empty-response 503",
             "frontend requests", f"  bind {address}:{port}"]
    for backend in backends:
        namespace, _, name = backend.partition(".")
        lines.append(f"  use_backend {backend} if {{ hdr(host),field(1,:) -i "
                     f"{name}.{namespace} }}")
    lines.append(f"  default_backend {next(iter(backends))}")
    for backend, regions in backends.items():
        lines += [f"backend {backend}", "  balance roundrobin",
                  "  option httpchk GET /healthz",
                  *(f"  server {region} {entry} {CHECK} weight 1"
                    for region, entry in regions.items())]
    return "\n".join(lines) + "\n"


class HAProxy:
    """`haproxy` in WORKDIR, listening on PORT (a free one when None), with BACKENDS by
    endpoint (namespace, name) -> region -> entry."""

    def __init__(self, workdir: Path, backends: Mapping[tuple[str, str], Mapping[str, str]],
                 port: int | None = None) -> None:
        binary = shutil.which("haproxy")
        if binary is None:
            raise RuntimeError("haproxy is not installed: run `make haproxy` (Debian's "
                               "package)")
        self.binary, self.workdir = binary, workdir
        self.port = port or procs.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.socket = workdir / "admin.sock"
        self.api = RuntimeApi(f"unix:{self.socket}")
        self.proc: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "haproxy.cfg").write_text(config(self.port, self.socket, {
            backend_name(*key): regions for key, regions in backends.items()}))

    def start(self, timeout: float = 30) -> None:
        cfg = self.workdir / "haproxy.cfg"
        checked = subprocess.run([self.binary, "-c", "-q", "-f", str(cfg)],
                                 capture_output=True, text=True, check=False)
        if checked.returncode != 0:
            raise RuntimeError(f"haproxy refuses {cfg}: {checked.stdout}{checked.stderr}")
        log = (self.workdir / "haproxy.log").open("ab")
        self.proc = subprocess.Popen([self.binary, "-db", "-f", str(cfg)], stdout=log,
                                     stderr=subprocess.STDOUT)
        procs.wait(self.ready, timeout, f"HAProxy's runtime API ({self.workdir}/haproxy.log)")

    def ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"haproxy exited with {self.proc.returncode}: "
                               f"{(self.workdir / 'haproxy.log').read_text()[-2000:]}")
        try:
            self.api.entries()
            return True
        except ProxyError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.proc = None
