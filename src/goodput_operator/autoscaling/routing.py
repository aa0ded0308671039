"""How a multi-region endpoint's requests are shared between its regions: one weight per
region for the proxy that carries them (HAProxy, programmed by controllers.routing).

The data path is the proxy's. It already takes a dead region out within its health
check's few seconds, retries a refused connection on another region, and measures each
region's response time and queue; this decides the weights it cannot know, from what
the manager sees, every pass:

- a region's share is its healthy capacity (the ready replicas its status reports),
  discounted for latency: per replica, the fastest region's response time over its own,
  both plus LATENCY_SLACK_MS (a region at 50 ms beside one at 10 ms gets a third), never
  less than a quarter (far regions keep some traffic, so their latency stays measured);
- a region with no ready replica, whose entry the proxy's health check finds down, or
  that is saturated (requests wait in the proxy's queue for it while another region has
  none waiting) is drained at once: weight 0;
- a drained region comes back only once it has been healthy for `returnSeconds`, then
  in four steps of a quarter of its share, `returnSeconds / 4` apart (hysteresis: a region
  that flaps never takes a full share, and traffic shifted away stays away long enough
  to be worth the move);
- when every region would be drained, those with ready replicas and an entry the proxy
  finds up keep their plain share: some traffic served beats none.

What is remembered from pass to pass is each region's state and since when, in the
endpoint's status (status.regions[].traffic, trafficSince): level-based, like the rest.
"""

from __future__ import annotations

import csv
import functools
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from goodput_operator import times

MAX_WEIGHT = 256  # HAProxy's largest server weight
MIN_LATENCY_FACTOR = 0.25  # the least a slow region's share per replica is discounted to
LATENCY_SLACK_MS = 10.0  # added to every response time before comparing: a few
# milliseconds apart is noise (HAProxy measures whole milliseconds), not a slower region
RETURN_STEPS = 4  # a drained region comes back in quarters
Traffic = Literal["Serving", "Drained", "Returning"]


@dataclass(frozen=True)
class Entry:
    """One region's entry as the proxy reports it (a server of the endpoint's backend)."""

    up: bool  # its health check passes (or it has none)
    weight: int  # the weight the proxy uses now
    queued: int = 0  # requests waiting in the proxy for it (its maxconn reached)
    sessions: int = 0  # requests in flight to it
    response_ms: float = 0.0  # average response time of its last 1024 requests; 0: none yet


@dataclass(frozen=True)
class ProxyView:
    """The proxy as the operator last read it: every backend's servers, or why it could
    not be read."""

    entries: Mapping[tuple[str, str], Entry]  # (backend, server) -> entry
    error: str = ""
    at: float = 0.0  # when it was read (epoch seconds)

    def servers(self, backend: str) -> Mapping[str, Entry]:
        """BACKEND's servers by name: indexed once per read, so that each endpoint's pass
        costs its own backend, not every backend of the proxy."""
        return self._by_backend.get(backend, {})

    @functools.cached_property
    def _by_backend(self) -> dict[str, dict[str, Entry]]:
        index: dict[str, dict[str, Entry]] = {}
        for (backend, server), entry in self.entries.items():
            index.setdefault(backend, {})[server] = entry
        return index


def backend_name(namespace: str, name: str) -> str:
    """The proxy backend that carries an endpoint's requests: the admin declares it
    (HAProxy's names allow letters, digits, '-', '_', '.', ':'; a namespace has no '.')."""
    return f"{namespace}.{name}"


@dataclass(frozen=True)
class Signal:
    """What one region looks like this pass."""

    name: str
    ready_replicas: int
    entry: Entry | None  # None: the proxy's backend has no server of this name


@dataclass(frozen=True)
class Route:
    """One region's part of the traffic, and the state the next pass starts from."""

    name: str
    weight: int
    traffic: Traffic
    since: float  # in this state since (epoch seconds)
    reason: str  # why, in a person's words


def route(signals: Sequence[Signal], previous: Mapping[str, tuple[Traffic, float]],
          now: float, return_seconds: float) -> list[Route]:
    """Each region's weight and state (the module's rules); PREVIOUS: each region's state
    and since when, as the last pass left them."""
    shares = _shares(signals)
    routes = [_next(s, _unhealthy(s, signals), previous.get(s.name), now, return_seconds)
              for s in signals]
    taken = {r.name: shares[r.name] * _fraction(r, now, return_seconds) for r in routes}
    if not any(taken.values()):  # everything drained: serve from what can serve
        taken = {s.name: shares[s.name] if _can_serve(s) else 0.0 for s in signals}
        routes = [replace(r, reason=f"{r.reason}; served anyway: no region is healthier")
                  if taken[r.name] else r for r in routes]
    return _scaled(routes, taken)


def _can_serve(signal: Signal) -> bool:
    return signal.ready_replicas > 0 and signal.entry is not None and signal.entry.up


def _unhealthy(signal: Signal, signals: Sequence[Signal]) -> str:
    """Why SIGNAL's region should take no traffic now, or ""."""
    if signal.ready_replicas <= 0:
        return "no ready replica"
    entry = signal.entry
    if entry is None:
        return "the proxy has no server of this name in the endpoint's backend"
    if not entry.up:
        return "the proxy's health check finds its entry down"
    if entry.queued > 0 and any(o.entry is not None and o.entry.up and o.entry.queued == 0
                                and o.ready_replicas > 0 for o in signals if o is not signal):
        return f"saturated: {entry.queued} request(s) queued in the proxy for it"
    return ""


def _shares(signals: Sequence[Signal]) -> dict[str, float]:
    """Each region's share before health: ready replicas, discounted for latency."""
    measured = [s.entry.response_ms for s in signals
                if s.entry is not None and s.entry.response_ms > 0]
    fastest = min(measured, default=0.0)
    shares = {}
    for signal in signals:
        factor = 1.0
        if fastest and signal.entry is not None and signal.entry.response_ms > 0:
            factor = max(MIN_LATENCY_FACTOR, (fastest + LATENCY_SLACK_MS)
                         / (signal.entry.response_ms + LATENCY_SLACK_MS))
        shares[signal.name] = max(0, signal.ready_replicas) * factor
    return shares


def _next(signal: Signal, unhealthy: str, last: tuple[Traffic, float] | None, now: float,
          return_seconds: float) -> Route:
    """SIGNAL's state this pass, from its last one (its weight is set by _scaled)."""
    state, since = last if last is not None else ("Serving", now)
    if unhealthy:
        return Route(signal.name, 0, "Drained", since if state == "Drained" else now,
                     unhealthy)
    if state == "Drained":
        state, since = "Returning", now
    if state == "Serving" or now - since >= 2 * return_seconds:
        return Route(signal.name, 0, "Serving", since if state == "Serving" else now,
                     "serving")
    fraction = _fraction(Route(signal.name, 0, state, since, ""), now, return_seconds)
    return Route(signal.name, 0, "Returning", since,
                 f"healthy again: at {fraction:.0%} of its share" if fraction else
                 f"healthy again: held back until {times.millis(since + return_seconds)}")


def _fraction(route_: Route, now: float, return_seconds: float) -> float:
    """How much of its share a region in ROUTE's state takes now."""
    if route_.traffic == "Serving":
        return 1.0
    if route_.traffic == "Drained":
        return 0.0
    held = now - route_.since - return_seconds
    if held < 0:
        return 0.0
    step = return_seconds / RETURN_STEPS
    return min(1.0, (math.floor(held / step) + 1) / RETURN_STEPS) if step else 1.0


def next_step(since: float, now: float, return_seconds: float) -> float:
    """When a region returning since SINCE next takes more of its share (or is back)."""
    step = return_seconds / RETURN_STEPS
    start = since + return_seconds
    if now < start:
        return start
    return min(since + 2 * return_seconds, start + (math.floor((now - start) / step) + 1) * step)


def _scaled(routes: Sequence[Route], shares: Mapping[str, float]) -> list[Route]:
    """ROUTES with weights: the largest share MAX_WEIGHT, the others in proportion, at
    least 1 where the share is above 0 (weight 0 is the proxy's 'no new requests')."""
    top = max(shares.values(), default=0.0)
    return [Route(r.name, 0 if not shares[r.name] or not top else
                  max(1, round(MAX_WEIGHT * shares[r.name] / top)), r.traffic, r.since,
                  r.reason) for r in routes]


def parse_stats(text: str) -> dict[tuple[str, str], Entry]:
    """HAProxy's `show stat` (CSV) as (backend, server) -> Entry; frontends, backends'
    own rows and unknown columns are left out."""
    lines = text.lstrip("# ").splitlines()
    found: dict[tuple[str, str], Entry] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        server = row.get("svname") or ""
        if server in ("", "FRONTEND", "BACKEND") or row.get("type") != "2":
            continue
        status = row.get("status") or ""
        found[(row.get("pxname") or "", server)] = Entry(
            up=status.startswith("UP") or status == "no check",
            weight=_int(row.get("uweight") or row.get("weight")),
            queued=_int(row.get("qcur")), sessions=_int(row.get("scur")),
            response_ms=float(_int(row.get("rtime"))))
    return found


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0
