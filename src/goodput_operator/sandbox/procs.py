"""Processes the sandbox starts on the host (containerd, kubelets, CoreDNS, kube-proxy):
spawned in their own session with a pid file, stopped by it, waited for by polling."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


class ProcessError(RuntimeError):
    """A process the sandbox waited for did not come up; the message names its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def spawn(command: list[str], log: Path, pidfile: Path, env: dict[str, str] | None = None
          ) -> None:
    """COMMAND in a session of its own, logging to LOG, with ENV added to ours."""
    with log.open("ab") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, **env} if env else None)
    pidfile.write_text(str(proc.pid))


def alive(pidfile: Path) -> bool:
    if not pidfile.is_file():
        return False
    pid = int(pidfile.read_text())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.is_file() and stat.read_text().split()[2] != "Z"


def kill_pidfile(pidfile: Path, sig: signal.Signals = signal.SIGTERM, timeout: float = 15) -> None:
    if not alive(pidfile):
        pidfile.unlink(missing_ok=True)
        return
    pid = int(pidfile.read_text())
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while alive(pidfile) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    if alive(pidfile):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    pidfile.unlink(missing_ok=True)


def wait(probe: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise ProcessError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def start_containerd(config: Path, socket: Path, log: Path, pidfile: Path) -> None:
    """containerd with CONFIG, returned once it answers on SOCKET (a node's, the seed's)."""
    spawn(["containerd", "--config", str(config)], log, pidfile)
    wait(lambda: socket.exists() and subprocess.run(
        ["ctr", "--address", str(socket), "version"], capture_output=True,
        check=False).returncode == 0, 30, f"containerd (log {log})")
