"""A region's serving entry, stood in by a process on the host: what the routing e2e test
and `bench.routing` send requests to through HAProxy. The sandbox's regions are KWOK
nodes, whose serving pods run nothing, so each region's entry (in a real fleet: its
Gateway or Service in front of the model servers) is this: it answers every request after
DELAY milliseconds (the region's added latency) with its name, and /healthz at once.

    python -m goodput_operator.sandbox.entry --name region-a --port 18081 --delay-ms 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from aiohttp import web

from goodput_operator.sandbox import procs


def app(name: str, delay_ms: float) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def serve(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.sleep(delay_ms / 1000)
        return web.Response(text=json.dumps({"region": name}),
                            content_type="application/json", headers={"X-Region": name})

    application = web.Application()
    application.router.add_get("/healthz", healthz)
    application.router.add_route("*", "/{tail:.*}", serve)
    return application


class Entry:
    """One region's entry as a child process: start(), stop() (the region fails: its
    connections are refused), start() again (it heals)."""

    def __init__(self, name: str, delay_ms: float, log: Path, port: int | None = None):
        self.name, self.delay_ms, self.log = name, delay_ms, log
        self.port = port or procs.free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "goodput_operator.sandbox.entry", "--name", self.name,
                 "--port", str(self.port), "--delay-ms", str(self.delay_ms)],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ})
        procs.wait(self.ready, timeout, f"region entry {self.name} on {self.address}")

    def ready(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://{self.address}/healthz", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    args = parser.parse_args()
    web.run_app(app(args.name, args.delay_ms), host="127.0.0.1", port=args.port,
                print=None, access_log=None)


if __name__ == "__main__":
    main()
