"""What the sandbox benchmarks share: a fresh sandbox with the CRDs and an UltraServerGroup,
and the operator running as a process (restartable, its metrics and memory readable)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from goodput_operator.sandbox import cluster, hostnet, images

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of PID in MiB, from /proc."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text()
                  .splitlines() if ":" in line)
    return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds PID has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_of(executable: str) -> int | None:
    """The pid of the process whose command starts with EXECUTABLE (a path), if any."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().split(b"\0", 1)[0].decode(
                    errors="replace")
            except OSError:  # gone meanwhile
                continue
            if command == executable:
                return int(entry.name)
    return None


class OperatorProcess:
    """`goodput-operator` on the sandbox's kubeconfig, logging to LOG (appended)."""

    def __init__(self, box: cluster.Sandbox, log: Path, reports: bool = False) -> None:
        """REPORTS: serve the workers' report channel at the host's address (real nodes'
        pods reach it there); otherwise it is off."""
        self.box, self.log = box, log
        self.metrics_port, self.health_port = free_port(), free_port()
        self.report_args = ["--report-port", "0"]
        if reports:
            port = free_port()
            self.report_args = ["--report-port", str(port), "--report-url",
                                f"http://{hostnet.host_ip()}:{port}",
                                "--probe-image", images.WORKER_IMAGE]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "a") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "goodput_operator.operator.main",
                 "--health-port", str(self.health_port),
                 "--metrics-port", str(self.metrics_port), *self.report_args],
                env={**os.environ, "KUBECONFIG": str(self.box.kubeconfig)}, stdout=out,
                stderr=subprocess.STDOUT)

    def stop(self) -> float:
        """SIGTERM; the seconds the operator took to exit. One still there after 60 s is
        killed, and said so: a stop that hangs must not lose a run's figures."""
        started = time.monotonic()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                print("# the operator had not exited 60 s after SIGTERM: killed",
                      file=sys.stderr, flush=True)
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        return time.monotonic() - started

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz",
                                        timeout=5) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.HTTPError):
            return False

    def metrics(self) -> dict[str, float]:
        """Every goodput_ sample as {'name{labels}': value}."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=10) as response:
            text = response.read().decode()
        samples = {}
        for line in text.splitlines():
            if line.startswith("goodput_"):
                key, value = line.rsplit(" ", 1)
                samples[key] = float(value)
        return samples

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


@contextlib.contextmanager
def sandbox(name: str, fleet: str, group: dict[str, Any], namespaces: Sequence[str] = (),
            wait_seconds: float = 120, real_nodes: int = 0) -> Iterator[cluster.Sandbox]:
    """Sandbox NAME (recreated) with FLEET (its first REAL_NODES real), the CRDs, GROUP and
    NAMESPACES; deleted after."""
    box = cluster.Sandbox(name)
    if box.is_running():
        cluster.down(box)
    cluster.up(box, fleet, wait_seconds=wait_seconds, real_nodes=real_nodes)
    try:
        box.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        box.kubectl("wait", "--for", "condition=Established", "--timeout=60s",
                    "crd/trainingjobs.goodput.dev")
        for namespace in namespaces:
            box.kubectl("create", "namespace", namespace)
        box.kubectl("apply", "--server-side", "-f", "-", input_text=json.dumps(group))
        yield box
    finally:
        cluster.down(box)


@contextlib.contextmanager
def operator_sandbox(name: str, fleet: str, group: dict[str, Any],
                     namespaces: Sequence[str] = (), wait_seconds: float = 120,
                     real_nodes: int = 0) -> Iterator[cluster.Sandbox]:
    """`sandbox` with the operator running (logging to operator.log in its home), ready;
    with real nodes, their workers' reports reach it."""
    with sandbox(name, fleet, group, namespaces, wait_seconds, real_nodes) as box:
        operator = OperatorProcess(box, Path(box.home) / "operator.log",
                                   reports=real_nodes > 0)
        operator.start()
        try:
            wait_until(operator.ready, 120, "operator ready")
            yield box
        finally:
            operator.stop()


def wait_until(probe: Any, timeout: float, what: str, interval: float = 0.2) -> float:
    """Poll PROBE until truthy; the seconds it took. Raises after TIMEOUT."""
    started = time.monotonic()
    while not probe():
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"timed out after {timeout:.0f}s: {what}")
        time.sleep(interval)
    return time.monotonic() - started
