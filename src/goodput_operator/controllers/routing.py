"""The proxy that carries multi-region endpoints' requests, as the operator reads and
programs it: HAProxy's runtime API (its stats socket at level admin, a Unix socket or
TCP), one command per connection, no reload.

The operator never sits in the data path. A task beside the loop reads `show stat` every
READ_SECONDS into State.proxy (the decisions' ProxyView) and wakes the loop when a
region's health in the proxy changes; the endpoints' pass (decide.traffic) works out the
weights, and after its status write the controller sets those that differ with
`set server BACKEND/SERVER weight N`. Why HAProxy: it is served here (Debian's 2.6), its
runtime API changes weights without a reload, and its health checks, retries and
redispatch take a dead region out faster than any control loop could (Envoy, which most
Gateway API implementations use, is not served here; docs/multicluster.md).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from goodput_operator.autoscaling.routing import Entry, ProxyView, parse_stats

if TYPE_CHECKING:
    from goodput_operator.controllers.state import State

log = logging.getLogger("goodput.routing")
READ_SECONDS = 1.0  # how often the proxy's stats are read
COMMAND_SECONDS = 2.0  # one runtime API command's deadline


class ProxyError(Exception):
    """The proxy could not be reached, or refused a command (its words)."""


@dataclass(frozen=True)
class RuntimeApi:
    """HAProxy's runtime API at ADDRESS: `unix:/path`, `/path`, or `HOST:PORT`."""

    address: str

    def command(self, line: str) -> str:
        try:
            with self._connect() as conn:
                conn.settimeout(COMMAND_SECONDS)
                conn.sendall(line.encode() + b"\n")
                chunks = []
                while chunk := conn.recv(65536):
                    chunks.append(chunk)
        except OSError as err:
            raise ProxyError(f"{self.address}: {err}") from err
        return b"".join(chunks).decode(errors="replace")

    def _connect(self) -> socket.socket:
        if self.address.startswith(("unix:", "/")):
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.settimeout(COMMAND_SECONDS)
            conn.connect(self.address.removeprefix("unix:"))
            return conn
        host, _, port = self.address.rpartition(":")
        return socket.create_connection((host or "127.0.0.1", int(port)), COMMAND_SECONDS)

    def entries(self) -> dict[tuple[str, str], Entry]:
        text = self.command("show stat")
        if not text.startswith("#"):
            raise ProxyError(f"{self.address}: show stat answered {text.strip()[:200]!r}")
        return parse_stats(text)

    def set_weight(self, backend: str, server: str, weight: int) -> None:
        answer = self.command(f"set server {backend}/{server} weight {weight}").strip()
        if answer:  # HAProxy answers nothing when it obeys
            raise ProxyError(f"set server {backend}/{server} weight {weight}: {answer}")


def read(api: RuntimeApi) -> ProxyView:
    """The proxy now, or why it cannot be read (said on the routed endpoints)."""
    try:
        return ProxyView(api.entries(), at=time.time())
    except ProxyError as err:
        return ProxyView({}, error=str(err), at=time.time())


def health(view: ProxyView | None) -> object:
    """What in VIEW should wake the loop when it changes: which entries are up, which
    have requests waiting, and whether the proxy answers."""
    if view is None:
        return None
    return view.error, frozenset((key, e.up, e.queued > 0) for key, e in view.entries.items())


async def set_weights(api: RuntimeApi, weights: list[tuple[str, str, int]]) -> list[str]:
    """Set each (backend, server, weight); the errors, for the endpoint's events (the next
    pass tries again: the weights are recomputed and compared every pass)."""
    failed = []
    for backend, server, weight in weights:
        try:
            await asyncio.to_thread(api.set_weight, backend, server, weight)
            log.info("proxy %s: %s/%s weight %d", api.address, backend, server, weight)
        except ProxyError as err:
            failed.append(str(err))
    return failed


async def run_router(state: State, api: RuntimeApi, period: float = READ_SECONDS) -> None:
    """Every PERIOD, read the proxy into STATE.proxy; wake the loop when a region's health
    there changed (the weights follow within the pass; the resync catches the rest)."""
    while True:
        view = await asyncio.to_thread(read, api)
        if view.error and (state.proxy is None or not state.proxy.error):
            log.warning("cannot read the proxy: %s", view.error)
        changed = health(view) != health(state.proxy)
        state.proxy = view
        if changed:
            state.wake.set()
        await asyncio.sleep(period)
