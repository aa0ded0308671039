"""A real S3-compatible server on the host: versitygw (built from its Go module, as the
other components) serving a directory as S3, for checkpoints on an object store
(`checkpoint.dir: s3://...`). Metadata goes to a sidecar folder, so the directory's
filesystem needs no extended attributes."""

from __future__ import annotations

import json
import secrets
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from goodput_operator.sandbox import build, procs
from goodput_operator.sandbox.versions import VERSITYGW_COMPONENT

if TYPE_CHECKING:
    from goodput_operator.sandbox.cluster import Sandbox


class ObjectStoreServer:
    """versitygw on ADDRESS:PORT (a free port when None) over WORKDIR/data, with one root
    key pair (ACCESS_KEY, SECRET_KEY): what a checkpoint Secret holds."""

    def __init__(self, workdir: Path, address: str = "127.0.0.1", port: int | None = None
                 ) -> None:
        self.workdir = workdir
        self.address = address
        self.port = port or procs.free_port()
        self.url = f"http://{address}:{self.port}"
        self.access_key = "goodput"
        self.secret_key = secrets.token_hex(16)
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        """versitygw's command line (built first, when it is not yet)."""
        binary = build.binary_path(VERSITYGW_COMPONENT, "versitygw")
        if not binary.exists():
            build.build(VERSITYGW_COMPONENT)
        data, sidecar = self.workdir / "data", self.workdir / "meta"
        data.mkdir(parents=True, exist_ok=True)
        sidecar.mkdir(parents=True, exist_ok=True)
        return [str(binary), "--access", self.access_key, "--secret", self.secret_key,
                "--port", f"{self.address}:{self.port}", "--quiet",
                "posix", "--sidecar", str(sidecar), str(data)]

    def start(self, timeout: float = 60) -> None:
        """Run it as this process's child (a test session's), until stop()."""
        command = self.command()
        with (self.workdir / "versitygw.log").open("ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        procs.wait(self.ready, timeout,
                   f"versitygw ready (log {self.workdir}/versitygw.log)")

    def ready(self) -> bool:
        """Answering S3 requests (an unsigned one is refused: it answers)."""
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"versitygw exited ({self.proc.returncode}): see "
                               f"{self.workdir}/versitygw.log")
        try:
            with urllib.request.urlopen(self.url, timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    def env(self) -> dict[str, str]:
        """The variables a client needs (the keys a checkpoint Secret holds)."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_ENDPOINT_URL": self.url, "AWS_REGION": "us-east-1"}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def start_for(sandbox: Sandbox, timeout: float = 60) -> dict[str, str]:
    """`goodput sandbox up --object-store`: versitygw beside SANDBOX, in a session of its
    own (`sandbox down` stops it); the client variables, also kept in objectstore/env.json."""
    from goodput_operator.sandbox import hostnet

    home = sandbox.home / "objectstore"
    home.mkdir(parents=True, exist_ok=True)
    server = ObjectStoreServer(home, hostnet.host_ip())  # where pods on real nodes reach it
    pidfile = home / "versitygw.pid"
    procs.kill_pidfile(pidfile)
    procs.spawn(server.command(), home / "versitygw.log", pidfile)
    procs.wait(lambda: server.ready() or not procs.alive(pidfile), timeout,
               f"versitygw ready (log {home}/versitygw.log)")
    if not procs.alive(pidfile):
        raise procs.ProcessError(f"versitygw exited: see {home}/versitygw.log")
    (home / "env.json").write_text(json.dumps(server.env()))
    return server.env()


def stop_for(sandbox: Sandbox) -> None:
    procs.kill_pidfile(sandbox.home / "objectstore" / "versitygw.pid")
